//! Chaos on the real control plane (issue 48): faults injected while the real
//! `daemonset-canary run` rolls a DaemonSet out on KWOK nodes, judged on the API server's own
//! record (its audit log) and on what the controller's probes said meanwhile.
//!
//! Every test is `#[ignore]`: `cargo xtask chaos` starts the cluster (pods watched from etcd,
//! so that compaction answers 410 Gone), supervises every component (a killed one is started
//! again once the scenario lets it: `run/<name>.hold`), installs the CRD and the controller's
//! identity, and runs this target with `--ignored --test-threads=1`, the environment naming
//! where everything is (`chaos/harness.rs`). Run by hand without it, a test fails and says how.
//!
//! Each scenario: its own namespace, its own controller process (a token of its own, so the
//! audit log tells processes apart; a Lease of its own) reaching kube-apiserver through a proxy
//! that can slow, cut or stall it; `v1` installed; the upgrade to `v2` started; the fault
//! injected when the rollout reaches the scenario's moment; then the checks:
//!
//! - **outcome**: the rollout ends as it would have without the fault (`successful`, or
//!   `failed` for a crash-looping canary);
//! - **recovery**: time from the end of the fault (server back, process started again, proxy
//!   healed) to the controller's first successful write the audit log records after it (a
//!   write of the status, the DaemonSet or a pod; Leases and events do not count);
//! - **probes**: `/healthz` never 503 (no fault lasts 3 minutes); `/readyz` 503 within 40 s
//!   of an outage that lasts longer than its 30 s grace, and 200 within 30 s of the end of any
//!   fault; both 200 at the end;
//! - **audit-log invariants** (`support/audit.rs`), the simulation's, on the server's record:
//!   DaemonSet writes of the rollout at most the fault-free count; no write from a process that
//!   did not hold the Lease; with the Pods driver, never more nodes down than the step's budget;
//!   after a failure, no write but the status.
//!
//! Each result is one JSON line in `CHAOS_RESULTS`, which `cargo xtask chaos` prints as the
//! table of docs/reliability.md; a test fails when its row does not pass.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

mod support;

#[path = "chaos/harness.rs"]
mod harness;
#[path = "chaos/proxy.rs"]
mod proxy;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use canary_kube_adapter::CanaryDaemonSet;
use daemonset_canary::demo::scenario::{NAME, manifest};
use futures::StreamExt;
use harness::{Env, Sampler, component, phase};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::PostParams;
use kube::runtime::watcher;
use proxy::{Mode, Proxy};
use support::audit;
use support::rollout::{Said, eventually, set_spec};

/// How soon after the end of a fault the controller must write again (issue 48: within 30 s of
/// the server's return; a killed controller's successor waits out the old Lease, 15 s, first).
const RECOVERY_BOUND: Duration = Duration::from_secs(30);

/// What a scenario does to the rollout.
#[derive(Clone, Copy, Debug)]
enum Fault {
    /// Nothing: the baseline every row is compared with.
    None,
    /// SIGKILL kube-apiserver, keep it down this long, let the supervisor start it again.
    KillApiserver(Duration),
    /// SIGKILL etcd, keep it down this long.
    KillEtcd(Duration),
    /// Stall the controller's connections, let the rollout go on, compact etcd to its current
    /// revision, then cut the connections: the controller resumes its watches from
    /// resourceVersions etcd no longer has, and the pod watch is answered 410 Gone.
    CompactedWatch,
    /// SIGKILL the controller and start a new process at once.
    KillController,
    /// Two replicas: the leader's connections are stalled this long (a partition: what it sent
    /// meanwhile is lost), so that the standby takes over; then the leader is reconnected.
    PartitionLeader(Duration),
    /// Latency on every chunk and every connection cut at an interval, for a while.
    SlowApiServer {
        latency: Duration,
        cut_every: Duration,
        lasting: Duration,
    },
}

impl Fault {
    fn describe(self) -> String {
        match self {
            Fault::None => "none (baseline)".to_owned(),
            Fault::KillApiserver(down) => {
                format!(
                    "kube-apiserver SIGKILLed, restarted after {} s",
                    down.as_secs()
                )
            }
            Fault::KillEtcd(down) => {
                format!("etcd SIGKILLed, restarted after {} s", down.as_secs())
            }
            Fault::CompactedWatch => "watch resumed past etcd's compaction (410 Gone)".to_owned(),
            Fault::KillController => "controller SIGKILLed, started again".to_owned(),
            Fault::PartitionLeader(down) => format!(
                "two replicas, the leader cut off {} s (the standby takes over), then back",
                down.as_secs()
            ),
            Fault::SlowApiServer {
                latency,
                cut_every,
                lasting,
            } => format!(
                "slow API server: +{} ms a chunk, connections cut every {} s, for {} s",
                latency.as_millis(),
                cut_every.as_secs(),
                lasting.as_secs()
            ),
        }
    }
}

/// When, in the rollout, the fault is injected.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Moment {
    /// The status says this phase.
    Phase(&'static str),
    /// The DaemonSet's `maxUnavailable` has been widened (the `increasing` pass wrote it).
    Widened,
    /// Pods driver: the status is in this step and some of its pods were deleted.
    PodsStep(u32),
}

