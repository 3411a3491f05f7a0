//! What the controller reports to the outside (metrics, demos, tests): status transitions on a
//! broadcast channel and a few counters.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use canary_state_machine::{FailureReason, Phase, WriteKind};
use k8s_openapi::jiff::Timestamp;
use tokio::sync::broadcast;

/// One status change of one CanaryDaemonSet, sent after the status is written.
///
/// Sent whenever the status changed, so `from == Some(to)` happens (counts moved in the same
/// phase); a phase transition is `from != Some(to)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    /// Namespace of the CanaryDaemonSet.
    pub namespace: String,
    /// Name of the CanaryDaemonSet.
    pub name: String,
    /// Name of the owned DaemonSet.
    pub daemon_set: String,
    /// Phase before this pass (`None` for a new object).
    pub from: Option<Phase>,
    /// Phase after this pass.
    pub to: Phase,
    /// When `to` is `Failed`: why.
    pub failure: Option<FailureReason>,
    /// The DaemonSet write of this pass, if one succeeded.
    pub write: Option<WriteKind>,
    /// `desiredNumberScheduled`.
    pub desired: u32,
    /// Updated pods.
    pub updated: u32,
    /// Updated and ready pods.
    pub updated_ready: u32,
    /// maxUnavailable of the DaemonSet after this pass.
    pub max_unavailable: Option<String>,
    /// When the current phase started.
    pub phase_started_at: Timestamp,
    /// When this pass ran.
    pub at: Timestamp,
}

/// Counters of what the controller did; read them with the accessor methods.
#[derive(Debug, Default)]
pub struct Stats {
    writes: [AtomicU64; 5],
    write_conflicts: AtomicU64,
    write_failures: AtomicU64,
    status_writes: AtomicU64,
    reconciles: AtomicU64,
    reconcile_errors: AtomicU64,
    watch_errors: AtomicU64,
    events: AtomicU64,
    leader: AtomicBool,
}

fn kind_index(kind: WriteKind) -> usize {
    match kind {
        WriteKind::Create => 0,
        WriteKind::Start => 1,
        WriteKind::Widen => 2,
        WriteKind::Finish => 3,
        WriteKind::TlsStep => 4,
    }
}

/// Every write kind, in counter order.
pub const WRITE_KINDS: [WriteKind; 5] = [
    WriteKind::Create,
    WriteKind::Start,
    WriteKind::Widen,
    WriteKind::Finish,
    WriteKind::TlsStep,
];

impl Stats {
    /// Successful DaemonSet writes (create or patch) of `kind`.
    pub fn daemon_set_writes(&self, kind: WriteKind) -> u64 {
        self.writes[kind_index(kind)].load(Ordering::Relaxed)
    }

    /// Successful DaemonSet writes of every kind.
    pub fn total_daemon_set_writes(&self) -> u64 {
        WRITE_KINDS.iter().map(|k| self.daemon_set_writes(*k)).sum()
    }

    /// DaemonSet writes rejected as conflicts (stale generation, 409).
    pub fn write_conflicts(&self) -> u64 {
        self.write_conflicts.load(Ordering::Relaxed)
    }

    /// DaemonSet writes rejected otherwise.
    pub fn write_failures(&self) -> u64 {
        self.write_failures.load(Ordering::Relaxed)
    }

    /// Status writes.
    pub fn status_writes(&self) -> u64 {
        self.status_writes.load(Ordering::Relaxed)
    }

    /// Reconcile passes started.
    pub fn reconciles(&self) -> u64 {
        self.reconciles.load(Ordering::Relaxed)
    }

    /// Reconcile passes that ended in an error (conflicts included).
    pub fn reconcile_errors(&self) -> u64 {
        self.reconcile_errors.load(Ordering::Relaxed)
    }

    /// Watch and list requests of the caches that failed (each watcher retries with backoff).
    pub fn watch_errors(&self) -> u64 {
        self.watch_errors.load(Ordering::Relaxed)
    }

    /// Events published.
    pub fn events(&self) -> u64 {
        self.events.load(Ordering::Relaxed)
    }

    /// Whether this replica currently runs the controller (always true without leader election).
    pub fn is_leader(&self) -> bool {
        self.leader.load(Ordering::Relaxed)
    }

    pub(crate) fn count_write(&self, kind: WriteKind) {
        self.writes[kind_index(kind)].fetch_add(1, Ordering::Relaxed);
    }
    pub(crate) fn count_conflict(&self) {
        self.write_conflicts.fetch_add(1, Ordering::Relaxed);
    }
    pub(crate) fn count_write_failure(&self) {
        self.write_failures.fetch_add(1, Ordering::Relaxed);
    }
    pub(crate) fn count_status_write(&self) {
        self.status_writes.fetch_add(1, Ordering::Relaxed);
    }
    pub(crate) fn count_reconcile(&self) {
        self.reconciles.fetch_add(1, Ordering::Relaxed);
    }
    pub(crate) fn count_reconcile_error(&self) {
        self.reconcile_errors.fetch_add(1, Ordering::Relaxed);
    }
    pub(crate) fn count_watch_error(&self) {
        self.watch_errors.fetch_add(1, Ordering::Relaxed);
    }
    pub(crate) fn count_event(&self) {
        self.events.fetch_add(1, Ordering::Relaxed);
    }
    pub(crate) fn set_leader(&self, leader: bool) {
        self.leader.store(leader, Ordering::Relaxed);
    }
}

/// Called after every reconcile pass with its wall-clock duration and, when it failed, the
/// error's [`metric_label`](crate::Error::metric_label). Runs on the reconcile's task: keep it
/// cheap (a histogram observation).
pub type ReconcileHook = Arc<dyn Fn(Duration, Option<&'static str>) + Send + Sync>;

/// The transition channel and the counters; cheap to clone, shared with the controller.
#[derive(Clone)]
pub struct Observer {
    transitions: broadcast::Sender<Transition>,
    stats: Arc<Stats>,
    reconcile_hook: Option<ReconcileHook>,
}

impl std::fmt::Debug for Observer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Observer")
            .field("stats", &self.stats)
            .field("reconcile_hook", &self.reconcile_hook.is_some())
            .finish_non_exhaustive()
    }
}

impl Observer {
    /// A new observer whose channel keeps `capacity` transitions for slow receivers (older
    /// ones are dropped for them: a lagging receiver gets `RecvError::Lagged`).
    pub fn new(capacity: usize) -> Self {
        let (transitions, _) = broadcast::channel(capacity.max(1));
        Self {
            transitions,
            stats: Arc::default(),
            reconcile_hook: None,
        }
    }

    /// Calls `hook` after every reconcile pass (for a duration histogram; see [`ReconcileHook`]).
    pub fn with_reconcile_hook(
        mut self,
        hook: impl Fn(Duration, Option<&'static str>) + Send + Sync + 'static,
    ) -> Self {
        self.reconcile_hook = Some(Arc::new(hook));
        self
    }

    pub(crate) fn reconciled(&self, took: Duration, error: Option<&'static str>) {
        if let Some(hook) = &self.reconcile_hook {
            hook(took, error);
        }
    }

    /// Receives the transitions sent from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Transition> {
        self.transitions.subscribe()
    }

    /// The counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    pub(crate) fn send(&self, transition: Transition) {
        // No receiver is fine: nobody is watching.
        let _ = self.transitions.send(transition);
    }
}

impl Default for Observer {
    fn default() -> Self {
        Self::new(1024)
    }
}
