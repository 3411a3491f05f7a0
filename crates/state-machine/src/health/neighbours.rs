//! The neighbours gate: a release that breaks the pods beside it (a CNI that is Ready but
//! breaks pod networking, a CSI driver that breaks the mounts of its neighbours) stops on one
//! node, with reason `NeighboursDisrupted`.
//!
//! **Per pod** ([`NeighbourRow`], a table whose rows name their reason): a neighbour is a pod
//! on the node that is not the DaemonSet's own (the caller leaves those out, and pods that
//! ended or are being deleted: a completed Job or an evicted pod is no disruption). Over the
//! span from the node's update (its agent pod's creation) to the end of the window:
//!
//! | row | when | counted? |
//! |---|---|---|
//! | [`NeighbourRow::NotThen`] | created after the update (both times are the API server's) | no: it was not there |
//! | [`NeighbourRow::NotReadyThen`] | not ready since before the update | no: it was not ready at the update |
//! | [`NeighbourRow::Steady`] | ready, and no container exited since the update | yes, not disrupted |
//! | [`NeighbourRow::DisruptedAfterWindow`] | its disruption came after the window | yes, not disrupted |
//! | [`NeighbourRow::Restarted`] | a container's last run ended after the update, within the window | yes, disrupted |
//! | [`NeighbourRow::LostReadiness`] | not ready since after the update, within the window | yes, disrupted |
//!
//! Both times read are the cluster's (`lastTransitionTime` of `Ready`, a container's
//! `lastState.terminated.finishedAt`), so a restarted controller judges the same. Those two
//! are the kubelet's clock, compared with the agent pod's creation (the API server's): a
//! disruption counts only more than the clock-skew margin (5 s) after the update, as the
//! node gate does; the creation times of the agent and its neighbours are both the API
//! server's, compared without a margin.
//!
//! **Per node** ([`NeighbourPolicy::disrupts`]): a node's neighbours are disrupted when at
//! least `minPods` of the pods counted are disrupted and they are at least `minPercent` of
//! them. Defaults 2 and 50%: a single pod that restarts (pods do) never speaks for a node,
//! and a CNI that breaks networking breaks nearly every pod beside it. A node with no
//! neighbour, or one only, is never judged by this gate (no evidence either way: the node
//! gate and the agent's own pod still are).
//!
//! **Against the baseline.** The nodes not yet updated are measured the same way over the
//! same time (since the first update still in the window): the release's disrupted nodes are
//! evidence only when there are more of them than disrupted baseline nodes
//! ([`NeighbourJudgement::is_evidence`]). Counts, not rates, as the node gate does: in the
//! canary step one updated node faces hundreds of old ones, so the canary alone (1 of 1
//! against 0 of 49) is evidence, and an unrelated incident that disrupts the pods of one old
//! node in the same minutes holds the judgement until a second updated node is disrupted.
//! The baseline also keeps a cluster-wide incident (a registry or DNS outage that restarts
//! pods everywhere) from being blamed on the release.
//!
//! **Answered.** After a person resumed a hold of `onUnhealthy: Hold`, the nodes whose
//! neighbours were first disrupted no later than the resume are evidence no more
//! ([`NeighbourJudgement::without_answered`]); one disrupted after it holds again.

use super::{CLOCK_SKEW_MARGIN_SECONDS, Stamp};

/// `spec.health.neighbours.minPods` by default.
pub const DEFAULT_NEIGHBOURS_MIN_PODS: u32 = 2;

/// `spec.health.neighbours.minPercent` by default.
pub const DEFAULT_NEIGHBOURS_MIN_PERCENT: u32 = 50;

/// The neighbours gate's settings (`spec.health.neighbours`, checked).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NeighbourPolicy {
    /// The gate judges at all (`enabled`, default true).
    pub enabled: bool,
    /// The fewest disrupted pods that make a node's neighbours disrupted (at least 1).
    pub min_pods: u32,
    /// The smallest share of the node's counted neighbours, in percent (1 to 100).
    pub min_percent: u32,
}

impl Default for NeighbourPolicy {
    fn default() -> Self {
        NeighbourPolicy {
            enabled: true,
            min_pods: DEFAULT_NEIGHBOURS_MIN_PODS,
            min_percent: DEFAULT_NEIGHBOURS_MIN_PERCENT,
        }
    }
}

