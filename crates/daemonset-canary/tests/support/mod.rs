//! Helpers shared by the tests that run processes: the binary, Prometheus, promtool.
// Each test crate uses a subset of these.
#![allow(dead_code)]

pub mod bad_patches;

use std::io::Write;
use std::process::{Child, Command, Stdio};

pub mod audit;
pub mod rollout;

/// Kills the child when the test ends, however it ends.
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Sends SIGTERM to `child` (as Kubernetes does to stop a pod) and asserts `kill` succeeded.
pub fn sigterm(child: &Child) {
    let sent = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success(), "kill -TERM {}: {sent}", child.id());
}

/// A loopback port nobody listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Asserts that `promtool check metrics` accepts `exposition`; fails loudly when promtool is
/// missing.
pub fn promtool_check_metrics(exposition: &str) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect(
            "promtool is missing: run `cargo xtask tools` (installs Debian's prometheus package)",
        );
    child
        .stdin
        .take()
        .unwrap()
        .write_all(exposition.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "promtool check metrics failed:\n{}{}\n--- exposition ---\n{exposition}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// `GET path` over HTTP/1.1 on `addr` (`host:port`), without a client library: the whole raw
/// response (status line, headers, body), or `None` when the connection or the read fails
/// (including after `read_timeout`).
pub fn http_get(addr: &str, path: &str, read_timeout: std::time::Duration) -> Option<String> {
    use std::io::Read;
    let mut stream = std::net::TcpStream::connect(addr).ok()?;
    stream.set_read_timeout(Some(read_timeout)).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).ok()?;
    Some(String::from_utf8_lossy(&raw).into_owned())
}

/// The row of `version` in `daemonset-canary history`'s `table` (its second column).
#[track_caller]
pub fn history_row(table: &str, version: &str) -> String {
    table
        .lines()
        .find(|line| line.split_whitespace().nth(1) == Some(version))
        .unwrap_or_else(|| panic!("no {version} in {table}"))
        .to_owned()
}

/// The last `lines` lines of the file at `path` (a process's log), under a heading naming it.
pub fn tail(path: &std::path::Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    format!(
        "--- last lines of {} ---\n{}",
        path.display(),
        all[all.len().saturating_sub(lines)..].join("\n")
    )
}

/// The status code of `GET path` on the loopback `port` (0 when nothing answers) and the
/// body, trimmed: a controller's probes (`/readyz`, `/healthz`, `/metrics`).
pub fn probe(port: u16, path: &str, read_timeout: std::time::Duration) -> (u16, String) {
    let Some(raw) = http_get(&format!("127.0.0.1:{port}"), path, read_timeout) else {
        return (0, String::new());
    };
    let code = raw
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = raw
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.trim().to_owned())
        .unwrap_or_default();
    (code, body)
}

/// What a test without `prometheus` says: how to get it.
pub const PROMETHEUS_INSTALL: &str =
    "the prometheus binary is missing: run `cargo xtask tools` (Debian package `prometheus`)";

/// A real Prometheus listening on the loopback `port`, its data and `prometheus.yml` in `dir`
/// (its log appended to `prometheus.log` there), scraping the loopback `target` (job name,
/// port) every second; `web`: a `--web.config.file` (TLS). Fails, never skips, without it.
pub fn spawn_prometheus(
    dir: &std::path::Path,
    (job, target_port): (&str, u16),
    port: u16,
    web: Option<&std::path::Path>,
) -> KillOnDrop {
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
             scrape_configs:\n  - job_name: {job}\n    scrape_interval: 1s\n    scrape_timeout: 900ms\n\
             \x20   static_configs:\n      - targets: ['127.0.0.1:{target_port}']\n"
        ),
    )
    .unwrap();
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("prometheus.log"))
        .unwrap();
    let child = Command::new("prometheus")
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .args(web.map(|web| format!("--web.config.file={}", web.display())))
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect(PROMETHEUS_INSTALL);
    KillOnDrop(child)
}

/// `daemonset-canary sim serve` in a child process: its kubeconfig, in a directory of the
/// test's own (removed and made afresh).
pub struct ServedSim {
    /// The process; killed when dropped.
    pub process: KillOnDrop,
    /// The kubeconfig it wrote.
    pub kubeconfig: std::path::PathBuf,
    /// The test's directory.
    pub dir: std::path::PathBuf,
}

/// Starts `sim serve` with `args` (after `--kubeconfig`) in a directory named after `test`, and
/// waits (30 s at most) for its kubeconfig. Its stderr goes to `sim.log` in that directory.
pub fn serve_sim(test: &str, args: &[&str]) -> ServedSim {
    let dir = std::env::temp_dir().join(format!("canary-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    let child = Command::new(env!("CARGO_BIN_EXE_daemonset-canary"))
        .args(["sim", "serve", "--kubeconfig"])
        .arg(&kubeconfig)
        .args(args)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("sim.log")).unwrap())
        .spawn()
        .unwrap();
    let process = KillOnDrop(child);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !kubeconfig.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "no kubeconfig after 30 s; sim serve said:\n{}",
            std::fs::read_to_string(dir.join("sim.log")).unwrap_or_default()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    ServedSim {
        process,
        kubeconfig,
        dir,
    }
}

