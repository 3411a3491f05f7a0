//! Wiring: watches, caches, the kube-runtime Controller and leader election.

use crate::analysis::{HttpPrometheus, QueryApi};
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::watched_node::{CachedNode, WatchedNode};
use canary_predicates::PodSummary;
use futures::{FutureExt, StreamExt, TryStreamExt, future};
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use kube::api::{Api, DynamicObject};
use kube::runtime::controller::{self, Controller};
use kube::runtime::events::Reporter;
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{PredicateConfig, predicates};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use tokio::sync::mpsc;
use tracing::{info, warn};

use crate::Error;
use crate::clock::Clock;
use crate::crd::CanaryDaemonSet;
use crate::daemon_set_trigger::DaemonSetTriggers;
use crate::desired::OWNER_LABEL;
use crate::health::Health;
use crate::index::{Moved, OwnerIndex, WatchedPod};
use crate::lease::{self, Elector, Leadership};
use crate::observer::{Observer, Report};
use crate::reconcile::{Caches, Context, Requeue, WriteLedger, error_policy, reconcile};
use crate::scope::api;
use crate::trigger::{Coalesced, WatchBackoff, WatchErrors, WatchLog, relisting_watcher};
use crate::undecodable::Notice;
use crate::workload::WorkloadWatches;
use canary_state_machine::Driver;

/// Leader election through a `coordination.k8s.io/v1` Lease ([`crate::lease`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderElection {
    /// Lease name.
    pub lease_name: String,
    /// Namespace of the Lease (the controller's own).
    pub namespace: String,
    /// This replica's identity (its pod name).
    pub identity: String,
    /// Lease duration in seconds: how long a dead leader blocks the others.
    pub duration_seconds: u64,
    /// How long before another replica may take over the leader stops writing: the renew
    /// deadline is the duration less this. Renewals are tried every half of it.
    pub grace_seconds: u64,
}

impl LeaderElection {
    /// Defaults: lease `daemonset-canary`, 15 s duration, 5 s grace.
    pub fn new(namespace: impl Into<String>, identity: impl Into<String>) -> Self {
        Self {
            lease_name: "daemonset-canary".to_owned(),
            namespace: namespace.into(),
            identity: identity.into(),
            duration_seconds: 15,
            grace_seconds: 5,
        }
    }
}

/// How the controller runs.
#[derive(Debug, Clone)]
pub struct ControllerConfig {
    /// Only watch this namespace (default: all namespaces).
    pub namespace: Option<String>,
    /// Field manager of every write, and the event reporter's controller name.
    pub field_manager: String,
    /// Reporter instance for events (the pod name).
    pub instance: Option<String>,
    /// Source of "now" for status times.
    pub clock: Clock,
    /// Leader election; `None` runs unconditionally (one replica).
    pub leader_election: Option<LeaderElection>,
    /// Transitions and counters.
    pub observer: Observer,
    /// Requeue delays.
    pub requeue: Requeue,
    /// Reconciles running at once (0: unbounded; one object is never reconciled twice at once).
    pub concurrency: u16,
    /// Readiness and liveness, for the binary's `/readyz` and `/healthz`.
    pub health: Health,
    /// The API server's URL, named in the warning when the watches cannot reach it (the client
    /// does not know it).
    pub server_url: Option<String>,
    /// Where analysis runs send their Prometheus queries (default: over HTTP to each spec's
    /// `analysis.prometheus.address`).
    pub prometheus: Arc<dyn QueryApi>,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        Self {
            namespace: None,
            field_manager: "daemonset-canary".to_owned(),
            instance: None,
            clock: Clock::system(),
            leader_election: None,
            observer: Observer::default(),
            requeue: Requeue::default(),
            concurrency: 0,
            health: Health::default(),
            server_url: None,
            prometheus: Arc::new(HttpPrometheus::default()),
        }
    }
}

