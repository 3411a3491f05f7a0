//! Tests of the custom resource: its schema, defaults, decoding and the generated CRD.

use super::*;
use kube::CustomResourceExt;

const COMMITTED: &str = "../../deploy/crd/canarydaemonsets.yaml";

#[test]
fn crd_yaml_is_current() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(COMMITTED);
    let generated = crd_yaml().unwrap();
    if std::env::var_os("UPDATE_CRD").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "deploy/crd/canarydaemonsets.yaml is stale: run `UPDATE_CRD=1 cargo test -p canary-kube-adapter crd_yaml_is_current` (or `cargo xtask codegen`)"
    );
}

#[test]
fn the_merge_patch_clears_every_field_a_status_leaves_out() {
    let schema = serde_json::to_value(CanaryDaemonSet::crd()).unwrap();
    let properties = schema
        .pointer("/spec/versions/0/schema/openAPIV3Schema/properties/status/properties")
        .and_then(serde_json::Value::as_object)
        .unwrap();
    let mut in_schema: Vec<&str> = properties.keys().map(String::as_str).collect();
    let mut known = CanaryDaemonSetStatus::OPTIONAL_FIELDS.to_vec();
    known.extend(["desired", "updated", "updatedReady"]);
    in_schema.sort_unstable();
    known.sort_unstable();
    assert_eq!(in_schema, known, "OPTIONAL_FIELDS misses a status field");

    let recovered = CanaryDaemonSetStatus {
        phase: Some(canary_state_machine::Phase::Successful),
        ..CanaryDaemonSetStatus::default()
    };
    let patch = recovered.merge_patch().unwrap();
    assert_eq!(patch["status"]["phase"], "successful");
    assert!(patch["status"]["message"].is_null(), "{patch}");
    assert!(patch["status"]["reason"].is_null(), "{patch}");
    let mut stored = serde_json::json!({"status": {"phase": "failed", "message": "boom", "reason": "X", "desired": 3}});
    json_patch::merge(&mut stored, &patch);
    assert_eq!(
        stored,
        serde_json::json!({"status": {"phase": "successful", "desired": 0, "updated": 0, "updatedReady": 0}})
    );
}

#[test]
fn installed_crd_fits_kubectl_apply_and_keeps_structure() {
    // Client-side `kubectl apply` stores the object as compact JSON in its `last-applied`
    // annotation, limited to 256 KiB: that is the size that must fit, not the YAML's (whose
    // indentation alone passed 256 KiB with issue 50's status fields).
    let yaml = crd_yaml().unwrap();
    let applied: serde_json::Value = serde_saphyr::from_str(&yaml).unwrap();
    let annotation = serde_json::to_string(&applied).unwrap();
    assert!(annotation.len() < 200 * 1024, "{} bytes", annotation.len());
    let trimmed = serde_json::to_value(crd().unwrap()).unwrap();
    let full = serde_json::to_value(CanaryDaemonSet::crd()).unwrap();
    let containers = "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/template/properties/spec/properties/template/properties/spec/properties/containers";
    assert_eq!(
        trimmed.pointer(&format!("{containers}/type")),
        full.pointer(&format!("{containers}/type"))
    );
    assert!(
        trimmed
            .pointer(&format!("{containers}/description"))
            .is_none()
    );
    assert!(full.pointer(&format!("{containers}/description")).is_some());
    let own =
        "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/target/description";
    assert_eq!(trimmed.pointer(own), full.pointer(own), "our own docs stay");
}

#[test]
fn crd_names_and_subresources() {
    let crd = crd().unwrap();
    assert_eq!(crd.spec.group, "canary.daemonset.dev");
    assert_eq!(crd.spec.names.short_names, Some(vec!["cds".to_owned()]));
    assert_eq!(crd.spec.scope, "Namespaced");
    let version = &crd.spec.versions[0];
    assert_eq!(version.name, "v1alpha1");
    assert!(
        version
            .subresources
            .as_ref()
            .and_then(|s| s.status.as_ref())
            .is_some()
    );
    let columns: Vec<_> = version
        .additional_printer_columns
        .iter()
        .flatten()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(
        columns,
        ["Phase", "Ready", "Version", "MaxUnavailable", "Age"]
    );
}

#[test]
fn crd_carries_cel_rules() {
    let json = serde_json::to_string(&CanaryDaemonSet::crd()).unwrap();
    assert!(json.contains("x-kubernetes-validations"));
    assert!(json.contains("target.version must not be empty"));
    assert!(json.contains(&MAX_UNAVAILABLE_RULE.replace('\\', "\\\\")));
}

#[test]
fn minimal_spec_gets_the_documented_defaults() {
    let spec: CanaryDaemonSetSpec = serde_json::from_value(serde_json::json!({
        "template": {"spec": {"selector": {}, "template": {}}},
        "target": {"version": "v1"}
    }))
    .unwrap();
    assert_eq!(spec.strategy.compatibility, Compatibility::Fixed);
    assert_eq!(spec.strategy.canary_max_unavailable, "1");
    assert_eq!(spec.strategy.fast_max_unavailable, "10%");
    assert_eq!(
        spec.strategy.crash_loop, None,
        "derived from the compatibility"
    );
    assert_eq!(spec.strategy.drift_policy, DriftPolicy::Revert);
    assert!(!spec.adopt);
    let crash: CrashLoopSpec = serde_json::from_value(serde_json::json!({})).unwrap();
    assert_eq!(crash.policy, CrashLoopPolicyName::Strict);
    assert_eq!(crash.restart_threshold, 3);
    assert!(crash.include_init_containers);
    assert_eq!(spec.strategy.progress_deadline_seconds, 600);
    assert!(!spec.tls_migration.enabled);
    assert_eq!(spec.tls_migration.flag, "--migration-cn-types");
    assert_eq!(spec.target.registry, "");
    assert_eq!(spec.target.deployment_id, None);
}
