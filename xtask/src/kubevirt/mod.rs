//! `cargo xtask kubevirt up|upgrade|status|down|build`: the real KubeVirt virt-operator, built
//! from its released sources, running as a local process against the cluster of `cargo xtask
//! cluster up`.
//!
//! Job: build virt-operator at the pinned release ([`build`]), install what KubeVirt's own
//! install manifest installs except the operator's Deployment (namespace, the KubeVirt CRD, the
//! PriorityClass, the operator's ServiceAccount and RBAC), start virt-operator with that
//! ServiceAccount's token, create the `KubeVirt` object, and play the parts a real cluster plays
//! for it that KWOK cannot ([`jobs`]: the install-strategy Job's container), until KubeVirt is
//! `Deployed` on every node. `upgrade --to VERSION` moves the KubeVirt object's `imageTag`, which
//! makes virt-operator generate that version's install strategy and roll virt-handler to it with
//! its DaemonSet canary.
//!
//! What is done by hand, and why (docs/kubevirt.md has the whole list):
//! - the install-strategy Job: its pod is a KWOK pod that runs nothing, so a supervised runner
//!   ([`jobs::serve`], the `virt-operator-jobs` component) runs the same binary with the Job's
//!   command and environment (`virt-operator --dump-install-strategy`), then reports the pod
//!   `Succeeded` as the kubelet would;
//! - webhooks and the aggregated API: they point at Services of virt-api and virt-operator,
//!   which have no reachable endpoint here (no kube-proxy, no pod network); the KubeVirt
//!   object's `customizeComponents` (KubeVirt's own knob) empties the webhook configurations, so
//!   the API server does not call them; `v1.subresources.kubevirt.io` stays unavailable;
//! - control-plane nodes: KubeVirt's infrastructure pods (virt-api, virt-controller, the Job)
//!   require a `node-role.kubernetes.io/control-plane` node; `node-1` gets the label;
//! - images: none is pulled; KWOK plays the pods, an image tag ending in `-crashloop` makes them
//!   crash-loop (the cluster's KWOK Stages).
//!
//! Invariants: nothing here edits KubeVirt's code or its install strategy; everything listens
//! on 127.0.0.1 (virt-operator's webhook server binds its fixed port 8444 there, so one
//! virt-operator per machine); `down` stops what `up` started and uninstalls KubeVirt.

pub mod build;
mod install;
pub mod jobs;

use crate::cluster::{self, Cluster, Component, Layout};
use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// KubeVirt's namespace (the install manifest's default).
pub const NAMESPACE: &str = "kubevirt";
/// The registry the images would come from; nothing is pulled.
pub const REGISTRY: &str = "quay.io/kubevirt";
/// virt-operator's identity (the install manifest's ServiceAccount).
pub const OPERATOR_USER: &str = "system:serviceaccount:kubevirt:kubevirt-operator";
/// The operator's ServiceAccount.
const OPERATOR_SERVICE_ACCOUNT: &str = "kubevirt-operator";
/// The KubeVirt object's name (the release's `kubevirt-cr.yaml`).
pub const KUBEVIRT_NAME: &str = "kubevirt";
/// virt-operator's webhook server port: fixed in its code (pkg/virt-operator/application.go).
const WEBHOOK_PORT: u16 = 8444;
/// The node that plays the control plane for KubeVirt's infrastructure pods.
const CONTROL_PLANE_NODE: &str = "node-1";

/// Options of `cargo xtask kubevirt`.
#[derive(clap::Args)]
pub struct KubeVirtArgs {
    #[command(subcommand)]
    command: KubeVirtCommand,
}

#[derive(clap::Subcommand)]
enum KubeVirtCommand {
    /// Build virt-operator (cached), install KubeVirt on the running cluster and wait until it
    /// is Deployed.
    Up(UpArgs),
    /// Roll KubeVirt to another version (the KubeVirt object's imageTag): virt-operator updates
    /// virt-handler with its DaemonSet canary. A tag ending in `-crashloop` crash-loops.
    Upgrade(UpgradeArgs),
    /// Print the KubeVirt phase, versions and the virt-handler DaemonSet.
    Status,
    /// Uninstall KubeVirt (delete the KubeVirt object; virt-operator removes what it made) and
    /// stop virt-operator and the Job runner.
    Down,
    /// Only build virt-operator into target/cluster/bin/ (cached).
    Build,
    /// The install-strategy Job runner (started by `up` as a component; not for direct use).
    #[command(hide = true)]
    ServeJobs,
}

