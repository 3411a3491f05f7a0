//! What the controller reports to the outside (metrics, demos, tests): one channel of typed
//! [`Report`]s, and the counters derived from them.
//!
//! Every report goes through [`Observer::report`], which updates the [`Stats`] counters and hands
//! the report to every subscriber. That is the only way out of the controller: the binary derives
//! its metrics from the reports as they come (no polling), a demo or a test reads the
//! [`Transition`]s, and the counters are a running sum of the same reports.
//!
//! # Invariants
//!
//! - A subscriber never misses a report sent after it subscribed (unbounded channels: a slow
//!   reader delays nothing and loses nothing; the reports are small and readers are fast).
//! - The counters and the reports cannot disagree: both are updated in [`Observer::report`].

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::sync::lock;
use canary_predicates::Target;
use canary_state_machine::{
    Deferral, FailureReason, LiveMaxUnavailable, NodeTally, Phase, WriteKind,
};
use k8s_openapi::jiff::Timestamp;
use tokio::sync::mpsc;

/// What a pass learnt of the image pre-pull (issue 50, `spec.prePull`), for the
/// `PrePullBlocked` condition.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum PrePullStanding {
    /// Nothing learnt this pass (no pre-pull request, or another kind of pass): the condition
    /// stays as it was.
    #[default]
    Unknown,
    /// No `spec.prePull`: no condition.
    Off,
    /// Pre-pull pods were created.
    Created,
    /// The API server refused a pre-pull request with 403: its words, cut.
    Forbidden(String),
}

/// The typed record of one reconcile pass that changed the status: what the status says after
/// it, and what the pass did.
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
    /// The target of this pass: its version, registry and deployment id (empty when the spec
    /// cannot be acted on and no earlier pass knew one).
    pub target: Target,
    /// Phase before this pass (`None` for a new object).
    pub from: Option<Phase>,
    /// Phase after this pass.
    pub to: Phase,
    /// When `to` is `Failed`: why.
    pub failure: Option<FailureReason>,
    /// The human-readable message of the pass (the failure's, or none).
    pub message: Option<String>,
    /// The DaemonSet write of this pass, if one succeeded.
    pub write: Option<WriteKind>,
    /// `desiredNumberScheduled`.
    pub desired: u32,
    /// Updated pods.
    pub updated: u32,
    /// Updated and ready pods.
    pub updated_ready: u32,
    /// Available pods of the DaemonSet, whatever their version.
    pub available: u32,
    /// maxUnavailable of the DaemonSet after this pass; `None` when not known (a spec the
    /// controller cannot act on, before any DaemonSet was seen).
    pub max_unavailable: Option<LiveMaxUnavailable>,
    /// The CanaryDaemonSet generation this pass acted on.
    pub observed_generation: Option<i64>,
    /// The recorded DaemonSet generation after this pass.
    pub recorded_generation: Option<i64>,
    /// What someone else changed in the owned DaemonSet, while it differs from what the
    /// controller last wrote (the `Drifted` condition); `None` when it does not.
    pub drift: Option<String>,
    /// The image pre-pull's standing after this pass (the `PrePullBlocked` condition).
    pub pre_pull: PrePullStanding,
    /// Hash of the DaemonSet's template and update strategy as stored after the controller's
    /// write in this pass (or adopted as the reference for drift); `None`: unchanged.
    pub template_hash: Option<String>,
    /// When the current phase started.
    pub phase_started_at: Timestamp,
    /// When this pass ran.
    pub at: Timestamp,
    /// What a pass of the Pods driver saw and did; `None` for the MaxUnavailable driver.
    pub pods: Option<Box<PodsRecord>>,
    /// Where the object stands in its history after the pass; `None`: unchanged.
    pub history: Option<Box<crate::crd::HistoryStatus>>,
    /// The retry mark acted on (in this pass or before), both drivers.
    pub retry: Option<String>,
    /// The pass was held on request (`canary.daemonset.dev/paused`), both drivers; a pass
    /// that decides nothing (an invalid spec) carries over what the status had.
    pub held: bool,
    /// The nodes the health gates name (issue 46), both drivers; `None`: none.
    pub unhealthy: Option<Box<UnhealthyRecord>>,
    /// The analysis the status shows (`spec.analysis`), both drivers: the stretch measured
    /// now, or the last one measured; `None` without analysis.
    pub analysis: Option<Box<crate::crd::AnalysisStatus>>,
    /// When a person resumed a hold of `onUnhealthy: Hold` (seconds since the epoch), as the
    /// gates read it this pass (`status.unhealthyAnswered`).
    pub unhealthy_answered: Option<i64>,
    /// The agent downtime gaps of the DaemonSet's nodes that closed since the last pass
    /// (issue 50), both drivers; each is observed once, by the pass that writes it to the status.
    pub downtime: crate::index::ClosedGaps,
}

