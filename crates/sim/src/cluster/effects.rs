//! What pods do to their node, as a pure model shared by canary-sim's cluster task and the
//! helper that plays the same behaviours on a real control plane with KWOK nodes: which
//! causes (a pod's [`Effect`]s, or a node annotation set by hand) hold the node NotReady,
//! hold a condition True, or break the pods beside them; and the texts a real node shows
//! for each.
//!
//! Invariants: an effect lasts exactly as long as its cause ([`NodeEffects::stop`] when the
//! pod is gone); a pod never disrupts itself nor the pods of its own controller (a CNI
//! agent's DaemonSet pods, old and new, are not its neighbours).
//!
//! Kubernetes references: the kubelet's Ready condition (`pkg/kubelet/nodestatus/setters.go`
//! `ReadyCondition`: reason `KubeletNotReady`, the runtime's network error as message), the
//! route controller's `NetworkUnavailable` (`pkg/controller/route/route_controller.go`),
//! node-problem-detector's `KernelDeadlock` and `ReadonlyFilesystem`
//! (`config/kernel-monitor.json`), and the taints of TaintNodesByCondition
//! (`pkg/controller/nodelifecycle/node_lifecycle_controller.go`,
//! `nodeConditionToTaintKeyStatusMap`).

use std::collections::{BTreeMap, BTreeSet};

use super::behavior::Effect;
use super::scheduling::{
    TAINT_DISK_PRESSURE, TAINT_MEMORY_PRESSURE, TAINT_NETWORK_UNAVAILABLE, TAINT_PID_PRESSURE,
};

/// Node annotation: while present (any value), the node is NotReady as a pod with
/// `breaks-node` makes it. For trying an unrelated node failure by hand, on canary-sim and on
/// the real control plane alike (`kubectl annotate node node-3 sim.canary.daemonset.dev/not-ready=disk`).
pub const NODE_NOT_READY_ANNOTATION: &str = "sim.canary.daemonset.dev/not-ready";
/// Node annotation: comma-separated condition types the node reports True while listed,
/// by hand (`kubectl annotate node node-3 sim.canary.daemonset.dev/conditions=KernelDeadlock`).
pub const NODE_CONDITIONS_ANNOTATION: &str = "sim.canary.daemonset.dev/conditions";

/// The Ready condition's reason while the kubelet reports its node not ready.
pub const NOT_READY_REASON: &str = "KubeletNotReady";
/// The Ready condition's message of a node whose pod network is broken, as a kubelet on
/// containerd reports it when the CNI plugin is gone (the `breaks-node` failure). The kubelet
/// itself still runs: it keeps its pods, finishes deletions and starts `hostNetwork` pods.
pub const NOT_READY_MESSAGE: &str = "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized";

/// Who holds an effect on a node.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Cause {
    /// A pod, by namespace and name.
    Pod(String, String),
    /// The node's own annotations ([`NODE_NOT_READY_ANNOTATION`],
    /// [`NODE_CONDITIONS_ANNOTATION`]).
    Annotation,
}

/// What a node shows because of its effects.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeHealth {
    /// Ready is False ([`NOT_READY_MESSAGE`]).
    pub not_ready: bool,
    /// Condition types held True.
    pub conditions: BTreeSet<String>,
}

/// The effects in force on one node, and who holds each.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeEffects {
    breakers: BTreeSet<Cause>,
    conditions: BTreeMap<String, BTreeSet<Cause>>,
    /// Causes breaking their neighbours, with their controller's uid.
    disruptors: BTreeMap<Cause, Option<String>>,
}

impl NodeEffects {
    /// `cause` starts `effect`; `owner` is its controller's uid (for
    /// [`Effect::BreaksNeighbours`]: its owner's other pods are spared).
    pub fn start(&mut self, cause: Cause, effect: &Effect, owner: Option<String>) {
        match effect {
            Effect::BreaksNode => {
                self.breakers.insert(cause);
            }
            Effect::NodeCondition(condition) => {
                self.conditions
                    .entry(condition.clone())
                    .or_default()
                    .insert(cause);
            }
            Effect::BreaksNeighbours => {
                self.disruptors.insert(cause, owner);
            }
        }
    }

    /// Every effect of `cause` ends (the pod is gone); returns whether any did.
    pub fn stop(&mut self, cause: &Cause) -> bool {
        let mut stopped = self.breakers.remove(cause);
        stopped |= self.disruptors.remove(cause).is_some();
        self.conditions.retain(|_, causes| {
            stopped |= causes.remove(cause);
            !causes.is_empty()
        });
        stopped
    }

