//! What every scenario works with: the cluster (a kube client, kubectl), its own namespace, the
//! controller it runs against, and, for the isolated scenarios, its own KWOK nodes and its own
//! controller processes.
//!
//! Two kinds of scenario ([`crate`] explains when each runs):
//! - [`E2e::start`]: against the controller `cargo xtask e2e` started as deploy/ installs it
//!   (every namespace, leader election), whose metrics address and log come from the
//!   environment. That controller's counters are global: such a scenario counts its own writes
//!   in the audit log ([`crate::audit`]).
//! - [`E2e::isolated`]: a namespace, a pool of KWOK nodes tainted and labelled for this scenario
//!   alone (its DaemonSets select and tolerate them; nobody else's land there, so a node made
//!   NotReady or relabelled touches no other scenario), and a `daemonset-canary run` process of
//!   its own, confined to the namespace (`--namespace`), with its own Lease, its own metrics and
//!   its own ServiceAccount token (so the API server's audit log tells its requests apart).
//!   Such scenarios run in parallel.
//!
//! Invariants: every process started here is stopped, and every node and namespace created here
//! is deleted, when the value that owns it is dropped, passed or failed (the namespace and the
//! nodes without waiting). Nothing is skipped: a missing variable or an unreachable cluster fails
//! the scenario with what to do.

use crate::support;
use canary_kube_adapter::CanaryDaemonSet;
use daemonset_canary::demo::scenario::{NAME, manifest};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::config::Kubeconfig;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// The admin kubeconfig of the cluster under test.
pub const ENV_KUBECONFIG: &str = "DAEMONSET_CANARY_E2E_KUBECONFIG";
/// `host:port` of the shared controller's metrics (only while it runs: [`E2e::start`]).
pub const ENV_METRICS: &str = "DAEMONSET_CANARY_E2E_METRICS";
/// The shared controller's log.
pub const ENV_CONTROLLER_LOG: &str = "DAEMONSET_CANARY_E2E_CONTROLLER_LOG";
/// The API server's audit log (every request of the controller's ServiceAccount).
pub const ENV_AUDIT_LOG: &str = "DAEMONSET_CANARY_E2E_AUDIT_LOG";
/// The directory the isolated scenarios write their controllers' logs and kubeconfigs to.
pub const ENV_LOGS: &str = "DAEMONSET_CANARY_E2E_LOGS";
/// `canary-verdicts` (xtask/go/verdicts): kstatus and Argo CD's health check, computed with
/// their own code on the objects of the cluster under test.
pub const ENV_VERDICTS: &str = "DAEMONSET_CANARY_E2E_VERDICTS";
const HOW_TO_RUN: &str = "run the e2e suite with `cargo xtask e2e`";
/// The controller's ServiceAccount and namespace, as deploy/rbac installs them (`cargo xtask
/// e2e` installs them before the tests).
pub const CONTROLLER_NAMESPACE: &str = "daemonset-canary-system";
const CONTROLLER_ACCOUNT: &str = "daemonset-canary";
/// The label (and taint key) of a scenario's own nodes; its value is the scenario's namespace.
pub const POOL_LABEL: &str = "e2e.daemonset.dev/pool";
/// The annotation KWOK manages nodes by (`cargo xtask cluster up` starts it with this selector).
pub const KWOK_NODE_ANNOTATION: &str = "kwok.x-k8s.io/node";

pub fn required_env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set: {HOW_TO_RUN}"))
}

/// Where a controller serves its metrics and writes its log.
#[derive(Clone, Debug)]
pub struct Endpoint {
    /// `host:port` of `/metrics`, `/healthz`, `/readyz`.
    pub metrics: String,
    /// Its log file.
    pub log: PathBuf,
}

impl Endpoint {
    /// The body of `GET path`, if it answered.
    pub fn get(&self, path: &str) -> Option<(u16, String)> {
        let raw = support::http_get(&self.metrics, path, Duration::from_secs(5))?;
        let (head, body) = raw.split_once("\r\n\r\n")?;
        let code = head.split_whitespace().nth(1)?.parse().ok()?;
        Some((code, body.to_owned()))
    }

    /// `/metrics`.
    pub fn scrape(&self) -> String {
        self.get("/metrics")
            .unwrap_or_else(|| {
                panic!(
                    "no answer from the controller's /metrics at {}",
                    self.metrics
                )
            })
            .1
    }

    /// The last 30 lines of the log, for failure messages.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        format!(
            "--- last lines of {} ---\n{}",
            self.log.display(),
            lines[lines.len().saturating_sub(30)..].join("\n")
        )
    }
}

/// A `daemonset-canary run` process of a scenario's own; stopped (SIGTERM, then SIGKILL) when
/// dropped.
pub struct Controller {
    child: Option<Child>,
    /// Its identity in the Lease (`--identity`).
    pub identity: String,
    /// Its metrics and log.
    pub endpoint: Endpoint,
    /// The API server's id of its token (`JTI=...`): the audit log records it with each of its
    /// requests, in `user.extra["authentication.kubernetes.io/credential-id"]`.
    pub credential: String,
}

