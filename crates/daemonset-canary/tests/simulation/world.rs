//! State shared by the harness, the request recorder and the invariant checker: the trace of
//! recent events, the violations found, and what was exercised.

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::time::Instant;

use super::requests::RequestTrace;

/// Entries kept for the failure trace.
const TRACE_LEN: usize = 40;

/// Every invariant the simulation checks, numbered in this order (docs/reliability.md lists
/// them): 1 to 8 from issue 9, then those of each later issue, as each variant's doc says.
/// No count is written here, so that a new invariant cannot leave it stale.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Invariant {
    /// 1. Unavailable pods never exceed what the current maxUnavailable allows (checked when
    ///    a node loses its last ready pod: a surge's handover takes nothing away).
    UnavailableWithinBudget,
    /// 2. Never widened while no updated pod is ready, nor while a canary crash-loops.
    NoWidenWithoutReadyCanary,
    /// 3. Every rollout ends within a bound of virtual time.
    RolloutsEnd,
    /// 4. After success: canary maxUnavailable, recorded generation equals the DaemonSet's.
    RestsAfterSuccess,
    /// 5. No start write without a spec change.
    NoStartWithoutSpecChange,
    /// 6. At quiescence the status phase agrees with the cluster.
    StatusAgreesAtQuiescence,
    /// 7. At most three DaemonSet writes per rollout plus retries; only the leader writes.
    ///    The MaxUnavailable driver's canary soak (issue 46) holds the DaemonSet controller
    ///    with one more, a move of the update strategy type alone to `OnDelete`: one per
    ///    soaked rollout, counted apart (a `pause` during the soak reuses that hold).
    ///
    /// A retry is a write after one that failed, or a write that changes nothing repeated after
    /// a kill: a controller killed between a write and the status write that records it cannot
    /// know the write landed, so it sends it again (at-least-once; the API server skips it).
    BoundedLeaderOnlyWrites,
    /// 8. No panic, no hot loop.
    NoPanicNoHotLoop,
    /// 9. A hand edit of the DaemonSet is written over (policy `Revert`) or left alone and
    ///    reported (policy `Report`): back on the desired template within a minute at rest, and
    ///    on it at quiescence.
    DriftHandled,
    /// 10. A CanaryDaemonSet that does not decode fails alone (`InvalidSpec` on it), and never
    ///     holds up the other's rollout (invariant 3 bounds that one as before).
    BadObjectFailsAlone,
    /// 11. Pods driver: never more nodes whose ready pod the controller deleted and that do
    ///     not run a ready pod again than the budget of the step the deletion was made in (its
    ///     `maxUnavailable` scaled to the desired pods, at least 1). Deleting a pod that is not
    ///     ready takes no availability away (the controller replaces those first, free). Nodes NotReady or cordoned
    ///     (now or within the staleness window) are left out, as the controller defers them.
    ///     It replaces invariant 1 for `OnDelete` DaemonSets, whose update strategy allows no
    ///     unavailable pod at all to the DaemonSet controller (which deletes none).
    PodsWithinStepBudget,
    /// 12. Pods driver: no pod deletion while the stored status is `failed` with a sticky
    ///     reason (`CanaryCrashLooping`, `ProgressDeadlineExceeded`, `AnalysisFailed`) for the
    ///     current spec; a spec change or a reverted hand edit starts a new rollout and lifts it.
    NoDeletionAfterFailure,
    /// 13. Pods driver: when the status turns `successful`, no node runs a pod of another
    ///     revision than `status.targetRevision` unless it is named in `deferredNodes` (or
    ///     counted in `deferredNodeCount` beyond the listed ones).
    OnlyDeferredNodesOld,
    /// 14. Pods driver: at most one successful DELETE per pod UID.
    OneDeletePerPod,
    /// 15. No pod deletion and no DaemonSet write while the rollout is held on request (the
    ///     `canary.daemonset.dev/paused` annotation is set) and either the controller has
    ///     acted on it (`status.held`, written only by a pass that saw the annotation) or it
    ///     has been set for a minute (a controller that ignores it); both drivers. The one
    ///     write allowed is the MaxUnavailable driver's hold: the update strategy type to
    ///     `OnDelete`, template and `maxUnavailable` unchanged. Hold and resume writes (the
    ///     type moved alone) number at most two per hold the harness asked for.
    NothingMovesWhileHeld,
    /// 16. A retry is acted on (both drivers): at quiescence the status records the last retry
    ///     mark the harness set (`status.retry`).
    RetryActedOn,
    /// 17. Going back ends on the last successful revision: at quiescence a `rolledBack`
    ///     rollout has every pod on the revision `status.history.stable` names (the one the
    ///     rollback went to), and a rollout that failed on its version with `onFailure:
    ///     Rollback` while a different revision had succeeded is not left `failed` (unless
    ///     it was itself a rollback, which holds).
    RollbackEndsOnStable,
    /// 18. An `abort` is acted on exactly once: at quiescence the status records the last
    ///     mark the harness set (`status.history.abort`), and the `Aborted` or `VerbRefused`
    ///     answer was given for it.
    AbortActedOn,
    /// 19. A full promotion skips to the end of the steps: the status write that records a
    ///     `full@` promotion mark (`status.promotion`) is in the last nodes step or past it,
    ///     unless the rollout has left its steps (failed, rolling back, successful).
    FullPromotionReachesLastStep,
    /// 20. An `undo` is acted on exactly once: at quiescence the status records the last
    ///     mark the harness set (`status.history.undo`), whether it started a rollout or was
    ///     refused (at rest on the only revision, say).
    UndoActedOn,
    /// 21. Analysis: the status write that moves a rollout past an analysed pause step (same
    ///     target revision, not a rollback) records that step's analysis as `Passing`, unless
    ///     it acts on a promotion (which ends a pause whatever the analysis says). With
    ///     invariant 12 (`AnalysisFailed` is sticky): no step and no deletion after a failed
    ///     analysis. On both drivers (issue 46): once the status says `AnalysisFailed`, no
    ///     widening, and no ready pod of another version taken down on a healthy node (past
    ///     the staleness window) until the status leaves `failed`.
    AnalysedPauseEndsWhenPassing,
    /// 22. Analysis credentials: with `bearerTokenSecret`, every query to Prometheus carries
    ///     the token the Secret holds, or the one it held until a rotation at most
    ///     `ROTATION_GRACE` ago (none is sent while the Secret is missing: the round is
    ///     inconclusive); without it, none carries a token.
    QueriesCarryTheToken,
    /// 23. Leader election: a Lease held by one replica passes to another only after its
    ///     holder stopped renewing for its whole duration (the taker's `acquireTime` is at
    ///     least `leaseDurationSeconds` after the holder's last `renewTime`), or after a
    ///     release (no holder). Both times are written from the one virtual clock.
    NoTakeoverOfALiveLease,
    /// 24. Leader election: a leader cut off from the API server (its process running, or
    ///     frozen) for longer than its lease duration and a margin is replaced by the other
    ///     replica, if that one ran connected throughout. With invariant 7 (every write of a
    ///     replica is sent while it holds the Lease), the old leader writes nothing after it
    ///     comes back.
    IsolatedLeaderReplaced,
    /// 25. No replica stops with `Error::Wedged` (work waiting with no pass finishing, or a
    ///     pass running, past the liveness check's timeout): nothing in the simulation lasts
    ///     that long, idle starts included.
    NoWedgeExit,
    /// 26. Declared fields only: no write of a replica was answered with an `unknown field`
    ///     warning (a field the CRD does not declare, which a real API server drops: a status
    ///     field missing from the schema would be lost there), and the object stored beside
    ///     with an undeclared field holds it no more (the simulator prunes as the API server
    ///     does).
    DeclaredFieldsOnly,
    /// 27. A bad write through the API (a string for an integer, an unknown enum value, a bad
    ///     percentage, a rename: what a user may type) is refused by the CRD's schema or rules
    ///     with a 422, and leaves the stored spec as it was; the undecodable object stored
    ///     beside (as an older API server admitted it) is the accepted kind of bad object.
    RefusedWritesChangeNothing,
    /// 28. The probes tell the truth at quiescence: every replica running then, faults healed
    ///     and the rollout quiet for two minutes, is ready and alive by its `Health` (what
    ///     `/readyz` and `/healthz` answer): its watches work again (a watcher that failed
    ///     listed again; a broken stream resumed on a quiet resource is no failure), it
    ///     reaches the Lease, and a leader's caches have listed.
    ProbesTrueAtQuiescence,
    /// 29. One DaemonSet, one driver (issue 47): a second CanaryDaemonSet that names the
    ///     scenario's DaemonSet (`workloadRef`, one `nodes: 100%` step), created once the first
    ///     holds its claim, is only ever `failed` with `DaemonSetClaimed` (a pass that wrote or
    ///     deleted anything for it would have left another status), and the DaemonSet's claim
    ///     annotation never names it.
    OneDriverPerDaemonSet,
    /// 30. The kstatus conditions agree with the phase at every status write (issue 51): a
    ///     status with a phase carries `Ready`, `Reconciling` and `Stalled`, never both of the
    ///     last two true, `Ready` true exactly when `successful` and not `Degraded`, `Stalled`
    ///     true when `failed` or `rolledBack`, each with the status's `observedGeneration`.
    KstatusAgreesWithPhase,
    /// 31. A node unhealthy since before its update never fails a rollout (issue 46): when the
    ///     status turns `failed` with `NodeUnhealthy`, every node it names was healthy when
    ///     its pod of the target was created: its `Ready` (or `NetworkUnavailable`) condition
    ///     moved more than the gate's 5 s clock-skew margin after that pod's
    ///     `creationTimestamp`, as the simulator stored them. The nodes the harness takes
    ///     NotReady (unrelated failures, before or after their update) are its test.
    NoFailureForANodeUnhealthyBefore,
    /// 32. Health gates, neighbours (issue 46): once a release has disrupted the neighbours of
    ///     a Ready node it runs on beyond the gate's threshold (two of its neighbours and half,
    ///     there at its update), with no neighbour of a node off the release disrupted (the
    ///     baseline), no further pod is deleted and no widening is written for it, past the
    ///     controller's staleness and within the gate's window.
    NeighboursStopTheRelease,
    /// 33. Health gates, nodes (issue 46): once a release that breaks its node
    ///     (`breaks-node`, `node-condition=NetworkUnavailable`) has broken one (a node healthy
    ///     when the release's pod was created turned unhealthy more than the gate's 5 s margin
    ///     after it, and stays so), with no node off the release turned unhealthy since the
    ///     release's first pod there (the baseline), no further pod of the DaemonSet is taken
    ///     down and no widening is written while the DaemonSet's target is that release, past
    ///     the controller's staleness and within the gate's window. A rollback (the target
    ///     changes), a retry (a person's answer) and a hand edit end it.
    NodeBreakageStopsTheRelease,
    /// 34. Surge (issue 50): with `spec.strategy.surge` and the DaemonSet at `maxUnavailable:
    ///     0`, no ready pod is taken down on a Ready node that has no other ready pod of the
    ///     DaemonSet: the number of nodes without a ready agent stays within what
    ///     `maxUnavailable` allows, 0.
    SurgeKeepsAnAgentOnEveryNode,
    /// 35. Image pre-pull (issue 50): never more pre-pull pods pulling at once than
    ///     `spec.prePull.maxConcurrent`; each the CanaryDaemonSet's alone (never adopted, none
    ///     of the agent's labels); none left once the rollout is at rest.
    PrePullBoundedAndCleanedUp,
    /// 36. The surge canary's soak (issue 50): with `spec.strategy.surge`, no node but the
    ///     canary's is replaced before the canary has soaked (`checker/surge_soak.rs`).
    SurgeSoakHoldsTheDaemonSet,
}

