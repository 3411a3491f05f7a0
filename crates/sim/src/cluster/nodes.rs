//! Simulated nodes: what a kubelet registers (kubernetes `pkg/kubelet/kubelet_node_status.go`:
//! well-known labels, capacity, addresses, conditions), cordon (`kubectl cordon` sets
//! `spec.unschedulable`; `pkg/controller/nodelifecycle` mirrors it as a taint), and the
//! not-ready taints the node lifecycle controller adds.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use k8s_openapi::api::core::v1::{
    Node, NodeAddress, NodeCondition, NodeSpec, NodeStatus, NodeSystemInfo, Taint,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::effects;
use super::scheduling::{
    EFFECT_NO_EXECUTE, EFFECT_NO_SCHEDULE, TAINT_NOT_READY, TAINT_UNSCHEDULABLE,
};

/// The Kubernetes version the simulated kubelets report.
pub const KUBELET_VERSION: &str = "v1.33.0";

/// A node as a kubelet registers it, number `index` in the cluster (it picks the
/// addresses: InternalIP `10.0.x.y`, pod CIDR `10.<128+..>.<..>.0/24`).
pub fn new_node(name: &str, index: u32, now: Timestamp) -> Node {
    let labels = BTreeMap::from([
        ("kubernetes.io/hostname".to_owned(), name.to_owned()),
        ("kubernetes.io/os".to_owned(), "linux".to_owned()),
        ("kubernetes.io/arch".to_owned(), "amd64".to_owned()),
        ("beta.kubernetes.io/os".to_owned(), "linux".to_owned()),
        ("beta.kubernetes.io/arch".to_owned(), "amd64".to_owned()),
    ]);
    let capacity = BTreeMap::from([
        ("cpu".to_owned(), Quantity("4".to_owned())),
        ("memory".to_owned(), Quantity("16318496Ki".to_owned())),
        ("pods".to_owned(), Quantity("110".to_owned())),
        (
            "ephemeral-storage".to_owned(),
            Quantity("102687672Ki".to_owned()),
        ),
    ]);
    let mut node = Node::default();
    node.metadata.name = Some(name.to_owned());
    node.metadata.labels = Some(labels);
    node.spec = Some(NodeSpec {
        pod_cidr: Some(pod_cidr(index)),
        pod_cidrs: Some(vec![pod_cidr(index)]),
        ..NodeSpec::default()
    });
    node.status = Some(NodeStatus {
        allocatable: Some(capacity.clone()),
        capacity: Some(capacity),
        addresses: Some(vec![
            NodeAddress {
                type_: "InternalIP".to_owned(),
                address: internal_ip(index),
            },
            NodeAddress {
                type_: "Hostname".to_owned(),
                address: name.to_owned(),
            },
        ]),
        conditions: Some(conditions(true, now)),
        node_info: Some(NodeSystemInfo {
            architecture: "amd64".to_owned(),
            operating_system: "linux".to_owned(),
            os_image: "Simulated Linux".to_owned(),
            kernel_version: "6.1.0-sim".to_owned(),
            container_runtime_version: "containerd://2.0.0".to_owned(),
            kubelet_version: KUBELET_VERSION.to_owned(),
            kube_proxy_version: KUBELET_VERSION.to_owned(),
            machine_id: format!("{index:032x}"),
            system_uuid: format!("{index:032x}"),
            boot_id: format!("{index:032x}"),
            ..NodeSystemInfo::default()
        }),
        phase: None,
        ..NodeStatus::default()
    });
    node
}

fn internal_ip(index: u32) -> String {
    let n = index + 1;
    format!("10.{}.{}.{}", (n >> 16) & 0xff, (n >> 8) & 0xff, n & 0xff)
}

fn pod_cidr(index: u32) -> String {
    format!("10.{}.{}.0/24", 128 + ((index >> 8) & 0x7f), index & 0xff)
}

/// The node's InternalIP, if it has one.
pub fn node_ip(node: &Node) -> Option<&str> {
    node.status
        .as_ref()?
        .addresses
        .as_ref()?
        .iter()
        .find(|a| a.type_ == "InternalIP")
        .map(|a| a.address.as_str())
}

