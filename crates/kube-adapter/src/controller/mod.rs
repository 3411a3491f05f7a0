//! Wiring: the controller's terms, each with its watches, caches and kube-runtime Controller,
//! and leader election around them.
//!
//! [`run`] starts a term at once (one replica) or for each term this replica leads
//! ([`LeaderElection`], the Lease loop in `lease`), and stops it when the lease is lost, on
//! shutdown or when the reconcile loop wedges. A term is kube-rs's controller-rs shape in
//! named parts: its stop, its watches (`watches`, one stream of triggers each), the context its
//! passes share, the `Controller` over the triggers, and its end.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use canary_analysis::{AllowedAddresses, Provider, Providers};
use canary_predicates::PodSummary;
use futures::stream::BoxStream;
use futures::{FutureExt, StreamExt, future};
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use kube::Client;
use kube::runtime::controller::{self, Controller};
use kube::runtime::events::Reporter;
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::watcher;
use tokio::sync::mpsc;
use tracing::{info, warn};

use crate::Error;
use crate::clock::Clock;
use crate::crd::CanaryDaemonSet;
use crate::health::Health;
use crate::index::{OwnerIndex, WatchedPod};
pub use crate::lease::LeaderElection;
use crate::lease::{self, Elector, Leadership};
use crate::neighbours::{NeighbourIndex, WatchedNeighbour};
use crate::observer::{Observer, Report};
use crate::reconcile::{Caches, Context, Requeue, WriteLedger, error_policy, reconcile};
use crate::trigger::{COUNTS_WAIT, Coalesced, FACTS_WAIT, WatchErrors, WatchLog};
use crate::undecodable::Notice;
use crate::watched_node::{CachedNode, WatchedNode};
use crate::workload::WorkloadWatches;
use watches::{
    Listed, Source, Triggers, Watching, node_readers, owner_of_labelled, owner_or_referrers,
};

mod watches;

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
    /// Where analysis runs send their queries (default: [`Providers`], over HTTP to each
    /// spec's provider, `analysis.prometheus.address`).
    pub analysis: Arc<dyn Provider>,
    /// The analysis addresses allowed (default: none, so every `spec.analysis` is
    /// `InvalidSpec` until the administrator allows its address; issue 47).
    pub allowed_analysis_addresses: Arc<AllowedAddresses>,
    /// The notifications' receivers and delivery (default: none defined, so a subscription
    /// is a Warning event on its object and nothing is sent).
    pub notifier: Arc<crate::notify::Notifier>,
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
            analysis: Arc::new(Providers::default()),
            allowed_analysis_addresses: Arc::new(AllowedAddresses::none()),
            notifier: Arc::new(crate::notify::Notifier::disabled()),
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

