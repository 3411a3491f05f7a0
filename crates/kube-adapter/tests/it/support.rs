//! Shared builders of the adapter's tests against canary-sim: a simulated cluster with the
//! CRD, a CanaryDaemonSet spec of a node agent, controller replicas, and the waits and checks
//! every scenario uses.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use canary_kube_adapter::clock::Clock;
use canary_kube_adapter::controller::{ControllerConfig, LeaderElection, run};
use canary_kube_adapter::crd::{
    CanaryDaemonSet, CanaryDaemonSetSpec, DaemonSetTemplate, PauseSpec, StepSpec, TargetSpec, crd,
};
use canary_kube_adapter::observer::{Observer, Transition, Transitions};
use canary_sim::Sim;
use canary_sim::cluster::Cluster;
use canary_state_machine::Driver;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub(crate) const NS: &str = "default";

pub(crate) fn spec(version: &str, behavior: Option<&str>) -> CanaryDaemonSetSpec {
    let mut annotations = serde_json::Map::new();
    if let Some(b) = behavior {
        annotations.insert("sim.canary.daemonset.dev/behavior".into(), json!(b));
    }
    CanaryDaemonSetSpec::with_template(
        template(json!({
            "selector": {"matchLabels": {"app": "agent"}},
            "template": {
                "metadata": {"labels": {"app": "agent"}, "annotations": annotations},
                "spec": {"containers": [{"name": "agent", "image": format!("agent:{version}")}]}
            },
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}}
        })),
        TargetSpec {
            version: version.into(),
            from_container: None,
            registry: "reg".into(),
            deployment_id: None,
        },
    )
}

/// A template of `spec` (a DaemonSet spec as JSON) with no metadata of its own.
pub(crate) fn template(spec: serde_json::Value) -> DaemonSetTemplate {
    DaemonSetTemplate {
        metadata: Default::default(),
        spec: serde_json::from_value(spec).unwrap(),
    }
}

/// A `{nodes: ...}` step.
pub(crate) fn nodes_step(nodes: &str) -> StepSpec {
    StepSpec {
        nodes: Some(nodes.into()),
        ..StepSpec::default()
    }
}

/// A `{pause: ...}` step, until promoted without a duration.
pub(crate) fn pause(duration: Option<&str>) -> StepSpec {
    StepSpec {
        pause: Some(PauseSpec {
            duration: duration.map(str::to_owned),
        }),
        ..StepSpec::default()
    }
}

/// The node agent's spec, Pods driver, with `steps`.
pub(crate) fn pods_spec(
    version: &str,
    behavior: Option<&str>,
    steps: Vec<StepSpec>,
) -> CanaryDaemonSetSpec {
    let mut spec = spec(version, behavior);
    spec.strategy.driver = Driver::Pods;
    spec.strategy.steps = steps;
    spec
}

/// The nodes whose pod runs `image`.
pub(crate) async fn nodes_on(client: &Client, image: &str) -> Vec<String> {
    pods_by_node(client)
        .await
        .into_iter()
        .filter(|(_, (i, _))| i == image)
        .map(|(node, _)| node)
        .collect()
}

/// One controller replica running against the sim.
pub(crate) struct Replica {
    pub(crate) observer: Observer,
    pub(crate) stop: Option<oneshot::Sender<()>>,
    pub(crate) task: JoinHandle<Result<(), canary_kube_adapter::Error>>,
}

impl Replica {
    pub(crate) fn start(sim: &Sim, leader: Option<LeaderElection>) -> Self {
        Self::start_on(sim, sim.client(), leader)
    }

    /// A replica talking to the sim through `client`.
    pub(crate) fn start_on(sim: &Sim, client: Client, leader: Option<LeaderElection>) -> Self {
        Self::start_with(sim, client, |config| ControllerConfig {
            leader_election: leader,
            ..config
        })
    }

