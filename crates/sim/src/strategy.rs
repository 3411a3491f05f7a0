//! Per-kind rules of writes: what Kubernetes' registry strategies
//! (`RESTCreateStrategy`, `RESTUpdateStrategy`, `RESTGracefulDeleteStrategy` in
//! `staging/src/k8s.io/apiserver/pkg/registry/rest/`) decide for each kind, applied by the
//! [`Store`](crate::Store) on every create, update and delete.
//!
//! - `PrepareForCreate`: the status a new object starts with (`pkg/registry/core/pod/strategy.go`,
//!   `pkg/registry/apps/daemonset/strategy.go`, `pkg/registry/core/namespace/strategy.go`, the
//!   CRD strategy), generation 1, the defaults
//!   (the defaulting hook, [`crate::defaults`]) and the DaemonSet template generation.
//! - `PrepareForUpdate`: the server-owned metadata and, for kinds with a status subresource, the
//!   status are kept; defaults; the template generation; the generation increases iff something
//!   outside `metadata` and `status` changed.
//! - The status subresource's update: nothing but `status` (and the writer's field ownership).
//! - `CheckGracefulDelete`: only pods bound to a node and not finished are deleted gracefully.
//! - A custom resource is pruned of the fields its version's schema does not declare, and
//!   defaulted by it ([`crate::structural`]), before the rules above, as the API server's
//!   decoder does: a status write prunes and defaults the whole object it sends, then keeps its
//!   status.
//! - A Secret's `stringData` is folded into `data` on every write, as the conversion of the
//!   write path does (`Convert_v1_Secret_To_core_Secret` in `pkg/apis/core/v1/conversion.go`):
//!   a reader never sees `stringData`.
//!
//! Invariant: the rules depend on the resource's key and registration only, never on who
//! writes; the store's own bookkeeping (name, uid, resourceVersion, timestamps) is not here.

#![expect(
    clippy::indexing_slicing,
    reason = "only serde_json::Value is indexed here: a missing key or index reads as Null, and \
              writes by index go to objects this module built"
)]

use k8s_openapi::jiff::Timestamp;
use serde_json::{Map, Value, json};

use crate::defaults::apply_defaults;
use crate::object::metadata_mut;
use crate::registry::{BuiltinKind, ResourceInfo, ResourceKey};
use crate::structural::StructuralSchema;

/// The annotation carrying `spec.templateGeneration` in apps/v1.
pub const TEMPLATE_GENERATION_ANNOTATION: &str = "deprecated.daemonset.template.generation";

/// Moves a Secret's `stringData` into `data`, base64-encoded, over any value `data` had for
/// the same key (the API server's conversion); a value that is not a string is left out.
fn fold_string_data(secret: &mut Map<String, Value>) {
    let Some(Value::Object(strings)) = secret.remove("stringData") else {
        return;
    };
    let data = secret
        .entry("data")
        .or_insert_with(|| Value::Object(Map::new()));
    if !data.is_object() {
        *data = Value::Object(Map::new());
    }
    if let Value::Object(data) = data {
        for (key, value) in strings {
            if let Value::String(text) = value
                && let Ok(encoded) =
                    serde_json::to_value(k8s_openapi::ByteString(text.into_bytes()))
            {
                data.insert(key, encoded);
            }
        }
    }
}

/// Metadata the server owns: a main-resource update cannot change it.
const SERVER_OWNED_METADATA: [&str; 6] = [
    "uid",
    "creationTimestamp",
    "generation",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "namespace",
];

/// The write rules of one resource.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Strategy<'a> {
    /// `None`: the generic rules (custom resources and the other built-in kinds).
    kind: Option<BuiltinKind>,
    status_subresource: bool,
    /// A custom resource version's schema: what is written is pruned and defaulted by it.
    schema: Option<&'a StructuralSchema>,
}

impl<'a> Strategy<'a> {
    /// The rules of `key`; `info` is its registration (`None`: an unregistered key, written
    /// with the generic rules and no status subresource).
    pub fn for_resource(key: &ResourceKey, info: Option<&'a ResourceInfo>) -> Self {
        Self {
            kind: key.builtin_kind(),
            status_subresource: info.is_some_and(|info| info.status_subresource),
            schema: info.and_then(|info| info.schema.as_deref()),
        }
    }

    /// Prunes and defaults a written custom resource by its schema (nothing without one).
    fn apply_schema(&self, object: &mut Map<String, Value>) {
        if let Some(schema) = self.schema {
            let mut value = Value::Object(std::mem::take(object));
            // What is pruned is reported to the writer by the API layer (`fieldValidation`);
            // the store drops it silently.
            schema.apply(&mut value);
            if let Value::Object(pruned) = value {
                *object = pruned;
            }
        }
    }

