//! The continuous invariant checks: a mirror of the cluster built from the store's event
//! stream, in commit order, and a check at each change that matters (a pod taken down, a
//! DaemonSet write, a pod the controller deleted, a status turning `successful`). The checks
//! at quiescence (3, 4, 6) are in [`at_quiescence`].

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use canary_kube_adapter::CanaryDaemonSet;
use canary_kube_adapter::crd::{CanaryDaemonSetStatus, FULL_PROMOTION_PREFIX};
use canary_kube_adapter::desired::OWNER_LABEL;
use canary_predicates::{
    CrashLoopPolicy, kubernetes_max_unavailable, pod_crash_loop, pod_is_ready,
};
use canary_sim::cluster::NEIGHBOURS_NAMESPACE;
use canary_sim::{EventKind, ResourceKey, Store, StoreEvent};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::de::DeserializeOwned;
use tokio::sync::broadcast;

use super::lease::Handover;
use super::plan::{Behavior, PlanStep, PodsPlan, StepBudget, scale};
use super::pre_pull::PrePullCheck;
use super::world::{Invariant, World};
use super::{ID_KEY, NAME, NAMESPACE, VERSION_KEY};
use k8s_openapi::api::coordination::v1::Lease;

#[path = "node_breakage.rs"]
mod node_breakage;
#[path = "surge_soak.rs"]
mod surge_soak;

/// What the harness has asked for so far, shared with the checker.
#[derive(Debug, Default)]
pub struct Intent {
    /// Versions applied, in order, with their behaviour.
    pub versions: Vec<(String, Behavior)>,
    /// Whether a node was NotReady at some point (a reason for a deadline failure).
    pub node_not_ready_seen: bool,
    /// When (virtual seconds) the latest version was asked for.
    pub last_change_at: f64,
    /// The DaemonSet was edited by hand since the latest version was asked for: its revert
    /// may go back to the canary value mid-rollout.
    pub hand_edit_since_change: bool,
}

/// Shared [`Intent`].
pub type SharedIntent = Arc<Mutex<Intent>>;

/// A neighbour pod as invariant 32 reads it.
#[derive(Debug, Clone)]
struct NeighbourSeen {
    node: String,
    /// `creationTimestamp`, seconds since the epoch.
    created: i64,
    /// Since when (virtual seconds) it is not ready, if it is not.
    not_ready_since: Option<f64>,
}

fn created_second(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> i64 {
    meta.creation_timestamp
        .as_ref()
        .map_or(0, |t| t.0.as_second())
}

#[derive(Debug, Clone)]
struct PodState {
    pod: Pod,
    /// The last moment the pod was known ready: the event that showed it ready, or the one
    /// that showed it no longer ready.
    last_ready_at: Option<f64>,
    crash_since: Option<f64>,
    /// Ready (and not terminating) since this event, for `minReadySeconds` (issue 50).
    ready_since: Option<f64>,
}

/// The mirror and the checks.
pub struct Checker {
    world: World,
    intent: SharedIntent,
    stale: f64,
    policy: CrashLoopPolicy,
    nodes: BTreeMap<String, (Node, f64)>,
    pods: BTreeMap<String, PodState>,
    ds: Option<DaemonSet>,
    phase: Option<String>,
    starts: BTreeMap<String, u32>,
    /// The Pods-driver part of the plan (invariants 11 and 13).
    pods_plan: Option<PodsPlan>,
    /// `spec.strategy.surge` (invariant 34).
    surge: bool,
    /// `compatibility: KubeVirt`: pods count as the reference counts them (terminating ones
    /// too, spec section 2).
    kubevirt: bool,
    /// Nodes whose pod the controller deleted and that run no ready pod since: node -> the
    /// UID deleted.
    down: BTreeMap<String, String>,
    /// When each node was last seen NotReady or cordoned.
    unhealthy_at: BTreeMap<String, f64>,
    /// The step and target revision of the last status seen.
    status_step: Option<(u32, Option<String>)>,
    /// The most nodes down at a deletion since the last status, and the status step then.
    pending: Option<PendingBudget>,
    /// The last status seen: an event that leaves it as it was (a spec change, an
    /// annotation) is no status write.
    last_status: Option<canary_kube_adapter::crd::CanaryDaemonSetStatus>,
    /// The history part of the last status seen, both drivers (invariant 5 during a rollback).
    history: Option<canary_kube_adapter::crd::HistoryStatus>,
    /// The pause steps are analysed (invariant 21).
    analysed: bool,
    /// Since when (virtual seconds) the status says `failed` with `AnalysisFailed`, and the
    /// target it failed for (invariant 21 on both drivers, issue 46).
    analysis_failed: Option<(f64, Target)>,
    /// The node whose pod events a replay prints (`DST_TRACE_NODE`).
    traced_node: Option<String>,
    /// Pods deleted once ready: their target and the last moment they were ready. A widening
    /// decided on a ready canary whose node went away before the write landed is no
    /// violation (soak seed 24002610).
    departed_ready: Vec<(Target, f64)>,
    /// The neighbour pods (`sim serve --neighbours-per-node`), by name (invariant 32).
    neighbours: BTreeMap<String, NeighbourSeen>,
    /// The DaemonSet's desired pods before each drop, and when it dropped (invariant 11).
    desired_drops: Vec<(u32, f64)>,
    /// Invariant 33's memory.
    breakage: node_breakage::NodeBreakage,
    /// Invariant 35 (image pre-pull), when the scenario pre-pulls.
    pre_pull: Option<PrePullCheck>,
    /// Invariant 36's memory (the surge canary).
    surge_soak: surge_soak::SurgeSoak,
}

/// Invariant 11, between a deletion and the status write that tells its step.
#[derive(Debug, Clone)]
struct PendingBudget {
    /// The most nodes down (on healthy nodes) at a deletion.
    down: usize,
    /// Which ones, for the report.
    nodes: Vec<String>,
    /// When.
    at: f64,
    /// The step and target revision of the status before the deletion.
    from: Option<(u32, Option<String>)>,
    /// The most desired pods seen since.
    desired: u32,
}

fn decode<K: DeserializeOwned>(value: &serde_json::Value) -> Option<K> {
    serde_json::from_value(value.clone()).ok()
}

fn node_is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
        })
}

fn terminating(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

fn node_of(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref().and_then(|s| s.node_name.as_deref())
}

fn annotation<'a>(map: Option<&'a BTreeMap<String, String>>, key: &str) -> Option<&'a str> {
    map.and_then(|m| m.get(key)).map(String::as_str)
}

/// A pod template's target: its install-strategy (version, identifier) annotations.
type Target = (Option<String>, Option<String>);

/// The target (version, id) of the DaemonSet's pod template.
fn ds_target(ds: &DaemonSet) -> Target {
    let annotations = ds
        .spec
        .as_ref()
        .and_then(|s| s.template.metadata.as_ref())
        .and_then(|m| m.annotations.as_ref());
    (
        annotation(annotations, VERSION_KEY).map(str::to_owned),
        annotation(annotations, ID_KEY).map(str::to_owned),
    )
}

fn pod_target(pod: &Pod) -> Target {
    let annotations = pod.metadata.annotations.as_ref();
    (
        annotation(annotations, VERSION_KEY).map(str::to_owned),
        annotation(annotations, ID_KEY).map(str::to_owned),
    )
}

/// maxUnavailable as text (`"1"`, `"10%"`), absent meaning the API default 1.
pub fn max_unavailable_text(ds: &DaemonSet) -> String {
    match ds
        .spec
        .as_ref()
        .and_then(|s| s.update_strategy.as_ref())
        .and_then(|u| u.rolling_update.as_ref())
        .and_then(|r| r.max_unavailable.as_ref())
    {
        Some(IntOrString::Int(n)) => n.to_string(),
        Some(IntOrString::String(s)) => s.clone(),
        None => "1".to_owned(),
    }
}

impl Checker {
    /// A checker; `stale` is how old (virtual seconds) the controller's view may be.
    pub fn new(world: World, intent: SharedIntent, stale: f64) -> Self {
        Self {
            world,
            intent,
            stale,
            policy: CrashLoopPolicy::default(),
            nodes: BTreeMap::new(),
            pods: BTreeMap::new(),
            ds: None,
            phase: None,
            starts: BTreeMap::new(),
            pods_plan: None,
            surge: false,
            kubevirt: false,
            down: BTreeMap::new(),
            unhealthy_at: BTreeMap::new(),
            status_step: None,
            pending: None,
            last_status: None,
            history: None,
            analysed: false,
            analysis_failed: None,
            traced_node: std::env::var("DST_TRACE_NODE").ok(),
            departed_ready: Vec::new(),
            neighbours: BTreeMap::new(),
            desired_drops: Vec::new(),
            breakage: node_breakage::NodeBreakage::default(),
            pre_pull: None,
            surge_soak: surge_soak::SurgeSoak::default(),
        }
    }

    /// Checks invariant 35 (image pre-pull) with `max_concurrent` pulling at once.
    pub fn with_pre_pull(mut self, max_concurrent: Option<u32>) -> Self {
        self.pre_pull = max_concurrent.map(PrePullCheck::new);
        self
    }

    /// Checks the Pods driver's invariants against `plan`'s steps.
    pub fn with_pods_plan(mut self, plan: Option<PodsPlan>) -> Self {
        self.pods_plan = plan;
        self
    }

    /// Checks invariant 34: the scenario surges (`spec.strategy.surge`).
    pub fn with_surge(mut self, surge: bool) -> Self {
        self.surge = surge;
        self
    }

    /// Counts pods as `compatibility: KubeVirt` does (see [`Checker::check_widen`]).
    pub fn with_kubevirt_compatibility(mut self, kubevirt: bool) -> Self {
        self.kubevirt = kubevirt;
        self
    }

