//! The decision table: the sync gate (spec section 3), then the rows of section 4 with the TLS
//! rows of section 6, in the reference form or the fixed form.

use crate::decision::{
    DaemonSetWrite, Decision, Event, EventType, TemplateEdit, WriteKind, event_reason,
};
use crate::observation::{DriftSeen, Observation, PreviousPass, TlsFacts};
use crate::phase::{FailureReason, Phase};
use crate::strategy::{Compatibility, DriftPolicy, Strategy, StrategyError};

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
/// Order: strategy validation, the sync gate (no flag: a quiet, done, `successful` decision),
/// row 1 (`object_changed` starts the canary), then the reference rows (KubeVirt mode) or the
/// fixed rows (default). See the crate documentation and `docs/phases.md` for every row.
pub fn decide(strategy: &Strategy, observation: &Observation) -> Decision {
    held_on_request(strategy, decide_rows(strategy, observation), observation)
}

/// The rows, before the hold on request.
fn decide_rows(strategy: &Strategy, observation: &Observation) -> Decision {
    if let Err(error) = strategy.validate() {
        return invalid_strategy(&error, observation);
    }
    // A drift comes first, a retry's included: `Report` holds a failed rollout as it is
    // (read without its previous pass, the drift row would take the retry for a first pass and
    // call it `successful`: soak seed 11000003), and `Revert`'s start is the new rollout.
    if strategy.compatibility == Compatibility::Fixed
        && !observation.object_changed
        && let Some(drift) = &observation.drift
    {
        return drifted(strategy, observation, drift);
    }
    // Before every other row: a retry of a failed rollout forgets the failure, and the rows
    // decide as for a rollout toward the same target that has just started (a pod still
    // crash-looping fails it again at once). A retry of anything else changes nothing.
    if observation.retry
        && observation
            .previous
            .is_some_and(|previous| previous.phase == Phase::Failed)
    {
        let fresh = Observation {
            previous: None,
            retry: false,
            ..observation.clone()
        };
        return Decision {
            retried: true,
            ..decide_rows(strategy, &fresh)
        };
    }
    if !SyncFlags::of(strategy, observation).any() {
        return quiet(strategy, observation);
    }
    if observation.object_changed {
        return start(strategy, observation);
    }
    match strategy.compatibility {
        Compatibility::KubeVirt => reference_rows(strategy, observation),
        Compatibility::Fixed => fixed_rows(strategy, observation),
    }
}

/// The hold on request over the rows' decision ([`Observation::held`], the `pause` verb).
///
/// Held, a pass that would act (write, or supervise a rollout under way) is `paused` instead:
/// its write and the event announcing it are dropped, and a live DaemonSet still on
/// `RollingUpdate` gets the one [`WriteKind::Hold`] write, so the DaemonSet controller stops
/// replacing pods. A failure stays a failure, a rollout at rest stays `successful` (and its
/// DaemonSet on `RollingUpdate`: nothing is being replaced), and a drift kept as reported
/// (`Report`) is not written to. Once the hold is gone, a DaemonSet left on `OnDelete` by it
/// goes back to `RollingUpdate`: with the rows' own write when there is one (every write of
/// the desired DaemonSet sets `RollingUpdate`), else with a [`WriteKind::Resume`] write.
fn held_on_request(
    strategy: &Strategy,
    mut decision: Decision,
    observation: &Observation,
) -> Decision {
    let name = &observation.name;
    if !observation.held {
        if observation.hold_recorded {
            decision.hold_event = Some(resumed_event(name));
            // A drift announced while held is reverted now, as the start it is.
            let announced = observation.previous.is_some_and(|p| p.drifted);
            if announced
                && decision
                    .event
                    .as_ref()
                    .is_some_and(|event| event.reason == event_reason::DRIFT_DETECTED)
            {
                decision.event = start(strategy, observation).event;
            }
            if observation.live_on_hold && decision.write.is_none() && !decision.drifted {
                decision.write = Some(write(WriteKind::Resume, None, None));
            }
        }
        return decision;
    }
    decision.held = true;
    if !observation.hold_recorded {
        decision.hold_event = Some(paused_event(
            name,
            "the DaemonSet's pods are not replaced (updateStrategy OnDelete) and nothing else is written",
        ));
    }
    let acts = decision.write.is_some() || decision.phase.is_in_progress();
    if !acts || decision.phase == Phase::Failed {
        return decision;
    }
    let reported_drift = decision.drifted && decision.write.is_none();
    if decision.write.take().is_some() {
        // What the dropped write would have announced did not happen; a drift is announced
        // (once), its revert waits.
        decision.event = decision
            .event
            .filter(|event| {
                event.reason == event_reason::DRIFT_DETECTED
                    && !observation.previous.is_some_and(|p| p.drifted)
            })
            .map(|mut event| {
                event.message.push_str(" once the hold on request ends");
                event
            });
    }
    decision.record_generation = false;
    decision.done = false;
    decision.phase = Phase::Paused;
    if !observation.live_on_hold && !reported_drift {
        decision.write = Some(write(WriteKind::Hold, None, None));
    }
    decision
}

