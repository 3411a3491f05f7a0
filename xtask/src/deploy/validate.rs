//! kubernetes-validate in strict mode for [`KUBERNETES_VERSION`], the oldest Kubernetes the
//! project supports (k8s-openapi's `v1_33`), on every built manifest (and every object of the
//! chart's renders) of a built-in kind and on
//! the DaemonSet embedded in each CanaryDaemonSet. Custom kinds are never waved through: the
//! reason each is checked elsewhere is in [`CUSTOM_KINDS`].

#![expect(
    clippy::indexing_slicing,
    reason = "only serde_json::Value is indexed here: a missing key or index reads as Null, and \
              writes by index go to objects this module built"
)]

use super::{Lint, api_version, kind, to_multi_document};
use anyhow::{Result, bail, ensure};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use xshell::cmd;

/// The oldest Kubernetes the project supports: kube 5's minimum, k8s-openapi feature `v1_33`.
pub(super) const KUBERNETES_VERSION: &str = "1.33.0";

/// Kinds kubernetes-validate has no schema for, and how this module checks them instead.
pub(super) const CUSTOM_KINDS: &[(&str, &str, &str)] = &[
    (
        "canary.daemonset.dev/",
        "CanaryDaemonSet",
        "strictly against the schema and CEL rules of deploy/crd; its embedded DaemonSet by kubernetes-validate",
    ),
    (
        "monitoring.coreos.com/",
        "ServiceMonitor",
        "no vendored prometheus-operator CRD: its selector and port must match the metrics Service",
    ),
    (
        "monitoring.coreos.com/",
        "PrometheusRule",
        "no vendored prometheus-operator CRD: its rule groups go through promtool check/test rules",
    ),
];

/// The reason a custom kind is not checked by kubernetes-validate, or `None` for a built-in kind.
pub(super) fn custom_kind_reason(object: &Value) -> Option<&'static str> {
    CUSTOM_KINDS
        .iter()
        .find(|(group, kind_name, _)| {
            api_version(object).starts_with(group) && kind(object) == *kind_name
        })
        .map(|(_, _, reason)| *reason)
}

/// The DaemonSet a CanaryDaemonSet asks for, so kubernetes-validate checks its embedded spec.
pub(super) fn embedded_daemon_set(canary: &Value) -> Value {
    let metadata = &canary["metadata"];
    let template = &canary["spec"]["template"];
    let name = canary["spec"]["daemonSetName"]
        .as_str()
        .or_else(|| metadata["name"].as_str())
        .unwrap_or_default();
    let mut daemon_set_metadata = json!({ "name": name });
    if let Some(namespace) = metadata["namespace"].as_str() {
        daemon_set_metadata["namespace"] = json!(namespace);
    }
    for field in ["labels", "annotations"] {
        if !template["metadata"][field].is_null() {
            daemon_set_metadata[field] = template["metadata"][field].clone();
        }
    }
    json!({
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": daemon_set_metadata,
        "spec": template["spec"],
    })
}

pub(super) fn check(context: &Lint) -> Result<()> {
    let mut built_in = Vec::new();
    let mut skipped = BTreeMap::new();
    for document in context.every_document() {
        match custom_kind_reason(document) {
            Some(reason) => {
                skipped.insert(kind(document).to_owned(), reason);
            }
            None => built_in.push(document.clone()),
        }
    }
    built_in.extend(
        context
            .documents_of_kind("CanaryDaemonSet")
            .map(embedded_daemon_set),
    );
    ensure!(!built_in.is_empty(), "no built-in object to validate");
    for (kind_name, reason) in &skipped {
        eprintln!("not by kubernetes-validate: {kind_name}: {reason}");
    }
    let file = context.write("built-in.yaml", &to_multi_document(&built_in)?)?;
    let validate = context.venv_tool("kubernetes-validate");
    let output = cmd!(
        context.sh,
        "{validate} --strict --kubernetes-version {KUBERNETES_VERSION} {file}"
    )
    .quiet()
    .ignore_status()
    .output()?;
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let passed = report.lines().filter(|l| l.contains(" passed ")).count();
    let problems: Vec<&str> = report
        .lines()
        .filter(|l| !l.starts_with("INFO") || l.contains("Couldn't find schema"))
        .filter(|l| !l.trim().is_empty())
        .collect();
    if !output.status.success() || !problems.is_empty() || passed != built_in.len() {
        bail!(
            "kubernetes-validate (strict, Kubernetes {KUBERNETES_VERSION}): {passed} of {} objects passed\n{}",
            built_in.len(),
            problems.join("\n")
        );
    }
    eprintln!(
        "{passed} objects valid for Kubernetes {KUBERNETES_VERSION} (strict), including the chart's renders and the DaemonSets embedded in CanaryDaemonSets"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_daemon_set_carries_name_labels_and_spec() {
        let canary = json!({
            "apiVersion": "canary.daemonset.dev/v1alpha1",
            "kind": "CanaryDaemonSet",
            "metadata": { "name": "agent", "namespace": "ns" },
            "spec": {
                "target": { "version": "v1" },
                "template": {
                    "metadata": { "labels": { "app": "agent" } },
                    "spec": { "selector": { "matchLabels": { "app": "agent" } } },
                },
            },
        });
        let daemon_set = embedded_daemon_set(&canary);
        assert_eq!(daemon_set["kind"], "DaemonSet");
        assert_eq!(daemon_set["metadata"]["name"], "agent");
        assert_eq!(daemon_set["metadata"]["namespace"], "ns");
        assert_eq!(daemon_set["metadata"]["labels"]["app"], "agent");
        assert!(daemon_set["metadata"]["annotations"].is_null());
        assert_eq!(
            daemon_set["spec"]["selector"]["matchLabels"]["app"],
            "agent"
        );
    }

    #[test]
    fn custom_kinds_are_recognised_by_group_and_kind() {
        let service_monitor =
            json!({ "apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor" });
        let deployment = json!({ "apiVersion": "apps/v1", "kind": "Deployment" });
        let unknown = json!({ "apiVersion": "monitoring.coreos.com/v1", "kind": "Probe" });
        assert!(custom_kind_reason(&service_monitor).is_some());
        assert!(custom_kind_reason(&deployment).is_none());
        // An unlisted custom kind goes to kubernetes-validate, which then fails on it loudly.
        assert!(custom_kind_reason(&unknown).is_none());
    }
}
