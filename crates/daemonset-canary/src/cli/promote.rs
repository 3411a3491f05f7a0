//! `daemonset-canary promote NAME`: ends the pause step a Pods-driver rollout is held in;
//! `--full` skips every remaining step and pause.
//!
//! The verb marks the CanaryDaemonSet with the annotation `canary.daemonset.dev/promote` (a
//! new value each time: the time it was asked); the controller acts on a mark once and records
//! it in `status.promotion`. An annotation, not a spec field: a GitOps sync neither undoes it nor
//! shows it as drift, and it bumps no generation. Refused, with the reason, when the rollout is
//! not paused, so a promote typed a moment too late does not skip the next step instead (the
//! controller, too, ends only a pause step with it). `--full` marks `full@TIME`: the rollout
//! goes straight to its last nodes step, which still keeps its unavailability budget; refused
//! when no rollout is under way. The refusals are the verb table's ([`Verb`]).

use super::object::ObjectArgs;
use super::verb::find;
use anyhow::bail;
use canary_kube_adapter::crd::{FULL_PROMOTION_PREFIX, PROMOTE_ANNOTATION};
use canary_state_machine::Verb;
use k8s_openapi::jiff::Timestamp;

/// Arguments of `promote`.
#[derive(Debug, clap::Args)]
pub struct PromoteArgs {
    #[command(flatten)]
    object: ObjectArgs,
    /// Skip every remaining step and pause: update every node now, at the last nodes step's
    /// budget (never more pods unavailable at once than it allows).
    #[arg(long)]
    full: bool,
}

/// Marks the CanaryDaemonSet and prints one line saying what that ends.
pub async fn run(args: PromoteArgs) -> anyhow::Result<()> {
    let target = find(&args.object).await?;
    let (cds, which) = (&target.cds, &target.which);
    let refusal = if args.full {
        Verb::full_promotion_refusal(&target.context())
    } else {
        Verb::Promote.refusal(&target.context())
    };
    if let Some(why) = refusal {
        bail!("{which}: promote refused: {why}");
    }
    let status = cds.status.clone().unwrap_or_default();
    let step = match (status.current_step_index, status.step_count) {
        (Some(index), Some(count)) => format!("step {} of {count}", index + 1),
        _ => "the current step".to_owned(),
    };
    let stamp = Timestamp::now().to_string();
    let mark = if args.full {
        format!("{FULL_PROMOTION_PREFIX}{stamp}")
    } else {
        stamp
    };
    target.mark(PROMOTE_ANNOTATION, Some(&mark)).await?;
    if args.full {
        println!(
            "{which} fully promoted from {step}: every remaining step and pause is skipped, the last nodes step updates every node at its budget"
        );
    } else {
        println!("{which} promoted: {step} (a pause) ends, the rollout goes on");
    }
    Ok(())
}
