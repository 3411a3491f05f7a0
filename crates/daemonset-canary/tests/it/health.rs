//! The node-health gate (issue 46) on the real binary against `sim serve`, as a user meets it:
//! a release that breaks its node (`breaks-node`, or a `node-condition` the gate reads) fails
//! the Pods driver's rollout with `NodeUnhealthy` with only the canary's node ever on it, and
//! names the node; `onUnhealthy: Hold` pauses it instead; `onFailure: Rollback` puts the old
//! agent back on the node, which recovers. The neighbours gate likewise: a release that
//! breaks the pods beside it (`breaks-neighbours`, on `sim serve --neighbours-per-node 3`)
//! fails with `NeighboursDisrupted` on either driver, naming the canary's node; `Hold`
//! pauses; `Rollback` puts the old agent back and the neighbours recover.
use crate::support;
use support::KillOnDrop;

use support::rollout::{
    create, current_status, event_reasons, events, eventually, live_pods_on, node_of, node_ready,
    pause_mark, resume, runs, set_spec, until_phase, until_phase_counting,
};

use canary_kube_adapter::CanaryDaemonSet;
use canary_kube_adapter::crd::CanaryDaemonSetStatus;
use canary_state_machine::{Compatibility, Driver};
use daemonset_canary::demo::scenario::{NAME, NAMESPACE, manifest_for};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams};
use std::time::Duration;

/// `sim serve` with 3 nodes and `run` against it.
async fn on_sim(test: &str) -> (support::ServedSim, kube::Client, KillOnDrop) {
    on_sim_with(test, &[]).await
}

/// `sim serve` with 3 nodes and `extra` arguments, and `run` against it.
async fn on_sim_with(test: &str, extra: &[&str]) -> (support::ServedSim, kube::Client, KillOnDrop) {
    let mut args = vec!["--nodes", "3"];
    args.extend_from_slice(extra);
    support::controller_on_sim(test, &args, &[]).await
}

fn pods_manifest(version: &str, behavior: &str) -> serde_json::Value {
    manifest_for(Compatibility::Fixed, Driver::Pods, None, version, behavior)
}

thread_local! {
    /// The driver `roll_out_v2` uses (the Pods driver unless a test says otherwise).
    static DRIVER: std::cell::Cell<Driver> = const { std::cell::Cell::new(Driver::Pods) };
}

fn manifest(version: &str, behavior: &str) -> serde_json::Value {
    match DRIVER.with(std::cell::Cell::get) {
        Driver::Pods => pods_manifest(version, behavior),
        driver => manifest_for(Compatibility::Fixed, driver, None, version, behavior),
    }
}

/// Installs v1 (healthy), then rolls out v2 with `behavior` and `health`; returns the status
/// once it is in `phase` on the new generation, having checked that only the canary's node
/// ever ran v2 (every test here stops the release there).
async fn roll_out_v2(
    client: &kube::Client,
    behavior: &str,
    health: serde_json::Value,
    on_failure: Option<&str>,
    phase: &str,
) -> CanaryDaemonSetStatus {
    let api: Api<CanaryDaemonSet> = Api::namespaced(client.clone(), NAMESPACE);
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let generation = v1_then_v2(&api, manifest, behavior, health, on_failure).await;
    let mut most = 0;
    let status = until_phase_counting(&api, &pods, generation, phase, "v2", &mut most).await;
    assert_eq!(most, 1, "only the canary's node ever ran v2: {status:?}");
    status
}

/// [`roll_out_v2`] to `failed` with `reason`.
async fn fails_with(
    client: &kube::Client,
    behavior: &str,
    health: serde_json::Value,
    reason: &str,
) -> CanaryDaemonSetStatus {
    let status = roll_out_v2(client, behavior, health, None, "failed").await;
    assert_eq!(status.reason_name(), Some(reason), "{status:?}");
    status
}

/// `manifest`'s `version` with `behavior`, the gates' `health` and `on_failure`.
fn with_health(
    manifest: fn(&str, &str) -> serde_json::Value,
    version: &str,
    behavior: &str,
    health: &serde_json::Value,
    on_failure: Option<&str>,
) -> serde_json::Value {
    let mut object = manifest(version, behavior);
    object["spec"]["health"] = health.clone();
    if let Some(on_failure) = on_failure {
        object["spec"]["strategy"]["onFailure"] = on_failure.into();
    }
    object
}