/// The `n`-th pod IP of the node's pod CIDR (`10.x.y.<2..254>`, wrapping).
pub fn pod_ip(node: &Node, n: u32) -> Option<String> {
    let cidr = node.spec.as_ref()?.pod_cidr.as_deref()?;
    let prefix = cidr.strip_suffix(".0/24")?;
    Some(format!("{prefix}.{}", 2 + n % 253))
}

fn conditions(ready: bool, now: Timestamp) -> Vec<NodeCondition> {
    let pressure = |type_: &str, reason: &str, message: &str| NodeCondition {
        type_: type_.to_owned(),
        status: "False".to_owned(),
        reason: Some(reason.to_owned()),
        message: Some(message.to_owned()),
        last_heartbeat_time: Some(Time(now)),
        last_transition_time: Some(Time(now)),
    };
    let ready_condition = NodeCondition {
        type_: "Ready".to_owned(),
        status: if ready { "True" } else { "False" }.to_owned(),
        reason: Some(
            if ready {
                "KubeletReady"
            } else {
                "KubeletNotReady"
            }
            .to_owned(),
        ),
        message: Some(
            if ready {
                "kubelet is posting ready status"
            } else {
                "container runtime network not ready: NetworkReady=false"
            }
            .to_owned(),
        ),
        last_heartbeat_time: Some(Time(now)),
        last_transition_time: Some(Time(now)),
    };
    vec![
        pressure(
            "MemoryPressure",
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available",
        ),
        pressure(
            "DiskPressure",
            "KubeletHasNoDiskPressure",
            "kubelet has no disk pressure",
        ),
        pressure(
            "PIDPressure",
            "KubeletHasSufficientPID",
            "kubelet has sufficient PID available",
        ),
        ready_condition,
    ]
}

/// Whether the node's Ready condition is True.
pub fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True")
}

/// The kubelet reports Ready True / False (status only); unchanged if already so.
pub fn set_ready_condition(node: &mut Node, ready: bool, now: Timestamp) {
    if is_ready(node) == ready {
        return;
    }
    let status = node.status.get_or_insert_with(NodeStatus::default);
    let fresh = conditions(ready, now);
    let ready_condition = fresh.into_iter().find(|c| c.type_ == "Ready");
    let list = status.conditions.get_or_insert_with(Vec::new);
    list.retain(|c| c.type_ != "Ready");
    list.extend(ready_condition);
}

/// The taints the node lifecycle controller keeps in step with the Ready condition
/// (`node.kubernetes.io/not-ready` NoSchedule from TaintNodesByCondition and NoExecute
/// from taint-based eviction). Returns whether the spec changed.
pub fn sync_not_ready_taints(node: &mut Node, now: Timestamp) -> bool {
    let ready = is_ready(node);
    let mut changed = false;
    for effect in [EFFECT_NO_SCHEDULE, EFFECT_NO_EXECUTE] {
        changed |= if ready {
            remove_taint(node, TAINT_NOT_READY, Some(effect))
        } else {
            add_taint(node, not_ready_taint(effect, now))
        };
    }
    changed
}

fn not_ready_taint(effect: &str, now: Timestamp) -> Taint {
    Taint {
        key: TAINT_NOT_READY.to_owned(),
        effect: effect.to_owned(),
        time_added: (effect == EFFECT_NO_EXECUTE).then_some(Time(now)),
        value: None,
    }
}

/// The node's Ready condition, if it has one.
fn ready_condition(node: &Node) -> Option<&NodeCondition> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
}

/// Whether the node is NotReady the way a broken pod network makes it
/// ([`effects::NOT_READY_MESSAGE`]): its kubelet still runs. Any other NotReady (the
/// [`set_ready_condition`] switch, or an `Unknown` status) is a kubelet that does not.
pub fn is_network_not_ready(node: &Node) -> bool {
    ready_condition(node).is_some_and(|c| {
        c.status == "False" && c.message.as_deref() == Some(effects::NOT_READY_MESSAGE)
    })
}