impl Invariant {
    /// The invariant's name.
    pub fn name(self) -> &'static str {
        match self {
            Invariant::UnavailableWithinBudget => "1 unavailable-within-budget",
            Invariant::NoWidenWithoutReadyCanary => "2 no-widen-without-ready-canary",
            Invariant::RolloutsEnd => "3 rollouts-end",
            Invariant::RestsAfterSuccess => "4 rests-after-success",
            Invariant::NoStartWithoutSpecChange => "5 no-start-without-spec-change",
            Invariant::StatusAgreesAtQuiescence => "6 status-agrees-at-quiescence",
            Invariant::BoundedLeaderOnlyWrites => "7 bounded-leader-only-writes",
            Invariant::NoPanicNoHotLoop => "8 no-panic-no-hot-loop",
            Invariant::DriftHandled => "9 drift-handled",
            Invariant::BadObjectFailsAlone => "10 bad-object-fails-alone",
            Invariant::PodsWithinStepBudget => "11 pods-within-step-budget",
            Invariant::NoDeletionAfterFailure => "12 no-deletion-after-failure",
            Invariant::OnlyDeferredNodesOld => "13 only-deferred-nodes-old",
            Invariant::OneDeletePerPod => "14 one-delete-per-pod",
            Invariant::NothingMovesWhileHeld => "15 nothing-moves-while-held",
            Invariant::RetryActedOn => "16 retry-acted-on",
            Invariant::RollbackEndsOnStable => "17 rollback-ends-on-stable",
            Invariant::AbortActedOn => "18 abort-acted-on",
            Invariant::FullPromotionReachesLastStep => "19 full-promotion-reaches-last-step",
            Invariant::UndoActedOn => "20 undo-acted-on",
            Invariant::AnalysedPauseEndsWhenPassing => "21 analysed-pause-ends-when-passing",
            Invariant::QueriesCarryTheToken => "22 queries-carry-the-token",
            Invariant::NoTakeoverOfALiveLease => "23 no-takeover-of-a-live-lease",
            Invariant::IsolatedLeaderReplaced => "24 isolated-leader-replaced",
            Invariant::NoWedgeExit => "25 no-wedge-exit",
            Invariant::DeclaredFieldsOnly => "26 declared-fields-only",
            Invariant::RefusedWritesChangeNothing => "27 refused-writes-change-nothing",
            Invariant::ProbesTrueAtQuiescence => "28 probes-true-at-quiescence",
            Invariant::OneDriverPerDaemonSet => "29 one-driver-per-daemon-set",
            Invariant::KstatusAgreesWithPhase => "30 kstatus-agrees-with-phase",
            Invariant::NoFailureForANodeUnhealthyBefore => {
                "31 no-failure-for-a-node-unhealthy-before"
            }
            Invariant::NeighboursStopTheRelease => "32 neighbours-stop-the-release",
            Invariant::NodeBreakageStopsTheRelease => "33 node-breakage-stops-the-release",
            Invariant::SurgeKeepsAnAgentOnEveryNode => "34 surge-keeps-an-agent-on-every-node",
            Invariant::PrePullBoundedAndCleanedUp => "35 pre-pull-bounded-and-cleaned-up",
            Invariant::SurgeSoakHoldsTheDaemonSet => "36 surge-soak-holds-the-daemon-set",
        }
    }
}

