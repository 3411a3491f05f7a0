//! Fuzzing (proptest) of every external input the controller parses from a `CanaryDaemonSet`:
//! the spec as JSON (well-formed, mutated and garbage), the strategy's maxUnavailable strings,
//! and annotation keys and values.
//!
//! Properties: nothing panics; a spec that deserializes yields a desired DaemonSet whose
//! injected target wins over the template's own annotations on both the DaemonSet and the pod
//! template; the reference JSON Patch built from any live DaemonSet applies and lands exactly
//! on the desired labels, annotations and spec; the maxUnavailable parser and the CRD's CEL rule
//! agree except for the documented differences.
//!
//! Case counts come from `PROPTEST_CASES` (default below); `cargo xtask soak` raises it.

use std::collections::BTreeMap;

use canary_kube_adapter::crd::{CanaryDaemonSet, CanaryDaemonSetSpec, MAX_UNAVAILABLE_RULE};
use canary_kube_adapter::desired::{
    OWNER_LABEL, RollingUpdateWrite, desired_daemon_set, set_max_unavailable, target_of,
    template_hash,
};
use canary_kube_adapter::meta::object_meta_modified;
use canary_kube_adapter::patch::daemon_set_patch;
use canary_state_machine::MaxUnavailable;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use proptest::prelude::*;
use serde_json::{Value, json};

/// Default cases per property (overridden by `PROPTEST_CASES`).
const DEFAULT_CASES: u32 = 512;

fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_CASES);
    ProptestConfig {
        cases,
        ..ProptestConfig::default()
    }
}

/// Strings a user may type for maxUnavailable: valid shapes, near misses and noise.
fn max_unavailable_text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[0-9]{1,3}%",
        "[0-9]{1,12}",
        "[-+ ]?[0-9]{0,4}[% ]{0,2}",
        "0[0-9]{1,3}%?",
        any::<String>(),
    ]
}

/// Annotation and label keys: Kubernetes-like, colliding with the defaults, or arbitrary.
fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z]{1,8}(\\.[a-z]{1,5})?/[a-z-]{1,12}",
        Just("kubevirt.io/install-strategy-version".to_owned()),
        Just("kubevirt.io/install-strategy-registry".to_owned()),
        Just("kubevirt.io/install-strategy-identifier".to_owned()),
        Just(OWNER_LABEL.to_owned()),
        any::<String>(),
    ]
}

fn string_map() -> impl Strategy<Value = BTreeMap<String, String>> {
    prop::collection::btree_map(key(), any::<String>(), 0..4)
}

/// A JSON spec close to the schema, with every optional part present or not.
fn spec_json() -> impl Strategy<Value = Value> {
    (
        (string_map(), string_map(), "[a-z]{1,6}"),
        (any::<String>(), any::<String>(), prop::option::of(any::<String>())),
        prop::option::of((key(), key(), key())),
        (max_unavailable_text(), max_unavailable_text()),
        (prop_oneof![Just("KubeVirt"), Just("Fixed")], prop_oneof![Just("KubeVirt"), Just("Strict")]),
        (any::<i32>(), any::<bool>(), any::<i64>()),
        (any::<bool>(), prop::option::of("[a-z]{1,6}")),
        prop::option::of(prop_oneof![
            Just(json!({"type": "OnDelete"})),
            Just(json!({"type": "RollingUpdate"})),
            Just(json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "10%", "maxSurge": 0}})),
            Just(json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 3}})),
        ]),
    )
        .prop_map(
            |(
                (labels, annotations, app),
                (version, registry, deployment_id),
                keys,
                (canary, fast),
                (compatibility, policy),
                (threshold, init, deadline),
                (tls, container),
                update_strategy,
            )| {
                let mut ds_spec = json!({
                    "selector": {"matchLabels": {"app": app}},
                    "template": {
                        "metadata": {"labels": {"app": app}, "annotations": annotations.clone()},
                        "spec": {"containers": [{"name": "agent", "image": format!("{app}:v1"),
                                                 "args": ["--migration-cn-types", "migration"]}]}
                    }
                });
                if let Some(strategy) = update_strategy {
                    ds_spec["updateStrategy"] = strategy;
                }
                let mut spec = json!({
                    "template": {"metadata": {"labels": labels, "annotations": annotations},
                                 "spec": ds_spec},
                    "target": {"version": version, "registry": registry},
                    "strategy": {
                        "compatibility": compatibility,
                        "canaryMaxUnavailable": canary,
                        "fastMaxUnavailable": fast,
                        "crashLoop": {"policy": policy, "restartThreshold": threshold,
                                      "includeInitContainers": init},
                        "progressDeadlineSeconds": deadline
                    },
                    "tlsMigration": {"enabled": tls, "container": container}
                });
                if let Some(id) = deployment_id {
                    spec["target"]["deploymentId"] = json!(id);
                }
                // No version written: take it from the container's image tag instead.
                if version.is_empty() {
                    spec["target"] = json!({"fromContainer": "agent", "registry": registry});
                }
                if let Some((v, r, i)) = keys {
                    spec["annotationKeys"] = json!({"version": v, "registry": r, "id": i});
                }
                spec
            },
        )
}

