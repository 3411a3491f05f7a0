//! The MaxUnavailable driver's table: the sync gate (spec section 3), then the rows of
//! section 4 with the TLS rows of section 6, in the reference form or the fixed form. The
//! rows both drivers share (invalid strategy, drift, retry, the start, the hold on request,
//! the sticky failure, the progress deadline) are the life cycle's
//! ([`lifecycle`](crate::lifecycle)); this table keeps the rows of a rollout that the
//! DaemonSet controller makes, steered through `maxUnavailable`.

use std::borrow::Cow;
use std::time::Duration;

use crate::analysis::{AnalysisVerdict, StepAnalysis};
use crate::decision::{DaemonSetWrite, Event, TemplateEdit, WriteKind, event_reason};
use crate::health::soak_left;
use crate::lifecycle::rows::{
    analysis_failed, analysis_inconclusive, deadline_exceeded, failed, health_failed, invalid,
    stay_failed, sticky,
};
use crate::lifecycle::{
    self, Decision, Life, MaxUnavailableAction, Row, Table, completed_event, normal, rollout_of,
    version_or_target, warning,
};
use crate::observation::{Observation, PreviousPass, TlsFacts};
use crate::phase::{FailureReason, Phase};
use crate::strategy::{Compatibility, Strategy, StrategyError};

/// The three flags of the sync gate (spec section 3, step 3). No flag set: nothing to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SyncFlags {
    /// Desired metadata/spec differs from live: the only flag that starts a canary.
    pub object_changed: bool,
    /// The live generation is not the recorded one (a write of ours not yet recorded, or an
    /// out-of-band edit). Never restarts the canary on its own.
    pub generation_unknown: bool,
    /// The live `maxUnavailable` is not the resting value. KubeVirt mode: Go `IntValue() != 1`
    /// (quirk 3). Default strategy: not literally equal to the canary value.
    pub ongoing_rollout: bool,
}

impl SyncFlags {
    /// Computes the flags for an observation under a strategy.
    pub fn of(strategy: &Strategy, observation: &Observation) -> Self {
        let live = &observation.live_max_unavailable;
        let ongoing_rollout = match strategy.compatibility {
            Compatibility::KubeVirt => live.reference_int_value() != 1,
            Compatibility::Fixed => !live.matches(strategy.canary_max_unavailable),
        };
        SyncFlags {
            object_changed: observation.object_changed,
            generation_unknown: !observation.generation_known,
            ongoing_rollout,
        }
    }

    /// True when at least one flag is set, i.e. the pass goes into the canary flow.
    pub fn any(self) -> bool {
        self.object_changed || self.generation_unknown || self.ongoing_rollout
    }
}

/// Decides one pass of the canary upgrade of one DaemonSet. Pure: no I/O, no clock.
///
/// The shared life cycle ([`lifecycle`](crate::lifecycle)) runs its rows around this driver's
/// own: strategy validation, a drift, a retry, row 1 (`object_changed` starts the canary), then
/// the sync gate (no flag: a quiet, done, `successful` decision) and the reference rows
/// (KubeVirt mode) or the fixed rows (default), then the hold on request. See the crate
/// documentation and `docs/phases.md` for every row.
pub fn decide(strategy: &Strategy, observation: &Observation) -> Decision {
    let decision = lifecycle::decide(
        strategy,
        &Steer {
            strategy,
            observation: Cow::Borrowed(observation),
        },
    );
    hold_once_surges_settle(decision, observation)
}

/// How soon a hold deferred by `hold_once_surges_settle` is looked at again at the latest
/// (the pod events of the settling nodes bring a pass sooner).
pub const SURGE_SETTLE_RECHECK: Duration = Duration::from_secs(2);