/// The kubelet reports its pod network broken (Ready False, [`effects::NOT_READY_MESSAGE`])
/// or, `broken` false, working again: Ready True, but only if the NotReady was the network's
/// (a node NotReady for another reason stays so). Returns whether the status changed.
pub fn set_network_not_ready(node: &mut Node, broken: bool, now: Timestamp) -> bool {
    let ready = is_ready(node);
    let (status, reason, message) = if broken {
        if !ready {
            return false;
        }
        (
            "False",
            effects::NOT_READY_REASON,
            effects::NOT_READY_MESSAGE,
        )
    } else {
        if !is_network_not_ready(node) {
            return false;
        }
        ("True", "KubeletReady", "kubelet is posting ready status")
    };
    set_condition(node, "Ready", status, reason, message, now)
}

/// Sets condition `type_` (adding it when missing); its `lastTransitionTime` moves only when
/// its status changes, as the kubelet's setters do. Returns whether anything changed.
pub fn set_condition(
    node: &mut Node,
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    now: Timestamp,
) -> bool {
    let conditions = node
        .status
        .get_or_insert_with(NodeStatus::default)
        .conditions
        .get_or_insert_with(Vec::new);
    let fresh = |since: Timestamp| NodeCondition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: Some(reason.to_owned()),
        message: Some(message.to_owned()),
        last_heartbeat_time: Some(Time(now)),
        last_transition_time: Some(Time(since)),
    };
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(existing) => {
            if existing.status == status
                && existing.reason.as_deref() == Some(reason)
                && existing.message.as_deref() == Some(message)
            {
                return false;
            }
            let since = if existing.status == status {
                existing.last_transition_time.as_ref().map_or(now, |t| t.0)
            } else {
                now
            };
            *existing = fresh(since);
        }
        None => conditions.push(fresh(now)),
    }
    true
}

/// Whether condition `type_` is True.
pub fn has_condition(node: &Node, type_: &str) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == type_ && c.status == "True"))
}

/// The `NoSchedule` taint TaintNodesByCondition keeps in step with condition `type_`
/// ([`effects::condition_taint`]; none for other types). Returns whether the spec changed.
pub fn sync_condition_taint(node: &mut Node, type_: &str) -> bool {
    let Some(key) = effects::condition_taint(type_) else {
        return false;
    };
    if has_condition(node, type_) {
        add_taint(
            node,
            Taint {
                key: key.to_owned(),
                effect: EFFECT_NO_SCHEDULE.to_owned(),
                ..Taint::default()
            },
        )
    } else {
        remove_taint(node, key, Some(EFFECT_NO_SCHEDULE))
    }
}

/// Whether `node` shows something else than what its effects ask for (`wanted`), given what
/// they asked for before (`shown`): Ready True while someone breaks it, our NotReady left
/// while nobody does, a wanted condition not True, a condition no longer wanted.
pub fn health_differs(
    node: &Node,
    shown: &effects::NodeHealth,
    wanted: &effects::NodeHealth,
) -> bool {
    let ready_wrong = (wanted.not_ready && is_ready(node))
        || (!wanted.not_ready && shown.not_ready && is_network_not_ready(node));
    ready_wrong
        || wanted.conditions.iter().any(|c| !has_condition(node, c))
        || shown
            .conditions
            .difference(&wanted.conditions)
            .next()
            .is_some()
}

/// Writes on `node` what its effects ask for now (`wanted`), undoing what they asked for
/// before (`shown`) and no longer do: the Ready condition and the conditions, with the texts
/// of [`effects::condition_text`]. Taints are the node lifecycle controller's
/// ([`sync_not_ready_taints`], [`sync_condition_taint`]).
pub fn show_health(
    node: &mut Node,
    shown: &effects::NodeHealth,
    wanted: &effects::NodeHealth,
    now: Timestamp,
) {
    if wanted.not_ready {
        set_network_not_ready(node, true, now);
    } else if shown.not_ready {
        set_network_not_ready(node, false, now);
    }
    for condition in &wanted.conditions {
        let (reason, message) = effects::condition_text(condition, true);
        set_condition(node, condition, "True", &reason, &message, now);
    }
    for condition in shown.conditions.difference(&wanted.conditions) {
        let (reason, message) = effects::condition_text(condition, false);
        set_condition(node, condition, "False", &reason, &message, now);
    }
}

