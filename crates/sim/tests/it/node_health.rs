//! Pods that break their node or the pods beside them, the neighbour pods they break, and
//! image pulls with a per-node cache: the cluster model end to end, in virtual time.

use std::collections::BTreeMap;
use std::time::Duration;

use canary_sim::cluster::effects::{
    NODE_CONDITIONS_ANNOTATION, NODE_NOT_READY_ANNOTATION, NOT_READY_MESSAGE,
};
use canary_sim::cluster::{
    BEHAVIOR_ANNOTATION, Cluster, ClusterConfig, KubeletConfig, NEIGHBOUR_LABEL,
    NEIGHBOURS_NAMESPACE, PULL_ANNOTATION,
};
use canary_sim::store::UpdateScope;
use canary_sim::{SimClock, Store};
use canary_testkit::{agent_daemonset, first_container_mut, node_condition};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Container, Event, Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

const NS: &str = "default";

fn start(config: ClusterConfig) -> (Store, Cluster) {
    let store = Store::new(SimClock::new());
    let cluster = Cluster::start(store.clone(), config);
    (store, cluster)
}

fn nodes(nodes: u32) -> ClusterConfig {
    ClusterConfig {
        nodes,
        ..ClusterConfig::default()
    }
}

/// A bare pod `name` bound to `node`, one container `main` of `image`, with `annotations`.
fn bare_pod(name: &str, node: &str, image: &str, annotations: &[(&str, &str)]) -> Pod {
    canary_testkit::bare_pod(NS, name, node, image, annotations)
}

fn behaving(name: &str, node: &str, behavior: &str) -> Pod {
    bare_pod(name, node, "agent:v1", &[(BEHAVIOR_ANNOTATION, behavior)])
}

/// `pod` owned by controller `uid` (a ReplicaSet, say).
fn owned_by(mut pod: Pod, uid: &str) -> Pod {
    pod.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "apps/v1".to_owned(),
        kind: "ReplicaSet".to_owned(),
        name: format!("rs-{uid}"),
        uid: uid.to_owned(),
        controller: Some(true),
        block_owner_deletion: None,
    }]);
    pod
}

fn get_pod(store: &Store, namespace: &str, name: &str) -> Pod {
    store
        .get::<Pod>(Some(namespace), name)
        .unwrap_or_else(|| panic!("pod {namespace}/{name} exists"))
}

fn get_node(store: &Store, name: &str) -> Node {
    store.get::<Node>(None, name).expect("node exists")
}

fn condition_status(store: &Store, node: &str, type_: &str) -> String {
    node_condition(&get_node(store, node), type_)
        .map(|c| c.status)
        .unwrap_or_default()
}

fn taint_keys(store: &Store, node: &str) -> Vec<String> {
    let mut keys: Vec<String> = get_node(store, node)
        .spec
        .and_then(|s| s.taints)
        .into_iter()
        .flatten()
        .map(|t| format!("{}:{}", t.key, t.effect))
        .collect();
    keys.sort();
    keys
}

/// When the pod's Ready condition last became True, if it is True.
fn ready_since(pod: &Pod) -> Option<Timestamp> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready" && c.status == "True")
        .and_then(|c| c.last_transition_time.as_ref().map(|t| t.0))
}

fn is_ready(pod: &Pod) -> bool {
    ready_since(pod).is_some()
}

/// `(restartCount, waiting reason, lastState.terminated.exitCode)` of the first container.
fn container_state(pod: &Pod) -> (i32, Option<String>, Option<i32>) {
    let status = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.first())
        .cloned()
        .unwrap_or_default();
    (
        status.restart_count,
        status.state.and_then(|s| s.waiting).and_then(|w| w.reason),
        status
            .last_state
            .and_then(|s| s.terminated)
            .map(|t| t.exit_code),
    )
}

fn waiting_reason(pod: &Pod) -> Option<String> {
    container_state(pod).1
}

