//! The Pods driver's decision table: which old-revision pods to delete this pass, and why.
//!
//! With the Pods driver the DaemonSet's `updateStrategy` is `OnDelete`: the DaemonSet controller
//! recreates a deleted pod from the current template, and the controller decides which pods go,
//! node by node, through a list of [`Step`]s: `{nodes: "1"}` (update until one node runs the new
//! revision), `{pause: {duration: 10m}}` (a soak), `{pause: {}}` (hold until promoted). The caller
//! (the adapter) observes the nodes and their pods into a [`PodObservation`], calls
//! [`decide_pods`], deletes the pods of [`PodDecision::delete`] (each with a UID precondition)
//! and records [`PodDecision::step`] in the status.
//!
//! # Rows, in order
//!
//! 1. An invalid strategy or step list: `failed`, `InvalidStrategy`, nothing deleted.
//! 2. The desired template changed (only when the controller owns the template): write it
//!    (`OnDelete`, no `maxUnavailable`), `started` at step 0. A drift of the live template is
//!    answered as in [`decide`](crate::decide): `Revert` writes it back, `Report` holds.
//! 3. The DaemonSet controller has not caught up with the last template write: hold.
//! 4. A new target revision (the owner changed the DaemonSet, or our write was observed):
//!    `started` at step 0, nothing deleted in this pass. When no pod runs an older revision
//!    (a first install) the steps are skipped: the rollout only waits for the pods.
//! 5. A sticky failure stays failed; nothing is deleted until the revision changes.
//! 6. A crash-looping updated pod on any node: `failed` (`CanaryCrashLooping`), the node named
//!    among the failed nodes, nothing deleted.
//! 7. The steps, from the step the previous pass was in: a promotion ([`Promotion::Step`])
//!    ends the current pause step, and in a nodes step is recorded and ignored with a warning
//!    (a nodes step ends when its nodes are updated, never by request); a full promotion
//!    ([`Promotion::Full`]) skips every step before the last nodes step (and a pause after
//!    it), which then updates every node at its budget. A pause holds (`paused`) until its
//!    duration has passed or it is promoted; a nodes step
//!    deletes old pods until its target is updated and ready, then the next step begins in the
//!    same pass. A nodes step that makes no progress within the progress deadline fails.
//!    With analysis ([`PodObservation::analysis`]), a pause step also reads its verdict: a
//!    failed analysis fails the rollout (`AnalysisFailed`, sticky, so `onFailure` applies), an
//!    inconclusive one holds it `paused` (announced once) until a conclusive measurement, and a
//!    timed pause ends only once its duration is over *and* the verdict is passing. A
//!    promotion ends a pause whatever the analysis says.
//! 8. Every step done: `waiting` until every counted pod is updated and ready (the progress
//!    deadline applies), then `successful`, with the deferred nodes named. A deferred node that comes
//!    back is updated then, one at a time, without leaving `successful`.
//!
//! Over every row: a hold on request ([`PodObservation::held`], the `pause` verb) keeps what
//! the rows decide but the actions: no template write, no deletion, no promotion consumed, and a
//! rollout that would act is `paused` instead. A failure stays a failure; a rollout at rest
//! stays `successful`. The progress deadline does not run while held (the phase is `paused`),
//! and the hold is announced once (`Paused`), as is its end (`Resumed`).
//!
//! Before every row: a retry on request ([`PodObservation::retry`], the `retry` verb) of a
//! failed rollout forgets the failure and the step: the rows run as for a rollout toward the
//! same revision that has just started (`Retried`). A retry of anything else changes nothing.
//!
//! # Invariants
//!
//! - Never more pods unavailable than the step's budget: `unavailable + ready deletions <=
//!   budget`, where `unavailable` counts every desired pod on a counted node that is not ready
//!   (missing, terminating, starting, crashing, an old pod not ready), whatever the reason. An
//!   old pod that is not ready is replaced first and takes no budget: it is unavailable
//!   already (a rollout that fixes a broken revision replaces its pods).
//! - Deferred nodes (NotReady, cordoned, gone) are left out of the budget, the step targets
//!   and the progress; none of their pods is deleted.
//! - No deletion in a pass that fails, pauses, holds or starts a rollout.
//! - No template write and no deletion while held on request.
//! - A nodes step after the first, with a topology key, never disrupts two zones at once.
//! - The order is stable: canary-selector nodes first in the first nodes step, then by zone
//!   (when zoned) and name.
//! - [`decide_pods`] never panics, whatever the input.