/// Cordon (`spec.unschedulable: true` plus the unschedulable taint) or uncordon.
pub fn set_unschedulable(node: &mut Node, unschedulable: bool) {
    let spec = node.spec.get_or_insert_with(NodeSpec::default);
    spec.unschedulable = unschedulable.then_some(true);
    if unschedulable {
        add_taint(
            node,
            Taint {
                key: TAINT_UNSCHEDULABLE.to_owned(),
                effect: EFFECT_NO_SCHEDULE.to_owned(),
                ..Taint::default()
            },
        );
    } else {
        remove_taint(node, TAINT_UNSCHEDULABLE, Some(EFFECT_NO_SCHEDULE));
    }
}

/// Adds `taint` unless one with the same key and effect is there; returns whether it was added.
pub fn add_taint(node: &mut Node, taint: Taint) -> bool {
    let taints = node
        .spec
        .get_or_insert_with(NodeSpec::default)
        .taints
        .get_or_insert_with(Vec::new);
    if taints
        .iter()
        .any(|t| t.key == taint.key && t.effect == taint.effect)
    {
        return false;
    }
    taints.push(taint);
    true
}

/// Removes the taints with `key` (and `effect`, when given); returns whether any was removed.
pub fn remove_taint(node: &mut Node, key: &str, effect: Option<&str>) -> bool {
    let Some(taints) = node.spec.as_mut().and_then(|s| s.taints.as_mut()) else {
        return false;
    };
    let before = taints.len();
    taints.retain(|t| !(t.key == key && effect.is_none_or(|e| t.effect == e)));
    let removed = taints.len() != before;
    if taints.is_empty()
        && let Some(spec) = node.spec.as_mut()
    {
        spec.taints = None;
    }
    removed
}

