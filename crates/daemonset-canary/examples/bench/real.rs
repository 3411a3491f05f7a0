//! `bench real`: the controller on the real control plane of `cargo xtask cluster up`
//! (kube-apiserver, kube-controller-manager's DaemonSet controller, KWOK nodes), against what a
//! user has without it: a native `RollingUpdate` of the same DaemonSet at `maxUnavailable: 10%`
//! on the same cluster (issue 53).
//!
//! One namespace holds two DaemonSets with the same pod template on every node: `node-agent`,
//! owned by a CanaryDaemonSet (MaxUnavailable driver), and `node-agent-native`, a plain
//! DaemonSet at `maxUnavailable: 10%`. Each rollout round moves the CanaryDaemonSet to a new
//! version and waits for `successful`, then moves the native DaemonSet to the same version and
//! waits until its status shows every pod updated and available: the two rollouts alternate, so
//! that both see the same machine (the controller is idle during the native one). Then a
//! reaction phase: `--reaction-daemon-sets` small CanaryDaemonSets, each on its own
//! `--reaction-nodes` nodes, rolled out one second apart, for more samples of the reaction.
//!
//! Every figure but the makespans comes from the API server's audit log
//! (`cargo xtask cluster up`'s policy: the controller's requests, its DaemonSet writes with
//! their bodies, and every pod status write with its request):
//!
//! - *Makespan*: from just before the harness's write (CanaryDaemonSet spec or DaemonSet
//!   template) to the watch event that shows the rollout done (`successful` at the new
//!   generation with every pod updated and ready; for the native one, the DaemonSet's status
//!   at its generation with every scheduled pod updated and available). Both ends are seen by
//!   the harness the same way.
//! - *Canary cycle*: from the controller's start write (the new template at `maxUnavailable: 1`)
//!   to its widening write (`maxUnavailable: 10%`), both as the API server received them. What
//!   the canary costs over a native rollout; the goal compares the makespan minus it.
//! - *Requests*: the controller's audit events received during the rollout (each request once,
//!   a watch when it opens).
//! - *Reaction*: from the canary pod turning Ready (the KWOK status write that set its Ready
//!   condition, as the API server finished it) to the widening write (as the API server
//!   received it). The canary is the first pod of the DaemonSet with no status write before
//!   the start write.

#![expect(
    clippy::indexing_slicing,
    reason = "only serde_json::Value is indexed here: a missing key or index reads as Null"
)]

use std::collections::HashSet;
use std::fmt::Write as _;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result, bail};
use canary_kube_adapter::CanaryDaemonSet;
use canary_state_machine::{Compatibility, Phase};
use daemonset_canary::demo::scenario;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};

use crate::baseline::{median, percentile};
use crate::process;

/// The controller's identity on the cluster (deploy/rbac's ServiceAccount), as the audit log
/// names it (`cargo xtask cluster`'s `CONTROLLER_USER`).
const CONTROLLER_USER: &str = "system:serviceaccount:daemonset-canary-system:daemonset-canary";

/// The goals of issue 53 on the real control plane.
const MAX_MAKESPAN_RATIO: f64 = 1.05;
const MAX_REQUESTS_PER_ROLLOUT: u64 = 100;
const MAX_REACTION_P99_MS: f64 = 50.0;

/// Options of `bench real`.
#[derive(clap::Args, Debug)]
pub struct RealArgs {
    /// Admin kubeconfig of the cluster (creates the namespace, CanaryDaemonSets, DaemonSets).
    #[arg(long)]
    kubeconfig: PathBuf,
    /// The controller's kubeconfig (deploy/rbac's ServiceAccount).
    #[arg(long)]
    controller_kubeconfig: PathBuf,
    /// The API server's audit log (`cargo xtask cluster up`'s policy).
    #[arg(long)]
    audit_log: PathBuf,
    /// The executable whose `run` is the controller (default: the daemonset-canary next to
    /// this harness).
    #[arg(long)]
    controller_binary: Option<PathBuf>,
    /// Nodes of the cluster (every one gets a pod of both DaemonSets).
    #[arg(long)]
    nodes: u32,
    /// Rollout rounds (one controller rollout and one native rollout each).
    #[arg(long, default_value_t = 3)]
    rollouts: u32,
    /// Small CanaryDaemonSets of the reaction phase (0: none).
    #[arg(long, default_value_t = 20)]
    reaction_daemon_sets: u32,
    /// Nodes of each of them.
    #[arg(long, default_value_t = 10)]
    reaction_nodes: u32,
    /// Rollouts of each of them.
    #[arg(long, default_value_t = 2)]
    reaction_rounds: u32,
    /// Also write the figures as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Exit non-zero when a goal is missed (after the report).
    #[arg(long)]
    check_goals: bool,
}