/// Replaces one value somewhere in `value` (chosen by `path`) with `replacement`.
fn mutate(value: &mut Value, path: &[usize], replacement: Value) {
    let Some((step, rest)) = path.split_first() else {
        *value = replacement;
        return;
    };
    let child = match value {
        Value::Object(map) if !map.is_empty() => {
            let key = map.keys().nth(step % map.len()).cloned();
            key.and_then(|k| map.get_mut(&k))
        }
        Value::Array(items) if !items.is_empty() => {
            let len = items.len();
            items.get_mut(step % len)
        }
        _ => None,
    };
    match child {
        Some(child) => mutate(child, rest, replacement),
        None => *value = replacement,
    }
}

fn json_leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>().prop_map(|f| json!(f)),
        any::<String>().prop_map(Value::String),
        Just(json!([])),
        Just(json!({})),
    ]
}

fn cds_from(spec: CanaryDaemonSetSpec) -> CanaryDaemonSet {
    let mut cds = CanaryDaemonSet::new("agent", spec);
    cds.metadata.namespace = Some("default".to_owned());
    cds.metadata.uid = Some("uid-1".to_owned());
    cds
}

/// Checks what must hold for any spec that deserialized.
fn check_desired(spec: CanaryDaemonSetSpec, live_generation: i64) -> Result<(), TestCaseError> {
    let cds = cds_from(spec);
    let (keys, target) = match target_of(&cds) {
        Ok(resolved) => resolved,
        // A target naming no version (or both, or a container that is not there) cannot be
        // resolved: the controller reports it as InvalidSpec, the schema refuses most of them.
        Err(canary_kube_adapter::Error::InvalidSpec(_)) => {
            let target = &cds.spec.target;
            let containers = cds
                .spec
                .template
                .as_ref()
                .and_then(|t| t.spec.template.spec.as_ref())
                .map(|pod| pod.containers.clone())
                .unwrap_or_default();
            let resolvable = match (target.version.is_empty(), &target.from_container) {
                (false, None) => true,
                (true, Some(name)) => containers.iter().any(|c| {
                    &c.name == name
                        && c.image
                            .as_deref()
                            .and_then(canary_kube_adapter::desired::image_tag)
                            .is_some()
                }),
                _ => false,
            };
            prop_assert!(!resolvable, "a resolvable target was refused: {target:?}");
            return Ok(());
        }
        Err(e) => return Err(TestCaseError::fail(e.to_string())),
    };
    // A referenced DaemonSet has no desired DaemonSet: nothing is built, nothing is written.
    let Some(template) = &cds.spec.template else {
        prop_assert!(desired_daemon_set(&cds, &keys, &target).is_err());
        return Ok(());
    };
    // The default deployment id is a pure function of the template.
    if cds.spec.target.deployment_id.is_none() {
        prop_assert_eq!(
            &target.deployment_id,
            &template_hash(template).map_err(|e| TestCaseError::fail(e.to_string()))?
        );
    }
    let mut desired =
        desired_daemon_set(&cds, &keys, &target).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let ds_annotations = desired.metadata.annotations.clone().unwrap_or_default();
    let pod_annotations = desired
        .spec
        .as_ref()
        .and_then(|s| s.template.metadata.as_ref())
        .and_then(|m| m.annotations.clone())
        .unwrap_or_default();
    // The injected target wins over a template annotation with the same key; with duplicate
    // keys among the three, the last pair written wins.
    let mut expected = BTreeMap::new();
    for (k, v) in [
        (&keys.version, &target.version),
        (&keys.registry, &target.registry),
        (&keys.id, &target.deployment_id),
    ] {
        expected.insert(k.clone(), v.clone());
    }
    for (k, v) in &expected {
        prop_assert_eq!(ds_annotations.get(k), Some(v));
        prop_assert_eq!(pod_annotations.get(k), Some(v));
    }
    prop_assert_eq!(
        desired
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(OWNER_LABEL)),
        Some(&"agent".to_owned())
    );
    prop_assert!(!object_meta_modified(&desired.metadata, &desired.metadata));

    // Any maxUnavailable the strategy parses round-trips through the DaemonSet.
    if let Ok(value) = cds
        .spec
        .strategy
        .canary_max_unavailable
        .parse::<MaxUnavailable>()
    {
        let wire = match value {
            MaxUnavailable::Count(n) => IntOrString::Int(i32::try_from(n).unwrap_or(i32::MAX)),
            MaxUnavailable::Percent(_) => IntOrString::String(value.to_string()),
        };
        set_max_unavailable(&mut desired, value, RollingUpdateWrite::KeepMaxSurge);
        let written = desired
            .spec
            .as_ref()
            .and_then(|s| s.update_strategy.as_ref())
            .and_then(|u| u.rolling_update.as_ref())
            .and_then(|r| r.max_unavailable.clone());
        prop_assert_eq!(written, Some(wire));
    }

    // The reference patch from an unrelated live object lands exactly on desired.
    let live: DaemonSet = serde_json::from_value(json!({
        "metadata": {"name": cds.daemon_set_name(), "namespace": "default",
                     "generation": live_generation,
                     "labels": {"stale": "label"}, "annotations": {"stale": "annotation"}},
        "spec": {"selector": {"matchLabels": {"app": "old"}}, "template": {}}
    }))
    .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let patch =
        daemon_set_patch(&live, &desired).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let mut doc = serde_json::to_value(&live).map_err(|e| TestCaseError::fail(e.to_string()))?;
    json_patch::patch(&mut doc, &patch).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let patched: DaemonSet =
        serde_json::from_value(doc).map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(&patched.metadata.labels, &desired.metadata.labels);
    prop_assert_eq!(&patched.metadata.annotations, &desired.metadata.annotations);
    prop_assert_eq!(&patched.spec, &desired.spec);
    prop_assert_eq!(patched.metadata.generation, Some(live_generation));
    Ok(())
}