    /// Checks the analysis invariant (21): the pause steps are analysed.
    pub fn with_analysis(mut self, analysed: bool) -> Self {
        self.analysed = analysed;
        self
    }

    /// Seeds the node mirror with the nodes that exist before the first event.
    pub fn with_nodes(mut self, nodes: Vec<Node>) -> Self {
        for node in nodes {
            if let Some(name) = node.metadata.name.clone() {
                self.nodes.insert(name, (node, f64::NEG_INFINITY));
            }
        }
        self
    }

    /// Consumes store events until the channel closes.
    pub async fn run(mut self, mut events: broadcast::Receiver<StoreEvent>) {
        loop {
            match events.recv().await {
                Ok(event) => self.apply(&event),
                Err(broadcast::error::RecvError::Lagged(n)) => {
                    self.world.violate(
                        Invariant::NoPanicNoHotLoop,
                        format!("harness: the checker lagged {n} store events behind"),
                    );
                }
                Err(broadcast::error::RecvError::Closed) => return,
            }
        }
    }

    fn apply(&mut self, event: &StoreEvent) {
        self.take_deletions();
        let key = &event.key;
        if *key == ResourceKey::of::<Pod>() {
            self.on_pod(event);
        } else if *key == ResourceKey::of::<Node>() {
            self.on_node(event);
        } else if *key == ResourceKey::of::<DaemonSet>() {
            if event.name == NAME && event.namespace.as_deref() == Some(NAMESPACE) {
                self.on_daemon_set(event);
            }
        } else if *key == ResourceKey::of::<CanaryDaemonSet>() {
            self.on_canary(event);
        } else if *key == ResourceKey::of::<Lease>() {
            self.on_lease(event);
        }
    }

    /// Invariant 23, at every change of the Lease.
    fn on_lease(&self, event: &StoreEvent) {
        let (Some(before), Some(after)) = (
            event.previous.as_deref().and_then(decode::<Lease>),
            decode::<Lease>(&event.object),
        ) else {
            return;
        };
        match super::lease::handover(&before, &after) {
            Handover::None | Handover::Released => {}
            Handover::Expired => self.world.count(|e| e.lease_takeovers += 1),
            Handover::Live(why) => self.world.violate(Invariant::NoTakeoverOfALiveLease, why),
        }
    }

    fn on_node(&mut self, event: &StoreEvent) {
        let now = self.world.now();
        if event.kind == EventKind::Deleted {
            self.nodes.remove(&event.name);
            self.down.remove(&event.name);
            self.on_node_breakage(&event.name, None, now);
            return;
        }
        if let Some(node) = decode::<Node>(&event.object) {
            self.on_node_breakage(&event.name, Some(&node), now);
            // Unhealthy now, or until now (the controller may not have seen it back yet).
            let was_unhealthy = self
                .nodes
                .get(&event.name)
                .is_some_and(|(n, _)| !node_is_healthy(n));
            if !node_is_healthy(&node) || was_unhealthy {
                self.unhealthy_at.insert(event.name.clone(), now);
            }
            let added = self.nodes.get(&event.name).map_or(now, |(_, at)| *at);
            self.nodes.insert(event.name.clone(), (node, added));
        }
    }

    /// A pod of the scenario's DaemonSet: the controller's owner label, or (a DaemonSet its
    /// owner changes, `workloadRef`, whose pods lack that label) the scenario's app label.
    fn ours(pod: &Pod) -> bool {
        let labels = pod.metadata.labels.as_ref();
        pod.metadata.namespace.as_deref() == Some(NAMESPACE)
            && (annotation(labels, OWNER_LABEL) == Some(NAME)
                || annotation(labels, "app.kubernetes.io/name") == Some(NAME))
    }

    fn on_pod(&mut self, event: &StoreEvent) {
        let now = self.world.now();
        let Some(pod) = decode::<Pod>(&event.object) else {
            return;
        };
        if pod.metadata.namespace.as_deref() == Some(NEIGHBOURS_NAMESPACE) {
            self.on_neighbour(event, &pod, now);
            return;
        }
        if PrePullCheck::is_pre_pull(&pod) {
            if let Some(check) = self.pre_pull.as_mut() {
                check.on_pod(&self.world, event, &pod);
            }
            return;
        }
        if !Self::ours(&pod) {
            return;
        }
        // `DST_TRACE_NODE=<node>`: every event of the pods on that node, for a replay.
        if let Some(traced) = &self.traced_node
            && node_of(&pod) == Some(traced.as_str())
        {
            eprintln!(
                "[{now:>10.1}s] pod {:?} {} on {traced}: phase {:?}, ready {}, revision {:?}, terminating {}",
                event.kind,
                event.name,
                pod.status.as_ref().and_then(|s| s.phase.as_deref()),
                pod_is_ready(&pod),
                revision_of(&pod),
                terminating(&pod)
            );
        }
        let previous = self.pods.get(&event.name).cloned();
        let taken_down = event.kind == EventKind::Deleted || terminating(&pod);
        self.on_pod_breakage(&pod, event.kind == EventKind::Deleted, now);
        if event.kind != EventKind::Deleted
            && pod_is_ready(&pod)
            && !terminating(&pod)
            && let Some(node) = node_of(&pod)
            && self
                .down
                .get(node)
                .is_some_and(|uid| pod.metadata.uid.as_deref() != Some(uid.as_str()))
        {
            self.down.remove(node);
        }
        if event.kind == EventKind::Deleted {
            if let Some(gone) = self.pods.remove(&event.name) {
                let ready_until = if pod_is_ready(&gone.pod) && !terminating(&gone.pod) {
                    Some(now)
                } else {
                    gone.last_ready_at
                };
                if let Some(at) = ready_until {
                    let stale = self.stale;
                    self.departed_ready.retain(|(_, at)| now - at <= stale);
                    self.departed_ready.push((pod_target(&gone.pod), at));
                }
            }
        } else {
            let ready = pod_is_ready(&pod) && !terminating(&pod);
            let crashing = pod_crash_loop(&pod, &self.policy).is_some();
            let (last_ready_at, crash_since) = previous
                .as_ref()
                .map_or((None, None), |p| (p.last_ready_at, p.crash_since));
            // Ready until this event, when the one before it showed the pod ready: a pod ready
            // for a minute that crashes now was ready a moment ago, not a minute ago (soak
            // seed 24000559: a widening decided on a pod the crash took down 1.7 s before the
            // write landed read as a widening with no pod ready for 24 s).
            let was_ready = previous
                .as_ref()
                .is_some_and(|p| pod_is_ready(&p.pod) && !terminating(&p.pod));
            self.pods.insert(
                event.name.clone(),
                PodState {
                    pod: pod.clone(),
                    last_ready_at: if ready || was_ready {
                        Some(now)
                    } else {
                        last_ready_at
                    },
                    crash_since: if crashing {
                        crash_since.or(Some(now))
                    } else {
                        None
                    },
                    ready_since: if ready {
                        previous.as_ref().and_then(|p| p.ready_since).or(Some(now))
                    } else {
                        None
                    },
                },
            );
        }
        if let Some(previous) = previous
            && taken_down
            && !terminating(&previous.pod)
            && pod_is_ready(&previous.pod)
        {
            // A pod ready for less than the DaemonSet's `minReadySeconds` is not available yet,
            // and the DaemonSet controller replaces an unavailable old pod whatever the budget.
            if self.available(previous.ready_since) {
                self.check_budget(&pod);
                self.check_surge(&pod);
                self.check_surge_soak(&pod);
            }
            self.check_no_deletion_after_failed_analysis(&pod);
            if let Some(node) = node_of(&pod) {
                self.check_breakage_taken_down(node, Some(&pod));
            }
        }
    }

    /// Invariant 21 on both drivers (issue 46): once the status says `AnalysisFailed`, no ready
    /// pod of another version than the failed one is taken down on a healthy node (the Pods
    /// driver deletes nothing more, the MaxUnavailable driver's DaemonSet is on `OnDelete`),
    /// past the staleness window (a deletion decided before the failure may land after it),
    /// until the status leaves `failed` or the DaemonSet's target changes (a retry, a
    /// rollback, a new version).
    fn check_no_deletion_after_failed_analysis(&self, pod: &Pod) {
        let Some((since, target)) = &self.analysis_failed else {
            return;
        };
        if self.world.now() - since <= self.stale || pod_target(pod).0 == target.0 {
            return;
        }
        let Some(node) = node_of(pod) else { return };
        if !self
            .nodes
            .get(node)
            .is_some_and(|(n, _)| node_is_healthy(n))
        {
            return;
        }
        self.world.violate(
            Invariant::AnalysedPauseEndsWhenPassing,
            format!(
                "pod {} on {node} taken down {:.1}s after the analysis failed for {target:?}",
                pod.metadata.name.as_deref().unwrap_or("?"),
                self.world.now() - since
            ),
        );
    }

