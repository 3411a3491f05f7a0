//! The simulator's node and neighbour behaviours on the real control plane: bare pods bound to
//! KWOK nodes, whose `sim.canary.daemonset.dev/behavior` breaks their node, makes it report a
//! condition or breaks the pods beside it, played by KWOK's Stages and `daemonset-canary sim
//! kwok` (which `cargo xtask cluster up` runs); the taints are the real node lifecycle
//! controller's. No controller is involved: this is the test bed the health gates are tested on.

use crate::harness::{E2e, image_and_ready};
use canary_testkit::node_condition;
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};
use std::time::{Duration, Instant};

/// The taints the node lifecycle controller puts on a NotReady node.
const NOT_READY_TAINTS: [(&str, &str); 2] = [
    ("node.kubernetes.io/not-ready", "NoSchedule"),
    ("node.kubernetes.io/not-ready", "NoExecute"),
];

/// The taint of a node whose network is unavailable.
const NETWORK_UNAVAILABLE_TAINT: [(&str, &str); 1] =
    [("node.kubernetes.io/network-unavailable", "NoSchedule")];

/// The pods beside the breaker, on its node.
const NEIGHBOURS: [&str; 2] = ["web-1", "web-2"];

/// The Ready message of a node whose pod network a pod broke (canary-sim's
/// `cluster::effects::NOT_READY_MESSAGE`).
const NOT_READY_MESSAGE: &str = "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized";

impl E2e {
    fn pods_api(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// Creates bare pod `name` bound to `node`, one container of `image`, with `annotations`.
    pub(crate) async fn bare_pod(
        &self,
        name: &str,
        node: &str,
        image: &str,
        annotations: &[(&str, &str)],
        host_network: bool,
    ) {
        let annotations: serde_json::Map<String, serde_json::Value> = annotations
            .iter()
            .map(|(k, v)| ((*k).to_owned(), serde_json::json!(v)))
            .collect();
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "annotations": annotations},
            "spec": {
                "nodeName": node,
                "hostNetwork": host_network,
                "containers": [{"name": "main", "image": image}],
            },
        }))
        .unwrap();
        self.pods_api()
            .create(&PostParams::default(), &pod)
            .await
            .unwrap();
    }

    async fn node(&self, name: &str) -> Node {
        Api::<Node>::all(self.client.clone())
            .get(name)
            .await
            .unwrap()
    }

    async fn pod(&self, name: &str) -> Option<Pod> {
        self.pods_api().get_opt(name).await.unwrap()
    }

    async fn delete_pod(&self, name: &str) {
        self.pods_api()
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
    }

    /// The scenario's two nodes: the last one, and the one before.
    async fn spare_nodes(&self) -> (String, String) {
        let mut names = self.node_names().await;
        assert!(names.len() >= 2, "needs two nodes: {names:?}");
        let last = names.pop().unwrap();
        (last, names.pop().unwrap())
    }

    /// Waits until `node`'s condition `type_` is `status` and it carries every one of `taints`
    /// (`tainted`) or none of them.
    async fn wait_node(
        &self,
        node: &str,
        (type_, status): (&str, &str),
        taints: &[(&str, &str)],
        tainted: bool,
    ) {
        let what = format!("{node}: {type_} {status}, tainted {tainted} with {taints:?}");
        self.wait_for(&what, Duration::from_secs(60), || async {
            let node = self.node(node).await;
            status_of(&node, type_) == status
                && taints
                    .iter()
                    .all(|(key, effect)| has_taint(&node, key, effect) == tainted)
        })
        .await;
    }

    /// Whether every one of the pods `names` is `wanted` (each must exist).
    async fn all_pods(&self, names: &[&str], wanted: impl Fn(&Pod) -> bool) -> bool {
        for name in names {
            if !wanted(&self.pod(name).await.unwrap()) {
                return false;
            }
        }
        true
    }

    /// Waits until the pod is Ready; returns when that was seen.
    pub(crate) async fn wait_pod_ready(&self, name: &str) -> Instant {
        self.wait_for(
            &format!("pod {name} Ready"),
            Duration::from_secs(60),
            || async { self.pod(name).await.as_ref().is_some_and(pod_ready) },
        )
        .await;
        Instant::now()
    }
}

