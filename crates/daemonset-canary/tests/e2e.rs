//! End-to-end suite on a real control plane: kube-apiserver, kube-controller-manager's DaemonSet
//! controller, kube-scheduler and KWOK nodes, built and started by `cargo xtask e2e` (or `cargo
//! xtask cluster up`), with the real `daemonset-canary run` binary driving the rollouts.
//!
//! Every test is `#[ignore]`: `cargo xtask e2e` runs them with `--ignored` and sets
//! `DAEMONSET_CANARY_E2E_KUBECONFIG` (the cluster), `DAEMONSET_CANARY_E2E_METRICS` (the
//! controller's metrics address), `DAEMONSET_CANARY_E2E_CONTROLLER_LOG` and `KUBECTL`. Run by hand
//! with `--ignored` and without them, a test fails and says how to run it; with them set and the
//! cluster unreachable, it fails too. It never skips.
//!
//! Adding a scenario: one `#[tokio::test] #[ignore = ...]` function that starts with
//! `E2e::start("short-name").await`, which gives it its own namespace (deleted at the end), a
//! kube client, kubectl and the controller's metrics. The scenarios run one at a time
//! (`--test-threads=1`, set by `cargo xtask e2e`) because the controller's DaemonSet-write
//! counter is global, and a scenario reads its own increase.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

// The simulator's node and neighbour behaviours on KWOK nodes (no controller involved).
#[path = "e2e_node_health.rs"]
mod node_health;
mod support;

use support::max_unavailable;

use canary_kube_adapter::CanaryDaemonSet;
use daemonset_canary::demo::scenario::{NAME, manifest};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

const ENV_KUBECONFIG: &str = "DAEMONSET_CANARY_E2E_KUBECONFIG";
const ENV_METRICS: &str = "DAEMONSET_CANARY_E2E_METRICS";
const ENV_CONTROLLER_LOG: &str = "DAEMONSET_CANARY_E2E_CONTROLLER_LOG";
const HOW_TO_RUN: &str = "run the e2e suite with `cargo xtask e2e`";

/// What a scenario works with; its namespace is deleted when it is dropped.
struct E2e {
    client: kube::Client,
    kubeconfig: PathBuf,
    kubectl: PathBuf,
    metrics: String,
    controller_log: PathBuf,
    namespace: String,
}

fn required_env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set: {HOW_TO_RUN}"))
}