/// One broken invariant.
#[derive(Debug, Clone)]
pub struct Violation {
    /// Which one.
    pub invariant: Invariant,
    /// Virtual seconds since the start.
    pub at: f64,
    /// What was seen.
    pub message: String,
    /// The last events before it.
    pub trace: Vec<String>,
}

/// What one seed exercised.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Exercised {
    /// Version changes applied (rollouts started by the harness, the install included).
    pub rollouts: u64,
    /// Rollouts that ended successful / failed.
    pub successful: u64,
    /// Rollouts that ended failed.
    pub failed: u64,
    /// Error answers (500, 429, 409, 410) the replicas received.
    pub error_answers: u64,
    /// Controller kills and restarts.
    pub restarts: u64,
    /// Node changes (added, removed, NotReady, cordoned).
    pub node_changes: u64,
    /// DaemonSet writes that succeeded.
    pub daemon_set_writes: u64,
    /// Requests the replicas made.
    pub requests: u64,
    /// Virtual seconds simulated.
    pub virtual_seconds: u64,
    /// Requests of the busiest replica in its busiest virtual minute.
    pub peak_requests_per_minute: u64,
    /// Replicas whose `run` returned an error (e.g. the lease could not be set up because the
    /// API answered an injected error): restarted like a crashed pod, counted, not a violation.
    pub error_exits: u64,
    /// Hand edits of the DaemonSet's template (drift).
    pub hand_edits: u64,
    /// CanaryDaemonSets stored with a spec that does not decode.
    pub bad_objects: u64,
    /// Bad writes the API refused (invariant 27).
    pub refused_writes: u64,
    /// Rival CanaryDaemonSets created (invariant 29).
    pub rivals: u64,
    /// Pods the controller deleted (Pods driver).
    pub pod_deletions: u64,
    /// Promotions the harness made (Pods driver).
    pub promotions: u64,
    /// Full promotions the harness made (Pods driver).
    pub full_promotions: u64,
    /// Holds on request the harness made and ended (both drivers).
    pub holds: u64,
    /// Retries of a failed rollout the harness asked for (both drivers).
    pub retries: u64,
    /// `abort` verbs sent.
    pub aborts: u64,
    /// `undo` verbs sent.
    pub undos: u64,
    /// Rollbacks that ended (`rolledBack` at quiescence).
    pub rolled_back: u64,
    /// Analysis verdicts the status recorded, each time one changed: passing, failed,
    /// inconclusive.
    pub analysis_verdicts: [u64; 3],
    /// Bearer tokens rotated (their Secret deleted, then written back with a new one).
    pub token_rotations: u64,
    /// Replicas cut off from the API server for a while (`Action::Isolate`), frozen or not.
    pub isolations: u64,
    /// Changes of the Lease's holder from one replica to the other (releases not counted).
    pub lease_takeovers: u64,
    /// Seeds whose replicas idled past the wedge timeout before the CanaryDaemonSet existed.
    pub idle_starts: u64,
    /// Nodes a release broke during its rollout, as invariant 33 counts them.
    pub node_breakages: u64,
}

