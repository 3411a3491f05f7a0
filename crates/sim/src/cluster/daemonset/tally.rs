//! `syncDaemonSet`'s plan and status kept up to date node by node, for the common case (no
//! `minReadySeconds`, no surge).
//!
//! Why: [`plan_sync`](super::plan_sync) and [`compute_status`](super::compute_status) walk every node of the DaemonSet, and the
//! controller syncs a DaemonSet up to once per sync delay (10 ms, virtual) while its pods
//! change, so a rollout cost the simulator nodes × pod changes: the square of the cluster size,
//! most of the simulator's time on 5,000 nodes. [`SyncTally`] keeps what each node contributes
//! (its status counts, whether `manage` acts there, what the rolling update makes of it) and
//! the totals; a sync updates the nodes that changed since the last one and reads the plan and
//! the status from the totals.
//!
//! Invariant: for the same slots and [`SyncContext`], [`SyncTally::plan`] and
//! [`SyncTally::status`] equal [`plan_sync`](super::plan_sync) and
//! [`compute_status`](super::compute_status). They share the per-node
//! rules ([`manage_slot`], [`no_surge_slot`], [`status_slot`]) and differ only in how they sum
//! them; the driver checks the equality on every sync of a debug build, the tests below on
//! generated clusters.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use k8s_openapi::api::apps::v1::DaemonSetStatus;

use super::{
    InvalidIntOrPercent, NoSurgeSlot, NodeSlot, Placement, StatusCounts, Strategy, SyncContext,
    SyncPlan, manage_slot, no_surge_slot, rolling_update_with_surge, scaled_value, status_slot,
    strategy, surges,
};

/// What one node contributes to a sync.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct NodeSummary {
    status: StatusCounts,
    /// `manage` creates or deletes something on the node.
    manage: bool,
    /// The node counts against `maxUnavailable`.
    unavailable: bool,
    /// The old pod replaced whatever the budget.
    replace: Option<String>,
    /// The old pod replaced while the budget allows.
    candidate: Option<String>,
}

/// The per-node summaries of one DaemonSet at one revision, and their totals.
#[derive(Clone, Debug)]
pub struct SyncTally {
    /// The revision the summaries were made for (what `is_updated` compares with).
    hash: String,
    template_generation: Option<String>,
    nodes: HashMap<String, NodeSummary>,
    status: StatusCounts,
    unavailable: usize,
    /// Nodes where `manage` acts, in node order.
    manage: BTreeSet<String>,
    /// Node → old pod replaced whatever the budget.
    replace: BTreeMap<String, String>,
    /// Node → old pod replaced while the budget allows, the first ones in node order.
    candidates: BTreeMap<String, String>,
}

impl SyncTally {
    /// Whether a tally can stand in for the full planners under `cx`: availability does not
    /// depend on the time (`minReadySeconds` is 0) and there is no surge (whose plan is not
    /// tallied).
    pub fn applies(cx: &SyncContext<'_>) -> bool {
        cx.min_ready_seconds() <= 0 && !surges(cx.ds)
    }

    /// An empty tally for the revision of `cx`.
    pub fn new(cx: &SyncContext<'_>) -> Self {
        Self {
            hash: cx.hash.to_owned(),
            template_generation: cx.template_generation.clone(),
            nodes: HashMap::new(),
            status: StatusCounts::default(),
            unavailable: 0,
            manage: BTreeSet::new(),
            replace: BTreeMap::new(),
            candidates: BTreeMap::new(),
        }
    }

    /// A tally of every slot.
    pub fn of_all(cx: &SyncContext<'_>, slots: &BTreeMap<String, NodeSlot>) -> Self {
        let mut tally = Self::new(cx);
        for (node, slot) in slots {
            tally.update(cx, node, Some(slot));
        }
        tally
    }

    /// Whether the summaries were made for the revision of `cx` (else they are stale).
    pub fn is_for(&self, cx: &SyncContext<'_>) -> bool {
        self.hash == cx.hash && self.template_generation == cx.template_generation
    }

