//! Running one seed: the simulator, the real controller replicas, the scripted changes, the
//! heal, and the checks at quiescence.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use canary_kube_adapter::clock::Clock;
use canary_kube_adapter::crd::{
    ABORT_ANNOTATION, FULL_PROMOTION_PREFIX, PAUSE_ANNOTATION, PROMOTE_ANNOTATION,
    RETRY_ANNOTATION, UNDO_ANNOTATION, hold_requested,
};
use canary_kube_adapter::{CanaryDaemonSet, ControllerConfig, LeaderElection, Observer};
use canary_sim::cluster::Cluster;
use canary_sim::cluster::effects::NODE_CONDITIONS_ANNOTATION;
use canary_sim::prometheus::ERROR_RATIO_ANNOTATION;
use canary_sim::{Sim, SimPrometheus, UpdateScope};
use canary_state_machine::{Compatibility, DriftPolicy};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::checker::{
    Checker, Intent, SharedIntent, at_quiescence, cluster_counts, ended, starting_pods,
};
use super::plan::{Action, Behavior, CANARY_LABEL, Plan, TOKEN_SECRET, When, ZONE_LABEL};
use super::prometheus::{FakePrometheus, Tokens};
use super::recorder::Recorded;
use super::rng::Rng;
use super::world::{Exercised, Invariant, Violation, World};
use super::{NAME, NAMESPACE, VERSION_KEY, manifest};
use daemonset_canary::demo::prometheus::SimQueries;

/// What one seed found and exercised.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Broken invariants, in order.
    pub violations: Vec<Violation>,
    /// What was exercised.
    pub exercised: Exercised,
    /// The status phase the last rollout ended in (`None`: it did not end).
    pub end: Option<String>,
}

/// Virtual time a rollout may take after the last change or the heal, whichever is later.
fn rollout_bound(plan: &Plan) -> Duration {
    // Progress deadline (600 s) twice, plus ten 10% waves of the slowest pods (90 s start,
    // crash back-off) and the canary; with the Pods driver, the waves of its steps and their
    // pauses (an indefinite one until the harness promotes it).
    match &plan.pods {
        None => {
            let waves = u64::from(plan.nodes.min(10)) + 1;
            // A retried rollout runs again: its wait and a canary's worth of time.
            let retried = plan
                .retry_after
                .map_or(Duration::ZERO, |after| after + Duration::from_secs(240));
            let held = plan
                .max_unavailable_hold
                .map_or(Duration::ZERO, |(_, length)| length);
            Duration::from_secs(1200 + waves * 240) + retried + held
        }
        Some(pods) => Duration::from_secs(1200 + pods.waves(plan.nodes) * 240) + pods.pause_time(),
    }
}

/// How long the status must stay in its final phase to call the cluster quiescent.
const QUIET: Duration = Duration::from_secs(120);

/// How long the pod counts must stay still before the status must show them: the controller
/// writes count-only status changes at most once a second.
const COUNTS_STILL: Duration = Duration::from_secs(3);

/// Waits until the cluster's pod counts have not moved for [`COUNTS_STILL`] and no pod is on
/// its way up ([`starting_pods`]), at most ten minutes: crash-looping pods back off up to five
/// minutes between restarts.
async fn counts_settle(store: &canary_sim::Store) {
    let limit = Instant::now() + Duration::from_secs(600);
    let mut last = cluster_counts(store);
    let mut still_since = Instant::now();
    while Instant::now() < limit {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = cluster_counts(store);
        if now != last {
            last = now;
            still_since = Instant::now();
        } else if Instant::now() >= still_since + COUNTS_STILL && starting_pods(store) == 0 {
            return;
        }
    }
}

/// Requests per virtual minute above which a replica is in a hot loop.
fn hot_loop_limit(nodes: u32) -> u64 {
    1200 + 12 * u64::from(nodes)
}

struct Replica {
    identity: String,
    connection: Option<Recorded>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), canary_kube_adapter::Error>>>,
    restart_at: Option<Instant>,
    /// When the running task started.
    started_at: Instant,
    /// What the running task's `/readyz` and `/healthz` would answer (invariant 28).
    health: Option<canary_kube_adapter::Health>,
}

/// An isolation of the leader, to be judged when it ends (invariant 24).
#[derive(Debug, Clone)]
struct Isolated {
    replica: usize,
    from: Instant,
    until: Instant,
    /// Whether the replica held the Lease when it was cut off.
    leader: bool,
}

/// How long after the last renewal the other replica may take to take a lost lease over: the
/// lease duration (15 s), then its retries through the injected errors and latency.
const TAKEOVER_BOUND: Duration = Duration::from_secs(15 + 30);

struct Harness<'a> {
    plan: &'a Plan,
    sim: Sim,
    cluster: Cluster,
    world: World,
    intent: SharedIntent,
    clock: Clock,
    replicas: Vec<Replica>,
    rng: Rng,
    /// When the scenario began (the fake Prometheus' times count from it).
    start: Instant,
    /// Node changes to undo: (when, node, what).
    undo: Vec<(Instant, String, Undo)>,
    not_ready: BTreeMap<String, ()>,
    /// The bearer tokens written to [`TOKEN_SECRET`].
    tokens: Tokens,
    /// Leaders cut off, to check once reconnected.
    isolated: Vec<Isolated>,
    /// Every isolation so far, leader or not.
    isolations: Vec<Isolated>,
    /// The last hand edit: its image, when, and the desired image it replaced (`None` when
    /// the image it replaced was not the desired one: a rollout was due, which writes over the
    /// edit and ends the drift).
    last_hand_edit: Option<(String, Instant, Option<String>)>,
}

#[derive(Debug, Clone, Copy)]
enum Undo {
    Ready,
    Uncordon,
    /// The node's own condition ([`Action::NodeCondition`]) ends.
    ConditionCleared,
}

