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

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use k8s_openapi::jiff::Timestamp;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};
use tokio::sync::broadcast;

use crate::clock::SimClock;
use crate::defaults::{apply_defaults, set_template_generation};
use crate::registry::{ResourceInfo, builtin_resources};

/// Identifies a resource type: API group (empty for core), version and plural name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ResourceKey {
    /// API group, `""` for the core group.
    pub group: String,
    /// API version (`v1`).
    pub version: String,
    /// Plural resource name (`daemonsets`).
    pub plural: String,
}

impl ResourceKey {
    /// A key from its parts.
    pub fn new(group: &str, version: &str, plural: &str) -> Self {
        Self {
            group: group.to_owned(),
            version: version.to_owned(),
            plural: plural.to_owned(),
        }
    }

    /// The key of a Rust resource type (k8s-openapi types and `#[derive(CustomResource)]` types).
    pub fn of<K: kube::Resource<DynamicType = ()>>() -> Self {
        Self::new(&K::group(&()), &K::version(&()), &K::plural(&()))
    }

    /// `group/version`, or just `version` for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

impl std::fmt::Display for ResourceKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.group.is_empty() {
            write!(f, "{}", self.plural)
        } else {
            write!(f, "{}.{}", self.plural, self.group)
        }
    }
}

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

/// Why a store operation failed. Each variant maps to the HTTP status Kubernetes answers with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// 404 NotFound.
    #[error("{resource} \"{name}\" not found")]
    NotFound {
        /// Resource (`daemonsets.apps`).
        resource: String,
        /// Object name.
        name: String,
    },
    /// 409 AlreadyExists.
    #[error("{resource} \"{name}\" already exists")]
    AlreadyExists {
        /// Resource (`daemonsets.apps`).
        resource: String,
        /// Object name.
        name: String,
    },
    /// 409 Conflict: a `resourceVersion` or uid precondition failed.
    #[error(
        "Operation cannot be fulfilled on {resource} \"{name}\": the object has been modified; please apply your changes to the latest version and try again"
    )]
    Conflict {
        /// Resource (`daemonsets.apps`).
        resource: String,
        /// Object name.
        name: String,
    },
    /// 409 Conflict from server-side apply: another field manager owns a field the apply
    /// changes.
    #[error("{message}")]
    ApplyConflict {
        /// Which managers own which fields.
        message: String,
    },
    /// 422 Invalid: the object is malformed, or a JSON Patch `test` failed.
    #[error("{message}")]
    Invalid {
        /// What is wrong.
        message: String,
    },
    /// 400 BadRequest.
    #[error("{message}")]
    BadRequest {
        /// What is wrong.
        message: String,
    },
    /// 410 Gone: the requested `resourceVersion` is older than the retained history.
    #[error("too old resource version: {requested} ({oldest})")]
    Gone {
        /// The `resourceVersion` asked for.
        requested: u64,
        /// The oldest `resourceVersion` a watch can still resume from.
        oldest: u64,
    },
}

impl StoreError {
    /// The HTTP status code Kubernetes answers with.
    pub fn code(&self) -> u16 {
        match self {
            Self::NotFound { .. } => 404,
            Self::AlreadyExists { .. } | Self::Conflict { .. } | Self::ApplyConflict { .. } => 409,
            Self::Invalid { .. } => 422,
            Self::BadRequest { .. } => 400,
            Self::Gone { .. } => 410,
        }
    }

    /// The `reason` of the Kubernetes `Status` object.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::NotFound { .. } => "NotFound",
            Self::AlreadyExists { .. } => "AlreadyExists",
            Self::Conflict { .. } | Self::ApplyConflict { .. } => "Conflict",
            Self::Invalid { .. } => "Invalid",
            Self::BadRequest { .. } => "BadRequest",
            Self::Gone { .. } => "Expired",
        }
    }

    /// The Kubernetes `Status` object (`kind: Status`, `status: Failure`) for this error.
    pub fn to_status(&self) -> Value {
        status_body(self.code(), self.reason(), &self.to_string())
    }

    fn invalid(message: impl Into<String>) -> Self {
        Self::Invalid {
            message: message.into(),
        }
    }
}

