//! Building the DaemonSet write of one reconcile: the desired DaemonSet from a CanaryDaemonSet
//! (template + injected target annotations, owner label and owner reference, maxUnavailable),
//! the reference JSON Patch against the cached DaemonSet, and its serialized request body.
//!
//! Input: the real node-exporter DaemonSet (testdata/daemonsets/node-exporter.yaml, two
//! containers, hostNetwork, securityContext) as the template, moving from `v1` to `v2`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

use std::hint::black_box;

use canary_kube_adapter::crd::{CanaryDaemonSet, CanaryDaemonSetSpec};
use canary_kube_adapter::desired::{
    RollingUpdateWrite, desired_daemon_set, set_max_unavailable, target_of,
};
use canary_kube_adapter::patch::daemon_set_patch;
use canary_state_machine::MaxUnavailable;
use criterion::{Criterion, criterion_group, criterion_main};
use k8s_openapi::api::apps::v1::DaemonSet;

/// A CanaryDaemonSet whose template is the node-exporter fixture, targeting `version`.
fn canary_daemon_set(version: &str) -> CanaryDaemonSet {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../testdata/daemonsets/node-exporter.yaml"
    );
    let text = std::fs::read_to_string(path).unwrap();
    let fixture: DaemonSet = serde_saphyr::from_str(&text).unwrap();
    let spec: CanaryDaemonSetSpec = serde_json::from_value(serde_json::json!({
        "template": {
            "metadata": {"labels": fixture.metadata.labels.unwrap_or_default()},
            "spec": fixture.spec.unwrap(),
        },
        "target": {"version": version, "registry": "quay.io/prometheus"},
    }))
    .unwrap();
    let mut cds = CanaryDaemonSet::new("node-exporter", spec);
    cds.metadata.namespace = Some("monitoring".into());
    cds.metadata.uid = Some("5d7e8f0a-1b2c-4d3e-9f4a-0b1c2d3e4f5a".into());
    cds
}

/// The DaemonSet the controller writes for `cds` at `max_unavailable`.
fn desired(cds: &CanaryDaemonSet, max_unavailable: MaxUnavailable) -> DaemonSet {
    let (keys, target) = target_of(cds).unwrap();
    let mut ds = desired_daemon_set(cds, &keys, &target).unwrap();
    set_max_unavailable(&mut ds, max_unavailable, RollingUpdateWrite::KeepMaxSurge);
    ds
}

fn bench_patch(c: &mut Criterion) {
    let mut live = desired(&canary_daemon_set("v1"), MaxUnavailable::ONE);
    live.metadata.generation = Some(7);
    let next = canary_daemon_set("v2");
    let wanted = desired(&next, MaxUnavailable::ONE);

    // The patch must carry the new target, or the figure measures the wrong thing.
    let body = serde_json::to_value(daemon_set_patch(&live, &wanted).unwrap()).unwrap();
    assert_eq!(body[0]["value"], 7);
    assert_eq!(
        body[2]["value"]["kubevirt.io/install-strategy-version"],
        "v2"
    );

    let mut group = c.benchmark_group("daemon_set_write_node_exporter");
    group.bench_function("json_patch_only", |b| {
        b.iter(|| daemon_set_patch(black_box(&live), black_box(&wanted)).unwrap())
    });
    group.bench_function("desired_patch_and_body", |b| {
        b.iter(|| {
            let wanted = desired(black_box(&next), MaxUnavailable::ONE);
            let patch = daemon_set_patch(black_box(&live), &wanted).unwrap();
            serde_json::to_vec(&patch).unwrap()
        })
    });
    group.finish();
}

criterion_group!(benches, bench_patch);
criterion_main!(benches);
