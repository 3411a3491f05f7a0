//! `daemonset-canary sim serve` as a process: it writes a kubeconfig and answers on it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;
use std::time::Duration;

#[test]
fn sim_serve_writes_a_kubeconfig_and_serves_nodes() {
    let sim = support::serve_sim("sim-serve", &["--nodes", "4"]);
    let kubeconfig = &sim.kubeconfig;
    let config = std::fs::read_to_string(kubeconfig).unwrap();
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
