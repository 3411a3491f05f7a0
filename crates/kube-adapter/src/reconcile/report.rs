//! What a pass leaves behind once it has decided and written to the DaemonSet: the status
//! (written at once, or deferred when only pod counts moved), the event on the
//! CanaryDaemonSet, the transition reported to the observer, and the requeue.
//!
//! Invariant: a phase change, a DaemonSet write or a failure is written at once; only a change
//! of counts waits (at most `Requeue::count_status_interval`).

use std::time::Duration;

use canary_state_machine::{
    Decision, EVENT_NOTE_BYTES, Event, EventType, FailureReason, Phase, Verb, event_reason,
};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event as KubeEvent, EventType as KubeEventType, Recorder};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use tracing::{info, warn};

use super::Pass;
use super::context::Requeue;
use super::history::{GoingBack, HistoryOutcome};
use super::memory::EventIdentity;
use crate::Error;
use crate::crd::CanaryDaemonSetStatus;
use crate::index::{ClosedGaps, pod_group};
use crate::notify::{NotificationEvent, Occurrence};
use crate::observer::{Report, Transition};
use crate::status::{AVAILABLE, next_status};

/// The reason of the Warning event of a subscription to an unknown receiver.
pub const NOTIFICATION_RECEIVER_UNKNOWN: &str = "NotificationReceiverUnknown";

/// Who set the mark a verb's event answers, as the API server says: the field manager that
/// owns the annotation in `metadata.managedFields` (`kubectl-annotate`, or `daemonset-canary
/// (alice@example.com)` for the verbs). `None` for other events, or when no manager is known
/// (a removed annotation, `resume`, is owned by nobody any more).
fn requester(cds: &crate::CanaryDaemonSet, reason: &str) -> Option<String> {
    // Not a resume: its mark is removed, so no manager owns it any more.
    let annotation = Verb::answered_by(reason)
        .filter(|verb| *verb != Verb::Resume)?
        .annotation();
    let field = format!("f:{annotation}");
    cds.metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|entry| {
            entry.fields_v1.as_ref().is_some_and(|fields| {
                fields
                    .0
                    .get("f:metadata")
                    .and_then(|metadata| metadata.get("f:annotations"))
                    .and_then(|annotations| annotations.get(&field))
                    .is_some()
            })
        })
        // Several may own it (the same value set twice): the latest asked.
        .max_by_key(|entry| entry.time.as_ref().map(|t| t.0))
        .and_then(|entry| entry.manager.clone())
}

/// The event series of a pass (see [`Pass::publish`]): a recorder per spec generation and
/// series, so that a new rollout's (or step's) event is never folded into an earlier one's.
#[derive(Debug, Clone, Default)]
pub(super) struct Series {
    /// The series of the pass's own events.
    pub pass: String,
    /// The series of its history's events (a rollback's, an undo's).
    pub history: String,
}

impl Series {
    /// Every event of the pass in the series of its target: `undo` and `abort` start another
    /// rollout within one spec generation, and kube's recorder would fold its events into the
    /// previous rollout's, keeping that one's note (`UndoStarted (x2): rolling out revision 3
    /// (v1)` for an undo of v1 and then one of v3). The MaxUnavailable driver's, and a create's.
    pub(super) fn of_target(target: &canary_predicates::Target) -> Series {
        let series = format!(
            "{}/{}/{}",
            target.version, target.registry, target.deployment_id
        );
        Series {
            pass: series.clone(),
            history: series,
        }
    }
}

