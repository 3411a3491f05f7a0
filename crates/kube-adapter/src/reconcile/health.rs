//! The health gates' facts (issue 46): what a pass saw of the unhealthy nodes and of the
//! canary, for the state machine's gates ([`canary_state_machine::health`]), which judge them.
//!
//! Cheap at any size: the node cache keeps the names of its troubled nodes (a condition that
//! may make a node unhealthy, [`crate::watched_node::NodeTally`]), so a pass reads only those,
//! and walks the DaemonSet's pods only when there is one (to find the pod on each). A node
//! deleted (a scale-down) is not in the cache: it is neither deferred nor evidence. Every time
//! comes from the cluster (a pod's `creationTimestamp` and `Ready` transition, a condition's
//! `lastTransitionTime`), so a restarted controller judges as the one before it.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use canary_predicates::{PodFacts, PodSummary};
use canary_state_machine::{HealthFacts, NeighbourFacts, NodePod, NodeSeen, Stamp, UnhealthyNode};

use super::plan::HealthPlan;
use crate::neighbours::NeighbourIndex;
use crate::watched_node::CachedNode;

/// The health facts of a pass at `now`, over the troubled nodes of the cache.
///
/// `pods_on`: the DaemonSet's pod on each of the named nodes, with whether it runs the target
/// (asked only when a node is troubled). `canary_ready_since`: since when the canary's pod is
/// ready, when the driver has one to soak.
pub(crate) fn facts(
    plan: &HealthPlan,
    now: Stamp,
    troubled: &[Arc<CachedNode>],
    pods_on: impl FnOnce(&[&str]) -> HashMap<String, NodePod>,
    canary_ready_since: Option<i64>,
) -> HealthFacts {
    let mut unhealthy: Vec<(&CachedNode, NodeSeen, Stamp)> = troubled
        .iter()
        .filter_map(|node| {
            let (seen, since) = unhealthy_by(node, &plan.node_conditions)?;
            Some((&**node, seen, since))
        })
        .collect();
    unhealthy.sort_by(|a, b| a.0.name.cmp(&b.0.name));
    let pods = if unhealthy.is_empty() {
        HashMap::new()
    } else {
        let names: Vec<&str> = unhealthy
            .iter()
            .map(|(node, ..)| node.name.as_str())
            .collect();
        pods_on(&names)
    };
    HealthFacts {
        policy: plan.policy,
        now,
        unhealthy: unhealthy
            .into_iter()
            .map(|(node, seen, since)| UnhealthyNode {
                node: node.name.clone(),
                since,
                seen,
                pod: pods.get(&node.name).copied().unwrap_or_default(),
            })
            .collect(),
        canary_ready_since: canary_ready_since.map(Stamp),
        neighbours: NeighbourFacts::default(),
        answered: None,
        rested_since: None,
    }
}

/// The neighbours gate's facts of a pass at `now`: the DaemonSet's `pods` (its own, whose
/// controller is `own_uid`) say which nodes are updated (`updated`, from the pod's creation)
/// and which still run an old pod (the baseline); `index` tallies their neighbours. Nothing
/// is read with the gate off, with no neighbour indexed, or with no node updated within the
/// window.
///
/// The `unhealthy` nodes (the node gate's, [`facts`]) are neither: the node lifecycle
/// controller marks every pod of a NotReady node not ready, which says nothing about a
/// release. In the baseline such a node offset the canary's disrupted neighbours for the
/// whole window (one unrelated NotReady node anywhere let a CNI that breaks its neighbours
/// go on: soak seed 4 with image pulls, invariant 32); on an updated node it would have
/// failed the rollout for a node unhealthy since before its update. The node gate speaks
/// for them: `NodeUnhealthy` after the update, deferred before it.
pub(crate) fn neighbour_facts<'p>(
    plan: &HealthPlan,
    index: &NeighbourIndex,
    own_uid: &str,
    now: Stamp,
    unhealthy: &[UnhealthyNode],
    pods: impl Iterator<Item = &'p PodSummary>,
    updated: impl Fn(&PodSummary) -> bool,
) -> NeighbourFacts {
    let policy = &plan.policy.neighbours;
    if !policy.enabled || index.is_empty() {
        return NeighbourFacts::default();
    }
    let unhealthy: HashSet<&str> = unhealthy.iter().map(|n| n.node.as_str()).collect();
    let mut by_node: HashMap<&str, Option<Stamp>> = HashMap::new();
    for pod in pods {
        let Some(node) = pod.node_name() else {
            continue;
        };
        if pod.is_terminating() || unhealthy.contains(node) {
            continue;
        }
        let state = match (updated(pod), pod.created()) {
            (true, Some(created)) => Some(Stamp(created)),
            // An updated pod without a creation time cannot be judged.
            (true, None) => continue,
            (false, _) => None,
        };
        by_node.insert(node, state);
    }
    let window = i64::try_from(plan.policy.window.as_secs()).unwrap_or(i64::MAX);
    index.facts(policy, own_uid, &by_node, window, now)
}

