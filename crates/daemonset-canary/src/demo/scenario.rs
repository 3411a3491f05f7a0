//! Scenarios: one CanaryDaemonSet rollout, end to end, on the embedded simulator.
//!
//! A scenario starts a [`Sim`] with `nodes` nodes, registers the CanaryDaemonSet CRD, runs the real
//! controller against the simulator's in-process client, installs a node agent at version `v1`,
//! waits until it rests, then moves the target to `v2` and records the rollout until it ends.
//! The demo, the Prometheus tests and the benchmarks all run rollouts through this module.
//!
//! Invariant: nothing here decides or shortcuts anything the controller does; the scenario only
//! writes what a user would (the CanaryDaemonSet, and node changes the scenario calls for) and
//! reads what a user could (the status, the DaemonSet). Under `tokio::time::pause()` it runs in
//! virtual time, deterministically for a seed.

use crate::demo::timeline::{Sample, Summary, Timeline};
use anyhow::{Context, Result, bail};
use canary_kube_adapter::clock::Clock;
use canary_kube_adapter::{CanaryDaemonSet, ControllerConfig, Observer};
use canary_predicates::{LiveMaxUnavailable, live_max_unavailable};
use canary_sim::Sim;
use canary_state_machine::{Compatibility, Phase};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Namespace of the scenario's CanaryDaemonSet.
pub const NAMESPACE: &str = "default";
/// Name of the scenario's CanaryDaemonSet and DaemonSet.
pub const NAME: &str = "node-agent";
/// Annotation the simulated kubelet reads to choose a pod's behaviour.
const BEHAVIOR_ANNOTATION: &str = "sim.canary.daemonset.dev/behavior";

/// What happens to the new version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ScenarioKind {
    /// Every new pod starts and becomes ready: canary, widen, revert, successful.
    Healthy,
    /// The new version crash-loops: the canary fails the rollout and nothing is widened.
    CrashloopCanary,
    /// New pods take 90 s to become ready: the same phases, slower.
    SlowStart,
    /// Nodes join, leave and go NotReady while the rollout runs; it still completes.
    NodeChurn,
}

impl ScenarioKind {
    /// The result this scenario should end with.
    pub fn expected_result(self) -> &'static str {
        match self {
            ScenarioKind::CrashloopCanary => "failed",
            _ => "successful",
        }
    }

    /// The kubelet behaviour of the new version's pods.
    fn new_pod_behavior(self) -> &'static str {
        match self {
            ScenarioKind::CrashloopCanary => "crashloop",
            ScenarioKind::SlowStart => "slow-start=90s",
            ScenarioKind::Healthy | ScenarioKind::NodeChurn => "healthy",
        }
    }
}

/// How to run a scenario.
#[derive(Debug, Clone)]
pub struct ScenarioConfig {
    /// Nodes of the simulated cluster.
    pub nodes: u32,
    /// Seed of the simulator's random choices.
    pub seed: u64,
    /// What happens to the new version.
    pub kind: ScenarioKind,
    /// `spec.strategy.compatibility` of the CanaryDaemonSet.
    pub compatibility: Compatibility,
    /// How often the rollout is sampled.
    pub sample_every: Duration,
    /// When to give up waiting (in scenario time).
    pub timeout: Duration,
    /// The controller's observer (subscribe to it for its reports).
    pub observer: Observer,
}

impl Default for ScenarioConfig {
    fn default() -> Self {
        Self {
            nodes: 50,
            seed: 1,
            kind: ScenarioKind::Healthy,
            compatibility: Compatibility::Fixed,
            sample_every: Duration::from_secs(1),
            timeout: Duration::from_secs(6 * 3600),
            observer: Observer::new(),
        }
    }
}

/// The outcome of [`Scenario::upgrade`].
#[derive(Debug, Clone)]
pub struct ScenarioReport {
    /// Every sample taken.
    pub timeline: Timeline,
    /// How it ended.
    pub summary: Summary,
    /// Whether it ended as the scenario expects.
    pub as_expected: bool,
}

/// A running simulator with the controller attached.
pub struct Scenario {
    config: ScenarioConfig,
    sim: Sim,
    observer: Observer,
    stop: Option<oneshot::Sender<()>>,
    controller: JoinHandle<Result<(), canary_kube_adapter::Error>>,
}