/// DaemonSet writes attributed to one version.
#[derive(Debug, Clone, Copy, Default)]
pub struct WriteTally {
    /// Writes that succeeded.
    pub succeeded: u64,
    /// Writes that were refused while this version was live.
    pub failed: u64,
    /// Successful writes that left the DaemonSet as it was (the API server skipped them).
    pub unchanged: u64,
    /// Replica kills, and leader terms ended, while this version was live: each may lose the
    /// record of one write.
    pub kills: u64,
    /// Hand edits while this version was live: each may be reverted by a rollout of its own.
    pub hand_edits: u64,
    /// The Pods driver: a rollout is one DaemonSet write (the template, `OnDelete`), whatever
    /// the steps; the pods are deleted one by one instead, which invariant 14 bounds.
    pub pods_driver: bool,
    /// The MaxUnavailable driver's canary soaks (issue 46: `Fixed` compatibility, the default
    /// 30 s) with the DaemonSet controller held: the DaemonSet on `OnDelete` until the canary
    /// has soaked, a write that moves the update strategy type alone (the widen's write ends
    /// it). It is counted apart ([`WriteTally::soak_hold`]), not as a write of the rollout.
    pub soaked: bool,
    /// The soak's holds seen: type-only moves to `OnDelete` taken as the soak's (one per
    /// rollout: the version's, and the revert of each hand edit).
    pub soak_holds: u64,
}

