//! Row 6, the hold on request (the `pause` verb, `canary.daemonset.dev/paused`), over what the
//! other rows decided, for both drivers.
//!
//! Held, a pass that would act (write, move something of the driver's own, or supervise a
//! rollout under way) is `paused` instead: its write, the events announcing it and the
//! driver's action are dropped. A driver that holds with a write (the MaxUnavailable driver:
//! the live DaemonSet on `OnDelete`, so that the DaemonSet controller stops replacing pods)
//! gets that one [`WriteKind::Hold`] write; the Pods driver holds by deleting nothing. A
//! failure stays a failure, a rollout at rest stays `successful`, and a drift kept as reported
//! (`Report`) is not written to. The hold is announced once (`Paused`), as is its end
//! (`Resumed`); once the hold is gone, a DaemonSet left on `OnDelete` by it goes back to
//! `RollingUpdate`: with the rows' own write when there is one (every write of the desired
//! DaemonSet sets `RollingUpdate`), else with a [`WriteKind::Resume`] write, unless the rows
//! keep it on `OnDelete` themselves (the MaxUnavailable driver's canary soak,
//! [`DriverAction::keeps_hold`]: the soak reuses the hold, and its widen ends both; a failed
//! rollout, which stays on `OnDelete` until a retry or the next target writes). The progress
//! deadline does not run while held (the phase is `paused`).

use super::events::{paused_event, resumed_event, started_event};
use super::{Decision, DriverAction, Life};
use crate::decision::{DaemonSetWrite, WriteKind, event_reason};
use crate::phase::Phase;

/// The hold on request over `decision`, the rows' decision for `life`.
///
/// `late_update`: the health gates hold a rollout at rest (`onUnhealthy: Hold` over a node
/// updated after `successful`): the resting strategy's catch-up is stopped as a rollout's
/// progress would be (the DaemonSet on `OnDelete`, the phase `paused`).
pub(super) fn held_on_request<A: DriverAction>(
    mut decision: Decision<A>,
    life: &Life<'_>,
    late_update: bool,
) -> Decision<A> {
    let drift_announced = life.previous.is_some_and(|p| p.drifted);
    if !life.held {
        if life.hold_recorded {
            // A drift announced while held is reverted now, as the start it is.
            if drift_announced && !life.pods_rows && decision.phase != Phase::Failed {
                for event in &mut decision.events {
                    if event.reason == event_reason::DRIFT_DETECTED {
                        *event = started_event(life.name, life.version);
                    }
                }
            }
            // The canary's soak keeps the hold's `OnDelete` as it is (one write fewer each
            // way: soak seeds 18, 64 and 89 paused and resumed during the soak). So does a
            // failure: the MaxUnavailable driver's failure puts the DaemonSet on `OnDelete`
            // itself (a broken node, a failed analysis), and a resume must not hand the
            // release back to the DaemonSet controller (simulation seed 18 with a release
            // that breaks its node, invariant 33: paused after the failure, resumed, and the
            // DaemonSet controller replaced the next pods).
            if life.live_on_hold == Some(true)
                && decision.write.is_none()
                && !decision.drifted
                && !decision.action.keeps_hold()
                && decision.phase != Phase::Failed
            {
                decision.write = Some(strategy_type_write(WriteKind::Resume));
            }
            decision.events.insert(0, resumed_event(life.name));
        }
        return decision;
    }
    decision.held = true;
    // A failed rollout's drift is written over under its hold once the hold on request ends,
    // as any drift is; announced once meanwhile.
    if decision.phase == Phase::Failed
        && decision
            .write
            .is_some_and(|write| write.kind == WriteKind::RevertHeld)
    {
        decision.write = None;
        decision.events.retain_mut(|event| {
            if event.reason != event_reason::DRIFT_DETECTED {
                return true;
            }
            event.message.push_str(" once the hold on request ends");
            !drift_announced
        });
    }
    // A rollout under way acts; the start of one the DaemonSet controller made already (the
    // Pods driver's new revision: nothing written, nothing deleted) has nothing to stop.
    let start_seen =
        decision.phase == Phase::Started && decision.write.is_none() && !decision.drifted;
    let acts = decision.write.is_some()
        || decision.action.moves()
        || (decision.phase.is_in_progress() && !start_seen)
        || late_update;
    if acts && decision.phase != Phase::Failed {
        let reported_drift = decision.drifted && decision.write.is_none();
        if decision.write.take().is_some() {
            // What the dropped write would have announced did not happen; a drift is
            // announced (once, below), its revert waits.
            decision.events.retain_mut(|event| match event.reason {
                event_reason::RETRIED => true,
                event_reason::DRIFT_DETECTED => {
                    if !life.pods_rows {
                        event.message.push_str(" once the hold on request ends");
                    }
                    true
                }
                _ => false,
            });
        }
        // A drift kept while held is announced once, not on every pass.
        if drift_announced {
            decision
                .events
                .retain(|event| event.reason != event_reason::DRIFT_DETECTED);
        }
        decision.action.stop();
        decision.done = false;
        decision.phase = Phase::Paused;
        if life.live_on_hold == Some(false) && !reported_drift {
            decision.write = Some(strategy_type_write(WriteKind::Hold));
        }
    }
    if !life.hold_recorded {
        decision
            .events
            .insert(0, paused_event(life.name, life.held_stops));
    }
    decision
}

/// The write of a hold or of its end: the live DaemonSet with only its strategy type moved.
fn strategy_type_write(kind: WriteKind) -> DaemonSetWrite {
    DaemonSetWrite {
        kind,
        max_unavailable: None,
        template_edit: None,
    }
}