mod walk;

use std::borrow::Cow;
use std::time::Duration;

use crate::analysis::StepAnalysis;
use crate::decision::{DaemonSetWrite, WriteKind, event_reason};
use crate::lifecycle::rows::{failed, health_failed, start, stay_failed, sticky};
use crate::lifecycle::{self, Decision, DriverAction, Life, Row, Table};
use crate::max_unavailable::MaxUnavailable;
use crate::observation::{DriftSeen, PreviousPass};
use crate::phase::{FailureReason, Phase};
use crate::strategy::{Compatibility, Strategy, StrategyError};
use walk::{Classes, Walk};

/// The most steps a rollout may have (the CRD's `maxItems`).
pub const MAX_STEPS: usize = 32;

/// Node names listed in an event or a status list at most; the rest is a count.
pub const LISTED_NODES: usize = 10;

/// One step of a Pods-driver rollout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Step {
    /// Delete old pods until `nodes` nodes run the new revision, updated and ready: a count, or
    /// a percentage of the counted nodes rounded up (deferred nodes are not counted).
    Nodes {
        /// How many nodes run the new revision at the end of the step.
        nodes: MaxUnavailable,
        /// Pods unavailable at once during the step. Default: the canary `maxUnavailable` in
        /// the first nodes step, the fast one after.
        max_unavailable: Option<MaxUnavailable>,
    },
    /// Hold: for `duration`, or until promoted when `None`. Crashes are still watched.
    Pause {
        /// How long; `None` holds until promoted.
        duration: Option<Duration>,
    },
}

impl std::fmt::Display for Step {
    /// As a person reads it: `nodes 10%`, `nodes 1 (maxUnavailable 2)`, `pause 30s`, `pause
    /// until promoted`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Step::Nodes {
                nodes,
                max_unavailable: None,
            } => write!(f, "nodes {nodes}"),
            Step::Nodes {
                nodes,
                max_unavailable: Some(max),
            } => write!(f, "nodes {nodes} (maxUnavailable {max})"),
            Step::Pause {
                duration: Some(duration),
            } => write!(f, "pause {}s", duration.as_secs()),
            Step::Pause { duration: None } => write!(f, "pause until promoted"),
        }
    }
}

impl Step {
    /// Every node, at the step's default budget: the last step of every rollout.
    pub const ALL_NODES: Step = Step::Nodes {
        nodes: MaxUnavailable::Percent(100),
        max_unavailable: None,
    };
}

/// The steps of a Pods-driver rollout and how nodes are ordered.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StepPlan {
    steps: Vec<Step>,
    /// Nodes steps after the first go zone by zone (a topology key is set).
    pub zoned: bool,
}

impl Default for StepPlan {
    /// The reference's shape: one canary node, then every node at the fast budget.
    fn default() -> Self {
        StepPlan::new(vec![
            Step::Nodes {
                nodes: MaxUnavailable::ONE,
                max_unavailable: None,
            },
            Step::ALL_NODES,
        ])
    }
}

impl StepPlan {
    /// The plan of `steps`. Every rollout ends with every node updated: when the last nodes
    /// step is not `100%`, a `{nodes: 100%}` step is appended. No steps at all is the default.
    pub fn new(mut steps: Vec<Step>) -> Self {
        if steps.is_empty() {
            return StepPlan::default();
        }
        let last_nodes = steps.iter().rev().find_map(|step| match step {
            Step::Nodes { nodes, .. } => Some(*nodes),
            Step::Pause { .. } => None,
        });
        if last_nodes != Some(MaxUnavailable::Percent(100)) {
            steps.push(Step::ALL_NODES);
        }
        StepPlan {
            steps,
            zoned: false,
        }
    }

    /// The same plan, zone by zone after the first nodes step.
    #[must_use]
    pub fn zoned(self, zoned: bool) -> Self {
        StepPlan { zoned, ..self }
    }

    /// The same plan without its pause steps: what a rollback follows (an abort or a
    /// rollback after a failure goes back canary first, step by step, but waits for nobody).
    #[must_use]
    pub fn without_pauses(&self) -> Self {
        let steps = self
            .steps
            .iter()
            .filter(|step| matches!(step, Step::Nodes { .. }))
            .copied()
            .collect();
        StepPlan::new(steps).zoned(self.zoned)
    }