impl Harness<'_> {
    fn start_replica(&mut self, index: usize) {
        let identity = self.replicas[index].identity.clone();
        let service = Recorded::new(
            self.sim.service(),
            index,
            identity.clone(),
            self.plan.leader_election,
            self.sim.store().clone(),
            self.world.clone(),
            self.intent.clone(),
            hot_loop_limit(self.plan.nodes),
        );
        let observer = Observer::new();
        self.world.follow_terms(observer.clone());
        let client = kube::Client::new(service.clone(), NAMESPACE);
        // The binary marks the process started once its preflight passed.
        let health = canary_kube_adapter::Health::default();
        health.set_started();
        let config = ControllerConfig {
            health: health.clone(),
            clock: self.clock.clone(),
            instance: Some(identity.clone()),
            observer,
            leader_election: self
                .plan
                .leader_election
                .then(|| LeaderElection::new(NAMESPACE, identity.clone())),
            analysis: Arc::new(FakePrometheus::new(
                SimQueries(SimPrometheus::new(self.sim.store().clone())),
                self.plan.analysis.clone().unwrap_or_default(),
                self.start,
                Arc::clone(&self.tokens),
                self.world.clone(),
            )),
            // The simulation's Prometheus, over http and https, as an administrator allows it.
            allowed_analysis_addresses: Arc::new(
                canary_analysis::AllowedAddresses::from_flags([
                    "http://prometheus.simulation:9090",
                    "https://prometheus.simulation:9090",
                ])
                .unwrap(),
            ),
            ..ControllerConfig::default()
        };
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(canary_kube_adapter::run(client, config, async move {
            let _ = stopped.await;
        }));
        self.world.trace(format!("{identity} started"));
        self.world
            .requests()
            .mark(index, self.world.elapsed(), &format!("{identity} started"));
        let replica = &mut self.replicas[index];
        replica.connection = Some(service);
        replica.stop = Some(stop);
        replica.task = Some(task);
        replica.restart_at = None;
        replica.started_at = Instant::now();
        replica.health = Some(health);
    }

    async fn stop_replica(&mut self, index: usize, graceful: bool) {
        let replica = &mut self.replicas[index];
        let Some(task) = replica.task.take() else {
            return;
        };
        let identity = replica.identity.clone();
        if graceful {
            if let Some(stop) = replica.stop.take() {
                let _ = stop.send(());
            }
            match tokio::time::timeout(Duration::from_secs(60), task).await {
                Ok(result) => self.check_exit(&identity, result),
                Err(_) => self.world.violate(
                    Invariant::NoPanicNoHotLoop,
                    format!("{identity} did not stop within 60 s of a graceful shutdown"),
                ),
            }
        } else {
            if let Some(connection) = replica.connection.take() {
                connection.kill();
            }
            let version = super::recorder::tally_key(self.sim.store());
            self.world.tally(&version, |t| t.kills += 1);
            task.abort();
            let result = task.await;
            if let Err(error) = &result
                && error.is_panic()
            {
                self.check_exit(&identity, result);
            }
        }
        let how = if graceful {
            "stopped gracefully"
        } else {
            "killed"
        };
        self.world.trace(format!("{identity} {how}"));
        self.world
            .requests()
            .mark(index, self.world.elapsed(), &format!("{identity} {how}"));
    }

    fn check_exit(
        &self,
        identity: &str,
        result: Result<Result<(), canary_kube_adapter::Error>, tokio::task::JoinError>,
    ) {
        match result {
            Ok(Ok(())) => {}
            // No pass in the simulation runs for 300 s, and no fault lasts that long: a replica
            // that stops as wedged counted work no pass would serve (finding 14).
            Ok(Err(error @ canary_kube_adapter::Error::Wedged(_))) => self.world.violate(
                Invariant::NoWedgeExit,
                format!("{identity} stopped as wedged: {error}"),
            ),
            Ok(Err(error)) => {
                self.world.count(|e| e.error_exits += 1);
                self.world.trace(format!("{identity} exited: {error}"));
            }
            Err(error) if error.is_panic() => self.world.violate(
                Invariant::NoPanicNoHotLoop,
                format!("{identity} panicked: {error}"),
            ),
            Err(_) => {}
        }
    }

    /// A replica whose task ended on its own: a panic is a violation; restart it.
    async fn reap(&mut self) {
        for index in 0..self.replicas.len() {
            let finished = self.replicas[index]
                .task
                .as_ref()
                .is_some_and(JoinHandle::is_finished);
            if finished && let Some(task) = self.replicas[index].task.take() {
                let identity = self.replicas[index].identity.clone();
                let result = task.await;
                self.check_exit(&identity, result);
                self.replicas[index].restart_at = Some(Instant::now() + Duration::from_secs(5));
            }
        }
    }

    fn node_names(&self) -> Vec<String> {
        self.sim
            .store()
            .list::<Node>(None)
            .into_iter()
            .filter_map(|n| n.metadata.name)
            .collect()
    }

    fn pick_node(&self, pick: u64) -> Option<String> {
        let names = self.node_names();
        let len = u64::try_from(names.len()).ok().filter(|n| *n > 0)?;
        names.get(usize::try_from(pick % len).ok()?).cloned()
    }

    async fn act(&mut self, action: Action) {
        let now = Instant::now();
        let cluster = &self.cluster;
        match action {
            Action::AddNode => {
                let pick = self.rng.next_u64();
                let name = format!("extra-{}", pick % 100_000);
                if cluster.add_node(&name).is_ok() {
                    // A zoned cluster's new node has its zone, as a cloud provider labels it.
                    if let Some(zone) = self.plan.pods.as_ref().and_then(|p| p.zone(pick)) {
                        self.label_node(&name, ZONE_LABEL, &zone);
                    }
                    self.world.trace(format!("node {name} added"));
                }
            }
            Action::RemoveNode { pick } => {
                if self.node_names().len() > 1
                    && let Some(name) = self.pick_node(pick)
                    && cluster.remove_node(&name).is_ok()
                {
                    self.not_ready.remove(&name);
                    self.world.trace(format!("node {name} removed"));
                }
            }
            Action::NodeNotReady { pick, for_ } => {
                if let Some(name) = self.pick_node(pick)
                    && cluster.set_node_ready(&name, false).is_ok()
                {
                    if let Ok(mut intent) = self.intent.lock() {
                        intent.node_not_ready_seen = true;
                    }
                    self.not_ready.insert(name.clone(), ());
                    self.undo.push((now + for_, name.clone(), Undo::Ready));
                    self.world
                        .trace(format!("node {name} NotReady for {for_:?}"));
                }
            }
            Action::Cordon { pick, for_ } => {
                if let Some(name) = self.pick_node(pick)
                    && cluster.cordon(&name, true).is_ok()
                {
                    self.undo.push((now + for_, name.clone(), Undo::Uncordon));
                    self.world
                        .trace(format!("node {name} cordoned for {for_:?}"));
                }
            }
            Action::NodeCondition { pick, for_ } => {
                if let Some(name) = self.pick_node(pick)
                    && self.annotate_node(&name, Some("NetworkUnavailable"))
                {
                    // Its taint keeps a replaced pod off the node meanwhile, as NotReady does.
                    if let Ok(mut intent) = self.intent.lock() {
                        intent.node_not_ready_seen = true;
                    }
                    self.undo
                        .push((now + for_, name.clone(), Undo::ConditionCleared));
                    self.world
                        .trace(format!("node {name} NetworkUnavailable for {for_:?}"));
                }
            }
            Action::HandEdit => {
                self.hand_edit();
                return;
            }
            Action::Abort => {
                self.abort();
                return;
            }
            Action::Undo => {
                self.undo_verb();
                return;
            }
            Action::Isolate {
                leader,
                replica,
                for_,
                frozen,
            } => {
                self.isolate(leader, replica, for_, frozen);
                return;
            }
            Action::Kill {
                replica,
                graceful,
                down,
            } => {
                if self.replicas[replica].task.is_some() {
                    self.stop_replica(replica, graceful).await;
                    self.replicas[replica].restart_at = Some(now + down);
                    self.world.count(|e| e.restarts += 1);
                }
                return;
            }
        }
        self.world.count(|e| e.node_changes += 1);
    }

    /// The replica holding the Lease now, by index.
    fn lease_holder(&self) -> Option<usize> {
        let holder = self
            .sim
            .store()
            .get::<Lease>(Some(NAMESPACE), super::LEASE_NAME)?
            .spec?
            .holder_identity?;
        self.replicas.iter().position(|r| r.identity == holder)
    }

    /// `Action::Isolate`: cuts the leader (or replica `replica`) off for `for_`.
    fn isolate(&mut self, leader: bool, replica: usize, for_: Duration, frozen: bool) {
        let now = Instant::now();
        let holder = self.lease_holder();
        let index = if leader {
            holder.unwrap_or(replica)
        } else {
            replica
        };
        let Some(connection) = self.replicas.get(index).and_then(|r| r.connection.as_ref()) else {
            return;
        };
        if self.replicas[index].task.is_none() {
            return;
        }
        connection.isolate(now + for_, frozen);
        self.isolations.push(Isolated {
            replica: index,
            from: now,
            until: now + for_,
            leader: holder == Some(index),
        });
        self.world.count(|e| e.isolations += 1);
        self.world.trace(format!(
            "{} {} for {for_:?}{}",
            self.replicas[index].identity,
            if frozen { "frozen" } else { "cut off" },
            if holder == Some(index) {
                " (the leader)"
            } else {
                ""
            }
        ));
        if holder == Some(index) {
            self.isolated.push(Isolated {
                replica: index,
                from: now,
                until: now + for_,
                leader: true,
            });
        }
    }

    /// Invariant 24, for each leader isolation that ended: when it lasted past the takeover
    /// bound and the other replica ran connected from its start, the other one holds the Lease.
    fn isolations_due(&mut self) {
        let now = Instant::now();
        let (due, later): (Vec<_>, Vec<_>) = self.isolated.drain(..).partition(|i| i.until <= now);
        self.isolated = later;
        for isolation in due {
            let others: Vec<usize> = (0..self.replicas.len())
                .filter(|other| *other != isolation.replica)
                .collect();
            let overlapping = |other: usize| {
                self.isolations.iter().any(|i| {
                    i.replica == other && i.from < isolation.until && i.until > isolation.from
                })
            };
            let standby_ran = others.iter().any(|other| {
                let replica = &self.replicas[*other];
                replica.task.is_some()
                    && replica.started_at <= isolation.from
                    && !overlapping(*other)
            });
            // A replica restarted during its cut-off is a new process on a new connection: it
            // renews the Lease its identity holds, as it may (soak seed 11000491, killed 10 s
            // into a 73 s freeze).
            let restarted = self.replicas[isolation.replica].started_at > isolation.from;
            if !standby_ran || restarted || isolation.until - isolation.from < TAKEOVER_BOUND {
                continue;
            }
            let holder = self.lease_holder();
            if holder.is_none_or(|h| h == isolation.replica) {
                self.world.violate(
                    Invariant::IsolatedLeaderReplaced,
                    format!(
                        "{} was cut off for {:?} and the Lease holder is still {:?}",
                        self.replicas[isolation.replica].identity,
                        isolation.until - isolation.from,
                        holder.map(|h| self.replicas[h].identity.clone())
                    ),
                );
            }
        }
    }

    fn undo_due(&mut self) {
        let now = Instant::now();
        let (due, later): (Vec<_>, Vec<_>) = self.undo.drain(..).partition(|(at, _, _)| *at <= now);
        self.undo = later;
        for (_, name, undo) in due {
            self.undo_one(&name, undo);
        }
    }

    fn undo_one(&mut self, name: &str, undo: Undo) {
        let cluster = &self.cluster;
        let done = match undo {
            Undo::Ready => {
                self.not_ready.remove(name);
                cluster.set_node_ready(name, true).is_ok()
            }
            Undo::Uncordon => cluster.cordon(name, false).is_ok(),
            Undo::ConditionCleared => self.annotate_node(name, None),
        };
        if done {
            self.world.trace(format!("node {name} {undo:?}"));
        }
    }

    fn restart_due(&mut self) {
        let now = Instant::now();
        for index in 0..self.replicas.len() {
            if self.replicas[index].task.is_none()
                && self.replicas[index].restart_at.is_some_and(|at| at <= now)
            {
                self.start_replica(index);
            }
        }
    }

    /// `kubectl set image` on the managed DaemonSet: another image in its template. Returns the
    /// image, or `None` when there is no DaemonSet yet.
    fn hand_edit(&mut self) -> Option<String> {
        let image = format!("registry.example/by-hand:{}", self.rng.next_u64() % 100_000);
        let store = self.sim.store();
        let desired = desired_image(store);
        let replaced_desired = desired
            .clone()
            .filter(|desired| daemon_set_image(store).as_ref() == Some(desired));
        let version = super::recorder::tally_key(store);
        let edited = store
            .modify::<DaemonSet>(Some(NAMESPACE), NAME, UpdateScope::Main, |ds| {
                let container = ds
                    .spec
                    .as_mut()
                    .and_then(|s| s.template.spec.as_mut())
                    .and_then(|p| p.containers.first_mut());
                if let Some(container) = container {
                    container.image = Some(image.clone());
                }
            })
            .is_ok();
        if !edited {
            return None;
        }
        self.world.tally(&version, |t| t.hand_edits += 1);
        self.world.count(|e| e.hand_edits += 1);
        if let Ok(mut intent) = self.intent.lock() {
            intent.hand_edit_since_change = true;
        }
        self.world.trace(format!("hand edit: image {image}"));
        self.last_hand_edit = Some((image.clone(), Instant::now(), replaced_desired));
        Some(image)
    }

    /// Invariant 9 at rest: a hand edit is written over within [`DRIFT_BOUND`] (`Revert`), or
    /// left as it is with nothing written and the `Drifted` condition set (`Report`). In
    /// KubeVirt compatibility, a rollout left `failed` by its crash-looping canary keeps the
    /// edit: the reference writes nothing while no updated pod is ready (its row 2), and a
    /// template-only edit starts no canary (quirk 5); so nothing may be written. The same holds
    /// for a rollout `successful` with no updated pod ready, before the edit and after the
    /// bound: a DaemonSet created at a crash-looping version is `successful` at once (row 1 of
    /// the reference ends at the create), and the edit's pods crash as well (soak seed
    /// 40001279, finding 67).
    async fn edit_at_rest(&mut self) {
        let writes_before = self.world.exercised().daemon_set_writes;
        let phase_before = cds_phase(self.sim.store());
        let updated_before = self
            .sim
            .store()
            .get::<CanaryDaemonSet>(Some(NAMESPACE), NAME)
            .and_then(|cds| cds.status)
            .map_or(0, |status| status.updated);
        let failed = phase_before.as_deref() == Some("failed");
        let none_updated_ready = |store: &canary_sim::Store| {
            cluster_counts(store).is_some_and(|(_, _, ready)| ready == 0)
        };
        let none_ready_before = none_updated_ready(self.sim.store());
        let Some(image) = self.hand_edit() else {
            return;
        };
        tokio::time::sleep(DRIFT_BOUND).await;
        let store = self.sim.store();
        let live = daemon_set_image(store);
        let none_ready = none_ready_before && none_updated_ready(store);
        if self.plan.compatibility == Compatibility::KubeVirt && (failed || none_ready) {
            let written = self.world.exercised().daemon_set_writes - writes_before;
            if written > 0 {
                self.world.violate(
                    Invariant::DriftHandled,
                    format!(
                        "KubeVirt compatibility, failed: {written} DaemonSet writes after a hand edit ({image}); the reference writes none while its canary crash-loops"
                    ),
                );
            }
            return;
        }
        match self.plan.drift_policy {
            DriftPolicy::Revert => {
                if live.as_deref() == Some(image.as_str()) {
                    self.world.violate(
                        Invariant::DriftHandled,
                        format!("the hand edit ({image}) is still there {DRIFT_BOUND:?} later"),
                    );
                }
            }
            DriftPolicy::Report => {
                let written = self.world.exercised().daemon_set_writes - writes_before;
                let status = store
                    .get::<CanaryDaemonSet>(Some(NAMESPACE), NAME)
                    .and_then(|cds| cds.status)
                    .unwrap_or_default();
                let drifted = status
                    .conditions
                    .iter()
                    .any(|c| c.type_ == "Drifted" && c.status == "True");
                // The status still shows the DaemonSet's pods while the drift is reported.
                let desired = store
                    .get::<DaemonSet>(Some(NAMESPACE), NAME)
                    .and_then(|ds| ds.status)
                    .map_or(0, |s| s.desired_number_scheduled);
                // Pods driver (`OnDelete`: the edit replaces no pod): a finished rollout's pods
                // still run the recorded revision and count as updated against it, not against
                // the edit (finding 43), so the count stays what it was. It need not be every
                // pod: a node deferred while cordoned keeps its old pod after the success when
                // the new version's crashing pods leave no budget to replace it (soak seed
                // 22003915; finding 48). The MaxUnavailable driver's DaemonSet rolls the edit
                // out itself.
                let updated_kept = self.plan.pods.is_none()
                    || phase_before.as_deref() != Some("successful")
                    || status.updated == status.desired
                    || status.updated >= updated_before;
                if live.as_deref() != Some(image.as_str())
                    || written > 0
                    || !drifted
                    || i64::from(status.desired) != i64::from(desired)
                    || !updated_kept
                {
                    self.world.violate(
                        Invariant::DriftHandled,
                        format!(
                            "a reported drift: image now {live:?} (edited to {image}), {written} DaemonSet writes since, Drifted condition {drifted}, status desired {} of {desired}, updated {} (was {phase_before:?}, {updated_before} updated)",
                            status.desired, status.updated
                        ),
                    );
                }
            }
        }
    }

    /// A second CanaryDaemonSet stored with an integer out of range (as kube-apiserver before
    /// 1.36 stores it): it must fail alone. It also carries a field the CRD does not declare
    /// ([`MISPLACED_FIELD`], where a user may misplace it), which the store must prune.
    fn store_bad_object(&self) {
        let mut bad = manifest("v1", "healthy");
        bad["metadata"]["name"] = serde_json::json!(BAD_NAME);
        bad["spec"]["daemonSetName"] = serde_json::json!(BAD_NAME);
        bad["spec"]["strategy"]["crashLoop"] =
            serde_json::json!({"restartThreshold": 3_000_000_000_u64});
        bad["spec"][MISPLACED_FIELD] = serde_json::json!("abc%");
        let key = canary_sim::ResourceKey::of::<CanaryDaemonSet>();
        if self.sim.store().create_value(&key, bad).is_err() {
            self.world.violate(
                Invariant::NoPanicNoHotLoop,
                "harness: could not store the bad object",
            );
        }
        self.world.count(|e| e.bad_objects += 1);
    }

    /// Invariant 29: once the scenario's CanaryDaemonSet holds its DaemonSet (its owner
    /// reference, or the claim annotation naming it), a rival naming the same DaemonSet is
    /// created (`stage` 0 to 1); from then on, every tick, the rival may only be refused.
    fn rival_if_due(&self, stage: &mut u8) {
        if !self.plan.rival {
            return;
        }
        let store = self.sim.store();
        let main = store.get::<CanaryDaemonSet>(Some(NAMESPACE), NAME);
        let main_uid = main.and_then(|cds| cds.metadata.uid).unwrap_or_default();
        let ds = store.get::<DaemonSet>(Some(NAMESPACE), NAME);
        let claim = ds
            .as_ref()
            .and_then(|ds| ds.metadata.annotations.as_ref())
            .and_then(|a| a.get(canary_kube_adapter::claim::CLAIM_ANNOTATION).cloned());
        if *stage == 0 {
            let owned = ds.as_ref().is_some_and(|ds| {
                ds.metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .any(|o| o.controller == Some(true) && o.uid == main_uid)
            });
            let annotated = claim.as_deref() == Some(&format!("{NAMESPACE}/{NAME}/{main_uid}"));
            if main_uid.is_empty() || !(owned || annotated) {
                return;
            }
            let rival = serde_json::json!({
                "apiVersion": "canary.daemonset.dev/v1alpha1",
                "kind": "CanaryDaemonSet",
                "metadata": {"name": RIVAL_NAME, "namespace": NAMESPACE},
                "spec": {
                    "workloadRef": {"name": NAME},
                    "target": {"version": "v1"},
                    "strategy": {"driver": "Pods", "steps": [{"nodes": "100%"}]}
                }
            });
            let key = canary_sim::ResourceKey::of::<CanaryDaemonSet>();
            if store.create_value(&key, rival).is_err() {
                self.world.violate(
                    Invariant::NoPanicNoHotLoop,
                    "harness: could not store the rival",
                );
            }
            self.world.count(|e| e.rivals += 1);
            *stage = 1;
            return;
        }
        let status = store
            .get::<CanaryDaemonSet>(Some(NAMESPACE), RIVAL_NAME)
            .and_then(|cds| cds.status);
        // Refused, or not yet able to see the DaemonSet in its cache (`InvalidSpec`: "does not
        // exist"): both write and delete nothing. Any other status is a pass that acted.
        let refused =
            |reason: Option<&str>| matches!(reason, Some("DaemonSetClaimed" | "InvalidSpec"));
        if let Some(status) = status
            && (status.phase.is_some() || status.reason.is_some())
            && !(status.phase.map(|p| p.as_str()) == Some("failed")
                && refused(status.reason.map(|r| r.as_str())))
        {
            self.world.violate(
                Invariant::OneDriverPerDaemonSet,
                format!(
                    "the rival of a claimed DaemonSet acted: phase {:?}, reason {:?}, {:?}",
                    status.phase, status.reason, status.message
                ),
            );
        }
        if claim
            .as_deref()
            .is_some_and(|c| c.contains(&format!("/{RIVAL_NAME}/")))
        {
            self.world.violate(
                Invariant::OneDriverPerDaemonSet,
                format!("the DaemonSet's claim names the rival: {claim:?}"),
            );
        }
    }

    /// Sends [`REFUSED_PATCHES`] through the API, as a user's `kubectl patch` of the
    /// CanaryDaemonSet (invariant 27): each must be refused with a 422 and leave the stored
    /// spec as it was. A server of their own over the same store, without the plan's faults:
    /// the controller's requests meet those, and these must not shift their triggers.
    async fn send_refused_writes(&self) {
        let api = canary_sim::ApiServer::new(self.sim.store().clone(), canary_sim::Faults::new(0));
        let key = canary_sim::ResourceKey::of::<CanaryDaemonSet>();
        let spec = || {
            self.sim
                .store()
                .get_value(&key, Some(NAMESPACE), NAME)
                .map(|object| object["spec"].clone())
        };
        let uri = format!(
            "/apis/canary.daemonset.dev/v1alpha1/namespaces/{NAMESPACE}/canarydaemonsets/{NAME}"
        );
        for patch in REFUSED_PATCHES {
            let before = spec();
            let request = http::Request::patch(uri.as_str())
                .header(http::header::CONTENT_TYPE, "application/merge-patch+json")
                .body(bytes::Bytes::from_static(patch.as_bytes()));
            let Ok(request) = request else {
                continue;
            };
            let status = api.handle(request).await.status().as_u16();
            if status != 422 {
                self.world.violate(
                    Invariant::RefusedWritesChangeNothing,
                    format!("the bad patch {patch} was answered {status}, not 422"),
                );
            }
            if spec() != before {
                self.world.violate(
                    Invariant::RefusedWritesChangeNothing,
                    format!("the refused patch {patch} changed the stored spec"),
                );
            }
            self.world.count(|e| e.refused_writes += 1);
        }
    }

    /// Sets (or removes) the simulator's node annotation that holds conditions True by hand:
    /// an unrelated node failure ([`Action::NodeCondition`]).
    fn annotate_node(&self, node: &str, conditions: Option<&str>) -> bool {
        self.sim
            .store()
            .modify::<Node>(None, node, UpdateScope::Main, |n| {
                let annotations = n.metadata.annotations.get_or_insert_with(Default::default);
                match conditions {
                    Some(value) => {
                        annotations.insert(NODE_CONDITIONS_ANNOTATION.to_owned(), value.to_owned())
                    }
                    None => annotations.remove(NODE_CONDITIONS_ANNOTATION),
                };
            })
            .is_ok()
    }

    fn label_node(&self, node: &str, key: &str, value: &str) {
        let labelled = self
            .sim
            .store()
            .modify::<Node>(None, node, UpdateScope::Main, |n| {
                n.metadata
                    .labels
                    .get_or_insert_with(Default::default)
                    .insert(key.to_owned(), value.to_owned());
            })
            .is_ok();
        if !labelled {
            self.world.violate(
                Invariant::NoPanicNoHotLoop,
                format!("harness: could not label node {node}"),
            );
        }
    }

    /// The Pods driver's node labels: the canary selector's, and the zones.
    fn label_nodes(&self) {
        let Some(pods) = &self.plan.pods else { return };
        let mut names = self.node_names();
        names.sort();
        for pick in &pods.canary_picks {
            if let Some(name) = self.pick_node(*pick) {
                self.label_node(&name, CANARY_LABEL, "yes");
                self.world
                    .trace(format!("node {name} labelled {CANARY_LABEL}=yes"));
            }
        }
        for (index, name) in names.iter().enumerate() {
            if let Some(zone) = pods.zone(index as u64) {
                self.label_node(name, ZONE_LABEL, &zone);
            }
        }
    }

    /// Runs the replicas for `idle` with nothing to roll out, while a node is relabelled and a
    /// DaemonSet nobody manages is changed every minute; a replica that stops meanwhile is
    /// reaped (a wedge exit is invariant 25).
    async fn idle(&mut self, idle: Duration) {
        let unmanaged: DaemonSet = match serde_json::from_value(serde_json::json!({
            "metadata": {"name": "kube-proxy", "namespace": "default"},
            "spec": {
                "selector": {"matchLabels": {"app": "kube-proxy"}},
                "template": {"metadata": {"labels": {"app": "kube-proxy"}},
                             "spec": {"nodeSelector": {"simulation/no-node": "true"},
                                      "containers": [{"name": "proxy", "image": "proxy:1"}]}}
            }
        })) {
            Ok(ds) => ds,
            Err(error) => {
                self.world.violate(
                    Invariant::NoPanicNoHotLoop,
                    format!("harness: the unmanaged DaemonSet: {error}"),
                );
                return;
            }
        };
        let _ = self.sim.store().create(&unmanaged);
        let node = self.node_names().into_iter().next();
        let start = Instant::now();
        let mut round = 0u64;
        while start.elapsed() < idle {
            round += 1;
            if let Some(node) = &node {
                self.label_node(node, "simulation/idle-round", &round.to_string());
            }
            let _ = self.sim.store().modify::<DaemonSet>(
                Some("default"),
                "kube-proxy",
                UpdateScope::Main,
                |ds| {
                    ds.metadata
                        .labels
                        .get_or_insert_with(Default::default)
                        .insert("round".into(), round.to_string());
                },
            );
            tokio::time::sleep(Duration::from_secs(60)).await;
            self.reap().await;
        }
        self.world.count(|e| e.idle_starts += 1);
        self.world.trace(format!(
            "idle for {idle:?}, {round} node and DaemonSet changes"
        ));
    }

    /// Promotes a Pods-driver rollout that has been `paused` for the plan's while (an
    /// indefinite pause ends no other way).
    fn promote_if_due(&mut self, paused_since: &mut Option<Instant>) {
        let Some(pods) = &self.plan.pods else { return };
        if !self.in_phase_for("paused", paused_since, pods.promote_after) {
            return;
        }
        let value = format!("p{}", self.rng.next_u64() % 1_000_000);
        if self.annotate(PROMOTE_ANNOTATION, Some(&value)) {
            *paused_since = None;
            self.world.count(|e| e.promotions += 1);
            self.world.trace(format!("promoted ({value})"));
        }
    }

    /// Whether the CanaryDaemonSet has been in `phase` for `after` or longer: `since` holds when
    /// it was first seen in it, and is forgotten as soon as it is not.
    fn in_phase_for(&self, phase: &str, since: &mut Option<Instant>, after: Duration) -> bool {
        let in_phase = self
            .sim
            .store()
            .get::<CanaryDaemonSet>(Some(NAMESPACE), NAME)
            .and_then(|cds| cds.status)
            .is_some_and(|status| status.phase_name() == Some(phase));
        if !in_phase {
            *since = None;
            return false;
        }
        let now = Instant::now();
        now >= *since.get_or_insert(now) + after
    }

    /// Sets (or removes, `None`) an annotation of the CanaryDaemonSet, as a verb does;
    /// whether the store took it.
    fn annotate(&self, key: &str, value: Option<&str>) -> bool {
        self.sim
            .store()
            .modify::<CanaryDaemonSet>(Some(NAMESPACE), NAME, UpdateScope::Main, |cds| {
                let annotations = cds
                    .metadata
                    .annotations
                    .get_or_insert_with(Default::default);
                match value {
                    Some(value) => annotations.insert(key.to_owned(), value.to_owned()),
                    None => annotations.remove(key),
                };
            })
            .is_ok()
    }

    /// Retries a rollout that has been `failed` for the plan's while (once per seed), as
    /// `daemonset-canary retry` does, with either driver.
    fn retry_if_due(&mut self, failed_since: &mut Option<Instant>, retried: &mut bool) {
        let pods_retry = self.plan.pods.as_ref().and_then(|p| p.retry_after);
        let Some(after) = pods_retry.or(self.plan.retry_after) else {
            return;
        };
        if *retried {
            return;
        }
        if !self.in_phase_for("failed", failed_since, after) {
            return;
        }
        let value = format!("r{}", self.rng.next_u64() % 1_000_000);
        if self.annotate(RETRY_ANNOTATION, Some(&value)) {
            *retried = true;
            self.world.count(|e| e.retries += 1);
            self.world.trace(format!("retried ({value})"));
        }
    }

    /// Promotes the rollout fully (`promote --full`) once, at the plan's time or the first
    /// moment after it that a rollout is under way and not held, as the verb allows.
    fn full_promote_if_due(&mut self, since_start: Duration, done: &mut bool) {
        let Some(at) = self.plan.pods.as_ref().and_then(|p| p.full_promotion_at) else {
            return;
        };
        if *done || since_start < at {
            return;
        }
        let Some(cds) = self
            .sim
            .store()
            .get::<CanaryDaemonSet>(Some(NAMESPACE), NAME)
        else {
            return;
        };
        let phase = cds
            .status
            .as_ref()
            .and_then(|s| s.phase_name().map(str::to_owned));
        let under_way = matches!(
            phase.as_deref(),
            Some("started" | "canary" | "increasing" | "paused")
        );
        if !under_way || hold_requested(&cds) {
            return;
        }
        let value = format!("{FULL_PROMOTION_PREFIX}{}", self.world.now());
        if self.annotate(PROMOTE_ANNOTATION, Some(&value)) {
            *done = true;
            self.world.count(|e| e.full_promotions += 1);
            self.world.trace(format!("fully promoted ({value})"));
        }
    }

    /// Holds the rollout on request at the plan's time (the `canary.daemonset.dev/paused`
    /// annotation, as `daemonset-canary pause` sets it) and resumes it after the plan's while;
    /// `stage` counts the steps done (0: not held yet, 1: held, 2: resumed).
    fn hold_if_due(&mut self, since_start: Duration, stage: &mut u8) {
        let Some((at, length)) = self.plan.hold() else {
            return;
        };
        let value = match *stage {
            0 if since_start >= at => Some("true"),
            1 if since_start >= at + length => None,
            _ => return,
        };
        if value.is_none() {
            self.check_drift_reported_while_held();
        }
        if self.annotate(PAUSE_ANNOTATION, value) {
            *stage += 1;
            // A minute to see it, as for a hand edit (invariant 9): a pass, a leader change.
            self.world.hold(value.map(|_| 60.0));
            if value.is_none() {
                self.world.count(|e| e.holds += 1);
            }
            self.world.trace(if value.is_some() {
                "held on request (paused)"
            } else {
                "resumed"
            });
        }
    }

    /// Invariant 9 under a hold, at its resume: a hand edit of the desired template, still live
    /// [`DRIFT_BOUND`] after it was made (nothing is written over while held) and with no new
    /// version asked since, shows as drift, the `Drifted` condition set. The hold's own write carries the live template along, the edit with it;
    /// taking that write for the controller's own would forget the edit, which the resume
    /// would then roll out unsupervised (finding 42).
    fn check_drift_reported_while_held(&self) {
        let Some((image, at, Some(replaced))) = &self.last_hand_edit else {
            return;
        };
        let store = self.sim.store();
        // The minute counts while a controller could act: from the edit, or from the end of
        // the last cut-off of the leader, or restart, since, whichever came later. A leader
        // cut off, or a replica down or restarting, cannot see the edit (soak seed 22004082:
        // the only replica was cut off from before the edit until 7 s before the resume;
        // finding 47).
        let able_since = self
            .isolations
            .iter()
            .filter(|i| i.leader)
            .map(|i| i.until)
            .chain(self.replicas.iter().map(|r| r.started_at))
            .filter(|back| back > at)
            .max()
            .unwrap_or(*at);
        let any_down = self.replicas.iter().any(|r| r.task.is_none());
        // A new version asked since: its rollout writes over the edit.
        if desired_image(store).as_ref() != Some(replaced)
            || self.plan.workload
            || self.plan.compatibility == Compatibility::KubeVirt
            || any_down
            || able_since.elapsed() < DRIFT_BOUND
            || daemon_set_image(store).as_deref() != Some(image.as_str())
        {
            return;
        }
        let drifted = store
            .get::<CanaryDaemonSet>(Some(NAMESPACE), NAME)
            .and_then(|cds| cds.status)
            .is_some_and(|status| {
                status
                    .conditions
                    .iter()
                    .any(|c| c.type_ == "Drifted" && c.status == "True")
            });
        if !drifted {
            self.world.violate(
                Invariant::DriftHandled,
                format!(
                    "held, the hand edit ({image}) is live {:?} after it was made, and the Drifted condition is not set",
                    at.elapsed()
                ),
            );
        }
    }

    /// Writes [`TOKEN_SECRET`] with a new token, when the plan's Prometheus asks for one.
    fn write_token(&self) {
        let token = {
            let mut tokens = self
                .tokens
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let token = format!("token-{}", tokens.len());
            tokens.push((token.clone(), Instant::now()));
            token
        };
        let secret = serde_json::json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": TOKEN_SECRET, "namespace": NAMESPACE},
            // As `kubectl create secret generic --from-file` keeps a file's newline.
            "stringData": {"token": format!("{token}\n")},
        });
        let key = canary_sim::ResourceKey::new("", "v1", "secrets");
        // Created, or updated in place (a rotation).
        let written = match self.sim.store().create_value(&key, secret) {
            Err(canary_sim::StoreError::AlreadyExists { .. }) => self
                .sim
                .store()
                .modify::<k8s_openapi::api::core::v1::Secret>(
                    Some(NAMESPACE),
                    TOKEN_SECRET,
                    UpdateScope::Main,
                    |secret| {
                        secret.data = Some(BTreeMap::from([(
                            "token".to_owned(),
                            k8s_openapi::ByteString(format!("{token}\n").into_bytes()),
                        )]));
                    },
                )
                .map(|_| ()),
            other => other.map(|_| ()),
        };
        if let Err(error) = written {
            self.world.violate(
                Invariant::NoPanicNoHotLoop,
                format!("harness: could not write the token Secret: {error}"),
            );
        }
    }

    /// Deletes the token Secret at the plan's time and writes it back, rotated, after the
    /// plan's while (`stage` counts the steps done), and rotates it at the plan's period
    /// outside that gap.
    fn rotate_token_if_due(&mut self, since_start: Duration, stage: &mut u8) {
        let Some(token) = self.plan.analysis.as_ref().and_then(|a| a.token.as_ref()) else {
            return;
        };
        let last_written = self
            .tokens
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .last()
            .map(|(_, at)| *at);
        if let (Some(every), Some(last)) = (token.rotate_every, last_written)
            && *stage != 1
            && last.elapsed() >= every
        {
            self.write_token();
            self.world.count(|e| e.token_rotations += 1);
            self.world.trace("token rotated");
        }
        let Some((at, length)) = token.gap else {
            return;
        };
        match *stage {
            0 if since_start >= at => {
                let deleted = self
                    .sim
                    .store()
                    .delete::<k8s_openapi::api::core::v1::Secret>(Some(NAMESPACE), TOKEN_SECRET);
                if let Err(error) = deleted {
                    self.world.violate(
                        Invariant::NoPanicNoHotLoop,
                        format!("harness: could not delete the token Secret: {error}"),
                    );
                }
                self.world.trace("token Secret deleted");
                *stage = 1;
            }
            1 if since_start >= at + length => {
                self.write_token();
                self.world.count(|e| e.token_rotations += 1);
                self.world.trace("token Secret written back, rotated");
                *stage = 2;
            }
            _ => {}
        }
    }

    /// The `abort` verb: a new `canary.daemonset.dev/abort` value, whatever the phase (the
    /// controller refuses what it cannot act on, and records the mark either way).
    fn abort(&self) {
        let mark = format!("abort-{}", self.world.now());
        if self.annotate(ABORT_ANNOTATION, Some(&mark)) {
            self.world.count(|e| e.aborts += 1);
            self.world.trace(format!("abort asked ({mark})"));
        }
    }

    /// The `undo` verb: `previous@TIME`, whatever the phase (the controller refuses what it
    /// cannot act on, and records the mark either way).
    fn undo_verb(&self) {
        let mark = format!("previous@{}", self.world.now());
        if self.annotate(UNDO_ANNOTATION, Some(&mark)) {
            self.world.count(|e| e.undos += 1);
            self.world.trace(format!("undo asked ({mark})"));
        }
    }

    fn set_version(&self, version: u32, behavior: Behavior) {
        let name = format!("v{version}");
        let mut spec = daemonset_canary::demo::scenario::manifest(
            self.plan.compatibility,
            &name,
            &behavior.annotation(),
        );
        spec["spec"]["strategy"]["driftPolicy"] =
            serde_json::json!(self.plan.drift_policy.as_str());
        if self.plan.on_failure_rollback {
            spec["spec"]["strategy"]["onFailure"] = serde_json::json!("Rollback");
        }
        if let Some(pods) = &self.plan.pods
            && let (Some(strategy), serde_json::Value::Object(fields)) =
                (spec["spec"]["strategy"].as_object_mut(), pods.strategy())
        {
            strategy.extend(fields);
        }
        if let Some(analysis) = &self.plan.analysis {
            spec["spec"]["analysis"] = analysis.spec();
            if analysis.bad_versions.contains(&version) {
                spec["spec"]["template"]["spec"]["template"]["metadata"]["annotations"]
                    [ERROR_RATIO_ANNOTATION] = serde_json::json!("0.1");
            }
        }
        let store = self.sim.store();
        let written = match serde_json::from_value::<CanaryDaemonSet>(spec.clone()) {
            Ok(_) if self.plan.workload => self.write_workload(version, &name, spec),
            Ok(object) if version == 1 => store.create(&object).is_ok(),
            Ok(object) => store
                .modify::<CanaryDaemonSet>(Some(NAMESPACE), NAME, UpdateScope::Main, |cds| {
                    cds.spec = object.spec.clone();
                })
                .is_ok(),
            Err(_) => false,
        };
        if !written {
            self.world.violate(
                Invariant::NoPanicNoHotLoop,
                format!("harness: could not write {name}"),
            );
        }
        if let Ok(mut intent) = self.intent.lock() {
            intent.versions.push((name.clone(), behavior));
            intent.last_change_at = self.world.now();
            intent.hand_edit_since_change = false;
        }
        self.world.count(|e| e.rollouts += 1);
        self.world
            .trace(format!("spec -> {name} ({})", behavior.annotation()));
    }

    /// `spec.workloadRef` ([`Plan::workload`]): version 1 creates the owner's DaemonSet (the
    /// manifest's template, `OnDelete`, its version in the pod template's annotations where the
    /// checker reads it; pods without the controller's owner label), then the CanaryDaemonSet
    /// that refers to it and reads its version from the image tag; a later version changes the
    /// DaemonSet's pod template alone, as `helm upgrade` would.
    fn write_workload(&self, version: u32, name: &str, mut cds: serde_json::Value) -> bool {
        let mut template = cds["spec"]["template"].take();
        template["spec"]["updateStrategy"] = serde_json::json!({"type": "OnDelete"});
        template["spec"]["template"]["metadata"]["annotations"][VERSION_KEY] =
            serde_json::json!(name);
        let mut labels = template["metadata"]["labels"].clone();
        labels["app.kubernetes.io/managed-by"] = serde_json::json!("Helm");
        let daemon_set = serde_json::json!({
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": labels},
            "spec": template["spec"].take(),
        });
        let Ok(daemon_set) = serde_json::from_value::<DaemonSet>(daemon_set) else {
            return false;
        };
        let store = self.sim.store();
        if version != 1 {
            return store
                .modify::<DaemonSet>(Some(NAMESPACE), NAME, UpdateScope::Main, |live| {
                    if let (Some(live), Some(new)) = (live.spec.as_mut(), &daemon_set.spec) {
                        live.template = new.template.clone();
                    }
                })
                .is_ok();
        }
        if let Some(spec) = cds["spec"].as_object_mut() {
            spec.remove("template");
            spec.insert("workloadRef".into(), serde_json::json!({"name": NAME}));
            spec.insert(
                "target".into(),
                serde_json::json!({"fromContainer": "agent"}),
            );
        }
        store.create(&daemon_set).is_ok()
            && serde_json::from_value::<CanaryDaemonSet>(cds)
                .is_ok_and(|object| store.create(&object).is_ok())
    }

    /// The end of the fault window: errors and latency off, every node Ready, every replica
    /// running. From here on the system must converge.
    fn heal(&mut self) {
        self.sim.faults().clear();
        for replica in &self.replicas {
            if let Some(connection) = &replica.connection {
                connection.reconnect();
            }
        }
        // Isolations end here: those cut short are not judged (invariant 24).
        let now = Instant::now();
        self.isolated.retain(|i| i.until <= now);
        for isolation in &mut self.isolations {
            isolation.until = isolation.until.min(now);
        }
        let pending: Vec<_> = self.undo.drain(..).collect();
        for (_, name, undo) in pending {
            self.undo_one(&name, undo);
        }
        for index in 0..self.replicas.len() {
            if self.replicas[index].task.is_none() {
                self.start_replica(index);
            }
        }
        self.world
            .trace("heal: faults cleared, nodes Ready, replicas running");
    }
}

