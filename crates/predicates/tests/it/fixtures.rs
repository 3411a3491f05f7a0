//! Real third-party DaemonSet and Pod manifests (repository `testdata/`, see its README for sources)
//! parsed into k8s-openapi types and classified by the predicates.

use std::path::PathBuf;

use canary_predicates::k8s_openapi::api::apps::v1::DaemonSet;
use canary_predicates::k8s_openapi::api::core::v1::Pod;
use canary_predicates::k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use canary_predicates::*;

fn testdata(relative: &str) -> String {
    let path: PathBuf = [env!("CARGO_MANIFEST_DIR"), "..", "..", "testdata", relative]
        .iter()
        .collect();
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading fixture {}: {e}", path.display()))
}

/// YAML through serde-saphyr (YAML 1.2: the argo-cd pods' unquoted timestamps stay strings); JSON
/// through serde_json (the insights-operator pod has no apiVersion/kind, as in informer caches).
fn parse<T: serde::de::DeserializeOwned>(relative: &str) -> T {
    let text = testdata(relative);
    if relative.ends_with(".json") {
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{relative}: {e}"))
    } else {
        serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{relative}: {e}"))
    }
}

fn pod(name: &str) -> Pod {
    parse(&format!("pods/{name}"))
}

fn daemonset(name: &str) -> DaemonSet {
    parse(&format!("daemonsets/{name}"))
}

const PODS: [&str; 5] = [
    "crashloopbackoff.yaml",
    "daemonset-pod-healthy.yaml",
    "imagepullbackoff.yaml",
    "init-crashloopbackoff.json",
    "running-not-ready.yaml",
];

const DAEMONSETS: [&str; 5] = [
    "fluentd-elasticsearch.yaml",
    "kube-flannel-ds.yaml",
    "longhorn-manager-live-unavailable.yaml",
    "node-exporter.yaml",
    "nvidia-device-plugin.yaml",
];

fn strict_without_init() -> CrashLoopPolicy {
    CrashLoopPolicy::Strict {
        restart_threshold: CrashLoopPolicy::DEFAULT_RESTART_THRESHOLD,
        include_init_containers: false,
    }
}

/// `(container, init, reason, restarts)` of the first crash loop, for compact comparisons.
fn crash(pod: &Pod, policy: &CrashLoopPolicy) -> Option<(String, bool, CrashLoopReason, i32)> {
    pod_crash_loop(pod, policy).map(|c| (c.container, c.init_container, c.reason, c.restart_count))
}

fn hit(
    container: &str,
    init: bool,
    reason: CrashLoopReason,
    restarts: i32,
) -> Option<(String, bool, CrashLoopReason, i32)> {
    Some((container.to_owned(), init, reason, restarts))
}

#[test]
fn every_fixture_parses_with_its_name() {
    let pod_names: Vec<String> = PODS.iter().map(|p| pod(p).metadata.name.unwrap()).collect();
    assert_eq!(
        pod_names,
        [
            "my-pod",
            "kube-proxy-8k9zt",
            "guestbook-ui-errimagepullbackoff-66cfffb669-45w2j",
            "vsystem-867f4b77cc-pqcns",
            "never-ready",
        ]
    );
    // argo-cd's unquoted timestamps are read as RFC 3339 strings.
    let created = pod("crashloopbackoff.yaml")
        .metadata
        .creation_timestamp
        .unwrap();
    assert_eq!(created.0.to_string(), "2018-12-02T09:19:36Z");
    for name in DAEMONSETS {
        let ds = daemonset(name);
        assert!(ds.metadata.name.is_some(), "{name}");
        assert!(ds.spec.is_some(), "{name}");
    }
}

#[test]
fn pods_are_classified() {
    use CrashLoopReason::{CrashLoopBackOff, ImagePullBackOff, RestartedOrTerminated};
    let kubevirt = CrashLoopPolicy::KubeVirt;
    let strict = CrashLoopPolicy::default();
    let no_init = strict_without_init();
    // (file, ready, reference, strict, strict without init containers)
    let rows = [
        (
            "crashloopbackoff.yaml",
            false,
            hit("main", false, RestartedOrTerminated, 3),
            hit("main", false, CrashLoopBackOff, 3),
            hit("main", false, CrashLoopBackOff, 3),
        ),
        ("daemonset-pod-healthy.yaml", true, None, None, None),
        (
            "imagepullbackoff.yaml",
            false,
            None,
            hit("errimagepullbackoff", false, ImagePullBackOff, 0),
            hit("errimagepullbackoff", false, ImagePullBackOff, 0),
        ),
        (
            "init-crashloopbackoff.json",
            false,
            None, // quirk 7: the reference ignores init containers, Init:CrashLoopBackOff waits forever
            hit("vsystem-hana-init", true, CrashLoopBackOff, 7527),
            None,
        ),
        ("running-not-ready.yaml", false, None, None, None),
    ];
    for (file, ready, reference, strict_hit, no_init_hit) in rows {
        let pod = pod(file);
        assert_eq!(pod_is_ready(&pod), ready, "{file}: ready");
        assert_eq!(crash(&pod, &kubevirt), reference, "{file}: reference");
        assert_eq!(crash(&pod, &strict), strict_hit, "{file}: strict");
        assert_eq!(
            crash(&pod, &no_init),
            no_init_hit,
            "{file}: strict without init containers"
        );
        assert!(!pod_is_terminating(&pod), "{file}");
    }
}

