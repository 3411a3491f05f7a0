//! Image pre-pull (issue 50): while the rollout waits (the canary soaks, a pause step holds),
//! the nodes whose agent is replaced next pull the new images, so that their replacement does
//! not pay the pull inside the node's downtime. This module decides, from the nodes wanted
//! and the pre-pull pods that exist, which nodes get a pre-pull pod now and which pre-pull
//! pods go. Which nodes are wanted is each driver's: [`crate::pre_pull_nodes`] for the Pods
//! driver (the next nodes step's nodes, in the order it takes them), the adapter for the
//! MaxUnavailable driver (a first batch of the nodes still on the old revision).
//!
//! # Invariants
//!
//! - At most `max_concurrent` pre-pull pods pull at once: a pod counts from its creation until
//!   it is finished (its images are on its node), and a new one is created only into a free
//!   slot.
//! - A node gets one pre-pull pod per window: a finished pod stays (a terminated pod holds no
//!   resources) as the record that its node has the images, until the window ends; so a
//!   restarted controller, which remembers nothing, reads the same record from the cluster.
//! - Outside a window every pre-pull pod goes, and so does any pod for other images (the
//!   target changed), for a node no longer wanted, or a second one on a node.

use std::collections::HashSet;

/// One pre-pull pod that exists, as the adapter read it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PrePullPod {
    /// Pod name (what a deletion names).
    pub name: String,
    /// The node it is pinned to.
    pub node: String,
    /// Its images are on the node (its containers left `Waiting` for an image, or it ended).
    pub finished: bool,
    /// It pulls the images of the current target (not an earlier one's).
    pub current: bool,
}

/// What to do with pre-pull pods in one pass.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PrePullPlan {
    /// Nodes that get a pre-pull pod now, in the order wanted.
    pub create: Vec<String>,
    /// Pre-pull pods to delete, by name.
    pub delete: Vec<String>,
    /// Pre-pull pods still pulling after this plan (the ones kept and the ones created).
    pub pulling: u32,
}

impl PrePullPlan {
    /// Nothing to create or delete.
    pub fn is_empty(&self) -> bool {
        self.create.is_empty() && self.delete.is_empty()
    }

    /// Pre-pull pods remain after this plan, of the `existing` it was made from: the ones it
    /// creates, or ones it keeps (records of a window, whoever created them: a replica that
    /// took over a window creates none while its predecessor's records cover it). The caller
    /// must list again once the window closes, to delete them.
    pub fn leaves_pods(&self, existing: usize) -> bool {
        !self.create.is_empty() || existing > self.delete.len()
    }
}

