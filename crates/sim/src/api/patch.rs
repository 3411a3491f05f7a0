//! The four patch types of `PATCH`: JSON Patch (RFC 6902), JSON merge patch (RFC 7386),
//! strategic merge patch and server-side apply.
//!
//! Strategic merge follows `staging/src/k8s.io/apimachinery/pkg/util/strategicpatch/patch.go`
//! for the lists whose Go types carry `patchStrategy:"merge"` (merge keys from the
//! `patchMergeKey` tags of `k8s.io/api`), the `$patch: delete|replace|merge` directives,
//! `$retainKeys`, `$deleteFromPrimitiveList/<field>` and `$setElementOrder/<field>` (accepted;
//! the order is not enforced). Lists without a merge strategy (for example `tolerations`,
//! `args`) are replaced, as in Kubernetes.

use serde_json::{Map, Value};

use crate::store::StoreError;

/// The patch type, from the request's `Content-Type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchType {
    /// `application/json-patch+json`.
    Json,
    /// `application/merge-patch+json`.
    Merge,
    /// `application/strategic-merge-patch+json`.
    StrategicMerge,
    /// `application/apply-patch+yaml` (server-side apply).
    Apply,
}

impl PatchType {
    /// The patch type of a `Content-Type` header value.
    pub fn from_content_type(content_type: &str) -> Option<Self> {
        let essence = content_type.split(';').next().unwrap_or("").trim();
        match essence {
            "application/json-patch+json" => Some(Self::Json),
            "application/merge-patch+json" => Some(Self::Merge),
            "application/strategic-merge-patch+json" => Some(Self::StrategicMerge),
            "application/apply-patch+yaml" | "application/apply-patch+json" => Some(Self::Apply),
            _ => None,
        }
    }
}

/// Applies an RFC 6902 JSON Patch; a failed `test` (or any failed operation) is 422 Invalid.
pub fn apply_json_patch(target: &mut Value, body: &[u8]) -> Result<(), StoreError> {
    let patch: json_patch::Patch =
        serde_json::from_slice(body).map_err(|e| StoreError::BadRequest {
            message: format!("invalid JSON Patch: {e}"),
        })?;
    json_patch::patch(target, &patch).map_err(|e| StoreError::Invalid {
        message: format!("the server rejected our request due to an error in our request: {e}"),
    })
}

/// Applies an RFC 7386 JSON merge patch.
pub fn apply_merge_patch(target: &mut Value, patch: &Value) {
    json_patch::merge(target, patch);
}

/// The merge key of a list field whose Go type has `patchStrategy:"merge"`, if any.
///
/// Keyed by field name, which is unambiguous for the kinds the simulator serves, except
/// `ports`: container ports merge on `containerPort`, other ports on `port`.
fn merge_key(field: &str, sample: Option<&Value>) -> Option<&'static str> {
    Some(match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "volumes"
        | "env"
        | "imagePullSecrets"
        | "resourceClaims" => "name",
        "volumeMounts" => "mountPath",
        "volumeDevices" => "devicePath",
        "hostAliases" => "ip",
        "conditions" => "type",
        "ownerReferences" => "uid",
        "topologySpreadConstraints" => "topologyKey",
        "ports" => {
            if sample.is_some_and(|s| s.get("containerPort").is_some()) {
                "containerPort"
            } else {
                "port"
            }
        }
        _ => return None,
    })
}

/// Lists of scalars with `patchStrategy:"merge"`: merged as sets.
fn is_merged_scalar_list(field: &str) -> bool {
    field == "finalizers"
}

/// Applies a strategic merge patch.
pub fn apply_strategic_merge(target: &mut Value, patch: &Value) -> Result<(), StoreError> {
    match (target, patch) {
        (Value::Object(target), Value::Object(patch)) => merge_map(target, patch),
        (target, patch) => {
            *target = patch.clone();
            Ok(())
        }
    }
}