impl Transition {
    /// A move of `name` (and of its DaemonSet, named the same) from `from` to `to` at `at`, and
    /// nothing else: no failure, message or write, counts at zero, and none of what a pass of
    /// the controller adds (drift, a driver's record, history, a retry, a hold, the health
    /// gates, analysis, downtime). What an observer that never writes reports (the KubeVirt
    /// tracker), and where a test's or a demo's transition starts: each sets its counts over it.
    pub fn phase_change(
        namespace: &str,
        name: &str,
        target: Target,
        from: Option<Phase>,
        to: Phase,
        at: Timestamp,
    ) -> Self {
        Transition {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            daemon_set: name.to_owned(),
            target,
            from,
            to,
            failure: None,
            message: None,
            write: None,
            desired: 0,
            updated: 0,
            updated_ready: 0,
            available: 0,
            max_unavailable: None,
            observed_generation: None,
            recorded_generation: None,
            drift: None,
            pre_pull: PrePullStanding::Unknown,
            template_hash: None,
            phase_started_at: at,
            at,
            pods: None,
            history: None,
            retry: None,
            held: false,
            unhealthy: None,
            analysis: None,
            unhealthy_answered: None,
            downtime: Default::default(),
        }
    }
}

/// The nodes the health gates name in a pass: at most ten, and how many in all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnhealthyRecord {
    /// Which gate names them.
    pub cause: canary_state_machine::HealthCause,
    /// The nodes, earliest broken first.
    pub nodes: Vec<canary_state_machine::UnhealthyNode>,
    /// How many there are in all.
    pub count: u32,
}

impl UnhealthyRecord {
    /// The nodes the gates name over `facts`, if any.
    pub fn of(facts: Option<&canary_state_machine::HealthFacts>) -> Option<Box<Self>> {
        match canary_state_machine::health::judge(facts?) {
            canary_state_machine::HealthVerdict::NodesUnhealthy {
                cause,
                nodes,
                count,
            } => Some(Box::new(UnhealthyRecord {
                cause,
                nodes,
                count,
            })),
            canary_state_machine::HealthVerdict::Healthy => None,
        }
    }
}

/// The Pods driver's part of a [`Transition`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodsRecord {
    /// The step the rollout is in after the pass (`step_count` once every step is done).
    pub step: u32,
    /// The number of steps.
    pub step_count: u32,
    /// The revision the pods move to, once the DaemonSet controller has one.
    pub target_revision: Option<String>,
    /// The canary nodes, when the first nodes step completed in this pass.
    pub canary_nodes: Option<Vec<String>>,
    /// Deferred nodes, by name.
    pub deferred: Vec<(String, Deferral)>,
    /// Nodes whose updated pod crash-loops.
    pub failed_nodes: Vec<String>,
    /// `(revision, pods, ready)`, the target first.
    pub revisions: Vec<(String, u32, u32)>,
    /// The promotion mark acted on (in this pass or before).
    pub promotion: Option<String>,
    /// The counts of the pass.
    pub tally: NodeTally,
    /// Pods deleted in this pass.
    pub deleted: Vec<String>,
    /// The rollout rests in a pause step without a duration: only `promote` moves it on (the
    /// kstatus `Stalled` condition's `AwaitingPromotion`).
    pub awaiting_promotion: bool,
}

