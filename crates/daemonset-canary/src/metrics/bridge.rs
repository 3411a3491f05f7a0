//! Derives the Prometheus metrics from the controller's reports, as they come.
//!
//! The adapter reports everything it does on one channel of typed [`Report`]s; this task turns
//! each into metric updates, with no polling. It remembers, per CanaryDaemonSet, when the
//! current phase and the current rollout began, so phase and rollout durations are observed
//! when they end.

use crate::metrics::{KnownLabels, Metrics, Mode, NODE_STATES, PodCounts, RolloutKey};
#[cfg(doc)]
use canary_kube_adapter::Observer;
use canary_kube_adapter::observer::WRITE_KINDS;
use canary_kube_adapter::{Report, Reports, Transition, WriteOutcome};
use canary_state_machine::{FailureReason, HealthCause, NodeStanding, Phase, RollbackReason};
use k8s_openapi::jiff::Timestamp;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

/// Per-rollout memory of the bridge.
#[derive(Debug, Clone, Copy)]
struct Progress {
    phase: Phase,
    phase_since: Timestamp,
    rollout_since: Timestamp,
}

/// Applies reports to metrics; see the module docs.
pub struct MetricsBridge {
    metrics: Arc<Metrics>,
    mode: Mode,
    progress: HashMap<(String, String), Progress>,
    /// The analysis metrics measured per CanaryDaemonSet, to drop their series with it.
    analysed: HashMap<(String, String), BTreeSet<String>>,
}

impl MetricsBridge {
    /// A bridge writing into `metrics` with the given mode label.
    pub fn new(metrics: Arc<Metrics>, mode: Mode) -> Self {
        Self {
            metrics,
            mode,
            progress: HashMap::new(),
            analysed: HashMap::new(),
        }
    }

    /// Applies one report.
    pub fn report(&mut self, report: &Report) {
        match report {
            Report::Transition(transition) => self.apply(transition),
            Report::Reconciled { took, error } => {
                self.metrics
                    .reconcile(self.mode, took.as_secs_f64(), *error);
            }
            Report::DaemonSetWrite { kind, outcome } => {
                // Successful writes are counted from their transition (which says what the
                // write did); a refused write changes no status, so it is counted here.
                // (as `purpose="any"`, the series the alerts and dashboard read).
                if *outcome != WriteOutcome::Ok {
                    debug_assert!(WRITE_KINDS.contains(kind));
                    self.metrics.daemonset_write("any", outcome.as_str());
                }
            }
            Report::WatchError { .. } => self.metrics.watch_errors(1),
            Report::DriftDetected {
                namespace, name, ..
            } => self.metrics.drift_detected(namespace, name),
            Report::AnalysisMeasured {
                namespace,
                name,
                metric,
                value,
                verdict,
            } => {
                self.metrics
                    .analysis_measured(namespace, name, metric, *value, *verdict);
                self.analysed
                    .entry((namespace.clone(), name.clone()))
                    .or_default()
                    .insert(metric.clone());
            }
            Report::Deleted { namespace, name } | Report::Unphased { namespace, name } => {
                if let Some(metrics) = self.analysed.remove(&(namespace.clone(), name.clone())) {
                    self.metrics.forget_analysis(
                        namespace,
                        name,
                        metrics.iter().map(String::as_str),
                    );
                }
                // A deleted CanaryDaemonSet's series would otherwise stay for ever (and its
                // last phase gauge could keep an alert firing).
                self.progress.remove(&(namespace.clone(), name.clone()));
                self.metrics.forget(&RolloutKey {
                    namespace: namespace.clone(),
                    name: name.clone(),
                    mode: self.mode,
                });
            }
            Report::Leader(leader) => self.metrics.set_leader(*leader),
            Report::PodDeleted => self.metrics.pod_deleted(),
            Report::Notification { receiver, result } => {
                self.metrics.notification(receiver, result);
            }
            Report::StatusWritten | Report::EventPublished => {}
        }
    }