/// One controller term: fresh watches, caches and memory (but the `ledger` of the process's
/// DaemonSet writes), until `stop` completes or the reconcile loop wedges (then the reason).
///
/// The shape of kube-rs's controller-rs example, in named parts: the stop of the term, the
/// watches ([`watches`]), the context every pass shares, the `Controller` over their triggers
/// ([`serve`]), and the end of the term ([`until_stopped_or_wedged`]).
async fn run_controller(
    client: Client,
    config: &ControllerConfig,
    stop: impl Future<Output = ()> + Send + 'static,
    ledger: WriteLedger,
) -> Option<String> {
    let stop = TermStop::spawn(stop);
    let health = config.health.clone();
    let log = WatchLog::new(config.server_url.clone());
    let watching = Watching {
        client: &client,
        namespace: config.namespace.as_deref(),
        listed: Listed::new(health.clone()),
        errors: WatchErrors {
            observer: config.observer.clone(),
            health: health.clone(),
            log: log.clone(),
        },
    };
    // The CanaryDaemonSets' cache comes first: the DaemonSet and node watches read it to
    // tell whether an event concerns any CanaryDaemonSet. One that concerns none is no
    // trigger: counted as waiting work, it would never be served, and an idle controller would
    // count as wedged (and stop) after `Health::wedge_timeout`.
    let (cds_store, cds_writer) = reflector::store::<CanaryDaemonSet>();
    let (ds_store, ds_writer) = reflector::store::<DaemonSet>();
    let daemon_sets = watching.daemon_sets(ds_writer, cds_store.clone());
    let pods = OwnerIndex::<PodSummary>::new();
    let (counts_moved, counted) = Coalesced::<CanaryDaemonSet>::new(COUNTS_WAIT);
    let (facts_moved, facts) = Coalesced::<CanaryDaemonSet>::new(FACTS_WAIT);
    let pod_triggers = watching.pods(pods.clone(), counts_moved, facts_moved.clone());
    let neighbours = NeighbourIndex::new();
    let neighbour_triggers =
        watching.neighbours(neighbours.clone(), cds_store.clone(), facts_moved);
    let revisions = OwnerIndex::<ControllerRevision>::new();
    let revision_triggers = watching.revisions(revisions.clone());
    let nodes = OwnerIndex::<CachedNode>::new();
    let node_triggers = watching.nodes(nodes.clone(), cds_store.clone());
    let (workload_tx, workload_triggers) = mpsc::unbounded_channel();
    let workloads = Arc::new(
        WorkloadWatches::new(
            client.clone(),
            config.observer.clone(),
            health.clone(),
            workload_tx,
        )
        .with_log(log),
    );
    let caches = Caches {
        daemon_sets: ds_store,
        daemon_sets_ready: watching.listed.flag(Source::DaemonSets),
        pods,
        revisions,
        nodes,
        workloads: workloads.clone(),
        canary_daemon_sets: cds_store.clone(),
        neighbours,
    };
    let ctx = context(client.clone(), config, caches, ledger);
    let (undecodable_tx, undecodable) = mpsc::unbounded_channel::<Notice>();
    let canaries = watching.canary_daemon_sets(cds_writer, undecodable_tx, ctx.clone());
    let invalid_objects = tokio::spawn(crate::undecodable::report(undecodable, ctx.clone()));
    let triggers = TermTriggers {
        canaries,
        flushes: ctx.take_status_flushes().map(status_flushes),
        daemon_sets,
        pods: pod_triggers,
        revisions: revision_triggers,
        nodes: node_triggers,
        neighbours: neighbour_triggers,
        counted: Box::pin(counted),
        facts: Box::pin(facts),
        workloads: workload_triggers,
    };
    let controller = serve(triggers, cds_store, ctx, config, stop.graceful);
    let wedged = until_stopped_or_wedged(controller, &health, stop.stopping).await;
    stop.stopper.abort();
    invalid_objects.abort();
    // The referenced DaemonSets' watches end with the term.
    drop(workloads);
    wedged
}

/// How a term learns that it must stop: the `Controller` wants a `Sync` shutdown future (a
/// oneshot receiver is one), and the grace of the passes in flight starts at the same moment.
struct TermStop {
    /// Completes when the term must stop: the `Controller`'s graceful shutdown.
    graceful: tokio::sync::oneshot::Receiver<()>,
    /// Completes at the same moment: the start of [`STOP_GRACE`].
    stopping: tokio::sync::oneshot::Receiver<()>,
    /// The task that waits for the stop and tells both.
    stopper: tokio::task::JoinHandle<()>,
}

impl TermStop {
    fn spawn(stop: impl Future<Output = ()> + Send + 'static) -> Self {
        let (stop_tx, graceful) = tokio::sync::oneshot::channel::<()>();
        let (stopping_tx, stopping) = tokio::sync::oneshot::channel::<()>();
        let stopper = tokio::spawn(async move {
            stop.await;
            let _ = stop_tx.send(());
            let _ = stopping_tx.send(());
        });
        TermStop {
            graceful,
            stopping,
            stopper,
        }
    }
}

/// The context every pass of a term shares, over its caches.
fn context(
    client: Client,
    config: &ControllerConfig,
    caches: Caches,
    ledger: WriteLedger,
) -> Arc<Context> {
    let reporter = Reporter {
        controller: config.field_manager.clone(),
        instance: config.instance.clone(),
    };
    Arc::new(
        Context::new(
            client,
            caches,
            reporter,
            config.clock.clone(),
            config.observer.clone(),
            config.field_manager.clone(),
            config.requeue,
        )
        .with_health(config.health.clone())
        .with_analysis(Arc::clone(&config.analysis))
        .with_allowed_analysis_addresses(Arc::clone(&config.allowed_analysis_addresses))
        .with_notifier(Arc::clone(&config.notifier))
        .with_write_ledger(ledger),
    )
}

/// Deferred status writes that came due (see `Context::take_status_flushes`), as triggers.
fn status_flushes(
    flushes: mpsc::UnboundedReceiver<Arc<CanaryDaemonSet>>,
) -> Triggers<CanaryDaemonSet> {
    Box::pin(futures::stream::unfold(flushes, |mut rx| async move {
        let cds = rx.recv().await?;
        Some((Ok::<_, watcher::Error>((*cds).clone()), rx))
    }))
}