impl WriteTally {
    /// Writes beyond those of a rollout (three, or one with the Pods driver) and its retries:
    /// a failed write allows one more, a kill allows one more that changes nothing, a hand
    /// edit one rollout more (its revert). The canary soak's hold is not among them
    /// ([`WriteTally::soak_hold`]).
    pub fn excess(&self) -> u64 {
        let per_rollout = if self.pods_driver { 1 } else { 3 };
        let allowed = per_rollout
            + self.failed
            + self.unchanged.min(self.kills)
            + per_rollout * self.hand_edits;
        self.succeeded.saturating_sub(allowed)
    }

    /// Takes a type-only move to `OnDelete` as the canary soak's hold, when this version's
    /// rollouts soak under the MaxUnavailable driver and have not each had theirs; `false`
    /// leaves it to the holds on request (invariant 15's budget), then to `succeeded`.
    ///
    /// Either order of a hold on request and the soak's hold comes out right: a `pause` before
    /// the canary's pod exists takes the soak's slot, its resume and the soak's own hold then
    /// take the two that hold on request allows.
    pub fn soak_hold(&mut self) -> bool {
        let allowed = if self.soaked && !self.pods_driver {
            1 + self.hand_edits
        } else {
            0
        };
        let taken = self.soak_holds < allowed;
        self.soak_holds += u64::from(taken);
        taken
    }
}

