//! canary-sim's pod behaviours on a real control plane whose kubelets are KWOK (`cargo xtask
//! cluster`): the part KWOK's Stages cannot play.
//!
//! A KWOK Stage acts on one object: it plays what a pod does to itself (start, readiness,
//! crashes, the Stages of `xtask/src/cluster/kwok-stages.yaml`, chosen by the same
//! [`BEHAVIOR_ANNOTATION`](crate::cluster::BEHAVIOR_ANNOTATION)). What a pod does to *other* objects, its node (`breaks-node`,
//! `node-condition`) and the pods beside it (`breaks-neighbours`), and what a node remembers
//! (the images it has pulled), are played here by a [`Player`]: it watches pods and nodes and
//! writes what a kubelet would write (the node's conditions, the pull events), plus two pod
//! annotations the Stages read: [`DISRUPTED_BY_ANNOTATION`] (the pod's probes fail) and
//! [`PULL_WAIT_ANNOTATION`] (how long its start waits for its images). [`run`] drives a
//! player against a cluster.
//!
//! Invariants: the decisions are the simulated cluster's own
//! ([`NodeEffects`], [`NodeImages`], [`nodes::show_health`]); an effect's delay counts from the
//! moment the player first sees its pod Ready; it ends when the pod is gone from the API; the
//! player writes only what differs from what the cluster shows.

use std::borrow::Cow;
use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, HashMap, HashSet};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Container, Event, Node, NodeCondition, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, watcher};
use serde::Deserialize;
use serde_json::json;

use crate::cluster::behavior::{Effect, TimedEffect};
use crate::cluster::effects::{Cause, NodeEffects, NodeHealth, annotation_effects};
use crate::cluster::images::NodeImages;
use crate::cluster::kubelet::{EventSubject, KubeletConfig, ModelledPull, kubelet_event};
use crate::cluster::nodes;

/// Pod annotation the player sets on a pod whose neighbour breaks its network (value: that
/// neighbour, `namespace/name`) and removes when that is over. The Stages fail the pod's
/// readiness at once and kill it after 30 s of failing liveness, as canary-sim's kubelet does.
pub const DISRUPTED_BY_ANNOTATION: &str = "sim.canary.daemonset.dev/disrupted-by";
/// Pod annotation the player sets on a pod with the pull annotation: how long after its
/// sandbox its images are on the node (`30000ms`; `0ms` when they are already). The Stage
/// that starts containers waits for it, and adds it to the start delay.
pub const PULL_WAIT_ANNOTATION: &str = "sim.canary.daemonset.dev/pull-wait";
/// Field manager of the player's writes.
pub const FIELD_MANAGER: &str = "canary-sim-kwok";

/// `(namespace, name)`.
type PodKey = (String, String);

/// What the player reads of a pod (the rest is not decoded).
#[derive(Clone, Debug, Default, Deserialize)]
pub struct PodLite {
    /// The pod's metadata.
    pub metadata: ObjectMeta,
    /// What the player reads of its spec.
    #[serde(default)]
    pub spec: Option<PodLiteSpec>,
    /// What the player reads of its status.
    #[serde(default)]
    pub status: Option<PodLiteStatus>,
}

/// The node and containers of a pod.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodLiteSpec {
    /// `spec.nodeName`.
    pub node_name: Option<String>,
    /// Name and image of each container.
    #[serde(default)]
    pub containers: Vec<ContainerLite>,
    /// Name and image of each init container.
    pub init_containers: Option<Vec<ContainerLite>>,
}

/// A container's name and image.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct ContainerLite {
    /// `name`.
    pub name: String,
    /// `image`.
    pub image: Option<String>,
}

/// A pod's conditions.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct PodLiteStatus {
    /// `type` and `status` of each condition.
    #[serde(default)]
    pub conditions: Vec<ConditionLite>,
}

/// A condition's type and status.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct ConditionLite {
    /// `type`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `status`.
    pub status: String,
}

