//! The simulated DaemonSet controller and kubelets end to end, on the Store, in virtual time.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use canary_sim::cluster::{BEHAVIOR_ANNOTATION, Cluster, ClusterConfig, KubeletConfig};
use canary_sim::{EventKind, SimClock, Store, StoreEvent};
use canary_testkit::{agent_daemonset, first_container_mut, template_meta, template_meta_mut};
use k8s_openapi::api::apps::v1::{
    ControllerRevision, DaemonSet, DaemonSetStatus, DaemonSetUpdateStrategy,
};
use k8s_openapi::api::core::v1::{Pod, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::Deserialize;
use tokio::sync::broadcast;

const NS: &str = "default";

/// DaemonSet `name` in [`NS`]: one container `agent` of `image`.
fn daemonset(name: &str, image: &str, max_unavailable: IntOrString) -> DaemonSet {
    agent_daemonset(NS, name, image, max_unavailable)
}

fn start(nodes: u32, seed: u64) -> (Store, Cluster) {
    let store = Store::new(SimClock::new());
    let cluster = Cluster::start(
        store.clone(),
        ClusterConfig {
            nodes,
            seed,
            ..ClusterConfig::default()
        },
    );
    (store, cluster)
}

fn get_ds(store: &Store, name: &str) -> DaemonSet {
    store
        .get::<DaemonSet>(Some(NS), name)
        .expect("daemonset exists")
}

fn set_image(store: &Store, name: &str, image: &str) {
    let mut ds = get_ds(store, name);
    first_container_mut(&mut ds).image = Some(image.to_owned());
    store.update(&ds).expect("template updated");
}

/// A `NoSchedule` taint `key=value`.
fn no_schedule(key: &str, value: &str) -> Taint {
    Taint {
        key: key.to_owned(),
        value: Some(value.to_owned()),
        effect: "NoSchedule".to_owned(),
        time_added: None,
    }
}

/// The owner references of `pod`.
fn owners(pod: &Pod) -> impl Iterator<Item = &OwnerReference> {
    pod.metadata.owner_references.iter().flatten()
}

/// Creates DaemonSet `agent` at `agent:v1` with `max_unavailable`, waits until it runs on all
/// `nodes`, then sets its image to `agent:v2`.
async fn install_then_upgrade(store: &Store, cluster: &Cluster, nodes: i32, max_unavailable: &str) {
    store
        .create(&daemonset(
            "agent",
            "agent:v1",
            IntOrString::String(max_unavailable.to_owned()),
        ))
        .unwrap();
    cluster.wait_idle().await.unwrap();
    assert_rolled_out(store, "agent", nodes, "agent:v1");
    set_image(store, "agent", "agent:v2");
}

fn pods_of(store: &Store, ds: &str) -> Vec<Pod> {
    store
        .list::<Pod>(Some(NS))
        .into_iter()
        .filter(|p| owners(p).any(|o| o.name == ds))
        .collect()
}

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn image_of(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.containers[0].image.as_deref())
        .unwrap_or_default()
}

/// The rollout is complete: every desired pod is updated and available, observed.
fn assert_rolled_out(store: &Store, name: &str, desired: i32, image: &str) {
    let ds = get_ds(store, name);
    let status = ds.status.clone().expect("status written");
    assert_eq!(
        status.observed_generation, ds.metadata.generation,
        "{name}: generation observed"
    );
    assert_eq!(status.desired_number_scheduled, desired, "{name}: desired");
    assert_eq!(
        status.updated_number_scheduled,
        Some(desired),
        "{name}: updated"
    );
    assert_eq!(status.number_available, Some(desired), "{name}: available");
    assert_eq!(status.number_ready, desired, "{name}: ready");
    let pods = pods_of(store, name);
    assert_eq!(pods.len(), desired as usize, "{name}: one pod per node");
    assert!(
        pods.iter().all(|p| image_of(p) == image && is_ready(p)),
        "{name}: all pods new and ready"
    );
}

/// Replays store events: per node, the pods of one DaemonSet and whether each is ready
/// and not terminating. Records the most nodes without an available pod at once, counted
/// only after `from_rv`.
struct UnavailabilityTracker {
    rx: broadcast::Receiver<StoreEvent>,
    pods: HashMap<String, (String, bool)>,
    max_unavailable_seen: usize,
    replaced: BTreeSet<String>,
}

