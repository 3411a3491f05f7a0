//! The health gates (issue 46): what a release does to its nodes, judged purely from facts the
//! caller observed in the cluster, for both drivers.
//!
//! A gate turns the facts of one pass ([`HealthFacts`]) into a [`HealthVerdict`]: nothing to
//! say, or the evidence against the release with the nodes it names. The life cycle acts on a
//! verdict in one place for both drivers: `onUnhealthy: Fail` (the default) fails the rollout
//! through the shared `failed` row with its own [`FailureReason`](crate::FailureReason), so
//! the failure is sticky and follows `onFailure` like any other; `Hold` pauses it as the
//! `pause` verb does, for a person to decide.
//!
//! | gate | module | evidence | reason |
//! |---|---|---|---|
//! | node health | [`nodes`] | a node healthy when its agent pod was replaced turns unhealthy within `window` after it | `NodeUnhealthy` |
//! | neighbours | [`neighbours`] | the pods beside the agent on an updated node, ready at its update, lose readiness or restart within `window` after it, beyond the nodes not yet updated | `NeighboursDisrupted` |
//!
//! The canary soak ([`HealthPolicy::canary_soak`]) is the gates' time to see the canary: the
//! drivers do not widen (MaxUnavailable) or take their next nodes step (Pods) until the
//! canary's pod has been ready that long ([`soak_left`]).
//!
//! # Invariants
//!
//! - Pure: no I/O and no clock; time comes in as [`Stamp`]s the cluster wrote and the
//!   caller's `now`.
//! - Cheap at any size: the facts name the unhealthy nodes only (usually none or a few); a
//!   gate never needs the healthy ones.
//! - A node unhealthy since before its pod was replaced is never evidence; a deleted node is
//!   not in the facts at all.

pub mod neighbours;
pub mod nodes;

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

pub use neighbours::{
    NeighbourFacts, NeighbourJudgement, NeighbourNode, NeighbourPod, NeighbourPolicy, NeighbourRow,
    NeighbourTally, judge_neighbours,
};
pub use nodes::{CLOCK_SKEW_MARGIN_SECONDS, NodeJudgement, NodeRow, judge_nodes};

/// `spec.health.window` by default: how long after its update a node is watched.
pub const DEFAULT_HEALTH_WINDOW: Duration = Duration::from_secs(600);

/// `spec.health.canarySoak` by default in `Fixed` compatibility (0 in `KubeVirt`, which keeps
/// the reference's timing).
pub const DEFAULT_CANARY_SOAK: Duration = Duration::from_secs(30);

/// The longest `window` and `canarySoak` accepted (a day): a window longer than that would
/// judge a node for longer than any rollout is watched.
pub const MAX_HEALTH_DURATION: Duration = Duration::from_secs(86_400);

/// How many unhealthy nodes a status names ([`HealthVerdict`] keeps the count of all).
pub const MAX_UNHEALTHY_LISTED: usize = 10;

/// The node conditions that make a node unhealthy by default, beside `Ready` not `True`.
pub const DEFAULT_NODE_CONDITIONS: [&str; 1] = ["NetworkUnavailable"];

/// A timestamp the cluster wrote (`metadata.creationTimestamp`, a condition's
/// `lastTransitionTime`): whole seconds since the Unix epoch, Kubernetes' `metav1.Time`
/// precision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Stamp(pub i64);

impl Stamp {
    /// `self` minus `earlier`, negative when `earlier` is later.
    pub const fn seconds_since(self, earlier: Stamp) -> i64 {
        self.0.saturating_sub(earlier.0)
    }
}

/// What an unhealthy gate leads to (`spec.health.onUnhealthy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)
)]
pub enum OnUnhealthy {
    /// Fail the rollout (sticky; `onFailure: Rollback` rolls it back). The default.
    #[default]
    Fail,
    /// Pause it as the `pause` verb does, with a Warning event naming the nodes: a person
    /// decides (`resume` goes on, `abort` rolls back).
    Hold,
}

