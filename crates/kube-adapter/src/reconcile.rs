//! One reconcile pass of one `CanaryDaemonSet` (spec sections 3 to 7).
//!
//! Read the cached DaemonSet and the indexed pods, build the desired DaemonSet, observe, ask the
//! state machine, then apply its decision: at most one DaemonSet write (create, or the reference
//! JSON Patch guarded by a `test` on the generation), then one status write if the status
//! changed, then the event.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use canary_predicates::{
    AnnotationKeys, CountRule, CrashLoopPolicy, OwnerMatch, PodCounts, PodSummary, Target,
    UpdatedRule, count_pods_owned_by, current_revision_hash,
};
use canary_state_machine::{
    Compatibility, CrashLoopSeen, Decision, FailureReason, LiveMaxUnavailable, MaxUnavailable,
    Observation, Phase, Strategy, TemplateEdit, TlsFacts, WriteKind, decide, decide_create,
};
use canary_tls_migration::{ContainerSelector, InsertMode, TlsConfig, TlsStep};
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event as KubeEvent, EventType as KubeEventType, Recorder};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource, ResourceExt};
use tracing::{debug, info, warn};

use crate::Error;
use crate::clock::Clock;
use crate::crd::{
    CanaryDaemonSet, CanaryDaemonSetSpec, CanaryDaemonSetStatus, CompatibilityMode,
    CrashLoopPolicyName,
};
use crate::desired::{
    RollingUpdateWrite, TargetAnnotations, desired_daemon_set, set_max_unavailable,
};
use crate::index::OwnerIndex;
use crate::meta::object_meta_modified;
use crate::observer::{Observer, Transition};
use crate::patch::daemon_set_patch;
use crate::status::{AVAILABLE, INVALID_SPEC, PassSummary, next_status, previous_pass};

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

/// How long a DaemonSet this controller created (or was told exists) may be missing from the
/// cache before the controller creates it again: about the DaemonSet watcher's longest backoff.
/// Without it, every pod event during a watch outage would send a create the server refuses.
const CREATE_GRACE: Duration = Duration::from_secs(30);

/// Everything a reconcile pass needs; shared by all passes.
pub struct Context {
    /// The API client.
    pub client: Client,
    /// Cache of DaemonSets.
    pub daemon_sets: Store<DaemonSet>,
    /// Pods by controller-owner name.
    pub pods: OwnerIndex<PodSummary>,
    /// ControllerRevisions by controller-owner UID.
    pub revisions: OwnerIndex<ControllerRevision>,
    /// Event recorder.
    pub recorder: Recorder,
    /// Source of "now" for status times.
    pub clock: Clock,
    /// Transitions and counters.
    pub observer: Observer,
    /// Field manager of every write.
    pub field_manager: String,
    /// Requeue delays.
    pub requeue: Requeue,
    /// Whether the DaemonSet cache has completed its first list.
    pub daemon_sets_ready: Arc<std::sync::atomic::AtomicBool>,
    written_generation: Mutex<HashMap<(String, String), (String, i64)>>,
    created_at: Mutex<HashMap<(String, String), tokio::time::Instant>>,
    written_status: Mutex<HashMap<(String, String), RememberedStatus>>,
    error_streak: Mutex<HashMap<(String, String), u32>>,
    status_written_at: Mutex<HashMap<(String, String), tokio::time::Instant>>,
    flushes_due: Arc<Mutex<std::collections::HashSet<(String, String)>>>,
    flush_tx: tokio::sync::mpsc::UnboundedSender<Arc<CanaryDaemonSet>>,
    flush_rx: Mutex<Option<tokio::sync::mpsc::UnboundedReceiver<Arc<CanaryDaemonSet>>>>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("field_manager", &self.field_manager)
            .field("pods", &self.pods.len())
            .field("requeue", &self.requeue)
            .finish_non_exhaustive()
    }
}

