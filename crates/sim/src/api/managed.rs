//! Field ownership (`metadata.managedFields`) for server-side apply, a documented subset of
//! `staging/src/k8s.io/apimachinery/pkg/util/managedfields/` and
//! `sigs.k8s.io/structured-merge-diff`.
//!
//! Fields are leaf paths through JSON objects; a list is one leaf (Kubernetes tracks keyed list
//! elements individually). Each write records its manager:
//! - an apply by M owns exactly the applied leaves; applying a value different from the live
//!   one on a leaf another manager owns is a conflict (409) unless `force`, which takes the
//!   leaf over; leaves M applied before and no longer applies, and nobody else owns, are
//!   removed from the object;
//! - any other write by M (operation `Update`) takes over the leaves it changed.

#![expect(
    clippy::indexing_slicing,
    reason = "only serde_json::Value is indexed here: a missing key or index reads as Null, and \
              writes by index go to objects this module built"
)]

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use crate::store::{StoreError, UpdateScope};

type FieldPath = Vec<String>;
type FieldSet = BTreeSet<FieldPath>;

const TRACKED_METADATA: [&str; 4] = ["labels", "annotations", "finalizers", "ownerReferences"];

/// Who writes, and how.
#[derive(Clone, Copy, Debug)]
pub struct Writer<'a> {
    /// The field manager.
    pub manager: &'a str,
    /// Server-side apply (else an `Update` operation).
    pub apply: bool,
    /// `force=true` on an apply.
    pub force: bool,
    /// Which part of the object the write may change.
    pub scope: UpdateScope,
    /// Whether the kind has a status subresource (then main writes do not own status).
    pub status_subresource: bool,
    /// `apiVersion` recorded in the entry.
    pub api_version: &'a str,
    /// `time` recorded in the entry.
    pub time: &'a str,
}

impl Writer<'_> {
    fn subresource(&self) -> Option<&'static str> {
        match self.scope {
            UpdateScope::Status => Some("status"),
            UpdateScope::Main => None,
        }
    }

    fn operation(&self) -> &'static str {
        if self.apply { "Apply" } else { "Update" }
    }
}

struct Entry {
    raw: Value,
    fields: FieldSet,
}

impl Entry {
    fn is(&self, manager: &str, operation: &str, subresource: Option<&str>) -> bool {
        self.raw["manager"] == manager
            && self.raw["operation"] == operation
            && self.raw.get("subresource").and_then(Value::as_str) == subresource
    }
}

fn leaves(value: &Value, prefix: &mut FieldPath, out: &mut FieldSet) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            for (key, child) in map {
                prefix.push(key.clone());
                leaves(child, prefix, out);
                prefix.pop();
            }
        }
        _ => {
            out.insert(prefix.clone());
        }
    }
}

/// The leaves of `object` a write in `scope` can own.
fn owned_leaves(object: &Value, writer: &Writer<'_>) -> FieldSet {
    let mut out = FieldSet::new();
    let Some(map) = object.as_object() else {
        return out;
    };
    for (key, value) in map {
        let tracked = match (writer.scope, key.as_str()) {
            (_, "apiVersion" | "kind") => false,
            (UpdateScope::Status, field) => field == "status",
            (UpdateScope::Main, "status") => !writer.status_subresource,
            (UpdateScope::Main, "metadata") => {
                if let Some(meta) = value.as_object() {
                    for field in TRACKED_METADATA {
                        if let Some(child) = meta.get(field) {
                            let mut prefix = vec!["metadata".to_owned(), field.to_owned()];
                            leaves(child, &mut prefix, &mut out);
                        }
                    }
                }
                false
            }
            (UpdateScope::Main, _) => true,
        };
        if tracked {
            let mut prefix = vec![key.clone()];
            leaves(value, &mut prefix, &mut out);
        }
    }
    out
}

fn value_at<'v>(value: &'v Value, path: &[String]) -> Option<&'v Value> {
    path.iter().try_fold(value, |v, segment| v.get(segment))
}

fn remove_at(value: &mut Value, path: &[String]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut cursor = value;
    for segment in parents {
        match cursor.get_mut(segment) {
            Some(next) => cursor = next,
            None => return,
        }
    }
    if let Some(map) = cursor.as_object_mut() {
        map.remove(last);
    }
}