/// Options of `cargo xtask kubevirt up`.
#[derive(clap::Args, Clone, Debug)]
pub struct UpArgs {
    /// Longest wait for KubeVirt to be Deployed.
    #[arg(long, value_name = "SECONDS", default_value_t = 600)]
    pub timeout: u64,
}

/// Options of `cargo xtask kubevirt upgrade`.
#[derive(clap::Args, Clone, Debug)]
pub struct UpgradeArgs {
    /// The version (image tag) to roll to, e.g. v1.9.1; a tag ending in `-crashloop` makes the
    /// new pods crash-loop.
    #[arg(long, value_name = "VERSION")]
    pub to: String,
    /// Return once the KubeVirt object names the version, without waiting for the rollout.
    #[arg(long)]
    pub no_wait: bool,
    /// Longest wait for the rollout to end (Deployed at the version, or the canary failed).
    #[arg(long, value_name = "SECONDS", default_value_t = 600)]
    pub timeout: u64,
}

/// Runs `cargo xtask kubevirt ...`.
pub fn run(args: &KubeVirtArgs) -> Result<()> {
    let layout = Layout::new()?;
    match &args.command {
        KubeVirtCommand::Build => ensure_built(&layout),
        KubeVirtCommand::Up(up_args) => {
            let cluster = running_cluster(&layout)?;
            up(&layout, &cluster, up_args).map(|_| ())
        }
        KubeVirtCommand::Upgrade(upgrade_args) => {
            let cluster = running_cluster(&layout)?;
            upgrade(&layout, &cluster, upgrade_args).map(|_| ())
        }
        KubeVirtCommand::Status => {
            let cluster = running_cluster(&layout)?;
            status(&layout, &cluster)
        }
        KubeVirtCommand::Down => down(&layout),
        KubeVirtCommand::ServeJobs => {
            let cluster = running_cluster(&layout)?;
            jobs::serve(&layout, &cluster)
        }
    }
}

/// Builds virt-operator (cached) and copies the release's manifests next to it.
pub fn ensure_built(layout: &Layout) -> Result<()> {
    cluster::build::ensure_built(build::BUILDS, layout.src(), &layout.bin)
}

fn running_cluster(layout: &Layout) -> Result<Cluster> {
    cluster::running(layout)?
        .context("no cluster is running: start one with `cargo xtask cluster up` first")
}

/// virt-operator's component (pid file, log `target/cluster/logs/virt-operator.log`).
fn operator(layout: &Layout) -> Component {
    layout.component("virt-operator")
}

/// The Job runner's component: a copy of this xtask binary running `kubevirt serve-jobs`.
fn job_runner(layout: &Layout) -> Component {
    Component {
        name: "virt-operator-jobs",
        binary: layout.bin.join("xtask-virt-operator-jobs"),
        pid_file: layout.run_dir().join("virt-operator-jobs.pid"),
        log: layout.logs().join("virt-operator-jobs.log"),
        args_file: layout.run_dir().join("virt-operator-jobs.args"),
        hold_file: layout.run_dir().join("virt-operator-jobs.hold"),
    }
}

/// The kubeconfig of virt-operator's ServiceAccount.
fn operator_kubeconfig(layout: &Layout) -> PathBuf {
    layout.run_dir().join("virt-operator.kubeconfig")
}

/// What `up` leaves running.
pub struct KubeVirt {
    /// virt-operator's log.
    pub operator_log: PathBuf,
}

