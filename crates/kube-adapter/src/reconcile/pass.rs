//! The one pass skeleton both drivers run: observe, decide, act, record.
//!
//! [`Pass::drive`] does what every pass does, once: it reads the verb marks, checks the live
//! DaemonSet for drift ([`Pass::drift_check`]), hands the driver what it saw, asks the driver's
//! table (the state machine) for a [`Decision`], makes the decision's one template write
//! ([`Pass::write_template`]), lets the driver act, and writes the status once, with its
//! events and the next requeue ([`Pass::record_pass`]). A driver ([`Driver`]) supplies only
//! what it observes beyond that (the MaxUnavailable driver its pod counts and TLS facts, the
//! Pods driver its nodes, revisions, promotion and analysis), the table it decides with, and
//! how it acts after the template write (the Pods driver deletes pods).
//!
//! # Invariants
//!
//! - One drift check, one template write, one status write per pass (the Pods driver's
//!   write-ahead of its deletions is the status of that same pass, written early).
//! - A write refused as a conflict ends the pass with the error: it is retried shortly, and
//!   nothing of the pass is recorded. Any other refusal is the shared life cycle's refused-write
//!   row ([`Decision::write_failed`]).
//! - Where a new health gate goes: the driver observes the signal (its `observe`), the state
//!   machine decides it (the life cycle's failure row); nothing here changes.

use std::fmt::Debug;
use std::time::Duration;

use canary_predicates::{PodFacts, pod_is_ready, pod_is_terminating};
use canary_state_machine::{
    ConditionType, Decision, DriftSeen, DriverAction, WriteKind, event_reason,
};
use k8s_openapi::api::apps::v1::DaemonSet;
use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType as KubeEventType;
use std::fmt::Write as _;
use tracing::{debug, info, warn};

use super::context::Requeue;
use super::drift::{
    OwnWrites, RESTARTED_AT, describe_drift, own_unrecorded_write, restart_by_someone_else,
    restarted_at, unrecorded_start,
};

/// The reason of the Normal event of a `kubectl rollout restart` taken into the spec.
pub const RESTART_TAKEN: &str = "RestartTaken";
use super::plan::Plan;
use super::report::Series;
use super::{Pass, describe_api_error};
use crate::Error;
use crate::crd::hold_requested;
use crate::desired::{
    ON_DELETE, ROLLING_UPDATE, live_template_hash, set_max_unavailable, with_strategy_type,
};
use crate::meta::object_meta_modified;
use crate::observer::{PrePullStanding, Transition, WriteOutcome};
use canary_predicates::available_pods;

/// The pause mark's value when the health gates set it (`onUnhealthy: Hold`, issue 46).
pub const HELD_ON_UNHEALTHY: &str = "onUnhealthy";

/// What every pass sees before a driver observes: the live DaemonSet, the desired one, the
/// drift check and the verb marks both drivers read.
pub(super) struct Seen<'p> {
    /// The live DaemonSet, from the cache.
    pub live: &'p DaemonSet,
    /// The desired DaemonSet; `None` for one someone else owns (`spec.workloadRef`), which is
    /// never written.
    pub desired: Option<&'p DaemonSet>,
    /// The desired template differs from the live one (only the controller's own).
    pub template_changed: bool,
    /// What the drift check found.
    pub drift: DriftCheck,
    /// The retry mark, when new.
    pub retry_mark: Option<String>,
    /// A hold is asked for (the `pause` verb).
    pub held: bool,
    /// The status records the hold as acted on.
    pub hold_recorded: bool,
}

/// What the drift check of a pass found.
pub(super) struct DriftCheck {
    /// Someone else changed the live template; `None` when it is as the controller last wrote
    /// it (or its own write whose record was lost), or when it is not the controller's to
    /// write.
    pub drift: Option<DriftSeen>,
    /// The live template is the controller's own write whose record was lost: recorded now.
    pub own_unrecorded: bool,
    /// The live DaemonSet's template hash.
    pub live_hash: String,
    /// The hash the status records as the controller's last write.
    pub written_hash: Option<String>,
}