/// Two KWOK nodes and no controller: the scenario's, and its two nodes (the last, the one
/// before).
async fn test_bed(scenario: &str) -> (E2e, (String, String)) {
    let e2e = E2e::isolated(scenario)
        .nodes(2)
        .without_controller()
        .start()
        .await;
    let nodes = e2e.spare_nodes().await;
    (e2e, nodes)
}

fn status_of(node: &Node, type_: &str) -> String {
    node_condition(node, type_)
        .map(|c| c.status)
        .unwrap_or_default()
}

fn has_taint(node: &Node, key: &str, effect: &str) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| t.iter().any(|t| t.key == key && t.effect == effect))
}

fn pod_ready(pod: &Pod) -> bool {
    image_and_ready(pod).1
}

/// `(restartCount, lastState.terminated.exitCode)` of the first container.
fn restarts(pod: &Pod) -> (i32, Option<i32>) {
    let status = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.first());
    (
        status.map_or(0, |c| c.restart_count),
        status
            .and_then(|c| c.last_state.as_ref())
            .and_then(|s| s.terminated.as_ref())
            .map(|t| t.exit_code),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: run with `cargo xtask e2e`"]
async fn a_pod_that_breaks_its_node_takes_the_kwok_node_not_ready_until_it_is_gone() {
    let (e2e, (target, _)) = test_bed("breaks-node").await;
    e2e.bare_pod(
        "gpu-driver",
        &target,
        "registry.example/gpu-driver:v2",
        &[("sim.canary.daemonset.dev/behavior", "breaks-node=5s")],
        true,
    )
    .await;
    let ready = e2e.wait_pod_ready("gpu-driver").await;
    assert_eq!(status_of(&e2e.node(&target).await, "Ready"), "True");
    e2e.wait_for(
        &format!("{target} NotReady"),
        Duration::from_secs(60),
        || async { status_of(&e2e.node(&target).await, "Ready") == "False" },
    )
    .await;
    let after = ready.elapsed();
    // Seen ready up to one poll (0.5 s) late, seen broken up to one poll late.
    assert!(
        after >= Duration::from_millis(4500),
        "NotReady {after:?} after the pod was seen Ready, not 5 s"
    );
    let broken = node_condition(&e2e.node(&target).await, "Ready").unwrap();
    assert_eq!(broken.reason.as_deref(), Some("KubeletNotReady"));
    assert_eq!(broken.message.as_deref(), Some(NOT_READY_MESSAGE));
    // The real node lifecycle controller taints it.
    e2e.wait_node(&target, ("Ready", "False"), &NOT_READY_TAINTS, true)
        .await;
    // KWOK's node Stages leave it NotReady (its node-initialize would make it Ready at once).
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(status_of(&e2e.node(&target).await, "Ready"), "False");
    assert!(pod_ready(&e2e.pod("gpu-driver").await.unwrap()));
    eprintln!("{target} NotReady {after:?} after its breaker was seen Ready");
    // Gone: the node recovers, the taints go.
    e2e.delete_pod("gpu-driver").await;
    e2e.wait_node(&target, ("Ready", "True"), &NOT_READY_TAINTS, false)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: run with `cargo xtask e2e`"]
async fn a_pod_with_a_node_condition_holds_it_on_the_kwok_node_until_it_is_gone() {
    let (e2e, (target, _)) = test_bed("node-condition").await;
    e2e.bare_pod(
        "cni",
        &target,
        "registry.example/cni:v2",
        &[(
            "sim.canary.daemonset.dev/behavior",
            "node-condition=NetworkUnavailable",
        )],
        true,
    )
    .await;
    e2e.wait_pod_ready("cni").await;
    let unavailable = ("NetworkUnavailable", "True");
    e2e.wait_node(&target, unavailable, &NETWORK_UNAVAILABLE_TAINT, true)
        .await;
    let set = node_condition(&e2e.node(&target).await, "NetworkUnavailable").unwrap();
    assert_eq!(set.reason.as_deref(), Some("NoRouteCreated"));
    assert_eq!(status_of(&e2e.node(&target).await, "Ready"), "True");
    // Longer than KWOK's node heartbeat (every 20 to 45 s), which would write it False.
    let held = Instant::now();
    while held.elapsed() < Duration::from_secs(50) {
        assert_eq!(
            status_of(&e2e.node(&target).await, "NetworkUnavailable"),
            "True",
            "undone after {:?}",
            held.elapsed()
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    e2e.delete_pod("cni").await;
    let available = ("NetworkUnavailable", "False");
    e2e.wait_node(&target, available, &NETWORK_UNAVAILABLE_TAINT, false)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: run with `cargo xtask e2e`"]
async fn a_pod_that_breaks_its_neighbours_fails_their_probes_until_it_is_gone() {
    let (e2e, (target, other)) = test_bed("breaks-neighbours").await;
    for (name, node) in [("web-1", &target), ("web-2", &target), ("far", &other)] {
        e2e.bare_pod(name, node, "registry.example/web:v1", &[], false)
            .await;
    }
    for name in ["web-1", "web-2", "far"] {
        e2e.wait_pod_ready(name).await;
    }
    e2e.bare_pod(
        "cni",
        &target,
        "registry.example/cni:v2",
        &[("sim.canary.daemonset.dev/behavior", "breaks-neighbours=5s")],
        true,
    )
    .await;
    e2e.wait_pod_ready("cni").await;
    e2e.wait_for(
        "the neighbours on the breaker's node not ready",
        Duration::from_secs(60),
        || e2e.all_pods(&NEIGHBOURS, |pod| !pod_ready(pod)),
    )
    .await;
    assert!(pod_ready(&e2e.pod("far").await.unwrap()));
    assert!(pod_ready(&e2e.pod("cni").await.unwrap()));
    // Their liveness probe fails too: killed 30 s later (exit 137) and restarted.
    e2e.wait_for("the neighbours restarted", Duration::from_secs(90), || {
        e2e.all_pods(&NEIGHBOURS, |pod| {
            let (count, exit) = restarts(pod);
            count >= 1 && exit == Some(137)
        })
    })
    .await;
    assert_eq!(restarts(&e2e.pod("far").await.unwrap()), (0, None));
    e2e.delete_pod("cni").await;
    e2e.wait_for(
        "the neighbours ready again",
        Duration::from_secs(120),
        || e2e.all_pods(&NEIGHBOURS, pod_ready),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: run with `cargo xtask e2e`"]
async fn a_kwok_node_pulls_an_image_once() {
    let (e2e, (target, _)) = test_bed("pull").await;
    // The image is new to every node: the pod's name makes it so.
    let image = format!("registry.example/pulled:{}", e2e.namespace);
    let pull = [("sim.canary.daemonset.dev/pull", "15s")];
    let created = Instant::now();
    e2e.bare_pod("first", &target, &image, &pull, false).await;
    let first = e2e.wait_pod_ready("first").await.duration_since(created);
    // The start delay (2 s), the pull (15 s), the ready delay (3 s).
    assert!(
        first >= Duration::from_secs(17),
        "Ready {first:?} after creation: no pull"
    );
    let created = Instant::now();
    e2e.bare_pod("second", &target, &image, &pull, false).await;
    let second = e2e.wait_pod_ready("second").await.duration_since(created);
    assert!(
        second < Duration::from_secs(12),
        "Ready {second:?} after creation: pulled again"
    );
    let events: Vec<String> = Api::<Event>::namespaced(e2e.client.clone(), &e2e.namespace)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|e| {
            format!(
                "{} {}: {}",
                e.involved_object.name.unwrap_or_default(),
                e.reason.unwrap_or_default(),
                e.message.unwrap_or_default()
            )
        })
        .collect();
    for expected in [
        format!("first Pulling: Pulling image {image:?}"),
        format!(
            "first Pulled: Successfully pulled image {image:?} in 15s (15s including waiting). Image size: 0 bytes."
        ),
        format!("second Pulled: Container image {image:?} already present on machine"),
    ] {
        assert!(events.contains(&expected), "no {expected:?} in {events:#?}");
    }
    eprintln!("first pod Ready after {first:?} (pulled), second after {second:?} (cached)");
}
