//! `cargo xtask cluster up|down|status`: a real Kubernetes control plane on loopback, with KWOK
//! nodes.
//!
//! Job: build (once, cached; [`build`]) and start etcd, kube-apiserver, kube-controller-manager
//! (the real DaemonSet controller, garbage collector, node lifecycle), kube-scheduler and KWOK's
//! controller, create N fake nodes without taints, and return once they are Ready. KWOK plays the
//! kubelet: pods go Pending → Running → Ready, or crash-loop, never become ready or fail their
//! image pull, by the annotation `sim.canary.daemonset.dev/behavior` (the Stages in
//! `kwok-stages.yaml`, the same vocabulary as canary-sim's kubelet model). What a pod does to
//! other objects (breaks its node or its neighbours, reports a node condition) and image pulls
//! with a per-node cache are played by `daemonset-canary sim kwok` (component `sim-kwok`, the
//! workspace's own binary, built by `up` and copied into `bin/`).
//!
//! Layout under `target/cluster/`: `bin/` (binaries), `src/` (generated Go modules), `pki/`
//! (credentials), `run/` (pid files, `state.json`), `logs/`, `etcd/` (data), `kubeconfig`.
//!
//! Invariants: every component listens on 127.0.0.1 only, on ports chosen free at `up`; `up` on
//! a running cluster only changes the node count (idempotent); a partly running cluster is an
//! error that names `cluster down`; `down` stops every component whose pid file names a live
//! process of ours, in reverse start order, and removes etcd's data.

pub(crate) mod build;
mod dry_run;
mod pki;
mod process;
mod supervise;

pub use dry_run::server_dry_run_deploy;
pub use process::{Component, free_port, http_get};
pub use supervise::supervise;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The kubelet Stages KWOK plays (delays filled in by [`stages`]).
const KWOK_STAGES: &str = include_str!("kwok-stages.yaml");
/// The jq expression the Stages read a pod's container behaviour with (`@BEHAVIOR@` in
/// `kwok-stages.yaml`): `["crashloop"]` when one of its containers' image tags ends in
/// `-crashloop` (operators such as virt-operator write pod templates without our annotation);
/// otherwise the first term of `sim.canary.daemonset.dev/behavior` (comma-separated) that names
/// a container behaviour, as `[name]` or `[name, argument]`; `["healthy"]` without one. Node
/// effects (`breaks-node=30s`, ...) are `sim kwok`'s.
const BEHAVIOR_JQ: &str = r#"(if ([.spec.containers[]?.image // "" | split("@")[0] | split("/")[-1] | select(contains(":")) | split(":")[-1] | endswith("-crashloop")] | any) then ["crashloop"] else ((.metadata.annotations["sim.canary.daemonset.dev/behavior"] // "") | split(",") | map(gsub("^ +| +$"; "") | split("=")) | map(select(.[0] as $n | ["healthy", "crashloop", "crash-loop", "never-ready", "image-pull-backoff", "slow-start", "crash-after-ready"] | index($n) != null)) | .[0] // ["healthy"]) end)"#;
/// The component playing canary-sim's node and neighbour behaviours (`daemonset-canary sim
/// kwok`), and the binary it runs from `bin/` (a copy of the workspace's debug build, so that
/// rebuilding the workspace never changes the binary of a running component).
const SIM_KWOK: &str = "sim-kwok";
const SIM_KWOK_BINARY: &str = "daemonset-canary";
/// The annotation KWOK selects the nodes it manages by; our nodes carry it, and no taint.
const KWOK_NODE_ANNOTATION: &str = "kwok.x-k8s.io/node";
/// The first service IP range (the serving certificate names its first address).
const SERVICE_CIDR: &str = "10.96.0.0/16";
/// How long a KWOK node lease lasts; KWOK renews it at a quarter of that. Long enough that 5,000
/// nodes cost ~170 lease writes per second, not the kubelet's ~500 at 40 s.
const NODE_LEASE_SECONDS: u32 = 120;
/// kube-controller-manager's grace before it marks a node whose lease is not renewed Unknown:
/// above one lease period, so a busy machine does not flap nodes.
const NODE_MONITOR_GRACE: &str = "240s";
/// The controller's identity as deploy/ installs it; the API server's audit log records every
/// request of this user (and nobody else's), so a benchmark can count the controller's requests.
pub const CONTROLLER_USER: &str = "system:serviceaccount:daemonset-canary-system:daemonset-canary";
/// Components in start order (`down` stops them in reverse).
const COMPONENTS: &[&str] = &[
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
    SIM_KWOK,
];

/// Options of `cargo xtask cluster`.
#[derive(clap::Args)]
pub struct ClusterArgs {
    #[command(subcommand)]
    command: ClusterCommand,
}