/// Runs the controller until `shutdown` completes.
///
/// With leader election, the controller only runs while this replica holds the lease: it
/// starts on acquiring it, stops (in-flight passes finish) on losing it and waits to acquire
/// it again.
///
/// A reconcile loop that stays wedged ([`Health::wedged`]) stops the controller: a leader gives
/// up its Lease, so that a standby takes over, and `run` returns [`Error::Wedged`], so that the
/// process exits and is restarted.
///
/// # Errors
///
/// [`Error::Wedged`]. API errors are retried: the Lease every retry period (a replica that
/// cannot reach it waits, as a standby), watches with backoff, passes by the error policy; a
/// lease release that fails at the stop is logged, the lease expires on its own.
pub async fn run(
    client: Client,
    config: ControllerConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    let shutdown = shutdown.boxed().shared();
    let Some(election) = config.leader_election.clone() else {
        config.observer.report(Report::Leader(true));
        config.health.set_leading(true);
        let wedged = run_controller(client, &config, shutdown, WriteLedger::default()).await;
        config.health.set_leading(false);
        return wedged.map_or(Ok(()), |why| Err(Error::Wedged(why)));
    };
    let leadership = Leadership::new(config.clock.clone());
    let elector =
        Elector::new(&client, &election, config.clock.clone()).reporting_to(config.health.clone());
    // Every write of the controller goes through the guard: a pass that began while leading
    // sends nothing once the renew deadline has passed (rule 7 of `lease::rules`).
    let client = lease::guarded(client, leadership.clone());
    let (release, released) = tokio::sync::oneshot::channel::<()>();
    // The campaign runs in this task, beside the controller, not spawned: a replica whose task
    // is aborted stops renewing with it.
    let campaign = elector.campaign(leadership.clone(), async move {
        let _ = released.await;
    });
    let controller = async {
        let wedged = lead_while_elected(client, &config, &election, &leadership, shutdown).await;
        // The controller has stopped: the campaign may release the lease.
        let _ = release.send(());
        wedged
    };
    let ((), wedged) = tokio::join!(campaign, controller);
    wedged.map_or(Ok(()), |why| Err(Error::Wedged(why)))
}

/// Runs the controller for each term this replica leads, until `shutdown` or a wedge (then
/// the reason).
async fn lead_while_elected(
    client: Client,
    config: &ControllerConfig,
    election: &LeaderElection,
    leadership: &Leadership,
    shutdown: future::Shared<futures::future::BoxFuture<'static, ()>>,
) -> Option<String> {
    let mut leader = leadership.subscribe();
    // The one memory that outlives a term.
    let ledger = WriteLedger::default();
    loop {
        // Wait to lead (or stop).
        let acquired = tokio::select! {
            // In order, not at random: a simulation seed replays exactly.
            biased;
            () = shutdown.clone() => false,
            changed = leader.wait_for(|is_leader| *is_leader) => changed.is_ok(),
        };
        if !acquired {
            return None;
        }
        info!(identity = %election.identity, "leading");
        config.observer.report(Report::Leader(true));
        config.health.set_leading(true);
        let mut watch = leader.clone();
        let lost = async move {
            let _ = watch.wait_for(|is_leader| !*is_leader).await;
        };
        let stop = future::select(shutdown.clone(), lost.boxed()).map(|_| ());
        let wedged = run_controller(client.clone(), config, stop, ledger.clone()).await;
        config.observer.report(Report::Leader(false));
        config.health.set_leading(false);
        if let Some(why) = wedged {
            warn!(identity = %election.identity, %why, "the reconcile loop is wedged: giving up the lease");
            return Some(why);
        }
        if shutdown.clone().now_or_never().is_some() {
            return None;
        }
        warn!(identity = %election.identity, "lost the lease, controller stopped");
    }
}

/// How long the passes in flight may take to finish once a term is told to stop.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// How often the reconcile loop is checked for a wedge.
const WEDGE_CHECK: Duration = Duration::from_secs(10);

/// How long pod events that move only reported counts wait for their pass (see
/// [`Moved::Counts`]): the status' counts lag the pods by at most this much.
const COUNTS_WAIT: Duration = Duration::from_secs(1);

/// How long the pod events of a Pods-driver rollout wait for their pass (see
/// [`Moved::Facts`]): the pass reads every pod, so one pass takes the events of this while
/// at once, instead of one pass per event. A replacement the budget allows starts at most this
/// much later (a node's replacement takes seconds), and a crash loop stops the deletions at
/// most this much later (no pass deletes meanwhile).
pub(crate) const FACTS_WAIT: Duration = Duration::from_millis(200);