impl Scenario {
    /// Starts the simulator and the controller. Call inside a tokio runtime (paused for virtual
    /// time).
    pub async fn start(config: ScenarioConfig) -> Result<Self> {
        let crd = canary_kube_adapter::crd().context("cannot build the CanaryDaemonSet CRD")?;
        let sim = Sim::builder()
            .nodes(config.nodes)
            .seed(config.seed)
            .crd(crd)
            .build()
            .context("cannot start the simulator")?;
        let observer = config.observer.clone();
        let controller_config = ControllerConfig {
            clock: Clock::tokio_virtual(scenario_epoch()),
            observer: observer.clone(),
            ..ControllerConfig::default()
        };
        let (stop, stopped) = oneshot::channel::<()>();
        let client = sim.client();
        let controller = tokio::spawn(canary_kube_adapter::run(
            client,
            controller_config,
            async move {
                let _ = stopped.await;
            },
        ));
        Ok(Self {
            config,
            sim,
            observer,
            stop: Some(stop),
            controller,
        })
    }

    /// The simulator, for faults, node changes and request counts.
    pub fn sim(&self) -> &Sim {
        &self.sim
    }

    /// The controller's transitions and counters.
    pub fn observer(&self) -> &Observer {
        &self.observer
    }

    fn api(&self) -> Api<CanaryDaemonSet> {
        Api::namespaced(self.sim.client(), NAMESPACE)
    }

    /// Creates the CanaryDaemonSet at `v1` and waits until its rollout rests.
    pub async fn install(&self) -> Result<()> {
        let object: CanaryDaemonSet =
            serde_json::from_value(manifest(self.config.compatibility, "v1", "healthy"))
                .context("the scenario's CanaryDaemonSet does not match the CRD types")?;
        self.api()
            .create(&PostParams::default(), &object)
            .await
            .context("cannot create the CanaryDaemonSet")?;
        let deadline = tokio::time::Instant::now() + self.config.timeout;
        loop {
            let status = self.status().await?;
            if status.phase.as_deref() == Some("successful")
                && status.desired == self.config.nodes
                && status.updated_ready == status.desired
            {
                return Ok(());
            }
            if status.phase.as_deref() == Some("failed") {
                bail!(
                    "installing v1 failed: {}",
                    status.message.unwrap_or_default()
                );
            }
            if tokio::time::Instant::now() > deadline {
                bail!(
                    "installing v1 did not finish within {:?}",
                    self.config.timeout
                );
            }
            tokio::time::sleep(self.config.sample_every).await;
        }
    }

    /// Moves the target to `v2` and records the rollout until it ends or times out;
    /// `on_sample` sees every sample, with `true` when it starts a new phase.
    pub async fn upgrade(
        &self,
        mut on_sample: impl FnMut(&Sample, bool),
    ) -> Result<ScenarioReport> {
        let writes_before = self.observer.stats().total_daemon_set_writes();
        let upgraded = manifest(
            self.config.compatibility,
            "v2",
            self.config.kind.new_pod_behavior(),
        );
        let patch = json!({"spec": upgraded["spec"]});
        let generation = self
            .api()
            .patch(NAME, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .context("cannot move the CanaryDaemonSet to v2")?
            .metadata
            .generation;
        let started = tokio::time::Instant::now();
        let mut timeline = Timeline::default();
        let mut churn = NodeChurn::new(self.config.kind == ScenarioKind::NodeChurn);
        loop {
            let t = started.elapsed().as_secs_f64();
            churn.step(&self.sim, t);
            // Until the controller has seen v2, the status still describes the v1 rollout (on
            // the wall clock this takes a moment; in virtual time it is done before t = 0).
            if !self.status_describes(generation) && started.elapsed() <= self.config.timeout {
                tokio::time::sleep(self.config.sample_every.min(Duration::from_millis(100))).await;
                continue;
            }
            let sample = self.sample(t, writes_before).await?;
            let ended = is_final(&sample.phase) && self.status_describes(generation);
            let new_phase = timeline.push(sample.clone());
            on_sample(&sample, new_phase);
            if ended || started.elapsed() > self.config.timeout {
                return Ok(self.report(timeline, &sample, ended, t));
            }
            tokio::time::sleep(self.config.sample_every).await;
        }
    }

    /// Whether the status was written for the spec `generation` (or a later one).
    fn status_describes(&self, generation: Option<i64>) -> bool {
        let observed = self
            .sim
            .store()
            .get::<CanaryDaemonSet>(Some(NAMESPACE), NAME)
            .and_then(|cds| cds.status)
            .and_then(|status| status.observed_generation);
        observed >= generation
    }

    fn report(&self, timeline: Timeline, last: &Sample, ended: bool, t: f64) -> ScenarioReport {
        let result = if ended {
            last.phase.clone()
        } else {
            "timeout".to_owned()
        };
        let reason = (result == "failed")
            .then(|| self.failure_reason())
            .flatten();
        let summary = Summary {
            result,
            daemon_set_writes: last.daemon_set_writes,
            duration_seconds: t,
            reason,
        };
        let as_expected = summary.result == self.config.kind.expected_result();
        ScenarioReport {
            timeline,
            summary,
            as_expected,
        }
    }

    fn failure_reason(&self) -> Option<String> {
        let store = self.sim.store();
        let object = store.get::<CanaryDaemonSet>(Some(NAMESPACE), NAME)?;
        object.status.and_then(|s| s.reason)
    }

    async fn status(&self) -> Result<canary_kube_adapter::crd::CanaryDaemonSetStatus> {
        let object = self
            .api()
            .get(NAME)
            .await
            .context("cannot read the CanaryDaemonSet")?;
        Ok(object.status.unwrap_or_default())
    }

    async fn sample(&self, t: f64, writes_before: u64) -> Result<Sample> {
        let status = self.status().await?;
        let daemon_sets: Api<DaemonSet> = Api::namespaced(self.sim.client(), NAMESPACE);
        let live = daemon_sets
            .get_opt(NAME)
            .await
            .context("cannot read the DaemonSet")?;
        let live_max = live.as_ref().map(live_max_unavailable);
        let max_unavailable_pods = live_max
            .as_ref()
            .and_then(LiveMaxUnavailable::value)
            .map_or(0, |m| m.scaled(status.desired));
        let max_unavailable = live_max.map(|m| m.to_string()).unwrap_or_default();
        let writes = self
            .observer
            .stats()
            .total_daemon_set_writes()
            .saturating_sub(writes_before);
        Ok(Sample {
            t,
            phase: status.phase.unwrap_or_else(|| "pending".to_owned()),
            max_unavailable,
            max_unavailable_pods,
            desired: status.desired,
            updated: status.updated,
            updated_ready: status.updated_ready,
            daemon_set_writes: u32::try_from(writes).unwrap_or(u32::MAX),
        })
    }

    /// Stops the controller and waits for it to finish its in-flight work.
    pub async fn stop(mut self) -> Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match (&mut self.controller).await {
            Ok(result) => result.context("the controller ended with an error"),
            Err(join) => bail!("the controller task failed: {join}"),
        }
    }
}

