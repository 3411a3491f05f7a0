//! The cluster task: consumes store events and timers in order, keeps indexes of nodes,
//! DaemonSets, pods and revisions, and runs the DaemonSet controller and the kubelets.

use std::cmp::{Ordering, Reverse};
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap};
use std::time::Duration;

use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use k8s_openapi::api::core::v1::{Node, Pod, PodSpec};
use k8s_openapi::jiff::Timestamp;
use serde::Deserialize;
use serde_json::Value;
use tokio::sync::{broadcast, mpsc, oneshot};
use tokio::time::Instant;

use super::daemonset::{self, DaemonPod, NodeSlot, Placement, SyncContext};
use super::kubelet::{
    KubeletConfig, KubeletStep, PodAddresses, PodBehavior, PodRuntime, StepTiming, render_status,
};
use super::nodes;
use super::revision::{self, REVISION_HASH_LABEL};
use super::rng::SimRng;
use super::scheduling::{NodeFit, add_daemon_tolerations, node_fit};
use super::{ClusterConfig, Command};
use crate::store::{EventKind, Store, StoreEvent, UpdateScope};

/// `(namespace, name)`.
type ObjKey = (String, String);

struct NodeState {
    node: Node,
    ready: bool,
    pods_started: u32,
}

struct DsState {
    ds: DaemonSet,
    /// The template spec with the daemon tolerations: what eligibility is computed on.
    pod_spec: PodSpec,
    /// [`revision::revision_data`] of the current template.
    revision_data: Value,
    /// The current revision hash, once the history needs no change. Cleared when the
    /// template or the DaemonSet's revisions change.
    current_hash: Option<String>,
    /// When the earliest pending resync (for `minReadySeconds`) fires.
    requeue_at: Option<Instant>,
    /// A delayed sync is pending.
    sync_scheduled: bool,
    /// Every node that exists or holds one of its pods: fit and pods.
    slots: BTreeMap<String, NodeSlot>,
}

impl DsState {
    /// Records the fit of `node` (`None`: the node is gone); returns whether it changed.
    fn set_fit(&mut self, node: &str, fit: Option<NodeFit>) -> bool {
        let changed = match self.slots.get_mut(node) {
            Some(slot) => std::mem::replace(&mut slot.fit, fit) != fit,
            None if fit.is_some() => {
                self.slots.insert(
                    node.to_owned(),
                    NodeSlot {
                        fit,
                        pods: Vec::new(),
                    },
                );
                true
            }
            None => false,
        };
        self.drop_empty(node);
        changed
    }

    fn add_pod(&mut self, pod: DaemonPod) {
        self.slots
            .entry(pod.node.clone())
            .or_default()
            .pods
            .push(pod);
    }

    fn remove_pod(&mut self, node: &str, name: &str) {
        if let Some(slot) = self.slots.get_mut(node) {
            slot.pods.retain(|p| p.name != name);
        }
        self.drop_empty(node);
    }

    fn drop_empty(&mut self, node: &str) {
        if self
            .slots
            .get(node)
            .is_some_and(|s| s.fit.is_none() && s.pods.is_empty())
        {
            self.slots.remove(node);
        }
    }
}

struct PodState {
    uid: String,
    node: Option<String>,
    owner: Option<ObjKey>,
    view: Option<DaemonPod>,
    runtime: Option<PodRuntime>,
    addresses: Option<PodAddresses>,
    /// Bumped whenever pending kubelet timers of this pod become void.
    epoch: u64,
    deleting: Option<Duration>,
    termination_scheduled: bool,
    /// A kubelet step that came due while the node was NotReady.
    deferred: Option<KubeletStep>,
}

#[derive(Clone, Debug)]
enum Timer {
    PodStep {
        key: ObjKey,
        epoch: u64,
        step: KubeletStep,
    },
    FinishDeletion {
        key: ObjKey,
        uid: String,
    },
    SyncDaemonSet {
        key: ObjKey,
    },
    DelayedSync {
        key: ObjKey,
    },
}

impl Timer {
    fn is_perpetual(&self) -> bool {
        matches!(self, Self::PodStep { step, .. } if step.is_perpetual())
    }
}

struct TimerEntry {
    at: Instant,
    seq: u64,
    timer: Timer,
}

