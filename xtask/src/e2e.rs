//! `cargo xtask e2e`: the end-to-end suite on the real control plane of `cargo xtask cluster`.
//!
//! Job: start the cluster with [`NODES`] KWOK nodes (or reuse a running one, matching the node
//! count), install the CanaryDaemonSet CRD as a user does (`daemonset-canary crd | kubectl apply
//! -f -`) and the controller's ServiceAccount and RBAC from deploy/, start the real
//! `daemonset-canary run --kubeconfig --leader-election` binary with that ServiceAccount's token,
//! and run the ignored test target `crates/daemonset-canary/tests/e2e.rs` against them. The tests read where everything
//! is from the environment variables named below. Then, with that controller stopped, the
//! deploy suite ([`crate::e2e_deploy`]): the Helm chart installed and upgraded with real Helm,
//! the controller run as the chart's Deployment says, and the admission policy of
//! deploy/policy. `--suite` picks one of the two.
//!
//! Invariants: what this command started (the controller, and the cluster unless it was running
//! already) is stopped when it ends, passed or failed; the suite fails, never skips, when the
//! cluster is not reachable.

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
/// Nodes when only the deploy suite runs: a few rollouts of a few pods each.
const DEPLOY_SUITE_NODES: u32 = 5;
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
    /// Run only the tests whose names contain this filter (passed to the test binary; the
    /// main suite only).
    #[arg(long)]
    filter: Option<String>,
    /// Which suite: `main` (tests/e2e.rs with the controller as deploy/default installs it),
    /// `deploy` (the Helm chart and the admission policy), or `all`.
    #[arg(long, value_enum, default_value_t = Suite::All)]
    suite: Suite,
}

/// The suites of `cargo xtask e2e`.
#[derive(clap::ValueEnum, Clone, Copy, Default, PartialEq, Eq, Debug)]
pub enum Suite {
    /// Both, the main suite first.
    #[default]
    All,
    /// crates/daemonset-canary/tests/e2e.rs.
    Main,
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
    let nodes = if args.suite == Suite::Deploy {
        DEPLOY_SUITE_NODES
    } else {
        NODES
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
    let main = if args.suite == Suite::Deploy {
        Ok(())
    } else {
        run_main_suite(layout, cluster, args, &binary)
    };
    // The deploy suite runs even after a failed main suite, so that one report has both.
    let deploy = if args.suite == Suite::Main {
        Ok(())
    } else {
        let started = Instant::now();
        let result = crate::e2e_deploy::run(layout, cluster, &binary);
        eprintln!(
            "==> e2e: deploy suite {} in {:.0} s",
            if result.is_ok() { "passed" } else { "FAILED" },
            started.elapsed().as_secs_f64()
        );
        result
    };
    match (main, deploy) {
        (Ok(()), Ok(())) => Ok(()),
        (Err(error), Ok(())) | (Ok(()), Err(error)) => Err(error),
        (Err(main), Err(deploy)) => bail!(
            "{main:#}
and the deploy suite: {deploy:#}"
        ),
    }
}

/// The main suite: the CRD, the controller as deploy/default installs it, tests/e2e.rs.
fn run_main_suite(
    layout: &Layout,
    cluster: &cluster::Cluster,
    args: &E2eArgs,
    binary: &Path,
) -> Result<()> {
    let cargo = cargo();
    let started = Instant::now();
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
    let mut test = Command::new(&cargo);
    test.args([
        "test",
        "--locked",
        "-p",
        "daemonset-canary",
        "--test",
        TEST_TARGET,
        "--",
        "--ignored",
        // One scenario at a time: each reads its own increase of the controller's global
        // counters (tests/e2e.rs).
        "--test-threads=1",
        // Each scenario prints its figures (makespan, phases); show them in CI's log.
        "--nocapture",
    ]);
    if let Some(filter) = &args.filter {
        test.arg(filter);
    }
    let status = test
        .env(ENV_KUBECONFIG, &cluster.kubeconfig)
        .env(ENV_METRICS, format!("127.0.0.1:{metrics_port}"))
        .env(ENV_CONTROLLER_LOG, &log)
        .env(ENV_KUBECTL, &cluster.kubectl)
        .status()
        .context("cannot run cargo test")?;
    if !status.success() {
        bail!(
            "the e2e suite failed; the controller's log is {}, the cluster's logs are in {}",
            log.display(),
            layout.logs().display()
        );
    }
    eprintln!(
        "==> e2e: main suite passed in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
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
