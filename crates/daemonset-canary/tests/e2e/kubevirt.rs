//! `compatibility: KubeVirt` on the real control plane: the DaemonSet writes of an upgrade, as
//! the API server recorded them (its audit log keeps the controller's DaemonSet writes with
//! their bodies), are virt-operator's (`/work/shared/reference/kubevirt-canary-spec.md`,
//! sections 4, 5 and 7): three RFC 6902 JSON Patches, each `test /metadata/generation` (the
//! generation the previous write left), `add` labels, `add` annotations, `add` ownerReferences,
//! `replace /spec`; the first (row 1) with the new target's annotations and `maxUnavailable: 1`
//! (an integer), the second (row 3a) `"10%"` (a string), the third (row 4) `1` again; the whole
//! `rollingUpdate` replaced each time (quirk 12); the generation recorded after rows 3a and 4,
//! not after row 1.

use crate::audit;
use crate::harness::{E2e, with_strategy};
use daemonset_canary::demo::scenario::NAME;
use k8s_openapi::jiff::Timestamp;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs `cargo xtask e2e`"]
async fn kubevirt_compatibility_writes_the_daemon_set_as_virt_operator_does() {
    // 12 nodes: 10% is 2 pods (rounded up), so the widening shows.
    let e2e = E2e::isolated("kubevirt").nodes(12).start().await;
    let agent = |version: &str| {
        with_strategy(
            e2e.agent_json(version, "healthy"),
            serde_json::json!({"compatibility": "KubeVirt", "crashLoop": {"policy": "KubeVirt"}}),
        )
    };
    e2e.install(
        &serde_json::from_value(agent("v1")).unwrap(),
        Duration::from_secs(120),
    )
    .await;
    let creates: Vec<String> = audit::daemon_set_writes(&e2e.namespace, NAME)
        .iter()
        .map(|w| w.verb.clone())
        .collect();
    assert_eq!(
        creates.first().map(String::as_str),
        Some("create"),
        "{creates:?}"
    );
    let installed = Timestamp::now();
    let before = e2e.daemon_set().await.metadata.generation.unwrap();
    let recorder = e2e.record().await;
    let generation = e2e.set_spec(&agent("v2")).await;
    e2e.wait_phase(generation, "successful", Duration::from_secs(240))
        .await;
    assert_eq!(e2e.version_counts().await, [("v2".into(), 12)].into());

    let writes = audit::daemon_set_writes_since(&e2e.namespace, NAME, installed);
    let lines: Vec<String> = writes.iter().map(audit::Event::line).collect();
    assert_eq!(writes.len(), 3, "three DaemonSet writes: {lines:#?}");
    // Each write tests the generation the previous one left: the live one before the first.
    for ((write, max_unavailable), expected_test) in writes
        .iter()
        .zip([
            serde_json::json!(1),
            serde_json::json!("10%"),
            serde_json::json!(1),
        ])
        .zip(before..)
    {
        assert_eq!(write.verb, "patch", "{lines:#?}");
        let ops = write
            .request_object
            .as_ref()
            .and_then(|o| o.as_array())
            .unwrap_or_else(|| panic!("no JSON Patch recorded: {write:?}"));
        let shape: Vec<(&str, &str)> = ops
            .iter()
            .map(|op| (op["op"].as_str().unwrap(), op["path"].as_str().unwrap()))
            .collect();
        assert_eq!(
            shape,
            [
                ("test", "/metadata/generation"),
                ("add", "/metadata/labels"),
                ("add", "/metadata/annotations"),
                ("add", "/metadata/ownerReferences"),
                ("replace", "/spec"),
            ],
            "the reference's ops, in its order"
        );
        assert_eq!(
            ops[0]["value"],
            serde_json::json!(expected_test),
            "{lines:#?}"
        );
        let annotations = &ops[2]["value"];
        assert_eq!(annotations["kubevirt.io/install-strategy-version"], "v2");
        assert_eq!(
            annotations["kubevirt.io/install-strategy-registry"],
            "registry.example"
        );
        assert_eq!(
            annotations["kubevirt.io/generation"],
            serde_json::json!(generation.unwrap().to_string()),
            "the CanaryDaemonSet's generation, as virt-operator writes the KubeVirt CR's"
        );
        let owners = ops[3]["value"].as_array().expect("the owner reference");
        assert_eq!(owners[0]["kind"], "CanaryDaemonSet");
        let spec = &ops[4]["value"];
        assert_eq!(
            spec["updateStrategy"]["rollingUpdate"],
            serde_json::json!({"maxUnavailable": max_unavailable}),
            "the whole rollingUpdate replaced (quirk 12)"
        );
        let image = spec["template"]["spec"]["containers"][0]["image"]
            .as_str()
            .unwrap();
        assert!(image.ends_with(":v2"), "{image}");
        let pod_annotations = &spec["template"]["metadata"]["annotations"];
        assert_eq!(
            pod_annotations["kubevirt.io/install-strategy-version"],
            "v2"
        );
        assert!(
            pod_annotations.get("kubevirt.io/generation").is_none(),
            "the pod template carries no generation annotation"
        );
    }
    // The generation recorded: the last write's (row 4 records it, as SetGeneration does).
    let status = e2e.status().await;
    let live = e2e.daemon_set().await.metadata.generation.unwrap();
    assert_eq!(live, before + 3);
    assert_eq!(
        status.recorded_daemon_set_generation,
        Some(live),
        "{status:?}"
    );
    // Every phase of the reference's table, in its order, each written to the status (the
    // watch sees every status write; the first phase is the install's, at rest).
    assert_eq!(
        recorder.phases(),
        [
            "successful",
            "started",
            "canary",
            "increasing",
            "waiting",
            "successful"
        ]
    );
}
