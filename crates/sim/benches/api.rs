//! Throughput of the simulated API server through an in-process `kube::Client`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    missing_docs
)]

use std::hint::black_box;

use canary_sim::Sim;
use criterion::{Criterion, criterion_group, criterion_main};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

fn pod(i: usize) -> Pod {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../testdata/pods/daemonset-pod-healthy.yaml"
    );
    let mut pod: Pod = serde_saphyr::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    pod.metadata.name = Some(format!("agent-{i}"));
    pod.metadata.namespace = Some("default".into());
    pod.metadata.resource_version = None;
    pod.metadata.uid = None;
    pod.spec.as_mut().unwrap().node_name = Some(format!("node-{i}"));
    pod
}

fn bench_api(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let sim = runtime.block_on(async { Sim::builder().nodes(0).build().unwrap() });
    let client = runtime.block_on(async { sim.client() });
    let template = pod(0);
    for i in 0..5000 {
        let mut p = template.clone();
        p.metadata.name = Some(format!("agent-{i}"));
        p.spec.as_mut().unwrap().node_name = Some(format!("node-{i}"));
        sim.store().create(&p).unwrap();
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    c.bench_function("list 5000 pods (kube::Client, in process)", |b| {
        b.iter(|| {
            runtime.block_on(async {
                black_box(pods.list(&ListParams::default()).await.unwrap().items.len())
            })
        })
    });
    c.bench_function("list pods by spec.nodeName of 5000", |b| {
        let params = ListParams::default().fields("spec.nodeName=node-4321");
        b.iter(|| {
            runtime.block_on(async { black_box(pods.list(&params).await.unwrap().items.len()) })
        })
    });

    let daemonsets: Api<DaemonSet> = Api::namespaced(client, "default");
    let ds: DaemonSet = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "bench"},
        "spec": {"selector": {"matchLabels": {"app": "bench"}},
            "template": {"metadata": {"labels": {"app": "bench"}}, "spec": {"containers": [{"name": "c", "image": "c:1"}]}}}
    }))
    .unwrap();
    runtime
        .block_on(daemonsets.create(&PostParams::default(), &ds))
        .unwrap();
    let mut flip = 0u64;
    c.bench_function("merge-patch a DaemonSet (spec change)", |b| {
        b.iter(|| {
            flip += 1;
            let patch = json!({"spec": {"minReadySeconds": flip % 7}});
            runtime.block_on(async {
                black_box(
                    daemonsets
                        .patch("bench", &PatchParams::default(), &Patch::Merge(&patch))
                        .await
                        .unwrap(),
                )
            })
        })
    });
    let mut created = 0usize;
    c.bench_function("create a pod (kube::Client)", |b| {
        b.iter(|| {
            created += 1;
            let mut p = template.clone();
            p.metadata.name = Some(format!("bench-{created}"));
            runtime.block_on(async {
                black_box(pods.create(&PostParams::default(), &p).await.unwrap())
            })
        })
    });
}

criterion_group!(benches, bench_api);
criterion_main!(benches);
