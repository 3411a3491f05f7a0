//! The `CanaryDaemonSet` custom resource (`canary.daemonset.dev/v1alpha1`).
//!
//! The spec says which DaemonSet to own and which target its pods must reach; the status is the
//! controller's only memory, so everything a restarted controller needs to resume lives there.

use std::collections::BTreeMap;

use canary_state_machine::Compatibility;
use k8s_openapi::api::apps::v1::DaemonSetSpec;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, CustomResourceExt, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::Error;

/// The CEL rule every maxUnavailable field of the spec must satisfy: a positive count (`"1"`) or
/// a percentage from 1 to 100 (`"10%"`). Zero is rejected because a rollout at zero never moves.
pub const MAX_UNAVAILABLE_RULE: &str = "self.matches('^([1-9][0-9]*|([1-9][0-9]?|100)%)$')";

/// Desired state of a canary-managed DaemonSet.
// printcolumn(..) repeats `type_ = "string"` on purpose: one column each.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "canary.daemonset.dev",
    version = "v1alpha1",
    kind = "CanaryDaemonSet",
    namespaced,
    status = "CanaryDaemonSetStatus",
    shortname = "cds",
    category = "all",
    derive = "PartialEq",
    doc = "A DaemonSet rolled out the KubeVirt way: one canary pod, then 10%, then back to 1.",
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.readyRatio",
        description = "updated-and-ready / desired pods"
    ),
    printcolumn(
        name = "Version",
        type_ = "string",
        json_path = ".status.targetVersion",
        description = "the version rolled out (spec.target.version, or the tag of spec.target.fromContainer's image)"
    ),
    printcolumn(
        name = "MaxUnavailable",
        type_ = "string",
        json_path = ".status.currentMaxUnavailable",
        priority = "1"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct CanaryDaemonSetSpec {
    /// The DaemonSet to own: metadata labels/annotations and an `apps/v1` DaemonSetSpec.
    pub template: DaemonSetTemplate,
    /// Name of the owned DaemonSet (default: the CanaryDaemonSet's name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub daemon_set_name: Option<String>,
    /// The install-strategy target injected as annotations on the DaemonSet and its pods.
    pub target: TargetSpec,
    /// Override of the three install-strategy annotation keys (default: KubeVirt's keys).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotation_keys: Option<AnnotationKeysSpec>,
    /// How the rollout proceeds.
    #[serde(default)]
    pub strategy: StrategySpec,
    /// KubeVirt's TLS migration steps (off by default).
    #[serde(default)]
    pub tls_migration: TlsMigrationSpec,
}

/// The DaemonSet template: metadata plus spec.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DaemonSetTemplate {
    /// Labels and annotations of the DaemonSet object itself.
    #[serde(default)]
    pub metadata: TemplateMetadata,
    /// The DaemonSet spec. The controller owns `updateStrategy.rollingUpdate.maxUnavailable`.
    pub spec: DaemonSetSpec,
}

/// Labels and annotations to set on the owned DaemonSet.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TemplateMetadata {
    /// Labels of the DaemonSet.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Annotations of the DaemonSet.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// The target every pod must reach to count as updated. The version is given either as
/// `version` or as `fromContainer`, the name of the template's container whose image tag is the
/// version (so that changing the image is the whole upgrade).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new("has(self.version) != has(self.fromContainer)").message("set exactly one of target.version and target.fromContainer"))]
pub struct TargetSpec {
    /// The version, written out. Exactly one of `version` and `fromContainer`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[x_kube(validation = kube::core::Rule::new("self != ''").message("target.version must not be empty"))]
    pub version: String,
    /// The name of a container of the template whose image tag is the version
    /// (`quay.io/prometheus/node-exporter:v1.9.1` gives `v1.9.1`). Exactly one of `version` and
    /// `fromContainer`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = kube::core::Rule::new("self != ''").message("target.fromContainer must not be empty"))]
    pub from_container: Option<String>,
    /// Registry (default: empty).
    #[serde(default)]
    pub registry: String,
    /// Deployment id (default: a stable hash of the template, so every template change is a new
    /// target).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment_id: Option<String>,
}

