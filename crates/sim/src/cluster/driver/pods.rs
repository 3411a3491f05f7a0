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

use super::super::daemonset::DaemonPod;
use super::super::kubelet::{
    KubeletStep, PodAddresses, PodBehavior, PodRuntime, StepTiming, render_status,
};
use super::super::nodes;
use super::super::ownership::controller_uid;
use super::timers::Timer;
use super::{Driver, NodeState, ObjKey, object_key};

pub(super) struct PodState {
    pub(super) uid: String,
    pub(super) node: Option<String>,
    pub(super) owner: Option<ObjKey>,
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
    pub(super) fn schedule_termination(&mut self, key: &ObjKey) {
        let Some(state) = self.pods.get_mut(key) else {
            return;
        };
        let Some(grace) = state.deleting else { return };
        if state.termination_scheduled {
            return;
        }
        let node_ready = node_ready(&self.nodes, state.node.as_deref());
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
        let node_ready = node_ready(&self.nodes, state.node.as_deref()) == Some(true);
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

    pub(super) fn flush_pod_statuses(&mut self) -> bool {
        let keys = std::mem::take(&mut self.dirty_pod_statuses);
        let mut wrote = false;
        for key in keys {
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
        wrote
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

/// Whether the node `node` names is Ready; `None` when the pod is unbound or its node is gone.
fn node_ready(nodes: &BTreeMap<String, NodeState>, node: Option<&str>) -> Option<bool> {
    nodes.get(node?).map(|n| n.ready)
}
