//! Prometheus metrics of rollouts and of the controller itself.
//!
//! Every metric carries the `canary_` prefix, uses base units (seconds) and ends in `_total` only when
//! it is a counter, so the exposition passes `promtool check metrics`. Label values are bounded:
//! namespaces and names of CanaryDaemonSets, the six phase names, the failure reasons of the state
//! machine, and a few fixed words; never pod names or UIDs.
//!
//! Each mode exports what it means: [`Metrics::new`] (the controller, `run` and the demo) has
//! every metric; [`Metrics::observed`] (`observe-kubevirt`, which writes nothing and elects no
//! leader) leaves out `canary_leader`, `canary_daemonset_writes_total` and
//! `canary_reconcile_errors_total` (its derivation passes cannot fail). Updating a metric that
//! is not registered changes nothing anyone sees.

use prometheus::{
    Encoder, GaugeVec, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

pub mod bridge;
pub mod kubevirt;

use canary_state_machine::{NodeStanding, Phase, Verdict};

/// Buckets for time spent in one phase or one rollout: a canary takes seconds to minutes, a wide
/// rollout up to hours.
const ROLLOUT_BUCKETS: &[f64] = &[
    1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0,
];

/// Who moves the rollout: this controller (`driven`) or another operator we only watch (`observed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// The controller writes the DaemonSet.
    Driven,
    /// The controller only watches (observe mode for KubeVirt).
    Observed,
}

impl Mode {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Driven => "driven",
            Mode::Observed => "observed",
        }
    }
}

/// Identifies one rollout target in metric labels.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RolloutKey {
    /// Namespace of the CanaryDaemonSet (or of the observed DaemonSet).
    pub namespace: String,
    /// Name of the CanaryDaemonSet (or of the observed DaemonSet).
    pub name: String,
    /// Driven or observed.
    pub mode: Mode,
}

impl RolloutKey {
    fn labels(&self) -> [&str; 3] {
        [&self.namespace, &self.name, self.mode.as_str()]
    }
}

/// Pod counts of one DaemonSet at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PodCounts {
    /// `status.desiredNumberScheduled`.
    pub desired: u32,
    /// Pods on the target version.
    pub updated: u32,
    /// Pods on the target version and ready.
    pub updated_ready: u32,
}

/// Label values known before anything happens, for [`Metrics::initialize_counters`].
#[derive(Debug, Clone, Copy, Default)]
pub struct KnownLabels<'a> {
    /// Failure reasons (`reason` of `canary_rollout_failures_total`).
    pub failure_reasons: &'a [&'a str],
    /// Write purposes (`purpose` of `canary_daemonset_writes_total`).
    pub write_purposes: &'a [&'a str],
    /// Reconcile error kinds (`kind` of `canary_reconcile_errors_total`).
    pub error_kinds: &'a [&'a str],
}

/// Which modes a metric family is exported in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scope {
    /// Driven and observed.
    Both,
    /// Only when this controller drives the rollouts (writes, errors, the Pods driver's, the
    /// analysis', the lease's).
    Driven,
}

/// Makes the metric families of one mode and registers each in its registry as it is made, so
/// that a family is declared once, with the modes it belongs to.
struct Families {
    registry: Registry,
    mode: Mode,
}

impl Families {
    /// Registers `collector` when its `scope` includes this mode, and returns it.
    fn add<C: prometheus::core::Collector + Clone + 'static>(
        &self,
        scope: Scope,
        collector: C,
    ) -> Result<C, prometheus::Error> {
        if scope == Scope::Both || self.mode == Mode::Driven {
            self.registry.register(Box::new(collector.clone()))?;
        }
        Ok(collector)
    }

    fn int_gauges(
        &self,
        scope: Scope,
        name: &str,
        help: &str,
        labels: &[&str],
    ) -> Result<IntGaugeVec, prometheus::Error> {
        self.add(scope, IntGaugeVec::new(Opts::new(name, help), labels)?)
    }

    fn gauges(
        &self,
        scope: Scope,
        name: &str,
        help: &str,
        labels: &[&str],
    ) -> Result<GaugeVec, prometheus::Error> {
        self.add(scope, GaugeVec::new(Opts::new(name, help), labels)?)
    }

    fn counters(
        &self,
        scope: Scope,
        name: &str,
        help: &str,
        labels: &[&str],
    ) -> Result<IntCounterVec, prometheus::Error> {
        self.add(scope, IntCounterVec::new(Opts::new(name, help), labels)?)
    }

    fn histograms(
        &self,
        scope: Scope,
        name: &str,
        help: &str,
        buckets: Vec<f64>,
        labels: &[&str],
    ) -> Result<HistogramVec, prometheus::Error> {
        let opts = HistogramOpts::new(name, help).buckets(buckets);
        self.add(scope, HistogramVec::new(opts, labels)?)
    }
}