impl NeighbourPolicy {
    /// Whether `tally` is a node whose neighbours are disrupted.
    pub fn disrupts(&self, tally: &NeighbourTally) -> bool {
        let disrupted = tally.disrupted();
        tally.pods > 0
            && disrupted >= self.min_pods.max(1)
            && u64::from(disrupted) * 100 >= u64::from(self.min_percent) * u64::from(tally.pods)
    }
}

/// A neighbour pod as the gate reads it: times the cluster wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct NeighbourPod {
    /// `metadata.creationTimestamp`.
    pub created: Stamp,
    /// Its `Ready` condition is `True`.
    pub ready: bool,
    /// The `Ready` condition's `lastTransitionTime` (its creation when it has none).
    pub ready_since: Stamp,
    /// The latest `lastState.terminated.finishedAt` of its containers: when one last exited.
    pub last_exit: Option<Stamp>,
}

/// Why a neighbour pod is or is not counted, and disrupted, for a node updated at `since`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NeighbourRow {
    /// Created after the update: it was not there.
    NotThen,
    /// Not ready since before the update: it was not ready then.
    NotReadyThen,
    /// Ready, nothing exited since the update.
    Steady,
    /// Disrupted, but later than the window after the update.
    DisruptedAfterWindow,
    /// A container exited after the update, within the window.
    Restarted,
    /// Not ready since after the update, within the window.
    LostReadiness,
}

impl NeighbourRow {
    /// The row of `pod` on a node updated at `since`, judged until `since + window_seconds`.
    pub fn of(pod: &NeighbourPod, since: Stamp, window_seconds: i64) -> NeighbourRow {
        let after = |stamp: Stamp| stamp.seconds_since(since);
        // Both creation times are the API server's: no clock-skew margin between them.
        if after(pod.created) > 0 {
            return NeighbourRow::NotThen;
        }
        let lost = (!pod.ready)
            .then(|| after(pod.ready_since))
            .filter(|&t| t > CLOCK_SKEW_MARGIN_SECONDS);
        let exited = pod
            .last_exit
            .map(after)
            .filter(|&t| t > CLOCK_SKEW_MARGIN_SECONDS);
        if !pod.ready && lost.is_none() {
            return NeighbourRow::NotReadyThen;
        }
        match (lost, exited) {
            (Some(t), _) if t <= window_seconds => NeighbourRow::LostReadiness,
            (_, Some(t)) if t <= window_seconds => NeighbourRow::Restarted,
            (None, None) => NeighbourRow::Steady,
            _ => NeighbourRow::DisruptedAfterWindow,
        }
    }

    /// The row's reason, as the documentation and the logs say it.
    pub const fn reason(self) -> &'static str {
        match self {
            NeighbourRow::NotThen => "created after the update: not counted",
            NeighbourRow::NotReadyThen => "not ready since before the update: not counted",
            NeighbourRow::Steady => "ready, nothing exited since the update",
            NeighbourRow::DisruptedAfterWindow => "disrupted after the window: not judged",
            NeighbourRow::Restarted => "a container exited after the update: disrupted",
            NeighbourRow::LostReadiness => "lost readiness after the update: disrupted",
        }
    }

    /// The pod counts among the node's neighbours (it was there, and ready, at the update).
    pub const fn is_counted(self) -> bool {
        !matches!(self, NeighbourRow::NotThen | NeighbourRow::NotReadyThen)
    }

    /// The pod is disrupted.
    pub const fn is_disrupted(self) -> bool {
        matches!(self, NeighbourRow::Restarted | NeighbourRow::LostReadiness)
    }
}

/// One node's neighbours over a span: how many were counted, how many were disrupted and
/// how, and when the first disruption was seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct NeighbourTally {
    /// Pods counted (there and ready at the start of the span).
    pub pods: u32,
    /// Of those, not ready since within the span.
    pub lost_readiness: u32,
    /// Of those (and ready), a container exited within the span.
    pub restarted: u32,
    /// The earliest disruption (a `Ready` transition or an exit) within the span.
    pub first: Option<Stamp>,
}