    /// `PrepareForCreate` plus defaulting: sets the starting status and generation 1, applies
    /// the defaults of `key` and, for DaemonSets, the template generation.
    pub fn prepare_for_create(
        &self,
        key: &ResourceKey,
        object: &mut Map<String, Value>,
        now: Timestamp,
    ) {
        self.apply_schema(object);
        metadata_mut(object).insert("generation".into(), json!(1));
        self.reset_status(object, now);
        if self.kind == Some(BuiltinKind::Secret) {
            fold_string_data(object);
        }
        apply_defaults(key, object);
        if self.kind == Some(BuiltinKind::DaemonSet) {
            set_template_generation(None, object);
        }
    }

    /// `PrepareForUpdate` of the main resource: `next` keeps `old`'s server-owned metadata and,
    /// with a status subresource, `old`'s status; gets the defaults, the template generation,
    /// and a generation one above `old`'s when its spec changed.
    pub fn prepare_for_update(
        &self,
        key: &ResourceKey,
        old: &Map<String, Value>,
        next: &mut Map<String, Value>,
    ) {
        self.apply_schema(next);
        if self.status_subresource {
            match old.get("status") {
                Some(status) => next.insert("status".into(), status.clone()),
                None => next.remove("status"),
            };
        }
        preserve_server_fields(old, next);
        if self.kind == Some(BuiltinKind::Secret) {
            fold_string_data(next);
        }
        apply_defaults(key, next);
        if self.kind == Some(BuiltinKind::DaemonSet) {
            set_template_generation(Some(old), next);
        }
        if spec_changed(old, next) {
            let generation = old
                .get("metadata")
                .and_then(|m| m.get("generation"))
                .and_then(Value::as_i64)
                .unwrap_or(0);
            metadata_mut(next).insert("generation".into(), json!(generation + 1));
        }
    }

    /// The status subresource's update: `old` with `incoming`'s status (none if it has none)
    /// and the field ownership the writer recorded.
    pub fn prepare_for_status_update(
        &self,
        old: &Map<String, Value>,
        mut incoming: Map<String, Value>,
    ) -> Map<String, Value> {
        self.apply_schema(&mut incoming);
        let mut next = old.clone();
        match incoming.remove("status") {
            Some(status) => next.insert("status".into(), status),
            None => next.remove("status"),
        };
        if let Some(managed) = incoming
            .get("metadata")
            .and_then(|m| m.get("managedFields"))
        {
            metadata_mut(&mut next).insert("managedFields".into(), managed.clone());
        }
        next
    }

    /// `CheckGracefulDelete`: the grace period of a delete of `object` asked with
    /// `requested` seconds (`gracePeriodSeconds`), 0 for an immediate removal.
    pub fn graceful_deletion_seconds(&self, object: &Value, requested: Option<i64>) -> i64 {
        let bound = object["spec"]["nodeName"]
            .as_str()
            .is_some_and(|n| !n.is_empty());
        // `pkg/registry/core/pod/strategy.go` CheckGracefulDelete: unscheduled pods and pods
        // that already finished go at once.
        let finished = matches!(
            object["status"]["phase"].as_str(),
            Some("Failed" | "Succeeded")
        );
        if self.kind != Some(BuiltinKind::Pod) || !bound || finished {
            return 0;
        }
        // A pod that never ran (still Pending without containers started) is removed at once
        // only when asked with grace 0; otherwise Kubernetes waits for the kubelet.
        requested
            .or_else(|| object["spec"]["terminationGracePeriodSeconds"].as_i64())
            .unwrap_or(30)
            .max(0)
    }

