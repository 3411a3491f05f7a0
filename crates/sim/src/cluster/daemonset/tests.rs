use super::*;
use k8s_openapi::api::apps::v1::{DaemonSetSpec, DaemonSetUpdateStrategy, RollingUpdateDaemonSet};
use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec};

const HASH: &str = "newhash";

fn t(seconds: i64) -> Timestamp {
    Timestamp::from_second(1_767_225_600 + seconds).unwrap_or(Timestamp::UNIX_EPOCH)
}

fn ds(max_unavailable: Option<IntOrString>, max_surge: Option<IntOrString>) -> DaemonSet {
    let mut ds = DaemonSet::default();
    ds.metadata.name = Some("agent".to_owned());
    ds.metadata.namespace = Some("kube-system".to_owned());
    ds.metadata.uid = Some("ds-uid".to_owned());
    ds.metadata.generation = Some(2);
    ds.metadata.annotations = Some(BTreeMap::from([(
        TEMPLATE_GENERATION_ANNOTATION.to_owned(),
        "2".to_owned(),
    )]));
    let mut template = PodTemplateSpec::default();
    let meta = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        labels: Some(BTreeMap::from([("app".to_owned(), "agent".to_owned())])),
        annotations: Some(BTreeMap::from([(
            "kubevirt.io/install-strategy-version".to_owned(),
            "v2".to_owned(),
        )])),
        ..Default::default()
    };
    template.metadata = Some(meta);
    template.spec = Some(PodSpec {
        containers: vec![Container {
            name: "agent".to_owned(),
            image: Some("agent:v2".to_owned()),
            ..Container::default()
        }],
        ..PodSpec::default()
    });
    ds.spec = Some(DaemonSetSpec {
        template,
        update_strategy: Some(DaemonSetUpdateStrategy {
            type_: Some("RollingUpdate".to_owned()),
            rolling_update: Some(RollingUpdateDaemonSet {
                max_unavailable,
                max_surge,
            }),
        }),
        ..DaemonSetSpec::default()
    });
    ds
}

fn pod(name: &str, node: &str, new: bool, ready: bool) -> DaemonPod {
    DaemonPod {
        name: name.to_owned(),
        node: node.to_owned(),
        hash: Some(if new { HASH } else { "oldhash" }.to_owned()),
        template_generation: Some(if new { "2" } else { "1" }.to_owned()),
        created: t(0),
        deleting: false,
        terminal: false,
        ready_since: ready.then(|| t(0)),
    }
}

fn all_fit(n: usize) -> Vec<(String, NodeFit)> {
    (0..n)
        .map(|i| {
            (
                format!("node-{i:03}"),
                NodeFit {
                    should_run: true,
                    should_continue_running: true,
                },
            )
        })
        .collect()
}

/// Node `name`, where the DaemonSet should not run: its pod may stay (`continue_running`) or
/// must go.
fn unfit(name: &str, continue_running: bool) -> (String, NodeFit) {
    (
        name.to_owned(),
        NodeFit {
            should_run: false,
            should_continue_running: continue_running,
        },
    )
}

type Fits = Vec<(String, NodeFit)>;
type PodsByNode = BTreeMap<String, Vec<DaemonPod>>;

/// Node slots from fits and pods (pods on a node missing from `fits` get `fit: None`).
fn slots(fits: &[(String, NodeFit)], pods: &PodsByNode) -> BTreeMap<String, NodeSlot> {
    let mut slots: BTreeMap<String, NodeSlot> = fits
        .iter()
        .map(|(n, f)| {
            (
                n.clone(),
                NodeSlot {
                    fit: Some(*f),
                    pods: Vec::new(),
                },
            )
        })
        .collect();
    for (node, list) in pods {
        slots
            .entry(node.clone())
            .or_default()
            .pods
            .extend(list.iter().cloned());
    }
    slots
}

/// Switches `d` to the `OnDelete` update strategy.
fn set_on_delete(d: &mut DaemonSet) {
    if let Some(spec) = d.spec.as_mut() {
        spec.update_strategy = Some(DaemonSetUpdateStrategy {
            type_: Some("OnDelete".to_owned()),
            rolling_update: None,
        });
    }
}