impl UnavailabilityTracker {
    fn new(store: &Store) -> Self {
        Self {
            rx: store.subscribe(),
            pods: HashMap::new(),
            max_unavailable_seen: 0,
            replaced: BTreeSet::new(),
        }
    }

    fn drain(&mut self, nodes: &BTreeSet<String>, from_rv: u64) {
        while let Ok(event) = self.rx.try_recv() {
            if event.key.plural != "pods" {
                continue;
            }
            match event.kind {
                EventKind::Deleted => {
                    self.pods.remove(&event.name);
                }
                _ => {
                    let pod = Pod::deserialize(event.object.as_ref()).unwrap();
                    let node = pod
                        .spec
                        .as_ref()
                        .and_then(|s| s.node_name.clone())
                        .unwrap_or_default();
                    let available = is_ready(&pod) && pod.metadata.deletion_timestamp.is_none();
                    if pod.metadata.deletion_timestamp.is_some() && event.resource_version > from_rv
                    {
                        self.replaced.insert(node.clone());
                    }
                    self.pods.insert(event.name.clone(), (node, available));
                }
            }
            if event.resource_version > from_rv {
                let available: BTreeSet<&String> = self
                    .pods
                    .values()
                    .filter(|(_, a)| *a)
                    .map(|(n, _)| n)
                    .collect();
                let unavailable = nodes.iter().filter(|n| !available.contains(n)).count();
                self.max_unavailable_seen = self.max_unavailable_seen.max(unavailable);
            }
        }
    }
}

/// Every one of the `nodes` pods is updated and available.
fn all_new(status: &DaemonSetStatus, nodes: u32) -> bool {
    status.updated_number_scheduled == Some(nodes as i32)
        && status.number_available == Some(nodes as i32)
}

/// Waits until the cluster is idle, then takes in what the tracker has not seen yet.
async fn settle(
    cluster: &Cluster,
    tracker: &mut UnavailabilityTracker,
    node_names: &BTreeSet<String>,
    from_rv: u64,
) {
    cluster.wait_idle().await.unwrap();
    tracker.drain(node_names, from_rv);
}

async fn rolling_update(nodes: u32, max_unavailable: IntOrString, allowed: usize) {
    let (store, cluster) = start(nodes, 42);
    let node_names: BTreeSet<String> = (1..=nodes).map(|i| format!("node-{i}")).collect();
    let mut tracker = UnavailabilityTracker::new(&store);
    store
        .create(&daemonset("agent", "agent:v1", max_unavailable.clone()))
        .unwrap();
    cluster.wait_idle().await.unwrap();
    assert_rolled_out(&store, "agent", nodes as i32, "agent:v1");
    tracker.drain(&node_names, u64::MAX);

    let from_rv = store.resource_version();
    set_image(&store, "agent", "agent:v2");
    // Drain while the rollout runs so that the broadcast channel never overflows.
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        tracker.drain(&node_names, from_rv);
        let ds = get_ds(&store, "agent");
        let status = ds.status.unwrap_or_default();
        if status.observed_generation == ds.metadata.generation && all_new(&status, nodes) {
            break;
        }
    }
    settle(&cluster, &mut tracker, &node_names, from_rv).await;
    assert_rolled_out(&store, "agent", nodes as i32, "agent:v2");
    assert_eq!(
        tracker.replaced.len(),
        nodes as usize,
        "every node's pod was replaced"
    );
    assert!(
        tracker.max_unavailable_seen <= allowed,
        "N={nodes} maxUnavailable={max_unavailable:?}: {} nodes unavailable at once, allowed {allowed}",
        tracker.max_unavailable_seen
    );
    assert_eq!(
        tracker.max_unavailable_seen, allowed,
        "N={nodes}: the budget is used, not just respected"
    );
    cluster.shutdown();
}

const SIZES: [u32; 7] = [1, 2, 9, 10, 11, 100, 1000];

#[tokio::test(start_paused = true)]
async fn rolling_update_with_max_unavailable_one_replaces_one_pod_at_a_time() {
    for n in SIZES {
        rolling_update(n, IntOrString::Int(1), 1).await;
    }
}

