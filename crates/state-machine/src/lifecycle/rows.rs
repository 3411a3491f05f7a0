//! The rows both drivers share, each a function that names its reason: the life cycle runs
//! the first ones in its order ([`super::decide`]), a driver's progress calls the others at
//! its place (a sticky failure, the progress deadline, a failure).

use super::events::{rollout_of, started_event, warning};
use super::{Decision, DriverAction, Life, Row, Table};
use crate::analysis::{AnalysisVerdict, StepAnalysis};
use crate::decision::{DaemonSetWrite, Event, WriteKind, event_reason};
use crate::health::{HealthCause, HealthVerdict, OnUnhealthy, UnhealthyNode, judge};
use crate::observation::{DriftSeen, PreviousPass};
use crate::phase::{FailureReason, Phase};
use crate::strategy::{DriftPolicy, Strategy, StrategyError};

/// Row 1: the strategy (or the driver's own settings) does not validate: `failed` with
/// `InvalidStrategy`, announced once, nothing written until it is fixed.
pub(crate) fn invalid<A: DriverAction>(error: &StrategyError, life: &Life<'_>) -> Decision<A> {
    let message = format!("daemonSet {} has an invalid strategy: {error}", life.name);
    let failure = FailureReason::InvalidStrategy;
    let event = (!repeats(life.previous.as_ref(), Phase::Failed, Some(failure)))
        .then(|| warning(event_reason::INVALID_STRATEGY, message.clone()));
    Decision {
        failure: Some(failure),
        events: event.into_iter().collect(),
        error: Some(message),
        ..Decision::hold(Phase::Failed)
    }
}

/// Row 2: the live DaemonSet was changed by someone else (the default table only; KubeVirt
/// mode reverts it unsupervised at its next row 3a or 4 write, spec quirk 5).
///
/// `Revert`: the start again, so the desired template goes back out and the pods the hand
/// edit replaced come back one at a time, supervised; but over a sticky failure, the desired
/// template goes back under the failure's hold ([`reverted_under_failure`]), unless a `retry`
/// is asked for with it. `Report`:
/// nothing is written while the drift lasts (the rollout holds where it is), only the event,
/// once. Either way a change of the desired state (the start row) wins over the drift.
pub(super) fn drifted<T: Table>(
    strategy: &Strategy,
    table: &T,
    drift: &DriftSeen,
) -> Decision<T::Action> {
    let life = table.life();
    let name = life.name;
    // A retry asked for with the drift is the new rollout: the revert's start is it.
    let failed_before = sticky(&life).filter(|_| !life.retry);
    let decision = match (strategy.drift_policy, failed_before) {
        (DriftPolicy::Revert, Some(previous)) => {
            reverted_under_failure(strategy, table, drift, previous)
        }
        (DriftPolicy::Revert, None) => Decision {
            events: vec![warning(
                event_reason::DRIFT_DETECTED,
                format!(
                    "daemonSet {name} was changed outside the controller ({}); reverting to the desired template, canary first",
                    drift.what
                ),
            )],
            ..start(&life, Some(table.start_write(strategy)), true)
                .with_action(table.action(Row::Revert))
        },
        (DriftPolicy::Report, _) => {
            let already = life.previous.is_some_and(|p| p.drifted);
            let event = (!already).then(|| {
                warning(
                    event_reason::DRIFT_DETECTED,
                    format!(
                        "daemonSet {name} was changed outside the controller ({}); left as it is (driftPolicy Report), {} until the desired state changes",
                        drift.what, life.report_stops
                    ),
                )
            });
            Decision {
                events: event.into_iter().collect(),
                ..kept_as_it_was(&life).with_action(table.action(Row::Report))
            }
        }
    };
    Decision {
        drifted: true,
        ..decision
    }
}

/// A drift of a rollout that failed for a reason that says something about the release
/// (`Revert`): the desired template is written back under the failure's hold
/// ([`WriteKind::RevertHeld`]: the update strategy `OnDelete`), and the rollout stays `failed`
/// with its reason. A start here would roll the failed release out again from its canary
/// (simulation invariant 21: a pod went down to a release whose analysis had failed); the
/// pods the hand edit replaced keep running until a `retry`, a rollback or a new target
/// starts a rollout, supervised.
fn reverted_under_failure<T: Table>(
    strategy: &Strategy,
    table: &T,
    drift: &DriftSeen,
    previous: PreviousPass,
) -> Decision<T::Action> {
    let life = table.life();
    let stays = stay_failed(&life, previous);
    let failure = stays.failure.unwrap_or(FailureReason::CanaryCrashLooping);
    Decision {
        write: Some(DaemonSetWrite {
            kind: WriteKind::RevertHeld,
            ..table.start_write(strategy)
        }),
        events: vec![warning(
            event_reason::DRIFT_DETECTED,
            format!(
                "daemonSet {} was changed outside the controller ({}); reverting to the desired template under the hold of its failed rollout ({failure}): no pod is replaced until a retry or a new target",
                life.name, drift.what
            ),
        )],
        ..stays.with_action(table.action(Row::Report))
    }
}

