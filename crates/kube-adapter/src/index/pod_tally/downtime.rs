//! Agent downtime, measured from the pod watch's events (issue 50): per node, the seconds
//! between the DaemonSet's last ready pod on it stopping being ready (deleted, terminating or
//! not ready) and a pod on it being ready again.
//!
//! Kept beside the counts of one pod group ([`PodTally`](super::PodTally)), moved by the same
//! events, so that no pass walks the pods for it: per node only how many of the group's pods
//! on it are ready (keyed by the hash of the node's name, a few bytes a node at 65,000 nodes),
//! and by name only the nodes that are without a ready pod now, with when that began. A gap
//! ends at the new pod's `Ready` transition time (the kubelet's clock, not the event's
//! arrival); it begins at the event that took the node's last ready pod away (the
//! controller's clock: a deletion carries no time).
//!
//! Invariants: a gap begins only when a node goes from some ready pod to none through an
//! event seen live (a pod that joins not ready, as on a fresh install or in a relist, begins
//! none), so a node is never counted twice for one gap; with surge (the new pod ready before
//! the old one goes) no gap begins at all. Closed gaps wait in [`Downtime::drain`] for the
//! next pass, which adds them to the status (the status, not this tally, is what survives a
//! restart).
//!
//! What a restart (or a relist) loses: a relist carries the open gaps of nodes still without
//! a ready pod over from the tally it replaces; a restarted controller starts with none, so the
//! gaps open at the restart and those that both began and ended while it was away are not
//! measured. The totals already in the status stay.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};

use canary_predicates::{PodFacts, PodSummary, pod_is_ready};

/// Most closed gaps kept between two passes (the worst and the totals stay exact beyond it;
/// only the histogram misses the rest).
const KEPT_GAPS: usize = 65_536;

/// One node's gap, closed: which node and how many seconds it went without a ready pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DowntimeGap {
    /// The node.
    pub node: String,
    /// Seconds without a ready agent pod.
    pub seconds: u64,
}

/// The gaps closed since the pod index last handed them over ([`crate::index::OwnerIndex::drain_downtime`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClosedGaps {
    /// The gaps, in the order they closed (at most 65,536).
    pub gaps: Vec<DowntimeGap>,
    /// Gaps closed in all (more than `gaps` when some were not kept).
    pub count: u64,
    /// Their node-seconds in all.
    pub node_seconds: u64,
}

impl ClosedGaps {
    fn push(&mut self, gap: DowntimeGap) {
        self.count = self.count.saturating_add(1);
        self.node_seconds = self.node_seconds.saturating_add(gap.seconds);
        if self.gaps.len() < KEPT_GAPS {
            self.gaps.push(gap);
        }
    }

    /// Whether no gap closed.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
}

/// The downtime of one pod group's nodes; see the module docs.
#[derive(Debug, Clone, Default)]
pub struct Downtime {
    /// Ready, non-terminating pods of the group per node, by the hash of the node's name; a
    /// node with none is left out.
    ready_on: HashMap<u64, u16>,
    /// The nodes without a ready pod since a live event took their last one away: when.
    down_since: HashMap<Box<str>, i64>,
    closed: ClosedGaps,
}

/// Whether `pod` gives its node a ready agent: ready and not terminating.
fn serves(pod: &PodSummary) -> bool {
    pod_is_ready(pod) && !pod.is_terminating()
}

fn node_hash(node: &str) -> u64 {
    let mut hasher = DefaultHasher::new();
    node.hash(&mut hasher);
    hasher.finish()
}

impl Downtime {
    /// Moves the downtime by one pod change seen at `at` (seconds since the epoch); `live`
    /// is false while a relist is being built (no gap begins then).
    pub(super) fn replace(
        &mut self,
        old: Option<&PodSummary>,
        new: Option<&PodSummary>,
        at: i64,
        live: bool,
    ) {
        let before = old
            .filter(|pod| serves(pod))
            .and_then(|pod| pod.node_name());
        let after = new
            .filter(|pod| serves(pod))
            .and_then(|pod| pod.node_name());
        if before == after {
            return;
        }
        if let Some(node) = before {
            let key = node_hash(node);
            let left = match self.ready_on.get_mut(&key) {
                Some(count) => {
                    *count = count.saturating_sub(1);
                    *count
                }
                None => 0,
            };
            if left == 0 {
                self.ready_on.remove(&key);
                if live {
                    self.down_since.entry(node.into()).or_insert(at);
                }
            }
        }
        if let Some(node) = after {
            let count = self.ready_on.entry(node_hash(node)).or_default();
            *count = count.saturating_add(1);
            if let Some(since) = self.down_since.remove(node) {
                // The kubelet's time of readiness when the pod carries it.
                let ready = new.and_then(PodSummary::ready_since).unwrap_or(at);
                let seconds = u64::try_from(ready.saturating_sub(since)).unwrap_or(0);
                self.closed.push(DowntimeGap {
                    node: node.to_owned(),
                    seconds,
                });
            }
        }
    }

    /// Takes the gaps closed since the last call.
    pub(super) fn drain(&mut self) -> ClosedGaps {
        std::mem::take(&mut self.closed)
    }