/// The three install-strategy annotation keys.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AnnotationKeysSpec {
    /// Key carrying the version.
    #[x_kube(validation = kube::core::Rule::new("self != ''").message("annotation keys must not be empty"))]
    pub version: String,
    /// Key carrying the registry.
    #[x_kube(validation = kube::core::Rule::new("self != ''").message("annotation keys must not be empty"))]
    pub registry: String,
    /// Key carrying the deployment id.
    #[x_kube(validation = kube::core::Rule::new("self != ''").message("annotation keys must not be empty"))]
    pub id: String,
}

/// Crash-loop detection policy.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum CrashLoopPolicyName {
    /// Any past restart or terminated state of a container fails the canary (reference).
    KubeVirt,
    /// Waiting reasons such as CrashLoopBackOff, or a restart count at the threshold (default).
    #[default]
    Strict,
}

/// Crash-loop detection settings.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CrashLoopSpec {
    /// Policy (default `Strict`).
    #[serde(default)]
    pub policy: CrashLoopPolicyName,
    /// Strict only: restarts that count as a crash loop (default 3).
    #[serde(default = "default_restart_threshold")]
    #[x_kube(validation = kube::core::Rule::new("self >= 1").message("restartThreshold must be at least 1"))]
    pub restart_threshold: i32,
    /// Strict only: also watch init containers (default true).
    #[serde(default = "default_true")]
    pub include_init_containers: bool,
}

impl Default for CrashLoopSpec {
    fn default() -> Self {
        Self {
            policy: CrashLoopPolicyName::default(),
            restart_threshold: default_restart_threshold(),
            include_init_containers: true,
        }
    }
}

/// Rollout strategy.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct StrategySpec {
    /// `KubeVirt` or `Fixed` (default).
    #[serde(default)]
    pub compatibility: Compatibility,
    /// maxUnavailable while the canary runs and at rest (default `"1"`).
    #[serde(default = "default_canary_max_unavailable")]
    #[x_kube(validation = kube::core::Rule::new(MAX_UNAVAILABLE_RULE).message("a positive count such as \"1\" or a percentage from \"1%\" to \"100%\""))]
    pub canary_max_unavailable: String,
    /// maxUnavailable once the canary is ready (default `"10%"`).
    #[serde(default = "default_fast_max_unavailable")]
    #[x_kube(validation = kube::core::Rule::new(MAX_UNAVAILABLE_RULE).message("a positive count such as \"1\" or a percentage from \"1%\" to \"100%\""))]
    pub fast_max_unavailable: String,
    /// Crash-loop detection.
    #[serde(default)]
    pub crash_loop: CrashLoopSpec,
    /// A rollout without progress for this long fails (default 600; 0 disables; ignored in
    /// `KubeVirt` compatibility, which has no deadline).
    #[serde(default = "default_progress_deadline_seconds")]
    #[x_kube(validation = kube::core::Rule::new("self >= 0").message("progressDeadlineSeconds must not be negative"))]
    pub progress_deadline_seconds: i64,
}

impl Default for StrategySpec {
    fn default() -> Self {
        Self {
            compatibility: Compatibility::default(),
            canary_max_unavailable: default_canary_max_unavailable(),
            fast_max_unavailable: default_fast_max_unavailable(),
            crash_loop: CrashLoopSpec::default(),
            progress_deadline_seconds: default_progress_deadline_seconds(),
        }
    }
}