/// One round: the controller's rollout and the native one of the same version.
#[derive(Debug, Clone)]
struct Round {
    version: String,
    controller: ControllerRollout,
    native: Duration,
}

/// What the audit log and the harness saw of one controller rollout.
#[derive(Debug, Clone)]
struct ControllerRollout {
    makespan: Duration,
    /// Start write to widening write.
    canary_cycle: Duration,
    /// The controller's DaemonSet writes.
    writes: usize,
    requests: u64,
    reaction: Option<Duration>,
    cpu_seconds: f64,
}

/// Runs `bench real`.
pub fn run(args: &RealArgs) -> Result<()> {
    let runtime = tokio::runtime::Runtime::new().context("cannot build a runtime")?;
    runtime.block_on(measure(args))
}

async fn measure(args: &RealArgs) -> Result<()> {
    let started = Instant::now();
    let client = process::client(&args.kubeconfig).await?;
    let namespace = format!("bench-real-{}", std::process::id());
    let object: Namespace = serde_json::from_value(json!({"metadata": {"name": namespace}}))?;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &object)
        .await
        .context("cannot create the benchmark namespace")?;
    process::wait_for_service_account(&client, &namespace).await?;
    let result = rounds(args, &client, &namespace, started).await;
    // The namespace (its DaemonSets and pods) goes in the background.
    let _ = Api::<Namespace>::all(client)
        .delete(&namespace, &Default::default())
        .await;
    result
}

