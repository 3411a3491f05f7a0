//! Rollouts in virtual time: the real controller against the in-process simulator.
//!
//! One [`Scenario`] per cluster size: install `v1`, then roll out `v2`, `v3`, … and measure each
//! rollout from the CanaryDaemonSet change to the `successful` transition, plus a quiet period
//! after it, so that a write made after success is counted against the rollout too.

#![expect(
    clippy::indexing_slicing,
    reason = "only serde_json::Value is indexed here: a missing key or index reads as Null, and \
              writes by index go to objects this module built"
)]

use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use canary_kube_adapter::CanaryDaemonSet;
use canary_kube_adapter::observer::Stats;
use canary_sim::Sim;
use canary_sim::store::StoreEvent;
use canary_state_machine::{Compatibility, Phase};
use daemonset_canary::demo::scenario::{self, Scenario, ScenarioConfig, ScenarioKind};
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{broadcast, oneshot};
use tokio::task::JoinHandle;

use crate::oracle::Recorded;
use crate::reaction::{Fact, Reaction, fact_of, reactions, recorded};

/// Virtual time kept after `successful`, to catch late writes.
const QUIET_AFTER: Duration = Duration::from_secs(60);

/// What one rollout cost and how long it took.
#[derive(Debug, Clone)]
pub struct RolloutFigures {
    /// Nodes of the cluster.
    pub nodes: u32,
    /// DaemonSet writes of the controller.
    pub daemon_set_writes: u64,
    /// Status writes of the controller.
    pub status_writes: u64,
    /// Every API request of the controller (the harness's own one patch excluded).
    pub requests: u64,
    /// Reconcile passes.
    pub reconciles: u64,
    /// Virtual time from the change to `successful`.
    pub makespan: Duration,
    /// Start, widen and finish, with their latencies.
    pub reactions: Vec<Reaction>,
    /// The controller's DaemonSet writes, for the oracle.
    pub recorded: Recorded,
    /// The version rolled out.
    pub version: String,
}

/// Counters read before and after a rollout.
#[derive(Debug, Clone, Copy)]
struct Counters {
    daemon_set_writes: u64,
    status_writes: u64,
    reconciles: u64,
    requests: u64,
}

impl Counters {
    fn read(stats: &Stats, sim: &Sim) -> Self {
        Self {
            daemon_set_writes: stats.total_daemon_set_writes(),
            status_writes: stats.status_writes(),
            reconciles: stats.reconciles(),
            requests: sim.requests().total(),
        }
    }
}

/// Runs `rollouts` successive healthy rollouts on `nodes` nodes. Call on a current-thread
/// runtime with a paused clock.
pub async fn run(nodes: u32, rollouts: u32, seed: u64) -> Result<Vec<RolloutFigures>> {
    let scenario = healthy(nodes, seed).await?;
    scenario
        .install()
        .await
        .with_context(|| format!("installing v1 on {nodes} nodes"))?;
    rounds(scenario, nodes, rollouts, one_rollout).await
}

/// The healthy scenario of both drivers' rollouts on `nodes` nodes, started.
pub async fn healthy(nodes: u32, seed: u64) -> Result<Scenario> {
    let config = ScenarioConfig {
        nodes,
        seed,
        kind: ScenarioKind::Healthy,
        ..ScenarioConfig::default()
    };
    Scenario::start(config).await
}

/// Starts a rollout with `patch`, waits for its success and then for [`QUIET_AFTER`], so that
/// a late request counts against it; the makespan, from the patch to the success.
pub async fn roll_out(
    sim: &Sim,
    patch: &serde_json::Value,
    transitions: canary_kube_adapter::observer::Transitions,
) -> Result<Duration> {
    let started = tokio::time::Instant::now();
    change(sim, patch).await?;
    wait_for(transitions).await?;
    let makespan = started.elapsed();
    tokio::time::sleep(QUIET_AFTER).await;
    Ok(makespan)
}

/// Merge-patches the benchmark's CanaryDaemonSet with `patch`: what starts a rollout.
async fn change(sim: &Sim, patch: &serde_json::Value) -> Result<()> {
    let api: Api<CanaryDaemonSet> = Api::namespaced(sim.client(), scenario::NAMESPACE);
    api.patch(
        scenario::NAME,
        &PatchParams::default(),
        &Patch::Merge(patch),
    )
    .await
    .context("cannot change the CanaryDaemonSet")?;
    Ok(())
}

