//! [`Sim`]: the store, the API server, the faults and the cluster model, wired together.

use std::net::SocketAddr;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::api::ApiServer;
use crate::clock::SimClock;
use crate::cluster::{self, ClusterConfig};
use crate::faults::{Faults, RequestCounts};
use crate::registry::ResourceInfo;
use crate::service::{ServedSim, SimService, serve};
use crate::store::{
    DEFAULT_CHANNEL_CAPACITY, DEFAULT_HISTORY, JournalSink, SavedStore, Store, StoreError,
};

/// The namespaces every simulated cluster starts with.
pub const INITIAL_NAMESPACES: [&str; 4] =
    ["default", "kube-system", "kube-public", "kube-node-lease"];

/// Builds a [`Sim`].
#[derive(Clone, Debug)]
pub struct SimBuilder {
    cluster: ClusterConfig,
    history: usize,
    channel_capacity: usize,
    crds: Vec<CustomResourceDefinition>,
    kubevirt_crd: bool,
    epoch: Option<k8s_openapi::jiff::Timestamp>,
    restored: Option<SavedStore>,
    uid_salt: u64,
    journal: Option<JournalSink>,
}

impl Default for SimBuilder {
    fn default() -> Self {
        Self {
            cluster: ClusterConfig::default(),
            history: DEFAULT_HISTORY,
            channel_capacity: DEFAULT_CHANNEL_CAPACITY,
            crds: Vec::new(),
            kubevirt_crd: true,
            epoch: None,
            restored: None,
            uid_salt: 0,
            journal: None,
        }
    }
}

impl SimBuilder {
    /// Number of nodes created at start (default 3).
    pub fn nodes(mut self, nodes: u32) -> Self {
        self.cluster.nodes = nodes;
        self
    }

    /// Seed of every random choice: fault rates and the cluster model's jitter (default 0).
    pub fn seed(mut self, seed: u64) -> Self {
        self.cluster.seed = seed;
        self
    }

    /// Plain pods per node, ready from the start, for pods that break their neighbours to
    /// break (default 0; [`ClusterConfig::neighbours_per_node`]).
    pub fn neighbours_per_node(mut self, pods: u32) -> Self {
        self.cluster.neighbours_per_node = pods;
        self
    }

    /// The whole cluster-model configuration (kubelet behaviour, node names, ...). It carries
    /// `nodes`, `seed` and `neighbours_per_node` too: call [`SimBuilder::nodes`],
    /// [`SimBuilder::seed`] and [`SimBuilder::neighbours_per_node`] after it, or set them in it.
    pub fn cluster_config(mut self, config: ClusterConfig) -> Self {
        self.cluster = config;
        self
    }

    /// Number of change events kept for watch resumption (default
    /// [`DEFAULT_HISTORY`]); a watch resuming from an older `resourceVersion` gets 410 Gone.
    pub fn history(mut self, events: usize) -> Self {
        self.history = events;
        self
    }

    /// Events buffered per watcher before it is dropped as too slow (default
    /// [`DEFAULT_CHANNEL_CAPACITY`]).
    pub fn channel_capacity(mut self, events: usize) -> Self {
        self.channel_capacity = events;
        self
    }

    /// The virtual wall-clock time at start (default 2026-01-01T00:00:00Z, for reproducible
    /// timestamps). `sim serve` uses the real time, so that kubectl's AGE column reads right.
    pub fn epoch(mut self, epoch: k8s_openapi::jiff::Timestamp) -> Self {
        self.epoch = Some(epoch);
        self
    }

    /// A CustomResourceDefinition to register at start.
    pub fn crd(mut self, crd: CustomResourceDefinition) -> Self {
        self.crds.push(crd);
        self
    }

    /// Whether to register the `kubevirt.io/v1` `KubeVirt` CRD at start (default true).
    pub fn kubevirt_crd(mut self, register: bool) -> Self {
        self.kubevirt_crd = register;
        self
    }

    /// Starts from a saved store (`sim serve --state`, [`Store::saved`]) instead of an empty
    /// one, as kube-apiserver starts again on the same etcd: the objects are there, the
    /// `resourceVersion`s continue, and watches from before the restart get 410 Gone (see
    /// [`Store::restore`]). The initial namespaces and nodes are only created if missing; the
    /// cluster model picks up the saved pods and DaemonSets where they were.
    pub fn restore(mut self, saved: SavedStore) -> Self {
        self.restored = Some(saved);
        self
    }

    /// Writes every change, from the first one the build makes, to `sink` (see
    /// [`Store::set_journal`]).
    pub fn journal(mut self, sink: JournalSink) -> Self {
        self.journal = Some(sink);
        self
    }

