//! The simulated cluster's machinery: nodes, a DaemonSet controller and a kubelet per node,
//! all driving objects in the [`Store`] the way their Kubernetes
//! counterparts drive a real API server.
//!
//! - **DaemonSet controller** ([`daemonset`], [`revision`], [`scheduling`]): one pod per
//!   eligible node (node selector, required node affinity, taints and tolerations),
//!   ControllerRevisions with the `controller-revision-hash` label, `RollingUpdate`
//!   (`maxUnavailable` / `maxSurge`, percentages of the desired count rounded up, unavailable
//!   old pods replaced first, `minReadySeconds`), `OnDelete`, and the status counts.
//! - **Kubelet** ([`kubelet`]): per pod, a [`Behavior`] from the [`BEHAVIOR_ANNOTATION`]
//!   or the image ([`behavior`]): start latency, readiness delay, crash loops with Kubernetes'
//!   back-off, image-pull back-off, never-ready; graceful deletion; pods of a node whose
//!   kubelet stopped are held not ready; image pulls with a per-node cache ([`images`]).
//! - **What pods do to their nodes** ([`effects`]): a pod that breaks its node, breaks the
//!   pods beside it, or makes its node report a condition, once Ready and until gone; the
//!   same by hand through node annotations; plain neighbour pods to break
//!   ([`ClusterConfig::neighbours_per_node`]).
//! - **Nodes** ([`nodes`]): well-known labels, capacity, addresses, Ready condition;
//!   add / remove / NotReady / cordon / taint at any time ([`Cluster`]).
//!
//! Invariants:
//! - One task processes every store event and timer in order, and the store publishes each
//!   change before the write returns, so the controller always decides on the current state
//!   (no stale cache, hence no expectations bookkeeping), and never exceeds `maxUnavailable`.
//! - All delays are tokio timers and all randomness comes from [`ClusterConfig::seed`]: under
//!   `tokio::time::pause()` a run is fast and reproducible.
//! - Per event the work is proportional to the affected DaemonSet or node, not to the number
//!   of pods in the cluster (pods are indexed by owner and by node).
//!
//! ```
//! use canary_sim::cluster::{Cluster, ClusterConfig};
//! use canary_sim::{SimClock, Store};
//! use k8s_openapi::api::core::v1::Node;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = Store::new(SimClock::new());
//! let cluster = Cluster::start(store.clone(), ClusterConfig { nodes: 2, ..ClusterConfig::default() });
//! cluster.add_node("extra")?;
//! cluster.cordon("extra", true)?;
//! cluster.settle().await?;
//! let nodes: Vec<Node> = store.list(None);
//! assert_eq!(nodes.len(), 3);
//! assert!(nodes.iter().all(|n| n.metadata.labels.as_ref().is_some_and(|l| l.contains_key("kubernetes.io/hostname"))));
//! cluster.shutdown();
//! # Ok(())
//! # }
//! ```

pub mod behavior;
pub mod daemonset;
mod driver;
pub mod effects;
pub mod images;
pub mod kubelet;
pub mod nodes;
pub mod ownership;
pub mod revision;
mod rng;
pub mod scheduling;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Taint};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::store::{Store, StoreError, UpdateScope};

pub use behavior::{Behavior, Effect, ParseBehaviorError, TimedEffect};
pub use driver::{NEIGHBOUR_IMAGE, NEIGHBOUR_LABEL, NEIGHBOURS_NAMESPACE};
pub use kubelet::{
    BEHAVIOR_ANNOTATION, BackoffConfig, KubeletConfig, PULL_ANNOTATION, PodBehavior,
};

/// How the simulated cluster is built.
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterConfig {
    /// Nodes created at start, named `<node_name_prefix><i>` for i in `1..=nodes`.
    pub nodes: u32,
    /// Prefix of the initial nodes' names.
    pub node_name_prefix: String,
    /// What every kubelet does.
    pub kubelet: KubeletConfig,
    /// Seed of every random choice (timing jitter).
    pub seed: u64,
    /// How long the DaemonSet controller takes to react to a change: the changes that arrive
    /// meanwhile are handled by one sync (informer and workqueue latency). Zero syncs after
    /// every change; the default, 10ms, keeps 5,000-node rollouts fast.
    pub controller_sync_delay: Duration,
    /// How many times faster than configured the cluster's own delays elapse: every timer of
    /// the cluster task (kubelet start latency, readiness, crash and image-pull back-off,
    /// termination grace, the DaemonSet controller's sync delay and resyncs) is divided by it.
    /// `1.0` (the default) is real timing. Times written in objects and compared with the
    /// clock (`minReadySeconds`, condition timestamps) are not scaled: the clock is not.
    pub speed: f64,
    /// Plain pods created on every node (also on nodes added later), in the namespace
    /// [`NEIGHBOURS_NAMESPACE`], labelled [`NEIGHBOUR_LABEL`]: ready from the start, and ready
    /// for good unless a pod beside them breaks them (`breaks-neighbours`). Zero (the
    /// default): none.
    pub neighbours_per_node: u32,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        Self {
            nodes: 3,
            node_name_prefix: "node-".to_owned(),
            kubelet: KubeletConfig::default(),
            seed: 0,
            controller_sync_delay: Duration::from_millis(10),
            speed: 1.0,
            neighbours_per_node: 0,
        }
    }
}

/// Why a cluster operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClusterError {
    /// The store refused the write (e.g. the node does not exist: 404).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The cluster task is not running any more ([`Cluster::shutdown`]).
    #[error("the simulated cluster has been shut down")]
    Stopped,
}