impl kube::Resource for PodLite {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("Pod")
    }
    fn group(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("")
    }
    fn version(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("v1")
    }
    fn plural(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("pods")
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl PodLite {
    fn key(&self) -> PodKey {
        (
            self.metadata.namespace.clone().unwrap_or_default(),
            self.metadata.name.clone().unwrap_or_default(),
        )
    }

    fn node(&self) -> Option<String> {
        self.spec
            .as_ref()?
            .node_name
            .clone()
            .filter(|n| !n.is_empty())
    }

    fn ready(&self) -> bool {
        self.status.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
        })
    }

    fn annotation(&self, key: &str) -> Option<&str> {
        kube::ResourceExt::annotations(self)
            .get(key)
            .map(String::as_str)
    }

    /// The pod as a [`Pod`] with its metadata and containers, for the kubelet model's readers.
    fn as_pod(&self) -> Pod {
        let container = |c: &ContainerLite| Container {
            name: c.name.clone(),
            image: c.image.clone(),
            ..Container::default()
        };
        let spec = self.spec.as_ref();
        Pod {
            metadata: self.metadata.clone(),
            spec: Some(PodSpec {
                node_name: self.node(),
                containers: spec
                    .map(|s| s.containers.iter().map(container).collect())
                    .unwrap_or_default(),
                init_containers: spec
                    .and_then(|s| s.init_containers.as_ref())
                    .map(|c| c.iter().map(container).collect()),
                ..PodSpec::default()
            }),
            status: None,
        }
    }
}

/// A write the player asks for.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Patch these conditions into the node's status (a strategic merge, by type).
    NodeConditions {
        /// The node.
        node: String,
        /// The conditions that change, whole.
        conditions: Vec<NodeCondition>,
    },
    /// Set (or, `None`, remove) an annotation of a pod.
    AnnotatePod {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// The annotation.
        key: &'static str,
        /// Its value.
        value: Option<String>,
    },
    /// Write an event about a pod, as its node's kubelet reports it.
    PodEvent(Box<Event>),
}

struct Tracked {
    uid: String,
    node: Option<String>,
    owner_uid: Option<String>,
    effects: Vec<TimedEffect>,
    armed: bool,
    deleting: bool,
    pulls: Vec<ModelledPull>,
    pulls_planned: bool,
    /// `Pulled` events due when the pulls are over.
    pulled_messages: Vec<(String, String)>,
    /// The value of [`DISRUPTED_BY_ANNOTATION`] as last seen or written.
    disrupted_by: Option<String>,
}

#[derive(Default)]
struct NodeEntry {
    node: Node,
    effects: NodeEffects,
    shown: NodeHealth,
    annotated: Vec<Effect>,
    images: NodeImages,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Due {
    Effect {
        key: PodKey,
        uid: String,
        index: usize,
    },
    Pulled {
        key: PodKey,
        uid: String,
    },
}

/// The behaviours' cross-object effects, as a state machine fed with what the cluster shows:
/// pods and nodes as they change, and the time (`now`, monotonic, for delays; `wall`, for
/// what is written in objects). Every method returns the writes to make.
pub struct Player {
    start_delay: Duration,
    pods: HashMap<PodKey, Tracked>,
    pods_on_node: HashMap<String, BTreeSet<PodKey>>,
    nodes: HashMap<String, NodeEntry>,
    timers: BinaryHeap<Reverse<(Duration, u64, Due)>>,
    sequence: u64,
}

fn cause_of(key: &PodKey) -> Cause {
    Cause::Pod(key.0.clone(), key.1.clone())
}

impl Player {
    /// A player for a cluster whose pods start `start_delay` after they are created (KWOK's
    /// start Stage; the pulls begin then).
    pub fn new(start_delay: Duration) -> Self {
        Self {
            start_delay,
            pods: HashMap::new(),
            pods_on_node: HashMap::new(),
            nodes: HashMap::new(),
            timers: BinaryHeap::new(),
            sequence: 0,
        }
    }

    fn schedule(&mut self, at: Duration, due: Due) {
        self.sequence += 1;
        self.timers.push(Reverse((at, self.sequence, due)));
    }

    /// When the next delayed effect or event is due.
    pub fn next_due(&self) -> Option<Duration> {
        self.timers.peek().map(|Reverse((at, _, _))| *at)
    }