fn encode(fields: &FieldSet) -> Value {
    let mut root = Map::new();
    for path in fields {
        let mut node = &mut root;
        for segment in path {
            let child = node
                .entry(format!("f:{segment}"))
                .or_insert_with(|| Value::Object(Map::new()));
            if !child.is_object() {
                *child = Value::Object(Map::new());
            }
            node = match child {
                Value::Object(map) => map,
                _ => unreachable!("just made an object"),
            };
        }
    }
    Value::Object(root)
}

fn decode(fields: &Value, prefix: &mut FieldPath, out: &mut FieldSet) {
    match fields.as_object() {
        Some(map) if !map.is_empty() => {
            for (key, child) in map {
                if key == "." {
                    out.insert(prefix.clone());
                    continue;
                }
                prefix.push(key.strip_prefix("f:").unwrap_or(key).to_owned());
                decode(child, prefix, out);
                prefix.pop();
            }
        }
        _ if !prefix.is_empty() => {
            out.insert(prefix.clone());
        }
        _ => {}
    }
}

fn entries_of(object: &Value) -> Vec<Entry> {
    object["metadata"]["managedFields"]
        .as_array()
        .map(|entries| {
            entries
                .iter()
                .map(|raw| {
                    let mut fields = FieldSet::new();
                    decode(&raw["fieldsV1"], &mut Vec::new(), &mut fields);
                    Entry {
                        raw: raw.clone(),
                        fields,
                    }
                })
                .collect()
        })
        .unwrap_or_default()
}

fn display(path: &[String]) -> String {
    path.iter().map(|s| format!(".{s}")).collect()
}