/// `kubevirt up` on a running cluster: idempotent (a running install is reused).
pub fn up(layout: &Layout, cluster: &Cluster, args: &UpArgs) -> Result<KubeVirt> {
    ensure_built(layout)?;
    install::check_audit_policy(layout)?;
    let started_at = Instant::now();
    let operator = operator(layout);
    let started = operator.running_pid().is_none();
    install::install_prerequisites(layout, cluster)?;
    cluster.kubectl(&[
        "label",
        "node",
        CONTROL_PLANE_NODE,
        "node-role.kubernetes.io/control-plane=",
        "--overwrite",
    ])?;
    if started {
        start_operator(layout, cluster, &operator)?;
    }
    start_job_runner(layout)?;
    install::ensure_kubevirt_object(cluster)?;
    wait_deployed(
        layout,
        cluster,
        None,
        Duration::from_secs(args.timeout),
        "KubeVirt to be Deployed",
    )?;
    let deployed = kubevirt_object(cluster)?;
    eprintln!(
        "==> kubevirt: KubeVirt Deployed at {} in {:.0} s (virt-operator {}, log {})",
        deployed
            .pointer("/status/observedKubeVirtVersion")
            .and_then(Value::as_str)
            .unwrap_or("?"),
        started_at.elapsed().as_secs_f64(),
        build::VERSION,
        operator.log.display()
    );
    Ok(KubeVirt {
        operator_log: operator.log,
    })
}

fn start_operator(layout: &Layout, cluster: &Cluster, operator: &Component) -> Result<()> {
    wait_webhook_port_free()?;
    let token = cluster.kubectl(&[
        "create",
        "token",
        OPERATOR_SERVICE_ACCOUNT,
        "-n",
        NAMESPACE,
        "--duration=24h",
    ])?;
    let kubeconfig = operator_kubeconfig(layout);
    cluster.write_kubeconfig_with_token(token.trim(), &kubeconfig)?;
    let metrics_port = cluster::free_port()?;
    let image = format!("{REGISTRY}/virt-operator:{}", build::VERSION);
    // As the release's Deployment runs it (`virt-operator --port 8443 -v 2`, the image in
    // VIRT_OPERATOR_IMAGE), on loopback, with the ServiceAccount's token instead of the
    // in-cluster one.
    operator.start_with_env(
        &[
            format!("--kubeconfig={}", kubeconfig.display()),
            "--listen=127.0.0.1".to_owned(),
            format!("--port={metrics_port}"),
            "-v=2".to_owned(),
        ],
        &[("VIRT_OPERATOR_IMAGE", image.as_str())],
    )?;
    eprintln!(
        "==> kubevirt: virt-operator {} started as {OPERATOR_USER} (metrics https://127.0.0.1:{metrics_port}, log {})",
        build::VERSION,
        operator.log.display()
    );
    // It leads once it holds its Lease (leader election is on, as deployed).
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let holder = cluster
            .kubectl(&[
                "get",
                "lease",
                "-n",
                NAMESPACE,
                "virt-operator",
                "-o",
                "jsonpath={.spec.holderIdentity}",
            ])
            .unwrap_or_default();
        if !holder.trim().is_empty() {
            return Ok(());
        }
        if operator.running_pid().is_none() {
            bail!("virt-operator exited at start\n{}", operator.log_tail(40));
        }
        if Instant::now() > deadline {
            bail!(
                "virt-operator holds no leader Lease after 60 s\n{}",
                operator.log_tail(40)
            );
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// virt-operator's webhook server binds 8444 (fixed in its code); a second virt-operator on
/// the machine (another checkout's e2e) would fail to start. Waits for the port.
fn wait_webhook_port_free() -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(900);
    let mut told = false;
    while std::net::TcpListener::bind(("127.0.0.1", WEBHOOK_PORT)).is_err() {
        if !told {
            eprintln!(
                "==> kubevirt: 127.0.0.1:{WEBHOOK_PORT} (virt-operator's fixed webhook port) is in \
                 use, probably by another virt-operator on this machine; waiting for it"
            );
            told = true;
        }
        if Instant::now() > deadline {
            bail!(
                "127.0.0.1:{WEBHOOK_PORT} is still in use after 15 min: virt-operator cannot \
                 bind its webhook server (stop the other one: `cargo xtask kubevirt down` in its \
                 checkout)"
            );
        }
        std::thread::sleep(Duration::from_secs(2));
    }
    Ok(())
}

fn start_job_runner(layout: &Layout) -> Result<()> {
    let runner = job_runner(layout);
    if runner.running_pid().is_some() {
        return Ok(());
    }
    // A copy of this binary, so that a rebuild of xtask does not replace the running file (the
    // pid check compares /proc/<pid>/exe with it).
    let me = std::env::current_exe().context("cannot find xtask's own executable")?;
    let staging = runner.binary.with_extension("new");
    std::fs::copy(&me, &staging)
        .with_context(|| format!("cannot copy {} to {}", me.display(), staging.display()))?;
    std::fs::rename(&staging, &runner.binary)
        .with_context(|| format!("cannot install {}", runner.binary.display()))?;
    let root = std::env::current_dir().context("no current directory")?;
    runner.start_with_env(
        &["kubevirt".to_owned(), "serve-jobs".to_owned()],
        &[(
            "XTASK_WORKSPACE_ROOT",
            root.to_str().context("the workspace path is not UTF-8")?,
        )],
    )?;
    Ok(())
}

/// The KubeVirt object, as JSON.
pub fn kubevirt_object(cluster: &Cluster) -> Result<Value> {
    let text = cluster.kubectl(&[
        "get",
        "kubevirt",
        KUBEVIRT_NAME,
        "-n",
        NAMESPACE,
        "-o",
        "json",
    ])?;
    serde_json::from_str(&text).context("kubectl get kubevirt printed no JSON")
}

/// Where an upgrade ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Deployed at the version.
    Deployed,
    /// virt-operator reported the canary failed (`FailedUpdate` on virt-handler).
    CanaryFailed,
    /// Not waited for.
    Started,
}

