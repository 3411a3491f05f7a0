//! Which nodes a DaemonSet's pods belong on: node selector, required node affinity,
//! taints and tolerations, as `NodeShouldRunDaemonPod` decides it
//! (kubernetes `pkg/controller/daemon/daemon_controller.go`, tolerations from
//! `pkg/controller/daemon/util/daemonset_util.go`, matching from
//! `staging/src/k8s.io/component-helpers/scheduling/corev1`).

use k8s_openapi::api::core::v1::{
    Node, NodeSelectorRequirement, NodeSelectorTerm, PodSpec, Taint, Toleration,
};

/// Taint the node lifecycle controller puts on a node whose Ready condition is not True.
pub const TAINT_NOT_READY: &str = "node.kubernetes.io/not-ready";
/// Taint the node lifecycle controller puts on a node whose Ready condition is Unknown.
pub const TAINT_UNREACHABLE: &str = "node.kubernetes.io/unreachable";
/// Taint that mirrors `spec.unschedulable` (cordon).
pub const TAINT_UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";
/// Taint for the DiskPressure condition.
pub const TAINT_DISK_PRESSURE: &str = "node.kubernetes.io/disk-pressure";
/// Taint for the MemoryPressure condition.
pub const TAINT_MEMORY_PRESSURE: &str = "node.kubernetes.io/memory-pressure";
/// Taint for the PIDPressure condition.
pub const TAINT_PID_PRESSURE: &str = "node.kubernetes.io/pid-pressure";
/// Taint for the NetworkUnavailable condition.
pub const TAINT_NETWORK_UNAVAILABLE: &str = "node.kubernetes.io/network-unavailable";

/// Taint effect that keeps new pods off a node.
pub const EFFECT_NO_SCHEDULE: &str = "NoSchedule";
/// Taint effect that also evicts running pods that do not tolerate it.
pub const EFFECT_NO_EXECUTE: &str = "NoExecute";

/// The field key the DaemonSet controller pins its pods with (`matchFields`).
pub const NODE_NAME_FIELD: &str = "metadata.name";

/// Whether a DaemonSet pod should be on a node (`NodeShouldRunDaemonPod`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeFit {
    /// A pod should be created on the node if none is there.
    pub should_run: bool,
    /// A pod already on the node may stay (it tolerates every NoExecute taint).
    pub should_continue_running: bool,
}

impl NodeFit {
    const NO: Self = Self {
        should_run: false,
        should_continue_running: false,
    };
    const YES: Self = Self {
        should_run: true,
        should_continue_running: true,
    };
}

/// Adds the tolerations every DaemonSet pod gets (`AddOrUpdateDaemonPodTolerations`),
/// so that node problems do not evict or block daemons.
pub fn add_daemon_tolerations(spec: &mut PodSpec) {
    let mut wanted = vec![
        (TAINT_NOT_READY, EFFECT_NO_EXECUTE),
        (TAINT_UNREACHABLE, EFFECT_NO_EXECUTE),
        (TAINT_DISK_PRESSURE, EFFECT_NO_SCHEDULE),
        (TAINT_MEMORY_PRESSURE, EFFECT_NO_SCHEDULE),
        (TAINT_PID_PRESSURE, EFFECT_NO_SCHEDULE),
        (TAINT_UNSCHEDULABLE, EFFECT_NO_SCHEDULE),
    ];
    if spec.host_network == Some(true) {
        wanted.push((TAINT_NETWORK_UNAVAILABLE, EFFECT_NO_SCHEDULE));
    }
    let tolerations = spec.tolerations.get_or_insert_with(Vec::new);
    for (key, effect) in wanted {
        let toleration = Toleration {
            key: Some(key.to_owned()),
            operator: Some("Exists".to_owned()),
            effect: Some(effect.to_owned()),
            ..Toleration::default()
        };
        // `AddOrUpdateTolerationInPodSpec`: same key/operator/value/effect replaces, else append.
        match tolerations
            .iter_mut()
            .find(|t| same_toleration(t, &toleration))
        {
            Some(existing) => *existing = toleration,
            None => tolerations.push(toleration),
        }
    }
}

