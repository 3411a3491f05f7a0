//! `cargo xtask e2e`: the end-to-end suite on the real control plane of `cargo xtask cluster`.
//!
//! Job: start the cluster with [`NODES`] KWOK nodes (or reuse a running one, matching the node
//! count), install the CanaryDaemonSet CRD as a user does (`daemonset-canary crd | kubectl apply
//! -f -`) and the controller's ServiceAccount and RBAC from deploy/, then run the ignored test
//! target `crates/daemonset-canary/tests/e2e/` in two phases:
//! 1. the `deployed::` scenarios against the real `daemonset-canary run --kubeconfig
//!    --leader-election` binary started here with that ServiceAccount's token, watching every
//!    namespace as deployed;
//! 2. once that controller is stopped (it would act on every namespace), the other scenarios:
//!    each makes its own KWOK nodes and starts its own controller processes, confined to its
//!    namespace.
//!
//! In each phase [`E2eArgs::jobs`] scenarios run at once (each has its own namespace).
//!
//! The tests read where everything is from the environment variables named below.
//!
//! Invariants: what this command started (the controller, and the cluster unless it was running
//! already) is stopped when it ends, passed or failed, and no scenario's node is left; the suite
//! fails, never skips, when the cluster is not reachable.

use crate::cargo;
use crate::cluster::{self, Layout, UpArgs};
use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Nodes of the e2e cluster: the README's demo size.
pub const NODES: u32 = 50;
/// The test target of the suite.
const TEST_TARGET: &str = "e2e";
/// The kubeconfig of the cluster under test (the tests fail when it is set and unreachable).
const ENV_KUBECONFIG: &str = "DAEMONSET_CANARY_E2E_KUBECONFIG";
/// `host:port` of the controller's metrics and health server.
const ENV_METRICS: &str = "DAEMONSET_CANARY_E2E_METRICS";
/// The controller's log file (tests quote it when they fail).
const ENV_CONTROLLER_LOG: &str = "DAEMONSET_CANARY_E2E_CONTROLLER_LOG";
/// The kubectl the tests run (the one built with the cluster).
const ENV_KUBECTL: &str = "KUBECTL";
/// The API server's audit log (the controller's requests), which the tests read.
const ENV_AUDIT_LOG: &str = "DAEMONSET_CANARY_E2E_AUDIT_LOG";
/// Where the isolated scenarios' own controllers write their logs and kubeconfigs.
const ENV_LOGS: &str = "DAEMONSET_CANARY_E2E_LOGS";
/// The module of the scenarios that run against the controller started here (the others start
/// their own).
const DEPLOYED_MODULE: &str = "deployed::";
/// The label of the nodes an isolated scenario creates for itself (its value: the scenario's
/// namespace).
const SCENARIO_NODE_LABEL: &str = "e2e.daemonset.dev/pool";
/// Namespace of the controller's ServiceAccount and Lease in deploy/default.
const RBAC_NAMESPACE: &str = "daemonset-canary-system";
/// The kinds of deploy/default that make the controller's identity and permissions.
const RBAC_KINDS: &[&str] = &[
    "Namespace",
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
];

/// Options of `cargo xtask e2e`.
#[derive(clap::Args)]
pub struct E2eArgs {
    /// Leave the cluster running afterwards, even if this command started it (for debugging;
    /// stop it with `cargo xtask cluster down`).
    #[arg(long)]
    keep_cluster: bool,
    /// Run only the tests whose names (`module::name`) contain this filter.
    #[arg(long)]
    filter: Option<String>,
    /// Scenarios run at once in each phase (each has its own namespace).
    #[arg(long, default_value_t = DEFAULT_JOBS)]
    pub jobs: u32,
}

impl Default for E2eArgs {
    fn default() -> Self {
        Self {
            keep_cluster: false,
            filter: None,
            jobs: DEFAULT_JOBS,
        }
    }
}

/// Scenarios at once by default: they spend most of their time waiting for pods and pauses, so
/// more of them than cores keeps the control plane busy without starving it.
const DEFAULT_JOBS: u32 = 4;

/// Kills the controller when dropped (also on an error path).
struct Controller(Child);