/// The `Paused` event of a hold on request; `what` says what stops (both drivers).
pub(crate) fn paused_event(name: &str, what: &str) -> Event {
    normal(
        event_reason::PAUSED,
        format!("daemonSet {name}: paused on request, {what} until it is resumed"),
    )
}

/// The `Resumed` event of the end of a hold on request (both drivers).
pub(crate) fn resumed_event(name: &str) -> Event {
    normal(
        event_reason::RESUMED,
        format!("daemonSet {name}: resumed on request, the rollout goes on"),
    )
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
        return invalid_strategy(&error, &observation);
    }
    match strategy.compatibility {
        Compatibility::KubeVirt => Decision {
            write: Some(write(WriteKind::Create, None, None)),
            record_generation: true,
            done: true,
            ..Decision::hold(Phase::Successful)
        },
        Compatibility::Fixed => Decision {
            write: Some(write(
                WriteKind::Create,
                Some(strategy.canary_max_unavailable),
                None,
            )),
            event: Some(normal(
                event_reason::ROLLOUT_STARTED,
                format!("daemonSet {name} created: started {}", rollout_of(version)),
            )),
            ..Decision::hold(Phase::Started)
        },
    }
}

/// The `Retried` event of a retry on request (both drivers).
pub fn retried_event(name: &str, version: &str) -> Event {
    normal(
        event_reason::RETRIED,
        format!(
            "daemonSet {name}: retrying {} from its first step on request",
            rollout_of(version)
        ),
    )
}

pub(crate) fn invalid_strategy(error: &StrategyError, observation: &Observation) -> Decision {
    let message = format!(
        "daemonSet {} has an invalid strategy: {error}",
        observation.name
    );
    let failure = FailureReason::InvalidStrategy;
    let event = (!repeats(observation.previous.as_ref(), Phase::Failed, Some(failure)))
        .then(|| warning(event_reason::INVALID_STRATEGY, message.clone()));
    Decision {
        failure: Some(failure),
        event,
        error: Some(message),
        ..Decision::hold(Phase::Failed)
    }
}

/// The live DaemonSet was changed by someone else (default table only; KubeVirt mode reverts
/// it unsupervised at its next row 3a or 4 write, spec quirk 5).
///
/// `Revert`: row 1 again, so the desired template goes back out with the canary
/// `maxUnavailable` and the pods the hand edit replaced come back one at a time, supervised.
/// `Report`: no write at all while the drift lasts (the rollout holds where it is), only the
/// event, once. Either way a change of the desired state (row 1) wins over the drift.
fn drifted(strategy: &Strategy, observation: &Observation, drift: &DriftSeen) -> Decision {
    let name = &observation.name;
    let already = observation.previous.is_some_and(|p| p.drifted);
    match strategy.drift_policy {
        DriftPolicy::Revert => Decision {
            event: Some(warning(
                event_reason::DRIFT_DETECTED,
                format!(
                    "daemonSet {name} was changed outside the controller ({}); reverting to the desired template, canary first",
                    drift.what
                ),
            )),
            drifted: true,
            ..start(strategy, observation)
        },
        DriftPolicy::Report => {
            // The rollout holds where it was: a failed one stays failed with its reason. A
            // configuration the previous pass could not act on (an invalid strategy or spec) is
            // valid now that this pass got here, and left no rollout to hold: as on a first pass.
            // So is the reference's UnexpectedState under the fixed table, which never gives it
            // (a status left by `compatibility: KubeVirt` before the switch to `Fixed`).
            let fixed = strategy.compatibility == Compatibility::Fixed;
            let previous = observation.previous.filter(|previous| {
                !(previous.phase == Phase::Failed
                    && match previous.failure {
                        Some(
                            FailureReason::InvalidStrategy
                            | FailureReason::InvalidSpec
                            | FailureReason::DaemonSetClaimed,
                        ) => true,
                        Some(FailureReason::UnexpectedState) => fixed,
                        _ => false,
                    })
            });
            let held = match previous {
                Some(previous) if previous.phase == Phase::Failed => {
                    stay_failed(observation, previous)
                }
                Some(previous) => Decision {
                    done: previous.phase == Phase::Successful,
                    ..Decision::hold(previous.phase)
                },
                None => Decision {
                    done: true,
                    ..Decision::hold(Phase::Successful)
                },
            };
            let event = (!already).then(|| {
                warning(
                    event_reason::DRIFT_DETECTED,
                    format!(
                        "daemonSet {name} was changed outside the controller ({}); left as it is (driftPolicy Report), nothing is written until the desired state changes",
                        drift.what
                    ),
                )
            });
            Decision {
                event,
                drifted: true,
                ..held
            }
        }
    }
}

