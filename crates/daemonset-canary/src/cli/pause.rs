//! `daemonset-canary pause NAME` and `resume NAME`: hold a Pods-driver rollout on request, and
//! let it go on.
//!
//! `pause` sets the annotation `canary.daemonset.dev/paused=true`; while it is set the
//! controller deletes no pod and writes no template, the phase shows `paused` and the progress
//! deadline does not run. `resume` removes it. The controller announces each once (events
//! `Paused` and `Resumed`) and records the hold in `status.held`. Each verb is refused, with
//! the reason, when it would change nothing (pausing a held rollout, resuming one not held).
//!
//! The MaxUnavailable driver is refused: there the DaemonSet controller, not this one,
//! replaces the pods under the written `maxUnavailable`, and holding it would mean rewriting the
//! DaemonSet's update strategy, which this verb does not do (docs/operations.md).

use super::status::ObjectArgs;
use super::verb::{Target, annotate, pods_driver_target};
use anyhow::bail;
use canary_kube_adapter::crd::{PAUSE_ANNOTATION, hold_requested};

/// Arguments of `pause` and `resume`.
#[derive(Debug, clap::Args)]
pub struct HoldArgs {
    #[command(flatten)]
    object: ObjectArgs,
}

/// `pause`: marks the CanaryDaemonSet held and prints one line saying so.
pub async fn pause(args: HoldArgs) -> anyhow::Result<()> {
    let Target {
        connection,
        cds,
        name,
        namespace,
        which,
    } = pods_driver_target(&args.object, "pause holds the pod deletions").await?;
    if hold_requested(&cds) {
        bail!(
            "{which} is already paused on request: resume it with daemonset-canary resume {name} -n {namespace}"
        );
    }
    let phase = cds
        .status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_else(|| "pending".to_owned());
    annotate(
        &connection,
        &namespace,
        &name,
        PAUSE_ANNOTATION,
        Some("true"),
    )
    .await?;
    println!(
        "{which} paused (was {phase}): no pod is deleted and the template is not written until resume"
    );
    Ok(())
}

/// `resume`: withdraws the hold and prints one line saying so.
pub async fn resume(args: HoldArgs) -> anyhow::Result<()> {
    let Target {
        connection,
        cds,
        name,
        namespace,
        which,
    } = pods_driver_target(&args.object, "resume ends a hold of the pod deletions").await?;
    if !hold_requested(&cds) {
        bail!(
            "{which} is not paused on request: nothing to resume (a pause step ends with daemonset-canary promote)"
        );
    }
    annotate(&connection, &namespace, &name, PAUSE_ANNOTATION, None).await?;
    println!("{which} resumed: the rollout goes on from where it was held");
    Ok(())
}
