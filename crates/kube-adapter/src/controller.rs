//! Wiring: watches, caches, the kube-runtime Controller and leader election.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use canary_predicates::PodSummary;
use futures::{FutureExt, StreamExt, TryStreamExt, future};
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::controller::{self, Controller};
use kube::runtime::events::Reporter;
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{PredicateConfig, predicates};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use tracing::{info, warn};

use crate::Error;
use crate::clock::Clock;
use crate::crd::CanaryDaemonSet;
use crate::desired::OWNER_LABEL;
use crate::index::OwnerIndex;
use crate::observer::{Observer, Report};
use crate::reconcile::{Caches, Context, Requeue, error_policy, reconcile};
use crate::trigger::{WatchLog, without_errors};

/// Leader election through a `coordination.k8s.io/v1` Lease (kube-lease-manager).
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
    /// Renew this many seconds before the lease expires.
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
    /// The API server's URL, named in the warning when the watches cannot reach it (the client
    /// does not know it).
    pub server_url: Option<String>,
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
            server_url: None,
        }
    }
}

/// Runs the controller until `shutdown` completes.
///
/// With leader election, the controller only runs while this replica holds the lease: it
/// starts on acquiring it, stops (in-flight passes finish) on losing it and waits to acquire
/// it again.
///
/// # Errors
///
/// Only [`Error::LeaderElection`], when the lease task dies. API errors are retried: setting up
/// the Lease with backoff (a replica that cannot reach the Lease waits, as a standby), watches
/// with backoff, passes by the error policy; a lease release that fails at the stop is logged,
/// the lease expires on its own.
pub async fn run(
    client: Client,
    config: ControllerConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    let shutdown = shutdown.boxed().shared();
    let Some(election) = config.leader_election.clone() else {
        config.observer.report(Report::Leader(true));
        run_controller(client, &config, shutdown).await;
        return Ok(());
    };
    let Some(manager) = lease_manager(&client, &config, &election, shutdown.clone()).await else {
        return Ok(());
    };
    let (mut leader, lease_task) = manager.watch().await;
    loop {
        // Wait to lead (or stop).
        let acquired = tokio::select! {
            () = shutdown.clone() => false,
            changed = leader.wait_for(|is_leader| *is_leader) => changed.is_ok(),
        };
        if !acquired {
            break;
        }
        info!(identity = %election.identity, "leading");
        config.observer.report(Report::Leader(true));
        let mut watch = leader.clone();
        let lost = async move {
            let _ = watch.wait_for(|is_leader| !*is_leader).await;
        };
        let stop = future::select(shutdown.clone(), lost.boxed()).map(|_| ());
        run_controller(client.clone(), &config, stop).await;
        config.observer.report(Report::Leader(false));
        if shutdown.clone().now_or_never().is_some() {
            break;
        }
        warn!(identity = %election.identity, "lost the lease, controller stopped");
    }
    // Dropping the receiver makes the lease task release the lease.
    drop(leader);
    match lease_task.await {
        Ok(Ok(_)) => Ok(()),
        // The lease task only fails here in releasing the lease. The controller has stopped by
        // then and the lease expires on its own, so a clean stop is still a clean stop.
        Ok(Err(e)) => {
            warn!(identity = %election.identity, error = %e, "releasing the lease failed; it will expire");
            Ok(())
        }
        // kube-lease-manager 0.13.1 panics (an `unreachable!`) when the release is answered with
        // a conflict, e.g. because another replica already took the lease over. Same reasoning.
        // Found by the deterministic simulation (docs/reliability.md, finding 1).
        Err(e) if e.is_panic() => {
            warn!(identity = %election.identity, "releasing the lease failed inside kube-lease-manager; it will expire");
            Ok(())
        }
        Err(e) => Err(Error::LeaderElection(e.to_string())),
    }
}

/// Longest wait between two attempts to set up the Lease.
const LEASE_SETUP_BACKOFF_MAX: Duration = Duration::from_secs(30);

/// Sets up the Lease (kube-lease-manager reads it and creates it when missing), retrying with
/// backoff until it works or `shutdown` completes (`None`). Exiting instead would turn a
/// transient API error at start-up into a crash loop of the pod.
async fn lease_manager(
    client: &Client,
    config: &ControllerConfig,
    election: &LeaderElection,
    shutdown: impl Future<Output = ()>,
) -> Option<kube_lease_manager::LeaseManager> {
    let mut shutdown = std::pin::pin!(shutdown);
    let mut delay = Duration::from_secs(1);
    loop {
        let built =
            kube_lease_manager::LeaseManagerBuilder::new(client.clone(), &election.lease_name)
                .with_namespace(&election.namespace)
                .with_identity(&election.identity)
                .with_duration(election.duration_seconds)
                .with_grace(election.grace_seconds)
                // One field manager per replica: server-side apply conflicts are what keeps two
                // replicas from both taking an orphaned Lease.
                .with_field_manager(format!("{}-{}", config.field_manager, election.identity))
                .build()
                .await;
        match built {
            Ok(manager) => return Some(manager),
            Err(error) => {
                warn!(identity = %election.identity, %error, ?delay, "setting up the lease failed, retrying");
            }
        }
        tokio::select! {
            () = &mut shutdown => return None,
            () = tokio::time::sleep(delay) => {}
        }
        delay = (delay * 2).min(LEASE_SETUP_BACKOFF_MAX);
    }
}