/// How long a hand edit at rest may stay before it is written over (`Revert`): the
/// controller reacts to the DaemonSet's watch event at once; a minute covers a leader's pass.
const DRIFT_BOUND: Duration = Duration::from_secs(60);

/// Name of the CanaryDaemonSet that does not decode (and of the DaemonSet it would own).
const BAD_NAME: &str = "undecodable";

/// The rival CanaryDaemonSet's name (invariant 29).
const RIVAL_NAME: &str = "rival";

/// Bad patches of the CanaryDaemonSet a user may type (issue 52's trial): the CRD's schema
/// or its rules refuse each.
const REFUSED_PATCHES: [&str; 5] = [
    r#"{"spec":{"strategy":{"progressDeadlineSeconds":"ten"}}}"#,
    r#"{"spec":{"strategy":{"driver":"Canary"}}}"#,
    r#"{"spec":{"strategy":{"fastMaxUnavailable":"150%"}}}"#,
    r#"{"spec":{"strategy":{"crashLoop":{"restartThreshold":0}}}}"#,
    r#"{"spec":{"daemonSetName":"renamed"}}"#,
];

/// A field of `spec.strategy` written one level too high, under `spec`: the CRD does not
/// declare it there.
const MISPLACED_FIELD: &str = "canaryMaxUnavailable";