    /// A node as it is now.
    pub fn node_applied(&mut self, node: Node, now: Duration, wall: Timestamp) -> Vec<Action> {
        let Some(name) = node.metadata.name.clone() else {
            return Vec::new();
        };
        let annotated = annotation_effects(node.metadata.annotations.as_ref());
        // (An entry made for an effect that came due first has no node yet.)
        let first_sight = self
            .nodes
            .get(&name)
            .is_none_or(|e| e.node.metadata.name.is_none());
        let entry = self.nodes.entry(name.clone()).or_default();
        entry.node = node;
        if entry.annotated != annotated {
            entry.effects.stop(&Cause::Annotation);
            for effect in &annotated {
                entry.effects.start(Cause::Annotation, effect, None);
            }
            entry.annotated = annotated;
        }
        let mut actions: Vec<Action> = self.reconcile(&name, wall).into_iter().collect();
        if first_sight {
            // Pods seen before their node (the two watches start together) get what needed
            // the node now: their pull plans and their probes.
            let keys: Vec<PodKey> = self
                .pods_on_node
                .get(&name)
                .into_iter()
                .flatten()
                .cloned()
                .collect();
            for key in keys {
                actions.extend(self.plan_pulls(&key, now, wall));
                actions.extend(self.refresh_disruption_of(&key));
            }
        }
        actions
    }

    /// The node is gone.
    pub fn node_deleted(&mut self, name: &str) {
        self.nodes.remove(name);
    }

    /// A pod as it is now.
    pub fn pod_applied(&mut self, pod: &PodLite, now: Duration, wall: Timestamp) -> Vec<Action> {
        let key = pod.key();
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let mut actions = Vec::new();
        if self.pods.get(&key).is_some_and(|t| t.uid != uid) {
            actions.extend(self.pod_deleted(&key.0, &key.1, wall));
        }
        let node = pod.node();
        if !self.pods.contains_key(&key) {
            let whole = pod.as_pod();
            let config = KubeletConfig::default();
            let behavior = config.behavior_or_healthy(&whole);
            let pulls = config.modelled_pulls(&whole);
            self.pods.insert(
                key.clone(),
                Tracked {
                    uid: uid.clone(),
                    node: None,
                    owner_uid: None,
                    effects: behavior.effects,
                    armed: false,
                    deleting: false,
                    pulls,
                    // A pod already told its wait (by an earlier run of the player) is not
                    // pulled for again.
                    pulls_planned: pod.annotation(PULL_WAIT_ANNOTATION).is_some(),
                    pulled_messages: Vec::new(),
                    disrupted_by: None,
                },
            );
        }
        let Some(tracked) = self.pods.get_mut(&key) else {
            return actions;
        };
        nodes::rebind_pod(
            &mut self.pods_on_node,
            &key,
            &mut tracked.node,
            node.clone(),
        );
        tracked.owner_uid = crate::cluster::ownership::any_controller_uid(&pod.metadata);
        tracked.deleting = pod.metadata.deletion_timestamp.is_some();
        tracked.disrupted_by = pod.annotation(DISRUPTED_BY_ANNOTATION).map(str::to_owned);
        if pod.ready() && !tracked.armed && !tracked.deleting {
            tracked.armed = true;
            let delays: Vec<Duration> = tracked.effects.iter().map(|e| e.after).collect();
            for (index, after) in delays.into_iter().enumerate() {
                self.schedule(
                    now.saturating_add(after),
                    Due::Effect {
                        key: key.clone(),
                        uid: uid.clone(),
                        index,
                    },
                );
            }
        }
        actions.extend(self.plan_pulls(&key, now, wall));
        actions.extend(self.refresh_disruption_of(&key));
        actions
    }

    /// The pod is gone from the API: its effects end.
    pub fn pod_deleted(&mut self, namespace: &str, name: &str, wall: Timestamp) -> Vec<Action> {
        let key = (namespace.to_owned(), name.to_owned());
        let Some(tracked) = self.pods.remove(&key) else {
            return Vec::new();
        };
        let Some(node) = tracked.node else {
            return Vec::new();
        };
        if let Some(set) = self.pods_on_node.get_mut(&node) {
            set.remove(&key);
        }
        let Some(entry) = self.nodes.get_mut(&node) else {
            return Vec::new();
        };
        if !entry.effects.stop(&cause_of(&key)) {
            return Vec::new();
        }
        let mut actions: Vec<Action> = self.reconcile(&node, wall).into_iter().collect();
        actions.extend(self.refresh_disruption(&node));
        actions
    }

