//! The Pods driver's choice of nodes on labelled KWOK nodes: `canaryNodeSelector` picks the
//! canary, `topologyKey` takes the later steps zone by zone, and a node that is NotReady before
//! its turn is deferred (the rollout still ends `successful`, naming it) and updated once it is
//! back. Each scenario has its own nodes, so making one NotReady touches no other scenario.

use crate::audit;
use crate::harness::{E2e, KWOK_NODE_ANNOTATION, node_ready, with_strategy};
use crate::support::rollout::ready_since;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use std::collections::BTreeMap;
use std::time::Duration;

const ZONE: &str = "topology.kubernetes.io/zone";
const CANARY_LABEL: &str = "e2e.daemonset.dev/canary";

/// Nine nodes in three zones (`zone-a`: nodes 1 to 3, `zone-b`: 4 to 6, `zone-c`: 7 to 9), the
/// canary label on node 8. The canary goes to node 8; then zone-a whole (three at once, the
/// step's budget), then zone-b, then what is left of zone-c; a zone's pods are all Ready again
/// before the next zone loses one. The order is read from the API server's record of the
/// controller's pod deletions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs `cargo xtask e2e`"]
async fn canary_node_selector_then_zone_by_zone() {
    let zone_of = |index: u32| ["zone-a", "zone-b", "zone-c"][((index - 1) / 3) as usize];
    let e2e = E2e::isolated("zones")
        .nodes(9)
        .labels(move |index| {
            let mut labels = vec![(ZONE.to_owned(), zone_of(index).to_owned())];
            if index == 8 {
                labels.push((CANARY_LABEL.to_owned(), "yes".to_owned()));
            }
            labels
        })
        .start()
        .await;
    let strategy = serde_json::json!({
        "driver": "Pods",
        "canaryNodeSelector": {"matchLabels": {CANARY_LABEL: "yes"}},
        "topologyKey": ZONE,
        "steps": [{"nodes": "1"}, {"nodes": "100%", "maxUnavailable": "3"}]
    });
    let agent = |version: &str| with_strategy(e2e.agent_json(version, "healthy"), strategy.clone());
    e2e.install(
        &serde_json::from_value(agent("v1")).unwrap(),
        Duration::from_secs(120),
    )
    .await;
    let recorder = e2e.record().await;
    let upgraded = Timestamp::now();
    let generation = e2e.set_spec(&agent("v2")).await;
    e2e.wait_phase(generation, "successful", Duration::from_secs(240))
        .await;
    assert_eq!(e2e.version_counts().await, [("v2".into(), 9)].into());
    let node = |index: u32| format!("{}-{index}", e2e.namespace);
    assert_eq!(e2e.status().await.canary_nodes, [node(8)]);

    // The deletions the server recorded, in order, as (node, zone).
    let node_of: BTreeMap<String, String> = recorder
        .pods_on("v1")
        .into_iter()
        .map(|p| (p.name, p.node))
        .collect();
    let deletions: Vec<(String, Timestamp)> = audit::writes_in(&e2e.namespace)
        .into_iter()
        .filter(|w| w.verb == "delete" && w.resource() == "pods" && w.stage_timestamp > upgraded)
        .map(|w| {
            let node = node_of.get(w.name()).cloned().unwrap_or_else(|| {
                panic!("the controller deleted {}, which is no v1 pod", w.name())
            });
            (node, w.stage_timestamp)
        })
        .collect();
    let order: Vec<&str> = deletions.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(deletions.len(), 9, "one deletion per old pod: {order:?}");
    let zone_name = |name: &str| -> &'static str {
        let index: u32 = name.rsplit('-').next().unwrap().parse().unwrap();
        zone_of(index)
    };
    assert_eq!(order[0], node(8), "the canary first: {order:?}");
    let zones: Vec<&str> = order[1..].iter().map(|n| zone_name(n)).collect();
    assert_eq!(
        zones,
        [
            "zone-a", "zone-a", "zone-a", "zone-b", "zone-b", "zone-b", "zone-c", "zone-c"
        ],
        "zone by zone, in name order: {order:?}"
    );
    // A zone's new pods were all Ready (to the second the kubelet reports) before the next
    // zone's first deletion.
    let ready_since: BTreeMap<String, Timestamp> = e2e
        .pods()
        .await
        .iter()
        .filter_map(|pod| Some((pod.spec.as_ref()?.node_name.clone()?, ready_since(pod)?)))
        .collect();
    for (zone, next) in [("zone-a", "zone-b"), ("zone-b", "zone-c")] {
        let first_next = deletions
            .iter()
            .find(|(n, _)| zone_name(n) == next && *n != node(8))
            .map(|(_, at)| *at)
            .unwrap();
        for (name, ready) in ready_since.iter().filter(|(n, _)| zone_name(n) == zone) {
            assert!(
                ready.as_second() <= first_next.as_second(),
                "{name} ({zone}) Ready at {ready}, after {next}'s first deletion at {first_next}"
            );
        }
    }
}