/// Sleeps `seconds` of virtual time, then lets the cluster react.
async fn after(cluster: &Cluster, seconds: f64) {
    tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
    cluster.settle().await.unwrap();
}

/// Sleeps until `at` (the store's clock), then lets the cluster react.
async fn until(store: &Store, cluster: &Cluster, at: Timestamp) {
    let now = store.clock().now();
    let wait = now.duration_until(at);
    if wait.is_positive() {
        tokio::time::sleep(Duration::from_secs_f64(wait.as_secs_f64())).await;
    }
    cluster.settle().await.unwrap();
}

fn plus(at: Timestamp, seconds: f64) -> Timestamp {
    at.checked_add(SignedDuration::from_secs_f64(seconds))
        .unwrap_or(at)
}

#[tokio::test(start_paused = true)]
async fn breaks_node_takes_the_node_not_ready_after_its_delay_until_the_pod_is_gone() {
    let (store, cluster) = start(nodes(2));
    store
        .create(&bare_pod("web", "node-1", "web:v1", &[]))
        .unwrap();
    store
        .create(&behaving("gpu-driver", "node-1", "breaks-node=30s"))
        .unwrap();
    // Started (2 s) and ready (3 s), give or take the jitter.
    after(&cluster, 6.0).await;
    // (Times in objects are whole seconds, so the pod was ready up to a second after this.)
    let ready = ready_since(&get_pod(&store, NS, "gpu-driver")).expect("the breaker became ready");
    // Up to its delay, the node is fine; right after, NotReady the way a kubelet reports a
    // broken pod network.
    until(&store, &cluster, plus(ready, 29.9)).await;
    assert_eq!(condition_status(&store, "node-1", "Ready"), "True");
    until(&store, &cluster, plus(ready, 31.0)).await;
    let condition = node_condition(&get_node(&store, "node-1"), "Ready").unwrap();
    assert_eq!(condition.status, "False");
    assert_eq!(condition.reason.as_deref(), Some("KubeletNotReady"));
    assert_eq!(condition.message.as_deref(), Some(NOT_READY_MESSAGE));
    assert_eq!(
        condition.last_transition_time.map(|t| t.0),
        Some(plus(ready, 30.0))
    );
    assert_eq!(
        taint_keys(&store, "node-1"),
        [
            "node.kubernetes.io/not-ready:NoExecute",
            "node.kubernetes.io/not-ready:NoSchedule"
        ]
    );
    assert_eq!(condition_status(&store, "node-2", "Ready"), "True");
    // The kubelet still runs: the pods already there keep what it reports (the node
    // lifecycle controller marks pods not ready only when it finds a node Unknown), a
    // hostNetwork pod starts, a pod that needs the pod network waits in ContainerCreating.
    assert!(is_ready(&get_pod(&store, NS, "web")));
    assert!(is_ready(&get_pod(&store, NS, "gpu-driver")));
    store
        .create(&bare_pod("late-web", "node-1", "web:v1", &[]))
        .unwrap();
    let mut host = bare_pod("late-host", "node-1", "agent:v1", &[]);
    host.spec.as_mut().unwrap().host_network = Some(true);
    store.create(&host).unwrap();
    after(&cluster, 60.0).await;
    assert!(is_ready(&get_pod(&store, NS, "late-host")));
    let late = get_pod(&store, NS, "late-web");
    assert_eq!(waiting_reason(&late).as_deref(), Some("ContainerCreating"));
    // It stays NotReady for as long as the pod lives, whatever else writes Ready.
    cluster.set_node_ready("node-1", true).unwrap();
    cluster.settle().await.unwrap();
    assert_eq!(condition_status(&store, "node-1", "Ready"), "False");
    // Gone (deleted, then terminated by the kubelet that still runs): the node recovers,
    // its taints go, and the waiting pod starts.
    store.delete::<Pod>(Some(NS), "gpu-driver").unwrap();
    cluster.wait_idle().await.unwrap();
    assert!(store.get::<Pod>(Some(NS), "gpu-driver").is_none());
    assert_eq!(condition_status(&store, "node-1", "Ready"), "True");
    assert!(taint_keys(&store, "node-1").is_empty());
    assert!(is_ready(&get_pod(&store, NS, "late-web")));
    cluster.shutdown();
}