    /// Applies one transition.
    pub fn apply(&mut self, transition: &Transition) {
        let key = RolloutKey {
            namespace: transition.namespace.clone(),
            name: transition.name.clone(),
            mode: self.mode,
        };
        let id = (transition.namespace.clone(), transition.name.clone());
        let previous = self.progress.get(&id).copied();
        if previous.is_none() && self.mode == Mode::Driven {
            self.metrics
                .drift_known(&transition.namespace, &transition.name);
        }
        if previous.is_none_or(|p| p.phase != transition.to) {
            // A rollback that starts while this process watches (not one it finds going on
            // after a restart, already counted by the process before it).
            if transition.to == Phase::RollingBack
                && self.mode == Mode::Driven
                && previous.is_some_and(|p| p.phase != Phase::RollingBack)
            {
                // Bounded: a reason the status does not name (written by hand) counts as the
                // automatic one.
                let reason = transition
                    .history
                    .as_ref()
                    .and_then(|history| history.rollback.as_ref())
                    .and_then(|rollback| RollbackReason::parse(&rollback.reason))
                    .map_or("OnFailure", RollbackReason::as_str);
                self.metrics
                    .rollback_started(&transition.namespace, &transition.name, reason);
            }
            self.enter_phase(&key, transition, previous);
        }
        if let Some(write) = transition.write {
            self.metrics.daemonset_write(write.as_str(), "ok");
        }
        let max_unavailable_pods = transition
            .max_unavailable
            .as_ref()
            .and_then(|value| value.value())
            .map_or(0, |value| value.scaled(transition.desired));
        let counts = PodCounts {
            desired: transition.desired,
            updated: transition.updated,
            updated_ready: transition.updated_ready,
        };
        self.metrics.set_counts(&key, counts, max_unavailable_pods);
        if self.mode == Mode::Driven {
            for gap in &transition.downtime.gaps {
                self.metrics
                    .agent_downtime(&transition.namespace, &transition.name, gap.seconds);
            }
            for cause in [HealthCause::Node, HealthCause::Neighbours] {
                let count = transition
                    .unhealthy
                    .as_ref()
                    .filter(|u| u.cause == cause)
                    .map_or(0, |u| u.count);
                self.metrics.set_unhealthy_nodes(
                    &transition.namespace,
                    &transition.name,
                    cause.label(),
                    count,
                );
            }
        }
        if let Some(pods) = &transition.pods {
            let tally = pods.tally;
            let failed = u32::try_from(pods.failed_nodes.len()).unwrap_or(u32::MAX);
            self.metrics.set_pods_driver(
                &transition.namespace,
                &transition.name,
                pods.step,
                NODE_STATES.map(|state| match state {
                    NodeStanding::Failed => failed,
                    state => tally.count(state),
                }),
            );
        }
    }

    fn enter_phase(
        &mut self,
        key: &RolloutKey,
        transition: &Transition,
        previous: Option<Progress>,
    ) {
        let started_at = seconds(transition.phase_started_at);
        let left = previous.map(|p| (p.phase.as_str(), elapsed(p.phase_since, transition.at)));
        self.metrics
            .enter_phase(key, transition.to.as_str(), started_at, left);
        let rollout_since = match previous {
            Some(p) if p.phase.is_in_progress() => p.rollout_since,
            _ => transition.phase_started_at,
        };
        let was_in_progress = previous.is_some_and(|p| p.phase.is_in_progress());
        if was_in_progress && !transition.to.is_in_progress() {
            let result = transition.to.as_str();
            let reason = transition.failure.map(|f| f.as_str());
            self.metrics.rollout_ended(
                self.mode,
                result,
                reason,
                elapsed(rollout_since, transition.at),
            );
        }
        let id = (transition.namespace.clone(), transition.name.clone());
        self.progress.insert(
            id,
            Progress {
                phase: transition.to,
                phase_since: transition.phase_started_at,
                rollout_since,
            },
        );
    }
}

/// Creates the controller's counters at 0 for every label value known in advance.
fn initialize_counters(metrics: &Metrics, mode: Mode) {
    let failures: Vec<&str> = FailureReason::ALL.iter().map(|r| r.as_str()).collect();
    let purposes: Vec<&str> = WRITE_KINDS.iter().map(|k| k.as_str()).collect();
    let known = KnownLabels {
        failure_reasons: &failures,
        write_purposes: &purposes,
        // The common kinds; rarer ones (InvalidSpec, ...) appear when they first happen.
        error_kinds: &["Conflict", "KubeApi"],
    };
    metrics.initialize_counters(mode, &known);
}

/// Runs the bridge until the report channel closes: every report is applied as it comes.
///
/// Take `reports` ([`Observer::reports`]) before the controller starts, so that nothing it
/// reports first (its leadership, say) is missed.
pub async fn run(mut reports: Reports, metrics: Arc<Metrics>, mode: Mode) {
    initialize_counters(&metrics, mode);
    let mut bridge = MetricsBridge::new(metrics, mode);
    while let Some(report) = reports.recv().await {
        bridge.report(&report);
    }
}

fn seconds(at: Timestamp) -> f64 {
    at.as_millisecond() as f64 / 1000.0
}

