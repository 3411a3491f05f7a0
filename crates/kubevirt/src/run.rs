//! The read-only watch loop: KubeVirt objects, virt-operator's DaemonSets and its pods, derived
//! into phases after every batch of changes.

use std::future::Future;
use std::time::Instant;

use futures::stream::{self, BoxStream};
use futures::{FutureExt, StreamExt};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DynamicObject, ListParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use tokio::sync::watch;
use tracing::{debug, info, warn};

use canary_state_machine::Phase;

use canary_kube_adapter::clock::Clock;
use canary_kube_adapter::scope::{api, api_with};
use canary_kube_adapter::{Observer, Report, WatchLog, relisting_watcher};

use crate::derive::derive;
use crate::tracker::PhaseTracker;
use crate::view::{KubeVirtView, kubevirt_api_resource, managed_by_selector};

/// How the observer runs.
#[derive(Clone)]
pub struct ObserveConfig {
    /// Only watch this namespace (KubeVirt objects, DaemonSets and pods). Default: all
    /// namespaces, like virt-operator's pod cache.
    pub namespace: Option<String>,
    /// Source of "now" for transition times.
    pub clock: Clock,
    /// Where the reports go (the same channel the controller uses, so the metrics bridge
    /// serves both): phase transitions, and every derivation pass as a reconcile with its
    /// duration.
    pub observer: Observer,
    /// The latest [`Snapshot`], replaced after every pass.
    pub snapshot: watch::Sender<Snapshot>,
    /// The API server's URL, named in the warning when the watches cannot reach it.
    pub server_url: Option<String>,
}

impl Default for ObserveConfig {
    fn default() -> Self {
        Self {
            namespace: None,
            clock: Clock::system(),
            observer: Observer::default(),
            snapshot: watch::Sender::new(Snapshot::default()),
            server_url: None,
        }
    }
}

impl std::fmt::Debug for ObserveConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObserveConfig")
            .field("namespace", &self.namespace)
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
}

/// The versions of one KubeVirt object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeVirtVersions {
    /// Namespace of the KubeVirt object.
    pub namespace: String,
    /// Name of the KubeVirt object.
    pub name: String,
    /// `status.targetKubeVirtVersion`: the version being rolled out (or in place).
    pub target_version: String,
    /// `status.observedKubeVirtVersion`: the version virt-operator last finished deploying.
    pub observed_version: String,
}

/// One observed DaemonSet and its derived phase.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedDaemonSet {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// The phase virt-operator is in for it.
    pub phase: Phase,
}

/// What the observer sees, after the last pass.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Snapshot {
    /// All three caches have listed once.
    pub synced: bool,
    /// Derivation passes so far.
    pub passes: u64,
    /// Every KubeVirt object.
    pub kubevirts: Vec<KubeVirtVersions>,
    /// Every observed DaemonSet (in a namespace with a KubeVirt object), sorted.
    pub daemon_sets: Vec<ObservedDaemonSet>,
}

/// Why the observer cannot start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ObserveError {
    /// The `kubevirt.io/v1` `KubeVirt` resource is not served: KubeVirt is not installed.
    #[error("the KubeVirt CRD (kubevirts.kubevirt.io, v1) is not installed in this cluster")]
    KubeVirtCrdMissing,
    /// The first list of KubeVirt objects failed otherwise (unreachable API server, no
    /// permission).
    #[error("cannot list KubeVirt objects: {0}")]
    Kube(#[from] kube::Error),
}

