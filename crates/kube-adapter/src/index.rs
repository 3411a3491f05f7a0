//! Watch-fed indexes of pods and ControllerRevisions by their owning DaemonSet.
//!
//! A reconcile reads the pods of one DaemonSet; scanning every pod of the cluster would make
//! each reconcile O(cluster). The index groups objects by a key taken from their controller
//! owner reference, is updated from the watcher's events (including relists, which swap in a
//! fresh map atomically on `InitDone`), and stores slimmed objects: pods as [`PodSummary`],
//! only the fields the predicates read (a few hundred bytes instead of several KiB), so 50,000
//! pods stay small.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use canary_predicates::{PodFacts, PodSummary};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::watcher::Event;

/// What an index stores, made from what the watcher delivers.
pub trait Indexed: Send + Sync + 'static {
    /// The watched object.
    type Source;
    /// The stored form of `source`: only the fields readers need.
    fn from_source(source: &Self::Source) -> Self;
    /// `(namespace, name)` of a watched object (a deleted one is only known by it).
    fn source_identity(source: &Self::Source) -> (String, String);
    /// The grouping key (an owner name or UID), or `None` to leave the object out.
    fn index_key(&self) -> Option<String>;
    /// `(namespace, name)`: identity inside the index.
    fn identity(&self) -> (String, String);
}

type Group<T> = HashMap<(String, String), Arc<T>>;

/// Objects by group, and the group of each object.
#[derive(Debug)]
struct Maps<T> {
    groups: HashMap<String, Group<T>>,
    key_of: HashMap<(String, String), String>,
}

impl<T> Default for Maps<T> {
    fn default() -> Self {
        Self {
            groups: HashMap::new(),
            key_of: HashMap::new(),
        }
    }
}

impl<T: Indexed> Maps<T> {
    fn insert(&mut self, obj: T) {
        let id = obj.identity();
        self.remove(&id);
        let Some(key) = obj.index_key() else { return };
        self.groups
            .entry(key.clone())
            .or_default()
            .insert(id.clone(), Arc::new(obj));
        self.key_of.insert(id, key);
    }

    fn remove(&mut self, id: &(String, String)) {
        let Some(key) = self.key_of.remove(id) else {
            return;
        };
        if let Some(group) = self.groups.get_mut(&key) {
            group.remove(id);
            if group.is_empty() {
                self.groups.remove(&key);
            }
        }
    }
}

/// The live maps, and the ones a relist is filling. A relist is built in its own maps as the
/// objects arrive (slimmed one by one, never buffered whole) and swapped in on `InitDone`, so
/// readers never see a half-listed index.
#[derive(Debug)]
struct State<T> {
    live: Maps<T>,
    relist: Option<Maps<T>>,
}

impl<T> Default for State<T> {
    fn default() -> Self {
        Self {
            live: Maps::default(),
            relist: None,
        }
    }
}

/// Objects grouped by owner; cheap to clone (shared).
#[derive(Debug)]
pub struct OwnerIndex<T> {
    state: Arc<RwLock<State<T>>>,
    ready: Arc<AtomicBool>,
}

impl<T> Clone for OwnerIndex<T> {
    fn clone(&self) -> Self {
        Self {
            state: self.state.clone(),
            ready: self.ready.clone(),
        }
    }
}

impl<T: Indexed> Default for OwnerIndex<T> {
    fn default() -> Self {
        Self {
            state: Arc::default(),
            ready: Arc::default(),
        }
    }
}

impl<T: Indexed> OwnerIndex<T> {
    /// An empty index, not ready until the first complete list.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether the first complete list has been applied.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// Applies one watcher event.
    pub fn apply(&self, event: &Event<T::Source>) {
        // Objects are slimmed before taking the lock: readers only wait for the map update.
        match event {
            Event::Apply(obj) => {
                let slim = T::from_source(obj);
                self.write().live.insert(slim);
            }
            Event::Delete(obj) => {
                let id = T::source_identity(obj);
                self.write().live.remove(&id);
            }
            Event::Init => self.write().relist = Some(Maps::default()),
            Event::InitApply(obj) => {
                let slim = T::from_source(obj);
                self.write()
                    .relist
                    .get_or_insert_with(Maps::default)
                    .insert(slim);
            }
            Event::InitDone => {
                let mut state = self.write();
                let fresh = state.relist.take().unwrap_or_default();
                let stale = std::mem::replace(&mut state.live, fresh);
                drop(state);
                // Freed outside the lock: dropping 50,000 objects takes a while.
                drop(stale);
                self.ready.store(true, Ordering::Release);
            }
        }
    }

    /// The objects grouped under `key`, shared with the index.
    pub fn get(&self, key: &str) -> Vec<Arc<T>> {
        self.with_group(key, |objects| objects.cloned().collect())
    }

    /// Runs `read` over the objects grouped under `key`, under the index's read lock: nothing
    /// is cloned, which matters when a reconcile counts 5,000 pods. Keep `read` short, since
    /// the watcher waits for the lock to apply its next event.
    pub fn with_group<R>(
        &self,
        key: &str,
        read: impl FnOnce(&mut dyn Iterator<Item = &Arc<T>>) -> R,
    ) -> R {
        let state = self.read();
        let mut objects = state
            .live
            .groups
            .get(key)
            .into_iter()
            .flat_map(|g| g.values());
        read(&mut objects)
    }

    /// Number of objects indexed.
    pub fn len(&self) -> usize {
        self.read().live.key_of.len()
    }