/// One controller term: fresh watches, caches and memory (but the `ledger` of the process's
/// DaemonSet writes), until `stop` completes or the reconcile loop wedges (then the reason).
async fn run_controller(
    client: Client,
    config: &ControllerConfig,
    stop: impl Future<Output = ()> + Send + 'static,
    ledger: WriteLedger,
) -> Option<String> {
    // The Controller wants a Sync shutdown future; a oneshot receiver is one.
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let (stopping_tx, stopping) = tokio::sync::oneshot::channel::<()>();
    let stopper = tokio::spawn(async move {
        stop.await;
        let _ = stop_tx.send(());
        let _ = stopping_tx.send(());
    });
    let ns = config.namespace.as_deref();
    let owned = watcher::Config::default().labels(OWNER_LABEL);
    let health = config.health.clone();
    let listed = Listed::new(health.clone());
    let log = WatchLog::new(config.server_url.clone());
    let watch_errors = WatchErrors {
        observer: config.observer.clone(),
        health: health.clone(),
        log: log.clone(),
    };

    // The CanaryDaemonSets' cache comes first: the DaemonSet and node watches read it to
    // tell whether an event concerns any CanaryDaemonSet. One that concerns none is no
    // trigger: counted as waiting work, it would never be served, and an idle controller would
    // count as wedged (and stop) after `Health::wedge_timeout`.
    let (cds_store, cds_writer) = reflector::store::<CanaryDaemonSet>();
    let (ds_store, ds_writer) = reflector::store::<DaemonSet>();
    let ds_listed = listed.clone();
    // Every DaemonSet (not only labelled ones), so that an existing DaemonSet is found (and
    // adopted when asked) instead of being created again. An event is a trigger only when it
    // changed what a pass reads: the DaemonSet controller's status writes of a rollout mostly
    // move counts the pod index triggers on already (issue 20).
    let mut ds_triggers = DaemonSetTriggers::default();
    let ds_referrers = cds_store.clone();
    let ds_stream = relisting_watcher(api::<DaemonSet>(&client, ns), watcher::Config::default())
        .backoff(WatchBackoff::default())
        .map_ok(move |event| {
            ds_listed.note(&event, Source::DaemonSets);
            event
        })
        .reflect(ds_writer)
        .map_ok(move |event| ds_triggers.filter(event))
        .map_ok(move |ds| {
            ds.filter(|ds| !owner_or_referrers(ds, &ds_referrers.state()).is_empty())
        });
    let ds_stream = watch_errors.quiet_or_trigger(ds_stream, "daemonsets");

    let pods = OwnerIndex::<PodSummary>::new();
    let pod_index = pods.clone();
    let pod_listed = listed.clone();
    // A pod event is a trigger only when it moved something a pass reads (issue 20: most pod
    // events of a rollout move nothing a decision reads, an old pod's readiness or its end, a
    // new resource version; see `OwnerIndex::apply`). A relist's pods always are. One that
    // moves counts no decision turns on waits, with the others of its CanaryDaemonSet, for
    // one pass per `COUNTS_WAIT`, which brings the status' counts up to date.
    let (counts_moved, counted_triggers) = Coalesced::<CanaryDaemonSet>::new(COUNTS_WAIT);
    let (facts_moved, facts_triggers) = Coalesced::<CanaryDaemonSet>::new(FACTS_WAIT);
    let pod_stream = relisting_watcher(api::<WatchedPod>(&client, ns), owned.clone())
        .backoff(WatchBackoff::default())
        .map_ok(move |event| {
            let moved = pod_index.apply(&event);
            pod_listed.note(&event, Source::Pods);
            match event {
                watcher::Event::Apply(pod) | watcher::Event::Delete(pod) => match moved {
                    Moved::Decision => Some(pod),
                    Moved::Facts => {
                        if let Some(owner) = owner_of_labelled(pod) {
                            facts_moved.later(owner);
                        }
                        None
                    }
                    Moved::Counts => {
                        if let Some(owner) = owner_of_labelled(pod) {
                            counts_moved.later(owner);
                        }
                        None
                    }
                    Moved::Nothing => None,
                },
                watcher::Event::InitApply(pod) => Some(pod),
                watcher::Event::Init | watcher::Event::InitDone => None,
            }
        });
    let pod_stream = watch_errors.quiet_or_trigger(pod_stream, "pods");

    let revisions = OwnerIndex::<ControllerRevision>::new();
    let revision_index = revisions.clone();
    let revision_listed = listed.clone();
    let revision_stream = relisting_watcher(api::<ControllerRevision>(&client, ns), owned)
        .backoff(WatchBackoff::default())
        .map_ok(move |event| {
            revision_index.apply(&event);
            revision_listed.note(&event, Source::Revisions);
            event
        })
        .map_ok(watch_errors.working("controllerrevisions"))
        .touched_objects();
    let revision_stream = watch_errors.without_errors(revision_stream, "controllerrevisions");

    // Nodes, for the Pods driver: health, zone and canary labels, nothing else, decoded as
    // `WatchedNode` (a node's status carries its image list and more, several KiB each) and
    // kept as `CachedNode`. Not part of readiness: a controller without node permissions still
    // runs the MaxUnavailable driver. Kubelets report their status every few minutes: only a
    // change of what the driver reads triggers (`NodeTally`), and only Pods-driven rollouts.
    let nodes = OwnerIndex::<CachedNode>::new();
    let node_index = nodes.clone();
    let node_readers = cds_store.clone();
    let node_stream = relisting_watcher(
        Api::<WatchedNode>::all(client.clone()),
        watcher::Config::default(),
    )
    .backoff(WatchBackoff::default())
    .map_ok(move |event| {
        let moved = node_index.apply(&event);
        let node = match event {
            watcher::Event::Apply(node) | watcher::Event::Delete(node) => {
                (moved != Moved::Nothing).then_some(node)
            }
            watcher::Event::InitApply(node) => Some(node),
            watcher::Event::Init | watcher::Event::InitDone => None,
        };
        node.filter(|_| !pods_driven(&node_readers.state()).is_empty())
    });
    let node_stream = watch_errors.quiet_or_trigger(node_stream, "nodes");

    let (workload_tx, workload_triggers) = mpsc::unbounded_channel();
    let workloads = Arc::new(
        WorkloadWatches::new(
            client.clone(),
            config.observer.clone(),
            health.clone(),
            workload_tx,
        )
        .with_log(log.clone()),
    );

    let reporter = Reporter {
        controller: config.field_manager.clone(),
        instance: config.instance.clone(),
    };
    let caches = Caches {
        daemon_sets: ds_store,
        daemon_sets_ready: listed.flag(Source::DaemonSets),
        pods,
        revisions,
        nodes,
        workloads: workloads.clone(),
    };
    let ctx = Arc::new(
        Context::new(
            client.clone(),
            caches,
            reporter,
            config.clock.clone(),
            config.observer.clone(),
            config.field_manager.clone(),
            config.requeue,
        )
        .with_health(health.clone())
        .with_prometheus(Arc::clone(&config.prometheus))
        .with_write_ledger(ledger),
    );

    // CanaryDaemonSets are listed and watched untyped and decoded one by one: one object that
    // does not decode (an out-of-range integer an old API server stored, say) goes to
    // `undecodable` and ends as an InvalidSpec on that object, and never fails the list, which
    // would stop every other object's rollout. Only spec changes (generation) and the verbs'
    // marks trigger a pass: the status is this controller's own writing (see `spec_or_marks`).
    // The store still sees every change.
    let (undecodable_tx, undecodable) = mpsc::unbounded_channel::<Notice>();
    let cds_listed = listed.clone();
    let cds_ctx = ctx.clone();
    let cds_stream = relisting_watcher(
        crate::crd::dynamic_api(&client, ns),
        watcher::Config::default(),
    )
    .backoff(WatchBackoff::default())
    .try_filter_map(move |event| {
        cds_listed.note(&event, Source::CanaryDaemonSets);
        future::ready(Ok(typed_event(event, &undecodable_tx, &cds_ctx)))
    })
    .map_ok(say_when_none(ns))
    .map_ok(watch_errors.working("canarydaemonsets"))
    .reflect(cds_writer)
    .applied_objects()
    .predicate_filter(spec_or_marks, PredicateConfig::default());
    let cds_stream = watch_errors.without_errors(cds_stream, "canarydaemonsets");
    let invalid_objects = tokio::spawn(crate::undecodable::report(undecodable, ctx.clone()));
    let flushes = ctx.take_status_flushes().map(|rx| {
        futures::stream::unfold(rx, |mut rx| async move {
            let cds = rx.recv().await?;
            Some((Ok::<_, watcher::Error>((*cds).clone()), rx))
        })
    });
    let referrers = cds_store.clone();
    let node_targets = cds_store.clone();
    let controller = Controller::for_stream(cds_stream, cds_store);
    let controller = match flushes {
        // Deferred status writes that came due (see `Context::take_status_flushes`).
        Some(flushes) => controller.watches_stream(flushes, |cds: CanaryDaemonSet| {
            Some(ObjectRef::from_obj(&cds))
        }),
        None => controller,
    };
    let served = health.clone();
    let controller = controller
        .with_config(controller::Config::default().concurrency(config.concurrency))
        .watches_stream(ds_stream, move |ds: DaemonSet| {
            owner_or_referrers(&ds, &referrers.state())
        })
        .watches_stream(pod_stream, owner_of_labelled)
        .watches_stream(revision_stream, owner_of_labelled)
        // A node that changes (NotReady, cordoned, back) matters to Pods-driver rollouts only.
        .watches_stream(node_stream, move |_node: WatchedNode| {
            pods_driven(&node_targets.state())
        })
        .reconcile_on(counted_triggers)
        .reconcile_on(facts_triggers)
        .reconcile_on(futures::stream::unfold(
            workload_triggers,
            |mut rx| async move {
                let cds = rx.recv().await?;
                Some((cds, rx))
            },
        ))
        .graceful_shutdown_on(stop_rx.map(|_| ()))
        .run(reconcile, error_policy, ctx)
        .for_each(move |result| {
            // Every trigger ends here, as a pass or as an object that is gone: the loop moves.
            served.served();
            if let Err(error) = result {
                match error {
                    controller::Error::ObjectNotFound(_) => {}
                    other => warn!(error = %other, "controller"),
                }
            }
            future::ready(())
        });
    let wedge = async {
        loop {
            tokio::time::sleep(WEDGE_CHECK).await;
            if let Some(why) = health.wedged() {
                return why;
            }
        }
    };
    // kube's graceful shutdown lets the passes in flight finish, and waits as long as they
    // take: in the simulation (finding 30) a term that lost its lease while its connection was
    // frozen never ended, nor did the replica on a stop request, without the liveness check
    // seeing a pass run or work wait. Whatever held it, the passes in flight now get
    // `STOP_GRACE` to finish, then the term ends (a pass cut short is idempotent: the next
    // term, or replica, reads the cluster again).
    let grace = async {
        if stopping.await.is_ok() {
            tokio::time::sleep(STOP_GRACE).await;
        } else {
            future::pending::<()>().await;
        }
    };
    let wedged = tokio::select! {
        // In order, not at random: a simulation seed replays exactly.
        biased;
        () = controller => None,
        why = wedge => Some(why),
        () = grace => None,
    };
    stopper.abort();
    invalid_objects.abort();
    // The referenced DaemonSets' watches end with the term.
    drop(workloads);
    wedged
}