/// Waits for a transition from a phase in progress to `successful`.
pub async fn wait_for(mut transitions: canary_kube_adapter::observer::Transitions) -> Result<()> {
    let deadline = Duration::from_secs(6 * 3600);
    loop {
        let transition = match tokio::time::timeout(deadline, transitions.recv()).await {
            Err(_) => bail!("no end within {deadline:?}"),
            Ok(Err(_closed)) => bail!("the controller stopped"),
            Ok(Ok(transition)) => transition,
        };
        match transition.to {
            Phase::Successful if transition.from.is_some_and(|p| p.is_in_progress()) => {
                return Ok(());
            }
            Phase::Failed => bail!("the rollout failed: {:?}", transition.failure),
            _ => {}
        }
    }
}

/// Rolls out `v2`, `v3`, ... (`rollouts` of them) one after the other on the installed
/// `scenario` with `one_rollout`, then stops the scenario: the rounds of both drivers.
pub async fn rounds<T>(
    scenario: Scenario,
    nodes: u32,
    rollouts: u32,
    one_rollout: impl AsyncFn(&Scenario, u32, &str) -> Result<T>,
) -> Result<Vec<T>> {
    let mut figures = Vec::new();
    for round in 0..rollouts {
        let version = format!("v{}", round + 2);
        figures.push(
            one_rollout(&scenario, nodes, &version)
                .await
                .with_context(|| format!("rolling out {version} on {nodes} nodes"))?,
        );
    }
    scenario.stop().await?;
    Ok(figures)
}

async fn one_rollout(scenario: &Scenario, nodes: u32, version: &str) -> Result<RolloutFigures> {
    let sim = scenario.sim();
    let stats = scenario.observer().stats();
    let transitions = scenario.observer().subscribe();
    let recorder = Recorder::start(sim.store().subscribe(), version);
    let before = Counters::read(stats, sim);

    let mut manifest = scenario::manifest(Compatibility::Fixed, version, "healthy");
    // Without the canary soak (default 30 s in `Fixed`, issue 46): the soak holds the
    // DaemonSet on `OnDelete` with a fourth write and adds its 30 s to the makespan, a wait the
    // user chooses rather than a cost of the controller. At `0s` a rollout makes the three
    // writes (start, widen, finish) whose reaction latency and oracle replay this bench
    // measures, as before issue 46 (docs/benchmarks.md); the soak's write is counted by the
    // chaos and e2e suites.
    manifest["spec"]["health"] = json!({"canarySoak": "0s"});
    let patch = json!({"spec": manifest["spec"]});
    let makespan = roll_out(sim, &patch, transitions).await?;
    let after = Counters::read(stats, sim);
    let facts = recorder.finish().await?;
    Ok(RolloutFigures {
        nodes,
        daemon_set_writes: after.daemon_set_writes - before.daemon_set_writes,
        status_writes: after.status_writes - before.status_writes,
        requests: (after.requests - before.requests).saturating_sub(1),
        reconciles: after.reconciles - before.reconciles,
        makespan,
        reactions: reactions(&facts, nodes as usize),
        recorded: recorded(&facts),
        version: version.to_owned(),
    })
}

/// Keeps what the analysis reads of every store event ([`Fact`]) from its start until
/// [`Recorder::finish`].
struct Recorder {
    stop: oneshot::Sender<()>,
    task: JoinHandle<(Vec<Fact>, u64)>,
}

impl Recorder {
    fn start(mut events: broadcast::Receiver<StoreEvent>, version: &str) -> Self {
        let (stop, mut stopped) = oneshot::channel::<()>();
        let version = version.to_owned();
        let task = tokio::spawn(async move {
            let mut kept = Vec::new();
            let mut missed = 0;
            let keep = |event: StoreEvent, kept: &mut Vec<Fact>| {
                kept.extend(fact_of(&event, scenario::NAME, &version));
            };
            loop {
                tokio::select! {
                    biased;
                    event = events.recv() => match event {
                        Ok(event) => keep(event, &mut kept),
                        Err(RecvError::Lagged(n)) => missed += n,
                        Err(RecvError::Closed) => break,
                    },
                    _ = &mut stopped => {
                        while let Ok(event) = events.try_recv() {
                            keep(event, &mut kept);
                        }
                        break;
                    }
                }
            }
            (kept, missed)
        });
        Self { stop, task }
    }

    /// The facts recorded; an error if any event was missed (the latencies would be wrong).
    async fn finish(self) -> Result<Vec<Fact>> {
        let _ = self.stop.send(());
        let (facts, missed) = self.task.await.context("the event recorder panicked")?;
        ensure!(
            missed == 0,
            "the event recorder missed {missed} store events"
        );
        Ok(facts)
    }
}