#[derive(clap::Subcommand)]
enum ClusterCommand {
    /// Build (cached) and start the control plane with N KWOK nodes; prints the kubeconfig path.
    Up(UpArgs),
    /// Stop every component and remove the cluster's data (binaries and credentials stay).
    Down,
    /// Print whether each component runs, the nodes and the kubeconfig path.
    Status,
    /// Only build the binaries into target/cluster/bin/ (cached), Helm included.
    Build,
}

/// Options of `cargo xtask cluster up`.
#[derive(clap::Args, Clone, Debug)]
pub struct UpArgs {
    /// Number of KWOK nodes (`node-1` .. `node-N`); on a running cluster, nodes are added or
    /// removed to match.
    #[arg(long, default_value_t = 3)]
    pub nodes: u32,
    /// Also write the kubeconfig to this path.
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// Delay from a pod's creation on a node to its containers running (canary-sim: 2 s).
    #[arg(long, value_name = "MS", default_value_t = 2000)]
    pub start_delay_ms: u64,
    /// Delay from running to ready for `healthy` pods (canary-sim: 3 s); `slow-start=<d>` pods
    /// take `<d>` instead.
    #[arg(long, value_name = "MS", default_value_t = 3000)]
    pub ready_delay_ms: u64,
    /// An extra kube-apiserver flag (repeatable), e.g. `--apiserver-arg=--watch-cache-sizes=pods#0`.
    /// A running cluster started with other extra flags is an error (`cluster down` first).
    #[arg(
        long = "apiserver-arg",
        value_name = "FLAG",
        allow_hyphen_values = true
    )]
    pub apiserver_args: Vec<String>,
}

impl UpArgs {
    /// `up` with `nodes` nodes and the default delays.
    pub fn with_nodes(nodes: u32) -> Self {
        Self {
            nodes,
            kubeconfig: None,
            start_delay_ms: 2000,
            ready_delay_ms: 3000,
            apiserver_args: Vec::new(),
        }
    }
}

/// Runs `cargo xtask cluster ...`.
pub fn run(args: &ClusterArgs) -> Result<()> {
    let layout = Layout::new()?;
    match &args.command {
        ClusterCommand::Up(up_args) => {
            let cluster = up(&layout, up_args)?;
            println!("{}", cluster.kubeconfig.display());
            Ok(())
        }
        ClusterCommand::Down => down(&layout),
        ClusterCommand::Status => status(&layout),
        ClusterCommand::Build => {
            build::ensure_binaries(&layout.src, &layout.bin, build::Which::All)
        }
    }
}

/// Paths of the cluster's files.
pub struct Layout {
    /// The binaries.
    pub bin: PathBuf,
    src: PathBuf,
    pki: PathBuf,
    run: PathBuf,
    logs: PathBuf,
    etcd_data: PathBuf,
    kubeconfig: PathBuf,
    state: PathBuf,
}

impl Layout {
    /// The layout under `<target>/cluster/`.
    pub fn new() -> Result<Self> {
        let root = crate::tools::target_dir()?.join("cluster");
        Ok(Self {
            bin: root.join("bin"),
            src: root.join("src"),
            pki: root.join("pki"),
            run: root.join("run"),
            logs: root.join("logs"),
            etcd_data: root.join("etcd"),
            kubeconfig: root.join("kubeconfig"),
            state: root.join("run").join("state.json"),
        })
    }

    /// The logs directory (the e2e controller logs there too).
    pub fn logs(&self) -> &Path {
        &self.logs
    }

    /// The API server's audit log: one JSON line per request of [`CONTROLLER_USER`].
    pub fn audit_log(&self) -> PathBuf {
        self.logs.join("audit.log")
    }

    /// The directory of pid files and other files of the running cluster.
    pub fn run_dir(&self) -> &Path {
        &self.run
    }

    /// The directory of the generated Go modules.
    pub fn src(&self) -> &Path {
        &self.src
    }

    /// The API server's audit policy (written at `up`).
    pub fn audit_policy(&self) -> PathBuf {
        self.run.join("audit-policy.yaml")
    }

    /// The component `name`: its binary in `bin/`, pid file in `run/`, log in `logs/`.
    pub fn component(&self, name: &'static str) -> Component {
        let binary = if name == SIM_KWOK {
            SIM_KWOK_BINARY
        } else {
            name
        };
        Component {
            name,
            binary: self.bin.join(binary),
            pid_file: self.run.join(format!("{name}.pid")),
            log: self.logs.join(format!("{name}.log")),
            args_file: self.run.join(format!("{name}.args")),
            hold_file: self.run.join(format!("{name}.hold")),
        }
    }
}

/// A running cluster.
pub struct Cluster {
    /// Its admin kubeconfig.
    pub kubeconfig: PathBuf,
    /// The kubectl built with it.
    pub kubectl: PathBuf,
    /// Whether this call started it (false: it was running already).
    pub started: bool,
}