fn merge_map(
    target: &mut Map<String, Value>,
    patch: &Map<String, Value>,
) -> Result<(), StoreError> {
    match patch.get("$patch").and_then(Value::as_str) {
        Some("replace") => {
            let mut replaced = patch.clone();
            replaced.remove("$patch");
            strip_directives(&mut replaced);
            *target = replaced;
            return Ok(());
        }
        Some("delete") => {
            target.clear();
            return Ok(());
        }
        Some("merge") | None => {}
        Some(other) => {
            return Err(StoreError::BadRequest {
                message: format!("unknown patch type: {other}"),
            });
        }
    }
    for (field, value) in patch {
        if field == "$patch" || field.starts_with("$setElementOrder/") || field == "$retainKeys" {
            continue;
        }
        if let Some(list_field) = field.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(Value::Array(items)), Some(remove)) =
                (target.get_mut(list_field), value.as_array())
            {
                items.retain(|item| !remove.contains(item));
            }
            continue;
        }
        if value.is_null() {
            target.remove(field);
            continue;
        }
        match (target.get_mut(field), value) {
            (Some(Value::Object(existing)), Value::Object(patch_map)) => {
                merge_map(existing, patch_map)?;
            }
            (Some(Value::Array(existing)), Value::Array(patch_list)) => {
                merge_list(field, existing, patch_list)?;
            }
            _ => {
                // A value taken whole (new, or of another type): Kubernetes drops the nulls in
                // it (`discardNullValuesFromPatch`, the API server merges with
                // `IgnoreUnmatchedNulls`), as a JSON merge patch does.
                let mut fresh = value.clone();
                discard_nulls(&mut fresh);
                strip_directives_value(&mut fresh);
                target.insert(field.clone(), fresh);
            }
        }
    }
    if let Some(keep) = patch.get("$retainKeys").and_then(Value::as_array) {
        let keep: Vec<&str> = keep.iter().filter_map(Value::as_str).collect();
        target.retain(|k, _| keep.contains(&k.as_str()));
    }
    Ok(())
}

fn merge_list(field: &str, target: &mut Vec<Value>, patch: &[Value]) -> Result<(), StoreError> {
    let replace_all = patch
        .iter()
        .any(|item| item.get("$patch").and_then(Value::as_str) == Some("replace"));
    if replace_all {
        *target = patch
            .iter()
            .filter(|item| item.get("$patch").is_none())
            .cloned()
            .collect();
        return Ok(());
    }
    if is_merged_scalar_list(field) {
        for item in patch {
            if !target.contains(item) {
                target.push(item.clone());
            }
        }
        return Ok(());
    }
    let Some(key) = merge_key(field, patch.first().or(target.first())) else {
        let mut fresh = patch.to_vec();
        fresh.iter_mut().for_each(strip_directives_value);
        *target = fresh;
        return Ok(());
    };
    for item in patch {
        let Some(item_map) = item.as_object() else {
            return Err(StoreError::BadRequest {
                message: format!("{field}: expected objects with merge key {key:?}"),
            });
        };
        let Some(id) = item_map.get(key) else {
            return Err(StoreError::BadRequest {
                message: format!("{field}: element has no merge key {key:?}"),
            });
        };
        let position = target.iter().position(|t| t.get(key) == Some(id));
        let delete = item_map.get("$patch").and_then(Value::as_str) == Some("delete");
        match (position, delete) {
            (Some(i), true) => {
                target.remove(i);
            }
            (None, true) => {}
            (Some(i), false) => {
                if let Some(Value::Object(existing)) = target.get_mut(i) {
                    merge_map(existing, item_map)?;
                }
            }
            (None, false) => {
                let mut fresh = item.clone();
                strip_directives_value(&mut fresh);
                target.push(fresh);
            }
        }
    }
    Ok(())
}

/// Removes every null map value, in maps and lists at any depth (Kubernetes'
/// `discardNullValuesFromPatch`).
fn discard_nulls(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.retain(|_, v| !v.is_null());
            map.values_mut().for_each(discard_nulls);
        }
        Value::Array(items) => items.iter_mut().for_each(discard_nulls),
        _ => {}
    }
}

