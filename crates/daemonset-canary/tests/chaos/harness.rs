//! What the chaos scenarios work with: the cluster `cargo xtask chaos` started (and supervises),
//! the controller processes they start and kill, a sampler of the controller's probes, the
//! control-plane components they kill and hold down, etcd's compaction, and the results file.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use canary_kube_adapter::CanaryDaemonSet;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::PostParams;
use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::support;

const HOW_TO_RUN: &str = "run the chaos scenarios with `cargo xtask chaos`";
/// The controller's ServiceAccount, as deploy/ installs it.
pub const SERVICE_ACCOUNT: &str = "daemonset-canary";
/// Its namespace, where the Leases are.
pub const CONTROLLER_NAMESPACE: &str = "daemonset-canary-system";
/// The user the audit log records.
pub const CONTROLLER_USER: &str = "system:serviceaccount:daemonset-canary-system:daemonset-canary";
/// The controller's Lease duration (the binary's default).
pub const LEASE_DURATION: Duration = Duration::from_secs(15);

fn required(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set: {HOW_TO_RUN}"))
}

/// Where everything is, from the environment `cargo xtask chaos` sets.
#[derive(Clone, Debug)]
pub struct Env {
    pub kubeconfig: PathBuf,
    pub kubectl: PathBuf,
    pub binary: PathBuf,
    pub run_dir: PathBuf,
    pub log_dir: PathBuf,
    pub audit_log: PathBuf,
    pub bin_dir: PathBuf,
    pub results: PathBuf,
    /// `https://127.0.0.1:<port>`.
    pub apiserver: String,
    /// `http://127.0.0.1:<port>`.
    pub etcd: String,
}

impl Env {
    pub fn from_environment() -> Self {
        Self {
            kubeconfig: required("CHAOS_KUBECONFIG").into(),
            kubectl: required("KUBECTL").into(),
            binary: required("CHAOS_BINARY").into(),
            run_dir: required("CHAOS_RUN_DIR").into(),
            log_dir: required("CHAOS_LOG_DIR").into(),
            audit_log: required("CHAOS_AUDIT_LOG").into(),
            bin_dir: required("CHAOS_BIN_DIR").into(),
            results: required("CHAOS_RESULTS").into(),
            apiserver: required("CHAOS_APISERVER"),
            etcd: required("CHAOS_ETCD"),
        }
    }

    /// The API server's loopback address.
    pub fn apiserver_addr(&self) -> std::net::SocketAddr {
        self.apiserver
            .trim_start_matches("https://")
            .parse()
            .unwrap_or_else(|e| panic!("{}: {e}", self.apiserver))
    }

    /// `kubectl --kubeconfig <admin> <args>`: stdout; panics with stderr on failure.
    pub fn kubectl(&self, args: &[&str]) -> String {
        let output = Command::new(&self.kubectl)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(["--request-timeout=30s"])
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", self.kubectl.display()));
        assert!(
            output.status.success(),
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// An admin client.
    pub async fn client(&self) -> kube::Client {
        let file = Kubeconfig::read_from(&self.kubeconfig).unwrap();
        let config = kube::Config::from_custom_kubeconfig(file, &KubeConfigOptions::default())
            .await
            .unwrap();
        kube::Client::try_from(config).unwrap()
    }

    /// Appends a result line.
    pub fn record(&self, row: &serde_json::Value) {
        use std::io::Write;
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.results)
            .unwrap();
        writeln!(file, "{row}").unwrap();
    }
}

/// Creates the namespace `name` and waits for its default ServiceAccount.
pub async fn namespace(env: &Env, client: &kube::Client, name: &str) {
    let object: Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &object)
        .await
        .unwrap();
    let what = format!("no default ServiceAccount in {name}");
    support::rollout::eventually(Duration::from_secs(60), &what, async || {
        let found = Command::new(&env.kubectl)
            .arg("--kubeconfig")
            .arg(&env.kubeconfig)
            .args(["-n", name, "get", "serviceaccount", "default"])
            .output()
            .is_ok_and(|o| o.status.success());
        found.then_some(()).ok_or("not yet")
    })
    .await;
}

