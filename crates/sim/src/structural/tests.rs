//! Pruning, null removal and defaulting, rule by rule, and against what a real kube-apiserver
//! (v1.35) did to the same objects under the project's own CRD.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps,
};
use serde_json::{Value, json};

use super::StructuralSchema;

fn schema(props: Value) -> StructuralSchema {
    let props: JSONSchemaProps = serde_json::from_value(props).unwrap();
    StructuralSchema::new(&props)
}

#[test]
fn undeclared_fields_are_pruned_at_every_depth_and_reported_sorted() {
    let schema = schema(json!({
        "type": "object",
        "properties": {
            "spec": {"type": "object", "properties": {
                "name": {"type": "string"},
                "items": {"type": "array", "items": {"type": "object", "properties": {
                    "port": {"type": "integer"},
                }}},
            }},
        },
    }));
    let mut object = json!({
        "apiVersion": "example.dev/v1",
        "kind": "Thing",
        "metadata": {"name": "a", "labels": {"x": "y"}},
        "extra": true,
        "spec": {"name": "a", "zzz": 1, "items": [{"port": 1, "bogus": 2}, {"port": 2}]},
    });
    let pruned = schema.apply(&mut object);
    assert_eq!(pruned, ["extra", "spec.items[0].bogus", "spec.zzz"]);
    assert_eq!(
        object,
        json!({
            "apiVersion": "example.dev/v1",
            "kind": "Thing",
            "metadata": {"name": "a", "labels": {"x": "y"}},
            "spec": {"name": "a", "items": [{"port": 1}, {"port": 2}]},
        })
    );
    assert!(
        schema.apply(&mut object).is_empty(),
        "pruning twice removes nothing"
    );
}

/// `prune_unknown` prunes and does nothing else: no default filled, no `null` removed.
#[test]
fn prune_unknown_only_prunes() {
    let schema = schema(json!({"type": "object", "properties": {"spec": {
        "type": "object",
        "properties": {"n": {"type": "integer", "default": 3}, "z": {"type": "string"}},
    }}}));
    let mut object = json!({"kind": "Thing", "spec": {"a": 1, "z": null}, "status": {}});
    assert_eq!(schema.prune_unknown(&mut object), ["spec.a", "status"]);
    assert_eq!(object, json!({"kind": "Thing", "spec": {"z": null}}));
    assert!(schema.prune_unknown(&mut object).is_empty());
}

#[test]
fn meta_fields_stay_only_at_the_root_and_in_embedded_resources_and_with_their_types() {
    let schema = schema(json!({
        "type": "object",
        "properties": {
            "plain": {"type": "object", "properties": {}},
            "embedded": {"type": "object", "x-kubernetes-embedded-resource": true,
                         "properties": {"spec": {"type": "object", "properties": {}}}},
        },
    }));
    let mut object = json!({
        "kind": 7,
        "plain": {"apiVersion": "v1", "metadata": {}},
        "embedded": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"x": 1}},
    });
    let pruned = schema.apply(&mut object);
    assert_eq!(
        pruned,
        [
            "embedded.spec.x",
            "kind",
            "plain.apiVersion",
            "plain.metadata"
        ]
    );
    assert_eq!(
        object,
        json!({
            "plain": {},
            "embedded": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {}},
        })
    );
}

#[test]
fn additional_properties_give_every_key_a_schema_or_none() {
    let schema = schema(json!({
        "type": "object",
        "properties": {
            "limits": {"type": "object", "additionalProperties": {
                "type": "object", "properties": {"value": {"type": "string"}},
            }},
            "anything": {"type": "object", "additionalProperties": true},
        },
    }));
    let mut object = json!({
        "limits": {"cpu": {"value": "1", "unit": "m"}},
        "anything": {"a": 1, "b": {"c": 2}, "d": [{"e": 3}]},
    });
    let pruned = schema.apply(&mut object);
    assert_eq!(
        pruned,
        ["anything.b.c", "anything.d[0].e", "limits.cpu.unit"]
    );
    assert_eq!(
        object,
        json!({"limits": {"cpu": {"value": "1"}}, "anything": {"a": 1, "b": {}, "d": [{}]}})
    );
}

#[test]
fn preserved_unknown_fields_stay_and_declared_ones_are_pruned_by_their_schema() {
    let schema = schema(json!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
        "properties": {"spec": {"type": "object", "properties": {"a": {"type": "integer"}}}},
    }));
    let mut object = json!({"kind": "KubeVirt", "free": {"x": 1}, "spec": {"a": 1, "b": 2}});
    assert_eq!(schema.apply(&mut object), ["spec.b"]);
    assert_eq!(
        object,
        json!({"kind": "KubeVirt", "free": {"x": 1}, "spec": {"a": 1}})
    );
}