/// Issue 50: with surge, the hold's `OnDelete` (a failure, a pause, a hold on request) waits
/// while a node has a pod that is not ready beside a younger one
/// ([`Observation::surge_unsettled_nodes`]). Under `OnDelete` the DaemonSet controller keeps
/// the oldest pod of a node and deletes the others: it would take such a node's only ready
/// pod away (a rollback's surged good pod beside its crash-looping one). Meanwhile the
/// DaemonSet controller, still surging, deletes those old pods itself; the pass comes back
/// to write the hold then. A pair whose older pod is ready is safe: the node keeps it.
fn hold_once_surges_settle(mut decision: Decision, observation: &Observation) -> Decision {
    let holds = decision
        .write
        .as_ref()
        .is_some_and(|write| write.kind == WriteKind::Hold);
    if observation.surge && holds && observation.surge_unsettled_nodes.unwrap_or(0) > 0 {
        decision.write = None;
        decision.action.keeps_hold = false;
        decision.action.wake_after = Some(
            decision
                .action
                .wake_after
                .map_or(SURGE_SETTLE_RECHECK, |wake| wake.min(SURGE_SETTLE_RECHECK)),
        );
    }
    decision
}

/// The MaxUnavailable driver's table, as the life cycle runs it: it steers the DaemonSet
/// controller's own rollout.
struct Steer<'a> {
    strategy: &'a Strategy,
    observation: Cow<'a, Observation>,
}

impl Table for Steer<'_> {
    type Action = MaxUnavailableAction;

    fn life(&self) -> Life<'_> {
        let observation = &*self.observation;
        Life {
            // Only the default table reads a drift (KubeVirt mode reverts it unsupervised at
            // its next row 3a or 4 write, spec quirk 5).
            drift: observation
                .drift
                .as_ref()
                .filter(|_| self.strategy.compatibility == Compatibility::Fixed),
            ..life_of(observation)
        }
    }

    fn validate(&self, strategy: &Strategy) -> Result<(), StrategyError> {
        strategy.validate()
    }

    fn start_write(&self, strategy: &Strategy) -> DaemonSetWrite {
        write(
            WriteKind::Start,
            Some(strategy.canary_max_unavailable),
            None,
        )
    }

    fn action(&self, _row: Row) -> MaxUnavailableAction {
        MaxUnavailableAction::default()
    }

    fn forget_failure(&self) -> Self {
        Steer {
            strategy: self.strategy,
            observation: Cow::Owned(Observation {
                previous: None,
                retry: false,
                ..self.observation.as_ref().clone()
            }),
        }
    }

    fn progress(&self, strategy: &Strategy) -> Decision {
        if !SyncFlags::of(strategy, &self.observation).any() {
            return at_rest(strategy, &self.observation);
        }
        let decision = match strategy.compatibility {
            Compatibility::KubeVirt => reference_rows(strategy, &self.observation),
            Compatibility::Fixed => fixed_rows(strategy, &self.observation),
        };
        announce_inconclusive_canary(strategy, &self.observation, decision)
    }
}

/// Issue 46: a canary whose analysis became inconclusive past its limit is announced once
/// (a Warning), whatever holds it in this pass (its soak, its readiness, its analysis).
fn announce_inconclusive_canary(
    strategy: &Strategy,
    observation: &Observation,
    mut decision: Decision,
) -> Decision {
    if decision.phase == Phase::Canary {
        decision.events.extend(analysis_inconclusive(
            &observation.name,
            measured(strategy, observation),
            "the canary",
            "the widen waits for a conclusive measurement",
        ));
    }
    decision
}

