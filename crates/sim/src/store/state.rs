//! What a store keeps across a restart (`sim serve --state FILE`): its objects, its
//! `resourceVersion` counter and its `generateName` counter, as etcd keeps them across a
//! restart of kube-apiserver.
//!
//! Two parts, as etcd's snapshot and write-ahead log: a [`SavedStore`] (the whole store at one
//! `resourceVersion`) and a journal, one [`SavedChange`] line per change, written by
//! [`Store::set_journal`]'s sink under the store lock before the write returns, so a change the
//! API acknowledged is in the journal even if the process is killed the next instant (etcd
//! does not lose an acknowledged write either; a simulator that did would hand a controller a
//! cluster older than what it already saw). [`SavedStore::apply`] replays a journal onto a
//! snapshot; [`Store::rotate_journal`] takes a snapshot and moves the sink to a new journal in
//! one step, so that snapshot and new journal together hold every change.
//!
//! A restored store behaves as a restarted kube-apiserver does with the same etcd:
//! `resourceVersion`s continue from where they were (so no uid or version of the previous life
//! is handed out again), and the event history starts empty at the restored version, as the
//! fresh watch cache of a restarted kube-apiserver does (it lists etcd at the current revision):
//! a watch from an older `resourceVersion`, or a paged list continuing from one, gets 410 Gone,
//! and a client relists; a watch from the restored version itself gets every change after it.
//!
//! Invariants: [`Store::restore`] only fills an empty store (nothing written yet), and what
//! [`Store::saved`] returns is one consistent snapshot, taken under the store lock.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Store, StoreError, StoreEvent};
use crate::registry::ResourceKey;

/// Where a store writes its journal: one line (with its `\n`) per change, called under the
/// store lock. It must not call back into the store.
#[derive(Clone)]
pub struct JournalSink(Arc<WriteLine>);

/// What a [`JournalSink`] calls with each line.
type WriteLine = dyn Fn(&[u8]) + Send + Sync;

impl JournalSink {
    /// A sink that hands each line to `write`.
    pub fn new(write: impl Fn(&[u8]) + Send + Sync + 'static) -> Self {
        Self(Arc::new(write))
    }

    pub(super) fn write(&self, line: &[u8]) {
        (self.0)(line);
    }
}

impl std::fmt::Debug for JournalSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JournalSink")
    }
}

/// The format of [`SavedStore`]; a file of another format is refused, not misread.
pub const STATE_FORMAT: u32 = 1;

/// A store's durable state.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SavedStore {
    /// [`STATE_FORMAT`].
    pub format: u32,
    /// The last `resourceVersion` handed out.
    pub resource_version: u64,
    /// Names generated so far (`generateName`): the next suffixes differ from the old ones.
    pub names_generated: u64,
    /// Every object, in the form it is stored in.
    pub objects: Vec<SavedObject>,
}

/// One stored object and the resource it is stored under.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct SavedObject {
    /// API group (`""` for the core group).
    pub group: String,
    /// API version.
    pub version: String,
    /// Plural resource name.
    pub plural: String,
    /// The object.
    pub object: Value,
}

/// One change of a journal.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SavedChange {
    /// The `resourceVersion` the change produced.
    pub resource_version: u64,
    /// The store's `generateName` counter after it.
    pub names_generated: u64,
    /// `ADDED`, `MODIFIED` or `DELETED`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The object after the change (its last state for `DELETED`) and where it is stored.
    #[serde(flatten)]
    pub object: SavedObject,
}

impl SavedChange {
    /// The journal line of `event`, with the store's `names_generated` counter.
    fn line(event: &StoreEvent, names_generated: u64) -> Vec<u8> {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Line<'a> {
            resource_version: u64,
            names_generated: u64,
            #[serde(rename = "type")]
            kind: &'a str,
            group: &'a str,
            version: &'a str,
            plural: &'a str,
            object: &'a Value,
        }
        let line = Line {
            resource_version: event.resource_version,
            names_generated,
            kind: event.kind.as_watch_type(),
            group: &event.key.group,
            version: &event.key.version,
            plural: &event.key.plural,
            object: &event.object,
        };
        // Serializing a Value into a Vec cannot fail.
        let mut text = serde_json::to_vec(&line).unwrap_or_default();
        text.push(b'\n');
        text
    }
}

impl SavedStore {
    /// Replays the journal `lines` (JSON lines, any order) onto this snapshot: every change
    /// after its `resourceVersion`, in order; earlier ones are in the snapshot already. A last
    /// line cut short (the process was killed while writing it, before the write it records was
    /// acknowledged) is ignored. Returns how many changes were applied.
    ///
    /// # Errors
    ///
    /// [`StoreError::Invalid`] for a line that is not a change (but a cut last one).
    pub fn apply(&mut self, lines: &str) -> Result<usize, StoreError> {
        let all: Vec<&str> = lines.lines().filter(|l| !l.trim().is_empty()).collect();
        let mut changes = Vec::with_capacity(all.len());
        for (index, line) in all.iter().enumerate() {
            match serde_json::from_str::<SavedChange>(line) {
                Ok(change) => changes.push(change),
                Err(_) if index + 1 == all.len() && !line.ends_with('}') => {}
                Err(error) => {
                    return Err(StoreError::invalid(format!(
                        "journal line {}: {error}",
                        index + 1
                    )));
                }
            }
        }
        changes.retain(|c| c.resource_version > self.resource_version);
        changes.sort_by_key(|c| c.resource_version);
        let mut index: HashMap<(String, String, String, String, String), usize> = self
            .objects
            .iter()
            .enumerate()
            .map(|(i, o)| (identity(o), i))
            .collect();
        let applied = changes.len();
        for change in changes {
            let id = identity(&change.object);
            self.resource_version = change.resource_version;
            self.names_generated = change.names_generated;
            match (change.kind.as_str(), index.get(&id).copied()) {
                ("DELETED", Some(at)) => {
                    self.objects.swap_remove(at);
                    index.remove(&id);
                    if let Some(moved) = self.objects.get(at) {
                        index.insert(identity(moved), at);
                    }
                }
                ("DELETED", None) => {}
                (_, Some(at)) => {
                    if let Some(slot) = self.objects.get_mut(at) {
                        *slot = change.object;
                    }
                }
                (_, None) => {
                    index.insert(id, self.objects.len());
                    self.objects.push(change.object);
                }
            }
        }
        Ok(applied)
    }
}