/// The CanaryDaemonSets a node event concerns: those of the Pods driver.
fn pods_driven(all: &[Arc<CanaryDaemonSet>]) -> Vec<ObjectRef<CanaryDaemonSet>> {
    all.iter()
        .filter(|cds| cds.spec.strategy.driver == Driver::Pods)
        .map(|cds| ObjectRef::from_obj(&**cds))
        .collect()
}

/// The CanaryDaemonSets a DaemonSet event concerns: its controller owner, and every one that
/// references it through `spec.workloadRef`.
fn owner_or_referrers(
    ds: &DaemonSet,
    all: &[Arc<CanaryDaemonSet>],
) -> Vec<ObjectRef<CanaryDaemonSet>> {
    let namespace = ds.namespace();
    let name = ds.name_any();
    let owner = ds
        .owner_references()
        .iter()
        .find(|o| o.controller == Some(true) && o.kind == "CanaryDaemonSet")
        .and_then(|o| {
            Some(ObjectRef::<CanaryDaemonSet>::new(&o.name).within(namespace.as_deref()?))
        });
    let referrers = all.iter().filter(|cds| {
        cds.namespace() == namespace
            && cds
                .spec
                .workload_ref
                .as_ref()
                .is_some_and(|w| w.name == name)
    });
    owner
        .into_iter()
        .chain(referrers.map(|cds| ObjectRef::from_obj(&**cds)))
        .collect()
}

