//! What pods do to their nodes and neighbours, in the cluster task: a pod's effects
//! ([`crate::cluster::behavior::Effect`]) armed at its first Ready and started after their
//! delays, a node's hand annotations, both kept in the node's
//! [`NodeEffects`](crate::cluster::effects::NodeEffects) and shown on the node (its Ready
//! condition, its conditions and their taints) and on the pods beside it (failing probes);
//! the neighbour pods themselves; and the kubelet's events about pods.
//!
//! Invariants: the node shows exactly what its effects ask for, and goes back when they end
//! (only what the effects changed: a node NotReady for another reason stays NotReady); an
//! effect ends when its pod is removed from the store, not before.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Namespace, Node, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::super::behavior::Effect;
use super::super::effects::Cause;
use super::super::kubelet::{EventSubject, StepTiming, kubelet_event};
use super::super::nodes;
use super::timers::Timer;
use super::{Driver, ObjKey};
use crate::store::{StoreError, UpdateScope};

/// Label of the neighbour pods the cluster creates ([`crate::cluster::ClusterConfig::neighbours_per_node`]);
/// a pod carrying it is admitted already running and ready, as a workload that was there
/// before the simulation began.
pub const NEIGHBOUR_LABEL: &str = "sim.canary.daemonset.dev/neighbour";
/// Namespace of the neighbour pods.
pub const NEIGHBOURS_NAMESPACE: &str = "neighbours";
/// Image of the neighbour pods.
pub const NEIGHBOUR_IMAGE: &str = "registry.example/neighbour:v1";
/// Neighbour pods created per loop turn: the task reads its own creations between batches,
/// so it never falls behind the store's events.
const NEIGHBOUR_BATCH: usize = 256;

fn cause_of(key: &ObjKey) -> Cause {
    Cause::Pod(key.0.clone(), key.1.clone())
}

impl Driver {
    /// The cluster model's time: since the task started, at the cluster's speed.
    pub(super) fn model_now(&self) -> Duration {
        self.started.elapsed().mul_f64(self.speed)
    }

    /// The node's annotations ask for `annotated` now.
    pub(super) fn on_node_annotations(&mut self, node: &str, annotated: Vec<Effect>) {
        let Some(state) = self.nodes.get_mut(node) else {
            return;
        };
        state.effects.stop(&Cause::Annotation);
        for effect in &annotated {
            state.effects.start(Cause::Annotation, effect, None);
        }
        state.annotated = annotated;
    }

    /// Makes the node show what its effects ask for: Ready False while someone breaks it
    /// (back to True when nobody does, if the NotReady was theirs), each condition True
    /// while someone holds it (False when nobody does any more), the taints that go with
    /// them. Writes only what differs.
    pub(super) fn reconcile_node(&mut self, name: &str) {
        let Some(state) = self.nodes.get_mut(name) else {
            return;
        };
        let wanted = state.effects.health();
        let shown = std::mem::replace(&mut state.shown, wanted.clone());
        if !nodes::health_differs(&state.node, &shown, &wanted) {
            return;
        }
        let now = self.now();
        let written = self
            .store
            .modify::<Node>(None, name, UpdateScope::Status, |node| {
                nodes::show_health(node, &shown, &wanted, now);
            })
            .and_then(|_| {
                self.store
                    .modify::<Node>(None, name, UpdateScope::Main, |node| {
                        nodes::sync_not_ready_taints(node, now);
                        for condition in wanted.conditions.union(&shown.conditions) {
                            nodes::sync_condition_taint(node, condition);
                        }
                    })
            });
        if let Err(error) = written {
            tracing::debug!(node = %name, %error, "node health not written");
        }
    }

    /// The pod was Ready for the first time: its effects start after their delays.
    pub(super) fn arm_effects(&mut self, key: &ObjKey) {
        let Some(state) = self.pods.get(key) else {
            return;
        };
        let uid = state.uid.clone();
        let delays: Vec<Duration> = state.effects.iter().map(|e| e.after).collect();
        for (index, after) in delays.into_iter().enumerate() {
            self.schedule(
                after,
                Timer::Effect {
                    key: key.clone(),
                    uid: uid.clone(),
                    index,
                },
            );
        }
    }

    /// Effect `index` of the pod comes due: it starts, unless the pod is gone or going.
    pub(super) fn start_effect(&mut self, key: &ObjKey, uid: &str, index: usize) {
        let Some(state) = self.pods.get(key) else {
            return;
        };
        if state.uid != uid || state.deleting.is_some() {
            return;
        }
        let (Some(node), Some(effect)) = (state.node.clone(), state.effects.get(index)) else {
            return;
        };
        let effect = effect.effect.clone();
        let owner = state.owner_uid.clone();
        let Some(node_state) = self.nodes.get_mut(&node) else {
            return;
        };
        node_state.effects.start(cause_of(key), &effect, owner);
        self.reconcile_node(&node);
        if effect == Effect::BreaksNeighbours {
            self.refresh_disruption(&node);
        }
    }

