//! Going back: when a rollout is rolled back to an earlier revision, and to which one.
//!
//! The controller remembers each template it rolled out as a numbered revision (the adapter
//! keeps them as ControllerRevisions) with the outcome of its rollout; the last one that
//! finished `successful` is the *stable* revision. Three things send a DaemonSet back:
//!
//! | row | asked by | goes to | reported phases |
//! |---|---|---|---|
//! | 1 | `undo [--to-revision N]` (a mark, acted on once) | revision `N`, or the one before the current | the rollout phases (an undo is a rollout) |
//! | 2 | `abort` (a mark, acted on once) | the stable revision | `rollingBack`, then `rolledBack` |
//! | 3 | `spec.strategy.onFailure: Rollback`, on a failure that says something about the version ([`FailureReason::is_sticky`]) | the stable revision | `failed`, then `rollingBack`, then `rolledBack` |
//!
//! A verb that cannot be acted on (nothing to abort, no such revision) is refused with a
//! `VerbRefused` warning, as the verb table ([`Verb`]) says, and its mark counts as acted on: it
//! never fires later, when the user has long forgotten it.
//!
//! Going back is decided before anything is written: the pass decides with the driver's table
//! first, then [`go_back`] (the life cycle's last row) with the phase the table decided and
//! the history as the adapter observed it. A pass that starts going back writes nothing of the
//! rollout it leaves; it records the rollback, then writes the revision's template at once.
//!
//! # Invariants
//!
//! - A rollback goes to a revision in the history, never to the revision being left.
//! - An automatic rollback never follows a rollback: a rollback that fails holds (there is no
//!   further back to go), so a bad stable revision cannot make the controller loop.
//! - No verb changes anything while the driver would change nothing else either: an `abort` of
//!   a rollout at rest is refused.
//! - [`decide_rollback`] is pure and never panics.

use super::events::{normal, warning};
use super::{Decision, DriverAction};
use crate::decision::{Event, event_reason};
use crate::phase::{FailureReason, Phase};
use crate::strategy::{Driver, OnFailure};
use crate::verb::{Verb, VerbContext, undo_revision};

/// One remembered revision: its number and the version it rolled out.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Revision {
    /// The revision number (1, 2, ...; a template rolled out again takes the next number).
    pub number: i64,
    /// The target version of that template (may be empty when unknown).
    pub version: String,
}

/// Where an `undo` goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UndoTarget {
    /// The revision before the current one (`undo` without `--to-revision`).
    Previous,
    /// A revision by number (`undo --to-revision N`).
    Revision(i64),
}

/// Why a rollback started (with the `serde` feature, its name on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum RollbackReason {
    /// The `undo` verb: an earlier revision rolled out as any rollout.
    Undo,
    /// The `abort` verb: back to the stable revision.
    Abort,
    /// `onFailure: Rollback`: back to the stable revision after a failure.
    OnFailure,
}

impl RollbackReason {
    /// The stable name (`"Undo"`, `"Abort"`, `"OnFailure"`), as the status records it.
    pub const fn as_str(self) -> &'static str {
        match self {
            RollbackReason::Undo => "Undo",
            RollbackReason::Abort => "Abort",
            RollbackReason::OnFailure => "OnFailure",
        }
    }

    /// An abort or an automatic rollback reports `rollingBack` and `rolledBack`; an undo is
    /// reported as the rollout it is.
    pub const fn reports_rollback_phases(self) -> bool {
        !matches!(self, RollbackReason::Undo)
    }

    /// Every reason.
    pub const ALL: [RollbackReason; 3] = [
        RollbackReason::Undo,
        RollbackReason::Abort,
        RollbackReason::OnFailure,
    ];

    /// The reason named `name`, if any.
    pub fn parse(name: &str) -> Option<RollbackReason> {
        RollbackReason::ALL
            .into_iter()
            .find(|reason| reason.as_str() == name)
    }
}

