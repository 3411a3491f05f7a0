//! The controller against an API server that goes away and comes back (issue 48): `run` as a
//! user starts it (one replica, no leader election, as when the bug was seen), `sim serve`
//! stopped mid-rollout and started again on the same port, three ways:
//!
//! - with the same `--state` file, as kube-apiserver restarts on the same etcd: the objects and
//!   the `resourceVersion`s continue, old watches get 410 Gone;
//! - in the same process, only the listener closed and opened again (every connection cut);
//! - without a state file: a new, empty cluster, as after an etcd restored from nothing.
//!
//! In each the controller must see the cluster again within 30 s of the server's return (the
//! figure is printed), finish the rollout with no extra DaemonSet write, and its probes must
//! tell the truth meanwhile: `/readyz` 503 once the watches have failed for 30 s, `/healthz`
//! 200 through an outage of that length (restarting the controller would not bring the server
//! back).
//!
//! Before the fix, the third case left the controller on watches resumed from
//! `resourceVersion`s the new server had not reached: silent, for good, with both probes 200.

use crate::support::rollout::set_spec;
use crate::support::{self, KillOnDrop, free_port};

use canary_kube_adapter::CanaryDaemonSet;
use canary_state_machine::Compatibility;
use daemonset_canary::demo::scenario::{NAME, NAMESPACE, manifest};
use kube::Api;
use kube::api::PostParams;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How soon after the server is back the controller must see the cluster again.
const RECOVERY_BOUND: Duration = Duration::from_secs(30);

/// DaemonSet writes of an upgrade without a fault: the new template at `maxUnavailable: 1`, the
/// canary's soak holding the DaemonSet controller (`OnDelete`), 10% once the soak is over,
/// back to 1 at the end. After an outage there may be fewer: the DaemonSet controller goes on
/// replacing pods meanwhile (unless already held), and a controller that comes back to every
/// pod updated writes the end at once.
const UPGRADE_WRITES: std::ops::RangeInclusive<i64> = 2..=4;

/// `sim serve` on a fixed port, with the test's arguments (`--state`, ...).
fn sim_serve(dir: &Path, port: u16, extra: &[&str], log: &str) -> KillOnDrop {
    let kubeconfig = dir.join("kubeconfig");
    let child = Command::new(env!("CARGO_BIN_EXE_daemonset-canary"))
        .args(["sim", "serve", "--nodes", "3", "--kubeconfig"])
        .arg(&kubeconfig)
        .arg(format!("--addr=127.0.0.1:{port}"))
        .args(extra)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join(log)).unwrap())
        .spawn()
        .unwrap();
    let process = KillOnDrop(child);
    wait_listening(port, dir.join(log));
    process
}

/// Waits (30 s at most) until something accepts connections on `port`.
fn wait_listening(port: u16, log: PathBuf) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "nothing listens on {port} after 30 s:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `daemonset-canary run` without leader election, its probes on `metrics_port`, its log in
/// `dir/run.log`.
fn run(dir: &Path, metrics_port: u16) -> KillOnDrop {
    let child = Command::new(env!("CARGO_BIN_EXE_daemonset-canary"))
        .arg("run")
        .arg("--kubeconfig")
        .arg(dir.join("kubeconfig"))
        .arg(format!("--metrics-addr=127.0.0.1:{metrics_port}"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("run.log")).unwrap())
        .spawn()
        .unwrap();
    KillOnDrop(child)
}

/// The status code of `GET path` on the controller's probes (0 when nothing answers) and the
/// body.
fn probe(port: u16, path: &str) -> (u16, String) {
    support::probe(port, path, Duration::from_secs(5))
}

