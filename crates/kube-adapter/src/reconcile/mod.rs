//! One reconcile pass of one `CanaryDaemonSet` (spec sections 3 to 7): read, decide, write.
//!
//! Read the cached DaemonSet and the indexed pods, build the desired DaemonSet (`plan`),
//! observe ([`observation`]), ask the state machine, then apply its decision: at most one
//! DaemonSet write (create, or the reference JSON Patch guarded by a `test` on the generation),
//! then one status write if the status changed, then the event. The pass's typed record, a
//! [`Transition`], is what the status is computed from and what the observer reports.
//!
//! Submodules: `plan` (spec → settings), [`observation`] (cluster → `Observation`, shared with
//! the KubeVirt observe mode), `memory` (what the controller remembers between passes).

mod memory;
pub mod observation;
mod plan;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use canary_predicates::{
    CountRule, OwnerMatch, PodCounts, PodSummary, UpdatedRule, count_pods_owned_by,
    current_revision_hash, live_max_unavailable,
};
use canary_state_machine::{
    Compatibility, Decision, EventType, FailureReason, Observation, Phase, WriteKind, decide,
    decide_create,
};
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event as KubeEvent, EventType as KubeEventType, Recorder, Reporter};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource, ResourceExt};
use tracing::{debug, info, warn};

use crate::Error;
use crate::clock::Clock;
use crate::crd::{CanaryDaemonSet, CanaryDaemonSetStatus};
use crate::desired::{desired_daemon_set, set_max_unavailable};
use crate::index::OwnerIndex;
use crate::meta::object_meta_modified;
use crate::observer::{Observer, Report, Transition, WriteOutcome};
use crate::patch::daemon_set_patch;
use crate::status::{AVAILABLE, next_status, previous_pass};
use memory::Memory;
use observation::{available_pods, observe_daemon_set};
use plan::{Plan, plan};

/// How long to wait before looking again, by situation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Requeue {
    /// At rest (eventual-consistency resync).
    pub resync: Duration,
    /// While a rollout is in progress (progress-deadline checks; watch events come sooner).
    pub in_progress: Duration,
    /// After a write conflict or while the cache catches up with our own write.
    pub conflict: Duration,
    /// First error back-off (doubles per consecutive error).
    pub error_base: Duration,
    /// Longest error back-off.
    pub error_max: Duration,
    /// Status changes that only move pod counts are written at most this often per
    /// CanaryDaemonSet; phase changes, DaemonSet writes and failures are written at once. On
    /// 5,000 nodes this turns one status write per pod event into one per interval.
    pub count_status_interval: Duration,
}

impl Default for Requeue {
    fn default() -> Self {
        Self {
            resync: Duration::from_secs(300),
            in_progress: Duration::from_secs(15),
            conflict: Duration::from_secs(1),
            error_base: Duration::from_secs(1),
            error_max: Duration::from_secs(300),
            count_status_interval: Duration::from_secs(1),
        }
    }
}

/// The caches a pass reads.
#[derive(Debug, Clone)]
pub struct Caches {
    /// DaemonSets.
    pub daemon_sets: Store<DaemonSet>,
    /// Whether the DaemonSet cache has completed its first list.
    pub daemon_sets_ready: Arc<AtomicBool>,
    /// Pods by controller-owner name.
    pub pods: OwnerIndex<PodSummary>,
    /// ControllerRevisions by controller-owner UID.
    pub revisions: OwnerIndex<ControllerRevision>,
}

impl Caches {
    fn ready(&self) -> bool {
        self.daemon_sets_ready.load(Ordering::Acquire)
            && self.pods.is_ready()
            && self.revisions.is_ready()
    }
}