/// The scenario's CanaryDaemonSet's `status.phase`.
fn cds_phase(store: &canary_sim::Store) -> Option<String> {
    store
        .get::<CanaryDaemonSet>(Some(NAMESPACE), NAME)?
        .status?
        .phase_name()
        .map(str::to_owned)
}

/// The image of the first container of the scenario's DaemonSet's template.
fn daemon_set_image(store: &canary_sim::Store) -> Option<String> {
    store
        .get::<DaemonSet>(Some(NAMESPACE), NAME)?
        .spec?
        .template
        .spec?
        .containers
        .first()?
        .image
        .clone()
}

/// The image the controller wants on the DaemonSet: the spec's, or, with a rollback in force,
/// the revision gone back to (its version is the image tag, as the harness writes them).
fn desired_image(store: &canary_sim::Store) -> Option<String> {
    let cds = store.get::<CanaryDaemonSet>(Some(NAMESPACE), NAME);
    let back_to = cds
        .as_ref()
        .and_then(|cds| cds.status.as_ref()?.history.as_ref()?.rollback.clone())
        .map(|rollback| rollback.to.version);
    cds.and_then(|cds| cds.spec.template.and_then(|t| t.spec.template.spec))
        .and_then(|pod| pod.containers.first().and_then(|c| c.image.clone()))
        .map(|image| match &back_to {
            Some(version) => match image.rsplit_once(':') {
                Some((name, _)) => format!("{name}:{version}"),
                None => image,
            },
            None => image,
        })
}