#[test]
fn healthy_kube_proxy_pod_belongs_to_its_daemonset() {
    let pod = pod("daemonset-pod-healthy.yaml");
    let owner = controller_owner(&pod).unwrap();
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("DaemonSet", "kube-proxy")
    );
    assert_eq!(pod_revision_hash(&pod), Some("69494898cd"));
    let uid = "ca3929f9-0faa-4e26-8a62-1d870b267fd3";
    assert!(pod_is_owned_by(
        &pod,
        &OwnerMatch::Uid {
            name: "kube-proxy",
            uid
        }
    ));
    assert!(pod_is_owned_by(
        &pod,
        &OwnerMatch::NameOnly { name: "kube-proxy" }
    ));
    assert!(!pod_is_owned_by(
        &pod,
        &OwnerMatch::Uid {
            name: "kube-proxy",
            uid: "another-uid"
        }
    ));
    assert!(!pod_is_owned_by(
        &pod,
        &OwnerMatch::NameOnly {
            name: "virt-handler"
        }
    ));
    // No install-strategy annotations: not up to date, even for an all-empty target.
    assert!(!pod_is_up_to_date(
        &pod,
        &Target::default(),
        &AnnotationKeys::default()
    ));
    let current = UpdatedRule::AnnotationsAndRevision {
        revision_hash: "69494898cd".into(),
    };
    let mut annotated = pod.clone();
    let target = Target {
        version: "v1.35.0".into(),
        ..Target::default()
    };
    annotated
        .metadata
        .annotations
        .get_or_insert_default()
        .extend(target.annotations(&AnnotationKeys::default()));
    assert!(pod_is_updated(
        &annotated,
        &target,
        &AnnotationKeys::default(),
        &current
    ));
    let next = UpdatedRule::AnnotationsAndRevision {
        revision_hash: "5c8d7f9b44".into(),
    };
    assert!(!pod_is_updated(
        &annotated,
        &target,
        &AnnotationKeys::default(),
        &next
    ));
    // By revision only: the annotations do not matter, the hash does.
    for (hash, updated) in [("69494898cd", true), ("5c8d7f9b44", false)] {
        let rule = UpdatedRule::Revision {
            revision_hash: hash.into(),
        };
        assert_eq!(
            pod_is_updated(&pod, &target, &AnnotationKeys::default(), &rule),
            updated,
            "{hash}"
        );
    }
}

#[test]
fn replicaset_pod_matches_by_name_only_under_the_reference() {
    // quirk 9: the reference looks at the controller owner's name, not its kind.
    let pod = pod("imagepullbackoff.yaml");
    let name = "guestbook-ui-errimagepullbackoff-66cfffb669";
    let uid = "ab0e507e-56f3-11e9-8721-025000000001";
    assert!(pod_is_owned_by(&pod, &OwnerMatch::NameOnly { name }));
    assert!(!pod_is_owned_by(&pod, &OwnerMatch::Uid { name, uid }));
}

#[test]
fn daemonset_strategies_are_read_both_ways() {
    // (file, reference IntValue, live maxUnavailable parsed)
    let rows: [(&str, i32, Option<MaxUnavailable>); 5] = [
        ("fluentd-elasticsearch.yaml", 0, None), // no updateStrategy in the manifest
        ("kube-flannel-ds.yaml", 0, None),       // no updateStrategy in the manifest
        (
            "longhorn-manager-live-unavailable.yaml",
            0,
            Some(MaxUnavailable::Percent(100)),
        ),
        ("node-exporter.yaml", 0, Some(MaxUnavailable::Percent(10))),
        ("nvidia-device-plugin.yaml", 0, None), // RollingUpdate without a rollingUpdate block
    ];
    for (file, reference, live) in rows {
        let ds = daemonset(file);
        assert_eq!(reference_max_unavailable(&ds), reference, "{file}");
        // quirk 3: none of them is "at rest" for the reference, whatever Kubernetes would do.
        assert!(!has_default_rollout_strategy(&ds), "{file}");
        let parsed = max_unavailable_field(&ds).map(|value| MaxUnavailable::parse(value).unwrap());
        assert_eq!(parsed, live, "{file}");
    }
}

