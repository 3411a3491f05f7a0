//! Scenarios: one CanaryDaemonSet rollout, end to end, on the embedded simulator.
//!
//! A scenario starts a [`Sim`] with `nodes` nodes, registers the CanaryDaemonSet CRD, runs the real
//! controller against the simulator's in-process client, installs a node agent at version `v1`,
//! waits until it rests, then moves the target to `v2` and records the rollout until it ends.
//! The demo, the Prometheus tests and the benchmarks all run rollouts through this module.
//!
//! The rollout is recorded from the controller's [`Transition`]s (every status change it
//! made, in order, from its observer), so the record has every phase, even one that lasts less
//! than an instant; crash scenarios also watch the new pods' restart counts in the simulator.
//!
//! Invariant: nothing here decides or shortcuts anything the controller does; the scenario only
//! writes what a user would (the CanaryDaemonSet, and node changes the scenario calls for) and
//! reads what a user could (the status, the controller's reports, the pods). Under
//! `tokio::time::pause()` it runs in virtual time, deterministically for a seed.

#![expect(
    clippy::indexing_slicing,
    reason = "only serde_json::Value is indexed here: a missing key or index reads as Null, and \
              writes by index go to objects this module built"
)]

pub use crate::demo::manifest::{error_ratio_analysis, manifest, manifest_for};
use crate::demo::prometheus::{DEMO_PROMETHEUS, SimQueries};
use crate::demo::timeline::{Sample, Summary, Timeline};
use crate::format::count;
use anyhow::{Context, Result, bail};
use canary_kube_adapter::clock::Clock;
use canary_kube_adapter::{CanaryDaemonSet, ControllerConfig, Observer, Transition};
use canary_sim::cluster::Cluster;
use canary_sim::prometheus::ERROR_RATIO_ANNOTATION;
use canary_sim::{Sim, SimPrometheus, StoreEvent};
use canary_state_machine::{Compatibility, Driver, Phase};
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Namespace of the scenario's CanaryDaemonSet.
pub const NAMESPACE: &str = "default";
/// Name of the scenario's CanaryDaemonSet and DaemonSet.
pub const NAME: &str = "node-agent";
/// The zone label of the `zone-by-zone` scenario.
const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
/// The zones of the `zone-by-zone` scenario.
const ZONES: [&str; 3] = ["zone-a", "zone-b", "zone-c"];
/// The node the `unhealthy-node` scenario keeps NotReady through the rollout.
pub const UNHEALTHY_NODE: &str = "node-1";
/// Annotation the simulated kubelet reads for how long a pod's images take to pull.
const PULL_ANNOTATION: &str = "sim.canary.daemonset.dev/pull";
/// How many nodes the `pre-pull` scenario pre-pulls at once.
const PRE_PULL_AT_ONCE: u32 = 10;
/// The install-strategy version annotation the controller puts on the pods (the default key).
const VERSION_ANNOTATION: &str = "kubevirt.io/install-strategy-version";

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
    /// The Pods driver, zone by zone: the nodes are labelled into three zones
    /// (`topology.kubernetes.io/zone`), one canary node, then each zone whole before the next.
    ZoneByZone,
    /// The Pods driver with one node NotReady through the whole rollout: the rollout still ends
    /// `successful`, that node named as deferred.
    UnhealthyNode,
    /// The new version crash-loops and `onFailure: Rollback` is set: the canary fails the
    /// rollout, then the controller rolls back to v1 in place, canary first (`failed`,
    /// `rollingBack`, `rolledBack`).
    Rollback,
    /// Analysis, on either driver: the new version is ready on every node, but its agents
    /// report a 10% error ratio where v1's reported 1%. The canary's analysis fails the
    /// rollout (`AnalysisFailed`) before anything widens: during the Pods driver's 30 s soak,
    /// or before the MaxUnavailable driver's widen (the DaemonSet controller held meanwhile);
    /// no other node is touched.
    BadMetrics,
    /// The new version breaks its node 20 s after its pod is ready (a GPU driver or a kernel
    /// module that takes the node NotReady): the node-health gate fails the rollout
    /// (`NodeUnhealthy`) during the canary's soak, naming the node; no other node is touched,
    /// on either driver.
    NodeKiller,
    /// A CNI-like release: ready, but 20 s after its pod is ready every other pod on its node
    /// loses readiness (the nodes carry three neighbour pods each in this scenario only): the
    /// neighbours gate fails the rollout (`NeighboursDisrupted`) during the canary's soak,
    /// naming the node; no other node is touched, on either driver.
    BreaksPods,
    /// Surge on the MaxUnavailable driver (`spec.strategy.surge: true`): each new pod starts
    /// beside the old one, which goes once the new one is ready, so although every new pod
    /// pulls its image for 30 s (`sim.canary.daemonset.dev/pull`), no node is ever without a
    /// ready agent: the agent downtime (`status.agentDowntime`) is 0. Needs `--compatibility
    /// fixed`.
    Surge,
    /// Image pre-pull on the Pods driver (`spec.prePull`, at most 10 nodes pulling at once):
    /// one canary node, then a pause long enough to pre-pull every other node, then the rest
    /// 10% at a time. Every new image takes 20 s to pull: the canary's pod pays it, the pods
    /// after the pause find their image already on the node, so their downtime is the pod's
    /// start alone.
    PrePull,
}