/// Records `writer`'s write of `next` (computed from `current`; `applied` is the apply body)
/// in `next`'s `metadata.managedFields`. Fails with a 409 on an apply conflict.
pub fn record(
    current: &Value,
    next: &mut Value,
    applied: Option<&Value>,
    writer: &Writer<'_>,
) -> Result<(), StoreError> {
    let mut entries = entries_of(current);
    let subresource = writer.subresource();
    let operation = writer.operation();
    let (mine, dropped) = match applied.filter(|_| writer.apply) {
        Some(applied) => {
            let applied_set = owned_leaves(applied, writer);
            let mut conflicts = Vec::new();
            for entry in entries
                .iter_mut()
                .filter(|e| !e.is(writer.manager, operation, subresource))
            {
                let contested: Vec<FieldPath> = entry
                    .fields
                    .intersection(&applied_set)
                    .filter(|path| value_at(current, path) != value_at(applied, path))
                    .cloned()
                    .collect();
                for path in contested {
                    if writer.force {
                        entry.fields.remove(&path);
                    } else {
                        let manager = entry.raw["manager"].as_str().unwrap_or("unknown");
                        conflicts.push(format!("conflict with \"{manager}\": {}", display(&path)));
                    }
                }
            }
            if !conflicts.is_empty() {
                return Err(StoreError::ApplyConflict {
                    message: format!(
                        "Apply failed with {} conflict{}: {}",
                        conflicts.len(),
                        if conflicts.len() == 1 { "" } else { "s" },
                        conflicts.join(", ")
                    ),
                });
            }
            let previous: FieldSet = entries
                .iter()
                .find(|e| e.is(writer.manager, operation, subresource))
                .map(|e| e.fields.clone())
                .unwrap_or_default();
            let others: FieldSet = entries
                .iter()
                .filter(|e| !e.is(writer.manager, operation, subresource))
                .flat_map(|e| e.fields.iter().cloned())
                .collect();
            let dropped: Vec<FieldPath> = previous
                .difference(&applied_set)
                .filter(|path| !others.contains(*path))
                .cloned()
                .collect();
            (applied_set, dropped)
        }
        None => {
            let before = owned_leaves(current, writer);
            let after = owned_leaves(next, writer);
            let changed: FieldSet = before
                .union(&after)
                .filter(|path| value_at(current, path) != value_at(next, path))
                .cloned()
                .collect();
            for entry in &mut entries {
                entry.fields.retain(|path| !changed.contains(path));
            }
            let mut mine = entries
                .iter()
                .find(|e| e.is(writer.manager, operation, subresource))
                .map(|e| e.fields.clone())
                .unwrap_or_default();
            mine.extend(changed.into_iter().filter(|path| after.contains(path)));
            (mine, Vec::new())
        }
    };
    for path in &dropped {
        remove_at(next, path);
    }
    entries.retain(|e| !e.is(writer.manager, operation, subresource));
    // Leaves that no longer exist belong to nobody.
    for entry in &mut entries {
        entry.fields.retain(|path| value_at(next, path).is_some());
    }
    let mut raw_entries: Vec<Value> = entries
        .into_iter()
        .filter(|e| !e.fields.is_empty())
        .map(|e| {
            let mut raw = e.raw;
            raw["fieldsV1"] = encode(&e.fields);
            raw
        })
        .collect();
    if !mine.is_empty() {
        let mut entry = json!({
            "manager": writer.manager,
            "operation": operation,
            "apiVersion": writer.api_version,
            "time": writer.time,
            "fieldsType": "FieldsV1",
            "fieldsV1": encode(&mine),
        });
        if let Some(sub) = subresource {
            entry["subresource"] = json!(sub);
        }
        raw_entries.push(entry);
    }
    if let Some(meta) = next.get_mut("metadata").and_then(Value::as_object_mut) {
        if raw_entries.is_empty() {
            meta.remove("managedFields");
        } else {
            meta.insert("managedFields".into(), Value::Array(raw_entries));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn writer(manager: &str, apply: bool, force: bool) -> Writer<'_> {
        Writer {
            manager,
            apply,
            force,
            scope: UpdateScope::Main,
            status_subresource: false,
            api_version: "coordination.k8s.io/v1",
            time: "2026-01-01T00:00:00Z",
        }
    }

    fn apply(current: &Value, body: &Value, w: &Writer<'_>) -> Result<Value, StoreError> {
        let mut next = current.clone();
        json_patch::merge(&mut next, body);
        record(current, &mut next, Some(body), w)?;
        Ok(next)
    }

    #[test]
    fn apply_conflicts_unless_same_value_or_forced() {
        let empty = json!({"metadata": {"name": "l"}});
        let a = json!({"spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}});
        let held = apply(&empty, &a, &writer("mgr-a", true, false)).unwrap();
        let fields = &held["metadata"]["managedFields"][0]["fieldsV1"];
        assert_eq!(
            fields,
            &json!({"f:spec": {"f:holderIdentity": {}, "f:leaseDurationSeconds": {}}})
        );

        let b = json!({"spec": {"holderIdentity": "b", "leaseDurationSeconds": 15}});
        let err = apply(&held, &b, &writer("mgr-b", true, false)).unwrap_err();
        assert_eq!(err.code(), 409);
        assert!(
            err.to_string()
                .contains("conflict with \"mgr-a\": .spec.holderIdentity"),
            "{err}"
        );
        assert!(
            !err.to_string().contains("leaseDurationSeconds"),
            "same value is no conflict"
        );

        let forced = apply(&held, &b, &writer("mgr-b", true, true)).unwrap();
        assert_eq!(forced["spec"]["holderIdentity"], "b");
        let entries = forced["metadata"]["managedFields"].as_array().unwrap();
        assert_eq!(
            entries[0]["fieldsV1"],
            json!({"f:spec": {"f:leaseDurationSeconds": {}}}),
            "a keeps the shared field"
        );
        assert_eq!(entries[1]["manager"], "mgr-b");
    }

    #[test]
    fn update_takes_over_changed_fields_and_apply_drops_unapplied_fields() {
        let empty = json!({"metadata": {"name": "l"}});
        let a = json!({"spec": {"holderIdentity": "a", "renewTime": "t1"}});
        let held = apply(&empty, &a, &writer("mgr-a", true, false)).unwrap();
        let mut released = held.clone();
        released["spec"]["holderIdentity"] = Value::Null;
        released["spec"]
            .as_object_mut()
            .unwrap()
            .remove("holderIdentity");
        record(&held, &mut released, None, &writer("mgr-a", false, false)).unwrap();
        let b = json!({"spec": {"holderIdentity": "b"}});
        let taken = apply(&released, &b, &writer("mgr-b", true, false)).unwrap();
        assert_eq!(
            taken["spec"]["holderIdentity"], "b",
            "a released field is free"
        );

        let only_renew = json!({"spec": {"renewTime": "t2"}});
        let narrowed = apply(&taken, &only_renew, &writer("mgr-a", true, false)).unwrap();
        assert_eq!(narrowed["spec"]["renewTime"], "t2");
        assert_eq!(narrowed["spec"]["holderIdentity"], "b", "owned by b, kept");
        let dropped = apply(
            &narrowed,
            &json!({"spec": {}}),
            &writer("mgr-a", true, false),
        )
        .unwrap();
        assert!(
            dropped["spec"].get("renewTime").is_none(),
            "no longer applied, no other owner"
        );
    }
}
