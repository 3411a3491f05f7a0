//! `daemonset-canary sim serve` as a process: it writes a kubeconfig and answers on it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;
use support::KillOnDrop;

use std::process::Command;
use std::time::{Duration, Instant};

#[test]
fn sim_serve_writes_a_kubeconfig_and_serves_nodes() {
    let dir = std::env::temp_dir().join(format!("sim-serve-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    let _ = std::fs::remove_file(&kubeconfig);
    let child = Command::new(env!("CARGO_BIN_EXE_daemonset-canary"))
        .args(["sim", "serve", "--nodes", "4", "--kubeconfig"])
        .arg(&kubeconfig)
        .spawn()
        .unwrap();
    let _child = KillOnDrop(child);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !kubeconfig.exists() {
        assert!(Instant::now() < deadline, "no kubeconfig after 30 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    let config = std::fs::read_to_string(&kubeconfig).unwrap();
    let server = config
        .lines()
        .find_map(|line| line.trim().strip_prefix("server: http://"))
        .expect("a server line");
    let response = support::http_get(server, "/api/v1/nodes", Duration::from_secs(10)).unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    let body = &response[response.find("\r\n\r\n").unwrap() + 4..];
    let body = body.trim_start_matches(|c: char| c.is_ascii_hexdigit() || c.is_whitespace());
    assert_eq!(body.matches("\"kind\":\"Node\"").count(), 4, "{body}");
}