/// What became of a DaemonSet write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WriteOutcome {
    /// The API server accepted it.
    Ok,
    /// Refused as a conflict (stale generation, 409): retried shortly, not a failure.
    Conflict,
    /// Refused otherwise: the rollout fails with the API server's message.
    Rejected,
}

impl WriteOutcome {
    /// The metric label value (`ok`, `conflict`, `error`).
    pub const fn as_str(self) -> &'static str {
        match self {
            WriteOutcome::Ok => "ok",
            WriteOutcome::Conflict => "conflict",
            WriteOutcome::Rejected => "error",
        }
    }
}

/// One thing the controller did or saw, as it happens.
#[derive(Debug, Clone, PartialEq)]
pub enum Report {
    /// A pass changed the status.
    Transition(Box<Transition>),
    /// A pass finished: its wall-clock duration and, when it failed, the error's
    /// [`metric_label`](crate::Error::metric_label).
    Reconciled {
        /// Wall-clock duration of the pass (its real cost, also under a paused clock).
        took: Duration,
        /// The error label when the pass failed.
        error: Option<&'static str>,
    },
    /// A DaemonSet write (create or patch) was answered.
    DaemonSetWrite {
        /// Why it was made.
        kind: WriteKind,
        /// How the API server answered.
        outcome: WriteOutcome,
    },
    /// A status write went out.
    StatusWritten,
    /// An event was published.
    EventPublished,
    /// A list or watch request of one of the caches failed (the watcher retries with backoff).
    WatchError {
        /// The watched resource (`pods`, `daemonsets`, ...).
        resource: &'static str,
    },
    /// This replica started or stopped running the controller.
    Leader(bool),
    /// Someone else changed the owned DaemonSet of a CanaryDaemonSet (reported once per drift).
    DriftDetected {
        /// Namespace of the CanaryDaemonSet.
        namespace: String,
        /// Name of the CanaryDaemonSet.
        name: String,
        /// What changed.
        what: String,
    },
    /// The Pods driver deleted an old pod (one DELETE request, accepted).
    PodDeleted,
    /// An analysis run measured one metric (`spec.analysis`).
    AnalysisMeasured {
        /// Namespace of the CanaryDaemonSet.
        namespace: String,
        /// Name of the CanaryDaemonSet.
        name: String,
        /// The metric's name in the spec.
        metric: String,
        /// The value, when Prometheus gave one number.
        value: Option<f64>,
        /// What the measurement says.
        verdict: canary_state_machine::Verdict,
    },
    /// A notification was delivered, tried again, given up or dropped (`crate::notify`).
    Notification {
        /// The receiver's name (never its URL).
        receiver: String,
        /// One of [`crate::notify::result`].
        result: &'static str,
    },
    /// A CanaryDaemonSet is gone: everything reported about it may be forgotten.
    Deleted {
        /// Namespace of the CanaryDaemonSet.
        namespace: String,
        /// Name of the CanaryDaemonSet.
        name: String,
    },
    /// A CanaryDaemonSet has no phase any more: it waits for the DaemonSet its `workloadRef`
    /// names, which does not exist (deleted after a rollout, or not created yet). What was
    /// reported of its rollouts may be forgotten (a last `failed` would keep an alert firing).
    Unphased {
        /// Namespace of the CanaryDaemonSet.
        namespace: String,
        /// Name of the CanaryDaemonSet.
        name: String,
    },
}

