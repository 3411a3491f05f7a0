//! The DaemonSet controller's decisions, as pure functions: which pods to create and
//! delete (`manage` / `podsShouldBeOnNode` in kubernetes
//! `pkg/controller/daemon/daemon_controller.go`, `rollingUpdate` in
//! `pkg/controller/daemon/update.go`), the pods it creates, and the status it reports
//! (`updateDaemonSetStatus`).

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{DaemonSet, DaemonSetStatus};
use k8s_openapi::api::core::v1::{
    Affinity, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, Pod,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::ownership::{REVISION_HASH_LABEL, TEMPLATE_GENERATION_LABEL, controller_ref};
use super::scheduling::{NODE_NAME_FIELD, NodeFit, add_daemon_tolerations};
use crate::strategy::TEMPLATE_GENERATION_ANNOTATION;

/// What the controller needs to know about one of its pods.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DaemonPod {
    /// Pod name.
    pub name: String,
    /// `spec.nodeName`.
    pub node: String,
    /// `controller-revision-hash` label.
    pub hash: Option<String>,
    /// `pod-template-generation` label.
    pub template_generation: Option<String>,
    /// `creationTimestamp`.
    pub created: Timestamp,
    /// `deletionTimestamp` is set.
    pub deleting: bool,
    /// `status.phase` is `Failed` or `Succeeded`: the pod is over and must be replaced.
    pub terminal: bool,
    /// When the Ready condition last became True, if it is True now.
    pub ready_since: Option<Timestamp>,
}

impl DaemonPod {
    /// The controller's view of a pod; `None` for a pod not bound to a node.
    pub fn from_pod(pod: &Pod) -> Option<Self> {
        let node = pod
            .spec
            .as_ref()?
            .node_name
            .clone()
            .filter(|n| !n.is_empty())?;
        let labels = pod.metadata.labels.as_ref();
        let ready_since = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
            .filter(|c| c.status == "True")
            .map(|c| {
                c.last_transition_time
                    .as_ref()
                    .map(|t| t.0)
                    .unwrap_or(Timestamp::UNIX_EPOCH)
            });
        Some(Self {
            name: pod.metadata.name.clone().unwrap_or_default(),
            node,
            hash: labels.and_then(|l| l.get(REVISION_HASH_LABEL)).cloned(),
            template_generation: labels
                .and_then(|l| l.get(TEMPLATE_GENERATION_LABEL))
                .cloned(),
            created: pod
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0)
                .unwrap_or(Timestamp::UNIX_EPOCH),
            deleting: pod.metadata.deletion_timestamp.is_some(),
            terminal: pod
                .status
                .as_ref()
                .and_then(|s| s.phase.as_deref())
                .is_some_and(|phase| phase == "Failed" || phase == "Succeeded"),
            ready_since,
        })
    }

    /// `podutil.IsPodReady`.
    pub fn is_ready(&self) -> bool {
        self.ready_since.is_some()
    }

    /// `podutil.IsPodAvailable`: ready for longer than `min_ready_seconds`.
    pub fn is_available(&self, min_ready_seconds: i32, now: Timestamp) -> bool {
        match self.ready_since {
            None => false,
            Some(_) if min_ready_seconds <= 0 => true,
            Some(since) => since
                .checked_add(SignedDuration::from_secs(i64::from(min_ready_seconds)))
                .is_ok_and(|at| at < now),
        }
    }
}

/// One sync's view of a DaemonSet: the object, its current revision hash and the time.
#[derive(Clone, Debug)]
pub struct SyncContext<'a> {
    /// The DaemonSet.
    pub ds: &'a DaemonSet,
    /// `controller-revision-hash` of the current template.
    pub hash: &'a str,
    /// Virtual wall-clock now.
    pub now: Timestamp,
    template_generation: Option<String>,
    min_ready_seconds: i32,
}

