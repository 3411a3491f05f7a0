//! The cluster task: consumes store events and timers in order, keeps indexes of nodes,
//! DaemonSets, pods and revisions, and runs the DaemonSet controller and the kubelets.
//!
//! One [`Driver`] owns every index; its work is split by concern: this module runs the loop,
//! reads the store's events and keeps the nodes; [`daemonsets`] is the DaemonSet controller
//! (revisions, syncs, status), [`pods`] the kubelets (admission, steps, graceful deletion,
//! status writes), [`health`] what pods do to their nodes and neighbours (effects, and the
//! neighbour pods themselves), and [`timers`] the one ordered timer queue they all schedule
//! on. Invariant: everything happens on this one task, in store-event and timer order.

mod daemonsets;
mod health;
mod pods;
mod timers;

pub use health::{NEIGHBOUR_IMAGE, NEIGHBOUR_LABEL, NEIGHBOURS_NAMESPACE};

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap, VecDeque};
use std::time::Duration;

use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use serde::Deserialize;
use serde_json::Value;
use tokio::sync::{broadcast, mpsc, oneshot};
use tokio::time::Instant;

use super::behavior::Effect;
use super::effects::NodeEffects;
use super::images::NodeImages;
use super::kubelet::KubeletConfig;
use super::nodes;
use super::rng::SimRng;
use super::scheduling::node_fit;
use super::{ClusterConfig, Command};
use crate::store::{EventKind, Store, StoreEvent};
use daemonsets::DsState;
use pods::PodState;
use timers::{Timer, TimerEntry, sleep_until_or_forever};

/// `(namespace, name)`.
type ObjKey = (String, String);

struct NodeState {
    node: Node,
    /// Ready is True.
    ready: bool,
    /// The kubelet runs: Ready, or NotReady only because its pod network is broken
    /// ([`nodes::is_network_not_ready`]). A node NotReady otherwise has a kubelet that does
    /// nothing until it is back.
    kubelet_up: bool,
    pods_started: u32,
    /// What pods (and the node's annotations) do to the node.
    effects: NodeEffects,
    /// What the node was last made to show because of `effects`.
    shown: super::effects::NodeHealth,
    /// The effects its annotations ask for now.
    annotated: Vec<Effect>,
    images: NodeImages,
}

/// Pod statuses written per pass of the cluster task before it lets the watches catch up
/// ([`Driver::let_watchers_catch_up`]).
pub(super) const FLUSH_CHUNK: usize = 512;
/// Published events the store's subscribers may leave unread before the cluster task waits.
const BACKLOG_SOFT_LIMIT: usize = 2048;
/// At most this many yields per wait: a subscriber that never reads must not stop the cluster.
const CATCH_UP_YIELDS: usize = 256;

pub(super) struct Driver {
    store: Store,
    kubelet: KubeletConfig,
    rng: SimRng,
    events: broadcast::Receiver<StoreEvent>,
    commands: mpsc::UnboundedReceiver<Command>,
    commands_open: bool,
    nodes: BTreeMap<String, NodeState>,
    daemonsets: BTreeMap<ObjKey, DsState>,
    ds_by_uid: HashMap<String, ObjKey>,
    pods: HashMap<ObjKey, PodState>,
    pods_on_node: HashMap<String, BTreeSet<ObjKey>>,
    /// Owner uid -> revision name -> revision.
    revisions: HashMap<String, BTreeMap<String, ControllerRevision>>,
    timers: BinaryHeap<Reverse<TimerEntry>>,
    timer_seq: u64,
    finite_timers: usize,
    dirty_daemonsets: BTreeSet<ObjKey>,
    /// DaemonSets whose delayed sync has come.
    due_daemonsets: BTreeSet<ObjKey>,
    sync_delay: Duration,
    /// [`ClusterConfig::speed`], checked positive and finite (else 1).
    speed: f64,
    /// Delayed syncs scheduled and not fired yet.
    delayed_syncs: usize,
    dirty_pod_statuses: BTreeSet<ObjKey>,
    settle_waiters: Vec<oneshot::Sender<()>>,
    idle_waiters: Vec<oneshot::Sender<()>>,
    /// When the task started: the origin of the model's time ([`Driver::model_now`]).
    started: Instant,
    /// [`ClusterConfig::neighbours_per_node`].
    neighbours_per_node: u32,
    /// Nodes whose neighbour pods are still to be created, a batch per loop turn.
    pending_neighbours: VecDeque<String>,
    /// Events written for pods so far (their names' suffix).
    pod_events: u64,
}

