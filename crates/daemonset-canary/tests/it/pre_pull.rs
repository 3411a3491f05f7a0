//! Image pre-pull (issue 50) on the real binary against `sim serve`, as a user meets it: a
//! Pods-driver rollout whose pause pre-pulls the next step's nodes, with a 20 s pull of the
//! image (`sim.canary.daemonset.dev/pull`, at `--speed 10`): the replaced pods of the second
//! step start without a pull (their `Pulled` event says the image was already present), the
//! canary's pulls, and no pre-pull pod is left once the rollout is over.
use crate::support;

use canary_kube_adapter::CanaryDaemonSet;
use canary_kube_adapter::reconcile::PRE_PULL_LABEL;
use canary_state_machine::{Compatibility, Driver};
use daemonset_canary::demo::scenario::{NAME, NAMESPACE, manifest_for};
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use std::process::Stdio;
use std::time::{Duration, Instant};

/// The Pods driver, `[{nodes: 1}, {pause: 10s}]` (then every node), a 20 s pull, pre-pull on.
fn manifest(version: &str) -> serde_json::Value {
    let mut manifest = manifest_for(Compatibility::Fixed, Driver::Pods, None, version, "healthy");
    manifest["spec"]["strategy"]["steps"] =
        serde_json::json!([{"nodes": "1"}, {"pause": {"duration": "10s"}}]);
    manifest["spec"]["template"]["spec"]["template"]["metadata"]["annotations"]["sim.canary.daemonset.dev/pull"] =
        "20s".into();
    manifest["spec"]["prePull"] = serde_json::json!({"maxConcurrent": 2});
    manifest
}

async fn phase(api: &Api<CanaryDaemonSet>) -> (Option<String>, Option<i64>, Option<i64>) {
    let cds = api.get(NAME).await.unwrap();
    let status = cds.status.unwrap_or_default();
    (
        status.phase_name().map(str::to_owned),
        status.observed_generation,
        cds.metadata.generation,
    )
}

/// Waits (2 minutes at most) for `successful` on the current generation; meanwhile checks that
/// at most 2 pre-pull pods exist without their image, and returns the nodes pre-pulled.
async fn until_successful(client: &kube::Client) -> Vec<String> {
    let api: Api<CanaryDaemonSet> = Api::namespaced(client.clone(), NAMESPACE);
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut pre_pulled = Vec::new();
    loop {
        let listed = pods
            .list(&ListParams::default().labels(PRE_PULL_LABEL))
            .await
            .unwrap();
        let pulling = listed
            .items
            .iter()
            .filter(|pod| canary_testkit::pulling(pod))
            .count();
        assert!(pulling <= 2, "{pulling} pre-pull pods pulling at once");
        for pod in &listed.items {
            let node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
            if let Some(node) = node.filter(|n| !pre_pulled.contains(n)) {
                pre_pulled.push(node);
            }
        }
        let (phase, observed, generation) = phase(&api).await;
        if phase.as_deref() == Some("successful") && observed == generation {
            return pre_pulled;
        }
        assert!(Instant::now() < deadline, "not successful: {phase:?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_pre_pulls_so_the_next_steps_pods_start_without_a_pull() {
    let sim = support::serve_sim("pre-pull", &["--nodes", "3", "--speed", "10"]);
    let client = support::client_with_crd(&sim.kubeconfig).await;
    let _run = support::spawn_run(&sim.kubeconfig, Stdio::null());
    let api: Api<CanaryDaemonSet> = Api::namespaced(client.clone(), NAMESPACE);
    let v1: CanaryDaemonSet = serde_json::from_value(manifest("v1")).unwrap();
    api.create(&PostParams::default(), &v1).await.unwrap();
    let installed = until_successful(&client).await;
    assert!(installed.is_empty(), "a first install pre-pulls nothing");

    let v2 = manifest("v2");
    let patch = serde_json::json!({"spec": {"target": v2["spec"]["target"], "template": v2["spec"]["template"]}});
    api.patch(NAME, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    // The status moves on from the old generation's `successful` first.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut pre_pulled = until_successful(&client).await;
    pre_pulled.sort();

    let canary = api
        .get(NAME)
        .await
        .unwrap()
        .status
        .unwrap_or_default()
        .canary_nodes;
    assert_eq!(canary.len(), 1, "{canary:?}");
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let events: Vec<Event> = Api::<Event>::namespaced(client.clone(), NAMESPACE)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    let mut second_step = Vec::new();
    for pod in pods
        .list(&ListParams::default().labels(&format!("app.kubernetes.io/name={NAME}")))
        .await
        .unwrap()
        .items
    {
        let node = pod.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap();
        let pulled: Vec<&str> = events
            .iter()
            .filter(|e| {
                e.involved_object.name.as_deref() == Some(pod.name_any().as_str())
                    && e.reason.as_deref() == Some("Pulled")
            })
            .filter_map(|e| e.message.as_deref())
            .collect();
        let present = pulled
            .iter()
            .any(|m| m.contains("already present on machine"));
        if canary.contains(&node) {
            assert!(!present, "the canary pulls: {pulled:?}");
        } else {
            assert!(present, "{node} was pre-pulled: {pulled:?}");
            second_step.push(node);
        }
    }
    second_step.sort();
    assert_eq!(second_step.len(), 2);
    assert_eq!(pre_pulled, second_step, "exactly the next step's nodes");
    // Cleaned up with the window.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !pods
        .list(&ListParams::default().labels(PRE_PULL_LABEL))
        .await
        .unwrap()
        .items
        .is_empty()
    {
        assert!(Instant::now() < deadline, "pre-pull pods left");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
