//! `/metrics` scrapes of the real binary, for the metric-name check: what a demo rollout exports
//! (`daemonset-canary demo --metrics-file`), and what `observe-kubevirt` exports while it watches
//! a KubeVirt object on the served simulator (`daemonset-canary sim serve`), the only mode that
//! registers `canary_kubevirt_version_info`.
//!
//! Invariant: every process started here is ended (by its own handle) before the scrape
//! returns, whether it succeeded or not; each one's output goes to a log in the work directory.

use anyhow::{Context, Result, bail};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use xshell::{Shell, cmd};

use crate::PROFILE;

/// How long the simulator and the observer get to come up and export.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// The KubeVirt install `observe-kubevirt` watches: its namespace and object. The simulator
/// serves the `kubevirt.io/v1` KubeVirt CRD from the start.
const KUBEVIRT: &str = r#"apiVersion: v1
kind: Namespace
metadata: {name: kubevirt}
---
apiVersion: kubevirt.io/v1
kind: KubeVirt
metadata: {name: kubevirt, namespace: kubevirt}
spec: {}
"#;

/// Runs a 20-node demo rollout with `driver` (`max-unavailable` or `pods`: each driver has
/// series of its own) and saves its final `/metrics` exposition in `work`.
pub(super) fn demo(sh: &Shell, work: &Path, driver: &str) -> Result<PathBuf> {
    let file = work.join(format!("demo-metrics-{driver}.prom"));
    let cargo = crate::cargo();
    eprintln!("==> lint-deploy: scraping a demo rollout (driver {driver})");
    cmd!(
        sh,
        "{cargo} run --quiet --locked --profile {PROFILE} -p daemonset-canary -- demo --nodes 20 --driver {driver} --metrics-file {file}"
    )
    .ignore_stdout()
    .run()
    .with_context(|| format!("the demo rollout (driver {driver}) for the metrics scrape failed"))?;
    Ok(file)
}

/// Serves the simulator with one KubeVirt object, runs `observe-kubevirt` against it and saves
/// its `/metrics` once the KubeVirt version series shows, in `work`.
pub(super) fn observe_kubevirt(sh: &Shell, work: &Path) -> Result<PathBuf> {
    eprintln!("==> lint-deploy: scraping observe-kubevirt on the served simulator");
    let cargo = crate::cargo();
    cmd!(
        sh,
        "{cargo} build --quiet --locked --profile {PROFILE} -p daemonset-canary"
    )
    .run()
    .context("cannot build daemonset-canary")?;
    let binary = crate::ci_binary()?;
    let kubeconfig = work.join("sim.kubeconfig");
    let _simulator = Running::start(
        Command::new(&binary)
            .args(["sim", "serve", "--nodes", "1", "--kubeconfig"])
            .arg(&kubeconfig),
        &work.join("sim-serve.log"),
    )?;
    wait_until(
        || Ok(kubeconfig.exists()),
        "sim serve to write its kubeconfig",
    )?;
    let manifest = work.join("kubevirt.yaml");
    std::fs::write(&manifest, KUBEVIRT)
        .with_context(|| format!("cannot write {}", manifest.display()))?;
    cmd!(sh, "kubectl --kubeconfig {kubeconfig} apply -f {manifest}")
        .quiet()
        .ignore_stdout()
        .run()
        .context("cannot create the KubeVirt object on the simulator")?;
    let addr = free_loopback_addr()?;
    let _observer = Running::start(
        Command::new(&binary)
            .args(["observe-kubevirt", "--kubeconfig"])
            .arg(&kubeconfig)
            .args(["--metrics-addr", &addr.to_string()]),
        &work.join("observe-kubevirt.log"),
    )?;
    let mut exposition = String::new();
    wait_until(
        || {
            exposition = http_get(addr, "/metrics").unwrap_or_default();
            Ok(exposition.contains("\ncanary_kubevirt_version_info{"))
        },
        "observe-kubevirt to export canary_kubevirt_version_info",
    )?;
    let file = work.join("observe-kubevirt-metrics.prom");
    std::fs::write(&file, exposition)
        .with_context(|| format!("cannot write {}", file.display()))?;
    Ok(file)
}