fn key_of(namespace: Option<&str>, name: &str) -> ObjKey {
    (namespace.unwrap_or_default().to_owned(), name.to_owned())
}

fn object_key(meta: &ObjectMeta) -> ObjKey {
    key_of(
        meta.namespace.as_deref(),
        meta.name.as_deref().unwrap_or_default(),
    )
}

impl Driver {
    pub(super) fn new(
        store: Store,
        config: ClusterConfig,
        events: broadcast::Receiver<StoreEvent>,
        commands: mpsc::UnboundedReceiver<Command>,
    ) -> Self {
        Self {
            store,
            kubelet: config.kubelet,
            rng: SimRng::new(config.seed),
            events,
            commands,
            commands_open: true,
            nodes: BTreeMap::new(),
            daemonsets: BTreeMap::new(),
            ds_by_uid: HashMap::new(),
            pods: HashMap::new(),
            pods_on_node: HashMap::new(),
            revisions: HashMap::new(),
            timers: BinaryHeap::new(),
            timer_seq: 0,
            finite_timers: 0,
            dirty_daemonsets: BTreeSet::new(),
            due_daemonsets: BTreeSet::new(),
            sync_delay: config.controller_sync_delay,
            speed: if config.speed.is_finite() && config.speed > 0.0 {
                config.speed
            } else {
                1.0
            },
            delayed_syncs: 0,
            dirty_pod_statuses: BTreeSet::new(),
            settle_waiters: Vec::new(),
            idle_waiters: Vec::new(),
            started: Instant::now(),
            neighbours_per_node: config.neighbours_per_node,
            pending_neighbours: VecDeque::new(),
            pod_events: 0,
        }
    }

    fn now(&self) -> Timestamp {
        self.store.clock().now()
    }

    pub(super) async fn run(mut self) {
        self.relist();
        loop {
            if !self.drain_events() {
                return;
            }
            let fired = self.fire_due_timers();
            let synced = self.sync_dirty_daemonsets();
            let flushed = self.flush_pod_statuses();
            let created = self.create_pending_neighbours();
            if fired || synced || flushed || created || !self.events.is_empty() {
                if !self.drain_events() {
                    return;
                }
                self.let_watchers_catch_up().await;
                continue;
            }
            // A delayed controller sync is the reaction to a change already made: wait for it.
            if self.delayed_syncs == 0 {
                for waiter in self.settle_waiters.drain(..) {
                    let _ = waiter.send(());
                }
            }
            if self.finite_timers == 0 {
                for waiter in self.idle_waiters.drain(..) {
                    let _ = waiter.send(());
                }
            }
            let next = self.next_timer_at();
            tokio::select! {
                biased;
                received = self.events.recv() => {
                    if !self.handle_received(received) {
                        return;
                    }
                }
                command = self.commands.recv(), if self.commands_open => match command {
                    Some(Command::Settle(tx)) => self.settle_waiters.push(tx),
                    Some(Command::Idle(tx)) => self.idle_waiters.push(tx),
                    None => self.commands_open = false,
                },
                () = sleep_until_or_forever(next) => {}
            }
        }
    }