/// Everything a reconcile pass needs; shared by all passes.
pub struct Context {
    /// The API client.
    pub client: Client,
    /// The caches.
    pub caches: Caches,
    /// Who publishes the events (controller name and instance); each spec generation of a
    /// CanaryDaemonSet gets its own `Recorder` from it (see `publish`).
    pub reporter: Reporter,
    /// Source of "now" for status times.
    pub clock: Clock,
    /// Where the passes report to.
    pub observer: Observer,
    /// Field manager of every write.
    pub field_manager: String,
    /// Requeue delays.
    pub requeue: Requeue,
    memory: Memory,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("field_manager", &self.field_manager)
            .field("pods", &self.caches.pods.len())
            .field("requeue", &self.requeue)
            .finish_non_exhaustive()
    }
}

impl Context {
    /// A context over the given caches.
    pub fn new(
        client: Client,
        caches: Caches,
        reporter: Reporter,
        clock: Clock,
        observer: Observer,
        field_manager: String,
        requeue: Requeue,
    ) -> Self {
        Self {
            client,
            caches,
            reporter,
            clock,
            observer,
            field_manager,
            requeue,
            memory: Memory::default(),
        }
    }

    /// The CanaryDaemonSets whose deferred status is due: the controller reconciles each
    /// (`None` after the first call). See `Memory::take_status_flushes`.
    pub fn take_status_flushes(
        &self,
    ) -> Option<tokio::sync::mpsc::UnboundedReceiver<Arc<CanaryDaemonSet>>> {
        self.memory.take_status_flushes()
    }
}

/// The controller's error policy: conflicts come back quickly, other errors back off
/// exponentially per object (reset by the next successful pass).
pub fn error_policy(cds: Arc<CanaryDaemonSet>, error: &Error, ctx: Arc<Context>) -> Action {
    if error.is_conflict() {
        debug!(namespace = cds.namespace().unwrap_or_default(), name = %cds.name_any(), %error, "conflict, retrying shortly");
        return Action::requeue(ctx.requeue.conflict);
    }
    let requeue = &ctx.requeue;
    let delay = ctx
        .memory
        .next_error_delay(&cds, requeue.error_base, requeue.error_max);
    warn!(namespace = cds.namespace().unwrap_or_default(), name = %cds.name_any(), %error, ?delay, "reconcile failed");
    Action::requeue(delay)
}

/// One reconcile pass.
pub async fn reconcile(cds: Arc<CanaryDaemonSet>, ctx: Arc<Context>) -> Result<Action, Error> {
    // Wall-clock time: the pass's real cost, also under a paused tokio clock.
    let started = std::time::Instant::now();
    let result = reconcile_pass(&cds, &ctx).await;
    ctx.observer.report(Report::Reconciled {
        took: started.elapsed(),
        error: result.as_ref().err().map(Error::metric_label),
    });
    result
}

async fn reconcile_pass(cds: &CanaryDaemonSet, ctx: &Context) -> Result<Action, Error> {
    if !ctx.caches.ready() {
        return Ok(Action::requeue(ctx.requeue.conflict));
    }
    let action = Pass::new(cds, ctx)?.run().await?;
    ctx.memory.reset_errors(cds);
    Ok(action)
}

/// State of one pass.
struct Pass<'a> {
    cds: &'a CanaryDaemonSet,
    ctx: &'a Context,
    namespace: String,
    ds_name: String,
    now: k8s_openapi::jiff::Timestamp,
    status: Option<CanaryDaemonSetStatus>,
    status_persisted: bool,
}

impl<'a> Pass<'a> {
    fn new(cds: &'a CanaryDaemonSet, ctx: &'a Context) -> Result<Self, Error> {
        let (status, status_persisted) = ctx.memory.status_of(cds);
        Ok(Self {
            cds,
            ctx,
            namespace: cds
                .namespace()
                .ok_or(Error::MissingField("metadata.namespace"))?,
            ds_name: cds.daemon_set_name(),
            now: ctx.clock.now(),
            status,
            status_persisted,
        })
    }

    /// The owned DaemonSet's key in the cache.
    fn ds_ref(&self) -> ObjectRef<DaemonSet> {
        ObjectRef::new(&self.ds_name).within(&self.namespace)
    }

