//! The store's change events: what every write publishes, in `resourceVersion` order, to the
//! subscribers and to the bounded history watches resume from (Kubernetes' watch cache; etcd
//! compaction is [`Store::compact`]).
//!
//! Invariant: [`Store::commit`] is the only place that bumps the `resourceVersion`, changes the
//! objects map and publishes, all under the store lock, so every subscriber sees every change
//! in order (unless it lags, see [`Store::subscribe`]).

use std::sync::Arc;

use serde_json::Value;
use tokio::sync::broadcast;

use super::{Inner, Store, StoreError};
use crate::conversion::ServedForm;
use crate::registry::ResourceKey;

/// What happened to an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// Created.
    Added,
    /// Changed (including gaining a `deletionTimestamp`).
    Modified,
    /// Removed from the store.
    Deleted,
}

impl EventKind {
    /// The watch event `type` Kubernetes uses (`ADDED`, `MODIFIED`, `DELETED`).
    pub fn as_watch_type(self) -> &'static str {
        match self {
            Self::Added => "ADDED",
            Self::Modified => "MODIFIED",
            Self::Deleted => "DELETED",
        }
    }
}

/// One change to the store.
#[derive(Clone, Debug)]
pub struct StoreEvent {
    /// Resource type of the object.
    pub key: ResourceKey,
    /// Added, modified or deleted.
    pub kind: EventKind,
    /// Namespace of the object (`None` for cluster-scoped objects).
    pub namespace: Option<String>,
    /// Name of the object.
    pub name: String,
    /// The object after the change (for deletions: the last state, with the deletion's
    /// `resourceVersion`).
    pub object: Arc<Value>,
    /// The `resourceVersion` this change produced.
    pub resource_version: u64,
    /// The object before the change (`None` for additions). Watches with selectors need it to
    /// turn "stopped matching" into `DELETED` and "started matching" into `ADDED`.
    pub previous: Option<Arc<Value>>,
    /// The real (wall-clock) instant of the change, even under tokio's paused clock. For
    /// measurements from outside, such as the latency from an event to the write it causes;
    /// the simulator's behaviour never reads it, so runs stay deterministic.
    pub committed_at: std::time::Instant,
}

impl StoreEvent {
    /// This change as `key` serves it: the object after and before the change in `key`'s form,
    /// or `None` when the change is about another resource. Events carry the stored form, in
    /// which one store can back several resources (core and `events.k8s.io` Events).
    pub fn served_as(&self, key: &ResourceKey) -> Option<(Arc<Value>, Option<Arc<Value>>)> {
        let (stored, form) = ServedForm::of(key);
        (stored == self.key).then(|| {
            (
                form.from_storage(&self.object),
                self.previous.as_ref().map(|p| form.from_storage(p)),
            )
        })
    }
}

impl Store {
    /// Every change from now on, in `resourceVersion` order.
    ///
    /// The channel holds [`DEFAULT_CHANNEL_CAPACITY`](super::DEFAULT_CHANNEL_CAPACITY) events (see [`Store::with_limits`]).
    /// A subscriber that falls further behind receives
    /// `RecvError::Lagged(n)`: it has missed `n` events and should re-read the store (or
    /// resume from its last `resourceVersion` with [`Store::watch_from`], which fails with
    /// [`StoreError::Gone`] once that version left the history). The API server ends a
    /// lagging watch, as Kubernetes does with a slow watcher, and the client re-watches.
    pub fn subscribe(&self) -> broadcast::Receiver<StoreEvent> {
        self.events.subscribe()
    }

    /// Events published but not yet received by every subscriber. Each keeps its object and
    /// the version it replaced alive until the last subscriber has read it, so a writer
    /// making thousands of changes at once can wait for this to fall (the cluster model
    /// does, [`crate::cluster`]) rather than hold thousands of replaced objects.
    pub fn backlog(&self) -> usize {
        self.events.len()
    }

    /// The retained events of `key` (every kind when `None`) after `resource_version`,
    /// together with a subscription that continues exactly where they end. The events carry
    /// the stored form: read them as `key` serves them with [`StoreEvent::served_as`].
    ///
    /// Fails with [`StoreError::Gone`] when events after `resource_version` were already
    /// dropped from the history (Kubernetes' `410 Gone`, "too old resource version").
    pub fn watch_from(
        &self,
        key: Option<&ResourceKey>,
        resource_version: u64,
    ) -> Result<(Vec<StoreEvent>, broadcast::Receiver<StoreEvent>), StoreError> {
        let stored = key.map(|key| ServedForm::of(key).0);
        let inner = self.lock();
        if resource_version < inner.compacted_through {
            return Err(StoreError::Gone {
                requested: resource_version,
                oldest: inner.compacted_through,
            });
        }
        let start = inner
            .history
            .partition_point(|event| event.resource_version <= resource_version);
        let replay = inner
            .history
            .range(start..)
            .filter(|event| stored.as_ref().is_none_or(|key| *key == event.key))
            .cloned()
            .collect();
        Ok((replay, self.events.subscribe()))
    }

    /// Every object of `key` (all namespaces), the `resourceVersion` of that snapshot, and a
    /// subscription that starts right after it: the start of a watch without a
    /// `resourceVersion`.
    pub fn snapshot_and_subscribe(
        &self,
        key: &ResourceKey,
    ) -> (Vec<Arc<Value>>, u64, broadcast::Receiver<StoreEvent>) {
        let (stored, form) = ServedForm::of(key);
        let inner = self.lock();
        let objects = inner
            .objects
            .get(&stored)
            .map(|map| map.values().map(|v| form.from_storage(v)).collect())
            .unwrap_or_default();
        (objects, inner.resource_version, self.events.subscribe())
    }

    /// The oldest `resourceVersion` a watch can still resume from (or a paged list continue
    /// at): older ones get 410 Gone.
    pub fn oldest_resumable(&self) -> u64 {
        self.lock().compacted_through
    }

    /// Forgets the whole event history, as an etcd compaction does: every watch resuming from
    /// an earlier `resourceVersion` gets 410 Gone.
    pub fn compact(&self) {
        let mut inner = self.lock();
        inner.history.clear();
        inner.compacted_through = inner.resource_version;
    }

    pub(super) fn commit(
        &self,
        inner: &mut Inner,
        key: &ResourceKey,
        namespace: Option<String>,
        name: String,
        kind: EventKind,
        object: Arc<Value>,
    ) {
        inner.resource_version += 1;
        let id = (namespace.clone().unwrap_or_default(), name.clone());
        let objects = inner.objects.entry(key.clone()).or_default();
        let previous = match kind {
            EventKind::Deleted => objects.remove(&id),
            EventKind::Added | EventKind::Modified => objects.insert(id, object.clone()),
        };
        if kind != EventKind::Deleted && key.group == "apiextensions.k8s.io" {
            inner.registry.register_crd_object(&object);
        }
        let event = StoreEvent {
            key: key.clone(),
            kind,
            namespace,
            name,
            object,
            resource_version: inner.resource_version,
            previous,
            committed_at: std::time::Instant::now(),
        };
        if let Some(journal) = &inner.journal {
            journal.write(&Store::journal_line(&event, inner.names_generated));
        }
        inner.history.push_back(event.clone());
        while inner.history.len() > inner.history_limit {
            if let Some(dropped) = inner.history.pop_front() {
                inner.compacted_through = dropped.resource_version;
            }
        }
        // No receiver is not an error: nobody is watching yet.
        let _ = self.events.send(event);
    }
}