/// `kubevirt upgrade --to VERSION`.
pub fn upgrade(layout: &Layout, cluster: &Cluster, args: &UpgradeArgs) -> Result<Outcome> {
    if operator(layout).running_pid().is_none() {
        bail!("virt-operator is not running: run `cargo xtask kubevirt up` first");
    }
    start_job_runner(layout)?;
    let version = args.to.trim();
    if version.is_empty() || version.contains(char::is_whitespace) {
        bail!(
            "--to must be an image tag such as v1.9.1, got {:?}",
            args.to
        );
    }
    let before = kubevirt_object(cluster)?;
    let failures_before = failed_update_events(cluster)?;
    let patch = json!({"spec": {"imageTag": version}});
    cluster.kubectl(&[
        "patch",
        "kubevirt",
        KUBEVIRT_NAME,
        "-n",
        NAMESPACE,
        "--type=merge",
        "-p",
        &patch.to_string(),
    ])?;
    eprintln!(
        "==> kubevirt: imageTag {} -> {version} (KubeVirt generation {} -> next)",
        before
            .pointer("/status/observedKubeVirtVersion")
            .and_then(Value::as_str)
            .unwrap_or("?"),
        before
            .pointer("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or_default(),
    );
    if args.no_wait {
        return Ok(Outcome::Started);
    }
    let outcome = wait_deployed(
        layout,
        cluster,
        Some((version, failures_before)),
        Duration::from_secs(args.timeout),
        &format!("KubeVirt to be Deployed at {version}"),
    )?;
    match outcome {
        Outcome::CanaryFailed => eprintln!(
            "==> kubevirt: the virt-handler canary at {version} failed (FailedUpdate); virt-operator \
             never rolls back: upgrade to another version to go on"
        ),
        _ => eprintln!("==> kubevirt: Deployed at {version}"),
    }
    Ok(outcome)
}

/// The count of `FailedUpdate` events on virt-handler (their `count` added up).
fn failed_update_events(cluster: &Cluster) -> Result<u64> {
    let listed = cluster.kubectl(&[
        "get",
        "events",
        "-n",
        NAMESPACE,
        "--field-selector",
        "involvedObject.kind=DaemonSet,involvedObject.name=virt-handler,reason=FailedUpdate",
        "-o",
        "jsonpath={range .items[*]}{.count}{\"\\n\"}{end}",
    ])?;
    Ok(listed
        .lines()
        .map(|count| count.trim().parse::<u64>().unwrap_or(1))
        .sum())
}

/// Waits until KubeVirt is `Deployed` (at `version` if given) or, with a version, until
/// virt-operator reports a failed canary (a new `FailedUpdate` event).
fn wait_deployed(
    layout: &Layout,
    cluster: &Cluster,
    version: Option<(&str, u64)>,
    timeout: Duration,
    what: &str,
) -> Result<Outcome> {
    let deadline = Instant::now() + timeout;
    let operator = operator(layout);
    let mut last_reported = String::new();
    loop {
        let kv = kubevirt_object(cluster)?;
        let phase = kv
            .pointer("/status/phase")
            .and_then(Value::as_str)
            .unwrap_or("");
        let observed = kv
            .pointer("/status/observedKubeVirtVersion")
            .and_then(Value::as_str)
            .unwrap_or("");
        let at_version = version.is_none_or(|(v, _)| observed == v);
        if phase == "Deployed" && at_version {
            return Ok(Outcome::Deployed);
        }
        if let Some((_, failures_before)) = version
            && failed_update_events(cluster)? > failures_before
        {
            return Ok(Outcome::CanaryFailed);
        }
        let progress = format!("phase {phase:?}, observed version {observed:?}");
        if progress != last_reported {
            eprintln!("==> kubevirt: {progress}");
            last_reported = progress;
        }
        if operator.running_pid().is_none() {
            bail!(
                "virt-operator stopped while waiting for {what}\n{}",
                operator.log_tail(40)
            );
        }
        if Instant::now() > deadline {
            bail!(
                "no {what} after {timeout:?} ({last_reported})\n{}\n{}",
                operator.log_tail(30),
                job_runner(layout).log_tail(10)
            );
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

fn status(layout: &Layout, cluster: &Cluster) -> Result<()> {
    for component in [operator(layout), job_runner(layout)] {
        match component.running_pid() {
            Some(pid) => println!("{:<24} running (pid {pid})", component.name),
            None => println!("{:<24} stopped", component.name),
        }
    }
    let Ok(kv) = kubevirt_object(cluster) else {
        println!("KubeVirt is not installed");
        return Ok(());
    };
    let field = |pointer: &str| {
        kv.pointer(pointer)
            .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned))
            .unwrap_or_default()
    };
    println!(
        "KubeVirt {}: phase {}, target {} ({}), observed {}, generation {}",
        KUBEVIRT_NAME,
        field("/status/phase"),
        field("/status/targetKubeVirtVersion"),
        field("/status/targetDeploymentID"),
        field("/status/observedKubeVirtVersion"),
        field("/metadata/generation"),
    );
    if let Ok(ds) = cluster.kubectl(&[
        "get",
        "daemonset",
        "virt-handler",
        "-n",
        NAMESPACE,
        "-o",
        "jsonpath={.metadata.generation} {.spec.updateStrategy.rollingUpdate.maxUnavailable} {.status.desiredNumberScheduled} {.status.updatedNumberScheduled} {.status.numberReady}",
    ]) {
        let fields: Vec<&str> = ds.split_whitespace().collect();
        if let [generation, max_unavailable, desired, updated, ready] = fields.as_slice() {
            println!(
                "virt-handler: generation {generation}, maxUnavailable {max_unavailable}, desired {desired}, updated {updated}, ready {ready}"
            );
        }
    }
    Ok(())
}

/// Stops the Job runner and virt-operator, if they run (`cluster down` calls this first: they
/// would outlive the API server otherwise); returns the names of those it stopped.
pub fn stop_processes(layout: &Layout) -> Result<Vec<&'static str>> {
    let mut stopped = Vec::new();
    for component in [job_runner(layout), operator(layout)] {
        if component
            .stop(Duration::from_secs(15))
            .with_context(|| format!("cannot stop {}", component.name))?
        {
            stopped.push(component.name);
        }
    }
    Ok(stopped)
}

/// `kubevirt down`: uninstalls KubeVirt through virt-operator (so the aggregated API and the
/// webhooks go too), then stops virt-operator and the Job runner. Nothing to do when nothing
/// runs.
pub fn down(layout: &Layout) -> Result<()> {
    let operator = operator(layout);
    if let Some(cluster) = cluster::running(layout).ok().flatten()
        && operator.running_pid().is_some()
        && kubevirt_object(&cluster).is_ok()
    {
        eprintln!("==> kubevirt: deleting the KubeVirt object (virt-operator uninstalls KubeVirt)");
        if let Err(error) = cluster.kubectl(&[
            "delete",
            "kubevirt",
            KUBEVIRT_NAME,
            "-n",
            NAMESPACE,
            "--timeout=180s",
        ]) {
            eprintln!("==> kubevirt: the uninstall did not finish: {error:#}");
        }
    }
    let stopped = stop_processes(layout)?;
    if stopped.is_empty() {
        eprintln!("==> kubevirt: nothing was running");
    } else {
        eprintln!("==> kubevirt: stopped {}", stopped.join(", "));
    }
    Ok(())
}