async fn rounds(args: &RealArgs, client: &Client, namespace: &str, started: Instant) -> Result<()> {
    let controller_binary = match &args.controller_binary {
        Some(path) => path.clone(),
        None => crate::default_binary()?,
    };
    let mut audit = AuditLog::open(&args.audit_log)?;
    let (controller, command) =
        process::start_controller(&controller_binary, &args.controller_kubeconfig)?;
    let pid = controller.0.id();
    let anonymous = process::AnonymousPeak::sample(pid);
    let canaries: Api<CanaryDaemonSet> = Api::namespaced(client.clone(), namespace);
    let daemon_sets: Api<DaemonSet> = Api::namespaced(client.clone(), namespace);
    let name = scenario::NAME;
    let native = format!("{name}-native");

    eprintln!(
        "real: installing v1 on {} nodes (both DaemonSets) ...",
        args.nodes
    );
    canaries
        .create(
            &PostParams::default(),
            &serde_json::from_value(canary_manifest(name, namespace, "v1", None))?,
        )
        .await
        .context("cannot create the CanaryDaemonSet")?;
    wait_canary(&canaries, name, args.nodes, "v1").await?;
    daemon_sets
        .create(
            &PostParams::default(),
            &serde_json::from_value(native_manifest(&native, namespace, "v1"))?,
        )
        .await
        .context("cannot create the native DaemonSet")?;
    wait_native(&daemon_sets, &native, args.nodes).await?;
    audit.read_new()?;

    let mut rounds = Vec::new();
    for round in 0..args.rollouts {
        let version = format!("v{}", round + 2);
        eprintln!("real: round {}: {version}, the controller ...", round + 1);
        let cpu_before = process::cpu_seconds(pid)?;
        let since = epoch_seconds(SystemTime::now());
        let clock = Instant::now();
        patch_canary(&canaries, name, namespace, &version, None).await?;
        wait_canary(&canaries, name, args.nodes, &version).await?;
        let makespan = clock.elapsed();
        let until = epoch_seconds(SystemTime::now());
        let cpu_seconds = process::cpu_seconds(pid)? - cpu_before;
        let events = audit.read_new()?;
        let analysed = analyse(&events, namespace, name, since, until)?;
        let controller = ControllerRollout {
            makespan,
            canary_cycle: analysed.canary_cycle,
            writes: analysed.writes,
            requests: analysed.requests,
            reaction: analysed.reaction,
            cpu_seconds,
        };
        eprintln!("  {controller:?}");
        eprintln!(
            "real: round {}: {version}, native RollingUpdate ...",
            round + 1
        );
        let clock = Instant::now();
        let template = native_manifest(&native, namespace, &version)["spec"]["template"].clone();
        daemon_sets
            .patch(
                &native,
                &PatchParams::default(),
                &Patch::Merge(&json!({"spec": {"template": template}})),
            )
            .await
            .context("cannot roll the native DaemonSet out")?;
        wait_native(&daemon_sets, &native, args.nodes).await?;
        let native_makespan = clock.elapsed();
        eprintln!("  native makespan {:.1} s", native_makespan.as_secs_f64());
        audit.read_new()?;
        rounds.push(Round {
            version,
            controller,
            native: native_makespan,
        });
    }

    let mut reactions: Vec<Duration> = rounds
        .iter()
        .filter_map(|r| r.controller.reaction)
        .collect();
    let mut missing_reactions = rounds
        .iter()
        .filter(|r| r.controller.reaction.is_none())
        .count();
    let reaction_nodes = args.reaction_nodes.min(args.nodes).max(1);
    if args.reaction_daemon_sets > 0 {
        let (found, missing) =
            reaction_phase(args, &canaries, namespace, reaction_nodes, &mut audit).await?;
        reactions.extend(found);
        missing_reactions += missing;
    }
    let peak_memory = process::status_kib(pid, "VmHWM")? * 1024;
    let peak_anonymous = anonymous.stop().await;
    drop(controller);

    let report = Report {
        nodes: args.nodes,
        rounds,
        reactions,
        missing_reactions,
        reaction_daemon_sets: args.reaction_daemon_sets,
        reaction_nodes,
        reaction_rounds: args.reaction_rounds,
        peak_memory,
        peak_anonymous,
        controller: command,
        took: started.elapsed(),
    };
    print!("{}", report.markdown());
    if let Some(path) = &args.json {
        std::fs::write(path, format!("{:#}\n", report.json()))
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    let missed = report.missed();
    if args.check_goals && !missed.is_empty() {
        bail!("{} goal(s) missed:\n{}", missed.len(), missed.join("\n"));
    }
    Ok(())
}

/// The reaction phase: its CanaryDaemonSets installed at v1, then rolled out
/// `reaction_rounds` times, one CanaryDaemonSet a second. Returns the reactions found and the
/// number of rollouts whose reaction could not be read.
async fn reaction_phase(
    args: &RealArgs,
    canaries: &Api<CanaryDaemonSet>,
    namespace: &str,
    nodes: u32,
    audit: &mut AuditLog,
) -> Result<(Vec<Duration>, usize)> {
    let names: Vec<String> = (0..args.reaction_daemon_sets)
        .map(|i| format!("react-{i}"))
        .collect();
    let node_names = |i: u32| -> Vec<String> {
        (0..nodes)
            .map(|k| format!("node-{}", (i * nodes + k) % args.nodes + 1))
            .collect()
    };
    eprintln!(
        "real: reaction phase, {} CanaryDaemonSets of {nodes} nodes ...",
        names.len()
    );
    for (i, name) in (0_u32..).zip(&names) {
        canaries
            .create(
                &PostParams::default(),
                &serde_json::from_value(canary_manifest(
                    name,
                    namespace,
                    "v1",
                    Some(&node_names(i)),
                ))?,
            )
            .await
            .context("cannot create a CanaryDaemonSet of the reaction phase")?;
    }
    for name in &names {
        wait_canary(canaries, name, nodes, "v1").await?;
    }
    audit.read_new()?;
    let mut found = Vec::new();
    let mut missing = 0;
    for round in 0..args.reaction_rounds {
        let version = format!("r{}", round + 2);
        let since = epoch_seconds(SystemTime::now());
        for (i, name) in (0_u32..).zip(&names) {
            patch_canary(canaries, name, namespace, &version, Some(&node_names(i))).await?;
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        for name in &names {
            wait_canary(canaries, name, nodes, &version).await?;
        }
        let until = epoch_seconds(SystemTime::now());
        let events = audit.read_new()?;
        for name in &names {
            match analyse(&events, namespace, name, since, until)?.reaction {
                Some(reaction) => found.push(reaction),
                None => missing += 1,
            }
        }
        eprintln!("  round {}: {} reactions so far", round + 1, found.len());
    }
    Ok((found, missing))
}

/// The scenario's CanaryDaemonSet as `name` at `version`, on `nodes` only if given (node
/// affinity on the hostname, which the DaemonSet controller honours).
fn canary_manifest(name: &str, namespace: &str, version: &str, nodes: Option<&[String]>) -> Value {
    let mut manifest = process::named(
        scenario::manifest(Compatibility::Fixed, version, "healthy"),
        name,
        namespace,
    );
    // Without the canary soak (default 30 s), as canary-sim's rollouts of this bench
    // (rollout.rs): the soak is a wait the user chooses, which would add its 30 s to the
    // makespan and to the reaction (the widen comes when the soak ends, not when the canary is
    // ready), and a fourth write (the hold).
    manifest["spec"]["health"] = json!({"canarySoak": "0s"});
    if let Some(nodes) = nodes {
        manifest["spec"]["template"]["spec"]["template"]["spec"]["affinity"] = json!({
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{
                    "key": "kubernetes.io/hostname", "operator": "In", "values": nodes
                }]}]
            }}
        });
    }
    manifest
}