/// What one pass knows about going back.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct RollbackObservation {
    /// The DaemonSet name, for messages.
    pub name: String,
    /// An `abort` was asked for and not yet acted on.
    pub abort: bool,
    /// An `undo` was asked for and not yet acted on.
    pub undo: Option<UndoTarget>,
    /// An `undo` mark that cannot be read, and why: refused, and acted on.
    pub undo_unreadable: Option<String>,
    /// The driver of the spec (what the verb table reads).
    pub driver: Driver,
    /// Someone else owns the template (`spec.workloadRef`): going back is theirs to do, and
    /// every mark is refused.
    pub template_theirs: bool,
    /// The pass could not build the spec's template (an invalid spec): it cannot know what a
    /// rollback would override, so the marks wait for a pass that can.
    pub template_unknown: bool,
    /// What a failure leads to.
    pub on_failure: OnFailure,
    /// The phase the driver's table decided in this pass (not the reported one).
    pub phase: Option<Phase>,
    /// Why, when `phase` is `failed`.
    pub failure: Option<FailureReason>,
    /// An abort or an automatic rollback is already in force.
    pub rolling_back: bool,
    /// The revision being rolled out (or at rest).
    pub current: Option<Revision>,
    /// The last revision that finished `successful`.
    pub stable: Option<Revision>,
    /// Every remembered revision.
    pub history: Vec<Revision>,
}

/// What [`decide_rollback`] decided.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct RollbackDecision {
    /// Go back to this revision, for this reason.
    pub start: Option<(Revision, RollbackReason)>,
    /// The pending `abort` was acted on (started or refused): record it.
    pub abort_consumed: bool,
    /// The pending `undo` was acted on (started or refused): record it.
    pub undo_consumed: bool,
    /// Events to record, in order.
    pub events: Vec<Event>,
}

/// Decides whether this pass starts going back, and where to. Pure; see the module docs.
pub fn decide_rollback(observation: &RollbackObservation) -> RollbackDecision {
    let name = &observation.name;
    let undo_asked = observation.undo.is_some() || observation.undo_unreadable.is_some();
    let mut decision = RollbackDecision::default();
    // Row 0: a mark that cannot be read is refused (and never fires later).
    if let Some(why) = &observation.undo_unreadable {
        decision.events.push(verb_refused(name, Verb::Undo, why));
        decision.undo_consumed = true;
    }
    if observation.template_theirs {
        // Someone else owns the template: going back is theirs to do.
        let theirs = VerbContext {
            driver: observation.driver,
            owns_template: false,
            ..VerbContext::default()
        };
        for (verb, asked) in [(Verb::Abort, observation.abort), (Verb::Undo, undo_asked)] {
            if asked && let Some(why) = verb.refusal(&theirs) {
                decision.events.push(verb_refused(name, verb, &why));
            }
        }
        decision.abort_consumed = observation.abort;
        decision.undo_consumed = undo_asked;
        return decision;
    }
    if observation.template_unknown {
        return decision;
    }
    decision.abort_consumed = observation.abort;
    decision.undo_consumed = undo_asked;
    let current_number = observation.current.as_ref().map(|c| c.number);
    let verb_context = VerbContext {
        // Both drivers go back; a workload someone else owns is refused before (the caller's).
        driver: Driver::default(),
        phase: observation.phase,
        held: false,
        owns_template: true,
        rolling_back: observation.rolling_back,
        current: observation.current.clone(),
        stable: observation.stable.clone(),
    };
    // Row 1: undo.
    if let Some(target) = observation.undo {
        match undo_revision(target, &verb_context, &observation.history) {
            Err(why) => decision.events.push(verb_refused(name, Verb::Undo, &why)),
            Ok(to) => {
                decision.events.push(normal(
                    event_reason::UNDO_STARTED,
                    format!(
                        "daemonSet {name}: rolling out revision {} ({}) on request, canary first",
                        to.number,
                        version_of(&to)
                    ),
                ));
                decision.start = Some((to, RollbackReason::Undo));
                // An abort asked at the same time is answered by the undo.
                return decision;
            }
        }
    }
    // Row 2: abort, refused as the verb table says.
    if observation.abort {
        match (Verb::Abort.refusal(&verb_context), &observation.stable) {
            (Some(why), _) => decision.events.push(verb_refused(name, Verb::Abort, &why)),
            (None, Some(stable)) => {
                decision.events.push(normal(
                    event_reason::ABORTED,
                    format!(
                        "daemonSet {name}: aborted on request; rolling back to revision {} ({}), canary first",
                        stable.number,
                        version_of(stable)
                    ),
                ));
                decision.start = Some((stable.clone(), RollbackReason::Abort));
                return decision;
            }
            (None, None) => {}
        }
    }
    // Row 3: onFailure: Rollback.
    let failed_on_the_version = observation.phase == Some(Phase::Failed)
        && observation.failure.is_some_and(FailureReason::is_sticky);
    if failed_on_the_version
        && observation.on_failure == OnFailure::Rollback
        && !observation.rolling_back
        && let Some(stable) = &observation.stable
        && Some(stable.number) != current_number
    {
        let failure = observation.failure.map_or("", FailureReason::as_str);
        decision.events.push(warning(
            event_reason::ROLLING_BACK,
            format!(
                "daemonSet {name}: the rollout failed ({failure}); onFailure Rollback: rolling back to revision {} ({}), canary first",
                stable.number,
                version_of(stable)
            ),
        ));
        decision.start = Some((stable.clone(), RollbackReason::OnFailure));
    }
    decision
}