    /// The steps, the appended last one included.
    pub fn steps(&self) -> &[Step] {
        &self.steps
    }

    /// The number of steps (what the status reports as the step count).
    pub fn len(&self) -> u32 {
        u32::try_from(self.steps.len()).unwrap_or(u32::MAX)
    }

    /// Never true: a plan has at least the all-nodes step.
    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }

    /// Checks the steps; the first problem found is returned.
    pub fn validate(&self) -> Result<(), StrategyError> {
        if self.steps.len() > MAX_STEPS {
            return Err(StrategyError::TooManySteps(self.steps.len()));
        }
        for (index, step) in self.steps.iter().enumerate() {
            let invalid = |reason: String| StrategyError::InvalidStep { index, reason };
            match step {
                Step::Nodes {
                    nodes,
                    max_unavailable,
                } => {
                    nodes
                        .validate()
                        .map_err(|e| invalid(format!("nodes: {e}")))?;
                    if let Some(max) = max_unavailable {
                        max.validate()
                            .map_err(|e| invalid(format!("maxUnavailable: {e}")))?;
                    }
                }
                Step::Pause {
                    duration: Some(duration),
                } if duration.is_zero() => {
                    return Err(invalid("a pause must last longer than zero".to_owned()));
                }
                Step::Pause { .. } => {}
            }
        }
        Ok(())
    }

    /// The index of the first nodes step (the canary), if the plan has one.
    pub fn first_nodes_step(&self) -> Option<usize> {
        self.steps
            .iter()
            .position(|step| matches!(step, Step::Nodes { .. }))
    }

    /// The index of the last nodes step (the one that updates every node).
    pub(crate) fn last_nodes_step(&self) -> Option<usize> {
        self.steps
            .iter()
            .rposition(|step| matches!(step, Step::Nodes { .. }))
    }
}

/// What a promotion (the `promote` verb) asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Promotion {
    /// End the current pause step (`promote`).
    Step,
    /// Skip every remaining step and pause (`promote --full`): straight to the last nodes
    /// step, which still keeps its unavailability budget.
    Full,
}

/// Why a node is left out of the rollout for now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Deferral {
    /// The node is not Ready (or its Ready condition is unknown).
    NodeNotReady,
    /// The node is cordoned (`spec.unschedulable`).
    NodeCordoned,
    /// The node object is gone (its pod is an orphan the garbage collector will remove).
    NodeMissing,
}

impl Deferral {
    /// Every deferral.
    pub const ALL: [Deferral; 3] = [
        Deferral::NodeNotReady,
        Deferral::NodeCordoned,
        Deferral::NodeMissing,
    ];

    /// A few words for messages, e.g. `"NotReady"`: also how the status names a deferred
    /// node's reason.
    pub const fn as_str(self) -> &'static str {
        match self {
            Deferral::NodeNotReady => "NotReady",
            Deferral::NodeCordoned => "cordoned",
            Deferral::NodeMissing => "node gone",
        }
    }

    /// The deferral named `name` (as the status records it), if any.
    pub fn parse(name: &str) -> Option<Deferral> {
        Deferral::ALL.into_iter().find(|d| d.as_str() == name)
    }
}

/// Where a node stands in a rollout: the one vocabulary of node states, that the status, the
/// `status --nodes` ledger and the metrics (`canary_nodes{state}`) all speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NodeStanding {
    /// Its pod runs the target revision (and, counted, is ready).
    Updated,
    /// Its pod runs an older revision: still to update.
    Old,
    /// Counted, and its pod is not ready or missing, whatever the reason.
    Unavailable,
    /// Left out of the rollout for now ([`Deferral`] says why): updated when it comes back.
    Deferred,
    /// Its updated pod crash-loops.
    Failed,
    /// The health gates name it (issue 46): healthy when its pod was updated, unhealthy
    /// within the window after (`status.unhealthyNodes`). The ledger's only: the drivers'
    /// counts and the metrics read it as `canary_unhealthy_nodes`.
    Unhealthy,
    /// No pod of the DaemonSet on it (being replaced, or not scheduled there).
    NoPod,
}

