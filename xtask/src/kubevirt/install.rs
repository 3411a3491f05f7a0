//! What KubeVirt's install manifest installs (without the operator's Deployment: the operator
//! runs as a local process) and the `KubeVirt` object.
//!
//! The manifests are the release's own (`manifests/release/kubevirt-operator.yaml.in` and the
//! generated files it includes), rendered the way KubeVirt's manifest templater renders them for
//! a namespace; nothing is written by hand but the `KubeVirt` object, which is the release's
//! `kubevirt-cr.yaml` plus the `customizeComponents` this cluster needs.

use super::build::{KV_CRD, OPERATOR_MANIFEST, OPERATOR_RBAC};
use super::{KUBEVIRT_NAME, NAMESPACE, OPERATOR_USER};
use crate::cluster::{Cluster, Layout};
use anyhow::{Context, Result, bail, ensure};
use serde_json::{Value, json};

/// Fails when the running cluster's audit policy does not record virt-operator's DaemonSet
/// writes (a cluster started before the policy named it).
pub fn check_audit_policy(layout: &Layout) -> Result<()> {
    let path = layout.audit_policy();
    let policy = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read the audit policy {}", path.display()))?;
    ensure!(
        policy.contains(OPERATOR_USER),
        "the running cluster's audit policy ({}) does not record virt-operator's writes: it was \
         started by an older xtask; restart it (`cargo xtask cluster down && cargo xtask cluster up`)",
        path.display()
    );
    Ok(())
}

/// Renders the release's install manifest for [`NAMESPACE`] and applies it, except the
/// operator's Deployment; waits until the KubeVirt CRD is served.
pub fn install_prerequisites(layout: &Layout, cluster: &Cluster) -> Result<()> {
    let sources = super::build::BUILDS
        .first()
        .map(|b| b.source_dir(&layout.bin))
        .context("no KubeVirt build pinned")?;
    let read = |name: &str| {
        let path = sources.join(name);
        std::fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))
    };
    let documents = render_install_manifest(
        &read(OPERATOR_MANIFEST)?,
        &[
            (KV_CRD, read(KV_CRD)?),
            (OPERATOR_RBAC, read(OPERATOR_RBAC)?),
        ],
    )?;
    let list = json!({"apiVersion": "v1", "kind": "List", "items": documents});
    // Server-side: the CRD is 460 KB, too big for client-side apply's annotation.
    cluster.kubectl_with_input(
        &[
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager=xtask-kubevirt",
            "-f",
            "-",
        ],
        &list.to_string(),
    )?;
    cluster.wait_crd_established("kubevirts.kubevirt.io")
}

/// The documents of the release's install manifest template rendered for [`NAMESPACE`], with
/// the generated files it includes (`included`: file name and content), minus the documents
/// this cluster does not run: the operator's Deployment (a local process instead) and the
/// `KubeVirt` object (created by [`ensure_kubevirt_object`]).
pub fn render_install_manifest(template: &str, included: &[(&str, String)]) -> Result<Vec<Value>> {
    let mut text = template.to_owned();
    for (name, content) in included {
        text = text.replace(
            &format!("{{{{index .GeneratedManifests \"{name}\"}}}}"),
            content,
        );
    }
    // The KubeVirt object's template (kubevirt-cr.yaml.in) is not rendered: it is created
    // apart, with this cluster's settings.
    text = text.replace("{{index .GeneratedManifests \"kubevirt-cr.yaml.in\"}}", "");
    text = text.replace("{{.Namespace}}", NAMESPACE);
    let mut documents = Vec::new();
    for raw in text.split("\n---") {
        let raw = raw.trim();
        if raw.is_empty() || raw == "---" {
            continue;
        }
        if raw.contains("{{.OperatorDeploymentSpec}}") {
            continue;
        }
        ensure!(
            !raw.contains("{{"),
            "the install manifest has a placeholder this renderer does not know:\n{}",
            raw.chars().take(300).collect::<String>()
        );
        let document: Value = serde_saphyr::from_str(raw).with_context(|| {
            format!(
                "a document of the install manifest is not YAML:\n{}",
                raw.chars().take(300).collect::<String>()
            )
        })?;
        if !document.is_null() {
            documents.push(document);
        }
    }
    let kinds: Vec<&str> = documents
        .iter()
        .filter_map(|d| d["kind"].as_str())
        .collect();
    for wanted in [
        "Namespace",
        "CustomResourceDefinition",
        "ServiceAccount",
        "ClusterRole",
    ] {
        ensure!(
            kinds.contains(&wanted),
            "the rendered install manifest has no {wanted} (kinds: {kinds:?})"
        );
    }
    if kinds.contains(&"Deployment") {
        bail!("the rendered install manifest still has the operator's Deployment");
    }
    Ok(documents)
}