    /// What the node shows.
    pub fn health(&self) -> NodeHealth {
        NodeHealth {
            not_ready: !self.breakers.is_empty(),
            conditions: self.conditions.keys().cloned().collect(),
        }
    }

    /// Whether someone breaks the neighbours here.
    pub fn disrupting(&self) -> bool {
        !self.disruptors.is_empty()
    }

    /// Whether the pod `pod` (of controller `owner`) is broken by a neighbour: someone else
    /// breaks the neighbours, and is not of the same controller.
    pub fn disrupts(&self, pod: &Cause, owner: Option<&str>) -> bool {
        self.disruptor_of(pod, owner).is_some()
    }

    /// The first neighbour that breaks the pod `pod` (of controller `owner`), if any.
    pub fn disruptor_of(&self, pod: &Cause, owner: Option<&str>) -> Option<&Cause> {
        self.disruptors
            .iter()
            .find(|(cause, their_owner)| {
                *cause != pod
                    && match (their_owner.as_deref(), owner) {
                        (Some(theirs), Some(ours)) => theirs != ours,
                        _ => true,
                    }
            })
            .map(|(cause, _)| cause)
    }

    /// Who holds the node NotReady.
    pub fn breakers(&self) -> impl Iterator<Item = &Cause> {
        self.breakers.iter()
    }

    /// Nothing in force.
    pub fn is_empty(&self) -> bool {
        self.breakers.is_empty() && self.conditions.is_empty() && self.disruptors.is_empty()
    }
}

/// The effects a node's annotations ask for: NotReady, and the listed conditions.
pub fn annotation_effects(annotations: Option<&BTreeMap<String, String>>) -> Vec<Effect> {
    let Some(annotations) = annotations else {
        return Vec::new();
    };
    let mut effects = Vec::new();
    if annotations.contains_key(NODE_NOT_READY_ANNOTATION) {
        effects.push(Effect::BreaksNode);
    }
    if let Some(list) = annotations.get(NODE_CONDITIONS_ANNOTATION) {
        let types: BTreeSet<&str> = list
            .split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty() && *t != "Ready")
            .collect();
        effects.extend(
            types
                .into_iter()
                .map(|t| Effect::NodeCondition(t.to_owned())),
        );
    }
    effects
}

/// The reason and message a node shows for `condition` True or False: the texts of the
/// component that reports it in a real cluster, a generic pair for other types.
pub fn condition_text(condition: &str, status: bool) -> (String, String) {
    let known = match (condition, status) {
        ("NetworkUnavailable", true) => {
            Some(("NoRouteCreated", "RouteController failed to create a route"))
        }
        ("NetworkUnavailable", false) => Some(("RouteCreated", "RouteController created a route")),
        ("KernelDeadlock", true) => Some((
            "DockerHung",
            "kernel: INFO: task docker:7 blocked for more than 120 seconds.",
        )),
        ("KernelDeadlock", false) => Some(("KernelHasNoDeadlock", "kernel has no deadlock")),
        ("ReadonlyFilesystem", true) => {
            Some(("FilesystemIsReadOnly", "Remounting filesystem read-only"))
        }
        ("ReadonlyFilesystem", false) => {
            Some(("FilesystemIsNotReadOnly", "Filesystem is not read-only"))
        }
        ("MemoryPressure", true) => Some((
            "KubeletHasInsufficientMemory",
            "kubelet has insufficient memory available",
        )),
        ("MemoryPressure", false) => Some((
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available",
        )),
        ("DiskPressure", true) => Some(("KubeletHasDiskPressure", "kubelet has disk pressure")),
        ("DiskPressure", false) => {
            Some(("KubeletHasNoDiskPressure", "kubelet has no disk pressure"))
        }
        ("PIDPressure", true) => Some((
            "KubeletHasInsufficientPID",
            "kubelet has insufficient PID available",
        )),
        ("PIDPressure", false) => Some((
            "KubeletHasSufficientPID",
            "kubelet has sufficient PID available",
        )),
        _ => None,
    };
    match known {
        Some((reason, message)) => (reason.to_owned(), message.to_owned()),
        None => {
            // A reason is CamelCase without separators: the type's last segment, so
            // `example.com/gpu-healthy` gives `GpuHealthy`.
            let short: String = condition
                .rsplit('/')
                .next()
                .unwrap_or(condition)
                .split(|c: char| !c.is_ascii_alphanumeric())
                .flat_map(|word| {
                    let mut chars = word.chars();
                    chars
                        .next()
                        .map(|first| first.to_ascii_uppercase())
                        .into_iter()
                        .chain(chars)
                })
                .collect();
            if status {
                (short, format!("{condition} is reported on this node"))
            } else {
                (format!("No{short}"), format!("{condition} is not reported"))
            }
        }
    }
}