    /// The record of this pass with nothing observed yet: the previous counts carried over.
    fn record(&self, decision: &Decision) -> Transition {
        let previous = self.status.as_ref();
        Transition {
            namespace: self.namespace.clone(),
            name: self.cds.name_any(),
            daemon_set: self.ds_name.clone(),
            // The version a pass that cannot read the spec leaves is the last one known.
            version: previous
                .and_then(|s| s.target_version.clone())
                .unwrap_or_default(),
            from: previous
                .and_then(|s| s.phase.as_deref())
                .and_then(|p| p.parse().ok()),
            to: decision.phase,
            failure: decision.failure,
            message: decision.error.clone(),
            write: None,
            desired: previous.map_or(0, |s| s.desired),
            updated: previous.map_or(0, |s| s.updated),
            updated_ready: previous.map_or(0, |s| s.updated_ready),
            available: previous.map_or(0, |s| s.desired),
            max_unavailable: None,
            observed_generation: self.cds.metadata.generation,
            recorded_generation: previous.and_then(|s| s.recorded_daemon_set_generation),
            phase_started_at: self.now,
            at: self.now,
        }
    }

    async fn run(&self) -> Result<Action, Error> {
        // Read.
        let plan = match plan(self.cds) {
            Ok(plan) => plan,
            Err(message) => return self.invalid_spec(message).await,
        };
        let mut desired = desired_daemon_set(self.cds, &plan.keys, &plan.target)?;
        let Some(live) = self.ctx.caches.daemon_sets.get(&self.ds_ref()) else {
            if self.ctx.memory.create_in_flight(self.cds, &self.ds_name) {
                // Ours, or known to exist: the watch has not delivered it yet.
                return Ok(Action::requeue(self.ctx.requeue.conflict));
            }
            return self.create(&plan, desired).await;
        };
        self.ctx.memory.forget_created(self.cds);
        if live.metadata.deletion_timestamp.is_some() {
            return Ok(Action::requeue(self.ctx.requeue.conflict));
        }
        if let Some((kind, name)) = foreign_controller(&live, self.cds) {
            let message = format!(
                "DaemonSet {} is controlled by {kind} {name}, not by this CanaryDaemonSet",
                self.ds_name
            );
            return self.invalid_spec(message).await;
        }
        if self.ctx.memory.cache_behind(self.cds, &live) {
            // Our own last write is not in the cache yet: deciding now would redo it.
            return Ok(Action::requeue(self.ctx.requeue.conflict));
        }
        let tls = match &plan.tls {
            Some(cfg) => match tls_facts(&live, &mut desired, cfg) {
                Ok(facts) => Some(facts),
                Err(message) => return self.invalid_spec(message).await,
            },
            None => None,
        };
        let counts = self.count_pods(&plan, &live);
        let status = self.status.as_ref();
        let recorded = status.and_then(|s| s.recorded_daemon_set_generation);
        let observation = Observation {
            version: plan.target.version.clone(),
            object_changed: object_meta_modified(&desired.metadata, &live.metadata),
            generation_known: recorded == live.metadata.generation,
            tls,
            previous: previous_pass(status, self.now),
            ..observe_daemon_set(&live, &counts)
        };

        // Decide.
        let decision = decide(&plan.strategy, &observation);
        debug!(namespace = %self.namespace, name = %self.cds.name_any(), ds = %self.ds_name, ?observation, ?decision, "decided");
        let mut record = Transition {
            version: plan.target.version.clone(),
            desired: observation.desired_pods,
            updated: counts.updated,
            updated_ready: counts.updated_ready,
            available: available_pods(&live),
            max_unavailable: Some(observation.live_max_unavailable.clone()),
            recorded_generation: recorded,
            ..self.record(&decision)
        };

        // Write.
        let Some(write) = decision.write else {
            return self.finish(record, decision).await;
        };
        let mut written = desired;
        if let (Some(edit), Some(cfg)) = (write.template_edit, &plan.tls)
            && let Err(e) = canary_tls_migration::apply_step(&mut written, edit, cfg)
        {
            return self.invalid_spec(format!("TLS migration: {e}")).await;
        }
        if let Some(max) = write.max_unavailable {
            set_max_unavailable(&mut written, max, plan.strategy.compatibility.into());
            record.max_unavailable = Some(max.to_live());
        }
        let decision = match self.patch(&live, &written).await {
            Ok(patched) => {
                self.report_write(write.kind, WriteOutcome::Ok);
                self.ctx.memory.remember_write(self.cds, &patched);
                record.write = Some(write.kind);
                if decision.record_generation {
                    record.recorded_generation = patched.metadata.generation;
                }
                info!(namespace = %self.namespace, name = %self.cds.name_any(), ds = %self.ds_name, kind = write.kind.as_str(), phase = %decision.phase, "daemonSet written");
                decision
            }
            Err(error) if error.is_conflict() => {
                self.report_write(write.kind, WriteOutcome::Conflict);
                return Err(error);
            }
            Err(error) => {
                self.report_write(write.kind, WriteOutcome::Rejected);
                record.max_unavailable = Some(observation.live_max_unavailable.clone());
                decision.write_failed(&plan.strategy, &self.ds_name, &error.to_string())
            }
        };
        record.to = decision.phase;
        record.failure = decision.failure;
        record.message = decision.error.clone();
        self.finish(record, decision).await
    }