    /// Forgets the pods not in `present` (after the pod watch listed them again): they were
    /// deleted while it was not watching.
    pub fn keep_only(&mut self, present: &HashSet<PodKey>, wall: Timestamp) -> Vec<Action> {
        let gone: Vec<PodKey> = self
            .pods
            .keys()
            .filter(|k| !present.contains(*k))
            .cloned()
            .collect();
        gone.into_iter()
            .flat_map(|(namespace, name)| self.pod_deleted(&namespace, &name, wall))
            .collect()
    }

    /// Starts every effect due by `now`, writes every event due.
    pub fn fire(&mut self, now: Duration, wall: Timestamp) -> Vec<Action> {
        let mut actions = Vec::new();
        while self.next_due().is_some_and(|at| at <= now) {
            let Some(Reverse((_, _, due))) = self.timers.pop() else {
                break;
            };
            match due {
                Due::Effect { key, uid, index } => {
                    actions.extend(self.start_effect(&key, &uid, index, wall));
                }
                Due::Pulled { key, uid } => {
                    let Some(tracked) = self.pods.get_mut(&key).filter(|t| t.uid == uid) else {
                        continue;
                    };
                    let messages = std::mem::take(&mut tracked.pulled_messages);
                    for (field_path, message) in messages {
                        actions.extend(self.event(&key, &field_path, "Pulled", message, wall));
                    }
                }
            }
        }
        actions
    }

    fn start_effect(
        &mut self,
        key: &PodKey,
        uid: &str,
        index: usize,
        wall: Timestamp,
    ) -> Vec<Action> {
        let Some(tracked) = self.pods.get(key) else {
            return Vec::new();
        };
        if tracked.uid != uid || tracked.deleting {
            return Vec::new();
        }
        let (Some(node), Some(effect)) = (tracked.node.clone(), tracked.effects.get(index)) else {
            return Vec::new();
        };
        let effect = effect.effect.clone();
        let owner = tracked.owner_uid.clone();
        // A node not seen yet shows the effect once it is.
        let entry = self.nodes.entry(node.clone()).or_default();
        entry.effects.start(cause_of(key), &effect, owner);
        let mut actions: Vec<Action> = self.reconcile(&node, wall).into_iter().collect();
        if effect == Effect::BreaksNeighbours {
            actions.extend(self.refresh_disruption(&node));
        }
        actions
    }

    /// The node's conditions that must change for it to show what its effects ask for.
    fn reconcile(&mut self, name: &str, wall: Timestamp) -> Option<Action> {
        let entry = self.nodes.get_mut(name)?;
        let wanted = entry.effects.health();
        let shown = std::mem::replace(&mut entry.shown, wanted.clone());
        if !nodes::health_differs(&entry.node, &shown, &wanted) {
            return None;
        }
        let before = conditions_of(&entry.node);
        nodes::show_health(&mut entry.node, &shown, &wanted, wall);
        let changed: Vec<NodeCondition> = conditions_of(&entry.node)
            .into_iter()
            .filter(|c| !before.contains(c))
            .collect();
        (!changed.is_empty()).then(|| Action::NodeConditions {
            node: name.to_owned(),
            conditions: changed,
        })
    }

    fn refresh_disruption(&mut self, node: &str) -> Vec<Action> {
        let keys: Vec<PodKey> = self
            .pods_on_node
            .get(node)
            .into_iter()
            .flatten()
            .cloned()
            .collect();
        keys.iter()
            .flat_map(|key| self.refresh_disruption_of(key))
            .collect()
    }