/// Moves `pod` in a node -> pods index (the cluster driver's and the KWOK player's) from the
/// node `bound` names to `node`, and records `node` in `bound`. A pod unbound (`None`) is in no
/// node's set.
pub(crate) fn rebind_pod<K: Ord + Clone>(
    pods_on_node: &mut HashMap<String, BTreeSet<K>>,
    pod: &K,
    bound: &mut Option<String>,
    node: Option<String>,
) {
    if *bound == node {
        return;
    }
    if let Some(old) = bound.take()
        && let Some(set) = pods_on_node.get_mut(&old)
    {
        set.remove(pod);
    }
    if let Some(new) = &node {
        pods_on_node
            .entry(new.clone())
            .or_default()
            .insert(pod.clone());
    }
    *bound = node;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::scheduling::{add_daemon_tolerations, node_fit};
    use k8s_openapi::api::core::v1::PodSpec;
    use k8s_openapi::jiff::SignedDuration;

    fn t0() -> Timestamp {
        Timestamp::from_second(1_767_225_600).unwrap_or(Timestamp::UNIX_EPOCH)
    }

    #[test]
    fn a_new_node_carries_the_well_known_labels_and_is_ready() {
        let node = new_node("node-1", 0, t0());
        let labels = node.metadata.labels.clone().unwrap_or_default();
        assert_eq!(
            labels.get("kubernetes.io/hostname").map(String::as_str),
            Some("node-1")
        );
        assert_eq!(
            labels.get("kubernetes.io/os").map(String::as_str),
            Some("linux")
        );
        assert_eq!(
            labels.get("kubernetes.io/arch").map(String::as_str),
            Some("amd64")
        );
        assert!(is_ready(&node));
        assert_eq!(node_ip(&node), Some("10.0.0.1"));
        assert_eq!(pod_ip(&node, 0).as_deref(), Some("10.128.0.2"));
        assert_eq!(node_ip(&new_node("n", 4999, t0())), Some("10.0.19.136"));
        assert_ne!(
            pod_ip(&new_node("a", 1, t0()), 0),
            pod_ip(&new_node("b", 257, t0()), 0)
        );
    }

    #[test]
    fn not_ready_taints_follow_the_ready_condition() {
        let mut node = new_node("node-1", 0, t0());
        assert!(!sync_not_ready_taints(&mut node, t0()));
        set_ready_condition(&mut node, false, t0());
        assert!(!is_ready(&node));
        assert!(sync_not_ready_taints(&mut node, t0()));
        let taints = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default();
        assert_eq!(taints.len(), 2);
        let mut spec = PodSpec::default();
        add_daemon_tolerations(&mut spec);
        let fit = node_fit(&spec, &node);
        assert!(!fit.should_run && fit.should_continue_running);
        set_ready_condition(&mut node, true, t0());
        assert!(sync_not_ready_taints(&mut node, t0()));
        assert!(node.spec.as_ref().and_then(|s| s.taints.as_ref()).is_none());
    }

    #[test]
    fn a_broken_network_is_not_ready_and_only_its_own_not_ready_is_undone() {
        let later = t0()
            .checked_add(SignedDuration::from_secs(60))
            .unwrap_or(t0());
        let mut node = new_node("node-1", 0, t0());
        assert!(set_network_not_ready(&mut node, true, later));
        assert!(!is_ready(&node) && is_network_not_ready(&node));
        let ready = ready_condition(&node).cloned().unwrap_or_default();
        assert_eq!(ready.reason.as_deref(), Some("KubeletNotReady"));
        assert_eq!(ready.last_transition_time.map(|t| t.0), Some(later));
        assert!(!set_network_not_ready(&mut node, true, later));
        assert!(set_network_not_ready(&mut node, false, later));
        assert!(is_ready(&node));
        // A node NotReady for another reason (its kubelet stopped) is left so.
        set_ready_condition(&mut node, false, later);
        assert!(!is_network_not_ready(&node));
        assert!(!set_network_not_ready(&mut node, false, later));
        assert!(!set_network_not_ready(&mut node, true, later));
        assert!(!is_ready(&node));
    }

    #[test]
    fn conditions_keep_their_transition_time_and_bring_their_taint() {
        let later = t0()
            .checked_add(SignedDuration::from_secs(60))
            .unwrap_or(t0());
        let mut node = new_node("node-1", 0, t0());
        assert!(set_condition(
            &mut node,
            "NetworkUnavailable",
            "True",
            "A",
            "a",
            t0()
        ));
        assert!(!set_condition(
            &mut node,
            "NetworkUnavailable",
            "True",
            "A",
            "a",
            later
        ));
        assert!(set_condition(
            &mut node,
            "NetworkUnavailable",
            "True",
            "B",
            "b",
            later
        ));
        let since = |node: &Node| {
            node.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|c| c.iter().find(|c| c.type_ == "NetworkUnavailable"))
                .and_then(|c| c.last_transition_time.as_ref().map(|t| t.0))
        };
        assert_eq!(since(&node), Some(t0()));
        assert!(has_condition(&node, "NetworkUnavailable"));
        assert!(sync_condition_taint(&mut node, "NetworkUnavailable"));
        assert_eq!(taint_count(&node), Some(1));
        assert!(!sync_condition_taint(&mut node, "KernelDeadlock"));
        assert!(set_condition(
            &mut node,
            "NetworkUnavailable",
            "False",
            "C",
            "c",
            later
        ));
        assert_eq!(since(&node), Some(later));
        assert!(sync_condition_taint(&mut node, "NetworkUnavailable"));
        assert_eq!(taint_count(&node), None);
    }

    /// How many taints `node` has (`None`: no taint list at all).
    fn taint_count(node: &Node) -> Option<usize> {
        node.spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .map(Vec::len)
    }

    #[test]
    fn cordon_sets_unschedulable_and_its_taint_and_uncordon_clears_both() {
        let mut node = new_node("node-1", 0, t0());
        set_unschedulable(&mut node, true);
        assert_eq!(node.spec.as_ref().and_then(|s| s.unschedulable), Some(true));
        assert_eq!(taint_count(&node), Some(1));
        set_unschedulable(&mut node, true);
        assert_eq!(taint_count(&node), Some(1));
        set_unschedulable(&mut node, false);
        assert_eq!(node.spec.as_ref().and_then(|s| s.unschedulable), None);
        assert!(node.spec.as_ref().and_then(|s| s.taints.as_ref()).is_none());
    }
}