/// Since when the rollout rests `successful` (issue 46), as the gates read it: the status's
/// phase start (`now` without one), so that they judge only the nodes caught up since (late
/// updates, [`canary_state_machine::HealthFacts::rested_since`]). `None` in any other phase.
pub(crate) fn rested_since(
    status: Option<&crate::crd::CanaryDaemonSetStatus>,
    now: Stamp,
) -> Option<Stamp> {
    let status = status?;
    (status.phase == Some(canary_state_machine::Phase::Successful)).then(|| {
        status
            .phase_start_time
            .as_ref()
            .map_or(now, |t| Stamp(t.0.as_second()))
    })
}

/// When a person answered a hold of `onUnhealthy: Hold` (issue 46), as the gates read it in a
/// pass at `now`: the status's memory of it, or `now` when this pass sees the resume of a
/// hold that named nodes (the status records the hold and its nodes, the pause mark is gone).
/// Only with `onUnhealthy: Hold`: under `Fail` no resume answers a failure.
pub(crate) fn answered(
    plan: &HealthPlan,
    status: Option<&crate::crd::CanaryDaemonSetStatus>,
    held: bool,
    now: Stamp,
) -> Option<Stamp> {
    if plan.policy.on_unhealthy != canary_state_machine::OnUnhealthy::Hold {
        return None;
    }
    let status = status?;
    let remembered = status
        .unhealthy_answered
        .as_ref()
        .map(|t| Stamp(t.0.as_second()));
    let resumed_now = !held && status.held == Some(true) && !status.unhealthy_nodes.is_empty();
    if resumed_now { Some(now) } else { remembered }
}

/// Whether `node` is unhealthy under the gates' `conditions` (and `Ready` not `True`), and
/// since when: the condition that counts with the earliest transition (a node unhealthy for
/// two reasons is unhealthy since the first), with what was seen of it.
pub(crate) fn unhealthy_by(node: &CachedNode, conditions: &[String]) -> Option<(NodeSeen, Stamp)> {
    node.trouble()
        .iter()
        .filter(|trouble| {
            &*trouble.condition == "Ready" || conditions.iter().any(|c| **c == *trouble.condition)
        })
        .min_by_key(|trouble| (trouble.since, trouble.condition.clone()))
        .map(|trouble| {
            (
                NodeSeen {
                    condition: trouble.condition.to_string(),
                    status: trouble.status.to_string(),
                    reason: trouble.reason.to_string(),
                    message: trouble.message.to_string(),
                },
                Stamp(trouble.since),
            )
        })
}

