//! The node-health gate: which unhealthy nodes are evidence against the release, as a table
//! whose rows name their reason ([`NodeRow`]), then the outage rule over all of them.
//!
//! Per unhealthy node (the facts hold only those, and only nodes that still exist: a node
//! deleted by a scale-down is neither deferred nor evidence):
//!
//! | row | when | evidence? |
//! |---|---|---|
//! | [`NodeRow::NotUpdated`] | its pod is old, or it has none | no: deferred as before, and counted as the outage baseline |
//! | [`NodeRow::BrokeBeforeUpdate`] | unhealthy since before its pod was created, or less than [`CLOCK_SKEW_MARGIN`] after | no: deferred; a node unhealthy before its update never fails a rollout |
//! | [`NodeRow::BrokeAfterWindow`] | unhealthy since more than `window` after its pod was created | no: no longer judged |
//! | [`NodeRow::BrokeAfterUpdate`] | otherwise | yes |
//! | *answered* | one of the above, unhealthy since no later than a person resumed the hold that named it ([`HealthFacts::answered`]) | no: a person decided to go on |
//!
//! **Clock skew.** The two times compared are written by different clocks: the pod's
//! `creationTimestamp` by the API server, a condition's `lastTransitionTime` by the kubelet
//! (its own clock) or, for a node that stopped reporting, by the node lifecycle controller
//! (the control plane's clock, 40 s or more after the node went silent). Both are whole
//! seconds. A node unhealthy before its update but whose kubelet clock runs ahead would look
//! broken after it; so a node counts as broken after its update only when its transition is
//! more than [`CLOCK_SKEW_MARGIN`] after the pod's creation. Five seconds covers NTP-synced
//! clocks (Kubernetes needs them for its certificates and leases) and the truncation to
//! seconds; a release cannot break a node faster than its pod starts and reports anyway, and a
//! node that stops reporting is marked by the control plane tens of seconds later.
//!
//! **Flaps.** Only the current state is judged: a node that broke after its update and
//! recovered before a pass saw it is missed (the node cache starts a pass on every change of
//! health, so only a flap shorter than a pass goes unseen). A node that was unhealthy,
//! recovered, then was updated, then broke has a transition after the update: evidence. A node
//! that broke after the update is judged from the cluster's timestamps, never from memory: a
//! restarted controller judges it the same.
//!
//! **Outages.** A zone going down takes out updated and not-yet-updated nodes alike. Over the
//! same time (since the earliest creation of a pod on a node that broke after its update), the
//! nodes of the DaemonSet not updated that turned unhealthy are the baseline: the updated
//! nodes are evidence only when more of them broke than baseline nodes did
//! ([`NodeJudgement::is_evidence`]). Counts, not rates: in the canary step one updated node
//! faces hundreds of old ones, and a rate of 1/1 against 10/1000 would blame the release for a
//! zone outage that happened to include the canary. A release that breaks its node while an
//! unrelated node of the DaemonSet also fails in the same minutes is not failed at once: its
//! node is deferred, and the next broken node (which the drivers' budgets reach slowly while
//! nodes are down) tips the count.

use super::{HealthFacts, NodePod, UnhealthyNode};
use crate::health::Stamp;

/// How much later than the pod's creation a node's transition must be to count as after it.
pub const CLOCK_SKEW_MARGIN_SECONDS: i64 = 5;

/// [`CLOCK_SKEW_MARGIN_SECONDS`] as a duration.
pub const CLOCK_SKEW_MARGIN: std::time::Duration =
    std::time::Duration::from_secs(CLOCK_SKEW_MARGIN_SECONDS.unsigned_abs());

/// Why an unhealthy node is or is not evidence against the release.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NodeRow {
    /// Its pod is not on the target (or it has none): the release never ran there.
    NotUpdated,
    /// Unhealthy since before its pod was replaced (within the clock-skew margin).
    BrokeBeforeUpdate,
    /// Unhealthy since later than the window after its pod was replaced.
    BrokeAfterWindow,
    /// Healthy when its pod was replaced, unhealthy within the window after: evidence.
    BrokeAfterUpdate,
}

impl NodeRow {
    /// The row of `node` under a window of `window_seconds`.
    pub fn of(node: &UnhealthyNode, window_seconds: i64) -> NodeRow {
        let NodePod::Updated { created } = node.pod else {
            return NodeRow::NotUpdated;
        };
        let after = node.since.seconds_since(created);
        if after <= CLOCK_SKEW_MARGIN_SECONDS {
            NodeRow::BrokeBeforeUpdate
        } else if after > window_seconds {
            NodeRow::BrokeAfterWindow
        } else {
            NodeRow::BrokeAfterUpdate
        }
    }