/// The API of `K` in `namespace`, or in all namespaces: the one namespaced-or-all helper.
pub fn api<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// One controller term: fresh watches and caches, until `stop` completes.
async fn run_controller(
    client: Client,
    config: &ControllerConfig,
    stop: impl Future<Output = ()> + Send + 'static,
) {
    // The Controller wants a Sync shutdown future; a oneshot receiver is one.
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let stopper = tokio::spawn(async move {
        stop.await;
        let _ = stop_tx.send(());
    });
    let ns = config.namespace.as_deref();
    let owned = watcher::Config::default().labels(OWNER_LABEL);
    let log = WatchLog::new(config.server_url.clone());

    let (ds_store, ds_writer) = reflector::store::<DaemonSet>();
    let ds_ready = Arc::new(AtomicBool::new(false));
    let ds_ready_flag = ds_ready.clone();
    // Every DaemonSet (not only labelled ones), so an existing DaemonSet is found and adopted
    // instead of being created again.
    let ds_stream = watcher(api::<DaemonSet>(&client, ns), watcher::Config::default())
        .default_backoff()
        .map_ok(move |event| {
            if matches!(event, watcher::Event::InitDone) {
                ds_ready_flag.store(true, Ordering::Release);
            }
            event
        })
        .reflect(ds_writer)
        .touched_objects();
    let ds_stream = without_errors(
        ds_stream,
        "daemonsets",
        config.observer.clone(),
        log.clone(),
    );

    let pods = OwnerIndex::<PodSummary>::new();
    let pod_index = pods.clone();
    let pod_stream = watcher(api::<Pod>(&client, ns), owned.clone())
        .default_backoff()
        .map_ok(move |event| {
            pod_index.apply(&event);
            event
        })
        .touched_objects();
    let pod_stream = without_errors(pod_stream, "pods", config.observer.clone(), log.clone());

    let revisions = OwnerIndex::<ControllerRevision>::new();
    let revision_index = revisions.clone();
    let revision_stream = watcher(api::<ControllerRevision>(&client, ns), owned)
        .default_backoff()
        .map_ok(move |event| {
            revision_index.apply(&event);
            event
        })
        .touched_objects();
    let revision_stream = without_errors(
        revision_stream,
        "controllerrevisions",
        config.observer.clone(),
        log.clone(),
    );

    let reporter = Reporter {
        controller: config.field_manager.clone(),
        instance: config.instance.clone(),
    };
    let caches = Caches {
        daemon_sets: ds_store,
        daemon_sets_ready: ds_ready,
        pods,
        revisions,
    };
    let ctx = Arc::new(Context::new(
        client.clone(),
        caches,
        reporter,
        config.clock.clone(),
        config.observer.clone(),
        config.field_manager.clone(),
        config.requeue,
    ));

    // Only spec changes (generation) of a CanaryDaemonSet trigger a pass: its status is written
    // by this controller, and reacting to our own status writes would double the passes of a
    // rollout. The store still sees every change.
    let (cds_store, cds_writer) = reflector::store::<CanaryDaemonSet>();
    let cds_stream = watcher(
        api::<CanaryDaemonSet>(&client, ns),
        watcher::Config::default(),
    )
    .default_backoff()
    .map_ok(say_when_none(ns))
    .reflect(cds_writer)
    .applied_objects()
    .predicate_filter(predicates::generation, PredicateConfig::default());
    let cds_stream = without_errors(cds_stream, "canarydaemonsets", config.observer.clone(), log);
    let flushes = ctx.take_status_flushes().map(|rx| {
        futures::stream::unfold(rx, |mut rx| async move {
            let cds = rx.recv().await?;
            Some((Ok::<_, watcher::Error>((*cds).clone()), rx))
        })
    });
    let controller = Controller::for_stream(cds_stream, cds_store);
    let controller = match flushes {
        // Deferred status writes that came due (see `Context::take_status_flushes`).
        Some(flushes) => controller.watches_stream(flushes, |cds: CanaryDaemonSet| {
            Some(ObjectRef::from_obj(&cds))
        }),
        None => controller,
    };
    controller
        .with_config(controller::Config::default().concurrency(config.concurrency))
        .owns_stream(ds_stream)
        .watches_stream(pod_stream, owner_of_labelled)
        .watches_stream(revision_stream, owner_of_labelled)
        .graceful_shutdown_on(stop_rx.map(|_| ()))
        .run(reconcile, error_policy, ctx)
        .for_each(|result| {
            if let Err(error) = result {
                match error {
                    controller::Error::ObjectNotFound(_) => {}
                    other => warn!(error = %other, "controller"),
                }
            }
            future::ready(())
        })
        .await;
    stopper.abort();
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