/// The Pods driver's own families (driven mode only).
struct PodsDriverFamilies {
    step: IntGaugeVec,
    nodes: IntGaugeVec,
    pod_deletions: IntCounter,
}

/// The health gates' families (driven mode only, both drivers).
struct HealthFamilies {
    unhealthy_nodes: IntGaugeVec,
}

impl HealthFamilies {
    fn new(f: &Families) -> Result<Self, prometheus::Error> {
        Ok(Self {
            unhealthy_nodes: f.int_gauges(
                Scope::Driven,
                "unhealthy_nodes",
                "Health gates: nodes named as evidence against the release in the last pass, by gate (cause=\"node\": healthy when its agent pod was replaced, unhealthy within spec.health.window after it; cause=\"neighbours\": the pods beside the agent lost readiness or restarted within the window, beyond the nodes not yet updated).",
                &["namespace", "name", "cause"],
            )?,
        })
    }
}

impl PodsDriverFamilies {
    fn new(f: &Families) -> Result<Self, prometheus::Error> {
        Ok(Self {
            step: f.int_gauges(
                Scope::Driven,
                "rollout_step",
                "Pods driver: the step the rollout is in, from 0 (the step count once every step is done).",
                &["namespace", "name"],
            )?,
            nodes: f.int_gauges(
                Scope::Driven,
                "nodes",
                "Pods driver: nodes by state: updated (and ready), old (still to update), unavailable, deferred (NotReady, cordoned, gone), failed (crash-looping updated pod).",
                &["namespace", "name", "state"],
            )?,
            pod_deletions: f.add(Scope::Driven, IntCounter::new(
                "pod_deletions_total",
                "Pods driver: old pods deleted by the controller (one DELETE request each).",
            )?)?,
        })
    }
}

/// The analysis' families (driven mode only).
struct AnalysisFamilies {
    value: GaugeVec,
    runs: IntCounterVec,
}

impl AnalysisFamilies {
    fn new(f: &Families) -> Result<Self, prometheus::Error> {
        Ok(Self {
            value: f.gauges(
                Scope::Driven,
                "analysis_value",
                "Analysis: the last value of each metric of spec.analysis (absent while a query gives no number).",
                &["namespace", "name", "metric"],
            )?,
            runs: f.counters(
                Scope::Driven,
                "analysis_runs_total",
                "Analysis: measurements of each metric of spec.analysis, by result (pass, fail, inconclusive).",
                &["namespace", "name", "metric", "result"],
            )?,
        })
    }
}

/// All metrics of the binary, registered in one registry.
pub struct Metrics {
    registry: Registry,
    phase: IntGaugeVec,
    phase_start: GaugeVec,
    phase_duration: HistogramVec,
    rollout_duration: HistogramVec,
    pods: IntGaugeVec,
    max_unavailable: IntGaugeVec,
    failures: IntCounterVec,
    daemonset_writes: IntCounterVec,
    reconcile_duration: HistogramVec,
    reconcile_errors: IntCounterVec,
    watch_errors: IntCounter,
    drifts: IntCounterVec,
    rollbacks: IntCounterVec,
    notifications: IntCounterVec,
    pods_driver: PodsDriverFamilies,
    health: HealthFamilies,
    analysis: AnalysisFamilies,
    leader: IntGauge,
}

/// The `cause` values of `canary_unhealthy_nodes`: the health gate that names the nodes
/// ([`canary_state_machine::HealthCause::label`]).
pub const UNHEALTHY_CAUSES: [&str; 2] = ["node", "neighbours"];

/// The `state` values of `canary_nodes`: where each node of a Pods-driver rollout stands, in
/// the state machine's one vocabulary of node states.
pub const NODE_STATES: [NodeStanding; 5] = NodeStanding::COUNTED;

const ROLLOUT_LABELS: [&str; 3] = ["namespace", "name", "mode"];