/// A plain DaemonSet with the CanaryDaemonSet's template at `version`, `maxUnavailable: 10%`.
fn native_manifest(name: &str, namespace: &str, version: &str) -> Value {
    let manifest = canary_manifest(name, namespace, version, None);
    let mut spec = manifest["spec"]["template"]["spec"].clone();
    spec["updateStrategy"] =
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "10%"}});
    json!({
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app.kubernetes.io/name": name}},
        "spec": spec,
    })
}

async fn patch_canary(
    api: &Api<CanaryDaemonSet>,
    name: &str,
    namespace: &str,
    version: &str,
    nodes: Option<&[String]>,
) -> Result<()> {
    let spec = canary_manifest(name, namespace, version, nodes)["spec"].clone();
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(&json!({"spec": spec})),
    )
    .await
    .with_context(|| format!("cannot move {name} to {version}"))?;
    Ok(())
}

/// The rollouts of this run take about a minute and a half in real time on an idle machine.
fn limit(nodes: u32) -> Duration {
    Duration::from_secs(600 + u64::from(nodes) / 5)
}

/// Waits, through a watch, until `name` is `successful` at its generation with `nodes` pods
/// updated and ready.
async fn wait_canary(
    api: &Api<CanaryDaemonSet>,
    name: &str,
    nodes: u32,
    version: &str,
) -> Result<()> {
    let done = kube::runtime::wait::await_condition(
        api.clone(),
        name,
        move |object: Option<&CanaryDaemonSet>| {
            let Some(object) = object else { return false };
            let Some(status) = &object.status else {
                return false;
            };
            let current = object.metadata.generation == status.observed_generation;
            status.phase == Some(Phase::Failed)
                || (current
                    && status.phase == Some(Phase::Successful)
                    && status.updated_ready == nodes)
        },
    );
    let object = tokio::time::timeout(limit(nodes), done)
        .await
        .with_context(|| format!("{name} did not reach {version} within {:?}", limit(nodes)))?
        .with_context(|| format!("cannot watch {name}"))?;
    let status = object.and_then(|o| o.status).unwrap_or_default();
    if status.phase == Some(Phase::Failed) {
        bail!(
            "{name} failed at {version}: {}",
            status.message.unwrap_or_default()
        );
    }
    Ok(())
}

