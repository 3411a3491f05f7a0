//! A pass's part in the rollout history: which template is desired while a rollback is in
//! force, the revisions recorded when a rollout starts and ends, the verbs that go back
//! (`abort`, `undo`) and `onFailure: Rollback`, and the phases a rollback reports.
//!
//! The pure decisions are the state machine's ([`go_back`], the life cycle's rollback row, and
//! [`Phase::reported`]); the revisions are [`History`]'s. What is here is the observation and
//! the record: a pass decides with the driver's table, then, before any write, observes what
//! going back needs (the marks, the history; [`Pass::go_back`]) and lets the life cycle decide;
//! its status write ([`Pass::account_history`]) only records what was decided: the outcome of
//! the current revision, the marks acted on, the rollback started, the phase it reports.
//!
//! # Invariants
//!
//! - A rollback in force names the spec's template it overrides: a change of that template
//!   ends it, so a GitOps sync of a new version always wins over an earlier abort, while an
//!   edit of the strategy alone does not roll the failed version out again.
//! - A mark (`abort`, `undo`) is acted on once: its value is recorded whatever the outcome.
//! - The history is best effort: a revision that cannot be written is logged, and the rollout
//!   goes on as if there were no history.

use std::sync::{Mutex, MutexGuard, PoisonError};

use canary_predicates::Target;
use canary_state_machine::{
    Decision, DriverAction, Event, FailureReason, Phase, PreviousPass, Revision, RollbackDecision,
    RollbackObservation, RollbackReason, UndoTarget, go_back, rolled_back_event,
};
use k8s_openapi::api::apps::v1::DaemonSet;
use kube::ResourceExt;
use tracing::warn;

use super::Pass;
use crate::Error;
use crate::crd::{
    ABORT_ANNOTATION, DEFAULT_REVISION_HISTORY_LIMIT, HistoryStatus, RevisionRef, RollbackStatus,
    UNDO_ANNOTATION,
};
use crate::history::{History, Outcome, revision_name};
use crate::observer::Transition;
use crate::status::{decided_for_another_target, previous_pass};

/// The history status a pass works on: read from the status when the pass begins, changed by
/// the pass (a rollout started), written with the pass's status.
#[derive(Debug, Default)]
pub(super) struct PassHistory {
    status: Mutex<HistoryStatus>,
    /// The revision name of the spec's desired DaemonSet, once the pass has built it.
    spec_revision: Mutex<Option<String>>,
}