/// A pod the controller deleted (a DELETE answered 200), as the recorder saw it.
#[derive(Debug, Clone)]
pub struct Deleted {
    /// The pod's UID.
    pub uid: String,
    /// Its node.
    pub node: String,
    /// It was ready when deleted (a not-ready pod's deletion takes no availability away).
    pub ready: bool,
}

#[derive(Debug, Default)]
struct State {
    trace: VecDeque<String>,
    violations: Vec<Violation>,
    exercised: Exercised,
    writes: BTreeMap<String, WriteTally>,
    requests_per_minute: BTreeMap<(usize, u64), u64>,
    /// The same requests by kind (`DELETE pods`), for the report of a hot loop.
    request_kinds: BTreeMap<(usize, u64), BTreeMap<String, u64>>,
    pods_driver: bool,
    soaked: bool,
    /// Successful DELETEs per pod UID (invariant 14).
    deletes_per_uid: BTreeMap<String, u32>,
    /// Deletions the checker has not taken in yet (invariant 11).
    deleted: Vec<Deleted>,
    /// Virtual time from which nothing may move: the hold annotation was set a grace earlier
    /// (invariant 15); `None` when not held.
    held_from: Option<f64>,
    /// Holds the harness asked for (invariant 15 allows two strategy-type writes for each).
    holds_asked: u64,
    /// DaemonSet writes that moved the update strategy type alone (a hold or its end).
    strategy_type_writes: u64,
    /// Every replica process's observer, and how many of its ended leader terms invariant 7
    /// has credited already.
    leader_terms: Vec<(canary_kube_adapter::Observer, u64)>,
}

/// Shared, cheap to clone.
#[derive(Debug, Clone)]
pub struct World {
    start: Instant,
    state: Arc<Mutex<State>>,
    /// The latest virtual time read ([`World::now`]), in milliseconds: the runner's watchdog
    /// reads it from another thread to tell a slow seed from one whose clock stopped.
    heartbeat: Arc<AtomicU64>,
    /// Every request of the replicas, when `DST_TRACE_DIR` asks for it.
    requests: RequestTrace,
}

