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
mod pods;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use canary_predicates::{
    CountRule, OwnerMatch, PodCounts, PodSummary, UpdatedRule, count_pods_owned_by,
    current_revision_hash, live_max_unavailable,
};
use canary_state_machine::{
    Compatibility, Decision, DriftSeen, EventType, FailureReason, MaxUnavailable, Observation,
    Phase, Strategy, WriteKind, decide, decide_create, event_reason,
};
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use k8s_openapi::api::core::v1::{Node, ObjectReference};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event as KubeEvent, EventType as KubeEventType, Recorder, Reporter};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource, ResourceExt};
use tracing::{debug, info, warn};

use crate::Error;
use crate::clock::Clock;
use crate::crd::{CanaryDaemonSet, CanaryDaemonSetStatus};
use crate::desired::{
    RollingUpdateWrite, desired_daemon_set, live_template_hash, set_max_unavailable,
};
use crate::health::Health;
use crate::index::OwnerIndex;
use crate::meta::object_meta_modified;
use crate::observer::{Observer, Report, Transition, WriteOutcome};
use crate::patch::daemon_set_patch;
use crate::status::{AVAILABLE, next_status, previous_pass};
use crate::workload::WorkloadWatches;
use memory::Memory;
use observation::{available_pods, observe_daemon_set};
use plan::{DriverPlan, Plan, plan};