/// What a driver did after the template write, for the pass's result.
#[derive(Default)]
pub(super) struct Acted {
    /// The first error of its action, returned once the status is written.
    pub error: Option<Error>,
    /// Work is left that the next pass decides at once.
    pub again: bool,
}

/// A driver, as the pass skeleton runs it: what it observes, the table it decides with, and
/// how it acts.
pub(super) trait Driver {
    /// What the driver does beside the shared outcome.
    type Action: DriverAction + Debug;
    /// Observes what the driver reads beyond [`Seen`]; `Err` is the message of a spec the
    /// pass cannot act on (`InvalidSpec`).
    fn observe(&mut self, pass: &Pass<'_>, plan: &Plan, seen: &Seen<'_>) -> Result<(), String>;
    /// Decides with the driver's table.
    fn decide(&mut self, pass: &Pass<'_>, plan: &Plan) -> Decision<Self::Action>;
    /// Fills the driver's part of the record before the write: the target, the counts, the
    /// live `maxUnavailable`.
    fn record(&self, decision: &Decision<Self::Action>, record: &mut Transition);
    /// Acts after the template write (and records what it did).
    async fn act(
        &self,
        pass: &Pass<'_>,
        decision: &Decision<Self::Action>,
        record: &mut Transition,
    ) -> Result<Acted, Error>;
    /// The series the pass's events and its history's belong to (see [`Pass::publish`]).
    fn series(&self, decision: &Decision<Self::Action>, record: &Transition) -> Series;
    /// When the next pass comes, for the driver's own phases.
    fn requeue(&self, decision: &Decision<Self::Action>, requeue: &Requeue) -> Duration;
    /// The nodes to pre-pull the new images on after `decision` (issue 50), in the order
    /// they are replaced; `None` outside a pre-pull window. Asked only with `spec.prePull` on.
    fn pre_pull_nodes(
        &self,
        pass: &Pass<'_>,
        plan: &Plan,
        decision: &Decision<Self::Action>,
    ) -> Option<Vec<String>>;
}

impl Pass<'_> {
    /// The `ProgressDeadlineExceeded` event names the pods that are not ready and their nodes
    /// (the first few, by name): "0 of 20 pods updated and ready" alone sends the reader to
    /// search for them. Only the event, which goes out once: the status message stays the
    /// state machine's, so later passes do not rewrite it as pods come and go.
    fn name_laggards<A: DriverAction>(&self, mut decision: Decision<A>) -> Decision<A> {
        const SHOWN: usize = 5;
        let Some(event) = decision
            .events
            .iter_mut()
            .find(|event| event.reason == event_reason::PROGRESS_DEADLINE_EXCEEDED)
        else {
            return decision;
        };
        let group = crate::index::pod_group(&self.namespace, &self.ds_name);
        let mut not_ready: Vec<String> = self.ctx.caches.pods.with_group(&group, |pods| {
            pods.filter(|pod| !pod_is_terminating(&***pod) && !pod_is_ready(&***pod))
                .map(|pod| match pod.node_name() {
                    Some(node) => format!("{} on {node}", pod.name()),
                    None => format!("{} (not scheduled)", pod.name()),
                })
                .collect()
        });
        if not_ready.is_empty() {
            return decision;
        }
        not_ready.sort();
        let more = not_ready.len().saturating_sub(SHOWN);
        not_ready.truncate(SHOWN);
        let _ = write!(event.message, "; not ready: {}", not_ready.join(", "));
        if more > 0 {
            let _ = write!(event.message, " and {more} more");
        }
        decision
    }