impl World {
    /// A new world; time 0 is now.
    pub fn new() -> Self {
        Self {
            start: Instant::now(),
            state: Arc::default(),
            heartbeat: Arc::default(),
            requests: RequestTrace::from_env(),
        }
    }

    /// The request trace of the seed (off unless `DST_TRACE_DIR` is set).
    pub fn requests(&self) -> &RequestTrace {
        &self.requests
    }

    /// Virtual time since the start.
    pub fn elapsed(&self) -> std::time::Duration {
        self.start.elapsed()
    }

    /// A world that publishes its virtual time to `heartbeat` whenever it reads it.
    pub fn heartbeat(mut self, heartbeat: Arc<AtomicU64>) -> Self {
        self.heartbeat = heartbeat;
        self
    }

    /// A world whose rollouts use the Pods driver (see [`WriteTally::pods_driver`]).
    /// The MaxUnavailable driver's canary soaks (see [`WriteTally::soaked`]).
    pub fn soaked(self, soaked: bool) -> Self {
        self.lock().soaked = soaked;
        self
    }

    pub fn pods_driver(self, pods_driver: bool) -> Self {
        self.lock().pods_driver = pods_driver;
        self
    }

    /// Records a successful DELETE of a pod by the controller; returns how many successful
    /// DELETEs its UID has had, this one included.
    pub fn pod_deleted(&self, deleted: Deleted) -> u32 {
        let mut state = self.lock();
        state.exercised.pod_deletions += 1;
        let count = state
            .deletes_per_uid
            .entry(deleted.uid.clone())
            .or_default();
        *count += 1;
        let count = *count;
        state.deleted.push(deleted);
        count
    }

    /// The harness set the hold annotation (`Some`, with the grace the controller has to see
    /// it) or removed it (`None`).
    pub fn hold(&self, grace: Option<f64>) {
        let now = self.now();
        let mut state = self.lock();
        state.held_from = grace.map(|grace| now + grace);
        state.holds_asked += u64::from(grace.is_some());
    }

    /// Records a DaemonSet write that moved the update strategy type alone; whether it is
    /// within the two a hold asked for allows (else it counts as any write, invariant 7).
    pub fn strategy_type_written(&self) -> bool {
        let mut state = self.lock();
        // One that is not within it counts as a write of the rollout, and spends none of it.
        let within = state.strategy_type_writes < 2 * state.holds_asked;
        state.strategy_type_writes += u64::from(within);
        within
    }

    /// Whether nothing may move now: held for longer than the grace.
    pub fn held_past_grace(&self) -> bool {
        let now = self.now();
        self.lock().held_from.is_some_and(|from| now > from)
    }

    /// The deletions recorded since the last call.
    pub fn take_deleted(&self) -> Vec<Deleted> {
        std::mem::take(&mut self.lock().deleted)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Virtual seconds since the start.
    pub fn now(&self) -> f64 {
        let elapsed = self.start.elapsed();
        let millis = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX);
        self.heartbeat.fetch_max(millis, Ordering::Relaxed);
        elapsed.as_secs_f64()
    }

    /// Adds a trace entry.
    pub fn trace(&self, entry: impl AsRef<str>) {
        let line = format!("[{:>8.1}s] {}", self.now(), entry.as_ref());
        let mut state = self.lock();
        if state.trace.len() == TRACE_LEN {
            state.trace.pop_front();
        }
        state.trace.push_back(line);
    }

    /// Records a violation (only the first of each invariant keeps its trace; later ones of
    /// the same invariant are counted in the message list).
    pub fn violate(&self, invariant: Invariant, message: impl Into<String>) {
        let message = message.into();
        self.trace(format!("VIOLATION {}: {message}", invariant.name()));
        let at = self.now();
        let mut state = self.lock();
        let trace = state.trace.iter().cloned().collect();
        state.violations.push(Violation {
            invariant,
            at,
            message,
            trace,
        });
    }

    /// Violations so far.
    pub fn violations(&self) -> Vec<Violation> {
        self.lock().violations.clone()
    }