    /// A replica talking to the sim through `client`, its configuration changed by `configure`.
    pub(crate) fn start_with(
        sim: &Sim,
        client: Client,
        configure: impl FnOnce(ControllerConfig) -> ControllerConfig,
    ) -> Self {
        let observer = Observer::new();
        let clock = sim.store().clock().clone();
        let config = configure(ControllerConfig {
            clock: Clock::from_fn(move || clock.now()),
            observer: observer.clone(),
            instance: Some("test".into()),
            ..ControllerConfig::default()
        });
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(run(client, config, async move {
            let _ = stopped.await;
        }));
        Self {
            observer,
            stop: Some(stop),
            task,
        }
    }

    /// Successful DaemonSet writes of `kind` by this replica so far.
    pub(crate) fn writes(&self, kind: canary_state_machine::WriteKind) -> u64 {
        self.observer.stats().daemon_set_writes(kind)
    }

    pub(crate) async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        tokio::time::timeout(Duration::from_secs(600), self.task)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
    }
}

/// A client whose connection can be cut, as a killed process's is: once `alive` is false, no
/// request reaches the API server any more (each one hangs, like a peer that vanished).
pub(crate) fn killable_client(sim: &Sim) -> (Client, Arc<AtomicBool>) {
    use tower::Service;
    let alive = Arc::new(AtomicBool::new(true));
    let connected = alive.clone();
    let api = sim.service();
    let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
        let mut api = api.clone();
        let cut = !connected.load(Ordering::Acquire);
        async move {
            if cut {
                std::future::pending::<()>().await;
            }
            api.call(request).await
        }
    });
    (Client::new(service, NS), alive)
}

/// The simulator with the cluster model (DaemonSet controller, kubelets) on `nodes` nodes.
pub(crate) struct Env {
    pub(crate) sim: Sim,
    pub(crate) cluster: Cluster,
}

impl std::ops::Deref for Env {
    type Target = Sim;
    fn deref(&self) -> &Sim {
        &self.sim
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        self.cluster.shutdown();
    }
}

pub(crate) fn sim(nodes: u32) -> Env {
    let sim = Sim::builder().nodes(nodes).seed(7).build().unwrap();
    sim.register_crd(&crd().unwrap()).unwrap();
    let cluster = sim.cluster().clone();
    Env { sim, cluster }
}

/// The simulator on `nodes` nodes, a client of it and one replica started: the opening of
/// most scenarios.
pub(crate) fn started(nodes: u32) -> (Env, Client, Replica) {
    let sim = sim(nodes);
    let client = sim.client();
    let replica = Replica::start(&sim, None);
    (sim, client, replica)
}

/// [`started`], then `agent` installed at `v1` on every node.
pub(crate) async fn started_and_installed(nodes: u32) -> (Env, Client, Replica) {
    let (sim, client, replica) = started(nodes);
    install(&client, nodes).await;
    (sim, client, replica)
}

pub(crate) async fn create_cds(
    client: &Client,
    name: &str,
    spec: CanaryDaemonSetSpec,
) -> CanaryDaemonSet {
    let api: Api<CanaryDaemonSet> = Api::namespaced(client.clone(), NS);
    api.create(&PostParams::default(), &CanaryDaemonSet::new(name, spec))
        .await
        .unwrap()
}

/// Puts a CanaryDaemonSet in the store directly, unvalidated: what an API server with an older
/// CRD (without the rule it breaks) stored. Through the API, the simulator refuses what the
/// CRD's schema and rules refuse, as kube-apiserver does.
pub(crate) fn plant_cds(sim: &Sim, object: serde_json::Value) {
    let mut object = object;
    object["metadata"]["namespace"] = json!(NS);
    sim.store()
        .create_value(&canary_sim::ResourceKey::of::<CanaryDaemonSet>(), object)
        .unwrap();
}

/// Merges `patch` into a stored CanaryDaemonSet directly, unvalidated (see [`plant_cds`]).
pub(crate) fn plant_patch(sim: &Sim, name: &str, patch: &serde_json::Value) {
    sim.store()
        .patch_value(
            &canary_sim::ResourceKey::of::<CanaryDaemonSet>(),
            Some(NS),
            name,
            canary_sim::UpdateScope::Main,
            false,
            |current| {
                let mut next = current.clone();
                json_patch::merge(&mut next, patch);
                Ok(next)
            },
        )
        .unwrap();
}