/// Counters of what the controller did, summed from the [`Report`]s; read them with the
/// accessor methods.
#[derive(Debug, Default)]
pub struct Stats {
    writes: [AtomicU64; WRITE_KINDS.len()],
    write_conflicts: AtomicU64,
    write_failures: AtomicU64,
    status_writes: AtomicU64,
    reconciles: AtomicU64,
    reconcile_errors: AtomicU64,
    watch_errors: AtomicU64,
    events: AtomicU64,
    drifts: AtomicU64,
    pod_deletions: AtomicU64,
    leader: AtomicBool,
    leader_terms: AtomicU64,
}

/// Every write kind, in counter order.
pub const WRITE_KINDS: [WriteKind; 8] = [
    WriteKind::Create,
    WriteKind::Start,
    WriteKind::Widen,
    WriteKind::Finish,
    WriteKind::TlsStep,
    WriteKind::Hold,
    WriteKind::Resume,
    WriteKind::RevertHeld,
];

impl Stats {
    /// The counter of one kind of DaemonSet write.
    fn writes_of(&self, kind: WriteKind) -> &AtomicU64 {
        let [
            create,
            start,
            widen,
            finish,
            tls_step,
            hold,
            resume,
            revert_held,
        ] = &self.writes;
        match kind {
            WriteKind::Create => create,
            WriteKind::Start => start,
            WriteKind::Widen => widen,
            WriteKind::Finish => finish,
            WriteKind::TlsStep => tls_step,
            WriteKind::Hold => hold,
            WriteKind::Resume => resume,
            WriteKind::RevertHeld => revert_held,
        }
    }

    /// Successful DaemonSet writes (create or patch) of `kind`.
    pub fn daemon_set_writes(&self, kind: WriteKind) -> u64 {
        self.writes_of(kind).load(Ordering::Relaxed)
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

    /// Reconcile passes finished.
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

    /// Drifts of owned DaemonSets detected.
    pub fn drifts(&self) -> u64 {
        self.drifts.load(Ordering::Relaxed)
    }

    /// Pods the Pods driver deleted.
    pub fn pod_deletions(&self) -> u64 {
        self.pod_deletions.load(Ordering::Relaxed)
    }

    /// Whether this replica currently runs the controller (always true without leader election).
    pub fn is_leader(&self) -> bool {
        self.leader.load(Ordering::Relaxed)
    }

    /// Terms this replica has led: each starts the controller afresh, with empty caches and
    /// nothing remembered of the term before (a write whose status write the end of the term
    /// refused is sent again, as after a restart).
    pub fn leader_terms(&self) -> u64 {
        self.leader_terms.load(Ordering::Relaxed)
    }

    fn count(&self, report: &Report) {
        let add = |counter: &AtomicU64| {
            counter.fetch_add(1, Ordering::Relaxed);
        };
        match report {
            Report::Transition(_)
            | Report::Deleted { .. }
            | Report::Unphased { .. }
            | Report::AnalysisMeasured { .. }
            | Report::Notification { .. } => {}
            Report::DriftDetected { .. } => add(&self.drifts),
            Report::PodDeleted => add(&self.pod_deletions),
            Report::Reconciled { error, .. } => {
                add(&self.reconciles);
                if error.is_some() {
                    add(&self.reconcile_errors);
                }
            }
            Report::DaemonSetWrite { kind, outcome } => match outcome {
                WriteOutcome::Ok => add(self.writes_of(*kind)),
                WriteOutcome::Conflict => add(&self.write_conflicts),
                WriteOutcome::Rejected => add(&self.write_failures),
            },
            Report::StatusWritten => add(&self.status_writes),
            Report::EventPublished => add(&self.events),
            Report::WatchError { .. } => add(&self.watch_errors),
            Report::Leader(leader) => {
                if *leader && !self.leader.swap(true, Ordering::Relaxed) {
                    add(&self.leader_terms);
                }
                self.leader.store(*leader, Ordering::Relaxed);
            }
        }
    }
}

/// A receiver of every [`Report`] sent after [`Observer::reports`] was called.
#[derive(Debug)]
pub struct Reports {
    receiver: mpsc::UnboundedReceiver<Report>,
}

impl Reports {
    /// The next report; `None` once the controller (every [`Observer`] clone) is gone.
    pub async fn recv(&mut self) -> Option<Report> {
        self.receiver.recv().await
    }