#[test]
fn kubernetes_reading_of_each_daemonset() {
    // (file, budget for 25 desired pods): the manifests without a strategy get the API defaults (1).
    let rows = [
        ("fluentd-elasticsearch.yaml", 1),
        ("kube-flannel-ds.yaml", 1),
        ("longhorn-manager-live-unavailable.yaml", 25),
        ("node-exporter.yaml", 3),
        ("nvidia-device-plugin.yaml", 1),
    ];
    for (file, budget) in rows {
        assert_eq!(
            kubernetes_max_unavailable(&daemonset(file), 25),
            Ok(budget),
            "{file}"
        );
    }
}

#[test]
fn node_exporter_ten_percent_scales_up() {
    let ds = daemonset("node-exporter.yaml");
    assert_eq!(
        max_unavailable_field(&ds),
        Some(&IntOrString::String("10%".into()))
    );
    let value = MaxUnavailable::parse(max_unavailable_field(&ds).unwrap()).unwrap();
    let scaled: Vec<u32> = [0, 1, 9, 10, 11, 20, 21, 100, 101]
        .map(|n| value.scaled(n))
        .to_vec();
    assert_eq!(scaled, [0, 1, 1, 1, 2, 2, 3, 10, 11]);
    assert_eq!(value.to_int_or_string(), IntOrString::String("10%".into()));
}

#[test]
fn longhorn_hundred_percent_with_zero_surge() {
    let ds = daemonset("longhorn-manager-live-unavailable.yaml");
    let desired = u32::try_from(ds.status.as_ref().unwrap().desired_number_scheduled).unwrap();
    assert_eq!(desired, 3);
    let unavailable = MaxUnavailable::parse(max_unavailable_field(&ds).unwrap()).unwrap();
    let surge = MaxUnavailable::parse(live_max_surge(&ds).unwrap()).unwrap();
    assert_eq!(surge, MaxUnavailable::Count(0));
    assert_eq!(unavailable.scaled(desired), 3);
    assert_eq!(
        daemonset_controller_max_unavailable(unavailable, Some(surge), desired),
        3
    );
    assert_eq!(kubernetes_max_unavailable(&ds, desired), Ok(3));
    // Its annotations are Helm's: no install-strategy key, which reads as "" for a DaemonSet.
    let keys = AnnotationKeys::default();
    assert!(daemonset_is_up_to_date(&ds, &Target::default(), &keys));
    assert!(!daemonset_is_up_to_date(
        &ds,
        &Target {
            version: "v1.10.1".into(),
            ..Target::default()
        },
        &keys
    ));
}

#[test]
fn counting_the_fixture_pods_as_if_all_were_updated() {
    let keys = AnnotationKeys::default();
    let target = Target {
        version: "v2".into(),
        registry: "registry.example".into(),
        deployment_id: "d1".into(),
    };
    let pods: Vec<Pod> = PODS
        .iter()
        .map(|file| {
            let mut pod = pod(file);
            pod.metadata
                .annotations
                .get_or_insert_default()
                .extend(target.annotations(&keys));
            pod
        })
        .collect();
    let count = |crash_loop: &CrashLoopPolicy| {
        count_pods(
            &pods,
            &CountRule {
                target: &target,
                keys: &keys,
                updated: &UpdatedRule::Annotations,
                crash_loop,
                skip_terminating: true,
            },
        )
    };
    let reference = count(&CrashLoopPolicy::KubeVirt);
    assert_eq!(
        (
            reference.total,
            reference.updated,
            reference.updated_ready,
            reference.crash_looping
        ),
        (5, 5, 1, 1)
    );
    let strict = count(&CrashLoopPolicy::default());
    assert_eq!((strict.updated_ready, strict.crash_looping), (1, 3));
    let (first_pod, first) = strict.first_crash_loop.unwrap();
    assert_eq!(
        (first_pod.as_str(), first.reason),
        ("my-pod", CrashLoopReason::CrashLoopBackOff)
    );

    let kube_proxy = OwnerMatch::Uid {
        name: "kube-proxy",
        uid: "ca3929f9-0faa-4e26-8a62-1d870b267fd3",
    };
    let owned = count_pods_owned_by(
        &pods,
        &kube_proxy,
        &CountRule {
            target: &target,
            keys: &keys,
            updated: &UpdatedRule::Annotations,
            crash_loop: &CrashLoopPolicy::default(),
            skip_terminating: true,
        },
    );
    assert_eq!(
        (owned.total, owned.updated_ready, owned.crash_looping),
        (1, 1, 0)
    );
}