/// Requests to the cluster task.
enum Command {
    /// Answer once every event so far is processed and nothing is due.
    Settle(oneshot::Sender<()>),
    /// Answer once only never-ending work (crash loops, pull retries) is left.
    Idle(oneshot::Sender<()>),
}

struct Shared {
    store: Store,
    next_node_index: AtomicU32,
    commands: mpsc::UnboundedSender<Command>,
    task: Mutex<Option<JoinHandle<()>>>,
}

/// A running simulated cluster: a cheap handle (clones share it) to its nodes and its
/// DaemonSet-controller-and-kubelets task.
#[derive(Clone)]
pub struct Cluster {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster").finish_non_exhaustive()
    }
}

impl Cluster {
    /// Creates the configured nodes in `store` and spawns the task running the DaemonSet
    /// controller and the kubelets. Must be called inside a tokio runtime.
    pub fn start(store: Store, config: ClusterConfig) -> Self {
        // Subscribe before anything is written so that the task misses no event.
        let events = store.subscribe();
        let (commands, command_rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            store: store.clone(),
            next_node_index: AtomicU32::new(0),
            commands,
            task: Mutex::new(None),
        });
        let cluster = Self { shared };
        for i in 1..=config.nodes {
            let name = format!("{}{i}", config.node_name_prefix);
            // A store restored from a saved state has its nodes already.
            if store.get::<Node>(None, &name).is_some() {
                cluster
                    .shared
                    .next_node_index
                    .fetch_add(1, Ordering::Relaxed);
                continue;
            }
            if let Err(error) = cluster.add_node(&name) {
                tracing::warn!(node = %name, %error, "could not create node");
            }
        }
        let driver = driver::Driver::new(store, config, events, command_rx);
        let handle = tokio::spawn(driver.run());
        if let Ok(mut task) = cluster.shared.task.lock() {
            *task = Some(handle);
        }
        cluster
    }

    /// The store the cluster works on.
    pub fn store(&self) -> &Store {
        &self.shared.store
    }

    /// Registers a new Ready node (as its kubelet would).
    pub fn add_node(&self, name: &str) -> Result<Node, ClusterError> {
        let index = self.shared.next_node_index.fetch_add(1, Ordering::Relaxed);
        let node = nodes::new_node(name, index, self.store().clock().now());
        Ok(self.store().create(&node)?)
    }

    /// Deletes the node; its pods are removed (as the pod garbage collector does).
    pub fn remove_node(&self, name: &str) -> Result<(), ClusterError> {
        Ok(self.store().remove_now::<Node>(None, name)?)
    }

    /// Makes the node Ready or NotReady: the kubelet's Ready condition, then the
    /// `node.kubernetes.io/not-ready` taints of the node lifecycle controller. Pods on a
    /// NotReady node lose their Ready condition and make no progress until it is Ready again.
    pub fn set_node_ready(&self, name: &str, ready: bool) -> Result<(), ClusterError> {
        let now = self.store().clock().now();
        self.store()
            .modify::<Node>(None, name, UpdateScope::Status, |node| {
                nodes::set_ready_condition(node, ready, now)
            })?;
        self.store()
            .modify::<Node>(None, name, UpdateScope::Main, |node| {
                nodes::sync_not_ready_taints(node, now);
            })?;
        Ok(())
    }

    /// Cordons (`kubectl cordon`) or uncordons the node.
    pub fn cordon(&self, name: &str, cordoned: bool) -> Result<(), ClusterError> {
        self.store()
            .modify::<Node>(None, name, UpdateScope::Main, |node| {
                nodes::set_unschedulable(node, cordoned)
            })?;
        Ok(())
    }

    /// Adds a taint (`kubectl taint`); a taint with the same key and effect is kept as is.
    pub fn taint(&self, name: &str, taint: Taint) -> Result<(), ClusterError> {
        self.store()
            .modify::<Node>(None, name, UpdateScope::Main, |node| {
                nodes::add_taint(node, taint);
            })?;
        Ok(())
    }

    /// Removes the taints with `key` (`kubectl taint <node> <key>-`).
    pub fn untaint(&self, name: &str, key: &str) -> Result<(), ClusterError> {
        self.store()
            .modify::<Node>(None, name, UpdateScope::Main, |node| {
                nodes::remove_taint(node, key, None);
            })?;
        Ok(())
    }

    async fn ask(
        &self,
        command: impl FnOnce(oneshot::Sender<()>) -> Command,
    ) -> Result<(), ClusterError> {
        let (tx, rx) = oneshot::channel();
        self.shared
            .commands
            .send(command(tx))
            .map_err(|_| ClusterError::Stopped)?;
        rx.await.map_err(|_| ClusterError::Stopped)
    }

    /// Waits until the cluster has reacted to every change made so far (controller syncs,
    /// after [`ClusterConfig::controller_sync_delay`], kubelet admissions, status writes),
    /// without waiting for kubelet or deletion timers.
    pub async fn settle(&self) -> Result<(), ClusterError> {
        self.ask(Command::Settle).await
    }

    /// Waits until nothing is left to happen but never-ending cycles (crash loops, image
    /// pull retries): every pod started, became ready or got stuck, every deletion finished,
    /// every rollout step taken. Use under `tokio::time::pause()`, where this takes no time.
    pub async fn wait_idle(&self) -> Result<(), ClusterError> {
        self.ask(Command::Idle).await
    }

    /// Stops the cluster task (nodes and pods stay in the store, frozen).
    pub fn shutdown(&self) {
        if let Ok(mut task) = self.shared.task.lock()
            && let Some(handle) = task.take()
        {
            handle.abort();
        }
    }
}