    /// Invariant 1, at the moment a ready pod is taken down on a Ready node. Not for the Pods
    /// driver: to the DaemonSet controller an `OnDelete` DaemonSet allows no unavailable pod
    /// at all, and it takes none down; the controller does, within its step's budget, which
    /// invariant 11 checks instead.
    fn check_budget(&self, pod: &Pod) {
        if self.pods_plan.is_some() {
            return;
        }
        let Some(node) = node_of(pod) else { return };
        if !self.nodes.get(node).is_some_and(|(n, _)| node_is_ready(n)) {
            return;
        }
        let Some(ds) = &self.ds else { return };
        // A node that keeps another ready pod loses nothing: the surge's handover (issue 50),
        // the old pod deleted once the new one is available, whatever other nodes are
        // unavailable for (a rollback's crash-looping pods; seeds 7, 8 and 9 with surge).
        if self.node_keeps_a_ready_pod(node, pod) {
            return;
        }
        // Nodes with a pod of ours: unavailable unless one of its pods is ready and staying.
        let mut per_node: BTreeMap<&str, bool> = BTreeMap::new();
        for state in self.pods.values() {
            let Some(node) = node_of(&state.pod) else {
                continue;
            };
            // Pods on NotReady or deleted nodes are unavailable for reasons outside the rollout.
            if !self.nodes.get(node).is_some_and(|(n, _)| node_is_ready(n)) {
                continue;
            }
            let available = pod_is_ready(&state.pod) && !terminating(&state.pod);
            *per_node.entry(node).or_default() |= available;
        }
        per_node.entry(node).or_default();
        let unavailable = per_node.values().filter(|available| !**available).count();
        let desired = ds
            .status
            .as_ref()
            .map_or(self.nodes.len() as i32, |s| s.desired_number_scheduled);
        let desired = u32::try_from(desired).unwrap_or(0);
        let Ok(allowed) = kubernetes_max_unavailable(ds, desired) else {
            return;
        };
        if unavailable as u64 > u64::from(allowed) {
            self.world.violate(
                Invariant::UnavailableWithinBudget,
                format!(
                    "pod {} taken down on node {node}: {unavailable} pods unavailable, maxUnavailable {} allows {allowed} of {desired}",
                    pod.metadata.name.as_deref().unwrap_or("?"),
                    max_unavailable_text(ds)
                ),
            );
        }
    }

    /// Whether a pod ready since `ready_since` (this checker's time) is available: ready for
    /// the DaemonSet's `minReadySeconds` (issue 50). The checker sees readiness an event late,
    /// so this errs towards "not yet".
    fn available(&self, ready_since: Option<f64>) -> bool {
        let min_ready = self
            .ds
            .as_ref()
            .and_then(|ds| ds.spec.as_ref())
            .and_then(|spec| spec.min_ready_seconds)
            .unwrap_or(0);
        min_ready <= 0
            || ready_since.is_some_and(|since| self.world.now() - since >= f64::from(min_ready))
    }

    /// Invariant 34, at the moment a ready pod is taken down on a Ready node: with surge, and
    /// the DaemonSet at `maxUnavailable: 0` (a hand edit or the reference's table may write
    /// otherwise), the node keeps another ready pod of ours.
    fn check_surge(&self, pod: &Pod) {
        if !self.surge {
            return;
        }
        let Some(node) = node_of(pod) else { return };
        if !self.nodes.get(node).is_some_and(|(n, _)| node_is_ready(n)) {
            return;
        }
        let Some(ds) = &self.ds else { return };
        let rolling = ds
            .spec
            .as_ref()
            .and_then(|s| s.update_strategy.as_ref())
            .and_then(|s| s.rolling_update.as_ref());
        let zero = |value: Option<&IntOrString>| {
            matches!(value, Some(IntOrString::Int(0)))
                || matches!(value, Some(IntOrString::String(text)) if text == "0%")
        };
        if !rolling.is_some_and(|r| zero(r.max_unavailable.as_ref())) {
            return;
        }
        let name = pod.metadata.name.as_deref().unwrap_or("?");
        if !self.node_keeps_a_ready_pod(node, pod) {
            self.world.violate(
                Invariant::SurgeKeepsAnAgentOnEveryNode,
                format!(
                    "pod {name} taken down on node {node} with no other ready pod there, under surge (maxUnavailable 0)"
                ),
            );
        }
    }

    /// Invariant 36 at a pod taken down ([`surge_soak`]): a surge handover at the canary's
    /// step (`maxUnavailable: 0`, `maxSurge: 1`) on a Ready node.
    fn check_surge_soak(&mut self, pod: &Pod) {
        if !self.surge {
            return;
        }
        let Some(ds) = &self.ds else { return };
        let target = ds_target(ds);
        let Some(node) = node_of(pod) else { return };
        if pod_target(pod) == target || !self.nodes.get(node).is_some_and(|(n, _)| node_is_ready(n))
        {
            return;
        }
        let strategy = ds.spec.as_ref().and_then(|s| s.update_strategy.as_ref());
        let rolling = strategy
            .filter(|s| s.type_.as_deref() != Some("OnDelete"))
            .and_then(|s| s.rolling_update.as_ref());
        let canary_step = rolling.is_some_and(|r| {
            matches!(r.max_unavailable, Some(IntOrString::Int(0)))
                && matches!(r.max_surge, Some(IntOrString::Int(1)))
        });
        let new_pod = self.pods.iter().find_map(|(name, state)| {
            (node_of(&state.pod) == Some(node)
                && pod_is_ready(&state.pod)
                && !terminating(&state.pod)
                && pod_target(&state.pod) == target)
                .then_some(name.as_str())
        });
        let Some(new_pod) = new_pod.filter(|_| canary_step) else {
            return;
        };
        let min_ready_seconds = ds
            .spec
            .as_ref()
            .and_then(|spec| spec.min_ready_seconds)
            .unwrap_or(0);
        let pods = &self.pods;
        let canary_ready_since = |name: &str| pods.get(name).map(|state| state.ready_since);
        self.surge_soak.on_handover(
            &self.world,
            self.world.now(),
            &surge_soak::Handover {
                target: &target,
                pod,
                new_pod,
                canary_ready_since: &canary_ready_since,
                min_ready_seconds: f64::from(min_ready_seconds),
                stale: self.stale,
            },
        );
    }

    /// Whether `node` has a ready, non-terminating pod of ours other than `pod` (which is being
    /// taken down).
    fn node_keeps_a_ready_pod(&self, node: &str, pod: &Pod) -> bool {
        let name = pod.metadata.name.as_deref();
        self.pods.values().any(|state| {
            state.pod.metadata.name.as_deref() != name
                && node_of(&state.pod) == Some(node)
                && pod_is_ready(&state.pod)
                && !terminating(&state.pod)
        })
    }

    fn on_daemon_set(&mut self, event: &StoreEvent) {
        if event.kind == EventKind::Deleted {
            self.ds = None;
            return;
        }
        let Some(ds) = decode::<DaemonSet>(&event.object) else {
            return;
        };
        self.surge_soak.on_target(&ds_target(&ds));
        let desired_before = self.desired();
        let previous = self.ds.replace(ds.clone());
        if self.desired() < desired_before {
            let now = self.world.now();
            let stale = self.stale;
            self.desired_drops.retain(|(_, at)| now - at <= stale);
            self.desired_drops.push((desired_before, now));
        }
        let Some(previous) = previous else {
            let (version, _) = ds_target(&ds);
            self.world.trace(format!(
                "daemonset created at {} maxUnavailable {}",
                version.as_deref().unwrap_or("?"),
                max_unavailable_text(&ds)
            ));
            self.count_start(version.as_deref().unwrap_or("?"));
            return;
        };
        let (before, after) = (ds_target(&previous), ds_target(&ds));
        let (mu_before, mu_after) = (max_unavailable_text(&previous), max_unavailable_text(&ds));
        if before == after && mu_before == mu_after {
            return;
        }
        self.world.trace(format!(
            "daemonset {} -> {}, maxUnavailable {mu_before} -> {mu_after}, generation {:?}",
            before.0.as_deref().unwrap_or("?"),
            after.0.as_deref().unwrap_or("?"),
            ds.metadata.generation
        ));
        if before != after {
            self.count_start(after.0.as_deref().unwrap_or("?"));
            // A new target (a new version, a retry's or a rollback's start) ends what a failed
            // analysis forbade: its replacements are the new rollout's (seed 57).
            self.analysis_failed = None;
            return;
        }
        let canary = "1";
        if mu_before == canary && mu_after != canary {
            self.check_widen(&ds);
            if self.analysis_failed.is_some() {
                self.world.violate(
                    Invariant::AnalysedPauseEndsWhenPassing,
                    format!("widened to maxUnavailable {mu_after} after a failed analysis"),
                );
            }
        } else if mu_before != canary && mu_after == canary {
            self.check_not_restarted(&ds);
        }
    }

    /// Invariant 5: a start goes to the latest version asked for, once; or, while the status
    /// records a rollback (or an undo) to `version`, to that version, once per rollback.
    fn count_start(&mut self, version: &str) {
        let key = self
            .history
            .as_ref()
            .and_then(|h| super::recorder::rollback_key(h, version));
        if let Some(key) = key {
            let starts = self.starts.entry(key.clone()).or_default();
            *starts += 1;
            if *starts > 1 {
                self.world.violate(
                    Invariant::NoStartWithoutSpecChange,
                    format!("{key} started {starts} times"),
                );
            }
            return;
        }
        let (latest, previous, changed_at) = self
            .intent
            .lock()
            .map(|i| {
                let mut names = i.versions.iter().rev().map(|(v, _)| v.clone());
                (names.next(), names.next(), i.last_change_at)
            })
            .unwrap_or_default();
        // A pass that began before the controller saw the latest change still writes the
        // version before it: allowed within the staleness window, and the latest version must
        // then start too (checked at quiescence).
        let stale_view =
            previous.as_deref() == Some(version) && self.world.now() - changed_at <= self.stale;
        let starts = self.starts.entry(version.to_owned()).or_default();
        *starts += 1;
        if *starts > 1 {
            self.world.violate(
                Invariant::NoStartWithoutSpecChange,
                format!("{version} started {starts} times"),
            );
        }
        if latest.as_deref() != Some(version) && !stale_view {
            self.world.violate(
                Invariant::NoStartWithoutSpecChange,
                format!("started {version} while the spec asks for {latest:?}"),
            );
        }
    }

