//! Watch-fed indexes of pods and ControllerRevisions by their owning DaemonSet.
//!
//! A reconcile reads the pods of one DaemonSet; scanning every pod of the cluster would make
//! each reconcile O(cluster). The index groups objects by a key taken from their controller
//! owner reference, is updated from the watcher's events (including relists, which swap in a
//! fresh map atomically on `InitDone`), and stores slimmed objects: pods as [`PodSummary`],
//! only the fields the predicates read (a few hundred bytes instead of several KiB), so 50,000
//! pods stay small. The node cache is one more index, of one group
//! ([`CachedNode`](crate::watched_node::CachedNode), in `watched_node.rs`).
//!
//! Each group also keeps a [`Tally`] of its objects, moved by every insert and removal: for
//! pods, the counts a MaxUnavailable pass reads ([`PodTally`], read through
//! [`OwnerIndex::count`]), so that a pass does not walk the DaemonSet's pods. Applying an event
//! says whether it moved anything a pass reads, so that the watch triggers passes only then.

mod pod_tally;
mod watched_pod;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use canary_predicates::{PodCounts, PodFacts, PodSummary};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::watcher::Event;

use crate::clock::Clock;

pub use pod_tally::{ClosedGaps, DowntimeGap, PodCountRule, PodTally};
pub use watched_pod::WatchedPod;
pub(crate) use watched_pod::partially_decoded;

/// What an index stores, made from what the watcher delivers.
pub trait Indexed: Send + Sync + 'static {
    /// The watched object.
    type Source;
    /// The stored form of `source`: only the fields readers need.
    fn from_source(source: &Self::Source) -> Self;
    /// The [`Id`] of a watched object (a deleted one is only known by it).
    fn source_identity(source: &Self::Source) -> Id;
    /// The grouping key (an owner name or UID), or `None` to leave the object out.
    fn index_key(&self) -> Option<String>;
    /// Whether `key` can name a group at all: a lookup with a key of another shape is a caller
    /// that builds keys the old way (checked in debug builds: the tests and the simulation).
    fn is_group_key(_key: &str) -> bool {
        true
    }
    /// Identity inside the index ([`Id`]).
    fn identity(&self) -> Id;
    /// What each group keeps up to date about its objects.
    type Tally: Tally<Self>;
}

/// How much one change of an object matters to the passes of its group, least first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Moved {
    /// Nothing a pass reads.
    Nothing,
    /// Counts a pass reports (the status), but no decision can change on them: a pass may
    /// wait and take several such moves at once.
    Counts,
    /// A fact of an object whose group keeps no counts (the Pods driver reads every pod's
    /// facts, not counts): a decision may change on it, so a pass soon, but one pass may take
    /// the moves of a short while at once. Without that, a Pods-driver rollout made a pass per
    /// pod event, each walking every pod: O(pods²) (issue 20), and 3,000 passes a minute on 475
    /// nodes (soak seed 25001174).
    Facts,
    /// What a decision reads, or a threshold it looks at: a pass now.
    Decision,
}

/// Something a group keeps up to date from its objects, one change at a time.
pub trait Tally<T: ?Sized>: Default + std::fmt::Debug + Send + Sync + 'static {
    /// Moves the tally from `old` to `new`, one object of the group (`old` is `None` for an
    /// object that joins the group, `new` for one that leaves it). Returns how much the change
    /// matters to a pass.
    fn replace(&mut self, old: Option<&T>, new: Option<&T>) -> Moved;

    /// [`replace`](Self::replace), for a tally that also keeps history: the change was seen at
    /// `at` (seconds since the epoch, the controller's clock), `live` (false while a relist is
    /// being built, whose objects only join).
    fn replace_at(&mut self, old: Option<&T>, new: Option<&T>, _at: i64, _live: bool) -> Moved {
        self.replace(old, new)
    }

    /// Takes over the history `stale`, the tally of the same group a relist replaces, kept.
    fn carry_over(&mut self, _stale: &mut Self) {}

    /// Whether the tally keeps no history a pass has yet to read, so that its group may go
    /// once it has no objects.
    fn is_idle(&self) -> bool {
        true
    }
}

/// No tally: every change may matter.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoTally;

impl<T: ?Sized> Tally<T> for NoTally {
    fn replace(&mut self, _old: Option<&T>, _new: Option<&T>) -> Moved {
        Moved::Decision
    }
}

/// `namespace/name` of an indexed object (`/name` for a cluster-scoped one: neither part can
/// hold a `/`, so the text is unique). One allocation shared by both maps of an index; a
/// `(String, String)` per map was four allocations and 96 bytes of map entries a pod, and on
/// 50,000 pods the maps were a third of the controller's heap (issue 20).
pub type Id = Arc<str>;