    /// The next report if one is waiting.
    pub fn try_recv(&mut self) -> Option<Report> {
        self.receiver.try_recv().ok()
    }
}

/// The observer is gone and every transition sent was received.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the controller's report channel is closed")]
pub struct Closed;

/// A receiver of the [`Transition`]s among the reports ([`Observer::subscribe`]).
#[derive(Debug)]
pub struct Transitions {
    reports: Reports,
}

impl Transitions {
    /// The next transition, skipping the other reports.
    pub async fn recv(&mut self) -> Result<Transition, Closed> {
        loop {
            match self.reports.recv().await {
                Some(Report::Transition(transition)) => return Ok(*transition),
                Some(_) => {}
                None => return Err(Closed),
            }
        }
    }

    /// The next transition if one is waiting.
    pub fn try_recv(&mut self) -> Option<Transition> {
        while let Some(report) = self.reports.try_recv() {
            if let Report::Transition(transition) = report {
                return Some(*transition);
            }
        }
        None
    }
}

/// The report channel and the counters; cheap to clone, shared with the controller.
#[derive(Clone, Debug, Default)]
pub struct Observer {
    subscribers: Arc<Mutex<Vec<mpsc::UnboundedSender<Report>>>>,
    stats: Arc<Stats>,
}

impl Observer {
    /// A new observer with no subscriber yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Receives every report sent from now on.
    pub fn reports(&self) -> Reports {
        let (sender, receiver) = mpsc::unbounded_channel();
        lock(&self.subscribers).push(sender);
        Reports { receiver }
    }

    /// Receives the transitions sent from now on.
    pub fn subscribe(&self) -> Transitions {
        Transitions {
            reports: self.reports(),
        }
    }

    /// The counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Counts `report` and hands it to every subscriber (dropped subscribers are forgotten).
    pub fn report(&self, report: Report) {
        self.stats.count(&report);
        lock(&self.subscribers).retain(|subscriber| subscriber.send(report.clone()).is_ok());
    }

    /// What an analysis run of the CanaryDaemonSet `namespace/name` calls with each
    /// measurement: a [`Report::AnalysisMeasured`] through this observer.
    pub fn analysis_measured(&self, namespace: &str, name: &str) -> canary_analysis::Measured {
        let observer = self.clone();
        let (namespace, name) = (namespace.to_owned(), name.to_owned());
        Box::new(move |metric, measurement| {
            observer.report(Report::AnalysisMeasured {
                namespace: namespace.clone(),
                name: name.clone(),
                metric: metric.to_owned(),
                value: measurement.value,
                verdict: measurement.verdict,
            });
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_subscriber_gets_every_report_and_the_counters_follow() {
        let observer = Observer::new();
        let mut all = observer.reports();
        let mut transitions = observer.subscribe();
        observer.report(Report::DaemonSetWrite {
            kind: WriteKind::Start,
            outcome: WriteOutcome::Ok,
        });
        observer.report(Report::Reconciled {
            took: Duration::from_millis(2),
            error: Some("Conflict"),
        });
        observer.report(Report::Leader(true));
        assert_eq!(observer.stats().daemon_set_writes(WriteKind::Start), 1);
        assert_eq!(observer.stats().reconciles(), 1);
        assert_eq!(observer.stats().reconcile_errors(), 1);
        assert!(observer.stats().is_leader());
        assert_eq!(
            all.try_recv(),
            Some(Report::DaemonSetWrite {
                kind: WriteKind::Start,
                outcome: WriteOutcome::Ok
            })
        );
        assert!(all.try_recv().is_some() && all.try_recv().is_some());
        assert_eq!(all.try_recv(), None);
        assert_eq!(transitions.try_recv(), None, "no transition among them");
        drop(observer);
        assert_eq!(transitions.recv().await, Err(Closed));
    }
}
