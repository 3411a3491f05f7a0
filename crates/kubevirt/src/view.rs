//! The parts of the `kubevirt.io/v1` `KubeVirt` resource the canary reads (spec section 1):
//! the three status targets, the observed versions and `status.generations`.

use canary_predicates::Target;
use kube::ResourceExt;
use kube::api::{ApiResource, DynamicObject};
use serde::Deserialize;

/// `app.kubernetes.io/managed-by`, the label virt-operator puts on everything it deploys.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";

/// The values of [`MANAGED_BY_LABEL`] that select virt-operator's objects: the current one and
/// the old one, as virt-operator's `InfrastructurePodCache` selects them.
pub const MANAGED_BY_VALUES: [&str; 2] = ["virt-operator", "kubevirt-operator"];

/// `kubevirt.io/generation`: the KubeVirt `metadata.generation` virt-operator injects on the
/// DaemonSet's metadata (not on the pod template).
pub use canary_predicates::KUBEVIRT_GENERATION_ANNOTATION;

/// The label selector of virt-operator's pod cache and of the DaemonSets it manages:
/// `app.kubernetes.io/managed-by in (virt-operator,kubevirt-operator)`.
pub fn managed_by_selector() -> String {
    format!("{MANAGED_BY_LABEL} in ({})", MANAGED_BY_VALUES.join(","))
}

/// The `kubevirt.io/v1` `KubeVirt` resource, for a dynamic `Api`.
pub fn kubevirt_api_resource() -> ApiResource {
    ApiResource {
        group: "kubevirt.io".to_owned(),
        version: "v1".to_owned(),
        api_version: "kubevirt.io/v1".to_owned(),
        kind: "KubeVirt".to_owned(),
        plural: "kubevirts".to_owned(),
    }
}

/// One `status.generations[]` entry: the generation virt-operator last recorded for an object.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct GenerationRecord {
    /// API group (`apps` for DaemonSets).
    pub group: String,
    /// Resource (`daemonsets`).
    pub resource: String,
    /// Namespace (empty for cluster-scoped objects: the field is `omitempty`).
    pub namespace: String,
    /// Object name.
    pub name: String,
    /// The recorded `metadata.generation`.
    pub last_generation: i64,
}

/// What the canary reads from one KubeVirt object.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KubeVirtView {
    /// Namespace of the KubeVirt object; virt-operator deploys virt-handler there.
    pub namespace: String,
    /// Name of the KubeVirt object.
    pub name: String,
    /// `metadata.generation`, which virt-operator copies into [`KUBEVIRT_GENERATION_ANNOTATION`].
    pub generation: Option<i64>,
    /// `status.targetKubeVirtVersion` / `targetKubeVirtRegistry` / `targetDeploymentID`: what is
    /// being rolled out (empty strings when absent, as Go reads them).
    pub target: Target,
    /// `status.observedKubeVirtVersion` / `observedKubeVirtRegistry` / `observedDeploymentID`:
    /// what virt-operator last finished deploying.
    pub observed: Target,
    /// `status.generations`, in order.
    pub generations: Vec<GenerationRecord>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct StatusFields {
    target_kube_virt_version: Option<String>,
    target_kube_virt_registry: Option<String>,
    #[serde(rename = "targetDeploymentID")]
    target_deployment_id: Option<String>,
    observed_kube_virt_version: Option<String>,
    observed_kube_virt_registry: Option<String>,
    #[serde(rename = "observedDeploymentID")]
    observed_deployment_id: Option<String>,
    generations: Option<Vec<GenerationRecord>>,
}

/// Why a KubeVirt object could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("KubeVirt {namespace}/{name}: unreadable status: {message}")]
pub struct KubeVirtParseError {
    /// Namespace of the object.
    pub namespace: String,
    /// Name of the object.
    pub name: String,
    /// What was wrong.
    pub message: String,
}

