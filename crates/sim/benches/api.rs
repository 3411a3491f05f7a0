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

/// A status merge patch of a CanaryDaemonSet through the API: with the project's CRD, whose
/// schema prunes, defaults and field-validates every write (`canary_sim::structural`), and with
/// the same CRD under another group whose schema only preserves unknown fields (none of that
/// work): the difference is what the structural schema costs a write.
fn bench_custom_resource_writes(c: &mut Criterion) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
        CustomResourceDefinition, JSONSchemaProps,
    };
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind};

    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let text = std::fs::read_to_string(format!("{root}/deploy/crd/canarydaemonsets.yaml")).unwrap();
    let crd: CustomResourceDefinition = serde_saphyr::from_str(&text).unwrap();
    let mut unchecked = crd.clone();
    unchecked.metadata.name = Some("canarydaemonsets.unchecked.bench".into());
    unchecked.spec.group = "unchecked.bench".into();
    for version in &mut unchecked.spec.versions {
        if let Some(validation) = version.schema.as_mut() {
            validation.open_api_v3_schema = Some(JSONSchemaProps {
                type_: Some("object".into()),
                x_kubernetes_preserve_unknown_fields: Some(true),
                ..JSONSchemaProps::default()
            });
        }
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let sim = runtime.block_on(async {
        Sim::builder()
            .nodes(0)
            .crd(crd)
            .crd(unchecked)
            .build()
            .unwrap()
    });
    let client = runtime.block_on(async { sim.client() });
    let example =
        std::fs::read_to_string(format!("{root}/deploy/examples/node-agent.yaml")).unwrap();
    let manifest: serde_json::Value = example
        .split("\n---\n")
        .filter_map(|doc| serde_saphyr::from_str::<serde_json::Value>(doc).ok())
        .find(|doc| doc["kind"] == "CanaryDaemonSet")
        .unwrap();
    for (group, label) in [
        (
            "canary.daemonset.dev",
            "the project's CRD (pruned, defaulted, validated)",
        ),
        ("unchecked.bench", "a CRD that preserves unknown fields"),
    ] {
        let resource = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(group, "v1alpha1", "CanaryDaemonSet"),
            "canarydaemonsets",
        );
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &resource);
        let mut object = manifest.clone();
        object["apiVersion"] = json!(format!("{group}/v1alpha1"));
        object["metadata"]["namespace"] = json!("default");
        let object: DynamicObject = serde_json::from_value(object).unwrap();
        runtime
            .block_on(api.create(&PostParams::default(), &object))
            .unwrap();
        let mut flip = 0u64;
        c.bench_function(
            &format!("status merge-patch of a CanaryDaemonSet, {label}"),
            |b| {
                b.iter(|| {
                    flip += 1;
                    let patch =
                        json!({"status": {"phase": "canary", "updated": flip % 20, "desired": 20}});
                    runtime.block_on(async {
                        black_box(
                            api.patch_status(
                                "node-exporter",
                                &PatchParams::default(),
                                &Patch::Merge(&patch),
                            )
                            .await
                            .unwrap(),
                        )
                    })
                })
            },
        );
    }
}

criterion_group!(benches, bench_api, bench_custom_resource_writes);
criterion_main!(benches);