/// KubeVirt's TLS migration steps (spec section 6).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TlsMigrationSpec {
    /// Run the TLS steps (default false).
    #[serde(default)]
    pub enabled: bool,
    /// Label on the DaemonSet that says its image supports the flag.
    #[serde(default = "default_support_label")]
    pub support_label: String,
    /// Value of that label (default `"true"`).
    #[serde(default = "default_support_value")]
    pub support_value: String,
    /// Flag appended to the container's args.
    #[serde(default = "default_flag")]
    pub flag: String,
    /// Value appended after the flag.
    #[serde(default = "default_flag_value")]
    pub flag_value: String,
    /// Volume (and mount) name of the certificate secret to detach.
    #[serde(default = "default_cert_secret_volume")]
    pub cert_secret_volume: String,
    /// Container name to edit (default: the first container, as the reference does).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
}

impl Default for TlsMigrationSpec {
    fn default() -> Self {
        Self {
            enabled: false,
            support_label: default_support_label(),
            support_value: default_support_value(),
            flag: default_flag(),
            flag_value: default_flag_value(),
            cert_secret_volume: default_cert_secret_volume(),
            container: None,
        }
    }
}

/// Observed state; the controller's only memory.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CanaryDaemonSetStatus {
    /// `started`, `canary`, `increasing`, `waiting`, `successful` or `failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// Machine-readable reason of the phase (a failure reason when failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Human-readable message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// `Progressing`, `Available` and `Degraded`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The CanaryDaemonSet generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The DaemonSet generation recorded as known (the reference's `SetGeneration`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recorded_daemon_set_generation: Option<i64>,
    /// Name of the owned DaemonSet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub daemon_set_name: Option<String>,
    /// The version rolled out: `spec.target.version`, or the tag of the image of
    /// `spec.target.fromContainer`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_version: Option<String>,
    /// Pods the DaemonSet should run (`desiredNumberScheduled`).
    #[serde(default)]
    pub desired: u32,
    /// Pods that reached the target.
    #[serde(default)]
    pub updated: u32,
    /// Updated pods that are ready.
    #[serde(default)]
    pub updated_ready: u32,
    /// `updatedReady/desired`, for the printer column.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_ratio: Option<String>,
    /// maxUnavailable of the live DaemonSet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_max_unavailable: Option<String>,
    /// When the current phase began.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase_start_time: Option<Time>,
    /// `updatedReady` when progress was last seen (progress deadline).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress_updated_ready: Option<u32>,
    /// When progress was last seen (progress deadline).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_progress_time: Option<Time>,
}

impl CanaryDaemonSetStatus {
    /// The fields a status may leave out, by their JSON names.
    pub const OPTIONAL_FIELDS: [&'static str; 13] = [
        "phase",
        "reason",
        "message",
        "conditions",
        "observedGeneration",
        "recordedDaemonSetGeneration",
        "daemonSetName",
        "targetVersion",
        "readyRatio",
        "currentMaxUnavailable",
        "phaseStartTime",
        "progressUpdatedReady",
        "lastProgressTime",
    ];

    /// The JSON merge patch body that makes the stored status equal to this one: absent
    /// fields are sent as `null`, which deletes them, so that for example the message of a
    /// failure does not outlive it.
    pub fn merge_patch(&self) -> Result<serde_json::Value, Error> {
        let mut value = serde_json::to_value(self).map_err(|e| Error::Serialize(e.to_string()))?;
        if let Some(fields) = value.as_object_mut() {
            for name in Self::OPTIONAL_FIELDS {
                fields
                    .entry(name.to_owned())
                    .or_insert(serde_json::Value::Null);
            }
        }
        Ok(serde_json::json!({ "status": value }))
    }
}

impl CanaryDaemonSet {
    /// Name of the DaemonSet this resource owns.
    pub fn daemon_set_name(&self) -> String {
        self.spec
            .daemon_set_name
            .clone()
            .or_else(|| self.metadata.name.clone())
            .unwrap_or_default()
    }
}