impl NodeStanding {
    /// The standings a rollout's node counts are by ([`NodeTally::count`], the metrics).
    pub const COUNTED: [NodeStanding; 5] = [
        NodeStanding::Updated,
        NodeStanding::Old,
        NodeStanding::Unavailable,
        NodeStanding::Deferred,
        NodeStanding::Failed,
    ];

    /// The standings a node of the ledger is in, in the order its totals list them.
    pub const LEDGER: [NodeStanding; 6] = [
        NodeStanding::Updated,
        NodeStanding::Old,
        NodeStanding::Deferred,
        NodeStanding::Failed,
        NodeStanding::Unhealthy,
        NodeStanding::NoPod,
    ];

    /// The stable name (`"updated"`, ..., `"no pod"`).
    pub const fn as_str(self) -> &'static str {
        match self {
            NodeStanding::Updated => "updated",
            NodeStanding::Old => "old",
            NodeStanding::Unavailable => "unavailable",
            NodeStanding::Deferred => "deferred",
            NodeStanding::Failed => "failed",
            NodeStanding::Unhealthy => "unhealthy",
            NodeStanding::NoPod => "no pod",
        }
    }
}

impl std::fmt::Display for NodeStanding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

/// The health of a node, as the caller read it from the Node object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum NodeHealth {
    /// Ready and schedulable.
    #[default]
    Healthy,
    /// Not Ready, or Ready unknown.
    NotReady,
    /// Cordoned.
    Cordoned,
    /// No Node object of that name.
    Missing,
}

/// The one non-terminating pod of the DaemonSet on a node.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct PodState {
    /// Pod name.
    pub name: String,
    /// Pod UID, the precondition of its deletion.
    pub uid: String,
    /// It runs the target revision.
    pub updated: bool,
    /// It is ready.
    pub ready: bool,
    /// Why it counts as crash-looping (per the crash-loop policy), if it does.
    pub crash_loop: Option<String>,
}

/// One node the DaemonSet runs (or is replacing) a pod on.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct NodeState {
    /// Node name.
    pub name: String,
    /// The value of the topology key label, when zoned.
    pub zone: Option<String>,
    /// The node matches the canary node selector.
    pub canary: bool,
    /// Ready and schedulable, or why not.
    pub health: NodeHealth,
    /// The node's non-terminating pod of the DaemonSet; `None` while it is being replaced (its
    /// old pod terminating or just deleted, the new one not created yet).
    pub pod: Option<PodState>,
}

/// Where the previous pass left the steps, from status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct StepPosition {
    /// The step index (`steps.len()` when every step is done).
    pub index: u32,
    /// Time since that step began.
    pub elapsed: Duration,
    /// Nodes deferred by the previous pass (to announce a change once).
    pub deferred: u32,
}

/// One pass's view for the Pods driver.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct PodObservation {
    /// The DaemonSet name, for messages.
    pub name: String,
    /// The target version, for messages (`"started rollout of v1.9.4"`); empty when unknown.
    pub version: String,
    /// The desired template differs from the live one (only when the controller owns it).
    pub template_changed: bool,
    /// Someone else changed the live template (only when the controller owns it). While the
    /// change is kept, the caller counts the pods against the revision it recorded, not the
    /// changed template's (with `OnDelete`, the change replaced no pod).
    pub drift: Option<DriftSeen>,
    /// The DaemonSet controller has observed the live generation: the current revision is
    /// the one pods are created from.
    pub rollout_observed: bool,
    /// The DaemonSet's current revision is not the one the status records as the target.
    pub new_revision: bool,
    /// Live `status.desiredNumberScheduled`.
    pub desired_pods: u32,
    /// The nodes with a pod of the DaemonSet, or being replaced.
    pub nodes: Vec<NodeState>,
    /// A promotion asked for and not yet acted on.
    pub promotion: Option<Promotion>,
    /// The rollout is held on request (the `pause` verb): no template write and no pod
    /// deletion until the request is withdrawn (`resume`). Crashes are still watched.
    pub held: bool,
    /// The previous pass acted on the hold already (the status records it), so `Paused` is
    /// announced once, and `Resumed` once when the request is withdrawn.
    pub hold_recorded: bool,
    /// A retry was asked for and not yet acted on (the `retry` verb): a failed rollout starts
    /// again from its first step, toward the same revision. Ignored unless failed.
    pub retry: bool,
    /// Where the previous pass left the steps; `None` before the first rollout.
    pub position: Option<StepPosition>,
    /// The analysis of the pause step being measured; `None` when the rollout has no analysis.
    /// A pause step other than [`StepAnalysis::step`] has no measurement yet (pending).
    pub analysis: Option<StepAnalysis>,
    /// The previous pass (phase, failure, progress), from status.
    pub previous: Option<PreviousPass>,
    /// The rollout goes back to a revision the DaemonSet ran before (an abort, or `onFailure:
    /// Rollback`; the caller gives the plan without its pauses). The nodes that never left
    /// that revision count as updated from the start, so a completed step counts the nodes on
    /// it rather than naming them as canaries, and no canary nodes are recorded.
    pub rollback: bool,
    /// The health gates' facts (issue 46); `None` without gates.
    pub health: Option<crate::health::HealthFacts>,
}