#[tokio::test(start_paused = true)]
async fn a_node_not_ready_for_another_reason_stays_so_when_its_breaker_goes() {
    let (store, cluster) = start(nodes(1));
    store
        .create(&behaving("gpu-driver", "node-1", "breaks-node=1s"))
        .unwrap();
    cluster.wait_idle().await.unwrap();
    assert_eq!(condition_status(&store, "node-1", "Ready"), "False");
    // The kubelet stops (the switch of `set_node_ready`) while the node is broken.
    store
        .modify::<Node>(None, "node-1", UpdateScope::Status, |node| {
            canary_sim::cluster::nodes::set_condition(
                node,
                "Ready",
                "Unknown",
                "NodeStatusUnknown",
                "Kubelet stopped posting node status.",
                Timestamp::UNIX_EPOCH,
            );
        })
        .unwrap();
    cluster.settle().await.unwrap();
    store.delete::<Pod>(Some(NS), "gpu-driver").unwrap();
    after(&cluster, 5.0).await;
    // No kubelet finishes the deletion, and the node stays as its kubelet left it.
    assert!(
        get_pod(&store, NS, "gpu-driver")
            .metadata
            .deletion_timestamp
            .is_some()
    );
    assert_eq!(condition_status(&store, "node-1", "Ready"), "Unknown");
    cluster.shutdown();
}

#[tokio::test(start_paused = true)]
async fn a_rollback_replaces_the_breaking_pods_and_their_nodes_recover() {
    let kubelet = KubeletConfig {
        image_behaviors: BTreeMap::from([(
            "agent:v2".to_owned(),
            "breaks-node=10s".parse().unwrap(),
        )]),
        ..KubeletConfig::default()
    };
    let (store, cluster) = start(ClusterConfig {
        nodes: 3,
        kubelet,
        ..ClusterConfig::default()
    });
    let mut ds = agent_daemonset(NS, "agent", "agent:v1", IntOrString::Int(1));
    store.create(&ds).unwrap();
    cluster.wait_idle().await.unwrap();
    ds = store.get::<DaemonSet>(Some(NS), "agent").unwrap();
    first_container_mut(&mut ds).image = Some("agent:v2".to_owned());
    store.update(&ds).unwrap();
    cluster.wait_idle().await.unwrap();
    // Every v2 pod broke its node; the DaemonSet controller counts the nodes it must not
    // schedule onto (the not-ready NoSchedule taint) as misscheduled, as Kubernetes does.
    for node in ["node-1", "node-2", "node-3"] {
        assert_eq!(condition_status(&store, node, "Ready"), "False", "{node}");
    }
    let status = store
        .get::<DaemonSet>(Some(NS), "agent")
        .and_then(|d| d.status)
        .unwrap();
    assert_eq!(status.desired_number_scheduled, 0);
    assert_eq!(status.number_misscheduled, 3);
    // Back to v1: the rolling update deletes the v2 pods, the nodes recover, v1 comes back.
    ds = store.get::<DaemonSet>(Some(NS), "agent").unwrap();
    first_container_mut(&mut ds).image = Some("agent:v1".to_owned());
    store.update(&ds).unwrap();
    cluster.wait_idle().await.unwrap();
    let pods: Vec<Pod> = store.list(Some(NS));
    assert_eq!(pods.len(), 3);
    for pod in &pods {
        let image = pod.spec.as_ref().unwrap().containers[0].image.clone();
        assert_eq!(image.as_deref(), Some("agent:v1"));
        assert!(is_ready(pod));
    }
    for node in ["node-1", "node-2", "node-3"] {
        assert_eq!(condition_status(&store, node, "Ready"), "True", "{node}");
        assert!(taint_keys(&store, node).is_empty(), "{node}");
    }
    cluster.shutdown();
}