/// The CRD as YAML, exactly as committed in `deploy/crd/canarydaemonsets.yaml`.
///
/// Regenerate the file with `cargo xtask codegen` (or
/// `UPDATE_CRD=1 cargo test -p canary-kube-adapter crd_yaml_is_current`).
pub fn crd_yaml() -> Result<String, Error> {
    let crd = crd()?;
    let body = serde_saphyr::to_string(&crd).map_err(|e| Error::Serialize(e.to_string()))?;
    Ok(format!(
        "# Generated by canary-kube-adapter (cargo xtask codegen). Do not edit.\n{body}"
    ))
}

/// The CRD to install: [`CanaryDaemonSet::crd()`] without the descriptions inside the embedded
/// `apps/v1` DaemonSetSpec schema.
///
/// The embedded Kubernetes descriptions make up most of the 600 KB schema; without them the CRD
/// stays under the 256 KB `kubectl apply` annotation limit, while every type and structural rule is
/// kept, so the API server still rejects malformed templates (a malformed object would otherwise
/// break the controller's typed watch).
pub fn crd() -> Result<CustomResourceDefinition, Error> {
    let mut value = serde_json::to_value(CanaryDaemonSet::crd())
        .map_err(|e| Error::Serialize(e.to_string()))?;
    if let Some(versions) = value
        .pointer_mut("/spec/versions")
        .and_then(|v| v.as_array_mut())
    {
        for version in versions {
            let template_spec =
                "/schema/openAPIV3Schema/properties/spec/properties/template/properties/spec";
            if let Some(schema) = version.pointer_mut(template_spec) {
                strip_descriptions(schema);
            }
        }
    }
    serde_json::from_value(value).map_err(|e| Error::Serialize(e.to_string()))
}

/// Removes `description` from a schema and its subschemas (never from a `properties` map, where
/// `description` could be a field name).
fn strip_descriptions(schema: &mut serde_json::Value) {
    let Some(object) = schema.as_object_mut() else {
        return;
    };
    object.remove("description");
    for (keyword, sub) in object.iter_mut() {
        match keyword.as_str() {
            "properties" | "patternProperties" => {
                for child in sub.as_object_mut().into_iter().flat_map(|m| m.values_mut()) {
                    strip_descriptions(child);
                }
            }
            "items" | "additionalProperties" | "not" => strip_descriptions(sub),
            "allOf" | "anyOf" | "oneOf" => {
                for child in sub.as_array_mut().into_iter().flatten() {
                    strip_descriptions(child);
                }
            }
            _ => {}
        }
    }
}

fn default_restart_threshold() -> i32 {
    3
}
fn default_true() -> bool {
    true
}
fn default_canary_max_unavailable() -> String {
    "1".to_owned()
}
fn default_fast_max_unavailable() -> String {
    "10%".to_owned()
}
fn default_progress_deadline_seconds() -> i64 {
    600
}
fn default_support_label() -> String {
    "kubevirt.io/supports-migration-cn-types".to_owned()
}
fn default_support_value() -> String {
    "true".to_owned()
}
fn default_flag() -> String {
    "--migration-cn-types".to_owned()
}
fn default_flag_value() -> String {
    "migration".to_owned()
}
fn default_cert_secret_volume() -> String {
    "kubevirt-virt-handler-certs".to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

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
            phase: Some("successful".into()),
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
        let yaml = crd_yaml().unwrap();
        assert!(yaml.len() < 256 * 1024, "{} bytes", yaml.len());
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
        assert_eq!(spec.strategy.crash_loop.policy, CrashLoopPolicyName::Strict);
        assert_eq!(spec.strategy.crash_loop.restart_threshold, 3);
        assert!(spec.strategy.crash_loop.include_init_containers);
        assert_eq!(spec.strategy.progress_deadline_seconds, 600);
        assert!(!spec.tls_migration.enabled);
        assert_eq!(spec.tls_migration.flag, "--migration-cn-types");
        assert_eq!(spec.target.registry, "");
        assert_eq!(spec.target.deployment_id, None);
    }
}