    /// Create path (spec section 3 step 2).
    async fn create(&self, plan: &Plan, mut desired: DaemonSet) -> Result<Action, Error> {
        let decision = decide_create(&plan.strategy, &self.ds_name, &plan.target.version);
        if let Some(cfg) = &plan.tls
            && let Err(e) = canary_tls_migration::prepare_for_create(&mut desired, cfg)
        {
            return self.invalid_spec(format!("TLS migration: {e}")).await;
        }
        let max = decision.write.and_then(|w| w.max_unavailable);
        if let Some(max) = max {
            set_max_unavailable(&mut desired, max, plan.strategy.compatibility.into());
        }
        let mut record = Transition {
            version: plan.target.version.clone(),
            desired: 0,
            updated: 0,
            updated_ready: 0,
            available: 0,
            recorded_generation: None,
            max_unavailable: max.map(|m| m.to_live()),
            ..self.record(&decision)
        };
        let api: Api<DaemonSet> = Api::namespaced(self.ctx.client.clone(), &self.namespace);
        let params = PostParams {
            field_manager: Some(self.ctx.field_manager.clone()),
            ..PostParams::default()
        };
        let decision = match api.create(&params, &desired).await {
            Ok(created) => {
                self.report_write(WriteKind::Create, WriteOutcome::Ok);
                self.ctx.memory.note_created(self.cds, &self.ds_name);
                self.ctx.memory.remember_write(self.cds, &created);
                record.write = Some(WriteKind::Create);
                if decision.record_generation {
                    record.recorded_generation = created.metadata.generation;
                }
                info!(namespace = %self.namespace, name = %self.cds.name_any(), ds = %self.ds_name, "daemonSet created");
                decision
            }
            // Created meanwhile (or our cache is behind): come back once the watch has it.
            Err(kube::Error::Api(status)) if status.is_already_exists() => {
                self.report_write(WriteKind::Create, WriteOutcome::Conflict);
                self.ctx.memory.note_created(self.cds, &self.ds_name);
                return Err(Error::Conflict {
                    what: format!("daemonset {}", self.ds_name),
                    message: status.message,
                });
            }
            Err(error) => {
                self.report_write(WriteKind::Create, WriteOutcome::Rejected);
                decision.write_failed(&plan.strategy, &self.ds_name, &error.to_string())
            }
        };
        record.to = decision.phase;
        record.failure = decision.failure;
        record.message = decision.error.clone();
        self.finish(record, decision).await
    }