/// The receivers of the controller's scrape: one, never told (no CanaryDaemonSet names it), so
/// that its `canary_notifications_total` series show at their initial 0.
const RECEIVERS: &str = "receivers:\n- name: lint\n  url: http://127.0.0.1:9/hook\n";

/// Serves the simulator, runs the controller (`run`) with a notification receiver against it
/// and saves its `/metrics` once the receiver's series show, in `work`: the series of
/// `canary_notifications_total` start at 0 per receiver, and a demo defines none.
pub(super) fn controller_with_receivers(sh: &Shell, work: &Path) -> Result<PathBuf> {
    eprintln!(
        "==> lint-deploy: scraping the controller with a notification receiver on the served simulator"
    );
    let binary = crate::ci_binary()?;
    let kubeconfig = work.join("sim-run.kubeconfig");
    let _ = std::fs::remove_file(&kubeconfig);
    let _simulator = Running::start(
        Command::new(&binary)
            .args(["sim", "serve", "--nodes", "1", "--kubeconfig"])
            .arg(&kubeconfig),
        &work.join("sim-serve-run.log"),
    )?;
    wait_until(
        || Ok(kubeconfig.exists()),
        "sim serve to write its kubeconfig",
    )?;
    let crd = work.join("crd.yaml");
    let text = cmd!(sh, "{binary} crd")
        .quiet()
        .read()
        .context("daemonset-canary crd")?;
    std::fs::write(&crd, text).with_context(|| format!("cannot write {}", crd.display()))?;
    cmd!(sh, "kubectl --kubeconfig {kubeconfig} apply -f {crd}")
        .quiet()
        .ignore_stdout()
        .run()
        .context("cannot install the CRD on the simulator")?;
    let receivers = work.join("receivers.yaml");
    std::fs::write(&receivers, RECEIVERS)
        .with_context(|| format!("cannot write {}", receivers.display()))?;
    let addr = free_loopback_addr()?;
    let _controller = Running::start(
        Command::new(&binary)
            .args(["run", "--kubeconfig"])
            .arg(&kubeconfig)
            .args(["--metrics-addr", &addr.to_string()])
            .arg("--notification-receivers")
            .arg(&receivers)
            .args(["--notification-namespace", "default"]),
        &work.join("run.log"),
    )?;
    let mut exposition = String::new();
    wait_until(
        || {
            exposition = http_get(addr, "/metrics").unwrap_or_default();
            Ok(exposition.contains("\ncanary_notifications_total{"))
        },
        "the controller to export canary_notifications_total",
    )?;
    let file = work.join("controller-metrics.prom");
    std::fs::write(&file, exposition)
        .with_context(|| format!("cannot write {}", file.display()))?;
    Ok(file)
}

/// A process started here, ended when dropped.
struct Running {
    child: Child,
}

impl Running {
    fn start(command: &mut Command, log: &Path) -> Result<Self> {
        let out = std::fs::File::create(log)
            .with_context(|| format!("cannot create {}", log.display()))?;
        let err = out.try_clone()?;
        let child = command
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .with_context(|| format!("cannot start {command:?}"))?;
        Ok(Self { child })
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        // Already gone is fine: the process may have ended by itself.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `done` every 100 ms until it holds, or fails after [`START_TIMEOUT`] naming `what`.
fn wait_until(mut done: impl FnMut() -> Result<bool>, what: &str) -> Result<()> {
    let start = Instant::now();
    while start.elapsed() < START_TIMEOUT {
        if done()? {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    bail!(
        "timed out after {}s waiting for {what} (logs in target/lint-deploy/)",
        START_TIMEOUT.as_secs()
    )
}

/// A loopback address whose port was free a moment ago ([`crate::cluster::free_port`]).
fn free_loopback_addr() -> Result<SocketAddr> {
    Ok(SocketAddr::from((
        [127, 0, 0, 1],
        crate::cluster::free_port()?,
    )))
}

/// The body of `GET path` on `addr` (HTTP/1.0: the server closes the connection after it),
/// or an error unless the status is 200.
fn http_get(addr: SocketAddr, path: &str) -> Result<String> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let (head, body) = response
        .split_once("\r\n\r\n")
        .context("no end of headers in the response")?;
    let status = head.split_whitespace().nth(1).unwrap_or_default();
    if status != "200" {
        bail!("GET {path} answered {status}");
    }
    Ok(body.to_owned())
}