impl KubeVirtView {
    /// Reads a KubeVirt object as the API returned it. A missing status reads as empty targets
    /// and no generations (a fresh install); a status of the wrong shape is an error.
    pub fn from_object(object: &DynamicObject) -> Result<Self, KubeVirtParseError> {
        let namespace = object.namespace().unwrap_or_default();
        let name = object.name_any();
        let status = match object.data.get("status") {
            None | Some(serde_json::Value::Null) => StatusFields::default(),
            Some(value) => StatusFields::deserialize(value).map_err(|e| KubeVirtParseError {
                namespace: namespace.clone(),
                name: name.clone(),
                message: e.to_string(),
            })?,
        };
        let target = |value: Option<String>| value.unwrap_or_default();
        Ok(KubeVirtView {
            generation: object.metadata.generation,
            target: Target {
                version: target(status.target_kube_virt_version),
                registry: target(status.target_kube_virt_registry),
                deployment_id: target(status.target_deployment_id),
            },
            observed: Target {
                version: target(status.observed_kube_virt_version),
                registry: target(status.observed_kube_virt_registry),
                deployment_id: target(status.observed_deployment_id),
            },
            generations: status.generations.unwrap_or_default(),
            namespace,
            name,
        })
    }

    /// The reference's `GetExpectedGeneration` for a DaemonSet: the `lastGeneration` of the
    /// first `apps`/`daemonsets` entry with this namespace and name, −1 when there is none.
    pub fn expected_daemon_set_generation(&self, namespace: &str, name: &str) -> i64 {
        self.generations
            .iter()
            .find(|record| {
                record.group == "apps"
                    && record.resource == "daemonsets"
                    && record.namespace == namespace
                    && record.name == name
            })
            .map_or(-1, |record| record.last_generation)
    }

    /// Whether a rollout of a new KubeVirt version is under way: the target differs from what
    /// virt-operator last finished deploying.
    pub fn rolling_out(&self) -> bool {
        self.target != self.observed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(status: serde_json::Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "kubevirt.io/v1",
            "kind": "KubeVirt",
            "metadata": {"name": "kubevirt", "namespace": "kubevirt", "generation": 3},
            "status": status,
        }))
        .unwrap()
    }

    #[test]
    fn reads_targets_observed_and_generations() {
        let view = KubeVirtView::from_object(&object(json!({
            "targetKubeVirtVersion": "v1.6.0",
            "targetKubeVirtRegistry": "quay.io/kubevirt",
            "targetDeploymentID": "abc",
            "observedKubeVirtVersion": "v1.5.2",
            "observedKubeVirtRegistry": "quay.io/kubevirt",
            "observedDeploymentID": "old",
            "generations": [
                {"group": "apps", "resource": "deployments", "namespace": "kubevirt", "name": "virt-handler", "lastGeneration": 9},
                {"group": "apps", "resource": "daemonsets", "namespace": "kubevirt", "name": "virt-handler", "lastGeneration": 4, "hash": ""},
                {"group": "apps", "resource": "daemonsets", "namespace": "kubevirt", "name": "virt-handler", "lastGeneration": 7},
            ],
            "phase": "Deployed",
        })))
        .unwrap();
        assert_eq!(view.namespace, "kubevirt");
        assert_eq!(view.generation, Some(3));
        assert_eq!(view.target.version, "v1.6.0");
        assert_eq!(view.target.deployment_id, "abc");
        assert_eq!(view.observed.version, "v1.5.2");
        assert!(view.rolling_out());
        // The first matching entry wins; the deployment of the same name is another resource.
        assert_eq!(
            view.expected_daemon_set_generation("kubevirt", "virt-handler"),
            4
        );
        assert_eq!(
            view.expected_daemon_set_generation("other", "virt-handler"),
            -1
        );
        assert_eq!(
            view.expected_daemon_set_generation("kubevirt", "virt-api"),
            -1
        );
    }

    #[test]
    fn missing_status_reads_as_empty_targets() {
        let view = KubeVirtView::from_object(&object(serde_json::Value::Null)).unwrap();
        assert_eq!(view.target, Target::default());
        assert!(view.generations.is_empty());
        assert!(!view.rolling_out());
    }

    #[test]
    fn a_malformed_status_is_an_error_not_a_panic() {
        let error = KubeVirtView::from_object(&object(json!({"generations": "nope"}))).unwrap_err();
        assert_eq!(error.name, "kubevirt");
        assert!(error.to_string().contains("unreadable status"), "{error}");
    }

    #[test]
    fn selector_lists_both_operator_names() {
        assert_eq!(
            managed_by_selector(),
            "app.kubernetes.io/managed-by in (virt-operator,kubevirt-operator)"
        );
        assert_eq!(kubevirt_api_resource().plural, "kubevirts");
    }
}