impl ServedSim {
    /// `kubectl --kubeconfig KUBECONFIG ARGS`, run from the workspace's root (so that
    /// `deploy/...` paths resolve); fails, never skips, without kubectl.
    pub fn kubectl(&self, args: &[&str]) -> std::process::Output {
        Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
            .output()
            .expect(
                "kubectl is not installed: install it (`cargo xtask tools` says how) to run this test",
            )
    }

    /// [`ServedSim::kubectl`] that must succeed: its stdout.
    pub fn kubectl_ok(&self, args: &[&str]) -> String {
        let output = self.kubectl(args);
        assert!(
            output.status.success(),
            "kubectl {args:?}: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// Applies the CRD as a user does: `daemonset-canary crd > crd.yaml`, `kubectl apply -f`.
    pub fn apply_crd(&self) {
        let crd = self.dir.join("crd.yaml");
        let printed = Command::new(env!("CARGO_BIN_EXE_daemonset-canary"))
            .arg("crd")
            .output()
            .unwrap();
        assert!(printed.status.success());
        std::fs::write(&crd, printed.stdout).unwrap();
        self.kubectl_ok(&["apply", "-f", crd.to_str().unwrap()]);
    }
}

/// The set-up of most process tests: `sim serve` with `args` in a directory named after `test`,
/// the CRD installed, and `run` against it allowing the analysis addresses `allowed`, its log in
/// that directory (`run.log`).
pub async fn controller_on_sim(
    test: &str,
    args: &[&str],
    allowed: &[&str],
) -> (ServedSim, kube::Client, KillOnDrop) {
    let sim = serve_sim(test, args);
    let client = client_with_crd(&sim.kubeconfig).await;
    let log = std::fs::File::create(sim.dir.join("run.log")).unwrap();
    let run = spawn_run_allowing(&sim.kubeconfig, Stdio::from(log), allowed);
    (sim, client, run)
}

/// `daemonset-canary run --kubeconfig KUBECONFIG` (metrics on a free loopback port, its log to
/// `stderr`), killed when the value is dropped.
pub fn spawn_run(kubeconfig: &std::path::Path, stderr: Stdio) -> KillOnDrop {
    spawn_run_allowing(kubeconfig, stderr, &[])
}

/// [`spawn_run`] with `--allow-analysis-address` for each of `allowed`.
pub fn spawn_run_allowing(
    kubeconfig: &std::path::Path,
    stderr: Stdio,
    allowed: &[&str],
) -> KillOnDrop {
    let child = Command::new(env!("CARGO_BIN_EXE_daemonset-canary"))
        .arg("run")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--metrics-addr=127.0.0.1:0")
        .args(
            allowed
                .iter()
                .map(|a| format!("--allow-analysis-address={a}")),
        )
        .env_remove("CANARY_ALLOW_ANALYSIS_ADDRESS")
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .unwrap();
    KillOnDrop(child)
}

/// A client for the cluster of `kubeconfig`.
pub async fn client(kubeconfig: &std::path::Path) -> kube::Client {
    let file = kube::config::Kubeconfig::read_from(kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(file, &Default::default())
        .await
        .unwrap();
    kube::Client::try_from(config).unwrap()
}

/// A client for the cluster of `kubeconfig`, with the CanaryDaemonSet CRD installed.
pub async fn client_with_crd(kubeconfig: &std::path::Path) -> kube::Client {
    let client = client(kubeconfig).await;
    install_crd(&client).await;
    client
}

/// Installs the CanaryDaemonSet CRD, as `daemonset-canary crd | kubectl apply -f -` would.
pub async fn install_crd(client: &kube::Client) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    kube::Api::<CustomResourceDefinition>::all(client.clone())
        .create(
            &kube::api::PostParams::default(),
            &canary_kube_adapter::crd().unwrap(),
        )
        .await
        .unwrap();
}

/// A DaemonSet's `maxUnavailable` as written (`1`, `10%`), `unset` without one.
pub fn max_unavailable(ds: &k8s_openapi::api::apps::v1::DaemonSet) -> String {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    match ds
        .spec
        .as_ref()
        .and_then(|s| s.update_strategy.as_ref())
        .and_then(|u| u.rolling_update.as_ref())
        .and_then(|r| r.max_unavailable.clone())
    {
        Some(IntOrString::Int(n)) => n.to_string(),
        Some(IntOrString::String(s)) => s,
        None => "unset".to_owned(),
    }
}
