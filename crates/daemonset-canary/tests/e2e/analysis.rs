//! Analysis on the real control plane with a real Prometheus (Debian's `prometheus`, which
//! `cargo xtask tools` installs): KWOK pods serve nothing, so a small exporter started by the
//! scenario stands in for the node agents. It serves one series per node that runs a pod of
//! the node agent, `agent_error_ratio{node, version}`, derived from the pods it sees: 0.10 for
//! a version whose name says `bad`, 0.01 for any other (what a release that drops one request
//! in ten looks like next to one that drops one in a hundred). Prometheus scrapes it every
//! second; the controller asks Prometheus during the pause step with the demo's analysis
//! (`error-ratio`: at most 0.05, at most twice the old nodes').
//!
//! Needs `prometheus` on PATH; without it the scenario fails naming the install command.

use crate::harness::{E2e, image_and_ready, sum_samples, version_of, with_strategy};
use crate::recorder::Recorder;
use crate::support::KillOnDrop;
use daemonset_canary::demo::scenario::{NAME, error_ratio_analysis};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;
use std::io::{Read, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The error ratio the exporter reports for a pod of a bad version, and of any other.
const BAD_RATIO: f64 = 0.10;
const GOOD_RATIO: f64 = 0.01;

/// The exporter (an HTTP server on a loopback port, in a thread, fed by a task that lists the
/// node agent's pods every half second) and the Prometheus that scrapes it.
struct AnalysisBed {
    /// `http://127.0.0.1:PORT` of Prometheus.
    address: String,
    _prometheus: KillOnDrop,
    stop: Arc<AtomicBool>,
    refresher: tokio::task::JoinHandle<()>,
}

impl Drop for AnalysisBed {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.refresher.abort();
    }
}