/// The `reason` values of `canary_rollbacks_total`: the rollbacks that go back (an undo is a
/// rollout like any other, counted by the phases).
const ROLLBACK_REASONS: [&str; 2] = [
    canary_state_machine::RollbackReason::Abort.as_str(),
    canary_state_machine::RollbackReason::OnFailure.as_str(),
];

impl Metrics {
    /// The controller's metrics (mode `driven`): every metric, with `build_info` set for this
    /// build.
    pub fn new() -> Result<Self, prometheus::Error> {
        Self::for_mode(Mode::Driven)
    }

    /// The metrics of the read-only observe mode: the rollout metrics, the reconcile duration,
    /// the watch errors and `build_info`; no leader, no DaemonSet writes, no reconcile errors.
    pub fn observed() -> Result<Self, prometheus::Error> {
        Self::for_mode(Mode::Observed)
    }

    fn for_mode(mode: Mode) -> Result<Self, prometheus::Error> {
        let f = Families {
            registry: Registry::new_custom(Some("canary".to_owned()), None)?,
            mode,
        };
        let build_info = f.int_gauges(
            Scope::Both,
            "build_info",
            "Build information; the value is always 1.",
            &["version"],
        )?;
        build_info
            .with_label_values(&[env!("CARGO_PKG_VERSION")])
            .set(1);
        Ok(Self {
            phase: f.int_gauges(
                Scope::Both,
                "rollout_phase",
                "Current rollout phase, one-hot: 1 for the phase the rollout is in, 0 for the others.",
                &["namespace", "name", "mode", "phase"],
            )?,
            phase_start: f.gauges(
                Scope::Both,
                "rollout_phase_start_timestamp_seconds",
                "Unix time at which the rollout entered its current phase.",
                &ROLLOUT_LABELS,
            )?,
            phase_duration: f.histograms(
                Scope::Both,
                "rollout_phase_duration_seconds",
                "Time spent in a phase, observed when the phase ends.",
                ROLLOUT_BUCKETS.to_vec(),
                &["mode", "phase"],
            )?,
            rollout_duration: f.histograms(
                Scope::Both,
                "rollout_duration_seconds",
                "Time from the start of a rollout to its end, by result.",
                ROLLOUT_BUCKETS.to_vec(),
                &["mode", "result"],
            )?,
            pods: f.int_gauges(
                Scope::Both,
                "rollout_pods",
                "Pods of the managed DaemonSet: desired, updated (on the target), updated_ready.",
                &["namespace", "name", "mode", "state"],
            )?,
            max_unavailable: f.int_gauges(
                Scope::Both,
                "rollout_max_unavailable_pods",
                "The DaemonSet's current maxUnavailable, scaled to pods.",
                &ROLLOUT_LABELS,
            )?,
            failures: f.counters(
                Scope::Both,
                "rollout_failures_total",
                "Rollouts that entered the failed phase, by reason.",
                &["mode", "reason"],
            )?,
            daemonset_writes: f.counters(
                Scope::Driven,
                "daemonset_writes_total",
                "DaemonSet writes made by the controller, by purpose (create, start, widen, finish, tls_step, hold, resume; any for a rejected write) and result.",
                &["purpose", "result"],
            )?,
            reconcile_duration: f.histograms(
                Scope::Both,
                "reconcile_duration_seconds",
                "Duration of one reconcile of a CanaryDaemonSet.",
                prometheus::exponential_buckets(0.0005, 2.0, 14)?,
                &["mode"],
            )?,
            reconcile_errors: f.counters(
                Scope::Driven,
                "reconcile_errors_total",
                "Reconciles that ended in an error, by error kind.",
                &["mode", "kind"],
            )?,
            watch_errors: f.add(Scope::Both, IntCounter::new(
                "watch_errors_total",
                "List and watch requests of the controller's caches that failed; each is retried with backoff.",
            )?)?,
            drifts: f.counters(
                Scope::Driven,
                "drift_detected_total",
                "Changes of a managed DaemonSet's template or update strategy made outside the controller (hand edits, kubectl rollout undo, other tools).",
                &["namespace", "name"],
            )?,
            rollbacks: f.counters(
                Scope::Driven,
                "rollbacks_total",
                "Rollbacks to the last successful revision the controller started, by reason: Abort (asked for), OnFailure (automatic, onFailure: Rollback).",
                &["namespace", "name", "reason"],
            )?,
            notifications: f.counters(
                Scope::Driven,
                "notifications_total",
                "Notifications to the receivers the administrator defined, by receiver and result: sent (2xx), retried (an attempt failed, another follows), failed (the last attempt failed), rejected (4xx), dropped (the queue was full).",
                &["receiver", "result"],
            )?,
            leader: f.add(Scope::Driven, IntGauge::new(
                "leader",
                "1 while this replica holds the leader lease (or runs without leader election), else 0.",
            )?)?,
            pods_driver: PodsDriverFamilies::new(&f)?,
            health: HealthFamilies::new(&f)?,
            analysis: AnalysisFamilies::new(&f)?,
            registry: f.registry,
        })
    }