/// Resource and `namespace/name` of a saved object.
fn identity(object: &SavedObject) -> (String, String, String, String, String) {
    let meta = &object.object["metadata"];
    (
        object.group.clone(),
        object.version.clone(),
        object.plural.clone(),
        meta["namespace"].as_str().unwrap_or_default().to_owned(),
        meta["name"].as_str().unwrap_or_default().to_owned(),
    )
}

impl Store {
    /// The journal line of `event` (see [`SavedChange`]), for the sink.
    pub(super) fn journal_line(event: &StoreEvent, names_generated: u64) -> Vec<u8> {
        SavedChange::line(event, names_generated)
    }

    /// Writes every change from now on to `sink` (see [`JournalSink`]); `None` stops.
    pub fn set_journal(&self, sink: Option<JournalSink>) {
        self.lock().journal = sink;
    }

    /// The store's durable state now and, in the same step under the store lock, the journal
    /// moved to `sink`: every change after the returned snapshot goes to `sink`, none before.
    pub fn rotate_journal(&self, sink: Option<JournalSink>) -> SavedStore {
        let snapshot = {
            let mut inner = self.lock();
            inner.journal = sink;
            snapshot_locked(&inner)
        };
        snapshot.into()
    }

    /// The store's durable state now: one snapshot, consistent with
    /// [`Store::resource_version`] at the same instant.
    pub fn saved(&self) -> SavedStore {
        let snapshot = snapshot_locked(&self.lock());
        snapshot.into()
    }

    /// Fills this empty store with `saved`: its objects, its counters, the resources its
    /// CustomResourceDefinitions define. The event history starts at the restored version (see
    /// the module docs).
    ///
    /// # Errors
    ///
    /// [`StoreError::Invalid`] when something was written to the store already, when `saved` is
    /// of another format, or when an object has no name or a `resourceVersion` above the
    /// saved one (the file was not written by [`Store::saved`]).
    pub fn restore(&self, saved: SavedStore) -> Result<(), StoreError> {
        if saved.format != STATE_FORMAT {
            return Err(StoreError::invalid(format!(
                "the saved state has format {}, this simulator reads format {STATE_FORMAT}",
                saved.format
            )));
        }
        let mut objects: HashMap<ResourceKey, BTreeMap<(String, String), Arc<Value>>> =
            HashMap::new();
        let mut crds = Vec::new();
        for SavedObject {
            group,
            version,
            plural,
            object,
        } in saved.objects
        {
            let meta = &object["metadata"];
            let Some(name) = meta["name"].as_str().map(str::to_owned) else {
                return Err(StoreError::invalid(format!(
                    "a saved {plural} object has no name"
                )));
            };
            let version_of_object = meta["resourceVersion"]
                .as_str()
                .and_then(|rv| rv.parse::<u64>().ok())
                .unwrap_or_default();
            if version_of_object > saved.resource_version {
                return Err(StoreError::invalid(format!(
                    "the saved {plural} {name} has resourceVersion {version_of_object}, after the \
                     saved store's {}",
                    saved.resource_version
                )));
            }
            let namespace = meta["namespace"].as_str().unwrap_or_default().to_owned();
            let key = ResourceKey::new(&group, &version, &plural);
            if group == "apiextensions.k8s.io" {
                crds.push(object.clone());
            }
            objects
                .entry(key)
                .or_default()
                .insert((namespace, name), Arc::new(object));
        }
        let mut inner = self.lock();
        if inner.resource_version != 0 || !inner.objects.is_empty() {
            return Err(StoreError::invalid(
                "a saved state can only be restored into an empty store",
            ));
        }
        for crd in &crds {
            inner.registry.register_crd_object(crd);
        }
        inner.objects = objects;
        inner.resource_version = saved.resource_version;
        inner.names_generated = saved.names_generated;
        inner.history.clear();
        inner.compacted_through = saved.resource_version;
        Ok(())
    }
}

/// The store at one instant, taken under the lock (cheap: the objects are shared).
struct Snapshot {
    resource_version: u64,
    names_generated: u64,
    objects: Vec<(ResourceKey, Arc<Value>)>,
}

fn snapshot_locked(inner: &super::Inner) -> Snapshot {
    Snapshot {
        resource_version: inner.resource_version,
        names_generated: inner.names_generated,
        objects: inner
            .objects
            .iter()
            .flat_map(|(key, objects)| objects.values().map(move |o| (key.clone(), Arc::clone(o))))
            .collect(),
    }
}

impl From<Snapshot> for SavedStore {
    fn from(snapshot: Snapshot) -> Self {
        SavedStore {
            format: STATE_FORMAT,
            resource_version: snapshot.resource_version,
            names_generated: snapshot.names_generated,
            objects: snapshot
                .objects
                .into_iter()
                .map(|(key, object)| SavedObject {
                    group: key.group,
                    version: key.version,
                    plural: key.plural,
                    object: Arc::unwrap_or_clone(object),
                })
                .collect(),
        }
    }
}
