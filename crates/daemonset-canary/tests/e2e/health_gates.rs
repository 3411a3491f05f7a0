//! The node-health gate on the real control plane (issue 46), with the real controller: a
//! release whose pod takes its KWOK node NotReady (`breaks-node`, played by `daemonset-canary
//! sim kwok`) fails at its canary with `NodeUnhealthy`, naming that node, and nothing else
//! moves; a node NotReady before the update (by hand, the simulator's node annotation) is
//! deferred, never blamed, and the rollout ends `successful`; a release whose pod breaks the
//! pods beside it (`breaks-neighbours`) fails at its canary with `NeighboursDisrupted`, naming
//! that node, while the other nodes' pods stay Ready (the baseline). Short settings (a 20 s canary
//! soak, a 5 min window, four nodes) keep each scenario within a minute or two.

use crate::harness::{E2e, with_strategy};
use crate::recorder::Recorder;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{Patch, PatchParams};
use std::time::{Duration, Instant};

/// canary-sim's node annotation: NotReady while present (`cluster::effects`).
const NODE_NOT_READY_ANNOTATION: &str = "sim.canary.daemonset.dev/not-ready";

fn with_health(mut object: serde_json::Value) -> serde_json::Value {
    object["spec"]["health"] = serde_json::json!({"window": "5m", "canarySoak": "20s"});
    object
}

/// Rolls out v2 with `behavior` and waits for `failed`: checks that it failed with `reason`,
/// that one canary pod ever ran v2, and that the status and one Warning event name its node.
/// Returns the recorder (started before the update) and how long the failure took.
async fn fails_at_its_canary(e2e: &E2e, behavior: &str, reason: &str) -> (Recorder, Duration) {
    let recorder = e2e.record().await;
    let started = Instant::now();
    let generation = e2e
        .set_spec(&with_health(e2e.agent_json("v2", behavior)))
        .await;
    e2e.wait_phase_through(generation, "failed", &[], Duration::from_secs(180))
        .await;
    let failed_after = started.elapsed();
    let status = e2e.status().await;
    assert_eq!(status.reason_name(), Some(reason), "{status:?}");
    let canaries = recorder.pods_on("v2");
    assert_eq!(canaries.len(), 1, "pods that ran v2: {canaries:?}");
    let named: Vec<&str> = status
        .unhealthy_nodes
        .iter()
        .map(|n| n.name.as_str())
        .collect();
    assert_eq!(named, [canaries[0].node.as_str()], "{status:?}");
    let warnings = e2e.event_messages(reason);
    assert!(
        warnings.len() == 1 && warnings[0].contains(&canaries[0].node),
        "{warnings:?}"
    );
    (recorder, failed_after)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs `cargo xtask e2e`"]
async fn a_release_that_breaks_its_node_fails_at_its_canary_and_names_the_node() {
    let e2e = E2e::isolated("gate-breaks-node").nodes(4).start().await;
    e2e.install(
        &serde_json::from_value(with_health(e2e.agent_json("v1", "healthy"))).unwrap(),
        Duration::from_secs(120),
    )
    .await;
    let (recorder, failed_after) =
        fails_at_its_canary(&e2e, "breaks-node=3s", "NodeUnhealthy").await;
    // It stays there: nothing else is replaced, by the controller or the DaemonSet controller.
    tokio::time::sleep(Duration::from_secs(15)).await;
    assert_eq!(e2e.status().await.phase_name(), Some("failed"));
    assert_eq!(recorder.pods_on("v2").len(), 1);
    assert_eq!(
        e2e.version_counts().await,
        [("v1".into(), 3), ("v2".into(), 1)].into()
    );
    eprintln!("breaks-node: failed {failed_after:?} after the update");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs `cargo xtask e2e`"]
async fn a_node_not_ready_before_the_update_is_deferred_and_the_rollout_succeeds() {
    let e2e = E2e::isolated("not-ready-before").nodes(4).start().await;
    let agent = |version: &str| {
        with_health(with_strategy(
            e2e.agent_json(version, "healthy"),
            serde_json::json!({"driver": "Pods", "steps": [{"nodes": "1"}, {"nodes": "100%"}]}),
        ))
    };
    e2e.install(
        &serde_json::from_value(agent("v1")).unwrap(),
        Duration::from_secs(120),
    )
    .await;
    let node = e2e.node_names().await.pop().unwrap();
    let nodes: Api<Node> = Api::all(e2e.client.clone());
    let annotate = |value: serde_json::Value| serde_json::json!({"metadata": {"annotations": {NODE_NOT_READY_ANNOTATION: value}}});
    nodes
        .patch(
            &node,
            &PatchParams::default(),
            &Patch::Merge(&annotate(serde_json::json!("disk"))),
        )
        .await
        .unwrap();
    e2e.wait_for(
        &format!("{node} NotReady"),
        Duration::from_secs(60),
        || async { !crate::harness::node_ready(&nodes.get(&node).await.unwrap()) },
    )
    .await;
    let started = Instant::now();
    let generation = e2e.set_spec(&agent("v2")).await;
    e2e.wait_phase_through(generation, "successful", &[], Duration::from_secs(180))
        .await;
    let succeeded_after = started.elapsed();
    let status = e2e.status().await;
    assert!(status.unhealthy_nodes.is_empty(), "{status:?}");
    let deferred: Vec<&str> = status
        .deferred_nodes
        .iter()
        .map(|n| n.name.as_str())
        .collect();
    assert_eq!(deferred, [node.as_str()], "{status:?}");
    assert!(e2e.event_messages("NodeUnhealthy").is_empty());
    let versions = e2e.versions_by_node().await;
    assert_eq!(
        versions.get(&node).map(String::as_str),
        Some("v1"),
        "{versions:?}"
    );
    assert_eq!(
        versions.values().filter(|v| *v == "v2").count(),
        3,
        "{versions:?}"
    );
    nodes
        .patch(
            &node,
            &PatchParams::default(),
            &Patch::Merge(&annotate(serde_json::Value::Null)),
        )
        .await
        .unwrap();
    eprintln!("not-ready-before: successful {succeeded_after:?} after the update");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs `cargo xtask e2e`"]
async fn a_release_that_breaks_its_neighbours_fails_at_its_canary_and_names_the_node() {
    let e2e = E2e::isolated("gate-breaks-neighbours")
        .nodes(4)
        .start()
        .await;
    e2e.install(
        &serde_json::from_value(with_health(e2e.agent_json("v1", "healthy"))).unwrap(),
        Duration::from_secs(120),
    )
    .await;
    // Three workload pods beside the agent on every node, Ready before the update.
    let mut neighbours = Vec::new();
    for (n, node) in e2e.node_names().await.iter().enumerate() {
        for i in 0..3 {
            let name = format!("web-{n}-{i}");
            e2e.bare_pod(&name, node, "registry.example/web:v1", &[], false)
                .await;
            neighbours.push(name);
        }
    }
    for name in &neighbours {
        e2e.wait_pod_ready(name).await;
    }
    let (recorder, failed_after) =
        fails_at_its_canary(&e2e, "breaks-neighbours=3s", "NeighboursDisrupted").await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(e2e.status().await.phase_name(), Some("failed"));
    assert_eq!(recorder.pods_on("v2").len(), 1);
    eprintln!("breaks-neighbours: failed {failed_after:?} after the update");
}