/// The sync plan of `d` on the nodes `fits` with `pods`, which must be valid.
fn planned(d: &DaemonSet, fits: &[(String, NodeFit)], pods: &PodsByNode) -> SyncPlan {
    plan_sync(
        &cx(d),
        &Placement {
            nodes: &slots(fits, pods),
        },
    )
    .expect("valid")
}

/// `n` nodes, each with one pod; `new(i)` / `ready(i)` choose its template and readiness.
fn cluster(
    n: usize,
    new: impl Fn(usize) -> bool,
    ready: impl Fn(usize) -> bool,
) -> (Fits, PodsByNode) {
    let nodes = all_fit(n);
    let pods = nodes
        .iter()
        .enumerate()
        .map(|(i, (node, _))| {
            (
                node.clone(),
                vec![pod(&format!("agent-{i:03}"), node, new(i), ready(i))],
            )
        })
        .collect();
    (nodes, pods)
}

fn cx(ds: &DaemonSet) -> SyncContext<'_> {
    SyncContext::new(ds, HASH, t(100))
}

#[test]
fn percentages_round_up_and_ints_pass_through() {
    let ten = IntOrString::String("10%".to_owned());
    let cases = [
        (1, 1),
        (2, 1),
        (9, 1),
        (10, 1),
        (11, 2),
        (100, 10),
        (1000, 100),
        (5000, 500),
        (0, 0),
    ];
    for (total, expected) in cases {
        assert_eq!(
            scaled_value(&ten, total, true),
            Ok(expected),
            "10% of {total}"
        );
    }
    assert_eq!(scaled_value(&ten, 11, false), Ok(1));
    assert_eq!(
        scaled_value(&IntOrString::String("100%".to_owned()), 3, true),
        Ok(3)
    );
    assert_eq!(scaled_value(&IntOrString::Int(2), 1000, true), Ok(2));
    assert!(scaled_value(&IntOrString::String("10".to_owned()), 10, true).is_err());
}

#[test]
fn strategy_defaults_like_the_api_server() {
    let mut d = ds(None, None);
    assert_eq!(
        strategy(&d),
        Strategy::RollingUpdate {
            max_unavailable: IntOrString::Int(1),
            max_surge: IntOrString::Int(0)
        }
    );
    if let Some(spec) = d.spec.as_mut() {
        spec.update_strategy = None;
    }
    assert_eq!(
        strategy(&d),
        Strategy::RollingUpdate {
            max_unavailable: IntOrString::Int(1),
            max_surge: IntOrString::Int(0)
        }
    );
    set_on_delete(&mut d);
    assert_eq!(strategy(&d), Strategy::OnDelete);
}

#[test]
fn manage_creates_a_pod_on_each_eligible_node_without_one() {
    let d = ds(None, None);
    let mut nodes = all_fit(3);
    nodes.push(unfit("tainted", true));
    let pods = BTreeMap::from([(
        "node-001".to_owned(),
        vec![pod("agent-a", "node-001", true, true)],
    )]);
    let plan = planned(&d, &nodes, &pods);
    assert_eq!(
        plan.create_on_nodes,
        vec!["node-000".to_owned(), "node-002".to_owned()]
    );
    assert!(plan.delete_pods.is_empty());
}

#[test]
fn manage_keeps_the_oldest_of_duplicate_pods_and_clears_ineligible_nodes() {
    let d = ds(None, None);
    let mut nodes = all_fit(1);
    nodes.push(unfit("evicting", false));
    nodes.push(unfit("no-schedule", true));
    let mut younger = pod("agent-young", "node-000", true, true);
    younger.created = t(50);
    let mut terminating = pod("agent-going", "evicting", true, true);
    terminating.deleting = true;
    let mut failed = pod("agent-failed", "no-schedule", true, false);
    failed.terminal = true;
    let pods = BTreeMap::from([
        (
            "node-000".to_owned(),
            vec![younger, pod("agent-old", "node-000", true, true)],
        ),
        (
            "evicting".to_owned(),
            vec![pod("agent-evict", "evicting", true, true), terminating],
        ),
        (
            "no-schedule".to_owned(),
            vec![pod("agent-stays", "no-schedule", true, true), failed],
        ),
    ]);
    let plan = manage(
        &cx(&d),
        &Placement {
            nodes: &slots(&nodes, &pods),
        },
    );
    assert!(plan.create_on_nodes.is_empty());
    let mut deleted = plan.delete_pods.clone();
    deleted.sort();
    assert_eq!(deleted, vec!["agent-evict", "agent-failed", "agent-young"]);
}