/// The `NoSchedule` taint the node lifecycle controller keeps while `condition` is True
/// (TaintNodesByCondition), if any.
pub fn condition_taint(condition: &str) -> Option<&'static str> {
    match condition {
        "MemoryPressure" => Some(TAINT_MEMORY_PRESSURE),
        "DiskPressure" => Some(TAINT_DISK_PRESSURE),
        "PIDPressure" => Some(TAINT_PID_PRESSURE),
        "NetworkUnavailable" => Some(TAINT_NETWORK_UNAVAILABLE),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str) -> Cause {
        Cause::Pod("ns".into(), name.into())
    }

    #[test]
    fn an_effect_lasts_while_one_of_its_causes_does() {
        let mut effects = NodeEffects::default();
        effects.start(pod("a"), &Effect::BreaksNode, None);
        effects.start(pod("b"), &Effect::BreaksNode, None);
        effects.start(
            pod("a"),
            &Effect::NodeCondition("KernelDeadlock".into()),
            None,
        );
        assert!(effects.health().not_ready);
        assert!(effects.stop(&pod("a")));
        assert_eq!(
            effects.health(),
            NodeHealth {
                not_ready: true,
                conditions: BTreeSet::new()
            }
        );
        assert!(!effects.stop(&pod("a")));
        assert!(effects.stop(&pod("b")));
        assert!(effects.is_empty());
        assert_eq!(effects.health(), NodeHealth::default());
    }

    #[test]
    fn a_pod_spares_itself_and_its_controllers_pods() {
        let mut effects = NodeEffects::default();
        effects.start(
            pod("cni-new"),
            &Effect::BreaksNeighbours,
            Some("ds-uid".into()),
        );
        assert!(effects.disrupting());
        assert!(!effects.disrupts(&pod("cni-new"), Some("ds-uid")));
        assert!(!effects.disrupts(&pod("cni-old"), Some("ds-uid")));
        assert!(effects.disrupts(&pod("web"), Some("rs-uid")));
        assert!(effects.disrupts(&pod("bare"), None));
        // A bare pod breaking its neighbours spares nobody but itself.
        effects.stop(&pod("cni-new"));
        effects.start(pod("bare"), &Effect::BreaksNeighbours, None);
        assert!(effects.disrupts(&pod("cni-old"), Some("ds-uid")));
        assert!(!effects.disrupts(&pod("bare"), None));
    }

    #[test]
    fn node_annotations_ask_for_not_ready_and_conditions() {
        let annotations = BTreeMap::from([
            (NODE_NOT_READY_ANNOTATION.to_owned(), String::new()),
            (
                NODE_CONDITIONS_ANNOTATION.to_owned(),
                " KernelDeadlock,,Ready,NetworkUnavailable,KernelDeadlock".to_owned(),
            ),
        ]);
        assert_eq!(
            annotation_effects(Some(&annotations)),
            vec![
                Effect::BreaksNode,
                Effect::NodeCondition("KernelDeadlock".into()),
                Effect::NodeCondition("NetworkUnavailable".into()),
            ]
        );
        assert!(annotation_effects(None).is_empty());
    }

    #[test]
    fn condition_texts_are_the_reporting_components_and_generic_otherwise() {
        assert_eq!(
            condition_text("NetworkUnavailable", true).0,
            "NoRouteCreated"
        );
        assert_eq!(
            condition_text("KernelDeadlock", false).0,
            "KernelHasNoDeadlock"
        );
        assert_eq!(
            condition_text("example.com/gpu-healthy", true),
            (
                "GpuHealthy".to_owned(),
                "example.com/gpu-healthy is reported on this node".to_owned()
            )
        );
        assert_eq!(
            condition_taint("NetworkUnavailable"),
            Some(TAINT_NETWORK_UNAVAILABLE)
        );
        assert_eq!(condition_taint("KernelDeadlock"), None);
    }
}