    /// Sets or removes the pod's [`DISRUPTED_BY_ANNOTATION`] as its node's neighbour
    /// breakers say.
    fn refresh_disruption_of(&mut self, key: &PodKey) -> Option<Action> {
        let tracked = self.pods.get(key)?;
        let entry = tracked.node.as_ref().and_then(|n| self.nodes.get(n));
        let wanted = entry.and_then(|e| {
            match e
                .effects
                .disruptor_of(&cause_of(key), tracked.owner_uid.as_deref())?
            {
                Cause::Pod(namespace, name) => Some(format!("{namespace}/{name}")),
                Cause::Annotation => Some("node".to_owned()),
            }
        });
        if tracked.deleting || wanted == tracked.disrupted_by {
            return None;
        }
        let tracked = self.pods.get_mut(key)?;
        tracked.disrupted_by.clone_from(&wanted);
        Some(Action::AnnotatePod {
            namespace: key.0.clone(),
            name: key.1.clone(),
            key: DISRUPTED_BY_ANNOTATION,
            value: wanted,
        })
    }

    /// A pod with modelled pulls, seen for the first time on a known node: its images are
    /// requested from the node when its sandbox will be ready; it is told how long after that
    /// they are there; `Pulling` now, `Pulled` when they are.
    fn plan_pulls(&mut self, key: &PodKey, now: Duration, wall: Timestamp) -> Vec<Action> {
        let Some(tracked) = self.pods.get_mut(key) else {
            return Vec::new();
        };
        if tracked.pulls_planned || tracked.pulls.is_empty() || tracked.deleting {
            return Vec::new();
        }
        let Some(entry) = tracked.node.as_ref().and_then(|n| self.nodes.get_mut(n)) else {
            return Vec::new();
        };
        tracked.pulls_planned = true;
        let sandbox = now.saturating_add(self.start_delay);
        let mut ready_at = sandbox;
        let mut events = Vec::new();
        for pull in &tracked.pulls {
            let plan = entry.images.request(&pull.image, pull.time, sandbox);
            let report = plan.report(&pull.image, pull.time, sandbox);
            if let Some((reason, message)) = report.at_once {
                events.push((pull.field_path.clone(), reason, message));
            }
            if let Some(message) = report.when_pulled {
                tracked
                    .pulled_messages
                    .push((pull.field_path.clone(), message));
            }
            ready_at = ready_at.max(plan.ready_at(sandbox));
        }
        let wait = ready_at.saturating_sub(sandbox);
        let uid = tracked.uid.clone();
        let mut actions = vec![Action::AnnotatePod {
            namespace: key.0.clone(),
            name: key.1.clone(),
            key: PULL_WAIT_ANNOTATION,
            value: Some(format!("{}ms", wait.as_millis())),
        }];
        if !tracked.pulled_messages.is_empty() {
            self.schedule(
                ready_at,
                Due::Pulled {
                    key: key.clone(),
                    uid,
                },
            );
        }
        for (field_path, reason, message) in events {
            actions.extend(self.event(key, &field_path, reason, message, wall));
        }
        actions
    }

