//! `daemonset-canary pause NAME` and `resume NAME`: hold a rollout on request, and let it go on.
//!
//! `pause` sets the annotation `canary.daemonset.dev/paused=true`; `resume` removes it. While it
//! is set no pod is replaced and nothing is written but the hold itself: the Pods driver deletes
//! no pod and writes no template; the MaxUnavailable driver puts a rollout under way on
//! `updateStrategy: OnDelete` (one write, so that the DaemonSet controller replaces no pod) and
//! back on `RollingUpdate` at the resume. The phase shows `paused` and the progress deadline does
//! not run. The controller announces each once (events `Paused` and `Resumed`) and records the
//! hold in `status.held`. Each verb is refused, with the verb table's reason, when it would
//! change nothing (pausing a held rollout, resuming one not held).

use super::verb::{TargetArgs, find};
use canary_kube_adapter::crd::PAUSE_ANNOTATION;
use canary_state_machine::{Driver, Phase, Verb};

/// `pause`: marks the CanaryDaemonSet held and prints one line saying so.
pub async fn pause(args: TargetArgs) -> anyhow::Result<()> {
    let target = find(&args.object).await?;
    target.check(Verb::Pause)?;
    let (cds, which) = (&target.cds, &target.which);
    let phase = Phase::name_or_pending(cds.status.as_ref().and_then(|s| s.phase));
    target.mark(PAUSE_ANNOTATION, Some("true")).await?;
    let what = match cds.spec.strategy.driver {
        Driver::Pods => "no pod is deleted and the template is not written",
        Driver::MaxUnavailable => {
            "no pod is replaced (a rollout under way goes to updateStrategy OnDelete) and nothing else is written"
        }
    };
    println!("{which} paused (was {phase}): {what} until resume");
    Ok(())
}

/// `resume`: withdraws the hold and prints one line saying so.
pub async fn resume(args: TargetArgs) -> anyhow::Result<()> {
    let target = find(&args.object).await?;
    target.check(Verb::Resume)?;
    target.mark(PAUSE_ANNOTATION, None).await?;
    println!(
        "{} resumed: the rollout goes on from where it was held",
        target.which
    );
    Ok(())
}