#[tokio::test(start_paused = true)]
async fn node_condition_holds_the_condition_and_its_taint_while_the_pod_lives() {
    let (store, cluster) = start(nodes(2));
    store
        .create(&behaving(
            "cni",
            "node-1",
            "node-condition=NetworkUnavailable",
        ))
        .unwrap();
    store
        .create(&behaving(
            "kmod",
            "node-2",
            "slow-start=1s,node-condition=KernelDeadlock@20s",
        ))
        .unwrap();
    cluster.wait_idle().await.unwrap();
    let cni_ready = ready_since(&get_pod(&store, NS, "cni")).unwrap();
    let network = node_condition(&get_node(&store, "node-1"), "NetworkUnavailable").unwrap();
    assert_eq!(network.status, "True");
    assert_eq!(network.reason.as_deref(), Some("NoRouteCreated"));
    assert_eq!(network.last_transition_time.map(|t| t.0), Some(cni_ready));
    assert_eq!(
        taint_keys(&store, "node-1"),
        ["node.kubernetes.io/network-unavailable:NoSchedule"]
    );
    // The condition alone leaves Ready as it is.
    assert_eq!(condition_status(&store, "node-1", "Ready"), "True");
    let kmod_ready = ready_since(&get_pod(&store, NS, "kmod")).unwrap();
    let deadlock = node_condition(&get_node(&store, "node-2"), "KernelDeadlock").unwrap();
    assert_eq!(deadlock.status, "True");
    assert_eq!(deadlock.reason.as_deref(), Some("DockerHung"));
    assert_eq!(
        deadlock.last_transition_time.map(|t| t.0),
        Some(plus(kmod_ready, 20.0))
    );
    // node-problem-detector's conditions bring no taint.
    assert!(taint_keys(&store, "node-2").is_empty());
    for name in ["cni", "kmod"] {
        store.delete::<Pod>(Some(NS), name).unwrap();
    }
    cluster.wait_idle().await.unwrap();
    let network = node_condition(&get_node(&store, "node-1"), "NetworkUnavailable").unwrap();
    assert_eq!(
        (network.status.as_str(), network.reason.as_deref()),
        ("False", Some("RouteCreated"))
    );
    assert!(taint_keys(&store, "node-1").is_empty());
    assert_eq!(
        condition_status(&store, "node-2", "KernelDeadlock"),
        "False"
    );
    cluster.shutdown();
}

#[tokio::test(start_paused = true)]
async fn node_annotations_break_a_node_by_hand_and_removing_them_mends_it() {
    let (store, cluster) = start(nodes(1));
    let annotate = |annotations: Option<BTreeMap<String, String>>| {
        store
            .modify::<Node>(None, "node-1", UpdateScope::Main, |node| {
                node.metadata.annotations = annotations;
            })
            .unwrap();
    };
    annotate(Some(BTreeMap::from([
        (NODE_NOT_READY_ANNOTATION.to_owned(), "disk".to_owned()),
        (
            NODE_CONDITIONS_ANNOTATION.to_owned(),
            "ReadonlyFilesystem".to_owned(),
        ),
    ])));
    cluster.settle().await.unwrap();
    assert_eq!(condition_status(&store, "node-1", "Ready"), "False");
    assert_eq!(
        condition_status(&store, "node-1", "ReadonlyFilesystem"),
        "True"
    );
    annotate(None);
    cluster.settle().await.unwrap();
    assert_eq!(condition_status(&store, "node-1", "Ready"), "True");
    assert_eq!(
        condition_status(&store, "node-1", "ReadonlyFilesystem"),
        "False"
    );
    assert!(taint_keys(&store, "node-1").is_empty());
    cluster.shutdown();
}