    fn count_pods(&self, plan: &Plan, live: &DaemonSet) -> PodCounts {
        let uid = live.metadata.uid.clone().unwrap_or_default();
        let (owner, updated, skip_terminating) = match plan.strategy.compatibility {
            // The reference: owner name only, annotations only, terminating pods counted.
            Compatibility::KubeVirt => (
                OwnerMatch::NameOnly {
                    name: &self.ds_name,
                },
                UpdatedRule::Annotations,
                false,
            ),
            Compatibility::Fixed => {
                let revisions = self.ctx.caches.revisions.get(&uid);
                let revision_hash = current_revision_hash(revisions.iter().map(|r| &**r))
                    .unwrap_or_default()
                    .to_owned();
                (
                    OwnerMatch::Uid {
                        name: &self.ds_name,
                        uid: &uid,
                    },
                    UpdatedRule::AnnotationsAndRevision { revision_hash },
                    true,
                )
            }
        };
        let rule = CountRule {
            target: &plan.target,
            keys: &plan.keys,
            updated: &updated,
            crash_loop: &plan.crash_loop,
            skip_terminating,
        };
        self.ctx.caches.pods.with_group(&self.ds_name, |pods| {
            count_pods_owned_by(pods.map(|p| &**p), &owner, &rule)
        })
    }

    async fn patch(&self, live: &DaemonSet, desired: &DaemonSet) -> Result<DaemonSet, Error> {
        let patch = daemon_set_patch(live, desired)?;
        let api: Api<DaemonSet> = Api::namespaced(self.ctx.client.clone(), &self.namespace);
        let params = PatchParams {
            field_manager: Some(self.ctx.field_manager.clone()),
            ..PatchParams::default()
        };
        match api
            .patch(&self.ds_name, &params, &Patch::Json::<()>(patch))
            .await
        {
            Ok(ds) => Ok(ds),
            // 422 on a failed `test` op (our cache was stale), 409 on a concurrent write.
            Err(kube::Error::Api(status)) if status.is_conflict() || status.code == 422 => {
                Err(Error::Conflict {
                    what: format!("daemonset {}", self.ds_name),
                    message: status.message,
                })
            }
            Err(error) => Err(error.into()),
        }
    }

    fn report_write(&self, kind: WriteKind, outcome: WriteOutcome) {
        self.ctx
            .observer
            .report(Report::DaemonSetWrite { kind, outcome });
    }

    /// A spec the controller cannot act on: Degraded, one Warning event, no requeue until the
    /// spec changes.
    async fn invalid_spec(&self, message: String) -> Result<Action, Error> {
        warn!(namespace = %self.namespace, name = %self.cds.name_any(), %message, "invalid spec");
        let already = self.status.as_ref().is_some_and(|s| {
            s.reason.as_deref() == Some(FailureReason::InvalidSpec.as_str())
                && s.message.as_deref() == Some(&message)
        });
        let decision = Decision {
            phase: Phase::Failed,
            failure: Some(FailureReason::InvalidSpec),
            write: None,
            record_generation: false,
            done: false,
            event: None,
            error: Some(message.clone()),
            quiet: false,
        };
        let live = self.ctx.caches.daemon_sets.get(&self.ds_ref());
        let record = Transition {
            max_unavailable: live.as_deref().map(live_max_unavailable),
            ..self.record(&decision)
        };
        self.write_status(record).await?;
        if !already {
            self.publish(
                KubeEventType::Warning,
                FailureReason::InvalidSpec.as_str(),
                message,
                false,
            )
            .await;
        }
        Ok(Action::await_change())
    }

    /// Status, event and the next requeue.
    async fn finish(&self, record: Transition, decision: Decision) -> Result<Action, Error> {
        self.write_status(record).await?;
        if let Some(event) = &decision.event {
            let type_ = match event.type_ {
                EventType::Normal => KubeEventType::Normal,
                EventType::Warning => KubeEventType::Warning,
            };
            self.publish(type_, event.reason, event.message.clone(), true)
                .await;
        }
        let next = match decision.phase {
            _ if decision.quiet => self.ctx.requeue.resync,
            Phase::Failed if decision.failure.is_some_and(FailureReason::is_sticky) => {
                self.ctx.requeue.resync
            }
            _ => self.ctx.requeue.in_progress,
        };
        Ok(Action::requeue(next))
    }

