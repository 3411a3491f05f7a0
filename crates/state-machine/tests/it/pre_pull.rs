//! Image pre-pull (issue 50) on the Pods driver: which nodes a pause or the canary's soak
//! pre-pulls (`pre_pull_nodes`), checked against the nodes the next step then deletes.

use std::time::Duration;

use canary_state_machine::{
    HealthFacts, HealthPolicy, MaxUnavailable, Phase, Stamp, Step, StepPlan, StepPosition,
    decide_pods, pre_pull_nodes,
};

use crate::pods::{at, canary_then_30s_pause_then, cluster, deleted_nodes, node, pods};

/// `[{nodes: 1}, {pause: 30s}, {nodes: 50%}]` over `n00..n03` old and the canary `n99`.
fn canary_pause_half() -> (StepPlan, Vec<canary_state_machine::NodeState>) {
    canary_then_30s_pause_then(vec![Step::Nodes {
        nodes: MaxUnavailable::Percent(60),
        max_unavailable: Some(MaxUnavailable::Count(5)),
    }])
}

#[test]
fn a_pause_pre_pulls_exactly_the_nodes_the_next_step_replaces() {
    let (plan, nodes) = canary_pause_half();
    let mut during = at(1, Phase::Paused, nodes);
    during.position = Some(StepPosition {
        index: 1,
        elapsed: Duration::from_secs(12),
        deferred: 0,
    });
    let held = decide_pods(&pods(), &plan, &during);
    assert_eq!(held.phase, Phase::Paused);
    let wanted = pre_pull_nodes(&pods(), &plan, &during, &held).expect("a pause is a window");
    // 60% of 5 nodes is 3, the canary is one of them: two more.
    assert_eq!(wanted, ["n00", "n01"]);

    // The pause over, the step deletes those very nodes (its budget of 5 takes both at once).
    let mut over = during.clone();
    over.position = Some(StepPosition {
        index: 1,
        elapsed: Duration::from_secs(30),
        deferred: 0,
    });
    let moved = decide_pods(&pods(), &plan, &over);
    assert_eq!(moved.phase, Phase::Increasing);
    assert_eq!(deleted_nodes(&moved), wanted);
    assert_eq!(pre_pull_nodes(&pods(), &plan, &over, &moved), None);
}

#[test]
fn the_canary_soak_pre_pulls_the_next_step_and_a_hold_on_request_does_not() {
    let plan = StepPlan::default();
    let mut nodes = cluster(19, 0);
    nodes.push(node("n99", true, true));
    let mut soaking = at(0, Phase::Canary, nodes);
    soaking.health = Some(HealthFacts {
        policy: HealthPolicy {
            canary_soak: Duration::from_secs(30),
            ..HealthPolicy::default()
        },
        now: Stamp(1_000),
        canary_ready_since: Some(Stamp(990)),
        ..HealthFacts::default()
    });
    let held = decide_pods(&pods(), &plan, &soaking);
    assert_eq!((held.phase, held.action.step), (Phase::Canary, 0));
    assert!(held.action.delete.is_empty());
    let wanted = pre_pull_nodes(&pods(), &plan, &soaking, &held).expect("the soak is a window");
    assert!(!wanted.is_empty() && !wanted.contains(&"n99".to_owned()));
    assert!(wanted.windows(2).all(|w| w[0] < w[1]), "{wanted:?}");

    let mut paused = soaking.clone();
    paused.held = true;
    let on_hold = decide_pods(&pods(), &plan, &paused);
    assert_eq!(pre_pull_nodes(&pods(), &plan, &paused, &on_hold), None);
}

#[test]
fn a_step_that_deletes_or_a_finished_rollout_is_no_window() {
    let (plan, nodes) = canary_pause_half();
    // The canary not replaced yet: the first step deletes.
    let starting = at(0, Phase::Canary, cluster(5, 0));
    let decision = decide_pods(&pods(), &plan, &starting);
    assert!(!decision.action.delete.is_empty());
    assert_eq!(pre_pull_nodes(&pods(), &plan, &starting, &decision), None);
    // Every node updated: nothing left to pre-pull, whatever the phase.
    let done = at(3, Phase::Increasing, cluster(0, nodes.len()));
    let decision = decide_pods(&pods(), &plan, &done);
    assert_eq!(pre_pull_nodes(&pods(), &plan, &done, &decision), None);
}