/// What of a CanaryDaemonSet triggers a pass: its spec (the generation) and the marks of the
/// verbs, annotations a user sets to end a pause (`promote`), to hold (`pause`, `resume`) or to
/// start a failed rollout again (`retry`) or to go back (`abort`, `undo`);
/// the status is this controller's own writing.
fn spec_or_marks(cds: &CanaryDaemonSet) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    predicates::generation(cds).hash(&mut hasher);
    cds.annotations()
        .get(crate::crd::PROMOTE_ANNOTATION)
        .hash(&mut hasher);
    crate::crd::hold_requested(cds).hash(&mut hasher);
    for mark in [
        crate::crd::RETRY_ANNOTATION,
        crate::crd::ABORT_ANNOTATION,
        crate::crd::UNDO_ANNOTATION,
    ] {
        cds.annotations().get(mark).hash(&mut hasher);
    }
    Some(hasher.finish())
}

/// A CanaryDaemonSet watch event, decoded object by object. An object that does not decode is
/// sent to the `undecodable` reporter (with why) and kept out of the typed store: left out of a
/// (re)list, and removed (a `Delete` of a stand-in with its metadata) when it stops decoding. A
/// deleted object is forgotten.
fn typed_event(
    event: watcher::Event<DynamicObject>,
    undecodable: &mpsc::UnboundedSender<Notice>,
    ctx: &Context,
) -> Option<watcher::Event<CanaryDaemonSet>> {
    use watcher::Event;
    // A stopped term has dropped the receiver: nothing left to report to.
    let decoded = |object: DynamicObject| match crate::crd::decode(object) {
        Ok(cds) => {
            let _ = undecodable.send(Notice::Cleared(ObjectRef::from_obj(&cds)));
            Some(cds)
        }
        Err(undecoded) => {
            let undecoded = *undecoded;
            let _ = undecodable.send(Notice::Invalid(Box::new(undecoded.stand_in), undecoded.why));
            None
        }
    };
    match event {
        Event::Init => Some(Event::Init),
        Event::InitDone => Some(Event::InitDone),
        Event::InitApply(object) => decoded(object).map(Event::InitApply),
        Event::Apply(object) => {
            let stand_in = crate::crd::stand_in(&object);
            Some(decoded(object).map_or(Event::Delete(stand_in), Event::Apply))
        }
        Event::Delete(object) => {
            let gone = crate::crd::stand_in(&object);
            let _ = undecodable.send(Notice::Cleared(ObjectRef::from_obj(&gone)));
            ctx.forget(&gone);
            Some(Event::Delete(gone))
        }
    }
}