fn strip_directives_value(value: &mut Value) {
    match value {
        Value::Object(map) => strip_directives(map),
        Value::Array(items) => items.iter_mut().for_each(strip_directives_value),
        _ => {}
    }
}

fn strip_directives(map: &mut Map<String, Value>) {
    map.retain(|k, _| !k.starts_with('$'));
    map.values_mut().for_each(strip_directives_value);
}

/// Parses an apply body: YAML (of which JSON is a subset).
pub fn parse_apply_body(body: &[u8]) -> Result<Value, StoreError> {
    if let Ok(value) = serde_json::from_slice(body) {
        return Ok(value);
    }
    let text = std::str::from_utf8(body).map_err(|e| StoreError::BadRequest {
        message: format!("apply body is not UTF-8: {e}"),
    })?;
    serde_saphyr::from_str(text).map_err(|e| StoreError::BadRequest {
        message: format!("apply body is not valid YAML: {e}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ds() -> Value {
        json!({"spec": {"template": {"spec": {
            "containers": [
                {"name": "app", "image": "app:1", "env": [{"name": "A", "value": "1"}],
                 "ports": [{"containerPort": 80, "name": "http"}]},
                {"name": "sidecar", "image": "side:1"}
            ],
            "tolerations": [{"operator": "Exists"}],
            "volumes": [{"name": "v1", "emptyDir": {}}]
        }}}})
    }

    #[test]
    fn containers_merge_by_name_like_kubectl_set_image() {
        let mut target = ds();
        let patch = json!({"spec": {"template": {"spec": {
            "$setElementOrder/containers": [{"name": "app"}, {"name": "sidecar"}],
            "containers": [{"image": "app:2", "name": "app"}]
        }}}});
        apply_strategic_merge(&mut target, &patch).unwrap();
        let containers = &target["spec"]["template"]["spec"]["containers"];
        assert_eq!(containers[0]["image"], "app:2");
        assert_eq!(
            containers[0]["env"][0]["value"], "1",
            "untouched fields stay"
        );
        assert_eq!(containers[1]["image"], "side:1", "other containers stay");
        assert!(
            target["spec"]["template"]["spec"]
                .get("$setElementOrder/containers")
                .is_none()
        );
    }

    #[test]
    fn keyed_lists_add_delete_and_replace() {
        let mut target = ds();
        let patch = json!({"spec": {"template": {"spec": {
            "containers": [
                {"name": "app", "env": [{"name": "B", "value": "2"}], "ports": [{"containerPort": 80, "protocol": "TCP"}]},
                {"name": "sidecar", "$patch": "delete"}
            ],
            "volumes": [{"$patch": "replace"}, {"name": "v2", "hostPath": {"path": "/x"}}],
            "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}]
        }}}});
        apply_strategic_merge(&mut target, &patch).unwrap();
        let spec = &target["spec"]["template"]["spec"];
        assert_eq!(spec["containers"].as_array().unwrap().len(), 1);
        let env: Vec<_> = spec["containers"][0]["env"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].clone())
            .collect();
        assert_eq!(env, [json!("A"), json!("B")]);
        assert_eq!(
            spec["containers"][0]["ports"],
            json!([{"containerPort": 80, "name": "http", "protocol": "TCP"}])
        );
        assert_eq!(
            spec["volumes"],
            json!([{"name": "v2", "hostPath": {"path": "/x"}}])
        );
        assert_eq!(
            spec["tolerations"],
            json!([{"key": "k", "operator": "Exists", "effect": "NoSchedule"}]),
            "no merge key: replaced"
        );
    }

    #[test]
    fn maps_merge_null_deletes_retain_keys_and_replace() {
        let mut target = json!({"metadata": {"labels": {"a": "1", "b": "2"}},
            "spec": {"updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}}}});
        let patch = json!({"metadata": {"labels": {"b": null, "c": "3"}},
            "spec": {"updateStrategy": {"$retainKeys": ["type"], "type": "OnDelete"}}});
        apply_strategic_merge(&mut target, &patch).unwrap();
        assert_eq!(target["metadata"]["labels"], json!({"a": "1", "c": "3"}));
        assert_eq!(
            target["spec"]["updateStrategy"],
            json!({"type": "OnDelete"})
        );
        let patch = json!({"metadata": {"labels": {"$patch": "replace", "z": "9"}}});
        apply_strategic_merge(&mut target, &patch).unwrap();
        assert_eq!(target["metadata"]["labels"], json!({"z": "9"}));
    }

    /// Regression, fuzz target `sim_patch` (input `crash-b04b6accb7e04ed00ef1629899f62048eb302a8a`:
    /// the strategic patch `{"metadata": {"labels": {"a": null, "b": "c"}}}` on the
    /// nvidia-device-plugin fixture, which has no labels): a value the patch adds whole kept
    /// its nulls, where Kubernetes drops them (`discardNullValuesFromPatch`), as a merge patch
    /// does (which leaves lists alone, so only the rows without lists compare with it). Rows:
    /// (target, patch, result, same as a merge patch).
    #[test]
    fn nulls_inside_a_value_added_whole_are_dropped() {
        let rows = [
            (
                json!({"metadata": {"name": "x"}}),
                json!({"metadata": {"labels": {"a": null, "b": "c"}}}),
                json!({"metadata": {"name": "x", "labels": {"b": "c"}}}),
                true,
            ),
            // Another type: replaced whole, its nulls dropped at any depth, lists included.
            (
                json!({"spec": {"x": 1}}),
                json!({"spec": {"x": {"y": null, "z": [{"k": null, "v": 1}]}}}),
                json!({"spec": {"x": {"z": [{"v": 1}]}}}),
                false,
            ),
            // A null for an existing key still deletes it.
            (
                json!({"metadata": {"labels": {"a": "1", "b": "2"}}}),
                json!({"metadata": {"labels": {"a": null}}}),
                json!({"metadata": {"labels": {"b": "2"}}}),
                true,
            ),
        ];
        for (target, patch, expected, as_merge) in rows {
            let mut strategic = target.clone();
            apply_strategic_merge(&mut strategic, &patch).unwrap();
            assert_eq!(strategic, expected, "{patch}");
            let mut merged = target.clone();
            apply_merge_patch(&mut merged, &patch);
            assert_eq!(strategic == merged, as_merge, "{patch}: as a merge patch");
        }
    }

    #[test]
    fn finalizers_merge_as_a_set() {
        let mut target = json!({"metadata": {"finalizers": ["a"]}});
        apply_strategic_merge(
            &mut target,
            &json!({"metadata": {"finalizers": ["a", "b"]}}),
        )
        .unwrap();
        assert_eq!(target["metadata"]["finalizers"], json!(["a", "b"]));
        apply_strategic_merge(
            &mut target,
            &json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}}),
        )
        .unwrap();
        assert_eq!(target["metadata"]["finalizers"], json!(["b"]));
    }

    #[test]
    fn json_patch_test_failure_is_invalid() {
        let mut target = json!({"metadata": {"generation": 3}, "spec": {"x": 1}});
        let ok = br#"[{"op":"test","path":"/metadata/generation","value":3},{"op":"replace","path":"/spec/x","value":2}]"#;
        apply_json_patch(&mut target, ok).unwrap();
        assert_eq!(target["spec"]["x"], 2);
        let stale = br#"[{"op":"test","path":"/metadata/generation","value":2},{"op":"replace","path":"/spec/x","value":5}]"#;
        let err = apply_json_patch(&mut target, stale).unwrap_err();
        assert_eq!(err.code(), 422);
        assert_eq!(target["spec"]["x"], 2, "a failed patch changes nothing");
        assert_eq!(apply_json_patch(&mut target, b"{").unwrap_err().code(), 400);
    }

    #[test]
    fn apply_body_accepts_yaml_and_json() {
        let yaml = b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n";
        assert_eq!(parse_apply_body(yaml).unwrap()["metadata"]["name"], "x");
        assert_eq!(parse_apply_body(br#"{"a": 1}"#).unwrap()["a"], 1);
    }
}
