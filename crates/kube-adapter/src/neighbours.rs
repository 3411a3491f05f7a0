//! The neighbours gate's view of the cluster (issue 46): every pod of the cluster, decoded as
//! [`WatchedNeighbour`] (node, controller owner, `Ready` and its transition time, the last
//! exit of its containers; nothing else is built), kept per node as a 32-byte
//! [`NeighbourRecord`] in a [`NeighbourIndex`]. A pass of a rollout reads it through
//! [`NeighbourIndex::facts`]: one [`NeighbourTally`] per updated node and the baseline
//! counts, never the pods.
//!
//! **Memory.** A pod is one record in its node's `Vec` (uid and owner as 64-bit hashes,
//! times as `u32` seconds): 32 bytes and the `Vec`'s spare capacity, plus one map entry and
//! the name per node. At 5,000 nodes × 30 pods that is about 37 bytes a pod
//! ([`NeighbourIndex::heap_bytes`], docs/benchmarks.md), against about 3 KiB a whole `Pod`.
//! The decode buffers of a watch event are transient.
//!
//! **What is a neighbour.** Every pod bound to a node that has not ended (`Succeeded`,
//! `Failed`) and is not being deleted: a completed Job or an evicted pod is no disruption. A
//! pre-pull pod (issue 50, its label) is none either: it never gets ready, by design.
//! The rollout's own DaemonSet's pods are left out when read (by their controller's UID), so
//! one index serves every CanaryDaemonSet; other DaemonSets' pods (kube-proxy, a CSI node
//! plugin) are neighbours like any workload: a CNI that breaks them broke its node's pods.
//!
//! **Triggers.** Most pod events of a cluster concern no rollout. The watch asks for a pass
//! only when a neighbour becomes disrupted (loses readiness, or a container exits), and then
//! only for the CanaryDaemonSets with the gate on whose rollout is in progress, coalesced
//! (`FACTS_WAIT`): a pass reads every updated node anyway.
//!
//! Invariant: the index holds exactly the live, bound, not-ended pods of the last list and
//! the events since (a relist is built aside and swapped in on `InitDone`, as
//! [`crate::index::OwnerIndex`] does).

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use canary_state_machine::{
    NeighbourFacts, NeighbourNode, NeighbourPod, NeighbourPolicy, NeighbourTally, Stamp,
};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::runtime::watcher::Event;
use serde::Deserialize;

/// A pod decoded with only what the neighbours gate reads.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WatchedNeighbour {
    /// Name, namespace, UID and resource version (what a watch needs); nothing else.
    pub metadata: ObjectMeta,
    /// `spec.nodeName`.
    pub node: Option<String>,
    /// The record the index keeps; `None` for a pod that ended or is being deleted.
    pub record: Option<NeighbourRecord>,
}

/// A neighbour pod as the index keeps it: 32 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NeighbourRecord {
    /// A hash of the pod's UID (its identity on its node).
    pub key: u64,
    /// A hash of its controller owner's UID (0: none).
    pub owner: u64,
    /// `metadata.creationTimestamp`, seconds since the epoch.
    pub created: u32,
    /// The `Ready` condition's `lastTransitionTime` (its creation without one).
    pub ready_since: u32,
    /// The latest `lastState.terminated.finishedAt` of its containers (0: none).
    pub last_exit: u32,
    /// `Ready` is `True`.
    pub ready: bool,
}

impl NeighbourRecord {
    /// The pod as the state machine's gate reads it.
    pub fn pod(&self) -> NeighbourPod {
        NeighbourPod {
            created: Stamp(i64::from(self.created)),
            ready: self.ready,
            ready_since: Stamp(i64::from(self.ready_since)),
            last_exit: (self.last_exit > 0).then(|| Stamp(i64::from(self.last_exit))),
        }
    }

    /// `self` is a disruption `before` was not: readiness lost, or a new exit.
    fn disrupted_since(&self, before: &NeighbourRecord) -> bool {
        (before.ready && !self.ready) || self.last_exit > before.last_exit
    }
}

/// The 64-bit hash of a UID (or any text) the index keys on.
pub fn hash_of(text: &str) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut hasher);
    // 0 means "none" in a record's owner.
    hasher.finish().max(1)
}

fn seconds(time: Option<&Time>) -> u32 {
    time.map_or(0, |t| {
        u32::try_from(t.0.as_second().max(0)).unwrap_or(u32::MAX)
    })
}