    /// Takes over what `stale`, the tally a relist replaces, measured: the gaps it closed and
    /// not yet drained, and its open gaps of nodes still without a ready pod.
    pub(super) fn carry_over(&mut self, stale: &mut Downtime) {
        for gap in std::mem::take(&mut stale.closed.gaps) {
            self.closed.push(gap);
        }
        for (node, since) in stale.down_since.drain() {
            if !self.ready_on.contains_key(&node_hash(&node)) {
                self.down_since.insert(node, since);
            }
        }
    }

    /// Whether nothing is open or waiting for a pass.
    pub(super) fn is_idle(&self) -> bool {
        self.down_since.is_empty() && self.closed.is_empty()
    }

    /// The nodes without a ready pod now, since a live event.
    #[cfg(test)]
    fn open(&self) -> usize {
        self.down_since.len()
    }
}

impl PartialEq for Downtime {
    /// Downtime is history, not a function of the pods: two tallies of the same pods compare
    /// equal whatever they measured (the debug recount check compares counts only).
    fn eq(&self, _other: &Self) -> bool {
        true
    }
}

impl Eq for Downtime {}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ContainerStatus, Pod, PodCondition, PodSpec, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
    use k8s_openapi::jiff::Timestamp;

    fn pod(name: &str, node: &str, ready_at: Option<i64>, terminating: bool) -> PodSummary {
        let ready = if ready_at.is_some() { "True" } else { "False" };
        PodSummary::of(&Pod {
            metadata: ObjectMeta {
                namespace: Some("ns".into()),
                name: Some(name.into()),
                deletion_timestamp: terminating.then_some(Time(Timestamp::UNIX_EPOCH)),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec {
                node_name: Some(node.into()),
                ..PodSpec::default()
            }),
            status: Some(PodStatus {
                phase: Some("Running".into()),
                container_statuses: Some(vec![ContainerStatus {
                    name: "agent".into(),
                    ready: ready_at.is_some(),
                    ..ContainerStatus::default()
                }]),
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: ready.to_owned(),
                    last_transition_time: ready_at
                        .and_then(|s| Timestamp::from_second(s).ok())
                        .map(Time),
                    ..PodCondition::default()
                }]),
                ..PodStatus::default()
            }),
        })
    }

    #[test]
    fn a_replacement_is_one_gap_from_the_old_pods_loss_to_the_new_pods_readiness() {
        let mut downtime = Downtime::default();
        let old = pod("a-old", "n1", Some(5), false);
        downtime.replace(None, Some(&old), 10, true);
        let gone = pod("a-old", "n1", Some(5), true);
        downtime.replace(Some(&old), Some(&gone), 100, true);
        downtime.replace(Some(&gone), None, 130, true);
        let new = pod("a-new", "n1", None, false);
        downtime.replace(None, Some(&new), 131, true);
        assert_eq!(downtime.open(), 1);
        let ready = pod("a-new", "n1", Some(142), false);
        downtime.replace(Some(&new), Some(&ready), 150, true);
        let closed = downtime.drain();
        assert_eq!(
            closed.gaps,
            [DowntimeGap {
                node: "n1".into(),
                seconds: 42
            }]
        );
        assert_eq!((closed.count, closed.node_seconds), (1, 42));
        assert!(downtime.drain().is_empty(), "drained once");
        assert_eq!(downtime.open(), 0);
    }

    #[test]
    fn a_surged_node_keeps_a_ready_pod_and_has_no_gap() {
        let mut downtime = Downtime::default();
        let old = pod("old", "n1", Some(5), false);
        downtime.replace(None, Some(&old), 10, true);
        let new = pod("new", "n1", None, false);
        downtime.replace(None, Some(&new), 20, true);
        let new_ready = pod("new", "n1", Some(25), false);
        downtime.replace(Some(&new), Some(&new_ready), 26, true);
        downtime.replace(Some(&old), None, 40, true);
        assert!(downtime.drain().is_empty());
        assert_eq!(downtime.open(), 0);
    }

    #[test]
    fn a_fresh_node_or_a_relist_begins_no_gap() {
        let mut downtime = Downtime::default();
        let pending = pod("p", "n1", None, false);
        downtime.replace(None, Some(&pending), 10, true);
        downtime.replace(
            Some(&pending),
            Some(&pod("p", "n1", Some(30), false)),
            31,
            true,
        );
        assert!(downtime.drain().is_empty(), "an install is not downtime");
        let mut relisted = Downtime::default();
        relisted.replace(None, Some(&pod("q", "n2", Some(1), false)), 50, false);
        relisted.replace(Some(&pod("q", "n2", Some(1), false)), None, 60, false);
        assert_eq!(relisted.open(), 0);
    }

    #[test]
    fn a_relist_carries_the_open_gaps_of_nodes_still_down() {
        let mut stale = Downtime::default();
        for node in ["n1", "n2"] {
            let ready = pod(node, node, Some(1), false);
            stale.replace(None, Some(&ready), 2, true);
            stale.replace(Some(&ready), None, 10, true);
        }
        let mut fresh = Downtime::default();
        fresh.replace(None, Some(&pod("n2-new", "n2", Some(15), false)), 20, false);
        fresh.carry_over(&mut stale);
        assert_eq!(fresh.open(), 1, "n2 came back during the relist");
        fresh.replace(
            Some(&pod("n1-new", "n1", None, false)),
            Some(&pod("n1-new", "n1", Some(40), false)),
            41,
            true,
        );
        assert_eq!(fresh.drain().node_seconds, 30);
    }
}