/// Where a drift kept as it is (`Report`) holds the rollout: where the previous pass left
/// it, a failure with its reason. A configuration the previous pass could not act on (an
/// invalid strategy or spec) is valid now that this pass got here, and left no rollout to
/// hold: as on a first pass. So is the reference's `UnexpectedState`, which the fixed table
/// (the only one that reads a drift) never gives (a status left by `compatibility: KubeVirt`
/// before the switch to `Fixed`).
fn kept_as_it_was<A: DriverAction>(life: &Life<'_>) -> Decision<A> {
    let previous = life.previous.filter(|previous| {
        !(previous.phase == Phase::Failed
            && matches!(
                previous.failure,
                Some(
                    FailureReason::InvalidStrategy
                        | FailureReason::InvalidSpec
                        | FailureReason::DaemonSetClaimed
                        | FailureReason::UnexpectedState
                )
            ))
    });
    match previous {
        Some(previous) if previous.phase == Phase::Failed => stay_failed(life, previous),
        Some(previous) => Decision {
            done: previous.phase == Phase::Successful && !life.pods_rows,
            ..Decision::hold(previous.phase)
        },
        None => Decision {
            done: !life.pods_rows,
            ..Decision::hold(Phase::Successful)
        },
    }
}

/// Row 4: a rollout starts, `started` (the MaxUnavailable driver's row 1 of the reference).
/// `write`: the template write that starts it, when it is this pass's (the Pods driver also
/// starts on a new revision the DaemonSet controller made, with no write); `announced`: the
/// start event went out already (with the write, or for a revert as its drift). Never
/// records the generation: the generation mismatch brings the next passes back.
pub(crate) fn start<A: DriverAction>(
    life: &Life<'_>,
    write: Option<DaemonSetWrite>,
    announced: bool,
) -> Decision<A> {
    let event = (!announced).then(|| started_event(life.name, life.version));
    Decision {
        write,
        events: event.into_iter().collect(),
        ..Decision::hold(Phase::Started)
    }
}

/// The previous pass's failure when it holds until the target changes (the default table;
/// a new target starts again). A rejected write or an invalid strategy is not sticky: see
/// [`FailureReason::is_sticky`].
pub(crate) fn sticky(life: &Life<'_>) -> Option<PreviousPass> {
    life.previous.filter(|previous| {
        previous.phase == Phase::Failed && previous.failure.is_none_or(FailureReason::is_sticky)
    })
}

/// The sticky failure row: `failed` as the previous pass was, with its reason, nothing
/// written and nothing announced again.
pub(crate) fn stay_failed<A: DriverAction>(life: &Life<'_>, previous: PreviousPass) -> Decision<A> {
    let failure = previous
        .failure
        .unwrap_or(FailureReason::CanaryCrashLooping);
    Decision {
        failure: Some(failure),
        error: Some(format!(
            "daemonSet {}: {} failed ({failure}); it stays failed until the target changes",
            life.name,
            rollout_of(life.version)
        )),
        ..Decision::hold(Phase::Failed)
    }
}

/// The failure row: `failed` for `failure`, its Warning event (`reason`) emitted only on the
/// transition into it. Every failure a driver or a gate decides goes through here, so that
/// both drivers announce, keep (sticky) and roll back (`onFailure`) a failure alike.
pub(crate) fn failed<A: DriverAction>(
    life: &Life<'_>,
    failure: FailureReason,
    reason: &'static str,
    message: String,
) -> Decision<A> {
    let event = (!repeats(life.previous.as_ref(), Phase::Failed, Some(failure)))
        .then(|| warning(reason, message.clone()));
    Decision {
        failure: Some(failure),
        events: event.into_iter().collect(),
        error: Some(message),
        ..Decision::hold(Phase::Failed)
    }
}