impl ScenarioKind {
    /// The result this scenario should end with: the name of the phase it ends in.
    pub fn expected_result(self) -> &'static str {
        match self {
            ScenarioKind::CrashloopCanary
            | ScenarioKind::BadMetrics
            | ScenarioKind::NodeKiller
            | ScenarioKind::BreaksPods => Phase::Failed,
            ScenarioKind::Rollback => Phase::RolledBack,
            _ => Phase::Successful,
        }
        .as_str()
    }

    /// The simulated image pull of every new image of this scenario
    /// (`sim.canary.daemonset.dev/pull`), if it has one.
    pub fn pull_time(self) -> Option<&'static str> {
        match self {
            ScenarioKind::Surge => Some("30s"),
            ScenarioKind::PrePull => Some("20s"),
            _ => None,
        }
    }

    /// The kubelet behaviour of the new version's pods.
    fn new_pod_behavior(self) -> &'static str {
        match self {
            ScenarioKind::CrashloopCanary | ScenarioKind::Rollback => "crashloop",
            ScenarioKind::SlowStart => "slow-start=90s",
            ScenarioKind::NodeKiller => "breaks-node=20s",
            ScenarioKind::BreaksPods => "breaks-neighbours=20s",
            ScenarioKind::Healthy
            | ScenarioKind::NodeChurn
            | ScenarioKind::ZoneByZone
            | ScenarioKind::UnhealthyNode
            | ScenarioKind::BadMetrics
            | ScenarioKind::Surge
            | ScenarioKind::PrePull => "healthy",
        }
    }

    /// The driver this scenario needs, if it needs one: zones, deferred nodes and the pause
    /// that pre-pulls are the Pods driver's; surge is the MaxUnavailable driver's.
    pub fn required_driver(self) -> Option<Driver> {
        match self {
            ScenarioKind::ZoneByZone | ScenarioKind::UnhealthyNode | ScenarioKind::PrePull => {
                Some(Driver::Pods)
            }
            ScenarioKind::Surge => Some(Driver::MaxUnavailable),
            _ => None,
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
    /// `spec.strategy.driver` of the CanaryDaemonSet (a scenario that needs the Pods driver
    /// uses it whatever this says, [`ScenarioKind::required_driver`]).
    pub driver: Driver,
    /// How often the install is checked for its end.
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
            driver: Driver::MaxUnavailable,
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
    /// The agent's availability (the `surge` and `pre-pull` scenarios, once
    /// [`Scenario::judge_availability`] has read it).
    pub availability: Option<Availability>,
}

/// What a rollout cost the nodes' agents (issue 50): the controller's `status.agentDowntime`
/// for the new version, and how the new version's agent pods got their image (the simulated
/// kubelet's `Pulled` events).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Availability {
    /// Node-seconds without a ready agent pod, in all.
    pub downtime_node_seconds: u64,
    /// How many times a node went without one.
    pub gaps: u64,
    /// The longest of them, in seconds.
    pub worst_seconds: u64,
    /// New agent pods that pulled their image.
    pub pulled: u32,
    /// New agent pods that found their image already on the node (pre-pulled).
    pub already_present: u32,
}

