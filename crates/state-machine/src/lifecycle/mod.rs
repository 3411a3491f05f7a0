//! The life cycle of a rollout, written once for both drivers: the rows they share, the order
//! they run in, and the one shape of a decision.
//!
//! A driver owns how it observes the cluster and how a rollout makes progress: the
//! MaxUnavailable driver's table steers the DaemonSet controller through `maxUnavailable`
//! (`decide.rs`), the Pods driver's walks its steps and deletes pods (`pods/`). Everything else a
//! rollout goes through is decided here, for both, as rows that name their reason:
//!
//! | order | row | when | decides |
//! |---|---|---|---|
//! | 1 | invalid | the strategy (or the driver's own settings) does not validate | `failed` (`InvalidStrategy`), nothing written |
//! | 2 | drift | someone else changed the live template (`Fixed` only) | `Revert`: the start again, canary first (a sticky failure: the template written back under the failure's hold, still `failed`); `Report`: hold where the rollout was, announced once |
//! | 3 | retry | `retry` of a failed rollout | the rows again, the failure and its step forgotten (`Retried`) |
//! | 4 | start | the desired template changed | its write, `started` |
//! | 5 | *progress* | otherwise | the driver's own rows, which call the shared ones below where they apply |
//! | 6 | hold | the `pause` verb | a pass that would act is `paused`, its write and its driver's action dropped |
//! | 7 | going back | the `abort` and `undo` verbs, `onFailure: Rollback` after a failure that says something about the version | [`go_back`]: the rollback starts, its write and its driver's action dropped; the caller records it and writes the revision's template at once |
//!
//! The rows a driver's progress calls at its place: `rows::sticky` (a failure that says
//! something about the version stays until the target changes), `deadline` (no progress within
//! the progress deadline fails), `failed` (the one failure row: a crash-looping canary, a failed
//! analysis, a health gate: `health_failed`, `onUnhealthy: Fail`; `Hold` holds the pass as row 6 does). Row 7 runs after the driver's table and before any
//! write, for both drivers ([`go_back`], with the history the adapter observed: the marks, the
//! current and stable revisions, the remembered ones). One more row applies to the outcome of
//! the write: a refused write ([`Decision::write_failed`]).
//!
//! One decision shape, [`Decision`]: the outcome both drivers share (phase, failure, the one
//! template write, events, error) and the driver's own action beside it
//! ([`MaxUnavailableAction`]: record the generation; [`PodsAction`]: the step and the pods to
//! delete).
//!
//! # Where new things go
//!
//! - **A new health signal** (a node that breaks after its update, a neighbour that fails): the
//!   driver observes it into its observation, and the failure it causes is decided by the
//!   shared `failed` row with its own [`FailureReason`], so both drivers fail, stay failed
//!   ([`FailureReason::is_sticky`]), roll back (`onFailure`) and announce it the same way.
//! - **A new step type**: a variant of [`Step`](crate::Step) and its arm in the Pods driver's
//!   walk (`pods/walk.rs`); the life cycle does not change.
//! - **A new verb**: a row of the verb table ([`Verb`](crate::Verb)), then the row of this
//!   module (or of a driver's progress) that acts on it.
//!
//! # Invariants
//!
//! - The rows run in the order above for both drivers; a driver adds progress rows, never
//!   another copy of a shared one.
//! - At most one template write per decision; a held pass writes nothing but the hold itself.
//! - Pure: no I/O, no clock; never panics.
//!
//! [`PodsAction`]: crate::PodsAction
//! [`FailureReason`]: crate::FailureReason
//! [`FailureReason::is_sticky`]: crate::FailureReason::is_sticky

mod events;
mod hold;
mod rollback;
pub(crate) mod rows;

pub use events::retried_event;
pub(crate) use events::{completed_event, normal, rollout_of, version_or_target, warning};
pub use rollback::{
    Revision, RollbackDecision, RollbackObservation, RollbackReason, UndoTarget, decide_rollback,
    go_back, rolled_back_event, verb_refused,
};

use crate::decision::{DaemonSetWrite, Event, WriteKind, event_reason};
use crate::observation::{DriftSeen, PreviousPass};
use crate::phase::{FailureReason, Phase};
use crate::strategy::{Compatibility, Strategy, StrategyError};