#[tokio::test(start_paused = true)]
async fn breaks_neighbours_fails_the_probes_of_every_other_pod_on_its_node() {
    let (store, cluster) = start(ClusterConfig {
        nodes: 2,
        neighbours_per_node: 3,
        ..ClusterConfig::default()
    });
    // A CNI agent's pod breaks its neighbours; another pod of the same controller (its
    // surge twin, say) is spared, as is everything on the other node.
    store
        .create(&owned_by(
            behaving("cni-new", "node-1", "breaks-neighbours=10s"),
            "cni",
        ))
        .unwrap();
    store
        .create(&owned_by(behaving("cni-old", "node-1", "healthy"), "cni"))
        .unwrap();
    cluster.wait_idle().await.unwrap();
    let neighbours = |node: &str| -> Vec<Pod> {
        store
            .list::<Pod>(Some(NEIGHBOURS_NAMESPACE))
            .into_iter()
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
            .collect()
    };
    let broken_at = plus(ready_since(&get_pod(&store, NS, "cni-new")).unwrap(), 10.0);
    assert_eq!(neighbours("node-1").len(), 3);
    for pod in neighbours("node-1") {
        let ready = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "Ready").cloned())
            .unwrap();
        assert_eq!(ready.status, "False");
        assert_eq!(ready.reason.as_deref(), Some("ContainersNotReady"));
        assert_eq!(ready.last_transition_time.map(|t| t.0), Some(broken_at));
    }
    assert!(neighbours("node-2").iter().all(is_ready));
    assert!(is_ready(&get_pod(&store, NS, "cni-new")));
    assert!(is_ready(&get_pod(&store, NS, "cni-old")));
    // Their liveness probe fails too: killed 30 s later, restarted at once, killed again,
    // then in CrashLoopBackOff. (Times in objects are whole seconds: the break came up to a
    // second after `broken_at`.)
    until(&store, &cluster, plus(broken_at, 31.0)).await;
    for pod in neighbours("node-1") {
        assert_eq!(container_state(&pod).0, 1, "{:?}", pod.metadata.name);
        assert_eq!(container_state(&pod).2, Some(137));
        assert!(!is_ready(&pod));
    }
    until(&store, &cluster, plus(broken_at, 61.0)).await;
    for pod in neighbours("node-1") {
        assert_eq!(container_state(&pod).1.as_deref(), Some("CrashLoopBackOff"));
    }
    // A pod placed there meanwhile is broken from the start.
    store
        .create(&bare_pod("late-web", "node-1", "web:v1", &[]))
        .unwrap();
    after(&cluster, 20.0).await;
    let late = get_pod(&store, NS, "late-web");
    assert!(!is_ready(&late));
    assert_eq!(
        late.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Running")
    );
    // The breaker gone, they become ready again (after their back-off, for those in it).
    store.delete::<Pod>(Some(NS), "cni-new").unwrap();
    cluster.wait_idle().await.unwrap();
    assert!(neighbours("node-1").iter().all(is_ready));
    assert!(is_ready(&get_pod(&store, NS, "late-web")));
    assert!(
        neighbours("node-2")
            .iter()
            .all(|p| container_state(p).0 == 0)
    );
    cluster.shutdown();
}

