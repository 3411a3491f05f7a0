//! `cargo xtask e2e`: the end-to-end suite on the real control plane of `cargo xtask cluster`.
//!
//! Job: start the cluster with [`NODES`] KWOK nodes (or reuse a running one, matching the node
//! count), install the CanaryDaemonSet CRD as a user does (`daemonset-canary crd | kubectl apply
//! -f -`) and the controller's ServiceAccount and RBAC from deploy/, start the real
//! `daemonset-canary run --kubeconfig --leader-election` binary with that ServiceAccount's token,
//! and run the ignored test target `crates/daemonset-canary/tests/e2e.rs` against them. Then the
//! KubeVirt suite: the cluster resized to [`KUBEVIRT_NODES`], KubeVirt's real virt-operator
//! installed (`cargo xtask kubevirt up`), and `crates/daemonset-canary/tests/e2e_kubevirt.rs`
//! run against it and the same controller. The tests read where everything is from the
//! environment variables named below. Then, with that controller stopped, the deploy suite
//! ([`crate::e2e_deploy`]): the Helm chart installed and upgraded with real Helm, the
//! controller run as the chart's Deployment says, and the admission policy of deploy/policy.
//! `--suite` picks one of them.
//!
//! Invariants: what this command started (the controller, KubeVirt, and the cluster unless it
//! was running already) is stopped when it ends, passed or failed; the suite fails, never skips,
//! when the cluster is not reachable.

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
/// The test target of the suite.
const TEST_TARGET: &str = "e2e";
/// The test target of the KubeVirt suite.
const KUBEVIRT_TEST_TARGET: &str = "e2e_kubevirt";
/// The API server's audit log (the KubeVirt suite reads virt-operator's writes and ours there).
const ENV_AUDIT_LOG: &str = "DAEMONSET_CANARY_E2E_AUDIT_LOG";
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
#[derive(clap::Args, Default)]
pub struct E2eArgs {
    /// Leave the cluster running afterwards, even if this command started it (for debugging;
    /// stop it with `cargo xtask cluster down`).
    #[arg(long)]
    keep_cluster: bool,
    /// Run only the tests whose names contain this filter (passed to the test binaries).
    #[arg(long)]
    filter: Option<String>,
    /// Which suites: `all` (default), `main` (tests/e2e.rs), `kubevirt` (tests/e2e_kubevirt.rs,
    /// with KubeVirt's virt-operator) or `deploy` (the Helm chart and the admission policy).
    #[arg(long, value_enum, default_value_t = Suite::All)]
    suite: Suite,
}

/// The suites of `cargo xtask e2e`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Suite {
    /// Every suite: main, KubeVirt, deploy.
    #[default]
    All,
    /// tests/e2e.rs on 50 nodes.
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

/// Runs the suite.
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
    let mut failed = if args.suite == Suite::Deploy {
        Vec::new()
    } else {
        run_controller_suites(layout, cluster, args, &binary)?
    };
    // The deploy suite runs even after a failed suite before it, so that one report has all.
    if matches!(args.suite, Suite::All | Suite::Deploy) {
        let started = Instant::now();
        let result = crate::e2e_deploy::run(layout, cluster, &binary);
        eprintln!(
            "==> e2e: deploy suite {} in {:.0} s",
            if result.is_ok() { "passed" } else { "FAILED" },
            started.elapsed().as_secs_f64()
        );
        if let Err(error) = result {
            failed.push(format!("the deploy suite ({error:#})"));
        }
    }
    if !failed.is_empty() {
        bail!(
            "{} failed; the cluster's logs (the controller's and virt-operator's too) are in {}",
            failed.join(" and "),
            layout.logs().display()
        );
    }
    Ok(())
}