/// What a driver does beside the shared outcome of a pass.
pub trait DriverAction: Default {
    /// The action moves something in the cluster by itself (the Pods driver's deletions), so
    /// that a hold on request has something to stop even without a write.
    fn moves(&self) -> bool;
    /// What a held pass keeps of it: nothing that moves.
    fn stop(&mut self);
    /// What a pass whose write was refused keeps of it.
    #[must_use]
    fn refused(self) -> Self;
    /// The caller records the DaemonSet generation the write leaves (the MaxUnavailable
    /// driver's rows 3a and 4); no other driver does.
    fn records_generation(&self) -> bool {
        false
    }
    /// The driver's rows keep the live DaemonSet on the hold's `OnDelete` themselves (the
    /// MaxUnavailable driver's canary soak, issue 46): the end of a hold on request leaves it
    /// there instead of writing `RollingUpdate` back, which the rows would undo at once.
    fn keeps_hold(&self) -> bool {
        false
    }
}

/// The MaxUnavailable driver's action: what it records beside the one write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct MaxUnavailableAction {
    /// Record the DaemonSet generation, from the write's response when there is a write.
    pub record_generation: bool,
    /// The sync gate found nothing to do: no flag set, no API call.
    pub quiet: bool,
    /// Come back after this long at the latest: the canary soaks before the widen (issue 46).
    pub wake_after: Option<std::time::Duration>,
    /// The canary soaks with the DaemonSet controller held (issue 46): the live DaemonSet
    /// stays on `OnDelete` (written by this pass, by an earlier one, or by a hold on request
    /// whose end this pass sees) until the widen's write ends it.
    pub keeps_hold: bool,
}

impl DriverAction for MaxUnavailableAction {
    fn moves(&self) -> bool {
        false
    }

    fn stop(&mut self) {
        self.record_generation = false;
        self.wake_after = None;
        self.keeps_hold = false;
    }

    fn refused(self) -> Self {
        MaxUnavailableAction::default()
    }

    fn records_generation(&self) -> bool {
        self.record_generation
    }

    fn keeps_hold(&self) -> bool {
        self.keeps_hold
    }
}

/// The outcome of one pass: what both drivers decide alike, and the driver's own action.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Decision<A = MaxUnavailableAction> {
    /// The phase to report.
    pub phase: Phase,
    /// Why, when `phase` is `Failed`.
    pub failure: Option<FailureReason>,
    /// At most one DaemonSet write.
    pub write: Option<DaemonSetWrite>,
    /// The events to record, in order (only on transitions, except KubeVirt's `FailedUpdate`).
    pub events: Vec<Event>,
    /// The error to report (reference `err`; the caller sets a Degraded condition from it).
    pub error: Option<String>,
    /// The upgrade of this DaemonSet is done: the caller may move on (reference `done`).
    pub done: bool,
    /// The live DaemonSet is drifted from what the controller wrote (the caller reports it as
    /// a condition); with the `Revert` policy this pass writes the desired template back.
    pub drifted: bool,
    /// A retry on request forgot a failure in this pass (its `Retried` event is among the
    /// events; the caller records the mark).
    pub retried: bool,
    /// The pass was held on request (the caller records it, see the hold row).
    pub held: bool,
    /// The hold is the health gates' (`onUnhealthy: Hold` found evidence in this pass): the
    /// caller sets the pause mark so that a person decides. A hold for any other reason (the
    /// mark, a resume whose write has not landed yet) is not.
    pub held_by_health: bool,
    /// What the driver does beside the outcome.
    pub action: A,
}

impl<A: DriverAction> Decision<A> {
    /// A decision in `phase` with nothing else set (nothing written, announced or recorded).
    pub fn hold(phase: Phase) -> Self {
        Decision {
            phase,
            failure: None,
            write: None,
            events: Vec::new(),
            error: None,
            done: false,
            drifted: false,
            retried: false,
            held: false,
            held_by_health: false,
            action: A::default(),
        }
    }

    /// The same outcome with the driver's action `action`.
    #[must_use]
    pub fn with_action(mut self, action: A) -> Self {
        self.action = action;
        self
    }

    /// The event of `reason` among the pass's events, if any.
    pub fn event(&self, reason: &str) -> Option<&Event> {
        self.events.iter().find(|event| event.reason == reason)
    }

    /// The hold's announcement among the events (`Paused` when the pass acted on a new hold,
    /// `Resumed` when it acted on its end), if any.
    pub fn hold_event(&self) -> Option<&Event> {
        self.events.iter().find(|event| is_hold_event(event))
    }