impl<'a> SyncContext<'a> {
    /// The context of a sync of `ds` at `now`, whose current template hashes to `hash`.
    pub fn new(ds: &'a DaemonSet, hash: &'a str, now: Timestamp) -> Self {
        Self {
            ds,
            hash,
            now,
            template_generation: template_generation(ds).map(|g| g.to_string()),
            min_ready_seconds: ds
                .spec
                .as_ref()
                .and_then(|s| s.min_ready_seconds)
                .unwrap_or(0),
        }
    }

    fn min_ready_seconds(&self) -> i32 {
        self.min_ready_seconds
    }

    fn template_generation(&self) -> Option<i64> {
        template_generation(self.ds)
    }

    /// `util.IsPodUpdated`: the pod carries the current hash or template generation.
    pub fn is_updated(&self, pod: &DaemonPod) -> bool {
        let generation_matches = self
            .template_generation
            .as_deref()
            .is_some_and(|g| pod.template_generation.as_deref() == Some(g));
        let hash_matches = !self.hash.is_empty() && pod.hash.as_deref() == Some(self.hash);
        hash_matches || generation_matches
    }

    fn is_available(&self, pod: &DaemonPod) -> bool {
        pod.is_available(self.min_ready_seconds, self.now)
    }
}

/// The template generation the API server recorded in the DaemonSet's annotation.
pub fn template_generation(ds: &DaemonSet) -> Option<i64> {
    ds.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(TEMPLATE_GENERATION_ANNOTATION))
        .and_then(|v| v.parse().ok())
}

/// The update strategy after API defaulting.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Strategy {
    /// `OnDelete`: pods are replaced only when someone deletes them.
    OnDelete,
    /// `RollingUpdate` with its (defaulted) limits.
    RollingUpdate {
        /// `maxUnavailable` (default 1).
        max_unavailable: IntOrString,
        /// `maxSurge` (default 0).
        max_surge: IntOrString,
    },
}

/// `spec.updateStrategy` with the defaults of `pkg/apis/apps/v1/defaults.go`.
pub fn strategy(ds: &DaemonSet) -> Strategy {
    let update = ds.spec.as_ref().and_then(|s| s.update_strategy.as_ref());
    if update.and_then(|u| u.type_.as_deref()) == Some("OnDelete") {
        return Strategy::OnDelete;
    }
    let rolling = update.and_then(|u| u.rolling_update.as_ref());
    Strategy::RollingUpdate {
        max_unavailable: rolling
            .and_then(|r| r.max_unavailable.clone())
            .unwrap_or(IntOrString::Int(1)),
        max_surge: rolling
            .and_then(|r| r.max_surge.clone())
            .unwrap_or(IntOrString::Int(0)),
    }
}

/// An invalid `maxUnavailable` / `maxSurge` value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid value for IntOrString: {0:?}")]
pub struct InvalidIntOrPercent(pub String);

/// `intstr.GetScaledValueFromIntOrPercent`: an int, or a percentage of `total`
/// rounded up (`round_up`) or down.
pub fn scaled_value(
    value: &IntOrString,
    total: usize,
    round_up: bool,
) -> Result<usize, InvalidIntOrPercent> {
    match value {
        IntOrString::Int(i) => Ok(usize::try_from(*i).unwrap_or(0)),
        IntOrString::String(s) => {
            let percent: u64 = s
                .strip_suffix('%')
                .and_then(|p| p.parse().ok())
                .ok_or_else(|| InvalidIntOrPercent(s.clone()))?;
            let scaled = percent * total as u64;
            let value = if round_up {
                scaled.div_ceil(100)
            } else {
                scaled / 100
            };
            Ok(usize::try_from(value).unwrap_or(usize::MAX))
        }
    }
}

/// What one sync does: pods to create (by node) and to delete (by name).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SyncPlan {
    /// Nodes that get a new pod.
    pub create_on_nodes: Vec<String>,
    /// Pods to delete.
    pub delete_pods: Vec<String>,
}

impl SyncPlan {
    /// No write at all.
    pub fn is_empty(&self) -> bool {
        self.create_on_nodes.is_empty() && self.delete_pods.is_empty()
    }
}