/// The rollback row of the life cycle: run after the driver's table decided `decision`, before
/// anything is written, with what the pass knows of going back (`observation`; its `phase` and
/// `failure` are the decision's). Returns the decision to act on, and going back.
///
/// A pass that starts going back writes nothing of the rollout it leaves: the decision's
/// template write and the driver's action (the Pods driver's deletions) are dropped, and with a
/// write the events that announced it. Its phase is the rollout's start when its table had
/// found the rollout at rest (an undo asked while `rolledBack` reported `successful` at the old
/// revision for a pass; soak seed 21001978); a failure stays, as it says why the rollback
/// starts. The caller records the rollback in the status first (a leader that takes over must
/// know it), then writes the revision's template at once.
pub fn go_back<A: DriverAction>(
    mut decision: Decision<A>,
    mut observation: RollbackObservation,
) -> (Decision<A>, RollbackDecision) {
    observation.phase = Some(decision.phase);
    observation.failure = decision.failure;
    let rollback = decide_rollback(&observation);
    if rollback.start.is_some() {
        // The events announced the write the rollback drops; a failure's own event (the
        // reason the rollout goes back) is kept, so that it is published and notified.
        if decision.write.take().is_some() && decision.phase != Phase::Failed {
            decision.events.clear();
        }
        decision.action.stop();
        if decision.phase == Phase::Successful {
            decision.phase = Phase::Started;
            decision.done = false;
        }
    }
    (decision, rollback)
}

/// The `RolledBack` event, when the reported phase enters `rolledBack` in this pass.
pub fn rolled_back_event(
    name: &str,
    from: Option<Phase>,
    to: Phase,
    revision: &Revision,
) -> Option<Event> {
    (to == Phase::RolledBack && from != Some(Phase::RolledBack)).then(|| {
        normal(
            event_reason::ROLLED_BACK,
            format!(
                "daemonSet {name}: rolled back; every pod runs revision {} ({}) again",
                revision.number,
                version_of(revision)
            ),
        )
    })
}

fn version_of(revision: &Revision) -> &str {
    if revision.version.is_empty() {
        "version unknown"
    } else {
        &revision.version
    }
}