    /// Records that `key` entered `phase` at `started_at` (Unix seconds). `previous` is the phase it
    /// left and how long it spent there, when known.
    pub fn enter_phase(
        &self,
        key: &RolloutKey,
        phase: &str,
        started_at: f64,
        previous: Option<(&str, f64)>,
    ) {
        let [namespace, name, mode] = key.labels();
        for candidate in Phase::ALL.map(Phase::as_str) {
            let value = i64::from(candidate == phase);
            self.phase
                .with_label_values(&[namespace, name, mode, candidate])
                .set(value);
        }
        self.phase_start
            .with_label_values(&key.labels())
            .set(started_at);
        if let Some((left, seconds)) = previous {
            self.phase_duration
                .with_label_values(&[mode, left])
                .observe(seconds.max(0.0));
        }
    }

    /// Records the end of a rollout: `result` is `successful` or `failed`, `reason` the failure reason.
    pub fn rollout_ended(&self, mode: Mode, result: &str, reason: Option<&str>, seconds: f64) {
        self.rollout_duration
            .with_label_values(&[mode.as_str(), result])
            .observe(seconds.max(0.0));
        if let Some(reason) = reason {
            self.failures
                .with_label_values(&[mode.as_str(), reason])
                .inc();
        }
    }

    /// Sets the pod counts and the scaled maxUnavailable of `key`.
    pub fn set_counts(&self, key: &RolloutKey, counts: PodCounts, max_unavailable_pods: u32) {
        let [namespace, name, mode] = key.labels();
        for (state, value) in [
            ("desired", counts.desired),
            ("updated", counts.updated),
            ("updated_ready", counts.updated_ready),
        ] {
            self.pods
                .with_label_values(&[namespace, name, mode, state])
                .set(i64::from(value));
        }
        self.max_unavailable
            .with_label_values(&key.labels())
            .set(i64::from(max_unavailable_pods));
    }

    /// Creates the counters' series at 0 for the label values known in advance, so they are
    /// exported before their first increment: `increase()` then sees the first failure, and an
    /// alert on a counter has a series to evaluate from the start.
    pub fn initialize_counters(&self, mode: Mode, known: &KnownLabels<'_>) {
        for reason in known.failure_reasons {
            self.failures.with_label_values(&[mode.as_str(), reason]);
        }
        for purpose in known.write_purposes {
            self.daemonset_writes.with_label_values(&[purpose, "ok"]);
        }
        for result in ["conflict", "error"] {
            self.daemonset_writes.with_label_values(&["any", result]);
        }
        for kind in known.error_kinds {
            self.reconcile_errors
                .with_label_values(&[mode.as_str(), kind]);
        }
    }

    /// Counts one DaemonSet write by purpose (`create`, `start`, `widen`, `finish`, `tls_step`;
    /// `any` for rejected writes) and result (`ok`, `conflict`, `error`).
    pub fn daemonset_write(&self, purpose: &str, result: &str) {
        self.daemonset_writes
            .with_label_values(&[purpose, result])
            .inc();
    }

    /// Observes one reconcile and, when it failed, its error kind.
    pub fn reconcile(&self, mode: Mode, seconds: f64, error_kind: Option<&str>) {
        self.reconcile_duration
            .with_label_values(&[mode.as_str()])
            .observe(seconds.max(0.0));
        if let Some(kind) = error_kind {
            self.reconcile_errors
                .with_label_values(&[mode.as_str(), kind])
                .inc();
        }
    }