/// What the predicates read of a pod through [`PodFacts`], owned, with the value of one
/// annotation (`key`), then the node name and the uid.
#[allow(clippy::type_complexity)]
fn facts<P: PodFacts>(
    pod: &P,
    key: &str,
) -> (
    String,
    Option<String>,
    Option<String>,
    Option<(String, String, String)>,
    bool,
    Option<String>,
    Vec<(String, bool, i32)>,
    Vec<(String, bool, i32)>,
    Option<String>,
    String,
) {
    let containers = |facts: &mut dyn Iterator<Item = ContainerFacts<'_>>| {
        facts
            .map(|c| (c.name.to_owned(), c.ready, c.restart_count))
            .collect::<Vec<_>>()
    };
    (
        pod.name().to_owned(),
        pod.annotation(key).map(str::to_owned),
        pod.revision_hash().map(str::to_owned),
        pod.controller()
            .map(|o| (o.kind.to_owned(), o.name.to_owned(), o.uid.to_owned())),
        pod.is_terminating(),
        pod.phase().map(str::to_owned),
        containers(&mut pod.containers()),
        containers(&mut pod.init_containers()),
        pod.node_name().map(str::to_owned),
        pod.uid().to_owned(),
    )
}

/// Pins `PodSummary` and the blanket `PodFacts for &T`: every fact of each fixture pod reads
/// the same from the pod, from a reference to it, from its summary and from a reference to the
/// summary; the summary keeps the namespace and the resource version; the revision hash, init
/// containers, node name and uid are the fixture's (so an empty answer is told apart).
#[test]
fn every_fact_reads_the_same_from_the_pod_its_summary_and_references() {
    /// (file, namespace, one annotation key, revision hash, init containers)
    type Row<'a> = (&'a str, &'a str, &'a str, Option<&'a str>, &'a [&'a str]);
    let rows: [Row<'_>; 5] = [
        ("crashloopbackoff.yaml", "argocd", "none", None, &[]),
        (
            "daemonset-pod-healthy.yaml",
            "kube-system",
            "none",
            Some("69494898cd"),
            &[],
        ),
        ("imagepullbackoff.yaml", "default", "none", None, &[]),
        (
            "init-crashloopbackoff.json",
            "di-288312",
            "openshift.io/scc",
            None,
            &["vsystem-hana-init"],
        ),
        ("running-not-ready.yaml", "argocd", "none", None, &[]),
    ];
    for (file, namespace, key, revision, init) in rows {
        let pod = pod(file);
        let summary = PodSummary::of(&pod);
        assert_eq!(summary.namespace(), namespace, "{file}");
        let direct = facts(&pod, key);
        assert_eq!(facts(&&pod, key), direct, "{file}: through a reference");
        assert_eq!(facts(&summary, key), direct, "{file}: its summary");
        assert_eq!(
            facts(&&summary, key),
            direct,
            "{file}: a reference to its summary"
        );
        assert_eq!(direct.0, pod.metadata.name.clone().unwrap(), "{file}: name");
        assert_eq!(direct.1.is_some(), key != "none", "{file}: annotation");
        assert_eq!(direct.2.as_deref(), revision, "{file}: revision hash");
        let init_names: Vec<&str> = direct.7.iter().map(|c| c.0.as_str()).collect();
        assert_eq!(init_names, init, "{file}: init containers");
        let spec_node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
        assert_eq!(direct.8, spec_node, "{file}: node name");
        assert_eq!(Some(direct.9), pod.metadata.uid.clone(), "{file}: uid");
        assert_eq!(
            Some(summary.resource_version().to_owned()),
            pod.metadata.resource_version.clone(),
            "{file}: resource version"
        );
    }
    let healthy = pod("daemonset-pod-healthy.yaml");
    assert_eq!(healthy.node_name(), Some("datagen-1-35"));
    assert_eq!(healthy.uid(), "90565722-42c8-4f10-a59b-c8fc6571e86d");
    assert_eq!(PodSummary::of(&healthy).resource_version(), "369");
    assert_eq!(
        PodSummary::of(&Pod::default()).namespace(),
        "",
        "no namespace"
    );
}