/// The analysis row (issue 46): a metric that failed `failureLimit` times in the measured
/// stretch (`place`: a pause step, a nodes step, the canary, the widened rollout) fails the
/// rollout with `AnalysisFailed` through the failure row, on either driver and at any time
/// of the rollout. `None` without analysis, or when `analysis` is of another stretch.
pub(crate) fn analysis_failed<A: DriverAction>(
    life: &Life<'_>,
    analysis: Option<&StepAnalysis>,
    place: &str,
) -> Option<Decision<A>> {
    let AnalysisVerdict::Failed { metric, detail } = &analysis?.verdict else {
        return None;
    };
    let message = format!(
        "daemonSet {} rollout failed: analysis metric {metric} failed in {place}: {detail}; no further pod is deleted",
        life.name
    );
    Some(failed(
        life,
        FailureReason::AnalysisFailed,
        event_reason::ANALYSIS_FAILED,
        message,
    ))
}

/// The Warning that an analysis is inconclusive past its limit in `place`, once (not when the
/// previous pass announced it already); `what` says what waits for a conclusive measurement.
pub(crate) fn analysis_inconclusive(
    name: &str,
    analysis: Option<&StepAnalysis>,
    place: &str,
    what: &str,
) -> Option<Event> {
    let analysis = analysis.filter(|a| !a.announced)?;
    let AnalysisVerdict::Inconclusive { metric, detail } = &analysis.verdict else {
        return None;
    };
    Some(warning(
        event_reason::ANALYSIS_INCONCLUSIVE,
        format!(
            "daemonSet {name}: analysis metric {metric} is inconclusive in {place} ({detail}); {what}"
        ),
    ))
}

/// The health gate's row (issue 46): evidence against the release with `onUnhealthy: Fail`
/// fails the rollout with `NodeUnhealthy` (or `NeighboursDisrupted`, by the gate that found
/// it) through the failure row, before anything else is
/// deleted or widened. With `Hold`, nothing here: the life cycle holds the pass instead
/// ([`health_hold`]). `None` without evidence, or without the gates (no facts).
pub(crate) fn health_failed<A: DriverAction>(life: &Life<'_>) -> Option<Decision<A>> {
    let (cause, nodes, count) = health_evidence(life, OnUnhealthy::Fail)?;
    let late = life
        .health
        .is_some_and(|facts| facts.rested_since.is_some());
    let message = within_event_note(
        &format!("daemonSet {} rollout failed: ", life.name),
        &unhealthy_text(cause, &nodes, count, late),
        "; no further pod is deleted",
    );
    let failure = cause.failure();
    Some(failed(life, failure, event_reason_of(cause), message))
}

/// The gates' evidence against the release, when its policy is `policy`: which gate speaks,
/// the nodes it names and how many there are. `None` under the other policy, without the gates
/// (no facts) or without evidence. The one judgement [`health_failed`] and [`health_hold`] share.
fn health_evidence(
    life: &Life<'_>,
    policy: OnUnhealthy,
) -> Option<(HealthCause, Vec<UnhealthyNode>, u32)> {
    let facts = life.health?;
    if facts.policy.on_unhealthy != policy {
        return None;
    }
    match judge(facts) {
        HealthVerdict::NodesUnhealthy {
            cause,
            nodes,
            count,
        } => Some((cause, nodes, count)),
        _ => None,
    }
}

/// The health gate with `onUnhealthy: Hold`: the reason and message of the Warning event
/// that names the nodes that hold the rollout, when the gates found evidence.
pub(crate) fn health_hold(life: &Life<'_>) -> Option<(&'static str, String)> {
    let (cause, nodes, count) = health_evidence(life, OnUnhealthy::Hold)?;
    let late = life
        .health
        .is_some_and(|facts| facts.rested_since.is_some());
    Some((
        event_reason_of(cause),
        within_event_note(
            &format!("daemonSet {}: ", life.name),
            &unhealthy_text(cause, &nodes, count, late),
            "; the rollout holds (onUnhealthy Hold): resume to go on, abort to roll back",
        ),
    ))
}

/// The Warning event's reason for evidence found by `cause`.
pub(crate) const fn event_reason_of(cause: HealthCause) -> &'static str {
    match cause {
        HealthCause::Node => event_reason::NODE_UNHEALTHY,
        HealthCause::Neighbours => event_reason::NEIGHBOURS_DISRUPTED,
    }
}

