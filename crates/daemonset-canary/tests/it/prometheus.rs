//! A real Prometheus server scrapes a real-time demo, and its query API shows the rollout's
//! phases: through to `successful` for a healthy rollout, to `failed` for a crash-looping canary.
//! Also: a demo's own exposition passes `promtool check metrics`.
//!
//! Needs Debian's `prometheus` package (`cargo xtask tools` installs it); without it these tests
//! fail, naming the install command.
use crate::support;
use support::{KillOnDrop, free_port};

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub(crate) fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("canary-prom-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The body of a `200` answer to `GET path_and_query` on the loopback `port`.
fn http_get(port: u16, path_and_query: &str) -> Option<String> {
    let raw = support::http_get(
        &format!("127.0.0.1:{port}"),
        path_and_query,
        Duration::from_secs(10),
    )?;
    let (head, body) = raw.split_once("\r\n\r\n")?;
    if !head.starts_with("HTTP/1.1 200") {
        return None;
    }
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        return Some(dechunk(body));
    }
    Some(body.to_owned())
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if size == 0 || rest.len() < size {
            break;
        }
        out.push_str(&rest[..size]);
        body = rest[size..].trim_start_matches("\r\n");
    }
    out
}

fn start_prometheus(dir: &Path, target_port: u16) -> (KillOnDrop, u16) {
    let port = free_port();
    (start_prometheus_at(dir, target_port, port), port)
}

/// A Prometheus listening on `port` that scrapes `127.0.0.1:target_port` every second, its
/// data in `dir` (a restart on the same `dir` and `port` keeps what it scraped).
pub(crate) fn start_prometheus_at(dir: &Path, target_port: u16, port: u16) -> KillOnDrop {
    let prometheus = spawn_prometheus(dir, target_port, port, None);
    wait_ready("prometheus", dir, || http_get(port, "/-/ready").is_some());
    prometheus
}