impl OnUnhealthy {
    /// The stable name (`"Fail"`, `"Hold"`), as the custom resource spells it.
    pub const fn as_str(self) -> &'static str {
        match self {
            OnUnhealthy::Fail => "Fail",
            OnUnhealthy::Hold => "Hold",
        }
    }
}

impl fmt::Display for OnUnhealthy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A string that names neither action.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown onUnhealthy {0:?}: expected Fail or Hold")]
pub struct ParseOnUnhealthyError(pub String);

impl FromStr for OnUnhealthy {
    type Err = ParseOnUnhealthyError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [OnUnhealthy::Fail, OnUnhealthy::Hold]
            .into_iter()
            .find(|action| action.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| ParseOnUnhealthyError(s.to_owned()))
    }
}

/// The gates' settings (`spec.health`, checked). Which node conditions count is the caller's
/// reading of a node, so it is not here: the facts say whether and since when a node is
/// unhealthy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HealthPolicy {
    /// A node that turns unhealthy later than this after its pod was replaced is not judged.
    pub window: Duration,
    /// How long the canary's pod is ready before the rollout widens or takes its next step.
    pub canary_soak: Duration,
    /// What evidence against the release leads to.
    pub on_unhealthy: OnUnhealthy,
    /// The neighbours gate (`spec.health.neighbours`).
    pub neighbours: NeighbourPolicy,
}

impl Default for HealthPolicy {
    /// The defaults of `Fixed` compatibility: a 10-minute window, a 30 s soak, `Fail`.
    fn default() -> Self {
        HealthPolicy {
            window: DEFAULT_HEALTH_WINDOW,
            canary_soak: DEFAULT_CANARY_SOAK,
            on_unhealthy: OnUnhealthy::Fail,
            neighbours: NeighbourPolicy::default(),
        }
    }
}

impl HealthPolicy {
    /// The defaults of `KubeVirt` compatibility: no soak (the reference's timing).
    pub fn kubevirt() -> Self {
        HealthPolicy {
            canary_soak: Duration::ZERO,
            ..HealthPolicy::default()
        }
    }
}

/// What made a node unhealthy, as seen: the condition, its reason and message (cut by the
/// caller: they are outside text).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct NodeSeen {
    /// `Ready` (not `True`) or the configured condition that is `True`.
    pub condition: String,
    /// The condition's status (`False`, `Unknown`, `True`).
    pub status: String,
    /// The condition's reason, cut.
    pub reason: String,
    /// The condition's message, cut.
    pub message: String,
}

/// The DaemonSet's pod on an unhealthy node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum NodePod {
    /// None (being replaced, or never scheduled).
    #[default]
    None,
    /// A pod of an older revision: the node has not been updated.
    Old,
    /// A pod of the target, created (the replacement) at this time.
    Updated {
        /// The pod's `metadata.creationTimestamp`.
        created: Stamp,
    },
}

/// One unhealthy node, as the caller saw it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct UnhealthyNode {
    /// Node name.
    pub node: String,
    /// Unhealthy since: the `lastTransitionTime` of the condition that makes it so (the
    /// earliest, when several do).
    pub since: Stamp,
    /// What was seen.
    pub seen: NodeSeen,
    /// The DaemonSet's pod on it.
    pub pod: NodePod,
}

/// What the gates read in one pass: the settings and what the caller saw.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct HealthFacts {
    /// The settings.
    pub policy: HealthPolicy,
    /// The caller's clock, in the cluster's unit: only the soak reads it.
    pub now: Stamp,
    /// The unhealthy nodes that still exist (a deleted node is no evidence), whatever their
    /// pod; nodes of the DaemonSet only.
    pub unhealthy: Vec<UnhealthyNode>,
    /// Since when the canary's pod is ready (its `Ready` condition's `lastTransitionTime`):
    /// the soak counts from there, so it survives a restart of the controller. `None` while
    /// no updated pod is ready.
    pub canary_ready_since: Option<Stamp>,
    /// A person resumed a hold of `onUnhealthy: Hold` at this time (the status remembers it):
    /// the nodes unhealthy since no later than it were answered (go on) and are evidence no
    /// more; a node that turns unhealthy after it holds the rollout again. `None`: never.
    pub answered: Option<Stamp>,
    /// The neighbours of the updated nodes, and the baseline (empty with the gate off).
    pub neighbours: NeighbourFacts,
    /// The rollout ended `successful` at this time (its status's phase start) and rests: the
    /// gates judge only the **late updates**, the nodes whose pod of the target was created
    /// since (a deferred node that recovered and was caught up by the resting strategy), each
    /// for `window` after its update. The nodes updated during the rollout were judged then.
    /// `None`: the rollout is under way (every updated node in its window is judged).
    pub rested_since: Option<Stamp>,
}