/// Waits, through a watch, until the DaemonSet's status is at its generation with every one of
/// `nodes` pods scheduled, updated and available.
async fn wait_native(api: &Api<DaemonSet>, name: &str, nodes: u32) -> Result<()> {
    let nodes = i32::try_from(nodes).context("too many nodes")?;
    let done = kube::runtime::wait::await_condition(
        api.clone(),
        name,
        move |object: Option<&DaemonSet>| {
            let Some(object) = object else { return false };
            let Some(status) = &object.status else {
                return false;
            };
            object.metadata.generation == status.observed_generation
                && status.desired_number_scheduled == nodes
                && status.updated_number_scheduled == Some(nodes)
                && status.number_available == Some(nodes)
                && status.number_unavailable.unwrap_or(0) == 0
        },
    );
    tokio::time::timeout(limit(u32::try_from(nodes).unwrap_or(u32::MAX)), done)
        .await
        .with_context(|| format!("{name} did not finish its rollout"))?
        .with_context(|| format!("cannot watch {name}"))?;
    Ok(())
}

/// One audit event, the fields this module reads.
#[derive(Debug, Clone)]
struct Event {
    user: String,
    verb: String,
    stage: String,
    resource: String,
    subresource: String,
    namespace: String,
    name: String,
    /// When the API server received the request (seconds since the epoch).
    received: f64,
    /// When it reached this stage (for `ResponseComplete`, when it finished).
    stage_at: f64,
    code: i64,
    request: Value,
    response: Value,
}

impl Event {
    fn parse(line: &str) -> Result<Self> {
        let event: Value = serde_json::from_str(line).context("an audit line is not JSON")?;
        let text = |value: &Value| value.as_str().unwrap_or_default().to_owned();
        let time = |value: &Value| -> Result<f64> {
            let timestamp: k8s_openapi::jiff::Timestamp = value
                .as_str()
                .context("an audit event without its timestamps")?
                .parse()
                .context("an audit timestamp is not RFC 3339")?;
            Ok(timestamp.as_microsecond() as f64 / 1e6)
        };
        Ok(Self {
            user: text(&event["user"]["username"]),
            verb: text(&event["verb"]),
            stage: text(&event["stage"]),
            resource: text(&event["objectRef"]["resource"]),
            subresource: text(&event["objectRef"]["subresource"]),
            namespace: text(&event["objectRef"]["namespace"]),
            name: text(&event["objectRef"]["name"]),
            received: time(&event["requestReceivedTimestamp"])?,
            stage_at: time(&event["stageTimestamp"])?,
            code: event["responseStatus"]["code"].as_i64().unwrap_or_default(),
            request: event["requestObject"].clone(),
            response: event["responseObject"].clone(),
        })
    }

    fn succeeded(&self) -> bool {
        (200..300).contains(&self.code)
    }

    /// A request of the controller, counted once (a watch when it opens).
    fn is_controller_request(&self) -> bool {
        self.user == CONTROLLER_USER && !(self.verb == "watch" && self.stage == "ResponseComplete")
    }

    /// A successful DaemonSet write of the controller on `namespace/name`.
    fn is_daemon_set_write(&self, namespace: &str, name: &str) -> bool {
        self.user == CONTROLLER_USER
            && self.stage == "ResponseComplete"
            && self.resource == "daemonsets"
            && self.subresource.is_empty()
            && self.namespace == namespace
            && self.name == name
            && ["create", "update", "patch"].contains(&self.verb.as_str())
            && self.succeeded()
    }

    /// A successful status write of a pod of DaemonSet `owner` (`<owner>-<5 characters>`).
    fn is_pod_status_write(&self, namespace: &str, owner: &str) -> bool {
        self.stage == "ResponseComplete"
            && self.resource == "pods"
            && self.subresource == "status"
            && self.namespace == namespace
            && self.succeeded()
            && self
                .name
                .strip_prefix(owner)
                .and_then(|rest| rest.strip_prefix('-'))
                .is_some_and(|suffix| suffix.len() == 5 && !suffix.contains('-'))
    }