/// Decides the create path (spec section 3, step 2): the DaemonSet does not exist yet.
///
/// KubeVirt mode creates the desired DaemonSet as it is, records the generation and reports
/// done at once (quirk 10). The default strategy creates it with the canary `maxUnavailable`
/// and does **not** record the generation, so the following passes supervise the new pods
/// (crash check, progress deadline) and report done only once every pod is ready and the
/// resting state is observed (kubevirt#18666).
///
/// `version` is the target version, named in the event (`"started rollout of v1.9.4"`).
pub fn decide_create(strategy: &Strategy, name: &str, version: &str) -> Decision {
    if let Err(error) = strategy.validate() {
        let observation = Observation {
            name: name.to_owned(),
            version: version.to_owned(),
            ..Observation::default()
        };
        let table = Steer {
            strategy,
            observation: Cow::Owned(observation),
        };
        return invalid(&error, &table.life());
    }
    match strategy.compatibility {
        Compatibility::KubeVirt => Decision {
            write: Some(write(WriteKind::Create, None, None)),
            done: true,
            action: recorded(),
            ..Decision::hold(Phase::Successful)
        },
        Compatibility::Fixed => Decision {
            write: Some(write(
                WriteKind::Create,
                Some(strategy.canary_max_unavailable),
                None,
            )),
            events: vec![normal(
                event_reason::ROLLOUT_STARTED,
                format!("daemonSet {name} created: started {}", rollout_of(version)),
            )],
            ..Decision::hold(Phase::Started)
        },
    }
}

/// The action of a pass that records the DaemonSet generation.
fn recorded() -> MaxUnavailableAction {
    MaxUnavailableAction {
        record_generation: true,
        ..MaxUnavailableAction::default()
    }
}

/// The sync gate found nothing to do (spec section 3 step 4), unless the health gates speak
/// (issue 46, no row of the reference): at rest the DaemonSet controller catches up a node
/// that recovered after the rollout ended `successful` (a late update); one that the release
/// breaks within its window fails the generation, with the hold's `OnDelete` so that no
/// further pod of the release is replaced, and the failure stays until the target changes.
fn at_rest(strategy: &Strategy, observation: &Observation) -> Decision {
    let life = life_of(observation);
    if let Some(previous) = sticky_health_failure(&life) {
        return stay_failed(&life, previous);
    }
    let rested = observation
        .health
        .as_ref()
        .is_some_and(|facts| facts.rested_since.is_some());
    let successful = observation
        .previous
        .is_some_and(|previous| previous.phase == Phase::Successful);
    if rested
        && successful
        && let Some(failure) = health_failed(&life)
    {
        return stop_replacing(failure, observation);
    }
    quiet(strategy, observation)
}

/// The previous pass's sticky failure when a health gate decided it (issue 46): it stays, where
/// the resting and the reference rows would otherwise look at the rollout afresh.
fn sticky_health_failure(life: &Life<'_>) -> Option<PreviousPass> {
    sticky(life).filter(|previous| {
        matches!(
            previous.failure,
            Some(FailureReason::NodeUnhealthy | FailureReason::NeighboursDisrupted)
        )
    })
}

/// Spec section 3 step 4: nothing to do. The default strategy reports the completion here,
/// the first pass that observes the resting state (kubevirt#18666).
fn quiet(strategy: &Strategy, observation: &Observation) -> Decision {
    let finished_a_rollout = observation
        .previous
        .is_some_and(|previous| previous.phase.is_in_progress());
    let event = (strategy.compatibility == Compatibility::Fixed && finished_a_rollout)
        .then(|| completed_event(&observation.name, &observation.version));
    Decision {
        done: true,
        events: event.into_iter().collect(),
        action: MaxUnavailableAction {
            quiet: true,
            ..MaxUnavailableAction::default()
        },
        ..Decision::hold(Phase::Successful)
    }
}

