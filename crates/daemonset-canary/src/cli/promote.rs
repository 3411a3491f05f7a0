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
//! when no rollout is under way.

use super::status::ObjectArgs;
use super::verb::pods_driver_target;
use anyhow::bail;
use canary_kube_adapter::crd::{FULL_PROMOTION_PREFIX, PROMOTE_ANNOTATION, hold_requested};
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

/// The phases in which a full promotion has steps to skip.
const FULL_PROMOTION_PHASES: [&str; 5] =
    ["started", "canary", "increasing", "paused", "rollingBack"];

/// Marks the CanaryDaemonSet and prints one line saying what that ends.
pub async fn run(args: PromoteArgs) -> anyhow::Result<()> {
    let target = pods_driver_target(&args.object, "promote ends a pause step").await?;
    let (cds, which) = (&target.cds, &target.which);
    let status = cds.status.clone().unwrap_or_default();
    let phase = status.phase.as_deref().unwrap_or("pending");
    if args.full && !FULL_PROMOTION_PHASES.contains(&phase) {
        bail!("{which} has no rollout under way (phase {phase}): nothing to promote");
    }
    if !args.full && phase != "paused" {
        bail!("{which} is not paused (phase {phase}): nothing to promote");
    }
    if hold_requested(cds) {
        bail!(
            "{which} is held on request (the pause verb): resume it first (daemonset-canary resume {} -n {}), a promotion does not end a hold",
            target.name,
            target.namespace
        );
    }
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