impl Context {
    /// A context over the given caches.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        client: Client,
        daemon_sets: Store<DaemonSet>,
        daemon_sets_ready: Arc<std::sync::atomic::AtomicBool>,
        pods: OwnerIndex<PodSummary>,
        revisions: OwnerIndex<ControllerRevision>,
        recorder: Recorder,
        clock: Clock,
        observer: Observer,
        field_manager: String,
        requeue: Requeue,
    ) -> Self {
        let (flush_tx, flush_rx) = tokio::sync::mpsc::unbounded_channel();
        Self {
            client,
            daemon_sets,
            pods,
            revisions,
            recorder,
            clock,
            observer,
            field_manager,
            requeue,
            daemon_sets_ready,
            written_generation: Mutex::default(),
            created_at: Mutex::default(),
            written_status: Mutex::default(),
            error_streak: Mutex::default(),
            status_written_at: Mutex::default(),
            flushes_due: Arc::default(),
            flush_tx,
            flush_rx: Mutex::new(Some(flush_rx)),
        }
    }

    fn caches_ready(&self) -> bool {
        self.daemon_sets_ready
            .load(std::sync::atomic::Ordering::Acquire)
            && self.pods.is_ready()
            && self.revisions.is_ready()
    }

    /// Our last successful write's generation, if the cache has not caught up with it yet.
    ///
    /// Keyed by UID too: a deleted and re-created DaemonSet starts again at generation 1.
    fn cache_behind(&self, key: &(String, String), cached: &DaemonSet) -> bool {
        let written = lock(&self.written_generation);
        let cached_uid = cached.metadata.uid.as_deref().unwrap_or_default();
        let cached_generation = cached.metadata.generation.unwrap_or_default();
        written
            .get(key)
            .is_some_and(|(uid, generation)| uid == cached_uid && *generation > cached_generation)
    }

    /// Whether the DaemonSet `key` is missing from the cache only because the cache is behind:
    /// this controller created it, or was told it exists, less than [`CREATE_GRACE`] ago.
    fn create_in_flight(&self, key: &(String, String)) -> bool {
        lock(&self.created_at)
            .get(key)
            .is_some_and(|at| at.elapsed() < CREATE_GRACE)
    }

    /// Notes that the DaemonSet `key` exists on the server (created, or refused as existing).
    fn note_created(&self, key: (String, String)) {
        lock(&self.created_at).insert(key, tokio::time::Instant::now());
    }

    /// The cache has the DaemonSet `key`: nothing to wait for any more.
    fn forget_created(&self, key: &(String, String)) {
        lock(&self.created_at).remove(key);
    }

    fn remember_write(&self, key: (String, String), written: &DaemonSet) {
        if let (Some(uid), Some(generation)) = (&written.metadata.uid, written.metadata.generation)
        {
            lock(&self.written_generation).insert(key, (uid.clone(), generation));
        }
    }

    /// The status of `cds` as this controller last wrote it, else as cached.
    ///
    /// A pass can start from a cached object that does not have our last status write yet
    /// (the watch event is still in flight); deciding from that older status would, for
    /// example, write back an older recorded generation. Only this controller writes the
    /// status, so its own last write is the freshest memory. A new object (other UID) or a
    /// restarted controller uses the cache.
    fn status_of(&self, cds: &CanaryDaemonSet) -> (Option<CanaryDaemonSetStatus>, bool) {
        let memory = lock(&self.written_status);
        match (memory.get(&key_of(cds)), cds.metadata.uid.as_ref()) {
            (Some(remembered), Some(current)) if &remembered.uid == current => {
                (Some(remembered.status.clone()), remembered.persisted)
            }
            _ => (cds.status.clone(), true),
        }
    }

    fn remember_status(
        &self,
        cds: &CanaryDaemonSet,
        status: CanaryDaemonSetStatus,
        persisted: bool,
    ) {
        if let Some(uid) = cds.metadata.uid.clone() {
            lock(&self.written_status).insert(
                key_of(cds),
                RememberedStatus {
                    uid,
                    status,
                    persisted,
                },
            );
        }
    }

    /// How long a count-only status change of `key` must wait, or `None` when it may be
    /// written now.
    fn count_status_wait(&self, key: &(String, String)) -> Option<Duration> {
        let last = *lock(&self.status_written_at).get(key)?;
        let due = last + self.requeue.count_status_interval;
        let now = tokio::time::Instant::now();
        (due > now).then(|| due - now)
    }

    /// The CanaryDaemonSets whose deferred status is due: the controller reconciles each.
    ///
    /// A pass's own requeue cannot carry the deferred write: kube-runtime drops a requeue
    /// for an object that already has a trigger pending, and the pending pass may defer too.
    /// A timer per deferral, feeding this stream, makes sure the last counts get written.
    /// `None` after the first call.
    pub fn take_status_flushes(
        &self,
    ) -> Option<tokio::sync::mpsc::UnboundedReceiver<Arc<CanaryDaemonSet>>> {
        lock(&self.flush_rx).take()
    }

    /// Makes sure `cds` is reconciled again after `wait`, once per deferral window.
    fn flush_status_after(&self, cds: &CanaryDaemonSet, wait: Duration) {
        if !lock(&self.flushes_due).insert(key_of(cds)) {
            return;
        }
        let cds = Arc::new(cds.clone());
        let tx = self.flush_tx.clone();
        let due = self.flushes_due.clone();
        tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            lock(&due).remove(&key_of(&cds));
            // A stopped controller has dropped the receiver: nothing left to flush for.
            let _ = tx.send(cds);
        });
    }

    fn status_written(&self, key: (String, String)) {
        lock(&self.status_written_at).insert(key, tokio::time::Instant::now());
    }

    fn reset_errors(&self, key: &(String, String)) {
        lock(&self.error_streak).remove(key);
    }

    fn next_error_delay(&self, key: (String, String)) -> Duration {
        let mut streak = lock(&self.error_streak);
        let count = streak.entry(key).or_insert(0);
        let delay = self
            .requeue
            .error_base
            .saturating_mul(1u32 << (*count).min(16));
        *count = count.saturating_add(1);
        delay.min(self.requeue.error_max)
    }
}