    fn updated_pods<'a>(&'a self, ds: &DaemonSet) -> impl Iterator<Item = &'a PodState> + 'a {
        self.updated_pods_counting(ds, false)
    }

    /// The updated pods, terminating ones too when `with_terminating`.
    fn updated_pods_counting<'a>(
        &'a self,
        ds: &DaemonSet,
        with_terminating: bool,
    ) -> impl Iterator<Item = &'a PodState> + 'a {
        let target = ds_target(ds);
        self.pods.values().filter(move |s| {
            (with_terminating || !terminating(&s.pod)) && pod_target(&s.pod) == target
        })
    }

    /// Follows a neighbour pod's readiness (invariant 32).
    fn on_neighbour(&mut self, event: &StoreEvent, pod: &Pod, now: f64) {
        if event.kind == EventKind::Deleted || terminating(pod) {
            self.neighbours.remove(&event.name);
            return;
        }
        let Some(node) = node_of(pod) else {
            return;
        };
        let ready = pod_is_ready(pod);
        let before = self
            .neighbours
            .get(&event.name)
            .and_then(|seen| seen.not_ready_since);
        self.neighbours.insert(
            event.name.clone(),
            NeighbourSeen {
                node: node.to_owned(),
                created: created_second(&pod.metadata),
                not_ready_since: (!ready).then(|| before.unwrap_or(now)),
            },
        );
    }

    /// Invariant 32: a node on `version`, a release that breaks its neighbours, whose
    /// neighbours (there at its update) have been disrupted as the gate counts them (at least
    /// two, and half) for longer than the controller's view may lag, while no node off the
    /// release has a neighbour disrupted (the gate's baseline) and the node itself is Ready
    /// (the node gate's): `(node, since)`. Within the gate's window only.
    fn neighbours_broken_by(&self, version: Option<&str>) -> Option<(String, f64)> {
        let version = version?;
        let breaks = self.intent.lock().is_ok_and(|intent| {
            intent
                .versions
                .iter()
                .any(|(v, b)| v == version && matches!(b, Behavior::BreaksNeighbours(_)))
        });
        if !breaks || self.neighbours.is_empty() {
            return None;
        }
        let now = self.world.now();
        let on_release: BTreeMap<&str, i64> = self
            .pods
            .values()
            .filter(|s| !terminating(&s.pod) && pod_target(&s.pod).0.as_deref() == Some(version))
            .filter_map(|s| Some((node_of(&s.pod)?, created_second(&s.pod.metadata))))
            .collect();
        let baseline = self
            .neighbours
            .values()
            .any(|n| n.not_ready_since.is_some() && !on_release.contains_key(n.node.as_str()));
        if baseline {
            return None;
        }
        on_release
            .iter()
            .filter(|(node, _)| {
                self.nodes
                    .get(**node)
                    .is_some_and(|(n, _)| node_is_ready(n))
                    && self
                        .unhealthy_at
                        .get(**node)
                        .is_none_or(|at| now - at > 600.0)
            })
            .filter_map(|(node, created)| {
                let there: Vec<&NeighbourSeen> = self
                    .neighbours
                    .values()
                    .filter(|n| n.node == *node && n.created < *created)
                    .collect();
                let mut since: Vec<f64> = there.iter().filter_map(|n| n.not_ready_since).collect();
                if since.len() < 2 || since.len() * 2 < there.len() {
                    return None;
                }
                since.sort_by(f64::total_cmp);
                // The moment the gate's threshold was reached: the half-th disruption.
                let reached = since[(there.len().div_ceil(2)).max(2) - 1];
                let lag = now - reached;
                (lag > self.stale + 5.0 && lag < 500.0).then(|| ((*node).to_owned(), reached))
            })
            .min_by(|a, b| a.1.total_cmp(&b.1))
    }

    /// Invariant 2, at the widening write. Under `compatibility: KubeVirt` a terminating pod
    /// counts like any other, as the reference counts it (spec section 2, quirk 2): one stuck
    /// terminating on a NotReady node, its containers still reporting ready, lets the
    /// reference widen, and the compatibility mode with it (soak seed 22006427; finding 49).
    fn check_widen(&self, ds: &DaemonSet) {
        let now = self.world.now();
        let target = ds_target(ds);
        self.check_breakage_widen(ds);
        if let Some((node, since)) = self.neighbours_broken_by(target.0.as_deref()) {
            self.world.violate(
                Invariant::NeighboursStopTheRelease,
                format!(
                    "widened {:?} while it had broken the neighbours of {node} since {since:.1}s",
                    target.0
                ),
            );
        }
        let ready_recently = self.updated_pods_counting(ds, self.kubevirt).any(|s| {
            pod_is_ready(&s.pod) || s.last_ready_at.is_some_and(|at| now - at <= self.stale)
        }) || self
            .departed_ready
            .iter()
            .any(|(gone, at)| *gone == target && now - at <= self.stale);
        if !ready_recently {
            self.world.violate(
                Invariant::NoWidenWithoutReadyCanary,
                "widened while no updated pod was ready",
            );
        }
        if let Some(crashing) = self
            .updated_pods(ds)
            .find(|s| s.crash_since.is_some_and(|since| now - since > self.stale))
        {
            self.world.violate(
                Invariant::NoWidenWithoutReadyCanary,
                format!(
                    "widened while updated pod {} was crash-looping",
                    crashing.pod.metadata.name.as_deref().unwrap_or("?")
                ),
            );
        }
    }

    /// Invariant 5: back to the canary value without a new target is a finish, so every pod
    /// must already be updated (a pod on a node that joined just now aside).
    fn check_not_restarted(&self, ds: &DaemonSet) {
        // A drift revert is a restart of the canary by design (invariant 9 checks it).
        if self
            .intent
            .lock()
            .is_ok_and(|intent| intent.hand_edit_since_change)
        {
            return;
        }
        let now = self.world.now();
        let target = ds_target(ds);
        let old = self.pods.values().find(|s| {
            !terminating(&s.pod)
                && pod_target(&s.pod) != target
                && node_of(&s.pod).is_some_and(|node| {
                    self.nodes
                        .get(node)
                        .is_some_and(|(_, added)| now - added > self.stale)
                })
        });
        if let Some(old) = old {
            self.world.violate(
                Invariant::NoStartWithoutSpecChange,
                format!(
                    "maxUnavailable back to 1 mid-rollout (a canary restart): pod {} is not updated",
                    old.pod.metadata.name.as_deref().unwrap_or("?")
                ),
            );
        }
    }

    fn on_canary(&mut self, event: &StoreEvent) {
        let Some(cds) = decode::<CanaryDaemonSet>(&event.object) else {
            return;
        };
        // A rival claimant (invariant 29) is another CanaryDaemonSet: its status is not the
        // scenario's (its history read as ours counted a rollback's start as a second start:
        // soak seed 46000031); only its kstatus conditions are checked here.
        if event.name != NAME || event.namespace.as_deref() != Some(NAMESPACE) {
            if let Some(status) = cds.status.as_ref().filter(|s| s.phase.is_some())
                && let Err(why) = kstatus_agrees(status)
            {
                self.world.violate(Invariant::KstatusAgreesWithPhase, why);
            }
            return;
        }
        let phase = cds
            .status
            .as_ref()
            .and_then(|s| s.phase_name().map(str::to_owned));
        if event.kind != EventKind::Deleted {
            self.history = cds.status.as_ref().and_then(|s| s.history.clone());
            self.surge_soak
                .on_status(self.world.now(), cds.status.as_ref());
        }
        if self.pods_plan.is_some() && event.kind != EventKind::Deleted {
            self.on_pods_status(&cds, phase.as_deref());
        }
        if event.kind != EventKind::Deleted {
            self.on_canary_breakage(&cds);
        }
        if phase.as_deref() == Some("failed") && self.phase.as_deref() != Some("failed") {
            self.check_unhealthy_named(&cds);
        }
        if self.analysed && event.kind != EventKind::Deleted {
            let failed_analysis = cds.status.as_ref().is_some_and(|s| {
                s.phase_name() == Some("failed")
                    && s.reason == Some(canary_state_machine::FailureReason::AnalysisFailed)
            });
            if !failed_analysis {
                self.analysis_failed = None;
            } else if self.analysis_failed.is_none() {
                let target = cds.status.as_ref().map_or((None, None), |s| {
                    (s.target_version.clone(), s.target_deployment_id.clone())
                });
                self.analysis_failed = Some((self.world.now(), target));
            }
        }
        if let Some(status) = cds.status.as_ref().filter(|s| s.phase.is_some())
            && let Err(why) = kstatus_agrees(status)
        {
            self.world.violate(Invariant::KstatusAgreesWithPhase, why);
        }
        if phase != self.phase {
            let message = cds
                .status
                .as_ref()
                .and_then(|s| s.message.clone())
                .unwrap_or_default();
            self.world.trace(format!(
                "status phase {} -> {} ({message})",
                self.phase.as_deref().unwrap_or("-"),
                phase.as_deref().unwrap_or("-")
            ));
            self.phase = phase;
        }
    }
}

