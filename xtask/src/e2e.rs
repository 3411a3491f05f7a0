//! `cargo xtask e2e`: the end-to-end suites on the real control plane of `cargo xtask cluster`.
//!
//! Job: start the cluster with [`NODES`] KWOK nodes (or reuse a running one, matching the node
//! count), install the CanaryDaemonSet CRD as a user does (`daemonset-canary crd | kubectl apply
//! -f -`) and the controller's ServiceAccount and RBAC from deploy/, then run three suites, as
//! `--suite` picks:
//! 1. the main suite, the ignored test target `crates/daemonset-canary/tests/e2e/`, in two
//!    phases: the `deployed::` scenarios against the real `daemonset-canary run --kubeconfig
//!    --leader-election` binary started here with that ServiceAccount's token, watching every
//!    namespace as deployed; then, once that controller is stopped (it would act on every
//!    namespace), the other scenarios, each with its own KWOK nodes and controller processes,
//!    confined to its namespace. In each phase [`E2eArgs::jobs`] scenarios run at once (each has
//!    its own namespace).
//! 2. the KubeVirt suite: the cluster resized to [`KUBEVIRT_NODES`], KubeVirt's real
//!    virt-operator installed (`cargo xtask kubevirt up`), a controller started as deployed, and
//!    `crates/daemonset-canary/tests/e2e_kubevirt.rs` run against both.
//! 3. the deploy suite ([`crate::e2e_deploy`]): the Helm chart installed and upgraded with real
//!    Helm, the controller run as the chart's Deployment says, and the admission policy of
//!    deploy/policy.
//!
//! The tests read where everything is from the environment variables named below.
//!
//! Invariants: what this command started (the controllers, KubeVirt, and the cluster unless it
//! was running already) is stopped when it ends, passed or failed, and no scenario's node is
//! left; a suite runs even after one before it failed, so that one report has all; the suites
//! fail, never skip, when the cluster is not reachable.

use crate::cargo;
use crate::cluster::{self, Layout, UpArgs};
use crate::kubevirt;
use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Nodes of the e2e cluster: the README's demo size.
pub const NODES: u32 = 50;
/// Nodes of the KubeVirt suite (issue 49: virt-operator's upgrade of virt-handler on 20 nodes).
pub const KUBEVIRT_NODES: u32 = 20;
/// Nodes when only the deploy suite runs: a few rollouts of a few pods each.
const DEPLOY_SUITE_NODES: u32 = 5;
/// The test target of the main suite.
const TEST_TARGET: &str = "e2e";
/// The test target of the KubeVirt suite.
const KUBEVIRT_TEST_TARGET: &str = "e2e_kubevirt";
/// virt-operator's log (the KubeVirt suite quotes it when it fails).
const ENV_OPERATOR_LOG: &str = "DAEMONSET_CANARY_E2E_VIRT_OPERATOR_LOG";
/// The kubeconfig of the cluster under test (the tests fail when it is set and unreachable).
const ENV_KUBECONFIG: &str = "DAEMONSET_CANARY_E2E_KUBECONFIG";
/// `host:port` of the controller's metrics and health server.
const ENV_METRICS: &str = "DAEMONSET_CANARY_E2E_METRICS";
/// The controller's log file (tests quote it when they fail).
const ENV_CONTROLLER_LOG: &str = "DAEMONSET_CANARY_E2E_CONTROLLER_LOG";
/// The kubectl the tests run (the one built with the cluster).
const ENV_KUBECTL: &str = "KUBECTL";
/// The API server's audit log (the controller's requests, and virt-operator's DaemonSet
/// writes), which the tests read.
const ENV_AUDIT_LOG: &str = "DAEMONSET_CANARY_E2E_AUDIT_LOG";
/// Where the isolated scenarios' own controllers write their logs and kubeconfigs.
const ENV_LOGS: &str = "DAEMONSET_CANARY_E2E_LOGS";
/// `canary-verdicts` (kstatus, Argo CD's health check), built by [`crate::verdicts`].
const ENV_VERDICTS: &str = "DAEMONSET_CANARY_E2E_VERDICTS";
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
    /// Run only the tests whose names (`module::name`) contain this filter (the main and
    /// KubeVirt suites).
    #[arg(long)]
    filter: Option<String>,
    /// Scenarios run at once in each phase of the main suite (each has its own namespace).
    #[arg(long, default_value_t = DEFAULT_JOBS)]
    pub jobs: u32,
    /// Which suites: `all` (default), `main` (tests/e2e/), `kubevirt` (tests/e2e_kubevirt.rs,
    /// with KubeVirt's virt-operator) or `deploy` (the Helm chart and the admission policy).
    #[arg(long, value_enum, default_value_t = Suite::All)]
    suite: Suite,
}

