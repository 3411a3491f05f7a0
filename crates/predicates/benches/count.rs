//! Counting the updated-and-ready pods of one DaemonSet among 5,000 pods (10 DaemonSets x 500 pods):
//! pods pre-filtered by owner (what an index by owner gives) versus scanning all of them with
//! `pod_is_owned_by` (what the reference does with its pod cache).

use std::collections::BTreeMap;
use std::hint::black_box;

use canary_predicates::k8s_openapi::api::core::v1::{ContainerStatus, Pod, PodStatus};
use canary_predicates::k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    ObjectMeta, OwnerReference,
};
use canary_predicates::{
    AnnotationKeys, CONTROLLER_REVISION_HASH_LABEL, CountRule, CrashLoopPolicy, OwnerMatch, Target,
    UpdatedRule, count_pods, count_pods_owned_by,
};
use criterion::{Criterion, criterion_group, criterion_main};

const DAEMONSETS: usize = 10;
const PODS_PER_DAEMONSET: usize = 500;

fn target() -> Target {
    Target {
        version: "v1.8.0".into(),
        registry: "quay.io/kubevirt".into(),
        deployment_id: "4f3c2a".into(),
    }
}

/// Pod `index` of DaemonSet `ds`: half updated, 4 in 5 ready, one in 50 restarting.
fn pod(ds: usize, index: usize, keys: &AnnotationKeys) -> Pod {
    let annotations = if index.is_multiple_of(2) {
        target()
    } else {
        Target::default()
    }
    .annotations(keys);
    Pod {
        metadata: ObjectMeta {
            name: Some(format!("ds-{ds}-{index}")),
            namespace: Some("kube-system".into()),
            annotations: Some(annotations),
            labels: Some(BTreeMap::from([(
                CONTROLLER_REVISION_HASH_LABEL.to_owned(),
                "7d9f8b6c5".to_owned(),
            )])),
            owner_references: Some(vec![OwnerReference {
                api_version: "apps/v1".into(),
                kind: "DaemonSet".into(),
                name: format!("ds-{ds}"),
                uid: format!("uid-{ds}"),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            ..ObjectMeta::default()
        },
        status: Some(PodStatus {
            phase: Some("Running".into()),
            container_statuses: Some(vec![ContainerStatus {
                name: "main".into(),
                ready: !index.is_multiple_of(5),
                restart_count: i32::from(index.is_multiple_of(50)) * 4,
                ..ContainerStatus::default()
            }]),
            ..PodStatus::default()
        }),
        ..Pod::default()
    }
}

fn bench_count(c: &mut Criterion) {
    let keys = AnnotationKeys::default();
    let all: Vec<Pod> = (0..DAEMONSETS)
        .flat_map(|ds| (0..PODS_PER_DAEMONSET).map(move |index| (ds, index)))
        .map(|(ds, index)| pod(ds, index, &keys))
        .collect();
    let owner = OwnerMatch::Uid {
        name: "ds-3",
        uid: "uid-3",
    };
    let prefiltered: Vec<&Pod> = all
        .iter()
        .filter(|pod| canary_predicates::pod_is_owned_by(pod, &owner))
        .collect();
    let target = target();
    let crash_loop = CrashLoopPolicy::default();
    let rule = CountRule {
        target: &target,
        keys: &keys,
        updated: &UpdatedRule::Annotations,
        crash_loop: &crash_loop,
        skip_terminating: true,
    };

    // Same answer both ways, or the comparison means nothing.
    let expected = count_pods(prefiltered.iter().copied(), &rule);
    assert_eq!(count_pods_owned_by(&all, &owner, &rule), expected);
    assert_eq!(expected.total as usize, PODS_PER_DAEMONSET);

    let mut group = c.benchmark_group("count_updated_ready_1_of_10_daemonsets_5000_pods");
    group.bench_function("prefiltered_500", |b| {
        b.iter(|| {
            count_pods(black_box(&prefiltered).iter().copied(), black_box(&rule)).updated_ready
        })
    });
    group.bench_function("scan_all_5000_by_uid", |b| {
        b.iter(|| {
            count_pods_owned_by(black_box(&all), black_box(&owner), black_box(&rule)).updated_ready
        })
    });
    let by_name = OwnerMatch::NameOnly { name: "ds-3" };
    group.bench_function("scan_all_5000_by_name", |b| {
        b.iter(|| {
            count_pods_owned_by(black_box(&all), black_box(&by_name), black_box(&rule))
                .updated_ready
        })
    });
    group.finish();
}

criterion_group!(benches, bench_count);
criterion_main!(benches);