/// An old pod to delete.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Deletion {
    /// Pod name.
    pub pod: String,
    /// Pod UID (the delete's precondition: a pod recreated under the same name is spared).
    pub uid: String,
    /// Its node.
    pub node: String,
}

/// The counts a pass saw, for the status and the metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct NodeTally {
    /// Desired pods (`desiredNumberScheduled`).
    pub desired: u32,
    /// Desired pods on nodes that are not deferred: what targets and budgets scale from.
    pub counted: u32,
    /// Counted nodes whose pod runs the target revision.
    pub updated: u32,
    /// Of those, ready.
    pub updated_ready: u32,
    /// Counted nodes still on an old revision.
    pub old: u32,
    /// Deferred nodes.
    pub deferred: u32,
    /// Counted pods not ready, whatever the reason (missing ones included).
    pub unavailable: u32,
    /// Pods allowed unavailable in the current step (0 outside nodes steps).
    pub budget: u32,
    /// Nodes the current step wants updated and ready (0 outside nodes steps).
    pub target: u32,
}

/// What the Pods driver does beside the shared outcome of a pass ([`Decision`]'s action).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct PodsAction {
    /// The step the rollout is in after this pass.
    pub step: u32,
    /// The pods to delete, in order.
    pub delete: Vec<Deletion>,
    /// Deferred nodes and why, by name.
    pub deferred: Vec<(String, Deferral)>,
    /// Nodes whose updated pod crash-loops.
    pub failed_nodes: Vec<String>,
    /// The first nodes step completed in this pass: its nodes (the canary nodes).
    pub canary_nodes: Option<Vec<String>>,
    /// This pass acted on the pending promotion (the caller records it as consumed).
    pub promotion_consumed: bool,
    /// Come back after this long at the latest (a timed pause ends).
    pub wake_after: Option<Duration>,
    /// The counts this pass saw.
    pub tally: NodeTally,
}

impl DriverAction for PodsAction {
    fn moves(&self) -> bool {
        !self.delete.is_empty()
    }

    fn stop(&mut self) {
        self.delete.clear();
    }

    fn refused(self) -> Self {
        PodsAction {
            step: self.step,
            tally: self.tally,
            ..PodsAction::default()
        }
    }
}

impl NodeTally {
    /// The nodes counted in `standing` (the updated ones that are ready; the failed ones are
    /// the decision's, not the tally's, the unhealthy ones the gates': 0 here).
    pub const fn count(&self, standing: NodeStanding) -> u32 {
        match standing {
            NodeStanding::Updated => self.updated_ready,
            NodeStanding::Old => self.old,
            NodeStanding::Unavailable => self.unavailable,
            NodeStanding::Deferred => self.deferred,
            NodeStanding::Failed | NodeStanding::Unhealthy | NodeStanding::NoPod => 0,
        }
    }
}

/// What one pass of the Pods driver decided: the shared outcome and its [`PodsAction`].
pub type PodDecision = Decision<PodsAction>;

impl Decision<PodsAction> {
    /// The same decision at `step` with `tally`.
    pub(crate) fn at(mut self, step: u32, tally: NodeTally) -> Self {
        self.action.step = step;
        self.action.tally = tally;
        self
    }
}

/// Decides one pass of the Pods driver. Pure: no I/O, no clock. See the module documentation
/// for the rows; the shared ones (invalid strategy, drift, retry, the start, the hold on
/// request) are the life cycle's.
pub fn decide_pods(
    strategy: &Strategy,
    plan: &StepPlan,
    observation: &PodObservation,
) -> PodDecision {
    lifecycle::decide(
        strategy,
        &Pods {
            plan,
            observation: Cow::Borrowed(observation),
        },
    )
}