impl Cluster {
    /// `kubectl --kubeconfig <ours> <args>`, its stdout; fails with stderr on a non-zero exit.
    pub fn kubectl(&self, args: &[&str]) -> Result<String> {
        kubectl(&self.kubectl, &self.kubeconfig, args, None)
    }

    /// The same with `input` on stdin.
    pub fn kubectl_with_input(&self, args: &[&str], input: &str) -> Result<String> {
        kubectl(&self.kubectl, &self.kubeconfig, args, Some(input))
    }

    /// Writes a kubeconfig for the same API server that authenticates with `token` (another
    /// identity, e.g. a ServiceAccount token from `kubectl create token`) to `path`.
    pub fn write_kubeconfig_with_token(&self, token: &str, path: &Path) -> Result<()> {
        let text = std::fs::read_to_string(&self.kubeconfig)
            .with_context(|| format!("cannot read {}", self.kubeconfig.display()))?;
        let config: Value = serde_saphyr::from_str(&text)
            .with_context(|| format!("{} is not YAML", self.kubeconfig.display()))?;
        let cluster = config
            .pointer("/clusters/0/cluster")
            .unwrap_or(&Value::Null);
        let (Some(server), Some(ca)) = (
            cluster["server"].as_str(),
            cluster["certificate-authority"].as_str(),
        ) else {
            bail!("{} names no server and CA", self.kubeconfig.display());
        };
        let pki = pki::Pki::for_token(PathBuf::from(ca), token);
        std::fs::write(path, pki::kubeconfig(&pki, server))
            .with_context(|| format!("cannot write {}", path.display()))
    }