/// The [`Id`] of an object named `name` in `namespace` (`""` when cluster-scoped).
pub fn id(namespace: &str, name: &str) -> Id {
    let mut text = String::with_capacity(namespace.len() + 1 + name.len());
    text.push_str(namespace);
    text.push('/');
    text.push_str(name);
    Arc::from(text)
}

/// A group's key, shared by every object of the group in [`Maps::key_of`].
type GroupKey = Arc<str>;

/// The objects of one group, and their tally.
#[derive(Debug)]
struct Group<T: Indexed> {
    objects: HashMap<Id, Arc<T>>,
    tally: T::Tally,
}

impl<T: Indexed> Default for Group<T> {
    fn default() -> Self {
        Self {
            objects: HashMap::new(),
            tally: T::Tally::default(),
        }
    }
}

/// Objects by group, and the group of each object.
#[derive(Debug)]
struct Maps<T: Indexed> {
    groups: HashMap<GroupKey, Group<T>>,
    key_of: HashMap<Id, GroupKey>,
}

impl<T: Indexed> Default for Maps<T> {
    fn default() -> Self {
        Self {
            groups: HashMap::new(),
            key_of: HashMap::new(),
        }
    }
}

impl<T: Indexed> Maps<T> {
    /// Inserts or replaces `obj`; how much that matters to a pass (see [`Tally::replace`]).
    fn insert(&mut self, obj: T, at: i64, live: bool) -> Moved {
        let id = obj.identity();
        let key = obj.index_key();
        let obj = Arc::new(obj);
        let same_group = match (self.key_of.get(&id), &key) {
            (Some(old_key), Some(key)) => **old_key == **key,
            _ => false,
        };
        // An update within its group (most events): found by the key's text, no allocation;
        // the maps keep the identity they hold.
        if same_group && let Some(group) = key.as_deref().and_then(|key| self.groups.get_mut(key)) {
            let previous = group.objects.insert(id, obj.clone());
            return group
                .tally
                .replace_at(previous.as_deref(), Some(&obj), at, live);
        }
        let left = self.remove(&id, at, live);
        let Some(key) = key else { return left };
        // The group's key is stored once and shared by its objects' entries in `key_of`.
        let key = match self.groups.get_key_value(key.as_str()) {
            Some((shared, _)) => shared.clone(),
            None => GroupKey::from(key),
        };
        let group = self.groups.entry(key.clone()).or_default();
        group.objects.insert(id.clone(), obj.clone());
        let joined = group.tally.replace_at(None, Some(&obj), at, live);
        self.key_of.insert(id, key);
        left.max(joined)
    }

    /// Removes the object `id`; how much that matters to a pass.
    fn remove(&mut self, id: &Id, at: i64, live: bool) -> Moved {
        let Some(key) = self.key_of.remove(id) else {
            return Moved::Nothing;
        };
        let Some(group) = self.groups.get_mut(&key) else {
            return Moved::Nothing;
        };
        let removed = group.objects.remove(id);
        let moved = group.tally.replace_at(removed.as_deref(), None, at, live);
        if group.objects.is_empty() && group.tally.is_idle() {
            self.groups.remove(&key);
        }
        moved
    }
}

/// The live maps, and the ones a relist is filling. A relist is built in its own maps as the
/// objects arrive (slimmed one by one, never buffered whole) and swapped in on `InitDone`, so
/// readers never see a half-listed index.
#[derive(Debug)]
struct State<T: Indexed> {
    live: Maps<T>,
    relist: Option<Maps<T>>,
}

impl<T: Indexed> Default for State<T> {
    fn default() -> Self {
        Self {
            live: Maps::default(),
            relist: None,
        }
    }
}

/// Objects grouped by owner; cheap to clone (shared).
#[derive(Debug)]
pub struct OwnerIndex<T: Indexed> {
    state: Arc<RwLock<State<T>>>,
    ready: Arc<AtomicBool>,
    /// When events are seen (the tallies that keep history: agent downtime).
    clock: Clock,
}

impl<T: Indexed> Clone for OwnerIndex<T> {
    fn clone(&self) -> Self {
        Self {
            state: self.state.clone(),
            ready: self.ready.clone(),
            clock: self.clock.clone(),
        }
    }
}

impl<T: Indexed> Default for OwnerIndex<T> {
    fn default() -> Self {
        Self {
            state: Arc::default(),
            ready: Arc::default(),
            clock: Clock::system(),
        }
    }
}

impl<T: Indexed> OwnerIndex<T> {
    /// An empty index, not ready until the first complete list.
    pub fn new() -> Self {
        Self::default()
    }