    /// The row of a refused write: the pass fails with `WriteRejected` and the API server's
    /// message, whatever the row that made the write decided.
    ///
    /// The messages are the reference's in KubeVirt mode, including the literal `<nil>` of
    /// rows 1 and 3a (spec quirk 15, a Go formatting slip). The default strategy names the
    /// DaemonSet instead and adds a `WriteRejected` Warning event. Conflicts (a failed `test` op,
    /// HTTP 409) are not rollout failures: the caller should requeue instead of calling this.
    /// A decision without a write is returned unchanged. The hold on request and its
    /// announcement are kept (a refused hold write is still a held pass), but for a refused
    /// [`WriteKind::Resume`]: the DaemonSet is still on the hold's `OnDelete`, so the hold
    /// stays recorded and its end is announced by the pass whose resume goes through (soak
    /// seed 9300109: a 429 on the resume left the rollout on `OnDelete` for good and failed it
    /// on the progress deadline).
    #[must_use]
    pub fn write_failed(self, strategy: &Strategy, name: &str, api_error: &str) -> Decision<A> {
        let Some(write) = self.write else {
            return self;
        };
        // The API server's message is outside text: cut before it reaches status and events.
        let api_error = crate::cut(api_error, crate::OUTSIDE_TEXT_BYTES);
        let message = write_failure_message(strategy.compatibility, write.kind, name, &api_error);
        let resume_refused = write.kind == WriteKind::Resume;
        let mut events: Vec<Event> = self
            .events
            .into_iter()
            .filter(|event| is_hold_event(event) && !resume_refused)
            .collect();
        if strategy.compatibility == Compatibility::Fixed {
            events.push(warning(event_reason::WRITE_REJECTED, message.clone()));
        }
        Decision {
            failure: Some(FailureReason::WriteRejected),
            events,
            error: Some(message),
            held: self.held || resume_refused,
            held_by_health: self.held_by_health,
            action: self.action.refused(),
            ..Decision::hold(Phase::Failed)
        }
    }
}

fn is_hold_event(event: &Event) -> bool {
    event.reason == event_reason::PAUSED || event.reason == event_reason::RESUMED
}

fn write_failure_message(
    compatibility: Compatibility,
    kind: WriteKind,
    name: &str,
    api_error: &str,
) -> String {
    let patch_error = format!("unable to update daemonset {name}: {api_error}");
    match (compatibility, kind) {
        (_, WriteKind::Create) => format!("unable to create daemonset {name}: {api_error}"),
        (Compatibility::KubeVirt, WriteKind::Start) => {
            format!("unable to start canary upgrade for daemonset <nil>: {patch_error}")
        }
        (Compatibility::KubeVirt, WriteKind::Widen) => {
            format!("unable to update daemonset <nil>: {patch_error}")
        }
        (Compatibility::KubeVirt, WriteKind::Finish | WriteKind::TlsStep) => patch_error,
        (Compatibility::Fixed, WriteKind::Start) => {
            format!("unable to start canary upgrade for daemonset {name}: {api_error}")
        }
        (Compatibility::Fixed, WriteKind::Widen) => {
            format!("unable to widen the rollout of daemonset {name}: {api_error}")
        }
        (Compatibility::Fixed, WriteKind::Finish) => {
            format!("unable to revert daemonset {name} to its resting maxUnavailable: {api_error}")
        }
        (Compatibility::Fixed, WriteKind::TlsStep) => {
            format!("unable to apply the TLS migration step to daemonset {name}: {api_error}")
        }
        (_, WriteKind::Hold) => {
            format!("unable to hold daemonset {name} (updateStrategy OnDelete): {api_error}")
        }
        (_, WriteKind::Resume) => {
            format!("unable to resume daemonset {name} (updateStrategy RollingUpdate): {api_error}")
        }
        (_, WriteKind::RevertHeld) => {
            format!("unable to revert daemonset {name} to its desired template: {api_error}")
        }
    }
}

/// What the shared rows read of a driver's observation.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Life<'a> {
    /// The DaemonSet name, for messages.
    pub name: &'a str,
    /// The target version, for messages; empty when unknown.
    pub version: &'a str,
    /// The previous pass, from status.
    pub previous: Option<PreviousPass>,
    /// The desired template differs from the live one (only the controller's own template).
    pub changed: bool,
    /// Someone else changed the live template, as far as the drift row is concerned.
    pub drift: Option<&'a DriftSeen>,
    /// A retry was asked for and not yet acted on.
    pub retry: bool,
    /// The rollout is held on request.
    pub held: bool,
    /// The previous pass acted on the hold already.
    pub hold_recorded: bool,
    /// How the driver holds: `Some(live on hold)` when a hold is a write of the live update
    /// strategy type (`OnDelete`, and back to `RollingUpdate` after it) and whether the live
    /// DaemonSet has it; `None` when the driver holds by writing nothing at all.
    pub live_on_hold: Option<bool>,
    /// What a held pass stops, as the `Paused` event says it.
    pub held_stops: &'static str,
    /// What a drift kept as it is (`Report`) stops, as its event says it.
    pub report_stops: &'static str,
    /// The Pods driver's table, kept as it decided three shared rows before they were shared
    /// (reconciled by the next change): the event of a drift revert held on request does not
    /// say the revert waits, a drift announced while held is announced again after the hold
    /// (not as the start it is), and a drift kept as reported is not done at rest.
    pub pods_rows: bool,
    /// The health gates' facts (issue 46); `None` without gates.
    pub health: Option<&'a crate::health::HealthFacts>,
}

