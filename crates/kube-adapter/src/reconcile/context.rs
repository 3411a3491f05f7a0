//! What every pass shares ([`Context`]: the client, the caches it reads, the requeue delays,
//! the observer and what the controller remembers between passes) and the error policy that
//! decides when a failed pass comes back.
//!
//! Invariant: the context holds no state of one pass; everything per object lives in the
//! memory, keyed by the CanaryDaemonSet, and is forgotten when the object goes.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::watched_node::CachedNode;
use canary_analysis::{AllowedAddresses, Provider, Providers};
use canary_predicates::PodSummary;
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use kube::runtime::controller::Action;
use kube::runtime::events::Reporter;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};
use tracing::{debug, warn};

use super::Pass;
use super::memory::{Memory, WriteLedger};
use crate::Error;
use crate::clock::Clock;
use crate::crd::CanaryDaemonSet;
use crate::health::Health;
use crate::index::OwnerIndex;
use crate::observer::{Observer, Report};
use crate::workload::WorkloadWatches;

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
    /// Nodes, slimmed to what the Pods driver reads (name, labels, health), all in the group
    /// [`ALL_NODES`](crate::watched_node::ALL_NODES). Only the Pods driver waits for its first
    /// list: a controller without node permissions still runs the MaxUnavailable driver.
    pub nodes: OwnerIndex<CachedNode>,
    /// The watches of DaemonSets someone else owns (`spec.workloadRef`).
    pub workloads: Arc<WorkloadWatches>,
    /// The CanaryDaemonSets: whether a DaemonSet's claimant is alive ([`crate::claim`]).
    pub canary_daemon_sets: Store<crate::CanaryDaemonSet>,
    /// Every node's neighbour pods, for the neighbours gate (issue 46). Not part of
    /// readiness: until it lists (or without the permission to list pods cluster-wide) the
    /// gate sees no neighbour and says nothing.
    pub neighbours: crate::neighbours::NeighbourIndex,
}

impl Caches {
    pub(super) fn ready(&self) -> bool {
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
    /// Where analysis runs send their queries (`spec.analysis`).
    pub analysis: Arc<dyn Provider>,
    /// The analysis addresses the administrator allows (`run --allow-analysis-address`); a
    /// spec naming another is `InvalidSpec`, and nothing is sent to it.
    pub allowed_analysis_addresses: Arc<AllowedAddresses>,
    /// Where the occurrences of subscribed events go (`spec.notifications`).
    pub notifier: Arc<crate::notify::Notifier>,
    pub(super) memory: Memory,
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
            analysis: Arc::new(Providers::default()),
            allowed_analysis_addresses: Arc::new(AllowedAddresses::none()),
            notifier: Arc::new(crate::notify::Notifier::disabled()),
            memory: Memory::default(),
        }
    }

    /// The same context, remembering its DaemonSet writes in `ledger`, which the contexts of
    /// this process's earlier leader terms filled (see [`WriteLedger`]).
    #[must_use]
    pub(crate) fn with_write_ledger(self, ledger: WriteLedger) -> Self {
        Self {
            memory: self.memory.with_ledger(ledger),
            ..self
        }
    }

    /// The same context, sending analysis queries to `analysis` instead of over HTTP.
    #[must_use]
    pub fn with_analysis(self, analysis: Arc<dyn Provider>) -> Self {
        Self { analysis, ..self }
    }

    /// The same context, allowing analysis queries to `allowed` only.
    #[must_use]
    pub fn with_allowed_analysis_addresses(self, allowed: Arc<AllowedAddresses>) -> Self {
        Self {
            allowed_analysis_addresses: allowed,
            ..self
        }
    }

    /// The same context, notifying through `notifier`.
    #[must_use]
    pub fn with_notifier(self, notifier: Arc<crate::notify::Notifier>) -> Self {
        Self { notifier, ..self }
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
