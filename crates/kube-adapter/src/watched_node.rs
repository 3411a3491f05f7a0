//! The node as the watch decodes it: [`WatchedNode`], a k8s-openapi [`Node`] holding only what
//! the Pods driver reads (name, labels, `spec.unschedulable`, the `Ready` condition), and
//! [`fingerprint`], the part of it whose change is a reason for a pass.
//!
//! A node's status carries its image list, capacity, addresses and daemon endpoints, and its
//! metadata the managed fields: several KiB per node, on real clusters tens. The controller used
//! to decode every Node whole and slim it afterwards; on 5,000 nodes the first list alone made
//! the controller's peak memory (59 MiB idle against `sim serve --nodes 5000`, 18 MiB on 10
//! nodes; issue 20). As [`WatchedPod`](crate::index::WatchedPod) does for pods, serde now skips
//! what the type does not name without building it.
//!
//! Invariant: what [`node_health`](canary_predicates::node_health), the zone and canary label
//! readers and [`fingerprint`] read of a [`WatchedNode`] is what they read of the full node
//! (tested below). A field the driver starts reading must be kept here too.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};

use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeSpec, NodeStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use serde::Deserialize;

/// A node decoded with only what the Pods driver reads.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WatchedNode(pub Node);

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

/// A condition's type, status and reason; the message and heartbeat (which a kubelet moves on
/// every report) are left out.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireCondition {
    #[serde(rename = "type")]
    type_: String,
    status: String,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    last_transition_time: Option<Time>,
}

impl<'de> Deserialize<'de> for WatchedNode {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let wire = Wire::deserialize(deserializer)?;
        let meta = wire.metadata;
        Ok(WatchedNode(Node {
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
            spec: wire.spec.map(|spec| NodeSpec {
                unschedulable: spec.unschedulable,
                ..NodeSpec::default()
            }),
            status: wire.status.map(|status| NodeStatus {
                conditions: status.conditions.map(|conditions| {
                    conditions
                        .into_iter()
                        .filter(|c| c.type_ == "Ready")
                        .map(|c| NodeCondition {
                            type_: c.type_,
                            status: c.status,
                            reason: c.reason,
                            last_transition_time: c.last_transition_time,
                            ..NodeCondition::default()
                        })
                        .collect()
                }),
                ..NodeStatus::default()
            }),
        }))
    }
}

crate::index::partially_decoded!(WatchedNode, Node);

/// A hash of what the Pods driver reads of a node: a change of anything else is no reason
/// for a pass.
pub fn fingerprint(node: &WatchedNode) -> Option<u64> {
    let node = &node.0;
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    node.metadata.labels.hash(&mut hasher);
    node.spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .hash(&mut hasher);
    for condition in node
        .status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten())
    {
        (&condition.type_, &condition.status).hash(&mut hasher);
    }
    Some(hasher.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use canary_predicates::node_health;
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
        ] {
            let value = node(ready, unschedulable);
            let whole: Node = serde_json::from_value(value.clone()).unwrap();
            let watched: WatchedNode = serde_json::from_value(value).unwrap();
            assert_eq!(node_health(&watched.0), node_health(&whole), "{ready}");
            assert_eq!(watched.0.metadata.labels, whole.metadata.labels);
            assert_eq!(watched.0.metadata.name, whole.metadata.name);
            assert_eq!(
                watched.0.metadata.resource_version,
                whole.metadata.resource_version
            );
            let status = watched.0.status.unwrap();
            assert!(status.images.is_none() && status.capacity.is_none());
            let conditions = status.conditions.unwrap();
            assert_eq!(conditions.len(), 1, "only Ready is kept");
            assert!(conditions[0].message.is_none() && conditions[0].last_heartbeat_time.is_none());
            assert!(watched.0.metadata.annotations.is_none());
            assert!(watched.0.metadata.managed_fields.is_none());
        }
    }

    /// The fingerprint moves with readiness, cordoning and labels, not with a heartbeat.
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
        let mut relabelled = node("True", false);
        relabelled["metadata"]["labels"]["canary"] = json!("false");
        assert_ne!(of(relabelled), base);
    }
}