/// One chaos scenario.
struct Scenario {
    /// Short name: namespace and Lease.
    name: &'static str,
    fault: Fault,
    moment: Moment,
    /// The strategy (merged into the demo scenario's).
    strategy: serde_json::Value,
    /// The behaviour of the `v2` pods (KWOK Stages).
    behavior: &'static str,
    /// The outcome without the fault.
    expected: &'static str,
    /// DaemonSet writes of the fault-free rollout (at most this many).
    daemon_set_writes: usize,
    /// Pods driver: the most nodes down at once (the steps' budget).
    budget: Option<usize>,
}

/// The strategy of the MaxUnavailable scenarios: canary, then half the nodes at a time, so
/// that a rollout of the 10 nodes takes three waves.
fn fast_strategy() -> serde_json::Value {
    serde_json::json!({"fastMaxUnavailable": "50%"})
}

/// The Pods driver: one canary node, then every node at most 30% at a time.
fn pods_strategy() -> serde_json::Value {
    serde_json::json!({
        "driver": "Pods",
        "steps": [{"nodes": "1"}, {"nodes": "100%", "maxUnavailable": "30%"}]
    })
}

/// The node agent at `version` with `behavior` and the scenario's strategy, in `namespace`.
fn agent(
    namespace: &str,
    version: &str,
    behavior: &str,
    strategy: &serde_json::Value,
) -> CanaryDaemonSet {
    let mut object = manifest(
        canary_state_machine::Compatibility::Fixed,
        version,
        behavior,
    );
    object["metadata"]["namespace"] = serde_json::json!(namespace);
    json_patch::merge(
        &mut object,
        &serde_json::json!({"spec": {"strategy": strategy}}),
    );
    serde_json::from_value(object).unwrap()
}

/// How a scenario went: its row.
#[derive(Debug, Default)]
struct Row {
    phase: String,
    outcome: String,
    recovery: Option<Duration>,
    probes: Vec<String>,
    probes_ok: bool,
    invariants: Vec<(String, bool)>,
    makespan: Duration,
    notes: Vec<String>,
}