/// The suites that run against one controller as deploy/default installs it: the main suite
/// (tests/e2e.rs) and the KubeVirt suite, as `--suite` asks. Returns the suites that failed;
/// the controller is stopped when it returns.
fn run_controller_suites(
    layout: &Layout,
    cluster: &cluster::Cluster,
    args: &E2eArgs,
    binary: &Path,
) -> Result<Vec<String>> {
    install_crd(cluster, binary)?;
    let identity = controller_identity(layout, cluster)?;
    let metrics_port = cluster::free_port()?;
    let log = layout.logs().join("daemonset-canary.log");
    let _controller = start_controller(binary, &identity, metrics_port, &log)?;
    eprintln!(
        "==> e2e: daemonset-canary run as ServiceAccount {RBAC_NAMESPACE}/daemonset-canary \
         (deploy/rbac), metrics 127.0.0.1:{metrics_port}, log {}",
        log.display()
    );
    let env = TestEnv {
        kubeconfig: cluster.kubeconfig.clone(),
        metrics: format!("127.0.0.1:{metrics_port}"),
        controller_log: log.clone(),
        kubectl: cluster.kubectl.clone(),
    };
    let mut failed = Vec::new();
    if matches!(args.suite, Suite::All | Suite::Main) {
        let started = Instant::now();
        let passed = run_tests(TEST_TARGET, args, &env, &[])?;
        eprintln!(
            "==> e2e: main suite {} in {:.0} s",
            if passed { "passed" } else { "FAILED" },
            started.elapsed().as_secs_f64()
        );
        if !passed {
            failed.push(format!(
                "the main suite (tests/e2e.rs; the controller's log is {})",
                log.display()
            ));
        }
    }
    if matches!(args.suite, Suite::All | Suite::Kubevirt)
        && !run_kubevirt_suite(layout, args, &env)?
    {
        failed.push(format!(
            "the KubeVirt suite (tests/e2e_kubevirt.rs; the controller's log is {})",
            log.display()
        ));
    }
    Ok(failed)
}

/// Where the tests find the cluster and the controller.
struct TestEnv {
    kubeconfig: PathBuf,
    metrics: String,
    controller_log: PathBuf,
    kubectl: PathBuf,
}

/// `cargo test --profile ci -p daemonset-canary --test <target> -- --ignored` with the suite's
/// environment; whether it passed.
fn run_tests(
    target: &str,
    args: &E2eArgs,
    env: &TestEnv,
    extra_env: &[(&str, PathBuf)],
) -> Result<bool> {
    let mut test = Command::new(cargo());
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
        // One scenario at a time: each reads its own increase of the controller's global
        // counters (tests/e2e.rs), and the KubeVirt scenarios share virt-handler.
        "--test-threads=1",
        // Each scenario prints its figures (makespan, phases); show them in CI's log.
        "--nocapture",
    ]);
    if let Some(filter) = &args.filter {
        test.arg(filter);
    }
    test.env(ENV_KUBECONFIG, &env.kubeconfig)
        .env(ENV_METRICS, &env.metrics)
        .env(ENV_CONTROLLER_LOG, &env.controller_log)
        .env(ENV_KUBECTL, &env.kubectl);
    for (name, value) in extra_env {
        test.env(name, value);
    }
    let status = test.status().context("cannot run cargo test")?;
    Ok(status.success())
}

/// The KubeVirt suite: the cluster at [`KUBEVIRT_NODES`] nodes, KubeVirt installed, the tests,
/// KubeVirt uninstalled and stopped (unless `--keep-cluster`).
fn run_kubevirt_suite(layout: &Layout, args: &E2eArgs, env: &TestEnv) -> Result<bool> {
    let started = Instant::now();
    let cluster = cluster::up(layout, &UpArgs::with_nodes(KUBEVIRT_NODES))?;
    let installed = kubevirt::up(layout, &cluster, &kubevirt::UpArgs { timeout: 600 });
    let result = installed.and_then(|kubevirt| {
        eprintln!(
            "==> e2e: KubeVirt ready for the suite after {:.0} s",
            started.elapsed().as_secs_f64()
        );
        run_tests(
            KUBEVIRT_TEST_TARGET,
            args,
            env,
            &[
                (ENV_AUDIT_LOG, layout.audit_log()),
                (ENV_OPERATOR_LOG, kubevirt.operator_log),
            ],
        )
    });
    if !args.keep_cluster
        && let Err(error) = kubevirt::down(layout)
    {
        eprintln!("error: stopping KubeVirt: {error:#}");
    }
    result
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