/// Whether a pass can act on the spec of `cds`, or the message of the `InvalidSpec` it would
/// report: the verdict of the pass's (private) plan, which checks everything the CRD's schema
/// and CEL rules check, and more.
///
/// Public for the fuzz targets (`fuzz/`), which reach every input parser through public
/// functions; the plan itself stays private, its shape is the pass's business.
pub fn check_spec(cds: &CanaryDaemonSet) -> Result<(), String> {
    plan(cds).map(|_| ())
}

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
    /// Nodes, slimmed to what the Pods driver reads (labels, `unschedulable`, `Ready`).
    pub nodes: Store<Node>,
    /// Whether the node cache has completed its first list (only the Pods driver waits for it:
    /// a controller without node permissions still runs the MaxUnavailable driver).
    pub nodes_ready: Arc<AtomicBool>,
    /// The watches of DaemonSets someone else owns (`spec.workloadRef`).
    pub workloads: Arc<WorkloadWatches>,
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
    /// Readiness and liveness: every pass is counted as running while it runs.
    pub health: Health,
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
            health: Health::default(),
            memory: Memory::default(),
        }
    }

    /// The same context, reporting its passes to `health`.
    #[must_use]
    pub fn with_health(self, health: Health) -> Self {
        Self { health, ..self }
    }

    /// A CanaryDaemonSet is gone: forget what was remembered about it and report it, so that
    /// its metric series go too.
    pub fn forget(&self, cds: &CanaryDaemonSet) {
        self.memory.forget(&ObjectRef::from_obj(cds));
        self.caches.workloads.release(&ObjectRef::from_obj(cds));
        self.observer.report(Report::Deleted {
            namespace: cds.namespace().unwrap_or_default(),
            name: cds.name_any(),
        });
    }

    /// The backoff before trying `cds` again after one more failure.
    pub(crate) fn error_delay(&self, cds: &CanaryDaemonSet) -> Duration {
        self.memory
            .next_error_delay(cds, self.requeue.error_base, self.requeue.error_max)
    }

    /// A stored CanaryDaemonSet that does not decode: `stand_in` carries its metadata and status,
    /// `why` the decode error. It gets what any spec the controller cannot act on gets (a failed
    /// status with reason `InvalidSpec`, the `Degraded` condition, one Warning event), and
    /// nothing is written to any DaemonSet.
    ///
    /// # Errors
    ///
    /// The status write failed.
    pub async fn undecodable(&self, stand_in: &CanaryDaemonSet, why: String) -> Result<(), Error> {
        let _pass = self.health.pass_started();
        Pass::new(stand_in, self)?.invalid_spec(why).await.map(drop)
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
    let _pass = ctx.health.pass_started();
    if !ctx.caches.ready() {
        return Ok(Action::requeue(ctx.requeue.conflict));
    }
    Pass::new(cds, ctx)?.run().await
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
            drift: None,
            template_hash: None,
            phase_started_at: self.now,
            pods: None,
            at: self.now,
        }
    }

    /// [`Pass::record`] before anything is decided.
    fn blank_record(&self) -> Transition {
        self.record(&Decision {
            phase: Phase::Started,
            failure: None,
            write: None,
            record_generation: false,
            done: false,
            event: None,
            error: None,
            quiet: false,
            drifted: false,
        })
    }

    async fn run(&self) -> Result<Action, Error> {
        // Read.
        let plan = match plan(self.cds) {
            Ok(plan) => plan,
            Err(message) => return self.invalid_spec(message).await,
        };
        if let DriverPlan::Pods(pods) = &plan.driver
            && let Some(workload) = &pods.workload
        {
            return self.run_workload(&plan, pods, workload).await;
        }
        self.ctx
            .caches
            .workloads
            .release(&ObjectRef::from_obj(self.cds));
        let desired = desired_daemon_set(self.cds, &plan.keys, &plan.target)?;
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
        match controller_of(&live, self.cds) {
            Controller::Us => {}
            Controller::Other { kind, name } => {
                let message = format!(
                    "DaemonSet {} is controlled by {kind} {name}, not by this CanaryDaemonSet",
                    self.ds_name
                );
                return self.invalid_spec(message).await;
            }
            // Adopting rewrites the DaemonSet's template: kube-proxy or a Helm-managed CNI in
            // the same namespace must not be taken over by whoever can create this resource.
            Controller::Nobody if !self.cds.spec.adopt => {
                let message = format!(
                    "DaemonSet {} already exists and no controller owns it; set spec.adopt: true to let this CanaryDaemonSet take it over (its template and update strategy will be replaced by spec.template), or choose another spec.daemonSetName",
                    self.ds_name
                );
                return self.invalid_spec(message).await;
            }
            Controller::Nobody => {}
        }
        if self.ctx.memory.cache_behind(self.cds, &live) {
            // Our own last write is not in the cache yet: deciding now would redo it.
            return Ok(Action::requeue(self.ctx.requeue.conflict));
        }
        match &plan.driver {
            DriverPlan::Pods(pods) => {
                let revisions = self.ctx.caches.revisions.clone();
                let pod_index = self.ctx.caches.pods.clone();
                self.run_pods(&plan, pods, &live, Some(desired), &pod_index, &revisions)
                    .await
            }
            DriverPlan::MaxUnavailable => self.run_max_unavailable(&plan, &live, desired).await,
        }
    }

    /// The MaxUnavailable driver's pass over the live DaemonSet: observe, decide, write.
    async fn run_max_unavailable(
        &self,
        plan: &Plan,
        live: &DaemonSet,
        mut desired: DaemonSet,
    ) -> Result<Action, Error> {
        let live = live.clone();
        let tls = match &plan.tls {
            Some(cfg) => match tls_facts(&live, &mut desired, cfg) {
                Ok(facts) => Some(facts),
                Err(message) => return self.invalid_spec(message).await,
            },
            None => None,
        };
        let counts = self.count_pods(plan, &live);
        let status = self.status.as_ref();
        let recorded = status.and_then(|s| s.recorded_daemon_set_generation);
        let live_hash = live_template_hash(&live)?;
        let written_hash = status.and_then(|s| s.daemon_set_template_hash.as_deref());
        let drift = match (written_hash, status) {
            (Some(written), Some(status))
                if written != live_hash
                    && !own_unrecorded_write(&live, status, written, &plan.strategy)? =>
            {
                Some(DriftSeen {
                    what: describe_drift(&live, &desired, status),
                })
            }
            _ => None,
        };
        let observation = Observation {
            version: plan.target.version.clone(),
            object_changed: object_meta_modified(&desired.metadata, &live.metadata),
            generation_known: recorded == live.metadata.generation,
            drift,
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
            drift: decision
                .drifted
                .then(|| observation.drift.as_ref().map(|d| d.what.clone()))
                .flatten(),
            // A status from before drift detection has no reference yet: the live DaemonSet
            // becomes it (a drift from before cannot be told from the controller's own write).
            template_hash: written_hash.is_none().then(|| live_hash.clone()),
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
                record.template_hash = Some(live_template_hash(&patched)?);
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
                decision.write_failed(&plan.strategy, &self.ds_name, &describe_api_error(&error))
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
        let max = match plan.driver {
            // `desired` is OnDelete already: the Pods driver never sets a maxUnavailable.
            DriverPlan::Pods(_) => None,
            DriverPlan::MaxUnavailable => decision.write.and_then(|w| w.max_unavailable),
        };
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
                record.template_hash = Some(live_template_hash(&created)?);
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
                let error = Error::from(error);
                self.report_write(WriteKind::Create, WriteOutcome::Rejected);
                decision.write_failed(&plan.strategy, &self.ds_name, &describe_api_error(&error))
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
        let conflict = |message: String| Error::Conflict {
            what: format!("daemonset {}", self.ds_name),
            message,
        };
        match api
            .patch(&self.ds_name, &params, &Patch::Json::<()>(patch))
            .await
        {
            Ok(ds) => Ok(ds),
            // A concurrent write.
            Err(kube::Error::Api(status)) if status.is_conflict() => Err(conflict(status.message)),
            // 422 is a failed `test` op when our cache was stale (the generation moved), and a
            // refused change otherwise (an immutable selector, an invalid template): only the
            // server's current generation tells them apart (the Status does not).
            Err(kube::Error::Api(status)) if status.code == 422 => {
                let current = api.get_opt(&self.ds_name).await?;
                let tested = live.metadata.generation;
                match current {
                    Some(current) if current.metadata.generation == tested => {
                        Err(kube::Error::Api(status).into())
                    }
                    _ => Err(conflict(status.message)),
                }
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
        let generation = self.cds.metadata.generation.unwrap_or_default();
        if self
            .ctx
            .memory
            .first_invalid(self.cds, generation, &message)
        {
            warn!(namespace = %self.namespace, name = %self.cds.name_any(), %message, "invalid spec: nothing is written until the spec changes");
        }
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
            drifted: false,
        };
        let live = self.ctx.caches.daemon_sets.get(&self.ds_ref());
        let owned = self.status.as_ref().and_then(|s| s.daemon_set_name.clone());
        let record = Transition {
            max_unavailable: live.as_deref().map(live_max_unavailable),
            // The DaemonSet this object owns stays recorded, whatever the spec says now (a
            // renamed spec.daemonSetName is refused, not adopted on the next pass).
            daemon_set: owned.unwrap_or_else(|| self.ds_name.clone()),
            ..self.record(&decision)
        };
        self.write_status(record).await?;
        if !already {
            self.publish(
                KubeEventType::Warning,
                FailureReason::InvalidSpec.as_str(),
                message,
                false,
                "",
            )
            .await;
        }
        self.ctx.memory.reset_errors(self.cds);
        Ok(Action::await_change())
    }

    /// Status, event and the next requeue.
    async fn finish(&self, record: Transition, decision: Decision) -> Result<Action, Error> {
        let drift = record.drift.clone();
        self.write_status(record).await?;
        if let Some(event) = &decision.event {
            if event.reason == event_reason::DRIFT_DETECTED {
                let what = drift.unwrap_or_default();
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
            self.publish(type_, event.reason, event.message.clone(), true, "")
                .await;
        }
        let requeue = &self.ctx.requeue;
        // A refused write is tried again, but less and less often: the same write is refused
        // until something changes (and a change of the spec brings the object back at once).
        if decision.failure == Some(FailureReason::WriteRejected) {
            let delay =
                self.ctx
                    .memory
                    .next_error_delay(self.cds, requeue.error_base, requeue.error_max);
            return Ok(Action::requeue(delay));
        }
        self.ctx.memory.reset_errors(self.cds);
        let next = match decision.phase {
            _ if decision.quiet => requeue.resync,
            Phase::Failed if decision.failure.is_some_and(FailureReason::is_sticky) => {
                requeue.resync
            }
            _ => requeue.in_progress,
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
            if record.from != Some(record.to) {
                info!(
                    namespace = %record.namespace,
                    name = %record.name,
                    ds = %record.daemon_set,
                    from = record.from.map_or("-", |p| p.as_str()),
                    to = record.to.as_str(),
                    reason = record.failure.map_or("", |f| f.as_str()),
                    message = record.message.as_deref().unwrap_or(""),
                    "phase changed"
                );
            }
            self.ctx
                .observer
                .report(Report::Transition(Box::new(record)));
        }
        Ok(())
    }

    async fn patch_status(&self, status: &CanaryDaemonSetStatus) -> Result<(), Error> {
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
    async fn publish(
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
        let event = KubeEvent {
            type_,
            reason: reason.to_owned(),
            note: Some(note),
            action: "Rollout".to_owned(),
            secondary,
        };
        // A recorder per spec generation and series: a new rollout's event is never folded
        // into the previous rollout's series (see `Memory::recorder`).
        let recorder = self.ctx.memory.recorder(self.cds, series, || {
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

/// Who controls a live DaemonSet, as far as this CanaryDaemonSet is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Controller {
    /// This CanaryDaemonSet (its controller owner reference, by UID).
    Us,
    /// Another controller.
    Other {
        /// Its kind.
        kind: String,
        /// Its name.
        name: String,
    },
    /// No controller: adopting it must be asked for.
    Nobody,
}

fn controller_of(live: &DaemonSet, cds: &CanaryDaemonSet) -> Controller {
    let owner = live
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true));
    match owner {
        None => Controller::Nobody,
        Some(owner)
            if owner.kind == "CanaryDaemonSet" && Some(&owner.uid) == cds.metadata.uid.as_ref() =>
        {
            Controller::Us
        }
        Some(owner) => Controller::Other {
            kind: owner.kind.clone(),
            name: owner.name.clone(),
        },
    }
}

/// Whether a template hash that differs from the recorded one is this controller's own write
/// whose record was lost: the process died, or the status write was refused, between the
/// DaemonSet write and the status write. Its widen and finish writes move only
/// `maxUnavailable`, to the canary or the fast value, while a rollout is under way; the live
/// DaemonSet is then the recorded one with only that field moved. That is the rollout's own
/// progress, not drift (the state machine reads `maxUnavailable` from the live object anyway),
/// and calling it drift would restart a finished rollout after every such crash.
fn own_unrecorded_write(
    live: &DaemonSet,
    status: &CanaryDaemonSetStatus,
    written_hash: &str,
    strategy: &Strategy,
) -> Result<bool, Error> {
    let in_flight = status
        .phase
        .as_deref()
        .and_then(|p| p.parse::<Phase>().ok())
        .is_some_and(|phase| {
            matches!(
                phase,
                Phase::Started | Phase::Canary | Phase::Increasing | Phase::Waiting
            )
        });
    let live_max = live_max_unavailable(live);
    let written_by_us = [
        strategy.canary_max_unavailable,
        strategy.fast_max_unavailable,
    ]
    .iter()
    .any(|max| max.to_live() == live_max);
    let recorded = status
        .current_max_unavailable
        .as_deref()
        .and_then(|max| max.parse::<MaxUnavailable>().ok());
    let (true, true, Some(recorded)) = (in_flight, written_by_us, recorded) else {
        return Ok(false);
    };
    let mut as_recorded = live.clone();
    set_max_unavailable(&mut as_recorded, recorded, RollingUpdateWrite::KeepMaxSurge);
    Ok(live_template_hash(&as_recorded)? == written_hash)
}

/// What someone else changed in `live` against what the controller wants (`desired`): the
/// images of the containers that differ, else the update strategy, else "pod template".
fn describe_drift(live: &DaemonSet, desired: &DaemonSet, status: &CanaryDaemonSetStatus) -> String {
    let containers = |ds: &DaemonSet| {
        ds.spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .map(|s| s.containers.clone())
            .unwrap_or_default()
    };
    let wanted = containers(desired);
    let images: Vec<String> = containers(live)
        .iter()
        .filter_map(|container| {
            let before = wanted.iter().find(|w| w.name == container.name)?;
            (before.image != container.image).then(|| {
                format!(
                    "image of container {}: {} → {}",
                    container.name,
                    before.image.as_deref().unwrap_or("-"),
                    container.image.as_deref().unwrap_or("-")
                )
            })
        })
        .collect();
    if !images.is_empty() {
        return images.join(", ");
    }
    let live_max = live_max_unavailable(live).to_string();
    match status.current_max_unavailable.as_deref() {
        Some(written) if written != live_max => {
            format!("update strategy: maxUnavailable {written} → {live_max}")
        }
        _ => "pod template".to_owned(),
    }
}

/// One line for a refused request: the API server's code, reason and message, never a debug
/// dump of its Status.
fn describe_api_error(error: &Error) -> String {
    match error {
        Error::Kube(kube::Error::Api(status)) => {
            format!("{} {}: {}", status.code, status.reason, status.message)
        }
        other => other.to_string(),
    }
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
            phase: Some("increasing".into()),
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
    fn the_controller_of_a_daemon_set_is_told_by_uid() {
        let spec = CanaryDaemonSetSpec {
            template: Some(DaemonSetTemplate {
                metadata: Default::default(),
                spec: serde_json::from_value(json!({"selector": {}, "template": {}})).unwrap(),
            }),
            workload_ref: None,
            daemon_set_name: None,
            adopt: false,
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
        assert_eq!(controller_of(&live, &cds), Controller::Nobody);
        live.metadata.owner_references = Some(vec![cds.controller_owner_ref(&()).unwrap()]);
        assert_eq!(controller_of(&live, &cds), Controller::Us);
        let mut other = cds.controller_owner_ref(&()).unwrap();
        other.uid = "someone-else".into();
        live.metadata.owner_references = Some(vec![other]);
        assert_eq!(
            controller_of(&live, &cds),
            Controller::Other {
                kind: "CanaryDaemonSet".into(),
                name: "agent".into()
            }
        );
    }
}
