//! Analysis gates with a real Prometheus, as a user runs them: `sim serve`, `run --kubeconfig`,
//! and a Prometheus that scrapes a small exporter of per-node error ratios (this test's, the
//! way a node agent exports its own). The agent's error ratio is 1% on every node, 10% on
//! the nodes that run a bad version.
//!
//! One rollout after another on one controller: a healthy release passes its analysis and
//! completes; with Prometheus stopped in the pause step, the rollout holds (`paused`, `AnalysisInconclusive`) however long the pause has been over, and
//! goes on to `successful` once Prometheus is started again; a version whose canary reports ten
//! times the baseline's error ratio fails with `AnalysisFailed` and, with `onFailure:
//! Rollback`, is rolled back to the last good one.
//!
//! A second test serves Prometheus over https with the test certificate of `testdata/tls/`:
//! the CA and a bearer token come from Secrets; a CA that does not sign the server's
//! certificate holds the rollout (inconclusive) until the right one is put back.
//!
//! Needs Debian's `prometheus` package, as `prometheus.rs`.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use canary_kube_adapter::CanaryDaemonSet;
use canary_state_machine::{Compatibility, Driver};
use canary_testkit::put_secret;
use daemonset_canary::demo::scenario::{NAME, NAMESPACE, error_ratio_analysis, manifest_for};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::prometheus::{start_prometheus_at, start_prometheus_tls_at, temp_dir};
use crate::support::{self, free_port};

/// The version whose pods report errors.
const BAD: &str = "v4";

/// The exporter: the version each node runs, read from the cluster; `/metrics` answers
/// `agent_error_ratio{node="..."}` for each.
#[derive(Default)]
struct Exporter {
    versions: Mutex<BTreeMap<String, String>>,
}

impl Exporter {
    fn exposition(&self) -> String {
        let mut text = String::from("# TYPE agent_error_ratio gauge\n");
        for (node, version) in self.versions.lock().unwrap().iter() {
            let ratio = if version == BAD { 0.1 } else { 0.01 };
            text.push_str(&format!("agent_error_ratio{{node=\"{node}\"}} {ratio}\n"));
        }
        text
    }

    /// Serves `/metrics` on `listener` until the test process ends.
    fn serve(self: Arc<Self>, listener: TcpListener) {
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let mut request = [0u8; 4096];
                let _ = stream.read(&mut request);
                let body = self.exposition();
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
    }

    /// An exporter serving on a loopback port and following the pods of `client`'s cluster,
    /// and its port.
    fn start(client: &kube::Client) -> (Arc<Self>, u16) {
        let exporter = Arc::new(Exporter::default());
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        Arc::clone(&exporter).serve(listener);
        let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
        tokio::spawn(Arc::clone(&exporter).follow(pods));
        (exporter, port)
    }