    /// Whether the status write sets the pod's Ready condition to True.
    fn sets_ready(&self) -> bool {
        self.request["status"]["conditions"]
            .as_array()
            .is_some_and(|conditions| {
                conditions
                    .iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            })
    }

    /// The DaemonSet's `maxUnavailable` after this write (from the response).
    fn max_unavailable(&self) -> String {
        match &self.response["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"] {
            Value::Number(n) => n.to_string(),
            Value::String(s) => s.clone(),
            _ => "unset".to_owned(),
        }
    }
}

/// What one controller rollout left in the audit log.
struct Analysed {
    canary_cycle: Duration,
    writes: usize,
    requests: u64,
    reaction: Option<Duration>,
}

/// Reads one rollout of CanaryDaemonSet `name` (whose DaemonSet has the same name) from the
/// audit events, between `since` and `until` (seconds since the epoch).
fn analyse(
    events: &[Event],
    namespace: &str,
    name: &str,
    since: f64,
    until: f64,
) -> Result<Analysed> {
    let window = |e: &&Event| e.received >= since && e.received <= until;
    let writes: Vec<&Event> = events
        .iter()
        .filter(window)
        .filter(|e| e.is_daemon_set_write(namespace, name))
        .collect();
    let start = writes.first().with_context(|| {
        format!("no DaemonSet write of the controller on {name} in the audit log")
    })?;
    let widen = writes
        .iter()
        .find(|w| w.max_unavailable() != "1")
        .with_context(|| format!("no widening write on {name} in the audit log"))?;
    // The requests are counted only for the one CanaryDaemonSet of the rounds.
    let requests = events
        .iter()
        .filter(window)
        .filter(|e| e.is_controller_request())
        .count() as u64;
    // Pods with a status write before the start write are the old ones.
    let old: HashSet<&str> = events
        .iter()
        .filter(|e| e.is_pod_status_write(namespace, name) && e.stage_at < start.received)
        .map(|e| e.name.as_str())
        .collect();
    let ready = events
        .iter()
        .filter(|e| {
            e.is_pod_status_write(namespace, name)
                && e.stage_at >= start.received
                && !old.contains(e.name.as_str())
                && e.sets_ready()
        })
        .map(|e| e.stage_at)
        .min_by(f64::total_cmp);
    let reaction = ready
        .map(|ready| widen.received - ready)
        .filter(|seconds| *seconds >= 0.0)
        .map(Duration::from_secs_f64);
    Ok(Analysed {
        canary_cycle: Duration::from_secs_f64((widen.received - start.received).max(0.0)),
        writes: writes.len(),
        requests,
        reaction,
    })
}

/// The audit log, read on from where the last read stopped.
struct AuditLog {
    path: PathBuf,
    offset: u64,
    /// The events of pods' status writes already read, kept so that a later rollout knows
    /// which pods are old.
    pod_history: Vec<Event>,
}

impl AuditLog {
    fn open(path: &Path) -> Result<Self> {
        let mut log = Self {
            path: path.to_owned(),
            offset: 0,
            pod_history: Vec::new(),
        };
        log.read_new()?;
        Ok(log)
    }

    /// The events appended since the last read (whole lines only), after the status writes of
    /// pods read before.
    fn read_new(&mut self) -> Result<Vec<Event>> {
        let mut file = std::fs::File::open(&self.path)
            .with_context(|| format!("cannot open {}", self.path.display()))?;
        file.seek(SeekFrom::Start(self.offset))?;
        let mut text = String::new();
        file.read_to_string(&mut text)
            .with_context(|| format!("cannot read {}", self.path.display()))?;
        let complete = text.rfind('\n').map_or(0, |end| end + 1);
        self.offset += complete as u64;
        let mut events = Vec::new();
        for line in text.get(..complete).unwrap_or_default().lines() {
            if !line.trim().is_empty() {
                events.push(Event::parse(line)?);
            }
        }
        let mut all = std::mem::take(&mut self.pod_history);
        all.extend(events);
        // Only the pods' status writes are kept for later reads, without their bodies.
        self.pod_history = all
            .iter()
            .filter(|e| e.resource == "pods" && e.subresource == "status")
            .map(|e| Event {
                request: Value::Null,
                response: Value::Null,
                ..e.clone()
            })
            .collect();
        Ok(all)
    }
}