    fn event(
        &mut self,
        key: &PodKey,
        field_path: &str,
        reason: &str,
        message: String,
        wall: Timestamp,
    ) -> Option<Action> {
        let tracked = self.pods.get(key)?;
        let node = tracked.node.clone().unwrap_or_default();
        self.sequence += 1;
        Some(Action::PodEvent(Box::new(kubelet_event(
            format!("{}.{:x}{:06x}", key.1, wall.as_second(), self.sequence),
            EventSubject {
                namespace: &key.0,
                pod: &key.1,
                uid: &tracked.uid,
                node: &node,
            },
            field_path,
            reason,
            message,
            wall,
        ))))
    }
}

fn conditions_of(node: &Node) -> Vec<NodeCondition> {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default()
}

/// Why [`run`] stopped.
#[derive(Debug, thiserror::Error)]
pub enum KwokError {
    /// The first list of nodes failed (the cluster is not reachable, or refuses).
    #[error("cannot list the nodes: {0}")]
    ListNodes(#[source] kube::Error),
}

/// Plays the behaviours' cross-object effects on the cluster of `client` until the future is
/// dropped: watches every pod and node, and writes what [`Player`] asks for. Watch failures
/// are retried with back-off; a failed write is logged and left (the next change of the
/// object tries again).
pub async fn run(client: kube::Client, start_delay: Duration) -> Result<(), KwokError> {
    let node_api: Api<Node> = Api::all(client.clone());
    let pod_api: Api<PodLite> = Api::all(client.clone());
    // Fail loudly when the cluster is not there at all; later failures are retried.
    node_api
        .list_metadata(&kube::api::ListParams::default().limit(1))
        .await
        .map_err(KwokError::ListNodes)?;
    let origin = tokio::time::Instant::now();
    let mut player = Player::new(start_delay);
    let mut nodes = std::pin::pin!(watcher(node_api, watcher::Config::default()).default_backoff());
    let mut pods = std::pin::pin!(watcher(pod_api, watcher::Config::default()).default_backoff());
    let mut listed: Option<HashSet<PodKey>> = None;
    loop {
        let next_due = player.next_due().map(|at| origin + at);
        let actions = tokio::select! {
            event = nodes.next() => match event {
                Some(Ok(watcher::Event::Apply(node) | watcher::Event::InitApply(node))) => {
                    player.node_applied(node, origin.elapsed(), Timestamp::now())
                }
                Some(Ok(watcher::Event::Delete(node))) => {
                    player.node_deleted(node.metadata.name.as_deref().unwrap_or_default());
                    Vec::new()
                }
                Some(Ok(_)) | None => Vec::new(),
                Some(Err(error)) => {
                    tracing::warn!(%error, "node watch failed; retrying");
                    Vec::new()
                }
            },
            event = pods.next() => {
                let now = origin.elapsed();
                match event {
                    Some(Ok(watcher::Event::Init)) => {
                        listed = Some(HashSet::new());
                        Vec::new()
                    }
                    Some(Ok(watcher::Event::InitApply(pod))) => {
                        if let Some(listed) = listed.as_mut() {
                            listed.insert(pod.key());
                        }
                        player.pod_applied(&pod, now, Timestamp::now())
                    }
                    Some(Ok(watcher::Event::InitDone)) => match listed.take() {
                        Some(present) => player.keep_only(&present, Timestamp::now()),
                        None => Vec::new(),
                    },
                    Some(Ok(watcher::Event::Apply(pod))) => {
                        player.pod_applied(&pod, now, Timestamp::now())
                    }
                    Some(Ok(watcher::Event::Delete(pod))) => {
                        let (namespace, name) = pod.key();
                        player.pod_deleted(&namespace, &name, Timestamp::now())
                    }
                    None => Vec::new(),
                    Some(Err(error)) => {
                        tracing::warn!(%error, "pod watch failed; retrying");
                        Vec::new()
                    }
                }
            },
            () = sleep_until_or_forever(next_due) => {
                player.fire(origin.elapsed(), Timestamp::now())
            }
        };
        for action in actions {
            apply(&client, action).await;
        }
    }
}

async fn sleep_until_or_forever(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Makes one write; a failure is logged (a pod gone meanwhile only at debug level).
async fn apply(client: &kube::Client, action: Action) {
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    };
    let result = match &action {
        Action::NodeConditions { node, conditions } => {
            tracing::info!(%node, ?conditions, "node conditions");
            Api::<Node>::all(client.clone())
                .patch_status(
                    node,
                    &params,
                    &Patch::Strategic(json!({"status": {"conditions": conditions}})),
                )
                .await
                .map(|_| ())
        }
        Action::AnnotatePod {
            namespace,
            name,
            key,
            value,
        } => {
            tracing::info!(pod = %name, %namespace, annotation = %key, ?value, "pod annotation");
            Api::<Pod>::namespaced(client.clone(), namespace)
                .patch(
                    name,
                    &params,
                    &Patch::Merge(json!({"metadata": {"annotations": {*key: value}}})),
                )
                .await
                .map(|_| ())
        }
        Action::PodEvent(event) => {
            let namespace = event.metadata.namespace.clone().unwrap_or_default();
            Api::<Event>::namespaced(client.clone(), &namespace)
                .create(&PostParams::default(), event)
                .await
                .map(|_| ())
        }
    };
    match result {
        Ok(()) => {}
        Err(kube::Error::Api(status)) if status.code == 404 => {
            tracing::debug!(?action, "the object is gone");
        }
        Err(error) => tracing::warn!(%error, ?action, "write failed"),
    }
}

#[cfg(test)]
mod tests;