impl Checker {
    /// Invariant 31, when the status turns `failed` with `NodeUnhealthy`: each node it names
    /// was healthy when its pod of the target was created (its troubled condition moved after
    /// that, beyond the 5 s margin), from the simulator's own timestamps.
    fn check_unhealthy_named(&self, cds: &CanaryDaemonSet) {
        let Some(status) = &cds.status else { return };
        if status.reason_name() != Some("NodeUnhealthy") {
            return;
        }
        for note in &status.unhealthy_nodes {
            let Some((node, _)) = self.nodes.get(&note.name) else {
                continue; // gone since: no longer checkable
            };
            let since = node
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .into_iter()
                .flatten()
                .filter(|c| {
                    (c.type_ == "Ready" && c.status != "True")
                        || (c.type_ == "NetworkUnavailable" && c.status == "True")
                })
                .filter_map(|c| c.last_transition_time.as_ref().map(|t| t.0))
                .min();
            // The pod the gate judged: the node's pod that is not terminating (the newest).
            let created = self
                .pods
                .values()
                .map(|state| &state.pod)
                .filter(|pod| node_of(pod) == Some(note.name.as_str()) && !terminating(pod))
                .filter_map(|pod| pod.metadata.creation_timestamp.as_ref().map(|t| t.0))
                .max();
            let (Some(since), Some(created)) = (since, created) else {
                continue; // recovered, or its pod replaced, before the checker saw the status
            };
            let after = since.as_second() - created.as_second();
            if after <= canary_state_machine::health::nodes::CLOCK_SKEW_MARGIN_SECONDS {
                self.world.violate(
                    Invariant::NoFailureForANodeUnhealthyBefore,
                    format!(
                        "failed with NodeUnhealthy naming node {}, unhealthy since {since}, {after} s after its pod was created ({created})",
                        note.name
                    ),
                );
            }
        }
    }
}

/// Invariant 30: the kstatus conditions of a status with a phase agree with it.
fn kstatus_agrees(status: &CanaryDaemonSetStatus) -> Result<(), String> {
    let phase = status.phase_name().unwrap_or_default();
    let is_true = |type_: &str| -> Result<bool, String> {
        let condition = status
            .conditions
            .iter()
            .find(|c| c.type_ == type_)
            .ok_or_else(|| format!("phase {phase}: no {type_} condition"))?;
        if condition.observed_generation != status.observed_generation {
            return Err(format!(
                "phase {phase}: {type_} observed generation {:?}, the status {:?}",
                condition.observed_generation, status.observed_generation
            ));
        }
        Ok(condition.status == "True")
    };
    let (ready, reconciling, stalled, degraded) = (
        is_true("Ready")?,
        is_true("Reconciling")?,
        is_true("Stalled")?,
        is_true("Degraded")?,
    );
    let why = if reconciling && stalled {
        "Reconciling and Stalled both true"
    } else if ready != (phase == "successful" && !degraded) {
        "Ready is not (successful and not Degraded)"
    } else if matches!(phase, "failed" | "rolledBack") && !stalled {
        "not Stalled"
    } else {
        return Ok(());
    };
    Err(format!(
        "phase {phase}: {why} (Ready {ready}, Reconciling {reconciling}, Stalled {stalled}, Degraded {degraded})"
    ))
}

fn node_is_healthy(node: &Node) -> bool {
    node_is_ready(node)
        && node
            .spec
            .as_ref()
            .is_none_or(|s| s.unschedulable != Some(true))
}

fn revision_of(pod: &Pod) -> Option<&str> {
    annotation(pod.metadata.labels.as_ref(), "controller-revision-hash")
}

impl Checker {
    /// Invariant 11: takes in the deletions the recorder saw and counts the nodes down.
    fn take_deletions(&mut self) {
        let deleted = self.world.take_deleted();
        if deleted.is_empty() || self.pods_plan.is_none() {
            return;
        }
        let target = self.ds.as_ref().map(ds_target);
        if let Some(target) = target
            && let Some((node, since)) = self.neighbours_broken_by(target.0.as_deref())
        {
            self.world.violate(
                Invariant::NeighboursStopTheRelease,
                format!(
                    "deleted the pod on {} for {:?} while it had broken the neighbours of {node} since {since:.1}s",
                    deleted[0].node, target.0
                ),
            );
        }
        for deletion in deleted.iter().filter(|d| !d.ready) {
            // A ready pod's deletion is checked as it is taken down ([`Checker::on_pod`]).
            self.check_breakage_taken_down(&deletion.node, None);
        }
        for deletion in deleted {
            // A new pod already ready on the node (the answer came late): not down.
            let replaced = self.pods.values().any(|state| {
                node_of(&state.pod) == Some(deletion.node.as_str())
                    && state.pod.metadata.uid.as_deref() != Some(deletion.uid.as_str())
                    && pod_is_ready(&state.pod)
                    && !terminating(&state.pod)
            });
            // A pod that was not ready takes no availability away: its node is down only if
            // it already was (then the new pod is the one to wait for).
            let counts = deletion.ready || self.down.contains_key(&deletion.node);
            if !replaced && counts && self.nodes.contains_key(&deletion.node) {
                self.down
                    .insert(deletion.node.clone(), deletion.uid.clone());
            }
            // Only the deletion of a ready pod takes availability away: the budget is checked
            // there (a not-ready old pod is replaced first, taking no budget).
            if !deletion.ready {
                continue;
            }
            let now = self.world.now();
            let stale = self.stale;
            let counted: Vec<String> = self
                .down
                .keys()
                .filter(|node| {
                    self.nodes
                        .get(*node)
                        .is_some_and(|(n, _)| node_is_healthy(n))
                        && self
                            .unhealthy_at
                            .get(*node)
                            .is_none_or(|at| now - at > stale)
                })
                .cloned()
                .collect();
            let desired = self.desired_in_view();
            let pending = self.pending.get_or_insert_with(|| PendingBudget {
                down: 0,
                nodes: Vec::new(),
                at: now,
                from: self.status_step.clone(),
                desired,
            });
            pending.desired = pending.desired.max(desired);
            if counted.len() > pending.down {
                pending.down = counted.len();
                pending.nodes = counted;
                pending.at = now;
            }
        }
    }

    /// The desired pods a deletion made now may have been decided under: the most in force
    /// within the staleness window. A node removed just as the controller deletes a pod
    /// shrinks the step's budget after the decision, which the controller saw under the
    /// larger count (soak seed 26006970: 17% of 212 nodes allows 37, of 211 only 36).
    fn desired_in_view(&self) -> u32 {
        let now = self.world.now();
        self.desired_drops
            .iter()
            .filter(|(_, at)| now - at <= self.stale)
            .map(|(desired, _)| *desired)
            .fold(self.desired(), u32::max)
    }

    fn desired(&self) -> u32 {
        let desired = self
            .ds
            .as_ref()
            .and_then(|ds| ds.status.as_ref())
            .map_or(0, |s| s.desired_number_scheduled);
        u32::try_from(desired).unwrap_or(0)
    }

    /// Invariant 19, at the status write that records a new full promotion.
    fn check_full_promotion(
        &self,
        plan: &PodsPlan,
        status: &canary_kube_adapter::crd::CanaryDaemonSetStatus,
        before: Option<&str>,
    ) {
        let Some(mark) = status.promotion.as_deref() else {
            return;
        };
        let in_steps = matches!(
            status.phase_name(),
            Some("canary" | "increasing" | "paused")
        );
        if before == Some(mark) || !mark.starts_with(FULL_PROMOTION_PREFIX) || !in_steps {
            return;
        }
        let budgets = plan.step_budgets();
        let last_nodes = budgets
            .iter()
            .rposition(|b| matches!(b, StepBudget::Nodes { .. }))
            .unwrap_or(budgets.len());
        let step = status.current_step_index.unwrap_or(0) as usize;
        if step < last_nodes {
            self.world.violate(
                Invariant::FullPromotionReachesLastStep,
                format!(
                    "full promotion {mark} recorded in step {step} ({:?}), the last nodes step is {last_nodes}",
                    status.phase
                ),
            );
        }
    }

    /// Invariant 21: a status write that moves the rollout past an analysed pause step records
    /// that step's analysis as passing, unless a promotion was acted on in it; and the
    /// verdicts recorded, counted.
    fn check_analysed_pauses(
        &self,
        plan: &PodsPlan,
        previous: Option<&canary_kube_adapter::crd::CanaryDaemonSetStatus>,
        status: &canary_kube_adapter::crd::CanaryDaemonSetStatus,
    ) {
        let verdict = |s: Option<&canary_kube_adapter::crd::CanaryDaemonSetStatus>| {
            s.and_then(|s| s.analysis.as_ref())
                .map(|a| (a.step, a.revision.clone(), a.verdict.clone()))
        };
        let now = verdict(Some(status));
        if now.is_some() && now != verdict(previous) {
            let index = match now.as_ref().map(|(_, _, v)| v.as_str()) {
                Some("Passing") => Some(0),
                Some("Failed") => Some(1),
                Some("Inconclusive") => Some(2),
                _ => None,
            };
            if let Some(index) = index {
                self.world.count(|e| e.analysis_verdicts[index] += 1);
            }
        }
        let Some(previous) = previous else { return };
        let (Some(from), Some(to)) = (previous.current_step_index, status.current_step_index)
        else {
            return;
        };
        let rolling_back = status
            .history
            .as_ref()
            .is_some_and(|h| h.rollback.is_some());
        if to <= from
            || previous.target_revision != status.target_revision
            || previous.promotion != status.promotion
            || rolling_back
        {
            return;
        }
        for pause in (from..to)
            .filter(|index| matches!(plan.steps.get(*index as usize), Some(PlanStep::Pause(_))))
        {
            let passed_pause = |s: &canary_kube_adapter::crd::CanaryDaemonSetStatus| {
                s.analysis.as_ref().is_some_and(|a| {
                    a.step == pause
                        && a.revision == status.target_revision
                        && a.verdict == "Passing"
                })
            };
            // A write that lost a conflict is made again by the next pass, which may already
            // carry the next step's analysis, started when the pause ended (finding 68, soak
            // seed 40011717): the pause's own verdict is then the one the status held before.
            let next_analysis_started = status
                .analysis
                .as_ref()
                .is_some_and(|a| a.step > pause && a.revision == status.target_revision);
            let passed = passed_pause(status) || (next_analysis_started && passed_pause(previous));
            if !passed {
                self.world.violate(
                    Invariant::AnalysedPauseEndsWhenPassing,
                    format!(
                        "the status moved from step {from} to {to} past the analysed pause step {pause} (revision {:?}) with analysis {:?}",
                        status.target_revision,
                        status.analysis
                    ),
                );
            }
        }
    }