/// Invariants 9 and 10 at quiescence: the DaemonSet runs the desired image (a hand edit during
/// the run was written over; only `Revert` meets edits during the run), and the undecodable
/// object failed as `InvalidSpec` without a DaemonSet of its own.
fn check_drift_and_bad_object(harness: &Harness<'_>) {
    let store = harness.sim.store();
    let desired = desired_image(store);
    let live = daemon_set_image(store);
    // A referenced DaemonSet's template is its owner's: there is no drift to undo. In KubeVirt
    // compatibility a failed rollout keeps a hand edit: the reference writes nothing while no
    // updated pod is ready (row 2), and a template-only edit starts no canary (quirk 5).
    let kubevirt_failed = harness.plan.compatibility == Compatibility::KubeVirt
        && cds_phase(store).as_deref() == Some("failed");
    if live.is_some() && live != desired && !harness.plan.workload && !kubevirt_failed {
        harness.world.violate(
            Invariant::DriftHandled,
            format!("at quiescence the DaemonSet runs {live:?}, the spec asks for {desired:?}"),
        );
    }
    if harness.plan.bad_object {
        let key = canary_sim::ResourceKey::of::<CanaryDaemonSet>();
        let status = store
            .get_value(&key, Some(NAMESPACE), BAD_NAME)
            .map(|object| object["status"].clone())
            .unwrap_or_default();
        let message = status["message"].as_str().unwrap_or_default();
        if status["reason"] != "InvalidSpec" || !message.contains("restartThreshold") {
            harness.world.violate(
                Invariant::BadObjectFailsAlone,
                format!("the undecodable object's status is {status}"),
            );
        }
        if store.get::<DaemonSet>(Some(NAMESPACE), BAD_NAME).is_some() {
            harness.world.violate(
                Invariant::BadObjectFailsAlone,
                "a DaemonSet was written for the undecodable object",
            );
        }
    }
}