fn elapsed(from: Timestamp, to: Timestamp) -> f64 {
    (seconds(to) - seconds(from)).max(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use canary_state_machine::{FailureReason, LiveMaxUnavailable, WriteKind};
    use std::time::Duration;

    fn transition(from: Option<Phase>, to: Phase, at: i64, write: Option<WriteKind>) -> Transition {
        Transition {
            namespace: "default".into(),
            name: "agent".into(),
            daemon_set: "agent".into(),
            target: canary_predicates::Target {
                version: "v2".into(),
                ..canary_predicates::Target::default()
            },
            from,
            to,
            failure: (to == Phase::Failed).then_some(FailureReason::CanaryCrashLooping),
            message: None,
            write,
            desired: 20,
            updated: 2,
            updated_ready: 1,
            available: 20,
            max_unavailable: Some(LiveMaxUnavailable::Str("10%".into())),
            observed_generation: Some(1),
            recorded_generation: None,
            drift: None,
            pre_pull: canary_kube_adapter::observer::PrePullStanding::Unknown,
            template_hash: None,
            phase_started_at: Timestamp::from_second(at).unwrap(),
            at: Timestamp::from_second(at).unwrap(),
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

    fn line<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
        text.lines().find(|l| l.starts_with(prefix))
    }

    /// A failed rollout whose DaemonSet (a workloadRef's) is then deleted has no phase any
    /// more: its `failed` gauge goes, so the failure alert stops firing (issue 52, item 6).
    #[test]
    fn an_unphased_object_loses_its_phase_series() {
        let metrics = Arc::new(Metrics::new().unwrap());
        let mut bridge = MetricsBridge::new(metrics.clone(), Mode::Driven);
        bridge.apply(&transition(Some(Phase::Canary), Phase::Failed, 100, None));
        let failed = r#"canary_rollout_phase{mode="driven",name="agent",namespace="default",phase="failed"} 1"#;
        assert!(metrics.encode().unwrap().contains(failed));
        bridge.report(&Report::Unphased {
            namespace: "default".into(),
            name: "agent".into(),
        });
        let text = metrics.encode().unwrap();
        assert!(!text.contains(failed), "{text}");
    }

    #[test]
    fn a_successful_rollout_observes_phases_duration_and_writes() {
        let metrics = Arc::new(Metrics::new().unwrap());
        let mut bridge = MetricsBridge::new(metrics.clone(), Mode::Driven);
        bridge.apply(&transition(
            Some(Phase::Successful),
            Phase::Started,
            100,
            Some(WriteKind::Start),
        ));
        bridge.apply(&transition(Some(Phase::Started), Phase::Canary, 101, None));
        bridge.apply(&transition(
            Some(Phase::Canary),
            Phase::Increasing,
            130,
            Some(WriteKind::Widen),
        ));
        bridge.apply(&transition(
            Some(Phase::Increasing),
            Phase::Waiting,
            131,
            None,
        ));
        bridge.apply(&transition(
            Some(Phase::Waiting),
            Phase::Successful,
            400,
            Some(WriteKind::Finish),
        ));
        let text = metrics.encode().unwrap();
        assert!(text.contains(r#"canary_rollout_phase{mode="driven",name="agent",namespace="default",phase="successful"} 1"#), "{text}");
        let count = line(
            &text,
            r#"canary_rollout_duration_seconds_count{mode="driven",result="successful"}"#,
        )
        .unwrap();
        assert!(count.ends_with(" 1"), "{count}");
        let sum = line(
            &text,
            r#"canary_rollout_duration_seconds_sum{mode="driven",result="successful"}"#,
        )
        .unwrap();
        assert!(sum.ends_with(" 300"), "rollout from 100 s to 400 s: {sum}");
        let canary = line(
            &text,
            r#"canary_rollout_phase_duration_seconds_sum{mode="driven",phase="canary"}"#,
        )
        .unwrap();
        assert!(canary.ends_with(" 29"), "{canary}");
        for purpose in ["start", "widen", "finish"] {
            assert!(
                text.contains(&format!(
                    r#"canary_daemonset_writes_total{{purpose="{purpose}",result="ok"}} 1"#
                )),
                "{purpose}: {text}"
            );
        }
        assert!(text.contains(r#"canary_rollout_max_unavailable_pods{mode="driven",name="agent",namespace="default"} 2"#), "10% of 20: {text}");
    }

    /// A rollback that starts is counted once, by its reason (issue 52: an automatic rollback
    /// at 3 a.m. went unseen); one found going on when the process starts is not counted
    /// again; the counters exist at 0 from the object's first sighting, for `increase()`.
    #[test]
    fn a_rollback_is_counted_once_by_its_reason() {
        let metrics = Arc::new(Metrics::new().unwrap());
        let mut bridge = MetricsBridge::new(metrics.clone(), Mode::Driven);
        let going_back = |from, at, reason: &str| {
            let mut t = transition(Some(from), Phase::RollingBack, at, Some(WriteKind::Start));
            t.history = Some(Box::new(canary_kube_adapter::crd::HistoryStatus {
                rollback: Some(canary_kube_adapter::crd::RollbackStatus {
                    reason: reason.into(),
                    ..Default::default()
                }),
                ..Default::default()
            }));
            t
        };
        bridge.apply(&transition(None, Phase::Canary, 10, None));
        let at_zero = metrics.encode().unwrap();
        for reason in ["Abort", "OnFailure"] {
            assert!(at_zero.contains(&format!(r#"canary_rollbacks_total{{name="agent",namespace="default",reason="{reason}"}} 0"#)), "{at_zero}");
        }
        bridge.apply(&transition(Some(Phase::Canary), Phase::Failed, 20, None));
        bridge.apply(&going_back(Phase::Failed, 21, "OnFailure"));
        bridge.apply(&going_back(Phase::RollingBack, 22, "OnFailure"));
        bridge.apply(&transition(
            Some(Phase::RollingBack),
            Phase::RolledBack,
            30,
            None,
        ));
        bridge.apply(&transition(
            Some(Phase::RolledBack),
            Phase::Canary,
            40,
            None,
        ));
        bridge.apply(&going_back(Phase::Canary, 41, "Abort"));
        let text = metrics.encode().unwrap();
        assert!(
            text.contains(
                r#"canary_rollbacks_total{name="agent",namespace="default",reason="OnFailure"} 1"#
            ),
            "{text}"
        );
        assert!(
            text.contains(
                r#"canary_rollbacks_total{name="agent",namespace="default",reason="Abort"} 1"#
            ),
            "{text}"
        );

        // A new process that finds the rollback going on does not count it again.
        let restarted = Arc::new(Metrics::new().unwrap());
        let mut bridge = MetricsBridge::new(restarted.clone(), Mode::Driven);
        let mut found = going_back(Phase::Failed, 50, "Abort");
        found.from = None;
        bridge.apply(&found);
        let text = restarted.encode().unwrap();
        assert!(
            text.contains(
                r#"canary_rollbacks_total{name="agent",namespace="default",reason="Abort"} 0"#
            ),
            "{text}"
        );
    }

    #[test]
    fn a_failed_canary_counts_its_reason_once() {
        let metrics = Arc::new(Metrics::new().unwrap());
        let mut bridge = MetricsBridge::new(metrics.clone(), Mode::Driven);
        bridge.apply(&transition(
            None,
            Phase::Started,
            10,
            Some(WriteKind::Start),
        ));
        bridge.apply(&transition(Some(Phase::Started), Phase::Canary, 11, None));
        bridge.apply(&transition(Some(Phase::Canary), Phase::Failed, 50, None));
        // Counts moving inside the failed phase are not a second failure.
        bridge.apply(&transition(Some(Phase::Failed), Phase::Failed, 60, None));
        let text = metrics.encode().unwrap();
        assert!(
            text.contains(
                r#"canary_rollout_failures_total{mode="driven",reason="CanaryCrashLooping"} 1"#
            ),
            "{text}"
        );
        assert!(
            line(
                &text,
                r#"canary_rollout_duration_seconds_sum{mode="driven",result="failed"}"#
            )
            .unwrap()
            .ends_with(" 40")
        );
    }

    #[test]
    fn reconcile_reports_observe_real_durations_and_error_kinds() {
        let metrics = Arc::new(Metrics::new().unwrap());
        let mut bridge = MetricsBridge::new(metrics.clone(), Mode::Driven);
        for (millis, error) in [(3, None), (5, Some("Conflict"))] {
            bridge.report(&Report::Reconciled {
                took: Duration::from_millis(millis),
                error,
            });
        }
        let text = metrics.encode().unwrap();
        let count = line(
            &text,
            r#"canary_reconcile_duration_seconds_count{mode="driven"}"#,
        )
        .unwrap();
        assert!(count.ends_with(" 2"), "{count}");
        let sum = line(
            &text,
            r#"canary_reconcile_duration_seconds_sum{mode="driven"}"#,
        )
        .unwrap();
        assert!(sum.ends_with(" 0.008"), "{sum}");
        assert!(
            text.contains(r#"canary_reconcile_errors_total{kind="Conflict",mode="driven"} 1"#),
            "{text}"
        );
    }

    #[test]
    fn counters_exist_at_zero_before_anything_happens() {
        let metrics = Metrics::new().unwrap();
        initialize_counters(&metrics, Mode::Driven);
        let text = metrics.encode().unwrap();
        for reason in FailureReason::ALL {
            let series = format!(
                r#"canary_rollout_failures_total{{mode="driven",reason="{}"}} 0"#,
                reason.as_str()
            );
            assert!(text.contains(&series), "{series} missing in {text}");
        }
        assert!(
            text.contains(r#"canary_daemonset_writes_total{purpose="finish",result="ok"} 0"#),
            "{text}"
        );
        assert!(
            text.contains(r#"canary_daemonset_writes_total{purpose="any",result="conflict"} 0"#),
            "{text}"
        );
        assert!(
            text.contains(r#"canary_reconcile_errors_total{kind="KubeApi",mode="driven"} 0"#),
            "{text}"
        );
    }
}