/// Spec section 3 step 4: nothing to do. The default strategy reports the completion here,
/// the first pass that observes the resting state (kubevirt#18666).
fn quiet(strategy: &Strategy, observation: &Observation) -> Decision {
    let finished_a_rollout = observation
        .previous
        .is_some_and(|previous| previous.phase.is_in_progress());
    let event = (strategy.compatibility == Compatibility::Fixed && finished_a_rollout)
        .then(|| completed_event(observation));
    Decision {
        done: true,
        quiet: true,
        event,
        ..Decision::hold(Phase::Successful)
    }
}

/// Row 1. Never records the generation: the generation mismatch brings the next passes back.
fn start(strategy: &Strategy, observation: &Observation) -> Decision {
    Decision {
        write: Some(write(
            WriteKind::Start,
            Some(strategy.canary_max_unavailable),
            None,
        )),
        event: Some(normal(
            event_reason::ROLLOUT_STARTED,
            format!(
                "daemonSet {}: started {}",
                observation.name,
                rollout_of(&observation.version)
            ),
        )),
        ..Decision::hold(Phase::Started)
    }
}

/// Rows 2 to 5 as the reference has them, quirks included.
fn reference_rows(strategy: &Strategy, observation: &Observation) -> Decision {
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
            widen(strategy, observation)
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
            record_generation: true,
            event: Some(tls_event(observation, edit)),
            ..Decision::hold(Phase::Waiting)
        };
    }
    Decision {
        write: Some(write(
            WriteKind::Finish,
            Some(strategy.canary_max_unavailable),
            None,
        )),
        record_generation: true,
        done: true,
        event: Some(completed_event(observation)),
        ..Decision::hold(Phase::Successful)
    }
}

/// The rows with the reference quirks fixed; each fix names the KubeVirt issue it answers.
fn fixed_rows(strategy: &Strategy, observation: &Observation) -> Decision {
    if let Some(previous) = sticky_failure(observation) {
        return stay_failed(observation, previous);
    }
    // Fix of quirk 7: every updated pod is watched in every phase, so the rollout never widens
    // (and never finishes) with a crash-looping pod.
    if observation.crash_loop.is_some() {
        return crash_looping(strategy, observation);
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
    if ready == 0 {
        return hold(strategy, observation, Phase::Canary);
    }
    // Every desired pod runs the target already and some are not ready yet (a node that
    // joined after the last replacement, a pod restarting): a wider maxUnavailable would
    // replace nothing, and would cost two writes, the widen and its revert (soak seed
    // 34003139: a node added just after the finish write widened a finished rollout again).
    let old_pods_left = observation.updated_pods < desired;
    if old_pods_left
        && observation
            .live_max_unavailable
            .matches(strategy.canary_max_unavailable)
    {
        widen(strategy, observation)
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
            event: Some(tls_event(observation, edit)),
            ..Decision::hold(Phase::Started)
        };
    }
    Decision {
        write: Some(write(WriteKind::Finish, canary, None)),
        record_generation: true,
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
        record_generation: true,
        event: Some(normal(
            event_reason::ROLLOUT_WIDENED,
            format!(
                "daemonSet {}: canary of {} ready, maxUnavailable {fast}",
                observation.name,
                version_or_target(&observation.version)
            ),
        )),
        ..Decision::hold(Phase::Increasing)
    }
}

/// A pass with nothing to write, unless the progress deadline has passed.
fn hold(strategy: &Strategy, observation: &Observation, phase: Phase) -> Decision {
    match deadline_exceeded(strategy, observation) {
        Some(decision) => decision,
        None => Decision::hold(phase),
    }
}