/// A `daemonset-canary run` process of a scenario, with a token of its own.
pub struct Controller {
    pub child: Child,
    pub metrics_port: u16,
    /// The JTI of its token: its requests in the audit log.
    pub credential: String,
    pub log: PathBuf,
}

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts a controller for `namespace` that reaches the API server at `server` (the proxy),
/// with leader election on the Lease `lease`, logging to `<log dir>/chaos-<lease>-<n>.log`.
pub fn start_controller(
    env: &Env,
    server: &str,
    namespace: &str,
    lease: &str,
    n: u32,
) -> Controller {
    let token = env
        .kubectl(&[
            "create",
            "token",
            SERVICE_ACCOUNT,
            "-n",
            CONTROLLER_NAMESPACE,
            "--duration=2h",
        ])
        .trim()
        .to_owned();
    let credential = jti(&token);
    let admin = std::fs::read_to_string(&env.kubeconfig).unwrap();
    let config: serde_json::Value = serde_saphyr::from_str(&admin).unwrap();
    let ca = config["clusters"][0]["cluster"]["certificate-authority"]
        .as_str()
        .unwrap()
        .to_owned();
    let kubeconfig = env.run_dir.join(format!("chaos-{lease}-{n}.kubeconfig"));
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: chaos\n  cluster:\n    server: {server}\n    \
             certificate-authority: {ca}\nusers:\n- name: controller\n  user:\n    token: {token}\n\
             contexts:\n- name: chaos\n  context:\n    cluster: chaos\n    user: controller\n    \
             namespace: {namespace}\ncurrent-context: chaos\n"
        ),
    )
    .unwrap();
    let pod = format!("{lease}-{n}");
    let lease = (CONTROLLER_NAMESPACE, lease);
    spawn_controller(env, &kubeconfig, namespace, lease, &pod, credential)
}

/// `run` on `kubeconfig` for `namespace`, with leader election on Lease `lease` (namespace,
/// name) as replica `pod`: metrics on a free port, JSON logs to `chaos-<pod>.log` in the log
/// directory.
fn spawn_controller(
    env: &Env,
    kubeconfig: &Path,
    namespace: &str,
    (lease_namespace, lease): (&str, &str),
    pod: &str,
    credential: String,
) -> Controller {
    let metrics_port = support::free_port();
    let log = env.log_dir.join(format!("chaos-{pod}.log"));
    let out = std::fs::File::create(&log).unwrap();
    let child = Command::new(&env.binary)
        .arg("run")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg(format!("--metrics-addr=127.0.0.1:{metrics_port}"))
        .args(["--namespace", namespace])
        .args(["--leader-election", "--lease-namespace", lease_namespace])
        .args(["--lease-name", lease])
        .env("POD_NAME", pod)
        .env("CANARY_LOG_FORMAT", "json")
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap();
    Controller {
        child,
        metrics_port,
        credential,
        log,
    }
}

/// Starts a controller against `sim serve` (its kubeconfig), with the same flags as
/// [`start_controller`] (leader election, the Lease in `default`).
pub fn start_sim_controller(
    env: &Env,
    kubeconfig: &Path,
    namespace: &str,
    lease: &str,
) -> Controller {
    let pod = format!("{lease}-sim");
    spawn_controller(
        env,
        kubeconfig,
        namespace,
        ("default", lease),
        &pod,
        String::new(),
    )
}

/// The `jti` claim of a JWT.
fn jti(token: &str) -> String {
    let payload = token.split('.').nth(1).unwrap_or_default();
    let bytes = base64url(payload);
    let claims: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
    claims["jti"].as_str().unwrap_or_default().to_owned()
}

fn base64url(text: &str) -> Vec<u8> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut bits = 0_u32;
    let mut count = 0;
    let mut out = Vec::new();
    for byte in text.bytes() {
        let Some(value) = ALPHABET.iter().position(|a| *a == byte) else {
            continue;
        };
        bits = (bits << 6) | u32::try_from(value).unwrap_or(0);
        count += 6;
        if count >= 8 {
            count -= 8;
            out.push(u8::try_from((bits >> count) & 0xff).unwrap_or(0));
        }
    }
    out
}

/// The status code of `GET path` on a controller's probes (0: no answer) and its body.
pub fn probe(port: u16, path: &str) -> (u16, String) {
    support::probe(port, path, Duration::from_secs(3))
}

/// One sample of a controller's probes.
#[derive(Debug, Clone)]
pub struct Sample {
    pub at: Instant,
    pub readyz: u16,
    pub readyz_body: String,
    pub healthz: u16,
    pub healthz_body: String,
}

