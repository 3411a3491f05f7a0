//! Server-side defaulting and the DaemonSet template generation, applied on every write as the
//! API server does (`pkg/apis/apps/v1/defaults.go`, `pkg/apis/core/v1/defaults.go`,
//! `pkg/registry/apps/daemonset/strategy.go`).
//!
//! Only the defaults that matter to rollouts and to `kubectl apply` round trips are modelled:
//! the DaemonSet update strategy and history limit, and the common pod-spec and container
//! defaults. Because they are applied on every write, re-sending a defaulted object is a no-op.

use serde_json::{Map, Value, json};

use crate::store::ResourceKey;

/// The annotation carrying `spec.templateGeneration` in apps/v1.
pub const TEMPLATE_GENERATION_ANNOTATION: &str = "deprecated.daemonset.template.generation";

/// Applies the defaults of `key`'s kind to `object` (built-in kinds only).
pub fn apply_defaults(key: &ResourceKey, object: &mut Map<String, Value>) {
    match (key.group.as_str(), key.plural.as_str()) {
        ("apps", "daemonsets") => {
            if let Some(Value::Object(spec)) = object.get_mut("spec") {
                default_daemonset_spec(spec);
            }
        }
        ("", "pods") => {
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

/// Sets `deprecated.daemonset.template.generation`: 1 on create (unless the client set a
/// positive value); on update, the old value, plus one when `spec.template` changed.
pub fn set_template_generation(old: Option<&Map<String, Value>>, next: &mut Map<String, Value>) {
    let read = |object: &Map<String, Value>| -> Option<i64> {
        object
            .get("metadata")?
            .get("annotations")?
            .get(TEMPLATE_GENERATION_ANNOTATION)?
            .as_str()?
            .parse()
            .ok()
    };
    let generation = match old {
        None => read(next).filter(|g| *g >= 1).unwrap_or(1),
        Some(old) => {
            let previous = read(old).unwrap_or(1);
            let template =
                |o: &Map<String, Value>| o.get("spec").and_then(|s| s.get("template")).cloned();
            if template(old) == template(next) {
                previous
            } else {
                previous + 1
            }
        }
    };
    let meta = next
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(meta) = meta {
        let annotations = meta
            .entry("annotations")
            .or_insert_with(|| Value::Object(Map::new()));
        if !annotations.is_object() {
            *annotations = Value::Object(Map::new());
        }
        if let Value::Object(annotations) = annotations {
            annotations.insert(
                TEMPLATE_GENERATION_ANNOTATION.to_owned(),
                Value::String(generation.to_string()),
            );
        }
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

    #[test]
    fn template_generation_counts_template_changes() {
        let mut first = ds();
        set_template_generation(None, &mut first);
        assert_eq!(
            first["metadata"]["annotations"][TEMPLATE_GENERATION_ANNOTATION],
            "1"
        );
        let mut same = first.clone();
        same["spec"]["minReadySeconds"] = json!(5);
        set_template_generation(Some(&first), &mut same);
        assert_eq!(
            same["metadata"]["annotations"][TEMPLATE_GENERATION_ANNOTATION],
            "1"
        );
        let mut changed = same.clone();
        changed["spec"]["template"]["spec"]["containers"][0]["image"] = json!("repo/a:2.0");
        set_template_generation(Some(&same), &mut changed);
        assert_eq!(
            changed["metadata"]["annotations"][TEMPLATE_GENERATION_ANNOTATION],
            "2"
        );
    }
}