impl NeighbourTally {
    /// The tally of `pods` on a node updated (or, for a baseline node, measured from) at
    /// `since`, judged until `since + window_seconds`.
    pub fn of<'p>(
        pods: impl IntoIterator<Item = &'p NeighbourPod>,
        since: Stamp,
        window_seconds: i64,
    ) -> NeighbourTally {
        let mut tally = NeighbourTally::default();
        for pod in pods {
            let row = NeighbourRow::of(pod, since, window_seconds);
            if !row.is_counted() {
                continue;
            }
            tally.pods += 1;
            let at = match row {
                NeighbourRow::LostReadiness => {
                    tally.lost_readiness += 1;
                    pod.ready_since
                }
                NeighbourRow::Restarted => {
                    tally.restarted += 1;
                    pod.last_exit.unwrap_or(pod.ready_since)
                }
                _ => continue,
            };
            tally.first = Some(tally.first.map_or(at, |first| first.min(at)));
        }
        tally
    }

    /// Pods disrupted.
    pub const fn disrupted(&self) -> u32 {
        self.lost_readiness + self.restarted
    }
}

/// An updated node's neighbours.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct NeighbourNode {
    /// Node name.
    pub node: String,
    /// When its agent pod was replaced (the updated pod's creation).
    pub updated: Stamp,
    /// Its neighbours since then.
    pub tally: NeighbourTally,
}

/// What the neighbours gate reads in one pass (the caller tallies the pods with
/// [`NeighbourTally::of`], so a pass carries one tally per node, never the pods).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct NeighbourFacts {
    /// The nodes on the target whose update is within the window of now.
    pub updated: Vec<NeighbourNode>,
    /// The nodes not yet updated whose neighbours the policy finds disrupted since the first
    /// update of `updated`: the baseline.
    pub baseline_disrupted: u32,
    /// The nodes not yet updated that have neighbours at all.
    pub baseline_nodes: u32,
}

/// The gate's reading of one pass.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NeighbourJudgement<'a> {
    /// The updated nodes whose neighbours are disrupted, earliest disruption first.
    pub disrupted: Vec<&'a NeighbourNode>,
    /// Baseline nodes disrupted over the same time.
    pub baseline: u32,
}

impl NeighbourJudgement<'_> {
    /// The disrupted nodes are evidence: more of them than the baseline.
    pub fn is_evidence(&self) -> bool {
        u32::try_from(self.disrupted.len()).unwrap_or(u32::MAX) > self.baseline
    }

    /// Without the nodes a person answered by resuming a hold of `onUnhealthy: Hold` at
    /// `answered` ([`HealthFacts::answered`](super::HealthFacts::answered)): a node whose
    /// neighbours were first disrupted no later than the resume is evidence no more, as the
    /// node gate does with a node unhealthy since no later than it; a node whose neighbours
    /// are first disrupted after it holds the rollout again.
    #[must_use]
    pub fn without_answered(mut self, answered: Option<Stamp>) -> Self {
        if let Some(answered) = answered {
            self.disrupted
                .retain(|node| node.tally.first.unwrap_or(node.updated) > answered);
        }
        self
    }
}