/// Invariant 28: every replica running at quiescence is ready and alive.
fn check_probes(harness: &Harness<'_>) {
    for replica in &harness.replicas {
        let running = replica
            .task
            .as_ref()
            .is_some_and(|task| !task.is_finished());
        let Some(health) = replica.health.as_ref().filter(|_| running) else {
            continue;
        };
        if let Some(why) = health.not_ready() {
            harness.world.violate(
                Invariant::ProbesTrueAtQuiescence,
                format!("{} not ready at quiescence: {why}", replica.identity),
            );
        }
        if let Some(why) = health.not_alive() {
            harness.world.violate(
                Invariant::ProbesTrueAtQuiescence,
                format!("{} not alive at quiescence: {why}", replica.identity),
            );
        }
    }
}

/// Invariant 26 at quiescence: no replica's write was answered with an unknown-field warning,
/// and the bad object lost its undeclared field when it was stored.
fn check_declared_fields(harness: &Harness<'_>) {
    let warnings = harness.sim.faults().warnings();
    if let Some(first) = warnings.first() {
        harness.world.violate(
            Invariant::DeclaredFieldsOnly,
            format!(
                "writes answered with warnings ({} kept), the first {first}",
                warnings.len()
            ),
        );
    }
    if harness.plan.bad_object {
        let key = canary_sim::ResourceKey::of::<CanaryDaemonSet>();
        let kept = harness
            .sim
            .store()
            .get_value(&key, Some(NAMESPACE), BAD_NAME)
            .and_then(|object| object["spec"].get(MISPLACED_FIELD).cloned());
        if let Some(value) = kept {
            harness.world.violate(
                Invariant::DeclaredFieldsOnly,
                format!("the stored object kept spec.{MISPLACED_FIELD} = {value}"),
            );
        }
    }
}