/// Rows 2 to 5 as the reference has them, quirks included.
fn reference_rows(strategy: &Strategy, observation: &Observation) -> Decision {
    // The health gates (issue 46) are no row of the reference: with them, a node broken after
    // its update fails the rollout here too, and the failure stays (the reference table
    // re-evaluates every failure, which would widen once the node left the window).
    let life = life_of(observation);
    if let Some(previous) = sticky_health_failure(&life) {
        return stay_failed(&life, previous);
    }
    if let Some(failure) = health_failed(&life) {
        return stop_replacing(failure, observation);
    }
    // Issue 46: so is a failed analysis, and it stays too.
    if let Some(previous) =
        sticky(&life).filter(|p| p.failure == Some(FailureReason::AnalysisFailed))
    {
        return stay_failed(&life, previous);
    }
    if let Some(failure) = analysis_failed(
        &life,
        measured(strategy, observation),
        &place(strategy, observation),
    ) {
        return stop_replacing(failure, observation);
    }
    let ready = observation.updated_ready_pods;
    let desired = observation.desired_pods;
    if ready == 0 {
        // Row 2, also for desired == 0 (quirk 1); the crash check only lives here (quirk 7).
        return match observation.crash_loop {
            Some(_) => crash_looping(strategy, observation),
            None => hold(strategy, observation, Phase::Canary),
        };
    }
    if ready < desired {
        return if observation.live_max_unavailable.reference_int_value() == 1 {
            widen_when_proven(strategy, observation)
        } else {
            hold(strategy, observation, Phase::Waiting)
        };
    }
    if ready == desired {
        return reference_finish(strategy, observation);
    }
    // Row 5 (quirk 2): misscheduled or terminating pods, or a stale status.
    Decision {
        failure: Some(FailureReason::UnexpectedState),
        error: Some(format!(
            "unexpected canary upgrade state: updatedAndReadyPods={ready}, desiredReadyPods={desired}"
        )),
        ..Decision::hold(Phase::Failed)
    }
}

/// Row 4, or the TLS step that replaces it. Done in the same pass as the revert (quirk 10);
/// TLS steps record the generation at the desired `rollingUpdate`, so the re-roll they cause
/// runs unsupervised (quirk 16).
fn reference_finish(strategy: &Strategy, observation: &Observation) -> Decision {
    if let Some(edit) = observation.tls.and_then(tls_step) {
        return Decision {
            write: Some(write(WriteKind::TlsStep, None, Some(edit))),
            events: vec![tls_event(observation, edit)],
            action: recorded(),
            ..Decision::hold(Phase::Waiting)
        };
    }
    Decision {
        write: Some(write(
            WriteKind::Finish,
            Some(strategy.canary_max_unavailable),
            None,
        )),
        done: true,
        events: vec![completed_event(&observation.name, &observation.version)],
        action: recorded(),
        ..Decision::hold(Phase::Successful)
    }
}

