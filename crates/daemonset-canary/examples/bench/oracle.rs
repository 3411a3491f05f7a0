//! The oracle (issue 20): the controller's own DaemonSet writes, made by a driver in the
//! harness at the exact moments the decisions allow, with no reaction delay. Its makespan is
//! the best any controller making those decisions can reach in the same simulation, so our
//! makespan divided by it is what the controller adds.
//!
//! A fresh simulator with the same nodes and seed gets the DaemonSet as the controller had
//! installed it (without its owner, the CanaryDaemonSet, which the oracle's simulator has not),
//! and waits until every pod is ready. Then, watching the store's events as they commit:
//! *start* (the spec the controller's start write left) at once; *widen* as soon as the first
//! pod on the target is ready; *finish* as soon as every pod is on the target and ready — the
//! triggers [`crate::reaction`] measures the controller's latency from. The makespan runs from
//! the start write to the moment the last pod is ready (where the finish write goes).
//!
//! **Limit**: the simulated kubelet's seeded jitter draws depend on the order of everything
//! before, so the oracle's rollout does not replay the same jitter as ours; over many pods the
//! slowest replacement of each wave is close in both, which is why this is meaningful at large
//! sizes and noisy (a few percent either way) on 10 nodes.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use canary_sim::Sim;
use canary_sim::store::{EventKind, StoreEvent, UpdateScope};
use daemonset_canary::demo::scenario;
use k8s_openapi::api::apps::v1::{DaemonSet, DaemonSetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value;
use tokio::sync::broadcast::error::RecvError;

use crate::reaction::{is_ready, on_target, owner_name};

/// What the controller wrote in one rollout, to replay.
#[derive(Debug, Clone, Default)]
pub struct Recorded {
    /// The DaemonSet before the rollout's first write.
    pub before: Option<Value>,
    /// Each write (`start`, `widen`, `finish`) with the spec it left.
    pub writes: Vec<(&'static str, Value)>,
}

/// The oracle's makespan for the rollout `recorded` to `version` on `nodes` nodes. Call on a
/// current-thread runtime with a paused clock.
pub async fn makespan(
    nodes: u32,
    seed: u64,
    recorded: &Recorded,
    version: &str,
) -> Result<Duration> {
    let before = recorded
        .before
        .as_ref()
        .context("the rollout recorded no DaemonSet write to replay")?;
    let spec_of = |kind: &str| -> Result<Option<DaemonSetSpec>> {
        recorded
            .writes
            .iter()
            .find(|(write, _)| *write == kind)
            .map(|(_, spec)| serde_json::from_value(spec.clone()))
            .transpose()
            .with_context(|| format!("the recorded {kind} write is not a DaemonSet spec"))
    };
    let (start, widen, finish) = (spec_of("start")?, spec_of("widen")?, spec_of("finish")?);
    let start = start.context("the rollout recorded no start write")?;

    let sim = Sim::builder()
        .nodes(nodes)
        .seed(seed)
        .build()
        .context("cannot start the oracle's simulator")?;
    let store = sim.store().clone();
    let installed: DaemonSet =
        serde_json::from_value(before.clone()).context("the recorded DaemonSet does not decode")?;
    let daemon_set = DaemonSet {
        metadata: ObjectMeta {
            name: installed.metadata.name.clone(),
            namespace: installed.metadata.namespace.clone(),
            labels: installed.metadata.labels.clone(),
            ..ObjectMeta::default()
        },
        spec: installed.spec.clone(),
        status: None,
    };
    store
        .create(&daemon_set)
        .context("cannot create the oracle's DaemonSet")?;
    wait_until_rolled_out(&sim, nodes).await?;

    let mut events = store.subscribe();
    let write = |spec: &DaemonSetSpec| -> Result<()> {
        store
            .modify::<DaemonSet>(
                Some(scenario::NAMESPACE),
                scenario::NAME,
                UpdateScope::Main,
                |ds| ds.spec = Some(spec.clone()),
            )
            .map(|_| ())
            .context("the oracle's write failed")
    };
    let started = tokio::time::Instant::now();
    write(&start)?;
    let mut pods: HashMap<String, (bool, bool)> = HashMap::new();
    let mut widened = false;
    let deadline = Duration::from_secs(6 * 3600);
    loop {
        let event = match tokio::time::timeout(deadline, events.recv()).await {
            Err(_) => bail!("the oracle's rollout did not end within {deadline:?}"),
            Ok(Err(RecvError::Lagged(n))) => bail!("the oracle missed {n} store events"),
            Ok(Err(RecvError::Closed)) => bail!("the oracle's simulator stopped"),
            Ok(Ok(event)) => event,
        };
        if !track(&mut pods, &event, version) {
            continue;
        }
        let ready = pods
            .values()
            .filter(|(target, ready)| *target && *ready)
            .count();
        if ready >= 1 && !widened {
            widened = true;
            if let Some(widen) = &widen {
                write(widen)?;
            }
        }
        if ready == nodes as usize && pods.len() == nodes as usize {
            let makespan = started.elapsed();
            if let Some(finish) = &finish {
                write(finish)?;
            }
            return Ok(makespan);
        }
    }
}

/// Records a pod event of the scenario's DaemonSet in `pods` (name → on target, ready);
/// whether it was one.
fn track(pods: &mut HashMap<String, (bool, bool)>, event: &StoreEvent, version: &str) -> bool {
    if event.key.plural != "pods" || owner_name(&event.object) != Some(scenario::NAME) {
        return false;
    }
    if event.kind == EventKind::Deleted {
        pods.remove(&event.name);
    } else {
        pods.insert(
            event.name.clone(),
            (on_target(&event.object, version), is_ready(&event.object)),
        );
    }
    true
}

/// Waits (in virtual time) until the DaemonSet has a ready pod on each of `nodes` nodes.
async fn wait_until_rolled_out(sim: &Sim, nodes: u32) -> Result<()> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3600);
    loop {
        let status = sim
            .store()
            .get::<DaemonSet>(Some(scenario::NAMESPACE), scenario::NAME)
            .and_then(|ds| ds.status);
        if let Some(status) = status
            && status.desired_number_scheduled == nodes as i32
            && status.number_ready == status.desired_number_scheduled
            && status.updated_number_scheduled == Some(status.desired_number_scheduled)
        {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            bail!("the oracle's DaemonSet did not roll out on {nodes} nodes");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Our first rollout of a size against the oracle's.
#[derive(Debug, Clone)]
pub struct OracleFigures {
    /// Nodes of the cluster.
    pub nodes: u32,
    /// Our makespan (the change to `successful`).
    pub ours: Duration,
    /// The oracle's makespan (its start write to the last pod ready).
    pub oracle: Duration,
}

impl OracleFigures {
    /// Ours over the oracle's.
    pub fn ratio(&self) -> f64 {
        self.ours.as_secs_f64() / self.oracle.as_secs_f64().max(f64::MIN_POSITIVE)
    }
}