impl Drop for Controller {
    fn drop(&mut self) {
        // SIGTERM first: the controller releases its lease and exits 0; SIGKILL if it hangs.
        let pid = self.0.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs the suite.
pub fn run(args: &E2eArgs) -> Result<()> {
    let layout = Layout::new()?;
    let cluster = cluster::up(&layout, &UpArgs::with_nodes(NODES))?;
    let result = run_on(&layout, &cluster, args);
    if cluster.started
        && !args.keep_cluster
        && let Err(error) = cluster::down(&layout)
    {
        eprintln!("error: stopping the cluster: {error:#}");
    }
    result
}

fn run_on(layout: &Layout, cluster: &cluster::Cluster, args: &E2eArgs) -> Result<()> {
    let cargo = cargo();
    // The same dev-profile binary the test target is built against.
    let status = Command::new(&cargo)
        .args([
            "build",
            "--locked",
            "-p",
            "daemonset-canary",
            "--bin",
            "daemonset-canary",
        ])
        .status()
        .context("cannot run cargo build")?;
    if !status.success() {
        bail!("cargo build -p daemonset-canary failed");
    }
    let binary = crate::tools::target_dir()?
        .join("debug")
        .join("daemonset-canary");
    install_crd(cluster, &binary)?;
    let identity = controller_identity(layout, cluster)?;
    let (deployed, isolated): (Vec<String>, Vec<String>) = list_tests(&cargo)?
        .into_iter()
        .filter(|name| {
            args.filter
                .as_ref()
                .is_none_or(|f| name.contains(f.as_str()))
        })
        .partition(|name| name.starts_with(DEPLOYED_MODULE));
    if deployed.is_empty() && isolated.is_empty() {
        bail!("no e2e test matches the filter {:?}", args.filter);
    }
    // Nodes a scenario made for itself and did not get to delete (a killed run).
    remove_scenario_nodes(cluster)?;
    let started = Instant::now();
    let mut result = Ok(());
    if !deployed.is_empty() {
        let phase = Instant::now();
        let metrics_port = cluster::free_port()?;
        let log = layout.logs().join("daemonset-canary.log");
        let controller = start_controller(&binary, &identity, metrics_port, &log)?;
        eprintln!(
            "==> e2e: {} deployed scenarios, {} at a time, against daemonset-canary run as \
             ServiceAccount {RBAC_NAMESPACE}/daemonset-canary (deploy/rbac), metrics \
             127.0.0.1:{metrics_port}, log {}",
            deployed.len(),
            args.jobs,
            log.display()
        );
        let mut test = test_command(&cargo, layout, cluster, &deployed, args.jobs);
        test.env(ENV_METRICS, format!("127.0.0.1:{metrics_port}"))
            .env(ENV_CONTROLLER_LOG, &log);
        result = run_tests(test, "deployed");
        // It watches every namespace: it would act on the isolated scenarios' objects too.
        drop(controller);
        eprintln!(
            "==> e2e: deployed scenarios took {:.0} s",
            phase.elapsed().as_secs_f64()
        );
    }
    if result.is_ok() && !isolated.is_empty() {
        let phase = Instant::now();
        eprintln!(
            "==> e2e: {} isolated scenarios, {} at a time, each with its own nodes and controller \
             (logs in {})",
            isolated.len(),
            args.jobs,
            layout.logs().display()
        );
        let test = test_command(&cargo, layout, cluster, &isolated, args.jobs);
        result = run_tests(test, "isolated");
        eprintln!(
            "==> e2e: isolated scenarios took {:.0} s",
            phase.elapsed().as_secs_f64()
        );
    }
    remove_scenario_nodes(cluster)?;
    eprintln!(
        "==> e2e: {} scenarios in {:.0} s",
        deployed.len() + isolated.len(),
        started.elapsed().as_secs_f64()
    );
    result.with_context(|| {
        format!(
            "the controllers' logs and the cluster's logs are in {}",
            layout.logs().display()
        )
    })
}

/// The names of the suite's tests (`module::name`), as the test binary lists them.
fn list_tests(cargo: &str) -> Result<Vec<String>> {
    let output = Command::new(cargo)
        .args([
            "test",
            "--locked",
            "-p",
            "daemonset-canary",
            "--test",
            TEST_TARGET,
            "--",
            "--ignored",
            "--list",
            "--format=terse",
        ])
        .stderr(Stdio::inherit())
        .output()
        .context("cannot run cargo test --list")?;
    if !output.status.success() {
        bail!("cargo test --list failed");
    }
    let listed = String::from_utf8(output.stdout).context("cargo test --list: not UTF-8")?;
    Ok(listed
        .lines()
        .filter_map(|line| line.strip_suffix(": test"))
        .map(str::to_owned)
        .collect())
}

/// `cargo test` of exactly `tests`, `threads` at a time, with the environment the suite reads.
fn test_command(
    cargo: &str,
    layout: &Layout,
    cluster: &cluster::Cluster,
    tests: &[String],
    threads: u32,
) -> Command {
    let mut test = Command::new(cargo);
    test.args([
        "test",
        "--locked",
        "-p",
        "daemonset-canary",
        "--test",
        TEST_TARGET,
        "--",
        "--ignored",
        "--exact",
        // Each scenario prints its figures (makespan, phases); show them in CI's log.
        "--nocapture",
    ])
    .arg(format!("--test-threads={threads}"))
    .args(tests)
    .env(ENV_KUBECONFIG, &cluster.kubeconfig)
    .env(ENV_KUBECTL, &cluster.kubectl)
    .env(ENV_AUDIT_LOG, layout.audit_log())
    .env(ENV_LOGS, layout.logs());
    test
}

fn run_tests(mut test: Command, phase: &str) -> Result<()> {
    let status = test.status().context("cannot run cargo test")?;
    if !status.success() {
        bail!("the {phase} e2e scenarios failed");
    }
    Ok(())
}

/// Deletes the nodes the isolated scenarios create for themselves (each deletes its own when it
/// ends; a run that was killed leaves them, and `cluster up` counts only its own nodes).
fn remove_scenario_nodes(cluster: &cluster::Cluster) -> Result<()> {
    cluster
        .kubectl(&["delete", "nodes", "-l", SCENARIO_NODE_LABEL, "--wait=false"])
        .map(|_| ())
        .context("cannot delete the scenarios' nodes")
}

/// `daemonset-canary crd | kubectl apply --server-side -f -`, then waits until it is served.
pub fn install_crd(cluster: &cluster::Cluster, binary: &Path) -> Result<()> {
    let output = Command::new(binary)
        .arg("crd")
        .output()
        .with_context(|| format!("cannot run {} crd", binary.display()))?;
    if !output.status.success() {
        bail!(
            "daemonset-canary crd failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let crd = String::from_utf8(output.stdout).context("the CRD is not UTF-8")?;
    cluster.kubectl_with_input(
        &[
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager=xtask-e2e",
            "-f",
            "-",
        ],
        &crd,
    )?;
    cluster.wait_crd_established("canarydaemonsets.canary.daemonset.dev")
}

/// Installs the controller's identity and permissions as deploy/ defines them (the ServiceAccount,
/// ClusterRole, leader-election Role and their bindings of `deploy/default`) and writes a
/// kubeconfig with a token of that ServiceAccount: the suite then also proves the least-privilege
/// RBAC is enough.
pub fn controller_identity(layout: &Layout, cluster: &cluster::Cluster) -> Result<PathBuf> {
    let built = cluster.kubectl(&["kustomize", "deploy/default"])?;
    let documents: Vec<Value> =
        serde_saphyr::from_multiple(&built).context("kubectl kustomize printed no YAML")?;
    let rbac: Vec<Value> = documents
        .into_iter()
        .filter(|d| RBAC_KINDS.contains(&d["kind"].as_str().unwrap_or_default()))
        .collect();
    let list = json!({"apiVersion": "v1", "kind": "List", "items": rbac});
    cluster.kubectl_with_input(
        &[
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager=xtask-e2e",
            "-f",
            "-",
        ],
        &list.to_string(),
    )?;
    let token = cluster.kubectl(&[
        "create",
        "token",
        "daemonset-canary",
        "-n",
        RBAC_NAMESPACE,
        "--duration=6h",
    ])?;
    let kubeconfig = layout.run_dir().join("daemonset-canary.kubeconfig");
    cluster.write_kubeconfig_with_token(token.trim(), &kubeconfig)?;
    Ok(kubeconfig)
}

fn start_controller(
    binary: &Path,
    kubeconfig: &Path,
    metrics_port: u16,
    log: &PathBuf,
) -> Result<Controller> {
    let out =
        std::fs::File::create(log).with_context(|| format!("cannot create {}", log.display()))?;
    let err = out
        .try_clone()
        .context("cannot reopen the controller log")?;
    let child = Command::new(binary)
        .arg("run")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg(format!("--metrics-addr=127.0.0.1:{metrics_port}"))
        // As deployed: leader election on, the Lease in the controller's namespace (the Role of
        // deploy/rbac allows exactly that).
        .args(["--leader-election", "--lease-namespace", RBAC_NAMESPACE])
        .env("CANARY_LOG_FORMAT", "json")
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        // Its own process group: a Ctrl-C of the terminal reaches cargo test and this command,
        // which stops the controller through Drop.
        .process_group(0)
        .spawn()
        .with_context(|| format!("cannot start {} run", binary.display()))?;
    let mut controller = Controller(child);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if cluster::http_get(metrics_port, "/readyz").is_some_and(|(code, _)| code == 200) {
            return Ok(controller);
        }
        if let Ok(Some(status)) = controller.0.try_wait() {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            bail!("daemonset-canary run exited ({status}) before it was ready:\n{text}");
        }
        if Instant::now() > deadline {
            bail!(
                "daemonset-canary run not ready after 60 s (log {})",
                log.display()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}
