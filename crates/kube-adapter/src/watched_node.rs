//! The node as the watch decodes it: [`WatchedNode`], the metadata (name, labels, what a cache
//! and a watch need) and the node's [`NodeHealth`], and [`fingerprint`], the part of it whose
//! change is a reason for a pass.
//!
//! A node's status carries its image list, capacity, addresses and daemon endpoints, and its
//! metadata the managed fields: several KiB per node, on real clusters tens. The controller used
//! to decode every Node whole and slim it afterwards; on 5,000 nodes the first list alone made
//! the controller's peak memory (59 MiB idle against `sim serve --nodes 5000`, 18 MiB on 10
//! nodes; issue 20). As [`WatchedPod`](crate::index::WatchedPod) does for pods, serde skips what
//! the type does not name without building it. And a cached node keeps its health rather than a
//! k8s-openapi `Node` (1,496 bytes before any string, for its inline spec and status): the
//! health is all the Pods driver reads of the rest, and the metadata and health take 368 bytes.
//!
//! Invariant: what the driver reads of a [`WatchedNode`] (its labels, and its health by
//! [`node_health`], the one rule) is what it reads of the full node (tested below). A field the
//! driver starts reading must be kept here too.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};

use canary_predicates::node_health;
use canary_state_machine::NodeHealth;
use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeSpec, NodeStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use serde::Deserialize;

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
}

/// The wire form: the fields kept, every other one skipped by serde unbuilt.
#[derive(Deserialize)]
struct Wire {
    #[serde(default)]
    metadata: WireMeta,
    #[serde(default)]
    spec: Option<WireSpec>,
    #[serde(default)]
    status: Option<WireStatus>,
}

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

/// A condition's type and status; the reason, message and heartbeat (which a kubelet moves on
/// every report) are left out.
#[derive(Deserialize)]
struct WireCondition {
    #[serde(rename = "type")]
    type_: String,
    status: String,
}

impl<'de> Deserialize<'de> for WatchedNode {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let wire = Wire::deserialize(deserializer)?;
        let meta = wire.metadata;
        // The health by the one rule (`node_health`), read from a node that holds only its
        // inputs and is dropped once read.
        let ready: Vec<NodeCondition> = wire
            .status
            .and_then(|status| status.conditions)
            .into_iter()
            .flatten()
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
        }))
    }
}

crate::index::partially_decoded!(WatchedNode, Node);

/// A hash of what the Pods driver reads of a node (its labels and its health): a change of
/// anything else is no reason for a pass.
pub fn fingerprint(node: &WatchedNode) -> Option<u64> {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    node.0.metadata.labels.hash(&mut hasher);
    node.0.health.hash(&mut hasher);
    Some(hasher.finish())
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

    /// A cached node is the metadata and the health: a fraction of the node it came from.
    #[test]
    fn a_watched_node_is_a_fraction_of_a_node() {
        assert!(std::mem::size_of::<WatchedNode>() * 3 < std::mem::size_of::<Node>());
    }

    /// The fingerprint moves with the health and the labels, not with a heartbeat, nor with a
    /// Ready condition that changes nothing the driver reads (a cordoned node stays cordoned).
    #[test]
    fn the_fingerprint_moves_only_with_what_the_driver_reads() {
        let of = |value: serde_json::Value| {
            fingerprint(&serde_json::from_value::<WatchedNode>(value).unwrap())
        };
        let base = of(node("True", false));
        let mut heartbeat = node("True", false);
        heartbeat["status"]["conditions"][1]["lastHeartbeatTime"] = json!("2026-12-02T19:50:05Z");
        heartbeat["metadata"]["resourceVersion"] = json!("43");
        assert_eq!(of(heartbeat), base);
        assert_ne!(of(node("False", false)), base);
        assert_ne!(of(node("True", true)), base);
        assert_eq!(of(node("False", true)), of(node("True", true)));
        let mut relabelled = node("True", false);
        relabelled["metadata"]["labels"]["canary"] = json!("false");
        assert_ne!(of(relabelled), base);
    }
}