/// Why a shared row decides: the driver gives its action for it ([`Table::action`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Row {
    /// The strategy does not validate.
    Invalid,
    /// The desired template goes out.
    Start,
    /// A drift is written over (`Revert`).
    Revert,
    /// A drift is kept (`Report`): the rollout holds where it was.
    Report,
}

/// A driver's table, as the life cycle runs it.
pub(crate) trait Table: Sized {
    /// What the driver does beside the shared outcome.
    type Action: DriverAction;
    /// What the shared rows read.
    fn life(&self) -> Life<'_>;
    /// The strategy, and whatever else the driver reads, checked.
    fn validate(&self, strategy: &Strategy) -> Result<(), StrategyError>;
    /// The write that starts a rollout of the desired template.
    fn start_write(&self, strategy: &Strategy) -> DaemonSetWrite;
    /// The driver's action beside the outcome of a shared row.
    fn action(&self, row: Row) -> Self::Action;
    /// The observation as a retry reads it: the failure, and where the rollout was, forgotten.
    #[must_use]
    fn forget_failure(&self) -> Self;
    /// The driver's own rows: how the rollout makes progress.
    fn progress(&self, strategy: &Strategy) -> Decision<Self::Action>;
}

/// Decides one pass of `table`: the shared rows in their order around the driver's progress.
pub(crate) fn decide<T: Table>(strategy: &Strategy, table: &T) -> Decision<T::Action> {
    let decision = decide_rows(strategy, table);
    let mut life = table.life();
    // `onUnhealthy: Hold`: a rollout under way with evidence against it is held as the
    // `pause` verb holds it, with a Warning naming the nodes (once, with the hold).
    // At rest, over the late updates (a node caught up after `successful`, issue 46).
    let at_rest = decision.phase == Phase::Successful
        && life.previous.is_some_and(|p| p.phase == Phase::Successful)
        && life
            .health
            .is_some_and(|facts| facts.rested_since.is_some());
    let health_hold = (decision.phase.is_in_progress() || at_rest)
        .then(|| rows::health_hold(&life))
        .flatten();
    if health_hold.is_some() {
        life.held = true;
    }
    let late_update = at_rest && health_hold.is_some();
    let mut decision = hold::held_on_request(decision, &life, late_update);
    decision.held_by_health = decision.held && health_hold.is_some();
    if let Some((reason, message)) = health_hold
        && !life.hold_recorded
    {
        decision.events.push(warning(reason, message));
    }
    decision
}

/// Rows 1 to 5, before the hold on request.
fn decide_rows<T: Table>(strategy: &Strategy, table: &T) -> Decision<T::Action> {
    let life = table.life();
    if let Err(error) = table.validate(strategy) {
        return rows::invalid(&error, &life).with_action(table.action(Row::Invalid));
    }
    // A drift comes first, a retry's included: `Report` holds a failed rollout as it is (read
    // without its previous pass, the drift row would take the retry for a first pass and call
    // it `successful`: soak seed 11000003), and `Revert`'s start is the new rollout.
    if !life.changed
        && let Some(drift) = life.drift
    {
        return rows::drifted(strategy, table, drift);
    }
    // A retry of a failed rollout forgets the failure and the step it was in: the rows decide
    // as for a rollout toward the same target that has just started (a pod still crash-looping
    // fails it again at once). A retry of anything else changes nothing.
    if life.retry && life.previous.is_some_and(|p| p.phase == Phase::Failed) {
        let mut decision = decide_rows(strategy, &table.forget_failure());
        decision.retried = true;
        decision
            .events
            .insert(0, retried_event(life.name, life.version));
        return decision;
    }
    if life.changed {
        let write = table.start_write(strategy);
        return rows::start(&life, Some(write), false).with_action(table.action(Row::Start));
    }
    table.progress(strategy)
}