impl HealthFacts {
    /// The facts as the gates read them at rest ([`HealthFacts::rested_since`]): only the
    /// late updates, and the nodes not updated (the node gate's outage baseline). Unchanged
    /// while the rollout is under way.
    fn late_updates_only(&self) -> std::borrow::Cow<'_, HealthFacts> {
        let Some(rested) = self.rested_since else {
            return std::borrow::Cow::Borrowed(self);
        };
        let mut late = self.clone();
        late.unhealthy.retain(|node| match node.pod {
            NodePod::Updated { created } => created >= rested,
            NodePod::None | NodePod::Old => true,
        });
        late.neighbours
            .updated
            .retain(|node| node.updated >= rested);
        std::borrow::Cow::Owned(late)
    }
}

/// Which gate found the evidence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum HealthCause {
    /// The node gate: nodes turned unhealthy after their update (`NodeUnhealthy`).
    #[default]
    Node,
    /// The neighbours gate: the pods beside the agent were disrupted after the update
    /// (`NeighboursDisrupted`).
    Neighbours,
}

impl HealthCause {
    /// The metric's `cause` label (`node`, `neighbours`).
    pub const fn label(self) -> &'static str {
        match self {
            HealthCause::Node => "node",
            HealthCause::Neighbours => "neighbours",
        }
    }

    /// The failure the cause leads to under `onUnhealthy: Fail`.
    pub const fn failure(self) -> crate::FailureReason {
        match self {
            HealthCause::Node => crate::FailureReason::NodeUnhealthy,
            HealthCause::Neighbours => crate::FailureReason::NeighboursDisrupted,
        }
    }
}

/// What the gates concluded in one pass.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub enum HealthVerdict {
    /// No evidence against the release.
    #[default]
    Healthy,
    /// Nodes turned unhealthy after their update, or their neighbours were disrupted:
    /// evidence against the release.
    NodesUnhealthy {
        /// Which gate speaks.
        cause: HealthCause,
        /// The nodes, at most [`MAX_UNHEALTHY_LISTED`], earliest first.
        nodes: Vec<UnhealthyNode>,
        /// How many there are in all.
        count: u32,
    },
}

impl HealthVerdict {
    /// The nodes named, if any.
    pub fn nodes(&self) -> &[UnhealthyNode] {
        match self {
            HealthVerdict::Healthy => &[],
            HealthVerdict::NodesUnhealthy { nodes, .. } => nodes,
        }
    }
}

/// Every gate over `facts`, in order; the first with evidence speaks. At rest, over the late
/// updates only ([`HealthFacts::rested_since`]).
pub fn judge(facts: &HealthFacts) -> HealthVerdict {
    let facts = &*facts.late_updates_only();
    let judgement = judge_nodes(facts);
    if judgement.is_evidence() {
        let count = u32::try_from(judgement.broken.len()).unwrap_or(u32::MAX);
        let nodes = judgement
            .broken
            .into_iter()
            .take(MAX_UNHEALTHY_LISTED)
            .cloned()
            .collect();
        return HealthVerdict::NodesUnhealthy {
            cause: HealthCause::Node,
            nodes,
            count,
        };
    }
    let judgement = judge_neighbours(&facts.policy.neighbours, &facts.neighbours)
        .without_answered(facts.answered);
    if judgement.is_evidence() {
        let count = u32::try_from(judgement.disrupted.len()).unwrap_or(u32::MAX);
        let baseline = (judgement.baseline, facts.neighbours.baseline_nodes);
        let nodes = judgement
            .disrupted
            .into_iter()
            .take(MAX_UNHEALTHY_LISTED)
            .map(|node| disrupted_node(node, baseline))
            .collect();
        return HealthVerdict::NodesUnhealthy {
            cause: HealthCause::Neighbours,
            nodes,
            count,
        };
    }
    HealthVerdict::Healthy
}

