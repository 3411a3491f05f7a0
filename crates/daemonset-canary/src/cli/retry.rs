//! `daemonset-canary retry NAME`: starts a failed rollout again from its first step, toward
//! the same revision, with no template change. Both drivers: the Pods driver walks its steps
//! again from the first; the MaxUnavailable driver forgets the failure and supervises the
//! DaemonSet controller's rollout as from its start (canary, then the fast maxUnavailable).
//!
//! The verb marks the CanaryDaemonSet with the annotation `canary.daemonset.dev/retry` (a new
//! value each time: the time it was asked); the controller acts on a mark once, records it in
//! `status.retry` and announces it (`Retried`). Refused, with the reason, unless the rollout is
//! `failed`: a retry typed while a rollout still runs would otherwise wait for a later failure.
//! A pod that still crash-loops fails the retried rollout again at once; fix the cause first
//! (an image pull secret, a node problem) or roll out another version.

use super::verb::{TargetArgs, find};
use canary_kube_adapter::crd::RETRY_ANNOTATION;
use canary_state_machine::Verb;
use k8s_openapi::jiff::Timestamp;

/// Marks the CanaryDaemonSet and prints one line saying what starts again.
pub async fn run(args: TargetArgs) -> anyhow::Result<()> {
    let target = find(&args.object).await?;
    target.check(Verb::Retry)?;
    let (cds, which) = (&target.cds, &target.which);
    let status = cds.status.clone().unwrap_or_default();
    let reason = status.reason.map_or("unknown reason", |r| r.as_str());
    let version = status.target_version.as_deref().unwrap_or("the target");
    let mark = Timestamp::now().to_string();
    target.mark(RETRY_ANNOTATION, Some(&mark)).await?;
    println!(
        "{which} retried: the rollout of {version} (failed: {reason}) starts again from its first step"
    );
    Ok(())
}