fn same_toleration(a: &Toleration, b: &Toleration) -> bool {
    a.key == b.key && a.operator == b.operator && a.value == b.value && a.effect == b.effect
}

/// `Toleration.ToleratesTaint` (core/v1 helpers).
pub fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    if let Some(effect) = toleration.effect.as_deref().filter(|e| !e.is_empty())
        && effect != taint.effect
    {
        return false;
    }
    if let Some(key) = toleration.key.as_deref().filter(|k| !k.is_empty())
        && key != taint.key
    {
        return false;
    }
    match toleration.operator.as_deref().unwrap_or("") {
        "" | "Equal" => {
            toleration.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or("")
        }
        "Exists" => true,
        _ => false,
    }
}

fn has_untolerated_taint(taints: &[Taint], tolerations: &[Toleration], effects: &[&str]) -> bool {
    taints
        .iter()
        .filter(|taint| effects.contains(&taint.effect.as_str()))
        .any(|taint| !tolerations.iter().any(|t| tolerates(t, taint)))
}

/// `NodeShouldRunDaemonPod` for a pod spec that already carries the daemon tolerations
/// (see [`add_daemon_tolerations`]).
pub fn node_fit(spec: &PodSpec, node: &Node) -> NodeFit {
    let node_name = node.metadata.name.as_deref().unwrap_or("");
    if let Some(pinned) = spec.node_name.as_deref().filter(|n| !n.is_empty())
        && pinned != node_name
    {
        return NodeFit::NO;
    }
    if !matches_node_selector(spec, node) || !matches_required_affinity(spec, node) {
        return NodeFit::NO;
    }
    let taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_deref())
        .unwrap_or(&[]);
    let tolerations = spec.tolerations.as_deref().unwrap_or(&[]);
    if has_untolerated_taint(
        taints,
        tolerations,
        &[EFFECT_NO_SCHEDULE, EFFECT_NO_EXECUTE],
    ) {
        return NodeFit {
            should_run: false,
            should_continue_running: !has_untolerated_taint(
                taints,
                tolerations,
                &[EFFECT_NO_EXECUTE],
            ),
        };
    }
    NodeFit::YES
}

fn node_label<'a>(node: &'a Node, key: &str) -> Option<&'a str> {
    node.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(key))
        .map(String::as_str)
}

fn matches_node_selector(spec: &PodSpec, node: &Node) -> bool {
    spec.node_selector
        .iter()
        .flatten()
        .all(|(key, value)| node_label(node, key) == Some(value.as_str()))
}