impl Controller {
    /// SIGKILL: no lease released, nothing flushed, as a node that dies or an OOM kill.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }

    /// Sends `signal` (`STOP`, `CONT`, ...) to the process.
    pub fn signal(&self, signal: &str) {
        let pid = self.child.as_ref().expect("a running controller").id();
        let sent = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid.to_string())
            .status()
            .unwrap();
        assert!(sent.success(), "kill -{signal} {pid}");
    }

    /// Whether the process still runs.
    pub fn running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|child| matches!(child.try_wait(), Ok(None)))
    }

    /// `canary_leader` on its metrics: whether it leads.
    pub fn leads(&self) -> bool {
        sum_samples(&self.endpoint.scrape(), "canary_leader", &[]) == 1
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        // SIGTERM first: the controller releases its lease and exits 0; SIGKILL if it hangs.
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// How a verb is typed: the binary itself, or through kubectl's plugin mechanism (`kubectl
/// canary ...`, the binary linked as `kubectl-canary` on PATH).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cli {
    /// `daemonset-canary ARGS --kubeconfig ADMIN`.
    Binary,
    /// `kubectl canary ARGS` with `KUBECONFIG=ADMIN` (kubectl takes no flag before a plugin's
    /// name).
    Plugin,
}

/// A directory holding `kubectl-canary`, a link to the binary under test, made once per run.
fn plugin_dir() -> &'static Path {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("e2e-plugin-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::os::unix::fs::symlink(
            env!("CARGO_BIN_EXE_daemonset-canary"),
            dir.join("kubectl-canary"),
        )
        .unwrap();
        dir
    })
}

/// Asserts that a verb succeeded saying `expected` on stdout; returns stdout.
#[track_caller]
pub fn accepted(output: &Output, expected: &str) -> String {
    let said = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "refused: {}{said}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(said.contains(expected), "{expected:?} not in: {said}");
    said
}

/// Asserts that a verb was refused (exit code 1) saying `expected` on stderr in one line.
#[track_caller]
pub fn refused(output: &Output, expected: &str) {
    let said = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "not refused: {said}");
    assert!(said.contains(expected), "{expected:?} not in: {said}");
    assert_eq!(said.trim_end().lines().count(), 1, "one error line: {said}");
}

/// Builder of an isolated scenario ([`E2e::isolated`]).
pub struct Isolated {
    scenario: String,
    nodes: u32,
    labels: Box<dyn Fn(u32) -> Vec<(String, String)>>,
    controller: bool,
    allowed_analysis: Vec<String>,
}

impl Isolated {
    /// Its controller may query `prefix` (`--allow-analysis-address`), as an administrator
    /// allows their Prometheus.
    pub fn allow_analysis_address(mut self, prefix: String) -> Self {
        self.allowed_analysis.push(prefix);
        self
    }

    /// Its own nodes: `<namespace>-1` .. `-N` (default 6).
    pub fn nodes(mut self, nodes: u32) -> Self {
        self.nodes = nodes;
        self
    }

    /// More labels on node `i` (1-based), as `(key, value)`.
    pub fn labels(mut self, labels: impl Fn(u32) -> Vec<(String, String)> + 'static) -> Self {
        self.labels = Box::new(labels);
        self
    }

    /// No controller of its own yet: the scenario starts its replicas itself
    /// ([`E2e::spawn_controller`]).
    pub fn without_controller(mut self) -> Self {
        self.controller = false;
        self
    }

    /// Creates the namespace and the nodes, waits until the nodes are Ready, and starts the
    /// controller.
    pub async fn start(self) -> E2e {
        let mut e2e = E2e::connect(&self.scenario).await;
        e2e.logs = Some(PathBuf::from(required_env(ENV_LOGS)));
        e2e.allowed_analysis = self.allowed_analysis;
        e2e.create_pool(self.nodes, &*self.labels).await;
        if self.controller {
            let controller = e2e.spawn_controller("controller").await;
            e2e.controller = Some(controller.endpoint.clone());
            e2e.own = Some(controller);
        }
        e2e
    }
}

/// What a scenario works with; its namespace, nodes and processes go when it is dropped.
pub struct E2e {
    pub client: kube::Client,
    pub kubeconfig: PathBuf,
    pub kubectl: PathBuf,
    pub namespace: String,
    /// The controller the scenario runs against (the shared one, or its own).
    controller: Option<Endpoint>,
    /// Its own controller, stopped when the scenario ends.
    own: Option<Controller>,
    /// Its own nodes, sorted by index.
    pool: Vec<String>,
    /// Where its controllers log (isolated scenarios).
    logs: Option<PathBuf>,
    /// When it started (its time is printed when it ends, for CI's log).
    started: Instant,
    /// The analysis addresses its own controllers may query.
    allowed_analysis: Vec<String>,
}