    /// What the create strategies do to `status`: a DaemonSet starts with an empty status, a
    /// pod as `Pending`, a namespace `Active`, a CRD accepted and established, a custom resource
    /// with a status subresource without status; nodes keep what the creator sent.
    fn reset_status(&self, object: &mut Map<String, Value>, now: Timestamp) {
        match self.kind {
            Some(BuiltinKind::Pod) => {
                object.insert("status".into(), json!({"phase": "Pending"}));
            }
            Some(BuiltinKind::DaemonSet) => {
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
            Some(BuiltinKind::Namespace) => {
                object.insert("status".into(), json!({"phase": "Active"}));
            }
            Some(BuiltinKind::CustomResourceDefinition) => {
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
            // Nodes keep the status their creator sent (the kubelet registers its node with one).
            Some(_) => {}
            None if self.status_subresource => {
                object.remove("status");
            }
            None => {}
        }
    }
}

/// Sets `deprecated.daemonset.template.generation`: 1 on create (unless the client set a
/// positive value); on update, the old value, plus one when `spec.template` changed.
pub fn set_template_generation(old: Option<&Map<String, Value>>, next: &mut Map<String, Value>) {
    let read = |object: &Map<String, Value>| -> Option<i64> {
        object
            .get("metadata")?
            .get("annotations")?
            .get(TEMPLATE_GENERATION_ANNOTATION)?
            .as_str()?
            .parse()
            .ok()
    };
    let generation = match old {
        None => read(next).filter(|g| *g >= 1).unwrap_or(1),
        Some(old) => {
            let previous = read(old).unwrap_or(1);
            let template =
                |o: &Map<String, Value>| o.get("spec").and_then(|s| s.get("template")).cloned();
            if template(old) == template(next) {
                previous
            } else {
                previous + 1
            }
        }
    };
    let meta = metadata_mut(next);
    let annotations = meta
        .entry("annotations")
        .or_insert_with(|| Value::Object(Map::new()));
    if !annotations.is_object() {
        *annotations = Value::Object(Map::new());
    }
    if let Value::Object(annotations) = annotations {
        annotations.insert(
            TEMPLATE_GENERATION_ANNOTATION.to_owned(),
            Value::String(generation.to_string()),
        );
    }
}

/// Keeps `old`'s server-owned metadata in `next` (and drops what `old` did not have).
fn preserve_server_fields(old: &Map<String, Value>, next: &mut Map<String, Value>) {
    let old_meta = old.get("metadata").and_then(Value::as_object);
    let meta = metadata_mut(next);
    for field in SERVER_OWNED_METADATA {
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

/// The versions a CRD stores, as its `status.storedVersions` lists them.
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

#[cfg(test)]
mod tests {
    use super::*;

    fn ds() -> Map<String, Value> {
        serde_json::from_value(
            json!({"metadata": {"name": "a"}, "spec": {"template": {"spec": {
            "containers": [{"name": "a", "image": "repo/a:1.0"}]}}}}),
        )
        .unwrap()
    }

    #[test]
    fn a_secrets_string_data_is_stored_in_data() {
        let strategy = Strategy {
            kind: Some(BuiltinKind::Secret),
            status_subresource: false,
            schema: None,
        };
        let key = ResourceKey::new("", "v1", "secrets");
        let mut secret = json!({"metadata": {"name": "s"}, "data": {"a": "eA==", "b": "eA=="},
            "stringData": {"b": "token\n"}})
        .as_object()
        .cloned()
        .unwrap_or_default();
        strategy.prepare_for_create(&key, &mut secret, Timestamp::UNIX_EPOCH);
        assert_eq!(secret.get("stringData"), None);
        assert_eq!(secret["data"], json!({"a": "eA==", "b": "dG9rZW4K"}));
    }

    #[test]
    fn template_generation_counts_template_changes() {
        let mut first = ds();
        set_template_generation(None, &mut first);
        assert_eq!(
            first["metadata"]["annotations"][TEMPLATE_GENERATION_ANNOTATION],
            "1"
        );
        let mut same = first.clone();
        same["spec"]["minReadySeconds"] = json!(5);
        set_template_generation(Some(&first), &mut same);
        assert_eq!(
            same["metadata"]["annotations"][TEMPLATE_GENERATION_ANNOTATION],
            "1"
        );
        let mut changed = same.clone();
        changed["spec"]["template"]["spec"]["containers"][0]["image"] = json!("repo/a:2.0");
        set_template_generation(Some(&same), &mut changed);
        assert_eq!(
            changed["metadata"]["annotations"][TEMPLATE_GENERATION_ANNOTATION],
            "2"
        );
    }

    #[test]
    fn only_bound_unfinished_pods_are_deleted_gracefully() {
        let pods = Strategy::for_resource(&ResourceKey::new("", "v1", "pods"), None);
        let bound = json!({"spec": {"nodeName": "node-1", "terminationGracePeriodSeconds": 7}});
        assert_eq!(pods.graceful_deletion_seconds(&bound, None), 7);
        assert_eq!(pods.graceful_deletion_seconds(&bound, Some(2)), 2);
        let finished = json!({"spec": {"nodeName": "node-1"}, "status": {"phase": "Failed"}});
        assert_eq!(pods.graceful_deletion_seconds(&finished, None), 0);
        assert_eq!(pods.graceful_deletion_seconds(&json!({}), None), 0);
        let daemonsets =
            Strategy::for_resource(&ResourceKey::new("apps", "v1", "daemonsets"), None);
        assert_eq!(daemonsets.graceful_deletion_seconds(&bound, None), 0);
    }
}