impl Pass<'_> {
    /// The record step of a pass: the one status write (with what the rollback row decided,
    /// `going_back`), then the pass's events (in `series`, see [`Pass::publish`]) and its
    /// history's, and the next requeue, by the rules both drivers share or, for the driver's
    /// own phases, as `otherwise` says. A rollback that started is written at once, by the
    /// next pass of this reconcile ([`Pass::rollback_started`]).
    pub(super) async fn record_pass<A>(
        &self,
        record: Transition,
        decision: &Decision<A>,
        going_back: GoingBack,
        series: &Series,
        soon: Option<Duration>,
        otherwise: impl FnOnce(&Requeue) -> Duration,
    ) -> Result<Action, Error> {
        let drift = record.drift.clone();
        let history = self.write_status(record, going_back).await?;
        if history.act_again {
            self.rollback_started
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
        self.check_subscriptions().await;
        self.publish_events(decision.events.iter(), drift, &series.pass, decision.phase)
            .await;
        self.publish_events(history.events.iter(), None, &series.history, decision.phase)
            .await;
        Ok(self.next_pass(
            history.act_again,
            decision.phase,
            decision.failure,
            soon,
            otherwise,
        ))
    }

    /// When the next pass comes, by the rules both drivers share: the backoff after a refused
    /// write; at once (the conflict delay) when a rollback just started, as the next pass
    /// writes its template; at rest after a sticky failure; otherwise what `otherwise` says
    /// of the driver's own phases. `soon`: the pass's own work beside the decision (pre-pull
    /// pods pulling or left to delete) brings it back by then at the latest, whatever the
    /// phase: a failure's resync left 35 pre-pull pods at rest for good (soak seed 46001590,
    /// a delete refused after the rollout failed).
    pub(super) fn next_pass(
        &self,
        act_again: bool,
        phase: Phase,
        failure: Option<FailureReason>,
        soon: Option<Duration>,
        otherwise: impl FnOnce(&Requeue) -> Duration,
    ) -> Action {
        if let Some(backoff) = self.backoff_after_refused_write(failure) {
            return backoff;
        }
        Action::requeue(next_delay(
            &self.ctx.requeue,
            act_again,
            phase,
            failure,
            soon,
            otherwise,
        ))
    }

    /// Publishes a pass's events in order (`series`: see [`Pass::publish`]); a
    /// `DriftDetected` one is also logged and reported with what changed (`drift`). Each is
    /// also offered to the notifications (`phase`: the phase the pass decided).
    pub(super) async fn publish_events(
        &self,
        events: impl Iterator<Item = &Event>,
        drift: Option<String>,
        series: &str,
        phase: Phase,
    ) {
        for event in events {
            if event.reason == event_reason::DRIFT_DETECTED {
                let what = drift.clone().unwrap_or_default();
                info!(namespace = %self.namespace, name = %self.cds.name_any(), ds = %self.ds_name, %what, policy = self.cds.spec.strategy.drift_policy.as_str(), "daemonSet changed outside the controller");
                self.ctx.observer.report(Report::DriftDetected {
                    namespace: self.namespace.clone(),
                    name: self.cds.name_any(),
                    what,
                });
            }
            let type_ = match event.type_ {
                EventType::Normal => KubeEventType::Normal,
                EventType::Warning => KubeEventType::Warning,
            };
            let message = match requester(self.cds, event.reason) {
                Some(manager) => format!("{} (asked by {manager})", event.message),
                None => event.message.clone(),
            };
            self.notify(event.reason, event.type_, &message, phase, series);
            self.publish(type_, event.reason, message, true, series)
                .await;
        }
    }

    /// Offers an event published on the object to the receivers its spec subscribes
    /// (`crate::notify`): the one place where the occurrences are known. Never waits.
    pub(super) fn notify(
        &self,
        reason: &str,
        type_: EventType,
        message: &str,
        phase: Phase,
        series: &str,
    ) {
        let notifier = &self.ctx.notifier;
        let uid = self.cds.uid().unwrap_or_default();
        if NotificationEvent::starts_again(reason) {
            notifier.starts_again(&uid);
        }
        let Some(subscriptions) = self.cds.spec.notifications.as_deref() else {
            return;
        };
        for event in NotificationEvent::of(reason, type_, phase) {
            let occurrence = Occurrence {
                event,
                reason: reason.to_owned(),
                severity: type_.as_str(),
                namespace: self.namespace.clone(),
                name: self.cds.name_any(),
                uid: uid.clone(),
                daemon_set: self.ds_name.clone(),
                generation: self.cds.metadata.generation.unwrap_or_default(),
                version: self.cds.spec.target.version.clone(),
                series: series.to_owned(),
                message: message.to_owned(),
                time: self.now.to_string(),
            };
            notifier.offer(subscriptions, &occurrence);
        }
    }

    /// A Warning event `NotificationReceiverUnknown` once per spec generation that subscribes
    /// to a receiver the administrator did not define: the rollout goes on, nothing is sent to
    /// that name.
    pub(super) async fn check_subscriptions(&self) {
        let Some(unknown) = self.ctx.notifier.unknown_receivers(self.cds) else {
            return;
        };
        let defined = self.ctx.notifier.receiver_names();
        let defined = if defined.is_empty() {
            "the controller defines none (daemonset-canary run --notification-receivers)".to_owned()
        } else {
            format!("defined: {}", defined.join(", "))
        };
        let message = format!(
            "spec.notifications names receivers the controller's administrator did not define: {} ({defined}); nothing is sent to them, the rollout goes on",
            unknown.join(", ")
        );
        warn!(namespace = %self.namespace, name = %self.cds.name_any(), detail = %message, "unknown notification receiver");
        self.publish(
            KubeEventType::Warning,
            NOTIFICATION_RECEIVER_UNKNOWN,
            message,
            false,
            "",
        )
        .await;
    }

    /// The requeue after a refused write, or `None` (and the object's error count reset). A
    /// refused write is tried again, but less and less often: the same write is refused until
    /// something changes (and a change of the spec brings the object back at once).
    pub(super) fn backoff_after_refused_write(
        &self,
        failure: Option<FailureReason>,
    ) -> Option<Action> {
        let requeue = &self.ctx.requeue;
        if failure == Some(FailureReason::WriteRejected) {
            let delay =
                self.ctx
                    .memory
                    .next_error_delay(self.cds, requeue.error_base, requeue.error_max);
            return Some(Action::requeue(delay));
        }
        self.ctx.memory.reset_errors(self.cds);
        None
    }

    /// Writes the status of this pass, or defers it when only pod counts moved and the last
    /// write was less than [`Requeue::count_status_interval`] ago (a timer brings the object
    /// back to write it, see [`Context::take_status_flushes`]); reports the transition.
    ///
    /// The history's part comes first ([`Pass::account_history`]): the outcome recorded, what
    /// the rollback row decided (`going_back`) recorded, the phase a rollback reports; its
    /// events go out after the status. Returns its events, for the caller to publish after the
    /// pass's own, and whether the next pass must come at once (a rollback started).
    pub(super) async fn write_status(
        &self,
        mut record: Transition,
        going_back: GoingBack,
    ) -> Result<HistoryOutcome, Error> {
        let history = self.account_history(&mut record, going_back).await;
        self.write_status_of(record).await?;
        Ok(history)
    }

    async fn write_status_of(&self, mut record: Transition) -> Result<(), Error> {
        record.downtime = self.closed_downtime(&record.daemon_set);
        let previous = self.status.as_ref();
        let status = next_status(previous, &record, self.now);
        if previous == Some(&status) && self.status_persisted {
            return Ok(());
        }
        let memory = &self.ctx.memory;
        let counts_only =
            record.write.is_none() && previous.is_some_and(|p| same_but_counts(p, &status));
        let wait = counts_only
            .then(|| memory.count_status_wait(self.cds, self.ctx.requeue.count_status_interval))
            .flatten();
        match wait {
            Some(wait) => {
                memory.remember_status(self.cds, status.clone(), false);
                memory.flush_status_after(self.cds, wait);
            }
            None => self.patch_status(&status).await?,
        }
        if previous != Some(&status) {
            if let Some(start) = &status.phase_start_time {
                record.phase_started_at = start.0;
            }
            if record.from != Some(record.to) {
                log_phase_change(&record);
            }
            self.ctx
                .observer
                .report(Report::Transition(Box::new(record)));
        }
        Ok(())
    }

    /// The agent downtime gaps the DaemonSet's nodes closed since the last pass, each ended
    /// once the new pod is available: ready, plus the DaemonSet's `minReadySeconds`.
    fn closed_downtime(&self, daemon_set: &str) -> ClosedGaps {
        let mut closed = self
            .ctx
            .caches
            .pods
            .drain_downtime(&pod_group(&self.namespace, daemon_set));
        let live = self
            .ctx
            .caches
            .daemon_sets
            .get(&ObjectRef::new(daemon_set).within(&self.namespace));
        let min_ready = live.as_deref().map_or(0, super::pods::min_ready_seconds);
        if min_ready > 0 {
            for gap in &mut closed.gaps {
                gap.seconds = gap.seconds.saturating_add(min_ready);
            }
            closed.node_seconds = closed
                .node_seconds
                .saturating_add(min_ready.saturating_mul(closed.count));
        }
        closed
    }

    pub(super) async fn patch_status(&self, status: &CanaryDaemonSetStatus) -> Result<(), Error> {
        // Untyped: the answer carries the whole object, which need not decode (see
        // `Context::undecodable`), and nothing of it is read.
        let api = crate::crd::dynamic_api(&self.ctx.client, Some(&self.namespace));
        let params = PatchParams {
            field_manager: Some(self.ctx.field_manager.clone()),
            ..PatchParams::default()
        };
        let written_status = api
            .patch_status(
                &self.cds.name_any(),
                &params,
                &Patch::Merge(status.merge_patch()?),
            )
            .await;
        // Remembered even when the write failed: the DaemonSet write of this pass happened, so
        // the next pass must start from this status (and write it).
        self.ctx
            .memory
            .remember_status(self.cds, status.clone(), written_status.is_ok());
        written_status?;
        self.ctx.memory.status_written(self.cds);
        self.ctx.observer.report(Report::StatusWritten);
        Ok(())
    }

    /// Publishes an event on the CanaryDaemonSet; `about_daemon_set` names the owned DaemonSet
    /// as the related object.
    /// `series` names the rollout within the spec generation the event belongs to (the Pods
    /// driver's target revision and step; empty otherwise): a new series starts a new recorder.
    pub(super) async fn publish(
        &self,
        type_: KubeEventType,
        reason: &str,
        note: String,
        about_daemon_set: bool,
        series: &str,
    ) {
        let secondary = about_daemon_set.then(|| ObjectReference {
            api_version: Some("apps/v1".to_owned()),
            kind: Some("DaemonSet".to_owned()),
            name: Some(self.ds_name.clone()),
            namespace: Some(self.namespace.clone()),
            uid: self
                .ctx
                .caches
                .daemon_sets
                .get(&self.ds_ref())
                .and_then(|ds| ds.metadata.uid.clone()),
            ..ObjectReference::default()
        });
        // The API server refuses a note of 1 KiB or more, and the event is lost: a note
        // that carries outside text (an API error, a Prometheus error) is cut to fit.
        let note = canary_state_machine::cut(&note, EVENT_NOTE_BYTES - 1).into_owned();
        // A recorder per spec generation, series and message: an event is folded only into
        // an earlier one of the very same message, never into another rollout's, step's or
        // verb's (see `Memory::recorder`).
        let identity = EventIdentity {
            series: series.to_owned(),
            warning: type_ == KubeEventType::Warning,
            reason: reason.to_owned(),
            note: note.clone(),
        };
        let event = KubeEvent {
            type_,
            reason: reason.to_owned(),
            note: Some(note),
            action: "Rollout".to_owned(),
            secondary,
        };
        let recorder = self.ctx.memory.recorder(self.cds, identity, || {
            Recorder::new(self.ctx.client.clone(), self.ctx.reporter.clone())
        });
        match recorder.publish(&event, &self.cds.object_ref(&())).await {
            Ok(()) => self.ctx.observer.report(Report::EventPublished),
            // An event is best effort: losing one must not fail or repeat the pass.
            Err(error) => {
                warn!(namespace = %self.namespace, name = %self.cds.name_any(), %error, reason, "could not publish event")
            }
        }
    }
}