    /// Whether the index holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn read(&self) -> RwLockReadGuard<'_, State<T>> {
        // A panic while holding the lock cannot leave the maps half-updated in a way readers
        // care about (every mutation is a single insert/remove), so poisoning is ignored.
        self.state
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, State<T>> {
        self.state
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

fn identity(meta: &ObjectMeta) -> (String, String) {
    (
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    )
}

/// Pods are grouped by the **name** of their controller owner when it is a DaemonSet. The
/// reference matches by name only (across namespaces); the UID rule filters a group further.
impl Indexed for PodSummary {
    type Source = Pod;

    fn from_source(pod: &Pod) -> Self {
        PodSummary::of(pod)
    }

    fn source_identity(pod: &Pod) -> (String, String) {
        identity(&pod.metadata)
    }

    fn index_key(&self) -> Option<String> {
        let owner = self.controller()?;
        (owner.kind == "DaemonSet").then(|| owner.name.to_owned())
    }

    fn identity(&self) -> (String, String) {
        (self.namespace().to_owned(), self.name().to_owned())
    }
}

/// ControllerRevisions are grouped by the **UID** of their controller owner.
impl Indexed for ControllerRevision {
    type Source = ControllerRevision;

    fn from_source(revision: &ControllerRevision) -> Self {
        ControllerRevision {
            metadata: ObjectMeta {
                managed_fields: None,
                ..revision.metadata.clone()
            },
            data: None,
            revision: revision.revision,
        }
    }

    fn source_identity(revision: &ControllerRevision) -> (String, String) {
        identity(&revision.metadata)
    }

    fn index_key(&self) -> Option<String> {
        let owner = self
            .metadata
            .owner_references
            .as_ref()?
            .iter()
            .find(|o| o.controller == Some(true))?;
        (owner.kind == "DaemonSet").then(|| owner.uid.clone())
    }

    fn identity(&self) -> (String, String) {
        identity(&self.metadata)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    fn pod(ns: &str, name: &str, owner: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                namespace: Some(ns.into()),
                name: Some(name.into()),
                owner_references: Some(vec![OwnerReference {
                    api_version: "apps/v1".into(),
                    kind: "DaemonSet".into(),
                    name: owner.into(),
                    uid: format!("{owner}-uid"),
                    controller: Some(true),
                    block_owner_deletion: None,
                }]),
                ..Default::default()
            },
            spec: Some(k8s_openapi::api::core::v1::PodSpec {
                node_name: Some("n1".into()),
                containers: vec![Default::default()],
                ..Default::default()
            }),
            status: None,
        }
    }

    fn names(index: &OwnerIndex<PodSummary>, key: &str) -> Vec<String> {
        let mut names: Vec<_> = index.get(key).iter().map(|p| p.name().to_owned()).collect();
        names.sort();
        names
    }

    #[test]
    fn groups_by_owner_name_and_follows_events() {
        let index = OwnerIndex::<PodSummary>::new();
        assert!(!index.is_ready());
        index.apply(&Event::Init);
        index.apply(&Event::InitApply(pod("a", "p1", "agent")));
        index.apply(&Event::InitApply(pod("b", "p2", "agent")));
        index.apply(&Event::InitApply(pod("a", "q1", "other")));
        assert!(
            index.get("agent").is_empty(),
            "nothing visible before InitDone"
        );
        index.apply(&Event::InitDone);
        assert!(index.is_ready());
        assert_eq!(names(&index, "agent"), ["p1", "p2"]);
        index.apply(&Event::Delete(pod("a", "p1", "agent")));
        index.apply(&Event::Apply(pod("a", "p3", "agent")));
        assert_eq!(names(&index, "agent"), ["p2", "p3"]);
        // An owner change moves the pod between groups.
        index.apply(&Event::Apply(pod("a", "p3", "other")));
        assert_eq!(names(&index, "agent"), ["p2"]);
        assert_eq!(names(&index, "other"), ["p3", "q1"]);
        assert_eq!(index.len(), 3);
    }

    #[test]
    fn relist_replaces_everything() {
        let index = OwnerIndex::<PodSummary>::new();
        index.apply(&Event::Init);
        index.apply(&Event::InitApply(pod("a", "gone", "agent")));
        index.apply(&Event::InitDone);
        index.apply(&Event::Init);
        index.apply(&Event::InitApply(pod("a", "fresh", "agent")));
        index.apply(&Event::InitDone);
        assert_eq!(names(&index, "agent"), ["fresh"]);
    }

    #[test]
    fn pods_without_daemonset_controller_are_left_out_and_slimmed() {
        let index = OwnerIndex::<PodSummary>::new();
        let mut orphan = pod("a", "orphan", "x");
        orphan.metadata.owner_references = None;
        index.apply(&Event::Apply(orphan));
        assert!(index.is_empty());
        index.apply(&Event::Apply(pod("a", "p", "agent")));
        let stored = &index.get("agent")[0];
        assert_eq!(**stored, PodSummary::of(&pod("a", "p", "agent")));
        assert_eq!((stored.namespace(), stored.name()), ("a", "p"));
    }

    #[test]
    fn revisions_group_by_owner_uid() {
        let index = OwnerIndex::<ControllerRevision>::new();
        let mut revision = ControllerRevision {
            metadata: pod("a", "agent-abc", "agent").metadata,
            data: Some(k8s_openapi::apimachinery::pkg::runtime::RawExtension(
                serde_json::json!({"spec": {}}),
            )),
            revision: 2,
        };
        revision.metadata.labels =
            Some([("controller-revision-hash".to_owned(), "abc".to_owned())].into());
        index.apply(&Event::Apply(revision));
        let stored = index.get("agent-uid");
        assert_eq!(stored.len(), 1);
        assert!(stored[0].data.is_none());
        assert_eq!(
            canary_predicates::current_revision_hash(stored.iter().map(|r| &**r)),
            Some("abc")
        );
    }
}
