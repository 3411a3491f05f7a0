//! The metrics endpoint as Prometheus sees it: served over TCP, the right Content-Type, and an
//! exposition that the real `promtool check metrics` accepts; and the probes, on a listener of their
//! own, answering while every metrics connection is held.
use crate::support;

use canary_kube_adapter::Health;
use daemonset_canary::metrics::{Metrics, Mode, PodCounts, RolloutKey};
use daemonset_canary::server::{Server, ServerState};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Sends one HTTP/1.1 GET and returns (status line, headers, body).
async fn get(addr: std::net::SocketAddr, path: &str) -> (String, String, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).await.unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    let (status, headers) = head.split_once("\r\n").unwrap();
    (status.to_owned(), headers.to_lowercase(), body.to_owned())
}

fn populated_metrics() -> Arc<Metrics> {
    let metrics = Metrics::new().unwrap();
    let key = RolloutKey {
        namespace: "kube-system".into(),
        name: "node-agent".into(),
        mode: Mode::Driven,
    };
    metrics.enter_phase(&key, "started", 10.0, None);
    metrics.enter_phase(&key, "canary", 12.0, Some(("started", 2.0)));
    metrics.set_counts(
        &key,
        PodCounts {
            desired: 50,
            updated: 1,
            updated_ready: 0,
        },
        1,
    );
    metrics.daemonset_write("start", "ok");
    metrics.reconcile(Mode::Driven, 0.002, None);
    metrics.reconcile(Mode::Driven, 0.004, Some("conflict"));
    metrics.rollout_ended(Mode::Driven, "failed", Some("CanaryCrashLooping"), 30.0);
    metrics.set_leader(true);
    Arc::new(metrics)
}

async fn start_server(ready: bool) -> std::net::SocketAddr {
    let health = Health::default();
    if ready {
        health.set_started();
    }
    let state = ServerState {
        metrics: populated_metrics(),
        health,
    };
    let server = Server::bind("127.0.0.1:0".parse().unwrap(), state)
        .await
        .unwrap();
    let addr = server.local_addr().unwrap();
    tokio::spawn(server.serve(std::future::pending()));
    addr
}

#[tokio::test]
async fn metrics_are_served_with_the_prometheus_content_type() {
    let addr = start_server(true).await;
    let (status, headers, body) = get(addr, "/metrics").await;
    assert!(status.contains("200"), "{status}");
    assert!(
        headers.contains("content-type: text/plain; version=0.0.4"),
        "{headers}"
    );
    assert!(body.contains("canary_rollout_phase{mode=\"driven\",name=\"node-agent\",namespace=\"kube-system\",phase=\"canary\"} 1"), "{body}");
}

#[tokio::test]
async fn readiness_follows_the_flag_and_unknown_paths_are_404() {
    let addr = start_server(false).await;
    assert!(get(addr, "/healthz").await.0.contains("200"));
    assert!(get(addr, "/readyz").await.0.contains("503"));
    assert!(get(addr, "/nope").await.0.contains("404"));
}

#[tokio::test]
async fn exposition_passes_promtool_check_metrics() {
    let addr = start_server(true).await;
    let (_, _, body) = get(addr, "/metrics").await;
    support::promtool_check_metrics(&body);
}

/// The status code of `GET path` on `port` within `within`, 0 when nothing answers in time.
fn status_code(port: u16, path: &str, within: std::time::Duration) -> u16 {
    support::http_get(&format!("127.0.0.1:{port}"), path, within)
        .and_then(|raw| raw.split_whitespace().nth(1).and_then(|c| c.parse().ok()))
        .unwrap_or(0)
}

/// The real binary's probes (`run --health-addr`, as deploy/ runs it, against `sim serve`)
/// answer while every connection its metrics listener serves is held by idle clients (a stuck
/// scraper, or anyone the network lets reach the port who connects and sends nothing): on the
/// metrics listener alone the kubelet's probe would wait for a slot, time out and get a healthy
/// controller restarted.
#[test]
fn the_probes_answer_while_every_metrics_connection_is_held() {
    use daemonset_canary::server::{HEADER_READ_TIMEOUT, MAX_CONNECTIONS};
    use std::time::{Duration, Instant};
    let sim = support::serve_sim("probes-listener", &["--nodes", "2"]);
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(support::client_with_crd(&sim.kubeconfig));
    let (metrics_port, health_port) = (support::free_port(), support::free_port());
    let _run = support::KillOnDrop(
        std::process::Command::new(env!("CARGO_BIN_EXE_daemonset-canary"))
            .arg("run")
            .arg("--kubeconfig")
            .arg(&sim.kubeconfig)
            .arg(format!("--metrics-addr=127.0.0.1:{metrics_port}"))
            .arg(format!("--health-addr=127.0.0.1:{health_port}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(sim.dir.join("run.log")).unwrap())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while status_code(health_port, "/readyz", Duration::from_secs(2)) != 200 {
        assert!(
            Instant::now() < deadline,
            "never ready on the probes' listener:\n{}",
            std::fs::read_to_string(sim.dir.join("run.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    // Every slot of the metrics listener taken by a connection that sends nothing.
    let idle: Vec<std::net::TcpStream> = (0..MAX_CONNECTIONS)
        .map(|_| std::net::TcpStream::connect(("127.0.0.1", metrics_port)).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    // On the metrics listener no probe gets an answer within a kubelet's default timeout (1 s):
    // the reason the probes have a listener of their own.
    assert_eq!(
        status_code(metrics_port, "/healthz", Duration::from_secs(1)),
        0,
        "the metrics listener answered with all {MAX_CONNECTIONS} slots held: the test no longer shows the starvation"
    );
    // The probes' listener answers at once, both probes, and serves no metrics.
    for (path, expected) in [("/healthz", 200), ("/readyz", 200), ("/metrics", 404)] {
        assert_eq!(
            status_code(health_port, path, Duration::from_secs(1)),
            expected,
            "{path} on the probes' listener"
        );
    }
    // The idle clients are let go after the header timeout: the metrics listener serves again.
    std::thread::sleep(HEADER_READ_TIMEOUT + Duration::from_millis(500));
    assert_eq!(
        status_code(metrics_port, "/readyz", Duration::from_secs(2)),
        200,
        "the metrics listener serves again once the idle connections are closed"
    );
    drop(idle);
}