/// A release that breaks its node: failed with `NodeUnhealthy`.
async fn breaks_its_node(client: &kube::Client) -> CanaryDaemonSetStatus {
    let health = serde_json::json!({});
    fails_with(client, "breaks-node=2s", health, "NodeUnhealthy").await
}

/// A release that breaks the pods beside it: failed with `NeighboursDisrupted`.
async fn breaks_its_neighbours(client: &kube::Client) -> CanaryDaemonSetStatus {
    let health = serde_json::json!({});
    fails_with(
        client,
        "breaks-neighbours=2s",
        health,
        "NeighboursDisrupted",
    )
    .await
}

/// `onFailure: Rollback`.
const ROLLBACK: Option<&str> = Some("Rollback");

/// [`roll_out_v2`] with `onUnhealthy: Hold`: paused, with no failure reason.
async fn held(client: &kube::Client, behavior: &str) -> CanaryDaemonSetStatus {
    let hold = serde_json::json!({"onUnhealthy": "Hold"});
    let status = roll_out_v2(client, behavior, hold, None, "paused").await;
    assert_eq!(status.reason_name(), None, "{status:?}");
    status
}

/// Still `paused` 3 s later (a hold moves nothing): the status.
async fn still_paused(client: &kube::Client) -> CanaryDaemonSetStatus {
    tokio::time::sleep(Duration::from_secs(3)).await;
    let api: Api<CanaryDaemonSet> = Api::namespaced(client.clone(), NAMESPACE);
    let status = current_status(&api).await;
    assert_eq!(status.phase_name(), Some("paused"), "{status:?}");
    status
}

/// Creates `v1` of `manifest` (healthy) with `health` and `on_failure`, waits for it to end
/// `successful`, then asks for `v2` with `behavior` and the same settings: returns v2's
/// generation.
async fn v1_then_v2(
    api: &Api<CanaryDaemonSet>,
    manifest: fn(&str, &str) -> serde_json::Value,
    behavior: &str,
    health: serde_json::Value,
    on_failure: Option<&str>,
) -> Option<i64> {
    let v1 = with_health(manifest, "v1", "healthy", &health, on_failure);
    until_phase(api, create(api, v1).await, "successful").await;
    let v2 = with_health(manifest, "v2", behavior, &health, on_failure);
    set_spec(api, &v2).await
}