/// The last status this controller computed for an object.
#[derive(Debug, Clone)]
struct RememberedStatus {
    uid: String,
    status: CanaryDaemonSetStatus,
    /// False when the write failed: the next pass must write it even if nothing changed.
    persisted: bool,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Every critical section is a single map operation: a poisoned map is still consistent.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The controller's error policy: conflicts come back quickly, other errors back off
/// exponentially per object (reset by the next successful pass).
pub fn error_policy(cds: Arc<CanaryDaemonSet>, error: &Error, ctx: Arc<Context>) -> Action {
    ctx.observer.stats().count_reconcile_error();
    if error.is_conflict() {
        debug!(name = %cds.name_any(), %error, "conflict, retrying shortly");
        return Action::requeue(ctx.requeue.conflict);
    }
    let delay = ctx.next_error_delay(key_of(&cds));
    warn!(name = %cds.name_any(), %error, ?delay, "reconcile failed");
    Action::requeue(delay)
}

fn key_of(cds: &CanaryDaemonSet) -> (String, String) {
    (cds.namespace().unwrap_or_default(), cds.name_any())
}

/// The settings derived from a spec, or why the spec cannot be acted on.
#[derive(Debug)]
struct Plan {
    strategy: Strategy,
    target: TargetAnnotations,
    crash_loop: CrashLoopPolicy,
    tls: Option<TlsConfig>,
}

fn plan(spec: &CanaryDaemonSetSpec, cds: &CanaryDaemonSet) -> Result<Plan, String> {
    if spec.target.version.is_empty() {
        return Err("spec.target.version must not be empty".to_owned());
    }
    let parse = |field: &str, value: &str| {
        value
            .parse::<MaxUnavailable>()
            .map_err(|e| format!("spec.strategy.{field} {value:?}: {e}"))
    };
    let compatibility = match spec.strategy.compatibility {
        CompatibilityMode::KubeVirt => Compatibility::KubeVirt,
        CompatibilityMode::Fixed => Compatibility::Fixed,
    };
    let seconds = spec.strategy.progress_deadline_seconds;
    let progress_deadline = match compatibility {
        Compatibility::KubeVirt => None,
        Compatibility::Fixed => u64::try_from(seconds)
            .ok()
            .filter(|s| *s > 0)
            .map(Duration::from_secs),
    };
    let strategy = Strategy {
        compatibility,
        canary_max_unavailable: parse(
            "canaryMaxUnavailable",
            &spec.strategy.canary_max_unavailable,
        )?,
        fast_max_unavailable: parse("fastMaxUnavailable", &spec.strategy.fast_max_unavailable)?,
        progress_deadline,
    };
    strategy
        .validate()
        .map_err(|e| format!("spec.strategy: {e}"))?;
    let crash = &spec.strategy.crash_loop;
    let crash_loop = match crash.policy {
        CrashLoopPolicyName::KubeVirt => CrashLoopPolicy::KubeVirt,
        CrashLoopPolicyName::Strict => CrashLoopPolicy::Strict {
            restart_threshold: crash.restart_threshold.max(1),
            include_init_containers: crash.include_init_containers,
        },
    };
    let tls = spec.tls_migration.enabled.then(|| {
        let t = &spec.tls_migration;
        TlsConfig {
            support_label: t.support_label.clone(),
            support_value: t.support_value.clone(),
            flag: t.flag.clone(),
            flag_value: t.flag_value.clone(),
            cert_volume: t.cert_secret_volume.clone(),
            container: t
                .container
                .clone()
                .map_or(ContainerSelector::Index(0), ContainerSelector::Name),
            insert: match compatibility {
                Compatibility::KubeVirt => InsertMode::Reference,
                Compatibility::Fixed => InsertMode::Idempotent,
            },
        }
    });
    let target = TargetAnnotations::of(cds).map_err(|e| e.to_string())?;
    Ok(Plan {
        strategy,
        target,
        crash_loop,
        tls,
    })
}

/// One reconcile pass.
pub async fn reconcile(cds: Arc<CanaryDaemonSet>, ctx: Arc<Context>) -> Result<Action, Error> {
    // Wall-clock time: the pass's real cost, also under a paused tokio clock.
    let started = std::time::Instant::now();
    let result = reconcile_pass(cds, &ctx).await;
    let error = result.as_ref().err().map(Error::metric_label);
    ctx.observer.reconciled(started.elapsed(), error);
    result
}

async fn reconcile_pass(cds: Arc<CanaryDaemonSet>, ctx: &Arc<Context>) -> Result<Action, Error> {
    ctx.observer.stats().count_reconcile();
    if !ctx.caches_ready() {
        return Ok(Action::requeue(ctx.requeue.conflict));
    }
    let key = key_of(&cds);
    let action = Pass::new(&cds, ctx)?.run().await?;
    ctx.reset_errors(&key);
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

/// What the pass did, for the status.
struct Outcome {
    decision: Decision,
    counts: PodCounts,
    desired_pods: u32,
    available: u32,
    recorded: Option<i64>,
    max_unavailable: Option<String>,
    written: Option<WriteKind>,
}

impl<'a> Pass<'a> {
    /// The DaemonSet's key in the context's per-DaemonSet memories.
    fn ds_key(&self) -> (String, String) {
        (self.namespace.clone(), self.ds_name.clone())
    }

    fn new(cds: &'a CanaryDaemonSet, ctx: &'a Context) -> Result<Self, Error> {
        let (status, status_persisted) = ctx.status_of(cds);
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

    async fn run(&self) -> Result<Action, Error> {
        let plan = match plan(&self.cds.spec, self.cds) {
            Ok(plan) => plan,
            Err(message) => return self.invalid_spec(message).await,
        };
        let mut desired = desired_daemon_set(self.cds, &plan.target)?;
        let ds_key = self.ds_key();
        let live = self
            .ctx
            .daemon_sets
            .get(&ObjectRef::new(&self.ds_name).within(&self.namespace));
        let Some(live) = live else {
            if self.ctx.create_in_flight(&ds_key) {
                // Ours, or known to exist: the watch has not delivered it yet.
                return Ok(Action::requeue(self.ctx.requeue.conflict));
            }
            return self.create(&plan, desired).await;
        };
        self.ctx.forget_created(&ds_key);
        if live.metadata.deletion_timestamp.is_some() {
            return Ok(Action::requeue(self.ctx.requeue.conflict));
        }
        if let Some(owner) = foreign_controller(&live, self.cds) {
            return self
                .invalid_spec(format!(
                    "DaemonSet {} is controlled by {} {}, not by this CanaryDaemonSet",
                    self.ds_name, owner.0, owner.1
                ))
                .await;
        }
        let generation = live.metadata.generation.unwrap_or_default();
        if self.ctx.cache_behind(&ds_key, &live) {
            // Our own last write is not in the cache yet: deciding now would redo it.
            return Ok(Action::requeue(self.ctx.requeue.conflict));
        }

        let tls_facts = match &plan.tls {
            Some(cfg) => match tls_facts(&live, &mut desired, cfg) {
                Ok(facts) => Some(facts),
                Err(message) => return self.invalid_spec(message).await,
            },
            None => None,
        };
        let status = self.status.as_ref();
        let recorded = status.and_then(|s| s.recorded_daemon_set_generation);
        let counts = self.count_pods(&plan, &live);
        let ds_status = live.status.clone().unwrap_or_default();
        let desired_pods = u32::try_from(ds_status.desired_number_scheduled).unwrap_or(0);
        let observation = Observation {
            name: self.ds_name.clone(),
            object_changed: object_meta_modified(&desired.metadata, &live.metadata),
            generation_known: recorded == Some(generation),
            desired_pods,
            updated_pods: counts.updated,
            updated_ready_pods: counts.updated_ready,
            crash_loop: counts
                .first_crash_loop
                .as_ref()
                .map(|(pod, crash)| CrashLoopSeen {
                    pod: pod.clone(),
                    reason: crash.reason.as_str().to_owned(),
                }),
            live_max_unavailable: live_max_unavailable(&live),
            rollout_observed: ds_status
                .observed_generation
                .is_some_and(|g| g >= generation),
            tls: tls_facts,
            previous: previous_pass(status, self.now),
        };
        let decision = decide(&plan.strategy, &observation);
        debug!(ds = %self.ds_name, ?observation, ?decision, "decided");

        let mut outcome = Outcome {
            counts,
            desired_pods,
            available: u32::try_from(ds_status.number_available.unwrap_or(0)).unwrap_or(0),
            recorded,
            max_unavailable: Some(observation.live_max_unavailable.to_string()),
            written: None,
            decision,
        };
        if let Some(write) = outcome.decision.write {
            let mut written = desired;
            if let (Some(edit), Some(cfg)) = (write.template_edit, &plan.tls) {
                let step = match edit {
                    TemplateEdit::InsertTlsFlag => TlsStep::InsertFlag,
                    TemplateEdit::DetachCertSecret => TlsStep::DetachCertSecret,
                };
                if let Err(e) = canary_tls_migration::apply_step(&mut written, step, cfg) {
                    return self.invalid_spec(format!("TLS migration: {e}")).await;
                }
            }
            if let Some(max) = write.max_unavailable {
                set_max_unavailable(
                    &mut written,
                    max_to_int_or_string(max),
                    rolling_update_mode(&plan.strategy),
                );
                outcome.max_unavailable = Some(max.to_string());
            }
            match self.patch(&live, &written).await {
                Ok(patched) => {
                    self.ctx.observer.stats().count_write(write.kind);
                    self.ctx.remember_write(ds_key, &patched);
                    outcome.written = Some(write.kind);
                    if outcome.decision.record_generation {
                        outcome.recorded = patched.metadata.generation;
                    }
                    info!(ds = %self.ds_name, kind = write.kind.as_str(), phase = %outcome.decision.phase, "daemonSet written");
                }
                Err(error) if error.is_conflict() => {
                    self.ctx.observer.stats().count_conflict();
                    return Err(error);
                }
                Err(error) => {
                    self.ctx.observer.stats().count_write_failure();
                    outcome.decision = outcome.decision.write_failed(
                        &plan.strategy,
                        &self.ds_name,
                        &error.to_string(),
                    );
                    outcome.max_unavailable = Some(observation.live_max_unavailable.to_string());
                }
            }
        }
        self.finish(outcome).await
    }

    /// Create path (spec section 3 step 2).
    async fn create(&self, plan: &Plan, mut desired: DaemonSet) -> Result<Action, Error> {
        let decision = decide_create(&plan.strategy, &self.ds_name);
        if let Some(cfg) = &plan.tls
            && let Err(e) = canary_tls_migration::prepare_for_create(&mut desired, cfg)
        {
            return self.invalid_spec(format!("TLS migration: {e}")).await;
        }
        let max = decision.write.and_then(|w| w.max_unavailable);
        if let Some(max) = max {
            set_max_unavailable(
                &mut desired,
                max_to_int_or_string(max),
                rolling_update_mode(&plan.strategy),
            );
        }
        let api: Api<DaemonSet> = Api::namespaced(self.ctx.client.clone(), &self.namespace);
        let params = PostParams {
            field_manager: Some(self.ctx.field_manager.clone()),
            ..PostParams::default()
        };
        let mut outcome = Outcome {
            counts: PodCounts::default(),
            desired_pods: 0,
            available: 0,
            recorded: None,
            max_unavailable: max.map(|m| m.to_string()),
            written: None,
            decision,
        };
        match api.create(&params, &desired).await {
            Ok(created) => {
                self.ctx.observer.stats().count_write(WriteKind::Create);
                self.ctx.note_created(self.ds_key());
                self.ctx.remember_write(self.ds_key(), &created);
                outcome.written = Some(WriteKind::Create);
                if outcome.decision.record_generation {
                    outcome.recorded = created.metadata.generation;
                }
                info!(ds = %self.ds_name, "daemonSet created");
            }
            // Created meanwhile (or our cache is behind): come back once the watch has it.
            Err(kube::Error::Api(status)) if status.is_already_exists() => {
                self.ctx.observer.stats().count_conflict();
                self.ctx.note_created(self.ds_key());
                return Err(Error::Conflict {
                    what: format!("daemonset {}", self.ds_name),
                    message: status.message,
                });
            }
            Err(error) => {
                self.ctx.observer.stats().count_write_failure();
                outcome.decision = outcome.decision.write_failed(
                    &plan.strategy,
                    &self.ds_name,
                    &error.to_string(),
                );
            }
        }
        self.finish(outcome).await
    }

    fn count_pods(&self, plan: &Plan, live: &DaemonSet) -> PodCounts {
        let target = Target {
            version: plan.target.pairs[0].1.clone(),
            registry: plan.target.pairs[1].1.clone(),
            deployment_id: plan.target.pairs[2].1.clone(),
        };
        let keys = AnnotationKeys {
            version: plan.target.pairs[0].0.clone(),
            registry: plan.target.pairs[1].0.clone(),
            id: plan.target.pairs[2].0.clone(),
        };
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
                let revisions = self.ctx.revisions.get(&uid);
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
            target: &target,
            keys: &keys,
            updated: &updated,
            crash_loop: &plan.crash_loop,
            skip_terminating,
        };
        self.ctx.pods.with_group(&self.ds_name, |pods| {
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

    /// A spec the controller cannot act on: Degraded, one Warning event, no requeue until the
    /// spec changes.
    async fn invalid_spec(&self, message: String) -> Result<Action, Error> {
        warn!(name = %self.cds.name_any(), %message, "invalid spec");
        let previous = self.status.as_ref();
        let already = previous.is_some_and(|s| {
            s.reason.as_deref() == Some(INVALID_SPEC) && s.message.as_deref() == Some(&message)
        });
        let pass = PassSummary {
            phase: Phase::Failed,
            reason: Some(INVALID_SPEC.to_owned()),
            message: Some(message.clone()),
            observed_generation: self.cds.metadata.generation,
            recorded_daemon_set_generation: previous.and_then(|s| s.recorded_daemon_set_generation),
            daemon_set_name: self.ds_name.clone(),
            desired: previous.map_or(0, |s| s.desired),
            updated: previous.map_or(0, |s| s.updated),
            updated_ready: previous.map_or(0, |s| s.updated_ready),
            available: previous.map_or(0, |s| s.desired),
            max_unavailable: previous.and_then(|s| s.current_max_unavailable.clone()),
        };
        self.write_status(&pass, None).await?;
        if !already {
            self.publish(KubeEventType::Warning, INVALID_SPEC, message, None)
                .await;
        }
        Ok(Action::await_change())
    }

    /// Status, event, transition and the next requeue.
    async fn finish(&self, outcome: Outcome) -> Result<Action, Error> {
        let decision = &outcome.decision;
        let pass = PassSummary {
            phase: decision.phase,
            reason: decision.failure.map(|f| f.as_str().to_owned()),
            message: decision.error.clone(),
            observed_generation: self.cds.metadata.generation,
            recorded_daemon_set_generation: outcome.recorded,
            daemon_set_name: self.ds_name.clone(),
            desired: outcome.desired_pods,
            updated: outcome.counts.updated,
            updated_ready: outcome.counts.updated_ready,
            available: outcome.available,
            max_unavailable: outcome.max_unavailable.clone(),
        };
        self.write_status(&pass, outcome.written).await?;
        if let Some(event) = &decision.event {
            let type_ = match event.type_ {
                canary_state_machine::EventType::Normal => KubeEventType::Normal,
                canary_state_machine::EventType::Warning => KubeEventType::Warning,
            };
            self.publish(
                type_,
                event.reason,
                event.message.clone(),
                Some(&self.ds_name),
            )
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
    /// back to write it, see [`Context::take_status_flushes`]).
    async fn write_status(
        &self,
        pass: &PassSummary,
        written: Option<WriteKind>,
    ) -> Result<(), Error> {
        let previous = self.status.as_ref();
        let status = next_status(previous, pass, self.now);
        if previous == Some(&status) && self.status_persisted {
            return Ok(());
        }
        let key = key_of(self.cds);
        let counts_only =
            written.is_none() && previous.is_some_and(|p| same_but_counts(p, &status));
        match counts_only
            .then(|| self.ctx.count_status_wait(&key))
            .flatten()
        {
            Some(wait) => {
                self.ctx.remember_status(self.cds, status.clone(), false);
                self.ctx.flush_status_after(self.cds, wait);
            }
            None => self.patch_status(&status, key).await?,
        }
        if previous != Some(&status) {
            self.ctx
                .observer
                .send(transition(self, previous, &status, pass, written));
        }
        Ok(())
    }

    async fn patch_status(
        &self,
        status: &CanaryDaemonSetStatus,
        key: (String, String),
    ) -> Result<(), Error> {
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
            .remember_status(self.cds, status.clone(), written_status.is_ok());
        written_status?;
        self.ctx.status_written(key);
        self.ctx.observer.stats().count_status_write();
        Ok(())
    }

    async fn publish(
        &self,
        type_: KubeEventType,
        reason: &str,
        note: String,
        related_ds: Option<&str>,
    ) {
        let secondary = related_ds.map(|name| {
            let mut reference = DaemonSet::object_ref_from_name(name, &self.namespace);
            reference.uid = self
                .ctx
                .daemon_sets
                .get(&ObjectRef::new(name).within(&self.namespace))
                .and_then(|ds| ds.metadata.uid.clone());
            reference
        });
        let event = KubeEvent {
            type_,
            reason: reason.to_owned(),
            note: Some(note),
            action: "Rollout".to_owned(),
            secondary,
        };
        match self
            .ctx
            .recorder
            .publish(&event, &self.cds.object_ref(&()))
            .await
        {
            Ok(()) => self.ctx.observer.stats().count_event(),
            // An event is best effort: losing one must not fail or repeat the pass.
            Err(error) => warn!(%error, reason, "could not publish event"),
        }
    }
}

fn transition(
    pass: &Pass<'_>,
    previous: Option<&CanaryDaemonSetStatus>,
    status: &CanaryDaemonSetStatus,
    summary: &PassSummary,
    written: Option<WriteKind>,
) -> Transition {
    Transition {
        namespace: pass.namespace.clone(),
        name: pass.cds.name_any(),
        daemon_set: pass.ds_name.clone(),
        from: previous
            .and_then(|s| s.phase.as_deref())
            .and_then(|p| p.parse().ok()),
        to: summary.phase,
        failure: summary.reason.as_deref().and_then(|r| r.parse().ok()),
        write: written,
        desired: summary.desired,
        updated: summary.updated,
        updated_ready: summary.updated_ready,
        max_unavailable: summary.max_unavailable.clone(),
        phase_started_at: status.phase_start_time.as_ref().map_or(pass.now, |t| t.0),
        at: pass.now,
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

/// Small extension: an ObjectReference to a DaemonSet by name.
trait ObjectRefFromName {
    fn object_ref_from_name(
        name: &str,
        namespace: &str,
    ) -> k8s_openapi::api::core::v1::ObjectReference;
}

impl ObjectRefFromName for DaemonSet {
    fn object_ref_from_name(
        name: &str,
        namespace: &str,
    ) -> k8s_openapi::api::core::v1::ObjectReference {
        k8s_openapi::api::core::v1::ObjectReference {
            api_version: Some("apps/v1".to_owned()),
            kind: Some("DaemonSet".to_owned()),
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            ..Default::default()
        }
    }
}

/// The live DaemonSet's controller owner when it is not this CanaryDaemonSet.
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
    cfg: &TlsConfig,
) -> Result<TlsFacts, String> {
    canary_tls_migration::apply_preamble(live, desired, cfg)
        .map_err(|e| format!("TLS migration: {e}"))?;
    let facts = canary_tls_migration::observe(live, desired, cfg)
        .map_err(|e| format!("TLS migration: {e}"))?;
    Ok(TlsFacts {
        supported: facts.supported,
        live_has_flag: facts.live_has_flag,
        desired_has_cert_volume: facts.desired_has_cert_volume,
    })
}

fn live_max_unavailable(ds: &DaemonSet) -> LiveMaxUnavailable {
    let rolling_update = ds
        .spec
        .as_ref()
        .and_then(|s| s.update_strategy.as_ref())
        .and_then(|u| u.rolling_update.as_ref());
    match rolling_update {
        None => LiveMaxUnavailable::NoRollingUpdate,
        Some(ru) => match &ru.max_unavailable {
            None => LiveMaxUnavailable::Unset,
            Some(IntOrString::Int(v)) => LiveMaxUnavailable::Int(i64::from(*v)),
            Some(IntOrString::String(s)) => LiveMaxUnavailable::Str(s.clone()),
        },
    }
}

fn max_to_int_or_string(max: MaxUnavailable) -> IntOrString {
    match max {
        MaxUnavailable::Count(n) => IntOrString::Int(i32::try_from(n).unwrap_or(i32::MAX)),
        MaxUnavailable::Percent(p) => IntOrString::String(format!("{p}%")),
    }
}

fn rolling_update_mode(strategy: &Strategy) -> RollingUpdateWrite {
    match strategy.compatibility {
        Compatibility::KubeVirt => RollingUpdateWrite::ReplaceStruct,
        Compatibility::Fixed => RollingUpdateWrite::KeepMaxSurge,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{CanaryDaemonSetSpec, DaemonSetTemplate, TargetSpec};
    use serde_json::json;

    fn cds() -> CanaryDaemonSet {
        let spec = CanaryDaemonSetSpec {
            template: DaemonSetTemplate {
                metadata: Default::default(),
                spec: serde_json::from_value(json!({"selector": {}, "template": {}})).unwrap(),
            },
            daemon_set_name: None,
            target: TargetSpec {
                version: "v1".into(),
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
        cds
    }

    fn plan_of(cds: &CanaryDaemonSet) -> Result<Plan, String> {
        plan(&cds.spec, cds)
    }

    #[test]
    fn default_plan_is_fixed_with_deadline_and_strict_crash_loops() {
        let plan = plan_of(&cds()).unwrap();
        assert_eq!(plan.strategy.compatibility, Compatibility::Fixed);
        assert_eq!(
            plan.strategy.canary_max_unavailable,
            MaxUnavailable::Count(1)
        );
        assert_eq!(
            plan.strategy.fast_max_unavailable,
            MaxUnavailable::Percent(10)
        );
        assert_eq!(
            plan.strategy.progress_deadline,
            Some(Duration::from_secs(600))
        );
        assert_eq!(
            plan.crash_loop,
            CrashLoopPolicy::Strict {
                restart_threshold: 3,
                include_init_containers: true
            }
        );
        assert!(plan.tls.is_none());
    }

    #[test]
    fn kubevirt_plan_has_no_deadline_and_reference_tls_insert() {
        let mut cds = cds();
        cds.spec.strategy.compatibility = CompatibilityMode::KubeVirt;
        cds.spec.strategy.crash_loop.policy = CrashLoopPolicyName::KubeVirt;
        cds.spec.tls_migration.enabled = true;
        cds.spec.tls_migration.container = Some("handler".into());
        let plan = plan_of(&cds).unwrap();
        assert_eq!(plan.strategy.progress_deadline, None);
        assert_eq!(plan.crash_loop, CrashLoopPolicy::KubeVirt);
        let tls = plan.tls.unwrap();
        assert_eq!(tls.insert, InsertMode::Reference);
        assert_eq!(tls.container, ContainerSelector::Name("handler".into()));
    }

    #[test]
    fn zero_deadline_disables_it() {
        let mut cds = cds();
        cds.spec.strategy.progress_deadline_seconds = 0;
        assert_eq!(plan_of(&cds).unwrap().strategy.progress_deadline, None);
    }

    #[test]
    fn invalid_specs_are_reported_not_panicked() {
        for (field, value) in [
            ("canary", "abc"),
            ("canary", "0"),
            ("fast", "150%"),
            ("fast", "-1"),
            ("fast", ""),
        ] {
            let mut cds = cds();
            match field {
                "canary" => cds.spec.strategy.canary_max_unavailable = value.into(),
                _ => cds.spec.strategy.fast_max_unavailable = value.into(),
            }
            let error = plan_of(&cds)
                .err()
                .unwrap_or_else(|| panic!("{field}={value:?} accepted"));
            assert!(error.contains("spec.strategy"), "{error}");
        }
        let mut empty_version = cds();
        empty_version.spec.target.version = String::new();
        assert!(
            plan_of(&empty_version)
                .unwrap_err()
                .contains("target.version")
        );
    }

    #[test]
    fn foreign_controller_is_detected() {
        let cds = cds();
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

    #[test]
    fn live_max_unavailable_shapes() {
        let ds = |strategy: serde_json::Value| -> DaemonSet {
            serde_json::from_value(
                json!({"spec": {"selector": {}, "template": {}, "updateStrategy": strategy}}),
            )
            .unwrap()
        };
        assert_eq!(
            live_max_unavailable(&ds(json!({"type": "OnDelete"}))),
            LiveMaxUnavailable::NoRollingUpdate
        );
        assert_eq!(
            live_max_unavailable(&ds(json!({"rollingUpdate": {}}))),
            LiveMaxUnavailable::Unset
        );
        assert_eq!(
            live_max_unavailable(&ds(json!({"rollingUpdate": {"maxUnavailable": 2}}))),
            LiveMaxUnavailable::Int(2)
        );
        assert_eq!(
            live_max_unavailable(&ds(json!({"rollingUpdate": {"maxUnavailable": "10%"}}))),
            LiveMaxUnavailable::Str("10%".into())
        );
        assert_eq!(
            max_to_int_or_string(MaxUnavailable::Percent(10)),
            IntOrString::String("10%".into())
        );
        assert_eq!(
            max_to_int_or_string(MaxUnavailable::Count(1)),
            IntOrString::Int(1)
        );
    }
}
