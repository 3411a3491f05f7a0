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