    /// Waits until the CRD `name` is Established (its resource is served). Polled rather than
    /// `kubectl wait`, which fails at once while a just-created CRD has no conditions yet.
    pub fn wait_crd_established(&self, name: &str) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let crd: Value =
                serde_json::from_str(&self.kubectl(&["get", "crd", name, "-o", "json"])?)
                    .context("kubectl get crd -o json printed no JSON")?;
            let established = crd
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Established" && c["status"] == "True");
            if established {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("the CRD {name} is not Established after 60 s");
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// Builds the binaries (cached) and returns the built kubectl.
pub fn ensure_kubectl() -> Result<PathBuf> {
    let layout = Layout::new()?;
    build::ensure_binaries(&layout.src, &layout.bin, build::Which::ControlPlane)?;
    Ok(layout.bin.join("kubectl"))
}

/// Builds Helm (cached, on first use only) and returns it.
pub fn ensure_helm() -> Result<PathBuf> {
    let layout = Layout::new()?;
    build::ensure_binaries(&layout.src, &layout.bin, build::Which::Named("helm"))?;
    Ok(layout.bin.join("helm"))
}

/// The running cluster, if every component runs; `None` when none does; an error when only
/// some do.
pub fn running(layout: &Layout) -> Result<Option<Cluster>> {
    let alive: Vec<&str> = COMPONENTS
        .iter()
        .copied()
        .filter(|name| layout.component(name).running_pid().is_some())
        .collect();
    if alive.is_empty() {
        return Ok(None);
    }
    if alive.len() != COMPONENTS.len() {
        bail!(
            "the local cluster is only partly running ({} of {}: {}); run `cargo xtask cluster \
             down` first (logs in {})",
            alive.len(),
            COMPONENTS.len(),
            alive.join(", "),
            layout.logs.display()
        );
    }
    Ok(Some(Cluster {
        kubeconfig: layout.kubeconfig.clone(),
        kubectl: layout.bin.join("kubectl"),
        started: false,
    }))
}

/// `cluster up`: reuses a running cluster (matching the node count) or starts one.
pub fn up(layout: &Layout, args: &UpArgs) -> Result<Cluster> {
    build::ensure_binaries(&layout.src, &layout.bin, build::Which::ControlPlane)?;
    let cluster = match running(layout)? {
        Some(cluster) => {
            let running_args = running_apiserver_args(layout);
            if running_args != args.apiserver_args {
                bail!(
                    "the running cluster's extra kube-apiserver flags are {running_args:?}, not \
                     {:?}: run `cargo xtask cluster down` first",
                    args.apiserver_args
                );
            }
            eprintln!("==> cluster: already running, reusing it");
            cluster
        }
        None => start(layout, args).inspect_err(|_| {
            // Leave nothing half-started behind; the error says where the logs are.
            let _ = stop_all(layout);
        })?,
    };
    ensure_nodes(&cluster, args.nodes)?;
    wait_nodes_ready(
        &cluster,
        args.nodes,
        Duration::from_secs(120 + u64::from(args.nodes) / 10),
    )?;
    if let Some(path) = &args.kubeconfig {
        std::fs::copy(&cluster.kubeconfig, path)
            .with_context(|| format!("cannot write the kubeconfig to {}", path.display()))?;
        return Ok(Cluster {
            kubeconfig: path.clone(),
            ..cluster
        });
    }
    Ok(cluster)
}

/// `cluster down`.
pub fn down(layout: &Layout) -> Result<()> {
    let stopped = stop_all(layout)?;
    if stopped.is_empty() {
        eprintln!("==> cluster: nothing was running");
    } else {
        eprintln!("==> cluster: stopped {}", stopped.join(", "));
    }
    Ok(())
}

fn stop_all(layout: &Layout) -> Result<Vec<&'static str>> {
    // KubeVirt's virt-operator and its Job runner first (`cargo xtask kubevirt`): they would
    // outlive the API server.
    let mut stopped = crate::kubevirt::stop_processes(layout)?;
    for name in COMPONENTS.iter().rev() {
        if layout
            .component(name)
            .stop(Duration::from_secs(15))
            .with_context(|| format!("cannot stop {name}"))?
        {
            stopped.push(*name);
        }
    }
    if layout.etcd_data.exists() {
        std::fs::remove_dir_all(&layout.etcd_data)
            .with_context(|| format!("cannot remove {}", layout.etcd_data.display()))?;
    }
    let _ = std::fs::remove_file(&layout.state);
    Ok(stopped)
}

fn status(layout: &Layout) -> Result<()> {
    for name in COMPONENTS {
        match layout.component(name).running_pid() {
            Some(pid) => println!("{name:<24} running (pid {pid})"),
            None => println!("{name:<24} stopped"),
        }
    }
    if let Some(cluster) = running(layout)? {
        let nodes = cluster.kubectl(&["get", "nodes", "--no-headers"])?;
        println!("nodes: {}", nodes.lines().count());
        println!("kubeconfig: {}", cluster.kubeconfig.display());
    }
    Ok(())
}

/// Ports of one cluster, chosen free at start.
struct Ports {
    etcd_client: u16,
    etcd_peer: u16,
    apiserver: u16,
    controller_manager: u16,
    scheduler: u16,
    kwok: u16,
}

fn start(layout: &Layout, args: &UpArgs) -> Result<Cluster> {
    for dir in [&layout.run, &layout.logs] {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    // Before anything starts: a build that fails leaves nothing running.
    install_sim_kwok(layout)?;
    if layout.etcd_data.exists() {
        std::fs::remove_dir_all(&layout.etcd_data)
            .with_context(|| format!("cannot clear {}", layout.etcd_data.display()))?;
    }
    let pki = pki::ensure(&layout.pki)?;
    let ports = Ports {
        etcd_client: free_port()?,
        etcd_peer: free_port()?,
        apiserver: free_port()?,
        controller_manager: free_port()?,
        scheduler: free_port()?,
        kwok: free_port()?,
    };
    let server = format!("https://127.0.0.1:{}", ports.apiserver);
    std::fs::write(&layout.kubeconfig, pki::kubeconfig(&pki, &server))
        .with_context(|| format!("cannot write {}", layout.kubeconfig.display()))?;
    let cluster = Cluster {
        kubeconfig: layout.kubeconfig.clone(),
        kubectl: layout.bin.join("kubectl"),
        started: true,
    };
    let started = Instant::now();

    let etcd = layout.component("etcd");
    let etcd_client = format!("http://127.0.0.1:{}", ports.etcd_client);
    let etcd_peer = format!("http://127.0.0.1:{}", ports.etcd_peer);
    etcd.start(&strings(&[
        "--name=local",
        &format!("--data-dir={}", layout.etcd_data.display()),
        &format!("--listen-client-urls={etcd_client}"),
        &format!("--advertise-client-urls={etcd_client}"),
        &format!("--listen-peer-urls={etcd_peer}"),
        &format!("--initial-advertise-peer-urls={etcd_peer}"),
        &format!("--initial-cluster=local={etcd_peer}"),
        // A throw-away test store: fsync buys nothing and costs seconds on a busy disk.
        "--unsafe-no-fsync",
        "--log-level=warn",
    ]))?;
    wait_until(&etcd, Duration::from_secs(30), "etcd /health", || {
        http_get(ports.etcd_client, "/health").is_some_and(|(code, _)| code == 200)
    })?;

    let audit_policy = layout.audit_policy();
    std::fs::write(&audit_policy, audit_policy_yaml())
        .with_context(|| format!("cannot write {}", audit_policy.display()))?;
    let apiserver = layout.component("kube-apiserver");
    apiserver.start(
        &strings(&[
            &format!("--audit-policy-file={}", audit_policy.display()),
            &format!("--audit-log-path={}", layout.audit_log().display()),
            "--audit-log-format=json",
            // Written as requests finish rather than in batches, so a reader sees every request
            // that has completed.
            "--audit-log-mode=blocking",
            &format!("--etcd-servers={etcd_client}"),
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            &format!("--secure-port={}", ports.apiserver),
            &format!("--tls-cert-file={}", pki.serving_cert.display()),
            &format!("--tls-private-key-file={}", pki.serving_key.display()),
            &format!("--client-ca-file={}", pki.ca_cert.display()),
            &format!("--token-auth-file={}", pki.token_file.display()),
            "--authorization-mode=Node,RBAC",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            &format!("--service-account-key-file={}", pki.sa_pub.display()),
            &format!(
                "--service-account-signing-key-file={}",
                pki.sa_key.display()
            ),
            &format!("--service-cluster-ip-range={SERVICE_CIDR}"),
            "--allow-privileged=true",
            "--profiling=false",
        ])
        .into_iter()
        .chain(args.apiserver_args.iter().cloned())
        .collect::<Vec<_>>(),
    )?;
    wait_until(
        &apiserver,
        Duration::from_secs(90),
        "kube-apiserver /readyz",
        || cluster.kubectl(&["get", "--raw", "/readyz"]).is_ok(),
    )?;

    let kubeconfig = layout.kubeconfig.display().to_string();
    let controller_manager = layout.component("kube-controller-manager");
    controller_manager.start(&strings(&[
        &format!("--kubeconfig={kubeconfig}"),
        &format!("--authentication-kubeconfig={kubeconfig}"),
        &format!("--authorization-kubeconfig={kubeconfig}"),
        "--bind-address=127.0.0.1",
        &format!("--secure-port={}", ports.controller_manager),
        &format!(
            "--service-account-private-key-file={}",
            pki.sa_key.display()
        ),
        &format!("--root-ca-file={}", pki.ca_cert.display()),
        &format!("--service-cluster-ip-range={SERVICE_CIDR}"),
        &format!("--node-monitor-grace-period={NODE_MONITOR_GRACE}"),
        // The defaults (20 requests per second, bursts of 30) are for kubelet-sized clusters;
        // they would make pod creation on 5,000 nodes take minutes of client-side throttling.
        "--kube-api-qps=200",
        "--kube-api-burst=400",
        "--profiling=false",
    ]))?;
    let scheduler = layout.component("kube-scheduler");
    scheduler.start(&strings(&[
        &format!("--kubeconfig={kubeconfig}"),
        &format!("--authentication-kubeconfig={kubeconfig}"),
        &format!("--authorization-kubeconfig={kubeconfig}"),
        "--bind-address=127.0.0.1",
        &format!("--secure-port={}", ports.scheduler),
        "--profiling=false",
    ]))?;
    let stages_file = layout.run.join("kwok-stages.yaml");
    std::fs::write(
        &stages_file,
        stages(args.start_delay_ms, args.ready_delay_ms),
    )
    .with_context(|| format!("cannot write {}", stages_file.display()))?;
    let kwok = layout.component("kwok");
    kwok.start(&strings(&[
        &format!("--kubeconfig={kubeconfig}"),
        &format!("--config={}", stages_file.display()),
        "--manage-all-nodes=false",
        &format!("--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}=fake"),
        &format!("--node-lease-duration-seconds={NODE_LEASE_SECONDS}"),
        &format!("--server-address=127.0.0.1:{}", ports.kwok),
        // One INFO line per Stage played is 80 MB of log and a share of the CPU at 5,000 nodes.
        "-v=WARN",
    ]))?;

    let sim_kwok = layout.component(SIM_KWOK);
    sim_kwok.start(&strings(&[
        "sim",
        "kwok",
        &format!("--kubeconfig={kubeconfig}"),
        &format!("--start-delay-ms={}", args.start_delay_ms),
    ]))?;

    // kube-controller-manager and kube-scheduler are up once they hold their leader leases
    // (leader election is on, as in a real cluster: one Lease renewal every 2 s each).
    for (component, lease) in [
        (&controller_manager, "kube-controller-manager"),
        (&scheduler, "kube-scheduler"),
    ] {
        wait_until(
            component,
            Duration::from_secs(60),
            &format!("the {lease} leader lease"),
            || {
                cluster
                    .kubectl(&[
                        "get",
                        "lease",
                        "-n",
                        "kube-system",
                        lease,
                        "-o",
                        "jsonpath={.spec.holderIdentity}",
                    ])
                    .is_ok_and(|holder| !holder.trim().is_empty())
            },
        )?;
    }
    // The service-account controller has made the default namespace's account: pods can be
    // admitted there.
    wait_until(
        &controller_manager,
        Duration::from_secs(60),
        "the default ServiceAccount",
        || {
            cluster
                .kubectl(&["get", "serviceaccount", "default"])
                .is_ok()
        },
    )?;
    for component in [&kwok, &sim_kwok] {
        if component.running_pid().is_none() {
            bail!(
                "{} stopped at start\n{}",
                component.name,
                component.log_tail(30)
            );
        }
    }
    let state = json!({
        "apiserver": server,
        "etcd": etcd_client,
        "ports": {
            "etcd_client": ports.etcd_client,
            "etcd_peer": ports.etcd_peer,
            "apiserver": ports.apiserver,
            "kube_controller_manager": ports.controller_manager,
            "kube_scheduler": ports.scheduler,
            "kwok": ports.kwok,
        },
        "start_delay_ms": args.start_delay_ms,
        "ready_delay_ms": args.ready_delay_ms,
        "apiserver_args": args.apiserver_args,
    });
    std::fs::write(&layout.state, format!("{state:#}\n"))
        .with_context(|| format!("cannot write {}", layout.state.display()))?;
    eprintln!(
        "==> cluster: control plane up in {:.1} s (logs in {})",
        started.elapsed().as_secs_f64(),
        layout.logs.display()
    );
    Ok(cluster)
}

/// The extra kube-apiserver flags the running cluster was started with (`state.json`).
fn running_apiserver_args(layout: &Layout) -> Vec<String> {
    std::fs::read_to_string(&layout.state)
        .ok()
        .and_then(|text| serde_json::from_str::<Value>(&text).ok())
        .and_then(|state| serde_json::from_value(state.get("apiserver_args")?.clone()).ok())
        .unwrap_or_default()
}

/// What `state.json` of the running cluster says (ports, the etcd client URL, ...).
pub fn running_state(layout: &Layout) -> Result<Value> {
    let text = std::fs::read_to_string(&layout.state)
        .with_context(|| format!("cannot read {}", layout.state.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{} is not JSON", layout.state.display()))
}

/// The API server's audit policy: the DaemonSet writes of the controller and of KubeVirt's
/// virt-operator with their request and response bodies (what each wrote: `maxUnavailable`, the
/// annotations, the resulting generation), every other request of the controller as metadata
/// (the benchmark counts them), every pod status write (KWOK's, as a kubelet's) with its
/// request (the benchmark reads when a pod turned Ready), nothing else.
fn audit_policy_yaml() -> String {
    let operator = crate::kubevirt::OPERATOR_USER;
    format!(
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n\
         - level: RequestResponse\n  users: [\"{CONTROLLER_USER}\", \"{operator}\"]\n  \
         verbs: [create, update, patch]\n  resources:\n  - group: apps\n    resources: [daemonsets]\n\
         - level: Metadata\n  users: [\"{CONTROLLER_USER}\"]\n\
         - level: Request\n  verbs: [update, patch]\n  resources:\n  - group: \"\"\n    resources: [pods/status]\n\
         - level: None\n"
    )
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|a| (*a).to_owned()).collect()
}

/// Polls `ready` every 200 ms until it holds; fails when `timeout` passes or the component's
/// process ends, with the end of its log.
fn wait_until(
    component: &Component,
    timeout: Duration,
    what: &str,
    mut ready: impl FnMut() -> bool,
) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        if ready() {
            return Ok(());
        }
        if component.running_pid().is_none() {
            bail!(
                "{} exited while waiting for {what}\n{}",
                component.name,
                component.log_tail(40)
            );
        }
        if Instant::now() > deadline {
            bail!("no {what} after {timeout:?}\n{}", component.log_tail(40));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The KWOK Stages with the delays and the behaviour expression filled in.
fn stages(start_delay_ms: u64, ready_delay_ms: u64) -> String {
    KWOK_STAGES
        .replace("@START_DELAY_MS@", &start_delay_ms.to_string())
        .replace("@READY_DELAY_MS@", &ready_delay_ms.to_string())
        .replace("@BEHAVIOR@", BEHAVIOR_JQ)
}

/// Builds the workspace's binary (the tests' profile, as `cargo xtask e2e` does) and copies it into
/// `bin/` for the `sim-kwok` component: through a temporary file renamed over the old copy, so a
/// copy still running elsewhere is never written to.
fn install_sim_kwok(layout: &Layout) -> Result<()> {
    eprintln!("==> cluster: building daemonset-canary for `sim kwok`");
    let status = Command::new(crate::cargo())
        .args([
            "build",
            "--quiet",
            "--locked",
            "--profile",
            crate::PROFILE,
            "-p",
            "daemonset-canary",
            "--bin",
            SIM_KWOK_BINARY,
        ])
        .status()
        .context("cannot run cargo build")?;
    if !status.success() {
        bail!("cargo build -p daemonset-canary failed: `sim kwok` cannot run");
    }
    let built = crate::ci_binary()?;
    std::fs::create_dir_all(&layout.bin)
        .with_context(|| format!("cannot create {}", layout.bin.display()))?;
    let installed = layout.bin.join(SIM_KWOK_BINARY);
    let temporary = layout
        .bin
        .join(format!(".{SIM_KWOK_BINARY}.{}", std::process::id()));
    std::fs::copy(&built, &temporary)
        .with_context(|| format!("cannot copy {} to {}", built.display(), temporary.display()))?;
    std::fs::rename(&temporary, &installed)
        .with_context(|| format!("cannot move {} into place", installed.display()))
}

/// The fake node `node-<index>` (1-based): managed by KWOK, no taint, its own pod CIDR, and an
/// address, as a kubelet registers its node with one. KWOK gives a `hostNetwork` pod its node's
/// address as pod IP; a node without one left such pods without a pod IP, and the Stage that
/// starts a pod (which selects pods without one) started them again after every step, so a
/// node agent's pods flipped between Ready and ContainerCreating for ever.
fn node(index: u32) -> Value {
    let name = format!("node-{index}");
    // 10.128.0.0/24, 10.128.1.0/24, ...: room for 32,768 nodes before leaving 10.0.0.0/8.
    let cidr = format!("10.{}.{}.0/24", 128 + index / 256, index % 256);
    // 172.16.0.1, ...: outside the pod and service ranges, unique up to 1,048,576 nodes.
    let address = format!(
        "172.{}.{}.{}",
        16 + index / 65_536,
        index / 256 % 256,
        index % 256
    );
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {
                KWOK_NODE_ANNOTATION: "fake",
                "node.alpha.kubernetes.io/ttl": "0",
            },
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "beta.kubernetes.io/os": "linux",
                "beta.kubernetes.io/arch": "amd64",
                "type": "kwok",
            },
        },
        "spec": {"podCIDR": cidr, "podCIDRs": [cidr]},
        "status": {"addresses": [
            {"type": "InternalIP", "address": address},
            {"type": "Hostname", "address": name},
        ]},
    })
}

/// Index of a node named `node-<index>`.
fn node_index(name: &str) -> Option<u32> {
    name.strip_prefix("node-")?.parse().ok()
}

/// Creates `node-1..node-N` that are missing and deletes `node-<i>` for i > N.
fn ensure_nodes(cluster: &Cluster, nodes: u32) -> Result<()> {
    let listed = cluster.kubectl(&["get", "nodes", "-o", "jsonpath={.items[*].metadata.name}"])?;
    let existing: std::collections::BTreeSet<u32> =
        listed.split_whitespace().filter_map(node_index).collect();
    let extra: Vec<String> = existing
        .iter()
        .filter(|i| **i > nodes)
        .map(|i| format!("node-{i}"))
        .collect();
    if !extra.is_empty() {
        eprintln!("==> cluster: removing {} nodes", extra.len());
        let mut args = vec!["delete", "node", "--wait=false"];
        args.extend(extra.iter().map(String::as_str));
        cluster.kubectl(&args)?;
    }
    let missing: Vec<u32> = (1..=nodes).filter(|i| !existing.contains(i)).collect();
    if missing.is_empty() {
        return Ok(());
    }
    eprintln!("==> cluster: creating {} KWOK nodes", missing.len());
    // A few kubectl processes in parallel: one create is one POST, and kubectl sends them one at
    // a time.
    let chunks: Vec<&[u32]> = missing.chunks(missing.len().div_ceil(4).max(1)).collect();
    let results: Vec<Result<String>> = std::thread::scope(|scope| {
        let handles: Vec<_> = chunks
            .iter()
            .map(|chunk| {
                scope.spawn(move || {
                    let list = json!({
                        "apiVersion": "v1",
                        "kind": "List",
                        "items": chunk.iter().map(|i| node(*i)).collect::<Vec<_>>(),
                    });
                    cluster
                        .kubectl_with_input(&["create", "-f", "-", "-o", "name"], &list.to_string())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("a node creator panicked")))
            })
            .collect()
    });
    for result in results {
        result.context("cannot create the KWOK nodes")?;
    }
    Ok(())
}

/// Waits until exactly `nodes` nodes exist, all Ready and without taints (the node lifecycle
/// controller removes `node.kubernetes.io/not-ready` once KWOK reports them Ready).
fn wait_nodes_ready(cluster: &Cluster, nodes: u32, timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    let template = r#"{range .items[*]}{.metadata.name} {.status.conditions[?(@.type=="Ready")].status} {.spec.taints[*].key}{"\n"}{end}"#;
    loop {
        let listed = cluster.kubectl(&["get", "nodes", "-o", &format!("jsonpath={template}")])?;
        // The cluster's own nodes: the e2e suite's scenarios add nodes of their own for a while.
        let own: Vec<&str> = listed
            .lines()
            .filter(|line| {
                line.split_whitespace()
                    .next()
                    .and_then(node_index)
                    .is_some()
            })
            .collect();
        let total = own.len();
        let ready = own
            .iter()
            .filter(|line| {
                let mut fields = line.split_whitespace();
                fields.next().is_some() && fields.next() == Some("True") && fields.next().is_none()
            })
            .count();
        if total == nodes as usize && ready == total {
            eprintln!("==> cluster: {nodes} nodes Ready, untainted");
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "after {timeout:?}: {ready} of {total} nodes Ready and untainted, {nodes} wanted; \
                 see target/cluster/logs/kwok.log and kube-controller-manager.log"
            );
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

fn kubectl(binary: &Path, kubeconfig: &Path, args: &[&str], input: Option<&str>) -> Result<String> {
    let mut command = Command::new(binary);
    command
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command
        .spawn()
        .with_context(|| format!("cannot run {}", binary.display()))?;
    if let (Some(text), Some(mut stdin)) = (input, child.stdin.take()) {
        stdin
            .write_all(text.as_bytes())
            .context("cannot write to kubectl")?;
    }
    let output = child.wait_with_output().context("kubectl did not finish")?;
    if !output.status.success() {
        // kubectl can print whole objects in an error (jsonpath failures): keep the start.
        let stderr = String::from_utf8_lossy(&output.stderr);
        let shown: String = stderr.trim().chars().take(4000).collect();
        bail!("kubectl {} failed: {shown}", args.join(" "));
    }
    String::from_utf8(output.stdout).context("kubectl printed non-UTF-8")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_carry_the_kwok_annotation_no_taint_and_distinct_cidrs() {
        let first = node(1);
        let last = node(5000);
        assert_eq!(
            first["metadata"]["annotations"][KWOK_NODE_ANNOTATION],
            "fake"
        );
        assert!(first["spec"].get("taints").is_none());
        assert_eq!(first["spec"]["podCIDR"], "10.128.1.0/24");
        assert_eq!(last["spec"]["podCIDR"], "10.147.136.0/24");
        // An address each, as a registered kubelet's node has (a hostNetwork pod's pod IP).
        let address = |node: &Value| node["status"]["addresses"][0].clone();
        assert_eq!(
            address(&first),
            json!({"type": "InternalIP", "address": "172.16.0.1"})
        );
        assert_eq!(address(&last)["address"], "172.16.19.136");
        assert_eq!(address(&node(65_536))["address"], "172.17.0.0");
        assert_eq!(first["status"]["addresses"][1]["address"], "node-1");
        assert_eq!(node_index("node-42"), Some(42));
        assert_eq!(node_index("other"), None);
    }

    #[test]
    fn the_audit_policy_records_both_writers_daemon_set_writes_first() {
        let policy: Value = serde_saphyr::from_str(&audit_policy_yaml()).unwrap();
        let rules = policy["rules"].as_array().cloned().unwrap_or_default();
        assert_eq!(rules.len(), 4, "{policy}");
        assert_eq!(rules[0]["level"], "RequestResponse");
        assert_eq!(
            rules[0]["users"],
            json!([CONTROLLER_USER, crate::kubevirt::OPERATOR_USER])
        );
        assert_eq!(rules[0]["resources"][0]["resources"], json!(["daemonsets"]));
        assert_eq!(rules[1]["level"], "Metadata");
        assert_eq!(rules[1]["users"], json!([CONTROLLER_USER]));
        assert_eq!(rules[2]["level"], "Request");
        assert_eq!(
            rules[2]["users"],
            Value::Null,
            "anybody's pod status writes"
        );
        assert_eq!(
            rules[2]["resources"][0]["resources"],
            json!(["pods/status"])
        );
        assert_eq!(rules[3]["level"], "None");
    }

    #[test]
    fn stages_have_every_delay_filled_in() {
        let text = stages(1500, 2500);
        assert!(!text.contains("_MS@"), "a placeholder is left");
        assert!(!text.contains("@BEHAVIOR@"), "a placeholder is left");
        assert!(text.contains("durationMilliseconds: 1500"));
        assert!(text.contains("durationMilliseconds: 2500"));
    }

    #[test]
    fn stages_parse_as_yaml_documents() {
        let text = stages(1, 2);
        let documents: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap_or_default();
        let names: Vec<&str> = documents
            .iter()
            .filter_map(|d| d["metadata"]["name"].as_str())
            .collect();
        assert!(names.contains(&"canary-pod-crash"), "{names:?}");
        assert!(names.contains(&"canary-pod-disrupted"), "{names:?}");
        // The node Stages replace KWOK's defaults, which it loads only without any.
        assert!(names.contains(&"node-initialize"), "{names:?}");
        assert!(names.contains(&"node-heartbeat"), "{names:?}");
        assert_eq!(names.len(), 11, "{names:?}");
    }
}