async fn run(scenario: Scenario) {
    let env = Env::from_environment();
    let client = env.client().await;
    let pid = std::process::id();
    let namespace = format!("chaos-{}-{pid}", scenario.name);
    let lease = format!("chaos-{}-{pid}", scenario.name);
    harness::namespace(&env, &client, &namespace).await;
    let proxy = Proxy::start(env.apiserver_addr()).await;
    let server = format!("https://{}", proxy.addr);
    let mut generation_of_process = 0;
    let mut controller =
        harness::start_controller(&env, &server, &namespace, &lease, generation_of_process);
    let sampler = Sampler::start(controller.metrics_port);
    wait_ready(&controller, Duration::from_secs(60)).await;
    // A standby, through a proxy of its own, once the first process leads.
    let standby = if matches!(scenario.fault, Fault::PartitionLeader(_)) {
        until(Duration::from_secs(60), "the first process leads", || {
            std::future::ready(lease_holder(&env, &lease) == format!("{lease}-0"))
        })
        .await;
        let proxy = Proxy::start(env.apiserver_addr()).await;
        let standby = harness::start_controller(
            &env,
            &format!("https://{}", proxy.addr),
            &namespace,
            &lease,
            1,
        );
        wait_ready(&standby, Duration::from_secs(60)).await;
        Some((standby, proxy))
    } else {
        None
    };

    let api: Api<CanaryDaemonSet> = Api::namespaced(client.clone(), &namespace);
    install_v1(&api, &namespace, &scenario.strategy, &controller).await;

    // The pods' readiness, as the server tells it, for the budget check.
    let readiness = scenario
        .budget
        .map(|_| ReadinessLog::start(client.clone(), &namespace));

    let started = Instant::now();
    let t0 = harness::now();
    let v2 = agent(&namespace, "v2", scenario.behavior, &scenario.strategy);
    let generation = set_spec(&api, &serde_json::to_value(&v2).unwrap()).await;
    let mut row = Row {
        phase: wait_moment(&client, &api, &namespace, generation, scenario.moment).await,
        ..Row::default()
    };

    // The fault.
    let fault_start = Instant::now();
    let mut outage: Option<Duration> = None;
    let mut compacted_to: Option<u64> = None;
    // When the fault ended, if not when its branch returns.
    let mut fault_over: Option<(Instant, Timestamp)> = None;
    match scenario.fault {
        Fault::None => {}
        Fault::KillApiserver(down) => {
            kill_for(&env, "kube-apiserver", down).await;
            until(Duration::from_secs(120), "kube-apiserver back", || {
                harness::apiserver_ready(&client)
            })
            .await;
            outage = Some(fault_start.elapsed());
        }
        Fault::KillEtcd(down) => {
            kill_for(&env, "etcd", down).await;
            until(Duration::from_secs(60), "etcd back", || {
                std::future::ready(harness::etcd_healthy(&env))
            })
            .await;
            until(Duration::from_secs(60), "kube-apiserver ready", || {
                harness::apiserver_ready(&client)
            })
            .await;
        }
        Fault::CompactedWatch => {
            let before = pods_resource_version(&env, &namespace);
            let errors_before = watch_errors(&controller);
            proxy.set(Mode::Stall);
            // The rollout goes on without the controller seeing it: pods are replaced.
            // Shorter than the renew deadline (10 s): the leader must keep its term, and its
            // watches, for them to be resumed rather than started afresh.
            tokio::time::sleep(Duration::from_secs(5)).await;
            let revision = harness::etcd_revision(&env);
            harness::etcd_compact(&env, revision);
            compacted_to = Some(revision);
            let answer = raw_watch(&env, &namespace, &before);
            row.notes.push(format!(
                "a pod watch from resourceVersion {before} after compacting etcd to {revision}: {}",
                if answer.contains("\"code\":410") {
                    "410 Gone"
                } else {
                    "no 410"
                }
            ));
            assert!(
                answer.contains("\"code\":410"),
                "no 410 Gone: {}",
                answer.chars().take(600).collect::<String>()
            );
            proxy.set(Mode::Pass);
            fault_over = Some((Instant::now(), harness::now()));
            let cut = proxy.cut_all();
            row.notes.push(format!("{cut} connections cut"));
            let errors_after = until_value(
                Duration::from_secs(30),
                || watch_errors(&controller),
                |after| *after > errors_before,
            )
            .await;
            row.notes.push(format!(
                "controller watch errors {errors_before} -> {errors_after}"
            ));
        }
        Fault::KillController => {
            controller.child.kill().unwrap();
            controller.child.wait().unwrap();
            let killed = controller.credential.clone();
            generation_of_process += 1;
            controller =
                harness::start_controller(&env, &server, &namespace, &lease, generation_of_process);
            row.notes.push(format!(
                "token {} killed, token {} started",
                &killed[..8.min(killed.len())],
                &controller.credential[..8.min(controller.credential.len())]
            ));
            sampler.follow(controller.metrics_port);
        }
        Fault::PartitionLeader(down) => {
            proxy.set(Mode::Stall);
            // Recovery counts from the cut: the standby must take over and go on.
            fault_over = Some((Instant::now(), harness::now()));
            tokio::time::sleep(down).await;
            // What the leader sent meanwhile is dropped with its connections, as a partition
            // drops it; then it is reachable again.
            let cut = proxy.cut_all();
            proxy.set(Mode::Pass);
            row.notes.push(format!(
                "holder after the partition: {}; {cut} connections of the old leader cut",
                lease_holder(&env, &lease)
            ));
        }
        Fault::SlowApiServer {
            latency,
            cut_every,
            lasting,
        } => {
            proxy.set(Mode::Slow { latency, cut_every });
            tokio::time::sleep(lasting).await;
            proxy.set(Mode::Pass);
            let (accepted, cut) = proxy.counts();
            row.notes
                .push(format!("{accepted} connections accepted, {cut} cut"));
        }
    }
    let (fault_end, t_end) = fault_over.unwrap_or_else(|| (Instant::now(), harness::now()));

    // The outcome.
    let (outcome, failed_at) = wait_outcome(&api, generation, Duration::from_secs(300)).await;
    row.outcome = outcome;
    row.makespan = started.elapsed();
    // The last writes reach the audit log.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after_outcome = Instant::now();

    // Recovery: the first write the server records after the fault ended.
    let everything = audit::read(&env.audit_log, harness::CONTROLLER_USER);
    let requests = audit::since(&everything, t0);
    let ours: Vec<&audit::Request> = requests
        .iter()
        .filter(|r| of_the_scenario(r, &namespace, &lease))
        .collect();
    let first_write = ours
        .iter()
        .filter(|r| r.successful_write() && r.namespace == namespace && r.resource != "events")
        .filter(|r| r.received >= t_end)
        .map(|r| r.received)
        .min();
    // A rollout that ended while the fault lasted needed no recovery.
    let ended_during_fault = phase(&api, NAME, generation).await.as_deref()
        == Some(scenario.expected)
        && first_write.is_none()
        && row.makespan <= fault_end.duration_since(started);
    row.recovery = match scenario.fault {
        Fault::None => Some(Duration::ZERO),
        _ if ended_during_fault => {
            row.notes
                .push("the rollout ended while the fault lasted".to_owned());
            Some(Duration::ZERO)
        }
        _ => first_write.map(|at| Duration::try_from(at.duration_since(t_end)).unwrap_or_default()),
    };

    // The probes.
    judge_probes(
        &mut row,
        &sampler,
        fault_start,
        fault_end,
        after_outcome,
        outage,
    );
    let (ready, _) = harness::probe(controller.metrics_port, "/readyz");
    let (alive, _) = harness::probe(controller.metrics_port, "/healthz");
    if ready != 200 || alive != 200 {
        row.probes_ok = false;
        row.probes
            .push(format!("at the end readyz {ready}, healthz {alive}"));
    }

    // The audit-log invariants.
    let mine: Vec<audit::Request> = ours.into_iter().cloned().collect();
    let writes = audit::daemon_set_writes(&mine, &namespace, NAME).len();
    row.invariants.push((
        format!(
            "DaemonSet writes {writes} <= {}",
            scenario.daemon_set_writes
        ),
        writes <= scenario.daemon_set_writes,
    ));
    // On the whole record (the Lease was taken before the rollout), the rollout's writes.
    let whole: Vec<audit::Request> = everything
        .iter()
        .filter(|r| of_the_scenario(r, &namespace, &lease))
        .cloned()
        .collect();
    let unleased: Vec<&audit::Request> = audit::writes_without_the_lease(
        &whole,
        harness::CONTROLLER_NAMESPACE,
        &lease,
        harness::LEASE_DURATION,
    )
    .into_iter()
    .filter(|r| r.received >= t0)
    .collect();
    row.invariants.push((
        format!("writes without the Lease: {}", unleased.len()),
        unleased.is_empty(),
    ));
    if let (Some(budget), Some(readiness)) = (scenario.budget, &readiness) {
        let deletions = audit::pod_deletions(&mine, &namespace);
        let most = readiness.most_down(&deletions);
        row.invariants.push((
            format!(
                "{} pods deleted, at most {most} nodes down <= {budget}",
                deletions.len()
            ),
            most <= budget && deletions.len() <= 10,
        ));
    }
    if let Some(compacted) = compacted_to {
        let resumed = mine.iter().find(|r| {
            r.verb == "watch"
                && r.resource == "pods"
                && r.received >= t_end
                && r.resource_version().is_some_and(|rv| rv < compacted)
        });
        row.invariants.push((
            match resumed {
                Some(r) => format!(
                    "the controller's pod watch resumed from resourceVersion {} (compacted to {compacted}): 410, then a list",
                    r.resource_version().unwrap_or_default()
                ),
                None => format!("no pod watch of the controller resumed from before {compacted}"),
            },
            resumed.is_some(),
        ));
    }
    if let Some(failed_at) = failed_at {
        let late = audit::writes_after(&mine, failed_at);
        row.invariants.push((
            format!("writes after the failure: {}", late.len()),
            late.is_empty(),
        ));
    }

    let passed = row.outcome == scenario.expected
        && row.recovery.is_some_and(|r| r <= RECOVERY_BOUND)
        && row.probes_ok
        && row.invariants.iter().all(|(_, held)| *held);
    let held = row.invariants.iter().filter(|(_, h)| *h).count();
    let line = serde_json::json!({
        "scenario": scenario.name,
        "fault": scenario.fault.describe(),
        "phase": row.phase,
        "outcome": row.outcome,
        "expected": scenario.expected,
        "recovery_s": row.recovery.map(|r| (r.as_secs_f64() * 10.0).round() / 10.0),
        "makespan_s": (row.makespan.as_secs_f64() * 10.0).round() / 10.0,
        "probes": if row.probes_ok { format!("truthful: {}", row.probes.join("; ")) } else { format!("WRONG: {}", row.probes.join("; ")) },
        "invariants": format!("{held}/{} held: {}", row.invariants.len(), row.invariants.iter().map(|(what, held)| if *held { what.clone() } else { format!("VIOLATED {what}") }).collect::<Vec<_>>().join("; ")),
        "notes": row.notes,
        "passed": passed,
    });
    eprintln!("chaos row: {line:#}");
    env.record(&line);
    drop(readiness);
    drop(sampler);
    stop(controller);
    if let Some((standby, _proxy)) = standby {
        stop(standby);
    }
    let _ = std::process::Command::new(&env.kubectl)
        .arg("--kubeconfig")
        .arg(&env.kubeconfig)
        .args(["delete", "namespace", &namespace, "--wait=false"])
        .output();
    assert!(passed, "the row did not pass: {line:#}");
}

