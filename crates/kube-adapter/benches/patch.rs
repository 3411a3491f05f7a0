//! Building the DaemonSet write of one reconcile: the desired DaemonSet from a CanaryDaemonSet
//! (template + injected target annotations, owner label and owner reference, maxUnavailable),
//! the reference JSON Patch against the cached DaemonSet, and its serialized request body.
//!
//! Input: the real node-exporter DaemonSet (testdata/daemonsets/node-exporter.yaml, two
//! containers, hostNetwork, securityContext) as the template, moving from `v1` to `v2`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;

use canary_kube_adapter::crd::{CanaryDaemonSet, CanaryDaemonSetSpec};
use canary_kube_adapter::desired::{
    RollingUpdateWrite, TargetAnnotations, desired_daemon_set, set_max_unavailable,
};
use canary_kube_adapter::patch::daemon_set_patch;
use criterion::{Criterion, criterion_group, criterion_main};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

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
fn desired(cds: &CanaryDaemonSet, max_unavailable: IntOrString) -> DaemonSet {
    let target = TargetAnnotations::of(cds).unwrap();
    let mut ds = desired_daemon_set(cds, &target).unwrap();
    set_max_unavailable(&mut ds, max_unavailable, RollingUpdateWrite::KeepMaxSurge);
    ds
}

fn bench_patch(c: &mut Criterion) {
    let mut live = desired(&canary_daemon_set("v1"), IntOrString::Int(1));
    live.metadata.generation = Some(7);
    let next = canary_daemon_set("v2");
    let wanted = desired(&next, IntOrString::Int(1));

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
            let wanted = desired(black_box(&next), IntOrString::Int(1));
            let patch = daemon_set_patch(black_box(&live), &wanted).unwrap();
            serde_json::to_vec(&patch).unwrap()
        })
    });
    group.finish();
}

criterion_group!(benches, bench_patch);
criterion_main!(benches);