/// The wire form: the fields kept, every other one skipped by serde unbuilt.
type Wire = crate::wire::Wire<WireMeta, crate::wire::PodSpecWire, WireStatus>;

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct WireMeta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    uid: Option<String>,
    #[serde(default)]
    resource_version: Option<String>,
    #[serde(default)]
    creation_timestamp: Option<Time>,
    #[serde(default)]
    deletion_timestamp: Option<Time>,
    #[serde(default)]
    owner_references: Option<Vec<WireOwner>>,
    /// Only to tell a pre-pull pod (issue 50), which is no neighbour: it ends at once, not
    /// ready, on a node about to be updated.
    #[serde(default)]
    labels: Option<std::collections::BTreeMap<String, String>>,
}

#[derive(Deserialize)]
struct WireOwner {
    #[serde(default)]
    uid: String,
    #[serde(default)]
    controller: Option<bool>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireStatus {
    #[serde(default)]
    phase: Option<String>,
    #[serde(default)]
    conditions: Option<Vec<WireCondition>>,
    #[serde(default)]
    container_statuses: Option<Vec<WireContainer>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireCondition {
    #[serde(rename = "type")]
    type_: String,
    status: String,
    #[serde(default)]
    last_transition_time: Option<Time>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireContainer {
    #[serde(default)]
    last_state: Option<WireLastState>,
}

#[derive(Deserialize)]
struct WireLastState {
    #[serde(default)]
    terminated: Option<WireTerminated>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireTerminated {
    #[serde(default)]
    finished_at: Option<Time>,
}

impl<'de> Deserialize<'de> for WatchedNeighbour {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let wire = Wire::deserialize(deserializer)?;
        let meta = wire.metadata;
        let status = wire.status;
        let ended = status
            .as_ref()
            .and_then(|s| s.phase.as_deref())
            .is_some_and(|phase| phase == "Succeeded" || phase == "Failed");
        let pre_pull = meta
            .labels
            .as_ref()
            .is_some_and(|labels| labels.contains_key(crate::reconcile::PRE_PULL_LABEL));
        let record = (!ended && !pre_pull && meta.deletion_timestamp.is_none()).then(|| {
            let created = seconds(meta.creation_timestamp.as_ref());
            let ready = status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|conditions| conditions.iter().find(|c| c.type_ == "Ready"));
            let last_exit = status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .into_iter()
                .flatten()
                .filter_map(|c| c.last_state.as_ref()?.terminated.as_ref())
                .map(|t| seconds(t.finished_at.as_ref()))
                .max()
                .unwrap_or(0);
            NeighbourRecord {
                key: hash_of(meta.uid.as_deref().unwrap_or_default()),
                owner: meta
                    .owner_references
                    .iter()
                    .flatten()
                    .find(|o| o.controller == Some(true))
                    .map_or(0, |o| hash_of(&o.uid)),
                created,
                ready_since: ready
                    .and_then(|c| c.last_transition_time.as_ref())
                    .map_or(created, |t| seconds(Some(t))),
                last_exit,
                ready: ready.is_some_and(|c| c.status == "True"),
            }
        });
        Ok(WatchedNeighbour {
            metadata: ObjectMeta {
                name: meta.name,
                namespace: meta.namespace,
                uid: meta.uid,
                resource_version: meta.resource_version,
                ..ObjectMeta::default()
            },
            node: wire.spec.and_then(|spec| spec.node_name),
            record,
        })
    }
}

impl k8s_openapi::Resource for WatchedNeighbour {
    const API_VERSION: &'static str = <Pod as k8s_openapi::Resource>::API_VERSION;
    const GROUP: &'static str = <Pod as k8s_openapi::Resource>::GROUP;
    const KIND: &'static str = <Pod as k8s_openapi::Resource>::KIND;
    const VERSION: &'static str = <Pod as k8s_openapi::Resource>::VERSION;
    const URL_PATH_SEGMENT: &'static str = <Pod as k8s_openapi::Resource>::URL_PATH_SEGMENT;
    type Scope = <Pod as k8s_openapi::Resource>::Scope;
}

impl k8s_openapi::Metadata for WatchedNeighbour {
    type Ty = ObjectMeta;

    fn metadata(&self) -> &Self::Ty {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut Self::Ty {
        &mut self.metadata
    }
}

/// The records of each node.
type Nodes = HashMap<Box<str>, Vec<NeighbourRecord>>;

#[derive(Debug, Default)]
struct State {
    live: Nodes,
    relist: Option<Nodes>,
}

/// Every node's neighbour pods; cheap to clone (shared).
#[derive(Debug, Clone, Default)]
pub struct NeighbourIndex {
    state: Arc<RwLock<State>>,
    ready: Arc<AtomicBool>,
}

/// Puts `pod` into `nodes` (or takes it out, when it ended); whether it turned disrupted.
fn put(nodes: &mut Nodes, pod: &WatchedNeighbour) -> bool {
    let Some(node) = pod.node.as_deref() else {
        // Not bound yet: on no node, nobody's neighbour.
        return false;
    };
    let key = hash_of(pod.metadata.uid.as_deref().unwrap_or_default());
    let Some(record) = pod.record else {
        remove(nodes, node, key);
        return false;
    };
    let records = match nodes.get_mut(node) {
        Some(records) => records,
        None => nodes.entry(node.into()).or_default(),
    };
    match records.iter_mut().find(|r| r.key == key) {
        Some(old) => {
            let disrupted = record.disrupted_since(old);
            *old = record;
            disrupted
        }
        None => {
            records.push(record);
            false
        }
    }
}

fn remove(nodes: &mut Nodes, node: &str, key: u64) {
    if let Some(records) = nodes.get_mut(node) {
        records.retain(|r| r.key != key);
        if records.is_empty() {
            nodes.remove(node);
        }
    }
}

impl NeighbourIndex {
    /// An empty index, not ready until the first complete list.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether the first complete list has been applied.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// Applies one watcher event; whether a neighbour turned disrupted (a relist never says
    /// so: it replaces the index, and a pass of each rollout follows its own triggers).
    pub fn apply(&self, event: &Event<WatchedNeighbour>) -> bool {
        let mut state = self
            .state
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match event {
            Event::Apply(pod) => put(&mut state.live, pod),
            Event::Delete(pod) => {
                if let Some(node) = pod.node.as_deref() {
                    let key = hash_of(pod.metadata.uid.as_deref().unwrap_or_default());
                    remove(&mut state.live, node, key);
                }
                false
            }
            Event::Init => {
                state.relist = Some(Nodes::new());
                false
            }
            Event::InitApply(pod) => {
                put(state.relist.get_or_insert_with(Nodes::new), pod);
                false
            }
            Event::InitDone => {
                let fresh = state.relist.take().unwrap_or_default();
                let stale = std::mem::replace(&mut state.live, fresh);
                drop(state);
                drop(stale);
                self.ready.store(true, Ordering::Release);
                false
            }
        }
    }

    /// Pods indexed.
    pub fn len(&self) -> usize {
        self.read().live.values().map(Vec::len).sum()
    }

    /// Whether the index holds no pod.
    pub fn is_empty(&self) -> bool {
        self.read().live.is_empty()
    }

    /// The heap the index holds, by its allocations' sizes (records with their spare
    /// capacity, the map's buckets, the node names): the figure of docs/benchmarks.md.
    pub fn heap_bytes(&self) -> usize {
        let state = self.read();
        let records: usize = state
            .live
            .iter()
            .map(|(name, records)| {
                name.len() + records.capacity() * std::mem::size_of::<NeighbourRecord>()
            })
            .sum();
        // hashbrown: one control byte and one (key, value) slot per bucket.
        let buckets = state.live.capacity().next_power_of_two().max(1) * 8 / 7;
        let slot = std::mem::size_of::<(Box<str>, Vec<NeighbourRecord>)>() + 1;
        records + buckets * slot
    }

    /// The gate's facts for the DaemonSet whose pods are owned by `own_owner` (a UID): its
    /// pod on each node, `Some(created)` when updated, `None` when old (`pods`). The updated
    /// nodes whose update is within `window_seconds` of `now` are tallied from their update;
    /// the nodes still on an old pod, from the first of those updates, as the baseline.
    pub fn facts(
        &self,
        policy: &NeighbourPolicy,
        own_owner: &str,
        pods: &HashMap<&str, Option<Stamp>>,
        window_seconds: i64,
        now: Stamp,
    ) -> NeighbourFacts {
        let recent = |updated: Stamp| now.seconds_since(updated) <= window_seconds;
        let Some(first) = pods
            .values()
            .flatten()
            .copied()
            .filter(|u| recent(*u))
            .min()
        else {
            return NeighbourFacts::default();
        };
        let own = hash_of(own_owner);
        let state = self.read();
        let tally = |node: &str, since: Stamp| {
            let records = state.live.get(node).map(Vec::as_slice).unwrap_or_default();
            let pods: Vec<NeighbourPod> = records
                .iter()
                .filter(|r| r.owner != own)
                .map(NeighbourRecord::pod)
                .collect();
            NeighbourTally::of(&pods, since, window_seconds)
        };
        let mut facts = NeighbourFacts::default();
        for (node, updated) in pods {
            match updated {
                Some(updated) if recent(*updated) => facts.updated.push(NeighbourNode {
                    node: (*node).to_owned(),
                    updated: *updated,
                    tally: tally(node, *updated),
                }),
                Some(_) => {}
                None => {
                    let baseline = tally(node, first);
                    if baseline.pods > 0 {
                        facts.baseline_nodes += 1;
                    }
                    if policy.disrupts(&baseline) {
                        facts.baseline_disrupted += 1;
                    }
                }
            }
        }
        facts.updated.sort_by(|a, b| a.node.cmp(&b.node));
        facts
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, State> {
        self.state
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod_json(
        uid: &str,
        node: &str,
        ready: bool,
        since: &str,
        exit: Option<&str>,
    ) -> serde_json::Value {
        let mut status = json!({
            "phase": "Running",
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-12-07T06:00:00Z"},
                {"type": "Ready", "status": if ready { "True" } else { "False" }, "lastTransitionTime": since, "reason": "r", "message": "m"}
            ],
            "containerStatuses": [{"name": "c", "ready": ready, "restartCount": 1, "image": "i", "imageID": "", "lastState": {}}]
        });
        if let Some(exit) = exit {
            status["containerStatuses"][0]["lastState"] =
                json!({"terminated": {"exitCode": 1, "finishedAt": exit}});
        }
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": format!("p-{uid}"), "namespace": "apps", "uid": uid, "resourceVersion": "7",
                "creationTimestamp": "2026-12-07T06:00:00Z",
                "labels": {"app": "web"},
                "managedFields": [{"manager": "kubelet"}],
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "rs-uid", "controller": true}]
            },
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]},
            "status": status
        })
    }

    fn decode(value: serde_json::Value) -> WatchedNeighbour {
        serde_json::from_value(value).unwrap()
    }

    fn stamp(text: &str) -> u32 {
        u32::try_from(
            text.parse::<k8s_openapi::jiff::Timestamp>()
                .unwrap()
                .as_second(),
        )
        .unwrap()
    }

    #[test]
    fn a_pod_decodes_to_its_record_only() {
        let pod = decode(pod_json(
            "u1",
            "n1",
            false,
            "2026-12-07T06:05:00Z",
            Some("2026-12-07T06:04:00Z"),
        ));
        assert_eq!(pod.node.as_deref(), Some("n1"));
        assert_eq!(pod.metadata.resource_version.as_deref(), Some("7"));
        assert!(pod.metadata.labels.is_none() && pod.metadata.managed_fields.is_none());
        let record = pod.record.unwrap();
        assert_eq!(record.key, hash_of("u1"));
        assert_eq!(record.owner, hash_of("rs-uid"));
        assert!(!record.ready);
        assert_eq!(record.created, stamp("2026-12-07T06:00:00Z"));
        assert_eq!(record.ready_since, stamp("2026-12-07T06:05:00Z"));
        assert_eq!(record.last_exit, stamp("2026-12-07T06:04:00Z"));
        assert_eq!(std::mem::size_of::<NeighbourRecord>(), 32);
    }

    #[test]
    fn an_ended_or_deleted_pod_is_no_neighbour() {
        let mut done = pod_json("u1", "n1", false, "2026-12-07T06:05:00Z", None);
        done["status"]["phase"] = json!("Succeeded");
        assert!(decode(done).record.is_none(), "a completed Job pod");
        let mut going = pod_json("u2", "n1", true, "2026-12-07T06:05:00Z", None);
        going["metadata"]["deletionTimestamp"] = json!("2026-12-07T06:06:00Z");
        assert!(decode(going).record.is_none(), "an evicted or deleted pod");
        let mut pre_pull = pod_json("u3", "n1", false, "2026-12-07T06:05:00Z", None);
        pre_pull["metadata"]["labels"] = json!({crate::reconcile::PRE_PULL_LABEL: "agent"});
        assert!(
            decode(pre_pull).record.is_none(),
            "a pre-pull pod (issue 50)"
        );
    }

    #[test]
    fn the_index_follows_the_events_and_says_when_a_neighbour_turned_disrupted() {
        let index = NeighbourIndex::new();
        let ready = decode(pod_json("u1", "n1", true, "2026-12-07T06:01:00Z", None));
        assert!(!index.apply(&Event::Init));
        assert!(!index.apply(&Event::InitApply(ready.clone())));
        assert!(!index.apply(&Event::InitDone));
        assert!(index.is_ready());
        assert_eq!(index.len(), 1);
        assert!(!index.apply(&Event::Apply(ready.clone())), "no change");
        let lost = decode(pod_json("u1", "n1", false, "2026-12-07T06:05:00Z", None));
        assert!(index.apply(&Event::Apply(lost.clone())), "lost readiness");
        assert!(!index.apply(&Event::Apply(lost)), "still lost: nothing new");
        let exited = decode(pod_json(
            "u1",
            "n1",
            false,
            "2026-12-07T06:05:00Z",
            Some("2026-12-07T06:06:00Z"),
        ));
        assert!(index.apply(&Event::Apply(exited)), "a new exit");
        let mut unbound = pod_json("u9", "", true, "2026-12-07T06:01:00Z", None);
        unbound["spec"] = json!({});
        assert!(!index.apply(&Event::Apply(decode(unbound))));
        assert_eq!(index.len(), 1, "an unbound pod is on no node");
        assert!(!index.apply(&Event::Delete(ready)));
        assert!(index.is_empty());
    }

    /// The canary node n1 (updated at 06:02) has three neighbours, two lost readiness after
    /// the update; its own DaemonSet's pod is left out; the old node n2's neighbours are the
    /// baseline from 06:02, n3's updated pod is past the window.
    #[test]
    fn facts_tally_the_updated_nodes_and_the_baseline() {
        let index = NeighbourIndex::new();
        let mut own = pod_json("agent", "n1", false, "2026-12-07T06:05:00Z", None);
        own["metadata"]["ownerReferences"][0]["uid"] = json!("ds-uid");
        for pod in [
            pod_json("a", "n1", false, "2026-12-07T06:04:00Z", None),
            pod_json("b", "n1", false, "2026-12-07T06:04:30Z", None),
            pod_json("c", "n1", true, "2026-12-07T06:01:00Z", None),
            own,
            pod_json("d", "n2", true, "2026-12-07T06:01:00Z", None),
            pod_json(
                "e",
                "n2",
                true,
                "2026-12-07T06:01:00Z",
                Some("2026-12-07T06:03:00Z"),
            ),
            pod_json("f", "n3", false, "2026-12-07T06:04:00Z", None),
            pod_json("g", "n3", false, "2026-12-07T06:04:00Z", None),
        ] {
            index.apply(&Event::Apply(decode(pod)));
        }
        let at = |text: &str| Stamp(i64::from(stamp(text)));
        let pods = HashMap::from([
            ("n1", Some(at("2026-12-07T06:02:00Z"))),
            ("n2", None),
            ("n3", Some(at("2026-12-07T05:00:00Z"))),
        ]);
        let facts = index.facts(
            &NeighbourPolicy::default(),
            "ds-uid",
            &pods,
            600,
            at("2026-12-07T06:06:00Z"),
        );
        assert_eq!(facts.updated.len(), 1, "n3's update is past the window");
        let n1 = &facts.updated[0];
        assert_eq!(n1.node, "n1");
        assert_eq!((n1.tally.pods, n1.tally.lost_readiness), (3, 2), "{n1:?}");
        assert_eq!((facts.baseline_nodes, facts.baseline_disrupted), (1, 0));
        let none = index.facts(
            &NeighbourPolicy::default(),
            "ds-uid",
            &HashMap::from([("n2", None)]),
            600,
            at("2026-12-07T06:06:00Z"),
        );
        assert_eq!(
            none,
            NeighbourFacts::default(),
            "no updated node: nothing read"
        );
    }

    /// The memory figure of docs/benchmarks.md: 5,000 nodes × 30 pods.
    #[test]
    fn five_thousand_nodes_of_thirty_pods_take_under_a_hundred_bytes_a_pod() {
        let index = NeighbourIndex::new();
        let template = decode(pod_json("x", "n", true, "2026-12-07T06:01:00Z", None));
        index.apply(&Event::Init);
        for node in 0..5_000 {
            for pod in 0..30 {
                let mut watched = template.clone();
                watched.node = Some(format!("node-{node:05}"));
                watched.metadata.uid = Some(format!("uid-{node}-{pod}"));
                if let Some(record) = &mut watched.record {
                    record.key = hash_of(&format!("uid-{node}-{pod}"));
                }
                index.apply(&Event::InitApply(watched));
            }
        }
        index.apply(&Event::InitDone);
        assert_eq!(index.len(), 150_000);
        let per_pod = index.heap_bytes() as f64 / 150_000.0;
        println!(
            "neighbour index: {} bytes, {per_pod:.1} bytes a pod",
            index.heap_bytes()
        );
        assert!(per_pod < 100.0, "{per_pod} bytes a pod");
    }
}
