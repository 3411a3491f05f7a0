//! The metrics endpoint as Prometheus sees it: served over TCP, the right Content-Type, and an
//! exposition that the real `promtool check metrics` accepts.
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

/// The probes' own listener (`run --health-addr`) answers while every connection the metrics
/// listener serves is held by idle clients (a scraper stuck, or someone in the pod network who
/// opens connections and sends nothing): on the metrics listener alone the kubelet's probe would
/// wait for a slot, time out and get a healthy controller restarted.
#[tokio::test]
async fn the_health_listener_answers_while_the_metrics_connections_are_all_held() {
    use daemonset_canary::server::{HEADER_READ_TIMEOUT, MAX_CONNECTIONS};
    use std::time::Duration;
    let health = Health::default();
    health.set_started();
    let state = ServerState {
        metrics: populated_metrics(),
        health,
    };
    let metrics_server = Server::bind("127.0.0.1:0".parse().unwrap(), state.clone())
        .await
        .unwrap();
    let probes = Server::bind_health("127.0.0.1:0".parse().unwrap(), state)
        .await
        .unwrap();
    let (metrics_addr, probes_addr) = (
        metrics_server.local_addr().unwrap(),
        probes.local_addr().unwrap(),
    );
    tokio::spawn(metrics_server.serve(std::future::pending()));
    tokio::spawn(probes.serve(std::future::pending()));

    // Every slot of the metrics listener taken by a connection that sends nothing.
    let mut idle = Vec::new();
    for _ in 0..MAX_CONNECTIONS {
        idle.push(tokio::net::TcpStream::connect(metrics_addr).await.unwrap());
    }
    // Let the server accept them all.
    tokio::time::sleep(Duration::from_millis(200)).await;

    // The metrics listener has no slot left: a probe there gets no answer in a kubelet's
    // default probe timeout (1 s), which is why the probes have their own listener.
    let starved = tokio::time::timeout(Duration::from_secs(1), get(metrics_addr, "/healthz")).await;
    assert!(
        starved.is_err(),
        "the metrics listener answered with all {MAX_CONNECTIONS} slots held: the test no longer shows the starvation"
    );
    // The probes' listener answers at once, both probes, and serves no metrics.
    for (path, expected) in [("/healthz", "200"), ("/readyz", "200"), ("/metrics", "404")] {
        let (status, _, body) =
            tokio::time::timeout(Duration::from_secs(1), get(probes_addr, path))
                .await
                .unwrap_or_else(|_| panic!("{path} on the probes' listener did not answer in 1 s"));
        assert!(status.contains(expected), "{path}: {status} {body}");
    }
    // The idle clients are let go after the header timeout; the metrics listener then serves
    // again.
    tokio::time::sleep(HEADER_READ_TIMEOUT + Duration::from_millis(500)).await;
    let (status, _, _) = tokio::time::timeout(Duration::from_secs(2), get(metrics_addr, "/readyz"))
        .await
        .expect("the metrics listener serves again once the idle connections are closed");
    assert!(status.contains("200"), "{status}");
    drop(idle);
}