/// The rows with the reference quirks fixed; each fix names the KubeVirt issue it answers.
fn fixed_rows(strategy: &Strategy, observation: &Observation) -> Decision {
    let life = life_of(observation);
    if let Some(previous) = sticky(&life) {
        let stays = stay_failed(&life, previous);
        // With surge a failure's hold may have waited for the nodes to settle
        // ([`hold_once_surges_settle`]): written by a later pass of the failure.
        let held_by_failure = matches!(
            previous.failure,
            Some(
                FailureReason::NodeUnhealthy
                    | FailureReason::NeighboursDisrupted
                    | FailureReason::AnalysisFailed
            )
        );
        return if observation.surge && held_by_failure && observation.drift.is_none() {
            stop_replacing(stays, observation)
        } else {
            stays
        };
    }
    // Fix of quirk 7: every updated pod is watched in every phase, so the rollout never widens
    // (and never finishes) with a crash-looping pod.
    if observation.crash_loop.is_some() {
        return crash_looping(strategy, observation);
    }
    // Issue 46: a node broken after its update fails the rollout before anything widens,
    // and so does a failed analysis, at any time of the rollout.
    if let Some(failure) = health_failed(&life) {
        return stop_replacing(failure, observation);
    }
    if let Some(failure) = analysis_failed(
        &life,
        measured(strategy, observation),
        &place(strategy, observation),
    ) {
        return stop_replacing(failure, observation);
    }
    let ready = observation.updated_ready_pods;
    let desired = observation.desired_pods;
    // Counts from before the DaemonSet controller saw our last write describe the old template.
    if !observation.rollout_observed {
        let phase = if ready == 0 {
            Phase::Canary
        } else {
            Phase::Waiting
        };
        return hold(strategy, observation, phase);
    }
    // Fix of quirk 2 (kubevirt#10254): misscheduled or terminating pods, or a stale status, can
    // put more updated pods than desired. That is no failure, and no stall either: the rollout
    // finishes once the DaemonSet itself reports every desired pod on its template and
    // available, and waits (without a progress deadline, the count cannot move) until then.
    if ready > desired {
        return if observation.daemon_set_rolled_out {
            fixed_finish(strategy, observation)
        } else {
            Decision::hold(Phase::Waiting)
        };
    }
    // Fix of quirk 1: desired == 0 means nothing to update, which is a finished rollout.
    if ready == desired {
        return fixed_finish(strategy, observation);
    }
    // Issue 46: the canary soaks with the DaemonSet controller held (`OnDelete`): at
    // maxUnavailable 1 it would replace the next pod as soon as the canary is available.
    if let Some(decision) = soak_held(strategy, observation) {
        return decision;
    }
    // No pod of the target and the DaemonSet on `OnDelete`: nothing would ever be replaced,
    // and the canary would wait for its progress deadline. That is the hold of a failure a
    // `retry` forgot when the failure's `OnDelete` took the canary away (with surge the
    // DaemonSet controller keeps a node's oldest pod: soak seed 48000024, a retry after a
    // failed analysis, `failed` on the deadline with 0 of 250 pods updated), or a soak's hold
    // whose canary went with its node. The canary's strategy goes back, as a start writes it.
    // Not over a hold on request: row 6 keeps it, and its end writes `RollingUpdate` back.
    if observation.live_on_hold
        && !observation.held
        && !observation.hold_recorded
        && observation.updated_pods == 0
        && observation.old_pods > 0
    {
        let decision = hold(strategy, observation, Phase::Canary);
        if decision.phase == Phase::Failed {
            return decision;
        }
        return Decision {
            write: Some(write(
                WriteKind::Start,
                Some(strategy.canary_max_unavailable),
                None,
            )),
            ..decision
        };
    }
    if ready == 0 {
        return hold(strategy, observation, Phase::Canary);
    }
    // Every desired pod runs the target already and some are not ready yet (a node that
    // joined after the last replacement, a pod restarting): a wider maxUnavailable would
    // replace nothing, and would cost two writes, the widen and its revert (soak seed
    // 34003139: a node added just after the finish write widened a finished rollout again).
    // With surge the surged pods count as updated beside the old ones they replace: an old
    // pod left is the sign (2 nodes: the canary's handover surges the other at once).
    let old_pods_left =
        observation.updated_pods < desired || (observation.surge && observation.old_pods > 0);
    if old_pods_left
        && observation
            .live_max_unavailable
            .matches(strategy.canary_max_unavailable)
    {
        // The canary has soaked and its analysis passed (`soak_held` above), or nothing
        // holds it.
        widen_when_proven(strategy, observation)
    } else {
        hold(strategy, observation, Phase::Waiting)
    }
}

/// Row 4 fixed. The revert is written and recorded, but done waits for the next pass to observe
/// the resting state through the quiet gate (kubevirt#18666), so this pass reports `waiting`:
/// in the default strategy `successful` always comes with done. A TLS step goes out with the
/// canary `maxUnavailable` and is not recorded, so its re-roll is a supervised canary rollout
/// of its own (fix of quirk 16).
fn fixed_finish(strategy: &Strategy, observation: &Observation) -> Decision {
    let canary = Some(strategy.canary_max_unavailable);
    if let Some(edit) = observation.tls.and_then(tls_step) {
        return Decision {
            write: Some(write(WriteKind::TlsStep, canary, Some(edit))),
            events: vec![tls_event(observation, edit)],
            ..Decision::hold(Phase::Started)
        };
    }
    Decision {
        write: Some(write(WriteKind::Finish, canary, None)),
        action: recorded(),
        ..Decision::hold(Phase::Waiting)
    }
}

