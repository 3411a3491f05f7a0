//! The DaemonSet write: an RFC 6902 JSON Patch in the reference format (spec section 5).
//!
//! Ops, in order: `test /metadata/generation` (the cached generation, so a stale cache makes the
//! API server reject the write), `add` labels, `add` annotations, `add` ownerReferences (`null`
//! when none), `replace /spec`. `add` on an existing map replaces the whole map.

use k8s_openapi::api::apps::v1::DaemonSet;
use serde_json::{Value, json};

use crate::Error;

/// Builds the reference JSON Patch that turns `live` (the cached DaemonSet) into `desired`.
pub fn daemon_set_patch(live: &DaemonSet, desired: &DaemonSet) -> Result<json_patch::Patch, Error> {
    let generation = live
        .metadata
        .generation
        .ok_or(Error::MissingField("metadata.generation"))?;
    let ops = json!([
        {"op": "test", "path": "/metadata/generation", "value": generation},
        {"op": "add", "path": "/metadata/labels", "value": to_json(&desired.metadata.labels)?},
        {"op": "add", "path": "/metadata/annotations", "value": to_json(&desired.metadata.annotations)?},
        {"op": "add", "path": "/metadata/ownerReferences", "value": to_json(&desired.metadata.owner_references)?},
        {"op": "replace", "path": "/spec", "value": to_json(&desired.spec)?},
    ]);
    serde_json::from_value(ops).map_err(|e| Error::Serialize(e.to_string()))
}

fn to_json<T: serde::Serialize>(value: &T) -> Result<Value, Error> {
    serde_json::to_value(value).map_err(|e| Error::Serialize(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ds(generation: i64) -> DaemonSet {
        serde_json::from_value(json!({
            "metadata": {"name": "agent", "namespace": "ns", "generation": generation,
                          "labels": {"app": "agent"}, "annotations": {"a": "b"}},
            "spec": {"selector": {"matchLabels": {"app": "agent"}}, "template": {}}
        }))
        .unwrap()
    }

    #[test]
    fn ops_are_in_reference_order_with_values() {
        let live = ds(7);
        let mut desired = ds(1);
        desired.metadata.owner_references = None;
        let patch = serde_json::to_value(daemon_set_patch(&live, &desired).unwrap()).unwrap();
        let ops = patch.as_array().unwrap();
        let summary: Vec<_> = ops
            .iter()
            .map(|op| (op["op"].as_str().unwrap(), op["path"].as_str().unwrap()))
            .collect();
        assert_eq!(
            summary,
            [
                ("test", "/metadata/generation"),
                ("add", "/metadata/labels"),
                ("add", "/metadata/annotations"),
                ("add", "/metadata/ownerReferences"),
                ("replace", "/spec"),
            ]
        );
        assert_eq!(
            ops[0]["value"],
            json!(7),
            "the cached generation, as an integer"
        );
        assert_eq!(ops[1]["value"], json!({"app": "agent"}));
        assert_eq!(ops[2]["value"], json!({"a": "b"}));
        assert!(
            ops[3].as_object().unwrap().contains_key("value"),
            "null ownerReferences keep their value key"
        );
        assert_eq!(ops[3]["value"], Value::Null);
        assert_eq!(
            ops[4]["value"]["selector"],
            json!({"matchLabels": {"app": "agent"}})
        );
    }

    #[test]
    fn patch_applies_and_fails_on_stale_generation() {
        let live = ds(3);
        let mut desired = ds(3);
        desired.metadata.labels = Some([("new".to_owned(), "1".to_owned())].into());
        let patch = daemon_set_patch(&live, &desired).unwrap();
        let mut doc = serde_json::to_value(&live).unwrap();
        json_patch::patch(&mut doc, &patch).unwrap();
        assert_eq!(
            doc["metadata"]["labels"],
            json!({"new": "1"}),
            "whole-map add drops live keys"
        );

        let mut moved = serde_json::to_value(ds(4)).unwrap();
        assert!(
            json_patch::patch(&mut moved, &patch).is_err(),
            "test op guards the generation"
        );
    }

    #[test]
    fn missing_generation_is_an_error() {
        let mut live = ds(1);
        live.metadata.generation = None;
        assert!(matches!(
            daemon_set_patch(&live, &ds(1)),
            Err(Error::MissingField(_))
        ));
    }
}