/// Everything that brings a CanaryDaemonSet to a pass in one term.
struct TermTriggers {
    /// The CanaryDaemonSets themselves (spec and marks).
    canaries: Triggers<CanaryDaemonSet>,
    /// Deferred status writes that came due; `None` once taken.
    flushes: Option<Triggers<CanaryDaemonSet>>,
    daemon_sets: Triggers<DaemonSet>,
    pods: Triggers<WatchedPod>,
    revisions: Triggers<ControllerRevision>,
    nodes: Triggers<WatchedNode>,
    /// The neighbour pods' watch: it triggers through `facts` only (its stream yields none).
    neighbours: Triggers<WatchedNeighbour>,
    /// Pod events that moved counts only, one pass per `COUNTS_WAIT`.
    counted: BoxStream<'static, ObjectRef<CanaryDaemonSet>>,
    /// Pod events of Pods-driver rollouts, one pass per `FACTS_WAIT`.
    facts: BoxStream<'static, ObjectRef<CanaryDaemonSet>>,
    /// The referenced DaemonSets' watches (`spec.workloadRef`).
    workloads: mpsc::UnboundedReceiver<ObjectRef<CanaryDaemonSet>>,
}

/// kube-runtime's `Controller` over a term's triggers, running [`reconcile`] with `ctx`
/// until `graceful` completes (the passes in flight then finish). Every trigger ends as a
/// pass or as an object that is gone, and is counted as served.
fn serve(
    triggers: TermTriggers,
    canaries: reflector::Store<CanaryDaemonSet>,
    ctx: Arc<Context>,
    config: &ControllerConfig,
    graceful: tokio::sync::oneshot::Receiver<()>,
) -> impl Future<Output = ()> + Send + use<> {
    let referrers = canaries.clone();
    let node_targets = canaries.clone();
    let controller = Controller::for_stream(triggers.canaries, canaries);
    let controller = match triggers.flushes {
        Some(flushes) => controller.watches_stream(flushes, |cds: CanaryDaemonSet| {
            Some(ObjectRef::from_obj(&cds))
        }),
        None => controller,
    };
    let served = config.health.clone();
    controller
        .with_config(controller::Config::default().concurrency(config.concurrency))
        .watches_stream(triggers.daemon_sets, move |ds: DaemonSet| {
            owner_or_referrers(&ds, &referrers.state())
        })
        .watches_stream(triggers.pods, owner_of_labelled)
        .watches_stream(triggers.revisions, owner_of_labelled)
        // A node that changes (NotReady, cordoned, back) matters to Pods-driver rollouts only.
        .watches_stream(triggers.nodes, move |_node: WatchedNode| {
            node_readers(&node_targets.state())
        })
        .watches_stream(triggers.neighbours, |_pod: WatchedNeighbour| {
            None::<ObjectRef<CanaryDaemonSet>>
        })
        .reconcile_on(triggers.counted)
        .reconcile_on(triggers.facts)
        .reconcile_on(futures::stream::unfold(
            triggers.workloads,
            |mut rx| async move {
                let cds = rx.recv().await?;
                Some((cds, rx))
            },
        ))
        .graceful_shutdown_on(graceful.map(|_| ()))
        .run(reconcile, error_policy, ctx)
        .for_each(move |result| {
            served.served();
            if let Err(error) = result {
                match error {
                    controller::Error::ObjectNotFound(_) => {}
                    other => warn!(error = %other, "controller"),
                }
            }
            future::ready(())
        })
}

/// Runs `controller` until it ends, the reconcile loop wedges (then the reason) or the grace
/// after `stopping` runs out.
///
/// kube's graceful shutdown lets the passes in flight finish, and waits as long as they take:
/// in the simulation (finding 30) a term that lost its lease while its connection was frozen
/// never ended, nor did the replica on a stop request, without the liveness check seeing a
/// pass run or work wait. Whatever held it, the passes in flight now get [`STOP_GRACE`] to
/// finish, then the term ends (a pass cut short is idempotent: the next term, or replica,
/// reads the cluster again).
async fn until_stopped_or_wedged(
    controller: impl Future<Output = ()>,
    health: &Health,
    stopping: tokio::sync::oneshot::Receiver<()>,
) -> Option<String> {
    let wedge = async {
        loop {
            tokio::time::sleep(WEDGE_CHECK).await;
            if let Some(why) = health.wedged() {
                return why;
            }
        }
    };
    let grace = async {
        if stopping.await.is_ok() {
            tokio::time::sleep(STOP_GRACE).await;
        } else {
            future::pending::<()>().await;
        }
    };
    tokio::select! {
        // In order, not at random: a simulation seed replays exactly.
        biased;
        () = controller => None,
        why = wedge => Some(why),
        () = grace => None,
    }
}