/// The next TLS completion step (spec section 6), or `None` when the rollout may finish
/// normally. Reference order: the flag first (the live DaemonSet is supported and lacks it),
/// then the detach (supported and the desired template still has the certificate volume).
///
/// Only ask once the current rollout is complete and observed (every desired pod updated and
/// ready): that is what guarantees the secret is detached only after every pod runs with the
/// flag. [`decide`] asks at exactly that point; `canary-tls-migration` applies the edit.
pub fn tls_step(facts: TlsFacts) -> Option<TemplateEdit> {
    if !facts.supported {
        None
    } else if !facts.live_has_flag {
        Some(TemplateEdit::InsertTlsFlag)
    } else if facts.desired_has_cert_volume {
        Some(TemplateEdit::DetachCertSecret)
    } else {
        None
    }
}

/// Row 3a: the canary is ready, widen to the fast value and record the generation.
fn widen(strategy: &Strategy, observation: &Observation) -> Decision {
    let fast = strategy.fast_max_unavailable;
    Decision {
        write: Some(write(WriteKind::Widen, Some(fast), None)),
        events: vec![normal(
            event_reason::ROLLOUT_WIDENED,
            format!(
                "daemonSet {}: canary of {} ready, maxUnavailable {fast}",
                observation.name,
                version_or_target(&observation.version)
            ),
        )],
        action: recorded(),
        ..Decision::hold(Phase::Increasing)
    }
}

/// The analysis stretch of a MaxUnavailable rollout, as [`Observation::analysis`] names it:
/// 0 while the canary value steers the DaemonSet controller and old pods are left (the
/// canary's analysis, which the widen waits for), 1 once widened (measured on until the end).
/// The caller keys its measurements by it, so a widen starts fresh counts.
pub fn analysis_step(strategy: &Strategy, observation: &Observation) -> u32 {
    if at_canary_value(strategy, observation) && observation.updated_pods < observation.desired_pods
    {
        ANALYSIS_CANARY
    } else {
        ANALYSIS_WIDENED
    }
}

/// The live `maxUnavailable` is the canary (and resting) value, as the table reads it: the
/// rollout is not widened, or its finish is written.
pub fn at_canary_value(strategy: &Strategy, observation: &Observation) -> bool {
    let live = &observation.live_max_unavailable;
    match strategy.compatibility {
        Compatibility::KubeVirt => live.reference_int_value() == 1,
        Compatibility::Fixed => live.matches(strategy.canary_max_unavailable),
    }
}

/// [`analysis_step`] of the canary's analysis.
pub const ANALYSIS_CANARY: u32 = 0;
/// [`analysis_step`] of the widened rollout's analysis.
pub const ANALYSIS_WIDENED: u32 = 1;

/// The observed analysis when it is of the stretch the rollout is in; a stretch not measured
/// yet is pending. `None` without analysis.
fn measured<'o>(strategy: &Strategy, observation: &'o Observation) -> Option<&'o StepAnalysis> {
    observation
        .analysis
        .as_ref()
        .filter(|a| a.step == analysis_step(strategy, observation))
}

/// The stretch, in words, for events and messages.
fn place(strategy: &Strategy, observation: &Observation) -> String {
    if analysis_step(strategy, observation) == ANALYSIS_CANARY {
        "the canary".to_owned()
    } else {
        "the widened rollout".to_owned()
    }
}