/// Runs the scenario of `plan` to quiescence, publishing its virtual time to `heartbeat`. Call
/// inside a paused current-thread runtime.
pub async fn run(plan: &Plan, heartbeat: Arc<std::sync::atomic::AtomicU64>) -> Outcome {
    let world = World::new()
        .pods_driver(plan.pods.is_some())
        .soaked(plan.compatibility == Compatibility::Fixed)
        .heartbeat(heartbeat);
    let intent: SharedIntent = Arc::new(Mutex::new(Intent::default()));
    let sim = match canary_kube_adapter::crd()
        .map_err(|e| e.to_string())
        .and_then(|crd| {
            Sim::builder()
                .nodes(plan.nodes)
                .seed(plan.seed)
                .neighbours_per_node(plan.neighbours_per_node)
                .crd(crd)
                .kubevirt_crd(false)
                .build()
                .map_err(|e| e.to_string())
        }) {
        Ok(sim) => sim,
        Err(error) => {
            world.violate(
                Invariant::NoPanicNoHotLoop,
                format!("harness: cannot start the simulator: {error}"),
            );
            return Outcome {
                violations: world.violations(),
                exercised: world.exercised(),
                end: None,
            };
        }
    };
    let cluster = sim.cluster().clone();
    let stale = 5.0 + plan.max_latency.as_secs_f64() * 2.0;
    let checker = Checker::new(world.clone(), intent.clone(), stale);
    let events = sim.store().subscribe();
    let checker = checker
        .with_nodes(sim.store().list::<Node>(None))
        .with_pods_plan(plan.pods.clone())
        .with_kubevirt_compatibility(plan.compatibility == Compatibility::KubeVirt)
        .with_analysis(plan.analysis.is_some());
    let checker_task = tokio::spawn(checker.run(events));

    let epoch = Timestamp::from_second(1_767_225_600).unwrap_or(Timestamp::UNIX_EPOCH);
    let mut harness = Harness {
        plan,
        start: Instant::now(),
        world: world.clone(),
        intent: intent.clone(),
        clock: Clock::tokio_virtual(epoch),
        replicas: (0..plan.replicas)
            .map(|i| Replica {
                identity: format!("replica-{}", ["a", "b"][i % 2]),
                connection: None,
                stop: None,
                task: None,
                restart_at: None,
                started_at: Instant::now(),
                health: None,
            })
            .collect(),
        rng: Rng::new(plan.seed, 2),
        undo: Vec::new(),
        not_ready: BTreeMap::new(),
        tokens: Tokens::default(),
        isolated: Vec::new(),
        isolations: Vec::new(),
        last_hand_edit: None,
        sim,
        cluster,
    };
    if plan.analysis.as_ref().is_some_and(|a| a.token.is_some()) {
        harness.write_token();
    }
    for rule in &plan.faults {
        harness.sim.faults().add(rule.clone());
    }
    harness.label_nodes();
    match plan.idle_first {
        None => {
            harness.set_version(1, plan.initial);
            if plan.bad_object {
                harness.store_bad_object();
                harness.send_refused_writes().await;
            }
            for index in 0..plan.replicas {
                harness.start_replica(index);
            }
        }
        Some(idle) => {
            for index in 0..plan.replicas {
                harness.start_replica(index);
            }
            harness.idle(idle).await;
            harness.set_version(1, plan.initial);
            if plan.bad_object {
                harness.store_bad_object();
                harness.send_refused_writes().await;
            }
        }
    }

    let tick = Duration::from_secs(1);
    let start = Instant::now();
    let mut actions = plan.actions.iter().peekable();
    let mut changes = plan.changes.iter().peekable();
    let mut last_change = start;
    let mut ended_since: Option<Instant> = None;
    let mut healed_at: Option<Instant> = None;
    let mut quiet_since: Option<(Instant, String)> = None;
    let mut paused_since: Option<Instant> = None;
    let mut hold_stage = 0;
    let mut token_stage = 0;
    let mut failed_since: Option<Instant> = None;
    let mut retried = false;
    let mut fully_promoted = false;
    let mut rival_stage = 0;
    let mut end = None;
    loop {
        tokio::time::sleep(tick).await;
        let now = Instant::now();
        harness.reap().await;
        harness.promote_if_due(&mut paused_since);
        harness.hold_if_due(now - start, &mut hold_stage);
        harness.rotate_token_if_due(now - start, &mut token_stage);
        harness.full_promote_if_due(now - start, &mut fully_promoted);
        harness.retry_if_due(&mut failed_since, &mut retried);
        harness.rival_if_due(&mut rival_stage);
        while let Some((at, action)) = actions.peek() {
            if start + *at > now {
                break;
            }
            harness.act(*action).await;
            actions.next();
        }
        harness.undo_due();
        harness.isolations_due();
        harness.restart_due();
        let phase = ended(harness.sim.store());
        match (&phase, ended_since) {
            (Some(_), None) => ended_since = Some(now),
            (None, Some(_)) => ended_since = None,
            _ => {}
        }
        if let Some(change) = changes.peek() {
            let due = match change.when {
                When::InFlight(after) => now >= last_change + after,
                When::AfterEnd(after) => ended_since.is_some_and(|at| now >= at + after),
            };
            // A scenario whose rollout never ends still gets its later changes.
            let overdue = now >= last_change + rollout_bound(plan);
            if due || overdue {
                harness.set_version(change.version, change.behavior);
                last_change = now;
                ended_since = None;
                changes.next();
            }
            continue;
        }
        if actions.peek().is_some() {
            continue;
        }
        let Some(healed) = healed_at else {
            harness.heal();
            healed_at = Some(now);
            continue;
        };
        match (&phase, &quiet_since) {
            (Some(p), Some((_, q))) if p == q => {}
            (Some(p), _) => quiet_since = Some((now, p.clone())),
            (None, _) => quiet_since = None,
        }
        // A rollout held on request is quiet by design, not at rest: quiescence (and the hand
        // edit at rest, which a hold keeps until the resume) waits for the resume.
        let held = hold_stage == 1;
        if let Some((since, p)) = &quiet_since
            && now >= *since + QUIET
            && !held
        {
            counts_settle(harness.sim.store()).await;
            at_quiescence(harness.sim.store(), &world, &intent, plan.pods.is_some());
            check_drift_and_bad_object(&harness);
            check_declared_fields(&harness);
            check_probes(&harness);
            if plan.edit_at_rest {
                harness.edit_at_rest().await;
            }
            end = Some(p.clone());
            break;
        }
        if now >= healed.max(last_change) + rollout_bound(plan) {
            at_quiescence(harness.sim.store(), &world, &intent, plan.pods.is_some());
            world.violate(
                Invariant::RolloutsEnd,
                format!(
                    "no end within {:?} of the last change and the heal",
                    rollout_bound(plan)
                ),
            );
            break;
        }
    }
    if let Some(phase) = &end {
        // `rolledBack` is counted at quiescence (`rolled_back`), beside these two.
        world.count(|e| match phase.as_str() {
            "successful" => e.successful += 1,
            "failed" => e.failed += 1,
            _ => {}
        });
    }
    let peak = world.max_requests_per_minute();
    world.count(|e| {
        e.virtual_seconds = start.elapsed().as_secs();
        e.peak_requests_per_minute = peak;
    });
    for index in 0..harness.replicas.len() {
        harness.stop_replica(index, true).await;
    }
    harness.cluster.shutdown();
    checker_task.abort();
    if let Err(error) = world.requests().write(plan.seed, &plan.to_string()) {
        world.violate(
            Invariant::NoPanicNoHotLoop,
            format!("harness: cannot write the request trace: {error}"),
        );
    }
    Outcome {
        violations: world.violations(),
        exercised: world.exercised(),
        end,
    }
}