#[test]
fn rolling_update_deletes_up_to_max_unavailable_old_pods() {
    let d = ds(Some(IntOrString::String("10%".to_owned())), None);
    let (nodes, pods) = cluster(25, |_| false, |_| true);
    let plan = planned(&d, &nodes, &pods);
    assert_eq!(
        plan.delete_pods,
        vec!["agent-000", "agent-001", "agent-002"],
        "ceil(2.5) = 3"
    );
    assert!(plan.create_on_nodes.is_empty());
}

#[test]
fn rolling_update_replaces_unavailable_old_pods_first_and_beyond_the_budget() {
    let d = ds(Some(IntOrString::Int(2)), None);
    let (nodes, pods) = cluster(10, |_| false, |i| i != 7 && i != 8 && i != 9);
    let plan = planned(&d, &nodes, &pods);
    // Three broken old pods already exceed maxUnavailable 2: they go, no healthy one does.
    assert_eq!(
        plan.delete_pods,
        vec!["agent-007", "agent-008", "agent-009"]
    );
}

#[test]
fn rolling_update_counts_nodes_being_replaced_and_unready_new_pods() {
    let d = ds(Some(IntOrString::Int(3)), None);
    let (nodes, mut pods) = cluster(10, |i| i == 1, |i| i != 1);
    // node-000: its old pod is terminating (counts as unavailable); node-001: new, not ready.
    if let Some(p) = pods.get_mut("node-000").and_then(|v| v.first_mut()) {
        p.deleting = true;
    }
    let plan = planned(&d, &nodes, &pods);
    assert_eq!(plan.delete_pods, vec!["agent-002"]);
    // Once every slot is taken, nothing more is deleted.
    let (nodes, pods) = cluster(10, |i| i < 3, |i| i >= 3);
    let plan = planned(&d, &nodes, &pods);
    assert!(plan.is_empty(), "{plan:?}");
}

#[test]
fn rolling_update_waits_for_min_ready_seconds() {
    let mut d = ds(Some(IntOrString::Int(1)), None);
    if let Some(spec) = d.spec.as_mut() {
        spec.min_ready_seconds = Some(30);
    }
    // node-000 runs a new pod that became ready at t=0; now is t=100 so it is available.
    let (nodes, mut pods) = cluster(3, |i| i == 0, |_| true);
    let plan = planned(&d, &nodes, &pods);
    assert_eq!(plan.delete_pods, vec!["agent-001"]);
    // Ready only since t=90: not available for another 20 seconds, so no other deletion.
    if let Some(p) = pods.get_mut("node-000").and_then(|v| v.first_mut()) {
        p.ready_since = Some(t(90));
    }
    let plan = planned(&d, &nodes, &pods);
    assert!(plan.is_empty());
    let status = compute_status(
        &cx(&d),
        &Placement {
            nodes: &slots(&nodes, &pods),
        },
    );
    assert_eq!((status.number_ready, status.number_available), (3, Some(2)));
    assert_eq!(
        requeue_after(&cx(&d), &status),
        Some(Duration::from_secs(30))
    );
}

#[test]
fn on_delete_never_replaces_pods_by_itself() {
    let mut d = ds(None, None);
    set_on_delete(&mut d);
    let (nodes, mut pods) = cluster(4, |_| false, |_| true);
    assert!(planned(&d, &nodes, &pods).is_empty());
    pods.remove("node-002");
    let plan = planned(&d, &nodes, &pods);
    assert_eq!(plan.create_on_nodes, vec!["node-002"]);
}