    /// Counts `failed` more failed list or watch requests.
    pub fn watch_errors(&self, failed: u64) {
        self.watch_errors.inc_by(failed);
    }

    /// Counts one drift of the DaemonSet of the CanaryDaemonSet `namespace/name`.
    pub fn drift_detected(&self, namespace: &str, name: &str) {
        self.drifts.with_label_values(&[namespace, name]).inc();
    }

    /// Starts the drift and rollback counters of a CanaryDaemonSet at 0 when it is first
    /// seen, so that `increase()` sees its first drift or rollback (a series born at 1 shows no
    /// increase) and a dashboard shows 0 rather than nothing.
    pub fn drift_known(&self, namespace: &str, name: &str) {
        let _ = self.drifts.with_label_values(&[namespace, name]);
        for reason in ROLLBACK_REASONS {
            let _ = self.rollbacks.with_label_values(&[namespace, name, reason]);
        }
    }

    /// Counts one rollback of the CanaryDaemonSet `namespace/name` started for `reason`.
    pub fn rollback_started(&self, namespace: &str, name: &str, reason: &str) {
        self.rollbacks
            .with_label_values(&[namespace, name, reason])
            .inc();
    }

    /// Sets the step and the node counts of a Pods-driver rollout, by [`NODE_STATES`].
    pub fn set_pods_driver(&self, namespace: &str, name: &str, step: u32, nodes: [u32; 5]) {
        self.pods_driver
            .step
            .with_label_values(&[namespace, name])
            .set(i64::from(step));
        for (state, count) in NODE_STATES.iter().zip(nodes) {
            self.pods_driver
                .nodes
                .with_label_values(&[namespace, name, state.as_str()])
                .set(i64::from(count));
        }
    }

    /// Sets how many nodes a health gate (`cause`, one of [`UNHEALTHY_CAUSES`]) names as
    /// evidence against the release of `namespace/name`.
    pub fn set_unhealthy_nodes(&self, namespace: &str, name: &str, cause: &str, count: u32) {
        self.health
            .unhealthy_nodes
            .with_label_values(&[namespace, name, cause])
            .set(i64::from(count));
    }

    /// Starts the notification counters of `receiver` at 0, so that `increase()` sees its
    /// first failure and a dashboard shows 0 rather than nothing.
    pub fn notifications_known(&self, receiver: &str) {
        for result in canary_kube_adapter::notify::result::ALL {
            let _ = self.notifications.with_label_values(&[receiver, result]);
        }
    }

    /// Counts one notification to `receiver` that ended in (or was) `result`.
    pub fn notification(&self, receiver: &str, result: &str) {
        self.notifications
            .with_label_values(&[receiver, result])
            .inc();
    }

    /// Counts one pod deleted by the Pods driver.
    pub fn pod_deleted(&self) {
        self.pods_driver.pod_deletions.inc();
    }

    /// Records one analysis measurement of `metric` of the CanaryDaemonSet `namespace/name`.
    /// Every result of the metric starts at 0, so that `increase()` sees the first failure.
    pub fn analysis_measured(
        &self,
        namespace: &str,
        name: &str,
        metric: &str,
        value: Option<f64>,
        verdict: Verdict,
    ) {
        for result in Verdict::ALL {
            let counter =
                self.analysis
                    .runs
                    .with_label_values(&[namespace, name, metric, result.label()]);
            if result == verdict {
                counter.inc();
            }
        }
        let labels = [namespace, name, metric];
        match value.filter(|v| v.is_finite()) {
            Some(value) => self.analysis.value.with_label_values(&labels).set(value),
            None => drop(self.analysis.value.remove_label_values(&labels)),
        }
    }

