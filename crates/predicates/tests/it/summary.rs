//! `PodSummary` beyond the facts the predicates read (those are pinned in `fixtures.rs`):
//! `same_facts`, which the adapter's pod index uses to skip a pass when only the resource
//! version moved, and the `Debug` form the controller's logs print.

use std::collections::BTreeMap;

use canary_predicates::PodSummary;
use canary_predicates::k8s_openapi::api::core::v1::{ContainerStatus, Pod, PodSpec, PodStatus};
use canary_predicates::k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use canary_predicates::k8s_openapi::jiff::Timestamp;

/// A change to a pod, named for the assertion that reports it.
type Change = (&'static str, fn(&mut Pod));

/// A running, ready pod with an annotation, bound to a node, with one init container.
fn running() -> Pod {
    let ready = |name: &str| ContainerStatus {
        name: name.into(),
        ready: true,
        ..ContainerStatus::default()
    };
    Pod {
        metadata: ObjectMeta {
            namespace: Some("kubevirt".into()),
            name: Some("virt-handler-x7k2p".into()),
            uid: Some("0b5e-uid".into()),
            resource_version: Some("41".into()),
            annotations: Some(BTreeMap::from([(
                "kubevirt.io/install-strategy-version".into(),
                "v1.4.0".into(),
            )])),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            node_name: Some("node-07".into()),
            ..PodSpec::default()
        }),
        status: Some(PodStatus {
            phase: Some("Running".into()),
            container_statuses: Some(vec![ready("virt-handler")]),
            init_container_statuses: Some(vec![ready("virt-launcher")]),
            ..PodStatus::default()
        }),
    }
}

/// Each change below alters exactly one part of the summary (the optional fields' presence,
/// termination, the containers, the init containers, the number of strings, one string), so
/// `same_facts` has to look at every part on its own.
#[test]
fn same_facts_tells_every_difference_but_the_resource_version() {
    let before = PodSummary::of(&running());

    let mut moved = running();
    moved.metadata.resource_version = Some("42".into());
    assert!(before.same_facts(&PodSummary::of(&moved)));

    // `spec.nodeName` of "" against none: the same strings, only the presence bit differs.
    let mut unbound = running();
    if let Some(spec) = unbound.spec.as_mut() {
        spec.node_name = None;
    }
    let mut bound_to_empty = unbound.clone();
    if let Some(spec) = bound_to_empty.spec.as_mut() {
        spec.node_name = Some(String::new());
    }
    let (unbound, bound_to_empty) = (PodSummary::of(&unbound), PodSummary::of(&bound_to_empty));
    assert!(!unbound.same_facts(&bound_to_empty));
    assert!(!bound_to_empty.same_facts(&unbound));

    let changes: [Change; 5] = [
        ("terminating", |pod| {
            pod.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
        }),
        ("container not ready", |pod| {
            if let Some(status) = pod.status.as_mut() {
                status.container_statuses = Some(vec![ContainerStatus {
                    name: "virt-handler".into(),
                    ..ContainerStatus::default()
                }]);
            }
        }),
        ("init container restarted", |pod| {
            if let Some(status) = pod.status.as_mut() {
                status.init_container_statuses = Some(vec![ContainerStatus {
                    name: "virt-launcher".into(),
                    ready: true,
                    restart_count: 1,
                    ..ContainerStatus::default()
                }]);
            }
        }),
        // One more annotation: every string `before` has is equal, only the count differs.
        ("annotation added", |pod| {
            if let Some(annotations) = pod.metadata.annotations.as_mut() {
                annotations.insert("zz.example/added".into(), String::new());
            }
        }),
        ("annotation value changed", |pod| {
            if let Some(annotations) = pod.metadata.annotations.as_mut() {
                annotations.insert(
                    "kubevirt.io/install-strategy-version".into(),
                    "v1.5.0".into(),
                );
            }
        }),
    ];
    for (change, apply) in changes {
        let mut pod = running();
        apply(&mut pod);
        let after = PodSummary::of(&pod);
        assert!(!before.same_facts(&after), "{change}");
        assert!(!after.same_facts(&before), "{change}, the other way round");
        assert!(after.same_facts(&after.clone()), "{change}, against itself");
    }
}

/// The `Debug` form names the pod the way its manifest does, annotations included, so a log
/// line holding a summary can be read without the pod.
#[test]
fn debug_shows_every_fact_of_the_summary() {
    let shown = format!("{:?}", PodSummary::of(&running()));
    for expected in [
        "PodSummary {",
        r#"namespace: "kubevirt""#,
        r#"name: "virt-handler-x7k2p""#,
        r#"uid: "0b5e-uid""#,
        r#"resource_version: "41""#,
        r#"node_name: Some("node-07")"#,
        r#"annotations: [("kubevirt.io/install-strategy-version", "v1.4.0")]"#,
        "revision_hash: None",
        "controller: None",
        "terminating: false",
        r#"phase: Some("Running")"#,
        "virt-handler",
        "virt-launcher",
    ] {
        assert!(
            shown.contains(expected),
            "{expected:?} missing from {shown}"
        );
    }
    let without_annotations = format!("{:?}", PodSummary::of(&Pod::default()));
    assert!(
        without_annotations.contains("annotations: []"),
        "{without_annotations}"
    );
}