/// Sets canary-sim's `not-ready` mark on `node` (its Ready condition turns False), or takes it
/// away with `Null`.
async fn set_not_ready(nodes: &Api<Node>, node: &str, value: serde_json::Value) {
    let patch = serde_json::json!({"metadata": {"annotations": {"sim.canary.daemonset.dev/not-ready": value}}});
    nodes
        .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

/// The nodes whose Ready condition is not True.
async fn not_ready(client: &kube::Client) -> Vec<String> {
    let nodes = node_ready(client).await.into_iter();
    nodes
        .filter(|(_, ready)| ready != "True")
        .map(|(name, _)| name)
        .collect()
}

/// The number of events with `reason`.
async fn events_with_reason(client: &kube::Client, reason: &str) -> usize {
    event_reasons(client)
        .await
        .iter()
        .filter(|said| *said == reason)
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_that_breaks_its_node_fails_on_the_canary_node_and_names_it() {
    let (_sim, client, _run) = on_sim("health-breaks-node").await;
    let status = breaks_its_node(&client).await;
    let message = status.message.unwrap_or_default();
    assert!(
        message.contains("turned unhealthy after its agent pod was updated"),
        "{message}"
    );
    assert!(
        message.contains("(Ready False, KubeletNotReady"),
        "{message}"
    );
    let broken = not_ready(&client).await;
    assert_eq!(broken.len(), 1, "{broken:?}");
    assert!(message.contains(&broken[0]), "the node is named: {message}");
}

/// The MaxUnavailable driver: the DaemonSet controller replaces the pods, held (`OnDelete`)
/// while the canary soaks, so the broken canary node is the only one on the release too.
#[tokio::test(flavor = "current_thread")]
async fn the_max_unavailable_driver_stops_on_the_canary_node_too() {
    DRIVER.with(|driver| driver.set(Driver::MaxUnavailable));
    let (_sim, client, _run) = on_sim("health-breaks-node-mu").await;
    let status = breaks_its_node(&client).await;
    assert_eq!(status.unhealthy_node_count, Some(1), "{status:?}");
    // The DaemonSet controller is held: it replaces nothing more.
    let daemon_sets: Api<k8s_openapi::api::apps::v1::DaemonSet> =
        Api::namespaced(client.clone(), NAMESPACE);
    let ds = daemon_sets.get(NAME).await.unwrap();
    let strategy = ds
        .spec
        .and_then(|s| s.update_strategy)
        .and_then(|s| s.type_);
    assert_eq!(strategy.as_deref(), Some("OnDelete"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_condition_the_gate_reads_fails_the_rollout_and_one_it_does_not_read_does_not() {
    let (_sim, client, _run) = on_sim("health-node-condition").await;
    let status = fails_with(
        &client,
        "node-condition=KernelDeadlock@2s",
        serde_json::json!({"nodeConditions": ["KernelDeadlock"], "canarySoak": "10s"}),
        "NodeUnhealthy",
    )
    .await;
    let message = status.message.unwrap_or_default();
    assert!(
        message.contains("(KernelDeadlock True, DockerHung"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_unhealthy_hold_pauses_the_rollout_instead() {
    let (_sim, client, _run) = on_sim("health-hold").await;
    held(&client, "breaks-node=2s").await;
    // Held: nothing moves while the node is broken.
    still_paused(&client).await;
    let warned = events_with_reason(&client, "NodeUnhealthy").await;
    assert_eq!(warned, 1, "one Warning naming the node");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_failure_rollback_puts_the_old_agent_back_and_the_node_recovers() {
    let (_sim, client, _run) = on_sim("health-rollback").await;
    roll_out_v2(
        &client,
        "breaks-node=2s",
        serde_json::json!({}),
        ROLLBACK,
        "rolledBack",
    )
    .await;
    eventually(
        Duration::from_secs(60),
        "the node never recovered",
        async || {
            let nodes = node_ready(&client).await;
            if nodes.iter().all(|(_, ready)| ready == "True") {
                Ok(())
            } else {
                Err(nodes)
            }
        },
    )
    .await;
}

/// Issue 46: a `breaks-node` release fails (`onFailure: Fail`) leaving its nodes NotReady
/// (canary-sim keeps them so until its pod is gone); the fixed release after it replaces the
/// broken nodes' agents, and ends `successful` with every node Ready, every pod on it and none
/// deferred. The MaxUnavailable driver's DaemonSet controller replaces an unavailable old pod
/// first. The Pods driver defers them (a node unhealthy before its update): not yet healed
/// (the rule tried, every node NotReady since after its agent's creation, also replaced nodes
/// broken for another reason, which the wave-2 contract defers).
async fn a_newer_release_heals_the_nodes_the_failed_one_broke(driver: Driver, test: &str) {
    DRIVER.with(|cell| cell.set(driver));
    let (_sim, client, _run) = on_sim(test).await;
    let api: Api<CanaryDaemonSet> = Api::namespaced(client.clone(), NAMESPACE);
    let health = serde_json::json!({"canarySoak": "0s"});
    // Not `roll_out_v2`: with no soak, v2 may reach more than the canary's node.
    let generation = v1_then_v2(&api, manifest, "breaks-node=3s", health.clone(), None).await;
    let failed = until_phase(&api, generation, "failed").await;
    assert_eq!(failed.reason_name(), Some("NodeUnhealthy"), "{failed:?}");
    // Every node v2 reached stays broken while v2 runs there.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let broken = not_ready(&client).await;
    assert!(!broken.is_empty(), "v2 broke no node");
    let on_v2 = node_on(&client, "v2").await;
    assert!(
        broken.iter().all(|node| on_v2.contains(node)),
        "{broken:?} {on_v2:?}"
    );
    let v3 = with_health(manifest, "v3", "healthy", &health, None);
    let status = until_phase(&api, set_spec(&api, &v3).await, "successful").await;
    assert!(status.deferred_nodes.is_empty(), "{status:?}");
    assert_eq!(status.deferred_node_count.unwrap_or(0), 0, "{status:?}");
    let what = format!("not healed (broken by v2: {broken:?})");
    eventually(Duration::from_secs(60), &what, async || {
        let nodes = node_ready(&client).await;
        let on_v3 = node_on(&client, "v3").await;
        if nodes.iter().all(|(_, ready)| ready == "True") && on_v3.len() == nodes.len() {
            Ok(())
        } else {
            Err((nodes, on_v3))
        }
    })
    .await;
}

#[tokio::test(flavor = "current_thread")]
async fn max_unavailable_a_newer_release_heals_the_nodes_the_failed_one_broke() {
    a_newer_release_heals_the_nodes_the_failed_one_broke(Driver::MaxUnavailable, "health-heal-mu")
        .await;
}

/// The neighbour pods of `sim serve --neighbours-per-node`, by node: how many are ready of
/// how many.
async fn neighbours_ready(client: &kube::Client) -> Vec<(String, usize, usize)> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "neighbours");
    let mut by_node = std::collections::BTreeMap::<String, (usize, usize)>::new();
    for pod in pods.list(&ListParams::default()).await.unwrap().items {
        let node = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default();
        let ready = pod
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        let entry = by_node.entry(node).or_default();
        entry.0 += usize::from(ready);
        entry.1 += 1;
    }
    by_node
        .into_iter()
        .map(|(node, (ready, all))| (node, ready, all))
        .collect()
}

/// The nodes whose agent runs `version` (terminating pods too).
async fn node_on(client: &kube::Client, version: &str) -> Vec<String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    pods.list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|pod| runs(pod, version))
        .filter_map(node_of)
        .collect()
}

const NEIGHBOURS: [&str; 2] = ["--neighbours-per-node", "3"];

/// The CNI that is Ready but breaks pod networking, on the Pods driver: the canary's three
/// neighbours lose readiness during its soak; the rollout fails before any other node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_that_breaks_its_neighbours_fails_on_the_canary_node_and_names_it() {
    let (_sim, client, _run) = on_sim_with("neighbours-pods", &NEIGHBOURS).await;
    let status = breaks_its_neighbours(&client).await;
    let canary = node_on(&client, "v2").await;
    assert_eq!(canary.len(), 1, "{canary:?}");
    let message = status.message.clone().unwrap_or_default();
    assert!(message.contains(&canary[0]), "the node is named: {message}");
    assert!(message.contains("(Neighbours 3/3"), "{message}");
    let named: Vec<&str> = status
        .unhealthy_nodes
        .iter()
        .map(|n| n.name.as_str())
        .collect();
    assert_eq!(named, [canary[0].as_str()]);
    assert_eq!(status.unhealthy_nodes[0].reason, "NeighboursDisrupted");
    assert!(
        status.unhealthy_nodes[0]
            .message
            .contains("baseline: 0 of 2 nodes not updated"),
        "{:?}",
        status.unhealthy_nodes[0]
    );
}

/// The same release on the MaxUnavailable driver fails with the same reason during the
/// canary's soak (the DaemonSet controller held), with the canary's node alone on v2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_unavailable_a_release_that_breaks_its_neighbours_fails() {
    let (_sim, client, _run) = on_sim_with("neighbours-max-unavailable", &NEIGHBOURS).await;
    DRIVER.with(|driver| driver.set(Driver::MaxUnavailable));
    let status = breaks_its_neighbours(&client).await;
    assert!(!status.unhealthy_nodes.is_empty(), "{status:?}");
    assert_eq!(status.unhealthy_nodes[0].reason, "NeighboursDisrupted");
    let on_v2 = node_on(&client, "v2").await;
    assert!(
        status
            .unhealthy_nodes
            .iter()
            .all(|n| on_v2.contains(&n.name)),
        "the nodes named run v2: {on_v2:?} {status:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_unhealthy_hold_pauses_on_disrupted_neighbours() {
    let (_sim, client, _run) = on_sim_with("neighbours-hold", &NEIGHBOURS).await;
    held(&client, "breaks-neighbours=2s").await;
    // The demo's steps pause after the canary's (its soak): the hold comes within it.
    let reasons = eventually(Duration::from_secs(60), "never held", async || {
        let reasons = event_reasons(&client).await;
        if reasons.iter().any(|r| r == "NeighboursDisrupted") {
            Ok(reasons)
        } else {
            Err(reasons)
        }
    })
    .await;
    let warned = reasons
        .iter()
        .filter(|reason| *reason == "NeighboursDisrupted")
        .count();
    assert_eq!(warned, 1, "one Warning naming the node: {reasons:?}");
    // Held: nothing moves while the neighbours are broken.
    let status = still_paused(&client).await;
    let api: Api<CanaryDaemonSet> = Api::namespaced(client.clone(), NAMESPACE);
    assert_eq!(status.held, Some(true), "{status:?}");
    assert_eq!(status.reason_name(), None, "{status:?}");
    assert_eq!(node_on(&client, "v2").await.len(), 1, "only the canary");
    assert_eq!(status.unhealthy_nodes.len(), 1, "{status:?}");
    // A person's to end, as the node gate's hold is: the controller set the pause mark.
    let cds = api.get(NAME).await.unwrap();
    let mark = pause_mark(&cds);
    assert_eq!(mark.as_deref(), Some("onUnhealthy"), "{:?}", cds.metadata);
    // A person resumes (`daemonset-canary resume`: the mark removed): the rollout goes on to
    // the next nodes, although the canary's neighbours are still disrupted: the node the
    // resume answered (`status.unhealthyAnswered`) holds it no more.
    let canary = node_on(&client, "v2").await;
    resume(&api).await;
    let what = format!("held again for the answered node {canary:?}");
    let status = eventually(Duration::from_secs(90), &what, async || {
        let status = current_status(&api).await;
        let on_v2 = node_on(&client, "v2").await;
        if on_v2.len() > canary.len() {
            Ok(status)
        } else {
            Err(status)
        }
    })
    .await;
    assert!(status.unhealthy_answered.is_some(), "{status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_failure_rollback_puts_the_old_agent_back_and_the_neighbours_recover() {
    let (_sim, client, _run) = on_sim_with("neighbours-rollback", &NEIGHBOURS).await;
    roll_out_v2(
        &client,
        "breaks-neighbours=2s",
        serde_json::json!({}),
        ROLLBACK,
        "rolledBack",
    )
    .await;
    let what = "the neighbours never recovered";
    eventually(Duration::from_secs(60), what, async || {
        let neighbours = neighbours_ready(&client).await;
        if neighbours.len() == 3 && neighbours.iter().all(|(_, ready, all)| ready == all) {
            Ok(())
        } else {
            Err(neighbours)
        }
    })
    .await;
}

/// `onUnhealthy: Hold` is a person's to end: the node that held the rollout recovering does
/// not resume it (the hold sets the pause mark, as `pause` does); `resume` (the mark removed)
/// goes on, and the node it answered holds it no more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_unhealthy_hold_stays_paused_after_the_node_recovers_until_a_person_resumes() {
    let (_sim, client, _run) = on_sim("health-hold-recovers").await;
    let api: Api<CanaryDaemonSet> = Api::namespaced(client.clone(), NAMESPACE);
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let nodes: Api<Node> = Api::all(client.clone());
    // A long soak: the canary's node is broken by hand while the canary soaks.
    let health = serde_json::json!({"onUnhealthy": "Hold", "canarySoak": "60s"});
    let generation = v1_then_v2(&api, manifest, "healthy", health, None).await;
    let canary_node = eventually(Duration::from_secs(60), "no canary pod", async || {
        let on_v2 = live_pods_on(&pods, "v2").await;
        on_v2.into_iter().find_map(node_of).ok_or("none on v2")
    })
    .await;
    // Well after the pod's creation (the gate's clock-skew margin is 5 s).
    tokio::time::sleep(Duration::from_secs(7)).await;
    set_not_ready(&nodes, &canary_node, "true".into()).await;
    // Held by the gate (a pause step of the Pods driver is `paused` too: wait for the hold).
    let status = eventually(Duration::from_secs(60), "never held", async || {
        let status = current_status(&api).await;
        if status.held == Some(true) && !status.unhealthy_nodes.is_empty() {
            Ok(status)
        } else {
            Err(status)
        }
    })
    .await;
    assert_eq!(status.phase_name(), Some("paused"), "{status:?}");
    assert_eq!(status.unhealthy_nodes[0].name, canary_node, "{status:?}");
    let mut most = 0;
    until_phase_counting(&api, &pods, generation, "paused", "v2", &mut most).await;
    assert_eq!(most, 1, "only the canary");
    assert_eq!(
        pause_mark(&api.get(NAME).await.unwrap()).as_deref(),
        Some("onUnhealthy")
    );
    // The node recovers: the rollout stays held, for a person to decide.
    set_not_ready(&nodes, &canary_node, serde_json::Value::Null).await;
    eventually(
        Duration::from_secs(30),
        "the node never recovered",
        async || {
            let nodes = node_ready(&client).await;
            let broken = |(node, ready): &(String, String)| *node == canary_node && ready != "True";
            if nodes.iter().any(broken) {
                Err(nodes)
            } else {
                Ok(())
            }
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let status = current_status(&api).await;
    assert_eq!(
        status.phase_name(),
        Some("paused"),
        "no resume by itself: {status:?}"
    );
    // A person resumes (`daemonset-canary resume`: the mark removed): the rollout goes on.
    resume(&api).await;
    let status = until_phase_counting(&api, &pods, generation, "successful", "v2", &mut most).await;
    assert!(status.unhealthy_answered.is_some(), "{status:?}");
}

/// The agent pod of `version` on `node`, if any (not terminating).
async fn pod_of_on(pods: &Api<Pod>, version: &str, node: &str) -> Option<Pod> {
    let on_version = live_pods_on(pods, version).await;
    on_version
        .into_iter()
        .find(|pod| pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
}

/// A late update (issue 46): a node NotReady during the rollout is deferred and the rollout
/// ends `successful`; the node recovers and the resting catch-up replaces its agent with the
/// release; the node then breaks within the window. The controller fails the generation with
/// `NodeUnhealthy`, names the node and says it was a late update.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_caught_up_after_successful_and_broken_fails_the_generation() {
    let (_sim, client, _run) = on_sim("health-late-update").await;
    let api: Api<CanaryDaemonSet> = Api::namespaced(client.clone(), NAMESPACE);
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let nodes: Api<Node> = Api::all(client.clone());
    let health = serde_json::json!({"canarySoak": "0s"});
    let v1 = with_health(pods_manifest, "v1", "healthy", &health, None);
    until_phase(&api, create(&api, v1).await, "successful").await;
    let mut names: Vec<String> = node_ready(&client)
        .await
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    names.sort();
    let late = names.last().cloned().expect("a node");
    set_not_ready(&nodes, &late, "true".into()).await;
    // v2 rolls out around the NotReady node: deferred, and the rollout ends `successful`.
    let v2 = with_health(pods_manifest, "v2", "healthy", &health, None);
    let generation = set_spec(&api, &v2).await;
    until_phase(&api, generation, "successful").await;
    assert!(pod_of_on(&pods, "v2", &late).await.is_none(), "deferred");
    // The node recovers; the catch-up replaces its agent with v2 (a late update).
    set_not_ready(&nodes, &late, serde_json::Value::Null).await;
    eventually(Duration::from_secs(90), "never caught up", async || {
        pod_of_on(&pods, "v2", &late).await.ok_or(&late)
    })
    .await;
    // The release breaks it, well after the pod's creation (the 5 s clock-skew margin).
    tokio::time::sleep(Duration::from_secs(7)).await;
    set_not_ready(&nodes, &late, "true".into()).await;
    let status = until_phase(&api, generation, "failed").await;
    assert_eq!(status.reason_name(), Some("NodeUnhealthy"), "{status:?}");
    assert_eq!(status.unhealthy_nodes[0].name, late, "{status:?}");
    let said = format!("{status:?}");
    assert!(said.contains("late update"), "{said}");
    // The Warning event (written beside the status) names the node and the late update.
    eventually(Duration::from_secs(20), "no Warning", async || {
        let warned: Vec<String> = events(&client)
            .await
            .into_iter()
            .filter(|event| event.reason.as_deref() == Some("NodeUnhealthy"))
            .filter_map(|event| event.note)
            .collect();
        let names_it = |note: &String| note.contains(&late) && note.contains("late update");
        if warned.iter().any(names_it) {
            Ok(())
        } else {
            Err(warned)
        }
    })
    .await;
    // The failure stays when the node recovers.
    set_not_ready(&nodes, &late, serde_json::Value::Null).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let status = current_status(&api).await;
    assert_eq!(status.phase_name(), Some("failed"), "{status:?}");
}