#[tokio::test(start_paused = true)]
async fn rolling_update_with_ten_percent_replaces_ceil_n_over_ten_at_a_time() {
    for n in SIZES {
        rolling_update(
            n,
            IntOrString::String("10%".to_owned()),
            (n as usize).div_ceil(10),
        )
        .await;
    }
}

fn fixture_daemonset(file: &str) -> DaemonSet {
    let path = format!(
        "{}/../../testdata/daemonsets/{file}",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut ds: DaemonSet = serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
    // A live object (longhorn) carries server-set fields a create must not.
    ds.metadata.resource_version = None;
    ds.metadata.uid = None;
    ds.metadata.creation_timestamp = None;
    ds.metadata.managed_fields = None;
    ds.status = None;
    ds
}

#[tokio::test(start_paused = true)]
async fn real_manifests_schedule_by_node_selector_affinity_and_tolerations() {
    use k8s_openapi::api::core::v1::Node;
    let (store, cluster) = start(3, 1);
    cluster.add_node("windows-1").unwrap();
    store
        .modify::<Node>(None, "windows-1", canary_sim::UpdateScope::Main, |n| {
            n.metadata
                .labels
                .as_mut()
                .unwrap()
                .insert("kubernetes.io/os".to_owned(), "windows".to_owned());
        })
        .unwrap();
    cluster.add_node("gpu-1").unwrap();
    let gpu = no_schedule("nvidia.com/gpu", "present");
    cluster.taint("gpu-1", gpu).unwrap();
    cluster.add_node("infra-1").unwrap();
    let infra = no_schedule("dedicated", "infra");
    cluster.taint("infra-1", infra).unwrap();

    // (file, nodes its pods belong on)
    let expectations: [(&str, &[&str]); 5] = [
        // Tolerates only control-plane taints; no selector.
        (
            "fluentd-elasticsearch.yaml",
            &["node-1", "node-2", "node-3", "windows-1"],
        ),
        // Linux via required node affinity; tolerates every NoSchedule taint.
        (
            "kube-flannel-ds.yaml",
            &["gpu-1", "infra-1", "node-1", "node-2", "node-3"],
        ),
        // No tolerations, no selector.
        (
            "longhorn-manager-live-unavailable.yaml",
            &["node-1", "node-2", "node-3", "windows-1"],
        ),
        // nodeSelector kubernetes.io/os=linux; tolerates everything.
        (
            "node-exporter.yaml",
            &["gpu-1", "infra-1", "node-1", "node-2", "node-3"],
        ),
        // Tolerates the GPU taint only.
        (
            "nvidia-device-plugin.yaml",
            &["gpu-1", "node-1", "node-2", "node-3", "windows-1"],
        ),
    ];
    for (file, _) in &expectations {
        store
            .create(&fixture_daemonset(file))
            .unwrap_or_else(|e| panic!("{file}: {e}"));
    }
    cluster.wait_idle().await.unwrap();
    for (file, nodes) in expectations {
        let template = fixture_daemonset(file);
        let namespace = template.metadata.namespace.as_deref().unwrap();
        let name = template.metadata.name.as_deref().unwrap();
        let ds = store.get::<DaemonSet>(Some(namespace), name).unwrap();
        let status = ds.status.clone().unwrap();
        assert_eq!(
            status.desired_number_scheduled,
            nodes.len() as i32,
            "{file}"
        );
        assert_eq!(status.number_ready, nodes.len() as i32, "{file}: all ready");
        assert_eq!(status.observed_generation, ds.metadata.generation, "{file}");
        let pods: Vec<Pod> = store
            .list::<Pod>(Some(namespace))
            .into_iter()
            .filter(|p| owners(p).any(|o| o.name == name && o.controller == Some(true)))
            .collect();
        let mut on: Vec<String> = pods
            .iter()
            .map(|p| p.spec.as_ref().unwrap().node_name.clone().unwrap())
            .collect();
        on.sort();
        assert_eq!(on, nodes, "{file}: pods on exactly the eligible nodes");
        let template_labels = template_meta(&template).labels.clone().unwrap();
        for pod in &pods {
            let labels = pod.metadata.labels.as_ref().unwrap();
            assert!(
                template_labels
                    .iter()
                    .all(|(k, v)| labels.get(k) == Some(v)),
                "{file}: template labels"
            );
            assert!(
                labels.contains_key("controller-revision-hash"),
                "{file}: revision hash label"
            );
            // The store's template generation (1 on create, or the live object's own value).
            let generation = &ds.metadata.annotations.as_ref().unwrap()["deprecated.daemonset.template.generation"];
            assert_eq!(
                labels.get("pod-template-generation"),
                Some(generation),
                "{file}"
            );
            assert!(
                pod.metadata
                    .name
                    .as_deref()
                    .unwrap()
                    .starts_with(&format!("{name}-")),
                "{file}: generated name"
            );
        }
        let revisions: Vec<ControllerRevision> = store
            .list::<ControllerRevision>(Some(namespace))
            .into_iter()
            .filter(|r| {
                r.metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .any(|o| o.name == name)
            })
            .collect();
        assert_eq!(revisions.len(), 1, "{file}: one revision");
        let hash =
            revisions[0].metadata.labels.as_ref().unwrap()["controller-revision-hash"].clone();
        assert_eq!(
            revisions[0].metadata.name.as_deref(),
            Some(format!("{name}-{hash}").as_str())
        );
        assert!(
            pods.iter()
                .all(|p| p.metadata.labels.as_ref().unwrap()["controller-revision-hash"] == hash)
        );
    }
    // The node-exporter template annotation reaches the pods.
    let exporter = fixture_daemonset("node-exporter.yaml");
    let annotations = template_meta(&exporter).annotations.clone().unwrap();
    let pod = store
        .list::<Pod>(Some("monitoring"))
        .into_iter()
        .next()
        .unwrap();
    assert!(
        annotations
            .iter()
            .all(|(k, v)| pod.metadata.annotations.as_ref().unwrap().get(k) == Some(v))
    );
    cluster.shutdown();
}

fn with_behavior(mut ds: DaemonSet, behavior: &str) -> DaemonSet {
    let meta = template_meta_mut(&mut ds);
    meta.annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(BEHAVIOR_ANNOTATION.to_owned(), behavior.to_owned());
    ds
}

fn container_waiting_reason(pod: &Pod) -> Option<String> {
    pod.status.as_ref()?.container_statuses.as_ref()?[0]
        .state
        .as_ref()?
        .waiting
        .as_ref()?
        .reason
        .clone()
}

#[tokio::test(start_paused = true)]
async fn kubelet_behaviours_show_in_pod_and_daemonset_status() {
    let (store, cluster) = start(2, 3);
    // One DaemonSet per pod behaviour, each at `<name>:v1`.
    for (name, behavior) in [
        ("crashy", "crashloop"),
        ("pully", "image-pull-backoff"),
        ("stuck", "never-ready"),
        ("slow", "slow-start=60s"),
    ] {
        let ds = daemonset(name, &format!("{name}:v1"), IntOrString::Int(1));
        store.create(&with_behavior(ds, behavior)).unwrap();
    }
    cluster.wait_idle().await.unwrap();
    tokio::time::sleep(Duration::from_secs(120)).await;
    cluster.settle().await.unwrap();
    for pod in pods_of(&store, "crashy") {
        let cs = &pod
            .status
            .as_ref()
            .unwrap()
            .container_statuses
            .as_ref()
            .unwrap()[0];
        assert_eq!(
            pod.status.as_ref().unwrap().phase.as_deref(),
            Some("Running")
        );
        assert!(
            cs.restart_count >= 3,
            "restarts with back-off: {}",
            cs.restart_count
        );
        let terminated = cs.last_state.as_ref().unwrap().terminated.as_ref().unwrap();
        assert_eq!(
            (terminated.exit_code, terminated.reason.as_deref()),
            (1, Some("Error"))
        );
        assert!(!is_ready(&pod));
    }
    for pod in pods_of(&store, "pully") {
        assert_eq!(
            pod.status.as_ref().unwrap().phase.as_deref(),
            Some("Pending")
        );
        let reason = container_waiting_reason(&pod).unwrap();
        assert!(
            reason == "ImagePullBackOff" || reason == "ErrImagePull",
            "{reason}"
        );
    }
    for pod in pods_of(&store, "stuck") {
        assert!(!is_ready(&pod));
        assert!(
            pod.status
                .as_ref()
                .unwrap()
                .container_statuses
                .as_ref()
                .unwrap()[0]
                .state
                .as_ref()
                .unwrap()
                .running
                .is_some()
        );
    }
    assert!(
        pods_of(&store, "slow").iter().all(is_ready),
        "slow-start pods ready after 60s"
    );
    for name in ["crashy", "pully", "stuck"] {
        let status = get_ds(&store, name).status.unwrap();
        assert_eq!(
            (status.desired_number_scheduled, status.number_ready),
            (2, 0),
            "{name}"
        );
        assert_eq!(status.number_unavailable, Some(2), "{name}");
    }
    cluster.shutdown();
}

/// Same seed, same history: the sequence of pod writes is identical; another seed changes
/// the timing.
#[tokio::test(start_paused = true)]
async fn runs_are_deterministic_for_a_seed() {
    async fn trace(seed: u64) -> Vec<String> {
        let (store, cluster) = start(5, seed);
        let mut rx = store.subscribe();
        store
            .create(&daemonset(
                "agent",
                "agent:v1",
                IntOrString::String("40%".to_owned()),
            ))
            .unwrap();
        cluster.wait_idle().await.unwrap();
        set_image(&store, "agent", "agent:v2");
        cluster.wait_idle().await.unwrap();
        cluster.shutdown();
        let mut out = Vec::new();
        while let Ok(event) = rx.try_recv() {
            if event.key.plural == "pods" {
                out.push(format!(
                    "{:?} {} {}",
                    event.kind,
                    event.name,
                    tokio::time::Instant::now().elapsed().as_millis()
                ));
                out.push(serde_json::to_string(&event.object["status"]).unwrap());
            }
        }
        out
    }
    let first = trace(7).await;
    assert!(first.len() > 40, "a real rollout happened");
    assert_eq!(first, trace(7).await);
    assert_ne!(first, trace(8).await);
}

#[tokio::test(start_paused = true)]
async fn nodes_change_during_a_rollout_and_it_still_completes() {
    let (store, cluster) = start(20, 5);
    install_then_upgrade(&store, &cluster, 20, "10%").await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    cluster.add_node("late-1").unwrap();
    cluster.remove_node("node-20").unwrap();
    cluster.cordon("node-19", true).unwrap();
    cluster.set_node_ready("node-18", false).unwrap();
    cluster.settle().await.unwrap();
    // The NotReady node leaves the desired set (not-ready:NoSchedule is not tolerated);
    // its pod stays, held not ready by the node lifecycle controller.
    let status = get_ds(&store, "agent").status.unwrap();
    assert_eq!(
        status.desired_number_scheduled, 19,
        "20 + late-1 - node-20 - node-18"
    );
    let on_18: Vec<Pod> = pods_of(&store, "agent")
        .into_iter()
        .filter(|p| p.spec.as_ref().unwrap().node_name.as_deref() == Some("node-18"))
        .collect();
    assert_eq!(on_18.len(), 1);
    assert!(!is_ready(&on_18[0]));
    assert!(
        pods_of(&store, "agent")
            .iter()
            .all(|p| p.spec.as_ref().unwrap().node_name.as_deref() != Some("node-20"))
    );
    cluster.wait_idle().await.unwrap();
    let status = get_ds(&store, "agent").status.unwrap();
    assert_eq!(status.desired_number_scheduled, 19);
    assert_eq!(status.updated_number_scheduled, Some(19));
    assert_eq!(status.number_available, Some(19));
    assert_eq!(
        status.number_misscheduled, 1,
        "the pod left on the NotReady node"
    );
    // Back online: its old (unavailable, so replaced first) pod finishes terminating and
    // a new one starts.
    cluster.set_node_ready("node-18", true).unwrap();
    cluster.wait_idle().await.unwrap();
    assert_rolled_out(&store, "agent", 20, "agent:v2");
    let cordoned = store
        .get::<k8s_openapi::api::core::v1::Node>(None, "node-19")
        .unwrap();
    assert_eq!(cordoned.spec.unwrap().unschedulable, Some(true));
    cluster.shutdown();
}

#[tokio::test(start_paused = true)]
async fn on_delete_replaces_only_deleted_pods() {
    let (store, cluster) = start(3, 9);
    let mut ds = daemonset("agent", "agent:v1", IntOrString::Int(1));
    ds.spec.as_mut().unwrap().update_strategy = Some(DaemonSetUpdateStrategy {
        type_: Some("OnDelete".to_owned()),
        rolling_update: None,
    });
    store.create(&ds).unwrap();
    cluster.wait_idle().await.unwrap();
    set_image(&store, "agent", "agent:v2");
    cluster.wait_idle().await.unwrap();
    let status = get_ds(&store, "agent").status.unwrap();
    assert_eq!(
        status.updated_number_scheduled,
        Some(0),
        "OnDelete: nothing replaced"
    );
    let victim = pods_of(&store, "agent")[0].metadata.name.clone().unwrap();
    store.delete::<Pod>(Some(NS), &victim).unwrap();
    let terminating = store.get::<Pod>(Some(NS), &victim).unwrap();
    assert!(
        terminating.metadata.deletion_timestamp.is_some(),
        "graceful deletion of a bound pod"
    );
    cluster.wait_idle().await.unwrap();
    assert!(
        store.get::<Pod>(Some(NS), &victim).is_none(),
        "the kubelet finished the deletion"
    );
    let pods = pods_of(&store, "agent");
    assert_eq!(pods.len(), 3);
    assert_eq!(pods.iter().filter(|p| image_of(p) == "agent:v2").count(), 1);
    assert_eq!(
        get_ds(&store, "agent")
            .status
            .unwrap()
            .updated_number_scheduled,
        Some(1)
    );
    cluster.shutdown();
}

#[tokio::test(start_paused = true)]
async fn min_ready_seconds_delays_availability() {
    let (store, cluster) = start(2, 2);
    let mut ds = daemonset("agent", "agent:v1", IntOrString::Int(1));
    ds.spec.as_mut().unwrap().min_ready_seconds = Some(30);
    store.create(&ds).unwrap();
    tokio::time::sleep(Duration::from_secs(10)).await;
    cluster.settle().await.unwrap();
    let status = get_ds(&store, "agent").status.unwrap();
    assert_eq!((status.number_ready, status.number_available), (2, Some(0)));
    cluster.wait_idle().await.unwrap();
    let status = get_ds(&store, "agent").status.unwrap();
    assert_eq!((status.number_ready, status.number_available), (2, Some(2)));
    cluster.shutdown();
}

#[tokio::test(start_paused = true)]
async fn deleting_a_daemonset_collects_its_pods_and_revisions() {
    let (store, cluster) = start(3, 4);
    store
        .create(&daemonset("agent", "agent:v1", IntOrString::Int(1)))
        .unwrap();
    cluster.wait_idle().await.unwrap();
    set_image(&store, "agent", "agent:v2");
    cluster.wait_idle().await.unwrap();
    let revisions = store.list::<ControllerRevision>(Some(NS));
    let mut numbers: Vec<i64> = revisions.iter().map(|r| r.revision).collect();
    numbers.sort();
    assert_eq!(numbers, vec![1, 2]);
    store.delete::<DaemonSet>(Some(NS), "agent").unwrap();
    cluster.wait_idle().await.unwrap();
    assert!(store.list::<Pod>(Some(NS)).is_empty());
    assert!(store.list::<ControllerRevision>(Some(NS)).is_empty());
    cluster.shutdown();
}

#[tokio::test(start_paused = true)]
async fn image_rules_choose_the_behaviour_when_no_annotation_does() {
    let store = Store::new(SimClock::new());
    let kubelet = KubeletConfig {
        image_behaviors: BTreeMap::from([(
            "registry.example/agent:v2".to_owned(),
            canary_sim::cluster::PodBehavior::NeverReady.into(),
        )]),
        ..KubeletConfig::default()
    };
    let cluster = Cluster::start(
        store.clone(),
        ClusterConfig {
            nodes: 3,
            kubelet,
            ..ClusterConfig::default()
        },
    );
    store
        .create(&daemonset(
            "agent",
            "registry.example/agent:v1",
            IntOrString::Int(1),
        ))
        .unwrap();
    cluster.wait_idle().await.unwrap();
    assert_rolled_out(&store, "agent", 3, "registry.example/agent:v1");
    set_image(&store, "agent", "registry.example/agent:v2");
    cluster.wait_idle().await.unwrap();
    // The canary never becomes ready, so maxUnavailable 1 stops the rollout at one pod.
    let pods = pods_of(&store, "agent");
    let new: Vec<&Pod> = pods
        .iter()
        .filter(|p| image_of(p) == "registry.example/agent:v2")
        .collect();
    assert_eq!(new.len(), 1);
    assert!(!is_ready(new[0]));
    let status = get_ds(&store, "agent").status.unwrap();
    assert_eq!(
        (status.updated_number_scheduled, status.number_available),
        (Some(1), Some(2))
    );
    cluster.shutdown();
}

/// With `maxSurge` the new pod starts beside the old one, which goes only once the new one
/// is available: no node is ever without an available pod.
#[tokio::test(start_paused = true)]
async fn surge_rollout_keeps_every_node_available() {
    let nodes = 12;
    let (store, cluster) = start(nodes, 11);
    let node_names: BTreeSet<String> = (1..=nodes).map(|i| format!("node-{i}")).collect();
    let mut tracker = UnavailabilityTracker::new(&store);
    let mut ds = daemonset("agent", "agent:v1", IntOrString::Int(0));
    ds.spec
        .as_mut()
        .unwrap()
        .update_strategy
        .as_mut()
        .unwrap()
        .rolling_update
        .as_mut()
        .unwrap()
        .max_surge = Some(IntOrString::String("25%".to_owned()));
    store.create(&ds).unwrap();
    cluster.wait_idle().await.unwrap();
    tracker.drain(&node_names, u64::MAX);
    let from_rv = store.resource_version();
    set_image(&store, "agent", "agent:v2");
    let mut most_pods = 0;
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        tracker.drain(&node_names, from_rv);
        let live = pods_of(&store, "agent")
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .count();
        most_pods = most_pods.max(live);
        let status = get_ds(&store, "agent").status.unwrap_or_default();
        if all_new(&status, nodes) {
            break;
        }
    }
    settle(&cluster, &mut tracker, &node_names, from_rv).await;
    assert_rolled_out(&store, "agent", nodes as i32, "agent:v2");
    assert_eq!(
        tracker.max_unavailable_seen, 0,
        "surge never leaves a node without an available pod"
    );
    assert!(most_pods > nodes as usize, "pods were surged");
    assert!(
        most_pods <= nodes as usize + 3,
        "at most ceil(25% of 12) = 3 extra pods: saw {most_pods}"
    );
    cluster.shutdown();
}