/// Row 3a behind the issue 46 gates, which both hold the widen: the canary soaks (the health
/// gates' `canarySoak`) and its analysis passes (every metric passed once, `spec.analysis`).
/// Missing data holds it (`Pending`, `Inconclusive`, announced by
/// [`announce_inconclusive_canary`]); nothing is written meanwhile. The first gate not met
/// says when to come back.
fn widen_when_proven(strategy: &Strategy, observation: &Observation) -> Decision {
    if let Some(left) = observation.health.as_ref().and_then(soak_left) {
        return soaking(strategy, observation, left);
    }
    if observation.analysis.is_none() {
        return widen(strategy, observation);
    }
    if measured(strategy, observation).is_some_and(|a| a.verdict == AnalysisVerdict::Passing) {
        return widen(strategy, observation);
    }
    // Missing data holds it; the next measurement brings a pass.
    hold(strategy, observation, Phase::Canary)
}

/// A pass with nothing to write, unless the progress deadline has passed.
fn hold(strategy: &Strategy, observation: &Observation, phase: Phase) -> Decision {
    let life = life_of(observation);
    deadline_exceeded(
        strategy,
        &life,
        observation.updated_ready_pods,
        observation.desired_pods,
    )
    .unwrap_or_else(|| Decision::hold(phase))
}

/// A failure of the health gates stops the DaemonSet controller too: a node broken by the
/// release may keep its pod ready (a `NetworkUnavailable` node), and at `maxUnavailable` 1
/// the DaemonSet controller would go on to the next node by itself. The failure carries the
/// hold's write (`OnDelete`), as the `pause` verb's; the next rollout's start (a new target,
/// a retry, a rollback) writes `RollingUpdate` back with its template.
fn stop_replacing(mut failure: Decision, observation: &Observation) -> Decision {
    if !observation.live_on_hold {
        failure.write = Some(DaemonSetWrite {
            kind: WriteKind::Hold,
            max_unavailable: None,
            template_edit: None,
        });
    }
    failure
}

/// The canary held under the MaxUnavailable driver (issue 46): once the canary's pod exists
/// and other pods are still old, the DaemonSet is put on `OnDelete` (the hold's write) until
/// the widen may be written: the canary has been ready for the soak (`spec.health`), and its
/// analysis passes (`spec.analysis`). Never while no pod is old: a DaemonSet just created has
/// nothing to hold back. The widen's write (the desired DaemonSet, `RollingUpdate` at the fast
/// `maxUnavailable`) ends it. A DaemonSet on `OnDelete` already (this hold's earlier pass, or
/// a hold on request) is kept so: nothing written, and the end of a hold on request writes no
/// `RollingUpdate` that this hold would undo ([`MaxUnavailableAction::keeps_hold`]). `None`
/// when nothing holds the widen.
fn soak_held(strategy: &Strategy, observation: &Observation) -> Option<Decision> {
    let old_pods_left = observation.updated_pods > 0
        && (observation.updated_pods < observation.desired_pods || observation.surge)
        && observation.old_pods > 0
        && observation
            .live_max_unavailable
            .matches(strategy.canary_max_unavailable);
    if !old_pods_left {
        return None;
    }
    let soak = observation.health.as_ref().filter(|facts| {
        !facts.policy.canary_soak.is_zero()
            && (facts.canary_ready_since.is_none() || soak_left(facts).is_some())
    });
    let unproven = observation.analysis.is_some()
        && !measured(strategy, observation).is_some_and(|a| a.verdict == AnalysisVerdict::Passing);
    if soak.is_none() && !unproven {
        return None;
    }
    let decision = hold(strategy, observation, Phase::Canary);
    if decision.phase == Phase::Failed {
        return Some(decision);
    }
    // With surge (issue 50) the soak holds the DaemonSet controller only once the canary has
    // its node to itself: under `OnDelete` it deletes the younger of two pods on a node, the
    // new one, which is the canary itself while it soaks beside its old pod. Once that old
    // pod is gone, the nodes then surging lose only their new pod and keep the old, ready one
    // (a node whose oldest pod is not ready waits: `hold_once_surges_settle`). Until then the
    // widen waits, and the DaemonSet controller may only surge the canary's node.
    if observation.surge
        && !observation.live_on_hold
        && observation.surge_canary_alone != Some(true)
    {
        return Some(Decision {
            action: MaxUnavailableAction {
                wake_after: soak.and_then(soak_left),
                ..MaxUnavailableAction::default()
            },
            ..decision
        });
    }
    Some(Decision {
        write: (!observation.live_on_hold).then_some(DaemonSetWrite {
            kind: WriteKind::Hold,
            max_unavailable: None,
            template_edit: None,
        }),
        action: MaxUnavailableAction {
            wake_after: soak.and_then(soak_left),
            keeps_hold: true,
            ..MaxUnavailableAction::default()
        },
        ..decision
    })
}