/// One node as one DaemonSet sees it: its fit (`None` when the node does not exist any
/// more) and the DaemonSet's pods on it (terminating ones included).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeSlot {
    /// [`NodeFit`] of the DaemonSet on this node; `None` for a node that is gone.
    pub fit: Option<NodeFit>,
    /// The DaemonSet's pods bound to the node.
    pub pods: Vec<DaemonPod>,
}

impl NodeSlot {
    fn should_run(&self) -> bool {
        self.fit.is_some_and(|f| f.should_run)
    }
}

/// Every node that exists or holds one of the DaemonSet's pods, by name.
#[derive(Clone, Copy, Debug)]
pub struct Placement<'a> {
    /// The slots, sorted by node name (the order decisions are taken in).
    pub nodes: &'a BTreeMap<String, NodeSlot>,
}

impl Placement<'_> {
    fn desired(&self) -> usize {
        self.nodes.values().filter(|slot| slot.should_run()).count()
    }
}

/// One sync: `manage`, then (if `manage` had nothing to do, which is when the real
/// controller's expectations are satisfied) the rolling update.
pub fn plan_sync(
    cx: &SyncContext<'_>,
    placement: &Placement<'_>,
) -> Result<SyncPlan, InvalidIntOrPercent> {
    let managed = manage(cx, placement);
    if !managed.is_empty() {
        return Ok(managed);
    }
    match strategy(cx.ds) {
        Strategy::OnDelete => Ok(managed),
        Strategy::RollingUpdate {
            max_unavailable,
            max_surge,
        } => {
            let desired = placement.desired();
            let mut max_unavailable = scaled_value(&max_unavailable, desired, true)?;
            let max_surge = scaled_value(&max_surge, desired, true)?;
            if desired > 0 && max_unavailable == 0 && max_surge == 0 {
                max_unavailable = 1;
            }
            Ok(if max_surge == 0 {
                rolling_update_without_surge(cx, placement, max_unavailable)
            } else {
                rolling_update_with_surge(cx, placement, max_surge)
            })
        }
    }
}

/// `podByCreationTimestampAndPhase`: oldest first, then by name.
fn oldest_first(pods: &mut [&DaemonPod]) {
    pods.sort_by(|a, b| a.created.cmp(&b.created).then_with(|| a.name.cmp(&b.name)));
}

/// Whether `manage` runs with surge (`maxSurge` above zero): then it may keep an old pod
/// beside a new one.
fn surges(ds: &DaemonSet) -> bool {
    matches!(strategy(ds), Strategy::RollingUpdate { ref max_surge, .. }
        if scaled_value(max_surge, 1, true).unwrap_or(0) > 0)
}

/// `manage` / `podsShouldBeOnNode`: one pod on each node that should run one, none elsewhere.
pub fn manage(cx: &SyncContext<'_>, placement: &Placement<'_>) -> SyncPlan {
    let surge = surges(cx.ds);
    let mut plan = SyncPlan::default();
    for (node, slot) in placement.nodes {
        manage_slot(cx, surge, node, slot, &mut plan);
    }
    plan
}

/// [`manage`] on one node: what it creates and deletes there, appended to `plan`.
fn manage_slot(
    cx: &SyncContext<'_>,
    surge: bool,
    node: &str,
    slot: &NodeSlot,
    plan: &mut SyncPlan,
) {
    // Pods on nodes that are gone are the pod garbage collector's business.
    let Some(fit) = slot.fit else { return };
    let pods = slot.pods.as_slice();
    if fit.should_run && pods.is_empty() {
        plan.create_on_nodes.push(node.to_owned());
    } else if fit.should_continue_running {
        let mut running: Vec<&DaemonPod> = Vec::new();
        for pod in pods.iter().filter(|p| !p.deleting) {
            // Failed and Succeeded pods are deleted so that a fresh one replaces them.
            if pod.terminal {
                plan.delete_pods.push(pod.name.clone());
            } else {
                running.push(pod);
            }
        }
        oldest_first(&mut running);
        if !surge {
            plan.delete_pods
                .extend(running.iter().skip(1).map(|p| p.name.clone()));
            return;
        }
        if running.is_empty() && fit.should_run {
            plan.create_on_nodes.push(node.to_owned());
            return;
        }
        // With surge: keep the oldest new pod and the oldest old pod, the old one only
        // while the new one is not yet available and the old one is ready.
        let mut oldest_new = None;
        let mut oldest_old = None;
        for pod in running {
            let slot = if cx.is_updated(pod) {
                &mut oldest_new
            } else {
                &mut oldest_old
            };
            if slot.is_none() {
                *slot = Some(pod);
            } else {
                plan.delete_pods.push(pod.name.clone());
            }
        }
        if let (Some(new), Some(old)) = (oldest_new, oldest_old)
            && (!old.is_ready() || cx.is_available(new))
        {
            plan.delete_pods.push(old.name.clone());
        }
    } else {
        plan.delete_pods
            .extend(pods.iter().filter(|p| !p.deleting).map(|p| p.name.clone()));
    }
}