    /// The row's reason, as the documentation and the logs say it.
    pub const fn reason(self) -> &'static str {
        match self {
            NodeRow::NotUpdated => "not updated: deferred, and the outage baseline",
            NodeRow::BrokeBeforeUpdate => {
                "unhealthy since before its update (5 s clock-skew margin): deferred"
            }
            NodeRow::BrokeAfterWindow => "unhealthy since after the window: no longer judged",
            NodeRow::BrokeAfterUpdate => "healthy at its update, unhealthy within the window",
        }
    }

    /// The row is evidence against the release.
    pub const fn is_evidence(self) -> bool {
        matches!(self, NodeRow::BrokeAfterUpdate)
    }
}

/// The gate's reading of one pass's unhealthy nodes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeJudgement<'a> {
    /// The nodes that broke after their update, earliest first (then by name).
    pub broken: Vec<&'a UnhealthyNode>,
    /// Not-updated nodes that turned unhealthy since the earliest update among `broken`.
    pub baseline: u32,
}

impl NodeJudgement<'_> {
    /// The broken nodes are evidence: more of them than the baseline (an outage that takes
    /// updated and old nodes alike is no evidence).
    pub fn is_evidence(&self) -> bool {
        u32::try_from(self.broken.len()).unwrap_or(u32::MAX) > self.baseline
    }
}

