//! The node as the watch decodes it, [`WatchedNode`] (the metadata and the node's
//! [`NodeHealth`]), and as the node cache keeps it, [`CachedNode`] (its name, its labels in two
//! allocations, [`NodeLabels`] over [`Texts`], and its health), in an
//! [`OwnerIndex`](crate::index::OwnerIndex) whose [`NodeTally`] says when a node event changed
//! what the Pods driver reads.
//!
//! A node's status carries its image list, capacity, addresses and daemon endpoints, and its
//! metadata the managed fields: several KiB per node, on real clusters tens. The controller used
//! to decode every Node whole and slim it afterwards; on 5,000 nodes the first list alone made
//! the controller's peak memory (59 MiB idle against `sim serve --nodes 5000`, 18 MiB on 10
//! nodes; issue 20). As [`WatchedPod`](crate::index::WatchedPod) does for pods, serde skips what
//! the type does not name without building it. The cache then keeps less again: a reflector
//! store held each node's `ObjectMeta` (368 bytes with the health), its labels as a
//! `BTreeMap` (two `String`s a label, about 720 bytes a node for five labels) and an
//! `ObjectRef` per node in the store and in the watch's predicate map: about 1.5 KB a node,
//! half the controller's heap on 5,000 nodes (docs/benchmarks.md). A [`CachedNode`] is its
//! name, one text and one offset table for all its labels, and its health.
//!
//! Invariant: what the driver reads of a [`CachedNode`] (its labels, and its health by
//! [`node_health`], the one rule) is what it reads of the full node (tested below). A field the
//! driver starts reading must be kept here too.

use std::collections::{BTreeMap, BTreeSet};

use canary_predicates::{Labels, Texts, TextsBuilder, node_health};
use canary_state_machine::{NodeHealth, SHORT_TEXT_BYTES, cut};
use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeSpec, NodeStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use serde::Deserialize;

use crate::index::{Id, Indexed, Moved, Tally, id};

/// A node decoded with only what the Pods driver reads.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WatchedNode(pub NodeFacts);

/// What a [`WatchedNode`] keeps: the metadata a cache and a watch need, with the labels, and
/// the node's health ([`node_health`] of the node as it was decoded).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeFacts {
    /// Name, UID, resource version, generation, timestamps and labels; no annotations, no
    /// managed fields.
    pub metadata: ObjectMeta,
    /// Cordoned, NotReady or Healthy.
    pub health: NodeHealth,
    /// The conditions that may make the node unhealthy under a CanaryDaemonSet's health
    /// gates (issue 46): `Ready` when not `True`, and every other condition that is `True`.
    /// Empty on a healthy node.
    pub trouble: Vec<NodeTrouble>,
}

/// A condition that may make a node unhealthy: `Ready` not `True`, or another condition
/// `True` (which ones count is each CanaryDaemonSet's `spec.health.nodeConditions`). The
/// reason and message are outside text, cut to [`SHORT_TEXT_BYTES`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeTrouble {
    /// The condition type.
    pub condition: Box<str>,
    /// Its status (`False`, `Unknown`, `True`).
    pub status: Box<str>,
    /// Its reason, cut.
    pub reason: Box<str>,
    /// Its message, cut.
    pub message: Box<str>,
    /// Its `lastTransitionTime`, whole seconds since the epoch (0 when absent).
    pub since: i64,
}

impl NodeTrouble {
    /// The condition `condition` as kept, if it may make the node unhealthy.
    fn of(condition: &WireCondition) -> Option<Self> {
        let troubled = if condition.type_ == "Ready" {
            condition.status != "True"
        } else {
            condition.status == "True"
        };
        troubled.then(|| NodeTrouble {
            condition: condition.type_.as_str().into(),
            status: condition.status.as_str().into(),
            reason: cut(
                condition.reason.as_deref().unwrap_or_default(),
                SHORT_TEXT_BYTES,
            )
            .into(),
            message: cut(
                condition.message.as_deref().unwrap_or_default(),
                SHORT_TEXT_BYTES,
            )
            .into(),
            since: condition
                .last_transition_time
                .as_ref()
                .map_or(0, |time| time.0.as_second()),
        })
    }
}

