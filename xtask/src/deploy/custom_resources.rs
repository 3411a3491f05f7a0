//! Custom resources: CanaryDaemonSets are checked strictly against the schema and CEL rules of
//! the CRD in deploy/crd (cel-python, in the tools' virtualenv), and the CRD must reject what its
//! rules are there for (a target with both or neither of `version` and `fromContainer`);
//! ServiceMonitors must select the metrics Service and name ports it has (in the kustomize
//! builds, and in each render of the chart).

#![expect(
    clippy::indexing_slicing,
    reason = "only serde_json::Value is indexed here: a missing key or index reads as Null, and \
              writes by index go to objects this module built"
)]

use super::{Lint, describe, to_multi_document};
use anyhow::{Context, Result, bail, ensure};
use serde_json::Value;
use xshell::cmd;

/// Validates custom resources against their CRD schemas.
pub(super) const CUSTOM_RESOURCE_CHECK: &str = include_str!("check_custom_resources.py");

pub(super) fn check(context: &Lint) -> Result<()> {
    let crds: Vec<Value> = context
        .documents_of_kind("CustomResourceDefinition")
        .cloned()
        .collect();
    let canaries: Vec<Value> = context
        .documents_of_kind("CanaryDaemonSet")
        .cloned()
        .collect();
    ensure!(!crds.is_empty(), "no CustomResourceDefinition in any build");
    let Some(first_canary) = canaries.first() else {
        bail!("no CanaryDaemonSet in any build");
    };
    let crd_file = context.write("crds.yaml", &to_multi_document(&crds)?)?;
    let resource_file = context.write("canarydaemonsets.yaml", &to_multi_document(&canaries)?)?;
    let script = context.write("check_custom_resources.py", CUSTOM_RESOURCE_CHECK)?;
    let python = context.venv_tool("python");
    cmd!(context.sh, "{python} {script} {crd_file} {resource_file}")
        .run()
        .context("a CanaryDaemonSet does not match the CRD schema")?;
    let rejected = context.write(
        "must-be-rejected.yaml",
        &to_multi_document(&bad_targets(first_canary))?,
    )?;
    let output = cmd!(context.sh, "{python} {script} {crd_file} {rejected}")
        .ignore_status()
        .quiet()
        .output()?;
    let report = String::from_utf8_lossy(&output.stdout);
    ensure!(
        !output.status.success() && report.matches(TARGET_RULE_MESSAGE).count() == 2,
        "the CRD should reject a target with both and with neither of version and fromContainer ({TARGET_RULE_MESSAGE:?}):\n{report}"
    );
    eprintln!("ok the CRD rejects a target with both, or neither, of version and fromContainer");
    let monitors: Vec<&Value> = context.documents_of_kind("ServiceMonitor").collect();
    ensure!(!monitors.is_empty(), "no ServiceMonitor in any build");
    let services: Vec<&Value> = context.documents_of_kind("Service").collect();
    for monitor in monitors {
        check_service_monitor(monitor, &services)?;
        eprintln!("ok {} scrapes a Service port by name", describe(monitor));
    }
    super::helm::check_service_monitors(context)
}

/// The message of the CRD's rule on `spec.target`.
const TARGET_RULE_MESSAGE: &str = "set exactly one of target.version and target.fromContainer";

/// `example` twice, its target naming both a version and a container, then neither.
fn bad_targets(example: &Value) -> Vec<Value> {
    let mut both = example.clone();
    both["metadata"]["name"] = "both-version-and-from-container".into();
    both["spec"]["target"]["version"] = "v1".into();
    both["spec"]["target"]["fromContainer"] = "agent".into();
    let mut neither = example.clone();
    neither["metadata"]["name"] = "neither-version-nor-from-container".into();
    if let Some(target) = neither["spec"]["target"].as_object_mut() {
        target.remove("version");
        target.remove("fromContainer");
    }
    vec![both, neither]
}

/// A ServiceMonitor must select a Service in its namespace and name ports that Service has.
pub(super) fn check_service_monitor(monitor: &Value, services: &[&Value]) -> Result<()> {
    let namespace = &monitor["metadata"]["namespace"];
    let wanted = monitor["spec"]["selector"]["matchLabels"]
        .as_object()
        .with_context(|| format!("{} has no selector.matchLabels", describe(monitor)))?;
    let selected: Vec<&&Value> = services
        .iter()
        .filter(|s| &s["metadata"]["namespace"] == namespace)
        .filter(|s| {
            wanted
                .iter()
                .all(|(key, value)| &s["metadata"]["labels"][key] == value)
        })
        .collect();
    ensure!(
        !selected.is_empty(),
        "{} selects no Service",
        describe(monitor)
    );
    let endpoints = monitor["spec"]["endpoints"]
        .as_array()
        .filter(|e| !e.is_empty())
        .with_context(|| format!("{} has no endpoints", describe(monitor)))?;
    for endpoint in endpoints {
        let port = endpoint["port"].as_str().with_context(|| {
            format!("{} has an endpoint without a port name", describe(monitor))
        })?;
        for service in &selected {
            let has_port = service["spec"]["ports"]
                .as_array()
                .is_some_and(|ports| ports.iter().any(|p| p["name"] == port));
            ensure!(
                has_port,
                "{} scrapes port {port:?}, which {} lacks",
                describe(monitor),
                describe(service)
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn service_monitor_must_select_a_service_with_its_port() {
        let service = json!({
            "kind": "Service",
            "metadata": { "name": "m", "namespace": "ns", "labels": { "app": "x" } },
            "spec": { "ports": [{ "name": "http-metrics", "port": 8080 }] },
        });
        let monitor = |port: &str, app: &str| {
            json!({
                "kind": "ServiceMonitor",
                "metadata": { "name": "sm", "namespace": "ns" },
                "spec": {
                    "selector": { "matchLabels": { "app": app } },
                    "endpoints": [{ "port": port }],
                },
            })
        };
        assert!(check_service_monitor(&monitor("http-metrics", "x"), &[&service]).is_ok());
        assert!(check_service_monitor(&monitor("metrics", "x"), &[&service]).is_err());
        assert!(check_service_monitor(&monitor("http-metrics", "y"), &[&service]).is_err());
    }
}