    /// Records the slot of `node` as it is now (`None`: no slot any more).
    pub fn update(&mut self, cx: &SyncContext<'_>, node: &str, slot: Option<&NodeSlot>) {
        if let Some(old) = self.nodes.remove(node) {
            self.status.subtract(old.status);
            self.unavailable -= usize::from(old.unavailable);
            if old.manage {
                self.manage.remove(node);
            }
            if old.replace.is_some() {
                self.replace.remove(node);
            }
            if old.candidate.is_some() {
                self.candidates.remove(node);
            }
        }
        let Some(slot) = slot else { return };
        let summary = summarize(cx, node, slot);
        self.status.add(summary.status);
        self.unavailable += usize::from(summary.unavailable);
        if summary.manage {
            self.manage.insert(node.to_owned());
        }
        if let Some(pod) = &summary.replace {
            self.replace.insert(node.to_owned(), pod.clone());
        }
        if let Some(pod) = &summary.candidate {
            self.candidates.insert(node.to_owned(), pod.clone());
        }
        self.nodes.insert(node.to_owned(), summary);
    }

    /// [`plan_sync`](super::plan_sync) from the totals; `slots` are the ones tallied.
    pub fn plan(
        &self,
        cx: &SyncContext<'_>,
        slots: &BTreeMap<String, NodeSlot>,
    ) -> Result<SyncPlan, InvalidIntOrPercent> {
        let mut plan = SyncPlan::default();
        for node in &self.manage {
            if let Some(slot) = slots.get(node) {
                manage_slot(cx, false, node, slot, &mut plan);
            }
        }
        if !plan.is_empty() {
            return Ok(plan);
        }
        let Strategy::RollingUpdate {
            max_unavailable,
            max_surge,
        } = strategy(cx.ds)
        else {
            return Ok(plan);
        };
        let desired = usize::try_from(self.status.desired).unwrap_or(0);
        let mut max_unavailable = scaled_value(&max_unavailable, desired, true)?;
        let max_surge = scaled_value(&max_surge, desired, true)?;
        if desired > 0 && max_unavailable == 0 && max_surge == 0 {
            max_unavailable = 1;
        }
        if max_surge > 0 {
            // Not reached while `applies` holds; the full planner stays right if it is.
            return Ok(rolling_update_with_surge(
                cx,
                &Placement { nodes: slots },
                max_surge,
            ));
        }
        let remaining = max_unavailable
            .saturating_sub(self.unavailable)
            .min(self.candidates.len());
        plan.delete_pods = self
            .replace
            .values()
            .chain(self.candidates.values().take(remaining))
            .cloned()
            .collect();
        Ok(plan)
    }

    /// [`compute_status`](super::compute_status) from the totals.
    pub fn status(&self, cx: &SyncContext<'_>) -> DaemonSetStatus {
        super::status_from_counts(cx, self.status)
    }
}

/// What `slot` contributes, under the rules of the full planners.
fn summarize(cx: &SyncContext<'_>, node: &str, slot: &NodeSlot) -> NodeSummary {
    let mut managed = SyncPlan::default();
    manage_slot(cx, false, node, slot, &mut managed);
    let mut summary = NodeSummary {
        status: status_slot(cx, slot),
        manage: !managed.is_empty(),
        ..NodeSummary::default()
    };
    // `rollout_nodes`: the rolling update looks at desired nodes and nodes holding a pod.
    if slot.should_run() || !slot.pods.is_empty() {
        match no_surge_slot(cx, slot) {
            NoSurgeSlot::Available => {}
            NoSurgeSlot::Unavailable => summary.unavailable = true,
            NoSurgeSlot::ReplaceOld(old) => {
                summary.unavailable = true;
                summary.replace = Some(old.name.clone());
            }
            NoSurgeSlot::Candidate(old) => summary.candidate = Some(old.name.clone()),
        }
    }
    summary
}

#[cfg(test)]
mod tests;