/// The four caches of a term, and whether each has listed once: the leader is ready when all
/// have ([`Health::set_caches_ready`]).
#[derive(Clone)]
struct Listed {
    flags: [Arc<AtomicBool>; 4],
    health: Health,
}

/// Which cache an event came from (an index into [`Listed`]).
#[derive(Clone, Copy)]
enum Source {
    DaemonSets = 0,
    Pods = 1,
    Revisions = 2,
    CanaryDaemonSets = 3,
}

impl Listed {
    fn new(health: Health) -> Self {
        health.set_caches_ready(false);
        Self {
            flags: Default::default(),
            health,
        }
    }

    fn note<K>(&self, event: &watcher::Event<K>, source: Source) {
        if matches!(event, watcher::Event::InitDone) {
            self.flag(source).store(true, Ordering::Release);
            if self.flags.iter().all(|flag| flag.load(Ordering::Acquire)) {
                self.health.set_caches_ready(true);
            }
        }
    }

    /// Whether `source` has listed once (shared: the pass reads the DaemonSets' one).
    fn flag(&self, source: Source) -> Arc<AtomicBool> {
        match source {
            Source::DaemonSets => self.flags[0].clone(),
            Source::Pods => self.flags[1].clone(),
            Source::Revisions => self.flags[2].clone(),
            Source::CanaryDaemonSets => self.flags[3].clone(),
        }
    }
}

/// A pass-through of the CanaryDaemonSet watch events that says once, at info, when the first
/// complete list finds none: a controller with nothing to do is otherwise silent, and its user
/// wonders whether it works.
fn say_when_none(
    namespace: Option<&str>,
) -> impl FnMut(watcher::Event<CanaryDaemonSet>) -> watcher::Event<CanaryDaemonSet> + Send + 'static
{
    let place = match namespace {
        Some(ns) => format!("in namespace {ns}"),
        None => "in any namespace".to_owned(),
    };
    let mut listed = 0_usize;
    let mut said = false;
    move |event| {
        match &event {
            watcher::Event::Init => listed = 0,
            watcher::Event::InitApply(_) => listed += 1,
            watcher::Event::InitDone if listed == 0 && !said => {
                said = true;
                info!("no CanaryDaemonSet {place} yet: nothing to roll out until one is created");
            }
            _ => {}
        }
        event
    }
}

/// Maps a pod or ControllerRevision to its CanaryDaemonSet through the [`OWNER_LABEL`].
fn owner_of_labelled<K: kube::Resource>(obj: K) -> Option<ObjectRef<CanaryDaemonSet>> {
    let name = obj.labels().get(OWNER_LABEL)?.clone();
    let namespace = obj.namespace()?;
    Some(ObjectRef::new(&name).within(&namespace))
}
