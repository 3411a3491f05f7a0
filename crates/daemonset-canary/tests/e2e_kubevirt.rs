//! End-to-end against KubeVirt's real virt-operator: the original is the oracle.
//!
//! `cargo xtask e2e` runs this suite after the main one (tests/e2e.rs), on the same control
//! plane resized to 20 KWOK nodes, with KubeVirt installed by `cargo xtask kubevirt up`:
//! virt-operator v1.9.0 built from its release, running as a local process with its own
//! ServiceAccount, virt-handler on every node. Upgrades move the KubeVirt object's `imageTag`, as
//! a user pins a version; virt-operator then updates virt-handler with its DaemonSet canary. An
//! image tag ending in `-crashloop` makes KWOK crash-loop the pods that run it.
//!
//! What virt-operator did is read from the API server's audit log, which records its DaemonSet
//! writes and ours with their bodies (`cargo xtask cluster up`'s audit policy): each write's
//! JSON patch operations and the object after it (`maxUnavailable`, the install-strategy
//! annotations, `kubevirt.io/generation`, the template).
//!
//! Each scenario is one upgrade of virt-handler by virt-operator (healthy; a crash-looping
//! release), with two witnesses:
//! 1. the observer (`daemonset-canary observe-kubevirt`, a process): the phases it exports, and
//!    their order, are those virt-operator's writes show, each within the bounds they set; `failed`
//!    for the crash-looping release;
//! 2. differential: daemonset-canary (`compatibility: KubeVirt`) does the same upgrade side by
//!    side, on a copy of virt-handler (same template and shape, its own namespace) on the same
//!    nodes: its DaemonSet writes (count, JSON patch operations, `updateStrategy`,
//!    install-strategy annotations, `kubevirt.io/generation`, which writes change the template)
//!    and its outcome equal virt-operator's.
//!
//! Every scenario first settles KubeVirt (a failed canary from an earlier one is left behind by
//! moving to a new healthy version: virt-operator never rolls back), so they run in any order;
//! `--test-threads=1` (set by `cargo xtask e2e`) because they share virt-handler. The healthy one
//! sorts first, so the suite needs no recovery upgrade.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

mod support;

use support::rollout::eventually;
use support::{max_unavailable, tail};

use canary_kube_adapter::CanaryDaemonSet;
use canary_kubevirt::kubevirt_api_resource;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use kube::Api;
use kube::api::{DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

const ENV_KUBECONFIG: &str = "DAEMONSET_CANARY_E2E_KUBECONFIG";
const ENV_AUDIT_LOG: &str = "DAEMONSET_CANARY_E2E_AUDIT_LOG";
const ENV_OPERATOR_LOG: &str = "DAEMONSET_CANARY_E2E_VIRT_OPERATOR_LOG";
const ENV_CONTROLLER_LOG: &str = "DAEMONSET_CANARY_E2E_CONTROLLER_LOG";
const HOW_TO_RUN: &str = "run the e2e suite with `cargo xtask e2e` (it installs KubeVirt)";

/// KubeVirt's namespace and objects (`cargo xtask kubevirt up`).
const KV_NAMESPACE: &str = "kubevirt";
const KV_NAME: &str = "kubevirt";
const HANDLER: &str = "virt-handler";
/// virt-operator's identity and ours, as the audit log names them.
const OPERATOR_USER: &str = "system:serviceaccount:kubevirt:kubevirt-operator";
const CONTROLLER_USER: &str = "system:serviceaccount:daemonset-canary-system:daemonset-canary";
/// The install-strategy annotations and the KubeVirt generation annotation.
const VERSION_KEY: &str = "kubevirt.io/install-strategy-version";
const REGISTRY_KEY: &str = "kubevirt.io/install-strategy-registry";
const ID_KEY: &str = "kubevirt.io/install-strategy-identifier";
const GENERATION_KEY: &str = "kubevirt.io/generation";
const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// The KubeVirt release virt-operator is built from; upgrades go to `v1.9.<n>`.
const MINOR: &str = "v1.9.";
/// The longest a rollout on 20 KWOK nodes may take here.
const ROLLOUT_TIMEOUT: Duration = Duration::from_secs(600);

fn required_env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set: {HOW_TO_RUN}"))
}

/// What a test works with.
struct Kv {
    client: kube::Client,
    kubeconfig: PathBuf,
    audit_log: PathBuf,
    operator_log: PathBuf,
    controller_log: PathBuf,
}

impl Kv {
    async fn connect() -> Self {
        let kubeconfig = PathBuf::from(required_env(ENV_KUBECONFIG));
        let audit_log = PathBuf::from(required_env(ENV_AUDIT_LOG));
        let operator_log = PathBuf::from(required_env(ENV_OPERATOR_LOG));
        let controller_log = PathBuf::from(required_env(ENV_CONTROLLER_LOG));
        let file = Kubeconfig::read_from(&kubeconfig)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", kubeconfig.display()));
        let config = kube::Config::from_custom_kubeconfig(file, &KubeConfigOptions::default())
            .await
            .unwrap();
        let client = kube::Client::try_from(config).unwrap();
        tokio::time::timeout(Duration::from_secs(20), client.apiserver_version())
            .await
            .unwrap_or_else(|_| panic!("the cluster of {} does not answer", kubeconfig.display()))
            .unwrap_or_else(|e| {
                panic!(
                    "the cluster of {} is not reachable: {e}",
                    kubeconfig.display()
                )
            });
        Self {
            client,
            kubeconfig,
            audit_log,
            operator_log,
            controller_log,
        }
    }