/// `node` as a new object to create: its labels, annotations (the KWOK one only if `managed`),
/// pod CIDR, addresses and taints of its own (not the node lifecycle controller's), and, when
/// not `managed`, a Ready condition False.
async fn recreated(e2e: &E2e, node: &str, managed: bool) -> Node {
    let nodes: Api<Node> = Api::all(e2e.client.clone());
    let live = nodes.get(node).await.unwrap();
    let mut annotations = live.metadata.annotations.clone().unwrap_or_default();
    annotations.remove(KWOK_NODE_ANNOTATION);
    if managed {
        annotations.insert(KWOK_NODE_ANNOTATION.to_owned(), "fake".to_owned());
    }
    let mut spec = live.spec.clone().unwrap_or_default();
    spec.taints = spec.taints.map(|taints| {
        taints
            .into_iter()
            .filter(|t| !t.key.starts_with("node.kubernetes.io/"))
            .collect()
    });
    let now = Timestamp::now().to_string();
    let conditions = (!managed).then(|| {
        serde_json::json!([{
            "type": "Ready", "status": "False", "reason": "KubeletStopped",
            "message": "e2e: the kubelet stopped posting node status",
            "lastHeartbeatTime": now, "lastTransitionTime": now,
        }])
    });
    serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": node,
            "labels": live.metadata.labels,
            "annotations": annotations,
        },
        "spec": spec,
        "status": {
            "addresses": live.status.and_then(|s| s.addresses),
            "conditions": conditions,
        },
    }))
    .unwrap()
}

/// Deletes `node` and creates `replacement` at once (its pods stay: the pod garbage
/// collector waits 40 s before it deletes the pods of a node that is gone).
async fn replace_node(e2e: &E2e, node: &str, replacement: &Node) {
    let nodes: Api<Node> = Api::all(e2e.client.clone());
    nodes.delete(node, &Default::default()).await.unwrap();
    e2e.wait_for(
        &format!("{node} deleted"),
        Duration::from_secs(30),
        || async { nodes.get_opt(node).await.unwrap().is_none() },
    )
    .await;
    nodes
        .create(&Default::default(), replacement)
        .await
        .unwrap();
}

/// Takes `node` down as a dead kubelet would: nothing plays its kubelet any more (no
/// heartbeat, no pod status), and its Ready condition is False (the node lifecycle controller
/// taints it not-ready and marks its pods not ready). KWOK plays the kubelet of every node it
/// has seen with its annotation until it sees the node deleted (it takes no notice of the
/// annotation's removal), so the node is deleted and created again, at once, without it.
async fn take_down(e2e: &E2e, node: &str) {
    let replacement = recreated(e2e, node, false).await;
    replace_node(e2e, node, &replacement).await;
    let nodes: Api<Node> = Api::all(e2e.client.clone());
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(
        !node_ready(&nodes.get(node).await.unwrap()),
        "{node} is Ready again: something still plays its kubelet"
    );
}

/// Brings `node` back: created again with KWOK's annotation, KWOK plays its kubelet and
/// reports it Ready.
async fn bring_back(e2e: &E2e, node: &str) {
    let replacement = recreated(e2e, node, true).await;
    replace_node(e2e, node, &replacement).await;
    let nodes: Api<Node> = Api::all(e2e.client.clone());
    e2e.wait_for(
        &format!("{node} Ready again"),
        Duration::from_secs(60),
        || async { node_ready(&nodes.get(node).await.unwrap()) },
    )
    .await;
}

/// A node that goes NotReady before its update (its kubelet gone): the Pods driver leaves it
/// for later, finishes the other nodes and ends `successful`, naming it as deferred; once the
/// node is back, its pod is updated too and it is no longer deferred.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs `cargo xtask e2e`"]
async fn a_node_not_ready_before_its_update_is_deferred_and_updated_when_back() {
    let e2e = E2e::isolated("notready").nodes(6).start().await;
    let strategy = serde_json::json!({
        "driver": "Pods",
        "steps": [{"nodes": "1"}, {"nodes": "100%", "maxUnavailable": "2"}]
    });
    let agent = |version: &str| with_strategy(e2e.agent_json(version, "healthy"), strategy.clone());
    e2e.install(
        &serde_json::from_value(agent("v1")).unwrap(),
        Duration::from_secs(120),
    )
    .await;
    let down = format!("{}-6", e2e.namespace);
    take_down(&e2e, &down).await;

    let generation = e2e.set_spec(&agent("v2")).await;
    e2e.wait_phase(generation, "successful", Duration::from_secs(240))
        .await;
    let versions = e2e.versions_by_node().await;
    assert_eq!(
        versions.get(&down).map(String::as_str),
        Some("v1"),
        "{versions:?}"
    );
    assert_eq!(
        versions.values().filter(|v| *v == "v2").count(),
        5,
        "{versions:?}"
    );
    let status = e2e.status().await;
    assert_eq!(status.deferred_node_count, Some(1), "{status:?}");
    let deferred = &status.deferred_nodes;
    assert!(
        deferred
            .iter()
            .any(|d| d.name == down && d.reason == "NotReady"),
        "{deferred:?}"
    );
    assert!(!status.canary_nodes.contains(&down), "{status:?}");
    let ledger = String::from_utf8_lossy(
        &e2e.verb(crate::harness::Cli::Binary, &["status", "--nodes"])
            .stdout,
    )
    .into_owned();
    let line = ledger
        .lines()
        .find(|l| l.contains(&down))
        .unwrap_or_else(|| panic!("{down} not in the ledger:\n{ledger}"));
    assert!(line.contains("deferred"), "{ledger}");

    bring_back(&e2e, &down).await;
    e2e.wait_for(
        &format!("{down} updated once back"),
        Duration::from_secs(180),
        || async {
            let status = e2e.status().await;
            e2e.versions_by_node().await.get(&down).map(String::as_str) == Some("v2")
                && status.deferred_nodes.is_empty()
                && status.phase_name() == Some("successful")
                && status.updated_ready == 6
        },
    )
    .await;
}