/// The wire form: the fields kept, every other one skipped by serde unbuilt.
type Wire = crate::wire::Wire<WireMeta, WireSpec, WireStatus>;

/// The metadata a cache and a watch need (identity, resource version for resuming, labels);
/// the annotations and managed fields are left out.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct WireMeta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    uid: Option<String>,
    #[serde(default)]
    resource_version: Option<String>,
    #[serde(default)]
    generation: Option<i64>,
    #[serde(default)]
    creation_timestamp: Option<Time>,
    #[serde(default)]
    deletion_timestamp: Option<Time>,
    #[serde(default)]
    labels: Option<BTreeMap<String, String>>,
}

#[derive(Deserialize)]
struct WireSpec {
    #[serde(default)]
    unschedulable: Option<bool>,
}

#[derive(Deserialize)]
struct WireStatus {
    #[serde(default)]
    conditions: Option<Vec<WireCondition>>,
}

/// A condition's type, status, reason, message and transition time (the health gates name
/// what they saw and since when); the heartbeat, which a kubelet moves on every report, is
/// left out.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireCondition {
    #[serde(rename = "type")]
    type_: String,
    status: String,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    last_transition_time: Option<Time>,
}

impl<'de> Deserialize<'de> for WatchedNode {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let wire = Wire::deserialize(deserializer)?;
        let meta = wire.metadata;
        // The health by the one rule (`node_health`), read from a node that holds only its
        // inputs and is dropped once read.
        let conditions: Vec<WireCondition> = wire
            .status
            .and_then(|status| status.conditions)
            .unwrap_or_default();
        let trouble = conditions.iter().filter_map(NodeTrouble::of).collect();
        let ready: Vec<NodeCondition> = conditions
            .into_iter()
            .filter(|c| c.type_ == "Ready")
            .map(|c| NodeCondition {
                type_: c.type_,
                status: c.status,
                ..NodeCondition::default()
            })
            .collect();
        let inputs = Node {
            spec: wire.spec.map(|spec| NodeSpec {
                unschedulable: spec.unschedulable,
                ..NodeSpec::default()
            }),
            status: Some(NodeStatus {
                conditions: Some(ready),
                ..NodeStatus::default()
            }),
            ..Node::default()
        };
        Ok(WatchedNode(NodeFacts {
            metadata: ObjectMeta {
                name: meta.name,
                uid: meta.uid,
                resource_version: meta.resource_version,
                generation: meta.generation,
                creation_timestamp: meta.creation_timestamp,
                deletion_timestamp: meta.deletion_timestamp,
                labels: meta.labels,
                ..ObjectMeta::default()
            },
            health: node_health(&inputs),
            trouble,
        }))
    }
}

crate::index::partially_decoded!(WatchedNode, Node);

/// The one group of the node index: nodes have no owner, the cache keeps them all together.
pub const ALL_NODES: &str = "";

/// A node's labels in two allocations whatever their number ([`Texts`]: every key and value
/// one after the other, in key order). Read by key ([`Labels`]) like the map they came from.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct NodeLabels(Texts);

impl NodeLabels {
    /// The labels of `map`.
    pub fn new(map: &BTreeMap<String, String>) -> Self {
        let mut texts = TextsBuilder::default();
        texts.push_pairs(map);
        Self(texts.build())
    }

    /// How many labels.
    pub fn len(&self) -> usize {
        self.0.len() / 2
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Every label, key and value, in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.pairs(0)
    }
}

impl Labels for NodeLabels {
    fn label(&self, key: &str) -> Option<&str> {
        self.0.pair_value(0, key)
    }
}