/// The plan of one pass: `window` is the nodes wanted, in order (`None`: no window, every
/// pre-pull pod goes), `existing` the pre-pull pods of this rollout, `max_concurrent` how many
/// may pull at once (at least 1 is used).
pub fn plan_pre_pull(
    window: Option<&[String]>,
    existing: &[PrePullPod],
    max_concurrent: u32,
) -> PrePullPlan {
    let Some(wanted) = window else {
        return PrePullPlan {
            delete: existing.iter().map(|pod| pod.name.clone()).collect(),
            ..PrePullPlan::default()
        };
    };
    let wanted_set: HashSet<&str> = wanted.iter().map(String::as_str).collect();
    let mut covered: HashSet<&str> = HashSet::new();
    let mut plan = PrePullPlan::default();
    // Finished pods first: of two pods on a node, the one that holds the record stays.
    let mut ordered: Vec<&PrePullPod> = existing.iter().collect();
    ordered.sort_by(|a, b| (!a.finished, &a.name).cmp(&(!b.finished, &b.name)));
    for pod in ordered {
        let keep =
            pod.current && wanted_set.contains(pod.node.as_str()) && covered.insert(&pod.node);
        if !keep {
            plan.delete.push(pod.name.clone());
        } else if !pod.finished {
            plan.pulling += 1;
        }
    }
    let slots = max_concurrent.max(1).saturating_sub(plan.pulling) as usize;
    let mut seen: HashSet<&str> = HashSet::new();
    plan.create = wanted
        .iter()
        .filter(|node| !covered.contains(node.as_str()) && seen.insert(node.as_str()))
        .take(slots)
        .cloned()
        .collect();
    plan.pulling += u32::try_from(plan.create.len()).unwrap_or(u32::MAX);
    plan
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A replica that takes over a window finds its predecessor's records and creates none:
    /// they are still pods to delete once the window closes (found while reading soak seed
    /// 46001590, whose own cause was the failure's late requeue).
    #[test]
    fn kept_records_are_pods_left_as_much_as_created_ones() {
        let window = nodes(&["n1", "n2"]);
        let records = [pod("p1", "n1", true), pod("p2", "n2", true)];
        let kept = plan_pre_pull(Some(&window), &records, 1);
        assert!(kept.create.is_empty() && kept.delete.is_empty());
        assert!(kept.leaves_pods(records.len()), "the records stay");
        let closed = plan_pre_pull(None, &records, 1);
        assert!(!closed.leaves_pods(records.len()), "all deleted");
        let first = plan_pre_pull(Some(&window), &[], 1);
        assert!(first.leaves_pods(0), "one created");
        assert!(!plan_pre_pull(Some(&[]), &[], 1).leaves_pods(0));
    }

    fn nodes(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    fn pod(name: &str, node: &str, finished: bool) -> PrePullPod {
        PrePullPod {
            name: name.to_owned(),
            node: node.to_owned(),
            finished,
            current: true,
        }
    }

    #[test]
    fn a_window_fills_the_free_slots_in_the_order_wanted() {
        let wanted = nodes(&["n1", "n2", "n3", "n4", "n5"]);
        let plan = plan_pre_pull(Some(&wanted), &[], 2);
        assert_eq!(plan.create, nodes(&["n1", "n2"]));
        assert!(plan.delete.is_empty());
        assert_eq!(plan.pulling, 2);
    }

    #[test]
    fn a_finished_pod_frees_its_slot_and_stays_as_the_record_of_its_node() {
        let wanted = nodes(&["n1", "n2", "n3", "n4"]);
        let existing = [pod("p1", "n1", true), pod("p2", "n2", false)];
        let plan = plan_pre_pull(Some(&wanted), &existing, 2);
        assert_eq!(plan.create, nodes(&["n3"]));
        assert!(plan.delete.is_empty(), "{plan:?}");
        assert_eq!(plan.pulling, 2);
    }

    #[test]
    fn no_slot_no_creation() {
        let wanted = nodes(&["n1", "n2", "n3"]);
        let existing = [pod("p1", "n1", false), pod("p2", "n2", false)];
        let plan = plan_pre_pull(Some(&wanted), &existing, 2);
        assert!(plan.is_empty(), "{plan:?}");
    }

    #[test]
    fn outside_a_window_every_pre_pull_pod_goes() {
        let existing = [pod("p1", "n1", true), pod("p2", "n2", false)];
        let plan = plan_pre_pull(None, &existing, 5);
        assert_eq!(plan.delete, nodes(&["p1", "p2"]));
        assert!(plan.create.is_empty());
        assert_eq!(plan.pulling, 0);
    }

    #[test]
    fn pods_of_another_target_of_a_node_not_wanted_or_a_second_on_a_node_go() {
        let wanted = nodes(&["n1", "n2"]);
        let stale = PrePullPod {
            current: false,
            ..pod("old", "n2", true)
        };
        let existing = [
            pod("a", "n1", false),
            pod("b", "n1", true),
            stale,
            pod("c", "n9", false),
        ];
        let plan = plan_pre_pull(Some(&wanted), &existing, 3);
        let mut deleted = plan.delete.clone();
        deleted.sort();
        // `b` (finished) holds n1's record; `a` is its duplicate.
        assert_eq!(deleted, nodes(&["a", "c", "old"]));
        assert_eq!(plan.create, nodes(&["n2"]));
        assert_eq!(plan.pulling, 1);
    }

    #[test]
    fn a_zero_bound_still_pulls_one_node_at_a_time() {
        let wanted = nodes(&["n1", "n2"]);
        assert_eq!(plan_pre_pull(Some(&wanted), &[], 0).create, nodes(&["n1"]));
    }
}