    /// Invariants 11 (the deletions since the last status, against the steps they may have
    /// been made in) and 13 (a status turning `successful`).
    fn on_pods_status(&mut self, cds: &CanaryDaemonSet, phase: Option<&str>) {
        let Some(plan) = &self.pods_plan else { return };
        let Some(status) = &cds.status else { return };
        if self.last_status.as_ref() == Some(status) {
            return;
        }
        let promotion_before = self.last_status.as_ref().and_then(|s| s.promotion.clone());
        let rolled_back_before = self.last_status.as_ref().is_some_and(rolling_back);
        if self.analysed {
            self.check_analysed_pauses(plan, self.last_status.as_ref(), status);
        }
        self.last_status = Some(status.clone());
        self.check_full_promotion(plan, status, promotion_before.as_deref());
        let step = status
            .current_step_index
            .map(|index| (index, status.target_revision.clone()));
        if let Some(pending) = self.pending.take() {
            // A rollback (abort, `onFailure: Rollback`) walks the nodes steps without pauses.
            // The deletions since the last status were made under its regime or this one's:
            // a pass that fails the rollout writes the rollback it starts with the failure
            // (finding 29), after the deletions of the step it was in.
            let regimes: Vec<Vec<StepBudget>> = [rolled_back_before, rolling_back(status)]
                .into_iter()
                .map(|back| {
                    if back {
                        plan.without_pauses().step_budgets()
                    } else {
                        plan.step_budgets()
                    }
                })
                .collect();
            // The status before the deletions said step `from`; the pass that deleted went on
            // from there (completed steps, ended pauses) up to the step this status records.
            // With another target revision in between, the new rollout began at step 0.
            let last = regimes.iter().map(Vec::len).max().unwrap_or(0) as u32;
            let window: Vec<u32> = match (&pending.from, &step) {
                (Some((from, a)), Some((to, b))) if a == b && from <= to => (*from..=*to).collect(),
                (Some((from, _)), Some((to, _))) => (*from..=last).chain(0..=*to).collect(),
                (Some((from, _)), None) => (*from..=last).collect(),
                (None, Some((to, _))) => (0..=*to).collect(),
                (None, None) => (0..=last).collect(),
            };
            let desired = u64::from(pending.desired.max(self.desired_in_view()));
            let allowed = regimes
                .iter()
                .flat_map(|budgets| {
                    window
                        .iter()
                        .map(move |index| match budgets.get(*index as usize) {
                            Some(StepBudget::Nodes { max_unavailable }) => {
                                scale(max_unavailable, desired).max(1)
                            }
                            Some(StepBudget::Pause) => 0,
                            // Every step done: a node that comes back is caught up at the
                            // canary budget.
                            None => scale("1", desired).max(1),
                        })
                })
                .max()
                .unwrap_or(0);
            if pending.down as u64 > allowed {
                self.world.violate(
                    Invariant::PodsWithinStepBudget,
                    format!(
                        "{} nodes down at once ({}) at {:.1}s, the steps {:?} to {:?} ({window:?}) allow {allowed} of {desired}",
                        pending.down,
                        pending.nodes.join(", "),
                        pending.at,
                        pending.from,
                        step
                    ),
                );
            }
        }
        if step.is_some() {
            self.status_step = step;
        }
        // Invariant 13, when the status turns successful for the current spec.
        let turned = phase == Some("successful") && self.phase.as_deref() != Some("successful");
        let current = status.observed_generation == cds.metadata.generation;
        let edited = self
            .intent
            .lock()
            .is_ok_and(|intent| intent.hand_edit_since_change);
        let Some(target) = status.target_revision.as_deref() else {
            return;
        };
        if !turned || !current || edited {
            return;
        }
        let listed: Vec<&str> = status
            .deferred_nodes
            .iter()
            .map(|note| note.name.as_str())
            .collect();
        let unlisted_allowed =
            (status.deferred_node_count.unwrap_or(0) as usize).saturating_sub(listed.len());
        let old: Vec<String> = self
            .pods
            .values()
            .filter(|state| !terminating(&state.pod) && revision_of(&state.pod) != Some(target))
            .filter_map(|state| node_of(&state.pod))
            .filter(|node| !listed.contains(node))
            .map(str::to_owned)
            .collect();
        if old.len() > unlisted_allowed {
            self.world.violate(
                Invariant::OnlyDeferredNodesOld,
                format!(
                    "successful at revision {target}, but nodes {} run another revision; deferred: {listed:?} ({} in all)",
                    old.join(", "),
                    status.deferred_node_count.unwrap_or(0)
                ),
            );
        }
    }
}

/// Whether `status` records a rollback that walks the steps (an abort, `onFailure: Rollback`;
/// an undo is a new rollout of an older template).
fn rolling_back(status: &CanaryDaemonSetStatus) -> bool {
    status
        .history
        .as_ref()
        .and_then(|h| h.rollback.as_ref())
        .is_some_and(|r| r.reason != "Undo")
}

/// Whether a failure `reason` holds until the target changes (`FailureReason::is_sticky`:
/// a crash loop, a missed deadline, a failed analysis).
pub fn sticky_reason(reason: Option<&str>) -> bool {
    reason
        .and_then(|reason| reason.parse::<canary_state_machine::FailureReason>().ok())
        .is_some_and(canary_state_machine::FailureReason::is_sticky)
}

/// Whether the CanaryDaemonSet's status describes its current spec in a final phase.
pub fn ended(store: &Store) -> Option<String> {
    let cds = store.get::<CanaryDaemonSet>(Some(NAMESPACE), NAME)?;
    let status = cds.status.as_ref()?;
    let current = status.observed_generation == cds.metadata.generation;
    let phase = status.phase_name().map(str::to_owned)?;
    // A refused write or an invalid spec is re-evaluated on every pass: not an end.
    let sticky = sticky_reason(status.reason_name());
    let at_rest = phase == "successful" || phase == "rolledBack";
    (current && (at_rest || (phase == "failed" && sticky))).then_some(phase)
}

/// Every pod of the scenario's DaemonSet, terminating ones included.
fn our_pods(store: &Store) -> Vec<Pod> {
    store
        .list::<Pod>(Some(NAMESPACE))
        .into_iter()
        .filter(Checker::ours)
        .collect()
}

/// The running (not terminating) pods of the scenario's DaemonSet.
fn live_pods(store: &Store) -> Vec<Pod> {
    let mut pods = our_pods(store);
    pods.retain(|p| !terminating(p));
    pods
}

/// The first pods that are not ready, each with its node, image, behaviour and container
/// state: what a report needs to tell a slow kubelet from a pod that crashes.
fn not_ready_pods(pods: &[Pod]) -> String {
    let described: Vec<String> = pods
        .iter()
        .filter(|pod| !pod_is_ready(*pod))
        .take(3)
        .map(|pod| {
            let annotations = pod.metadata.annotations.as_ref();
            let image = pod
                .spec
                .as_ref()
                .and_then(|s| s.containers.first())
                .and_then(|c| c.image.clone());
            let state = pod
                .status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .and_then(|c| c.first())
                .map(|c| (c.restart_count, c.state.clone()));
            format!(
                "{} on {:?} (revision {:?}, {:?}, behaviour {:?}, restarts and state {:?})",
                pod.metadata.name.as_deref().unwrap_or("?"),
                node_of(pod),
                revision_of(pod),
                image,
                annotation(annotations, canary_sim::cluster::BEHAVIOR_ANNOTATION),
                state
            )
        })
        .collect();
    described.join("; ")
}

/// `(desired, updated, updated and ready)` as the cluster has them.
fn pod_counts(ds: &DaemonSet, pods: &[Pod]) -> (i32, usize, usize) {
    let target = ds_target(ds);
    let updated = pods.iter().filter(|p| pod_target(p) == target).count();
    let updated_ready = pods
        .iter()
        .filter(|p| pod_target(p) == target && pod_is_ready(p))
        .count();
    let desired = ds.status.as_ref().map_or(0, |s| s.desired_number_scheduled);
    (desired, updated, updated_ready)
}

/// The cluster's pod counts now, to tell when they stopped moving (`None` without a
/// DaemonSet).
pub fn cluster_counts(store: &Store) -> Option<(i32, usize, usize)> {
    let ds = store.get::<DaemonSet>(Some(NAMESPACE), NAME)?;
    Some(pod_counts(&ds, &live_pods(store)))
}

/// Live pods on their way up: not ready, never restarted, created less than two minutes ago
/// (the slowest healthy start of the plans is 50 s). The DaemonSet controller may still be
/// replacing pods one by one when the status has settled (a KubeVirt-compatible rollout leaves
/// it to finish a hand edit's revert unsupervised, quirks 5 and 6), and the counts stand still
/// for the seconds each new pod takes to start (soak seed 24001065).
pub fn starting_pods(store: &Store) -> usize {
    let now = store.clock().now();
    live_pods(store)
        .iter()
        .filter(|pod| !pod_is_ready(*pod))
        .filter(|pod| {
            pod.status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .is_none_or(|statuses| statuses.iter().all(|c| c.restart_count == 0))
        })
        .filter(|pod| {
            pod.metadata
                .creation_timestamp
                .as_ref()
                .and_then(|created| now.duration_since(created.0).try_into().ok())
                .is_some_and(|age: std::time::Duration| age < std::time::Duration::from_secs(120))
        })
        .count()
}