/// The "phase changed" line: the object, its DaemonSet, the version rolled out and the step
/// (1-based, as events and `status` number them), and, for a failure, its reason and message
/// at WARN, where an operator filtering on level finds it. The failure's text is the field
/// `detail`, never `message`: that is the line's own text, and a JSON line would carry two
/// `message` keys (jq keeps the second).
fn log_phase_change(record: &Transition) {
    let from = record.from.map_or("-", |p| p.as_str());
    let to = record.to.as_str();
    let version = record.target.version.as_str();
    let step = record.pods.as_ref().map_or_else(String::new, |pods| {
        // Once every step is done the index is the count: the last step is shown.
        (pods.step + 1).min(pods.step_count).to_string()
    });
    let reason = record.failure.map_or("", |f| f.as_str());
    let detail = record.message.as_deref().unwrap_or("");
    let (namespace, name, ds) = (&record.namespace, &record.name, &record.daemon_set);
    if record.to == Phase::Failed {
        warn!(%namespace, %name, %ds, %version, %step, from, to, reason, detail, "phase changed");
    } else {
        info!(%namespace, %name, %ds, %version, %step, from, to, reason, detail, "phase changed");
    }
}

/// Whether `next` differs from `previous` in pod counts only (and what derives from them: the
/// ratio, the progress time, the Available condition), so its write may be deferred.
fn same_but_counts(previous: &CanaryDaemonSetStatus, next: &CanaryDaemonSetStatus) -> bool {
    let significant = |status: &CanaryDaemonSetStatus| CanaryDaemonSetStatus {
        desired: 0,
        updated: 0,
        updated_ready: 0,
        ready_ratio: None,
        progress_updated_ready: None,
        last_progress_time: None,
        // Pods driver: pods per revision are counts too (every pod event moves them; written
        // at once, they made a status write per pod event).
        revisions: Vec::new(),
        conditions: status
            .conditions
            .iter()
            .filter(|c| c.type_ != AVAILABLE)
            .cloned()
            .collect(),
        ..status.clone()
    };
    significant(previous) == significant(next)
}