    /// One pass of `driver` over `live` toward `desired`: observe, decide, act, record.
    pub(super) async fn drive<D: Driver>(
        &self,
        plan: &Plan,
        live: &DaemonSet,
        desired: Option<DaemonSet>,
        mut driver: D,
    ) -> Result<Action, Error> {
        // Observe.
        let status = self.status.as_ref();
        let held = hold_requested(self.cds);
        let seen = Seen {
            live,
            desired: desired.as_ref(),
            template_changed: desired
                .as_ref()
                .is_some_and(|d| object_meta_modified(&d.metadata, &live.metadata)),
            drift: self.drift_check(plan, live, desired.as_ref(), held)?,
            retry_mark: self.new_retry_mark(),
            held,
            hold_recorded: status.is_some_and(|s| s.held == Some(true)),
        };
        if let Some(stamp) = self.restart_to_take(plan, live, desired.as_ref(), &seen.drift)?
            && self.take_restart(&stamp).await
        {
            // The next pass (the spec's change brings it at once) rolls the restart out as a
            // new target, canary first.
            return Ok(Action::requeue(self.ctx.requeue.conflict));
        }
        if let Err(message) = driver.observe(self, plan, &seen) {
            return self.invalid_spec(message).await;
        }

        // Decide: the driver's table, then the life cycle's rollback row, before any write.
        let (decision, going_back) = self.go_back(driver.decide(self, plan)).await;
        debug!(namespace = %self.namespace, name = %self.cds.name_any(), ds = %self.ds_name, ?decision, "decided");
        let check = &seen.drift;
        let mut record = Transition {
            available: available_pods(live),
            recorded_generation: status.and_then(|s| s.recorded_daemon_set_generation),
            drift: decision
                .drifted
                .then(|| check.drift.as_ref().map(|d| d.what.clone()))
                .flatten(),
            // A status from before drift detection has no reference yet: the live DaemonSet
            // becomes it (a drift from before cannot be told from the controller's own write);
            // so does the controller's own write whose record was lost.
            template_hash: (desired.is_some()
                && (check.written_hash.is_none() || check.own_unrecorded))
                .then(|| check.live_hash.clone()),
            ..self.record(&decision)
        };
        driver.record(&decision, &mut record);

        // Act: the one template write, then the driver's own action.
        let decision = match &desired {
            Some(desired) => {
                let write = self.write_template(plan, live, desired, decision, &check.drift);
                match write.await? {
                    Written::Done(decision, written) => {
                        written.apply(&mut record);
                        decision
                    }
                    Written::InvalidSpec(message) => return self.invalid_spec(message).await,
                }
            }
            None => decision,
        };
        let decision = self.name_laggards(decision);
        record.to = decision.phase;
        record.failure = decision.failure;
        record.message = decision.error.clone();
        record.held = decision.held;
        // Held by the health gates (`onUnhealthy: Hold`), not by the mark: the mark is set, so
        // that the hold is the `pause` verb's from now on (a person decides: `resume` goes on,
        // `abort` rolls back), not ended by the node recovering or leaving the window.
        if decision.held_by_health && !seen.held {
            self.mark_held_on_unhealthy().await;
        }
        // Acted on whatever the phase: an old mark never retries a later failure.
        if seen.retry_mark.is_some() {
            record.retry = seen.retry_mark.clone();
        }
        let acted = driver.act(self, &decision, &mut record).await?;
        // Image pre-pull (issue 50): best effort, beside the decision, never part of it.
        let wanted = plan
            .pre_pull
            .and_then(|_| driver.pre_pull_nodes(self, plan, &decision));
        let pre_pull = self
            .pre_pull(plan, desired.as_ref().unwrap_or(live), wanted)
            .await;
        record.pre_pull = pre_pull.standing.clone();
        let pulling = pre_pull.recheck;

        // Record.
        let series = driver.series(&decision, &record);
        self.tell_pre_pull_blocked(&pre_pull.standing, &series)
            .await;
        let action = self
            .record_pass(
                record,
                &decision,
                going_back,
                &series,
                pulling.then_some(super::pre_pull::PRE_PULL_RECHECK),
                |requeue| driver.requeue(&decision, requeue),
            )
            .await?;
        match acted {
            Acted {
                error: Some(error), ..
            } => Err(error),
            // The rest of the work, decided again from what the cluster and the object say now.
            Acted { again: true, .. } => Ok(Action::requeue(Duration::ZERO)),
            Acted { .. } => Ok(action),
        }
    }