/// No progress: the previous pass was in progress, the ready count did not move, and the time
/// since the phase started or the count last moved is over the deadline.
pub(crate) fn deadline_exceeded(
    strategy: &Strategy,
    observation: &Observation,
) -> Option<Decision> {
    let deadline = strategy.progress_deadline?;
    let previous = observation.previous?;
    // Time held on request (`paused`) is no stall: the deadline runs again from the resume.
    let stalled = previous.phase.is_in_progress()
        && previous.phase != Phase::Paused
        && previous.updated_ready == observation.updated_ready_pods
        && previous.since_progress > deadline;
    if !stalled {
        return None;
    }
    let message = format!(
        "daemonSet {}: {} made no progress in phase {} for {}s (deadline {}s): {} of {} {} updated and ready",
        observation.name,
        rollout_of(&observation.version),
        previous.phase,
        previous.since_progress.as_secs(),
        deadline.as_secs(),
        observation.updated_ready_pods,
        observation.desired_pods,
        if observation.desired_pods == 1 {
            "pod"
        } else {
            "pods"
        },
    );
    Some(failed(
        observation,
        FailureReason::ProgressDeadlineExceeded,
        event_reason::PROGRESS_DEADLINE_EXCEEDED,
        message,
    ))
}

/// Row 2's failure. KubeVirt mode repeats the reference's message and event on every pass;
/// the default strategy names the pod and emits the event once per failure.
fn crash_looping(strategy: &Strategy, observation: &Observation) -> Decision {
    let name = &observation.name;
    let failure = FailureReason::CanaryCrashLooping;
    match (strategy.compatibility, &observation.crash_loop) {
        (Compatibility::Fixed, Some(seen)) => failed(
            observation,
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
                event: Some(warning(event_reason::FAILED_UPDATE, message.clone())),
                error: Some(message),
                ..Decision::hold(Phase::Failed)
            }
        }
    }
}

/// A failed decision whose Warning event is emitted only on the transition into it.
pub(crate) fn failed(
    observation: &Observation,
    failure: FailureReason,
    reason: &'static str,
    message: String,
) -> Decision {
    let event = (!repeats(observation.previous.as_ref(), Phase::Failed, Some(failure)))
        .then(|| warning(reason, message.clone()));
    Decision {
        failure: Some(failure),
        event,
        error: Some(message),
        ..Decision::hold(Phase::Failed)
    }
}

/// The default strategy keeps a rollout failure until the target changes (row 1 restarts).
/// A rejected write or an invalid strategy is not sticky: see [`FailureReason::is_sticky`].
pub(crate) fn sticky_failure(observation: &Observation) -> Option<PreviousPass> {
    observation.previous.filter(|previous| {
        previous.phase == Phase::Failed && previous.failure.is_none_or(FailureReason::is_sticky)
    })
}

pub(crate) fn stay_failed(observation: &Observation, previous: PreviousPass) -> Decision {
    let failure = previous
        .failure
        .unwrap_or(FailureReason::CanaryCrashLooping);
    Decision {
        failure: Some(failure),
        error: Some(format!(
            "daemonSet {}: {} failed ({failure}); it stays failed until the target changes",
            observation.name,
            rollout_of(&observation.version)
        )),
        ..Decision::hold(Phase::Failed)
    }
}

pub(crate) fn repeats(
    previous: Option<&PreviousPass>,
    phase: Phase,
    failure: Option<FailureReason>,
) -> bool {
    previous.is_some_and(|previous| previous.phase == phase && previous.failure == failure)
}

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

pub(crate) fn completed_event(observation: &Observation) -> Event {
    normal(
        event_reason::ROLLOUT_COMPLETED,
        format!(
            "daemonSet {}: {} complete, every pod updated and ready",
            observation.name,
            rollout_of(&observation.version)
        ),
    )
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

/// `rollout of v1.9.4`, or `rollout` when the version is not known. Every message of a
/// rollout names its version, so that two rollouts' events read apart (`kubectl get events`).
pub(crate) fn rollout_of(version: &str) -> String {
    if version.is_empty() {
        "rollout".to_owned()
    } else {
        format!("rollout of {version}")
    }
}

/// `v1.9.4`, or `the target` when the version is not known.
pub(crate) fn version_or_target(version: &str) -> &str {
    if version.is_empty() {
        "the target"
    } else {
        version
    }
}

pub(crate) fn normal(reason: &'static str, message: String) -> Event {
    Event {
        type_: EventType::Normal,
        reason,
        message,
    }
}

pub(crate) fn warning(reason: &'static str, message: String) -> Event {
    Event {
        type_: EventType::Warning,
        reason,
        message,
    }
}