/// A cluster task that falls behind the store's event channel relists and carries on.
#[tokio::test(start_paused = true)]
async fn a_lagging_cluster_relists_and_completes_the_rollout() {
    let store = Store::with_limits(SimClock::new(), 1_000, 8);
    let cluster = Cluster::start(
        store.clone(),
        ClusterConfig {
            nodes: 30,
            seed: 6,
            ..ClusterConfig::default()
        },
    );
    // 30 nodes created at start already overflow 8 slots of channel before the task runs.
    install_then_upgrade(&store, &cluster, 30, "20%").await;
    cluster.wait_idle().await.unwrap();
    assert_rolled_out(&store, "agent", 30, "agent:v2");
    cluster.shutdown();
}

/// Virtual seconds a rolling update of a 4-node DaemonSet (maxUnavailable 1) takes at `speed`.
async fn rollout_seconds(speed: f64) -> f64 {
    let store = Store::new(SimClock::new());
    let cluster = Cluster::start(
        store.clone(),
        ClusterConfig {
            nodes: 4,
            seed: 3,
            speed,
            ..ClusterConfig::default()
        },
    );
    store
        .create(&daemonset("agent", "agent:v1", IntOrString::Int(1)))
        .unwrap();
    cluster.wait_idle().await.unwrap();
    let started = tokio::time::Instant::now();
    set_image(&store, "agent", "agent:v2");
    cluster.wait_idle().await.unwrap();
    let took = started.elapsed().as_secs_f64();
    assert_rolled_out(&store, "agent", 4, "agent:v2");
    cluster.shutdown();
    took
}

/// `speed` divides every delay of the cluster model: the same rollout (same seed, so the same
/// jitter) takes a tenth of the time at speed 10.
#[tokio::test(start_paused = true)]
async fn speed_divides_every_delay_of_the_cluster() {
    let normal = rollout_seconds(1.0).await;
    let fast = rollout_seconds(10.0).await;
    assert!(normal > 10.0, "4 pods one at a time take seconds: {normal}");
    let ratio = normal / fast;
    assert!((9.5..=10.5).contains(&ratio), "{normal} s vs {fast} s");
}