/// A free loopback port for the bed's Prometheus, chosen before the controller starts so that
/// the controller can be allowed to query it.
fn prometheus_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl AnalysisBed {
    /// The bed, its Prometheus on `port` ([`prometheus_port`], allowed to the controller).
    async fn start(e2e: &E2e, port: u16) -> Self {
        let exposition = Arc::new(Mutex::new(String::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let exporter_port = listener.local_addr().unwrap().port();
        listener.set_nonblocking(true).unwrap();
        {
            let exposition = exposition.clone();
            let stop = stop.clone();
            std::thread::spawn(move || serve(&listener, &exposition, &stop));
        }
        let pods: Api<Pod> = Api::namespaced(e2e.client.clone(), &e2e.namespace);
        let refresher = {
            let exposition = exposition.clone();
            tokio::spawn(async move {
                loop {
                    let params =
                        ListParams::default().labels(&format!("app.kubernetes.io/name={NAME}"));
                    if let Ok(list) = pods.list(&params).await {
                        *exposition.lock().unwrap() = agent_series(&list.items);
                    }
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            })
        };
        let dir = Path::new(&crate::harness::required_env(crate::harness::ENV_LOGS))
            .join(format!("{}-prometheus", e2e.namespace));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let prometheus =
            crate::support::spawn_prometheus(&dir, ("node-agent", exporter_port), port, None);
        let address = format!("http://127.0.0.1:{port}");
        let bed = Self {
            address,
            _prometheus: prometheus,
            stop,
            refresher,
        };
        // Ready, and the exporter's series in: the first measurement must not be inconclusive
        // for want of a scrape.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let up = crate::support::http_get(
                &format!("127.0.0.1:{port}"),
                "/api/v1/query?query=up",
                Duration::from_secs(5),
            )
            .unwrap_or_default();
            if up.contains(r#""job":"node-agent"}"#) && up.contains(r#","1"]"#) {
                return bed;
            }
            assert!(
                Instant::now() < deadline,
                "Prometheus does not scrape the exporter after 60 s ({}): {up}",
                dir.display()
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

/// The exposition: one `agent_error_ratio` per node with a live pod of the node agent.
fn agent_series(pods: &[Pod]) -> String {
    let mut text = String::from(
        "# HELP agent_error_ratio Requests the node agent failed, per request.\n\
         # TYPE agent_error_ratio gauge\n",
    );
    for pod in pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
    {
        let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) else {
            continue;
        };
        let version = version_of(pod);
        let ratio = if version.contains("bad") {
            BAD_RATIO
        } else {
            GOOD_RATIO
        };
        text.push_str(&format!(
            "agent_error_ratio{{node=\"{node}\",version=\"{version}\"}} {ratio}\n"
        ));
    }
    text
}

/// Answers every request with the exposition until `stop`.
fn serve(listener: &std::net::TcpListener, exposition: &Mutex<String>, stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((mut stream, _)) => {
                let _ = stream.set_nonblocking(false);
                let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
                let mut request = [0u8; 4096];
                let _ = stream.read(&mut request);
                let body = exposition.lock().unwrap().clone();
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n\
                     Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// The node agent with the Pods driver, one canary node, a 15 s analysed pause, then the rest;
/// the analysis asks the scenario's Prometheus every 5 s.
fn analysed(e2e: &E2e, bed: &AnalysisBed, version: &str) -> serde_json::Value {
    let mut object = with_strategy(
        e2e.agent_json(version, "healthy"),
        serde_json::json!({
            "driver": "Pods",
            "steps": [{"nodes": "1"}, {"pause": {"duration": "15s"}}, {"nodes": "100%"}]
        }),
    );
    object["spec"]["analysis"] = error_ratio_analysis(&bed.address, "5s");
    object
}

/// Six nodes, the scenario's Prometheus (its address allowed), and [`analysed`] v1 installed.
async fn analysed_v1(scenario: &str) -> (E2e, AnalysisBed) {
    let port = prometheus_port();
    let e2e = E2e::isolated(scenario)
        .nodes(6)
        .allow_analysis_address(format!("http://127.0.0.1:{port}"))
        .start()
        .await;
    let bed = AnalysisBed::start(&e2e, port).await;
    e2e.install(
        &serde_json::from_value(analysed(&e2e, &bed, "v1")).unwrap(),
        Duration::from_secs(120),
    )
    .await;
    (e2e, bed)
}

/// A good release: the analysis of its pause step measures 0.01 on the canary node against
/// 0.01 on the others, passes, and the rollout goes on to every node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs `cargo xtask e2e`"]
async fn a_good_release_passes_its_pause_steps_analysis() {
    let (e2e, bed) = analysed_v1("analysis-good").await;
    let recorder: Recorder = e2e.record().await;
    let generation = e2e.set_spec(&analysed(&e2e, &bed, "v2")).await;
    e2e.wait_phase(generation, "successful", Duration::from_secs(180))
        .await;
    assert!(
        recorder.phases().contains(&"paused".to_owned()),
        "{:?}",
        recorder.phases()
    );
    assert_eq!(e2e.version_counts().await, [("v2".into(), 6)].into());

    let status = e2e.status().await;
    let analysis = status.analysis.clone().expect("status.analysis");
    // Measured on through the last nodes step (issue 46: analysis all through the rollout),
    // where it ended passing; once every node runs v2 the baseline is empty, so its last round
    // may be inconclusive, which holds no nodes step.
    assert_eq!(analysis.step, 2);
    assert_eq!(analysis.verdict, "Passing", "{analysis:?}");
    let measured = &analysis.measurements[0];
    assert_eq!(measured.metric, "error-ratio");
    assert_eq!(measured.failures, 0, "{measured:?}");
    assert!(
        measured.verdict == "Pass" || measured.verdict == "Inconclusive",
        "{measured:?}"
    );
    let canary = status.canary_nodes.first().cloned().expect("a canary node");
    assert!(
        measured.query.contains(&canary)
            && !measured
                .baseline_query
                .clone()
                .unwrap_or_default()
                .contains(&canary),
        "the canary's node in the query, not in the baseline's: {measured:?}"
    );
    let passing = status
        .conditions
        .iter()
        .find(|c| c.type_ == "AnalysisPassing")
        .expect("the AnalysisPassing condition");
    assert_eq!(passing.status, "True", "{passing:?}");
    let metrics = e2e.scrape();
    let runs = |result: &str| {
        sum_samples(
            &metrics,
            "canary_analysis_runs_total",
            &[&format!("result=\"{result}\""), "metric=\"error-ratio\""],
        )
    };
    assert!(runs("pass") >= 1, "{metrics}");
    assert_eq!(runs("fail"), 0, "{metrics}");
}

/// A bad release: Ready everywhere it runs, but its canary node reports ten times the errors.
/// The analysis fails the rollout (`AnalysisFailed`) before the pause ends, and no node past
/// the canary is touched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs `cargo xtask e2e`"]
async fn a_bad_release_fails_its_analysis_with_only_the_canary_updated() {
    let (e2e, bed) = analysed_v1("analysis-bad").await;
    let generation = e2e.set_spec(&analysed(&e2e, &bed, "v2-bad")).await;
    e2e.wait_phase(generation, "failed", Duration::from_secs(180))
        .await;
    let status = e2e.status().await;
    assert_eq!(status.reason_name(), Some("AnalysisFailed"), "{status:?}");
    let analysis = status.analysis.clone().expect("status.analysis");
    assert_eq!(analysis.verdict, "Failed", "{analysis:?}");
    let measured = &analysis.measurements[0];
    assert_eq!(measured.value.as_deref(), Some("0.1"), "{measured:?}");
    assert_eq!(measured.verdict, "Fail", "{measured:?}");
    assert!(
        measured
            .detail
            .as_deref()
            .unwrap_or_default()
            .contains("max 0.05"),
        "{measured:?}"
    );
    assert!(
        e2e.event_reasons()
            .iter()
            .any(|r| r == "Warning/AnalysisFailed"),
        "{:?}",
        e2e.event_reasons()
    );
    let only_canary = || async {
        let pods = e2e.pods().await;
        let bad: Vec<_> = pods
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter(|p| version_of(p) == "v2-bad")
            .collect();
        assert_eq!(bad.len(), 1, "{:?}", e2e.version_counts().await);
        assert!(
            image_and_ready(bad[0]).1,
            "the bad release is Ready: only analysis can tell"
        );
    };
    only_canary().await;
    // The pause's 15 s are long over, and nothing more is replaced.
    tokio::time::sleep(Duration::from_secs(20)).await;
    only_canary().await;
    assert_eq!(e2e.status().await.phase_name(), Some("failed"));
    let fails = sum_samples(
        &e2e.scrape(),
        "canary_analysis_runs_total",
        &["result=\"fail\"", "metric=\"error-ratio\""],
    );
    assert!(fails >= 1);
}