/// SIGTERM, as Kubernetes stops a pod; the process releases its Lease.
fn stop(mut controller: harness::Controller) {
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &controller.child.id().to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(15);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = controller.child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The probes' story: see the module docs.
fn judge_probes(
    row: &mut Row,
    sampler: &Sampler,
    fault_start: Instant,
    fault_end: Instant,
    end: Instant,
    outage: Option<Duration>,
) {
    row.probes_ok = true;
    let samples = sampler.between(fault_start, end);
    let lied_alive: Vec<&harness::Sample> = samples.iter().filter(|s| s.healthz == 503).collect();
    if let Some(first) = lied_alive.first() {
        row.probes_ok = false;
        row.probes.push(format!(
            "healthz 503 at +{:.1} s: {}",
            first.at.duration_since(fault_start).as_secs_f64(),
            first.healthz_body
        ));
    } else {
        row.probes.push("healthz 200 throughout".to_owned());
    }
    if let Some(outage) = outage.filter(|o| *o > Duration::from_secs(40)) {
        let not_ready = samples
            .iter()
            .filter(|s| s.at <= fault_end + Duration::from_secs(5))
            .find(|s| s.readyz == 503);
        match not_ready {
            Some(sample) => row.probes.push(format!(
                "readyz 503 from +{:.0} s of a {:.0} s outage ({})",
                sample.at.duration_since(fault_start).as_secs_f64(),
                outage.as_secs_f64(),
                sample.readyz_body
            )),
            None => {
                row.probes_ok = false;
                row.probes.push(format!(
                    "readyz never 503 in a {:.0} s outage",
                    outage.as_secs_f64()
                ));
            }
        }
    }
    let ready_again = samples
        .iter()
        .filter(|s| s.at >= fault_end)
        .find(|s| s.readyz == 200);
    match ready_again {
        Some(sample) if sample.at.duration_since(fault_end) <= Duration::from_secs(30) => {
            row.probes.push(format!(
                "readyz 200 {:.1} s after the fault",
                sample.at.duration_since(fault_end).as_secs_f64()
            ));
        }
        other => {
            row.probes_ok = false;
            row.probes.push(format!(
                "readyz not 200 within 30 s of the fault's end ({:?})",
                other.map(|s| s.at.duration_since(fault_end))
            ));
        }
    }
}

async fn wait_ready(controller: &harness::Controller, within: Duration) {
    let port = controller.metrics_port;
    eventually(within, "the controller is not ready", async || {
        let probe = tokio::task::spawn_blocking(move || harness::probe(port, "/readyz"));
        match probe.await.unwrap() {
            (200, _) => Ok(()),
            _ => Err(Said(harness::tail(&controller.log, 30))),
        }
    })
    .await;
}

/// Whether `request` is of the scenario: in its namespace, or on its Lease (or creating one).
fn of_the_scenario(request: &audit::Request, namespace: &str, lease: &str) -> bool {
    request.namespace == namespace
        || request.namespace == harness::CONTROLLER_NAMESPACE
            && request.resource == "leases"
            && (request.name == lease || request.verb == "create")
}

/// Kills the control plane's component `name`, keeps it down for `down`, and lets it start
/// again.
async fn kill_for(env: &Env, name: &'static str, down: Duration) {
    let component = component(env, name);
    component.kill_and_hold();
    tokio::time::sleep(down).await;
    component.release();
}

/// Creates the healthy v1 of the agent with `strategy` and waits (180 s at most) until the
/// controller has rolled it out.
async fn install_v1(
    api: &Api<CanaryDaemonSet>,
    namespace: &str,
    strategy: &serde_json::Value,
    controller: &harness::Controller,
) {
    let v1 = agent(namespace, "v1", "healthy", strategy);
    let created = api.create(&PostParams::default(), &v1).await.unwrap();
    let within = Duration::from_secs(180);
    wait_end(
        api,
        created.metadata.generation,
        "successful",
        within,
        controller,
    )
    .await;
}

/// Waits until the status of `generation` is `wanted` (fails on the other final phase).
async fn wait_end(
    api: &Api<CanaryDaemonSet>,
    generation: Option<i64>,
    wanted: &str,
    within: Duration,
    controller: &harness::Controller,
) {
    eventually(within, &format!("not {wanted}"), async || {
        let now = phase(api, NAME, generation).await;
        if now.as_deref() == Some(wanted) {
            Ok(())
        } else {
            let log = harness::tail(&controller.log, 30);
            Err(Said(format!("{now:?}\n{log}")))
        }
    })
    .await;
}

/// Waits for the rollout's final phase; returns it (or `stuck in <phase>`) and, for `failed`,
/// when it was first seen.
async fn wait_outcome(
    api: &Api<CanaryDaemonSet>,
    generation: Option<i64>,
    within: Duration,
) -> (String, Option<Timestamp>) {
    let deadline = Instant::now() + within;
    let mut last = None;
    loop {
        let now = phase(api, NAME, generation).await;
        match now.as_deref() {
            Some("successful") => return ("successful".to_owned(), None),
            Some("failed") => return ("failed".to_owned(), Some(harness::now())),
            _ => {}
        }
        if now.is_some() {
            last = now;
        }
        if Instant::now() > deadline {
            return (
                format!("stuck in {}", last.unwrap_or_else(|| "?".to_owned())),
                None,
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits for the scenario's moment; returns the phase the status said when it came.
async fn wait_moment(
    client: &kube::Client,
    api: &Api<CanaryDaemonSet>,
    namespace: &str,
    generation: Option<i64>,
    moment: Moment,
) -> String {
    let deadline = Instant::now() + Duration::from_secs(180);
    let daemon_sets: Api<DaemonSet> = Api::namespaced(client.clone(), namespace);
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    loop {
        let status = api.get(NAME).await.ok().and_then(|c| c.status);
        let current = status
            .as_ref()
            .filter(|s| s.observed_generation >= generation);
        let now = current
            .and_then(|s| s.phase_name())
            .unwrap_or_default()
            .to_owned();
        let reached = match moment {
            Moment::Phase(wanted) => now == wanted,
            Moment::Widened => daemon_sets
                .get(NAME)
                .await
                .ok()
                .and_then(|ds| ds.spec?.update_strategy?.rolling_update?.max_unavailable)
                .is_some_and(|m| {
                    m == k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(
                        "50%".into(),
                    )
                }),
            Moment::PodsStep(step) => {
                let in_step = current.is_some_and(|s| s.current_step_index == Some(step));
                let terminating = pods
                    .list(&Default::default())
                    .await
                    .map(|l| {
                        l.items
                            .iter()
                            .filter(|p| p.metadata.deletion_timestamp.is_some())
                            .count()
                    })
                    .unwrap_or(0);
                in_step && terminating > 0
            }
        };
        if reached {
            return match moment {
                Moment::Phase(_) => now,
                Moment::Widened => format!("increasing (the widening written; status {now})"),
                Moment::PodsStep(step) => {
                    format!("Pods driver step {step} ({now}, pods being replaced)")
                }
            };
        }
        assert!(
            Instant::now() < deadline,
            "the rollout never reached {moment:?}: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn until<F, Fut>(within: Duration, what: &str, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    while !done().await {
        assert!(Instant::now() < deadline, "{what}: not after {within:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn until_value<T>(
    within: Duration,
    mut value: impl FnMut() -> T,
    done: impl Fn(&T) -> bool,
) -> T {
    let deadline = Instant::now() + within;
    loop {
        let now = value();
        if done(&now) || Instant::now() > deadline {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The controller's `canary_watch_errors_total`.
fn watch_errors(controller: &harness::Controller) -> u64 {
    let (_, body) = harness::probe(controller.metrics_port, "/metrics");
    body.lines()
        .find_map(|line| line.strip_prefix("canary_watch_errors_total "))
        .and_then(|value| value.trim().parse::<f64>().ok())
        .map_or(0, |value| value as u64)
}

/// The holder of the Lease `lease` (empty when none).
fn lease_holder(env: &Env, lease: &str) -> String {
    let output = std::process::Command::new(&env.kubectl)
        .arg("--kubeconfig")
        .arg(&env.kubeconfig)
        .args([
            "get",
            "lease",
            lease,
            "-n",
            harness::CONTROLLER_NAMESPACE,
            "-o",
            "jsonpath={.spec.holderIdentity}",
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

/// The resourceVersion of a list of the namespace's pods.
fn pods_resource_version(env: &Env, namespace: &str) -> String {
    // `kubectl get` prints a list of its own, without the server's resourceVersion.
    let list: serde_json::Value = serde_json::from_str(&env.kubectl(&[
        "get",
        "--raw",
        &format!("/api/v1/namespaces/{namespace}/pods?limit=1"),
    ]))
    .unwrap();
    list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// What a pod watch from `resource_version` answers within a few seconds.
fn raw_watch(env: &Env, namespace: &str, resource_version: &str) -> String {
    let output = std::process::Command::new("timeout")
        .arg("5")
        .arg(&env.kubectl)
        .arg("--kubeconfig")
        .arg(&env.kubeconfig)
        .args([
            "get",
            "--raw",
            &format!(
                "/api/v1/namespaces/{namespace}/pods?watch=1&resourceVersion={resource_version}"
            ),
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A pod's readiness changed: when, its node, its name, whether it is ready now.
type Readiness = (Timestamp, String, String, bool);

/// The namespace's pods as the server announces them: when each became ready, on which node.
struct ReadinessLog {
    /// pod name -> node.
    nodes: std::sync::Arc<std::sync::Mutex<BTreeMap<String, String>>>,
    changes: std::sync::Arc<std::sync::Mutex<Vec<Readiness>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ReadinessLog {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ReadinessLog {
    fn start(client: kube::Client, namespace: &str) -> Self {
        let pods: Api<Pod> = Api::namespaced(client, namespace);
        let nodes = std::sync::Arc::new(std::sync::Mutex::new(BTreeMap::new()));
        let changes = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (into_nodes, into_changes) = (nodes.clone(), changes.clone());
        let task = tokio::spawn(async move {
            let mut ready_now: BTreeMap<String, bool> = BTreeMap::new();
            let mut stream = watcher(pods, watcher::Config::default()).boxed();
            while let Some(event) = stream.next().await {
                let pod = match event {
                    Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) => pod,
                    _ => continue,
                };
                let name = pod.metadata.name.clone().unwrap_or_default();
                let node = pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.node_name.clone())
                    .unwrap_or_default();
                let ready = pod.metadata.deletion_timestamp.is_none()
                    && pod
                        .status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|c| {
                            c.iter().any(|c| c.type_ == "Ready" && c.status == "True")
                        });
                into_nodes
                    .lock()
                    .unwrap()
                    .insert(name.clone(), node.clone());
                if ready_now.insert(name.clone(), ready) != Some(ready) {
                    into_changes
                        .lock()
                        .unwrap()
                        .push((harness::now(), node, name, ready));
                }
            }
        });
        Self {
            nodes,
            changes,
            task,
        }
    }

    /// The most nodes down at a deletion: a node is down from the deletion of its pod until a
    /// pod on it is ready again. A readiness the log saw up to 1 s after a deletion counts as
    /// before it (the controller saw it first: it decided on it).
    fn most_down(&self, deletions: &[&audit::Request]) -> usize {
        let nodes = self.nodes.lock().unwrap().clone();
        let changes = self.changes.lock().unwrap().clone();
        let slack = k8s_openapi::jiff::SignedDuration::from_secs(1);
        // Node -> when its pod was deleted, and which pod.
        let mut down: BTreeMap<String, (Timestamp, String)> = BTreeMap::new();
        let mut most = 0;
        for deletion in deletions {
            let Some(node) = nodes.get(&deletion.name) else {
                continue;
            };
            // A node is up again once another pod on it was ready after the deletion.
            down.retain(|on, (deleted_at, deleted)| {
                !changes.iter().any(|(at, pod_node, pod, ready)| {
                    pod_node == on
                        && *ready
                        && pod != deleted
                        && at > deleted_at
                        && *at <= deletion.received + slack
                })
            });
            down.insert(node.clone(), (deletion.received, deletion.name.clone()));
            most = most.max(down.len());
        }
        most
    }
}

fn scenario(name: &'static str, fault: Fault, moment: Moment) -> Scenario {
    Scenario {
        name,
        fault,
        moment,
        strategy: fast_strategy(),
        behavior: "slow-start=6s",
        expected: "successful",
        // Start, the canary soak's hold (spec.health.canarySoak), widen, revert.
        daemon_set_writes: 4,
        budget: None,
    }
}

/// One chaos test per scenario: the test's name (`cargo xtask chaos` runs each by it) and its
/// [`Scenario`].
macro_rules! chaos_tests {
    ($($test:ident => $scenario:expr;)*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        #[ignore = "chaos: run with `cargo xtask chaos`"]
        async fn $test() {
            run($scenario).await;
        }
    )*};
}

chaos_tests! {
    chaos_01_baseline_without_a_fault =>
        scenario("baseline", Fault::None, Moment::Phase("canary"));
    chaos_02_kube_apiserver_killed_mid_rollout =>
        scenario("apiserver", Fault::KillApiserver(secs(45)), Moment::Phase("canary"));
    chaos_03_etcd_killed_mid_rollout =>
        scenario("etcd", Fault::KillEtcd(secs(20)), Moment::Phase("waiting"));
    chaos_04_a_watch_resumed_past_compaction_gets_410 =>
        scenario("compaction", Fault::CompactedWatch, Moment::Phase("waiting"));
    chaos_05_controller_killed_in_canary =>
        scenario("kill-canary", Fault::KillController, Moment::Phase("canary"));
    chaos_06_controller_killed_when_increasing =>
        scenario("kill-increasing", Fault::KillController, Moment::Widened);
    chaos_07_controller_killed_in_waiting =>
        scenario("kill-waiting", Fault::KillController, Moment::Phase("waiting"));
    chaos_08_controller_killed_in_a_pods_driver_step => Scenario {
        strategy: pods_strategy(),
        behavior: "slow-start=3s",
        // The template (OnDelete) once; the pods are deleted, not written through it.
        daemon_set_writes: 1,
        budget: Some(3),
        ..scenario("kill-pods-step", Fault::KillController, Moment::PodsStep(1))
    };
    chaos_09_controller_killed_with_a_crash_looping_canary => Scenario {
        behavior: "crashloop",
        expected: "failed",
        // The template at the canary value and the soak's hold (which stops the DaemonSet
        // controller too), nothing after the failure.
        daemon_set_writes: 2,
        ..scenario("kill-failing", Fault::KillController, Moment::Phase("canary"))
    };
    chaos_10_slow_and_lossy_api_server => scenario(
        "slow",
        Fault::SlowApiServer {
            latency: Duration::from_millis(300),
            cut_every: secs(4),
            lasting: secs(15),
        },
        Moment::Phase("canary"),
    );
}

/// `n` seconds.
const fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// Figures of one rollout, from the server's own record (the audit log of kube-apiserver, or of
/// `sim serve --audit-log`).
#[derive(Debug, Default, serde::Serialize)]
struct Measures {
    /// From the spec change to `successful`, as the harness saw it.
    makespan_s: f64,
    /// From the spec change to the controller's first DaemonSet write.
    first_daemon_set_write_s: f64,
    daemon_set_writes: usize,
    pod_deletions: usize,
    status_writes: usize,
    events: usize,
    lease_writes: usize,
    /// Every request of the controller in the rollout, by verb.
    requests: BTreeMap<String, usize>,
}

fn measure(
    requests: &[audit::Request],
    namespace: &str,
    t0: Timestamp,
    makespan: Duration,
) -> Measures {
    let rollout = audit::since(requests, t0);
    let seconds = |at: Timestamp| {
        Duration::try_from(at.duration_since(t0))
            .unwrap_or_default()
            .as_secs_f64()
    };
    let daemon_set_writes = audit::daemon_set_writes(&rollout, namespace, NAME);
    let mut by_verb = BTreeMap::new();
    for request in &rollout {
        *by_verb.entry(request.verb.clone()).or_insert(0) += 1;
    }
    let round = |s: f64| (s * 10.0).round() / 10.0;
    Measures {
        makespan_s: round(makespan.as_secs_f64()),
        first_daemon_set_write_s: round(
            daemon_set_writes
                .first()
                .map_or(0.0, |w| seconds(w.received)),
        ),
        daemon_set_writes: daemon_set_writes.len(),
        pod_deletions: audit::pod_deletions(&rollout, namespace).len(),
        status_writes: rollout
            .iter()
            .filter(|r| {
                r.successful_write()
                    && r.resource == "canarydaemonsets"
                    && r.subresource == "status"
            })
            .count(),
        events: rollout
            .iter()
            .filter(|r| r.successful_write() && r.resource == "events")
            .count(),
        lease_writes: rollout
            .iter()
            .filter(|r| r.successful_write() && r.resource == "leases")
            .count(),
        requests: by_verb,
    }
}

/// The fidelity scenario's rollout: v1 installed, then v2 (`slow-start=6s`) with `strategy`,
/// through `client`, with the controller `controller` already running; returns when it is
/// `successful`, with its makespan and the moment of the spec change.
async fn fidelity_rollout(
    client: &kube::Client,
    namespace: &str,
    controller: &harness::Controller,
    strategy: &serde_json::Value,
) -> (Duration, Timestamp) {
    let api: Api<CanaryDaemonSet> = Api::namespaced(client.clone(), namespace);
    install_v1(&api, namespace, strategy, controller).await;
    let v2 = agent(namespace, "v2", "slow-start=6s", strategy);
    let started = Instant::now();
    let t0 = harness::now();
    let generation = set_spec(&api, &serde_json::to_value(&v2).unwrap()).await;
    wait_end(
        &api,
        generation,
        "successful",
        Duration::from_secs(300),
        controller,
    )
    .await;
    (started.elapsed(), t0)
}

/// canary-sim beside the real control plane (issue 48, docs/simulator.md "Fidelity"): the same
/// rollout, the same controller binary and flags, the same pod timings (KWOK's Stages and the
/// kubelet model both at 1 s to start and 1 s to be ready), each counted from its server's own
/// audit log. The controller's decisions (its DaemonSet writes) must agree; the rest is
/// reported.
async fn fidelity(label: &str, strategy: serde_json::Value) {
    let env = Env::from_environment();
    let pid = std::process::id();

    // The real control plane.
    let client = env.client().await;
    let namespace = format!("chaos-fidelity-{label}-{pid}").to_lowercase();
    let lease = namespace.clone();
    harness::namespace(&env, &client, &namespace).await;
    let controller = harness::start_controller(&env, &env.apiserver, &namespace, &lease, 0);
    wait_ready(&controller, Duration::from_secs(60)).await;
    let (makespan, t0) = fidelity_rollout(&client, &namespace, &controller, &strategy).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let recorded: Vec<audit::Request> = audit::read(&env.audit_log, harness::CONTROLLER_USER)
        .into_iter()
        .filter(|r| {
            r.namespace == namespace
                || r.namespace == harness::CONTROLLER_NAMESPACE
                    && r.resource == "leases"
                    && r.name == lease
        })
        .collect();
    let real = measure(&recorded, &namespace, t0, makespan);
    stop(controller);

    // sim serve, in a process, with its audit log.
    let dir = env.run_dir.join(&namespace);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    let audit_log = dir.join("audit.log");
    let sim = std::process::Command::new(&env.binary)
        .args([
            "sim",
            "serve",
            "--nodes",
            &chaos_nodes().to_string(),
            "--kubeconfig",
        ])
        .arg(&kubeconfig)
        .arg("--audit-log")
        .arg(&audit_log)
        .args(["--start-delay-ms", "1000", "--ready-delay-ms", "1000"])
        .stderr(std::fs::File::create(dir.join("sim.log")).unwrap())
        .spawn()
        .unwrap();
    let _sim = support::KillOnDrop(sim);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !kubeconfig.exists() {
        assert!(Instant::now() < deadline, "sim serve wrote no kubeconfig");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The harness's own requests carry a User-Agent of their own (kube-rs sends none).
    let file = kube::config::Kubeconfig::read_from(&kubeconfig).unwrap();
    let mut config =
        kube::Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default())
            .await
            .unwrap();
    config.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_static(HARNESS_AGENT),
    ));
    let sim_client = kube::Client::try_from(config).unwrap();
    support::install_crd(&sim_client).await;
    let namespace_object: k8s_openapi::api::core::v1::Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": namespace}})).unwrap();
    Api::<k8s_openapi::api::core::v1::Namespace>::all(sim_client.clone())
        .create(&PostParams::default(), &namespace_object)
        .await
        .unwrap();
    let sim_controller = harness::start_sim_controller(&env, &kubeconfig, &namespace, &lease);
    wait_ready(&sim_controller, Duration::from_secs(60)).await;
    let (makespan, t0) =
        fidelity_rollout(&sim_client, &namespace, &sim_controller, &strategy).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let recorded = audit::read_where(&audit_log, |event| {
        let agent = event["userAgent"].as_str().unwrap_or_default();
        agent != HARNESS_AGENT && !agent.starts_with("kubectl")
    })
    .into_iter()
    .filter(|r| r.namespace == namespace || r.resource == "leases" && r.name == lease)
    .collect::<Vec<_>>();
    let sim_measures = measure(&recorded, &namespace, t0, makespan);
    stop(sim_controller);

    let line = serde_json::json!({
        "fidelity": true,
        "scenario": format!("fidelity {label}"),
        "rollout": label,
        "nodes": chaos_nodes(),
        "real": real,
        "sim": sim_measures,
        "passed": real.daemon_set_writes == sim_measures.daemon_set_writes,
    });
    eprintln!("fidelity: {line:#}");
    env.record(&line);
    let _ = std::process::Command::new(&env.kubectl)
        .arg("--kubeconfig")
        .arg(&env.kubeconfig)
        .args(["delete", "namespace", &namespace, "--wait=false"])
        .output();
    assert_eq!(
        real.daemon_set_writes, sim_measures.daemon_set_writes,
        "the controller decided otherwise on canary-sim: {line:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "chaos: run with `cargo xtask chaos`"]
async fn chaos_00_fidelity_max_unavailable_rollout_on_sim_serve_and_the_real_control_plane() {
    fidelity("MaxUnavailable", fast_strategy()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "chaos: run with `cargo xtask chaos`"]
async fn chaos_00_fidelity_pods_driver_rollout_on_sim_serve_and_the_real_control_plane() {
    fidelity("Pods", pods_strategy()).await;
}

/// The User-Agent of the harness's own requests to `sim serve`.
const HARNESS_AGENT: &str = "chaos-harness";

/// The chaos cluster's nodes (`cargo xtask chaos`).
fn chaos_nodes() -> u32 {
    10
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "chaos: run with `cargo xtask chaos`"]
async fn chaos_11_the_leader_cut_off_and_back_with_a_standby() {
    run(scenario(
        "partition",
        Fault::PartitionLeader(Duration::from_secs(25)),
        Moment::Phase("canary"),
    ))
    .await;
}