/// A node as the cache keeps it: what the Pods driver reads, nothing else.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CachedNode {
    /// The node's name.
    pub name: String,
    /// Its labels (zone, canary selector).
    pub labels: NodeLabels,
    /// Cordoned, NotReady or Healthy.
    pub health: NodeHealth,
    /// What may make it unhealthy under a health gate ([`NodeFacts::trouble`]); `None` on a
    /// healthy node (most of them: no allocation).
    pub trouble: Option<Box<[NodeTrouble]>>,
}

impl CachedNode {
    /// The cached form of a watched node.
    pub fn of(node: &WatchedNode) -> Self {
        let metadata = &node.0.metadata;
        Self {
            name: metadata.name.clone().unwrap_or_default(),
            labels: metadata
                .labels
                .as_ref()
                .map(NodeLabels::new)
                .unwrap_or_default(),
            health: node.0.health,
            trouble: (!node.0.trouble.is_empty())
                .then(|| node.0.trouble.clone().into_boxed_slice()),
        }
    }

    /// The node's troubled conditions.
    pub fn trouble(&self) -> &[NodeTrouble] {
        self.trouble.as_deref().unwrap_or_default()
    }
}

/// Nodes are kept in one group ([`ALL_NODES`]), by name.
impl Indexed for CachedNode {
    type Source = WatchedNode;
    type Tally = NodeTally;

    fn from_source(node: &WatchedNode) -> Self {
        Self::of(node)
    }

    fn source_identity(node: &WatchedNode) -> Id {
        id("", node.0.metadata.name.as_deref().unwrap_or_default())
    }

    fn index_key(&self) -> Option<String> {
        Some(ALL_NODES.to_owned())
    }

    fn identity(&self) -> Id {
        id("", &self.name)
    }
}

/// Whether a node event matters to a pass: a node that joins or leaves, or whose labels,
/// health or troubled conditions changed. Kubelets report their status every few minutes (a
/// heartbeat, a new resource version): that changes none of them, and triggers nothing.
///
/// It also keeps the names of the troubled nodes ([`CachedNode::trouble`]), so that the
/// health gates read those (usually none or a few) and never walk every node (issue 53).
#[derive(Debug, Default, Clone)]
pub struct NodeTally {
    troubled: BTreeSet<String>,
}

impl NodeTally {
    /// The names of the nodes with a troubled condition, in order.
    pub fn troubled(&self) -> impl Iterator<Item = &str> {
        self.troubled.iter().map(String::as_str)
    }
}

impl Tally<CachedNode> for NodeTally {
    fn replace(&mut self, old: Option<&CachedNode>, new: Option<&CachedNode>) -> Moved {
        if let Some(old) = old
            && old.trouble.is_some()
        {
            self.troubled.remove(&old.name);
        }
        if let Some(new) = new
            && new.trouble.is_some()
        {
            self.troubled.insert(new.name.clone());
        }
        match (old, new) {
            (Some(old), Some(new))
                if old.labels == new.labels
                    && old.health == new.health
                    && old.trouble == new.trouble =>
            {
                Moved::Nothing
            }
            _ => Moved::Decision,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(ready: &str, unschedulable: bool) -> serde_json::Value {
        json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": "ip-10-0-1-1",
                "uid": "u-1",
                "resourceVersion": "42",
                "labels": {"topology.kubernetes.io/zone": "eu-west-1a", "canary": "true"},
                "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
                "managedFields": [{"manager": "kubelet", "operation": "Update"}]
            },
            "spec": {"podCIDR": "10.0.1.0/24", "unschedulable": unschedulable},
            "status": {
                "images": [{"names": ["quay.io/kubevirt/virt-handler:v1.4.0"], "sizeBytes": 1}],
                "capacity": {"cpu": "4"},
                "conditions": [
                    {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory"},
                    {"type": "Ready", "status": ready, "reason": "KubeletReady",
                     "message": "kubelet is posting ready status",
                     "lastHeartbeatTime": "2026-12-02T19:45:05Z"}
                ]
            }
        })
    }