/// A Kubernetes `Status` failure body.
pub fn status_body(code: u16, reason: &str, message: &str) -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    })
}

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
    registry: BTreeMap<ResourceKey, ResourceInfo>,
    names_generated: u64,
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
        let registry = builtin_resources()
            .into_iter()
            .map(|info| (info.key.clone(), info))
            .collect();
        let (events, _) = broadcast::channel(channel_capacity.max(1));
        Self {
            inner: Arc::new(Mutex::new(Inner {
                resource_version: 0,
                objects: HashMap::new(),
                history: VecDeque::new(),
                history_limit: history,
                compacted_through: 0,
                registry,
                names_generated: 0,
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

    /// The current (latest) `resourceVersion`.
    pub fn resource_version(&self) -> u64 {
        self.lock().resource_version
    }

    // === registry ===

    /// Makes a resource servable (replacing an earlier registration of the same key).
    pub fn register(&self, info: ResourceInfo) {
        self.lock().registry.insert(info.key.clone(), info);
    }

    /// What the store knows about `key`.
    pub fn resource_info(&self, key: &ResourceKey) -> Option<ResourceInfo> {
        self.lock().registry.get(key).cloned()
    }

    /// Every registered resource, sorted by key.
    pub fn resources(&self) -> Vec<ResourceInfo> {
        self.lock().registry.values().cloned().collect()
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
        let updated =
            self.update_value(&ResourceKey::of::<K>(), encode(obj)?, UpdateScope::Main)?;
        decode(&updated)
    }

    /// Replaces the `status` of the object, and nothing else.
    pub fn update_status<K>(&self, obj: &K) -> Result<K, StoreError>
    where
        K: kube::Resource<DynamicType = ()> + Serialize + DeserializeOwned,
    {
        let updated =
            self.update_value(&ResourceKey::of::<K>(), encode(obj)?, UpdateScope::Status)?;
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
        let current = inner
            .get(&key, namespace, name)
            .ok_or_else(|| not_found(&key, name))?;
        let mut object: K = decode(&current)?;
        change(&mut object);
        let mut value = encode(&object)?;
        if let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("resourceVersion");
        }
        let updated = self.update_locked(&mut inner, &key, value, scope)?;
        decode(&updated)
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

    /// Every change from now on, in `resourceVersion` order.
    ///
    /// The channel holds [`DEFAULT_CHANNEL_CAPACITY`] events (see [`Store::with_limits`]).
    /// A subscriber that falls further behind receives
    /// `RecvError::Lagged(n)`: it has missed `n` events and should re-read the store (or
    /// resume from its last `resourceVersion` with [`Store::watch_from`], which fails with
    /// [`StoreError::Gone`] once that version left the history). The API server ends a
    /// lagging watch, as Kubernetes does with a slow watcher, and the client re-watches.
    pub fn subscribe(&self) -> broadcast::Receiver<StoreEvent> {
        self.events.subscribe()
    }

    // === untyped access (the REST layer) ===

    /// The stored object.
    pub fn get_value(
        &self,
        key: &ResourceKey,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Arc<Value>> {
        self.lock().get(key, namespace, name)
    }

    /// The stored objects of `key` in `namespace` (all when `None`), sorted by namespace and
    /// name, with the `resourceVersion` of the snapshot.
    pub fn list_values(
        &self,
        key: &ResourceKey,
        namespace: Option<&str>,
    ) -> (Vec<Arc<Value>>, u64) {
        let inner = self.lock();
        let objects = match inner.objects.get(key) {
            None => Vec::new(),
            Some(map) => match namespace {
                None => map.values().cloned().collect(),
                Some(ns) => map
                    .range((ns.to_owned(), String::new())..)
                    .take_while(|((object_ns, _), _)| object_ns == ns)
                    .map(|(_, v)| v.clone())
                    .collect(),
            },
        };
        (objects, inner.resource_version)
    }

    /// Creates an object (see [`Store::create`]).
    pub fn create_value(&self, key: &ResourceKey, object: Value) -> Result<Arc<Value>, StoreError> {
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
        let meta = metadata_mut(&mut object);
        meta.insert("name".into(), Value::String(name.clone()));
        meta.insert("uid".into(), Value::String(uid_for(resource_version)));
        meta.insert(
            "creationTimestamp".into(),
            Value::String(crate::clock::format_time(self.clock.now())),
        );
        meta.insert("generation".into(), json!(1));
        meta.insert(
            "resourceVersion".into(),
            Value::String(resource_version.to_string()),
        );
        meta.remove("deletionTimestamp");
        meta.remove("deletionGracePeriodSeconds");
        reset_status_on_create(key, info.as_ref(), &mut object, self.clock.now());
        apply_defaults(key, &mut object);
        if is_daemonsets(key) {
            set_template_generation(None, &mut object);
        }
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
        let mut inner = self.lock();
        self.update_locked(&mut inner, key, object, scope)
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
        let status_subresource = info.as_ref().is_some_and(|info| info.status_subresource);
        let Value::Object(old) = current.as_ref() else {
            return Err(StoreError::invalid("stored object is not a JSON object"));
        };
        let mut next = match scope {
            UpdateScope::Status => {
                let mut next = old.clone();
                match incoming.remove("status") {
                    Some(status) => next.insert("status".into(), status),
                    None => next.remove("status"),
                };
                // Field ownership of a status write is recorded by the writer.
                if let Some(managed) = incoming
                    .get("metadata")
                    .and_then(|m| m.get("managedFields"))
                {
                    metadata_mut(&mut next).insert("managedFields".into(), managed.clone());
                }
                next
            }
            UpdateScope::Main => {
                let mut next = incoming;
                if status_subresource {
                    match old.get("status") {
                        Some(status) => next.insert("status".into(), status.clone()),
                        None => next.remove("status"),
                    };
                }
                preserve_server_fields(old, &mut next);
                apply_defaults(key, &mut next);
                if is_daemonsets(key) {
                    set_template_generation(Some(old), &mut next);
                }
                if spec_changed(old, &next) {
                    let generation = old
                        .get("metadata")
                        .and_then(|m| m.get("generation"))
                        .and_then(Value::as_i64)
                        .unwrap_or(0);
                    metadata_mut(&mut next).insert("generation".into(), json!(generation + 1));
                }
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
        if Value::Object(next.clone()) == *current.as_ref() {
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
        let current = inner
            .get(key, namespace, name)
            .ok_or_else(|| not_found(key, name))?;
        let next = change(&current)?;
        if dry_run {
            return Ok(Arc::new(next));
        }
        self.update_locked(&mut inner, key, next, scope)
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
        let current = inner
            .get(key, namespace, name)
            .ok_or_else(|| not_found(key, name))?;
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
        let grace = graceful_period(key, &current, options);
        if finalizers_empty(&current) && grace == 0 {
            let removed = self.remove_locked(&mut inner, key, namespace, name, &current);
            return Ok(DeleteOutcome::Removed(removed));
        }
        let already = current["metadata"]["deletionGracePeriodSeconds"].as_i64();
        if is_terminating(&current) && already.is_some_and(|already| already <= grace) {
            return Ok(DeleteOutcome::Terminating(current));
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
            key,
            namespace.map(str::to_owned),
            name.to_owned(),
            EventKind::Modified,
            object.clone(),
        );
        Ok(DeleteOutcome::Terminating(object))
    }

    /// Removes an object now (see [`Store::remove_now`]); returns its last state.
    pub fn remove_now_value(
        &self,
        key: &ResourceKey,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Arc<Value>, StoreError> {
        let mut inner = self.lock();
        let current = inner
            .get(key, namespace, name)
            .ok_or_else(|| not_found(key, name))?;
        Ok(self.remove_locked(&mut inner, key, namespace, name, &current))
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

    /// The retained events of `key` (every kind when `None`) after `resource_version`,
    /// together with a subscription that continues exactly where they end.
    ///
    /// Fails with [`StoreError::Gone`] when events after `resource_version` were already
    /// dropped from the history (Kubernetes' `410 Gone`, "too old resource version").
    pub fn watch_from(
        &self,
        key: Option<&ResourceKey>,
        resource_version: u64,
    ) -> Result<(Vec<StoreEvent>, broadcast::Receiver<StoreEvent>), StoreError> {
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
            .filter(|event| key.is_none_or(|key| *key == event.key))
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
        let inner = self.lock();
        let objects = inner
            .objects
            .get(key)
            .map(|map| map.values().cloned().collect())
            .unwrap_or_default();
        (objects, inner.resource_version, self.events.subscribe())
    }

    /// Forgets the whole event history, as an etcd compaction does: every watch resuming from
    /// an earlier `resourceVersion` gets 410 Gone.
    pub fn compact(&self) {
        let mut inner = self.lock();
        inner.history.clear();
        inner.compacted_through = inner.resource_version;
    }

    /// Number of objects stored, all kinds together.
    pub fn object_count(&self) -> usize {
        self.lock().objects.values().map(BTreeMap::len).sum()
    }

    fn commit(
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
            register_crd_value(inner, &object);
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

impl Inner {
    fn get(&self, key: &ResourceKey, namespace: Option<&str>, name: &str) -> Option<Arc<Value>> {
        self.objects
            .get(key)?
            .get(&(namespace.unwrap_or_default().to_owned(), name.to_owned()))
            .cloned()
    }

    fn generate_name(
        &mut self,
        key: &ResourceKey,
        namespace: Option<&str>,
        prefix: &str,
    ) -> String {
        // Kubernetes appends 5 random characters from this alphabet (no vowels, no
        // look-alikes); a counter through a mixing function keeps names deterministic.
        const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
        loop {
            self.names_generated += 1;
            let mut bits = splitmix64(self.names_generated);
            let suffix: String = (0..5)
                .map(|_| {
                    let index = (bits % ALPHABET.len() as u64) as usize;
                    bits /= ALPHABET.len() as u64;
                    char::from(ALPHABET[index])
                })
                .collect();
            let name = format!("{prefix}{suffix}");
            if self.get(key, namespace, &name).is_none() {
                return name;
            }
        }
    }
}

fn register_crd_value(inner: &mut Inner, object: &Value) {
    if let Ok(crd) = serde_json::from_value(object.clone()) {
        for info in ResourceInfo::from_crd(&crd) {
            inner.registry.insert(info.key.clone(), info);
        }
    }
}

fn splitmix64(seed: u64) -> u64 {
    let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A deterministic, UUID-shaped uid derived from the creating resourceVersion.
fn uid_for(resource_version: u64) -> String {
    let bits = splitmix64(resource_version);
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        bits >> 32,
        (bits >> 16) & 0xffff,
        bits & 0xfff,
        (resource_version >> 48) & 0xfff,
        resource_version & 0xffff_ffff_ffff
    )
}

fn is_daemonsets(key: &ResourceKey) -> bool {
    key.group == "apps" && key.plural == "daemonsets"
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

fn metadata_mut(object: &mut Map<String, Value>) -> &mut Map<String, Value> {
    if !object.get("metadata").is_some_and(Value::is_object) {
        object.insert("metadata".into(), Value::Object(Map::new()));
    }
    match object.get_mut("metadata") {
        Some(Value::Object(meta)) => meta,
        _ => unreachable!("metadata was just made an object"),
    }
}

fn string_field(map: &Map<String, Value>, field: &str) -> Option<String> {
    map.get(field)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

/// Fields the server owns: a main-resource update cannot change them.
fn preserve_server_fields(old: &Map<String, Value>, next: &mut Map<String, Value>) {
    const SERVER_FIELDS: [&str; 6] = [
        "uid",
        "creationTimestamp",
        "generation",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "namespace",
    ];
    let old_meta = old.get("metadata").and_then(Value::as_object);
    let meta = metadata_mut(next);
    for field in SERVER_FIELDS {
        match old_meta.and_then(|m| m.get(field)) {
            Some(value) => meta.insert(field.into(), value.clone()),
            None => meta.remove(field),
        };
    }
}

/// Whether anything but `metadata` and `status` differs (`apiVersion`/`kind` are fixed).
fn spec_changed(old: &Map<String, Value>, next: &Map<String, Value>) -> bool {
    const IGNORED: [&str; 4] = ["metadata", "status", "apiVersion", "kind"];
    let relevant = |map: &Map<String, Value>| -> Vec<(String, Value)> {
        map.iter()
            .filter(|(k, _)| !IGNORED.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    };
    let mut a = relevant(old);
    let mut b = relevant(next);
    a.sort_by(|x, y| x.0.cmp(&y.0));
    b.sort_by(|x, y| x.0.cmp(&y.0));
    a != b
}

fn stored_versions(crd: &Map<String, Value>) -> Vec<Value> {
    crd.get("spec")
        .and_then(|spec| spec.get("versions"))
        .and_then(Value::as_array)
        .map(|versions| {
            versions
                .iter()
                .filter(|v| v["storage"].as_bool() == Some(true))
                .map(|v| v["name"].clone())
                .collect()
        })
        .unwrap_or_default()
}

/// What Kubernetes' create strategies do to `status`: a DaemonSet starts with an empty status,
/// a pod as `Pending`, a custom resource with a status subresource without status; nodes and
/// namespaces keep what the creator sent (the kubelet registers its node with a status).
fn reset_status_on_create(
    key: &ResourceKey,
    info: Option<&ResourceInfo>,
    object: &mut Map<String, Value>,
    now: Timestamp,
) {
    match (key.group.as_str(), key.plural.as_str()) {
        ("", "pods") => {
            object.insert("status".into(), json!({"phase": "Pending"}));
        }
        ("apps", "daemonsets") => {
            object.insert(
                "status".into(),
                json!({
                    "currentNumberScheduled": 0,
                    "desiredNumberScheduled": 0,
                    "numberMisscheduled": 0,
                    "numberReady": 0,
                }),
            );
        }
        ("", "nodes" | "namespaces") => {}
        ("apiextensions.k8s.io", "customresourcedefinitions") => {
            // The apiextensions controllers accept the names and establish the CRD at once
            // (`staging/src/k8s.io/apiextensions-apiserver/pkg/controller/establish`), so
            // clients waiting for `Established` proceed.
            let names = object
                .get("spec")
                .and_then(|spec| spec.get("names"))
                .cloned()
                .unwrap_or_else(|| json!({}));
            let condition = |kind: &str, reason: &str| json!({"type": kind, "status": "True", "reason": reason, "message": "", "lastTransitionTime": crate::clock::format_time(now)});
            object.insert(
                "status".into(),
                json!({
                    "acceptedNames": names,
                    "conditions": [condition("NamesAccepted", "NoConflicts"), condition("Established", "InitialNamesAccepted")],
                    "storedVersions": stored_versions(object),
                }),
            );
        }
        _ if info.is_some_and(|info| info.status_subresource) => {
            object.remove("status");
        }
        _ => {}
    }
}

fn is_terminating(object: &Value) -> bool {
    !object["metadata"]["deletionTimestamp"].is_null()
}

fn finalizers_empty(object: &Value) -> bool {
    object["metadata"]["finalizers"]
        .as_array()
        .is_none_or(Vec::is_empty)
}

/// The grace period of a delete: only pods bound to a node are deleted gracefully.
fn graceful_period(key: &ResourceKey, object: &Value, options: &DeleteOptions) -> i64 {
    let is_pod = key.group.is_empty() && key.plural == "pods";
    let bound = object["spec"]["nodeName"]
        .as_str()
        .is_some_and(|n| !n.is_empty());
    // `pkg/registry/core/pod/strategy.go` CheckGracefulDelete: unscheduled pods and pods
    // that already finished go at once.
    let finished = matches!(
        object["status"]["phase"].as_str(),
        Some("Failed" | "Succeeded")
    );
    if !is_pod || !bound || finished {
        return 0;
    }
    // A pod that never ran (still Pending without containers started) is removed at once
    // only when asked with grace 0; otherwise Kubernetes waits for the kubelet.
    options
        .grace_period_seconds
        .or_else(|| object["spec"]["terminationGracePeriodSeconds"].as_i64())
        .unwrap_or(30)
        .max(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::{DaemonSet, DaemonSetSpec, DaemonSetStatus};
    use k8s_openapi::api::core::v1::{Pod, PodSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn store() -> Store {
        Store::new(SimClock::new())
    }

    fn daemonset(name: &str) -> DaemonSet {
        DaemonSet {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                ..Default::default()
            },
            spec: Some(DaemonSetSpec {
                min_ready_seconds: Some(0),
                ..Default::default()
            }),
            status: None,
        }
    }

    fn rv<K: kube::Resource>(obj: &K) -> u64 {
        obj.meta()
            .resource_version
            .as_deref()
            .and_then(|rv| rv.parse().ok())
            .unwrap()
    }

    fn pod(name: &str, node: Option<&str>) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: node.map(Into::into),
                ..Default::default()
            }),
            status: None,
        }
    }

    #[test]
    fn create_sets_server_fields() {
        let store = store();
        let created = store.create(&daemonset("a")).unwrap();
        let meta = &created.metadata;
        assert_eq!(meta.generation, Some(1));
        assert!(meta.uid.as_deref().is_some_and(|u| u.len() == 36));
        assert_eq!(
            meta.creation_timestamp.as_ref().map(|t| t.0.as_second()),
            Some(crate::clock::DEFAULT_EPOCH_SECONDS)
        );
        assert_eq!(rv(&created), 1);
        let again = store.create(&daemonset("a")).unwrap_err();
        assert_eq!(again.code(), 409);
        assert_eq!(again.reason(), "AlreadyExists");
        assert_eq!(store.get::<DaemonSet>(Some("default"), "a"), Some(created));
    }

    #[test]
    fn generate_name_gives_distinct_deterministic_names() {
        let make = || {
            let store = store();
            let mut p = pod("", None);
            p.metadata.name = None;
            p.metadata.generate_name = Some("agent-".into());
            (0..20)
                .map(|_| store.create(&p).unwrap().metadata.name.unwrap())
                .collect::<Vec<_>>()
        };
        let names = make();
        let unique: std::collections::BTreeSet<_> = names.iter().collect();
        assert_eq!(unique.len(), 20);
        assert!(
            names
                .iter()
                .all(|n| n.starts_with("agent-") && n.len() == 11)
        );
        assert_eq!(names, make());
    }

    #[test]
    fn namespaced_kind_requires_namespace() {
        let store = store();
        let mut ds = daemonset("a");
        ds.metadata.namespace = None;
        assert_eq!(store.create(&ds).unwrap_err().code(), 422);
    }

    #[test]
    fn generation_moves_only_on_spec_changes() {
        let store = store();
        let mut ds = store.create(&daemonset("a")).unwrap();
        ds.metadata.labels = Some([("x".to_owned(), "y".to_owned())].into());
        let ds = store.update(&ds).unwrap();
        assert_eq!(ds.metadata.generation, Some(1), "metadata-only write");
        let mut with_status = ds.clone();
        with_status.status = Some(DaemonSetStatus {
            number_ready: 3,
            ..Default::default()
        });
        let ds = store.update_status(&with_status).unwrap();
        assert_eq!(ds.metadata.generation, Some(1), "status write");
        assert_eq!(ds.status.as_ref().map(|s| s.number_ready), Some(3));
        let mut changed = ds.clone();
        changed.spec.as_mut().unwrap().min_ready_seconds = Some(10);
        let ds = store.update(&changed).unwrap();
        assert_eq!(ds.metadata.generation, Some(2), "spec write");
    }

    #[test]
    fn status_subresource_isolation() {
        let store = store();
        let ds = store.create(&daemonset("a")).unwrap();
        let mut main = ds.clone();
        main.status = Some(DaemonSetStatus {
            number_ready: 7,
            ..Default::default()
        });
        let after_main = store.update(&main).unwrap();
        assert_eq!(after_main.status, ds.status, "main resource ignores status");
        let mut status_write = after_main.clone();
        status_write.spec.as_mut().unwrap().min_ready_seconds = Some(99);
        status_write.metadata.labels = Some([("a".to_owned(), "b".to_owned())].into());
        status_write.status = Some(DaemonSetStatus {
            number_ready: 5,
            ..Default::default()
        });
        let after_status = store.update_status(&status_write).unwrap();
        assert_eq!(
            after_status.spec, ds.spec,
            "status subresource ignores spec"
        );
        assert_eq!(after_status.metadata.labels, None);
        assert_eq!(after_status.status.map(|s| s.number_ready), Some(5));
    }

    #[test]
    fn stale_resource_version_conflicts() {
        let store = store();
        let first = store.create(&daemonset("a")).unwrap();
        let mut one = first.clone();
        one.metadata.labels = Some([("a".to_owned(), "1".to_owned())].into());
        store.update(&one).unwrap();
        let mut stale = first.clone();
        stale.metadata.labels = Some([("a".to_owned(), "2".to_owned())].into());
        let err = store.update(&stale).unwrap_err();
        assert_eq!((err.code(), err.reason()), (409, "Conflict"));
        stale.metadata.resource_version = None;
        assert!(store.update(&stale).is_ok(), "no precondition, no conflict");
    }

    #[test]
    fn resource_version_is_one_increasing_counter() {
        let store = store();
        let a = store.create(&daemonset("a")).unwrap();
        let p = store.create(&pod("p", None)).unwrap();
        let mut a2 = a.clone();
        a2.spec.as_mut().unwrap().min_ready_seconds = Some(5);
        let a2 = store.update(&a2).unwrap();
        assert!(rv(&a) < rv(&p) && rv(&p) < rv(&a2));
        assert_eq!(store.resource_version(), rv(&a2));
        let unchanged = store.update(&a2).unwrap();
        assert_eq!(rv(&unchanged), rv(&a2), "a no-op write is skipped");
    }

    #[test]
    fn delete_semantics() {
        let store = store();
        store.create(&pod("unbound", None)).unwrap();
        store.delete::<Pod>(Some("default"), "unbound").unwrap();
        assert!(store.get::<Pod>(Some("default"), "unbound").is_none());

        store.create(&pod("bound", Some("node-1"))).unwrap();
        store.delete::<Pod>(Some("default"), "bound").unwrap();
        let terminating = store.get::<Pod>(Some("default"), "bound").unwrap();
        assert_eq!(terminating.metadata.deletion_grace_period_seconds, Some(30));
        assert_eq!(
            terminating
                .metadata
                .deletion_timestamp
                .map(|t| t.0.as_second()),
            Some(crate::clock::DEFAULT_EPOCH_SECONDS + 30)
        );
        store.remove_now::<Pod>(Some("default"), "bound").unwrap();
        assert!(store.get::<Pod>(Some("default"), "bound").is_none());

        let mut finalized = daemonset("f");
        finalized.metadata.finalizers = Some(vec!["x/y".into()]);
        store.create(&finalized).unwrap();
        store.delete::<DaemonSet>(Some("default"), "f").unwrap();
        let mut ds = store.get::<DaemonSet>(Some("default"), "f").unwrap();
        assert!(ds.metadata.deletion_timestamp.is_some());
        ds.metadata.finalizers = None;
        store.update(&ds).unwrap();
        assert!(
            store.get::<DaemonSet>(Some("default"), "f").is_none(),
            "removing the last finalizer deletes"
        );
        let err = store.delete::<DaemonSet>(Some("default"), "f").unwrap_err();
        assert_eq!(err.code(), 404);
    }

    #[tokio::test]
    async fn subscribers_see_every_change_in_order() {
        let store = store();
        let mut events = store.subscribe();
        store.create(&daemonset("a")).unwrap();
        store
            .modify::<DaemonSet>(Some("default"), "a", UpdateScope::Status, |ds| {
                ds.status.get_or_insert_with(Default::default).number_ready = 1;
            })
            .unwrap();
        store.delete::<DaemonSet>(Some("default"), "a").unwrap();
        let mut seen = Vec::new();
        for _ in 0..3 {
            let e = events.recv().await.unwrap();
            seen.push((e.kind, e.resource_version, e.name));
        }
        assert_eq!(
            seen,
            vec![
                (EventKind::Added, 1, "a".to_owned()),
                (EventKind::Modified, 2, "a".to_owned()),
                (EventKind::Deleted, 3, "a".to_owned()),
            ]
        );
    }

    #[test]
    fn watch_resume_and_gone() {
        let store = Store::with_limits(SimClock::new(), 3, 16);
        for name in ["a", "b", "c", "d", "e"] {
            store.create(&daemonset(name)).unwrap();
        }
        let key = ResourceKey::of::<DaemonSet>();
        let (replay, _) = store.watch_from(Some(&key), 3).unwrap();
        let names: Vec<_> = replay.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["d", "e"]);
        let (replay, _) = store.watch_from(Some(&key), 2).unwrap();
        assert_eq!(replay.len(), 3);
        let err = store.watch_from(Some(&key), 1).unwrap_err();
        assert_eq!((err.code(), err.reason()), (410, "Expired"));
        store.compact();
        assert_eq!(store.watch_from(None, 4).unwrap_err().code(), 410);
        assert!(store.watch_from(None, 5).unwrap().0.is_empty());
    }

    #[test]
    fn list_filters_by_namespace() {
        let store = store();
        store.create(&daemonset("a")).unwrap();
        let mut other = daemonset("b");
        other.metadata.namespace = Some("kube-system".into());
        store.create(&other).unwrap();
        assert_eq!(store.list::<DaemonSet>(None).len(), 2);
        let names: Vec<_> = store
            .list::<DaemonSet>(Some("kube-system"))
            .into_iter()
            .filter_map(|d| d.metadata.name)
            .collect();
        assert_eq!(names, ["b"]);
        assert!(store.list::<DaemonSet>(Some("defaul")).is_empty());
    }

    #[test]
    fn creating_a_crd_registers_its_resource() {
        use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
        let store = store();
        let crd: CustomResourceDefinition = serde_json::from_value(json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {
                "group": "example.com",
                "scope": "Namespaced",
                "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wd"]},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "subresources": {"status": {}},
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]
            }
        }))
        .unwrap();
        let created = store.create(&crd).unwrap();
        let conditions = created.status.unwrap().conditions.unwrap();
        assert!(
            conditions
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
        );
        let info = store
            .resource_info(&ResourceKey::new("example.com", "v1", "widgets"))
            .unwrap();
        assert!(info.namespaced && info.status_subresource && !info.strategic_merge);
        assert_eq!(info.short_names, ["wd"]);
    }
}