/// Polls `ready` every 200 ms for up to 30 s; the panic names `what` and where its log is.
fn wait_ready(what: &str, log: &Path, ready: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ready() {
        assert!(
            Instant::now() < deadline,
            "{what} not ready after 30 s; log in {}",
            log.display()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// [`start_prometheus_at`] serving https only, with the test certificate of `testdata/tls/`
/// (signed by its `ca.crt`, for `127.0.0.1`); ready once its log says so.
pub(crate) fn start_prometheus_tls_at(dir: &Path, target_port: u16, port: u16) -> KillOnDrop {
    let tls = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/tls");
    let web = dir.join("web.yml");
    std::fs::write(
        &web,
        format!(
            "tls_server_config:\n  cert_file: {}\n  key_file: {}\n",
            tls.join("server.crt").display(),
            tls.join("server.key").display()
        ),
    )
    .unwrap();
    let log = dir.join("prometheus.log");
    let _ = std::fs::remove_file(&log);
    let prometheus = spawn_prometheus(dir, target_port, port, Some(&web));
    wait_ready("prometheus (TLS)", &log, || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("Server is ready to receive web requests")
    });
    prometheus
}

fn spawn_prometheus(dir: &Path, target_port: u16, port: u16, web: Option<&Path>) -> KillOnDrop {
    support::spawn_prometheus(dir, ("demo", target_port), port, web)
}

fn start_demo(scenario: &str, metrics_port: u16, hold_seconds: u64) -> KillOnDrop {
    let child = Command::new(env!("CARGO_BIN_EXE_daemonset-canary"))
        .args([
            "demo",
            "--real-time",
            "--nodes",
            "3",
            "--scenario",
            scenario,
        ])
        .arg(format!("--metrics-addr=127.0.0.1:{metrics_port}"))
        .arg(format!("--hold={hold_seconds}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    KillOnDrop(child)
}

/// The phases Prometheus recorded as 1 for the demo's CanaryDaemonSet, in time order.
fn phases_seen(prometheus_port: u16, seconds: u64) -> Vec<String> {
    let end = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let query = "canary_rollout_phase%7Bname%3D%22node-agent%22%7D%3D%3D1";
    let path = format!(
        "/api/v1/query_range?query={query}&start={}&end={end}&step=1",
        end - seconds
    );
    let Some(body) = http_get(prometheus_port, &path) else {
        return Vec::new();
    };
    let response: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(response["status"], "success", "{body}");
    let mut points: Vec<(f64, String)> = Vec::new();
    for series in response["data"]["result"].as_array().unwrap() {
        let phase = series["metric"]["phase"].as_str().unwrap().to_owned();
        for value in series["values"].as_array().unwrap() {
            points.push((value[0].as_f64().unwrap(), phase.clone()));
        }
    }
    points.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut phases: Vec<String> = Vec::new();
    for (_, phase) in points {
        if phases.last() != Some(&phase) {
            phases.push(phase);
        }
    }
    phases
}

/// Runs `scenario` under a Prometheus scrape until the phase sequence Prometheus recorded
/// satisfies `complete`; returns it. The v1 install is a rollout too and already ends
/// `successful` (on 3 nodes without widening: its pods start together), so "ends in `successful`"
/// alone would stop on the install, or before the upgrade was even scraped.
fn scrape_scenario(
    scenario: &str,
    complete: impl Fn(&[String]) -> bool,
    budget: Duration,
) -> Vec<String> {
    let dir = temp_dir(scenario);
    let metrics_port = free_port();
    let (_prometheus, prometheus_port) = start_prometheus(&dir, metrics_port);
    let started = Instant::now();
    let _demo = start_demo(scenario, metrics_port, budget.as_secs());
    loop {
        let phases = phases_seen(prometheus_port, budget.as_secs() + 30);
        if complete(&phases) {
            return phases;
        }
        assert!(
            started.elapsed() < budget,
            "Prometheus did not see {scenario} complete within {budget:?}; phases seen: {phases:?}; log in {}",
            dir.display()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// The phases from the last canary visit on (the upgrade's; the install has one too).
fn since_last_canary(phases: &[String]) -> Option<&[String]> {
    let canary = phases.iter().rposition(|p| p == "canary")?;
    phases.get(canary..)
}

/// Whether `phases` widen the rollout (`increasing` or `waiting`).
fn widens(phases: &[String]) -> bool {
    phases.iter().any(|p| p == "waiting" || p == "increasing")
}

/// The last canary visit (the upgrade's), a widening phase after it, and `last` at the end.
fn widened_then(last: &'static str) -> impl Fn(&[String]) -> bool {
    move |phases| {
        let Some(upgrade) = since_last_canary(phases) else {
            return false;
        };
        widens(upgrade) && phases.last().map(String::as_str) == Some(last)
    }
}

/// A canary and `last` at the end.
fn canary_then(last: &'static str) -> impl Fn(&[String]) -> bool {
    move |phases| {
        phases.iter().any(|p| p == "canary") && phases.last().map(String::as_str) == Some(last)
    }
}

#[test]
fn prometheus_sees_a_healthy_rollout_reach_successful() {
    let phases = scrape_scenario(
        "healthy",
        widened_then("successful"),
        // The canary soaks 30 s (spec.health.canarySoak) before the widen, in real time here.
        Duration::from_secs(100),
    );
    // The v1 install ends `successful` too; the upgrade must pass through the canary to it.
    let upgrade =
        since_last_canary(&phases).unwrap_or_else(|| panic!("no canary phase in {phases:?}"));
    assert!(widens(upgrade), "no widening after the canary: {phases:?}");
    assert_eq!(phases.last().unwrap(), "successful", "{phases:?}");
    assert!(!phases.iter().any(|p| p == "failed"), "{phases:?}");
}

#[test]
fn prometheus_sees_a_crashlooping_canary_fail() {
    let phases = scrape_scenario(
        "crashloop-canary",
        canary_then("failed"),
        Duration::from_secs(45),
    );
    let upgrade =
        since_last_canary(&phases).unwrap_or_else(|| panic!("no canary phase in {phases:?}"));
    assert_eq!(upgrade.last().unwrap(), "failed", "{phases:?}");
    assert!(
        !widens(upgrade),
        "a crash-looping canary must never be widened: {phases:?}"
    );
}

#[test]
fn a_demo_exposition_passes_promtool_check_metrics() {
    let dir = temp_dir("promtool");
    let file = dir.join("demo.prom");
    let output = Command::new(env!("CARGO_BIN_EXE_daemonset-canary"))
        .args(["demo", "--nodes", "20", "--metrics-file"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let exposition = std::fs::read_to_string(&file).unwrap();
    for family in [
        "canary_rollout_phase{",
        "canary_rollout_phase_duration_seconds_bucket{",
        "canary_rollout_duration_seconds_count{mode=\"driven\",result=\"successful\"}",
        "canary_reconcile_duration_seconds_count{",
        "canary_rollout_failures_total{",
        "canary_leader 1",
        "canary_watch_errors_total 0",
    ] {
        assert!(
            exposition.contains(family),
            "{family} missing:\n{exposition}"
        );
    }
    let widen = exposition
        .lines()
        .find(|l| l.starts_with("canary_daemonset_writes_total{purpose=\"widen\",result=\"ok\"}"))
        .unwrap_or_else(|| panic!("no widen writes:\n{exposition}"));
    assert!(!widen.ends_with(" 0"), "the rollout widened: {widen}");
    support::promtool_check_metrics(&exposition);
}