/// `findUpdatedPodsOnNode`: at most one new and one old non-terminating pod, or `None`.
fn updated_and_old<'p>(
    cx: &SyncContext<'_>,
    pods: &'p [DaemonPod],
) -> Option<(Option<&'p DaemonPod>, Option<&'p DaemonPod>)> {
    let mut new = None;
    let mut old = None;
    for pod in pods.iter().filter(|p| !p.deleting) {
        let slot = if cx.is_updated(pod) {
            &mut new
        } else {
            &mut old
        };
        if slot.is_some() {
            return None;
        }
        *slot = Some(pod);
    }
    Some((new, old))
}

/// Nodes the rolling update looks at: every desired node plus every node holding a pod.
fn rollout_nodes<'a>(placement: &Placement<'a>) -> impl Iterator<Item = (&'a str, &'a NodeSlot)> {
    placement
        .nodes
        .iter()
        .filter(|(_, slot)| slot.should_run() || !slot.pods.is_empty())
        .map(|(name, slot)| (name.as_str(), slot))
}

/// What one node of [`rollout_nodes`] means to the rolling update without surge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum NoSurgeSlot<'p> {
    /// Its pod is new and available: nothing to do, nothing unavailable.
    Available,
    /// Counts against `maxUnavailable` (no pod, a new pod not available yet, a node being
    /// replaced, more than one pod).
    Unavailable,
    /// Its old pod is unavailable: replaced whatever the budget (and counts as unavailable).
    ReplaceOld(&'p DaemonPod),
    /// Its old pod is available: replaced while the budget allows.
    Candidate(&'p DaemonPod),
}

/// The rolling update's view of one node (`rollingUpdate`'s loop body, `maxSurge == 0`).
fn no_surge_slot<'p>(cx: &SyncContext<'_>, slot: &'p NodeSlot) -> NoSurgeSlot<'p> {
    match updated_and_old(cx, &slot.pods) {
        None | Some((None, None) | (Some(_), Some(_))) => NoSurgeSlot::Unavailable,
        Some((Some(new), None)) if cx.is_available(new) => NoSurgeSlot::Available,
        Some((Some(_), None)) => NoSurgeSlot::Unavailable,
        Some((None, Some(old))) if cx.is_available(old) => NoSurgeSlot::Candidate(old),
        Some((None, Some(old))) => NoSurgeSlot::ReplaceOld(old),
    }
}

/// `rollingUpdate` with `maxSurge == 0`: delete old pods while the number of unavailable
/// nodes stays within `maxUnavailable`; unavailable old pods are replaced first and
/// regardless of the budget.
fn rolling_update_without_surge(
    cx: &SyncContext<'_>,
    placement: &Placement<'_>,
    max_unavailable: usize,
) -> SyncPlan {
    let mut unavailable = 0usize;
    let mut replacements = Vec::new();
    // Names are cloned only for the candidates taken, and no more than `max_unavailable` are
    // kept (no more can be taken): this runs on every sync, over every node.
    let mut candidates: Vec<&str> = Vec::new();
    for (_, slot) in rollout_nodes(placement) {
        match no_surge_slot(cx, slot) {
            NoSurgeSlot::Available => {}
            NoSurgeSlot::Unavailable => unavailable += 1,
            NoSurgeSlot::ReplaceOld(old) => {
                replacements.push(old.name.clone());
                unavailable += 1;
            }
            NoSurgeSlot::Candidate(old) => {
                if unavailable < max_unavailable && candidates.len() < max_unavailable {
                    candidates.push(&old.name);
                }
            }
        }
    }
    let remaining = max_unavailable
        .saturating_sub(unavailable)
        .min(candidates.len());
    replacements.extend(candidates.into_iter().take(remaining).map(str::to_owned));
    SyncPlan {
        create_on_nodes: Vec::new(),
        delete_pods: replacements,
    }
}

/// `rollingUpdate` with `maxSurge > 0`: start a new pod next to an old one (at most
/// `maxSurge` at a time, immediately where the old pod is unavailable), delete the old
/// pod once the new one is available.
fn rolling_update_with_surge(
    cx: &SyncContext<'_>,
    placement: &Placement<'_>,
    max_surge: usize,
) -> SyncPlan {
    let mut plan = SyncPlan::default();
    let mut should_not_run = Vec::new();
    let mut allowed_new = Vec::new();
    let mut candidate_new = Vec::new();
    let mut surging = 0usize;
    let mut available = 0usize;
    for (node, slot) in rollout_nodes(placement) {
        let should_run = slot.should_run();
        let Some((new, old)) = updated_and_old(cx, &slot.pods) else {
            surging += 1;
            continue;
        };
        if old.or(new).is_some_and(|p| cx.is_available(p)) {
            available += 1;
        }
        match (new, old) {
            (_, None) => {}
            (None, Some(old)) => {
                if !cx.is_available(old) {
                    if should_run {
                        allowed_new.push(node.to_owned());
                    } else {
                        plan.delete_pods.push(old.name.clone());
                    }
                } else if !should_run {
                    should_not_run.push(old.name.clone());
                } else if surging < max_surge {
                    candidate_new.push(node.to_owned());
                }
            }
            (Some(new), Some(old)) => {
                if cx.is_available(new) {
                    plan.delete_pods.push(old.name.clone());
                } else {
                    surging += 1;
                }
            }
        }
    }
    let deletable = available
        .saturating_sub(placement.desired())
        .min(should_not_run.len());
    plan.delete_pods
        .extend(should_not_run.into_iter().take(deletable));
    let remaining = max_surge.saturating_sub(surging).min(candidate_new.len());
    plan.create_on_nodes = allowed_new;
    plan.create_on_nodes
        .extend(candidate_new.into_iter().take(remaining));
    plan
}

/// The counts of `updateDaemonSetStatus`, summed over nodes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct StatusCounts {
    desired: i32,
    current: i32,
    misscheduled: i32,
    ready: i32,
    available: i32,
    updated: i32,
}

