//! Rollouts of the Pods driver in virtual time (issue 17): the real controller deletes the old
//! pods of an `OnDelete` DaemonSet itself, through the steps
//! `[{nodes: 1}, {pause: 30s}, {nodes: 10%}]` (and the `{nodes: 100%}` every plan ends with) at
//! `maxUnavailable: 10%` after the canary.
//!
//! Per rollout: API requests by kind (pod DELETEs, DaemonSet writes, status writes, the rest),
//! the makespan and its ratio to the ideal. A rollout that deletes any pod more than once, or
//! any node's pod other than once, is an error: one DELETE per node updated.

#![expect(
    clippy::indexing_slicing,
    reason = "only serde_json::Value is indexed here: a missing key or index reads as Null, and \
              writes by index go to objects this module built"
)]

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use canary_kube_adapter::CanaryDaemonSet;
use canary_kube_adapter::observer::Stats;
use canary_sim::{Sim, Verb};
use canary_state_machine::Compatibility;
use daemonset_canary::demo::scenario::{self, Scenario};
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

use crate::report::KubeletTimes;
use crate::rollout::{healthy, roll_out, rounds, wait_for};

/// The pause of the step plan.
pub const PAUSE: Duration = Duration::from_secs(30);

/// What one Pods-driver rollout cost and how long it took.
#[derive(Debug, Clone)]
pub struct PodsFigures {
    /// Nodes of the cluster.
    pub nodes: u32,
    /// Pod DELETE requests of the controller.
    pub pod_deletes: u64,
    /// DaemonSet writes (the template, `OnDelete`).
    pub daemon_set_writes: u64,
    /// CanaryDaemonSet status writes.
    pub status_writes: u64,
    /// Event writes.
    pub event_writes: u64,
    /// Every API request of the controller (the harness's own one patch excluded).
    pub requests: u64,
    /// Virtual time from the change to `successful`.
    pub makespan: Duration,
}

/// The strategy of the benchmark's CanaryDaemonSet.
fn strategy() -> serde_json::Value {
    json!({
        "compatibility": "Fixed",
        "driver": "Pods",
        "fastMaxUnavailable": "10%",
        "steps": [
            {"nodes": "1"},
            {"pause": {"duration": format!("{}s", PAUSE.as_secs())}},
            {"nodes": "10%"},
        ],
    })
}

/// The ideal makespan: the canary's replacement, the pause, then the 10% step's remaining
/// nodes and the rest in waves of `ceil(10% of nodes)`, each one replacement long.
pub fn ideal(nodes: u32, kubelet: &KubeletTimes) -> Duration {
    let budget = nodes.div_ceil(10).max(1);
    let ten_percent = nodes.div_ceil(10).max(1);
    let second = u32::from(ten_percent > 1);
    let rest = nodes.saturating_sub(ten_percent).div_ceil(budget);
    kubelet.replacement() * (1 + second + rest) + PAUSE
}

/// Reads the counters of one kind of request.
#[derive(Debug, Clone, Copy)]
struct Counters {
    pod_deletes: u64,
    daemon_set_writes: u64,
    status_writes: u64,
    event_writes: u64,
    requests: u64,
    stats_deletions: u64,
}

impl Counters {
    fn read(stats: &Stats, sim: &Sim) -> Self {
        let requests = sim.requests();
        Self {
            pod_deletes: requests.count(Verb::Delete, "pods"),
            daemon_set_writes: requests.writes_to("daemonsets"),
            status_writes: requests.writes_to("canarydaemonsets/status"),
            event_writes: requests.writes_to("events"),
            requests: requests.total(),
            stats_deletions: stats.pod_deletions(),
        }
    }
}

/// Installs `v1` with the Pods driver on `nodes` nodes, then runs `rollouts` healthy rollouts.
/// Call on a current-thread runtime with a paused clock.
pub async fn run(nodes: u32, rollouts: u32, seed: u64) -> Result<Vec<PodsFigures>> {
    let scenario = healthy(nodes, seed).await?;
    let mut manifest = scenario::manifest(Compatibility::Fixed, "v1", "healthy");
    manifest["spec"]["strategy"] = strategy();
    let object: CanaryDaemonSet = serde_json::from_value(manifest)
        .context("the benchmark's CanaryDaemonSet does not match the CRD types")?;
    let api: Api<CanaryDaemonSet> = Api::namespaced(scenario.sim().client(), scenario::NAMESPACE);
    let transitions = scenario.observer().subscribe();
    api.create(&PostParams::default(), &object)
        .await
        .context("cannot create the CanaryDaemonSet")?;
    wait_for(transitions).await.context("installing v1")?;
    rounds(scenario, nodes, rollouts, one_rollout).await
}

async fn one_rollout(scenario: &Scenario, nodes: u32, version: &str) -> Result<PodsFigures> {
    let sim = scenario.sim();
    let stats = scenario.observer().stats();
    let before = Counters::read(stats, sim);
    let manifest = scenario::manifest(Compatibility::Fixed, version, "healthy");
    let patch = json!({"spec": {"target": manifest["spec"]["target"], "template": manifest["spec"]["template"]}});
    let transitions = scenario.observer().subscribe();
    let makespan = roll_out(sim, &patch, transitions).await?;
    let after = Counters::read(stats, sim);
    let figures = PodsFigures {
        nodes,
        pod_deletes: after.pod_deletes - before.pod_deletes,
        daemon_set_writes: after.daemon_set_writes - before.daemon_set_writes,
        status_writes: after.status_writes - before.status_writes,
        event_writes: after.event_writes - before.event_writes,
        // The harness's own patch is a request too.
        requests: (after.requests - before.requests).saturating_sub(1),
        makespan,
    };
    let deleted = after.stats_deletions - before.stats_deletions;
    ensure!(
        figures.pod_deletes == u64::from(nodes) && deleted == u64::from(nodes),
        "{} pod DELETEs ({deleted} succeeded) for {nodes} nodes updated: one per node expected",
        figures.pod_deletes
    );
    Ok(figures)
}