    fn kubevirts(&self) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), KV_NAMESPACE, &kubevirt_api_resource())
    }

    async fn kubevirt(&self) -> Value {
        let object = self
            .kubevirts()
            .get(KV_NAME)
            .await
            .unwrap_or_else(|e| panic!("no KubeVirt object ({e}): {HOW_TO_RUN}"));
        serde_json::to_value(object).unwrap()
    }

    async fn handler(&self) -> DaemonSet {
        Api::<DaemonSet>::namespaced(self.client.clone(), KV_NAMESPACE)
            .get(HANDLER)
            .await
            .unwrap()
    }

    async fn node_count(&self) -> usize {
        canary_testkit::node_names(&self.client).await.len()
    }

    /// `FailedUpdate` events virt-operator recorded on virt-handler so far (counts added up).
    async fn failed_updates(&self) -> i32 {
        let events: Api<k8s_openapi::api::core::v1::Event> =
            Api::namespaced(self.client.clone(), KV_NAMESPACE);
        events
            .list(&ListParams::default().fields(&format!(
                "involvedObject.kind=DaemonSet,involvedObject.name={HANDLER},reason=FailedUpdate"
            )))
            .await
            .unwrap()
            .items
            .iter()
            .map(|e| e.count.unwrap_or(1))
            .sum()
    }

    /// Moves KubeVirt to `version` through its `imageTag`, as a user pins a release.
    async fn set_image_tag(&self, version: &str) {
        let patch = json!({"spec": {"imageTag": version}});
        self.kubevirts()
            .patch(KV_NAME, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }

    /// The next unused version `v1.9.<n>` (with `suffix`), above every version KubeVirt has
    /// targeted, so that virt-operator takes its update path.
    async fn next_version(&self, suffix: &str) -> String {
        let kv = self.kubevirt().await;
        let patch_of = |pointer: &str| {
            kv.pointer(pointer)
                .and_then(Value::as_str)
                .and_then(|v| v.strip_prefix(MINOR))
                .and_then(|rest| rest.split('-').next())
                .and_then(|n| n.parse::<u32>().ok())
                .unwrap_or(0)
        };
        let highest = patch_of("/status/targetKubeVirtVersion")
            .max(patch_of("/status/observedKubeVirtVersion"))
            .max(patch_of("/spec/imageTag"));
        format!("{MINOR}{}{suffix}", highest + 1)
    }

    /// KubeVirt's phase, observed version and target version.
    async fn phase_and_versions(&self) -> (Option<String>, Option<String>, Option<String>) {
        let kv = self.kubevirt().await;
        let field = |pointer: &str| {
            kv.pointer(pointer)
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        (
            field("/status/phase"),
            field("/status/observedKubeVirtVersion"),
            field("/status/targetKubeVirtVersion"),
        )
    }

    /// Waits until KubeVirt is Deployed at `version` (or at whatever it targets when `None`).
    async fn wait_deployed(&self, version: Option<&str>) {
        let deadline = Instant::now() + ROLLOUT_TIMEOUT;
        loop {
            let (phase, observed, target) = self.phase_and_versions().await;
            let wanted = version.or(target.as_deref());
            if phase.as_deref() == Some("Deployed")
                && observed.is_some()
                && observed.as_deref() == wanted
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "KubeVirt not Deployed at {wanted:?} after {ROLLOUT_TIMEOUT:?}: phase {phase:?}, observed {observed:?}\n{}",
                self.operator_log_tail()
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Leaves KubeVirt Deployed, at rest: when an earlier test left a failed canary (virt-operator
    /// never rolls back) or an unfinished upgrade, moves it to a new healthy version first.
    async fn settle(&self) {
        let (phase, observed, target) = self.phase_and_versions().await;
        if phase.as_deref() != Some("Deployed") || observed != target {
            let version = self.next_version("").await;
            eprintln!(
                "settling KubeVirt (phase {phase:?}, observed {observed:?}, target {target:?}): upgrading to {version}"
            );
            self.set_image_tag(&version).await;
            self.wait_deployed(Some(&version)).await;
        }
        // At rest: virt-handler back at maxUnavailable 1, every pod updated and ready.
        let nodes = self.node_count().await;
        eventually(ROLLOUT_TIMEOUT, "virt-handler not at rest", async || {
            let ds = self.handler().await;
            let status = ds.status.clone().unwrap_or_default();
            let rest = max_unavailable(&ds) == "1"
                && status.desired_number_scheduled == i32::try_from(nodes).unwrap()
                && status.number_ready == status.desired_number_scheduled
                && status.updated_number_scheduled == Some(status.desired_number_scheduled);
            if rest { Ok(()) } else { Err(status) }
        })
        .await;
    }

    fn operator_log_tail(&self) -> String {
        tail(&self.operator_log, 30)
    }

    /// The audit events of the DaemonSet writes (create, update, patch) of `user` on
    /// `namespace/name` that completed at or after `since`, in the order they completed.
    fn write_events(&self, user: &str, namespace: &str, name: &str, since: f64) -> Vec<Value> {
        let text = std::fs::read_to_string(&self.audit_log).unwrap_or_else(|e| {
            panic!(
                "cannot read the audit log {}: {e}",
                self.audit_log.display()
            )
        });
        let finished = |event: &Value| {
            event["stageTimestamp"]
                .as_str()
                .and_then(parse_time)
                .unwrap_or_default()
        };
        let mut events: Vec<Value> = text
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter(|event| {
                event["user"]["username"] == user
                    && event["stage"] == "ResponseComplete"
                    && event["objectRef"]["resource"] == "daemonsets"
                    && event["objectRef"]["namespace"] == namespace
                    && event["objectRef"]["name"] == name
                    && event["objectRef"]["subresource"].is_null()
                    && ["create", "update", "patch"]
                        .iter()
                        .any(|v| event["verb"] == *v)
                    && finished(event) >= since
            })
            .collect();
        events.sort_by(|a, b| finished(a).total_cmp(&finished(b)));
        events
    }

    /// The successful DaemonSet writes of `user` on `namespace/name` since `since`.
    fn writes(&self, user: &str, namespace: &str, name: &str, since: f64) -> Vec<Write> {
        self.write_events(user, namespace, name, since)
            .iter()
            .filter(|event| succeeded(event))
            .map(Write::from_audit)
            .collect()
    }

    /// The failed ones (a stale cache's rejected JSON-patch test, for instance), for the
    /// report.
    fn rejected_writes(&self, user: &str, namespace: &str, name: &str, since: f64) -> Vec<String> {
        self.write_events(user, namespace, name, since)
            .iter()
            .filter(|event| !succeeded(event))
            .map(|event| {
                format!(
                    "{} {} {}",
                    event["verb"],
                    event["responseStatus"]["code"],
                    event["responseStatus"]["message"]
                        .as_str()
                        .unwrap_or_default()
                        .chars()
                        .take(200)
                        .collect::<String>()
                )
            })
            .collect()
    }
}

/// Whether an audit event's request succeeded (a 2xx code).
fn succeeded(event: &Value) -> bool {
    event["responseStatus"]["code"]
        .as_i64()
        .is_some_and(|c| (200..300).contains(&c))
}

/// One successful DaemonSet write, as the API server's response showed the object after it.
#[derive(Debug, Clone)]
struct Write {
    /// When the API server finished it (seconds since the epoch).
    at: f64,
    verb: String,
    max_unavailable: String,
    version: String,
    registry: String,
    id: String,
    kubevirt_generation: String,
    generation: i64,
    /// The JSON patch's operations (`test /metadata/generation`, ...); empty for other verbs.
    ops: Vec<String>,
    /// The generation its JSON patch's `test` operation expected.
    tested_generation: Option<i64>,
    /// The pod template after the write.
    template: Value,
    /// The whole `updateStrategy` after the write.
    update_strategy: Value,
}

impl Write {
    fn from_audit(event: &Value) -> Self {
        let object = &event["responseObject"];
        let annotation = |key: &str| {
            object["metadata"]["annotations"][key]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        };
        let max_unavailable = match &object["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"]
        {
            Value::Number(n) => n.to_string(),
            Value::String(s) => s.clone(),
            _ => "unset".to_owned(),
        };
        Self {
            at: event["stageTimestamp"]
                .as_str()
                .and_then(parse_time)
                .unwrap_or_default(),
            verb: event["verb"].as_str().unwrap_or_default().to_owned(),
            max_unavailable,
            version: annotation(VERSION_KEY),
            registry: annotation(REGISTRY_KEY),
            id: annotation(ID_KEY),
            kubevirt_generation: annotation(GENERATION_KEY),
            generation: object["metadata"]["generation"]
                .as_i64()
                .unwrap_or_default(),
            ops: event["requestObject"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|op| {
                    format!(
                        "{} {}",
                        op["op"].as_str().unwrap_or_default(),
                        op["path"].as_str().unwrap_or_default()
                    )
                })
                .collect(),
            tested_generation: event["requestObject"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|op| op["op"] == "test" && op["path"] == "/metadata/generation")
                .and_then(|op| op["value"].as_i64()),
            template: object["spec"]["template"].clone(),
            update_strategy: object["spec"]["updateStrategy"].clone(),
        }
    }
}

/// An RFC 3339 UTC time (`2026-12-07T00:01:02.123456Z`) as seconds since the epoch.
fn parse_time(text: &str) -> Option<f64> {
    let text = text.strip_suffix('Z')?;
    let (date, time) = text.split_once('T')?;
    let mut date_fields = date.split('-').map(|f| f.parse::<i64>().ok());
    let (year, month, day) = (
        date_fields.next()??,
        date_fields.next()??,
        date_fields.next()??,
    );
    let mut time_fields = time.split(':');
    let hours: f64 = time_fields.next()?.parse().ok()?;
    let minutes: f64 = time_fields.next()?.parse().ok()?;
    let seconds: f64 = time_fields.next()?.parse().ok()?;
    // Days from civil (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    #[allow(clippy::cast_precision_loss)]
    Some(days as f64 * 86_400.0 + hours * 3600.0 + minutes * 60.0 + seconds)
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// `daemonset-canary observe-kubevirt` as a process, its JSON log in a file.
struct Observer {
    /// Killed when the observer is dropped.
    _process: support::KillOnDrop,
    metrics: String,
    log: PathBuf,
}

impl Observer {
    fn start(kv: &Kv, test: &str) -> Self {
        let port = support::free_port();
        // Next to the cluster's logs, where a failed run is looked into.
        let log = kv
            .audit_log
            .with_file_name(format!("observe-kubevirt-{test}.log"));
        let child = Command::new(env!("CARGO_BIN_EXE_daemonset-canary"))
            .args(["observe-kubevirt", "--kubeconfig"])
            .arg(&kv.kubeconfig)
            .args([
                "--metrics-addr",
                &format!("127.0.0.1:{port}"),
                "--log-format",
                "json",
                // Each transition is a debug line of canary-kubevirt ("observed phase").
                "--log-level",
                "canary_kubevirt=debug,info",
            ])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let observer = Self {
            _process: support::KillOnDrop(child),
            metrics: format!("127.0.0.1:{port}"),
            log,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while !support::http_get(&observer.metrics, "/readyz", Duration::from_secs(2))
            .is_some_and(|raw| raw.starts_with("HTTP/1.1 200"))
        {
            assert!(
                Instant::now() < deadline,
                "observe-kubevirt not ready after 60 s\n{}",
                tail(&observer.log, 20)
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        observer
    }

    /// The phases it reported for virt-handler at or after `since`: (seconds, phase).
    fn transitions(&self, since: f64) -> Vec<(f64, String)> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter(|line| {
                line["message"] == "observed phase"
                    && line["daemon_set"]
                        .as_str()
                        .is_some_and(|ds| ds.ends_with(HANDLER))
            })
            .filter_map(|line| {
                let at = line["timestamp"].as_str().and_then(parse_time)?;
                let to = line["to"].as_str()?.to_owned();
                (at >= since).then_some((at, to))
            })
            .collect()
    }

    fn scrape(&self) -> String {
        let raw = support::http_get(&self.metrics, "/metrics", Duration::from_secs(5))
            .expect("no answer from observe-kubevirt's /metrics");
        raw.split_once("\r\n\r\n")
            .map(|(_, b)| b.to_owned())
            .unwrap_or_default()
    }

    /// Waits until `canary_rollout_phase{mode="observed",name="virt-handler",phase=<phase>}` is 1.
    fn wait_phase(&self, phase: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let metrics = self.scrape();
            let reported = metrics.lines().any(|line| {
                line.starts_with("canary_rollout_phase{")
                    && line.contains(r#"mode="observed""#)
                    && line.contains(&format!(r#"name="{HANDLER}""#))
                    && line.contains(&format!(r#"phase="{phase}""#))
                    && line.ends_with(" 1")
            });
            if reported {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the observer does not report {phase}:\n{metrics}\n{}",
                tail(&self.log, 20)
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

/// The distinct phases in order (consecutive repeats dropped).
fn phase_sequence(transitions: &[(f64, String)]) -> Vec<String> {
    let mut phases: Vec<String> = Vec::new();
    for (_, phase) in transitions {
        if phases.last() != Some(phase) {
            phases.push(phase.clone());
        }
    }
    phases
}

/// When `phase` was first reported in `transitions`.
fn first_at(transitions: &[(f64, String)], phase: &str) -> f64 {
    transitions
        .iter()
        .find(|(_, p)| p == phase)
        .map(|(at, _)| *at)
        .unwrap_or_else(|| panic!("no {phase} in {transitions:?}"))
}

/// Slack between the audit log's timestamps and the observer's: the same machine clock, but the
/// API server stamps a write when it finishes it and the observer a phase when its watch
/// delivers the change, which on a loaded 2-core machine takes up to a second or so.
const SLACK: f64 = 2.0;

/// A DaemonSet write as the differential compares it: what was written, with the
/// `kubevirt.io/generation` annotation read against the object that drives the writer (the
/// KubeVirt object for virt-operator, the CanaryDaemonSet for daemonset-canary) and the template
/// compared with the one before the write (the two DaemonSets' templates differ in their
/// namespaces' objects, not in what each write changes).
#[derive(Debug, PartialEq, Eq)]
struct Compared {
    verb: String,
    ops: Vec<String>,
    /// The JSON patch's `test` expected the generation the write then moved on by one.
    tests_the_previous_generation: bool,
    update_strategy: String,
    version: String,
    registry: String,
    id: String,
    generation_annotation: &'static str,
    template_changed: bool,
}

fn compared(writes: &[Write], driving_generation: i64, template_before: &Value) -> Vec<Compared> {
    let mut previous = template_before.clone();
    writes
        .iter()
        .map(|w| {
            let template_changed = w.template != previous;
            previous = w.template.clone();
            Compared {
                verb: w.verb.clone(),
                ops: w.ops.clone(),
                tests_the_previous_generation: w.tested_generation == Some(w.generation - 1),
                update_strategy: w.update_strategy.to_string(),
                version: w.version.clone(),
                registry: w.registry.clone(),
                id: w.id.clone(),
                generation_annotation: if w.kubevirt_generation == driving_generation.to_string() {
                    "current"
                } else {
                    "stale"
                },
                template_changed,
            }
        })
        .collect()
}

/// The differential table's rows (docs/kubevirt.md): one per write, both writers side by side.
fn table(operator: &[Compared], ours: &[Compared]) -> String {
    let cell = |c: Option<&Compared>| {
        c.map_or_else(
            || "(none)".to_owned(),
            |c| {
                format!(
                    "{} {} template {} gen-annotation {} test-op {}",
                    c.verb,
                    c.update_strategy,
                    if c.template_changed {
                        "changed"
                    } else {
                        "kept"
                    },
                    c.generation_annotation,
                    if c.tests_the_previous_generation {
                        "ok"
                    } else {
                        "MISMATCH"
                    }
                )
            },
        )
    };
    (0..operator.len().max(ours.len()))
        .map(|i| {
            format!(
                "| {} | {} | {} |",
                i + 1,
                cell(operator.get(i)),
                cell(ours.get(i))
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The side-by-side copy of virt-handler that daemonset-canary drives: a CanaryDaemonSet in
/// its own namespace whose template is the live virt-handler DaemonSet (its labels, annotations
/// and spec), with virt-operator's own keys left out: the install-strategy annotations and
/// `kubevirt.io/generation` (daemonset-canary injects them, as virt-operator does) and the
/// `app.kubernetes.io/managed-by` label (with it, virt-operator would list the copy and its pods
/// as its own: its caches select that label in every namespace and match pods by owner name).
struct Copy {
    namespace: String,
    client: kube::Client,
    /// The CanaryDaemonSet's spec as created.
    spec: Value,
}

impl Copy {
    async fn create(kv: &Kv, scenario: &str) -> Self {
        let namespace = format!("e2e-kv-{scenario}-{}", std::process::id());
        let object: Namespace =
            serde_json::from_value(json!({"metadata": {"name": namespace}})).unwrap();
        Api::<Namespace>::all(kv.client.clone())
            .create(&PostParams::default(), &object)
            .await
            .unwrap();
        // virt-handler's pods run as their own ServiceAccount; admission wants it to exist.
        let deadline = Instant::now() + Duration::from_secs(30);
        let accounts: Api<ServiceAccount> = Api::namespaced(kv.client.clone(), &namespace);
        while accounts.get_opt("default").await.unwrap().is_none() {
            assert!(
                Instant::now() < deadline,
                "no default ServiceAccount in {namespace}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let handler = kv.handler().await;
        let pod_account = handler
            .spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .and_then(|p| p.service_account_name.clone())
            .unwrap_or_else(|| "default".to_owned());
        if pod_account != "default" {
            let account: ServiceAccount =
                serde_json::from_value(json!({"metadata": {"name": pod_account}})).unwrap();
            accounts
                .create(&PostParams::default(), &account)
                .await
                .unwrap();
        }
        let cds = Self::manifest(&handler, &kv.kubevirt().await, &namespace);
        Api::<CanaryDaemonSet>::namespaced(kv.client.clone(), &namespace)
            .create(
                &PostParams::default(),
                &serde_json::from_value(cds.clone()).unwrap(),
            )
            .await
            .unwrap();
        let copy = Self {
            namespace,
            client: kv.client.clone(),
            spec: cds["spec"].clone(),
        };
        copy.wait_phase(1, &["successful"]).await;
        // KubeVirt mode reports `successful` as soon as it created the DaemonSet (quirk 10, as
        // virt-operator's create path); an upgrade from there would replace pods that never
        // became available, all at once. Start from rest, like virt-handler: every pod ready.
        let nodes = i32::try_from(kv.node_count().await).unwrap();
        let deadline = Instant::now() + ROLLOUT_TIMEOUT;
        loop {
            let ds = copy.daemon_set().await;
            let status = ds.status.clone().unwrap_or_default();
            if status.observed_generation == ds.metadata.generation
                && status.desired_number_scheduled == nodes
                && status.number_ready == nodes
                && status.updated_number_scheduled == Some(nodes)
            {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the copy is not at rest: {status:?}"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        copy
    }

    /// The CanaryDaemonSet with virt-handler's shape and KubeVirt's current target.
    fn manifest(handler: &DaemonSet, kubevirt: &Value, namespace: &str) -> Value {
        let status = &kubevirt["status"];
        let live = serde_json::to_value(handler).unwrap();
        let mut labels = live["metadata"]["labels"].clone();
        strip(&mut labels, &[MANAGED_BY]);
        let mut annotations = live["metadata"]["annotations"].clone();
        strip(
            &mut annotations,
            &[
                VERSION_KEY,
                REGISTRY_KEY,
                ID_KEY,
                GENERATION_KEY,
                "deprecated.daemonset.template.generation",
            ],
        );
        let mut spec = live["spec"].clone();
        strip(&mut spec["template"]["metadata"]["labels"], &[MANAGED_BY]);
        strip(
            &mut spec["template"]["metadata"]["annotations"],
            &[VERSION_KEY, REGISTRY_KEY, ID_KEY],
        );
        json!({
            "apiVersion": "canary.daemonset.dev/v1alpha1",
            "kind": "CanaryDaemonSet",
            "metadata": {"name": HANDLER, "namespace": namespace},
            "spec": {
                "target": {
                    "version": status["targetKubeVirtVersion"],
                    "registry": status["targetKubeVirtRegistry"],
                    "deploymentId": status["targetDeploymentID"],
                },
                "strategy": {"compatibility": "KubeVirt"},
                "template": {"metadata": {"labels": labels, "annotations": annotations}, "spec": spec},
            }
        })
    }

    /// Moves the copy to `version`, as virt-operator's install strategy of that version moves
    /// virt-handler: the images retagged, KubeVirt's new target. Returns the new spec
    /// generation.
    async fn upgrade(&self, kv: &Kv, version: &str) -> i64 {
        let status = kv.kubevirt().await["status"].clone();
        let mut spec = self.spec.clone();
        let old = format!(":{}", spec["target"]["version"].as_str().unwrap());
        let pod = &mut spec["template"]["spec"]["template"]["spec"];
        for list in ["containers", "initContainers"] {
            for container in pod[list].as_array_mut().into_iter().flatten() {
                let image = container["image"].as_str().unwrap_or_default().to_owned();
                container["image"] = json!(image.replacen(&old, &format!(":{version}"), 1));
            }
        }
        spec["target"] = json!({
            "version": version,
            "registry": status["targetKubeVirtRegistry"],
            "deploymentId": status["targetDeploymentID"],
        });
        self.canaries()
            .patch(
                HANDLER,
                &PatchParams::default(),
                &Patch::Merge(&json!({"spec": spec})),
            )
            .await
            .unwrap()
            .metadata
            .generation
            .unwrap()
    }

    async fn daemon_set(&self) -> DaemonSet {
        Api::<DaemonSet>::namespaced(self.client.clone(), &self.namespace)
            .get(HANDLER)
            .await
            .unwrap()
    }

    fn canaries(&self) -> Api<CanaryDaemonSet> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// Waits until the status describes spec generation `generation` in one of `phases`;
    /// returns the phase.
    async fn wait_phase(&self, generation: i64, phases: &[&str]) -> String {
        let deadline = Instant::now() + ROLLOUT_TIMEOUT;
        loop {
            let cds = self.canaries().get(HANDLER).await.unwrap();
            let status = cds.status.clone().unwrap_or_default();
            if status.observed_generation >= Some(generation)
                && let Some(phase) = status.phase_name()
                && phases.contains(&phase)
            {
                return phase.to_owned();
            }
            assert!(
                Instant::now() < deadline,
                "the copy is not {phases:?} at generation {generation} after {ROLLOUT_TIMEOUT:?}: {status:?}"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

impl Drop for Copy {
    fn drop(&mut self) {
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        let name = self.namespace.clone();
        // Not awaited to the end: the namespace goes in the background.
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build();
            if let Ok(runtime) = runtime {
                let _ = runtime.block_on(namespaces.delete(&name, &Default::default()));
            }
        })
        .join();
    }
}

/// Removes `keys` from a JSON map (no-op on anything else).
fn strip(map: &mut Value, keys: &[&str]) {
    if let Some(object) = map.as_object_mut() {
        for key in keys {
            object.remove(*key);
        }
    }
}

/// The `FailedUpdate` events of `namespace` last seen at or after `since`: (involved
/// kind/name, message, count: the series' when it is one, else the event's, which for
/// virt-operator's aggregated event includes earlier rollouts').
async fn failed_update_events(kv: &Kv, namespace: &str, since: f64) -> Vec<(String, String, i32)> {
    let events: Api<k8s_openapi::api::core::v1::Event> =
        Api::namespaced(kv.client.clone(), namespace);
    events
        .list(&ListParams::default().fields("reason=FailedUpdate"))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| {
            let last = e
                .last_timestamp
                .as_ref()
                .map(|t| t.0.as_second() as f64)
                .or_else(|| e.event_time.as_ref().map(|t| t.0.as_second() as f64))
                .unwrap_or_default();
            last + 1.0 >= since
        })
        .map(|e| {
            (
                format!(
                    "{}/{}",
                    e.involved_object.kind.unwrap_or_default(),
                    e.involved_object.name.unwrap_or_default()
                ),
                e.message.unwrap_or_default(),
                e.series
                    .as_ref()
                    .and_then(|series| series.count)
                    .or(e.count)
                    .unwrap_or(1),
            )
        })
        .collect()
}

/// One upgrade of virt-handler by virt-operator, watched by the observer, and the same upgrade
/// done side by side by daemonset-canary on its copy.
struct Run {
    version: String,
    /// When the KubeVirt object was edited.
    since: f64,
    /// virt-operator's writes of virt-handler.
    operator_writes: Vec<Write>,
    /// daemonset-canary's writes of the copy.
    our_writes: Vec<Write>,
    /// The observer's phases for virt-handler.
    transitions: Vec<(f64, String)>,
    observer_log: PathBuf,
    observer_metrics: String,
    /// The KubeVirt object after the edit: its generation and target deployment id.
    kv_generation: i64,
    target_id: String,
    operator: Vec<Compared>,
    ours: Vec<Compared>,
    operator_outcome: String,
    our_outcome: String,
    /// `FailedUpdate` events: (involved kind/name, message, count).
    operator_events: Vec<(String, String, i32)>,
    our_events: Vec<(String, String, i32)>,
    /// The `Degraded` condition at the end: the KubeVirt object's and the CanaryDaemonSet's.
    operator_degraded: bool,
    our_degraded: bool,
}

/// Whether `conditions` (a JSON list) has `Degraded` True.
fn degraded(conditions: &Value) -> bool {
    conditions
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Degraded" && c["status"] == "True")
}

/// Settles KubeVirt, creates the copy, starts the observer, then moves KubeVirt to a fresh
/// version (`suffix` `-crashloop`: a crash-looping one) and the copy to the same target as soon
/// as virt-operator has computed it; waits until both have ended (Deployed or `FailedUpdate`
/// for virt-operator, `successful` or `failed` for the copy) and nothing more is written.
async fn upgrade_side_by_side(kv: &Kv, scenario: &str, suffix: &str) -> Run {
    kv.settle().await;
    let copy = Copy::create(kv, scenario).await;
    let observer = Observer::start(kv, scenario);
    let version = kv.next_version(suffix).await;
    let failures_before = kv.failed_updates().await;
    let before_id = kv.kubevirt().await["status"]["targetDeploymentID"].clone();
    let handler_template =
        serde_json::to_value(&kv.handler().await.spec.unwrap().template).unwrap();
    let copy_template =
        serde_json::to_value(&copy.daemon_set().await.spec.unwrap().template).unwrap();

    let since = now();
    kv.set_image_tag(&version).await;
    // virt-operator computes the new target (its status) before it asks for the install
    // strategy; the copy follows as soon as the target is known.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let status = kv.kubevirt().await["status"].clone();
        if status["targetKubeVirtVersion"] == version && status["targetDeploymentID"] != before_id {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "KubeVirt does not target {version}: {status}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let copy_generation = copy.upgrade(kv, &version).await;
    let after = kv.kubevirt().await;
    let kv_generation = after["metadata"]["generation"].as_i64().unwrap();
    let target_id = after["status"]["targetDeploymentID"]
        .as_str()
        .unwrap()
        .to_owned();

    let operator_outcome = if suffix.ends_with("crashloop") {
        let deadline = Instant::now() + ROLLOUT_TIMEOUT;
        while kv.failed_updates().await <= failures_before {
            assert!(
                Instant::now() < deadline,
                "no FailedUpdate on virt-handler after {ROLLOUT_TIMEOUT:?}\n{}",
                kv.operator_log_tail()
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        observer.wait_phase("failed");
        "failed"
    } else {
        kv.wait_deployed(Some(&version)).await;
        observer.wait_phase("successful");
        "successful"
    };
    let our_outcome = copy
        .wait_phase(copy_generation, &["failed", "successful"])
        .await;
    // Both at rest: nothing more is written (a failed canary stays failed, no widening).
    let quiet_from = kv.failed_updates().await;
    tokio::time::sleep(Duration::from_secs(15)).await;
    eprintln!(
        "virt-operator's FailedUpdate emissions: {} during the upgrade, {} in the 15 s after",
        kv.failed_updates().await - failures_before,
        kv.failed_updates().await - quiet_from
    );

    let operator_writes = kv.writes(OPERATOR_USER, KV_NAMESPACE, HANDLER, since);
    let our_writes = kv.writes(CONTROLLER_USER, &copy.namespace, HANDLER, since);
    let at = |writes: &[Write]| {
        writes
            .iter()
            .map(|w| format!("{} at {:+.1} s", w.max_unavailable, w.at - since))
            .collect::<Vec<_>>()
    };
    eprintln!(
        "{scenario} upgrade to {version} on {} nodes: virt-operator wrote {:?} (rejected {:?}), daemonset-canary {:?} (rejected {:?})",
        kv.node_count().await,
        at(&operator_writes),
        kv.rejected_writes(OPERATOR_USER, KV_NAMESPACE, HANDLER, since),
        at(&our_writes),
        kv.rejected_writes(CONTROLLER_USER, &copy.namespace, HANDLER, since),
    );
    let operator = compared(&operator_writes, kv_generation, &handler_template);
    let ours = compared(&our_writes, copy_generation, &copy_template);
    let our_writes_kept = our_writes;
    let operator_degraded = degraded(&kv.kubevirt().await["status"]["conditions"]);
    let our_degraded = degraded(
        &serde_json::to_value(copy.canaries().get(HANDLER).await.unwrap().status).unwrap()["conditions"],
    );
    // Read before the copy's namespace goes (its events go with it).
    let operator_events = failed_update_events(kv, KV_NAMESPACE, since).await;
    let our_events = failed_update_events(kv, &copy.namespace, since).await;
    eprintln!(
        "| write | virt-operator (kubevirt/virt-handler) | daemonset-canary (compatibility: KubeVirt) |\n|---|---|---|\n{}\n| outcome | {operator_outcome} | {our_outcome} |\n| FailedUpdate events | {operator_events:?} | {our_events:?} |\n| Degraded | {operator_degraded} | {our_degraded} |",
        table(&operator, &ours)
    );
    let transitions = observer.transitions(since);
    Run {
        version,
        since,
        operator_writes,
        our_writes: our_writes_kept,
        transitions,
        observer_log: observer.log.clone(),
        observer_metrics: observer.scrape(),
        kv_generation,
        target_id,
        operator,
        ours,
        operator_outcome: operator_outcome.to_owned(),
        our_outcome,
        operator_events,
        our_events,
        operator_degraded,
        our_degraded,
    }
}

/// Asserts the observer's phases are `expected`, in order, each within the bounds the writes
/// set. The observer derives the phase virt-operator computes on the state it sees, i.e. what
/// virt-operator will do on its next pass, so it may be ahead of the write that acts on it (by
/// the time virt-operator takes to get there), never behind it by more than the watch latency.
fn assert_phases_bracketed(run: &Run, expected: &[&str], bounds: &[(&str, f64, f64)]) {
    let transitions = &run.transitions;
    assert_eq!(
        phase_sequence(transitions),
        expected,
        "{transitions:?}\n{}",
        tail(&run.observer_log, 30)
    );
    for (phase, after, before) in bounds {
        let at = first_at(transitions, phase);
        assert!(
            at + SLACK >= *after && at <= before + SLACK,
            "{phase} at {at:.3}, outside [{after:.3}, {before:.3}]: {transitions:?}\n{:#?}",
            run.operator_writes
        );
    }
}

/// What every write of virt-operator carries: the new target, the edited generation, and one
/// generation more than the write before it.
fn assert_writes_carry_the_target(run: &Run) {
    for (index, write) in run.operator_writes.iter().enumerate() {
        assert_eq!(write.version, run.version, "{write:?}");
        assert_eq!(write.id, run.target_id, "{write:?}");
        assert_eq!(
            write.kubevirt_generation,
            run.kv_generation.to_string(),
            "{write:?}"
        );
        assert_eq!(
            write.generation,
            run.operator_writes[0].generation + i64::try_from(index).unwrap(),
            "{:#?}",
            run.operator_writes
        );
    }
}

/// The differential: daemonset-canary's writes equal virt-operator's, and both ended in
/// `outcome` (`successful` is KubeVirt `Deployed` at the version), `Degraded` or not.
fn assert_matched(kv: &Kv, run: &Run, outcome: &str, degraded: bool) {
    assert_eq!(
        run.ours,
        run.operator,
        "daemonset-canary's writes differ from virt-operator's\n{}",
        tail(&kv.controller_log, 30)
    );
    assert_eq!(
        (run.operator_outcome.as_str(), run.our_outcome.as_str()),
        (outcome, outcome)
    );
    assert_eq!(
        (run.operator_degraded, run.our_degraded),
        (degraded, degraded)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster with KubeVirt: run with `cargo xtask e2e`"]
async fn healthy_upgrade_is_observed_and_matched_by_daemonset_canary() {
    let kv = Kv::connect().await;
    let run = upgrade_side_by_side(&kv, "healthy", "").await;

    // 1. What virt-operator did, from the audit log: the canary at 1 with the new target,
    //    10%, back to 1; and what the observer exported, bracketed by those writes: `started`
    //    between the edit and the first write (virt-operator first gets the new install
    //    strategy and updates its CRDs and RBAC), `canary` from the first write to the second,
    //    `increasing` before the second (the canary's readiness is enough), `waiting` and
    //    `successful` between the second and the third.
    let shown: Vec<(&str, &str)> = run
        .operator_writes
        .iter()
        .map(|w| (w.verb.as_str(), w.max_unavailable.as_str()))
        .collect();
    assert_eq!(
        shown,
        [("patch", "1"), ("patch", "10%"), ("patch", "1")],
        "{:#?}\n{}",
        run.operator_writes,
        kv.operator_log_tail()
    );
    assert_writes_carry_the_target(&run);
    let writes = &run.operator_writes;
    let (start, widen, revert) = (writes[0].at, writes[1].at, writes[2].at);
    let canary_at = first_at(&run.transitions, "canary");
    assert_phases_bracketed(
        &run,
        &["started", "canary", "increasing", "waiting", "successful"],
        &[
            ("started", run.since, start),
            ("canary", start, widen),
            ("increasing", canary_at, widen),
            ("waiting", widen, revert),
            ("successful", widen, revert),
        ],
    );
    let at = |phase: &str| first_at(&run.transitions, phase);
    eprintln!(
        "observer vs virt-operator: started {:.1} s before the first write (edit to write {:.1} s), \
         increasing {:.1} s before the widening write, successful {:.1} s before the revert",
        start - at("started"),
        start - run.since,
        widen - at("increasing"),
        revert - at("successful"),
    );
    let version_line = format!(
        r#"canary_kubevirt_version_info{{name="{KV_NAME}",namespace="{KV_NAMESPACE}",observed_version="{0}",target_version="{0}"}} 1"#,
        run.version
    );
    assert!(
        run.observer_metrics.contains(&version_line),
        "no `{version_line}` in:\n{}",
        run.observer_metrics
    );
    support::promtool_check_metrics(&run.observer_metrics);

    // 2. The same upgrade by daemonset-canary: the same writes, the same outcome, and a
    //    rollout of the same shape: both at 10% from the canary to the end take about as long
    //    (the same DaemonSet controller, the same KWOK nodes; from rest, not from pods that
    //    never became available).
    assert_matched(&kv, &run, "successful", false);
    let wide = |writes: &[Write]| writes[2].at - writes[1].at;
    let (theirs, mine) = (wide(&run.operator_writes), wide(&run.our_writes));
    eprintln!("at 10%: virt-operator {theirs:.1} s, daemonset-canary {mine:.1} s");
    assert!(
        mine > theirs / 2.0 && mine < theirs * 2.0,
        "the rollouts at 10% took {theirs:.1} s (virt-operator) and {mine:.1} s (daemonset-canary)"
    );
    assert!(run.operator_events.is_empty(), "{:?}", run.operator_events);
    assert!(run.our_events.is_empty(), "{:?}", run.our_events);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster with KubeVirt: run with `cargo xtask e2e`"]
async fn release_that_crash_loops_is_observed_and_matched_by_daemonset_canary() {
    let kv = Kv::connect().await;
    let nodes = kv.node_count().await;
    let old_version = kv.kubevirt().await["status"]["observedKubeVirtVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    let run = upgrade_side_by_side(&kv, "crashloop", "-crashloop").await;

    // 1. virt-operator started the canary and stopped there: one write; it said so on
    //    virt-handler and never rolls back. The observer reported `failed` once the canary
    //    crashed, after `started` (between the edit and the write) and `canary`.
    let shown: Vec<(&str, &str, &str)> = run
        .operator_writes
        .iter()
        .map(|w| {
            (
                w.verb.as_str(),
                w.max_unavailable.as_str(),
                w.version.as_str(),
            )
        })
        .collect();
    assert_eq!(
        shown,
        [("patch", "1", run.version.as_str())],
        "{:#?}",
        run.operator_writes
    );
    assert_writes_carry_the_target(&run);
    let start = run.operator_writes[0].at;
    let far = start + ROLLOUT_TIMEOUT.as_secs_f64();
    assert_phases_bracketed(
        &run,
        &["started", "canary", "failed"],
        &[
            ("started", run.since, start),
            ("canary", start, far),
            ("failed", start, far),
        ],
    );
    assert!(
        run.observer_metrics.lines().any(|l| {
            l.starts_with("canary_rollout_failures_total{")
                && l.contains(r#"mode="observed""#)
                && l.contains(r#"reason="CanaryCrashLooping""#)
                && !l.ends_with(" 0")
        }),
        "no observed CanaryCrashLooping failure:\n{}",
        run.observer_metrics
    );
    // One pod was replaced, the canary, and it crash-loops; the others still run the old one.
    let pods: Vec<Pod> = Api::<Pod>::namespaced(kv.client.clone(), KV_NAMESPACE)
        .list(&ListParams::default().labels("kubevirt.io=virt-handler"))
        .await
        .unwrap()
        .items;
    let on = |pod: &Pod, v: &str| {
        pod.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(VERSION_KEY))
            .is_some_and(|a| a == v)
    };
    let canaries: Vec<&Pod> = pods.iter().filter(|p| on(p, &run.version)).collect();
    assert_eq!(
        canaries.len(),
        1,
        "{} pods on {}",
        canaries.len(),
        run.version
    );
    let restarts: i32 = canaries[0]
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .map(|c| c.iter().map(|s| s.restart_count).sum())
        .unwrap_or_default();
    assert!(
        restarts >= 1,
        "the canary did not crash: {:?}",
        canaries[0].status
    );
    assert_eq!(
        pods.iter().filter(|p| on(p, &old_version)).count(),
        nodes - 1
    );

    // 2. The same upgrade by daemonset-canary: the same single write, the same failure, the
    //    same Warning with virt-operator's message. virt-operator records it on the DaemonSet,
    //    daemonset-canary on the CanaryDaemonSet, the object its user owns (docs/kubevirt.md).
    assert_matched(&kv, &run, "failed", true);
    let message = "daemonSet virt-handler rollout failed";
    assert!(
        run.operator_events
            .iter()
            .any(|(object, m, _)| object == "DaemonSet/virt-handler" && m == message),
        "{:?}",
        run.operator_events
    );
    assert!(
        run.our_events
            .iter()
            .any(|(object, m, _)| object == "CanaryDaemonSet/virt-handler" && m == message),
        "{:?}",
        run.our_events
    );
}