    /// Follows the pods: which version runs on which node.
    async fn follow(self: Arc<Self>, pods: Api<Pod>) {
        loop {
            if let Ok(list) = pods.list(&ListParams::default()).await {
                let mut versions = BTreeMap::new();
                for pod in list.items {
                    if pod.metadata.deletion_timestamp.is_some() {
                        continue;
                    }
                    let spec = pod.spec.unwrap_or_default();
                    let (Some(node), Some(image)) = (
                        spec.node_name,
                        spec.containers.into_iter().next().and_then(|c| c.image),
                    ) else {
                        continue;
                    };
                    let tag = image.rsplit(':').next().unwrap_or_default().to_owned();
                    versions.insert(node, tag);
                }
                *self.versions.lock().unwrap() = versions;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// The demo's Pods-driver manifest with one canary node, an 8 s analysed pause, and the demo's
/// analysis every 2 s (the canary's error ratio at most 5%, at most twice the baseline's).
fn analysed(version: &str, prometheus_port: u16) -> serde_json::Value {
    analysed_at(version, &format!("http://127.0.0.1:{prometheus_port}"))
}

/// [`analysed`] with Prometheus at `address`.
fn analysed_at(version: &str, address: &str) -> serde_json::Value {
    let mut manifest = manifest_for(Compatibility::Fixed, Driver::Pods, None, version, "healthy");
    manifest["spec"]["strategy"]["steps"] = json!([{"nodes": "1"}, {"pause": {"duration": "8s"}}]);
    manifest["spec"]["strategy"]["onFailure"] = json!("Rollback");
    let mut analysis = error_ratio_analysis(address, "2s");
    analysis["prometheus"]["timeout"] = json!("2s");
    analysis["metrics"][0]["inconclusiveLimit"] = json!(2);
    manifest["spec"]["analysis"] = analysis;
    manifest
}

async fn set_version(api: &Api<CanaryDaemonSet>, version: &str, prometheus_port: u16) {
    set_spec(api, analysed(version, prometheus_port)).await;
}

/// Merge-patches the object's spec with the spec of `manifest`.
async fn set_spec(api: &Api<CanaryDaemonSet>, manifest: serde_json::Value) {
    api.patch(
        NAME,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": manifest["spec"]})),
    )
    .await
    .unwrap();
}

/// Waits (90 s at most) until `done` holds for the status of the object's current generation.
async fn wait_for(
    api: &Api<CanaryDaemonSet>,
    what: &str,
    done: impl Fn(&canary_kube_adapter::crd::CanaryDaemonSetStatus) -> bool,
) -> canary_kube_adapter::crd::CanaryDaemonSetStatus {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let cds = api.get(NAME).await.unwrap();
        let status = cds.status.clone().unwrap_or_default();
        if status.observed_generation >= cds.metadata.generation && done(&status) {
            return status;
        }
        assert!(Instant::now() < deadline, "never {what}: {status:#?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn phase(status: &canary_kube_adapter::crd::CanaryDaemonSetStatus) -> &str {
    status.phase_name().unwrap_or_default()
}

fn analysis_condition(
    status: &canary_kube_adapter::crd::CanaryDaemonSetStatus,
) -> (String, String) {
    status
        .conditions
        .iter()
        .find(|c| c.type_ == "AnalysisPassing")
        .map(|c| (c.status.clone(), c.reason.clone()))
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_prometheus_holds_passes_and_fails_rollouts() {
    let dir = temp_dir("analysis");
    let sim = support::serve_sim("analysis", &["--nodes", "4", "--speed", "4"]);
    let client = support::client_with_crd(&sim.kubeconfig).await;

    let (exporter, exporter_port) = Exporter::start(&client);
    let prometheus_port = free_port();
    let mut prometheus = Some(start_prometheus_at(&dir, exporter_port, prometheus_port));

    let log = std::fs::File::create(dir.join("run.log")).unwrap();
    let _run = support::spawn_run_allowing(
        &sim.kubeconfig,
        Stdio::from(log),
        &[&format!("http://127.0.0.1:{prometheus_port}")],
    );

    let api: Api<CanaryDaemonSet> = Api::namespaced(client.clone(), NAMESPACE);
    let v1: CanaryDaemonSet = serde_json::from_value(analysed("v1", prometheus_port)).unwrap();
    api.create(&PostParams::default(), &v1).await.unwrap();
    wait_for(&api, "v1 installed", |s| phase(s) == "successful").await;

    // A healthy release: its analysis passes, the pause ends on time, the rollout completes.
    set_version(&api, "v2", prometheus_port).await;
    let done = wait_for(&api, "v2 successful", |s| phase(s) == "successful").await;
    let analysis = done.analysis.clone().unwrap();
    // Measured on through the last nodes step (issue 46), where it ended passing.
    assert_eq!((analysis.verdict.as_str(), analysis.step), ("Passing", 2));
    assert_eq!(analysis.measurements[0].failures, 0);

    // Prometheus stops: the pause step of v3 cannot be judged, so it holds.
    drop(prometheus.take());
    set_version(&api, "v3", prometheus_port).await;
    let held = wait_for(&api, "held inconclusive", |s| {
        analysis_condition(s).1 == "AnalysisInconclusive"
    })
    .await;
    assert_eq!(phase(&held), "paused");
    let analysis = held.analysis.clone().unwrap();
    assert_eq!(analysis.verdict, "Inconclusive");
    let detail = analysis.measurements[0].detail.clone().unwrap_or_default();
    assert!(detail.contains("unreachable"), "{detail}");
    // Well past the 8 s pause: still the canary alone.
    tokio::time::sleep(Duration::from_secs(12)).await;
    let still = api.get(NAME).await.unwrap().status.unwrap();
    assert_eq!(
        (phase(&still), still.current_step_index),
        ("paused", Some(1))
    );
    assert_eq!(still.updated, 1, "{still:#?}");

    // Started again: the analysis passes and the rollout goes on.
    prometheus = Some(start_prometheus_at(&dir, exporter_port, prometheus_port));
    let done = wait_for(&api, "v3 successful", |s| phase(s) == "successful").await;
    let analysis = done.analysis.clone().unwrap();
    assert_eq!(analysis.verdict, "Passing");
    let measured = &analysis.measurements[0];
    // The last nodes step is measured to the end (issue 46): once every node runs v3 the
    // baseline is empty, so its last round may be inconclusive, which holds no nodes step.
    assert_eq!(measured.failures, 0);
    assert!(
        measured.verdict == "Pass" || measured.verdict == "Inconclusive",
        "{measured:?}"
    );
    assert!(
        measured
            .query
            .starts_with(r#"max(agent_error_ratio{node=~""#),
        "{}",
        measured.query
    );

    // v4's canary reports ten times the baseline's error ratio: failed, rolled back to v3.
    set_version(&api, BAD, prometheus_port).await;
    let back = wait_for(&api, "v4 rolled back", |s| phase(s) == "rolledBack").await;
    let analysis = back.analysis.clone().unwrap();
    assert_eq!(analysis.verdict, "Failed", "{analysis:#?}");
    assert_eq!(analysis.measurements[0].verdict, "Fail");
    assert_eq!(analysis.measurements[0].value.as_deref(), Some("0.1"));
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(client.clone(), NAMESPACE);
    let failed: Vec<_> = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("AnalysisFailed"))
        .collect();
    assert_eq!(failed.len(), 1, "{failed:#?}");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let versions = exporter.versions.lock().unwrap().clone();
    assert!(
        versions.values().all(|v| v == "v3"),
        "every node back on v3: {versions:?}"
    );
    drop(prometheus);
}

/// The spec of [`analysed_at`] over https, with the CA and the token from Secrets.
fn analysed_https(version: &str, prometheus_port: u16) -> serde_json::Value {
    let mut manifest = analysed_at(version, &format!("https://127.0.0.1:{prometheus_port}"));
    let prometheus = &mut manifest["spec"]["analysis"]["prometheus"];
    prometheus["caSecret"] = json!({"name": "prometheus-ca", "key": "ca.crt"});
    prometheus["bearerTokenSecret"] = json!({"name": "prometheus-token", "key": "token"});
    manifest
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_prometheus_over_https_is_verified_with_the_ca_of_a_secret() {
    let dir = temp_dir("analysis-tls");
    let sim = support::serve_sim("analysis-tls", &["--nodes", "3", "--speed", "4"]);
    let client = support::client_with_crd(&sim.kubeconfig).await;
    let tls = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/tls");
    let ca = std::fs::read_to_string(tls.join("ca.crt")).unwrap();
    let not_the_ca = std::fs::read_to_string(tls.join("server.crt")).unwrap();
    put_secret(&client, NAMESPACE, "prometheus-ca", "ca.crt", &ca).await;
    put_secret(&client, NAMESPACE, "prometheus-token", "token", "a-token\n").await;

    let (_exporter, exporter_port) = Exporter::start(&client);
    let port = free_port();
    let _prometheus = start_prometheus_tls_at(&dir, exporter_port, port);

    let log = std::fs::File::create(dir.join("run.log")).unwrap();
    let _run = support::spawn_run_allowing(
        &sim.kubeconfig,
        Stdio::from(log),
        &[&format!("https://127.0.0.1:{port}")],
    );
    let api: Api<CanaryDaemonSet> = Api::namespaced(client.clone(), NAMESPACE);
    let set = |version: &'static str| {
        let api = api.clone();
        async move { set_spec(&api, analysed_https(version, port)).await }
    };
    let v1: CanaryDaemonSet = serde_json::from_value(analysed_https("v1", port)).unwrap();
    api.create(&PostParams::default(), &v1).await.unwrap();
    wait_for(&api, "v1 installed", |s| phase(s) == "successful").await;

    // Verified with the CA of the Secret: the analysis passes.
    set("v2").await;
    let done = wait_for(&api, "v2 successful", |s| phase(s) == "successful").await;
    let analysis = done.analysis.clone().unwrap();
    assert_eq!(analysis.verdict, "Passing", "{analysis:#?}");
    assert_eq!(analysis.measurements[0].value.as_deref(), Some("0.01"));

    // A CA that does not sign the server's certificate: no answer is trusted, the canary holds.
    put_secret(&client, NAMESPACE, "prometheus-ca", "ca.crt", &not_the_ca).await;
    set("v3").await;
    let held = wait_for(&api, "held inconclusive", |s| {
        analysis_condition(s).1 == "AnalysisInconclusive"
    })
    .await;
    assert_eq!(phase(&held), "paused");
    let detail = held.analysis.clone().unwrap().measurements[0]
        .detail
        .clone()
        .unwrap_or_default();
    assert!(detail.contains("certificate"), "{detail}");
    assert_eq!(held.updated, 1, "{held:#?}");

    // The right CA back: the rollout goes on.
    put_secret(&client, NAMESPACE, "prometheus-ca", "ca.crt", &ca).await;
    wait_for(&api, "v3 successful", |s| phase(s) == "successful").await;
}