fn test_dir(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("canary-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn log_of(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("run.log")).unwrap_or_default()
}

/// Polls until the probe on `path` answers `code`; returns how long that took.
async fn until_probe(port: u16, path: &str, code: u16, within: Duration, dir: &Path) -> Duration {
    let started = Instant::now();
    loop {
        let (now, body) = probe(port, path);
        if now == code {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < within,
            "{path} answered {now} ({body}), not {code}, for {within:?}\n{}",
            log_of(dir)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The CanaryDaemonSet's phase for spec generation `generation` or later.
async fn phase(api: &Api<CanaryDaemonSet>, generation: Option<i64>) -> Option<String> {
    let status = api.get(NAME).await.ok()?.status?;
    (status.observed_generation >= generation)
        .then(|| status.phase_name().map(str::to_owned))
        .flatten()
}

async fn wait_phase(
    api: &Api<CanaryDaemonSet>,
    generation: Option<i64>,
    wanted: &[&str],
    within: Duration,
    dir: &Path,
) -> String {
    let deadline = Instant::now() + within;
    loop {
        if let Some(now) = phase(api, generation).await
            && wanted.contains(&now.as_str())
        {
            return now;
        }
        assert!(
            Instant::now() < deadline,
            "not {wanted:?} after {within:?}: {:?}\n{}",
            phase(api, generation).await,
            log_of(dir)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits (90 s at most) for the interrupted rollout of `generation` to end `successful`.
async fn finishes(api: &Api<CanaryDaemonSet>, generation: Option<i64>, dir: &Path) {
    let within = Duration::from_secs(90);
    wait_phase(api, generation, &["successful"], within, dir).await;
}

/// Installs v1, waits for it, and starts the upgrade to v2 whose pods take `slow` to be ready,
/// so that the server can be stopped mid-rollout; returns the controller's DaemonSet writes
/// before the upgrade and the upgrade's spec generation.
async fn install_and_start_upgrade(
    client: &kube::Client,
    dir: &Path,
    metrics_port: u16,
) -> (i64, Option<i64>) {
    let api: Api<CanaryDaemonSet> = Api::namespaced(client.clone(), NAMESPACE);
    install_v1(&api, dir).await;
    let before = daemon_set_writes(metrics_port);
    let v2 = manifest(Compatibility::Fixed, "v2", "slow-start=8s");
    let generation = set_spec(&api, &v2).await;
    wait_phase(&api, generation, &["canary"], Duration::from_secs(30), dir).await;
    (before, generation)
}

/// The healthy v1 of the demo's manifest.
fn v1() -> CanaryDaemonSet {
    serde_json::from_value(manifest(Compatibility::Fixed, "v1", "healthy")).unwrap()
}

/// Creates [`v1`] and waits (60 s at most) for it to be `successful`: the object created.
async fn install_v1(api: &Api<CanaryDaemonSet>, dir: &Path) -> CanaryDaemonSet {
    let created = api.create(&PostParams::default(), &v1()).await.unwrap();
    let generation = created.metadata.generation;
    wait_phase(
        api,
        generation,
        &["successful"],
        Duration::from_secs(60),
        dir,
    )
    .await;
    created
}

/// The controller's successful DaemonSet writes so far (`canary_daemonset_writes_total`).
fn daemon_set_writes(metrics_port: u16) -> i64 {
    let (code, body) = probe(metrics_port, "/metrics");
    assert_eq!(code, 200, "{body}");
    body.lines()
        .filter(|line| line.starts_with("canary_daemonset_writes_total{"))
        .filter(|line| line.contains(r#"result="ok""#))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|value| value as i64)
        .sum()
}

fn resource_version(cds: &CanaryDaemonSet) -> u64 {
    cds.metadata
        .resource_version
        .as_deref()
        .and_then(|rv| rv.parse().ok())
        .unwrap_or_default()
}

/// kube-apiserver killed and restarted on the same etcd, as `sim serve --state` killed
/// (SIGKILL: every acknowledged write is in its journal) and started again after 35 s (longer
/// than the readiness grace) mid-rollout. Meanwhile `/readyz` says the watches fail and
/// `/healthz` stays 200; within 30 s of the server's return `/readyz` is 200 again, and the
/// rollout ends `successful` with the three DaemonSet writes of a rollout, none more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_recovers_when_sim_serve_restarts_on_its_state() {
    let dir = test_dir("restart-state");
    let (port, metrics) = (free_port(), free_port());
    let state = dir.join("state.json");
    let state_arg = format!("--state={}", state.display());
    let sim = sim_serve(&dir, port, &[&state_arg], "sim-1.log");
    let client = support::client_with_crd(&dir.join("kubeconfig")).await;
    let _run = run(&dir, metrics);
    until_probe(metrics, "/readyz", 200, Duration::from_secs(30), &dir).await;
    let (ds_before, generation) = install_and_start_upgrade(&client, &dir, metrics).await;
    let api: Api<CanaryDaemonSet> = Api::namespaced(client.clone(), NAMESPACE);
    let version_before = resource_version(&api.get(NAME).await.unwrap());

    // SIGKILL: nothing is saved on the way out, the journal holds every write.
    drop(sim);
    let stopped = Instant::now();
    let not_ready_after = until_probe(metrics, "/readyz", 503, Duration::from_secs(45), &dir).await;
    assert!(
        not_ready_after >= Duration::from_secs(25),
        "not ready after {not_ready_after:?}: the grace is 30 s"
    );
    let (_, why) = probe(metrics, "/readyz");
    assert!(why.contains("watches failing"), "{why}");
    while stopped.elapsed() < Duration::from_secs(35) {
        assert_eq!(
            probe(metrics, "/healthz").0,
            200,
            "an outage of 35 s is no reason to restart"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    let _sim = sim_serve(&dir, port, &[&state_arg], "sim-2.log");
    let recovered = until_probe(metrics, "/readyz", 200, RECOVERY_BOUND, &dir).await;
    println!(
        "restarted sim serve (same state file): controller ready again {recovered:?} after the server's return"
    );
    finishes(&api, generation, &dir).await;
    let after = api.get(NAME).await.unwrap();
    assert!(
        resource_version(&after) > version_before,
        "resourceVersions continue: {} after {version_before}",
        resource_version(&after)
    );
    let writes = daemon_set_writes(metrics) - ds_before;
    assert!(
        UPGRADE_WRITES.contains(&writes),
        "{writes} DaemonSet writes: the upgrade's, none for the restart"
    );
    assert!(
        log_of(&dir).contains("watches work again"),
        "{}",
        log_of(&dir)
    );
}

/// The listener of `sim serve` closed and opened again in the same process, every connection
/// cut: the store and its event history stay, the controller picks the rollout up again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_recovers_when_the_listener_restarts_in_the_same_process() {
    let dir = test_dir("restart-listener");
    let metrics = free_port();
    let sim = canary_sim::Sim::builder()
        .nodes(3)
        .epoch(k8s_openapi::jiff::Timestamp::now())
        .build()
        .unwrap();
    let served = sim.serve("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let addr = served.addr;
    served.write_kubeconfig(dir.join("kubeconfig")).unwrap();
    let client = support::client_with_crd(&dir.join("kubeconfig")).await;
    let _run = run(&dir, metrics);
    until_probe(metrics, "/readyz", 200, Duration::from_secs(30), &dir).await;
    let (ds_before, generation) = install_and_start_upgrade(&client, &dir, metrics).await;

    served.shutdown();
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(probe(metrics, "/healthz").0, 200);
    let served = sim.serve(addr).await.unwrap();
    let back = Instant::now();
    let api: Api<CanaryDaemonSet> = Api::namespaced(client.clone(), NAMESPACE);
    finishes(&api, generation, &dir).await;
    let log = log_of(&dir);
    assert!(log.contains("watches work again"), "{log}");
    println!(
        "listener restarted in the same process: rollout successful {:?} after the server's return",
        back.elapsed()
    );
    let writes = daemon_set_writes(metrics) - ds_before;
    assert!(
        UPGRADE_WRITES.contains(&writes),
        "{writes} DaemonSet writes"
    );
    assert_eq!(probe(metrics, "/readyz").0, 200);
    drop(served);
}

/// The bug of issue 48 as it was seen: `sim serve` started again without a state file, a new
/// and empty cluster whose `resourceVersion`s start over. The controller lists it instead of
/// waiting on watches from versions the server has not reached; the CRD and a CanaryDaemonSet
/// installed again (the same names, new uids) are rolled out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_recovers_when_sim_serve_restarts_without_state() {
    let dir = test_dir("restart-fresh");
    let (port, metrics) = (free_port(), free_port());
    let sim = sim_serve(&dir, port, &[], "sim-1.log");
    let client = support::client_with_crd(&dir.join("kubeconfig")).await;
    let _run = run(&dir, metrics);
    until_probe(metrics, "/readyz", 200, Duration::from_secs(30), &dir).await;
    let api: Api<CanaryDaemonSet> = Api::namespaced(client.clone(), NAMESPACE);
    let first = install_v1(&api, &dir).await;

    drop(sim);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let _sim = sim_serve(&dir, port, &[], "sim-2.log");
    let back = Instant::now();
    // What the user of the bug report did: install everything again.
    let client = support::client_with_crd(&dir.join("kubeconfig")).await;
    let api: Api<CanaryDaemonSet> = Api::namespaced(client.clone(), NAMESPACE);
    let second = api.create(&PostParams::default(), &v1()).await.unwrap();
    assert_ne!(
        second.metadata.uid, first.metadata.uid,
        "a new cluster's uids are new"
    );
    wait_phase(
        &api,
        second.metadata.generation,
        &["successful"],
        RECOVERY_BOUND,
        &dir,
    )
    .await;
    println!(
        "sim serve restarted without state: the new CanaryDaemonSet successful {:?} after the server's return",
        back.elapsed()
    );
    until_probe(metrics, "/readyz", 200, Duration::from_secs(20), &dir).await;
    assert_eq!(probe(metrics, "/healthz").0, 200);
}
