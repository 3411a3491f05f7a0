//! The TLS work of one reconcile on a virt-handler-like DaemonSet: clone the desired DaemonSet,
//! apply the preamble, observe, pick and apply the next step. This runs on every reconcile of
//! every CanaryDaemonSet with the migration enabled, so it should stay far below a millisecond.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

use std::hint::black_box;

use canary_tls_migration::{
    TlsConfig, apply_preamble, apply_step, observe, prepare_for_create, tls_step,
};
use criterion::{Criterion, criterion_group, criterion_main};
use k8s_openapi::api::apps::v1::DaemonSet;

/// virt-handler with its cert volume and mount, 20 other volumes and mounts, 14 args.
fn handler() -> DaemonSet {
    let mut volumes = vec![serde_json::json!({
        "name": "kubevirt-virt-handler-certs",
        "secret": {"secretName": "kubevirt-virt-handler-certs"}
    })];
    let mut mounts = vec![serde_json::json!({
        "name": "kubevirt-virt-handler-certs",
        "mountPath": "/etc/virt-handler/clientcertificates"
    })];
    for i in 0..20 {
        volumes.push(serde_json::json!({"name": format!("v{i}"), "hostPath": {"path": format!("/var/v{i}")}}));
        mounts.push(serde_json::json!({"name": format!("v{i}"), "mountPath": format!("/v{i}")}));
    }
    serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": "virt-handler",
            "labels": {"kubevirt.io/supports-migration-cn-types": "true"}
        },
        "spec": {
            "selector": {"matchLabels": {"kubevirt.io": "virt-handler"}},
            "template": {"spec": {
                "containers": [{
                    "name": "virt-handler",
                    "command": ["virt-handler"],
                    "args": ["--port", "8443", "--hostname-override", "$(NODE_NAME)",
                             "--pod-ip-address", "$(MY_POD_IP)", "--max-metric-requests", "3",
                             "--console-server-port", "8186", "--graceful-shutdown-seconds", "315",
                             "-v", "2"],
                    "volumeMounts": mounts
                }],
                "volumes": volumes
            }}
        }
    }))
    .unwrap()
}

fn reconcile(live: &DaemonSet, built: &DaemonSet, cfg: &TlsConfig) -> DaemonSet {
    let mut desired = built.clone();
    apply_preamble(live, &mut desired, cfg).unwrap();
    if let Some(step) = tls_step(observe(live, &desired, cfg).unwrap()) {
        apply_step(&mut desired, step, cfg).unwrap();
    }
    desired
}

fn bench(c: &mut Criterion) {
    let cfg = TlsConfig::default();
    let built = handler();
    let mut migrated = built.clone();
    prepare_for_create(&mut migrated, &cfg).unwrap();

    c.bench_function("reconcile_insert_flag_step", |b| {
        b.iter(|| reconcile(black_box(&built), black_box(&built), &cfg));
    });
    c.bench_function("reconcile_migrated_quiet", |b| {
        b.iter(|| reconcile(black_box(&migrated), black_box(&built), &cfg));
    });
    c.bench_function("prepare_for_create", |b| {
        b.iter(|| {
            let mut desired = black_box(&built).clone();
            prepare_for_create(&mut desired, &cfg).unwrap();
            desired
        });
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