impl Default for E2eArgs {
    fn default() -> Self {
        Self {
            keep_cluster: false,
            filter: None,
            jobs: DEFAULT_JOBS,
            suite: Suite::All,
        }
    }
}

/// Scenarios at once by default: they spend most of their time waiting for pods and pauses, so
/// more of them than cores keeps the control plane busy without starving it.
const DEFAULT_JOBS: u32 = 4;

/// The suites of `cargo xtask e2e`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Suite {
    /// Every suite: main, KubeVirt, deploy.
    #[default]
    All,
    /// tests/e2e/ on 50 nodes.
    Main,
    /// tests/e2e_kubevirt.rs on 20 nodes with KubeVirt installed.
    Kubevirt,
    /// The Helm chart and deploy/policy ([`crate::e2e_deploy`]).
    Deploy,
}

/// Kills the controller when dropped (also on an error path).
pub struct Controller(Child);

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

/// Runs the suites.
pub fn run(args: &E2eArgs) -> Result<()> {
    let layout = Layout::new()?;
    // A suite run alone starts at its own size: no 50 nodes to remove again.
    let nodes = match args.suite {
        Suite::Kubevirt => KUBEVIRT_NODES,
        Suite::Deploy => DEPLOY_SUITE_NODES,
        Suite::All | Suite::Main => NODES,
    };
    let cluster = cluster::up(&layout, &UpArgs::with_nodes(nodes))?;
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
    // The binary the test targets are built against: the same profile (`cargo test --profile
    // ci` below), so `CARGO_BIN_EXE_daemonset-canary` in the tests is this very file.
    let status = Command::new(&cargo)
        .args([
            "build",
            "--locked",
            "--profile",
            crate::PROFILE,
            "-p",
            "daemonset-canary",
            "--bin",
            "daemonset-canary",
        ])
        .status()
        .context("cannot run cargo build")?;
    if !status.success() {
        bail!(
            "cargo build --profile {} -p daemonset-canary failed",
            crate::PROFILE
        );
    }
    let binary = crate::ci_binary()?;
    let mut failed: Vec<String> = Vec::new();
    let mut suite = |name: &str, result: Result<()>| {
        if let Err(error) = result {
            failed.push(format!("{name}: {error:#}"));
        }
    };
    if matches!(args.suite, Suite::All | Suite::Main) {
        suite(
            "the main suite",
            run_main_suite(layout, cluster, args, &binary),
        );
    }
    if matches!(args.suite, Suite::All | Suite::Kubevirt) {
        suite(
            "the KubeVirt suite",
            run_kubevirt_suite(layout, args, &binary),
        );
    }
    if matches!(args.suite, Suite::All | Suite::Deploy) {
        let started = Instant::now();
        let result = crate::e2e_deploy::run(layout, cluster, &binary);
        eprintln!(
            "==> e2e: deploy suite {} in {:.0} s",
            if result.is_ok() { "passed" } else { "FAILED" },
            started.elapsed().as_secs_f64()
        );
        suite("the deploy suite", result);
    }
    if !failed.is_empty() {
        bail!("{}", failed.join("\n"));
    }
    Ok(())
}