/// The nodes to pre-pull the new images on after `decision` (issue 50), `None` when the
/// rollout is in no pre-pull window: a window is a pause step, or the first nodes step done
/// and held (the canary soaks, or waits for its analysis), neither failed nor held on request
/// nor deleting. The nodes are those the next nodes step will replace, in its order
/// (the step walk's own choice, `Walk::upcoming`); `plan` is the one `decision` followed.
pub fn pre_pull_nodes(
    strategy: &Strategy,
    plan: &StepPlan,
    observation: &PodObservation,
    decision: &PodDecision,
) -> Option<Vec<String>> {
    let tally = decision.action.tally;
    let canary_done =
        decision.phase == Phase::Canary && tally.target > 0 && tally.updated_ready >= tally.target;
    let window = decision.failure.is_none()
        && !decision.held
        && decision.action.delete.is_empty()
        && (decision.phase == Phase::Paused || canary_done);
    if !window {
        return None;
    }
    let walk = Walk {
        strategy,
        plan,
        observation,
        classes: Classes::of(observation),
        life: life_of(observation),
    };
    Some(walk.upcoming(decision.action.step))
}

/// The Pods driver's table, as the life cycle runs it.
struct Pods<'a> {
    plan: &'a StepPlan,
    observation: Cow<'a, PodObservation>,
}

/// What a held pass of this driver stops, as its `Paused` event says it.
const HELD_STOPS: &str = "no pod is deleted and the template is not written";

/// What a drift kept as it is (`Report`) stops, as its event says it.
const REPORT_STOPS: &str = "no pod is deleted";

/// What the shared rows read of `observation`.
fn life_of(observation: &PodObservation) -> Life<'_> {
    Life {
        name: &observation.name,
        version: &observation.version,
        previous: observation.previous,
        changed: observation.template_changed,
        drift: observation.drift.as_ref(),
        retry: observation.retry,
        held: observation.held,
        hold_recorded: observation.hold_recorded,
        // Always `OnDelete`: a hold writes nothing, it deletes nothing.
        live_on_hold: None,
        held_stops: HELD_STOPS,
        report_stops: REPORT_STOPS,
        pods_rows: true,
        health: observation.health.as_ref(),
    }
}

impl Pods<'_> {
    /// The step the previous pass left the rollout in.
    fn step(&self) -> u32 {
        self.observation
            .position
            .map_or(0, |p| p.index)
            .min(self.plan.len())
    }
}

impl Table for Pods<'_> {
    type Action = PodsAction;

    fn life(&self) -> Life<'_> {
        life_of(&self.observation)
    }

    fn validate(&self, strategy: &Strategy) -> Result<(), StrategyError> {
        let driver = match strategy.compatibility {
            Compatibility::KubeVirt => Err(StrategyError::PodsDriverNeedsFixed),
            Compatibility::Fixed => Ok(()),
        };
        strategy
            .validate()
            .and_then(|()| self.plan.validate())
            .and(driver)
    }

    fn start_write(&self, _strategy: &Strategy) -> DaemonSetWrite {
        // The template only: the DaemonSet is `OnDelete`, no `maxUnavailable` is written.
        DaemonSetWrite {
            kind: WriteKind::Start,
            max_unavailable: None,
            template_edit: None,
        }
    }

    fn action(&self, row: Row) -> PodsAction {
        let at = |step, tally| PodsAction {
            step,
            tally,
            ..PodsAction::default()
        };
        match row {
            Row::Invalid => at(self.step(), NodeTally::default()),
            // Counted against the template written in this pass: none runs it yet.
            Row::Start => at(0, new_template_tally(Classes::of(&self.observation).tally)),
            // Counted as they are: the caller counts the pods against the recorded revision,
            // which the template written back is, so its pods are already updated (with
            // `OnDelete` an edit replaces no pod: a finished rollout's revert has nothing to do).
            Row::Revert => at(0, Classes::of(&self.observation).tally),
            // Held where the rollout was: the status shows the DaemonSet as it is.
            Row::Report => over_nodes(self.step(), &Classes::of(&self.observation)),
        }
    }

    fn forget_failure(&self) -> Self {
        Pods {
            plan: self.plan,
            observation: Cow::Owned(PodObservation {
                previous: None,
                position: None,
                retry: false,
                ..self.observation.as_ref().clone()
            }),
        }
    }

    fn progress(&self, strategy: &Strategy) -> PodDecision {
        progress(strategy, self.plan, &self.observation, self.step())
    }
}

