//! The object store behind the simulated API server: what etcd plus the generic registry
//! (`staging/src/k8s.io/apiserver/pkg/registry/generic/registry/store.go`) do in Kubernetes.
//!
//! Objects are kept as `serde_json::Value` (so custom resources and patches need no Rust type),
//! keyed by [`ResourceKey`], namespace and name. Every change bumps one cluster-wide
//! `resourceVersion` counter and is published, in that order, to subscribers and to a bounded
//! history used to resume watches.
//!
//! Invariants:
//! - `resourceVersion` strictly increases with every change, across all kinds.
//! - `metadata.generation` starts at 1 and increases only when something other than
//!   `metadata` (and `status`, for kinds with a status subresource) changes.
//! - For kinds with a status subresource, [`Store::update`] keeps the stored `status` and
//!   [`Store::update_status`] changes nothing but `status`.
//! - Events are published while the store lock is held, so subscribers see them in
//!   `resourceVersion` order with no gaps (unless they lag, see [`Store::subscribe`]).

#![expect(
    clippy::indexing_slicing,
    reason = "only serde_json::Value is indexed here: a missing key or index reads as Null, and \
              writes by index go to objects this module built"
)]

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::sync::broadcast;

use crate::clock::SimClock;
use crate::conversion::ServedForm;
use crate::object::{metadata_mut, string_field};
use crate::registry::{Registry, ResourceInfo, ResourceKey};
use crate::strategy::Strategy;

mod changes;
mod error;
mod names;
mod state;

pub use changes::{EventKind, StoreEvent};
pub use error::{StoreError, status_body};
pub use state::{JournalSink, STATE_FORMAT, SavedChange, SavedObject, SavedStore};

/// Which part of an object an update may change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UpdateScope {
    /// The main resource: everything but `status` when the kind has a status subresource.
    Main,
    /// The `/status` subresource: nothing but `status`.
    Status,
}

/// Options of a delete.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeleteOptions {
    /// `gracePeriodSeconds`; for bound pods the default is `spec.terminationGracePeriodSeconds`
    /// (30 when unset).
    pub grace_period_seconds: Option<i64>,
    /// `preconditions.resourceVersion`.
    pub precondition_resource_version: Option<String>,
    /// `preconditions.uid`.
    pub precondition_uid: Option<String>,
}

/// What a delete did.
#[derive(Clone, Debug)]
pub enum DeleteOutcome {
    /// The object is gone; this is its last state.
    Removed(Arc<Value>),
    /// The object got a `deletionTimestamp` and stays until its finalizers are removed or the
    /// kubelet finishes the graceful deletion ([`Store::remove_now`]).
    Terminating(Arc<Value>),
}

impl DeleteOutcome {
    /// The object's state after the delete.
    pub fn object(&self) -> &Arc<Value> {
        match self {
            Self::Removed(object) | Self::Terminating(object) => object,
        }
    }
}

/// Default number of change events kept for watch resumption. Each retained event keeps that
/// version of its object alive, so this bounds memory too: Kubernetes' watch cache likewise
/// keeps a bounded window (and etcd compacts every 5 minutes).
pub const DEFAULT_HISTORY: usize = 10_000;
/// Default capacity of the broadcast channel behind [`Store::subscribe`].
pub const DEFAULT_CHANNEL_CAPACITY: usize = 1 << 16;

type ObjectId = (String, String);

struct Inner {
    resource_version: u64,
    objects: HashMap<ResourceKey, BTreeMap<ObjectId, Arc<Value>>>,
    history: VecDeque<StoreEvent>,
    history_limit: usize,
    /// Highest resourceVersion whose event was dropped from `history`.
    compacted_through: u64,
    registry: Registry,
    names_generated: u64,
    /// Mixed into every new uid (see [`Store::salt_uids`]).
    uid_salt: u64,
    /// Where every change is written before the write returns (`sim serve --state`).
    journal: Option<JournalSink>,
}

/// The simulated cluster's object store. Cheap to clone: clones share the same objects.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Mutex<Inner>>,
    clock: SimClock,
    events: broadcast::Sender<StoreEvent>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("resource_version", &self.resource_version())
            .finish_non_exhaustive()
    }
}

impl Store {
    /// An empty store knowing the built-in resources, with default history and channel sizes.
    pub fn new(clock: SimClock) -> Self {
        Self::with_limits(clock, DEFAULT_HISTORY, DEFAULT_CHANNEL_CAPACITY)
    }