fn matches_required_affinity(spec: &PodSpec, node: &Node) -> bool {
    let Some(required) = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|na| {
            na.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
    else {
        return true;
    };
    // Terms are ORed; an empty term matches nothing (component-helpers nodeaffinity).
    required
        .node_selector_terms
        .iter()
        .any(|term| term_matches(term, node))
}

fn term_matches(term: &NodeSelectorTerm, node: &Node) -> bool {
    let expressions = term.match_expressions.as_deref().unwrap_or(&[]);
    let fields = term.match_fields.as_deref().unwrap_or(&[]);
    if expressions.is_empty() && fields.is_empty() {
        return false;
    }
    let node_name = node.metadata.name.as_deref();
    expressions
        .iter()
        .all(|req| requirement_matches(req, node_label(node, &req.key)))
        && fields.iter().all(|req| {
            let value = (req.key == NODE_NAME_FIELD).then_some(node_name).flatten();
            // Only metadata.name is a supported field, with In / NotIn.
            req.key == NODE_NAME_FIELD
                && matches!(req.operator.as_str(), "In" | "NotIn")
                && requirement_matches(req, value)
        })
}

fn requirement_matches(req: &NodeSelectorRequirement, value: Option<&str>) -> bool {
    let values = req.values.as_deref().unwrap_or(&[]);
    let contains = |v: &str| values.iter().any(|candidate| candidate == v);
    let as_int = |s: &str| s.parse::<i64>().ok();
    let bound = || values.first().and_then(|v| as_int(v));
    match req.operator.as_str() {
        "In" => value.is_some_and(contains),
        "NotIn" => !value.is_some_and(contains),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" => matches!((value.and_then(as_int), bound()), (Some(v), Some(b)) if v > b),
        "Lt" => matches!((value.and_then(as_int), bound()), (Some(v), Some(b)) if v < b),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Affinity, NodeAffinity, NodeSelector, NodeSpec};
    use std::collections::BTreeMap;

    fn node(name: &str, labels: &[(&str, &str)], taints: Vec<Taint>) -> Node {
        let mut n = Node::default();
        n.metadata.name = Some(name.to_owned());
        n.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        );
        n.spec = Some(NodeSpec {
            taints: Some(taints),
            ..NodeSpec::default()
        });
        n
    }

    fn taint(key: &str, effect: &str) -> Taint {
        Taint {
            key: key.to_owned(),
            effect: effect.to_owned(),
            ..Taint::default()
        }
    }

    fn daemon_spec() -> PodSpec {
        let mut spec = PodSpec::default();
        add_daemon_tolerations(&mut spec);
        spec
    }

    #[test]
    fn daemon_tolerations_match_the_real_controller_and_are_idempotent() {
        let mut spec = PodSpec {
            host_network: Some(true),
            ..PodSpec::default()
        };
        add_daemon_tolerations(&mut spec);
        add_daemon_tolerations(&mut spec);
        let keys: Vec<(String, String)> = spec
            .tolerations
            .iter()
            .flatten()
            .map(|t| {
                (
                    t.key.clone().unwrap_or_default(),
                    t.effect.clone().unwrap_or_default(),
                )
            })
            .collect();
        // Same order as the kube-proxy pod in fixtures/pods/daemonset-pod-healthy.yaml.
        let expected = [
            (TAINT_NOT_READY, "NoExecute"),
            (TAINT_UNREACHABLE, "NoExecute"),
            (TAINT_DISK_PRESSURE, "NoSchedule"),
            (TAINT_MEMORY_PRESSURE, "NoSchedule"),
            (TAINT_PID_PRESSURE, "NoSchedule"),
            (TAINT_UNSCHEDULABLE, "NoSchedule"),
            (TAINT_NETWORK_UNAVAILABLE, "NoSchedule"),
        ];
        let expected: Vec<(String, String)> = expected
            .iter()
            .map(|(k, e)| ((*k).to_owned(), (*e).to_owned()))
            .collect();
        assert_eq!(keys, expected);
        let without_host_network = daemon_spec();
        assert_eq!(without_host_network.tolerations.map(|t| t.len()), Some(6));
    }

    #[test]
    fn toleration_matching_follows_core_v1() {
        let t =
            |key: Option<&str>, op: &str, value: Option<&str>, effect: Option<&str>| Toleration {
                key: key.map(str::to_owned),
                operator: Some(op.to_owned()),
                value: value.map(str::to_owned),
                effect: effect.map(str::to_owned),
                ..Toleration::default()
            };
        let mut gpu = taint("nvidia.com/gpu", "NoSchedule");
        gpu.value = Some("present".to_owned());
        assert!(
            tolerates(&t(None, "Exists", None, None), &gpu),
            "empty key + Exists tolerates all"
        );
        assert!(tolerates(
            &t(Some("nvidia.com/gpu"), "Exists", None, Some("NoSchedule")),
            &gpu
        ));
        assert!(!tolerates(
            &t(Some("nvidia.com/gpu"), "Exists", None, Some("NoExecute")),
            &gpu
        ));
        assert!(tolerates(
            &t(Some("nvidia.com/gpu"), "Equal", Some("present"), None),
            &gpu
        ));
        assert!(!tolerates(
            &t(Some("nvidia.com/gpu"), "Equal", Some("absent"), None),
            &gpu
        ));
        assert!(!tolerates(&t(Some("other"), "Exists", None, None), &gpu));
    }

    #[test]
    fn node_selector_must_match_every_label() {
        let mut spec = daemon_spec();
        spec.node_selector = Some(BTreeMap::from([(
            "kubernetes.io/os".to_owned(),
            "linux".to_owned(),
        )]));
        assert!(node_fit(&spec, &node("a", &[("kubernetes.io/os", "linux")], vec![])).should_run);
        assert_eq!(
            node_fit(
                &spec,
                &node("b", &[("kubernetes.io/os", "windows")], vec![])
            ),
            NodeFit::NO
        );
        assert_eq!(node_fit(&spec, &node("c", &[], vec![])), NodeFit::NO);
    }

    #[test]
    fn untolerated_no_schedule_blocks_new_pods_but_keeps_running_ones() {
        let spec = daemon_spec();
        let tainted = node("a", &[], vec![taint("dedicated", "NoSchedule")]);
        assert_eq!(
            node_fit(&spec, &tainted),
            NodeFit {
                should_run: false,
                should_continue_running: true
            }
        );
        let evicting = node("b", &[], vec![taint("dedicated", "NoExecute")]);
        assert_eq!(node_fit(&spec, &evicting), NodeFit::NO);
        // DaemonSet pods tolerate cordon and not-ready NoExecute by themselves.
        let cordoned = node("c", &[], vec![taint(TAINT_UNSCHEDULABLE, "NoSchedule")]);
        assert_eq!(node_fit(&spec, &cordoned), NodeFit::YES);
        // ...but not the not-ready NoSchedule taint: such a node leaves desiredNumberScheduled.
        let not_ready = node(
            "d",
            &[],
            vec![
                taint(TAINT_NOT_READY, "NoSchedule"),
                taint(TAINT_NOT_READY, "NoExecute"),
            ],
        );
        assert_eq!(
            node_fit(&spec, &not_ready),
            NodeFit {
                should_run: false,
                should_continue_running: true
            }
        );
    }

    fn with_affinity(terms: Vec<NodeSelectorTerm>) -> PodSpec {
        let mut spec = daemon_spec();
        spec.affinity = Some(Affinity {
            node_affinity: Some(NodeAffinity {
                required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                    node_selector_terms: terms,
                }),
                ..NodeAffinity::default()
            }),
            ..Affinity::default()
        });
        spec
    }

    fn req(key: &str, op: &str, values: &[&str]) -> NodeSelectorRequirement {
        NodeSelectorRequirement {
            key: key.to_owned(),
            operator: op.to_owned(),
            values: Some(values.iter().map(|v| (*v).to_owned()).collect()),
        }
    }

    #[test]
    fn required_node_affinity_terms_are_ored_and_expressions_anded() {
        let linux = node(
            "a",
            &[("kubernetes.io/os", "linux"), ("cores", "8")],
            vec![],
        );
        let windows = node("b", &[("kubernetes.io/os", "windows")], vec![]);
        let spec = with_affinity(vec![NodeSelectorTerm {
            match_expressions: Some(vec![
                req("kubernetes.io/os", "In", &["linux"]),
                req("cores", "Gt", &["4"]),
            ]),
            match_fields: None,
        }]);
        assert!(node_fit(&spec, &linux).should_run);
        assert!(!node_fit(&spec, &windows).should_run);
        let either = with_affinity(vec![
            NodeSelectorTerm {
                match_expressions: Some(vec![req("kubernetes.io/os", "In", &["plan9"])]),
                match_fields: None,
            },
            NodeSelectorTerm {
                match_expressions: Some(vec![req("kubernetes.io/os", "NotIn", &["linux"])]),
                match_fields: None,
            },
        ]);
        assert!(!node_fit(&either, &linux).should_run);
        assert!(node_fit(&either, &windows).should_run);
        let exists = with_affinity(vec![NodeSelectorTerm {
            match_expressions: Some(vec![
                req("cores", "Exists", &[]),
                req("gpu", "DoesNotExist", &[]),
            ]),
            match_fields: None,
        }]);
        assert!(node_fit(&exists, &linux).should_run);
        assert!(!node_fit(&exists, &windows).should_run);
        let empty_term = with_affinity(vec![NodeSelectorTerm::default()]);
        assert!(
            !node_fit(&empty_term, &linux).should_run,
            "an empty term matches nothing"
        );
    }

    #[test]
    fn match_fields_pin_a_pod_to_one_node_by_name() {
        let spec = with_affinity(vec![NodeSelectorTerm {
            match_expressions: None,
            match_fields: Some(vec![req(NODE_NAME_FIELD, "In", &["a"])]),
        }]);
        assert!(node_fit(&spec, &node("a", &[], vec![])).should_run);
        assert!(!node_fit(&spec, &node("b", &[], vec![])).should_run);
    }
}