    /// Yields until the store's subscribers (the API's watches, the harness's recorders) have
    /// read all but [`BACKLOG_SOFT_LIMIT`] of the published events, at most
    /// [`CATCH_UP_YIELDS`] times. An event not yet read by every subscriber keeps its object
    /// and the version it replaced alive: the kubelets of 65,000 nodes turning their pods
    /// ready at one instant held 65,000 replaced pods until every watch had caught up (most of
    /// the demo's peak memory beyond the stored objects). Virtual time does not move while
    /// this yields (this task stays ready), so what happens at one instant still does; a
    /// subscriber that does not read (an idle receiver) only costs the bounded yields.
    async fn let_watchers_catch_up(&self) {
        for _ in 0..CATCH_UP_YIELDS {
            if self.store.backlog() <= BACKLOG_SOFT_LIMIT {
                return;
            }
            tokio::task::yield_now().await;
        }
    }

    /// Applies every queued event; false when the store is gone.
    fn drain_events(&mut self) -> bool {
        loop {
            match self.events.try_recv() {
                Ok(event) => self.apply_event(&event),
                Err(broadcast::error::TryRecvError::Empty) => return true,
                Err(broadcast::error::TryRecvError::Lagged(missed)) => {
                    tracing::debug!(missed, "cluster fell behind the store events; relisting");
                    self.relist();
                }
                Err(broadcast::error::TryRecvError::Closed) => return false,
            }
        }
    }

    fn handle_received(
        &mut self,
        received: Result<StoreEvent, broadcast::error::RecvError>,
    ) -> bool {
        match received {
            Ok(event) => self.apply_event(&event),
            Err(broadcast::error::RecvError::Lagged(_)) => self.relist(),
            Err(broadcast::error::RecvError::Closed) => return false,
        }
        true
    }

    /// Rebuilds every index from the store (at start and after missing events). Kubelet
    /// state of pods that still exist is kept.
    fn relist(&mut self) {
        let nodes: Vec<Node> = self.store.list(None);
        let daemonsets: Vec<DaemonSet> = self.store.list(None);
        let revisions: Vec<ControllerRevision> = self.store.list(None);
        let pods: Vec<Pod> = self.store.list(None);
        let live_nodes: BTreeSet<String> = nodes
            .iter()
            .filter_map(|n| n.metadata.name.clone())
            .collect();
        for gone in self
            .nodes
            .keys()
            .filter(|n| !live_nodes.contains(*n))
            .cloned()
            .collect::<Vec<_>>()
        {
            self.on_node_deleted(&gone);
        }
        for node in nodes {
            self.on_node(node);
        }
        let live_ds: BTreeSet<ObjKey> =
            daemonsets.iter().map(|d| object_key(&d.metadata)).collect();
        for gone in self
            .daemonsets
            .keys()
            .filter(|k| !live_ds.contains(*k))
            .cloned()
            .collect::<Vec<_>>()
        {
            self.on_daemonset_deleted(&gone);
        }
        for ds in daemonsets {
            self.on_daemonset(ds);
        }
        self.revisions.clear();
        for cr in revisions {
            self.on_revision(cr);
        }
        let live_pods: BTreeSet<ObjKey> = pods.iter().map(|p| object_key(&p.metadata)).collect();
        for gone in self
            .pods
            .keys()
            .filter(|k| !live_pods.contains(*k))
            .cloned()
            .collect::<Vec<_>>()
        {
            self.on_pod_deleted(&gone);
        }
        for pod in pods {
            self.on_pod(pod, None);
        }
    }

    fn apply_event(&mut self, event: &StoreEvent) {
        let object = event.object.as_ref();
        match (
            event.key.group.as_str(),
            event.key.plural.as_str(),
            event.kind,
        ) {
            ("", "nodes", EventKind::Deleted) => self.on_node_deleted(&event.name),
            ("", "nodes", _) => decode(object).map_or((), |node| self.on_node(node)),
            ("", "pods", EventKind::Deleted) => {
                self.on_pod_deleted(&key_of(event.namespace.as_deref(), &event.name));
            }
            ("", "pods", _) => {
                if let Some(pod) = pods::pod_view(object) {
                    self.on_pod(pod, Some(object));
                }
            }
            ("apps", "daemonsets", EventKind::Deleted) => {
                self.on_daemonset_deleted(&key_of(event.namespace.as_deref(), &event.name));
            }
            ("apps", "daemonsets", _) => decode(object).map_or((), |ds| self.on_daemonset(ds)),
            ("apps", "controllerrevisions", EventKind::Deleted) => {
                if let Some(cr) = decode::<ControllerRevision>(object) {
                    self.on_revision_deleted(&cr);
                }
            }
            ("apps", "controllerrevisions", _) => {
                decode(object).map_or((), |cr| self.on_revision(cr))
            }
            _ => {}
        }
    }

