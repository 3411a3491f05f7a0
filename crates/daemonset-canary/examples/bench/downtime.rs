//! Agent downtime per rollout (issue 50), in virtual time: node-seconds without a ready agent
//! pod, summed over the nodes, for one rollout of `v2` over an installed `v1` with a modelled
//! image pull (canary-sim's `sim.canary.daemonset.dev/pull`): plain, surge, pre-pull and both
//! on the MaxUnavailable driver, plain and pre-pull on the Pods driver.
//!
//! The downtime is the harness's own reading of the store's events (not the controller's):
//! per node, the agent is down from the moment its last ready pod stops counting (not ready,
//! being deleted, or gone) to the moment a pod of the DaemonSet on it is ready again (the
//! controller's own measure, `canary_agent_downtime_seconds`, is not read here).

#![expect(
    clippy::indexing_slicing,
    reason = "only serde_json::Value is indexed here: a missing key or index reads as Null, and \
              writes by index go to objects this module built"
)]

use std::collections::HashMap;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use canary_kube_adapter::CanaryDaemonSet;
use canary_sim::store::{EventKind, StoreEvent};
use canary_state_machine::{Compatibility, Driver};
use daemonset_canary::demo::scenario::{self, Scenario};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::PostParams;
use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{broadcast, oneshot};
use tokio::task::JoinHandle;

use crate::rollout::{healthy, roll_out, wait_for};

/// The pull-time annotation canary-sim's kubelet reads.
const PULL_ANNOTATION: &str = "sim.canary.daemonset.dev/pull";

/// One variant of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Variant {
    /// The driver.
    pub driver: Driver,
    /// `spec.prePull.maxConcurrent`, `None` without pre-pull.
    pub pre_pull: Option<u32>,
    /// `spec.strategy.surge` (MaxUnavailable driver only).
    pub surge: bool,
}

impl Variant {
    /// The variants measured: plain, surge (MaxUnavailable driver), pre-pull, and surge with
    /// pre-pull; then the Pods driver plain and with pre-pull.
    pub fn all(max_concurrent: u32) -> Vec<Variant> {
        let mut all = Vec::new();
        for (surge, pre_pull) in [
            (false, None),
            (true, None),
            (false, Some(max_concurrent)),
            (true, Some(max_concurrent)),
        ] {
            all.push(Variant {
                driver: Driver::MaxUnavailable,
                pre_pull,
                surge,
            });
        }
        for pre_pull in [None, Some(max_concurrent)] {
            all.push(Variant {
                driver: Driver::Pods,
                pre_pull,
                surge: false,
            });
        }
        all
    }

    /// The row's name.
    pub fn name(&self) -> String {
        let driver = match self.driver {
            Driver::MaxUnavailable => "MaxUnavailable",
            Driver::Pods => "Pods",
        };
        match (self.surge, self.pre_pull) {
            (false, None) => format!("{driver}, plain"),
            (true, None) => format!("{driver}, surge"),
            (false, Some(n)) => format!("{driver}, pre-pull (maxConcurrent {n})"),
            (true, Some(n)) => format!("{driver}, surge and pre-pull (maxConcurrent {n})"),
        }
    }
}

/// The downtime of one rollout.
#[derive(Debug, Clone)]
pub struct DowntimeFigures {
    /// The variant.
    pub variant: Variant,
    /// Nodes of the cluster.
    pub nodes: u32,
    /// The modelled pull of the new image.
    pub pull: Duration,
    /// Node-seconds without a ready agent pod, summed.
    pub node_seconds: f64,
    /// The longest downtime of one node.
    pub worst: Duration,
    /// Nodes that were down at all.
    pub nodes_down: u32,
    /// Virtual time from the change to `successful`.
    pub makespan: Duration,
}

/// The Pods driver's steps here: a canary, then two pauses that each pre-pull the step after.
fn pods_steps() -> Value {
    json!([
        {"nodes": "1"},
        {"pause": {"duration": "60s"}},
        {"nodes": "10%"},
        {"pause": {"duration": "2m"}},
        {"nodes": "100%"}
    ])
}

/// The manifest of `version` for `variant`, every image pulled in `pull`.
fn manifest(variant: Variant, version: &str, pull: Duration) -> Value {
    let mut manifest = scenario::manifest(Compatibility::Fixed, version, "healthy");
    manifest["spec"]["template"]["spec"]["template"]["metadata"]["annotations"][PULL_ANNOTATION] =
        json!(format!("{}s", pull.as_secs()));
    if variant.driver == Driver::Pods {
        manifest["spec"]["strategy"]["driver"] = json!("Pods");
        manifest["spec"]["strategy"]["steps"] = pods_steps();
    }
    if variant.surge {
        manifest["spec"]["strategy"]["surge"] = json!(true);
    }
    if let Some(max_concurrent) = variant.pre_pull {
        manifest["spec"]["prePull"] = json!({"maxConcurrent": max_concurrent});
    }
    manifest
}

/// Installs `v1` on `nodes` nodes as `variant`, then measures the rollout of `v2`. Call on a
/// current-thread runtime with a paused clock.
pub async fn run(
    variant: Variant,
    nodes: u32,
    pull: Duration,
    seed: u64,
) -> Result<DowntimeFigures> {
    let scenario = healthy(nodes, seed).await?;
    let figures = measure(&scenario, variant, nodes, pull).await;
    scenario.stop().await?;
    figures
}