fn epoch_seconds(time: SystemTime) -> f64 {
    time.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Everything one `bench real` run measured.
struct Report {
    nodes: u32,
    rounds: Vec<Round>,
    reactions: Vec<Duration>,
    missing_reactions: usize,
    reaction_daemon_sets: u32,
    reaction_nodes: u32,
    reaction_rounds: u32,
    peak_memory: u64,
    peak_anonymous: u64,
    controller: String,
    took: Duration,
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

impl Report {
    fn controller_minus_cycle(&self) -> Vec<f64> {
        self.rounds
            .iter()
            .map(|r| {
                secs(
                    r.controller
                        .makespan
                        .saturating_sub(r.controller.canary_cycle),
                )
            })
            .collect()
    }

    fn natives(&self) -> Vec<f64> {
        self.rounds.iter().map(|r| secs(r.native)).collect()
    }

    /// Median of the controller's makespans minus their canary cycles over the median native
    /// makespan.
    fn makespan_ratio(&self) -> Option<f64> {
        let mut ours = self.controller_minus_cycle();
        let mut natives = self.natives();
        if ours.is_empty() {
            return None;
        }
        Some(median(&mut ours) / median(&mut natives))
    }

    fn max_requests(&self) -> Option<u64> {
        self.rounds.iter().map(|r| r.controller.requests).max()
    }

    fn reaction_ms(&self) -> Vec<f64> {
        self.reactions.iter().copied().map(ms).collect()
    }

    fn reaction_p99(&self) -> Option<f64> {
        let mut values = self.reaction_ms();
        (!values.is_empty()).then(|| percentile(&mut values, 0.99))
    }

    /// Each goal: its text, the figure, and whether it is met (None: not measured).
    fn goals(&self) -> Vec<(String, String, Option<bool>)> {
        let ratio = self.makespan_ratio();
        let requests = self.max_requests();
        let p99 = self.reaction_p99();
        vec![
            (
                format!(
                    "makespan minus one canary cycle over the native RollingUpdate at 10% (medians) <= {MAX_MAKESPAN_RATIO}"
                ),
                ratio.map_or("not measured".to_owned(), |r| format!("{r:.3}")),
                ratio.map(|r| r <= MAX_MAKESPAN_RATIO),
            ),
            (
                format!(
                    "the controller's API requests per rollout (the most of any round) <= {MAX_REQUESTS_PER_ROLLOUT}"
                ),
                requests.map_or("not measured".to_owned(), |r| r.to_string()),
                requests.map(|r| r <= MAX_REQUESTS_PER_ROLLOUT),
            ),
            (
                format!(
                    "reaction (canary Ready to widening write, at the API server) p99 <= {MAX_REACTION_P99_MS} ms"
                ),
                p99.map_or("not measured".to_owned(), |p| {
                    format!("{p:.1} ms over {} samples", self.reactions.len())
                }),
                p99.map(|p| p <= MAX_REACTION_P99_MS && self.missing_reactions == 0),
            ),
        ]
    }

    fn missed(&self) -> Vec<String> {
        self.goals()
            .into_iter()
            .filter(|(_, _, met)| *met == Some(false))
            .map(|(goal, figure, _)| format!("MISSED: {goal}: {figure}"))
            .collect()
    }

    fn markdown(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "## The real control plane: {} KWOK nodes, the controller against a native RollingUpdate\n",
            self.nodes
        );
        let _ = writeln!(
            out,
            "| round | version | controller makespan (s) | canary cycle (s) | makespan minus cycle (s) | native at 10% (s) | ratio | DaemonSet writes | controller requests | reaction (ms) | controller CPU (s) |"
        );
        let _ = writeln!(
            out,
            "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        );
        for (i, round) in self.rounds.iter().enumerate() {
            let c = &round.controller;
            let minus = c.makespan.saturating_sub(c.canary_cycle);
            let _ = writeln!(
                out,
                "| {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.3} | {} | {} | {} | {:.2} |",
                i + 1,
                round.version,
                secs(c.makespan),
                secs(c.canary_cycle),
                secs(minus),
                secs(round.native),
                secs(minus) / secs(round.native),
                c.writes,
                c.requests,
                c.reaction
                    .map_or("-".to_owned(), |r| format!("{:.1}", ms(r))),
                c.cpu_seconds,
            );
        }
        let mut natives = self.natives();
        if !natives.is_empty() {
            let mean = natives.iter().sum::<f64>() / natives.len() as f64;
            let spread = natives.iter().copied().fold(f64::NEG_INFINITY, f64::max)
                - natives.iter().copied().fold(f64::INFINITY, f64::min);
            let _ = writeln!(
                out,
                "\nNative RollingUpdate: median {:.2} s, mean {mean:.2} s, max - min {spread:.2} s ({:.1}% of the mean) over {} rollouts.",
                median(&mut natives),
                100.0 * spread / mean,
                natives.len()
            );
        }
        let mut reactions = self.reaction_ms();
        if !reactions.is_empty() {
            let n = reactions.len();
            let _ = writeln!(
                out,
                "\nReaction (canary Ready at the API server to the widening write received): {n} samples ({} from the rounds, {} from {} CanaryDaemonSets of {} nodes x {} rollouts, one a second), p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms{}.",
                self.rounds
                    .iter()
                    .filter(|r| r.controller.reaction.is_some())
                    .count(),
                n - self
                    .rounds
                    .iter()
                    .filter(|r| r.controller.reaction.is_some())
                    .count(),
                self.reaction_daemon_sets,
                self.reaction_nodes,
                self.reaction_rounds,
                percentile(&mut reactions, 0.5),
                percentile(&mut reactions, 0.99),
                percentile(&mut reactions, 1.0),
                if self.missing_reactions > 0 {
                    format!(
                        "; {} rollouts without a readable reaction",
                        self.missing_reactions
                    )
                } else {
                    String::new()
                }
            );
        }
        let _ = writeln!(
            out,
            "\nController (`{}`): peak memory {:.1} MiB (anonymous {:.1} MiB). Run time {:.0} s.\n",
            self.controller,
            self.peak_memory as f64 / 1048576.0,
            self.peak_anonymous as f64 / 1048576.0,
            secs(self.took)
        );
        let _ = writeln!(out, "| goal (issue 53) | figure | verdict |\n|---|---|---|");
        for (goal, figure, met) in self.goals() {
            let verdict = match met {
                Some(true) => "met",
                Some(false) => "**MISSED**",
                None => "NOT MEASURED",
            };
            let _ = writeln!(out, "| {goal} | {figure} | {verdict} |");
        }
        out
    }

    fn json(&self) -> Value {
        json!({
            "nodes": self.nodes,
            "rounds": self.rounds.iter().map(|r| json!({
                "version": r.version,
                "controller_makespan_s": secs(r.controller.makespan),
                "canary_cycle_s": secs(r.controller.canary_cycle),
                "native_makespan_s": secs(r.native),
                "daemon_set_writes": r.controller.writes,
                "controller_requests": r.controller.requests,
                "reaction_ms": r.controller.reaction.map(ms),
                "controller_cpu_s": r.controller.cpu_seconds,
            })).collect::<Vec<_>>(),
            "reactions_ms": self.reaction_ms(),
            "missing_reactions": self.missing_reactions,
            "makespan_ratio": self.makespan_ratio(),
            "max_requests": self.max_requests(),
            "reaction_p99_ms": self.reaction_p99(),
            "peak_memory_bytes": self.peak_memory,
            "peak_anonymous_bytes": self.peak_anonymous,
            "took_s": secs(self.took),
            "missed": self.missed(),
        })
    }
}