/// Rows 3 to 8, the driver's own: from the DaemonSet controller's catching up to the steps.
fn progress(
    strategy: &Strategy,
    plan: &StepPlan,
    observation: &PodObservation,
    step: u32,
) -> PodDecision {
    let life = life_of(observation);
    let classes = Classes::of(observation);
    if !observation.rollout_observed {
        // Held where the previous pass left it, and still telling which nodes wait and which
        // crash: a status without them would show a successful rollout with every node on its
        // revision while a NotReady one is not (soak seed 10000300, `workloadRef`: its owner
        // changed the template while the rollout rested with a node deferred).
        let phase = observation
            .previous
            .map_or(Phase::Started, |previous| previous.phase);
        let mut action = over_nodes(step, &classes);
        if phase == Phase::Started {
            // The template just went out and the DaemonSet controller has not taken it in:
            // the revision counted against is still the one being replaced, so none of its
            // pods is updated (a status, and the demo's plot, showed every pod updated and
            // ready for that pass: issue 52).
            action.tally = new_template_tally(action.tally);
        }
        return Decision::hold(phase).with_action(action);
    }
    if observation.new_revision {
        let announced = observation
            .previous
            .is_some_and(|p| p.phase == Phase::Started);
        // Nothing runs an older revision (a DaemonSet just created, or adopted as it is):
        // there is nothing to canary, so the steps are skipped and the rollout only waits for
        // every pod to be ready, as Argo Rollouts does with a first deployment.
        let nothing_old = observation
            .nodes
            .iter()
            .all(|node| node.pod.as_ref().is_none_or(|pod| pod.updated));
        let step = if nothing_old { plan.len() } else { 0 };
        return start(&life, None, announced).at(step, classes.tally);
    }
    if let Some(previous) = sticky(&life) {
        return stay_failed(&life, previous).with_action(over_nodes(step, &classes));
    }
    // At rest a crash is no rollout's failure: a caught-up node's pod that crashes holds the
    // catch-up (see `Walk::finished`) without failing what already succeeded.
    let at_rest = observation
        .previous
        .is_some_and(|p| p.phase == Phase::Successful);
    if !at_rest && let Some((node, pod, reason)) = classes.first_crash() {
        let message = format!(
            "daemonSet {} rollout failed: updated pod {pod} on node {node} is crash-looping ({reason}); no further pod is deleted",
            observation.name
        );
        let failure = failed(
            &life,
            FailureReason::CanaryCrashLooping,
            event_reason::FAILED_UPDATE,
            message,
        );
        return failure.with_action(over_nodes(step, &classes));
    }
    // Issue 46: a node broken after its update fails the rollout before any other deletion.
    // At rest, the facts carry only the late updates (nodes caught up after `successful`,
    // `HealthFacts::rested_since`): one that broke fails the generation, and the catch-up of
    // the other recovered nodes stops with it.
    let judged = !at_rest
        || observation
            .health
            .as_ref()
            .is_some_and(|facts| facts.rested_since.is_some());
    if judged && let Some(failure) = health_failed(&life) {
        return failure.with_action(over_nodes(step, &classes));
    }
    Walk {
        strategy,
        plan,
        observation,
        classes,
        life,
    }
    .run(step)
}

/// The action of a pass that holds at `step` over the nodes as `classes` sorted them: their
/// tally, and the deferred and crash-looping nodes, which the status of every pass that holds
/// names.
fn over_nodes(step: u32, classes: &Classes<'_>) -> PodsAction {
    PodsAction {
        step,
        deferred: classes.deferred.clone(),
        failed_nodes: classes.crashing_nodes(),
        tally: classes.tally,
        ..PodsAction::default()
    }
}

/// The pods counted against a template written in this pass: none runs it yet (the revision
/// they run is the one being replaced).
fn new_template_tally(tally: NodeTally) -> NodeTally {
    NodeTally {
        old: tally.old + tally.updated,
        updated: 0,
        updated_ready: 0,
        ..tally
    }
}
