//! Scenarios against the controller as deploy/ installs it: the one `daemonset-canary run`
//! that `cargo xtask e2e` starts with the ServiceAccount and RBAC of `deploy/default`, watching
//! every namespace, with leader election, on the cluster's own 50 nodes. They run in parallel,
//! before the isolated scenarios. That controller's counters are global: a scenario counts its
//! own writes in the API server's audit log, and reads a counter's increase only where no other
//! scenario of this module moves it.

use crate::audit;
use crate::harness::{E2e, first_and_last, image_and_ready, max_unavailable, sum_samples};
use crate::support;
use canary_kube_adapter::CanaryDaemonSet;
use daemonset_canary::demo::scenario::NAME;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: run with `cargo xtask e2e`"]
async fn reference_rollout_on_every_node_writes_the_daemon_set_four_times() {
    let e2e = E2e::start("rollout").await;
    let nodes = e2e.node_count().await;
    assert!(
        nodes >= 10,
        "the e2e cluster has {nodes} nodes; `cargo xtask e2e` starts 50"
    );

    e2e.install(&e2e.agent("v1", "healthy"), Duration::from_secs(180))
        .await;
    let installed = e2e.daemon_set().await;
    let generation_before = installed.metadata.generation.unwrap_or_default();
    let upgraded = Timestamp::now();

    let started = Instant::now();
    let generation = e2e.upgrade("v2", "healthy").await;
    // Sample the DaemonSet's maxUnavailable while the rollout runs: 1 (canary), 10%, 1 again.
    let mut max_unavailable_seen: Vec<String> = Vec::new();
    let mut phases: Vec<String> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let ds = e2e.daemon_set().await;
        let now = max_unavailable(&ds);
        if max_unavailable_seen.last() != Some(&now) {
            max_unavailable_seen.push(now);
        }
        let status = e2e.status().await;
        if status.observed_generation >= generation {
            if let Some(phase) = status.phase_name().map(str::to_owned)
                && phases.last() != Some(&phase)
            {
                phases.push(phase);
            }
            if status.phase_name() == Some("successful") && status.updated_ready == nodes {
                break;
            }
            assert_ne!(
                status.phase_name(),
                Some("failed"),
                "{status:?}\n{}",
                e2e.log_tail()
            );
        }
        assert!(
            Instant::now() < deadline,
            "the upgrade did not finish in 600 s (phases {phases:?}): {status:?}\n{}",
            e2e.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let makespan = started.elapsed();
    eprintln!(
        "rollout on {nodes} KWOK nodes: {:.1} s, phases {phases:?}, maxUnavailable {max_unavailable_seen:?}",
        makespan.as_secs_f64()
    );

    // Four DaemonSet writes (start, the canary soak's hold on `OnDelete`, widen, revert), by the
    // API server's record and by its generation of the DaemonSet.
    let writes = audit::daemon_set_writes_since(&e2e.namespace, NAME, upgraded);
    assert_eq!(
        writes.len(),
        4,
        "{:#?}",
        writes.iter().map(audit::Event::line).collect::<Vec<_>>()
    );
    let done = e2e.daemon_set().await;
    assert_eq!(
        done.metadata.generation.unwrap_or_default() - generation_before,
        4
    );
    assert_eq!(max_unavailable(&done), "1");
    assert!(
        max_unavailable_seen.iter().any(|m| m == "10%"),
        "never widened: {max_unavailable_seen:?}"
    );
    assert_eq!(max_unavailable_seen.last().map(String::as_str), Some("1"));
    // `increasing` can last a single reconcile (widen, then every pod is being replaced:
    // `waiting`), too short for a 250 ms poll to see; the widening shows in maxUnavailable and in
    // the RolloutWidened event below.
    assert_eq!(
        first_and_last(&phases),
        (Some("canary"), Some("successful")),
        "{phases:?}"
    );

    // The real DaemonSet controller replaced every pod: one per node, all v2 and Ready.
    let pods = e2e.pods().await;
    let images: Vec<(String, bool)> = pods.iter().map(image_and_ready).collect();
    assert_eq!(images.len(), nodes as usize, "{images:?}");
    assert!(
        images
            .iter()
            .all(|(image, ready)| image.ends_with(":v2") && *ready),
        "{images:?}"
    );
    let ds_status = done.status.unwrap_or_default();
    assert_eq!(
        ds_status.updated_number_scheduled,
        Some(i32::try_from(nodes).unwrap())
    );
    assert_eq!(
        ds_status.number_available,
        Some(i32::try_from(nodes).unwrap())
    );

    // Every event of the namespace, by reason (the `count` of aggregated ones added up), for
    // docs/simulator.md's comparison: the DaemonSet controller's own events are real here.
    let mut by_reason = std::collections::BTreeMap::<String, u64>::new();
    let listed = e2e.kubectl(&[
        "get",
        "events",
        "-o",
        "jsonpath={range .items[*]}{.reason} {.count}{\"\\n\"}{end}",
    ]);
    for line in listed.lines() {
        let mut fields = line.split_whitespace();
        if let Some(reason) = fields.next() {
            let count = fields.next().and_then(|c| c.parse().ok()).unwrap_or(1);
            *by_reason.entry(reason.to_owned()).or_default() += count;
        }
    }
    eprintln!("events in the namespace (install and upgrade): {by_reason:?}");

    // Events as a user reads them.
    let reasons = e2e.event_reasons();
    for reason in [
        "Normal/RolloutStarted",
        "Normal/RolloutWidened",
        "Normal/RolloutCompleted",
    ] {
        assert!(
            reasons.iter().any(|r| r == reason),
            "no {reason} event: {reasons:?}"
        );
    }
    // The real API server serves Table output with the CRD's printer columns.
    let table = e2e.kubectl(&["get", "canarydaemonsets"]);
    assert!(
        table.lines().next().unwrap_or_default().contains("NAME"),
        "{table}"
    );
    assert!(table.contains("successful"), "{table}");

    let metrics = e2e.scrape();
    let phase_line = format!(
        r#"canary_rollout_phase{{mode="driven",name="{NAME}",namespace="{}",phase="successful"}} 1"#,
        e2e.namespace
    );
    assert!(
        metrics.contains(&phase_line),
        "no `{phase_line}` in:\n{metrics}"
    );
    support::promtool_check_metrics(&metrics);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: run with `cargo xtask e2e`"]
async fn crash_looping_canary_fails_the_rollout_after_one_pod() {
    let e2e = E2e::start("crashloop").await;
    let nodes = e2e.node_count().await;
    e2e.install(&e2e.agent("v1", "healthy"), Duration::from_secs(180))
        .await;
    let upgraded = Timestamp::now();
    // No other deployed scenario fails a canary: the global counter's increase is this one's.
    let failures_before = sum_samples(
        &e2e.scrape(),
        "canary_rollout_failures_total",
        &[r#"reason="CanaryCrashLooping""#],
    );

    let started = Instant::now();
    let generation = e2e.upgrade("v2", "crashloop").await;
    let phases = e2e
        .wait_phase(generation, "failed", Duration::from_secs(240))
        .await;
    eprintln!(
        "crash-looping canary on {nodes} KWOK nodes: failed after {:.1} s, phases {phases:?}",
        started.elapsed().as_secs_f64()
    );

    // Only the canary was replaced, and it is the crash-looping one.
    let check_one_replaced = |pods: &[Pod]| {
        let images: Vec<(String, bool)> = pods.iter().map(image_and_ready).collect();
        let new = images
            .iter()
            .filter(|(image, _)| image.ends_with(":v2"))
            .count();
        let old_ready = images
            .iter()
            .filter(|(image, ready)| image.ends_with(":v1") && *ready)
            .count();
        assert_eq!(new, 1, "{images:?}");
        assert_eq!(old_ready, nodes as usize - 1, "{images:?}");
    };
    let pods = e2e.pods().await;
    check_one_replaced(&pods);
    let canary = pods
        .iter()
        .find(|p| image_and_ready(p).0.ends_with(":v2"))
        .unwrap();
    let container = canary
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.first())
        .unwrap();
    // The default policy fails a canary whose container waits in CrashLoopBackOff, which the
    // kubelet (here KWOK's Stage) shows from the second crash on.
    let waiting = container
        .state
        .as_ref()
        .and_then(|s| s.waiting.as_ref())
        .and_then(|w| w.reason.clone());
    assert!(
        container.restart_count >= 1
            && (waiting.as_deref() == Some("CrashLoopBackOff") || container.restart_count >= 3),
        "{container:?}"
    );

    let done = e2e.daemon_set().await;
    assert_eq!(
        max_unavailable(&done),
        "1",
        "widened despite the crash loop"
    );
    // The start, and the canary soak's hold, which keeps the DaemonSet controller from
    // replacing more pods with the crash-looping release.
    let writes = audit::daemon_set_writes_since(&e2e.namespace, NAME, upgraded);
    assert_eq!(
        writes.len(),
        2,
        "{:#?}",
        writes.iter().map(audit::Event::line).collect::<Vec<_>>()
    );
    let failures = sum_samples(
        &e2e.scrape(),
        "canary_rollout_failures_total",
        &[r#"reason="CanaryCrashLooping""#],
    );
    assert_eq!(failures - failures_before, 1);
    let reasons = e2e.event_reasons();
    assert!(
        reasons.iter().any(|r| r == "Warning/FailedUpdate"),
        "no FailedUpdate warning: {reasons:?}"
    );
    let cds = e2e.canaries().get(NAME).await.unwrap();
    let degraded = cds
        .status
        .unwrap_or_default()
        .conditions
        .into_iter()
        .any(|c| c.type_ == "Degraded" && c.status == "True");
    assert!(degraded, "no Degraded condition");

    // And it stays that way: nothing more is replaced while the canary keeps crashing.
    tokio::time::sleep(Duration::from_secs(10)).await;
    check_one_replaced(&e2e.pods().await);
}

/// The first container's status of the one pod of DaemonSet `name`, and the pod's phase and
/// Ready condition.
fn pod_state(
    pods: &[Pod],
    name: &str,
) -> Option<(String, bool, k8s_openapi::api::core::v1::ContainerStatus)> {
    let pod = pods.iter().find(|p| {
        p.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("app"))
            .is_some_and(|app| app == name)
    })?;
    let status = pod.status.as_ref()?;
    let container = status.container_statuses.as_ref()?.first()?.clone();
    let ready = image_and_ready(pod).1;
    Some((status.phase.clone().unwrap_or_default(), ready, container))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: run with `cargo xtask e2e`"]
async fn kwok_plays_every_pod_behaviour_of_the_simulator() {
    // The test bed itself: each value of sim.canary.daemonset.dev/behavior on one node, through
    // a plain DaemonSet (no controller involved).
    let e2e = E2e::start("behaviours").await;
    let behaviours = [
        ("healthy", "healthy"),
        ("slow-start", "slow-start=8s"),
        ("never-ready", "never-ready"),
        ("crashloop", "crashloop"),
        ("crash-after-ready", "crash-after-ready=2s"),
        ("image-pull-backoff", "image-pull-backoff"),
    ];
    for (name, behaviour) in behaviours {
        let manifest = serde_json::json!({
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": name},
            "spec": {
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {
                        "labels": {"app": name},
                        "annotations": {"sim.canary.daemonset.dev/behavior": behaviour}
                    },
                    "spec": {
                        "nodeSelector": {"kubernetes.io/hostname": "node-1"},
                        "containers": [{"name": "agent", "image": "registry.example/agent:v1"}]
                    }
                }
            }
        });
        let object: DaemonSet = serde_json::from_value(manifest).unwrap();
        Api::<DaemonSet>::namespaced(e2e.client.clone(), &e2e.namespace)
            .create(&PostParams::default(), &object)
            .await
            .unwrap();
    }
    let pods_api: Api<Pod> = Api::namespaced(e2e.client.clone(), &e2e.namespace);
    let list = || async { pods_api.list(&ListParams::default()).await.unwrap().items };
    let waiting = |c: &k8s_openapi::api::core::v1::ContainerStatus| {
        c.state
            .as_ref()
            .and_then(|s| s.waiting.as_ref())
            .and_then(|w| w.reason.clone())
            .unwrap_or_default()
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let last = loop {
        let pods = list().await;
        let state = |name| pod_state(&pods, name);
        let checks = [
            state("healthy").is_some_and(|(phase, ready, _)| phase == "Running" && ready),
            state("slow-start").is_some_and(|(_, ready, _)| ready),
            state("never-ready").is_some_and(|(phase, ready, c)| {
                phase == "Running"
                    && !ready
                    && c.state.as_ref().is_some_and(|s| s.running.is_some())
            }),
            state("crashloop").is_some_and(|(phase, ready, c)| {
                phase == "Running"
                    && !ready
                    && c.restart_count >= 2
                    && waiting(&c) == "CrashLoopBackOff"
            }),
            state("crash-after-ready").is_some_and(|(_, _, c)| c.restart_count >= 1),
            state("image-pull-backoff").is_some_and(|(phase, _, c)| {
                phase == "Pending"
                    && ["ErrImagePull", "ImagePullBackOff"].contains(&waiting(&c).as_str())
            }),
        ];
        if checks.iter().all(|ok| *ok) {
            break format!("{checks:?}");
        }
        assert!(
            Instant::now() < deadline,
            "after 60 s, behaviours shown (healthy, slow-start, never-ready, crashloop, \
             crash-after-ready, image-pull-backoff): {checks:?}\n{pods:#?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    eprintln!("every behaviour shown: {last}");

    // Readiness timing: healthy pods are Ready the ready delay (3 s) after their containers
    // start, slow-start=8s ones 8 s after.
    let pods = list().await;
    let ready_after_start = |name: &str| {
        let pod = pods
            .iter()
            .find(|p| {
                p.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get("app"))
                    .is_some_and(|a| a == name)
            })
            .unwrap();
        let status = pod.status.as_ref().unwrap();
        let started = status.container_statuses.as_ref().unwrap()[0]
            .state
            .as_ref()
            .and_then(|s| s.running.as_ref())
            .and_then(|r| r.started_at.clone())
            .unwrap();
        let ready = status
            .conditions
            .as_ref()
            .unwrap()
            .iter()
            .find(|c| c.type_ == "Ready")
            .and_then(|c| c.last_transition_time.clone())
            .unwrap();
        ready.0.as_second() - started.0.as_second()
    };
    let healthy = ready_after_start("healthy");
    let slow = ready_after_start("slow-start");
    assert!(
        (2..=5).contains(&healthy),
        "healthy Ready {healthy} s after start"
    );
    assert!(
        (7..=11).contains(&slow),
        "slow-start=8s Ready {slow} s after start"
    );
}

/// The CRD's schema and CEL rules, as a user meets them through `kubectl apply`: each bad spec
/// is refused by the real API server with the rule's own message, and nothing is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs `cargo xtask e2e`"]
async fn the_api_server_refuses_bad_specs_with_the_crds_messages() {
    let e2e = E2e::start("validation").await;
    let good = serde_json::to_value(e2e.agent("v1", "healthy")).unwrap();
    let cases: [(&str, serde_json::Value, &str); 8] = [
        (
            "an out-of-range restart threshold",
            serde_json::json!({"spec": {"strategy": {"crashLoop": {"restartThreshold": 3_000_000_000_u64}}}}),
            "restartThreshold",
        ),
        (
            "an out-of-range maxUnavailable in the template",
            serde_json::json!({"spec": {"template": {"spec": {"updateStrategy": {"rollingUpdate": {"maxUnavailable": 3_000_000_000_u64}}}}}}),
            "must be a string or an integer from -2147483648 to 2147483647",
        ),
        (
            "an empty DaemonSet name",
            serde_json::json!({"spec": {"daemonSetName": ""}}),
            "spec.daemonSetName",
        ),
        (
            "a DaemonSet name that is no DNS-1123 subdomain",
            serde_json::json!({"spec": {"daemonSetName": "Node_Agent"}}),
            "DNS-1123 subdomain",
        ),
        (
            "an annotation key that is no qualified name",
            serde_json::json!({"spec": {"annotationKeys": {"version": "a b", "registry": "r", "id": "i"}}}),
            "qualified names",
        ),
        (
            "a canary wider than the fast step",
            serde_json::json!({"spec": {"strategy": {"canaryMaxUnavailable": "5", "fastMaxUnavailable": "2"}}}),
            "canaryMaxUnavailable must not be larger than fastMaxUnavailable",
        ),
        (
            "a name too long for the owner label",
            serde_json::json!({"metadata": {"name": "a".repeat(64)}}),
            "at most 63 characters",
        ),
        (
            // The same refusal, word for word, as canary-sim's (`crates/sim/tests/it/kubectl.rs`).
            "a field of the strategy one level too high",
            serde_json::json!({"spec": {"canaryMaxUnavailable": "10%"}}),
            "CanaryDaemonSet in version \"v1alpha1\" cannot be handled as a CanaryDaemonSet: \
             strict decoding error: unknown field \"spec.canaryMaxUnavailable\"",
        ),
    ];
    for (what, change, message) in cases {
        let mut bad = good.clone();
        json_patch::merge(&mut bad, &change);
        let file = std::env::temp_dir().join(format!("e2e-bad-{}.json", std::process::id()));
        std::fs::write(&file, bad.to_string()).unwrap();
        let (ok, _, stderr) = e2e.kubectl_status(&["apply", "-f", &file.display().to_string()]);
        assert!(!ok, "{what} was accepted");
        assert!(
            stderr.contains(message),
            "{what}: the refusal does not say {message:?}:\n{stderr}"
        );
    }
    // The DaemonSet's name is immutable once set.
    e2e.canaries()
        .create(&PostParams::default(), &e2e.agent("v1", "healthy"))
        .await
        .unwrap();
    let renamed = serde_json::json!({"spec": {"daemonSetName": "another"}});
    let refused = e2e
        .canaries()
        .patch(NAME, &PatchParams::default(), &Patch::Merge(&renamed))
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("immutable"), "{refused}");
    // `kubectl patch` sends no `fieldValidation`: the server's default, `Warn`, drops the field
    // and says so, as canary-sim does.
    let (patched, _, warned) = e2e.kubectl_status(&[
        "patch",
        "canarydaemonset",
        NAME,
        "--type=merge",
        "-p",
        r#"{"spec":{"foo":1}}"#,
    ]);
    assert!(patched, "{warned}");
    assert_eq!(warned.trim(), r#"Warning: unknown field "spec.foo""#);
}

/// `kubectl set image` on a managed DaemonSet: the controller notices, says so, and writes the
/// desired template back with the canary first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs `cargo xtask e2e`"]
async fn a_hand_edit_of_the_daemon_set_is_reverted() {
    let e2e = E2e::start("drift").await;
    e2e.install(&e2e.agent("v1", "healthy"), Duration::from_secs(300))
        .await;
    let drifts_before = sum_samples(&e2e.scrape(), "canary_drift_detected_total", &[]);
    let container = e2e
        .daemon_set()
        .await
        .spec
        .and_then(|s| s.template.spec)
        .map(|s| s.containers[0].name.clone())
        .unwrap();
    e2e.kubectl(&[
        "set",
        "image",
        &format!("daemonset/{NAME}"),
        &format!("{container}=example.invalid/by-hand:1"),
    ]);
    e2e.wait_for("the revert", Duration::from_secs(300), || async {
        let ds = e2e.daemon_set().await;
        let image = ds
            .spec
            .and_then(|s| s.template.spec)
            .and_then(|s| s.containers[0].image.clone())
            .unwrap_or_default();
        let status = e2e.status().await;
        !image.contains("by-hand") && status.phase_name() == Some("successful")
    })
    .await;
    assert!(
        e2e.event_reasons()
            .iter()
            .any(|r| r == "Warning/DriftDetected"),
        "{:?}",
        e2e.event_reasons()
    );
    assert_eq!(
        sum_samples(&e2e.scrape(), "canary_drift_detected_total", &[]) - drifts_before,
        1
    );
}

/// The README's example as it is (`deploy/examples/node-agent.yaml`: a `hostNetwork` node
/// exporter, its version the image tag) installs and upgrades on the real control plane. Its pods
/// take their node's address, as a kubelet gives a `hostNetwork` pod: on nodes without an
/// address (the KWOK nodes of `cargo xtask cluster up` before they got one) such pods got no pod
/// IP, KWOK started them again and again, and the rollout never ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs `cargo xtask e2e`"]
async fn the_readme_example_with_host_network_rolls_out() {
    let e2e = E2e::start("readme").await;
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/examples/node-agent.yaml"
    );
    let text = std::fs::read_to_string(path).unwrap();
    let documents: Vec<serde_json::Value> = serde_saphyr::from_multiple(&text).unwrap();
    let mut example = documents
        .into_iter()
        .find(|d| d["kind"] == "CanaryDaemonSet")
        .expect("the example has a CanaryDaemonSet");
    // Renamed into the scenario's namespace, with the name the helpers read.
    example["metadata"] = serde_json::json!({"name": NAME, "namespace": e2e.namespace});
    assert_eq!(
        example["spec"]["template"]["spec"]["template"]["spec"]["hostNetwork"],
        true
    );
    let cds: CanaryDaemonSet = serde_json::from_value(example).unwrap();
    e2e.install(&cds, Duration::from_secs(300)).await;

    let patch = serde_json::json!([{
        "op": "replace",
        "path": "/spec/template/spec/template/spec/containers/0/image",
        "value": "quay.io/prometheus/node-exporter:v1.9.2",
    }]);
    let generation = e2e
        .patch_canary(&Patch::<()>::Json(serde_json::from_value(patch).unwrap()))
        .await;
    e2e.wait_phase(generation, "successful", Duration::from_secs(600))
        .await;
    let status = e2e.canaries().get(NAME).await.unwrap().status.unwrap();
    assert_eq!(status.target_version.as_deref(), Some("v1.9.2"));

    let pods = Api::<Pod>::namespaced(e2e.client.clone(), &e2e.namespace)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect::<Vec<_>>();
    assert_eq!(pods.len(), e2e.node_count().await as usize);
    for pod in &pods {
        let (image, ready) = image_and_ready(pod);
        assert!(ready && image.ends_with(":v1.9.2"), "{image} ready={ready}");
        let status = pod.status.as_ref().unwrap();
        assert!(status.pod_ip.as_deref().is_some_and(|ip| !ip.is_empty()));
        assert_eq!(
            status.pod_ip, status.host_ip,
            "a hostNetwork pod has its node's address"
        );
    }
}

/// The Pods driver on the real DaemonSet controller: the DaemonSet is `OnDelete`, the canary goes
/// to the node the selector picks, a pause holds exactly it, then every node follows, one DELETE
/// per old pod. The CRD's new rules (steps, driver) pass the real API server's CEL cost checks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs `cargo xtask e2e`"]
async fn the_pods_driver_updates_the_selected_node_first_and_holds_the_pause() {
    let e2e = E2e::start("pods").await;
    let chosen = e2e.node_names().await.last().cloned().unwrap();
    let label = format!("e2e-canary-{}", std::process::id());
    // Nodes have no namespace: kubectl ignores the scenario's `-n`.
    e2e.kubectl(&[
        "label",
        "node",
        &chosen,
        &format!("{label}=yes"),
        "--overwrite",
    ]);
    let pods_driver = |version: &str| {
        let mut cds = e2e.agent(version, "healthy");
        let strategy = serde_json::json!({
            "driver": "Pods",
            "canaryNodeSelector": {"matchLabels": {label.clone(): "yes"}},
            "steps": [{"nodes": "1"}, {"pause": {"duration": "20s"}}, {"nodes": "100%", "maxUnavailable": "50%"}]
        });
        let mut value = serde_json::to_value(&cds).unwrap();
        json_patch::merge(
            &mut value,
            &serde_json::json!({"spec": {"strategy": strategy}}),
        );
        cds = serde_json::from_value(value).unwrap();
        cds
    };
    e2e.install(&pods_driver("v1"), Duration::from_secs(300))
        .await;
    assert_eq!(e2e.update_strategy().await.as_deref(), Some("OnDelete"));
    let upgraded = Timestamp::now();

    let next = pods_driver("v2");
    let patch = serde_json::json!({"spec": serde_json::to_value(&next.spec).unwrap()});
    let generation = e2e.patch_canary(&Patch::Merge(&patch)).await;
    e2e.wait_phase(generation, "paused", Duration::from_secs(300))
        .await;
    let on_v2 = |pods: Vec<Pod>| -> Vec<String> {
        pods.iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter(|p| image_and_ready(p).0.ends_with(":v2"))
            .filter_map(|p| p.spec.as_ref()?.node_name.clone())
            .collect()
    };
    assert_eq!(on_v2(e2e.pods().await), std::slice::from_ref(&chosen));
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(
        on_v2(e2e.pods().await),
        std::slice::from_ref(&chosen),
        "held during the pause"
    );
    e2e.wait_phase(generation, "successful", Duration::from_secs(600))
        .await;
    let total = e2e.node_count().await;
    assert_eq!(on_v2(e2e.pods().await).len(), total as usize);
    let deleted = audit::writes_in(&e2e.namespace)
        .iter()
        .filter(|w| w.verb == "delete" && w.resource() == "pods" && w.stage_timestamp > upgraded)
        .count();
    assert_eq!(deleted, total as usize, "one DELETE per old pod");
}

/// The bad patches of issue 52's trial (`tests/support/bad_patches.rs`), each refused by the
/// real API server with exactly the words recorded in the table, which `sim serve` must print
/// too (`tests/it/bad_patches.rs`); none changes the stored object.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs `cargo xtask e2e`"]
async fn the_api_server_refuses_the_trials_bad_patches_as_the_table_records() {
    use support::bad_patches::{BAD_PATCHES, TARGET};
    let e2e = E2e::start("bad-patches").await;
    let example = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/examples/node-agent.yaml"
    ))
    .unwrap();
    let mut object: serde_json::Value = example
        .split("\n---\n")
        .filter_map(|doc| serde_saphyr::from_str::<serde_json::Value>(doc).ok())
        .find(|doc| doc["kind"] == "CanaryDaemonSet")
        .unwrap();
    object["metadata"]["namespace"] = serde_json::json!(e2e.namespace);
    let (name, _) = TARGET;
    assert_eq!(object["metadata"]["name"], name);
    let file = std::env::temp_dir().join(format!("e2e-bad-patches-{}.json", std::process::id()));
    std::fs::write(&file, object.to_string()).unwrap();
    e2e.kubectl(&["apply", "-f", &file.display().to_string()]);
    // The controller of this phase writes the status while the patches run; a patch can only
    // reach the spec, the labels and the annotations, and a spec change moves the generation.
    let patchable = || {
        let stored: serde_json::Value =
            serde_json::from_str(&e2e.kubectl(&["get", "cds", name, "-o", "json"])).unwrap();
        serde_json::json!({
            "spec": stored["spec"],
            "generation": stored["metadata"]["generation"],
            "labels": stored["metadata"]["labels"],
            "annotations": stored["metadata"]["annotations"],
        })
    };
    let before = patchable();
    let mut differences = Vec::new();
    for bad in BAD_PATCHES {
        let mut args = vec!["patch", "cds", name];
        args.extend(bad.kind.flags());
        args.extend(["-p", bad.patch]);
        let (ok, _, stderr) = e2e.kubectl_status(&args);
        if ok {
            differences.push(format!("{}: accepted", bad.what));
        } else if stderr != bad.refusal {
            differences.push(format!(
                "{}:\n  recorded: {:?}\n  now:      {stderr:?}",
                bad.what, bad.refusal
            ));
        }
    }
    assert!(differences.is_empty(), "{}", differences.join("\n"));
    assert_eq!(
        patchable(),
        before,
        "a refused patch changed the stored object"
    );
}
