//! `daemonset-canary sim serve` as a process: it writes a kubeconfig and answers on it.
use crate::support;
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

/// Plain HTTP without authentication stays on loopback unless the user says otherwise.
#[test]
fn a_non_loopback_address_needs_the_insecure_flag() {
    let dir = std::env::temp_dir().join(format!("sim-serve-addr-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_daemonset-canary"))
        .args(["sim", "serve", "--addr", "0.0.0.0:0", "--kubeconfig"])
        .arg(&kubeconfig)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let text = String::from_utf8_lossy(&output.stderr);
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(
        text.starts_with("error: refusing to listen on 0.0.0.0:0")
            && text.contains("--insecure-listen-anywhere"),
        "{text}"
    );
    assert!(!kubeconfig.exists(), "nothing served, no kubeconfig");

    let sim = support::serve_sim(
        "sim-serve-anywhere",
        &["--addr", "0.0.0.0:0", "--insecure-listen-anywhere"],
    );
    let config = std::fs::read_to_string(&sim.kubeconfig).unwrap();
    let port = config
        .lines()
        .find_map(|line| line.trim().strip_prefix("server: http://0.0.0.0:"))
        .expect("a server line on the wildcard address");
    let response = support::http_get(
        &format!("127.0.0.1:{port}"),
        "/api/v1/nodes",
        Duration::from_secs(10),
    )
    .unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");

    let bad_speed = std::process::Command::new(env!("CARGO_BIN_EXE_daemonset-canary"))
        .args(["sim", "serve", "--speed", "0", "--kubeconfig"])
        .arg(&kubeconfig)
        .output()
        .unwrap();
    assert_eq!(bad_speed.status.code(), Some(2), "a usage error");
}