impl PassHistory {
    pub(super) fn new(history: Option<HistoryStatus>) -> Self {
        PassHistory {
            status: Mutex::new(history.unwrap_or_default()),
            spec_revision: Mutex::new(None),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HistoryStatus> {
        // Never held across an await; a poisoned lock still holds a whole status.
        self.status.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn spec_revision(&self) -> Option<String> {
        self.spec_revision
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Whether `rollback` still overrides the spec: the spec's template is the one it left.
    fn in_force(&self, rollback: &RollbackStatus) -> bool {
        self.spec_revision()
            .is_none_or(|spec| spec == rollback.from)
    }
}

/// What the status write of a pass does besides writing: events to publish, and whether the
/// next pass must come at once (a rollback just started).
#[derive(Debug, Default)]
pub(super) struct HistoryOutcome {
    pub(super) events: Vec<Event>,
    pub(super) act_again: bool,
}

/// What the life cycle's rollback row decided in a pass, before any write, for the pass's
/// status write to record ([`Pass::account_history`]).
#[derive(Debug)]
pub(super) struct GoingBack {
    /// The state machine's decision.
    decision: RollbackDecision,
    /// The marks it read (recorded as acted on when the decision says so).
    marks: Marks,
    /// The history's entries an undo was looked up in.
    listed: Vec<crate::history::Entry>,
    /// The phase the driver's table decided, before the row (a rollout that ended well in
    /// the pass that goes back is recorded so).
    table_phase: Option<Phase>,
}

impl Pass<'_> {
    /// Notes the spec's desired DaemonSet of this pass (what a rollback overrides), and
    /// returns the rollback or undo in force, if any.
    pub(super) fn rollback_in_force(
        &self,
        spec_desired: &DaemonSet,
    ) -> Result<Option<RollbackStatus>, Error> {
        let name = revision_name(&self.cds.name_any(), spec_desired)?;
        *self
            .history
            .spec_revision
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(name);
        let rollback = self.history.lock().rollback.clone();
        Ok(rollback.filter(|rollback| self.history.in_force(rollback)))
    }

    /// Whether a live DaemonSet hashing `live_hash` runs exactly the revision the rollback in
    /// force goes back to, as recorded when that revision's rollout ended well: then it is the
    /// rollback's own write, whichever process made it. A leader replaced between that write
    /// and its status record left the next one no other way to know it, and it reported its
    /// predecessor's rollback as a hand edit (soak seed 22008210; docs/reliability.md,
    /// finding 50).
    pub(super) fn live_is_rollback_revision(&self, live_hash: &str) -> bool {
        let rollback = self.history.lock().rollback.clone();
        rollback.is_some_and(|rollback| {
            self.history.in_force(&rollback)
                && rollback.to.template_hash.as_deref() == Some(live_hash)
        })
    }

    /// The stored pass a decision reads as the previous one, for a rollout to `target`: none
    /// when the status was decided for another target. That happens when the write that
    /// started this target landed and its status write did not (a replaced leader, a lease
    /// lost in between): the stored phase is then the failure, or the rest, the previous
    /// target left, and read as this rollout's a failure would keep it `failed` for good
    /// (soak seeds 22008210, a rollback's write, and 27000373, a new version's start;
    /// docs/reliability.md, findings 50 and 62). The rollout goes on as from its start.
    pub(super) fn previous_pass_for(&self, target: &Target) -> Option<PreviousPass> {
        let status = self.status.as_ref();
        if status.is_some_and(|s| decided_for_another_target(s, target)) {
            None
        } else {
            previous_pass(status, self.now)
        }
    }

    /// The live template hash the stored status records as the controller's last write.
    fn written_hash(&self) -> Option<String> {
        self.status
            .as_ref()
            .and_then(|s| s.daemon_set_template_hash.clone())
    }

    /// An abort or a rollback after a failure is in force (it reports `rollingBack`): the
    /// Pods driver follows its steps without the pauses.
    pub(super) fn rolling_back(&self) -> bool {
        let rollback = self.history.lock().rollback.clone();
        rollback.is_some_and(|rollback| {
            self.history.in_force(&rollback)
                && RollbackReason::parse(&rollback.reason)
                    .is_some_and(RollbackReason::reports_rollback_phases)
        })
    }

    fn history_api(&self) -> Result<History, Error> {
        History::new(self.ctx.client.clone(), self.cds, &self.ctx.field_manager)
    }

    /// The desired DaemonSet of the rollback in force: the revision's, or the message of why
    /// it cannot be had (the revision was deleted by hand).
    pub(super) async fn rollback_desired(
        &self,
        rollback: &RollbackStatus,
    ) -> Result<Result<DaemonSet, String>, Error> {
        match self.history_api()?.desired(&rollback.to.name).await? {
            Some(desired) => Ok(Ok(desired)),
            None => Ok(Err(format!(
                "revision {} ({}), which the {} goes back to, is gone from the history (ControllerRevision {} deleted or edited); nothing is written until the spec changes",
                rollback.to.revision,
                rollback.to.version,
                match RollbackReason::parse(&rollback.reason) {
                    Some(RollbackReason::Undo) => "undo",
                    _ => "rollback",
                },
                rollback.to.name
            ))),
        }
    }

    /// A template write that starts a rollout of `desired` (target `version`) succeeded:
    /// remember it as the newest revision.
    pub(super) async fn note_rollout_started(&self, desired: &DaemonSet, version: &str) {
        let (previous, stable) = {
            let history = self.history.lock();
            (history.current.clone(), history.stable.clone())
        };
        let limit = self
            .cds
            .spec
            .revision_history_limit
            .unwrap_or(DEFAULT_REVISION_HISTORY_LIMIT);
        let recorded = match self.history_api() {
            Ok(history) => {
                history
                    .record_start(
                        desired,
                        version,
                        previous.as_ref(),
                        stable.as_ref(),
                        usize::try_from(limit).unwrap_or(1),
                        self.now,
                    )
                    .await
            }
            Err(error) => Err(error),
        };
        match recorded {
            Ok(current) => {
                let mut history = self.history.lock();
                // A template rolled out again is renumbered: the rollback names it as it is now,
                // with the live template it ended well with.
                if let Some(rollback) = history.rollback.as_mut()
                    && rollback.to.name == current.name
                {
                    let ended_with = rollback.to.template_hash.take();
                    rollback.to = current.clone().with_template_hash(ended_with);
                }
                history.current = Some(current);
            }
            Err(error) => {
                warn!(namespace = %self.namespace, name = %self.cds.name_any(), %error, "could not record the rollout in the history (ControllerRevisions); the rollout goes on");
            }
        }
    }

    /// The history catches up with a live DaemonSet that carries `desired` (its metadata as
    /// the controller wants it):
    /// - no history yet (a DaemonSet created before the history existed, or by a version of
    ///   the controller without it), at rest: its template becomes revision 1, successful;
    /// - the current revision is another one: the write that started `desired`'s rollout
    ///   landed but its record was lost (leadership lapsed between the two writes, or the
    ///   record was refused), so it is recorded now. Else the rollout's outcome would be
    ///   credited to the revision before it: soak seed 10000754 recorded the failed revision
    ///   as the stable one when the rollback away from it ended.
    pub(super) async fn catch_up_history(&self, desired: &DaemonSet, version: &str) {
        let current = self.history.lock().current.clone();
        if let Some(current) = current {
            let lost =
                revision_name(&self.cds.name_any(), desired).is_ok_and(|name| name != current.name);
            if lost {
                self.note_rollout_started(desired, version).await;
            }
            return;
        }
        let at_rest = self.status.as_ref().and_then(|s| s.phase) == Some(Phase::Successful);
        if !at_rest {
            return;
        }
        self.note_rollout_started(desired, version).await;
        let current = self.history.lock().current.clone();
        if let Some(current) = current {
            self.record_outcome(&current, Outcome::Successful).await;
            self.history.lock().stable = Some(current.with_template_hash(self.written_hash()));
        }
    }

    async fn record_outcome(&self, revision: &RevisionRef, outcome: Outcome) {
        let recorded = match self.history_api() {
            Ok(history) => {
                history
                    .record_outcome(&revision.name, outcome, self.now)
                    .await
            }
            Err(error) => Err(error),
        };
        if let Err(error) = recorded {
            warn!(namespace = %self.namespace, name = %self.cds.name_any(), revision = revision.revision, %error, "could not record the rollout's outcome in the history");
        }
    }

    /// The life cycle's rollback row for `decision`, the driver's table's, before any write:
    /// what going back needs is observed (the marks not yet acted on, the history; an undo
    /// lists the revisions, a read) and the state machine decides ([`go_back`]). Returns the
    /// decision to act on (without the write of a rollout it leaves) and what to record.
    pub(super) async fn go_back<A: DriverAction>(
        &self,
        decision: Decision<A>,
    ) -> (Decision<A>, GoingBack) {
        let history = self.history_in_force();
        let marks = self.pending_marks(&history);
        let (undo, undo_unreadable) = match marks.undo.as_deref().map(parse_undo) {
            None => (None, None),
            Some(Ok(target)) => (Some(target), None),
            Some(Err(why)) => (None, Some(why)),
        };
        let template_theirs = self.cds.spec.workload_ref.is_some();
        let listed = match undo {
            Some(_) if !template_theirs => self.listed_history().await,
            _ => Vec::new(),
        };
        let revision = |r: &RevisionRef| Revision {
            number: r.revision,
            version: r.version.clone(),
        };
        let observation = RollbackObservation {
            name: self.ds_name.clone(),
            abort: marks.abort.is_some(),
            undo,
            undo_unreadable,
            driver: self.cds.spec.strategy.driver,
            template_theirs,
            template_unknown: self.history.spec_revision().is_none(),
            on_failure: self.cds.spec.strategy.on_failure,
            // The row reads the decision's own.
            phase: None,
            failure: None,
            rolling_back: history
                .rollback
                .as_ref()
                .is_some_and(reports_rollback_phases),
            current: history.current.as_ref().map(revision),
            stable: history.stable.as_ref().map(revision),
            history: listed
                .iter()
                .map(|entry| Revision {
                    number: entry.revision,
                    version: entry.version.clone(),
                })
                .collect(),
        };
        let table_phase = Some(decision.phase);
        let (decision, rollback) = go_back(decision, observation);
        let going_back = GoingBack {
            decision: rollback,
            marks,
            listed,
            table_phase,
        };
        (decision, going_back)
    }

    /// The history as this pass reads it: a rollback the spec's template changed since is no
    /// longer in force (the spec wins over it).
    fn history_in_force(&self) -> HistoryStatus {
        let mut history = self.history.lock().clone();
        if history
            .rollback
            .as_ref()
            .is_some_and(|r| !self.history.in_force(r))
        {
            history.rollback = None;
        }
        history
    }

    /// Records, with the status of a pass, what its history became: the outcome of the
    /// current revision, what the rollback row decided before any write (`going_back`: the
    /// marks acted on, the rollback started, their events), and the phase a rollback reports.
    /// Sets `record.history` and maps `record.to`. Decides nothing.
    pub(super) async fn account_history(
        &self,
        record: &mut Transition,
        going_back: GoingBack,
    ) -> HistoryOutcome {
        let mut outcome = HistoryOutcome::default();
        let decided = record.to;
        let from = record.from;
        let mut history = self.history_in_force();
        let table_phase = going_back.table_phase.unwrap_or(decided);
        self.record_current_outcome(&mut history, record, table_phase, from)
            .await;
        outcome.act_again = self
            .record_going_back(&mut history, going_back, &mut outcome.events)
            .await;
        if let Some(rollback) = history.rollback.as_mut() {
            rollback.decided_phase = Some(decided);
            record.to = decided.reported(reports_rollback_phases(rollback));
            if let Some(event) = rolled_back_event(
                &self.ds_name,
                from,
                record.to,
                &Revision {
                    number: rollback.to.revision,
                    version: rollback.to.version.clone(),
                },
            ) {
                outcome.events.push(event);
            }
        }
        *self.history.lock() = history.clone();
        record.history = Some(Box::new(history));
        outcome
    }

    /// How the current revision's rollout ended, if it ended in this pass: recorded on its
    /// revision, and a rollout that ended well becomes the stable revision.
    async fn record_current_outcome(
        &self,
        history: &mut HistoryStatus,
        record: &Transition,
        decided: Phase,
        from: Option<Phase>,
    ) {
        let Some(current) = history.current.clone() else {
            return;
        };
        let ended_well = decided == Phase::Successful && !from.is_some_and(Phase::is_at_rest);
        let failed = decided == Phase::Failed
            && record.failure.is_some_and(FailureReason::is_sticky)
            && from != Some(Phase::Failed);
        if ended_well {
            self.record_outcome(&current, Outcome::Successful).await;
            let at_rest = record.template_hash.clone().or_else(|| self.written_hash());
            history.stable = Some(current.with_template_hash(at_rest));
        } else if failed {
            self.record_outcome(&current, Outcome::Failed).await;
        }
    }

    /// Records what the rollback row decided (`going_back`): the marks it acted on, its
    /// events (pushed to `events`), and the rollback it started. Returns whether one started
    /// (the revision's template is written next, at once).
    async fn record_going_back(
        &self,
        history: &mut HistoryStatus,
        going_back: GoingBack,
        events: &mut Vec<Event>,
    ) -> bool {
        let GoingBack {
            decision,
            marks,
            listed,
            ..
        } = going_back;
        if decision.abort_consumed {
            history.abort = marks.abort;
        }
        if decision.undo_consumed {
            history.undo = marks.undo;
        }
        events.extend(decision.events);
        let Some((to, reason)) = decision.start else {
            return false;
        };
        self.start_rollback(history, &listed, &to, reason).await
    }

    /// The history's entries, for an undo to find its revision in (none when it cannot be
    /// listed: the undo is then refused as asking for an unknown revision).
    async fn listed_history(&self) -> Vec<crate::history::Entry> {
        match self.history_api() {
            Ok(api) => api.list().await.unwrap_or_else(|error| {
                warn!(namespace = %self.namespace, name = %self.cds.name_any(), %error, "could not list the history");
                Vec::new()
            }),
            Err(_) => Vec::new(),
        }
    }

    /// Starts going back to revision `to` for `reason`: the rollback in force from now on, an
    /// aborted current revision recorded so. Whether it started (the revision is known).
    async fn start_rollback(
        &self,
        history: &mut HistoryStatus,
        listed: &[crate::history::Entry],
        to: &Revision,
        reason: RollbackReason,
    ) -> bool {
        let to_ref = listed
            .iter()
            .find(|entry| entry.revision == to.number)
            .map(crate::history::Entry::to_ref)
            .or_else(|| history.stable.clone().filter(|s| s.revision == to.number));
        let Some(to_ref) = to_ref else {
            // The row goes back only to a revision it was shown (listed, or the stable one).
            warn!(namespace = %self.namespace, name = %self.cds.name_any(), revision = to.number, "the revision to go back to is not in the history; nothing started");
            return false;
        };
        if reason == RollbackReason::Abort
            && let Some(current) = history.current.clone()
        {
            self.record_outcome(&current, Outcome::Aborted).await;
        }
        history.rollback = Some(RollbackStatus {
            to: to_ref,
            reason: reason.as_str().to_owned(),
            from: self.history.spec_revision().unwrap_or_default(),
            decided_phase: None,
        });
        true
    }

    /// The record a pass writes ahead of its deletions, from `record`: the phase reported
    /// under the rollback in force before this pass accounts its history (what
    /// [`Pass::account_history`] would report, short of a rollback this pass ends),
    /// and that rollback's decided phase with it. The two travel together: a status reporting
    /// `rollingBack` over the decided phase of an earlier pass (the `failed` a retry just left)
    /// reads back as that failure without its reason, and when the pass's own status write
    /// was then lost, the retried rollout stayed `failed` for good (soak seed 23002141;
    /// docs/reliability.md, finding 52).
    pub(super) fn ahead_of_deletions(&self, record: &Transition) -> Transition {
        let mut ahead = record.clone();
        let history = self.history.lock();
        let in_force = history
            .rollback
            .as_ref()
            .filter(|rollback| self.history.in_force(rollback));
        if let Some(rollback) = in_force {
            ahead.to = record.to.reported(reports_rollback_phases(rollback));
            let mut recorded = history.clone();
            if let Some(rollback) = recorded.rollback.as_mut() {
                rollback.decided_phase = Some(record.to);
            }
            ahead.history = Some(Box::new(recorded));
        }
        ahead
    }

    /// The `abort` and `undo` marks not yet acted on.
    fn pending_marks(&self, history: &HistoryStatus) -> Marks {
        let mark = |key: &str, acted: &Option<String>| {
            self.cds
                .annotations()
                .get(key)
                .filter(|value| !value.is_empty())
                .filter(|value| acted.as_ref() != Some(*value))
                .cloned()
        };
        Marks {
            abort: mark(ABORT_ANNOTATION, &history.abort),
            undo: mark(UNDO_ANNOTATION, &history.undo),
        }
    }
}

/// Whether `rollback` reports its own phases (`rollingBack`, `rolledBack`); an undo reports
/// the usual ones.
fn reports_rollback_phases(rollback: &RollbackStatus) -> bool {
    RollbackReason::parse(&rollback.reason).is_some_and(RollbackReason::reports_rollback_phases)
}

#[derive(Debug, Default)]
struct Marks {
    abort: Option<String>,
    undo: Option<String>,
}

/// `N@STAMP` or `previous@STAMP` (the stamp makes each request new).
fn parse_undo(mark: &str) -> Result<UndoTarget, String> {
    let target = mark.split('@').next().unwrap_or_default();
    if target == "previous" {
        return Ok(UndoTarget::Previous);
    }
    target
        .parse::<i64>()
        .ok()
        .filter(|n| *n > 0)
        .map(UndoTarget::Revision)
        .ok_or_else(|| format!("{UNDO_ANNOTATION}={mark:?} is not REVISION@TIME or previous@TIME"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn undo_marks_parse() {
        assert_eq!(parse_undo("previous@2026"), Ok(UndoTarget::Previous));
        assert_eq!(parse_undo("3@2026"), Ok(UndoTarget::Revision(3)));
        assert_eq!(parse_undo("3"), Ok(UndoTarget::Revision(3)));
        for bad in ["", "0@x", "-1@x", "three@x", "@x"] {
            assert!(parse_undo(bad).is_err(), "{bad:?}");
        }
    }
}