    /// The salt of new objects' uids (default 0; see [`Store::salt_uids`]).
    pub fn uid_salt(mut self, salt: u64) -> Self {
        self.uid_salt = salt;
        self
    }

    /// Starts the simulator. Must be called inside a tokio runtime (the cluster model runs as
    /// a task).
    pub fn build(self) -> Result<Sim, StoreError> {
        let clock = self.epoch.map_or_else(SimClock::new, SimClock::starting_at);
        let store = Store::with_limits(clock, self.history, self.channel_capacity);
        store.salt_uids(self.uid_salt);
        if let Some(saved) = self.restored {
            store.restore(saved)?;
        }
        if let Some(sink) = self.journal {
            store.set_journal(Some(sink));
        }
        for name in INITIAL_NAMESPACES {
            let created = store.create(&Namespace {
                metadata: ObjectMeta {
                    name: Some(name.to_owned()),
                    ..ObjectMeta::default()
                },
                ..Namespace::default()
            });
            match created {
                Ok(_) | Err(StoreError::AlreadyExists { .. }) => {}
                Err(other) => return Err(other),
            }
        }
        let faults = Faults::new(self.cluster.seed);
        let api = ApiServer::new(store.clone(), faults.clone());
        let sim = Sim {
            cluster: cluster::Cluster::start(store.clone(), self.cluster.clone()),
            store,
            faults,
            api,
        };
        if self.kubevirt_crd {
            sim.register_crd(&crate::crds::kubevirt())?;
        }
        for crd in &self.crds {
            sim.register_crd(crd)?;
        }
        Ok(sim)
    }
}

/// A running simulated cluster.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use k8s_openapi::api::core::v1::Node;
/// use kube::api::{Api, ListParams};
///
/// let sim = canary_sim::Sim::builder().nodes(2).build()?;
/// let nodes: Api<Node> = Api::all(sim.client());
/// assert_eq!(nodes.list(&ListParams::default()).await?.items.len(), 2);
/// assert_eq!(sim.requests().writes(), 0);
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct Sim {
    store: Store,
    faults: Faults,
    api: ApiServer,
    cluster: cluster::Cluster,
}

impl Sim {
    /// A builder with the defaults (3 nodes, seed 0).
    pub fn builder() -> SimBuilder {
        SimBuilder::default()
    }

    /// A `kube::Client` talking to this simulator in process (no sockets; default namespace
    /// `default`). Must be called inside a tokio runtime.
    pub fn client(&self) -> kube::Client {
        kube::Client::new(self.service(), "default")
    }

    /// The API server as a tower `Service`.
    pub fn service(&self) -> SimService {
        SimService::new(self.api.clone())
    }

    /// The API server.
    pub fn api(&self) -> &ApiServer {
        &self.api
    }

    /// The object store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The fault rules.
    pub fn faults(&self) -> &Faults {
        &self.faults
    }

    /// The cluster model (nodes, DaemonSet controller, kubelets).
    pub fn cluster(&self) -> &cluster::Cluster {
        &self.cluster
    }

    /// Requests answered so far, by verb and resource.
    pub fn requests(&self) -> RequestCounts {
        self.faults.requests()
    }

    /// The last requests answered (see [`Faults::request_log`]).
    pub fn request_log(&self) -> Vec<crate::faults::RequestRecord> {
        self.faults.request_log()
    }

    /// Registers a CustomResourceDefinition (creating it if absent): its kinds become servable.
    pub fn register_crd(&self, crd: &CustomResourceDefinition) -> Result<(), StoreError> {
        for info in ResourceInfo::from_crd(crd) {
            self.store.register(info);
        }
        match self.store.create(crd) {
            Ok(_) | Err(StoreError::AlreadyExists { .. }) => Ok(()),
            Err(other) => Err(other),
        }
    }

    /// Stops the cluster model (DaemonSet controller and kubelets); the API keeps answering.
    pub fn shutdown(&self) {
        self.cluster.shutdown();
    }

    /// Serves the API over HTTP/1.1 on `addr` (port 0: any free port).
    pub async fn serve(&self, addr: SocketAddr) -> std::io::Result<ServedSim> {
        serve(self.api.clone(), addr).await
    }

    /// [`Sim::serve`], recording every request answered in `audit`, in kube-apiserver's audit
    /// format ([`crate::audit`]).
    pub async fn serve_recording(
        &self,
        addr: SocketAddr,
        audit: std::sync::Arc<crate::audit::AuditLog>,
    ) -> std::io::Result<ServedSim> {
        crate::service::serve_recording(self.api.clone(), addr, Some(audit)).await
    }
}
