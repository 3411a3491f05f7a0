//! The kubelets part of the cluster task: each pod's kubelet state, admission on its node,
//! the kubelet steps ([`crate::cluster::kubelet`]), graceful deletion, and the status writes,
//! batched once per loop turn.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, PodCondition, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::Value;

use super::super::behavior::TimedEffect;
use super::super::daemonset::DaemonPod;
use super::super::kubelet::{
    KubeletStep, ModelledPull, PodAddresses, PodRuntime, StepTiming, render_status,
};
use super::super::nodes;
use super::super::ownership::{any_controller_uid, controller_uid};
use super::health::NEIGHBOUR_LABEL;
use super::timers::Timer;
use super::{Driver, FLUSH_CHUNK, NodeState, ObjKey, object_key};

/// A `Pulled` event due when the pod's pulls are over.
pub(super) struct PulledEvent {
    pub(super) field_path: String,
    pub(super) message: String,
}

pub(super) struct PodState {
    pub(super) uid: String,
    pub(super) node: Option<String>,
    pub(super) owner: Option<ObjKey>,
    /// Its controller's uid, whatever the kind: a neighbour breaker spares its own
    /// controller's pods.
    pub(super) owner_uid: Option<String>,
    pub(super) host_network: bool,
    /// What the pod does to its node and neighbours once Ready (from its [`Behavior`]).
    pub(super) effects: Vec<TimedEffect>,
    /// Its modelled image pulls (set at admission).
    pub(super) pulls: Vec<ModelledPull>,
    /// `Pulled` events to write when the pulls are over.
    pub(super) pulled_events: Vec<PulledEvent>,
    pub(super) view: Option<DaemonPod>,
    pub(super) runtime: Option<PodRuntime>,
    pub(super) addresses: Option<PodAddresses>,
    /// Bumped whenever pending kubelet timers of this pod become void.
    pub(super) epoch: u64,
    pub(super) deleting: Option<Duration>,
    pub(super) termination_scheduled: bool,
    /// A kubelet step that came due while the node was NotReady.
    pub(super) deferred: Option<KubeletStep>,
}

impl Driver {
    /// A pod as the store has it now. `whole` is the event's object when `pod` is only its
    /// [`pod_view`]: the whole pod is then decoded only if its kubelet admits it now.
    pub(super) fn on_pod(&mut self, pod: Pod, whole: Option<&Value>) {
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
        let owner_uid = any_controller_uid(&pod.metadata);
        let host_network = pod
            .spec
            .as_ref()
            .and_then(|s| s.host_network)
            .unwrap_or(false);
        let deleting = pod.metadata.deletion_timestamp.as_ref().map(|_| {
            let grace = pod.metadata.deletion_grace_period_seconds.unwrap_or(0);
            Duration::from_secs(u64::try_from(grace).unwrap_or(0))
        });
        let state = self.pods.entry(key.clone()).or_insert_with(|| PodState {
            uid,
            node: None,
            owner: None,
            owner_uid: None,
            host_network: false,
            effects: Vec::new(),
            pulls: Vec::new(),
            pulled_events: Vec::new(),
            view: None,
            runtime: None,
            addresses: None,
            epoch: 0,
            deleting: None,
            termination_scheduled: false,
            deferred: None,
        });
        // `updatePod`: a pod that turns ready under `minReadySeconds` brings a sync once it
        // is available (a second late, as the real controller adds against clock skew). The
        // status's own resync counts only each node's oldest pod: without this, a surged pod
        // turning available beside its old one (both counted ready) is never acted on.
        let became_ready = state.view.as_ref().is_some_and(|v| !v.is_ready())
            && view.as_ref().is_some_and(DaemonPod::is_ready);
        let min_ready = owner
            .as_ref()
            .filter(|_| became_ready)
            .and_then(|key| self.daemonsets.get(key))
            .and_then(|ds| ds.ds.spec.as_ref())
            .and_then(|spec| spec.min_ready_seconds)
            .and_then(|seconds| u64::try_from(seconds).ok())
            .filter(|seconds| *seconds > 0);
        if let (Some(seconds), Some(key)) = (min_ready, owner.clone()) {
            self.requeue(&key, Duration::from_secs(seconds + 1));
        }
        let Some(state) = self.pods.get_mut(&key) else {
            return;
        };
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
        nodes::rebind_pod(&mut self.pods_on_node, &key, &mut state.node, node);
        state.owner_uid = owner_uid;
        state.host_network = host_network;
        state.deleting = deleting;
        if state.deleting.is_some() {
            self.schedule_termination(&key);
        } else if state.runtime.is_none() {
            match whole.map(Pod::deserialize) {
                None => self.admit(&key, &pod),
                Some(Ok(whole)) => self.admit(&key, &whole),
                Some(Err(error)) => tracing::debug!(pod = %key.1, %error, "pod not admitted"),
            }
        }
    }