    fn on_node(&mut self, node: Node) {
        let Some(name) = node.metadata.name.clone() else {
            return;
        };
        let ready = nodes::is_ready(&node);
        let kubelet_up = ready || nodes::is_network_not_ready(&node);
        let annotated = super::effects::annotation_effects(node.metadata.annotations.as_ref());
        for (key, ds) in &mut self.daemonsets {
            if ds.set_fit(&name, Some(node_fit(&ds.pod_spec, &node))) {
                self.dirty_daemonsets.insert(key.clone());
            }
        }
        let first_sight = !self.nodes.contains_key(&name);
        let state = self.nodes.entry(name.clone()).or_insert_with(|| NodeState {
            node: node.clone(),
            ready,
            kubelet_up,
            pods_started: 0,
            effects: NodeEffects::default(),
            shown: super::effects::NodeHealth::default(),
            annotated: Vec::new(),
            images: NodeImages::default(),
        });
        let (was_ready, was_up) = (state.ready, state.kubelet_up);
        state.node = node;
        state.ready = ready;
        state.kubelet_up = kubelet_up;
        let annotations_changed = state.annotated != annotated;
        if annotations_changed {
            self.on_node_annotations(&name, annotated);
        }
        if was_up != kubelet_up {
            self.on_node_readiness(&name, kubelet_up);
        } else if kubelet_up && ready && !was_ready {
            // The pod network is back: pods that could not start for it start now.
            self.resume_deferred(&name);
        }
        self.reconcile_node(&name);
        if first_sight && self.neighbours_per_node > 0 {
            self.pending_neighbours.push_back(name);
        }
    }

    /// The node lifecycle controller marks the pods of a node whose kubelet stopped not
    /// ready; a kubelet coming back reports them again and resumes its work.
    fn on_node_readiness(&mut self, node: &str, ready: bool) {
        let now = self.now();
        for key in self.pods_on(node) {
            let Some(pod) = self.pods.get_mut(&key) else {
                continue;
            };
            if let Some(runtime) = pod.runtime.as_mut()
                && runtime.set_node_ready(ready, now)
            {
                self.dirty_pod_statuses.insert(key.clone());
            }
            if !ready {
                continue;
            }
            if let Some(step) = pod.deferred.take() {
                let epoch = pod.epoch;
                self.schedule(
                    Duration::ZERO,
                    Timer::PodStep {
                        key: key.clone(),
                        epoch,
                        step,
                    },
                );
            }
            self.schedule_termination(&key);
        }
    }

    /// The pods bound to `node`, as a list to walk while changing them.
    fn pods_on(&self, node: &str) -> Vec<ObjKey> {
        self.pods_on_node
            .get(node)
            .into_iter()
            .flatten()
            .cloned()
            .collect()
    }

    fn on_node_deleted(&mut self, name: &str) {
        self.nodes.remove(name);
        for (key, ds) in &mut self.daemonsets {
            if ds.set_fit(name, None) {
                self.dirty_daemonsets.insert(key.clone());
            }
        }
        // The pod garbage collector removes pods bound to a node that no longer exists.
        for (namespace, pod) in self.pods_on_node.remove(name).into_iter().flatten() {
            if let Err(error) = self.store.remove_now::<Pod>(Some(&namespace), &pod) {
                tracing::debug!(%namespace, %pod, %error, "orphaned pod already gone");
            }
        }
    }
}

fn decode<K: for<'de> Deserialize<'de>>(value: &Value) -> Option<K> {
    K::deserialize(value).ok()
}