/// The neighbours gate over `facts` under `policy`.
pub fn judge_neighbours<'a>(
    policy: &NeighbourPolicy,
    facts: &'a NeighbourFacts,
) -> NeighbourJudgement<'a> {
    if !policy.enabled {
        return NeighbourJudgement::default();
    }
    let mut disrupted: Vec<&NeighbourNode> = facts
        .updated
        .iter()
        .filter(|node| policy.disrupts(&node.tally))
        .collect();
    disrupted.sort_by(|a, b| (a.tally.first, &a.node).cmp(&(b.tally.first, &b.node)));
    NeighbourJudgement {
        disrupted,
        baseline: facts.baseline_disrupted,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WINDOW: i64 = 600;

    fn pod(created: i64, ready: bool, ready_since: i64, last_exit: Option<i64>) -> NeighbourPod {
        NeighbourPod {
            created: Stamp(created),
            ready,
            ready_since: Stamp(ready_since),
            last_exit: last_exit.map(Stamp),
        }
    }

    /// A resume answers the nodes disrupted no later than it; a node disrupted after it is
    /// evidence again.
    #[test]
    fn a_resume_answers_the_nodes_disrupted_before_it() {
        let node = |name: &str, first: i64| NeighbourNode {
            node: name.into(),
            updated: Stamp(1_000),
            tally: NeighbourTally {
                pods: 3,
                lost_readiness: 3,
                restarted: 0,
                first: Some(Stamp(first)),
            },
        };
        let mut facts = NeighbourFacts {
            updated: vec![node("n1", 1_060)],
            ..NeighbourFacts::default()
        };
        let policy = NeighbourPolicy::default();
        assert!(judge_neighbours(&policy, &facts).is_evidence());
        let answered = Some(Stamp(1_100));
        assert!(
            !judge_neighbours(&policy, &facts)
                .without_answered(answered)
                .is_evidence(),
            "answered"
        );
        facts.updated.push(node("n2", 1_200));
        let judgement = judge_neighbours(&policy, &facts).without_answered(answered);
        assert!(judgement.is_evidence());
        assert_eq!(judgement.disrupted.len(), 1);
        assert_eq!(judgement.disrupted[0].node, "n2");
    }

    /// Each row, for a node updated at 1000, with the reason it names.
    #[test]
    fn each_row_names_its_reason() {
        let rows = [
            (
                "created after",
                pod(1010, true, 1012, None),
                NeighbourRow::NotThen,
            ),
            (
                "created in the update's second",
                pod(1000, true, 1000, None),
                NeighbourRow::Steady,
            ),
            (
                "created a second later",
                pod(1001, true, 1001, None),
                NeighbourRow::NotThen,
            ),
            (
                "not ready before",
                pod(100, false, 900, None),
                NeighbourRow::NotReadyThen,
            ),
            (
                "not ready within the margin",
                pod(100, false, 1005, None),
                NeighbourRow::NotReadyThen,
            ),
            ("steady", pod(100, true, 200, None), NeighbourRow::Steady),
            (
                "exited before the update",
                pod(100, true, 300, Some(290)),
                NeighbourRow::Steady,
            ),
            (
                "ready again after the update",
                pod(100, true, 1100, None),
                NeighbourRow::Steady,
            ),
            (
                "lost readiness",
                pod(100, false, 1030, None),
                NeighbourRow::LostReadiness,
            ),
            (
                "lost readiness at the window",
                pod(100, false, 1600, None),
                NeighbourRow::LostReadiness,
            ),
            (
                "lost readiness after the window",
                pod(100, false, 1601, None),
                NeighbourRow::DisruptedAfterWindow,
            ),
            (
                "restarted",
                pod(100, true, 1090, Some(1060)),
                NeighbourRow::Restarted,
            ),
            (
                "restarted and not ready",
                pod(100, false, 1061, Some(1060)),
                NeighbourRow::LostReadiness,
            ),
            (
                "restarted after the window",
                pod(100, true, 1700, Some(1650)),
                NeighbourRow::DisruptedAfterWindow,
            ),
        ];
        for (name, pod, row) in rows {
            assert_eq!(NeighbourRow::of(&pod, Stamp(1000), WINDOW), row, "{name}");
            assert!(!row.reason().is_empty());
            assert_eq!(
                row.is_disrupted(),
                matches!(row, NeighbourRow::Restarted | NeighbourRow::LostReadiness),
                "{name}"
            );
        }
    }

    #[test]
    fn a_tally_counts_the_pods_there_and_ready_at_the_update() {
        let pods = [
            pod(100, false, 1030, None),
            pod(100, true, 1090, Some(1040)),
            pod(100, true, 200, None),
            pod(1100, true, 1102, None),
            pod(100, false, 500, None),
        ];
        let tally = NeighbourTally::of(&pods, Stamp(1000), WINDOW);
        assert_eq!(
            tally,
            NeighbourTally {
                pods: 3,
                lost_readiness: 1,
                restarted: 1,
                first: Some(Stamp(1030)),
            }
        );
    }

    fn tally(pods: u32, disrupted: u32) -> NeighbourTally {
        NeighbourTally {
            pods,
            lost_readiness: disrupted,
            restarted: 0,
            first: (disrupted > 0).then_some(Stamp(1030)),
        }
    }

    /// The per-node rule at the defaults (2 pods, 50%), for small numbers.
    #[test]
    fn a_node_is_disrupted_with_two_pods_and_half_of_them() {
        let policy = NeighbourPolicy::default();
        let cases = [
            (0, 0, false, "no neighbours: never judged"),
            (1, 1, false, "one neighbour: never judged at the defaults"),
            (2, 1, false, "one pod restarting is background"),
            (2, 2, true, "both"),
            (3, 2, true, "two of three"),
            (3, 3, true, "all three (breaks-neighbours)"),
            (30, 2, false, "two of thirty: background"),
            (30, 15, true, "half of thirty"),
            (30, 14, false, "just under half"),
        ];
        for (pods, disrupted, expected, name) in cases {
            assert_eq!(policy.disrupts(&tally(pods, disrupted)), expected, "{name}");
        }
        let one = NeighbourPolicy {
            min_pods: 1,
            ..policy
        };
        assert!(
            one.disrupts(&tally(1, 1)),
            "minPods 1 judges a single neighbour"
        );
        let zero = NeighbourPolicy {
            min_pods: 0,
            ..policy
        };
        assert!(
            !zero.disrupts(&tally(3, 0)),
            "a node with nothing disrupted never is"
        );
    }

    fn facts(updated: Vec<(&str, NeighbourTally)>, baseline_disrupted: u32) -> NeighbourFacts {
        NeighbourFacts {
            updated: updated
                .into_iter()
                .map(|(node, tally)| NeighbourNode {
                    node: node.into(),
                    updated: Stamp(1000),
                    tally,
                })
                .collect(),
            baseline_disrupted,
            baseline_nodes: 49,
        }
    }

    /// The canary with 3 neighbours, all disrupted, against 49 old nodes none of which is.
    #[test]
    fn the_canary_alone_is_evidence_against_a_quiet_baseline() {
        let facts = facts(vec![("canary", tally(3, 3))], 0);
        let judgement = judge_neighbours(&NeighbourPolicy::default(), &facts);
        assert!(judgement.is_evidence());
        assert_eq!(judgement.disrupted[0].node, "canary");
    }

    /// An unrelated incident on one old node in the same minutes holds the judgement until a
    /// second updated node is disrupted.
    #[test]
    fn a_disrupted_baseline_node_offsets_one_updated_node() {
        let policy = NeighbourPolicy::default();
        let one = facts(vec![("canary", tally(3, 3))], 1);
        assert!(!judge_neighbours(&policy, &one).is_evidence());
        let two = facts(vec![("canary", tally(3, 3)), ("next", tally(3, 2))], 1);
        assert!(judge_neighbours(&policy, &two).is_evidence());
    }

    #[test]
    fn a_cluster_wide_incident_is_no_evidence() {
        let updated = (0..5).map(|_| ("n", tally(30, 30))).collect();
        let facts = facts(updated, 40);
        assert!(!judge_neighbours(&NeighbourPolicy::default(), &facts).is_evidence());
    }

    #[test]
    fn background_restarts_are_no_evidence() {
        let facts = facts(vec![("a", tally(30, 1)), ("b", tally(3, 1))], 0);
        let judgement = judge_neighbours(&NeighbourPolicy::default(), &facts);
        assert!(judgement.disrupted.is_empty());
        assert!(!judgement.is_evidence());
    }

    #[test]
    fn a_disabled_gate_says_nothing() {
        let facts = facts(vec![("canary", tally(3, 3))], 0);
        let off = NeighbourPolicy {
            enabled: false,
            ..NeighbourPolicy::default()
        };
        assert!(!judge_neighbours(&off, &facts).is_evidence());
    }

    #[test]
    fn disrupted_nodes_are_named_earliest_first() {
        let mut late = tally(3, 3);
        late.first = Some(Stamp(1200));
        let facts = facts(vec![("late", late), ("early", tally(3, 3))], 0);
        let judgement = judge_neighbours(&NeighbourPolicy::default(), &facts);
        let names: Vec<&str> = judgement
            .disrupted
            .iter()
            .map(|n| n.node.as_str())
            .collect();
        assert_eq!(names, ["early", "late"]);
    }
}