    /// Writes the status of this pass, or defers it when only pod counts moved and the last
    /// write was less than [`Requeue::count_status_interval`] ago (a timer brings the object
    /// back to write it, see [`Context::take_status_flushes`]); reports the transition.
    async fn write_status(&self, mut record: Transition) -> Result<(), Error> {
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
            self.ctx.observer.report(Report::Transition(record));
        }
        Ok(())
    }

    async fn patch_status(&self, status: &CanaryDaemonSetStatus) -> Result<(), Error> {
        let api: Api<CanaryDaemonSet> = Api::namespaced(self.ctx.client.clone(), &self.namespace);
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
    async fn publish(
        &self,
        type_: KubeEventType,
        reason: &str,
        note: String,
        about_daemon_set: bool,
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
        let event = KubeEvent {
            type_,
            reason: reason.to_owned(),
            note: Some(note),
            action: "Rollout".to_owned(),
            secondary,
        };
        // A recorder per spec generation: a new rollout's event is never folded into the
        // previous rollout's series (see `Memory::recorder`).
        let recorder = self.ctx.memory.recorder(self.cds, || {
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

/// The live DaemonSet's controller owner `(kind, name)` when it is not this CanaryDaemonSet.
fn foreign_controller(live: &DaemonSet, cds: &CanaryDaemonSet) -> Option<(String, String)> {
    let owner = live
        .metadata
        .owner_references
        .as_ref()?
        .iter()
        .find(|o| o.controller == Some(true))?;
    let ours = owner.kind == "CanaryDaemonSet" && Some(&owner.uid) == cds.metadata.uid.as_ref();
    (!ours).then(|| (owner.kind.clone(), owner.name.clone()))
}

fn tls_facts(
    live: &DaemonSet,
    desired: &mut DaemonSet,
    cfg: &canary_tls_migration::TlsConfig,
) -> Result<canary_state_machine::TlsFacts, String> {
    canary_tls_migration::apply_preamble(live, desired, cfg)
        .map_err(|e| format!("TLS migration: {e}"))?;
    canary_tls_migration::observe(live, desired, cfg).map_err(|e| format!("TLS migration: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{CanaryDaemonSetSpec, DaemonSetTemplate, TargetSpec};
    use serde_json::json;

    #[test]
    fn foreign_controller_is_detected() {
        let spec = CanaryDaemonSetSpec {
            template: DaemonSetTemplate {
                metadata: Default::default(),
                spec: serde_json::from_value(json!({"selector": {}, "template": {}})).unwrap(),
            },
            daemon_set_name: None,
            target: TargetSpec {
                version: "v1".into(),
                from_container: None,
                registry: String::new(),
                deployment_id: None,
            },
            annotation_keys: None,
            strategy: Default::default(),
            tls_migration: Default::default(),
        };
        let mut cds = CanaryDaemonSet::new("agent", spec);
        cds.metadata.namespace = Some("ns".into());
        cds.metadata.uid = Some("u".into());
        let mut live = DaemonSet::default();
        assert_eq!(foreign_controller(&live, &cds), None, "unowned: adopted");
        live.metadata.owner_references = Some(vec![cds.controller_owner_ref(&()).unwrap()]);
        assert_eq!(foreign_controller(&live, &cds), None, "ours");
        let mut other = cds.controller_owner_ref(&()).unwrap();
        other.uid = "someone-else".into();
        live.metadata.owner_references = Some(vec![other]);
        assert_eq!(
            foreign_controller(&live, &cds),
            Some(("CanaryDaemonSet".into(), "agent".into()))
        );
    }
}