/// Watches KubeVirt, virt-operator's DaemonSets and pods until `shutdown` completes, and reports
/// the phase virt-operator is in for each DaemonSet. Never writes to the cluster.
///
/// Fails only at start, when KubeVirt objects cannot be listed; later API errors are retried
/// with back-off by the watches (and logged).
pub async fn run(
    client: Client,
    config: ObserveConfig,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ObserveError> {
    let resource = kubevirt_api_resource();
    let ns = config.namespace.as_deref();
    let kubevirts = api_with(&client, ns, &resource);
    kubevirts
        .list_metadata(&ListParams::default().limit(1))
        .await
        .map_err(|error| match &error {
            kube::Error::Api(status) if status.code == 404 => ObserveError::KubeVirtCrdMissing,
            _ => ObserveError::Kube(error),
        })?;
    config.observer.report(Report::Leader(true));
    let (caches, changes) = watch(&client, ns, kubevirts, resource);
    observe(&caches, changes, &config, shutdown).await;
    info!("observer stopped");
    Ok(())
}

/// The three watches (KubeVirt objects, virt-operator's DaemonSets, its pods), each into its
/// cache, and one stream of their changes. Nothing is sent until the stream is polled.
fn watch(
    client: &Client,
    ns: Option<&str>,
    kubevirts: kube::Api<DynamicObject>,
    resource: kube::api::ApiResource,
) -> (Caches, stream::SelectAll<BoxStream<'static, Change>>) {
    let managed = watcher::Config::default().labels(&managed_by_selector());
    let kv_writer = reflector::store::Writer::new(resource);
    let kv_store = kv_writer.as_reader();
    let (ds_store, ds_writer) = reflector::store::<DaemonSet>();
    let (pod_store, pod_writer) = reflector::store::<Pod>();
    let changes: Vec<BoxStream<'static, Change>> = vec![
        changes(
            relisting_watcher(kubevirts, watcher::Config::default())
                .default_backoff()
                .reflect(kv_writer),
            Source::KubeVirt,
        ),
        changes(
            relisting_watcher(api::<DaemonSet>(client, ns), managed.clone())
                .default_backoff()
                .reflect(ds_writer),
            Source::DaemonSet,
        ),
        changes(
            relisting_watcher(api::<Pod>(client, ns), managed)
                .default_backoff()
                // Only metadata and status are read; the spec is most of a pod's size.
                .modify(|pod: &mut Pod| {
                    pod.spec = None;
                    pod.metadata.managed_fields = None;
                })
                .reflect(pod_writer),
            Source::Pod,
        ),
    ];
    let caches = Caches {
        kubevirts: kv_store,
        daemon_sets: ds_store,
        pods: pod_store,
    };
    (caches, stream::select_all(changes))
}

/// Takes the changes in batches until `shutdown` completes or they end, and derives the
/// phases after every batch once all three caches have listed.
async fn observe(
    caches: &Caches,
    mut changes: stream::SelectAll<BoxStream<'static, Change>>,
    config: &ObserveConfig,
    shutdown: impl Future<Output = ()> + Send,
) {
    let ns = config.namespace.as_deref();
    let log = WatchLog::new(config.server_url.clone());
    let mut said_none = false;
    let mut synced = SyncedSources::default();
    let mut tracker = PhaseTracker::new();
    let mut passes = 0_u64;
    let shutdown = shutdown.fuse();
    tokio::pin!(shutdown);
    // The binary says it at info, with the API server's address.
    debug!(
        watching = ns.unwrap_or("all namespaces"),
        "observing KubeVirt"
    );
    loop {
        let first = tokio::select! {
            // In order, not at random: a simulation seed replays exactly.
            biased;
            () = &mut shutdown => break,
            change = changes.next() => change,
        };
        let Some(first) = first else { break };
        // Take every change already delivered, so one pass covers a burst of events.
        let mut batch = vec![first];
        while let Some(Some(change)) = changes.next().now_or_never() {
            batch.push(change);
        }
        for change in batch {
            note(change, &mut synced, &log, config);
        }
        if synced.all() {
            let started = Instant::now();
            let snapshot = pass(caches, &mut tracker, config, passes + 1);
            passes = snapshot.passes;
            if snapshot.kubevirts.is_empty() && !said_none {
                // Silence would look like a broken observer.
                said_none = true;
                info!(
                    watching = ns.unwrap_or("all namespaces"),
                    "no KubeVirt object found: nothing to observe until KubeVirt is deployed"
                );
            }
            config.snapshot.send_replace(snapshot);
            config.observer.report(Report::Reconciled {
                took: started.elapsed(),
                error: None,
            });
        }
    }
}