impl E2e {
    /// Connects to the cluster (failing loudly when it does not answer) and creates the
    /// scenario's namespace `e2e-<scenario>-<pid>`.
    async fn start(scenario: &str) -> Self {
        let kubeconfig = PathBuf::from(required_env(ENV_KUBECONFIG));
        let metrics = required_env(ENV_METRICS);
        let controller_log = PathBuf::from(required_env(ENV_CONTROLLER_LOG));
        let kubectl = PathBuf::from(required_env("KUBECTL"));
        let file = Kubeconfig::read_from(&kubeconfig)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", kubeconfig.display()));
        let config = kube::Config::from_custom_kubeconfig(file, &KubeConfigOptions::default())
            .await
            .unwrap();
        let client = kube::Client::try_from(config).unwrap();
        let version = tokio::time::timeout(Duration::from_secs(20), client.apiserver_version())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "the cluster of {} does not answer within 20 s",
                    kubeconfig.display()
                )
            })
            .unwrap_or_else(|e| {
                panic!(
                    "the cluster of {} is not reachable: {e}",
                    kubeconfig.display()
                )
            });
        assert_eq!(version.major, "1", "{version:?}");
        let namespace = format!("e2e-{scenario}-{}", std::process::id());
        let object: Namespace = serde_json::from_value(serde_json::json!({
            "metadata": {"name": namespace}
        }))
        .unwrap();
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &object)
            .await
            .unwrap();
        let e2e = Self {
            client,
            kubeconfig,
            kubectl,
            metrics,
            controller_log,
            namespace,
        };
        // Pods are admitted once the namespace's default ServiceAccount exists.
        e2e.wait_for(
            "the default ServiceAccount",
            Duration::from_secs(30),
            || async { e2e.kubectl_status(&["get", "serviceaccount", "default"]).0 },
        )
        .await;
        e2e
    }

    /// `kubectl -n <namespace> <args>`: (success, stdout, stderr).
    fn kubectl_status(&self, args: &[&str]) -> (bool, String, String) {
        let output = Command::new(&self.kubectl)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(["-n", &self.namespace, "--request-timeout=30s"])
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", self.kubectl.display()));
        (
            output.status.success(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    }

    /// `kubectl -n <namespace> <args>`, which must succeed; its stdout.
    fn kubectl(&self, args: &[&str]) -> String {
        let (ok, stdout, stderr) = self.kubectl_status(args);
        assert!(ok, "kubectl {args:?} failed:\n{stdout}\n{stderr}");
        stdout
    }

    fn canaries(&self) -> Api<CanaryDaemonSet> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    async fn node_count(&self) -> u32 {
        u32::try_from(self.node_names().await.len()).unwrap()
    }

    /// The scenario's node agent at `version` with the KWOK behaviour `behavior`, in this
    /// scenario's namespace.
    fn node_agent(version: &str, behavior: &str, namespace: &str) -> CanaryDaemonSet {
        let mut object = manifest(
            canary_state_machine::Compatibility::Fixed,
            version,
            behavior,
        );
        object["metadata"]["namespace"] = serde_json::json!(namespace);
        serde_json::from_value(object).unwrap()
    }

    /// Creates `cds` and waits until its rollout is `successful`.
    async fn install(&self, cds: &CanaryDaemonSet, timeout: Duration) {
        let created = self
            .canaries()
            .create(&PostParams::default(), cds)
            .await
            .unwrap();
        self.wait_phase(created.metadata.generation, "successful", timeout)
            .await;
    }

    /// The node names, sorted.
    async fn node_names(&self) -> Vec<String> {
        canary_testkit::node_names(&self.client).await
    }

    /// Moves the target to `version` with `behavior`; returns the new spec generation.
    async fn upgrade(&self, version: &str, behavior: &str) -> Option<i64> {
        let next = Self::node_agent(version, behavior, &self.namespace);
        let patch = serde_json::json!({"spec": serde_json::to_value(&next.spec).unwrap()});
        self.patch_canary(&Patch::Merge(&patch)).await
    }

    /// Patches the scenario's CanaryDaemonSet; returns its new spec generation.
    async fn patch_canary<P: serde::Serialize + std::fmt::Debug>(
        &self,
        patch: &Patch<P>,
    ) -> Option<i64> {
        self.canaries()
            .patch(NAME, &PatchParams::default(), patch)
            .await
            .unwrap()
            .metadata
            .generation
    }

    async fn daemon_set(&self) -> DaemonSet {
        Api::<DaemonSet>::namespaced(self.client.clone(), &self.namespace)
            .get(NAME)
            .await
            .unwrap()
    }

    async fn pods(&self) -> Vec<Pod> {
        Api::<Pod>::namespaced(self.client.clone(), &self.namespace)
            .list(&ListParams::default().labels(&format!("app.kubernetes.io/name={NAME}")))
            .await
            .unwrap()
            .items
    }

    /// The controller's `/metrics`.
    fn scrape(&self) -> String {
        let raw = support::http_get(&self.metrics, "/metrics", Duration::from_secs(5))
            .unwrap_or_else(|| {
                panic!(
                    "no answer from the controller's /metrics at {}",
                    self.metrics
                )
            });
        raw.split_once("\r\n\r\n")
            .map(|(_, body)| body.to_owned())
            .unwrap_or_default()
    }

    /// Successful DaemonSet writes so far, over every purpose.
    fn daemon_set_writes(&self) -> u64 {
        sum_samples(
            &self.scrape(),
            "canary_daemonset_writes_total",
            &[r#"result="ok""#],
        )
    }

    /// Polls `done` every 500 ms; fails with the controller's log when `timeout` passes.
    async fn wait_for<F, Fut>(&self, what: &str, timeout: Duration, mut done: F)
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let deadline = Instant::now() + timeout;
        while !done().await {
            assert!(
                Instant::now() < deadline,
                "{what}: not reached after {timeout:?}\n{}",
                self.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Waits until the status describes spec generation `generation` in `phase`; returns every
    /// phase seen on the way (in order, without repeats). Fails when it ends in another final
    /// phase.
    async fn wait_phase(
        &self,
        generation: Option<i64>,
        phase: &str,
        timeout: Duration,
    ) -> Vec<String> {
        let deadline = Instant::now() + timeout;
        let mut seen: Vec<String> = Vec::new();
        loop {
            let cds = self.canaries().get(NAME).await.unwrap();
            let status = cds.status.clone().unwrap_or_default();
            let current = status.observed_generation >= generation;
            if current
                && let Some(now) = status.phase.clone()
                && seen.last() != Some(&now)
            {
                seen.push(now);
            }
            if current && status.phase.as_deref() == Some(phase) {
                return seen;
            }
            let other_end = ["successful", "failed"]
                .iter()
                .any(|end| *end != phase && current && status.phase.as_deref() == Some(*end));
            assert!(
                !other_end,
                "ended {:?} instead of {phase}: {status:?}\n{}",
                status.phase,
                self.log_tail()
            );
            assert!(
                Instant::now() < deadline,
                "not {phase} after {timeout:?} (phases seen {seen:?}): {status:?}\n{}",
                self.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.controller_log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        format!(
            "--- last lines of {} ---\n{}",
            self.controller_log.display(),
            lines[lines.len().saturating_sub(30)..].join("\n")
        )
    }

    /// `type/reason` of the controller's events (they regard the CanaryDaemonSet), oldest first.
    fn event_reasons(&self) -> Vec<String> {
        self.kubectl(&[
            "get",
            "events",
            "--field-selector",
            &format!("involvedObject.kind=CanaryDaemonSet,involvedObject.name={NAME}"),
            "--sort-by=.lastTimestamp",
            "-o",
            "jsonpath={range .items[*]}{.type}/{.reason}{\"\\n\"}{end}",
        ])
        .lines()
        .map(str::to_owned)
        .collect()
    }
}

impl Drop for E2e {
    fn drop(&mut self) {
        // Do not wait: the namespace's pods go in the background; names carry the pid, so a
        // later run never collides with what is still terminating.
        let _ = Command::new(&self.kubectl)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(["delete", "namespace", &self.namespace, "--wait=false"])
            .output();
    }
}

/// The sum of the samples of `family` whose labels contain every one of `labels`.
fn sum_samples(exposition: &str, family: &str, labels: &[&str]) -> u64 {
    exposition
        .lines()
        // `family{labels} value`, or `family value` for a family without labels.
        .filter(|line| {
            line.strip_prefix(family)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter(|line| labels.iter().all(|label| line.contains(label)))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|value| value as u64)
        .sum()
}

/// The image of a pod's first container and whether the pod is Ready.
fn image_and_ready(pod: &Pod) -> (String, bool) {
    let image = pod
        .spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .and_then(|c| c.image.clone())
        .unwrap_or_default();
    let ready = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
        });
    (image, ready)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: run with `cargo xtask e2e`"]
async fn reference_rollout_on_every_node_writes_the_daemon_set_three_times() {
    let e2e = E2e::start("rollout").await;
    let nodes = e2e.node_count().await;
    assert!(
        nodes >= 10,
        "the e2e cluster has {nodes} nodes; `cargo xtask e2e` starts 50"
    );

    e2e.install(
        &E2e::node_agent("v1", "healthy", &e2e.namespace),
        Duration::from_secs(180),
    )
    .await;
    let installed = e2e.daemon_set().await;
    let generation_before = installed.metadata.generation.unwrap_or_default();
    let writes_before = e2e.daemon_set_writes();

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
        let status = e2e
            .canaries()
            .get(NAME)
            .await
            .unwrap()
            .status
            .unwrap_or_default();
        if status.observed_generation >= generation {
            if let Some(phase) = status.phase.clone()
                && phases.last() != Some(&phase)
            {
                phases.push(phase);
            }
            if status.phase.as_deref() == Some("successful") && status.updated_ready == nodes {
                break;
            }
            assert_ne!(
                status.phase.as_deref(),
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

    // Three DaemonSet writes (start, widen, revert), by the controller's own count and by the
    // API server's generation of the DaemonSet.
    assert_eq!(
        e2e.daemon_set_writes() - writes_before,
        3,
        "{}",
        e2e.scrape()
    );
    let done = e2e.daemon_set().await;
    assert_eq!(
        done.metadata.generation.unwrap_or_default() - generation_before,
        3
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
        phases.first().map(String::as_str),
        Some("canary"),
        "{phases:?}"
    );
    assert_eq!(
        phases.last().map(String::as_str),
        Some("successful"),
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
    e2e.install(
        &E2e::node_agent("v1", "healthy", &e2e.namespace),
        Duration::from_secs(180),
    )
    .await;
    let writes_before = e2e.daemon_set_writes();
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
    assert_eq!(
        e2e.daemon_set_writes() - writes_before,
        1,
        "{}",
        e2e.scrape()
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
    let good = serde_json::to_value(E2e::node_agent("v1", "healthy", &e2e.namespace)).unwrap();
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
        .create(
            &PostParams::default(),
            &E2e::node_agent("v1", "healthy", &e2e.namespace),
        )
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
    let before = e2e.kubectl(&["get", "cds", name, "-o", "json"]);
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
        e2e.kubectl(&["get", "cds", name, "-o", "json"]),
        before,
        "a refused patch changed the stored object"
    );
}

/// `kubectl set image` on a managed DaemonSet: the controller notices, says so, and writes the
/// desired template back with the canary first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs `cargo xtask e2e`"]
async fn a_hand_edit_of_the_daemon_set_is_reverted() {
    let e2e = E2e::start("drift").await;
    e2e.install(
        &E2e::node_agent("v1", "healthy", &e2e.namespace),
        Duration::from_secs(300),
    )
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
        let status = e2e
            .canaries()
            .get(NAME)
            .await
            .unwrap()
            .status
            .unwrap_or_default();
        !image.contains("by-hand") && status.phase.as_deref() == Some("successful")
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
        let mut cds = E2e::node_agent(version, "healthy", &e2e.namespace);
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
    let strategy = e2e
        .daemon_set()
        .await
        .spec
        .unwrap()
        .update_strategy
        .unwrap();
    assert_eq!(strategy.type_.as_deref(), Some("OnDelete"));
    let deletions_before = sum_samples(&e2e.scrape(), "canary_pod_deletions_total", &[]);

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
    let deleted = sum_samples(&e2e.scrape(), "canary_pod_deletions_total", &[]) - deletions_before;
    assert_eq!(deleted, u64::from(total), "one DELETE per old pod");
}

/// A DaemonSet the controller does not own (as Helm installs one), `OnDelete`, changed with
/// `kubectl set image`: the controller rolls the new revision out and never writes the DaemonSet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs `cargo xtask e2e`"]
async fn a_workload_ref_daemon_set_follows_its_owner_and_is_never_written() {
    let e2e = E2e::start("workload").await;
    let owned = E2e::node_agent("v1", "healthy", &e2e.namespace);
    let mut ds: DaemonSet = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "helm-agent", "namespace": e2e.namespace,
                     "labels": {"app.kubernetes.io/managed-by": "Helm"}},
        "spec": serde_json::to_value(owned.spec.template.clone().unwrap().spec).unwrap()
    }))
    .unwrap();
    if let Some(spec) = ds.spec.as_mut() {
        spec.update_strategy = Some(k8s_openapi::api::apps::v1::DaemonSetUpdateStrategy {
            type_: Some("OnDelete".into()),
            rolling_update: None,
        });
    }
    Api::<DaemonSet>::namespaced(e2e.client.clone(), &e2e.namespace)
        .create(&PostParams::default(), &ds)
        .await
        .unwrap();
    let writes_before = e2e.daemon_set_writes();
    let total = e2e.node_count().await as usize;
    let cds: CanaryDaemonSet = serde_json::from_value(serde_json::json!({
        "apiVersion": "canary.daemonset.dev/v1alpha1",
        "kind": "CanaryDaemonSet",
        "metadata": {"name": NAME, "namespace": e2e.namespace},
        "spec": {"workloadRef": {"name": "helm-agent"}, "target": {"version": "chart-1"},
                 "strategy": {"driver": "Pods"}}
    }))
    .unwrap();
    e2e.install(&cds, Duration::from_secs(300)).await;
    let container = canary_testkit::first_container(&ds).name.clone();
    let image = "registry.example/by-helm:2";
    e2e.kubectl(&[
        "set",
        "image",
        "daemonset/helm-agent",
        &format!("{container}={image}"),
    ]);
    e2e.wait_for(
        "every pod on the owner's new image",
        Duration::from_secs(600),
        || async {
            let pods = Api::<Pod>::namespaced(e2e.client.clone(), &e2e.namespace)
                .list(&ListParams::default())
                .await
                .unwrap()
                .items;
            let live: Vec<&Pod> = pods
                .iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .collect();
            let phase = e2e
                .canaries()
                .get(NAME)
                .await
                .unwrap()
                .status
                .and_then(|s| s.phase);
            live.len() == total
                && live
                    .iter()
                    .all(|p| image_and_ready(p) == (image.to_owned(), true))
                && phase.as_deref() == Some("successful")
        },
    )
    .await;
    assert_eq!(
        e2e.daemon_set_writes(),
        writes_before,
        "the DaemonSet is never written"
    );
}