/// The nodes of a verdict as a sentence: each with what was seen and since when; `late`: at
/// rest, the nodes were updated after the rollout ended `successful` (a late update).
fn unhealthy_text(cause: HealthCause, nodes: &[UnhealthyNode], count: u32, late: bool) -> String {
    let listed: Vec<String> = nodes
        .iter()
        .map(|node| {
            let seen = &node.seen;
            let mut text = format!("{} ({} {}", node.node, seen.condition, seen.status);
            if !seen.reason.is_empty() {
                text.push_str(&format!(", {}", seen.reason));
            }
            if !seen.message.is_empty() {
                text.push_str(&format!(": {}", seen.message));
            }
            text.push(')');
            text
        })
        .collect();
    let more = usize::try_from(count)
        .unwrap_or(usize::MAX)
        .saturating_sub(listed.len());
    let tail = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    let what = match cause {
        HealthCause::Node => "turned unhealthy",
        HealthCause::Neighbours => "had the pods beside the agent disrupted",
    };
    let when = if late {
        " late, after the rollout had ended successful (a late update)"
    } else {
        ""
    };
    format!(
        "{count} {} {what} after {} agent pod was updated{when}: {}{tail}",
        if count == 1 { "node" } else { "nodes" },
        if count == 1 { "its" } else { "their" },
        listed.join(", ")
    )
}

/// `before`, `nodes` and `after` as one message under an event note's limit: ten nodes with
/// their reasons and messages (each cut to `SHORT_TEXT_BYTES`) run past it, so the node list
/// is cut (saying so) and the frame kept, and the event and the status say the same.
fn within_event_note(before: &str, nodes: &str, after: &str) -> String {
    let room = (crate::EVENT_NOTE_BYTES - 1)
        .saturating_sub(before.len() + after.len())
        .max(crate::MIN_CUT_BYTES);
    format!("{before}{}{after}", crate::cut(nodes, room))
}

/// The progress deadline row: the previous pass was in progress, the ready count (`ready` of
/// `desired`) did not move, and the time since the phase started or the count last moved is
/// over the deadline.
pub(crate) fn deadline_exceeded<A: DriverAction>(
    strategy: &Strategy,
    life: &Life<'_>,
    ready: u32,
    desired: u32,
) -> Option<Decision<A>> {
    let deadline = strategy.progress_deadline?;
    let previous = life.previous?;
    // Time held on request (`paused`) is no stall: the deadline runs again from the resume.
    let stalled = previous.phase.is_in_progress()
        && previous.phase != Phase::Paused
        && previous.updated_ready == ready
        && previous.since_progress > deadline;
    if !stalled {
        return None;
    }
    let message = format!(
        "daemonSet {}: {} made no progress in phase {} for {}s (deadline {}s): {ready} of {desired} {} updated and ready",
        life.name,
        rollout_of(life.version),
        previous.phase,
        previous.since_progress.as_secs(),
        deadline.as_secs(),
        if desired == 1 { "pod" } else { "pods" },
    );
    Some(failed(
        life,
        FailureReason::ProgressDeadlineExceeded,
        event_reason::PROGRESS_DEADLINE_EXCEEDED,
        message,
    ))
}

/// Whether the previous pass decided `phase` with `failure` already (its event went out).
pub(crate) fn repeats(
    previous: Option<&PreviousPass>,
    phase: Phase,
    failure: Option<FailureReason>,
) -> bool {
    previous.is_some_and(|previous| previous.phase == phase && previous.failure == failure)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lifecycle::MaxUnavailableAction;
    use std::time::Duration;

    fn life(previous: Option<PreviousPass>) -> Life<'static> {
        Life {
            name: "agent",
            version: "v2",
            previous,
            changed: false,
            drift: None,
            retry: false,
            held: false,
            hold_recorded: false,
            live_on_hold: None,
            held_stops: "nothing moves",
            report_stops: "nothing is written",
            pods_rows: false,
            health: None,
        }
    }

    fn failed_with(failure: Option<FailureReason>) -> PreviousPass {
        PreviousPass {
            phase: Phase::Failed,
            failure,
            updated_ready: 0,
            since_progress: Duration::ZERO,
            drifted: false,
        }
    }

    #[test]
    fn only_a_failure_that_says_something_about_the_version_sticks() {
        for reason in FailureReason::ALL {
            let sticks = sticky(&life(Some(failed_with(Some(reason))))).is_some();
            assert_eq!(sticks, reason.is_sticky(), "{reason}");
        }
        assert!(
            sticky(&life(Some(failed_with(None)))).is_some(),
            "no reason"
        );
        assert!(sticky(&life(None)).is_none());
    }

    #[test]
    fn a_failure_is_announced_on_the_transition_only() {
        let failure = FailureReason::CanaryCrashLooping;
        let first: Decision<MaxUnavailableAction> = failed(
            &life(None),
            failure,
            event_reason::FAILED_UPDATE,
            "boom".into(),
        );
        assert_eq!(first.events.len(), 1);
        let again: Decision<MaxUnavailableAction> = failed(
            &life(Some(failed_with(Some(failure)))),
            failure,
            event_reason::FAILED_UPDATE,
            "boom".into(),
        );
        assert!(again.events.is_empty());
        assert_eq!(again.phase, Phase::Failed);
    }
}
