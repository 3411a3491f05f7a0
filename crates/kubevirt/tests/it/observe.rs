//! Observe mode against canary-sim, with a stand-in virt-operator making the reference writes:
//! the phase sequence the observer derives from outside must be the one the stand-in went
//! through, and the observer must make no write request at all.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::standin::{HANDLER, NAMESPACE, StandIn, distinct};
use canary_kube_adapter::clock::Clock;
use canary_kube_adapter::{Observer, Transition};
use canary_kubevirt::{self as kubevirt, ObserveConfig, ObserveError, Snapshot};
use canary_sim::Sim;
use canary_state_machine::{Decision, LiveMaxUnavailable, Phase};
use k8s_openapi::jiff::Timestamp;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

const NODES: u32 = 20;
/// virt-operator re-syncs on every event; once a second is enough for the stand-in.
const STANDIN_PERIOD: Duration = Duration::from_secs(1);
const MAX_PASSES: usize = 3_000;

struct Running {
    sim: Sim,
    observer: Observer,
    standin: StandIn,
    observed: Arc<Mutex<Vec<Transition>>>,
    snapshot: watch::Receiver<Snapshot>,
    stop: oneshot::Sender<()>,
    task: JoinHandle<Result<(), ObserveError>>,
}

/// [`installed_and_observed`], then KubeVirt upgraded to `version` whose pods behave as
/// `behavior` says.
async fn upgrading(version: &str, behavior: &str) -> Running {
    let mut running = installed_and_observed().await;
    running.standin.upgrade(version, behavior).await;
    running
}

/// virt-handler installed at v1 on every node, then the observer started and synced.
async fn installed_and_observed() -> Running {
    let sim = Sim::builder().nodes(NODES).seed(11).build().unwrap();
    let mut standin = StandIn::new(&sim.client());
    standin.install("v1").await;
    sim.cluster().wait_idle().await.unwrap();

    let observer = Observer::default();
    let mut transitions = observer.subscribe();
    let observed = Arc::new(Mutex::new(Vec::new()));
    let sink = observed.clone();
    tokio::spawn(async move {
        while let Ok(transition) = transitions.recv().await {
            sink.lock().unwrap().push(transition);
        }
    });
    let config = ObserveConfig {
        observer: observer.clone(),
        clock: Clock::tokio_virtual(Timestamp::UNIX_EPOCH),
        ..ObserveConfig::default()
    };
    let mut snapshot = config.snapshot.subscribe();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(kubevirt::run(sim.client(), config, async {
        let _ = stopped.await;
    }));
    tokio::time::timeout(Duration::from_secs(60), snapshot.wait_for(|s| s.synced))
        .await
        .expect("caches sync")
        .unwrap();
    // The resting state, as the stand-in sees it.
    assert!(standin.sync().await.action.quiet);
    Running {
        sim,
        observer,
        standin,
        observed,
        snapshot,
        stop,
        task,
    }
}

impl Running {
    /// Runs the stand-in once a second until `done` says so.
    async fn drive(&mut self, mut done: impl FnMut(&Decision, &[Phase]) -> bool) {
        for _ in 0..MAX_PASSES {
            tokio::time::sleep(STANDIN_PERIOD).await;
            let decision = self.standin.sync().await;
            if done(&decision, &self.standin.phases) {
                return;
            }
        }
        panic!(
            "no end after {MAX_PASSES} passes: {:?}",
            distinct(self.standin.phases.clone())
        );
    }

    /// Lets the observer catch up, stops it and returns the phases it reported.
    async fn finish(self) -> Finished {
        tokio::time::sleep(Duration::from_secs(5)).await;
        let snapshot = self.snapshot.borrow().clone();
        self.stop.send(()).unwrap();
        self.task.await.unwrap().unwrap();
        let observed = self.observed.lock().unwrap().clone();
        Finished {
            requests: self.sim.requests(),
            standin: self.standin,
            observed,
            snapshot,
        }
    }
}

struct Finished {
    requests: canary_sim::RequestCounts,
    standin: StandIn,
    observed: Vec<Transition>,
    snapshot: Snapshot,
}

impl Finished {
    fn observed_phases(&self) -> Vec<Phase> {
        distinct(self.observed.iter().map(|t| t.to))
    }

    /// The checks every scenario shares.
    fn assert_matches(&self, expected: &[Phase]) {
        assert_eq!(
            distinct(self.standin.phases.clone()),
            expected,
            "the stand-in's own path"
        );
        assert_eq!(
            self.observed_phases(),
            expected,
            "observed path; transitions: {:#?}",
            self.observed
        );
        assert_eq!(
            self.requests.writes(),
            self.standin.writes,
            "every write request is the stand-in's: the observer wrote nothing ({:?})",
            self.requests.iter().collect::<Vec<_>>()
        );
        assert_eq!(
            self.requests.writes_to("daemonsets"),
            self.standin.daemon_set_writes
        );
        assert!(self.observed.iter().all(|t| t.write.is_none()));
        assert!(
            self.observed
                .iter()
                .all(|t| t.namespace == NAMESPACE && t.daemon_set == HANDLER)
        );
        assert!(self.snapshot.synced && self.snapshot.passes > 0);
    }
}