    /// The Warning of a pre-pull refused for want of permission (issue 50), once each time
    /// the `PrePullBlocked` condition turns true: not on every pass that is refused again.
    async fn tell_pre_pull_blocked(&self, standing: &PrePullStanding, series: &Series) {
        let PrePullStanding::Forbidden(message) = standing else {
            return;
        };
        let blocked_already = self.status.as_ref().is_some_and(|status| {
            crate::status::condition_is(status, ConditionType::PrePullBlocked, true)
        });
        if !blocked_already {
            self.publish(
                KubeEventType::Warning,
                event_reason::PRE_PULL_BLOCKED,
                message.clone(),
                false,
                &series.pass,
            )
            .await;
        }
    }

    /// Sets the pause mark on the CanaryDaemonSet for a hold of `onUnhealthy: Hold`
    /// ([`HELD_ON_UNHEALTHY`]). A refusal is logged: the next pass, which sees the same
    /// evidence, holds and tries again.
    async fn mark_held_on_unhealthy(&self) {
        let api = crate::crd::dynamic_api(&self.ctx.client, Some(&self.namespace));
        let params = kube::api::PatchParams {
            field_manager: Some(self.ctx.field_manager.clone()),
            ..kube::api::PatchParams::default()
        };
        let patch = serde_json::json!({"metadata": {"annotations": {
            crate::crd::PAUSE_ANNOTATION: HELD_ON_UNHEALTHY,
        }}});
        if let Err(error) = api
            .patch(
                &self.cds.name_any(),
                &params,
                &kube::api::Patch::Merge(&patch),
            )
            .await
        {
            tracing::warn!(namespace = %self.namespace, name = %self.cds.name_any(), error = %describe_api_error(&error.into()), "cannot set the pause mark of onUnhealthy: Hold");
        }
    }

    /// The one drift check: whether the live template is what the controller last wrote, its
    /// own write whose record was lost, or someone else's change (only the controller's own
    /// template can drift: a referenced DaemonSet, `desired` `None`, never does).
    /// The `restartedAt` of a `kubectl rollout restart` on the managed DaemonSet to take into
    /// the spec: a drift that is that stamp alone (`drift::restart_by_someone_else`), under
    /// `driftPolicy: Revert`, with a template of the spec's own (not a `workloadRef`).
    fn restart_to_take(
        &self,
        plan: &Plan,
        live: &DaemonSet,
        desired: Option<&DaemonSet>,
        check: &DriftCheck,
    ) -> Result<Option<String>, Error> {
        let (Some(_), Some(desired), Some(written)) =
            (&check.drift, desired, check.written_hash.as_deref())
        else {
            return Ok(None);
        };
        if plan.strategy.drift_policy != canary_state_machine::DriftPolicy::Revert
            || self.cds.spec.template.is_none()
        {
            return Ok(None);
        }
        restart_by_someone_else(live, desired, written)
    }