    /// The index with events seen on `clock` (a simulator's, or tokio's virtual time).
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// Whether the first complete list has been applied.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// Applies one watcher event. Returns how much it matters to a pass: an object that
    /// joined, left, or changed what its group's [`Tally`] says it should trigger on. A relist's
    /// objects always may (they replace the whole index: [`Moved::Decision`]); `Init` and
    /// `InitDone` never do by themselves.
    pub fn apply(&self, event: &Event<T::Source>) -> Moved {
        // Objects are slimmed before taking the lock: readers only wait for the map update.
        let at = self.clock.now().as_second();
        match event {
            Event::Apply(obj) => {
                let slim = T::from_source(obj);
                self.write().live.insert(slim, at, true)
            }
            Event::Delete(obj) => {
                let id = T::source_identity(obj);
                self.write().live.remove(&id, at, true)
            }
            Event::Init => {
                self.write().relist = Some(Maps::default());
                Moved::Nothing
            }
            Event::InitApply(obj) => {
                let slim = T::from_source(obj);
                let _ = self
                    .write()
                    .relist
                    .get_or_insert_with(Maps::default)
                    .insert(slim, at, false);
                Moved::Decision
            }
            Event::InitDone => {
                let mut state = self.write();
                let fresh = state.relist.take().unwrap_or_default();
                let mut stale = std::mem::replace(&mut state.live, fresh);
                for (key, group) in &mut stale.groups {
                    if let Some(fresh) = state.live.groups.get_mut(key) {
                        fresh.tally.carry_over(&mut group.tally);
                    }
                }
                drop(state);
                // Freed outside the lock: dropping 50,000 objects takes a while.
                drop(stale);
                self.ready.store(true, Ordering::Release);
                Moved::Nothing
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
        debug_assert!(T::is_group_key(key), "not a group key: {key:?}");
        let state = self.read();
        let mut objects = state
            .live
            .groups
            .get(key)
            .into_iter()
            .flat_map(|g| g.objects.values());
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

impl OwnerIndex<crate::watched_node::CachedNode> {
    /// The nodes with a troubled condition (the health gates' only reading of the nodes, so
    /// that a pass never walks every node for them), in name order.
    pub fn troubled(&self) -> Vec<Arc<crate::watched_node::CachedNode>> {
        let state = self.read();
        let Some(group) = state.live.groups.get(crate::watched_node::ALL_NODES) else {
            return Vec::new();
        };
        group
            .tally
            .troubled()
            .filter_map(|name| group.objects.get(&id("", name)).cloned())
            .collect()
    }
}

impl OwnerIndex<PodSummary> {
    /// The counts of the pods grouped under `key` under `rule`: read from the group's tally,
    /// which counts again from its pods' classes (not its pods) when it was kept under another
    /// rule. Debug builds check the tally against a full recount on every read.
    pub fn count(&self, key: &str, rule: &PodCountRule) -> PodCounts {
        debug_assert!(PodSummary::is_group_key(key), "not a pod group: {key:?}");
        {
            let state = self.read();
            let Some(group) = state.live.groups.get(key) else {
                return PodCounts::default();
            };
            if group.tally.counts_under(rule) {
                debug_assert_eq!(
                    group.tally,
                    PodTally::recount(rule.clone(), group.objects.values().map(|p| &**p)),
                    "the pod tally of {key} drifted from a full recount"
                );
                return group.tally.counts();
            }
        }
        let mut state = self.write();
        let Some(group) = state.live.groups.get_mut(key) else {
            return PodCounts::default();
        };
        group.tally.rekey(rule.clone(), &group.objects);
        debug_assert_eq!(
            group.tally,
            PodTally::recount(rule.clone(), group.objects.values().map(|p| &**p)),
            "the pod tally of {key} counted from its classes differs from a full recount"
        );
        group.tally.counts()
    }

    /// Takes the agent downtime gaps the group `key` closed since the last call (issue 50).
    pub fn drain_downtime(&self, key: &str) -> ClosedGaps {
        debug_assert!(PodSummary::is_group_key(key), "not a pod group: {key:?}");
        self.write()
            .live
            .groups
            .get_mut(key)
            .map(|group| group.tally.drain_downtime())
            .unwrap_or_default()
    }

    /// Stops keeping counts for the group `key`: every change of its pods' facts matters again
    /// ([`Moved::Facts`]). For passes that read more of the pods than the counts (the Pods
    /// driver's node states).
    pub fn forget_counts(&self, key: &str) {
        debug_assert!(PodSummary::is_group_key(key), "not a pod group: {key:?}");
        if let Some(group) = self.write().live.groups.get_mut(key) {
            group.tally.keep_facts_only();
        }
    }
}

fn identity(meta: &ObjectMeta) -> Id {
    id(
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default(),
    )
}

/// The group of the pods whose controller owner is the DaemonSet `name` in `namespace`.
///
/// Pods are grouped by the namespace **and** the name of their DaemonSet. The reference
/// (virt-operator) matches a pod to its DaemonSet by the owner's name alone, across namespaces,
/// so a DaemonSet of the same name in a namespace someone else writes would lend its pods (a
/// crash-looping one fails the rollout; extra ones stall it, quirk 2). The same-name pods of
/// another namespace are never this DaemonSet's, so here they are not even in its group; the
/// name-only match then only differs from the UID match within the namespace (a DaemonSet
/// deleted and created again), as the reference's compatibility needs.
pub fn pod_group(namespace: &str, name: &str) -> String {
    let mut key = String::with_capacity(namespace.len() + 1 + name.len());
    key.push_str(namespace);
    key.push('/');
    key.push_str(name);
    key
}

/// Pods, watched as [`WatchedPod`], are grouped by the namespace and name of their controller
/// owner when it is a DaemonSet ([`pod_group`]); the UID rule filters a group further.
impl Indexed for PodSummary {
    type Source = WatchedPod;
    type Tally = PodTally;

    fn from_source(pod: &WatchedPod) -> Self {
        PodSummary::of(&pod.0)
    }

    fn source_identity(pod: &WatchedPod) -> Id {
        identity(&pod.0.metadata)
    }

    fn index_key(&self) -> Option<String> {
        let owner = self.controller()?;
        (owner.kind == "DaemonSet").then(|| pod_group(self.namespace(), owner.name))
    }

    /// A [`pod_group`]: `namespace/name` (names have no `/`), never a DaemonSet's name alone.
    fn is_group_key(key: &str) -> bool {
        key.contains('/')
    }

    fn identity(&self) -> Id {
        id(self.namespace(), self.name())
    }
}

/// ControllerRevisions are grouped by the **UID** of their controller owner.
impl Indexed for ControllerRevision {
    type Source = ControllerRevision;
    type Tally = NoTally;

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

    fn source_identity(revision: &ControllerRevision) -> Id {
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

    fn identity(&self) -> Id {
        identity(&self.metadata)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    fn pod(ns: &str, name: &str, owner: &str) -> WatchedPod {
        WatchedPod(Pod {
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
        })
    }

    fn names(index: &OwnerIndex<PodSummary>, key: &str) -> Vec<String> {
        let mut names: Vec<_> = index.get(key).iter().map(|p| p.name().to_owned()).collect();
        names.sort();
        names
    }

    #[test]
    fn groups_by_owner_namespace_and_name_and_follows_events() {
        let index = OwnerIndex::<PodSummary>::new();
        assert!(!index.is_ready());
        index.apply(&Event::Init);
        index.apply(&Event::InitApply(pod("a", "p1", "agent")));
        index.apply(&Event::InitApply(pod("b", "p2", "agent")));
        index.apply(&Event::InitApply(pod("a", "q1", "other")));
        assert!(
            index.get(&pod_group("a", "agent")).is_empty(),
            "nothing visible before InitDone"
        );
        index.apply(&Event::InitDone);
        assert!(index.is_ready());
        // A DaemonSet of the same name in another namespace is another group.
        assert_eq!(names(&index, &pod_group("a", "agent")), ["p1"]);
        assert_eq!(names(&index, &pod_group("b", "agent")), ["p2"]);
        index.apply(&Event::Delete(pod("a", "p1", "agent")));
        index.apply(&Event::Apply(pod("a", "p3", "agent")));
        assert_eq!(names(&index, &pod_group("a", "agent")), ["p3"]);
        // An owner change moves the pod between groups.
        index.apply(&Event::Apply(pod("a", "p3", "other")));
        assert!(names(&index, &pod_group("a", "agent")).is_empty());
        assert_eq!(names(&index, &pod_group("a", "other")), ["p3", "q1"]);
        assert_eq!(index.len(), 3);
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "not a group key")]
    fn a_lookup_by_the_daemon_set_name_alone_is_caught() {
        OwnerIndex::<PodSummary>::new().get("agent");
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
        assert_eq!(names(&index, &pod_group("a", "agent")), ["fresh"]);
    }

    #[test]
    fn pods_without_daemonset_controller_are_left_out_and_slimmed() {
        let index = OwnerIndex::<PodSummary>::new();
        let mut orphan = pod("a", "orphan", "x");
        orphan.0.metadata.owner_references = None;
        index.apply(&Event::Apply(orphan));
        assert!(index.is_empty());
        index.apply(&Event::Apply(pod("a", "p", "agent")));
        let stored = &index.get(&pod_group("a", "agent"))[0];
        assert_eq!(**stored, PodSummary::of(&pod("a", "p", "agent").0));
        assert_eq!((stored.namespace(), stored.name()), ("a", "p"));
    }

    #[test]
    fn revisions_group_by_owner_uid() {
        let index = OwnerIndex::<ControllerRevision>::new();
        let mut revision = ControllerRevision {
            metadata: pod("a", "agent-abc", "agent").0.metadata,
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
