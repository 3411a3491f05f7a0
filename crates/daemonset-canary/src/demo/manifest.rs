//! The CanaryDaemonSet manifests the demo applies, and the benches and tests with it: a node
//! agent tolerating every taint, whose pods the simulated kubelet runs with the behaviour its
//! annotation names, on either driver, with the demo's analysis when a scenario asks for it.
//! The [`scenario`](super::scenario) module adds each scenario's own settings over these.

#![expect(
    clippy::indexing_slicing,
    reason = "only serde_json::Value is indexed here: a missing key reads as Null, and writes \
              by index go to objects this module built"
)]

use super::scenario::{NAME, NAMESPACE};
use canary_state_machine::{Compatibility, Driver};
use serde_json::json;

/// Annotation the simulated kubelet reads to choose a pod's behaviour.
const BEHAVIOR_ANNOTATION: &str = "sim.canary.daemonset.dev/behavior";

/// The scenario's CanaryDaemonSet: a node agent tolerating every taint, at `version`, whose pods
/// the simulated kubelet runs with `behavior`.
/// In `KubeVirt` compatibility the crash-loop policy is KubeVirt's too (any restart of an
/// updated pod fails the canary), as virt-operator has it.
pub fn manifest(compatibility: Compatibility, version: &str, behavior: &str) -> serde_json::Value {
    manifest_for(
        compatibility,
        Driver::MaxUnavailable,
        None,
        version,
        behavior,
    )
}

/// The `spec.analysis` the demo judges its soak with: one metric, the agents' error ratio on
/// the nodes of the new revision (`agent_error_ratio{node=...}`), at most 5% and at most twice
/// the nodes still on the old one, measured every `interval` from the Prometheus at `address`.
pub fn error_ratio_analysis(address: &str, interval: &str) -> serde_json::Value {
    json!({
        "prometheus": {"address": address},
        "interval": interval,
        "metrics": [{
            "name": "error-ratio",
            "query": r#"max(agent_error_ratio{node=~"{{nodes}}"})"#,
            "baselineQuery": r#"max(agent_error_ratio{node=~"{{baselineNodes}}"})"#,
            "max": 0.05,
            "maxRatio": 2
        }]
    })
}

/// [`manifest`] with a driver: the Pods driver goes one canary node, a 30 s soak, half the
/// nodes at most 10% at a time, then the rest; with `topology_key`, those later steps go one
/// zone at a time.
pub fn manifest_for(
    compatibility: Compatibility,
    driver: Driver,
    topology_key: Option<&str>,
    version: &str,
    behavior: &str,
) -> serde_json::Value {
    let crash_loop_policy = match compatibility {
        Compatibility::KubeVirt => "KubeVirt",
        Compatibility::Fixed => "Strict",
    };
    let mut strategy = json!({
        "compatibility": compatibility.as_str(),
        "crashLoop": {"policy": crash_loop_policy}
    });
    if driver == Driver::Pods {
        strategy["driver"] = json!(driver.as_str());
        strategy["steps"] = json!([
            {"nodes": "1"},
            {"pause": {"duration": "30s"}},
            {"nodes": "50%", "maxUnavailable": "10%"}
        ]);
        if let Some(key) = topology_key {
            strategy["topologyKey"] = json!(key);
        }
    }
    json!({
        "apiVersion": "canary.daemonset.dev/v1alpha1",
        "kind": "CanaryDaemonSet",
        "metadata": {"name": NAME, "namespace": NAMESPACE},
        "spec": {
            "target": {"version": version, "registry": "registry.example"},
            "strategy": strategy,
            "template": {
                "metadata": {"labels": {"app.kubernetes.io/name": NAME}},
                "spec": {
                    "selector": {"matchLabels": {"app.kubernetes.io/name": NAME}},
                    "template": {
                        "metadata": {
                            "labels": {"app.kubernetes.io/name": NAME},
                            "annotations": {BEHAVIOR_ANNOTATION: behavior}
                        },
                        "spec": {
                            "tolerations": [{"operator": "Exists"}],
                            "containers": [{"name": "agent", "image": format!("registry.example/node-agent:{version}")}]
                        }
                    }
                }
            }
        }
    })
}