/// The CRD's CEL rule `^([1-9][0-9]*|([1-9][0-9]?|100)%)$`, by hand.
fn cel_rule_admits(text: &str) -> bool {
    let nonzero_leading = |digits: &str| {
        !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) && !digits.starts_with('0')
    };
    match text.strip_suffix('%') {
        Some(number) => nonzero_leading(number) && (number.len() <= 2 || number == "100"),
        None => nonzero_leading(text) && text.len() <= 9,
    }
}

proptest! {
    #![proptest_config(config())]

    /// Well-formed specs: every derived object is consistent.
    #[test]
    fn well_formed_specs_build_consistent_desired_state(spec in spec_json(), generation in 1..i64::MAX) {
        match serde_json::from_value::<CanaryDaemonSetSpec>(spec) {
            Ok(spec) => check_desired(spec, generation)?,
            // Only unrepresentable values may fail (for example an i64 deadline stays valid,
            // so a failure here is a schema mismatch of the generator).
            Err(e) => prop_assert!(false, "generated spec did not deserialize: {e}"),
        }
    }

    /// Mutated specs (one value anywhere replaced by any JSON leaf): deserialization either
    /// fails cleanly or yields a spec with the same guarantees.
    #[test]
    fn mutated_specs_never_panic(
        spec in spec_json(),
        path in prop::collection::vec(any::<usize>(), 1..6),
        leaf in json_leaf(),
    ) {
        let mut spec = spec;
        mutate(&mut spec, &path, leaf);
        if let Ok(spec) = serde_json::from_value::<CanaryDaemonSetSpec>(spec) {
            check_desired(spec, 1)?;
        }
    }

    /// Arbitrary bytes as a whole CanaryDaemonSet (JSON and YAML) never panic.
    #[test]
    fn arbitrary_documents_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let _ = serde_json::from_slice::<CanaryDaemonSet>(&bytes);
        if let Ok(text) = std::str::from_utf8(&bytes) {
            let _ = serde_saphyr::from_str::<CanaryDaemonSet>(text);
        }
    }

    /// The parser accepts everything the CRD admits (counts of at most 9 digits always fit);
    /// it also accepts leading zeros ("01", "05%") and longer counts that fit 32 bits, which
    /// the CRD never lets through, so they cannot reach it.
    #[test]
    fn parser_agrees_with_the_crd_rule(text in max_unavailable_text()) {
        let parsed = text.parse::<MaxUnavailable>();
        if cel_rule_admits(&text) {
            prop_assert!(parsed.is_ok(), "{:?}: {:?}", text, parsed);
        } else if let Ok(value) = parsed {
            let long_count = !text.ends_with('%') && text.len() > 9;
            prop_assert!(text.starts_with('0') || long_count, "{:?} parsed as {:?} but the CRD rejects it", text, value);
        }
        if let Ok(value) = text.parse::<MaxUnavailable>() {
            prop_assert!(value.validate().is_ok());
            prop_assert_eq!(value.to_string().parse::<MaxUnavailable>(), Ok(value));
        }
    }
}

#[test]
fn the_cel_rule_model_matches_the_published_rule() {
    // Guards the hand-written model above against a change of the CRD's rule.
    assert_eq!(
        MAX_UNAVAILABLE_RULE,
        "self.matches('^([1-9][0-9]{0,8}|([1-9][0-9]?|100)%)$')"
    );
    for admitted in ["1", "10", "1%", "99%", "100%", "999999999"] {
        assert!(cel_rule_admits(admitted), "{admitted}");
    }
    for rejected in [
        "0",
        "01",
        "0%",
        "101%",
        "100 %",
        "",
        "%",
        "-1",
        "1.5",
        "3000000000",
    ] {
        assert!(!cel_rule_admits(rejected), "{rejected}");
    }
}