impl StatusCounts {
    fn add(&mut self, other: Self) {
        self.desired += other.desired;
        self.current += other.current;
        self.misscheduled += other.misscheduled;
        self.ready += other.ready;
        self.available += other.available;
        self.updated += other.updated;
    }

    fn subtract(&mut self, other: Self) {
        self.desired -= other.desired;
        self.current -= other.current;
        self.misscheduled -= other.misscheduled;
        self.ready -= other.ready;
        self.available -= other.available;
        self.updated -= other.updated;
    }
}

/// What one node adds to the status counts, from its oldest pod.
fn status_slot(cx: &SyncContext<'_>, slot: &NodeSlot) -> StatusCounts {
    let mut counts = StatusCounts::default();
    let Some(fit) = slot.fit else { return counts };
    if !fit.should_run {
        counts.misscheduled = i32::from(!slot.pods.is_empty());
        return counts;
    }
    counts.desired = 1;
    let Some(pod) = slot
        .pods
        .iter()
        .min_by(|a, b| a.created.cmp(&b.created).then_with(|| a.name.cmp(&b.name)))
    else {
        return counts;
    };
    counts.current = 1;
    if pod.is_ready() {
        counts.ready = 1;
        counts.available = i32::from(cx.is_available(pod));
    }
    counts.updated = i32::from(cx.is_updated(pod));
    counts
}