impl E2e {
    /// A scenario against the shared controller (`cargo xtask e2e` starts it as deployed):
    /// connects (failing loudly when the cluster does not answer) and creates the namespace
    /// `e2e-<scenario>-<pid>`.
    pub async fn start(scenario: &str) -> Self {
        let metrics = std::env::var(ENV_METRICS).unwrap_or_else(|_| {
            panic!(
                "{ENV_METRICS} is not set: this scenario runs against the shared controller, \
                 which `cargo xtask e2e` starts for the `deployed::` scenarios only"
            )
        });
        let log = PathBuf::from(required_env(ENV_CONTROLLER_LOG));
        let mut e2e = Self::connect(scenario).await;
        e2e.controller = Some(Endpoint { metrics, log });
        e2e
    }

    /// An isolated scenario: its own namespace, nodes and controller ([`Isolated`]).
    pub fn isolated(scenario: &str) -> Isolated {
        Isolated {
            scenario: scenario.to_owned(),
            nodes: 6,
            labels: Box::new(|_| Vec::new()),
            controller: true,
            allowed_analysis: Vec::new(),
        }
    }

    async fn connect(scenario: &str) -> Self {
        let kubeconfig = PathBuf::from(required_env(ENV_KUBECONFIG));
        let kubectl = PathBuf::from(required_env("KUBECTL"));
        let client = support::client(&kubeconfig).await;
        let version = tokio::time::timeout(Duration::from_secs(20), client.apiserver_version())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "the cluster of {} does not answer within 20 s",
                    kubeconfig.display()
                )
            })
            .unwrap_or_else(|e| {
                panic!(
                    "the cluster of {} is not reachable: {e}",
                    kubeconfig.display()
                )
            });
        assert_eq!(version.major, "1", "{version:?}");
        let namespace = format!("e2e-{scenario}-{}", std::process::id());
        let object: Namespace = serde_json::from_value(serde_json::json!({
            "metadata": {"name": namespace}
        }))
        .unwrap();
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &object)
            .await
            .unwrap();
        let e2e = Self {
            client,
            kubeconfig,
            kubectl,
            namespace,
            controller: None,
            own: None,
            pool: Vec::new(),
            logs: None,
            started: Instant::now(),
            allowed_analysis: Vec::new(),
        };
        // Pods are admitted once the namespace's default ServiceAccount exists.
        e2e.wait_for(
            "the default ServiceAccount",
            Duration::from_secs(30),
            || async { e2e.kubectl_status(&["get", "serviceaccount", "default"]).0 },
        )
        .await;
        e2e
    }

    /// The controller the scenario runs against.
    pub fn controller(&self) -> &Endpoint {
        self.controller
            .as_ref()
            .expect("this scenario started no controller of its own")
    }

    /// Creates `count` KWOK nodes for this scenario alone: named `<namespace>-<i>`, labelled
    /// [`POOL_LABEL`]`=<namespace>` (plus `labels(i)`), tainted `<POOL_LABEL>=<namespace>:
    /// NoSchedule`; each with a pod CIDR and an address of its own, as `cargo xtask cluster up`
    /// makes its nodes. Waits until KWOK has made them Ready and the node lifecycle controller
    /// has lifted its not-ready taint.
    async fn create_pool(&mut self, count: u32, labels: &dyn Fn(u32) -> Vec<(String, String)>) {
        /// Distinct pod CIDRs and addresses over every pool of this process.
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let nodes: Api<Node> = Api::all(self.client.clone());
        for index in 1..=count {
            let name = format!("{}-{index}", self.namespace);
            let serial = NEXT.fetch_add(1, Ordering::Relaxed);
            // 10.200.0.0/24 onwards: above the cluster's own nodes' 10.128.0.0/24 + N.
            let cidr = format!("10.{}.{}.0/24", 200 + serial / 256, serial % 256);
            let address = format!("172.31.{}.{}", serial / 256, serial % 256 + 1);
            let mut node_labels = serde_json::json!({
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                POOL_LABEL: self.namespace,
            });
            for (key, value) in labels(index) {
                node_labels[key] = serde_json::json!(value);
            }
            let node: Node = serde_json::from_value(serde_json::json!({
                "metadata": {
                    "name": name,
                    "annotations": {KWOK_NODE_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
                    "labels": node_labels,
                },
                "spec": {
                    "podCIDR": cidr, "podCIDRs": [cidr],
                    "taints": [{"key": POOL_LABEL, "value": self.namespace, "effect": "NoSchedule"}],
                },
                "status": {"addresses": [
                    {"type": "InternalIP", "address": address},
                    {"type": "Hostname", "address": name},
                ]},
            }))
            .unwrap();
            nodes.create(&PostParams::default(), &node).await.unwrap();
            self.pool.push(name);
        }
        let wanted = self.pool.clone();
        self.wait_for(
            "the scenario's nodes Ready, with no taint but the pool's",
            Duration::from_secs(90),
            || async {
                let listed = nodes
                    .list(
                        &ListParams::default().labels(&format!("{POOL_LABEL}={}", self.namespace)),
                    )
                    .await
                    .unwrap()
                    .items;
                listed.len() == wanted.len()
                    && listed.iter().all(|node| {
                        node_ready(node)
                            && node
                                .spec
                                .as_ref()
                                .and_then(|s| s.taints.as_ref())
                                .is_none_or(|taints| taints.iter().all(|t| t.key == POOL_LABEL))
                    })
            },
        )
        .await;
    }

    /// A token of the controller's ServiceAccount (a new one: its own credential id), a
    /// kubeconfig with it, and the API server's id of the token.
    fn controller_credentials(&self, name: &str) -> (PathBuf, String) {
        let token = self.kubectl_all(&[
            "create",
            "token",
            CONTROLLER_ACCOUNT,
            "-n",
            CONTROLLER_NAMESPACE,
            "--duration=2h",
        ]);
        let mut file = Kubeconfig::read_from(&self.kubeconfig).unwrap();
        for named in &mut file.auth_infos {
            if let Some(auth) = named.auth_info.as_mut() {
                *auth = kube::config::AuthInfo {
                    token: Some(token.trim().to_owned().into()),
                    ..Default::default()
                };
            }
        }
        let logs = self.logs.as_ref().expect("an isolated scenario");
        let path = logs.join(format!("{}-{name}.kubeconfig", self.namespace));
        std::fs::write(&path, serde_json::to_string(&file).unwrap()).unwrap();
        // Who the API server says this token is, with its credential id (Kubernetes 1.29+).
        let whoami = self.kubectl_as(&path, &["auth", "whoami", "-o", "json"]);
        let review: serde_json::Value = serde_json::from_str(&whoami).unwrap();
        let credential =
            review["status"]["userInfo"]["extra"]["authentication.kubernetes.io/credential-id"][0]
                .as_str()
                .unwrap_or_else(|| panic!("no credential id for a ServiceAccount token: {review}"))
                .to_owned();
        (path, credential)
    }

    /// Starts `daemonset-canary run` for this scenario alone: its ServiceAccount as deployed
    /// (a token of its own), confined to the namespace, leader election on a Lease named after
    /// the namespace (in the controller's namespace, as deploy/rbac allows), identity
    /// `<namespace>-<name>`, metrics on a port the kernel picks (read back from its log); waits
    /// until `/readyz` answers 200.
    pub async fn spawn_controller(&self, name: &str) -> Controller {
        let (kubeconfig, credential) = self.controller_credentials(name);
        let logs = self.logs.as_ref().expect("an isolated scenario");
        let log = logs.join(format!("{}-{name}.log", self.namespace));
        let out = std::fs::File::create(&log).unwrap();
        let identity = format!("{}-{name}", self.namespace);
        let child = Command::new(env!("CARGO_BIN_EXE_daemonset-canary"))
            .arg("run")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["--namespace", &self.namespace])
            .args([
                "--leader-election",
                "--lease-namespace",
                CONTROLLER_NAMESPACE,
            ])
            .args(["--lease-name", &self.namespace, "--identity", &identity])
            .args(["--metrics-addr", "127.0.0.1:0", "--log-format", "json"])
            .args(
                self.allowed_analysis
                    .iter()
                    .map(|prefix| format!("--allow-analysis-address={prefix}")),
            )
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap();
        let mut controller = Controller {
            child: Some(child),
            identity,
            endpoint: Endpoint {
                metrics: String::new(),
                log: log.clone(),
            },
            credential,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if controller.endpoint.metrics.is_empty() {
                controller.endpoint.metrics = metrics_address(&log).unwrap_or_default();
            }
            if !controller.endpoint.metrics.is_empty()
                && controller
                    .endpoint
                    .get("/readyz")
                    .is_some_and(|(code, _)| code == 200)
            {
                return controller;
            }
            assert!(
                controller.running(),
                "{} exited before it was ready\n{}",
                controller.identity,
                controller.endpoint.log_tail()
            );
            assert!(
                Instant::now() < deadline,
                "{} not ready after 60 s\n{}",
                controller.identity,
                controller.endpoint.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// `kubectl -n <namespace> <args>`: (success, stdout, stderr).
    pub fn kubectl_status(&self, args: &[&str]) -> (bool, String, String) {
        let output = Command::new(&self.kubectl)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(["-n", &self.namespace, "--request-timeout=30s"])
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", self.kubectl.display()));
        (
            output.status.success(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    }

    /// What kstatus (cli-utils) and Argo CD's health check (`deploy/integrations/argocd/
    /// health.lua`, run by gopher-lua) say of the CanaryDaemonSet `name` as the API server
    /// serves it now: `(kstatus status, Argo CD health, Argo CD message)`.
    #[track_caller]
    pub fn verdicts(&self, name: &str) -> (String, String, String) {
        let binary = std::env::var_os(ENV_VERDICTS)
            .unwrap_or_else(|| panic!("{ENV_VERDICTS} is not set: {HOW_TO_RUN}"));
        let object = self.kubectl(&["get", "canarydaemonset", name, "-o", "json"]);
        let file = std::env::temp_dir().join(format!(
            "verdicts-{}-{name}-{}.json",
            self.namespace,
            std::process::id()
        ));
        std::fs::write(&file, &object).unwrap();
        let health = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../deploy/integrations/argocd/health.lua");
        let run = |args: &[&std::ffi::OsStr]| -> serde_json::Value {
            let output = Command::new(&binary).args(args).output().unwrap();
            assert!(
                output.status.success(),
                "canary-verdicts failed: {}",
                String::from_utf8_lossy(&output.stderr)
            );
            serde_json::from_slice(&output.stdout).unwrap()
        };
        let kstatus = run(&["kstatus".as_ref(), file.as_os_str()]);
        let argocd = run(&["argocd".as_ref(), health.as_os_str(), file.as_os_str()]);
        let _ = std::fs::remove_file(&file);
        let text =
            |v: &serde_json::Value, key: &str| v[key].as_str().unwrap_or_default().to_owned();
        (
            text(&kstatus, "status"),
            text(&argocd, "status"),
            text(&argocd, "message"),
        )
    }

    /// `kubectl -n <namespace> <args>`, which must succeed; its stdout.
    #[track_caller]
    pub fn kubectl(&self, args: &[&str]) -> String {
        let (ok, stdout, stderr) = self.kubectl_status(args);
        assert!(ok, "kubectl {args:?} failed:\n{stdout}\n{stderr}");
        stdout
    }

    /// `kubectl <args>` without a namespace of its own (`args` may name one).
    #[track_caller]
    fn kubectl_all(&self, args: &[&str]) -> String {
        self.kubectl_as(&self.kubeconfig, args)
    }

    /// `kubectl --kubeconfig <kubeconfig> <args>`, which must succeed: its stdout.
    #[track_caller]
    fn kubectl_as(&self, kubeconfig: &Path, args: &[&str]) -> String {
        let output = Command::new(&self.kubectl)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(args)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "kubectl {args:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// The CLI as a user types it, `via` the binary or kubectl's plugin mechanism, with the
    /// cluster's admin kubeconfig.
    pub fn cli(&self, via: Cli, args: &[&str]) -> Output {
        match via {
            Cli::Binary => Command::new(env!("CARGO_BIN_EXE_daemonset-canary"))
                .args(args)
                .arg("--kubeconfig")
                .arg(&self.kubeconfig)
                .stdin(Stdio::null())
                .output()
                .unwrap(),
            Cli::Plugin => {
                let path = std::env::join_paths(std::iter::once(plugin_dir().to_owned()).chain(
                    std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
                ))
                .unwrap();
                Command::new(&self.kubectl)
                    .arg("canary")
                    .args(args)
                    .env("PATH", path)
                    .env("KUBECONFIG", &self.kubeconfig)
                    .stdin(Stdio::null())
                    .output()
                    .unwrap()
            }
        }
    }

    /// A verb on the scenario's CanaryDaemonSet: `<words> NAME -n <namespace>`.
    pub fn verb(&self, via: Cli, words: &[&str]) -> Output {
        let mut args = words.to_vec();
        args.extend([NAME, "-n", &self.namespace]);
        self.cli(via, &args)
    }

    /// The same as a long-running process (`status --watch`) whose stdout is collected into
    /// the returned buffer until it ends; the process is killed when the returned guard drops.
    pub fn verb_in_background(
        &self,
        via: Cli,
        words: &[&str],
    ) -> (
        support::KillOnDrop,
        std::sync::Arc<std::sync::Mutex<String>>,
    ) {
        let mut args = words.to_vec();
        args.extend([NAME, "-n", &self.namespace]);
        let mut command = match via {
            Cli::Binary => {
                let mut command = Command::new(env!("CARGO_BIN_EXE_daemonset-canary"));
                command
                    .args(&args)
                    .arg("--kubeconfig")
                    .arg(&self.kubeconfig);
                command
            }
            Cli::Plugin => {
                let path = std::env::join_paths(std::iter::once(plugin_dir().to_owned()).chain(
                    std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
                ))
                .unwrap();
                let mut command = Command::new(&self.kubectl);
                command
                    .arg("canary")
                    .args(&args)
                    .env("PATH", path)
                    .env("KUBECONFIG", &self.kubeconfig);
                command
            }
        };
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let collected = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let mut stdout = child.stdout.take().unwrap();
        let sink = collected.clone();
        std::thread::spawn(move || {
            use std::io::Read;
            let mut chunk = [0u8; 4096];
            while let Ok(read @ 1..) = stdout.read(&mut chunk) {
                sink.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&chunk[..read]));
            }
        });
        (support::KillOnDrop(child), collected)
    }

    pub fn canaries(&self) -> Api<CanaryDaemonSet> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// The scenario's nodes: its own pool, else every node of the cluster; sorted.
    pub async fn node_names(&self) -> Vec<String> {
        if self.pool.is_empty() {
            return canary_testkit::node_names(&self.client).await;
        }
        let mut names = self.pool.clone();
        names.sort();
        names
    }

    pub async fn node_count(&self) -> u32 {
        u32::try_from(self.node_names().await.len()).unwrap()
    }

    /// The scenario's node agent at `version` with the KWOK behaviour `behavior`, in this
    /// scenario's namespace (the MaxUnavailable driver, `Fixed`); on an isolated scenario's own
    /// nodes only (a node selector and a toleration of its pool's taint in place of the demo's
    /// tolerate-everything).
    pub fn agent(&self, version: &str, behavior: &str) -> CanaryDaemonSet {
        serde_json::from_value(self.agent_json(version, behavior)).unwrap()
    }

    /// [`Self::agent`] as JSON, to change before it is sent.
    pub fn agent_json(&self, version: &str, behavior: &str) -> serde_json::Value {
        let mut object = manifest(
            canary_state_machine::Compatibility::Fixed,
            version,
            behavior,
        );
        object["metadata"]["namespace"] = serde_json::json!(self.namespace);
        if !self.pool.is_empty() {
            let pod = &mut object["spec"]["template"]["spec"]["template"]["spec"];
            pod["nodeSelector"] = serde_json::json!({POOL_LABEL: self.namespace});
            pod["tolerations"] = serde_json::json!([
                {"key": POOL_LABEL, "operator": "Equal", "value": self.namespace, "effect": "NoSchedule"}
            ]);
        }
        object
    }

    /// Creates `cds` and waits until its rollout is `successful`.
    pub async fn install(&self, cds: &CanaryDaemonSet, timeout: Duration) {
        let created = self
            .canaries()
            .create(&PostParams::default(), cds)
            .await
            .unwrap();
        self.wait_phase(created.metadata.generation, "successful", timeout)
            .await;
    }

    /// Moves the target to `version` with `behavior`; returns the new spec generation.
    pub async fn upgrade(&self, version: &str, behavior: &str) -> Option<i64> {
        self.set_spec(&self.agent_json(version, behavior)).await
    }

    /// Replaces the scenario CanaryDaemonSet's spec with `object`'s (JSON of a whole
    /// CanaryDaemonSet); returns the new spec generation.
    pub async fn set_spec(&self, object: &serde_json::Value) -> Option<i64> {
        let patch = serde_json::json!({"spec": object["spec"]});
        self.patch_canary(&Patch::Merge(&patch)).await
    }

    /// Patches the scenario's CanaryDaemonSet; returns its new spec generation.
    pub async fn patch_canary<P: serde::Serialize + std::fmt::Debug>(
        &self,
        patch: &Patch<P>,
    ) -> Option<i64> {
        self.canaries()
            .patch(NAME, &PatchParams::default(), patch)
            .await
            .unwrap()
            .metadata
            .generation
    }

    pub async fn status(&self) -> canary_kube_adapter::crd::CanaryDaemonSetStatus {
        self.canaries()
            .get(NAME)
            .await
            .unwrap()
            .status
            .unwrap_or_default()
    }

    /// The DaemonSet's update strategy (`RollingUpdate`, `OnDelete`).
    pub async fn update_strategy(&self) -> Option<String> {
        self.daemon_set().await.spec?.update_strategy?.type_
    }

    pub async fn daemon_set(&self) -> DaemonSet {
        Api::<DaemonSet>::namespaced(self.client.clone(), &self.namespace)
            .get(NAME)
            .await
            .unwrap()
    }

    /// A DaemonSet named `name` that someone else owns and writes (a Helm release, a GitOps
    /// tool): the node agent's v1 template with `updateStrategy: OnDelete`, with `metadata`'s
    /// labels and annotations. Returns it as created and its first container's name.
    pub async fn owned_daemon_set(
        &self,
        name: &str,
        metadata: serde_json::Value,
    ) -> (DaemonSet, String) {
        let owned = self.agent("v1", "healthy");
        let mut spec = serde_json::to_value(owned.spec.template.clone().unwrap().spec).unwrap();
        spec["updateStrategy"] = serde_json::json!({"type": "OnDelete"});
        let mut object = serde_json::json!({
            "metadata": {"name": name, "namespace": self.namespace},
            "spec": spec,
        });
        for field in ["labels", "annotations"] {
            if !metadata[field].is_null() {
                object["metadata"][field] = metadata[field].clone();
            }
        }
        let ds: DaemonSet = serde_json::from_value(object).unwrap();
        let created = Api::<DaemonSet>::namespaced(self.client.clone(), &self.namespace)
            .create(&PostParams::default(), &ds)
            .await
            .unwrap();
        let container = canary_testkit::first_container(&created).name.clone();
        (created, container)
    }

    /// The owner of the DaemonSet `name` writes its template as `manager` (Helm 3 and GitOps
    /// tools send a strategic merge patch): `container`'s image, and the simulator's behaviour
    /// annotation when given.
    pub async fn owner_writes(
        &self,
        name: &str,
        manager: &str,
        container: &str,
        image: &str,
        behavior: Option<&str>,
    ) {
        let mut patch = serde_json::json!({"spec": {"template": {
            "spec": {"containers": [{"name": container, "image": image}]}
        }}});
        if let Some(behavior) = behavior {
            patch["spec"]["template"]["metadata"] =
                serde_json::json!({"annotations": {"sim.canary.daemonset.dev/behavior": behavior}});
        }
        Api::<DaemonSet>::namespaced(self.client.clone(), &self.namespace)
            .patch(
                name,
                &PatchParams {
                    field_manager: Some(manager.into()),
                    ..PatchParams::default()
                },
                &Patch::Strategic(&patch),
            )
            .await
            .unwrap_or_else(|e| panic!("the owner's write failed: {e}"));
    }

    /// How many of the node agent's pods, not being deleted, run `image`.
    pub async fn live_on(&self, image: &str) -> usize {
        self.pods()
            .await
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter(|p| image_and_ready(p).0 == image)
            .count()
    }

    /// The node agent's pods, terminating ones included.
    pub async fn pods(&self) -> Vec<Pod> {
        Api::<Pod>::namespaced(self.client.clone(), &self.namespace)
            .list(&ListParams::default().labels(&format!("app.kubernetes.io/name={NAME}")))
            .await
            .unwrap()
            .items
    }

    /// The version (image tag) of each live pod of the node agent, by node.
    pub async fn versions_by_node(&self) -> std::collections::BTreeMap<String, String> {
        self.pods()
            .await
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter_map(|p| {
                let node = p.spec.as_ref()?.node_name.clone()?;
                Some((node, version_of(p)))
            })
            .collect()
    }

    /// How many live pods run each version.
    pub async fn version_counts(&self) -> std::collections::BTreeMap<String, usize> {
        let mut counts = std::collections::BTreeMap::new();
        for version in self.versions_by_node().await.into_values() {
            *counts.entry(version).or_default() += 1;
        }
        counts
    }

    /// The controller's `/metrics`.
    pub fn scrape(&self) -> String {
        self.controller().scrape()
    }

    /// Polls `done` every 500 ms; fails with the controller's log when `timeout` passes.
    pub async fn wait_for<F, Fut>(&self, what: &str, timeout: Duration, mut done: F)
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let deadline = Instant::now() + timeout;
        while !done().await {
            assert!(
                Instant::now() < deadline,
                "{what}: not reached after {timeout:?}\n{}",
                self.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Waits until the status describes spec generation `generation` in `phase`; returns every
    /// phase seen on the way (in order, without repeats). Fails when it ends in another final
    /// phase.
    pub async fn wait_phase(
        &self,
        generation: Option<i64>,
        phase: &str,
        timeout: Duration,
    ) -> Vec<String> {
        self.wait_phase_through(generation, phase, &[], timeout)
            .await
    }

    /// [`Self::wait_phase`], where the final phases in `passing` are not the end (`failed` on
    /// the way to `rolledBack`).
    pub async fn wait_phase_through(
        &self,
        generation: Option<i64>,
        phase: &str,
        passing: &[&str],
        timeout: Duration,
    ) -> Vec<String> {
        let deadline = Instant::now() + timeout;
        let mut seen: Vec<String> = Vec::new();
        loop {
            let cds = self.canaries().get(NAME).await.unwrap();
            let status = cds.status.clone().unwrap_or_default();
            let current = status.observed_generation >= generation;
            if current
                && let Some(now) = status.phase_name().map(str::to_owned)
                && seen.last() != Some(&now)
            {
                seen.push(now);
            }
            if current && status.phase_name() == Some(phase) {
                return seen;
            }
            let other_end = ["successful", "failed", "rolledBack"].iter().any(|end| {
                *end != phase
                    && !passing.contains(end)
                    && current
                    && status.phase_name() == Some(*end)
            });
            assert!(
                !other_end,
                "ended {:?} instead of {phase}: {status:?}\n{}",
                status.phase,
                self.log_tail()
            );
            assert!(
                Instant::now() < deadline,
                "not {phase} after {timeout:?} (phases seen {seen:?}): {status:?}\n{}",
                self.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    pub fn log_tail(&self) -> String {
        self.controller
            .as_ref()
            .map(Endpoint::log_tail)
            .unwrap_or_default()
    }

    /// `type/reason` of the controller's events (they regard the CanaryDaemonSet), oldest first.
    pub fn event_reasons(&self) -> Vec<String> {
        self.kubectl(&[
            "get",
            "events",
            "--field-selector",
            &format!("involvedObject.kind=CanaryDaemonSet,involvedObject.name={NAME}"),
            "--sort-by=.lastTimestamp",
            "-o",
            "jsonpath={range .items[*]}{.type}/{.reason}{\"\\n\"}{end}",
        ])
        .lines()
        .map(str::to_owned)
        .collect()
    }

    /// The messages of the CanaryDaemonSet's events with `reason`.
    pub fn event_messages(&self, reason: &str) -> Vec<String> {
        self.kubectl(&[
            "get",
            "events",
            "--field-selector",
            &format!(
                "involvedObject.kind=CanaryDaemonSet,involvedObject.name={NAME},reason={reason}"
            ),
            "-o",
            "jsonpath={range .items[*]}{.message}{\"\\n\"}{end}",
        ])
        .lines()
        .map(str::to_owned)
        .collect()
    }

    /// Every event of the namespace, one line each (reason, series count, note), for failure
    /// messages.
    pub fn events_dump(&self) -> String {
        self.kubectl(&[
            "get",
            "events.events.k8s.io",
            "-o",
            "jsonpath={range .items[*]}{.reason} x{.series.count} {.note}{\"\\n\"}{end}",
        ])
    }

    /// How many events of the CanaryDaemonSet have `reason` (repeats of one event counted).
    pub fn events_with_reason(&self, reason: &str) -> usize {
        self.event_reasons()
            .iter()
            .filter(|r| r.split_once('/').is_some_and(|(_, r)| r == reason))
            .count()
    }
}

impl Drop for E2e {
    fn drop(&mut self) {
        eprintln!(
            "scenario {} ended after {:.0} s{}",
            self.namespace,
            self.started.elapsed().as_secs_f64(),
            if std::thread::panicking() {
                " (failed)"
            } else {
                ""
            }
        );
        // The controller first, so that it does not act on the deletions below.
        drop(self.own.take());
        // Do not wait: the namespace's pods go in the background; names carry the pid, so a
        // later run never collides with what is still terminating.
        let _ = Command::new(&self.kubectl)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(["delete", "namespace", &self.namespace, "--wait=false"])
            .output();
        if !self.pool.is_empty() {
            let _ = Command::new(&self.kubectl)
                .arg("--kubeconfig")
                .arg(&self.kubeconfig)
                .args(["delete", "nodes", "--wait=false", "-l"])
                .arg(format!("{POOL_LABEL}={}", self.namespace))
                .output();
        }
    }
}

/// The metrics address `run` logged (`"metrics":"127.0.0.1:PORT"` in its JSON start line).
fn metrics_address(log: &Path) -> Option<String> {
    let text = std::fs::read_to_string(log).ok()?;
    text.lines().find_map(|line| {
        let value: serde_json::Value = serde_json::from_str(line).ok()?;
        (value["message"] == "controller starting")
            .then(|| value["metrics"].as_str().map(str::to_owned))
            .flatten()
    })
}

/// CanaryDaemonSet `name` of the Pods driver in the scenario's namespace, driving the
/// DaemonSet `workload` (name, container) through `workloadRef` in `steps`.
pub fn workload_claimant(
    e2e: &E2e,
    name: &str,
    (workload, container): (&str, &str),
    steps: serde_json::Value,
) -> CanaryDaemonSet {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "canary.daemonset.dev/v1alpha1",
        "kind": "CanaryDaemonSet",
        "metadata": {"name": name, "namespace": e2e.namespace},
        "spec": {
            "workloadRef": {"name": workload},
            "target": {"fromContainer": container},
            "strategy": {"driver": "Pods", "steps": steps}
        }
    }))
    .unwrap()
}

/// The first and the last of `seen` (phases, strategies, ... in the order seen).
pub fn first_and_last(seen: &[String]) -> (Option<&str>, Option<&str>) {
    (
        seen.first().map(String::as_str),
        seen.last().map(String::as_str),
    )
}

/// Whether the node's Ready condition is True.
pub fn node_ready(node: &Node) -> bool {
    canary_testkit::node_condition(node, "Ready").is_some_and(|c| c.status == "True")
}

/// The sum of the samples of `family` whose labels contain every one of `labels`.
pub fn sum_samples(exposition: &str, family: &str, labels: &[&str]) -> u64 {
    exposition
        .lines()
        // `family{labels} value`, or `family value` for a family without labels.
        .filter(|line| {
            line.strip_prefix(family)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter(|line| labels.iter().all(|label| line.contains(label)))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|value| value as u64)
        .sum()
}

/// The image of a pod's first container and whether the pod is Ready.
pub fn image_and_ready(pod: &Pod) -> (String, bool) {
    let image = pod
        .spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .and_then(|c| c.image.clone())
        .unwrap_or_default();
    let ready = crate::support::rollout::ready_since(pod).is_some();
    (image, ready)
}

/// The tag of a pod's first container's image: the node agent's version.
pub fn version_of(pod: &Pod) -> String {
    let (image, _) = image_and_ready(pod);
    image.rsplit(':').next().unwrap_or_default().to_owned()
}

pub fn max_unavailable(ds: &DaemonSet) -> String {
    let value = ds
        .spec
        .as_ref()
        .and_then(|s| s.update_strategy.as_ref())
        .and_then(|u| u.rolling_update.as_ref())
        .and_then(|r| r.max_unavailable.clone());
    match value {
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(n)) => n.to_string(),
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(s)) => s,
        None => "unset".to_owned(),
    }
}

/// `object` (JSON of a CanaryDaemonSet) with `strategy` merged into `spec.strategy` (a JSON
/// merge patch: `null` removes a field).
pub fn with_strategy(
    mut object: serde_json::Value,
    strategy: serde_json::Value,
) -> serde_json::Value {
    json_patch::merge(
        &mut object,
        &serde_json::json!({"spec": {"strategy": strategy}}),
    );
    object
}

/// The sorted UIDs of live pods, to tell whether any was replaced.
pub fn live_uids(pods: &[Pod]) -> Vec<String> {
    let mut uids: Vec<String> = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| p.metadata.uid.clone())
        .collect();
    uids.sort();
    uids
}