    /// Takes a `kubectl rollout restart` of the managed DaemonSet into the spec's pod
    /// template (as `daemonset-canary restart` writes it), so that every pod is replaced
    /// through the steps, canary first, rather than the restart being reverted as drift; a
    /// Normal event `RestartTaken` says so. False when the spec could not be written: the
    /// pass goes on and reverts the edit as drift, which stops the DaemonSet controller.
    ///
    /// The window: from the restart's write to the next pass's write of the new target
    /// (this write, then the spec's watch event: two requests), the DaemonSet controller
    /// replaces pods with the stamped template under the live `maxUnavailable`, the resting
    /// value (1, the canary's); a pod it replaced meanwhile is on neither revision and is
    /// replaced again by the rollout.
    async fn take_restart(&self, stamp: &str) -> bool {
        let api = crate::crd::dynamic_api(&self.ctx.client, Some(&self.namespace));
        let params = kube::api::PatchParams {
            field_manager: Some(self.ctx.field_manager.clone()),
            ..kube::api::PatchParams::default()
        };
        let patch = serde_json::json!({"spec": {"template": {"spec": {"template": {
            "metadata": {"annotations": {RESTARTED_AT: stamp}}
        }}}}});
        let name = self.cds.name_any();
        if let Err(error) = api
            .patch(&name, &params, &kube::api::Patch::Merge(&patch))
            .await
        {
            let error = crate::error::kube_error_text(&error);
            warn!(namespace = %self.namespace, %name, ds = %self.ds_name, %error, "could not take kubectl rollout restart into the spec: reverted as drift");
            return false;
        }
        self.ctx.memory.take_restart(self.cds, stamp);
        info!(namespace = %self.namespace, %name, ds = %self.ds_name, restarted_at = %stamp, "kubectl rollout restart taken into the spec: every pod is replaced canary first");
        let message = format!(
            "daemonSet {}: kubectl rollout restart (restartedAt {stamp}) taken into spec.template: every pod is replaced through the steps, canary first",
            self.ds_name
        );
        self.publish(KubeEventType::Normal, RESTART_TAKEN, message, true, stamp)
            .await;
        true
    }

    fn drift_check(
        &self,
        plan: &Plan,
        live: &DaemonSet,
        desired: Option<&DaemonSet>,
        held: bool,
    ) -> Result<DriftCheck, Error> {
        let status = self.status.as_ref();
        let live_hash = live_template_hash(live)?;
        let written_hash = status.and_then(|s| s.daemon_set_template_hash.clone());
        let mut check = DriftCheck {
            drift: None,
            own_unrecorded: false,
            live_hash,
            written_hash,
        };
        let (Some(written), Some(status)) = (check.written_hash.as_deref(), status) else {
            return Ok(check);
        };
        if written == check.live_hash {
            return Ok(check);
        }
        let own = OwnWrites {
            strategy: &plan.strategy,
            write: plan.rolling_update_write(),
            // The hold's `OnDelete` is ours while it is asked for or recorded, not after.
            hold: held || status.held == Some(true),
        };
        // A live template that is the controller's own write whose record was lost is recorded
        // now, in this pass's status write: left behind the `maxUnavailable` that write also
        // records, the old hash would no longer match the live DaemonSet with the recorded
        // value, and the next pass would take the rollout's own widen for a hand edit and
        // restart the canary (soak seed 10000522: the widen's status write was lost). Nor is a
        // rollback's write, by any process, of the exact revision it goes back to, nor the
        // start of the current target (or an undo) whose record a replaced leader lost.
        check.own_unrecorded = own_unrecorded_write(live, status, written, &own)?
            || self.ctx.memory.live_is_own_write(self.cds, live)
            || self.live_is_rollback_revision(&check.live_hash)
            || desired.is_some_and(|desired| unrecorded_start(live, desired, status, &plan.target));
        // A restart this controller took into the spec: the spec's new target writes it.
        let restart_taken = restarted_at(live).is_some_and(|stamp| {
            desired.and_then(restarted_at) == Some(stamp)
                && self.ctx.memory.restart_taken(self.cds, stamp)
        });
        if !check.own_unrecorded
            && !restart_taken
            && let Some(desired) = desired
        {
            check.drift = Some(DriftSeen {
                what: describe_drift(live, desired, status, plan.surge),
            });
        }
        Ok(check)
    }