    pub(super) fn on_pod_deleted(&mut self, key: &ObjKey) {
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
        if let Some(node) = &state.node {
            self.stop_effects_of(key, node);
        }
    }

    /// The node's kubelet takes the pod: Pending now, containers start after the latency.
    pub(super) fn admit(&mut self, key: &ObjKey, pod: &Pod) {
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
        let behavior = self.kubelet.behavior_or_healthy(pod);
        let pulls = self.kubelet.modelled_pulls(pod);
        let already_running = pod
            .metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key(NEIGHBOUR_LABEL));
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
        let kubelet_up = node.kubelet_up;
        // A workload that ran before the simulation is not started: its effects (if its
        // annotation gives any) are armed at once. Any other pod's containers start after the
        // kubelet's latency.
        let mut runtime = if already_running {
            PodRuntime::already_running(behavior.containers, now)
        } else {
            PodRuntime::admitted(behavior.containers, now)
        };
        runtime.node_ready = kubelet_up;
        let start_delay = (!already_running).then(|| {
            self.rng
                .jitter(self.kubelet.start_latency, self.kubelet.jitter)
        });
        let Some(state) = self.pods.get_mut(key) else {
            return;
        };
        state.runtime = Some(runtime);
        state.addresses = Some(PodAddresses { host_ip, pod_ip });
        state.effects = behavior.effects;
        state.pulls = pulls;
        match start_delay {
            None => self.arm_effects(key),
            Some(delay) if kubelet_up => {
                let epoch = state.epoch;
                self.schedule(
                    delay,
                    Timer::PodStep {
                        key: key.clone(),
                        epoch,
                        step: KubeletStep::Start,
                    },
                );
            }
            Some(_) => state.deferred = Some(KubeletStep::Start),
        }
        self.refresh_disruption_of(key);
        self.dirty_pod_statuses.insert(key.clone());
    }

    /// Graceful deletion: the kubelet stops the containers, then removes the pod.
    pub(super) fn schedule_termination(&mut self, key: &ObjKey) {
        let Some(state) = self.pods.get_mut(key) else {
            return;
        };
        let Some(grace) = state.deleting else { return };
        if state.termination_scheduled {
            return;
        }
        let kubelet_up = kubelet_up(&self.nodes, state.node.as_deref());
        match kubelet_up {
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

    pub(super) fn run_pod_step(&mut self, key: &ObjKey, epoch: u64, step: KubeletStep) {
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
        let node = state.node.as_deref().and_then(|n| self.nodes.get(n));
        let kubelet_up = node.is_some_and(|n| n.kubelet_up);
        // A kubelet whose pod network is broken starts only hostNetwork pods
        // (`syncPod`: "network is not ready"); the others wait in ContainerCreating.
        let network_blocks =
            step == KubeletStep::Start && node.is_some_and(|n| !n.ready) && !state.host_network;
        if !kubelet_up || network_blocks {
            state.deferred = Some(step);
            return;
        }
        let pull_wait = if step == KubeletStep::Start {
            self.start_pulls(key)
        } else {
            Duration::ZERO
        };
        if step == KubeletStep::Pulled {
            self.write_pulled_events(key);
        }
        let timing = StepTiming {
            ready_delay,
            pull_wait,
            liveness_kill_after: self.kubelet.liveness_kill_after,
        };
        let Some(state) = self.pods.get_mut(key) else {
            return;
        };
        let Some(runtime) = state.runtime.as_mut() else {
            return;
        };
        let was_ever_ready = runtime.ever_ready;
        let next = runtime.step(step, now, timing, &backoff);
        let first_ready = !was_ever_ready && runtime.ever_ready;
        self.dirty_pod_statuses.insert(key.clone());
        self.schedule_step(key, epoch, next);
        if first_ready {
            self.arm_effects(key);
        }
    }

    /// Schedules the kubelet step `next` of the pod (of `epoch`), if there is one.
    pub(super) fn schedule_step(
        &mut self,
        key: &ObjKey,
        epoch: u64,
        next: Option<(KubeletStep, Duration)>,
    ) {
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

    /// The pod's containers are about to start: its images are requested from the node
    /// (one pull at a time there; an image present or being pulled is not pulled again),
    /// with their events. Returns how long until they are all there.
    fn start_pulls(&mut self, key: &ObjKey) -> Duration {
        let now = self.model_now();
        let Some(state) = self.pods.get_mut(key) else {
            return Duration::ZERO;
        };
        if state.pulls.is_empty()
            || state
                .runtime
                .as_ref()
                .is_some_and(|r| r.behavior == super::super::kubelet::PodBehavior::ImagePullBackOff)
        {
            return Duration::ZERO;
        }
        let Some(node) = state.node.as_deref().and_then(|n| self.nodes.get_mut(n)) else {
            return Duration::ZERO;
        };
        let mut ready_at = now;
        let mut events = Vec::new();
        for pull in &state.pulls {
            let plan = node.images.request(&pull.image, pull.time, now);
            let report = plan.report(&pull.image, pull.time, now);
            if let Some((reason, message)) = report.at_once {
                events.push((pull.field_path.clone(), reason, message));
            }
            if let Some(message) = report.when_pulled {
                state.pulled_events.push(PulledEvent {
                    field_path: pull.field_path.clone(),
                    message,
                });
            }
            ready_at = ready_at.max(plan.ready_at(now));
        }
        for (field_path, reason, message) in events {
            self.write_pod_event(key, &field_path, reason, message);
        }
        ready_at.saturating_sub(now)
    }

    /// The `Pulled` events of the pod's pulls, now that they are over.
    fn write_pulled_events(&mut self, key: &ObjKey) {
        let events = self
            .pods
            .get_mut(key)
            .map(|state| std::mem::take(&mut state.pulled_events))
            .unwrap_or_default();
        for event in events {
            self.write_pod_event(key, &event.field_path, "Pulled", event.message);
        }
    }

    /// Writes the status of at most [`FLUSH_CHUNK`] pods whose status changed (the others
    /// stay dirty for the next pass, at the same virtual instant); true if one was written.
    pub(super) fn flush_pod_statuses(&mut self) -> bool {
        let mut wrote = false;
        for _ in 0..FLUSH_CHUNK {
            let Some(key) = self.dirty_pod_statuses.pop_first() else {
                break;
            };
            let Some(state) = self.pods.get(&key) else {
                continue;
            };
            let (Some(runtime), Some(addresses)) = (&state.runtime, &state.addresses) else {
                continue;
            };
            // Only what the status is rendered from (metadata, spec) is decoded, and only
            // the status is encoded: these writes are most of the simulator's work.
            let result = self
                .store
                .modify_status::<Pod, _>(Some(&key.0), &key.1, |stored| {
                    let pod = Pod {
                        metadata: ObjectMeta::deserialize(&stored["metadata"]).ok()?,
                        spec: Option::<PodSpec>::deserialize(&stored["spec"]).ok()?,
                        status: None,
                    };
                    Some(render_status(&pod, runtime, addresses))
                });
            match result {
                Ok(written) => wrote |= written.is_some(),
                Err(error) => tracing::debug!(pod = %key.1, %error, "pod status not written"),
            }
        }
        wrote || !self.dirty_pod_statuses.is_empty()
    }
}

/// What the cluster task reads of a pod on every event: its metadata, node, host network,
/// phase and conditions. A pod's containers (most of it) and the rest of its status are
/// skipped: decoding every pod event whole was a large part of the simulator's work, and
/// only admission reads the containers ([`Driver::on_pod`] decodes them then). `None` when
/// the object is not a pod with containers, as when it does not decode as a whole [`Pod`].
pub(super) fn pod_view(object: &Value) -> Option<Pod> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Spec {
        node_name: Option<String>,
        host_network: Option<bool>,
        // Required, as in `PodSpec`, but not decoded.
        #[serde(rename = "containers")]
        _containers: IgnoredAny,
    }
    #[derive(Deserialize)]
    struct Status {
        phase: Option<String>,
        conditions: Option<Vec<PodCondition>>,
    }
    #[derive(Deserialize)]
    struct View {
        metadata: ObjectMeta,
        spec: Option<Spec>,
        status: Option<Status>,
    }
    let view = View::deserialize(object).ok()?;
    Some(Pod {
        metadata: view.metadata,
        spec: view.spec.map(|spec| PodSpec {
            node_name: spec.node_name,
            host_network: spec.host_network,
            ..PodSpec::default()
        }),
        status: view.status.map(|status| PodStatus {
            phase: status.phase,
            conditions: status.conditions,
            ..PodStatus::default()
        }),
    })
}

/// Whether the kubelet of the node `node` names runs; `None` when the pod is unbound or its
/// node is gone.
fn kubelet_up(nodes: &BTreeMap<String, NodeState>, node: Option<&str>) -> Option<bool> {
    nodes.get(node?).map(|n| n.kubelet_up)
}