    /// Drops the analysis series of the CanaryDaemonSet `namespace/name` for `metrics`.
    pub fn forget_analysis<'a>(
        &self,
        namespace: &str,
        name: &str,
        metrics: impl IntoIterator<Item = &'a str>,
    ) {
        for metric in metrics {
            let _ = self
                .analysis
                .value
                .remove_label_values(&[namespace, name, metric]);
            for result in Verdict::ALL {
                let _ = self.analysis.runs.remove_label_values(&[
                    namespace,
                    name,
                    metric,
                    result.label(),
                ]);
            }
        }
    }

    /// Sets whether this replica leads.
    pub fn set_leader(&self, leader: bool) {
        self.leader.set(i64::from(leader));
    }

    /// Drops every per-rollout series of `key`, when its CanaryDaemonSet is deleted.
    pub fn forget(&self, key: &RolloutKey) {
        let [namespace, name, mode] = key.labels();
        let _ = self.drifts.remove_label_values(&[namespace, name]);
        for reason in ROLLBACK_REASONS {
            let _ = self
                .rollbacks
                .remove_label_values(&[namespace, name, reason]);
        }
        let _ = self
            .pods_driver
            .step
            .remove_label_values(&[namespace, name]);
        for state in NODE_STATES {
            let _ = self
                .pods_driver
                .nodes
                .remove_label_values(&[namespace, name, state.as_str()]);
        }
        for cause in UNHEALTHY_CAUSES {
            let _ = self
                .health
                .unhealthy_nodes
                .remove_label_values(&[namespace, name, cause]);
        }
        for phase in Phase::ALL.map(Phase::as_str) {
            let _ = self
                .phase
                .remove_label_values(&[namespace, name, mode, phase]);
        }
        for state in ["desired", "updated", "updated_ready"] {
            let _ = self
                .pods
                .remove_label_values(&[namespace, name, mode, state]);
        }
        let _ = self.phase_start.remove_label_values(&key.labels());
        let _ = self.max_unavailable.remove_label_values(&key.labels());
    }

    /// The registry every metric lives in (prefix `canary_`), for collectors a subcommand adds
    /// itself (observe-kubevirt's version info).
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The text exposition (Prometheus format 0.0.4) of every metric.
    pub fn encode(&self) -> Result<String, prometheus::Error> {
        let mut buffer = Vec::new();
        TextEncoder::new().encode(&self.registry.gather(), &mut buffer)?;
        String::from_utf8(buffer).map_err(|e| prometheus::Error::Msg(e.to_string()))
    }
}

/// The Content-Type of [`Metrics::encode`]'s output.
pub const CONTENT_TYPE: &str = prometheus::TEXT_FORMAT;

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> RolloutKey {
        RolloutKey {
            namespace: "kube-system".into(),
            name: "node-agent".into(),
            mode: Mode::Driven,
        }
    }

    #[test]
    fn phase_gauge_is_one_hot() {
        let metrics = Metrics::new().unwrap();
        metrics.enter_phase(&key(), "canary", 100.0, Some(("started", 2.0)));
        let text = metrics.encode().unwrap();
        let ones: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("canary_rollout_phase{") && l.ends_with(" 1"))
            .collect();
        assert_eq!(ones.len(), 1, "{text}");
        assert!(ones[0].contains("phase=\"canary\""), "{}", ones[0]);
        let zeros = text
            .lines()
            .filter(|l| l.starts_with("canary_rollout_phase{") && l.ends_with(" 0"))
            .count();
        assert_eq!(zeros, Phase::ALL.len() - 1);
        assert!(text.contains(
            "canary_rollout_phase_duration_seconds_count{mode=\"driven\",phase=\"started\"} 1"
        ));
    }

    #[test]
    fn observe_mode_exports_no_leader_and_no_writes() {
        let metrics = Metrics::observed().unwrap();
        metrics.set_leader(true);
        metrics.daemonset_write("start", "ok");
        metrics.reconcile(Mode::Observed, 0.001, None);
        let text = metrics.encode().unwrap();
        for absent in [
            "canary_leader",
            "canary_daemonset_writes_total",
            "canary_reconcile_errors_total",
        ] {
            assert!(!text.contains(absent), "{absent} in {text}");
        }
        assert!(text.contains("canary_reconcile_duration_seconds_count{mode=\"observed\"} 1"));
        assert!(text.contains("canary_build_info{"));
        let driven = Metrics::new().unwrap().encode().unwrap();
        assert!(driven.contains("canary_leader 0"), "{driven}");
    }

    #[test]
    fn forget_removes_rollout_series() {
        let metrics = Metrics::new().unwrap();
        metrics.enter_phase(&key(), "canary", 1.0, None);
        metrics.set_counts(
            &key(),
            PodCounts {
                desired: 3,
                updated: 1,
                updated_ready: 0,
            },
            1,
        );
        metrics.forget(&key());
        let text = metrics.encode().unwrap();
        assert!(!text.contains("name=\"node-agent\""), "{text}");
        assert!(text.contains("canary_build_info{version="));
    }
}