async fn measure(
    scenario: &Scenario,
    variant: Variant,
    nodes: u32,
    pull: Duration,
) -> Result<DowntimeFigures> {
    let sim = scenario.sim();
    let object: CanaryDaemonSet = serde_json::from_value(manifest(variant, "v1", pull))
        .context("the benchmark's CanaryDaemonSet does not match the CRD types")?;
    let api: Api<CanaryDaemonSet> = Api::namespaced(sim.client(), scenario::NAMESPACE);
    let transitions = scenario.observer().subscribe();
    api.create(&PostParams::default(), &object)
        .await
        .context("cannot create the CanaryDaemonSet")?;
    wait_for(transitions).await.context("installing v1")?;

    // Subscribed before the pods are read: a change in between is applied over the read.
    let events = sim.store().subscribe();
    let mut downtime = Downtime::default();
    let now = tokio::time::Instant::now();
    for pod in sim.store().list::<Pod>(Some(scenario::NAMESPACE)) {
        let value = serde_json::to_value(&pod).context("a pod does not encode")?;
        downtime.seed(&value, now);
    }
    let recorder = Recorder::start(events, downtime);
    let v2 = manifest(variant, "v2", pull);
    let patch =
        json!({"spec": {"target": v2["spec"]["target"], "template": v2["spec"]["template"]}});
    let transitions = scenario.observer().subscribe();
    let makespan = roll_out(sim, &patch, transitions).await?;
    let downtime = recorder.finish().await?;
    ensure!(
        downtime.down.is_empty(),
        "{} nodes still without a ready agent after the rollout",
        downtime.down.len()
    );
    Ok(DowntimeFigures {
        variant,
        nodes,
        pull,
        // `+ 0.0`: an empty sum is -0.0, which prints as "-0".
        node_seconds: downtime
            .per_node
            .values()
            .map(Duration::as_secs_f64)
            .sum::<f64>()
            + 0.0,
        worst: downtime
            .per_node
            .values()
            .max()
            .copied()
            .unwrap_or_default(),
        nodes_down: u32::try_from(downtime.per_node.len()).unwrap_or(u32::MAX),
        makespan,
    })
}

/// The agent's pods per node as the store's events tell them, and the downtime so far.
#[derive(Default)]
struct Downtime {
    /// Pod name → (node, counts as a ready agent).
    pods: HashMap<String, (String, bool)>,
    /// Node → since when it has no ready agent pod.
    down: HashMap<String, tokio::time::Instant>,
    /// Node → downtime summed.
    per_node: HashMap<String, Duration>,
}

impl Downtime {
    /// A pod as it is when the measure starts.
    fn seed(&mut self, pod: &Value, now: tokio::time::Instant) {
        let name = pod["metadata"]["name"].as_str().unwrap_or_default();
        self.observe(name, EventKind::Added, pod, now);
    }

    fn apply(&mut self, event: &StoreEvent, now: tokio::time::Instant) {
        if event.key.plural != "pods" {
            return;
        }
        self.observe(&event.name, event.kind, &event.object, now);
    }

    fn observe(&mut self, name: &str, kind: EventKind, pod: &Value, now: tokio::time::Instant) {
        if owner_name(pod) != Some(scenario::NAME) {
            return;
        }
        let Some(node) = pod["spec"]["nodeName"].as_str() else {
            return;
        };
        let up = kind != EventKind::Deleted
            && pod["metadata"]["deletionTimestamp"].is_null()
            && is_ready(pod);
        let before = self.ready_on(node);
        self.pods.insert(name.to_owned(), (node.to_owned(), up));
        if kind == EventKind::Deleted {
            self.pods.remove(name);
        }
        let after = self.ready_on(node);
        if before > 0 && after == 0 {
            self.down.insert(node.to_owned(), now);
        } else if before == 0
            && after > 0
            && let Some(since) = self.down.remove(node)
        {
            *self.per_node.entry(node.to_owned()).or_default() += now - since;
        }
    }

    /// Ready agent pods on `node` (a handful at most: a walk over the pods is the bench's
    /// cost, not the controller's).
    fn ready_on(&self, node: &str) -> usize {
        self.pods
            .values()
            .filter(|(on, up)| *up && on == node)
            .count()
    }
}

fn owner_name(pod: &Value) -> Option<&str> {
    pod["metadata"]["ownerReferences"]
        .as_array()?
        .iter()
        .find(|o| o["controller"] == json!(true))?["name"]
        .as_str()
}

fn is_ready(pod: &Value) -> bool {
    pod["status"]["conditions"]
        .as_array()
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
}

/// Reads the store's events from its start until [`Recorder::finish`], in virtual time.
struct Recorder {
    stop: oneshot::Sender<()>,
    task: JoinHandle<(Downtime, u64)>,
}

impl Recorder {
    fn start(mut events: broadcast::Receiver<StoreEvent>, mut downtime: Downtime) -> Self {
        let (stop, mut stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let mut missed = 0;
            loop {
                tokio::select! {
                    biased;
                    event = events.recv() => match event {
                        Ok(event) => downtime.apply(&event, tokio::time::Instant::now()),
                        Err(RecvError::Lagged(n)) => missed += n,
                        Err(RecvError::Closed) => break,
                    },
                    _ = &mut stopped => {
                        while let Ok(event) = events.try_recv() {
                            downtime.apply(&event, tokio::time::Instant::now());
                        }
                        break;
                    }
                }
            }
            (downtime, missed)
        });
        Self { stop, task }
    }

    async fn finish(self) -> Result<Downtime> {
        let _ = self.stop.send(());
        let (downtime, missed) = self.task.await.context("the downtime recorder panicked")?;
        ensure!(
            missed == 0,
            "the downtime recorder missed {missed} store events"
        );
        Ok(downtime)
    }
}