    /// The driver's readings of a node are the same decoded whole or watched, and the rest is
    /// left out.
    #[test]
    fn a_watched_node_reads_like_the_whole_node() {
        for (ready, unschedulable) in [
            ("True", false),
            ("False", false),
            ("Unknown", false),
            ("True", true),
            ("False", true),
        ] {
            let value = node(ready, unschedulable);
            let whole: Node = serde_json::from_value(value.clone()).unwrap();
            let watched: WatchedNode = serde_json::from_value(value).unwrap();
            assert_eq!(watched.0.health, node_health(&whole), "{ready}");
            assert_eq!(watched.0.metadata.labels, whole.metadata.labels);
            assert_eq!(watched.0.metadata.name, whole.metadata.name);
            assert_eq!(
                watched.0.metadata.resource_version,
                whole.metadata.resource_version
            );
            assert!(watched.0.metadata.annotations.is_none());
            assert!(watched.0.metadata.managed_fields.is_none());
        }
        let mut no_conditions = node("True", false);
        no_conditions["status"] = json!({});
        let watched: WatchedNode = serde_json::from_value(no_conditions).unwrap();
        assert_eq!(watched.0.health, NodeHealth::NotReady);
    }

    /// The conditions that may make a node unhealthy are kept, with their reason and message
    /// cut and their transition time; a healthy node keeps none (no allocation), and the
    /// tally names the troubled nodes only.
    #[test]
    fn troubled_conditions_are_kept_cut_and_tallied() {
        let healthy = CachedNode::of(&serde_json::from_value(node("True", false)).unwrap());
        assert!(healthy.trouble.is_none());
        let mut broken = node("Unknown", false);
        broken["metadata"]["name"] = json!("broken");
        broken["status"]["conditions"][1]["lastTransitionTime"] = json!("2026-12-02T19:45:05Z");
        broken["status"]["conditions"][1]["message"] = json!("x".repeat(5000));
        broken["status"]["conditions"][0] =
            json!({"type": "KernelDeadlock", "status": "True", "reason": "DockerHung"});
        let broken = CachedNode::of(&serde_json::from_value(broken).unwrap());
        let trouble = broken.trouble();
        assert_eq!(trouble.len(), 2);
        assert_eq!(&*trouble[0].condition, "KernelDeadlock");
        assert_eq!(
            (&*trouble[1].condition, &*trouble[1].status),
            ("Ready", "Unknown")
        );
        assert_eq!(trouble[1].since, 1_796_240_705);
        assert!(trouble[1].message.len() <= SHORT_TEXT_BYTES);
        let mut tally = NodeTally::default();
        let _ = tally.replace(None, Some(&healthy));
        let _ = tally.replace(None, Some(&broken));
        assert_eq!(tally.troubled().collect::<Vec<_>>(), ["broken"]);
        let _ = tally.replace(Some(&broken), None);
        assert_eq!(tally.troubled().count(), 0);
    }

    /// A watched node is the metadata and the health: a fraction of the node it came from.
    #[test]
    fn a_watched_node_is_a_fraction_of_a_node() {
        assert!(std::mem::size_of::<WatchedNode>() * 3 < std::mem::size_of::<Node>());
    }