/// The `KubeVirt` object: the release's `kubevirt-cr.yaml` (no feature gates, pull policy
/// IfNotPresent) with `customizeComponents` patches that empty every webhook configuration of
/// the install strategy. Their Services (virt-api, virt-operator's webhook) have no endpoint
/// the API server can reach here, and with `failurePolicy: Fail` the operator's own
/// `kubevirt-update-validator` would refuse every update of this object, the upgrade's
/// `imageTag` included.
pub fn kubevirt_object() -> Value {
    let empty_webhooks = |kind: &str| {
        json!({
            "resourceType": kind,
            "resourceName": "*",
            "type": "merge",
            "patch": "{\"webhooks\":null}"
        })
    };
    json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "KubeVirt",
        "metadata": {"name": KUBEVIRT_NAME, "namespace": NAMESPACE},
        "spec": {
            "certificateRotateStrategy": {},
            "configuration": {
                "developerConfiguration": {"featureGates": []},
                "imagePullPolicy": "IfNotPresent"
            },
            "customizeComponents": {
                "patches": [
                    empty_webhooks("ValidatingWebhookConfiguration"),
                    empty_webhooks("MutatingWebhookConfiguration")
                ]
            },
            "imagePullPolicy": "IfNotPresent",
            "workloadUpdateStrategy": {}
        }
    })
}

/// Creates the KubeVirt object unless it exists.
pub fn ensure_kubevirt_object(cluster: &Cluster) -> Result<()> {
    if super::kubevirt_object(cluster).is_ok() {
        return Ok(());
    }
    cluster.kubectl_with_input(&["create", "-f", "-"], &kubevirt_object().to_string())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEMPLATE: &str = "---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: {{.Namespace}}\n\
        {{index .GeneratedManifests \"kv-resource.yaml\"}}\n---\napiVersion: rbac.authorization.k8s.io/v1\n\
        kind: ClusterRole\nmetadata:\n  name: kubevirt.io:operator\n\
        {{index .GeneratedManifests \"rbac-operator.authorization.k8s.yaml.in\"}}\n---\n\
        apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: virt-operator\n  namespace: {{.Namespace}}\n\
        spec:\n{{.OperatorDeploymentSpec}}\n{{index .GeneratedManifests \"kubevirt-cr.yaml.in\"}}";

    #[test]
    fn the_install_manifest_renders_without_the_operator_deployment() {
        let documents = render_install_manifest(
            TEMPLATE,
            &[
                (
                    "kv-resource.yaml",
                    "---\napiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: kubevirts.kubevirt.io\n".to_owned(),
                ),
                (
                    "rbac-operator.authorization.k8s.yaml.in",
                    "---\napiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: kubevirt-operator\n  namespace: {{.Namespace}}\n".to_owned(),
                ),
            ],
        )
        .unwrap();
        let kinds: Vec<&str> = documents
            .iter()
            .filter_map(|d| d["kind"].as_str())
            .collect();
        assert_eq!(
            kinds,
            [
                "Namespace",
                "CustomResourceDefinition",
                "ClusterRole",
                "ServiceAccount"
            ]
        );
        assert_eq!(documents[0]["metadata"]["name"], NAMESPACE);
        assert_eq!(documents[3]["metadata"]["namespace"], NAMESPACE);
    }

    #[test]
    fn an_unknown_placeholder_is_an_error() {
        let template = format!("{TEMPLATE}\n---\nkind: X\nmetadata:\n  name: {{{{.Other}}}}\n");
        assert!(render_install_manifest(&template, &[]).is_err());
    }

    #[test]
    fn the_kubevirt_object_empties_every_webhook_configuration() {
        let kv = kubevirt_object();
        let patches = kv["spec"]["customizeComponents"]["patches"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let kinds: Vec<&str> = patches
            .iter()
            .filter_map(|p| p["resourceType"].as_str())
            .collect();
        assert_eq!(
            kinds,
            [
                "ValidatingWebhookConfiguration",
                "MutatingWebhookConfiguration"
            ]
        );
        for patch in &patches {
            assert_eq!(patch["resourceName"], "*");
            let body: Value = serde_json::from_str(patch["patch"].as_str().unwrap_or("")).unwrap();
            assert_eq!(body, json!({"webhooks": null}));
        }
        assert!(kv["spec"].get("imageTag").is_none());
    }
}