#[tokio::test(start_paused = true)]
async fn a_healthy_upgrade_is_observed_phase_by_phase() {
    let mut running = upgrading("v2", "healthy").await;
    running.drive(|decision, _| decision.action.quiet).await;
    let finished = running.finish().await;
    use Phase::*;
    finished.assert_matches(&[Successful, Started, Canary, Increasing, Waiting, Successful]);
    assert_eq!(
        finished.standin.daemon_set_writes, 4,
        "create, then start, widen, finish"
    );
    let last = finished.observed.last().unwrap();
    assert_eq!(
        (last.desired, last.updated, last.updated_ready),
        (NODES, NODES, NODES)
    );
    assert_eq!(last.max_unavailable, Some(LiveMaxUnavailable::Int(1)));
    let widest = finished
        .observed
        .iter()
        .filter_map(|t| t.max_unavailable.as_ref())
        .any(|value| value.to_string() == "10%");
    assert!(widest, "the 10% step was observed");
    assert_eq!(finished.snapshot.kubevirts[0].target_version, "v2");
    assert_eq!(finished.snapshot.daemon_sets[0].phase, Successful);
}

#[tokio::test(start_paused = true)]
async fn a_crash_looping_canary_is_observed_as_failed() {
    let mut running = upgrading("v2", "crashloop").await;
    running
        .drive(|_, phases| phases.iter().rev().take(3).all(|p| *p == Phase::Failed))
        .await;
    let finished = running.finish().await;
    use Phase::*;
    finished.assert_matches(&[Successful, Started, Canary, Failed]);
    assert_eq!(
        finished.standin.daemon_set_writes, 2,
        "create and start only: no widening"
    );
    let failed = finished.observed.iter().find(|t| t.to == Failed).unwrap();
    assert_eq!(
        failed.failure,
        Some(canary_state_machine::FailureReason::CanaryCrashLooping)
    );
    assert_eq!(failed.updated_ready, 0);
    assert_eq!(finished.snapshot.daemon_sets[0].phase, Failed);
}

#[tokio::test(start_paused = true)]
async fn an_upgrade_interrupted_by_a_second_version_is_observed_twice() {
    let mut running = upgrading("v2", "healthy").await;
    running
        .drive(|decision, _| decision.phase == Phase::Waiting)
        .await;
    running.standin.upgrade("v3", "healthy").await;
    running.drive(|decision, _| decision.action.quiet).await;
    let finished = running.finish().await;
    use Phase::*;
    finished.assert_matches(&[
        Successful, Started, Canary, Increasing, Waiting, Started, Canary, Increasing, Waiting,
        Successful,
    ]);
    assert_eq!(
        finished.standin.daemon_set_writes, 6,
        "create, start, widen, start, widen, finish"
    );
    assert_eq!(finished.snapshot.kubevirts[0].target_version, "v3");
}

#[tokio::test(start_paused = true)]
async fn the_observer_alone_reads_and_never_writes() {
    let running = installed_and_observed().await;
    running.sim.faults().reset_requests();
    tokio::time::sleep(Duration::from_secs(30)).await;
    let requests = running.sim.requests();
    let finished = running.finish().await;
    assert_eq!(
        requests.writes(),
        0,
        "{:?}",
        requests.iter().collect::<Vec<_>>()
    );
    assert_eq!(finished.observed_phases(), [Phase::Successful]);
}

/// Watches that break and resume with 410 Gone are counted and retried; the upgrade is still
/// observed to its end.
#[tokio::test(start_paused = true)]
async fn broken_watches_are_counted_and_the_upgrade_still_observed() {
    use canary_sim::{FaultAction, FaultRule, Trigger, Verb};
    let mut running = installed_and_observed().await;
    let faults = running.sim.faults();
    faults.add(FaultRule::new(
        Some(Verb::Watch),
        Some("pods"),
        FaultAction::EndWatchAfterEvents(10),
    ));
    faults.add(
        FaultRule::new(Some(Verb::Watch), Some("pods"), FaultAction::GoneOnResume)
            .when(Trigger::Nth(2)),
    );
    // The pod watch opened before the faults ends at its timeout.
    tokio::time::sleep(Duration::from_secs(300)).await;
    running.standin.upgrade("v2", "healthy").await;
    running.drive(|decision, _| decision.action.quiet).await;
    let errors = running.observer.stats().watch_errors();
    let finished = running.finish().await;
    assert!(errors >= 1, "the 410 Gone was counted");
    assert_eq!(finished.observed_phases().last(), Some(&Phase::Successful));
    assert_eq!(finished.snapshot.kubevirts[0].target_version, "v2");
}

#[tokio::test(start_paused = true)]
async fn a_cluster_without_kubevirt_is_a_clear_error() {
    let sim = Sim::builder().nodes(1).kubevirt_crd(false).build().unwrap();
    let result = kubevirt::run(
        sim.client(),
        ObserveConfig::default(),
        std::future::pending(),
    )
    .await;
    assert!(
        matches!(result, Err(ObserveError::KubeVirtCrdMissing)),
        "{result:?}"
    );
    assert_eq!(sim.requests().writes(), 0);
}