/// Samples the probes of whatever controller the port cell names, every 500 ms.
pub struct Sampler {
    pub samples: Arc<Mutex<Vec<Sample>>>,
    pub port: Arc<Mutex<u16>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Sampler {
    pub fn start(port: u16) -> Self {
        let samples = Arc::new(Mutex::new(Vec::new()));
        let port = Arc::new(Mutex::new(port));
        let (into, from) = (samples.clone(), port.clone());
        let task = tokio::spawn(async move {
            loop {
                let port = *from.lock().unwrap();
                let sample = tokio::task::spawn_blocking(move || {
                    let (readyz, readyz_body) = probe(port, "/readyz");
                    let (healthz, healthz_body) = probe(port, "/healthz");
                    Sample {
                        at: Instant::now(),
                        readyz,
                        readyz_body,
                        healthz,
                        healthz_body,
                    }
                })
                .await;
                if let Ok(sample) = sample {
                    into.lock().unwrap().push(sample);
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        });
        Self {
            samples,
            port,
            task,
        }
    }

    /// Points the sampler at another controller process.
    pub fn follow(&self, port: u16) {
        *self.port.lock().unwrap() = port;
    }

    pub fn between(&self, from: Instant, to: Instant) -> Vec<Sample> {
        self.samples
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.at >= from && s.at <= to)
            .cloned()
            .collect()
    }
}

/// A control-plane component of `cargo xtask cluster`.
pub struct Component<'a> {
    env: &'a Env,
    name: &'static str,
}

pub fn component<'a>(env: &'a Env, name: &'static str) -> Component<'a> {
    Component { env, name }
}

impl Component<'_> {
    fn pid(&self) -> Option<u32> {
        let pid: u32 = std::fs::read_to_string(self.env.run_dir.join(format!("{}.pid", self.name)))
            .ok()?
            .trim()
            .parse()
            .ok()?;
        // Only ever our binary: a stale pid file must not hit another process.
        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok()?;
        let ours = std::fs::canonicalize(self.env.bin_dir.join(self.name)).ok()?;
        (exe == ours).then_some(pid)
    }

    /// Holds the component down (the supervisor does not start it) and SIGKILLs it.
    pub fn kill_and_hold(&self) {
        std::fs::write(self.hold_file(), "chaos").unwrap();
        let pid = self
            .pid()
            .unwrap_or_else(|| panic!("{} is not running", self.name));
        let killed = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status()
            .unwrap();
        assert!(killed.success(), "kill -KILL {pid} ({})", self.name);
    }

    /// Lets the supervisor start it again.
    pub fn release(&self) {
        let _ = std::fs::remove_file(self.hold_file());
    }

    fn hold_file(&self) -> PathBuf {
        self.env.run_dir.join(format!("{}.hold", self.name))
    }
}

/// etcd's current revision (its JSON gateway).
pub fn etcd_revision(env: &Env) -> u64 {
    let answer = etcd_post(
        env,
        "/v3/kv/range",
        r#"{"key":"AA==","limit":1,"keys_only":true}"#,
    );
    answer["header"]["revision"]
        .as_str()
        .and_then(|r| r.parse().ok())
        .unwrap_or_else(|| panic!("no revision in {answer}"))
}

/// Compacts etcd's history up to `revision`: older revisions are gone.
pub fn etcd_compact(env: &Env, revision: u64) {
    let answer = etcd_post(
        env,
        "/v3/kv/compaction",
        &format!(r#"{{"revision":"{revision}","physical":true}}"#),
    );
    assert!(
        answer.get("header").is_some(),
        "compaction failed: {answer}"
    );
}

/// Whether etcd answers its health check.
pub fn etcd_healthy(env: &Env) -> bool {
    let addr = env.etcd.trim_start_matches("http://");
    support::http_get(addr, "/health", Duration::from_secs(2))
        .is_some_and(|raw| raw.contains("\"health\":\"true\""))
}

fn etcd_post(env: &Env, path: &str, body: &str) -> serde_json::Value {
    use std::io::{Read, Write};
    let addr = env.etcd.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = String::new();
    let _ = stream.read_to_string(&mut raw);
    let body = raw
        .split_once("\r\n\r\n")
        .map(|(_, b)| b)
        .unwrap_or_default();
    // The gateway may answer chunked: the JSON object is the one line that is one.
    body.lines()
        .find_map(|line| serde_json::from_str(line.trim()).ok())
        .unwrap_or(serde_json::Value::Null)
}

/// Whether the API server answers (`/readyz` through the admin client).
pub async fn apiserver_ready(client: &kube::Client) -> bool {
    let request = http::Request::get("/readyz").body(Vec::new()).unwrap();
    tokio::time::timeout(Duration::from_secs(3), client.request_text(request))
        .await
        .is_ok_and(|answer| answer.is_ok_and(|text| text.trim() == "ok"))
}

/// The CanaryDaemonSet's status phase for spec generation `generation` or later.
pub async fn phase(
    api: &Api<CanaryDaemonSet>,
    name: &str,
    generation: Option<i64>,
) -> Option<String> {
    let status = api.get(name).await.ok()?.status?;
    (status.observed_generation >= generation)
        .then(|| status.phase_name().map(str::to_owned))
        .flatten()
}

/// Now, as the audit log writes times.
pub fn now() -> Timestamp {
    Timestamp::now()
}

pub use crate::support::tail;
