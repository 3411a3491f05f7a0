//! The `CanaryDaemonSet` as the controller reads it: its spec from JSON, a stored object
//! decoded one by one, and everything a pass derives from a spec (the plan's verdict, the
//! target, the desired DaemonSet and the reference JSON Patch).

use std::collections::BTreeMap;

use canary_kube_adapter::crd::{self, CanaryDaemonSet, CanaryDaemonSetSpec};
use canary_kube_adapter::desired::{
    OWNER_LABEL, RollingUpdateWrite, desired_daemon_set, set_max_unavailable, target_of,
    template_hash,
};
use canary_kube_adapter::meta::object_meta_modified;
use canary_kube_adapter::patch::daemon_set_patch;
use canary_kube_adapter::reconcile::check_spec;
use canary_predicates::k8s_openapi::api::apps::v1::DaemonSet;
use canary_predicates::{MaxUnavailableWire, live_max_unavailable};
use canary_sim::api::patch::apply_json_patch;
use canary_state_machine::MaxUnavailable;
use kube::api::DynamicObject;
use serde_json::json;

/// Fuzz target `spec`: the input as a `CanaryDaemonSetSpec` (JSON), then what a pass derives
/// from it (see [`derive`]).
pub fn spec(data: &[u8]) {
    if let Ok(spec) = serde_json::from_slice::<CanaryDaemonSetSpec>(data) {
        let mut cds = CanaryDaemonSet::new("agent", spec);
        cds.metadata.namespace = Some("default".to_owned());
        cds.metadata.uid = Some("uid-1".to_owned());
        cds.metadata.generation = Some(3);
        derive(&cds);
    }
}

/// Fuzz target `decode`: the input as a stored object (a `DynamicObject`, JSON) through
/// `crd::decode`, as the controller's watch does: an object that decodes keeps its metadata and
/// goes on to [`derive`]; one that does not is reported with a reason and a stand-in that
/// keeps the metadata and has an empty spec.
pub fn decode(data: &[u8]) {
    let Ok(object) = serde_json::from_slice::<DynamicObject>(data) else {
        return;
    };
    let stand_in = crd::stand_in(&object);
    assert_eq!(stand_in.metadata, object.metadata);
    assert!(stand_in.spec.target.version.is_empty());
    match crd::decode(object.clone()) {
        Ok(cds) => {
            assert_eq!(cds.metadata, object.metadata);
            if cds.metadata.name.is_some() && cds.metadata.namespace.is_some() {
                derive(&cds);
            }
        }
        Err(undecoded) => {
            assert!(!undecoded.why.is_empty());
            assert_eq!(undecoded.stand_in.metadata, object.metadata);
        }
    }
}

/// What must hold for any spec that decoded: the plan's verdict agrees with the strategy's
/// parsers; the default deployment id is the template hash; the desired DaemonSet carries the
/// target on itself and its pod template (the injected keys win) and the owner label; its
/// metadata compares equal to itself; a parsed `maxUnavailable` is written in its wire form and
/// read back as written; and the reference JSON Patch, applied by the simulator's JSON Patch to
/// an unrelated live DaemonSet, lands exactly on the desired labels, annotations and spec.
fn derive(cds: &CanaryDaemonSet) {
    let strategy = &cds.spec.strategy;
    let canary = strategy.canary_max_unavailable.parse::<MaxUnavailable>();
    let fast = strategy.fast_max_unavailable.parse::<MaxUnavailable>();
    if check_spec(cds).is_ok() {
        let from_container = cds.spec.target.from_container.as_deref();
        assert!(
            !cds.spec.target.version.is_empty() || from_container.is_some_and(|c| !c.is_empty())
        );
        assert!(canary.is_ok() && fast.is_ok() && canary != fast);
    }

    let Ok((keys, target)) = target_of(cds) else {
        return;
    };
    if let (None, Some(template)) = (&cds.spec.target.deployment_id, &cds.spec.template) {
        assert_eq!(
            Some(&target.deployment_id),
            template_hash(template).ok().as_ref()
        );
    }
    let Ok(desired) = desired_daemon_set(cds, &keys, &target) else {
        return;
    };
    // Duplicate keys among the three: the last one written wins.
    let mut expected = BTreeMap::new();
    expected.insert(keys.version.clone(), target.version.clone());
    expected.insert(keys.registry.clone(), target.registry.clone());
    expected.insert(keys.id.clone(), target.deployment_id.clone());
    let on_ds = desired.metadata.annotations.clone().unwrap_or_default();
    let on_pods = desired
        .spec
        .as_ref()
        .and_then(|spec| spec.template.metadata.as_ref())
        .and_then(|meta| meta.annotations.clone())
        .unwrap_or_default();
    for (key, value) in &expected {
        assert_eq!(on_ds.get(key), Some(value), "{key}");
        assert_eq!(on_pods.get(key), Some(value), "{key}");
    }
    let owner = desired
        .metadata
        .labels
        .as_ref()
        .and_then(|labels| labels.get(OWNER_LABEL));
    assert_eq!(owner.map(String::as_str), cds.metadata.name.as_deref());
    assert!(!object_meta_modified(&desired.metadata, &desired.metadata));

    for value in [canary, fast].into_iter().flatten() {
        for mode in [
            RollingUpdateWrite::KeepMaxSurge,
            RollingUpdateWrite::ReplaceStruct,
        ] {
            let mut written = desired.clone();
            set_max_unavailable(&mut written, value, mode);
            let field = written
                .spec
                .as_ref()
                .and_then(|spec| spec.update_strategy.as_ref())
                .and_then(|strategy| strategy.rolling_update.as_ref())
                .and_then(|rolling| rolling.max_unavailable.clone());
            assert_eq!(field, Some(value.to_int_or_string()));
            if MaxUnavailable::parse(&value.to_int_or_string()) == Ok(value) {
                assert!(live_max_unavailable(&written).matches(value));
            }
        }
    }

    let live = json!({
        "metadata": {"name": cds.daemon_set_name(), "namespace": "default", "generation": 7,
                     "labels": {"stale": "label"}, "annotations": {"stale": "annotation"}},
        "spec": {"selector": {"matchLabels": {"app": "old"}}, "template": {}}
    });
    let live_ds: DaemonSet = serde_json::from_value(live.clone()).expect("a literal DaemonSet");
    let patch = daemon_set_patch(&live_ds, &desired).expect("the live object has a generation");
    let body = serde_json::to_vec(&patch).expect("a patch serializes");
    let mut document = live;
    apply_json_patch(&mut document, &body).expect("the reference patch applies");
    let patched: DaemonSet = serde_json::from_value(document).expect("a DaemonSet");
    assert_eq!(patched.metadata.labels, desired.metadata.labels);
    assert_eq!(patched.metadata.annotations, desired.metadata.annotations);
    assert_eq!(patched.spec, desired.spec);
    assert_eq!(patched.metadata.generation, Some(7));
}