/// Whether the status phase `phase` ends a rollout (`successful` or `failed`).
fn is_final(phase: &str) -> bool {
    phase
        .parse::<Phase>()
        .is_ok_and(|phase| !phase.is_in_progress())
}

/// The fixed wall-clock start of scenario time, so timestamps in status are reproducible.
fn scenario_epoch() -> Timestamp {
    Timestamp::from_second(1_767_225_600).unwrap_or(Timestamp::UNIX_EPOCH) // 2026-01-01T00:00:00Z
}

/// The scenario's CanaryDaemonSet: a node agent tolerating every taint, at `version`, whose pods
/// the simulated kubelet runs with `behavior`.
pub fn manifest(compatibility: Compatibility, version: &str, behavior: &str) -> serde_json::Value {
    json!({
        "apiVersion": "canary.daemonset.dev/v1alpha1",
        "kind": "CanaryDaemonSet",
        "metadata": {"name": NAME, "namespace": NAMESPACE},
        "spec": {
            "target": {"version": version, "registry": "registry.example"},
            "strategy": {"compatibility": compatibility.as_str()},
            "template": {
                "metadata": {"labels": {"app.kubernetes.io/name": NAME}},
                "spec": {
                    "selector": {"matchLabels": {"app.kubernetes.io/name": NAME}},
                    "template": {
                        "metadata": {
                            "labels": {"app.kubernetes.io/name": NAME},
                            "annotations": {BEHAVIOR_ANNOTATION: behavior}
                        },
                        "spec": {
                            "tolerations": [{"operator": "Exists"}],
                            "containers": [{"name": "agent", "image": format!("registry.example/node-agent:{version}")}]
                        }
                    }
                }
            }
        }
    })
}

/// Node changes of the `node-churn` scenario, each made once when scenario time passes it.
struct NodeChurn {
    enabled: bool,
    done: usize,
}

impl NodeChurn {
    fn new(enabled: bool) -> Self {
        Self { enabled, done: 0 }
    }

    fn step(&mut self, sim: &Sim, t: f64) {
        const PLAN: [f64; 4] = [5.0, 15.0, 30.0, 60.0];
        while self.enabled && self.done < PLAN.len() && t >= PLAN[self.done] {
            let cluster = sim.cluster();
            let outcome = match self.done {
                0 => cluster.add_node("churn-1").map(|_| "added node churn-1"),
                1 => cluster
                    .set_node_ready("node-2", false)
                    .map(|_| "node-2 NotReady"),
                2 => cluster.remove_node("node-3").map(|_| "removed node-3"),
                _ => cluster
                    .set_node_ready("node-2", true)
                    .map(|_| "node-2 Ready again"),
            };
            match outcome {
                Ok(what) => tracing::info!(t, "{what}"),
                Err(error) => tracing::warn!(t, %error, "node churn step failed"),
            }
            self.done += 1;
        }
    }
}