impl PartialEq for TimerEntry {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for TimerEntry {}
impl PartialOrd for TimerEntry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for TimerEntry {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

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
    /// Delayed syncs scheduled and not fired yet.
    delayed_syncs: usize,
    dirty_pod_statuses: BTreeSet<ObjKey>,
    settle_waiters: Vec<oneshot::Sender<()>>,
    idle_waiters: Vec<oneshot::Sender<()>>,
}

fn key_of(namespace: Option<&str>, name: &str) -> ObjKey {
    (namespace.unwrap_or_default().to_owned(), name.to_owned())
}

fn object_key(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> ObjKey {
    key_of(
        meta.namespace.as_deref(),
        meta.name.as_deref().unwrap_or_default(),
    )
}

fn controller_uid(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    kind: &str,
) -> Option<String> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true) && r.kind == kind)
        .map(|r| r.uid.clone())
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
            delayed_syncs: 0,
            dirty_pod_statuses: BTreeSet::new(),
            settle_waiters: Vec::new(),
            idle_waiters: Vec::new(),
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
            if fired || synced || flushed || !self.events.is_empty() {
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
            let next = self.timers.peek().map(|Reverse(entry)| entry.at);
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
            self.on_pod(pod);
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
            ("", "pods", _) => decode(object).map_or((), |pod| self.on_pod(pod)),
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

    // === nodes ===

    fn on_node(&mut self, node: Node) {
        let Some(name) = node.metadata.name.clone() else {
            return;
        };
        let ready = nodes::is_ready(&node);
        let was_ready = self.nodes.get(&name).map(|n| n.ready);
        for (key, ds) in &mut self.daemonsets {
            if ds.set_fit(&name, Some(node_fit(&ds.pod_spec, &node))) {
                self.dirty_daemonsets.insert(key.clone());
            }
        }
        let pods_started = self.nodes.get(&name).map_or(0, |n| n.pods_started);
        self.nodes.insert(
            name.clone(),
            NodeState {
                node,
                ready,
                pods_started,
            },
        );
        if was_ready.is_some_and(|was| was != ready) {
            self.on_node_readiness(&name, ready);
        }
    }

    /// The node lifecycle controller marks the pods of a NotReady node not ready; a kubelet
    /// coming back reports them again and resumes its work.
    fn on_node_readiness(&mut self, node: &str, ready: bool) {
        let now = self.now();
        let keys: Vec<ObjKey> = self
            .pods_on_node
            .get(node)
            .into_iter()
            .flatten()
            .cloned()
            .collect();
        for key in keys {
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

    // === DaemonSets and revisions ===

    fn on_daemonset(&mut self, ds: DaemonSet) {
        let key = object_key(&ds.metadata);
        let template = ds
            .spec
            .as_ref()
            .map(|s| s.template.clone())
            .unwrap_or_default();
        let mut pod_spec = template.spec.unwrap_or_default();
        add_daemon_tolerations(&mut pod_spec);
        if let Some(uid) = ds.metadata.uid.clone() {
            self.ds_by_uid.insert(uid, key.clone());
        }
        let mut fresh = false;
        let state = self.daemonsets.entry(key.clone()).or_insert_with(|| {
            fresh = true;
            DsState {
                ds: ds.clone(),
                pod_spec: PodSpec::default(),
                revision_data: Value::Null,
                current_hash: None,
                requeue_at: None,
                sync_scheduled: false,
                slots: BTreeMap::new(),
            }
        });
        if fresh || state.pod_spec != pod_spec {
            for (name, node) in &self.nodes {
                state.set_fit(name, Some(node_fit(&pod_spec, &node.node)));
            }
            state.pod_spec = pod_spec;
        }
        // The controller's own status writes come back as events; they change no decision.
        let status_only = !fresh
            && state.ds.spec == ds.spec
            && state.ds.metadata.generation == ds.metadata.generation
            && state.ds.metadata.annotations == ds.metadata.annotations
            && state.ds.metadata.deletion_timestamp == ds.metadata.deletion_timestamp;
        if !status_only {
            state.revision_data = revision::revision_data(&ds);
            state.current_hash = None;
            self.dirty_daemonsets.insert(key);
        }
        state.ds = ds;
    }

    /// The garbage collector deletes what the DaemonSet owned (background propagation).
    fn on_daemonset_deleted(&mut self, key: &ObjKey) {
        let Some(state) = self.daemonsets.remove(key) else {
            return;
        };
        self.dirty_daemonsets.remove(key);
        let uid = state.ds.metadata.uid.clone().unwrap_or_default();
        self.ds_by_uid.remove(&uid);
        let namespace = key.0.as_str();
        for pod in state
            .slots
            .values()
            .flat_map(|s| &s.pods)
            .filter(|p| !p.deleting)
        {
            if let Err(error) = self.store.delete::<Pod>(Some(namespace), &pod.name) {
                tracing::debug!(pod = %pod.name, %error, "dependent pod already gone");
            }
        }
        for name in self.revisions.remove(&uid).unwrap_or_default().into_keys() {
            if let Err(error) = self
                .store
                .remove_now::<ControllerRevision>(Some(namespace), &name)
            {
                tracing::debug!(revision = %name, %error, "dependent revision already gone");
            }
        }
    }

    fn on_revision(&mut self, cr: ControllerRevision) {
        let (Some(owner), Some(name)) = (
            controller_uid(&cr.metadata, "DaemonSet"),
            cr.metadata.name.clone(),
        ) else {
            return;
        };
        self.revisions_changed(&owner);
        self.revisions.entry(owner).or_default().insert(name, cr);
    }

    fn revisions_changed(&mut self, owner: &str) {
        if let Some(key) = self.ds_by_uid.get(owner) {
            if let Some(state) = self.daemonsets.get_mut(key) {
                state.current_hash = None;
            }
            self.dirty_daemonsets.insert(key.clone());
        }
    }

    fn on_revision_deleted(&mut self, cr: &ControllerRevision) {
        let (Some(owner), Some(name)) = (
            controller_uid(&cr.metadata, "DaemonSet"),
            cr.metadata.name.as_deref(),
        ) else {
            return;
        };
        if let Some(revisions) = self.revisions.get_mut(&owner) {
            revisions.remove(name);
        }
        self.revisions_changed(&owner);
    }

    // === pods ===

    fn on_pod(&mut self, pod: Pod) {
        let key = object_key(&pod.metadata);
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        if self.pods.get(&key).is_some_and(|p| p.uid != uid) {
            self.on_pod_deleted(&key);
        }
        let view = DaemonPod::from_pod(&pod);
        let node = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .filter(|n| !n.is_empty());
        let owner = controller_uid(&pod.metadata, "DaemonSet")
            .and_then(|uid| self.ds_by_uid.get(&uid).cloned());
        let deleting = pod.metadata.deletion_timestamp.as_ref().map(|_| {
            let grace = pod.metadata.deletion_grace_period_seconds.unwrap_or(0);
            Duration::from_secs(u64::try_from(grace).unwrap_or(0))
        });
        let state = self.pods.entry(key.clone()).or_insert_with(|| PodState {
            uid,
            node: None,
            owner: None,
            view: None,
            runtime: None,
            addresses: None,
            epoch: 0,
            deleting: None,
            termination_scheduled: false,
            deferred: None,
        });
        if state.view != view || state.owner != owner {
            if let (Some(old_owner), Some(old_view)) = (&state.owner, &state.view) {
                if let Some(ds) = self.daemonsets.get_mut(old_owner) {
                    ds.remove_pod(&old_view.node, &old_view.name);
                }
                self.dirty_daemonsets.insert(old_owner.clone());
            }
            if let (Some(new_owner), Some(new_view)) = (&owner, &view) {
                if let Some(ds) = self.daemonsets.get_mut(new_owner) {
                    ds.add_pod(new_view.clone());
                }
                self.dirty_daemonsets.insert(new_owner.clone());
            }
            state.view = view;
            state.owner = owner;
        }
        if state.node != node {
            if let Some(old) = state.node.take()
                && let Some(set) = self.pods_on_node.get_mut(&old)
            {
                set.remove(&key);
            }
            if let Some(new) = &node {
                self.pods_on_node
                    .entry(new.clone())
                    .or_default()
                    .insert(key.clone());
            }
            state.node = node;
        }
        state.deleting = deleting;
        if state.deleting.is_some() {
            self.schedule_termination(&key);
        } else if state.runtime.is_none() {
            self.admit(&key, &pod);
        }
    }

    fn on_pod_deleted(&mut self, key: &ObjKey) {
        let Some(state) = self.pods.remove(key) else {
            return;
        };
        if let Some(node) = &state.node
            && let Some(set) = self.pods_on_node.get_mut(node)
        {
            set.remove(key);
        }
        if let (Some(owner), Some(view)) = (&state.owner, &state.view) {
            if let Some(ds) = self.daemonsets.get_mut(owner) {
                ds.remove_pod(&view.node, &view.name);
            }
            self.dirty_daemonsets.insert(owner.clone());
        }
        self.dirty_pod_statuses.remove(key);
    }

    /// The node's kubelet takes the pod: Pending now, containers start after the latency.
    fn admit(&mut self, key: &ObjKey, pod: &Pod) {
        let Some(node_name) = self.pods.get(key).and_then(|p| p.node.clone()) else {
            return;
        };
        let now = self.now();
        let Some(node) = self.nodes.get_mut(&node_name) else {
            // Bound to a node that does not exist: the pod garbage collector removes it.
            if let Err(error) = self.store.remove_now::<Pod>(Some(&key.0), &key.1) {
                tracing::debug!(pod = %key.1, %error, "orphaned pod already gone");
            }
            return;
        };
        let behavior = self.kubelet.behavior_for(pod).unwrap_or_else(|error| {
            tracing::warn!(pod = %key.1, %error, "ignoring the behavior annotation");
            PodBehavior::Healthy
        });
        let host_ip = nodes::node_ip(&node.node).unwrap_or("10.0.0.1").to_owned();
        let host_network = pod
            .spec
            .as_ref()
            .and_then(|s| s.host_network)
            .unwrap_or(false);
        let pod_ip = if host_network {
            host_ip.clone()
        } else {
            let ip =
                nodes::pod_ip(&node.node, node.pods_started).unwrap_or_else(|| host_ip.clone());
            node.pods_started = node.pods_started.wrapping_add(1);
            ip
        };
        let node_ready = node.ready;
        let mut runtime = PodRuntime::admitted(behavior, now);
        runtime.node_ready = node_ready;
        let delay = self
            .rng
            .jitter(self.kubelet.start_latency, self.kubelet.jitter);
        let Some(state) = self.pods.get_mut(key) else {
            return;
        };
        state.runtime = Some(runtime);
        state.addresses = Some(PodAddresses { host_ip, pod_ip });
        let epoch = state.epoch;
        if node_ready {
            self.schedule(
                delay,
                Timer::PodStep {
                    key: key.clone(),
                    epoch,
                    step: KubeletStep::Start,
                },
            );
        } else {
            state.deferred = Some(KubeletStep::Start);
        }
        self.dirty_pod_statuses.insert(key.clone());
    }

    /// Graceful deletion: the kubelet stops the containers, then removes the pod.
    fn schedule_termination(&mut self, key: &ObjKey) {
        let Some(state) = self.pods.get_mut(key) else {
            return;
        };
        let Some(grace) = state.deleting else { return };
        if state.termination_scheduled {
            return;
        }
        let node_ready = state
            .node
            .as_ref()
            .and_then(|n| self.nodes.get(n))
            .map(|n| n.ready);
        match node_ready {
            // No kubelet is running there: the pod stays Terminating until the node is back.
            Some(false) => {}
            Some(true) => {
                state.termination_scheduled = true;
                state.epoch += 1;
                let uid = state.uid.clone();
                let delay = self.kubelet.termination_grace.min(grace);
                self.schedule(
                    delay,
                    Timer::FinishDeletion {
                        key: key.clone(),
                        uid,
                    },
                );
            }
            // Unbound, or bound to a node that is gone: nothing waits for a kubelet.
            None => {
                if let Err(error) = self.store.remove_now::<Pod>(Some(&key.0), &key.1) {
                    tracing::debug!(pod = %key.1, %error, "pod already gone");
                }
            }
        }
    }

    // === timers ===

    fn schedule(&mut self, delay: Duration, timer: Timer) {
        if !timer.is_perpetual() {
            self.finite_timers += 1;
        }
        self.timer_seq += 1;
        let entry = TimerEntry {
            at: Instant::now() + delay,
            seq: self.timer_seq,
            timer,
        };
        self.timers.push(Reverse(entry));
    }

    fn fire_due_timers(&mut self) -> bool {
        let now = Instant::now();
        let mut fired = false;
        while self
            .timers
            .peek()
            .is_some_and(|Reverse(entry)| entry.at <= now)
        {
            let Some(Reverse(entry)) = self.timers.pop() else {
                break;
            };
            if !entry.timer.is_perpetual() {
                self.finite_timers = self.finite_timers.saturating_sub(1);
            }
            fired = true;
            match entry.timer {
                Timer::PodStep { key, epoch, step } => self.run_pod_step(&key, epoch, step),
                Timer::FinishDeletion { key, uid } => {
                    if self.pods.get(&key).is_some_and(|p| p.uid == uid)
                        && let Err(error) = self.store.remove_now::<Pod>(Some(&key.0), &key.1)
                    {
                        tracing::debug!(pod = %key.1, %error, "terminated pod already gone");
                    }
                }
                Timer::SyncDaemonSet { key } => {
                    if let Some(state) = self.daemonsets.get_mut(&key)
                        && state.requeue_at.is_some_and(|at| at <= now)
                    {
                        state.requeue_at = None;
                    }
                    self.dirty_daemonsets.insert(key);
                }
                Timer::DelayedSync { key } => {
                    self.delayed_syncs = self.delayed_syncs.saturating_sub(1);
                    if let Some(state) = self.daemonsets.get_mut(&key) {
                        state.sync_scheduled = false;
                    }
                    self.due_daemonsets.insert(key);
                }
            }
        }
        fired
    }

    fn run_pod_step(&mut self, key: &ObjKey, epoch: u64, step: KubeletStep) {
        let now = self.now();
        let ready_delay = self
            .rng
            .jitter(self.kubelet.ready_delay, self.kubelet.jitter);
        let backoff = self.kubelet.crash_backoff.clone();
        let Some(state) = self.pods.get_mut(key) else {
            return;
        };
        if state.epoch != epoch || state.deleting.is_some() {
            return;
        }
        let node_ready = state
            .node
            .as_ref()
            .and_then(|n| self.nodes.get(n))
            .is_some_and(|n| n.ready);
        if !node_ready {
            state.deferred = Some(step);
            return;
        }
        let Some(runtime) = state.runtime.as_mut() else {
            return;
        };
        let next = runtime.step(step, now, StepTiming { ready_delay }, &backoff);
        self.dirty_pod_statuses.insert(key.clone());
        if let Some((step, delay)) = next {
            self.schedule(
                delay,
                Timer::PodStep {
                    key: key.clone(),
                    epoch,
                    step,
                },
            );
        }
    }

    fn flush_pod_statuses(&mut self) -> bool {
        let keys = std::mem::take(&mut self.dirty_pod_statuses);
        let mut wrote = false;
        for key in keys {
            let Some(state) = self.pods.get(&key) else {
                continue;
            };
            let (Some(runtime), Some(addresses)) = (&state.runtime, &state.addresses) else {
                continue;
            };
            let result =
                self.store
                    .modify::<Pod>(Some(&key.0), &key.1, UpdateScope::Status, |pod| {
                        pod.status = Some(render_status(pod, runtime, addresses));
                    });
            match result {
                Ok(_) => wrote = true,
                Err(error) => tracing::debug!(pod = %key.1, %error, "pod status not written"),
            }
        }
        wrote
    }

    // === the DaemonSet controller ===

    /// Syncs the DaemonSets whose turn has come. With a sync delay, a DaemonSet marked dirty
    /// is synced once, `sync_delay` later, for all the changes that arrived meanwhile (like a
    /// workqueue that holds a key while it waits).
    fn sync_dirty_daemonsets(&mut self) -> bool {
        let dirty = std::mem::take(&mut self.dirty_daemonsets);
        let mut due = std::mem::take(&mut self.due_daemonsets);
        if self.sync_delay.is_zero() {
            due.extend(dirty);
        } else {
            for key in dirty {
                let Some(state) = self.daemonsets.get_mut(&key) else {
                    continue;
                };
                if !state.sync_scheduled {
                    state.sync_scheduled = true;
                    self.delayed_syncs += 1;
                    self.schedule(self.sync_delay, Timer::DelayedSync { key });
                }
            }
        }
        let mut wrote = false;
        for key in due {
            wrote |= self.sync_daemonset(&key);
        }
        wrote
    }

    /// `syncDaemonSet`: history, then pods, then status. Returns whether it wrote anything.
    fn sync_daemonset(&mut self, key: &ObjKey) -> bool {
        let now = self.now();
        let Some(state) = self.daemonsets.get(key) else {
            return false;
        };
        if state.ds.metadata.deletion_timestamp.is_some() {
            return false;
        }
        let (hash, mut wrote) = match &state.current_hash {
            Some(hash) => (hash.clone(), false),
            None => {
                let uid = state.ds.metadata.uid.clone().unwrap_or_default();
                let live_hashes = state
                    .slots
                    .values()
                    .flat_map(|s| &s.pods)
                    .filter_map(|p| p.hash.as_deref());
                let owned = self
                    .revisions
                    .get(&uid)
                    .into_iter()
                    .flat_map(|r| r.values());
                let history =
                    revision::plan_history(&state.ds, &state.revision_data, owned, live_hashes);
                let wrote = self.apply_history(&key.0, &history);
                (history.hash, wrote)
            }
        };
        if !wrote && let Some(state) = self.daemonsets.get_mut(key) {
            state.current_hash = Some(hash.clone());
        }
        let Some(state) = self.daemonsets.get(key) else {
            return wrote;
        };
        let cx = SyncContext::new(&state.ds, &hash, now);
        let placement = Placement {
            nodes: &state.slots,
        };
        let plan = daemonset::plan_sync(&cx, &placement).unwrap_or_else(|error| {
            tracing::warn!(daemonset = %key.1, %error, "cannot roll out");
            daemonset::SyncPlan::default()
        });
        let status = daemonset::compute_status(&cx, &placement);
        let requeue = daemonset::requeue_after(&cx, &status);
        let new_pods: Vec<Pod> = plan
            .create_on_nodes
            .iter()
            .map(|node| daemonset::new_daemon_pod(&cx, node))
            .collect();
        let status_changed = state.ds.status.as_ref() != Some(&status);
        for pod in new_pods {
            match self.store.create(&pod) {
                Ok(_) => wrote = true,
                Err(error) => tracing::warn!(daemonset = %key.1, %error, "pod not created"),
            }
        }
        for name in &plan.delete_pods {
            match self.store.delete::<Pod>(Some(&key.0), name) {
                Ok(()) => wrote = true,
                Err(error) => tracing::debug!(pod = %name, %error, "pod not deleted"),
            }
        }
        if status_changed {
            let result =
                self.store
                    .modify::<DaemonSet>(Some(&key.0), &key.1, UpdateScope::Status, |ds| {
                        ds.status = Some(status);
                    });
            match result {
                Ok(_) => wrote = true,
                Err(error) => tracing::debug!(daemonset = %key.1, %error, "status not written"),
            }
        }
        if let Some(delay) = requeue {
            self.requeue(key, delay);
        }
        wrote
    }

    /// `enqueueDaemonSetAfter`: like a workqueue's `AddAfter`, only the earliest pending
    /// resync of a DaemonSet is kept.
    fn requeue(&mut self, key: &ObjKey, delay: Duration) {
        let at = Instant::now() + delay;
        let Some(state) = self.daemonsets.get_mut(key) else {
            return;
        };
        if state.requeue_at.is_some_and(|pending| pending <= at) {
            return;
        }
        state.requeue_at = Some(at);
        self.schedule(delay, Timer::SyncDaemonSet { key: key.clone() });
    }

    fn apply_history(&self, namespace: &str, history: &revision::HistoryPlan) -> bool {
        let mut wrote = false;
        if let Some(cr) = &history.create {
            match self.store.create(cr) {
                Ok(_) => wrote = true,
                Err(error) => tracing::debug!(%error, "revision not created"),
            }
        }
        if let Some((name, number)) = &history.bump {
            let result = self.store.modify::<ControllerRevision>(
                Some(namespace),
                name,
                UpdateScope::Main,
                |cr| {
                    cr.revision = *number;
                    let hash = cr
                        .metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get(REVISION_HASH_LABEL))
                        .cloned();
                    if hash.is_none() {
                        cr.metadata
                            .labels
                            .get_or_insert_with(BTreeMap::new)
                            .insert(REVISION_HASH_LABEL.to_owned(), history.hash.clone());
                    }
                },
            );
            wrote |= result.is_ok();
        }
        for name in &history.delete {
            wrote |= self
                .store
                .remove_now::<ControllerRevision>(Some(namespace), name)
                .is_ok();
        }
        wrote
    }
}

fn decode<K: for<'de> Deserialize<'de>>(value: &Value) -> Option<K> {
    K::deserialize(value).ok()
}

async fn sleep_until_or_forever(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