/// One change of a watch: a source that has listed, a working watch, or a failed one (reported
/// and logged; the watcher retries).
fn note(change: Change, synced: &mut SyncedSources, log: &WatchLog, config: &ObserveConfig) {
    match change {
        Change::Synced(source) => {
            synced.mark(source);
            let _resumed = log.succeeded(source.resource());
        }
        Change::Object(source) => {
            let _resumed = log.succeeded(source.resource());
        }
        Change::Error(source, error) => {
            config.observer.report(Report::WatchError {
                resource: source.resource(),
            });
            let _warned = log.failed(source.resource(), &error);
        }
    }
}

/// Where a change came from.
#[derive(Debug, Clone, Copy)]
enum Source {
    KubeVirt,
    DaemonSet,
    Pod,
}

/// Which sources have delivered their initial list: a pass waits for all three, or it would
/// judge a KubeVirt by a half-listed cache.
#[derive(Debug, Default)]
struct SyncedSources {
    kubevirts: bool,
    daemon_sets: bool,
    pods: bool,
}

impl SyncedSources {
    fn mark(&mut self, source: Source) {
        match source {
            Source::KubeVirt => self.kubevirts = true,
            Source::DaemonSet => self.daemon_sets = true,
            Source::Pod => self.pods = true,
        }
    }

    fn all(&self) -> bool {
        self.kubevirts && self.daemon_sets && self.pods
    }
}

impl Source {
    /// The watched resource, for the watch-error report.
    fn resource(self) -> &'static str {
        match self {
            Source::KubeVirt => "kubevirts",
            Source::DaemonSet => "daemonsets",
            Source::Pod => "pods",
        }
    }
}

enum Change {
    /// The initial list of a source is complete.
    Synced(Source),
    /// An object of a source changed (the cache already has it).
    Object(Source),
    /// A watch error; the watcher retries.
    Error(Source, watcher::Error),
}

fn changes<K: Send + 'static>(
    events: impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
    source: Source,
) -> BoxStream<'static, Change> {
    events
        .map(move |event| match event {
            Ok(watcher::Event::InitDone) => Change::Synced(source),
            Ok(_) => Change::Object(source),
            Err(error) => Change::Error(source, error),
        })
        .boxed()
}

struct Caches {
    kubevirts: Store<DynamicObject>,
    daemon_sets: Store<DaemonSet>,
    pods: Store<Pod>,
}

/// One derivation over the caches: every DaemonSet in the namespace of a KubeVirt object.
fn pass(
    caches: &Caches,
    tracker: &mut PhaseTracker,
    config: &ObserveConfig,
    passes: u64,
) -> Snapshot {
    let now = config.clock.now();
    let pods = caches.pods.state();
    let mut kubevirts = Vec::new();
    let mut daemon_sets = Vec::new();
    for object in caches.kubevirts.state() {
        let kv = match KubeVirtView::from_object(&object) {
            Ok(kv) => kv,
            Err(error) => {
                warn!(%error, "skipping KubeVirt object");
                continue;
            }
        };
        kubevirts.push(KubeVirtVersions {
            namespace: kv.namespace.clone(),
            name: kv.name.clone(),
            target_version: kv.target.version.clone(),
            observed_version: kv.observed.version.clone(),
        });
        let in_namespace = caches
            .daemon_sets
            .state_filter(|ds| ds.namespace().as_deref() == Some(kv.namespace.as_str()));
        for ds in in_namespace {
            let derived = derive(&kv, &ds, pods.iter().map(AsRef::as_ref));
            for transition in tracker.observe(&ds, &derived, now) {
                debug!(daemon_set = %transition.daemon_set, from = ?transition.from, to = %transition.to.as_str(), "observed phase");
                config
                    .observer
                    .report(Report::Transition(Box::new(transition)));
            }
            daemon_sets.push(ObservedDaemonSet {
                namespace: kv.namespace.clone(),
                name: ds.name_any(),
                phase: derived.decision.phase,
            });
        }
    }
    daemon_sets.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    kubevirts.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    tracker.retain(|namespace, name| {
        daemon_sets
            .iter()
            .any(|ds| ds.namespace == namespace && ds.name == name)
    });
    Snapshot {
        synced: true,
        passes,
        kubevirts,
        daemon_sets,
    }
}