#[tokio::test(start_paused = true)]
async fn neighbours_are_created_ready_on_every_node_and_on_nodes_added_later() {
    let (store, cluster) = start(ClusterConfig {
        nodes: 3,
        neighbours_per_node: 2,
        ..ClusterConfig::default()
    });
    cluster.settle().await.unwrap();
    cluster.add_node("extra").unwrap();
    cluster.settle().await.unwrap();
    let pods: Vec<Pod> = store.list(Some(NEIGHBOURS_NAMESPACE));
    assert_eq!(pods.len(), 8);
    let mut names: Vec<String> = pods
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    names.sort();
    assert_eq!(names[0], "extra-neighbour-1");
    assert_eq!(names[7], "node-3-neighbour-2");
    // Ready at once (no start in virtual time), no owner, labelled.
    for pod in &pods {
        assert!(is_ready(pod), "{:?}", pod.metadata.name);
        assert!(pod.metadata.owner_references.is_none());
        assert!(
            pod.metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.contains_key(NEIGHBOUR_LABEL))
        );
    }
    // Without the setting there are none.
    let (plain, plain_cluster) = start(nodes(3));
    plain_cluster.wait_idle().await.unwrap();
    assert!(plain.list::<Pod>(Some(NEIGHBOURS_NAMESPACE)).is_empty());
    cluster.shutdown();
    plain_cluster.shutdown();
}

/// `reason: message` of the kubelet events about `pod`, oldest first.
fn pod_events(store: &Store, pod: &str) -> Vec<String> {
    let mut events: Vec<Event> = store
        .list::<Event>(Some(NS))
        .into_iter()
        .filter(|e| e.involved_object.name.as_deref() == Some(pod))
        .collect();
    events.sort_by_key(|e| e.metadata.name.clone());
    events
        .iter()
        .map(|e| {
            format!(
                "{}: {}",
                e.reason.as_deref().unwrap_or_default(),
                e.message.as_deref().unwrap_or_default()
            )
        })
        .collect()
}

/// When the first container started running.
fn started_at(pod: &Pod) -> Option<Timestamp> {
    pod.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .first()?
        .state
        .as_ref()?
        .running
        .as_ref()?
        .started_at
        .as_ref()
        .map(|t| t.0)
}

/// Seconds from the pod's admission (`startTime`) to its container running.
fn start_seconds(pod: &Pod) -> f64 {
    let admitted = pod
        .status
        .as_ref()
        .and_then(|s| s.start_time.as_ref())
        .map(|t| t.0)
        .unwrap();
    admitted
        .duration_until(started_at(pod).unwrap())
        .as_secs_f64()
}

fn pulling() -> ClusterConfig {
    ClusterConfig {
        nodes: 2,
        kubelet: KubeletConfig {
            image_pull_times: BTreeMap::from([("agent:".to_owned(), Duration::from_secs(30))]),
            jitter: 0.0,
            ..KubeletConfig::default()
        },
        ..ClusterConfig::default()
    }
}