#[test]
fn defaults_fill_missing_and_disallowed_null_fields_and_are_defaulted_in_turn() {
    let schema = schema(json!({
        "type": "object",
        "properties": {
            "spec": {"type": "object", "properties": {
                "mode": {"type": "string", "default": "Fixed"},
                "limit": {"type": "string", "default": "1"},
                "note": {"type": "string", "nullable": true, "default": "n"},
                "gone": {"type": "string"},
                "kept": {"type": "string", "nullable": true},
                "crashLoop": {"type": "object", "default": {}, "properties": {
                    "threshold": {"type": "integer", "default": 3},
                }},
                "ports": {"type": "array", "items": {"type": "object", "properties": {
                    "protocol": {"type": "string", "default": "TCP"},
                }}},
            }},
        },
    }));
    let mut object = json!({"spec": {
        "limit": null, "note": null, "gone": null, "kept": null, "ports": [{}, {"protocol": "UDP"}],
    }});
    assert!(schema.apply(&mut object).is_empty());
    assert_eq!(
        object,
        json!({"spec": {
            "mode": "Fixed",
            "limit": "1",
            "note": null,
            "kept": null,
            "crashLoop": {"threshold": 3},
            "ports": [{"protocol": "TCP"}, {"protocol": "UDP"}],
        }})
    );
}

/// The project's CRD, as `kubectl apply` installs it.
fn canary_daemonset_schema() -> StructuralSchema {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/crd/canarydaemonsets.yaml"
    );
    let text = std::fs::read_to_string(path).unwrap();
    let crd: CustomResourceDefinition = serde_saphyr::from_str(&text).unwrap();
    let version = crd.spec.versions.first().unwrap();
    StructuralSchema::new(
        version
            .schema
            .as_ref()
            .and_then(|s| s.open_api_v3_schema.as_ref())
            .unwrap(),
    )
}

/// Recorded on 2026-12-05 against kube-apiserver v1.35 (`cargo xtask cluster up`): `kubectl
/// create` of this object failed with `strict decoding error: unknown field "extra", unknown
/// field "spec.canaryMaxUnavailable", unknown field "spec.foo", unknown field
/// "spec.strategy.zzz"`; with `--validate=warn` it was stored pruned and defaulted.
#[test]
fn the_project_crd_prunes_and_defaults_as_a_real_api_server_did() {
    let schema = canary_daemonset_schema();
    let mut object = json!({
        "apiVersion": "canary.daemonset.dev/v1alpha1",
        "kind": "CanaryDaemonSet",
        "metadata": {"name": "z", "namespace": "t1"},
        "extra": 1,
        "spec": {
            "canaryMaxUnavailable": "10%",
            "foo": {"bar": 1},
            "strategy": {"canaryMaxUnavailable": null, "compatibility": null, "zzz": [1]},
            "target": {"fromContainer": "agent"},
            "template": {"spec": {
                "selector": {"matchLabels": {"app": "agent"}},
                "template": {
                    "metadata": {"labels": {"app": "agent"}},
                    "spec": {"containers": [{"name": "agent", "image": "a:1", "bogus": 2}]},
                },
            }},
        },
    });
    let pruned = schema.apply(&mut object);
    assert_eq!(
        pruned,
        [
            "extra",
            "spec.canaryMaxUnavailable",
            "spec.foo",
            "spec.strategy.zzz",
            "spec.template.spec.template.spec.containers[0].bogus",
        ]
    );
    // The spec the API server stored, read back with `kubectl get -o json`.
    let stored: Value = serde_json::from_str(
        r#"{"strategy": {"canaryMaxUnavailable": "1", "compatibility": "Fixed", "driftPolicy": "Revert", "driver": "MaxUnavailable", "fastMaxUnavailable": "10%", "onFailure": "Hold", "progressDeadlineSeconds": 600}, "target": {"fromContainer": "agent", "registry": ""}, "template": {"metadata": {}, "spec": {"selector": {"matchLabels": {"app": "agent"}}, "template": {"metadata": {"labels": {"app": "agent"}}, "spec": {"containers": [{"image": "a:1", "name": "agent"}]}}}}, "tlsMigration": {"certSecretVolume": "kubevirt-virt-handler-certs", "enabled": false, "flag": "--migration-cn-types", "flagValue": "migration", "supportLabel": "kubevirt.io/supports-migration-cn-types", "supportValue": "true"}}"#,
    )
    .unwrap();
    assert_eq!(object["spec"], stored);
    assert_eq!(object.get("extra"), None);
}