impl Availability {
    /// One line for the demo's end.
    pub fn line(&self) -> String {
        format!(
            "agent downtime {} node-seconds over {} (worst {} s); of the new agent pods, {} pulled the image and {} found it already on the node",
            self.downtime_node_seconds,
            count(self.gaps, "gap", "gaps"),
            self.worst_seconds,
            self.pulled,
            self.already_present
        )
    }
}

/// A running simulator with the controller attached.
pub struct Scenario {
    config: ScenarioConfig,
    sim: Sim,
    observer: Observer,
    clock: Clock,
    stop: Option<oneshot::Sender<()>>,
    controller: JoinHandle<Result<(), canary_kube_adapter::Error>>,
}

impl Scenario {
    /// Starts the simulator and the controller. Call inside a tokio runtime (paused for virtual
    /// time).
    pub async fn start(config: ScenarioConfig) -> Result<Self> {
        let crd = canary_kube_adapter::crd().context("cannot build the CanaryDaemonSet CRD")?;
        // Neighbour pods only where the scenario needs them: three a node (15,000 pods at
        // 5,000 nodes), none elsewhere.
        let neighbours = if config.kind == ScenarioKind::BreaksPods {
            3
        } else {
            0
        };
        let sim = Sim::builder()
            .nodes(config.nodes)
            .seed(config.seed)
            .neighbours_per_node(neighbours)
            .crd(crd)
            .build()
            .context("cannot start the simulator")?;
        let observer = config.observer.clone();
        let clock = Clock::tokio_virtual(scenario_epoch());
        let controller_config = ControllerConfig {
            clock: clock.clone(),
            observer: observer.clone(),
            analysis: Arc::new(SimQueries(SimPrometheus::new(sim.store().clone()))),
            // The demo's stand-in Prometheus, allowed as an administrator would allow theirs.
            allowed_analysis_addresses: Arc::new(
                canary_analysis::AllowedAddresses::from_flags([DEMO_PROMETHEUS])
                    .map_err(|e| anyhow::anyhow!("{e}"))?,
            ),
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
            clock,
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
        if self.config.kind == ScenarioKind::ZoneByZone {
            self.label_zones().await?;
        }
        let object: CanaryDaemonSet = serde_json::from_value(self.manifest("v1", "healthy"))
            .context("the scenario's CanaryDaemonSet does not match the CRD types")?;
        self.api()
            .create(&PostParams::default(), &object)
            .await
            .context("cannot create the CanaryDaemonSet")?;
        let deadline = tokio::time::Instant::now() + self.config.timeout;
        loop {
            let status = self.status().await?;
            if status.phase == Some(Phase::Successful)
                && status.desired == self.config.nodes
                && status.updated_ready == status.desired
            {
                return Ok(());
            }
            if status.phase == Some(Phase::Failed) {
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

    /// Moves the target to `v2` and records the rollout until it ends or times out, from the
    /// controller's transitions; `on_sample` sees every sample as it is recorded (see
    /// [`Sample::is_step`] for the ones that make a line).
    pub async fn upgrade(&self, mut on_sample: impl FnMut(&Sample)) -> Result<ScenarioReport> {
        // Subscribed before the patch: nothing the controller reports about v2 is missed.
        let mut transitions = self.observer.subscribe();
        let watch_restarts = matches!(
            self.config.kind,
            ScenarioKind::CrashloopCanary | ScenarioKind::Rollback
        );
        let mut pod_changes = watch_restarts.then(|| self.sim.store().subscribe());
        if self.config.kind == ScenarioKind::UnhealthyNode {
            // NotReady from before the upgrade to its end: the rollout defers it.
            self.sim
                .cluster()
                .set_node_ready(UNHEALTHY_NODE, false)
                .with_context(|| format!("cannot make {UNHEALTHY_NODE} NotReady"))?;
        }
        let upgraded = self.manifest("v2", self.config.kind.new_pod_behavior());
        let patch = json!({"spec": upgraded["spec"]});
        let generation = self
            .api()
            .patch(NAME, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .context("cannot move the CanaryDaemonSet to v2")?
            .metadata
            .generation;
        let start = self.clock.now();
        let deadline = tokio::time::Instant::now() + self.config.timeout;
        let churn = (self.config.kind == ScenarioKind::NodeChurn)
            .then(|| tokio::spawn(node_churn(self.sim.cluster().clone())));
        let mut timeline = Timeline::default();
        let mut restarts = Restarts::default();
        let ended = loop {
            tokio::select! {
                // The simulator's changes first: a restart comes before the failure it causes
                // (the controller's transition about it is sent after the pod change).
                biased;
                change = next_change(&mut pod_changes) => {
                    if restarts.record(&change) && let Some(last) = timeline.last() {
                        let sample = Sample {
                            t: self.clock.now().duration_since(start).as_secs_f64(),
                            phase_changed: false,
                            write: None,
                            restarts: restarts.total(),
                            reason: None,
                            ..last.clone()
                        };
                        on_sample(&sample);
                        timeline.push(sample);
                    }
                }
                transition = transitions.recv() => {
                    let transition = transition.context("the controller stopped during the rollout")?;
                    if !is_about_upgrade(&transition, generation) {
                        continue;
                    }
                    let sample = Sample::from_transition(&transition, start, timeline.last());
                    on_sample(&sample);
                    // A failure that `onFailure: Rollback` answers is not the end yet.
                    let done = sample.is_final()
                        && !(self.config.kind == ScenarioKind::Rollback && sample.phase == Phase::Failed);
                    timeline.push(sample);
                    if done {
                        break true;
                    }
                }
                () = tokio::time::sleep_until(deadline) => break false,
            }
        };
        if let Some(churn) = churn {
            churn.abort();
        }
        let t = self.clock.now().duration_since(start).as_secs_f64();
        Ok(self.report(timeline, ended, t))
    }

    fn report(&self, timeline: Timeline, ended: bool, t: f64) -> ScenarioReport {
        let last = timeline.last();
        let result = match last {
            Some(last) if ended => last.phase.to_string(),
            _ => "timeout".to_owned(),
        };
        let summary = Summary {
            result,
            daemon_set_writes: last.map_or(0, |s| s.daemon_set_writes),
            duration_seconds: if ended { last.map_or(t, |s| s.t) } else { t },
            reason: last.and_then(|s| s.reason.clone()).filter(|_| ended),
            pod_deletions: last.map_or(0, |s| s.pod_deletions),
        };
        let as_expected = summary.result == self.config.kind.expected_result();
        ScenarioReport {
            timeline,
            summary,
            as_expected,
            availability: None,
        }
    }

    /// The `surge` and `pre-pull` scenarios: reads what the rollout cost the agents into
    /// `report` and judges it. Surge ends as it should with no downtime at all; pre-pull with
    /// only the canary's pod pulling (every later pod found the image pre-pulled on its node).
    /// Call a little after [`Self::upgrade`], once the controller's last status write is in.
    pub async fn judge_availability(&self, report: &mut ScenarioReport) -> Result<()> {
        let kind = self.config.kind;
        if !matches!(kind, ScenarioKind::Surge | ScenarioKind::PrePull) {
            return Ok(());
        }
        let status = self.status().await?;
        let downtime = status.agent_downtime.filter(|d| d.version == "v2");
        let (pulled, already_present) = self.pulls_of("v2").await?;
        let availability = Availability {
            downtime_node_seconds: downtime.as_ref().map_or(0, |d| d.node_seconds),
            gaps: downtime.as_ref().map_or(0, |d| d.gaps),
            worst_seconds: downtime.and_then(|d| d.worst_seconds).unwrap_or(0),
            pulled,
            already_present,
        };
        let as_wanted = match kind {
            ScenarioKind::Surge => availability.downtime_node_seconds == 0,
            _ => availability.pulled == 1 && availability.already_present + 1 == self.config.nodes,
        };
        report.as_expected &= as_wanted;
        report.availability = Some(availability);
        Ok(())
    }

    /// Of the agent pods on `version`: how many pulled their image, how many found it on their
    /// node (from the simulated kubelet's `Pulled` events, as `kubectl get events` shows them).
    async fn pulls_of(&self, version: &str) -> Result<(u32, u32)> {
        let client = self.sim.client();
        let image = format!("registry.example/node-agent:{version}");
        let pods: Vec<String> = Api::<Pod>::namespaced(client.clone(), NAMESPACE)
            .list(&ListParams::default().labels(&format!("app.kubernetes.io/name={NAME}")))
            .await
            .context("cannot list the agent pods")?
            .items
            .into_iter()
            .filter(|pod| {
                pod.spec
                    .as_ref()
                    .and_then(|s| s.containers.first())
                    .and_then(|c| c.image.as_deref())
                    == Some(image.as_str())
            })
            .filter_map(|pod| pod.metadata.name)
            .collect();
        let events = Api::<Event>::namespaced(client, NAMESPACE)
            .list(&ListParams::default())
            .await
            .context("cannot list the events")?
            .items;
        let (mut pulled, mut present) = (0, 0);
        for event in events {
            let about_pod = event
                .involved_object
                .name
                .as_ref()
                .is_some_and(|name| pods.contains(name));
            if !about_pod || event.reason.as_deref() != Some("Pulled") {
                continue;
            }
            if event
                .message
                .as_deref()
                .is_some_and(|m| m.contains("already present"))
            {
                present += 1;
            } else {
                pulled += 1;
            }
        }
        Ok((pulled, present))
    }

    /// The driver the CanaryDaemonSet uses: the scenario's own need first.
    pub fn driver(&self) -> Driver {
        self.config
            .kind
            .required_driver()
            .unwrap_or(self.config.driver)
    }

    fn manifest(&self, version: &str, behavior: &str) -> serde_json::Value {
        let topology = (self.config.kind == ScenarioKind::ZoneByZone).then_some(ZONE_LABEL);
        let mut manifest = manifest_for(
            self.config.compatibility,
            self.driver(),
            topology,
            version,
            behavior,
        );
        if self.config.kind == ScenarioKind::Rollback {
            manifest["spec"]["strategy"]["onFailure"] = json!("Rollback");
        }
        // The Pods driver's demo always judges its soak; the MaxUnavailable driver's judges its
        // canary before the widen in `bad-metrics` (the other scenarios keep the reference's
        // timing).
        if self.driver() == Driver::Pods || self.config.kind == ScenarioKind::BadMetrics {
            manifest["spec"]["analysis"] = error_ratio_analysis(DEMO_PROMETHEUS, "10s");
        }
        if let Some(pull) = self.config.kind.pull_time() {
            manifest["spec"]["template"]["spec"]["template"]["metadata"]["annotations"]
                [PULL_ANNOTATION] = json!(pull);
        }
        if self.config.kind == ScenarioKind::Surge {
            manifest["spec"]["strategy"]["surge"] = json!(true);
        }
        if self.config.kind == ScenarioKind::PrePull {
            // A pause as long as pre-pulling every other node takes, 10 at a time (each round
            // a pull and the controller's 5 s look at the pulls, with room to spare): the step
            // after it finds every image on its nodes.
            let rounds = u64::from(self.config.nodes.saturating_sub(1)).div_ceil(10);
            manifest["spec"]["strategy"]["steps"] = json!([
                {"nodes": "1"},
                {"pause": {"duration": format!("{}s", rounds * 30 + 10)}},
                {"nodes": "100%", "maxUnavailable": "10%"}
            ]);
            manifest["spec"]["prePull"] = json!({"maxConcurrent": PRE_PULL_AT_ONCE});
        }
        if self.config.kind == ScenarioKind::BadMetrics && version != "v1" {
            manifest["spec"]["template"]["spec"]["template"]["metadata"]["annotations"]
                [ERROR_RATIO_ANNOTATION] = json!("0.1");
        }
        manifest
    }

    /// Labels the nodes into three zones, round robin, as `kubectl label node` would.
    async fn label_zones(&self) -> Result<()> {
        let nodes: Api<Node> = Api::all(self.sim.client());
        let names: Vec<String> = nodes
            .list(&Default::default())
            .await
            .context("cannot list the nodes")?
            .items
            .into_iter()
            .filter_map(|node| node.metadata.name)
            .collect();
        for (name, zone) in names.iter().zip(ZONES.iter().cycle()) {
            nodes
                .patch(
                    name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"labels": {ZONE_LABEL: zone}}})),
                )
                .await
                .with_context(|| format!("cannot label node {name}"))?;
        }
        Ok(())
    }

    async fn status(&self) -> Result<canary_kube_adapter::crd::CanaryDaemonSetStatus> {
        let object = self
            .api()
            .get(NAME)
            .await
            .context("cannot read the CanaryDaemonSet")?;
        Ok(object.status.unwrap_or_default())
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

/// Whether `transition` is about the scenario's CanaryDaemonSet at the upgraded spec (or later):
/// the v1 rollout's last count updates can still be in flight when v2 is written.
fn is_about_upgrade(transition: &Transition, generation: Option<i64>) -> bool {
    transition.namespace == NAMESPACE
        && transition.name == NAME
        && transition.observed_generation >= generation
}

/// The next store change, or never when not watching.
async fn next_change(
    changes: &mut Option<tokio::sync::broadcast::Receiver<StoreEvent>>,
) -> Option<StoreEvent> {
    match changes {
        Some(receiver) => loop {
            match receiver.recv().await {
                Ok(change) => return Some(change),
                // A slow reader misses some pod updates; the next ones carry the counts again.
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                    return std::future::pending().await;
                }
            }
        },
        None => std::future::pending().await,
    }
}

/// Container restarts of the new version's pods, per pod, from the simulator's pod changes.
#[derive(Debug, Default)]
struct Restarts {
    by_pod: BTreeMap<String, u32>,
}

impl Restarts {
    /// Takes one store change in; true when the total moved.
    fn record(&mut self, change: &Option<StoreEvent>) -> bool {
        let Some(change) = change else { return false };
        if change.key.plural != "pods" || change.namespace.as_deref() != Some(NAMESPACE) {
            return false;
        }
        let Ok(pod) = serde_json::from_value::<Pod>((*change.object).clone()) else {
            return false;
        };
        let new_version = pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(VERSION_ANNOTATION))
            .is_some_and(|v| v == "v2");
        if !new_version {
            return false;
        }
        let restarts: i32 = pod
            .status
            .iter()
            .flat_map(|s| s.container_statuses.iter().flatten())
            .map(|c| c.restart_count)
            .sum();
        let restarts = u32::try_from(restarts).unwrap_or(0);
        let before = self.by_pod.insert(change.name.clone(), restarts);
        before != Some(restarts) && (restarts > 0 || before.is_some_and(|b| b > 0))
    }

    fn total(&self) -> u32 {
        self.by_pod.values().sum()
    }
}

/// The fixed wall-clock start of scenario time, so timestamps in status are reproducible.
fn scenario_epoch() -> Timestamp {
    Timestamp::from_second(1_767_225_600).unwrap_or(Timestamp::UNIX_EPOCH) // 2026-01-01T00:00:00Z
}

/// The node changes of the `node-churn` scenario, each at its time after the upgrade began: a
/// node joins during the canary's soak and is counted by the widen (about 40 s in), a node
/// goes NotReady meanwhile, and one leaves and the NotReady one returns during the widened
/// rollout.
async fn node_churn(cluster: Cluster) {
    let start = tokio::time::Instant::now();
    for (at, step) in [(5, 0), (15, 1), (50, 2), (70, 3)] {
        tokio::time::sleep_until(start + Duration::from_secs(at)).await;
        let outcome = match step {
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
            Ok(what) => tracing::info!(at, "{what}"),
            Err(error) => tracing::warn!(at, %error, "node churn step failed"),
        }
    }
}