/// The `controller-revision-hash` of the DaemonSet's newest ControllerRevision.
fn current_revision(store: &Store, ds: &DaemonSet) -> Option<String> {
    let uid = ds.metadata.uid.as_deref()?;
    store
        .list::<k8s_openapi::api::apps::v1::ControllerRevision>(Some(NAMESPACE))
        .into_iter()
        .filter(|r| {
            r.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.uid == uid)
        })
        .max_by_key(|r| r.revision)
        .and_then(|r| r.metadata.labels?.get("controller-revision-hash").cloned())
}

/// Invariants 4 and 6, once the last rollout ended and nothing moves: the status agrees with
/// the store. Call it once the pod counts have been still for longer than the controller's
/// count-only status interval (crash-looping pods keep moving them long after the phase
/// settled).
///
/// With the Pods driver (`pods_driver`) invariant 4 reads differently: there is no
/// maxUnavailable to rest at, and the controller records the revision it rolled out
/// (`status.targetRevision`, the DaemonSet's newest ControllerRevision) instead of the
/// DaemonSet's generation; and at rest no node is deferred (the heal made every node Ready).
pub fn at_quiescence(store: &Store, world: &World, intent: &SharedIntent, pods_driver: bool) {
    let Some(cds) = store.get::<CanaryDaemonSet>(Some(NAMESPACE), NAME) else {
        world.violate(
            Invariant::StatusAgreesAtQuiescence,
            "the CanaryDaemonSet is gone",
        );
        return;
    };
    let Some(ds) = store.get::<DaemonSet>(Some(NAMESPACE), NAME) else {
        world.violate(Invariant::StatusAgreesAtQuiescence, "the DaemonSet is gone");
        return;
    };
    let status = cds.status.clone().unwrap_or_default();
    let phase = status.phase_name().unwrap_or_default().to_owned();
    // Invariants 16, 18 and 20: the last mark of each verb acted on (or refused), once.
    let history = status.history.clone().unwrap_or_default();
    use canary_kube_adapter::crd::{ABORT_ANNOTATION, RETRY_ANNOTATION, UNDO_ANNOTATION};
    for (invariant, annotation, recorded, field) in [
        (
            Invariant::RetryActedOn,
            RETRY_ANNOTATION,
            &status.retry,
            "status.retry",
        ),
        (
            Invariant::AbortActedOn,
            ABORT_ANNOTATION,
            &history.abort,
            "status.history.abort",
        ),
        (
            Invariant::UndoActedOn,
            UNDO_ANNOTATION,
            &history.undo,
            "status.history.undo",
        ),
    ] {
        let mark = cds
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(annotation));
        if mark.is_some() && recorded.as_ref() != mark {
            world.violate(
                invariant,
                format!("the mark {annotation}={mark:?} was never acted on ({field} {recorded:?}, phase {phase})"),
            );
        }
    }
    // A rollback in force: the DaemonSet runs the revision it went back to, not the spec's.
    let back_to = history.rollback.as_ref().map(|r| r.to.version.clone());
    let (latest, behavior, not_ready_seen) = match intent.lock() {
        Ok(i) => {
            let latest = back_to
                .clone()
                .or_else(|| i.versions.last().map(|(v, _)| v.clone()));
            let behavior = i
                .versions
                .iter()
                .rev()
                .find(|(v, _)| Some(v) == latest.as_ref())
                .map(|(_, b)| *b);
            (latest, behavior, i.node_not_ready_seen)
        }
        Err(_) => return,
    };
    // Invariant 17.
    if phase == "rolledBack" {
        world.count(|e| e.rolled_back += 1);
        let stable = history.stable.as_ref().map(|s| s.version.clone());
        if stable.is_none() || stable != back_to {
            world.violate(
                Invariant::RollbackEndsOnStable,
                format!("rolledBack to {back_to:?} but the last successful revision is {stable:?}"),
            );
        }
    }
    let rollback_asked = cds.spec.strategy.on_failure == canary_state_machine::OnFailure::Rollback;
    let sticky = sticky_reason(status.reason_name());
    // A referenced DaemonSet (`workloadRef`) is never written: going back is its owner's.
    if phase == "failed"
        && sticky
        && rollback_asked
        && cds.spec.workload_ref.is_none()
        && history.rollback.is_none()
        && let (Some(stable), Some(current)) = (&history.stable, &history.current)
        && stable.name != current.name
    {
        world.violate(
            Invariant::RollbackEndsOnStable,
            format!(
                "failed ({:?}) with onFailure Rollback, and revision {} ({}) had succeeded, but nothing went back to it",
                status.reason, stable.revision, stable.version
            ),
        );
    }
    let target = ds_target(&ds);
    let nodes: Vec<Node> = store.list(None);
    // One listing for the check: the live pods, and with the terminating ones, as the
    // reference counts them (`kubevirt_replacing` below).
    let all_ours = our_pods(store);
    let pods: Vec<Pod> = all_ours
        .iter()
        .filter(|p| !terminating(p))
        .cloned()
        .collect();
    let terminating_count = all_ours.len() - pods.len();
    let (desired, updated, updated_ready) = pod_counts(&ds, &pods);
    let summary = format!(
        "phase {phase}, status {}/{}/{} (desired/updated/ready), cluster {desired}/{updated}/{updated_ready} on {} nodes, DaemonSet at {:?} maxUnavailable {}",
        status.desired,
        status.updated,
        status.updated_ready,
        nodes.len(),
        target.0,
        max_unavailable_text(&ds)
    );
    if target.0 != latest {
        world.violate(
            Invariant::StatusAgreesAtQuiescence,
            format!(
                "the DaemonSet is at {:?}, the spec asks for {latest:?}: {summary}",
                target.0
            ),
        );
    }
    match phase.as_str() {
        "successful" | "rolledBack" if pods_driver => {
            let current = current_revision(store, &ds);
            if status.target_revision != current {
                world.violate(
                    Invariant::RestsAfterSuccess,
                    format!(
                        "target revision {:?} but the DaemonSet's newest revision is {current:?}",
                        status.target_revision
                    ),
                );
            }
            if status.deferred_node_count.unwrap_or(0) > 0 || !status.deferred_nodes.is_empty() {
                world.violate(
                    Invariant::OnlyDeferredNodesOld,
                    format!(
                        "nodes still deferred at rest: {:?} ({:?}): {summary}",
                        status.deferred_nodes, status.deferred_node_count
                    ),
                );
            }
        }
        _ => {}
    }
    match phase.as_str() {
        "successful" | "rolledBack" => {
            // With surge (issue 50) the rest is the canary's `maxSurge` at `maxUnavailable: 0`.
            let rest = canary_kube_adapter::desired::live_step_value(&ds, cds.spec.strategy.surge);
            if !pods_driver && rest.to_string() != "1" {
                world.violate(
                    Invariant::RestsAfterSuccess,
                    format!("not at rest: {summary}"),
                );
            }
            if !pods_driver && status.recorded_daemon_set_generation != ds.metadata.generation {
                world.violate(
                    Invariant::RestsAfterSuccess,
                    format!(
                        "recorded generation {:?} but the DaemonSet is at {:?}",
                        status.recorded_daemon_set_generation, ds.metadata.generation
                    ),
                );
            }
            let all = usize::try_from(desired).unwrap_or(0);
            // Finding 25: updated pods that crash-loop after the rollout succeeded hold the
            // catch-up of a node that came back; the status must say so (Degraded, the
            // crash-looping nodes named).
            let held_by_crashes = behavior.is_some_and(Behavior::crashes)
                && status.failed_node_count.unwrap_or(0) > 0
                && status.conditions.iter().any(|c| {
                    c.type_ == "Degraded"
                        && c.status == "True"
                        && c.reason == canary_kube_adapter::status::CRASH_LOOPING_AT_REST
                });
            // KubeVirt compatibility: the DaemonSet controller replaces the pods of a hand
            // edit written back at rest one at a time, unsupervised (below), and may be doing so
            // at the moment of the check: the pod it replaces is terminating (left out of the
            // live pods), its successor not created yet, while the status still counts it, as
            // the reference counts terminating pods (soak seed 32000134: 411 live pods, all
            // updated, and one terminating on a node of 412).
            let kubevirt_replacing = cds.spec.strategy.compatibility
                == canary_state_machine::Compatibility::KubeVirt
                && updated == pods.len()
                && pods.len() + terminating_count >= all;
            if (updated != pods.len() || updated != all) && !held_by_crashes && !kubevirt_replacing
            {
                world.violate(
                    Invariant::StatusAgreesAtQuiescence,
                    format!("successful but not every pod is updated: {summary}"),
                );
            }
            // KubeVirt compatibility: a hand edit of the template is written back by the
            // rollout's last write (row 4), which reports `successful` in the same pass, and the
            // DaemonSet controller then replaces the edited pods at maxUnavailable 1, unsupervised
            // (quirks 5 and 6: they carry the target's annotations, so they count as updated).
            // Its last replacement may still be starting: a version that takes a minute to
            // start, rolled back pod by pod after an undo, kept it at work longer than the
            // wait for still counts (soak seed 24004153).
            let kubevirt_rerolling = cds.spec.strategy.compatibility
                == canary_state_machine::Compatibility::KubeVirt
                && (current_revision(store, &ds).is_some_and(|current| {
                    pods.iter()
                        .any(|pod| revision_of(pod) != Some(current.as_str()))
                }) || starting_pods(store) > 0);
            // A version that crashes some time after becoming ready can finish its rollout
            // before the first crash; the counts must still say so.
            if behavior.is_none_or(Behavior::is_good)
                && updated_ready != all
                && !kubevirt_rerolling
                && !kubevirt_replacing
            {
                world.violate(
                    Invariant::StatusAgreesAtQuiescence,
                    format!(
                        "successful but not every pod is ready: {summary}; not ready: {}; newest revision {:?}, pods by revision {:?}",
                        not_ready_pods(&pods),
                        current_revision(store, &ds),
                        pods.iter().fold(BTreeMap::<&str, usize>::new(), |mut by, pod| {
                            *by.entry(revision_of(pod).unwrap_or("?")).or_default() += 1;
                            by
                        })
                    ),
                );
            }
            let counts = (
                status.desired as usize,
                status.updated as usize,
                status.updated_ready as usize,
            );
            let reference_counts = || {
                let (desired, updated, ready) = pod_counts(&ds, &all_ours);
                (usize::try_from(desired).unwrap_or(0), updated, ready)
            };
            if counts != (all, updated, updated_ready)
                && !(kubevirt_replacing && counts == reference_counts())
            {
                world.violate(
                    Invariant::StatusAgreesAtQuiescence,
                    format!("the status counts are not the cluster's: {summary}"),
                );
            }
        }
        "failed" => {
            let reason = status.reason_name().unwrap_or_default();
            let good = behavior.is_none_or(Behavior::is_good);
            if good && reason.contains("CrashLoop") {
                world.violate(
                    Invariant::StatusAgreesAtQuiescence,
                    format!("failed as crash-looping, but {latest:?} is {behavior:?}: {summary}"),
                );
            }
            if good && reason.contains("Deadline") && !not_ready_seen {
                world.violate(
                    Invariant::StatusAgreesAtQuiescence,
                    format!(
                        "failed on the deadline with {behavior:?} pods and no NotReady node: {summary}"
                    ),
                );
            }
            if behavior.is_some_and(Behavior::crashes)
                && updated_ready == usize::try_from(desired).unwrap_or(0)
                && desired > 0
                && !reason.contains("CrashLoop")
            {
                world.violate(
                    Invariant::StatusAgreesAtQuiescence,
                    format!("failed ({reason}) while every pod is ready: {summary}"),
                );
            }
        }
        other => world.violate(
            Invariant::RolloutsEnd,
            format!("phase {other:?} at quiescence: {summary}"),
        ),
    }
}