pub(crate) async fn set_version(client: &Client, name: &str, version: &str) {
    let api: Api<CanaryDaemonSet> = Api::namespaced(client.clone(), NS);
    let patch = json!({"spec": {"target": {"version": version},
        "template": {"spec": {"template": {"spec": {"containers": [{"name": "agent", "image": format!("agent:{version}")}]}}}}}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
}

pub(crate) async fn get_cds(client: &Client, name: &str) -> CanaryDaemonSet {
    Api::<CanaryDaemonSet>::namespaced(client.clone(), NS)
        .get(name)
        .await
        .unwrap()
}

pub(crate) async fn get_ds(client: &Client, name: &str) -> DaemonSet {
    Api::<DaemonSet>::namespaced(client.clone(), NS)
        .get(name)
        .await
        .unwrap()
}

/// `spec` with `compatibility: KubeVirt` (the reference's rules).
pub(crate) fn kubevirt_compatible(mut spec: CanaryDaemonSetSpec) -> CanaryDaemonSetSpec {
    spec.strategy.compatibility = canary_state_machine::Compatibility::KubeVirt;
    spec
}

/// The `rollingUpdate.maxUnavailable` of DaemonSet `agent` as it is live.
pub(crate) async fn live_max_unavailable(client: &Client) -> Option<IntOrString> {
    get_ds(client, "agent")
        .await
        .spec
        .unwrap()
        .update_strategy
        .unwrap()
        .rolling_update
        .unwrap()
        .max_unavailable
}

/// A short lease, so that a takeover test waits seconds, not the default 15.
pub(crate) fn short_lease(identity: &str) -> LeaderElection {
    LeaderElection {
        duration_seconds: 2,
        grace_seconds: 1,
        ..LeaderElection::new(NS, identity)
    }
}

/// Polls `check` every virtual second until it holds, at most `limit` of virtual time.
pub(crate) async fn eventually<F, Fut>(limit: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < deadline {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    panic!("timed out after {limit:?} waiting for {what}");
}

/// `(status, reason, message)` of the condition `type_` of `cds`.
pub(crate) fn condition(cds: &CanaryDaemonSet, type_: &str) -> Option<(String, String, String)> {
    cds.status.as_ref()?.conditions.iter().find_map(|c| {
        (c.type_ == type_).then(|| (c.status.clone(), c.reason.clone(), c.message.clone()))
    })
}

/// The events of the test namespace with `reason`.
pub(crate) async fn events_with_reason(client: &Client, reason: &str) -> Vec<Event> {
    Api::<Event>::namespaced(client.clone(), NS)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .collect()
}

/// Waits up to `secs` seconds for CanaryDaemonSet `agent`, the object of most scenarios, to
/// reach `phase`; `what` names the wait in the panic when it does not.
pub(crate) async fn until_agent_phase(client: &Client, phase: &str, secs: u64, what: &str) {
    eventually(Duration::from_secs(secs), what, || {
        phase_is(client, "agent", phase)
    })
    .await;
}

pub(crate) async fn phase_is(client: &Client, name: &str, phase: &str) -> bool {
    get_cds(client, name)
        .await
        .status
        .and_then(|s| s.phase_name())
        == Some(phase)
}

/// Waits (at most 900 virtual seconds) for a transition to `phase`; the ones before it are
/// consumed.
pub(crate) async fn until_transition_to(transitions: &mut Transitions, phase: &str) {
    let limit = tokio::time::Instant::now() + Duration::from_secs(900);
    loop {
        let t = tokio::time::timeout_at(limit, transitions.recv())
            .await
            .unwrap()
            .unwrap();
        if t.to.as_str() == phase {
            return;
        }
    }
}

pub(crate) fn drain(rx: &mut Transitions) -> Vec<Transition> {
    let mut out = Vec::new();
    while let Some(t) = rx.try_recv() {
        out.push(t);
    }
    out
}

/// Successful writes per kind, in [`WRITE_KINDS`](canary_kube_adapter::observer::WRITE_KINDS)
/// order: `[create, start, widen, finish, tls, hold, resume]`.
pub(crate) type WriteCounts = [u64; canary_kube_adapter::observer::WRITE_KINDS.len()];

pub(crate) fn writes_since(observer: &Observer, before: WriteCounts) -> WriteCounts {
    let now = write_counts(observer);
    std::array::from_fn(|i| now[i] - before[i])
}

pub(crate) fn write_counts(observer: &Observer) -> WriteCounts {
    canary_kube_adapter::observer::WRITE_KINDS.map(|k| observer.stats().daemon_set_writes(k))
}

/// One start, one hold while the canary soaks (issue 46: the DaemonSet on `OnDelete` until
/// the canary has been ready for `spec.health.canarySoak`), one widen, one finish.
pub(crate) const START_WIDEN_FINISH: WriteCounts = [0, 1, 1, 1, 0, 1, 0, 0];

/// The start, and the hold of the canary's soak (issue 46): a canary that never proves
/// itself keeps the DaemonSet controller held.
pub(crate) const START_AND_SOAK_HOLD: WriteCounts = [0, 1, 0, 0, 0, 1, 0, 0];

/// The rollout of `version` is complete: successful, every desired pod updated and ready, the
/// live generation recorded.
pub(crate) async fn rolled_out(client: &Client, name: &str, version: &str, nodes: u32) -> bool {
    let cds = get_cds(client, name).await;
    let Some(status) = cds.status.as_ref() else {
        return false;
    };
    let ds = get_ds(client, name).await;
    let annotations = ds.metadata.annotations.clone().unwrap_or_default();
    status.phase_name() == Some("successful")
        && annotations
            .get("kubevirt.io/install-strategy-version")
            .map(String::as_str)
            == Some(version)
        && status.desired == nodes
        && status.updated_ready == nodes
        && status.recorded_daemon_set_generation == ds.metadata.generation
        && status.observed_generation == cds.metadata.generation
}

/// Waits up to `secs` seconds for `agent` to be [`rolled_out`] at `version` on `nodes` nodes;
/// `what` names the wait in the panic when it does not come.
pub(crate) async fn until_rolled_out(
    client: &Client,
    version: &str,
    nodes: u32,
    secs: u64,
    what: &str,
) {
    eventually(Duration::from_secs(secs), what, || {
        rolled_out(client, "agent", version, nodes)
    })
    .await;
}

pub(crate) async fn install(client: &Client, nodes: u32) {
    create_cds(client, "agent", spec("v1", None)).await;
    until_rolled_out(client, "v1", nodes, 1800, "the first install").await;
}

/// The maxUnavailable written by each successful DaemonSet write, in order.
pub(crate) fn written_max_unavailable(transitions: &[Transition]) -> Vec<String> {
    transitions
        .iter()
        .filter(|t| t.write.is_some())
        .filter_map(|t| t.max_unavailable.as_ref().map(ToString::to_string))
        .collect()
}

/// The pods of namespace `NS` that match `labels` and are not being deleted.
pub(crate) async fn live_pods(client: &Client, labels: &str) -> Vec<Pod> {
    Api::<Pod>::namespaced(client.clone(), NS)
        .list(&ListParams::default().labels(labels))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect()
}

/// `(node, image, ready)` of every live pod of DaemonSet `agent`, by node.
pub(crate) async fn pods_by_node(client: &Client) -> BTreeMap<String, (String, bool)> {
    live_pods(client, "app=agent")
        .await
        .into_iter()
        .filter_map(|p| {
            let node = p.spec.as_ref()?.node_name.clone()?;
            let image = p.spec.as_ref()?.containers.first()?.image.clone()?;
            let ready = p
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            Some((node, (image, ready)))
        })
        .collect()
}

/// `kubectl annotate cds agent KEY=VALUE`, as the verbs mark the object.
pub(crate) async fn annotate(client: &Client, key: &str, value: &str) {
    Api::<canary_kube_adapter::crd::CanaryDaemonSet>::namespaced(client.clone(), NS)
        .patch(
            "agent",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(
                serde_json::json!({"metadata": {"annotations": {key: value}}}),
            ),
        )
        .await
        .unwrap();
}