/// The delay of [`Pass::next_pass`] when no refused write backs it off.
fn next_delay(
    requeue: &Requeue,
    act_again: bool,
    phase: Phase,
    failure: Option<FailureReason>,
    soon: Option<Duration>,
    otherwise: impl FnOnce(&Requeue) -> Duration,
) -> Duration {
    let next = if act_again {
        requeue.conflict
    } else if phase == Phase::Failed && failure.is_some_and(FailureReason::is_sticky) {
        requeue.resync
    } else {
        otherwise(requeue)
    };
    soon.map_or(next, |soon| next.min(soon))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Soak seed 46001590 (invariant 35): a rollout that failed while pre-pull pods were
    /// left (a delete refused) came back only at the resync, past the end: pods left at rest.
    /// The pass's own work brings it back soon whatever the phase.
    #[test]
    fn left_over_work_brings_a_failed_rollout_back_soon() {
        let requeue = Requeue::default();
        let failed = Some(FailureReason::ProgressDeadlineExceeded);
        let in_progress = |r: &Requeue| r.in_progress;
        let soon = Some(Duration::from_secs(5));
        assert_eq!(
            next_delay(&requeue, false, Phase::Failed, failed, None, in_progress),
            requeue.resync
        );
        assert_eq!(
            next_delay(&requeue, false, Phase::Failed, failed, soon, in_progress),
            Duration::from_secs(5)
        );
        assert_eq!(
            next_delay(&requeue, true, Phase::Failed, failed, soon, in_progress),
            requeue.conflict,
            "never later than what the phase asks"
        );
        assert_eq!(
            next_delay(&requeue, false, Phase::Canary, None, None, in_progress),
            requeue.in_progress
        );
    }

    /// Pods per revision move on every pod event of a Pods-driver rollout: a change of them
    /// alone is deferred like the other counts (the bench saw 273 status writes for a
    /// 100-node rollout before, one per pod event).
    #[test]
    fn pods_per_revision_are_counts() {
        let revisions = |pods| {
            vec![crate::crd::RevisionPods {
                revision: "abc".into(),
                pods,
                ready: pods,
            }]
        };
        let before = CanaryDaemonSetStatus {
            phase: Some(Phase::Increasing),
            revisions: revisions(3),
            ..CanaryDaemonSetStatus::default()
        };
        let after = CanaryDaemonSetStatus {
            revisions: revisions(4),
            ..before.clone()
        };
        assert!(same_but_counts(&before, &after));
        let moved = CanaryDaemonSetStatus {
            current_step_index: Some(2),
            ..after.clone()
        };
        assert!(!same_but_counts(&before, &moved), "a step is no count");
    }

    #[test]
    fn a_verbs_event_names_the_manager_of_its_mark_the_latest_first() {
        let cds: crate::CanaryDaemonSet = serde_json::from_value(serde_json::json!({
            "apiVersion": "canary.daemonset.dev/v1alpha1",
            "kind": "CanaryDaemonSet",
            "metadata": {"name": "a", "namespace": "n", "managedFields": [
                {"manager": "kubectl-annotate", "operation": "Update",
                 "time": "2026-12-02T03:00:00Z", "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:metadata": {"f:annotations": {
                     "f:canary.daemonset.dev/promote": {}}}}},
                {"manager": "daemonset-canary (alice)", "operation": "Update",
                 "time": "2026-12-02T03:05:00Z", "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:metadata": {"f:annotations": {
                     "f:canary.daemonset.dev/promote": {},
                     "f:canary.daemonset.dev/abort": {}}}}},
                {"manager": "argocd-controller", "operation": "Apply",
                 "time": "2026-12-02T03:09:00Z", "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:spec": {"f:target": {}}}}
            ]},
            "spec": {"target": {"version": "v1"}}
        }))
        .unwrap();
        use canary_state_machine::event_reason;
        assert_eq!(
            super::requester(&cds, event_reason::PROMOTED).as_deref(),
            Some("daemonset-canary (alice)")
        );
        assert_eq!(
            super::requester(&cds, event_reason::ABORTED).as_deref(),
            Some("daemonset-canary (alice)")
        );
        assert_eq!(super::requester(&cds, event_reason::RETRIED), None);
        assert_eq!(super::requester(&cds, event_reason::ROLLOUT_STARTED), None);
    }
}