#[test]
fn surge_starts_new_pods_beside_old_ones_then_deletes_the_old() {
    let d = ds(Some(IntOrString::Int(0)), Some(IntOrString::Int(2)));
    let (nodes, mut pods) = cluster(5, |_| false, |_| true);
    let plan = planned(&d, &nodes, &pods);
    assert_eq!(plan.create_on_nodes, vec!["node-000", "node-001"]);
    assert!(plan.delete_pods.is_empty());
    // node-000's new pod is available, node-001's is not yet.
    if let Some(v) = pods.get_mut("node-000") {
        v.push(pod("agent-new-0", "node-000", true, true))
    }
    if let Some(v) = pods.get_mut("node-001") {
        v.push(pod("agent-new-1", "node-001", true, false))
    }
    let plan = planned(&d, &nodes, &pods);
    assert_eq!(
        plan.delete_pods,
        vec!["agent-000"],
        "manage removes the replaced old pod"
    );
    if let Some(v) = pods.get_mut("node-000") {
        v.retain(|p| p.name != "agent-000")
    }
    let plan = planned(&d, &nodes, &pods);
    assert_eq!(
        plan.create_on_nodes,
        vec!["node-002"],
        "one surge slot is busy on node-001"
    );
}

#[test]
fn status_counts_the_oldest_pod_per_node() {
    let d = ds(None, None);
    let mut nodes = all_fit(4);
    nodes.push(unfit("elsewhere", true));
    let pods = BTreeMap::from([
        (
            "node-000".to_owned(),
            vec![pod("a", "node-000", true, true)],
        ),
        (
            "node-001".to_owned(),
            vec![pod("b", "node-001", false, true)],
        ),
        (
            "node-002".to_owned(),
            vec![pod("c", "node-002", true, false)],
        ),
        (
            "elsewhere".to_owned(),
            vec![pod("d", "elsewhere", true, true)],
        ),
    ]);
    let status = compute_status(
        &cx(&d),
        &Placement {
            nodes: &slots(&nodes, &pods),
        },
    );
    assert_eq!(status.desired_number_scheduled, 4);
    assert_eq!(status.current_number_scheduled, 3);
    assert_eq!(status.number_misscheduled, 1);
    assert_eq!(status.number_ready, 2);
    assert_eq!(status.number_available, Some(2));
    assert_eq!(status.number_unavailable, Some(2));
    assert_eq!(status.updated_number_scheduled, Some(2));
    assert_eq!(status.observed_generation, Some(2));
}

#[test]
fn new_pods_carry_labels_annotations_owner_pinning_and_tolerations() {
    let d = ds(None, None);
    let p = new_daemon_pod(&cx(&d), "node-007");
    let labels = p.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels.get("app").map(String::as_str), Some("agent"));
    assert_eq!(
        labels.get(REVISION_HASH_LABEL).map(String::as_str),
        Some(HASH)
    );
    assert_eq!(
        labels.get(TEMPLATE_GENERATION_LABEL).map(String::as_str),
        Some("2")
    );
    assert_eq!(
        p.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("kubevirt.io/install-strategy-version"))
            .map(String::as_str),
        Some("v2")
    );
    assert_eq!(p.metadata.generate_name.as_deref(), Some("agent-"));
    let owner = &p.metadata.owner_references.clone().unwrap_or_default()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
        ("DaemonSet", "agent", "ds-uid")
    );
    assert_eq!(owner.controller, Some(true));
    let spec = p.spec.clone().unwrap_or_default();
    assert_eq!(spec.node_name.as_deref(), Some("node-007"));
    let json = serde_json::to_value(&spec).unwrap_or_default();
    assert_eq!(
        json["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
            [0]["matchFields"][0],
        serde_json::json!({"key": "metadata.name", "operator": "In", "values": ["node-007"]})
    );
    assert_eq!(spec.tolerations.map(|t| t.len()), Some(6));
    let mut p = p;
    p.metadata.name = Some("agent-x7k2q".to_owned());
    let view = DaemonPod::from_pod(&p).expect("bound pod");
    assert!(cx(&d).is_updated(&view));
}