#[cfg(test)]
mod tests {
    //! The checker's own readings, on hand-made store events.

    use std::time::Duration;

    use serde_json::{Value, json};

    use super::*;

    fn event<K: kube::Resource<DynamicType = ()>>(
        kind: EventKind,
        name: &str,
        object: Value,
    ) -> StoreEvent {
        StoreEvent {
            key: ResourceKey::of::<K>(),
            kind,
            namespace: Some(NAMESPACE.to_owned()),
            name: name.to_owned(),
            object: Arc::new(object),
            resource_version: 1,
            previous: None,
            committed_at: std::time::Instant::now(),
        }
    }

    fn daemon_set(max_unavailable: &str) -> StoreEvent {
        event::<DaemonSet>(
            EventKind::Modified,
            NAME,
            json!({
                "metadata": {"name": NAME, "namespace": NAMESPACE},
                "spec": {
                    "selector": {},
                    "updateStrategy": {"rollingUpdate": {"maxUnavailable": max_unavailable}},
                    "template": {"metadata": {"annotations": {VERSION_KEY: "v2", ID_KEY: "id"}}}
                }
            }),
        )
    }

    fn pod(ready: bool) -> StoreEvent {
        event::<Pod>(
            EventKind::Modified,
            "agent-a",
            json!({
                "metadata": {
                    "name": "agent-a", "namespace": NAMESPACE, "uid": "a",
                    "labels": {OWNER_LABEL: NAME},
                    "annotations": {VERSION_KEY: "v2", ID_KEY: "id"}
                },
                "spec": {"nodeName": "node-a", "containers": []},
                "status": {
                    "phase": "Running",
                    "containerStatuses": [{
                        "name": "agent", "image": "agent:v2", "imageID": "", "restartCount": 0,
                        "ready": ready
                    }]
                }
            }),
        )
    }

    /// A widening decided on a pod that was ready for a long while and went down (or away
    /// with its node) a moment before the write landed is within the controller's staleness
    /// (soak seeds 24000559 and 24002610); one decided on a pod down for longer than that is
    /// a violation.
    #[tokio::test(start_paused = true)]
    async fn a_pod_ready_until_a_moment_ago_excuses_a_widening_and_one_down_for_long_does_not() {
        // The canary, ready for a minute, then `down` (not ready, or deleted with its node),
        // and the widening `after` seconds later.
        let widen_after = |down: StoreEvent, after: u64| async move {
            let world = World::new();
            let intent = SharedIntent::default();
            if let Ok(mut intent) = intent.lock() {
                intent.versions.push(("v2".to_owned(), Behavior::Healthy));
            }
            let mut checker = Checker::new(world.clone(), intent, 8.0);
            checker.apply(&daemon_set("1"));
            checker.apply(&pod(true));
            tokio::time::advance(Duration::from_secs(60)).await;
            checker.apply(&down);
            tokio::time::advance(Duration::from_secs(after)).await;
            checker.apply(&daemon_set("10%"));
            world.violations()
        };
        let mut deleted = pod(true);
        deleted.kind = EventKind::Deleted;
        let departed = widen_after(deleted, 2).await;
        assert!(
            departed.is_empty(),
            "a canary whose node went away: {departed:?}"
        );
        let moment = widen_after(pod(false), 2).await;
        assert!(moment.is_empty(), "{moment:?}");
        let long = widen_after(pod(false), 20).await;
        assert_eq!(long.len(), 1, "{long:?}");
        assert_eq!(long[0].invariant, Invariant::NoWidenWithoutReadyCanary);
    }

    /// A node removed as the controller deletes a pod shrinks the step's budget after the
    /// decision (soak seed 26006970): within the staleness the budget is judged against the
    /// most desired pods in force, after it against the count of now.
    #[tokio::test(start_paused = true)]
    async fn a_budget_is_judged_against_the_desired_pods_the_controller_may_still_see() {
        let desiring = |desired: u32| {
            let mut ds = daemon_set("17%");
            Arc::make_mut(&mut ds.object)["status"] = json!({
                "currentNumberScheduled": desired, "desiredNumberScheduled": desired,
                "numberMisscheduled": 0, "numberReady": desired
            });
            ds
        };
        let mut checker = Checker::new(World::new(), SharedIntent::default(), 8.0);
        checker.apply(&desiring(212));
        checker.apply(&desiring(211));
        assert_eq!(
            (checker.desired(), checker.desired_in_view()),
            (211, 212),
            "a moment after the drop"
        );
        tokio::time::advance(Duration::from_secs(9)).await;
        assert_eq!(checker.desired_in_view(), 211, "past the staleness");
        checker.apply(&desiring(215));
        assert_eq!(checker.desired_in_view(), 215, "a rise counts at once");
    }

    /// Invariant 31 on a controller broken on purpose: a `NodeUnhealthy` failure that names a
    /// node NotReady since 2 s after its pod was created (within the clock-skew margin: before
    /// its update, as far as the gate may tell) is caught; one that names a node that broke a
    /// minute after its update is not.
    #[tokio::test(start_paused = true)]
    async fn a_failure_naming_a_node_unhealthy_before_its_update_is_caught() {
        let failing_on = |broke_after_seconds: i64| {
            let world = World::new();
            let mut checker = Checker::new(world.clone(), SharedIntent::default(), 8.0);
            let mut pod = pod(true);
            Arc::make_mut(&mut pod.object)["metadata"]["creationTimestamp"] =
                json!("2026-01-01T00:00:00Z");
            checker.apply(&pod);
            let since =
                k8s_openapi::jiff::Timestamp::from_second(1_767_225_600 + broke_after_seconds)
                    .unwrap()
                    .to_string();
            let mut node = event::<Node>(
                EventKind::Modified,
                "node-a",
                json!({
                    "metadata": {"name": "node-a"},
                    "status": {"conditions": [{
                        "type": "Ready", "status": "False", "lastTransitionTime": since
                    }]}
                }),
            );
            node.namespace = None;
            checker.apply(&node);
            let cds = json!({
                "apiVersion": "canary.daemonset.dev/v1alpha1", "kind": "CanaryDaemonSet",
                "metadata": {"name": NAME, "namespace": NAMESPACE},
                "spec": {"template": {"metadata": {}, "spec": {"containers": []}}, "target": {"version": "v2"}},
                "status": {
                    "phase": "failed", "reason": "NodeUnhealthy",
                    "unhealthyNodes": [{"name": "node-a", "condition": "Ready", "status": "False"}]
                }
            });
            serde_json::from_value::<CanaryDaemonSet>(cds.clone()).unwrap();
            assert!(checker.nodes.contains_key("node-a"), "node mirrored");
            assert!(!checker.pods.is_empty(), "pod mirrored");
            checker.apply(&event::<CanaryDaemonSet>(EventKind::Modified, NAME, cds));
            // The synthetic status has no kstatus conditions: that invariant is not this test's.
            world
                .violations()
                .into_iter()
                .filter(|v| v.invariant != Invariant::KstatusAgreesWithPhase)
                .collect::<Vec<_>>()
        };
        let caught = failing_on(2);
        assert_eq!(caught.len(), 1, "{caught:?}");
        assert_eq!(
            caught[0].invariant,
            Invariant::NoFailureForANodeUnhealthyBefore
        );
        let after = failing_on(60);
        assert!(after.is_empty(), "{after:?}");
    }
}