/// `updateDaemonSetStatus`: the counts, from the oldest pod on each node.
pub fn compute_status(cx: &SyncContext<'_>, placement: &Placement<'_>) -> DaemonSetStatus {
    let mut counts = StatusCounts::default();
    for slot in placement.nodes.values() {
        counts.add(status_slot(cx, slot));
    }
    status_from_counts(cx, counts)
}

/// The DaemonSet's status with `counts` in it.
fn status_from_counts(cx: &SyncContext<'_>, counts: StatusCounts) -> DaemonSetStatus {
    let mut status = cx.ds.status.clone().unwrap_or_default();
    status.desired_number_scheduled = counts.desired;
    status.current_number_scheduled = counts.current;
    status.number_misscheduled = counts.misscheduled;
    status.number_ready = counts.ready;
    status.number_available = Some(counts.available);
    status.number_unavailable = Some(counts.desired - counts.available);
    status.updated_number_scheduled = Some(counts.updated);
    status.observed_generation = cx.ds.metadata.generation;
    status
}

/// When to sync again so that pods turning available after `minReadySeconds` are counted
/// (the real controller re-enqueues after `minReadySeconds` while ready != available).
pub fn requeue_after(cx: &SyncContext<'_>, status: &DaemonSetStatus) -> Option<Duration> {
    let min_ready = cx.min_ready_seconds();
    (min_ready > 0 && Some(status.number_ready) != status.number_available)
        .then(|| Duration::from_secs(u64::try_from(min_ready).unwrap_or(0)))
}

/// The pod the controller creates on `node` (`CreatePodTemplate` plus
/// `ReplaceDaemonSetPodNodeNameNodeAffinity`), already bound to the node since the
/// simulator has no separate scheduler. The name is left to the API server
/// (`generateName: <daemonset>-`).
pub fn new_daemon_pod(cx: &SyncContext<'_>, node: &str) -> Pod {
    let template = cx
        .ds
        .spec
        .as_ref()
        .map(|s| s.template.clone())
        .unwrap_or_default();
    let mut metadata = template.metadata.unwrap_or_default();
    let mut labels = metadata.labels.take().unwrap_or_default();
    if let Some(generation) = cx.template_generation() {
        labels.insert(TEMPLATE_GENERATION_LABEL.to_owned(), generation.to_string());
    }
    labels.insert(REVISION_HASH_LABEL.to_owned(), cx.hash.to_owned());
    metadata.labels = Some(labels);
    metadata.generate_name = Some(format!("{}-", cx.ds.metadata.name.as_deref().unwrap_or("")));
    metadata.name = None;
    metadata.namespace = cx.ds.metadata.namespace.clone();
    metadata.owner_references = Some(vec![controller_ref(cx.ds)]);
    metadata.uid = None;
    metadata.resource_version = None;
    let mut spec = template.spec.unwrap_or_default();
    add_daemon_tolerations(&mut spec);
    pin_to_node(&mut spec.affinity, node);
    spec.node_name = Some(node.to_owned());
    Pod {
        metadata,
        spec: Some(spec),
        status: None,
    }
}

/// `ReplaceDaemonSetPodNodeNameNodeAffinity`: the required node affinity becomes a single
/// `matchFields metadata.name In [node]` term; preferred affinity and other kinds stay.
fn pin_to_node(affinity: &mut Option<Affinity>, node: &str) {
    let selector = NodeSelector {
        node_selector_terms: vec![NodeSelectorTerm {
            match_expressions: None,
            match_fields: Some(vec![NodeSelectorRequirement {
                key: NODE_NAME_FIELD.to_owned(),
                operator: "In".to_owned(),
                values: Some(vec![node.to_owned()]),
            }]),
        }],
    };
    let node_affinity = affinity
        .get_or_insert_with(Affinity::default)
        .node_affinity
        .get_or_insert_with(NodeAffinity::default);
    node_affinity.required_during_scheduling_ignored_during_execution = Some(selector);
}

mod tally;

pub use tally::SyncTally;

#[cfg(test)]
mod tests;