    /// An empty store keeping `history` events for watch resumption and buffering
    /// `channel_capacity` events per subscriber.
    pub fn with_limits(clock: SimClock, history: usize, channel_capacity: usize) -> Self {
        let (events, _) = broadcast::channel(channel_capacity.max(1));
        Self {
            inner: Arc::new(Mutex::new(Inner {
                resource_version: 0,
                objects: HashMap::new(),
                history: VecDeque::new(),
                history_limit: history,
                compacted_through: 0,
                registry: Registry::default(),
                names_generated: 0,
                uid_salt: 0,
                journal: None,
            })),
            clock,
            events,
        }
    }

    /// The clock used for timestamps.
    pub fn clock(&self) -> &SimClock {
        &self.clock
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves consistent data (every mutation is applied
        // with a single insert), so a poisoned lock is safe to keep using.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Makes the uids of objects created from now on differ from those another store (or this
    /// one before) hands out for the same `resourceVersion`s: a cluster started again without
    /// its state must not give a new object the uid of an object of its previous life, which
    /// a client still remembers (kube-runtime's predicate filter took a recreated
    /// CanaryDaemonSet for the deleted one and never reconciled it). `sim serve` salts with
    /// the time it starts; in-process simulations keep the default, 0, for reproducible uids.
    pub fn salt_uids(&self, salt: u64) {
        self.lock().uid_salt = salt;
    }

    /// The current (latest) `resourceVersion`.
    pub fn resource_version(&self) -> u64 {
        self.lock().resource_version
    }

    // === registry ===

    /// Makes a resource servable (replacing an earlier registration of the same key).
    pub fn register(&self, info: ResourceInfo) {
        self.lock().registry.register(info);
    }

    /// What the store knows about `key`.
    pub fn resource_info(&self, key: &ResourceKey) -> Option<ResourceInfo> {
        self.lock().registry.get(key).cloned()
    }

    /// Every registered resource, sorted by key.
    pub fn resources(&self) -> Vec<ResourceInfo> {
        self.lock().registry.all().cloned().collect()
    }

    // === typed access ===

    /// The object `namespace/name`, if it exists and decodes as `K`.
    pub fn get<K>(&self, namespace: Option<&str>, name: &str) -> Option<K>
    where
        K: kube::Resource<DynamicType = ()> + DeserializeOwned,
    {
        let value = self.get_value(&ResourceKey::of::<K>(), namespace, name)?;
        decode(&value).ok()
    }

    /// Every object of kind `K` in `namespace` (all namespaces when `None`), sorted by
    /// namespace and name. Objects that do not decode as `K` are skipped.
    pub fn list<K>(&self, namespace: Option<&str>) -> Vec<K>
    where
        K: kube::Resource<DynamicType = ()> + DeserializeOwned,
    {
        let (values, _) = self.list_values(&ResourceKey::of::<K>(), namespace);
        values.iter().filter_map(|v| decode(v).ok()).collect()
    }

    /// Creates `obj`: sets uid, creationTimestamp, resourceVersion, generation 1, and a name
    /// from `generateName` when the name is empty.
    pub fn create<K>(&self, obj: &K) -> Result<K, StoreError>
    where
        K: kube::Resource<DynamicType = ()> + Serialize + DeserializeOwned,
    {
        let created = self.create_value(&ResourceKey::of::<K>(), encode(obj)?)?;
        decode(&created)
    }

    /// Replaces the main resource. `status` is ignored for kinds with a status subresource;
    /// generation increases iff something outside `metadata`/`status` changed; a set
    /// `metadata.resourceVersion` must match the stored one (else [`StoreError::Conflict`]).
    pub fn update<K>(&self, obj: &K) -> Result<K, StoreError>
    where
        K: kube::Resource<DynamicType = ()> + Serialize + DeserializeOwned,
    {
        self.update_typed(obj, UpdateScope::Main)
    }

    /// Replaces the `status` of the object, and nothing else.
    pub fn update_status<K>(&self, obj: &K) -> Result<K, StoreError>
    where
        K: kube::Resource<DynamicType = ()> + Serialize + DeserializeOwned,
    {
        self.update_typed(obj, UpdateScope::Status)
    }

    fn update_typed<K>(&self, obj: &K, scope: UpdateScope) -> Result<K, StoreError>
    where
        K: kube::Resource<DynamicType = ()> + Serialize + DeserializeOwned,
    {
        let updated = self.update_value(&ResourceKey::of::<K>(), encode(obj)?, scope)?;
        decode(&updated)
    }

    /// Reads the object, lets `change` edit it, and writes it back in one atomic step (no
    /// conflict possible). `scope` picks main-resource or status semantics.
    pub fn modify<K>(
        &self,
        namespace: Option<&str>,
        name: &str,
        scope: UpdateScope,
        change: impl FnOnce(&mut K),
    ) -> Result<K, StoreError>
    where
        K: kube::Resource<DynamicType = ()> + Serialize + DeserializeOwned,
    {
        let key = ResourceKey::of::<K>();
        let mut inner = self.lock();
        let (stored, form, current) = inner.existing(&key, namespace, name)?;
        let mut object: K = decode(&form.from_storage(&current))?;
        change(&mut object);
        let mut value = encode(&object)?;
        if let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("resourceVersion");
        }
        let updated = self.update_locked(&mut inner, &stored, form.to_storage(value), scope)?;
        decode(&form.from_storage(&updated))
    }

    /// Replaces the `status` of the object with what `status` computes from the stored object
    /// (as `K` serves it), under the store lock: [`Store::modify`] with
    /// [`UpdateScope::Status`], without decoding and re-encoding the whole object, which is
    /// what the kubelets' status writes cost when they went through [`Store::modify`]. The
    /// result is the same: a status update keeps everything of the stored object but its
    /// `status`. `status` returns `None` to write nothing.
    pub fn modify_status<K, S>(
        &self,
        namespace: Option<&str>,
        name: &str,
        status: impl FnOnce(&Value) -> Option<S>,
    ) -> Result<Option<Arc<Value>>, StoreError>
    where
        K: kube::Resource<DynamicType = ()>,
        S: Serialize,
    {
        let key = ResourceKey::of::<K>();
        let mut inner = self.lock();
        let (stored, form, current) = inner.existing(&key, namespace, name)?;
        let served = form.from_storage(&current);
        let Some(status) = status(&served) else {
            return Ok(None);
        };
        let mut meta = serde_json::Map::new();
        for field in ["name", "namespace"] {
            if let Some(value) = served["metadata"].get(field) {
                meta.insert(field.into(), value.clone());
            }
        }
        let incoming = json!({"metadata": meta, "status": encode(&status)?});
        let updated = self.update_locked(
            &mut inner,
            &stored,
            form.to_storage(incoming),
            UpdateScope::Status,
        )?;
        Ok(Some(form.from_storage(&updated)))
    }

    /// Deletes with Kubernetes semantics: an object with finalizers, or a pod bound to a node
    /// with a grace period above zero, only gets a `deletionTimestamp`
    /// (and `deletionGracePeriodSeconds`); anything else is removed.
    pub fn delete<K>(&self, namespace: Option<&str>, name: &str) -> Result<(), StoreError>
    where
        K: kube::Resource<DynamicType = ()>,
    {
        self.delete_value(
            &ResourceKey::of::<K>(),
            namespace,
            name,
            &DeleteOptions::default(),
        )
        .map(|_| ())
    }

    /// Removes the object now, whatever its finalizers or grace period: the kubelet finishing
    /// a graceful pod deletion.
    pub fn remove_now<K>(&self, namespace: Option<&str>, name: &str) -> Result<(), StoreError>
    where
        K: kube::Resource<DynamicType = ()>,
    {
        self.remove_now_value(&ResourceKey::of::<K>(), namespace, name)
            .map(|_| ())
    }

    // === untyped access (the REST layer) ===

    /// The stored object.
    pub fn get_value(
        &self,
        key: &ResourceKey,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Arc<Value>> {
        let (stored, form) = ServedForm::of(key);
        let object = self.lock().get(&stored, namespace, name)?;
        Some(form.from_storage(&object))
    }

    /// The stored objects of `key` in `namespace` (all when `None`), sorted by namespace and
    /// name, with the `resourceVersion` of the snapshot.
    pub fn list_values(
        &self,
        key: &ResourceKey,
        namespace: Option<&str>,
    ) -> (Vec<Arc<Value>>, u64) {
        let (stored, form) = ServedForm::of(key);
        let inner = self.lock();
        let objects = match inner.objects.get(&stored) {
            None => Vec::new(),
            Some(map) => match namespace {
                None => map.values().map(|v| form.from_storage(v)).collect(),
                Some(ns) => map
                    .range((ns.to_owned(), String::new())..)
                    .take_while(|((object_ns, _), _)| object_ns == ns)
                    .map(|(_, v)| form.from_storage(v))
                    .collect(),
            },
        };
        (objects, inner.resource_version)
    }

    /// Creates an object (see [`Store::create`]).
    pub fn create_value(&self, key: &ResourceKey, object: Value) -> Result<Arc<Value>, StoreError> {
        let (stored, form) = ServedForm::of(key);
        let created = self.create_stored(&stored, form.to_storage(object))?;
        Ok(form.from_storage(&created))
    }

    fn create_stored(&self, key: &ResourceKey, object: Value) -> Result<Arc<Value>, StoreError> {
        let mut inner = self.lock();
        let info = inner.registry.get(key).cloned();
        let Value::Object(mut object) = object else {
            return Err(StoreError::invalid("the object must be a JSON object"));
        };
        if let Some(info) = &info {
            object.insert("apiVersion".into(), Value::String(info.api_version()));
            object.insert("kind".into(), Value::String(info.kind.clone()));
        }
        let meta = metadata_mut(&mut object);
        let namespace = match (&info, string_field(meta, "namespace")) {
            (Some(info), None) if info.namespaced => {
                return Err(StoreError::invalid("metadata.namespace: Required value"));
            }
            (Some(info), Some(_)) if !info.namespaced => {
                meta.remove("namespace");
                None
            }
            (_, namespace) => namespace,
        };
        let name = match string_field(meta, "name") {
            Some(name) => name,
            None => match string_field(meta, "generateName") {
                Some(prefix) => inner.generate_name(key, namespace.as_deref(), &prefix),
                None => {
                    return Err(StoreError::invalid(
                        "metadata.name: Required value: name or generateName is required",
                    ));
                }
            },
        };
        if inner.get(key, namespace.as_deref(), &name).is_some() {
            return Err(StoreError::AlreadyExists {
                resource: key.to_string(),
                name,
            });
        }
        let resource_version = inner.resource_version + 1;
        let now = self.clock.now();
        let meta = metadata_mut(&mut object);
        meta.insert("name".into(), Value::String(name.clone()));
        meta.insert(
            "uid".into(),
            Value::String(names::uid_for(resource_version, inner.uid_salt)),
        );
        meta.insert(
            "creationTimestamp".into(),
            Value::String(crate::clock::format_time(now)),
        );
        meta.insert(
            "resourceVersion".into(),
            Value::String(resource_version.to_string()),
        );
        meta.remove("deletionTimestamp");
        meta.remove("deletionGracePeriodSeconds");
        Strategy::for_resource(key, info.as_ref()).prepare_for_create(key, &mut object, now);
        let object = Arc::new(Value::Object(object));
        self.commit(
            &mut inner,
            key,
            namespace,
            name,
            EventKind::Added,
            object.clone(),
        );
        Ok(object)
    }

    /// Replaces an object or its status (see [`Store::update`], [`Store::update_status`]).
    /// An object that is terminating and has no finalizers left and no grace period is
    /// removed, as Kubernetes does when the last finalizer goes.
    pub fn update_value(
        &self,
        key: &ResourceKey,
        object: Value,
        scope: UpdateScope,
    ) -> Result<Arc<Value>, StoreError> {
        let (stored, form) = ServedForm::of(key);
        let mut inner = self.lock();
        let updated = self.update_locked(&mut inner, &stored, form.to_storage(object), scope)?;
        Ok(form.from_storage(&updated))
    }

    fn update_locked(
        &self,
        inner: &mut Inner,
        key: &ResourceKey,
        object: Value,
        scope: UpdateScope,
    ) -> Result<Arc<Value>, StoreError> {
        let Value::Object(mut incoming) = object else {
            return Err(StoreError::invalid("the object must be a JSON object"));
        };
        let meta = metadata_mut(&mut incoming);
        let name = string_field(meta, "name")
            .ok_or_else(|| StoreError::invalid("metadata.name: Required value"))?;
        let info = inner.registry.get(key).cloned();
        let namespaced = info.as_ref().is_none_or(|info| info.namespaced);
        let namespace = string_field(meta, "namespace").filter(|_| namespaced);
        let current = inner
            .get(key, namespace.as_deref(), &name)
            .ok_or_else(|| not_found(key, &name))?;
        if let Some(wanted) = string_field(meta, "resourceVersion")
            && Some(wanted.as_str()) != current["metadata"]["resourceVersion"].as_str()
        {
            return Err(StoreError::Conflict {
                resource: key.to_string(),
                name,
            });
        }
        let Value::Object(old) = current.as_ref() else {
            return Err(StoreError::invalid("stored object is not a JSON object"));
        };
        let strategy = Strategy::for_resource(key, info.as_ref());
        let mut next = match scope {
            UpdateScope::Status => strategy.prepare_for_status_update(old, incoming),
            UpdateScope::Main => {
                let mut next = incoming;
                strategy.prepare_for_update(key, old, &mut next);
                next
            }
        };
        if let Some(info) = &info {
            next.insert("apiVersion".into(), Value::String(info.api_version()));
            next.insert("kind".into(), Value::String(info.kind.clone()));
        }
        if let Some(stored_rv) = current["metadata"].get("resourceVersion") {
            metadata_mut(&mut next).insert("resourceVersion".into(), stored_rv.clone());
        }
        // Compared in place: cloning `next` for the comparison cost as much as the write.
        if matches!(current.as_ref(), Value::Object(stored) if *stored == next) {
            // Kubernetes skips the write (and keeps the resourceVersion) for no-op updates.
            return Ok(current);
        }
        let resource_version = inner.resource_version + 1;
        metadata_mut(&mut next).insert(
            "resourceVersion".into(),
            Value::String(resource_version.to_string()),
        );
        let next = Value::Object(next);
        let finished = is_terminating(&next)
            && finalizers_empty(&next)
            && next["metadata"]["deletionGracePeriodSeconds"]
                .as_i64()
                .unwrap_or(0)
                == 0;
        let object = Arc::new(next);
        let kind = if finished {
            EventKind::Deleted
        } else {
            EventKind::Modified
        };
        self.commit(inner, key, namespace, name, kind, object.clone());
        Ok(object)
    }

    /// Reads the object, computes its next state with `change` and writes it (with
    /// [`Store::update_value`] semantics for `scope`), all under the store lock: a patch.
    /// A `metadata.resourceVersion` left in the result by `change` is a precondition, so a
    /// patch that sets a stale one conflicts. With `dry_run`, nothing is written and the
    /// computed object is returned.
    pub fn patch_value(
        &self,
        key: &ResourceKey,
        namespace: Option<&str>,
        name: &str,
        scope: UpdateScope,
        dry_run: bool,
        change: impl FnOnce(&Value) -> Result<Value, StoreError>,
    ) -> Result<Arc<Value>, StoreError> {
        let mut inner = self.lock();
        let (stored, form, current) = inner.existing(key, namespace, name)?;
        let next = change(&form.from_storage(&current))?;
        if dry_run {
            return Ok(Arc::new(next));
        }
        let updated = self.update_locked(&mut inner, &stored, form.to_storage(next), scope)?;
        Ok(form.from_storage(&updated))
    }

    /// Deletes an object (see [`Store::delete`]).
    pub fn delete_value(
        &self,
        key: &ResourceKey,
        namespace: Option<&str>,
        name: &str,
        options: &DeleteOptions,
    ) -> Result<DeleteOutcome, StoreError> {
        let mut inner = self.lock();
        let (stored, form, current) = inner.existing(key, namespace, name)?;
        let meta = &current["metadata"];
        let precondition_failed = options
            .precondition_resource_version
            .as_deref()
            .is_some_and(|rv| Some(rv) != meta["resourceVersion"].as_str())
            || options
                .precondition_uid
                .as_deref()
                .is_some_and(|uid| Some(uid) != meta["uid"].as_str());
        if precondition_failed {
            return Err(StoreError::Conflict {
                resource: key.to_string(),
                name: name.to_owned(),
            });
        }
        let info = inner.registry.get(&stored).cloned();
        let grace = Strategy::for_resource(&stored, info.as_ref())
            .graceful_deletion_seconds(&current, options.grace_period_seconds);
        if finalizers_empty(&current) && grace == 0 {
            let removed = self.remove_locked(&mut inner, &stored, namespace, name, &current);
            return Ok(DeleteOutcome::Removed(form.from_storage(&removed)));
        }
        let already = current["metadata"]["deletionGracePeriodSeconds"].as_i64();
        if is_terminating(&current) && already.is_some_and(|already| already <= grace) {
            return Ok(DeleteOutcome::Terminating(form.from_storage(&current)));
        }
        let Value::Object(mut next) = current.as_ref().clone() else {
            return Err(StoreError::invalid("stored object is not a JSON object"));
        };
        let resource_version = inner.resource_version + 1;
        let meta = metadata_mut(&mut next);
        meta.insert(
            "deletionTimestamp".into(),
            Value::String(self.clock.rfc3339_after(grace)),
        );
        meta.insert("deletionGracePeriodSeconds".into(), json!(grace));
        meta.insert(
            "resourceVersion".into(),
            Value::String(resource_version.to_string()),
        );
        let object = Arc::new(Value::Object(next));
        self.commit(
            &mut inner,
            &stored,
            namespace.map(str::to_owned),
            name.to_owned(),
            EventKind::Modified,
            object.clone(),
        );
        Ok(DeleteOutcome::Terminating(form.from_storage(&object)))
    }

    /// Removes an object now (see [`Store::remove_now`]); returns its last state.
    pub fn remove_now_value(
        &self,
        key: &ResourceKey,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Arc<Value>, StoreError> {
        let mut inner = self.lock();
        let (stored, form, current) = inner.existing(key, namespace, name)?;
        let last = self.remove_locked(&mut inner, &stored, namespace, name, &current);
        Ok(form.from_storage(&last))
    }

    fn remove_locked(
        &self,
        inner: &mut Inner,
        key: &ResourceKey,
        namespace: Option<&str>,
        name: &str,
        current: &Arc<Value>,
    ) -> Arc<Value> {
        let mut last = current.as_ref().clone();
        let resource_version = inner.resource_version + 1;
        if let Some(meta) = last.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.insert(
                "resourceVersion".into(),
                Value::String(resource_version.to_string()),
            );
        }
        let last = Arc::new(last);
        self.commit(
            inner,
            key,
            namespace.map(str::to_owned),
            name.to_owned(),
            EventKind::Deleted,
            last.clone(),
        );
        last
    }

    /// Number of objects stored, all kinds together.
    pub fn object_count(&self) -> usize {
        self.lock().objects.values().map(BTreeMap::len).sum()
    }
}

impl Inner {
    fn get(&self, key: &ResourceKey, namespace: Option<&str>, name: &str) -> Option<Arc<Value>> {
        self.objects
            .get(key)?
            .get(&(namespace.unwrap_or_default().to_owned(), name.to_owned()))
            .cloned()
    }

    /// The object `key` serves as `namespace/name`, with where and in which form it is stored.
    fn existing(
        &self,
        key: &ResourceKey,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<(ResourceKey, ServedForm, Arc<Value>), StoreError> {
        let (stored, form) = ServedForm::of(key);
        let current = self
            .get(&stored, namespace, name)
            .ok_or_else(|| not_found(key, name))?;
        Ok((stored, form, current))
    }

    /// `prefix` plus the first generated suffix not taken in `namespace` (`generateName`).
    fn generate_name(
        &mut self,
        key: &ResourceKey,
        namespace: Option<&str>,
        prefix: &str,
    ) -> String {
        loop {
            self.names_generated += 1;
            let name = format!("{prefix}{}", names::suffix(self.names_generated));
            if self.get(key, namespace, &name).is_none() {
                return name;
            }
        }
    }
}

fn not_found(key: &ResourceKey, name: &str) -> StoreError {
    StoreError::NotFound {
        resource: key.to_string(),
        name: name.to_owned(),
    }
}

fn encode<K: Serialize>(obj: &K) -> Result<Value, StoreError> {
    serde_json::to_value(obj).map_err(|e| StoreError::invalid(format!("cannot encode: {e}")))
}

fn decode<K: DeserializeOwned>(value: &Value) -> Result<K, StoreError> {
    K::deserialize(value).map_err(|e| StoreError::invalid(format!("cannot decode: {e}")))
}

fn is_terminating(object: &Value) -> bool {
    !object["metadata"]["deletionTimestamp"].is_null()
}

fn finalizers_empty(object: &Value) -> bool {
    object["metadata"]["finalizers"]
        .as_array()
        .is_none_or(Vec::is_empty)
}

#[cfg(test)]
mod tests;