/// The node-health gate over `facts`.
pub fn judge_nodes(facts: &HealthFacts) -> NodeJudgement<'_> {
    let window = i64::try_from(facts.policy.window.as_secs()).unwrap_or(i64::MAX);
    let mut broken: Vec<&UnhealthyNode> = facts
        .unhealthy
        .iter()
        .filter(|node| NodeRow::of(node, window).is_evidence())
        .filter(|node| facts.answered.is_none_or(|answered| node.since > answered))
        .collect();
    broken.sort_by(|a, b| (a.since, &a.node).cmp(&(b.since, &b.node)));
    let first_update = broken
        .iter()
        .filter_map(|node| match node.pod {
            NodePod::Updated { created } => Some(created),
            _ => None,
        })
        .min();
    let baseline = first_update.map_or(0, |since: Stamp| {
        let old_broken = facts
            .unhealthy
            .iter()
            .filter(|node| NodeRow::of(node, window) == NodeRow::NotUpdated)
            .filter(|node| node.since >= since)
            .count();
        u32::try_from(old_broken).unwrap_or(u32::MAX)
    });
    NodeJudgement { broken, baseline }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::{HealthPolicy, HealthVerdict, judge};
    use std::time::Duration;

    fn node(name: &str, since: i64, pod: NodePod) -> UnhealthyNode {
        UnhealthyNode {
            node: name.into(),
            since: Stamp(since),
            pod,
            ..UnhealthyNode::default()
        }
    }

    fn updated(created: i64) -> NodePod {
        NodePod::Updated {
            created: Stamp(created),
        }
    }

    fn facts(unhealthy: Vec<UnhealthyNode>) -> HealthFacts {
        HealthFacts {
            policy: HealthPolicy::default(),
            now: Stamp(10_000),
            unhealthy,
            ..HealthFacts::default()
        }
    }

    /// A person resumed the hold that named a node: that node is evidence no more, one that
    /// breaks after the resume is.
    #[test]
    fn a_node_answered_by_a_resume_is_no_evidence_and_a_later_one_is() {
        let mut answered = facts(vec![node("n1", 1_100, updated(1_000))]);
        assert!(judge_nodes(&answered).is_evidence());
        answered.answered = Some(Stamp(1_200));
        assert!(!judge_nodes(&answered).is_evidence(), "answered");
        answered.unhealthy.push(node("n2", 1_300, updated(1_250)));
        let judgement = judge_nodes(&answered);
        assert!(judgement.is_evidence());
        assert_eq!(judgement.broken.len(), 1);
        assert_eq!(judgement.broken[0].node, "n2");
    }

    /// Each row, with the reason it names.
    #[test]
    fn each_row_names_its_reason() {
        let window = 600;
        let rows = [
            (node("old", 1000, NodePod::Old), NodeRow::NotUpdated),
            (node("none", 1000, NodePod::None), NodeRow::NotUpdated),
            (
                node("before", 990, updated(1000)),
                NodeRow::BrokeBeforeUpdate,
            ),
            (
                node("same second", 1000, updated(1000)),
                NodeRow::BrokeBeforeUpdate,
            ),
            (
                node("skew", 1005, updated(1000)),
                NodeRow::BrokeBeforeUpdate,
            ),
            (
                node("after", 1006, updated(1000)),
                NodeRow::BrokeAfterUpdate,
            ),
            (
                node("at the window", 1600, updated(1000)),
                NodeRow::BrokeAfterUpdate,
            ),
            (
                node("past the window", 1601, updated(1000)),
                NodeRow::BrokeAfterWindow,
            ),
        ];
        for (node, row) in rows {
            assert_eq!(NodeRow::of(&node, window), row, "{}", node.node);
            assert!(!row.reason().is_empty());
            assert_eq!(row.is_evidence(), row == NodeRow::BrokeAfterUpdate);
        }
    }

    #[test]
    fn a_node_broken_after_its_update_is_evidence() {
        let facts = facts(vec![node("n1", 1060, updated(1000))]);
        let HealthVerdict::NodesUnhealthy { nodes, count, .. } = judge(&facts) else {
            panic!("evidence expected");
        };
        assert_eq!((nodes.len(), count), (1, 1));
        assert_eq!(nodes[0].node, "n1");
    }

    #[test]
    fn a_node_unhealthy_before_its_update_never_fails_a_rollout() {
        // The DaemonSet controller replaces pods on NotReady nodes too (MaxUnavailable
        // driver): the new pod is created after the node broke.
        let facts = facts(vec![node("n1", 900, updated(1000))]);
        assert_eq!(judge(&facts), HealthVerdict::Healthy);
    }

    /// Unhealthy, recovered, updated, broken again: the transition that counts is the last.
    #[test]
    fn a_node_that_recovered_then_was_updated_then_broke_is_evidence() {
        let facts = facts(vec![node("n1", 1200, updated(1100))]);
        assert!(judge_nodes(&facts).is_evidence());
    }

    #[test]
    fn a_node_that_breaks_after_the_window_is_not_judged() {
        let mut facts = facts(vec![node("n1", 1000 + 601, updated(1000))]);
        assert_eq!(judge(&facts), HealthVerdict::Healthy);
        facts.policy.window = Duration::from_secs(3600);
        assert!(
            judge_nodes(&facts).is_evidence(),
            "a wider window judges it"
        );
    }

    /// The judgement reads timestamps only: the same facts, whatever the controller's clock
    /// or memory (a restarted controller), give the same verdict.
    #[test]
    fn the_judgement_survives_a_restart() {
        let mut facts = facts(vec![node("n1", 1060, updated(1000))]);
        let before = judge(&facts);
        facts.now = Stamp(99_999);
        assert_eq!(judge(&facts), before);
    }

    #[test]
    fn a_zone_outage_that_takes_old_nodes_alike_is_no_evidence() {
        let mut unhealthy = vec![node("canary", 1100, updated(1000))];
        unhealthy.extend((0..10).map(|i| node(&format!("old-{i}"), 1100 + i, NodePod::Old)));
        let outage = facts(unhealthy);
        let judgement = judge_nodes(&outage);
        assert_eq!((judgement.broken.len(), judgement.baseline), (1, 10));
        assert!(!judgement.is_evidence());
        assert_eq!(judge(&outage), HealthVerdict::Healthy);
    }

    #[test]
    fn old_nodes_that_broke_before_the_first_update_are_no_baseline() {
        let mut unhealthy = vec![node("canary", 1100, updated(1000))];
        unhealthy.extend((0..3).map(|i| node(&format!("old-{i}"), 500 + i, NodePod::Old)));
        let facts = facts(unhealthy);
        let judgement = judge_nodes(&facts);
        assert_eq!(judgement.baseline, 0);
        assert!(judgement.is_evidence());
    }

    #[test]
    fn a_release_that_breaks_more_nodes_than_the_background_is_evidence() {
        let mut unhealthy: Vec<_> = (0..5)
            .map(|i| node(&format!("new-{i}"), 1100 + i, updated(1000 + i)))
            .collect();
        unhealthy.push(node("old-0", 1050, NodePod::Old));
        let facts = facts(unhealthy);
        let judgement = judge_nodes(&facts);
        assert_eq!((judgement.broken.len(), judgement.baseline), (5, 1));
        assert!(judgement.is_evidence());
    }

    #[test]
    fn at_most_ten_nodes_are_named_with_the_count_of_all() {
        let unhealthy = (0..25)
            .map(|i| node(&format!("n{i:02}"), 1100 - i, updated(1000 - 2 * i)))
            .collect();
        let HealthVerdict::NodesUnhealthy { nodes, count, .. } = judge(&facts(unhealthy)) else {
            panic!("evidence expected");
        };
        assert_eq!((nodes.len(), count), (10, 25));
        assert_eq!(nodes[0].node, "n24", "earliest first");
    }

    #[test]
    fn no_unhealthy_node_no_evidence() {
        assert_eq!(judge(&facts(Vec::new())), HealthVerdict::Healthy);
    }
}