    /// The pod is gone from `node`: its effects end there.
    pub(super) fn stop_effects_of(&mut self, key: &ObjKey, node: &str) {
        let Some(state) = self.nodes.get_mut(node) else {
            return;
        };
        let disrupting = state.effects.disrupting();
        if !state.effects.stop(&cause_of(key)) {
            return;
        }
        let still_disrupting = state.effects.disrupting();
        self.reconcile_node(node);
        if disrupting || still_disrupting {
            self.refresh_disruption(node);
        }
    }

    /// Brings the probes of every pod on `node` in line with the node's neighbour breakers.
    pub(super) fn refresh_disruption(&mut self, node: &str) {
        let keys = self.pods_on(node);
        for key in keys {
            self.refresh_disruption_of(&key);
        }
    }

    /// The probes of one pod fail while a neighbour breaks them, and pass again after.
    pub(super) fn refresh_disruption_of(&mut self, key: &ObjKey) {
        let Some(state) = self.pods.get(key) else {
            return;
        };
        let Some(node) = state.node.as_deref().and_then(|n| self.nodes.get(n)) else {
            return;
        };
        let Some(runtime) = state.runtime.as_ref() else {
            return;
        };
        if state.deleting.is_some() {
            return;
        }
        let broken = node
            .effects
            .disrupts(&cause_of(key), state.owner_uid.as_deref());
        if broken == runtime.probes_failing {
            return;
        }
        // A ready delay is drawn only here, when probes change: runs without broken
        // neighbours draw exactly what they drew before neighbours existed.
        let ready_delay = self
            .rng
            .jitter(self.kubelet.ready_delay, self.kubelet.jitter);
        let timing = StepTiming {
            ready_delay,
            pull_wait: Duration::ZERO,
            liveness_kill_after: self.kubelet.liveness_kill_after,
        };
        let now = self.now();
        let Some(state) = self.pods.get_mut(key) else {
            return;
        };
        let epoch = state.epoch;
        let Some(runtime) = state.runtime.as_mut() else {
            return;
        };
        let next = if broken {
            runtime.disrupt(now, timing)
        } else {
            runtime.heal(timing)
        };
        self.dirty_pod_statuses.insert(key.clone());
        self.schedule_step(key, epoch, next);
    }

    /// The node's pod network works again: kubelet steps that waited for it go on.
    pub(super) fn resume_deferred(&mut self, node: &str) {
        let keys = self.pods_on(node);
        for key in keys {
            let Some(state) = self.pods.get_mut(&key) else {
                continue;
            };
            if let Some(step) = state.deferred.take() {
                let epoch = state.epoch;
                self.schedule(Duration::ZERO, Timer::PodStep { key, epoch, step });
            }
        }
    }

    /// Creates the neighbour pods of the next nodes waiting for theirs, a batch at a time;
    /// returns whether it wrote anything.
    pub(super) fn create_pending_neighbours(&mut self) -> bool {
        if self.pending_neighbours.is_empty() {
            return false;
        }
        if let Err(error) = self.store.create(&Namespace {
            metadata: ObjectMeta {
                name: Some(NEIGHBOURS_NAMESPACE.to_owned()),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        }) && !matches!(error, StoreError::AlreadyExists { .. })
        {
            tracing::warn!(%error, "cannot create the neighbours' namespace");
        }
        let per_node = usize::try_from(self.neighbours_per_node).unwrap_or(usize::MAX);
        let mut created = 0usize;
        while created < NEIGHBOUR_BATCH {
            let Some(node) = self.pending_neighbours.pop_front() else {
                break;
            };
            if !self.nodes.contains_key(&node) {
                continue;
            }
            for index in 1..=per_node {
                match self.store.create(&neighbour_pod(&node, index)) {
                    Ok(_) | Err(StoreError::AlreadyExists { .. }) => {}
                    Err(error) => {
                        tracing::warn!(%node, %error, "cannot create a neighbour pod");
                    }
                }
                created += 1;
            }
        }
        created > 0
    }

    /// Writes a kubelet event about the pod (`Pulling`, `Pulled`), as the node's kubelet
    /// reports it.
    pub(super) fn write_pod_event(
        &mut self,
        key: &ObjKey,
        field_path: &str,
        reason: &str,
        message: String,
    ) {
        let Some(state) = self.pods.get(key) else {
            return;
        };
        let node = state.node.clone().unwrap_or_default();
        self.pod_events += 1;
        let event = kubelet_event(
            format!("{}.{:016x}", key.1, self.pod_events),
            EventSubject {
                namespace: &key.0,
                pod: &key.1,
                uid: &state.uid,
                node: &node,
            },
            field_path,
            reason,
            message,
            self.now(),
        );
        if let Err(error) = self.store.create(&event) {
            tracing::debug!(pod = %key.1, %error, "pod event not written");
        }
    }
}

/// Neighbour pod `index` of `node`: a plain pod bound to it, as small as a real pod gets.
pub fn neighbour_pod(node: &str, index: usize) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(format!("{node}-neighbour-{index}")),
            namespace: Some(NEIGHBOURS_NAMESPACE.to_owned()),
            labels: Some(
                [
                    ("app.kubernetes.io/name", "neighbour"),
                    (NEIGHBOUR_LABEL, "true"),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
            ),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            node_name: Some(node.to_owned()),
            containers: vec![Container {
                name: "app".to_owned(),
                image: Some(NEIGHBOUR_IMAGE.to_owned()),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
        status: None,
    }
}