#[tokio::test(start_paused = true)]
async fn an_image_is_pulled_once_per_node_and_its_pods_show_it() {
    let (store, cluster) = start(pulling());
    store
        .create(&bare_pod("first", "node-1", "agent:v2", &[]))
        .unwrap();
    // While it pulls: Pending, ContainerCreating, the sandbox ready, no image id yet.
    after(&cluster, 10.0).await;
    let first = get_pod(&store, NS, "first");
    assert_eq!(
        first.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Pending")
    );
    assert_eq!(waiting_reason(&first).as_deref(), Some("ContainerCreating"));
    cluster.wait_idle().await.unwrap();
    // The start latency (2 s), then the pull (30 s).
    assert_eq!(start_seconds(&get_pod(&store, NS, "first")), 32.0);
    assert_eq!(
        pod_events(&store, "first"),
        [
            r#"Pulling: Pulling image "agent:v2""#,
            r#"Pulled: Successfully pulled image "agent:v2" in 30s (30s including waiting). Image size: 0 bytes."#,
        ]
    );
    // The node has it now; the other node does not.
    store
        .create(&bare_pod("second", "node-1", "agent:v2", &[]))
        .unwrap();
    store
        .create(&bare_pod("elsewhere", "node-2", "agent:v2", &[]))
        .unwrap();
    cluster.wait_idle().await.unwrap();
    assert_eq!(start_seconds(&get_pod(&store, NS, "second")), 2.0);
    assert_eq!(
        pod_events(&store, "second"),
        [r#"Pulled: Container image "agent:v2" already present on machine"#]
    );
    assert_eq!(start_seconds(&get_pod(&store, NS, "elsewhere")), 32.0);
    // An image without a pull time starts in the start latency and records nothing.
    store
        .create(&bare_pod("other", "node-1", "other:v1", &[]))
        .unwrap();
    cluster.wait_idle().await.unwrap();
    assert_eq!(start_seconds(&get_pod(&store, NS, "other")), 2.0);
    assert!(pod_events(&store, "other").is_empty());
    cluster.shutdown();
}

#[tokio::test(start_paused = true)]
async fn pulls_on_a_node_run_one_at_a_time_and_the_annotation_sets_their_length() {
    let (store, cluster) = start(pulling());
    // Two pods of one image at once: one pull, both wait for it.
    for name in ["a", "b"] {
        store
            .create(&bare_pod(name, "node-1", "agent:v2", &[]))
            .unwrap();
    }
    // Another image, 5 s by the annotation, asked just after: it waits for the first pull.
    after(&cluster, 0.5).await;
    store
        .create(&bare_pod(
            "c",
            "node-1",
            "agent:v3",
            &[(PULL_ANNOTATION, "5s")],
        ))
        .unwrap();
    cluster.wait_idle().await.unwrap();
    let started = |name| started_at(&get_pod(&store, NS, name)).unwrap();
    assert_eq!(started("a"), started("b"));
    assert_eq!(start_seconds(&get_pod(&store, NS, "a")), 32.0);
    // Asked at 2.5 s, it waits until 32 s for the node's pull of v2, then pulls 5 s.
    assert_eq!(
        started("a").duration_until(started("c")),
        SignedDuration::from_secs(5)
    );
    assert!(
        pod_events(&store, "c").iter().any(|e| e
            == r#"Pulled: Successfully pulled image "agent:v3" in 5s (34.5s including waiting). Image size: 0 bytes."#),
        "{:?}",
        pod_events(&store, "c")
    );
    cluster.shutdown();
}

#[tokio::test(start_paused = true)]
async fn a_short_lived_pod_pre_pulls_the_image_for_the_pods_after_it() {
    let (store, cluster) = start(pulling());
    // What a pre-pull pod does: the new image as an init container (it runs `true`), a
    // pause container to run; deleted by its owner once the image is pulled, or even before.
    let mut pre_pull = bare_pod("pre-pull", "node-1", "registry.k8s.io/pause:3.10", &[]);
    pre_pull.spec.as_mut().unwrap().init_containers = Some(vec![Container {
        name: "pull".to_owned(),
        image: Some("agent:v2".to_owned()),
        ..Container::default()
    }]);
    store.create(&pre_pull).unwrap();
    after(&cluster, 5.0).await;
    assert_eq!(
        pod_events(&store, "pre-pull"),
        [r#"Pulling: Pulling image "agent:v2""#]
    );
    store.delete::<Pod>(Some(NS), "pre-pull").unwrap();
    cluster.wait_idle().await.unwrap();
    // The pull went on: the agent's pod, 40 s later, starts without one.
    after(&cluster, 40.0).await;
    store
        .create(&bare_pod("agent", "node-1", "agent:v2", &[]))
        .unwrap();
    cluster.wait_idle().await.unwrap();
    assert_eq!(start_seconds(&get_pod(&store, NS, "agent")), 2.0);
    cluster.shutdown();
}

#[tokio::test(start_paused = true)]
async fn by_default_pulls_cost_nothing_and_write_no_events() {
    let (store, cluster) = start(nodes(2));
    store
        .create(&agent_daemonset(
            NS,
            "agent",
            "agent:v1",
            IntOrString::Int(1),
        ))
        .unwrap();
    cluster.wait_idle().await.unwrap();
    assert!(store.list::<Event>(Some(NS)).is_empty());
    assert!(store.list::<Pod>(Some(NEIGHBOURS_NAMESPACE)).is_empty());
    cluster.shutdown();
}