    /// A node event triggers on what the driver reads, the health and the labels, not on a
    /// heartbeat, nor on a Ready condition that changes nothing the driver reads (a cordoned
    /// node stays cordoned).
    #[test]
    fn a_node_event_moves_only_with_what_the_driver_reads() {
        let cached =
            |value: serde_json::Value| CachedNode::of(&serde_json::from_value(value).unwrap());
        let moved = |old: &serde_json::Value, new: serde_json::Value| {
            NodeTally::default().replace(Some(&cached(old.clone())), Some(&cached(new)))
        };
        let base = node("True", false);
        let mut heartbeat = node("True", false);
        heartbeat["status"]["conditions"][1]["lastHeartbeatTime"] = json!("2026-12-02T19:50:05Z");
        heartbeat["metadata"]["resourceVersion"] = json!("43");
        assert_eq!(moved(&base, heartbeat), Moved::Nothing);
        assert_eq!(moved(&base, node("False", false)), Moved::Decision);
        assert_eq!(moved(&base, node("True", true)), Moved::Decision);
        // A cordoned node stays cordoned, but its Ready condition is read by the health gates
        // (issue 46): its recovery is a change.
        assert_eq!(
            moved(&node("False", true), node("True", true)),
            Moved::Decision
        );
        let mut no_network = node("True", false);
        no_network["status"]["conditions"][0] =
            json!({"type": "NetworkUnavailable", "status": "True", "reason": "NoRoute"});
        assert_eq!(moved(&base, no_network), Moved::Decision);
        let mut relabelled = node("True", false);
        relabelled["metadata"]["labels"]["canary"] = json!("false");
        assert_eq!(moved(&base, relabelled), Moved::Decision);
        assert_eq!(
            NodeTally::default().replace(None, Some(&cached(base.clone()))),
            Moved::Decision,
            "a node that joins"
        );
        assert_eq!(
            NodeTally::default().replace(Some(&cached(base)), None),
            Moved::Decision,
            "a node that leaves"
        );
    }

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    /// The compact labels read like the map they came from: every key, a key that is not
    /// there (before, between and after the others), a prefix of a key, and empty values.
    #[test]
    fn node_labels_read_like_their_map() {
        for pairs in [
            &[][..],
            &[("a", "1")][..],
            &[
                ("kubernetes.io/hostname", "node-00042"),
                ("kubernetes.io/os", "linux"),
                ("canary", ""),
                ("topology.kubernetes.io/zone", "eu-west-1a"),
                ("node-role.kubernetes.io/worker", ""),
                ("b", "x"),
            ][..],
        ] {
            let map = map(pairs);
            let labels = NodeLabels::new(&map);
            assert_eq!(labels.len(), map.len());
            assert_eq!(
                labels.iter().collect::<Vec<_>>(),
                map.iter()
                    .map(|(k, v)| (k.as_str(), v.as_str()))
                    .collect::<Vec<_>>()
            );
            for key in map.keys() {
                assert_eq!(labels.label(key), map.label(key), "{key}");
            }
            for absent in [
                "",
                "0",
                "aa",
                "c",
                "kubernetes.io/",
                "kubernetes.io/osx",
                "zz",
            ] {
                assert_eq!(labels.label(absent), map.label(absent), "{absent}");
            }
        }
    }

    /// A selector picks the same nodes from the compact labels as from the map.
    #[test]
    fn a_selector_reads_node_labels_like_the_map() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
            LabelSelector, LabelSelectorRequirement,
        };
        let map = map(&[("canary", "true"), ("topology.kubernetes.io/zone", "eu-1a")]);
        let labels = NodeLabels::new(&map);
        let requirement = |key: &str, operator: &str, values: &[&str]| LabelSelectorRequirement {
            key: key.to_owned(),
            operator: operator.to_owned(),
            values: (!values.is_empty()).then(|| values.iter().map(|v| (*v).to_owned()).collect()),
        };
        let selectors = [
            LabelSelector::default(),
            LabelSelector {
                match_labels: Some([("canary".to_owned(), "true".to_owned())].into()),
                ..LabelSelector::default()
            },
            LabelSelector {
                match_labels: Some([("canary".to_owned(), "false".to_owned())].into()),
                ..LabelSelector::default()
            },
            LabelSelector {
                match_expressions: Some(vec![
                    requirement("topology.kubernetes.io/zone", "In", &["eu-1a", "eu-1b"]),
                    requirement("gpu", "DoesNotExist", &[]),
                ]),
                ..LabelSelector::default()
            },
            LabelSelector {
                match_expressions: Some(vec![requirement("canary", "NotIn", &["true"])]),
                ..LabelSelector::default()
            },
        ];
        for selector in &selectors {
            assert_eq!(
                canary_predicates::label_selector_matches(selector, &labels),
                canary_predicates::label_selector_matches(selector, &map),
                "{selector:?}"
            );
        }
    }
}