/// The canary soaks (issue 46): `canary`, nothing written, back when the soak ends.
fn soaking(strategy: &Strategy, observation: &Observation, left: Duration) -> Decision {
    let decision = hold(strategy, observation, Phase::Canary);
    if decision.phase == Phase::Failed {
        return decision;
    }
    Decision {
        action: MaxUnavailableAction {
            wake_after: Some(left),
            ..MaxUnavailableAction::default()
        },
        ..decision
    }
}

/// Row 2's failure. KubeVirt mode repeats the reference's message and event on every pass;
/// the default strategy names the pod and emits the event once per failure.
fn crash_looping(strategy: &Strategy, observation: &Observation) -> Decision {
    let name = &observation.name;
    let failure = FailureReason::CanaryCrashLooping;
    match (strategy.compatibility, &observation.crash_loop) {
        (Compatibility::Fixed, Some(seen)) => failed(
            &life_of(observation),
            failure,
            event_reason::FAILED_UPDATE,
            format!(
                "daemonSet {name}: {} failed: updated pod {} is crash-looping ({})",
                rollout_of(&observation.version),
                seen.pod,
                seen.reason
            ),
        ),
        _ => {
            let message = format!("daemonSet {name} rollout failed");
            Decision {
                failure: Some(failure),
                events: vec![warning(event_reason::FAILED_UPDATE, message.clone())],
                error: Some(message),
                ..Decision::hold(Phase::Failed)
            }
        }
    }
}

/// What the shared rows read of `observation`, for this driver's rows that call them.
fn life_of(observation: &Observation) -> Life<'_> {
    Life {
        name: &observation.name,
        version: &observation.version,
        previous: observation.previous,
        changed: observation.object_changed,
        drift: observation.drift.as_ref(),
        retry: observation.retry,
        held: observation.held,
        hold_recorded: observation.hold_recorded,
        live_on_hold: Some(observation.live_on_hold),
        held_stops: HELD_STOPS,
        report_stops: REPORT_STOPS,
        pods_rows: false,
        health: observation.health.as_ref(),
    }
}

/// What a held pass of this driver stops, as its `Paused` event says it.
const HELD_STOPS: &str =
    "the DaemonSet's pods are not replaced (updateStrategy OnDelete) and nothing else is written";

/// What a drift kept as it is (`Report`) stops, as its event says it.
const REPORT_STOPS: &str = "nothing is written";

fn write(
    kind: WriteKind,
    max_unavailable: Option<crate::MaxUnavailable>,
    template_edit: Option<TemplateEdit>,
) -> DaemonSetWrite {
    DaemonSetWrite {
        kind,
        max_unavailable,
        template_edit,
    }
}

fn tls_event(observation: &Observation, edit: TemplateEdit) -> Event {
    let step = match edit {
        TemplateEdit::InsertTlsFlag => "inserting the TLS flag",
        TemplateEdit::DetachCertSecret => "detaching the client certificate secret",
    };
    normal(
        event_reason::TLS_MIGRATION_STEP,
        format!(
            "daemonSet {} at {}: {step}",
            observation.name,
            version_or_target(&observation.version)
        ),
    )
}
