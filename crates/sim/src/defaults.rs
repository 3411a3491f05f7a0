//! Server-side defaulting, applied on every create and update as the API server's decoder does
//! (`pkg/apis/apps/v1/defaults.go`, `pkg/apis/core/v1/defaults.go`); the write strategies
//! ([`crate::strategy`]) call it as their defaulting hook.
//!
//! Only the defaults that matter to rollouts and to `kubectl apply` round trips are modelled:
//! the DaemonSet update strategy and history limit, and the common pod-spec and container
//! defaults. Because they are applied on every write, re-sending a defaulted object is a no-op.

use serde_json::{Map, Value, json};

use crate::registry::{BuiltinKind, ResourceKey};

/// Applies the defaults of `key`'s kind to `object` (built-in kinds only).
pub fn apply_defaults(key: &ResourceKey, object: &mut Map<String, Value>) {
    match key.builtin_kind() {
        Some(BuiltinKind::DaemonSet) => {
            if let Some(Value::Object(spec)) = object.get_mut("spec") {
                default_daemonset_spec(spec);
            }
        }
        Some(BuiltinKind::Pod) => {
            if let Some(Value::Object(spec)) = object.get_mut("spec") {
                default_pod_spec(spec);
            }
        }
        _ => {}
    }
}

fn set_default(map: &mut Map<String, Value>, field: &str, value: Value) {
    if map.get(field).is_none_or(Value::is_null) {
        map.insert(field.to_owned(), value);
    }
}

fn default_daemonset_spec(spec: &mut Map<String, Value>) {
    set_default(spec, "revisionHistoryLimit", json!(10));
    set_default(spec, "updateStrategy", json!({}));
    if let Some(Value::Object(strategy)) = spec.get_mut("updateStrategy") {
        set_default(strategy, "type", json!("RollingUpdate"));
        if strategy["type"] == "RollingUpdate" {
            set_default(strategy, "rollingUpdate", json!({}));
            if let Some(Value::Object(rolling)) = strategy.get_mut("rollingUpdate") {
                set_default(rolling, "maxUnavailable", json!(1));
                set_default(rolling, "maxSurge", json!(0));
            }
        }
    }
    if let Some(Value::Object(template)) = spec.get_mut("template")
        && let Some(Value::Object(pod_spec)) = template.get_mut("spec")
    {
        default_pod_spec(pod_spec);
    }
}

fn default_pod_spec(spec: &mut Map<String, Value>) {
    set_default(spec, "restartPolicy", json!("Always"));
    set_default(spec, "terminationGracePeriodSeconds", json!(30));
    set_default(spec, "dnsPolicy", json!("ClusterFirst"));
    set_default(spec, "schedulerName", json!("default-scheduler"));
    set_default(spec, "securityContext", json!({}));
    for list in ["containers", "initContainers"] {
        if let Some(Value::Array(containers)) = spec.get_mut(list) {
            for container in containers.iter_mut().filter_map(Value::as_object_mut) {
                default_container(container);
            }
        }
    }
}

fn default_container(container: &mut Map<String, Value>) {
    set_default(
        container,
        "terminationMessagePath",
        json!("/dev/termination-log"),
    );
    set_default(container, "terminationMessagePolicy", json!("File"));
    let image = container.get("image").and_then(Value::as_str).unwrap_or("");
    let pull_policy = if image_tag_is_latest(image) {
        "Always"
    } else {
        "IfNotPresent"
    };
    set_default(container, "imagePullPolicy", json!(pull_policy));
    if let Some(Value::Array(ports)) = container.get_mut("ports") {
        for port in ports.iter_mut().filter_map(Value::as_object_mut) {
            set_default(port, "protocol", json!("TCP"));
        }
    }
}

/// `latest` or no tag (and no digest) pulls always (`pkg/apis/core/v1/defaults.go`).
fn image_tag_is_latest(image: &str) -> bool {
    if image.contains('@') {
        return false;
    }
    let last = image.rsplit('/').next().unwrap_or(image);
    match last.split_once(':') {
        None => true,
        Some((_, tag)) => tag == "latest",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ds() -> Map<String, Value> {
        let value = json!({"metadata": {"name": "a"}, "spec": {"template": {"spec": {"containers": [
            {"name": "a", "image": "repo/a:1.0", "ports": [{"containerPort": 80}]},
            {"name": "b", "image": "b"}]}}}});
        match value {
            Value::Object(map) => map,
            _ => unreachable!(),
        }
    }

    #[test]
    fn daemonset_defaults() {
        let mut object = ds();
        apply_defaults(&ResourceKey::new("apps", "v1", "daemonsets"), &mut object);
        let spec = &object["spec"];
        assert_eq!(
            spec["updateStrategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}})
        );
        assert_eq!(spec["revisionHistoryLimit"], 10);
        let pod = &spec["template"]["spec"];
        assert_eq!(pod["restartPolicy"], "Always");
        assert_eq!(pod["terminationGracePeriodSeconds"], 30);
        assert_eq!(pod["containers"][0]["imagePullPolicy"], "IfNotPresent");
        assert_eq!(pod["containers"][1]["imagePullPolicy"], "Always");
        assert_eq!(pod["containers"][0]["ports"][0]["protocol"], "TCP");
        let once = object.clone();
        apply_defaults(&ResourceKey::new("apps", "v1", "daemonsets"), &mut object);
        assert_eq!(object, once, "idempotent");
    }

    #[test]
    fn on_delete_gets_no_rolling_update_block() {
        let mut object = ds();
        object["spec"]["updateStrategy"] = json!({"type": "OnDelete"});
        apply_defaults(&ResourceKey::new("apps", "v1", "daemonsets"), &mut object);
        assert_eq!(
            object["spec"]["updateStrategy"],
            json!({"type": "OnDelete"})
        );
    }
}