/// The `VerbRefused` warning: `verb` could not be acted on, because `why` (the verb table's
/// refusal, [`Verb::refusal`]).
pub fn verb_refused(name: &str, verb: Verb, why: &str) -> Event {
    warning(
        event_reason::VERB_REFUSED,
        format!("daemonSet {name}: {} refused: {why}", verb.name()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MaxUnavailableAction;

    fn revision(number: i64, version: &str) -> Revision {
        Revision {
            number,
            version: version.to_owned(),
        }
    }

    /// Revisions 1 (v1) and 2 (v2); 2 is being rolled out, 1 is stable.
    fn rolling_out_v2(phase: Phase) -> RollbackObservation {
        RollbackObservation {
            name: "agent".into(),
            phase: Some(phase),
            current: Some(revision(2, "v2")),
            stable: Some(revision(1, "v1")),
            history: vec![revision(1, "v1"), revision(2, "v2")],
            ..RollbackObservation::default()
        }
    }

    fn reasons(decision: &RollbackDecision) -> Vec<&'static str> {
        decision.events.iter().map(|e| e.reason).collect()
    }

    #[test]
    fn nothing_asked_nothing_started() {
        for phase in Phase::ALL {
            let decision = decide_rollback(&rolling_out_v2(phase));
            assert_eq!(decision, RollbackDecision::default(), "{phase}");
        }
    }

    #[test]
    fn row1_undo_goes_to_the_previous_or_the_named_revision() {
        let mut observation = rolling_out_v2(Phase::Successful);
        observation.undo = Some(UndoTarget::Previous);
        let decision = decide_rollback(&observation);
        assert_eq!(
            decision.start,
            Some((revision(1, "v1"), RollbackReason::Undo))
        );
        assert!(decision.undo_consumed && !decision.abort_consumed);
        assert_eq!(reasons(&decision), [event_reason::UNDO_STARTED]);

        observation.undo = Some(UndoTarget::Revision(1));
        assert_eq!(
            decide_rollback(&observation).start,
            Some((revision(1, "v1"), RollbackReason::Undo))
        );
    }

    #[test]
    fn row1_undo_to_an_unknown_or_the_current_revision_is_refused_and_consumed() {
        let mut observation = rolling_out_v2(Phase::Successful);
        for target in [UndoTarget::Revision(7), UndoTarget::Revision(2)] {
            observation.undo = Some(target);
            let decision = decide_rollback(&observation);
            assert_eq!(decision.start, None, "{target:?}");
            assert!(decision.undo_consumed);
            assert_eq!(reasons(&decision), [event_reason::VERB_REFUSED]);
        }
        observation.history = vec![revision(2, "v2")];
        observation.undo = Some(UndoTarget::Previous);
        let decision = decide_rollback(&observation);
        assert_eq!(decision.start, None);
        assert!(
            decision.events[0].message.contains("no revision before"),
            "{:?}",
            decision.events
        );
    }

    #[test]
    fn row2_abort_mid_rollout_goes_to_the_stable_revision() {
        for phase in [
            Phase::Started,
            Phase::Canary,
            Phase::Paused,
            Phase::Waiting,
            Phase::Failed,
        ] {
            let mut observation = rolling_out_v2(phase);
            observation.abort = true;
            let decision = decide_rollback(&observation);
            assert_eq!(
                decision.start,
                Some((revision(1, "v1"), RollbackReason::Abort)),
                "{phase}"
            );
            assert!(decision.abort_consumed);
            assert_eq!(reasons(&decision), [event_reason::ABORTED]);
        }
    }

    #[test]
    fn row2_abort_is_refused_at_rest_without_stable_or_while_rolling_back() {
        let refusals = [
            rolling_out_v2(Phase::Successful),
            RollbackObservation {
                stable: None,
                ..rolling_out_v2(Phase::Canary)
            },
            RollbackObservation {
                stable: Some(revision(2, "v2")),
                ..rolling_out_v2(Phase::Canary)
            },
            RollbackObservation {
                rolling_back: true,
                ..rolling_out_v2(Phase::Canary)
            },
        ];
        for mut observation in refusals {
            observation.abort = true;
            let decision = decide_rollback(&observation);
            assert_eq!(decision.start, None, "{observation:?}");
            assert!(decision.abort_consumed);
            assert_eq!(reasons(&decision), [event_reason::VERB_REFUSED]);
        }
    }

    #[test]
    fn row3_a_failure_on_the_version_rolls_back_when_asked_to() {
        let mut observation = rolling_out_v2(Phase::Failed);
        observation.on_failure = OnFailure::Rollback;
        for failure in FailureReason::ALL {
            observation.failure = Some(failure);
            let decision = decide_rollback(&observation);
            if failure.is_sticky() {
                assert_eq!(
                    decision.start,
                    Some((revision(1, "v1"), RollbackReason::OnFailure)),
                    "{failure}"
                );
                assert_eq!(reasons(&decision), [event_reason::ROLLING_BACK]);
            } else {
                assert_eq!(
                    decision.start, None,
                    "{failure} says nothing of the version"
                );
            }
        }
    }

    #[test]
    fn row3_holds_by_default_after_a_rollback_and_without_a_stable_revision() {
        let failed = RollbackObservation {
            failure: Some(FailureReason::CanaryCrashLooping),
            on_failure: OnFailure::Rollback,
            ..rolling_out_v2(Phase::Failed)
        };
        let holds = [
            RollbackObservation {
                on_failure: OnFailure::Hold,
                ..failed.clone()
            },
            RollbackObservation {
                rolling_back: true,
                ..failed.clone()
            },
            RollbackObservation {
                stable: None,
                ..failed.clone()
            },
            RollbackObservation {
                stable: Some(revision(2, "v2")),
                ..failed.clone()
            },
        ];
        for observation in holds {
            assert_eq!(
                decide_rollback(&observation),
                RollbackDecision::default(),
                "{observation:?}"
            );
        }
    }

    #[test]
    fn reasons_have_stable_names_and_only_an_undo_reports_the_rollout_phases() {
        let rows = [
            (RollbackReason::Undo, "Undo", false),
            (RollbackReason::Abort, "Abort", true),
            (RollbackReason::OnFailure, "OnFailure", true),
        ];
        for (reason, name, rollback_phases) in rows {
            assert_eq!(reason.as_str(), name);
            assert_eq!(RollbackReason::parse(name), Some(reason));
            assert_eq!(reason.reports_rollback_phases(), rollback_phases, "{name}");
        }
        assert_eq!(RollbackReason::parse("abort"), None);
        assert_eq!(RollbackReason::parse(""), None);
    }

    #[test]
    fn events_name_the_version_of_the_revision_or_say_it_is_unknown() {
        let mut observation = rolling_out_v2(Phase::Canary);
        observation.abort = true;
        let decision = decide_rollback(&observation);
        assert_eq!(
            decision.events[0].message,
            "daemonSet agent: aborted on request; rolling back to revision 1 (v1), canary first"
        );
        let unknown = revision(1, "");
        let event = rolled_back_event(
            "agent",
            Some(Phase::RollingBack),
            Phase::RolledBack,
            &unknown,
        );
        assert_eq!(
            event.map(|e| e.message),
            Some(
                "daemonSet agent: rolled back; every pod runs revision 1 (version unknown) again"
                    .to_owned()
            )
        );
    }

    #[test]
    fn row0_an_unreadable_undo_is_refused_and_acted_on_even_when_the_template_is_unknown() {
        for template_unknown in [false, true] {
            let observation = RollbackObservation {
                undo_unreadable: Some("not REVISION@TIME".into()),
                template_unknown,
                ..rolling_out_v2(Phase::Canary)
            };
            let decision = decide_rollback(&observation);
            assert_eq!(decision.start, None);
            assert!(decision.undo_consumed && !decision.abort_consumed);
            assert_eq!(reasons(&decision), [event_reason::VERB_REFUSED]);
        }
    }

    #[test]
    fn a_template_someone_else_owns_refuses_both_marks_and_never_goes_back() {
        let observation = RollbackObservation {
            abort: true,
            undo: Some(UndoTarget::Previous),
            template_theirs: true,
            driver: Driver::Pods,
            on_failure: OnFailure::Rollback,
            failure: Some(FailureReason::CanaryCrashLooping),
            ..rolling_out_v2(Phase::Failed)
        };
        let decision = decide_rollback(&observation);
        assert_eq!(decision.start, None);
        assert!(decision.abort_consumed && decision.undo_consumed);
        assert_eq!(
            reasons(&decision),
            [event_reason::VERB_REFUSED, event_reason::VERB_REFUSED]
        );
    }

    #[test]
    fn an_unknown_template_keeps_the_marks_for_a_pass_that_knows_it() {
        let observation = RollbackObservation {
            abort: true,
            undo: Some(UndoTarget::Previous),
            template_unknown: true,
            on_failure: OnFailure::Rollback,
            failure: Some(FailureReason::CanaryCrashLooping),
            ..rolling_out_v2(Phase::Failed)
        };
        assert_eq!(decide_rollback(&observation), RollbackDecision::default());
    }

    fn widen() -> Decision<MaxUnavailableAction> {
        Decision {
            write: Some(crate::DaemonSetWrite {
                kind: crate::WriteKind::Widen,
                max_unavailable: None,
                template_edit: None,
            }),
            events: vec![normal("Widened", "widened".into())],
            action: MaxUnavailableAction {
                record_generation: true,
                ..MaxUnavailableAction::default()
            },
            ..Decision::hold(Phase::Waiting)
        }
    }

    #[test]
    fn row7_a_rollback_is_decided_before_the_write_it_replaces() {
        // An abort while the table widens: the widen is not written, nor announced, nor
        // recorded; the rollback's events are the pass's.
        let observation = RollbackObservation {
            abort: true,
            ..rolling_out_v2(Phase::Canary)
        };
        let (decision, rollback) = go_back(widen(), observation);
        assert_eq!(decision.write, None);
        assert!(decision.events.is_empty(), "{:?}", decision.events);
        assert_eq!(decision.action, MaxUnavailableAction::default());
        assert_eq!(decision.phase, Phase::Waiting);
        assert_eq!(
            rollback.start,
            Some((revision(1, "v1"), RollbackReason::Abort))
        );
        assert_eq!(reasons(&rollback), [event_reason::ABORTED]);
    }

    #[test]
    fn row7_reads_the_phase_and_failure_the_table_decided() {
        // onFailure: Rollback reads the decision's failure, not the observation's.
        let failed: Decision<crate::PodsAction> = Decision {
            failure: Some(FailureReason::CanaryCrashLooping),
            events: vec![warning("CanaryFailed", "crash loop".into())],
            action: crate::PodsAction {
                delete: vec![crate::Deletion {
                    pod: "agent-a".into(),
                    uid: "uid-a".into(),
                    node: "node-a".into(),
                }],
                step: 2,
                ..crate::PodsAction::default()
            },
            ..Decision::hold(Phase::Failed)
        };
        let observation = RollbackObservation {
            on_failure: OnFailure::Rollback,
            ..rolling_out_v2(Phase::Canary)
        };
        let (decision, rollback) = go_back(failed.clone(), observation.clone());
        assert_eq!(
            rollback.start,
            Some((revision(1, "v1"), RollbackReason::OnFailure))
        );
        // The failure stays, with its event (it says why the rollback starts); no deletion.
        assert_eq!(decision.phase, Phase::Failed);
        assert_eq!(decision.failure, Some(FailureReason::CanaryCrashLooping));
        assert_eq!(decision.events, failed.events);
        assert!(decision.action.delete.is_empty());
        assert_eq!(decision.action.step, 2);
        // A failure that also writes (the MaxUnavailable driver's hold, KubeVirt mode's
        // revert) keeps its event: the write is dropped, not the reason for going back.
        let failed_with_write: Decision<MaxUnavailableAction> = Decision {
            failure: Some(FailureReason::NodeUnhealthy),
            write: widen().write,
            events: vec![warning("NodeUnhealthy", "node-a broke".into())],
            ..Decision::hold(Phase::Failed)
        };
        let (decision, _) = go_back(failed_with_write.clone(), observation.clone());
        assert_eq!(decision.write, None);
        assert_eq!(decision.events, failed_with_write.events);
        // Without a failure on the version nothing changes.
        let progress: Decision<crate::PodsAction> = Decision::hold(Phase::Canary);
        let (decision, rollback) = go_back(progress.clone(), observation);
        assert_eq!(rollback, RollbackDecision::default());
        assert_eq!(decision, progress);
    }

    #[test]
    fn row7_an_undo_at_rest_is_a_rollout_starting() {
        let observation = RollbackObservation {
            undo: Some(UndoTarget::Previous),
            ..rolling_out_v2(Phase::Canary)
        };
        let at_rest = Decision::<MaxUnavailableAction> {
            done: true,
            ..Decision::hold(Phase::Successful)
        };
        let (decision, rollback) = go_back(at_rest.clone(), observation.clone());
        assert_eq!(decision.phase, Phase::Started);
        assert!(!decision.done);
        assert_eq!(
            rollback.start,
            Some((revision(1, "v1"), RollbackReason::Undo))
        );
        // Nothing asked: the decision is the table's, unchanged.
        let nothing = RollbackObservation {
            undo: None,
            ..observation
        };
        assert_eq!(go_back(at_rest.clone(), nothing).0, at_rest);
    }

    #[test]
    fn rolled_back_is_announced_once() {
        let v1 = revision(1, "v1");
        assert!(rolled_back_event("a", Some(Phase::RollingBack), Phase::RolledBack, &v1).is_some());
        assert!(rolled_back_event("a", Some(Phase::RolledBack), Phase::RolledBack, &v1).is_none());
        assert!(rolled_back_event("a", Some(Phase::Waiting), Phase::Successful, &v1).is_none());
    }
}