/// A node whose neighbours were disrupted, as the status names it: `Neighbours` with the
/// disrupted of the counted (`3/3`), how, and the baseline (disrupted of the nodes not yet
/// updated that have neighbours).
fn disrupted_node(node: &NeighbourNode, (disrupted, of): (u32, u32)) -> UnhealthyNode {
    let tally = &node.tally;
    UnhealthyNode {
        node: node.node.clone(),
        since: tally.first.unwrap_or(node.updated),
        seen: NodeSeen {
            condition: "Neighbours".to_owned(),
            status: format!("{}/{}", tally.disrupted(), tally.pods),
            reason: "NeighboursDisrupted".to_owned(),
            message: format!(
                "{} of {} pods beside the agent disrupted after its update ({} lost readiness, {} restarted); baseline: {disrupted} of {of} nodes not updated",
                tally.disrupted(),
                tally.pods,
                tally.lost_readiness,
                tally.restarted
            ),
        },
        pod: NodePod::Updated {
            created: node.updated,
        },
    }
}

/// How much longer the canary soaks: `Some(left)` while its pod has been ready for less than
/// `canary_soak`, `None` once it has (or with no soak, or no ready canary yet: the driver
/// waits for one anyway). A `Ready` time in the future (clock skew) soaks the whole soak from
/// now, never less.
pub fn soak_left(facts: &HealthFacts) -> Option<Duration> {
    let soak = facts.policy.canary_soak;
    let since = facts.canary_ready_since?;
    if soak.is_zero() {
        return None;
    }
    let ready_for = u64::try_from(facts.now.seconds_since(since)).unwrap_or(0);
    let left = soak.saturating_sub(Duration::from_secs(ready_for));
    (!left.is_zero()).then_some(left)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(soak: u64, now: i64, ready: Option<i64>) -> HealthFacts {
        HealthFacts {
            policy: HealthPolicy {
                canary_soak: Duration::from_secs(soak),
                ..HealthPolicy::default()
            },
            now: Stamp(now),
            canary_ready_since: ready.map(Stamp),
            answered: None,
            ..HealthFacts::default()
        }
    }

    #[test]
    fn the_soak_counts_from_the_canary_pods_ready_time() {
        assert_eq!(
            soak_left(&facts(30, 110, Some(100))),
            Some(Duration::from_secs(20))
        );
        assert_eq!(soak_left(&facts(30, 130, Some(100))), None, "soaked");
        assert_eq!(
            soak_left(&facts(30, 500, Some(100))),
            None,
            "restart: still soaked"
        );
        assert_eq!(
            soak_left(&facts(30, 100, None)),
            None,
            "no ready canary yet"
        );
        assert_eq!(soak_left(&facts(0, 100, Some(100))), None, "no soak");
        assert_eq!(
            soak_left(&facts(30, 90, Some(100))),
            Some(Duration::from_secs(30)),
            "a Ready time ahead of our clock soaks the whole soak"
        );
    }

    #[test]
    fn defaults_follow_the_compatibility() {
        assert_eq!(HealthPolicy::default().canary_soak, DEFAULT_CANARY_SOAK);
        assert_eq!(HealthPolicy::kubevirt().canary_soak, Duration::ZERO);
        assert_eq!(HealthPolicy::default().window, Duration::from_secs(600));
        assert_eq!(HealthPolicy::default().on_unhealthy, OnUnhealthy::Fail);
        assert_eq!("hold".parse(), Ok(OnUnhealthy::Hold));
        assert!("Stop".parse::<OnUnhealthy>().is_err());
    }
}