    /// Edits the counters.
    pub fn count(&self, edit: impl FnOnce(&mut Exercised)) {
        edit(&mut self.lock().exercised);
    }

    /// The counters.
    pub fn exercised(&self) -> Exercised {
        self.lock().exercised.clone()
    }

    /// Edits the DaemonSet write tally of `version`.
    /// Follows the leader terms of one replica process, for [`World::terms_ended`].
    pub fn follow_terms(&self, observer: canary_kube_adapter::Observer) {
        self.lock().leader_terms.push((observer, 0));
    }

    /// Leader terms that ended, on any replica, since the last call. Each may lose the record
    /// of one write, which the next leader, on whichever replica, writes again, changing
    /// nothing; invariant 7 credits them as kills. A leader cut off from the network ends its
    /// term as a killed one does, and the write that repeats its lost one comes from the other
    /// replica (soak seed 20001109).
    pub fn terms_ended(&self) -> u64 {
        let mut state = self.lock();
        state
            .leader_terms
            .iter_mut()
            .map(|(observer, credited)| {
                let stats = observer.stats();
                let ended = stats
                    .leader_terms()
                    .saturating_sub(u64::from(stats.is_leader()));
                let new = ended.saturating_sub(*credited);
                *credited = (*credited).max(ended);
                new
            })
            .sum()
    }

    pub fn tally(&self, version: &str, edit: impl FnOnce(&mut WriteTally)) -> WriteTally {
        let mut state = self.lock();
        let pods_driver = state.pods_driver;
        let soaked = state.soaked;
        let tally = state
            .writes
            .entry(version.to_owned())
            .or_insert_with(|| WriteTally {
                pods_driver,
                soaked,
                ..WriteTally::default()
            });
        edit(tally);
        *tally
    }

    /// Counts one request of `replica` of `kind` (`DELETE pods`); returns the count of its
    /// current virtual minute.
    pub fn count_request(&self, replica: usize, kind: String) -> u64 {
        let minute = (self.now() / 60.0) as u64;
        let mut state = self.lock();
        state.exercised.requests += 1;
        *state
            .request_kinds
            .entry((replica, minute))
            .or_default()
            .entry(kind)
            .or_default() += 1;
        let count = state
            .requests_per_minute
            .entry((replica, minute))
            .or_default();
        *count += 1;
        *count
    }

    /// The requests of `replica` in the current virtual minute by kind, most first
    /// (`DELETE pods 850, PATCH canarydaemonsets/status 41, ...`).
    pub fn requests_this_minute(&self, replica: usize) -> String {
        let minute = (self.now() / 60.0) as u64;
        let state = self.lock();
        let mut kinds: Vec<(&String, &u64)> = state
            .request_kinds
            .get(&(replica, minute))
            .map(|kinds| kinds.iter().collect())
            .unwrap_or_default();
        kinds.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        kinds
            .iter()
            .map(|(kind, count)| format!("{kind} {count}"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The busiest virtual minute of any replica.
    pub fn max_requests_per_minute(&self) -> u64 {
        self.lock()
            .requests_per_minute
            .values()
            .copied()
            .max()
            .unwrap_or(0)
    }
}

/// The failure report of one seed: the seed, each invariant, the trace, the replay command.
pub fn report(plan_line: &str, replay: &str, violations: &[Violation]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "DST FAILURE — {plan_line}");
    let mut seen = Vec::new();
    for violation in violations {
        if seen.contains(&violation.invariant) {
            continue;
        }
        seen.push(violation.invariant);
        let _ = writeln!(
            out,
            "invariant {} broken at {:.1}s: {}",
            violation.invariant.name(),
            violation.at,
            violation.message
        );
        let _ = writeln!(out, "last events:");
        for line in &violation.trace {
            let _ = writeln!(out, "  {line}");
        }
    }
    let _ = writeln!(out, "replay: {replay}");
    out
}