/// The main suite (tests/e2e/): the `deployed::` scenarios against one controller as
/// deploy/default installs it, then the isolated ones.
fn run_main_suite(
    layout: &Layout,
    cluster: &cluster::Cluster,
    args: &E2eArgs,
    binary: &Path,
) -> Result<()> {
    let cargo = cargo();
    install_crd(cluster, binary)?;
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
        if args.filter.is_some() && args.suite == Suite::All {
            // The filter names tests of another suite.
            return Ok(());
        }
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
        let controller = start_controller(binary, &identity, metrics_port, &log)?;
        eprintln!(
            "==> e2e: {} deployed scenarios, {} at a time, against daemonset-canary run as \
             ServiceAccount {RBAC_NAMESPACE}/daemonset-canary (deploy/rbac), metrics \
             127.0.0.1:{metrics_port}, log {}",
            deployed.len(),
            args.jobs,
            log.display()
        );
        let mut test = test_command(&cargo, layout, cluster, &deployed, args.jobs)?;
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
        let test = test_command(&cargo, layout, cluster, &isolated, args.jobs)?;
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

/// `cargo test` of `target`'s ignored tests (the ones that need a cluster), in the tests'
/// profile; the caller adds the harness's options after the `--ignored` it ends with.
pub(crate) fn ignored_tests_of(cargo: &str, target: &str) -> Command {
    let mut test = Command::new(cargo);
    test.args([
        "test",
        "--locked",
        "--profile",
        crate::PROFILE,
        "-p",
        "daemonset-canary",
        "--test",
        target,
        "--",
        "--ignored",
    ]);
    test
}

/// The names of the suite's tests (`module::name`), as the test binary lists them.
fn list_tests(cargo: &str) -> Result<Vec<String>> {
    let output = ignored_tests_of(cargo, TEST_TARGET)
        .args(["--list", "--format=terse"])
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
) -> Result<Command> {
    let mut test = ignored_tests_of(cargo, TEST_TARGET);
    test.args([
        "--exact",
        // Each scenario prints its figures (makespan, phases); show them in CI's log.
        "--nocapture",
    ])
    .arg(format!("--test-threads={threads}"))
    .args(tests)
    .env(ENV_KUBECONFIG, &cluster.kubeconfig)
    .env(ENV_KUBECTL, &cluster.kubectl)
    .env(ENV_AUDIT_LOG, layout.audit_log())
    .env(ENV_LOGS, layout.logs())
    .env(ENV_VERDICTS, crate::verdicts::ensure_built()?);
    Ok(test)
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

/// The KubeVirt suite: the cluster at [`KUBEVIRT_NODES`] nodes, KubeVirt installed, a controller
/// as deploy/default installs it, the tests; KubeVirt uninstalled and stopped (unless
/// `--keep-cluster`).
fn run_kubevirt_suite(layout: &Layout, args: &E2eArgs, binary: &Path) -> Result<()> {
    let started = Instant::now();
    let cluster = cluster::up(layout, &UpArgs::with_nodes(KUBEVIRT_NODES))?;
    install_crd(&cluster, binary)?;
    let identity = controller_identity(layout, &cluster)?;
    let metrics_port = cluster::free_port()?;
    let log = layout.logs().join("daemonset-canary-kubevirt.log");
    let _controller = start_controller(binary, &identity, metrics_port, &log)?;
    let installed = kubevirt::up(layout, &cluster, &kubevirt::UpArgs { timeout: 600 });
    let result = installed.and_then(|kubevirt| {
        eprintln!(
            "==> e2e: KubeVirt ready for the suite after {:.0} s",
            started.elapsed().as_secs_f64()
        );
        let mut test = ignored_tests_of(&cargo(), KUBEVIRT_TEST_TARGET);
        test.args([
            // The KubeVirt scenarios share virt-handler: one at a time.
            "--test-threads=1",
            "--nocapture",
        ]);
        if let Some(filter) = &args.filter {
            test.arg(filter);
        }
        test.env(ENV_KUBECONFIG, &cluster.kubeconfig)
            .env(ENV_KUBECTL, &cluster.kubectl)
            .env(ENV_METRICS, format!("127.0.0.1:{metrics_port}"))
            .env(ENV_CONTROLLER_LOG, &log)
            .env(ENV_AUDIT_LOG, layout.audit_log())
            .env(ENV_OPERATOR_LOG, kubevirt.operator_log);
        run_tests(test, "KubeVirt")
    });
    if !args.keep_cluster
        && let Err(error) = kubevirt::down(layout)
    {
        eprintln!("error: stopping KubeVirt: {error:#}");
    }
    eprintln!(
        "==> e2e: KubeVirt suite {} in {:.0} s",
        if result.is_ok() { "passed" } else { "FAILED" },
        started.elapsed().as_secs_f64()
    );
    result.with_context(|| format!("the controller's log is {}", log.display()))
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
    log: &Path,
) -> Result<Controller> {
    let mut args = vec![
        "run".to_owned(),
        "--kubeconfig".to_owned(),
        kubeconfig.display().to_string(),
        format!("--metrics-addr=127.0.0.1:{metrics_port}"),
    ];
    // As deployed: leader election on, the Lease in the controller's namespace (the Role of
    // deploy/rbac allows exactly that).
    args.extend(["--leader-election", "--lease-namespace", RBAC_NAMESPACE].map(str::to_owned));
    let env = [("CANARY_LOG_FORMAT".to_owned(), "json".to_owned())];
    spawn_controller(binary, &args, &env, metrics_port, log)
}

/// Starts `binary` with `args` and `env` (its output to `log`) and waits until its `/readyz` on
/// `metrics_port` answers 200; fails with the log when it exits first or takes over 60 s.
pub fn spawn_controller(
    binary: &Path,
    args: &[String],
    env: &[(String, String)],
    metrics_port: u16,
    log: &Path,
) -> Result<Controller> {
    let out =
        std::fs::File::create(log).with_context(|| format!("cannot create {}", log.display()))?;
    let err = out
        .try_clone()
        .context("cannot reopen the controller log")?;
    let child = Command::new(binary)
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        // Its own process group: a Ctrl-C of the terminal reaches cargo test and this command,
        // which stops the controller through Drop.
        .process_group(0)
        .spawn()
        .with_context(|| format!("cannot start {} {}", binary.display(), args.join(" ")))?;
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