/// The DaemonSet pod of `pods` on each node of `nodes`, `Updated` when `updated` says it runs
/// the target (with its creation time), else `Old`. A pod that is terminating is the one
/// being replaced: the node has none.
pub(crate) fn pods_on<'p>(
    nodes: &[&str],
    pods: impl Iterator<Item = &'p PodSummary>,
    updated: impl Fn(&PodSummary) -> bool,
) -> HashMap<String, NodePod> {
    let mut found = HashMap::new();
    for pod in pods {
        let Some(node) = pod.node_name() else {
            continue;
        };
        if pod.is_terminating() || !nodes.contains(&node) {
            continue;
        }
        let state = match (updated(pod), pod.created()) {
            (true, Some(created)) => NodePod::Updated {
                created: Stamp(created),
            },
            // An updated pod without a creation time cannot be judged: not evidence.
            (true, None) => NodePod::None,
            (false, _) => NodePod::Old,
        };
        found.insert(node.to_owned(), state);
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::watched_node::NodeTrouble;
    use canary_state_machine::HealthPolicy;

    fn trouble(condition: &str, status: &str, since: i64) -> NodeTrouble {
        NodeTrouble {
            condition: condition.into(),
            status: status.into(),
            reason: "Because".into(),
            message: "it is so".into(),
            since,
        }
    }

    fn node(name: &str, trouble: Vec<NodeTrouble>) -> Arc<CachedNode> {
        Arc::new(CachedNode {
            name: name.into(),
            trouble: Some(trouble.into_boxed_slice()),
            ..CachedNode::default()
        })
    }

    fn plan(conditions: &[&str]) -> HealthPlan {
        HealthPlan {
            policy: HealthPolicy::default(),
            node_conditions: conditions.iter().map(|c| (*c).to_owned()).collect(),
        }
    }

    #[test]
    fn only_the_conditions_the_gates_name_make_a_node_unhealthy() {
        let troubled = [
            node("not-ready", vec![trouble("Ready", "Unknown", 100)]),
            node(
                "no-network",
                vec![trouble("NetworkUnavailable", "True", 200)],
            ),
            node("pressure", vec![trouble("MemoryPressure", "True", 300)]),
            node(
                "both",
                vec![
                    trouble("NetworkUnavailable", "True", 50),
                    trouble("Ready", "False", 70),
                ],
            ),
        ];
        let asked = std::cell::RefCell::new(Vec::new());
        let facts = facts(
            &plan(&["NetworkUnavailable"]),
            Stamp(1000),
            &troubled,
            |nodes| {
                asked
                    .borrow_mut()
                    .extend(nodes.iter().map(|n| (*n).to_owned()));
                HashMap::from([(
                    "not-ready".to_owned(),
                    NodePod::Updated { created: Stamp(90) },
                )])
            },
            None,
        );
        let names: Vec<&str> = facts.unhealthy.iter().map(|n| n.node.as_str()).collect();
        assert_eq!(names, ["both", "no-network", "not-ready"]);
        assert_eq!(*asked.borrow(), ["both", "no-network", "not-ready"]);
        let both = &facts.unhealthy[0];
        assert_eq!(
            (both.since, both.seen.condition.as_str()),
            (Stamp(50), "NetworkUnavailable")
        );
        assert_eq!(
            facts.unhealthy[2].pod,
            NodePod::Updated { created: Stamp(90) }
        );
        assert_eq!(facts.unhealthy[1].pod, NodePod::None);
        // `Ready` only: the network condition is not judged.
        let ready_only = super::facts(&plan(&[]), Stamp(1000), &troubled, |_| HashMap::new(), None);
        let names: Vec<&str> = ready_only
            .unhealthy
            .iter()
            .map(|n| n.node.as_str())
            .collect();
        assert_eq!(names, ["both", "not-ready"]);
    }

    /// The DaemonSet's pod `name` on `node`, created at `created`.
    fn agent(name: &str, node: &str, created: i64) -> PodSummary {
        use k8s_openapi::api::core::v1::{Pod, PodSpec};
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
        PodSummary::of(&Pod {
            metadata: ObjectMeta {
                namespace: Some("ns".into()),
                name: Some(name.into()),
                creation_timestamp: k8s_openapi::jiff::Timestamp::from_second(created)
                    .ok()
                    .map(Time),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec {
                node_name: Some(node.into()),
                ..PodSpec::default()
            }),
            status: None,
        })
    }

    /// Three neighbours on `node`, there since 100, not ready since `lost` (ready: `None`).
    fn neighbours_on(index: &NeighbourIndex, node: &str, lost: Option<u32>) {
        use crate::neighbours::{NeighbourRecord, WatchedNeighbour, hash_of};
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
        for i in 0..3 {
            let uid = format!("{node}-{i}");
            index.apply(&kube::runtime::watcher::Event::Apply(WatchedNeighbour {
                metadata: ObjectMeta {
                    uid: Some(uid.clone()),
                    ..ObjectMeta::default()
                },
                node: Some(node.into()),
                record: Some(NeighbourRecord {
                    key: hash_of(&uid),
                    owner: hash_of("rs-uid"),
                    created: 100,
                    ready_since: lost.unwrap_or(100),
                    last_exit: 0,
                    ready: lost.is_none(),
                }),
            }));
        }
    }

    /// Soak seed 4 with image pulls (invariant 32): the canary broke its neighbours, and an
    /// unrelated node that went NotReady after the update (its pods marked not ready by the
    /// node lifecycle controller) offset it as the baseline for the whole window. An
    /// unhealthy node is the node gate's, on either side: neither baseline nor judged here.
    #[test]
    fn an_unhealthy_node_is_neither_baseline_nor_judged_by_the_neighbours_gate() {
        let index = NeighbourIndex::new();
        neighbours_on(&index, "canary", Some(1_030));
        neighbours_on(&index, "down", Some(1_020));
        neighbours_on(&index, "quiet", None);
        neighbours_on(&index, "deferred", Some(1_040));
        let pods = [
            agent("new-canary", "canary", 1_000),
            agent("old-down", "down", 10),
            agent("old-quiet", "quiet", 10),
            // Unhealthy since before its update (the MaxUnavailable driver's DaemonSet
            // controller replaced it anyway); its pods were marked not ready after it.
            agent("new-deferred", "deferred", 1_000),
        ];
        let updated = |pod: &PodSummary| pod.name().starts_with("new-");
        let not_ready = |node: &str, since: i64| UnhealthyNode {
            node: node.into(),
            since: Stamp(since),
            ..UnhealthyNode::default()
        };
        let plan = plan(&[]);
        let judge = |pods: &[PodSummary], unhealthy: &[UnhealthyNode]| {
            let facts = neighbour_facts(
                &plan,
                &index,
                "ds-uid",
                Stamp(1_100),
                unhealthy,
                pods.iter(),
                updated,
            );
            let judgement =
                canary_state_machine::health::judge_neighbours(&plan.policy.neighbours, &facts);
            let names: Vec<String> = judgement.disrupted.iter().map(|n| n.node.clone()).collect();
            (names, judgement.baseline, judgement.is_evidence())
        };
        let unhealthy = [not_ready("down", 1_015), not_ready("deferred", 900)];
        // The canary's evidence against the unrelated NotReady node.
        let (names, baseline, evidence) = judge(&pods[..3], &[]);
        assert_eq!((baseline, evidence), (1, false), "the bug: {names:?}");
        let (names, baseline, evidence) = judge(&pods[..3], &unhealthy);
        assert_eq!(names, ["canary"]);
        assert_eq!((baseline, evidence), (0, true));
        // The node unhealthy since before its update, alone.
        let alone = [pods[2].clone(), pods[3].clone()];
        let (names, _, evidence) = judge(&alone, &[]);
        assert_eq!(
            (names.as_slice(), evidence),
            (&["deferred".to_owned()][..], true),
            "the bug"
        );
        let (names, _, evidence) = judge(&alone, &unhealthy);
        assert!(names.is_empty() && !evidence, "the node gate's: {names:?}");
    }

    #[test]
    fn no_troubled_node_no_pod_walk() {
        let facts = facts(
            &plan(&["NetworkUnavailable"]),
            Stamp(1),
            &[],
            |_| panic!("no pod is looked up without a troubled node"),
            Some(5),
        );
        assert!(facts.unhealthy.is_empty());
        assert_eq!(facts.canary_ready_since, Some(Stamp(5)));
    }
}