    /// The decision's one template write, if it has one: the desired DaemonSet (a hold or its
    /// end: the live one with its strategy type moved), with the decided `maxUnavailable` and
    /// TLS step. A refusal other than a conflict is the life cycle's refused-write row.
    async fn write_template<A: DriverAction>(
        &self,
        plan: &Plan,
        live: &DaemonSet,
        desired: &DaemonSet,
        decision: Decision<A>,
        drift: &Option<DriftSeen>,
    ) -> Result<Written<A>, Error> {
        let Some(write) = decision.write else {
            return Ok(Written::Done(decision, TemplateWritten::default()));
        };
        let mut written = match write.kind {
            // The hold and its end move the live strategy type only: a template change made
            // meanwhile waits for the rows to write it, supervised.
            WriteKind::Hold => with_strategy_type(live, ON_DELETE),
            WriteKind::Resume => with_strategy_type(live, ROLLING_UPDATE),
            _ => desired.clone(),
        };
        if let (Some(edit), Some(cfg)) = (write.template_edit, &plan.tls)
            && let Err(e) = canary_tls_migration::apply_step(&mut written, edit, cfg)
        {
            return Ok(Written::InvalidSpec(format!("TLS migration: {e}")));
        }
        if let Some(max) = write.max_unavailable {
            set_max_unavailable(&mut written, max, plan.rolling_update_write());
        }
        if write.kind == WriteKind::RevertHeld {
            // The failure's hold stays: the DaemonSet controller replaces no pod with the
            // release that failed.
            written = with_strategy_type(&written, ON_DELETE);
        }
        match self.patch(live, &written).await {
            Ok(patched) => {
                self.report_write(write.kind, WriteOutcome::Ok);
                let template_hash = match write.kind {
                    // A hold (or its end) over a drifted template writes that template back as
                    // it is: recording it as ours would forget the drift, which then outlived
                    // the hold (soak seed 9000841). The reference stays the last template the
                    // controller wrote; the type moved alone is ours while the hold lasts.
                    WriteKind::Hold | WriteKind::Resume if drift.is_some() => None,
                    _ => Some(live_template_hash(&patched)?),
                };
                self.ctx
                    .memory
                    .remember_write(self.cds, &patched, template_hash.is_some());
                if write.kind == WriteKind::Start {
                    self.note_rollout_started(desired, &plan.target.version)
                        .await;
                }
                info!(namespace = %self.namespace, name = %self.cds.name_any(), ds = %self.ds_name, kind = write.kind.as_str(), phase = %decision.phase, "daemonSet written");
                let done = TemplateWritten {
                    kind: Some(write.kind),
                    template_hash,
                    max_unavailable: write.max_unavailable,
                    generation: patched.metadata.generation,
                    record_generation: decision.action.records_generation(),
                };
                Ok(Written::Done(decision, done))
            }
            Err(error) if error.is_conflict() => {
                self.report_write(write.kind, WriteOutcome::Conflict);
                Err(error)
            }
            Err(error) => {
                self.report_write(write.kind, WriteOutcome::Rejected);
                let api_error = describe_api_error(&error);
                let failed = decision.write_failed(&plan.strategy, &self.ds_name, &api_error);
                Ok(Written::Done(failed, TemplateWritten::default()))
            }
        }
    }
}

/// What became of a decision's template write.
enum Written<A> {
    /// The decision as it stands after the write (failed when the write was refused), and
    /// what the write changed.
    Done(Decision<A>, TemplateWritten),
    /// The TLS step cannot be applied to the desired template.
    InvalidSpec(String),
}

/// What a template write that went through changes in the pass's record.
#[derive(Default)]
struct TemplateWritten {
    kind: Option<WriteKind>,
    template_hash: Option<String>,
    max_unavailable: Option<canary_state_machine::MaxUnavailable>,
    generation: Option<i64>,
    record_generation: bool,
}

impl TemplateWritten {
    fn apply(self, record: &mut Transition) {
        let Some(kind) = self.kind else {
            return;
        };
        record.write = Some(kind);
        record.template_hash = self.template_hash;
        if let Some(max) = self.max_unavailable {
            record.max_unavailable = Some(max.to_live());
        }
        if self.record_generation {
            record.recorded_generation = self.generation;
        }
    }
}
