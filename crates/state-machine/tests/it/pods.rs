//! The Pods driver's table (`decide_pods`), row by row, and its invariants over arbitrary
//! clusters: the budget is never exceeded, deferred nodes are never touched, nothing is deleted
//! in a pass that fails, pauses or starts.

use crate::common::assert_first_event_says;
use std::time::Duration;

use canary_state_machine::{
    AnalysisVerdict, Compatibility, Deferral, DriftPolicy, DriftSeen, FailureReason,
    MaxUnavailable, NodeHealth, NodeState, Phase, PodDecision, PodObservation, PodState,
    PreviousPass, Promotion, Step, StepAnalysis, StepPlan, StepPosition, Strategy, StrategyError,
    WriteKind, decide_pods, event_reason,
};
use proptest::prelude::*;
use proptest::strategy::Strategy as _;

pub(crate) const NAME: &str = "node-agent";

pub(crate) fn node(name: &str, updated: bool, ready: bool) -> NodeState {
    NodeState {
        name: name.into(),
        zone: None,
        canary: false,
        health: NodeHealth::Healthy,
        pod: Some(PodState {
            name: format!("{NAME}-{name}"),
            uid: format!("uid-{name}"),
            updated,
            ready,
            crash_loop: None,
        }),
    }
}

/// `old` nodes on the old revision and `new` nodes updated and ready, named `n00`, `n01`, ...
pub(crate) fn cluster(old: usize, new: usize) -> Vec<NodeState> {
    (0..old + new)
        .map(|i| node(&format!("n{i:02}"), i >= old, true))
        .collect()
}

pub(crate) fn previous(phase: Phase) -> PreviousPass {
    PreviousPass {
        phase,
        failure: None,
        updated_ready: 0,
        since_progress: Duration::from_secs(1),
        drifted: false,
    }
}

/// A rollout in progress at `step`, previous pass in `phase`, over `nodes`.
pub(crate) fn at(step: u32, phase: Phase, nodes: Vec<NodeState>) -> PodObservation {
    let desired = u32::try_from(nodes.len()).unwrap();
    PodObservation {
        name: NAME.into(),
        rollout_observed: true,
        desired_pods: desired,
        nodes,
        position: Some(StepPosition {
            index: step,
            elapsed: Duration::from_secs(1),
            deferred: 0,
        }),
        previous: Some(previous(phase)),
        ..PodObservation::default()
    }
}

pub(crate) fn deleted_nodes(decision: &PodDecision) -> Vec<&str> {
    decision
        .action
        .delete
        .iter()
        .map(|d| d.node.as_str())
        .collect()
}

pub(crate) fn reasons(decision: &PodDecision) -> Vec<&str> {
    decision.events.iter().map(|e| e.reason).collect()
}

/// A node whose updated pod crash-loops.
fn crash_looping(name: &str) -> NodeState {
    let mut state = node(name, true, false);
    if let Some(pod) = &mut state.pod {
        pod.crash_loop = Some("CrashLoopBackOff".into());
    }
    state
}

/// `[{nodes: 1}, {pause: {}}]`: the canary, then a hold until promoted.
pub(crate) fn canary_then_hold() -> StepPlan {
    StepPlan::new(vec![
        Step::Nodes {
            nodes: MaxUnavailable::ONE,
            max_unavailable: None,
        },
        Step::Pause { duration: None },
    ])
}

pub(crate) fn pods() -> Strategy {
    Strategy::default()
}

/// The Pods driver's decision with the default strategy and the default step plan.
pub(crate) fn by_default(observation: &PodObservation) -> PodDecision {
    decide_pods(&pods(), &StepPlan::default(), observation)
}

#[test]
fn the_default_plan_is_the_reference_shape_and_every_plan_ends_at_all_nodes() {
    let one = Step::Nodes {
        nodes: MaxUnavailable::ONE,
        max_unavailable: None,
    };
    assert_eq!(StepPlan::default().steps(), &[one, Step::ALL_NODES]);
    assert_eq!(StepPlan::new(vec![]), StepPlan::default());
    let pause = Step::Pause { duration: None };
    assert_eq!(
        StepPlan::new(vec![one, pause]).steps(),
        &[one, pause, Step::ALL_NODES],
        "a plan that stops short of every node is completed"
    );
    assert_eq!(StepPlan::new(vec![Step::ALL_NODES]).len(), 1);
}

#[test]
fn a_rollback_follows_the_nodes_steps_without_the_pauses() {
    let one = Step::Nodes {
        nodes: MaxUnavailable::ONE,
        max_unavailable: None,
    };
    let plan = canary_then_hold().zoned(true);
    let rollback = plan.without_pauses();
    assert_eq!(rollback.steps(), &[one, Step::ALL_NODES]);
    assert!(rollback.zoned, "the zones are kept");
    let only_pauses = StepPlan::new(vec![Step::Pause { duration: None }]);
    assert_eq!(only_pauses.without_pauses().steps(), &[Step::ALL_NODES]);
}

#[test]
fn row_1_an_invalid_plan_or_the_reference_table_fails_without_deleting() {
    let zero_pause = StepPlan::new(vec![Step::Pause {
        duration: Some(Duration::ZERO),
    }]);
    let decision = decide_pods(&pods(), &zero_pause, &at(0, Phase::Canary, cluster(3, 0)));
    assert_eq!(decision.failure, Some(FailureReason::InvalidStrategy));
    assert!(decision.action.delete.is_empty());
    assert!(matches!(
        zero_pause.validate(),
        Err(StrategyError::InvalidStep { index: 0, .. })
    ));

    let many = StepPlan::new(vec![Step::Pause { duration: None }; 40]);
    assert_eq!(many.validate(), Err(StrategyError::TooManySteps(41)));

    let kubevirt = Strategy::kubevirt();
    let decision = decide_pods(
        &kubevirt,
        &StepPlan::default(),
        &at(0, Phase::Canary, cluster(3, 0)),
    );
    assert_eq!(decision.failure, Some(FailureReason::InvalidStrategy));
    assert!(
        decision
            .error
            .unwrap()
            .contains("Pods driver needs compatibility Fixed")
    );
    assert!(decision.action.delete.is_empty());
}

#[test]
fn row_2_a_changed_template_is_written_with_on_delete_and_nothing_deleted() {
    let observation = PodObservation {
        template_changed: true,
        ..at(2, Phase::Successful, cluster(3, 0))
    };
    let decision = by_default(&observation);
    let write = decision.write.unwrap();
    assert_eq!(
        (write.kind, write.max_unavailable),
        (WriteKind::Start, None)
    );
    assert_eq!((decision.phase, decision.action.step), (Phase::Started, 0));
    assert!(decision.action.delete.is_empty());
    assert_eq!(reasons(&decision), [event_reason::ROLLOUT_STARTED]);

    // Every pod runs the revision the status still names: none runs the template written now.
    let rolled_out = PodObservation {
        template_changed: true,
        ..at(2, Phase::Successful, cluster(0, 3))
    };
    let tally = by_default(&rolled_out).action.tally;
    assert_eq!(
        (tally.desired, tally.updated, tally.updated_ready, tally.old),
        (3, 0, 0, 3)
    );
}

#[test]
fn row_2_drift_reverts_or_holds_by_policy() {
    let drifted = PodObservation {
        drift: Some(DriftSeen {
            what: "image".into(),
        }),
        ..at(1, Phase::Increasing, cluster(3, 1))
    };
    let revert = by_default(&drifted);
    assert!(revert.drifted && revert.write.is_some());
    assert_eq!(reasons(&revert), [event_reason::DRIFT_DETECTED]);
    let report = Strategy {
        drift_policy: DriftPolicy::Report,
        ..pods()
    };
    let hold = decide_pods(&report, &StepPlan::default(), &drifted);
    assert!(hold.drifted && hold.write.is_none() && hold.action.delete.is_empty());
    assert_eq!(hold.phase, Phase::Increasing);
}

/// A drift's pass still counts the pods and names the nodes that wait: the status it writes
/// shows the DaemonSet as it is, not a rollout of no pods (both policies).
#[test]
fn row_2_a_drift_keeps_the_counts_and_the_deferred_nodes() {
    let mut nodes = cluster(1, 3);
    nodes[0].health = NodeHealth::NotReady;
    let drifted = PodObservation {
        drift: Some(DriftSeen {
            what: "image".into(),
        }),
        ..at(2, Phase::Successful, nodes)
    };
    let report = Strategy {
        drift_policy: DriftPolicy::Report,
        ..pods()
    };
    let held = decide_pods(&report, &StepPlan::default(), &drifted);
    assert_eq!(held.phase, Phase::Successful);
    assert_eq!(
        (
            held.action.tally.desired,
            held.action.tally.updated,
            held.action.tally.deferred
        ),
        (4, 3, 1)
    );
    assert_eq!(
        held.action.deferred,
        vec![("n00".to_owned(), Deferral::NodeNotReady)]
    );
    // Reverted, the template written back is the recorded revision, which the pods counted
    // as updated already run (an `OnDelete` edit replaced none): a rollout with nothing left
    // to do, not one that no pod runs yet.
    let reverted = by_default(&drifted);
    assert_eq!(reverted.phase, Phase::Started);
    assert_eq!(
        (
            reverted.action.tally.desired,
            reverted.action.tally.updated,
            reverted.action.tally.old
        ),
        (4, 3, 0)
    );
}

/// A node whose Node object is gone is deferred, and the DaemonSet's desired count drops it
/// as soon as its controller sees the deletion: it is not subtracted a second time, or the
/// pods down would be undercounted by one and one more deleted (soak seed 21001371: 9 down
/// against a budget of 8).
#[test]
fn a_gone_node_the_desired_count_dropped_is_not_subtracted_twice() {
    let mut nodes = cluster(8, 2);
    // Two healthy nodes whose old pods were deleted, not replaced yet.
    nodes[0].pod = None;
    nodes[1].pod = None;
    nodes[2].health = NodeHealth::Missing;
    nodes[2].pod = None;
    let mut observation = at(1, Phase::Increasing, nodes);
    observation.desired_pods = 9;
    let two_at_once = StepPlan::new(vec![
        Step::Nodes {
            nodes: MaxUnavailable::ONE,
            max_unavailable: None,
        },
        Step::Nodes {
            nodes: MaxUnavailable::Percent(100),
            max_unavailable: Some(MaxUnavailable::Count(2)),
        },
    ]);
    let decision = decide_pods(&pods(), &two_at_once, &observation);
    assert_eq!(
        (
            decision.action.tally.counted,
            decision.action.tally.unavailable,
            decision.action.tally.deferred
        ),
        (9, 2, 1)
    );
    assert_eq!(
        deleted_nodes(&decision),
        Vec::<&str>::new(),
        "two down already, the budget is two"
    );
    // While the desired count still has the gone node, one too many is counted down: the
    // safe way.
    observation.desired_pods = 10;
    let stale = decide_pods(&pods(), &two_at_once, &observation);
    assert_eq!(stale.action.tally.unavailable, 3);
    assert!(stale.action.delete.is_empty());
}

/// A node added a moment ago can hold a ready pod of the new revision before the DaemonSet's
/// desired count has it: that pod must not stand in for a counted node that is down, or one
/// more ready pod is deleted (soak seed 23003655: 2 down against a budget of 1).
#[test]
fn a_newcomer_the_desired_count_lacks_does_not_hide_a_node_that_is_down() {
    let mut nodes = cluster(6, 3);
    // One old pod deleted by the previous pass, its replacement not there yet.
    nodes[0].pod = None;
    let mut observation = at(0, Phase::Increasing, nodes);
    // The newest updated node (n08) is not in the desired count yet.
    observation.desired_pods = 8;
    let one_at_a_time = StepPlan::new(vec![Step::Nodes {
        nodes: MaxUnavailable::Percent(100),
        max_unavailable: Some(MaxUnavailable::ONE),
    }]);
    let decision = decide_pods(&pods(), &one_at_a_time, &observation);
    assert_eq!(
        (
            decision.action.tally.counted,
            decision.action.tally.unavailable
        ),
        (9, 1),
        "{:?}",
        decision.action.tally
    );
    assert_eq!(
        deleted_nodes(&decision),
        Vec::<&str>::new(),
        "one down already, the budget is one"
    );
}

#[test]
fn row_3_nothing_moves_until_the_daemon_set_controller_observed_the_write() {
    let observation = PodObservation {
        rollout_observed: false,
        ..at(0, Phase::Started, cluster(3, 0))
    };
    let decision = by_default(&observation);
    assert_eq!(decision.phase, Phase::Started);
    assert!(decision.action.delete.is_empty());
}

/// Right after the template went out, the pods still count against the revision it replaces:
/// none of them is updated to the target (the status said 3/3 updated and ready for that pass,
/// and the demo's plot drew a spike to every pod at t=0: issue 52).
#[test]
fn row_3_after_our_write_no_pod_counts_as_updated_yet() {
    let observation = PodObservation {
        rollout_observed: false,
        ..at(0, Phase::Started, cluster(0, 3))
    };
    let tally = by_default(&observation).action.tally;
    assert_eq!(
        (tally.updated, tally.updated_ready, tally.old),
        (0, 0, 3),
        "{tally:?}"
    );
    // A rollout resting on its revision (its owner's template change not taken in yet) keeps
    // counting its pods as they are.
    let observation = PodObservation {
        rollout_observed: false,
        ..at(2, Phase::Successful, cluster(0, 3))
    };
    assert_eq!(by_default(&observation).action.tally.updated_ready, 3);
}

/// While the DaemonSet controller has not observed a new template (its owner's, with
/// `workloadRef`), the pass holds the previous phase and still names the deferred nodes: a
/// successful rollout resting with a NotReady node keeps it listed (soak seed 10000300), and
/// one whose updated pod crash-loops keeps naming that node.
#[test]
fn row_3_a_held_pass_keeps_naming_the_deferred_nodes() {
    let mut nodes = cluster(1, 3);
    nodes[0].health = NodeHealth::NotReady;
    nodes.push(crash_looping("n04"));
    let observation = PodObservation {
        rollout_observed: false,
        ..at(2, Phase::Successful, nodes)
    };
    let decision = by_default(&observation);
    assert_eq!(decision.phase, Phase::Successful);
    assert!(decision.action.delete.is_empty());
    assert_eq!(
        decision.action.deferred,
        vec![("n00".to_owned(), Deferral::NodeNotReady)]
    );
    assert_eq!(decision.action.tally.deferred, 1);
    assert_eq!(decision.action.failed_nodes, vec!["n04".to_owned()]);
}

#[test]
fn row_4_a_new_revision_starts_at_step_0_without_deleting() {
    let observation = PodObservation {
        new_revision: true,
        ..at(2, Phase::Successful, cluster(3, 0))
    };
    let decision = by_default(&observation);
    assert_eq!((decision.phase, decision.action.step), (Phase::Started, 0));
    assert!(decision.action.delete.is_empty());
    assert_eq!(reasons(&decision), [event_reason::ROLLOUT_STARTED]);
    // After our own write the start was announced already.
    let observed = PodObservation {
        new_revision: true,
        ..at(0, Phase::Started, cluster(3, 0))
    };
    assert!(by_default(&observed).events.is_empty());
}

#[test]
fn row_4_a_first_install_skips_the_steps_and_waits_for_the_pods() {
    let plan = canary_then_hold();
    let mut nodes = cluster(0, 3);
    nodes[1].pod.as_mut().unwrap().ready = false;
    let observation = PodObservation {
        new_revision: true,
        ..at(0, Phase::Started, nodes.clone())
    };
    let started = decide_pods(&pods(), &plan, &observation);
    assert_eq!(
        (started.phase, started.action.step),
        (Phase::Started, plan.len())
    );
    let waiting = decide_pods(&pods(), &plan, &at(plan.len(), Phase::Started, nodes));
    assert_eq!(waiting.phase, Phase::Waiting, "no pause on a first install");
    let ready = decide_pods(
        &pods(),
        &plan,
        &at(plan.len(), Phase::Waiting, cluster(0, 3)),
    );
    assert_eq!((ready.phase, ready.done), (Phase::Successful, true));
    assert_eq!(reasons(&ready), [event_reason::ROLLOUT_COMPLETED]);
}

#[test]
fn the_canary_goes_to_a_selected_node_one_pod_at_a_time() {
    let mut nodes = cluster(5, 0);
    nodes[3].canary = true;
    let decision = by_default(&at(0, Phase::Started, nodes));
    assert_eq!(decision.phase, Phase::Canary);
    assert_eq!(deleted_nodes(&decision), ["n03"]);
    assert_eq!(decision.action.delete[0].uid, "uid-n03");
    assert_eq!(reasons(&decision), [event_reason::STEP_STARTED]);
    assert_eq!(
        (decision.action.tally.budget, decision.action.tally.target),
        (1, 1)
    );

    // The canary pod is gone and its replacement not ready yet: nothing more.
    let mut nodes = cluster(5, 0);
    nodes[3].pod = None;
    let decision = by_default(&at(0, Phase::Canary, nodes));
    assert!(decision.action.delete.is_empty());
    assert_eq!(decision.action.tally.unavailable, 1);
}

#[test]
fn without_a_selector_the_order_is_by_name() {
    let decision = by_default(&at(0, Phase::Started, cluster(4, 0)));
    assert_eq!(deleted_nodes(&decision), ["n00"]);
}

#[test]
fn a_ready_canary_completes_the_step_and_the_next_one_begins_in_the_same_pass() {
    // 20 nodes, the canary ready: 10% of 20 is 2 pods at a time.
    let mut nodes = cluster(19, 0);
    nodes.push(node("n99", true, true));
    let decision = by_default(&at(0, Phase::Canary, nodes));
    assert_eq!(
        (decision.phase, decision.action.step),
        (Phase::Increasing, 1)
    );
    assert_eq!(decision.action.canary_nodes, Some(vec!["n99".to_owned()]));
    assert_eq!(deleted_nodes(&decision), ["n00", "n01"]);
    assert_eq!(
        reasons(&decision),
        [event_reason::STEP_COMPLETED, event_reason::STEP_STARTED]
    );
    assert!(decision.events[0].message.contains("canary on n99"));
}

/// `[{nodes: 1}, {pause: 30s}]` over four old nodes and the canary `n99`, updated and ready.
fn canary_then_30s_pause() -> (StepPlan, Vec<NodeState>) {
    canary_then_30s_pause_then(vec![])
}

/// `[{nodes: 1}, {pause: 30s}, ..then]` over `n00..n03` old and the canary `n99`.
pub(crate) fn canary_then_30s_pause_then(then: Vec<Step>) -> (StepPlan, Vec<NodeState>) {
    let mut steps = vec![
        Step::Nodes {
            nodes: MaxUnavailable::ONE,
            max_unavailable: None,
        },
        Step::Pause {
            duration: Some(Duration::from_secs(30)),
        },
    ];
    steps.extend(then);
    let mut nodes = cluster(4, 0);
    nodes.push(node("n99", true, true));
    (StepPlan::new(steps), nodes)
}

#[test]
fn a_pause_holds_with_exactly_the_first_steps_nodes_updated_then_ends_on_time() {
    let (plan, nodes) = canary_then_30s_pause();
    let entering = decide_pods(&pods(), &plan, &at(0, Phase::Canary, nodes.clone()));
    assert_eq!((entering.phase, entering.action.step), (Phase::Paused, 1));
    assert!(entering.action.delete.is_empty());
    assert_eq!(entering.action.wake_after, Some(Duration::from_secs(30)));

    let mut during = at(1, Phase::Paused, nodes.clone());
    during.position = Some(StepPosition {
        index: 1,
        elapsed: Duration::from_secs(12),
        deferred: 0,
    });
    let held = decide_pods(&pods(), &plan, &during);
    assert_eq!(held.phase, Phase::Paused);
    assert!(held.action.delete.is_empty());
    assert_eq!(held.action.wake_after, Some(Duration::from_secs(18)));

    let mut over = during.clone();
    over.position = Some(StepPosition {
        index: 1,
        elapsed: Duration::from_secs(30),
        deferred: 0,
    });
    let moved = decide_pods(&pods(), &plan, &over);
    assert_eq!((moved.phase, moved.action.step), (Phase::Increasing, 2));
    assert_eq!(deleted_nodes(&moved), ["n00"]);
}

/// `[{nodes: 1}, {pause: 30s}]` with the canary ready on `n99`, 40 s into the pause (over), and
/// the analysis of step 1 at `verdict`.
fn analysed_pause(verdict: AnalysisVerdict, announced: bool) -> (StepPlan, PodObservation) {
    let (plan, nodes) = canary_then_30s_pause();
    let mut observation = at(1, Phase::Paused, nodes);
    observation.position = Some(StepPosition {
        index: 1,
        elapsed: Duration::from_secs(40),
        deferred: 0,
    });
    observation.analysis = Some(StepAnalysis {
        step: 1,
        verdict,
        announced,
    });
    (plan, observation)
}

#[test]
fn a_timed_pause_with_analysis_ends_only_once_the_analysis_passes() {
    let (plan, pending) = analysed_pause(AnalysisVerdict::Pending, false);
    let waiting = decide_pods(&pods(), &plan, &pending);
    assert_eq!((waiting.phase, waiting.action.step), (Phase::Paused, 1));
    assert!(waiting.action.delete.is_empty() && waiting.events.is_empty());
    assert_eq!(
        waiting.action.wake_after, None,
        "the next measurement brings the pass"
    );

    let (plan, passing) = analysed_pause(AnalysisVerdict::Passing, false);
    let moved = decide_pods(&pods(), &plan, &passing);
    assert_eq!((moved.phase, moved.action.step), (Phase::Increasing, 2));
    assert_eq!(deleted_nodes(&moved), ["n00"]);

    // A verdict of another step is no verdict of this one.
    let mut elsewhere = passing.clone();
    elsewhere.analysis = Some(StepAnalysis {
        step: 0,
        verdict: AnalysisVerdict::Passing,
        announced: false,
    });
    assert_eq!(decide_pods(&pods(), &plan, &elsewhere).action.step, 1);
}

#[test]
fn a_failed_analysis_fails_the_rollout_once_and_deletes_nothing() {
    let failed = AnalysisVerdict::Failed {
        metric: "error-ratio".into(),
        detail: "0.5 is above max 0.05".into(),
    };
    let (plan, observation) = analysed_pause(failed, false);
    let decision = decide_pods(&pods(), &plan, &observation);
    assert_eq!(decision.phase, Phase::Failed);
    assert_eq!(decision.failure, Some(FailureReason::AnalysisFailed));
    assert!(decision.action.delete.is_empty());
    assert_eq!(reasons(&decision), [event_reason::ANALYSIS_FAILED]);
    let message = &decision.events[0].message;
    assert!(
        message.contains("error-ratio failed in step 2 of 3: 0.5 is above max 0.05"),
        "{message}"
    );
    // The failure is sticky (onFailure applies): the next pass stays failed, silently.
    let mut after = observation.clone();
    after.previous = Some(PreviousPass {
        failure: Some(FailureReason::AnalysisFailed),
        ..previous(Phase::Failed)
    });
    after.analysis = None;
    let stays = decide_pods(&pods(), &plan, &after);
    assert_eq!(stays.failure, Some(FailureReason::AnalysisFailed));
    assert!(stays.events.is_empty() && stays.action.delete.is_empty());
}

#[test]
fn an_inconclusive_analysis_holds_the_pause_and_is_announced_once() {
    let inconclusive = AnalysisVerdict::Inconclusive {
        metric: "error-ratio".into(),
        detail: "connection refused".into(),
    };
    let (plan, observation) = analysed_pause(inconclusive.clone(), false);
    let first = decide_pods(&pods(), &plan, &observation);
    assert_eq!((first.phase, first.action.step), (Phase::Paused, 1));
    assert!(first.failure.is_none() && first.action.delete.is_empty());
    assert_eq!(reasons(&first), [event_reason::ANALYSIS_INCONCLUSIVE]);
    let (plan, announced) = analysed_pause(inconclusive, true);
    let again = decide_pods(&pods(), &plan, &announced);
    assert_eq!((again.phase, again.action.step), (Phase::Paused, 1));
    assert!(again.events.is_empty());
}

#[test]
fn a_promotion_ends_an_analysed_pause_whatever_the_analysis_says() {
    for verdict in [
        AnalysisVerdict::Pending,
        AnalysisVerdict::Inconclusive {
            metric: "m".into(),
            detail: "no series".into(),
        },
    ] {
        let (plan, mut observation) = analysed_pause(verdict, true);
        observation.promotion = Some(Promotion::Step);
        let decision = decide_pods(&pods(), &plan, &observation);
        assert!(decision.action.promotion_consumed);
        assert_eq!(
            (decision.phase, decision.action.step),
            (Phase::Increasing, 2)
        );
    }
}

#[test]
fn a_pause_without_duration_waits_for_a_promotion_which_is_consumed_once() {
    let plan = canary_then_hold();
    let mut nodes = cluster(4, 0);
    nodes.push(node("n99", true, true));
    let mut paused = at(1, Phase::Paused, nodes);
    paused.position = Some(StepPosition {
        index: 1,
        elapsed: Duration::from_secs(86_400),
        deferred: 0,
    });
    let held = decide_pods(&pods(), &plan, &paused);
    assert_eq!((held.phase, held.action.wake_after), (Phase::Paused, None));
    assert!(!held.action.promotion_consumed);

    let promoted = PodObservation {
        promotion: Some(Promotion::Step),
        ..paused
    };
    let decision = decide_pods(&pods(), &plan, &promoted);
    assert!(decision.action.promotion_consumed);
    assert_eq!(
        (decision.phase, decision.action.step),
        (Phase::Increasing, 2)
    );
    assert_eq!(reasons(&decision)[0], event_reason::PROMOTED);
    assert_eq!(deleted_nodes(&decision), ["n00"]);
}

#[test]
fn a_hold_on_request_stops_deletions_and_writes_and_is_announced_once_each_way() {
    // Mid-canary on 5 nodes: without the hold, n00 would go.
    let moving = at(0, Phase::Canary, cluster(5, 0));
    assert_eq!(deleted_nodes(&by_default(&moving)), ["n00"]);

    let asked = PodObservation {
        held: true,
        ..moving.clone()
    };
    let first = by_default(&asked);
    assert_eq!((first.phase, first.action.step), (Phase::Paused, 0));
    assert!(first.action.delete.is_empty() && first.held);
    assert_eq!(reasons(&first), [event_reason::PAUSED]);

    let mut still = at(0, Phase::Paused, cluster(5, 0));
    still.held = true;
    still.hold_recorded = true;
    let again = by_default(&still);
    assert_eq!(again.phase, Phase::Paused);
    assert!(
        again.action.delete.is_empty() && again.events.is_empty(),
        "{again:?}"
    );

    // A changed template is not written while held.
    let changed = PodObservation {
        template_changed: true,
        ..still.clone()
    };
    let not_written = by_default(&changed);
    assert_eq!(
        (not_written.phase, not_written.write),
        (Phase::Paused, None)
    );

    // Resumed: the rollout goes on where it was, and says so once.
    let resumed = PodObservation {
        held: false,
        ..still
    };
    let on = by_default(&resumed);
    assert_eq!(on.phase, Phase::Canary);
    assert_eq!(deleted_nodes(&on), ["n00"]);
    assert_eq!(reasons(&on), [event_reason::RESUMED]);
    assert!(!on.held);
}

#[test]
fn a_hold_keeps_a_failure_and_a_rollout_at_rest_as_they_are() {
    let mut crashing = cluster(4, 0);
    crashing.push(crash_looping("n99"));
    let mut observation = at(0, Phase::Canary, crashing);
    observation.held = true;
    let decision = by_default(&observation);
    assert_eq!(
        (decision.phase, decision.failure),
        (Phase::Failed, Some(FailureReason::CanaryCrashLooping))
    );

    let mut at_rest = at(2, Phase::Successful, cluster(0, 5));
    at_rest.held = true;
    let rest = by_default(&at_rest);
    assert_eq!(rest.phase, Phase::Successful);
    assert!(rest.held);
}

#[test]
fn a_promotion_during_a_hold_waits_for_the_resume() {
    let plan = canary_then_hold();
    let mut nodes = cluster(4, 0);
    nodes.push(node("n99", true, true));
    let mut paused = at(1, Phase::Paused, nodes);
    paused.promotion = Some(Promotion::Step);
    paused.held = true;
    paused.hold_recorded = true;
    let decision = decide_pods(&pods(), &plan, &paused);
    assert_eq!((decision.phase, decision.action.step), (Phase::Paused, 1));
    assert!(!decision.action.promotion_consumed && decision.action.delete.is_empty());
}

#[test]
fn a_retry_starts_a_failed_rollout_again_from_the_first_step_once() {
    let plan = StepPlan::new(vec![
        Step::Nodes {
            nodes: MaxUnavailable::ONE,
            max_unavailable: None,
        },
        Step::Nodes {
            nodes: MaxUnavailable::Percent(100),
            max_unavailable: None,
        },
    ]);
    // Failed at step 2 of 2 (a crash loop that has since healed: the pod is ready now).
    let mut nodes = cluster(3, 0);
    nodes.push(node("n99", true, true));
    let mut failed = at(1, Phase::Failed, nodes.clone());
    failed.previous = Some(PreviousPass {
        failure: Some(FailureReason::CanaryCrashLooping),
        ..previous(Phase::Failed)
    });
    let stays = decide_pods(&pods(), &plan, &failed);
    assert_eq!(stays.phase, Phase::Failed, "a sticky failure stays");
    assert!(stays.action.delete.is_empty() && !stays.retried);

    let asked = PodObservation {
        retry: true,
        ..failed.clone()
    };
    let retried = decide_pods(&pods(), &plan, &asked);
    assert!(retried.retried);
    assert_eq!(reasons(&retried)[0], event_reason::RETRIED);
    assert!(
        retried.events[0].message.contains("from its first step"),
        "{:?}",
        retried.events
    );
    // From the first step: its one node is there, the second step begins and deletes.
    assert_eq!((retried.phase, retried.action.step), (Phase::Increasing, 1));
    assert_eq!(deleted_nodes(&retried), ["n00"]);

    // Still crash-looping: the retried rollout fails again at once, nothing deleted.
    let mut crashing = cluster(3, 0);
    crashing.push(crash_looping("n99"));
    let again = decide_pods(
        &pods(),
        &plan,
        &PodObservation {
            nodes: crashing,
            ..asked.clone()
        },
    );
    assert_eq!(
        (again.phase, again.failure),
        (Phase::Failed, Some(FailureReason::CanaryCrashLooping))
    );
    assert!(again.action.delete.is_empty());

    // A retry of a rollout that did not fail changes nothing.
    let running = PodObservation {
        retry: true,
        ..at(0, Phase::Canary, cluster(4, 0))
    };
    let untouched = decide_pods(&pods(), &plan, &running);
    assert!(!untouched.retried);
    assert_eq!(
        untouched,
        decide_pods(&pods(), &plan, &at(0, Phase::Canary, cluster(4, 0)))
    );
}

#[test]
fn unhealthy_nodes_are_deferred_left_out_of_budget_and_target_and_named_at_the_end() {
    let mut nodes = cluster(4, 0);
    nodes[0].health = NodeHealth::NotReady;
    nodes[0].pod.as_mut().unwrap().ready = false;
    nodes[1].health = NodeHealth::Cordoned;
    let decision = by_default(&at(0, Phase::Started, nodes));
    assert_eq!(
        decision.action.deferred,
        [
            ("n00".to_owned(), Deferral::NodeNotReady),
            ("n01".to_owned(), Deferral::NodeCordoned),
        ]
    );
    // The NotReady node's pod does not take the canary's budget.
    assert_eq!(deleted_nodes(&decision), ["n02"]);
    assert_eq!(
        (
            decision.action.tally.counted,
            decision.action.tally.unavailable
        ),
        (2, 0)
    );

    // n02 and n03 updated: every counted node is done, the rollout succeeds with two deferred.
    let mut nodes = cluster(2, 2);
    nodes[0].health = NodeHealth::NotReady;
    nodes[1].health = NodeHealth::Cordoned;
    let decision = by_default(&at(1, Phase::Increasing, nodes));
    assert_eq!((decision.phase, decision.done), (Phase::Successful, true));
    assert!(decision.action.delete.is_empty());
    assert_eq!(decision.action.deferred.len(), 2);
    let completed = decision.events.last().unwrap();
    assert_eq!(completed.reason, event_reason::ROLLOUT_COMPLETED);
    assert!(
        completed.message.contains("n00 (NotReady)"),
        "{}",
        completed.message
    );

    // A cordoned node whose pod already runs the target (the DaemonSet controller placed it
    // there) has nothing left to do: not deferred, not named, not counted.
    let mut nodes = cluster(0, 3);
    nodes[1].health = NodeHealth::Cordoned;
    let decision = by_default(&at(1, Phase::Increasing, nodes));
    assert_eq!((decision.phase, decision.done), (Phase::Successful, true));
    assert!(
        decision.action.deferred.is_empty(),
        "{:?}",
        decision.action.deferred
    );
    assert_eq!(decision.action.tally.counted, 2);
}

/// Regression (soak seeds 9200017 and 9200019): when no node can be judged, a nodes step
/// holds instead of completing on an empty count. Here the canary never got ready and its node
/// went NotReady, and the last old pod is on a cordoned node: the walk used to complete every
/// step on 0 of 0 nodes and report `successful` with no ready pod of the new revision.
#[test]
fn a_step_with_no_node_to_judge_holds_instead_of_completing() {
    let mut nodes = vec![node("n00", true, false), node("n01", false, true)];
    nodes[0].health = NodeHealth::NotReady;
    nodes[1].health = NodeHealth::Cordoned;
    let mut observation = at(0, Phase::Canary, nodes);
    // Long past any deadline: an empty count cannot move, it is no stall.
    if let Some(previous) = observation.previous.as_mut() {
        previous.since_progress = Duration::from_secs(3600);
    }
    let strategy = Strategy {
        progress_deadline: Some(Duration::from_secs(60)),
        ..pods()
    };
    let decision = decide_pods(&strategy, &StepPlan::default(), &observation);
    assert_eq!((decision.phase, decision.action.step), (Phase::Canary, 0));
    assert!(!decision.done && decision.action.delete.is_empty() && decision.failure.is_none());
    assert!(
        !reasons(&decision).contains(&event_reason::STEP_COMPLETED),
        "{:?}",
        reasons(&decision)
    );

    // The cordoned node back: it is counted, and the canary goes there.
    let mut nodes = vec![node("n00", true, false), node("n01", false, true)];
    nodes[0].health = NodeHealth::NotReady;
    let decision = by_default(&at(0, Phase::Canary, nodes));
    assert_eq!(deleted_nodes(&decision), ["n01"]);

    // Nothing to judge because there is nothing at all (no pod): finished, as before.
    let decision = by_default(&at(0, Phase::Canary, vec![]));
    assert_eq!(decision.phase, Phase::Successful);
}

/// Regression (DST seeds 27, 30, 31, 33, 40 of the CI set): old pods that are not ready on
/// healthy nodes (a failed rollout's crash-looping or never-ready pods) were deferred as "old
/// pod not ready": left out of the budget, so that the next rollout took down as many ready
/// pods again on top of them, and never replaced, so that the rollout that fixed the broken
/// revision ended `successful` with it still running. They count as unavailable now, and are
/// replaced first, taking no budget (they are unavailable already).
#[test]
fn a_broken_old_revision_counts_against_the_budget_and_is_replaced_first() {
    // Two of four old pods are not ready; budget 1 (10% of 4): only the broken two go.
    let mut nodes = cluster(4, 0);
    nodes[1].pod.as_mut().unwrap().ready = false;
    nodes[3].pod.as_mut().unwrap().ready = false;
    let decision = by_default(&at(1, Phase::Increasing, nodes));
    assert!(decision.action.deferred.is_empty());
    assert_eq!(
        (
            decision.action.tally.unavailable,
            decision.action.tally.budget
        ),
        (2, 1)
    );
    assert_eq!(deleted_nodes(&decision), ["n01", "n03"]);

    // Every node broken, a first step wider than the cluster: all replaced, none deferred.
    let mut nodes = cluster(2, 0);
    for node in &mut nodes {
        node.pod.as_mut().unwrap().ready = false;
    }
    let plan = StepPlan::new(vec![Step::Nodes {
        nodes: MaxUnavailable::Count(3),
        max_unavailable: Some(MaxUnavailable::Count(2)),
    }]);
    let decision = decide_pods(&pods(), &plan, &at(0, Phase::Started, nodes));
    assert_eq!(decision.phase, Phase::Canary);
    assert_eq!(deleted_nodes(&decision), ["n00", "n01"]);

    // Not `successful` while an old pod remains on a counted node, even with every step done.
    let mut nodes = cluster(1, 1);
    nodes[0].pod.as_mut().unwrap().ready = false;
    let decision = by_default(&at(2, Phase::Increasing, nodes));
    assert_eq!(decision.phase, Phase::Waiting);
    assert_eq!(deleted_nodes(&decision), ["n00"]);
}

#[test]
fn a_deferred_node_that_comes_back_is_updated_after_success_one_at_a_time() {
    let nodes = cluster(2, 3);
    let decision = by_default(&at(2, Phase::Successful, nodes));
    assert_eq!(decision.phase, Phase::Successful);
    assert_eq!(deleted_nodes(&decision), ["n00"]);
    assert!(!decision.done);
    assert!(decision.events.is_empty(), "no second completion");
}

#[test]
fn at_rest_a_crash_looping_updated_pod_holds_the_catch_up_and_is_named_without_failing() {
    // Finding 25: a release that crashes some time after it was ready succeeded before the
    // first crash; a node deferred then comes back.
    let mut nodes = cluster(1, 3);
    nodes[2].pod.as_mut().unwrap().crash_loop = Some("CrashLoopBackOff".into());
    let decision = decide_pods(
        &pods(),
        &StepPlan::default(),
        &at(2, Phase::Successful, nodes),
    );
    assert_eq!(decision.phase, Phase::Successful);
    assert_eq!(decision.failure, None);
    assert!(decision.action.delete.is_empty(), "the catch-up waits");
    assert!(!decision.done);
    assert_eq!(decision.action.failed_nodes, ["n02"]);
    // Without a crash the same node is caught up, and no node is named.
    let decision = decide_pods(
        &pods(),
        &StepPlan::default(),
        &at(2, Phase::Successful, cluster(1, 3)),
    );
    assert_eq!(deleted_nodes(&decision), ["n00"]);
    assert!(decision.action.failed_nodes.is_empty());
}

#[test]
fn a_crash_looping_updated_pod_fails_at_any_step_and_stops_all_deletions() {
    let mut nodes = cluster(10, 2);
    nodes[11].pod.as_mut().unwrap().crash_loop = Some("CrashLoopBackOff".into());
    for phase in [Phase::Canary, Phase::Increasing, Phase::Paused] {
        let decision = by_default(&at(1, phase, nodes.clone()));
        assert_eq!(decision.failure, Some(FailureReason::CanaryCrashLooping));
        assert!(decision.action.delete.is_empty());
        assert_eq!(decision.action.failed_nodes, ["n11"]);
        assert!(decision.error.unwrap().contains("on node n11"));
    }
    // Sticky: still failed once the pod stops crashing, nothing deleted.
    let mut failed = previous(Phase::Failed);
    failed.failure = Some(FailureReason::CanaryCrashLooping);
    let observation = PodObservation {
        previous: Some(failed),
        ..at(1, Phase::Failed, cluster(10, 2))
    };
    let decision = by_default(&observation);
    assert_eq!(decision.phase, Phase::Failed);
    assert!(decision.action.delete.is_empty());
}

#[test]
fn a_step_that_stalls_past_the_deadline_fails_but_a_pause_does_not_count() {
    let mut nodes = cluster(4, 0);
    nodes.push(node("n99", true, false));
    let mut stalled = at(0, Phase::Canary, nodes);
    stalled.previous = Some(PreviousPass {
        since_progress: Duration::from_secs(601),
        ..previous(Phase::Canary)
    });
    let decision = by_default(&stalled);
    assert_eq!(
        decision.failure,
        Some(FailureReason::ProgressDeadlineExceeded)
    );
    assert!(decision.action.delete.is_empty());

    let after_pause = PodObservation {
        previous: Some(PreviousPass {
            since_progress: Duration::from_secs(3_600),
            ..previous(Phase::Paused)
        }),
        position: Some(StepPosition {
            index: 2,
            elapsed: Duration::ZERO,
            deferred: 0,
        }),
        ..stalled
    };
    let plan = canary_then_hold();
    let decision = decide_pods(&pods(), &plan, &after_pause);
    assert_eq!(decision.failure, None, "{decision:?}");
}

pub(crate) fn zoned_cluster() -> Vec<NodeState> {
    // Three zones of four nodes; the canary (z-a/n00) is done.
    (0..12)
        .map(|i| {
            let mut n = node(&format!("n{i:02}"), i == 0, true);
            n.zone = Some(["z-a", "z-b", "z-c"][i / 4].to_owned());
            n
        })
        .collect()
}

pub(crate) fn zoned_plan() -> StepPlan {
    StepPlan::new(vec![
        Step::Nodes {
            nodes: MaxUnavailable::ONE,
            max_unavailable: None,
        },
        Step::Nodes {
            nodes: MaxUnavailable::Percent(100),
            max_unavailable: Some(MaxUnavailable::Percent(100)),
        },
    ])
    .zoned(true)
}

#[test]
fn later_steps_go_zone_by_zone_never_two_zones_at_once() {
    let decision = decide_pods(
        &pods(),
        &zoned_plan(),
        &at(1, Phase::Increasing, zoned_cluster()),
    );
    assert_eq!(
        deleted_nodes(&decision),
        ["n01", "n02", "n03"],
        "zone a first"
    );

    // Zone b is disrupted (a pod not ready): only zone b may lose pods.
    let mut nodes = zoned_cluster();
    for n in &mut nodes[1..4] {
        n.pod.as_mut().unwrap().updated = true;
    }
    nodes[5].pod = None;
    let decision = decide_pods(
        &pods(),
        &zoned_plan(),
        &at(1, Phase::Increasing, nodes.clone()),
    );
    assert_eq!(deleted_nodes(&decision), ["n04", "n06", "n07"]);

    // Two zones disrupted: nothing more.
    nodes[9].pod.as_mut().unwrap().ready = false;
    nodes[9].pod.as_mut().unwrap().updated = true;
    let decision = decide_pods(&pods(), &zoned_plan(), &at(1, Phase::Increasing, nodes));
    assert!(decision.action.delete.is_empty());

    // A missing pod the nodes do not show: its zone is unknown, so nothing either.
    let mut observation = at(1, Phase::Increasing, zoned_cluster());
    observation.desired_pods += 1;
    let decision = decide_pods(&pods(), &zoned_plan(), &observation);
    assert!(decision.action.delete.is_empty());
}

#[test]
fn the_first_step_ignores_zones() {
    let plan = StepPlan::new(vec![Step::Nodes {
        nodes: MaxUnavailable::Count(3),
        max_unavailable: Some(MaxUnavailable::Count(3)),
    }])
    .zoned(true);
    let mut nodes = zoned_cluster();
    nodes[0].pod.as_mut().unwrap().updated = false;
    for i in [0, 4, 8] {
        nodes[i].canary = true;
    }
    let decision = decide_pods(&pods(), &plan, &at(0, Phase::Canary, nodes));
    assert_eq!(
        deleted_nodes(&decision),
        ["n00", "n04", "n08"],
        "one per zone"
    );
}

#[test]
fn a_promotion_in_a_nodes_step_is_recorded_and_changes_nothing() {
    // Finding 18 of docs/reliability.md: a promotion that skipped a nodes step left its nodes
    // to the one-at-a-time tail of the rollout.
    let canary = at(0, Phase::Canary, cluster(20, 0));
    let unasked = by_default(&canary);
    let observation = PodObservation {
        promotion: Some(Promotion::Step),
        ..canary
    };
    let decision = by_default(&observation);
    assert!(
        decision.action.promotion_consumed,
        "recorded, so it does not linger"
    );
    assert_eq!(
        (decision.phase, decision.action.step),
        (unasked.phase, unasked.action.step)
    );
    assert_eq!(decision.action.delete, unasked.action.delete);
    assert_eq!(reasons(&decision)[0], event_reason::VERB_REFUSED);
    assert_first_event_says(&decision.events, "step 1 of 2 is a nodes step");
}

#[test]
fn a_full_promotion_goes_to_the_last_nodes_step_at_its_budget() {
    let plan = StepPlan::new(vec![
        Step::Nodes {
            nodes: MaxUnavailable::ONE,
            max_unavailable: None,
        },
        Step::Pause { duration: None },
        Step::Nodes {
            nodes: MaxUnavailable::Percent(50),
            max_unavailable: None,
        },
        Step::Pause { duration: None },
    ]);
    assert_eq!(plan.len(), 5, "the all-nodes step is appended");
    let observation = PodObservation {
        promotion: Some(Promotion::Full),
        ..at(0, Phase::Canary, cluster(20, 0))
    };
    let decision = decide_pods(&pods(), &plan, &observation);
    assert!(decision.action.promotion_consumed);
    assert_eq!(
        (decision.phase, decision.action.step),
        (Phase::Increasing, 4)
    );
    assert_eq!(reasons(&decision)[0], event_reason::PROMOTED);
    assert_first_event_says(&decision.events, "steps 1 to 4 of 5 skipped");
    assert_eq!(
        decision.action.delete.len(),
        2,
        "10% of 20 at once, never more"
    );

    // In the last nodes step there is nothing left to skip.
    let last = PodObservation {
        promotion: Some(Promotion::Full),
        ..at(4, Phase::Increasing, cluster(18, 2))
    };
    let decision = decide_pods(&pods(), &plan, &last);
    assert!(decision.action.promotion_consumed);
    assert_eq!(decision.action.step, 4);
    assert_eq!(reasons(&decision)[0], event_reason::VERB_REFUSED);
}

#[test]
fn the_step_budget_may_be_set_per_step() {
    let plan = StepPlan::new(vec![Step::Nodes {
        nodes: MaxUnavailable::Percent(50),
        max_unavailable: Some(MaxUnavailable::Count(3)),
    }]);
    let decision = decide_pods(&pods(), &plan, &at(0, Phase::Canary, cluster(10, 0)));
    assert_eq!(decision.action.delete.len(), 3);
    assert_eq!(decision.action.tally.target, 5);
}

fn arbitrary_node() -> impl proptest::strategy::Strategy<Value = NodeState> {
    (
        0u8..40,
        0u8..4,
        any::<bool>(),
        prop_oneof![
            6 => Just(NodeHealth::Healthy),
            1 => Just(NodeHealth::NotReady),
            1 => Just(NodeHealth::Cordoned),
            1 => Just(NodeHealth::Missing),
        ],
        proptest::option::weighted(
            0.9,
            (any::<bool>(), any::<bool>(), proptest::bool::weighted(0.05)),
        ),
    )
        .prop_map(|(id, zone, canary, health, pod)| NodeState {
            name: format!("n{id:02}"),
            zone: Some(format!("z{zone}")),
            canary,
            health,
            pod: pod.map(|(updated, ready, crash)| PodState {
                name: format!("p{id:02}"),
                uid: format!("u{id:02}"),
                updated,
                ready,
                crash_loop: crash.then(|| "CrashLoopBackOff".to_owned()),
            }),
        })
}

fn arbitrary_step() -> impl proptest::strategy::Strategy<Value = Step> {
    let amount = prop_oneof![
        (1u32..6).prop_map(MaxUnavailable::Count),
        (1u32..=100).prop_map(MaxUnavailable::Percent),
    ];
    prop_oneof![
        (amount.clone(), proptest::option::of(amount)).prop_map(|(nodes, max_unavailable)| {
            Step::Nodes {
                nodes,
                max_unavailable,
            }
        }),
        proptest::option::of(1u64..100).prop_map(|d| Step::Pause {
            duration: d.map(Duration::from_secs)
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn never_over_budget_never_a_deferred_node_never_while_holding(
        nodes in proptest::collection::vec(arbitrary_node(), 0..30),
        desired_offset in -2i32..3,
        gone_seen in any::<bool>(),
        steps in proptest::collection::vec(arbitrary_step(), 0..5),
        zoned in any::<bool>(),
        index in 0u32..6,
        elapsed in 0u64..200,
        phase in proptest::sample::select(Phase::ALL.to_vec()),
        promotion in proptest::option::of(proptest::sample::select(vec![Promotion::Step, Promotion::Full])),
        new_revision in any::<bool>(),
        held in any::<bool>(),
        template_changed in any::<bool>(),
        retry in any::<bool>(),
        analysis in proptest::option::of((0u32..6, 0u8..4, any::<bool>())),
    ) {
        // One pod per node name, as a DaemonSet has.
        let mut nodes = nodes;
        nodes.sort_by(|a, b| a.name.cmp(&b.name));
        nodes.dedup_by(|a, b| a.name == b.name);
        // The DaemonSet's desired count drops a gone node once its controller has seen the
        // Node deleted (`gone_seen`), and counts it until then; it may also be behind the
        // nodes (one added a moment ago, its pod already there: soak seed 23003655) or ahead
        // of them (a node whose pod is not created yet).
        let gone = nodes.iter().filter(|n| n.health == NodeHealth::Missing).count();
        let seen = if gone_seen { gone } else { 0 };
        let shown = i32::try_from(nodes.len() - seen).unwrap();
        let desired = u32::try_from((shown + desired_offset).max(0)).unwrap();
        let plan = StepPlan::new(steps).zoned(zoned);
        let observation = PodObservation {
            name: NAME.into(),
            rollout_observed: true,
            new_revision,
            desired_pods: desired,
            promotion,
            held,
            template_changed,
            retry,
            position: Some(StepPosition { index, elapsed: Duration::from_secs(elapsed), deferred: 0 }),
            previous: Some(previous(phase)),
            nodes: nodes.clone(),
            analysis: analysis.map(|(step, verdict, announced)| StepAnalysis {
                step,
                verdict: match verdict {
                    0 => AnalysisVerdict::Pending,
                    1 => AnalysisVerdict::Passing,
                    2 => AnalysisVerdict::Failed { metric: "m".into(), detail: "high".into() },
                    _ => AnalysisVerdict::Inconclusive { metric: "m".into(), detail: "down".into() },
                },
                announced,
            }),
            ..PodObservation::default()
        };
        let decision = decide_pods(&pods(), &plan, &observation);
        // An analysed pause step whose analysis has not passed is never left, and nothing is
        // deleted from it, unless a person promotes it (or the rollout starts over).
        let gate_closed = observation.analysis.as_ref().is_some_and(|a| {
            a.step == index && a.verdict != AnalysisVerdict::Passing
        });
        let in_pause = matches!(plan.steps().get(index as usize), Some(Step::Pause { .. }));
        let walking = !template_changed && !new_revision && !retry && promotion.is_none()
            && phase.is_in_progress();
        if gate_closed && in_pause && walking {
            prop_assert!(decision.action.step <= index, "left analysed step {index} for {}", decision.action.step);
            prop_assert!(decision.action.delete.is_empty());
        }
        // Issue 46: a failed measurement of the step the rollout is in, pause or nodes step,
        // fails it, and nothing is deleted.
        let failed_here = observation.analysis.as_ref().is_some_and(|a| {
            a.step == index && matches!(a.verdict, AnalysisVerdict::Failed { .. })
        });
        if failed_here && walking && !held && index < plan.len() {
            prop_assert!(decision.action.delete.is_empty(), "deleted after a failed analysis");
        }
        let tally = decision.action.tally;
        let deletions = u32::try_from(decision.action.delete.len()).unwrap();
        // Old pods that are not ready are unavailable already: only ready ones take budget.
        let ready_deletions = u32::try_from(decision.action.delete.iter().filter(|d| {
            nodes.iter().any(|n| n.name == d.node && n.pod.as_ref().is_some_and(|p| p.ready))
        }).count()).unwrap();
        if ready_deletions > 0 {
            prop_assert!(tally.unavailable + ready_deletions <= tally.budget, "{tally:?} + {ready_deletions}");
            // And against the nodes themselves, whatever the tally says: a healthy node
            // without a ready pod is down (soak seed 21001371 undercounted them).
            let known_down = u32::try_from(nodes.iter().filter(|n| {
                n.health == NodeHealth::Healthy && !n.pod.as_ref().is_some_and(|p| p.ready)
            }).count()).unwrap();
            prop_assert!(known_down + ready_deletions <= tally.budget, "{known_down} down, {tally:?} + {ready_deletions}");
        }
        if deletions > 0 {
            prop_assert!(matches!(decision.phase, Phase::Canary | Phase::Increasing | Phase::Waiting | Phase::Successful));
            prop_assert!(decision.failure.is_none());
        }
        for deletion in &decision.action.delete {
            let node = nodes.iter().find(|n| n.name == deletion.node).unwrap();
            prop_assert_eq!(node.health, NodeHealth::Healthy);
            let pod = node.pod.as_ref().unwrap();
            prop_assert!(!pod.updated, "only old pods go");
            prop_assert_eq!(&pod.uid, &deletion.uid);
            prop_assert!(!decision.action.deferred.iter().any(|(n, _)| n == &deletion.node));
        }
        if decision.phase == Phase::Failed || decision.phase == Phase::Paused || decision.phase == Phase::Started {
            prop_assert!(decision.action.delete.is_empty());
        }
        if held {
            prop_assert!(decision.action.delete.is_empty() && decision.write.is_none(), "nothing moves while held");
            prop_assert!(!decision.action.promotion_consumed, "a promotion waits for the hold to end");
            prop_assert!(decision.held);
        }
        let mut names: Vec<_> = decision.action.delete.iter().map(|d| &d.node).collect();
        names.dedup();
        prop_assert_eq!(names.len(), decision.action.delete.len(), "a node at most once");
        prop_assert!(decision.action.step <= plan.len());
        if zoned && decision.action.step > 0 && deletions > 0 {
            let zones: std::collections::BTreeSet<_> = decision.action.delete.iter()
                .map(|d| nodes.iter().find(|n| n.name == d.node).and_then(|n| n.zone.clone()))
                .collect();
            let first_nodes = plan.steps().iter().position(|s| matches!(s, Step::Nodes { .. }));
            if Some(decision.action.step as usize) != first_nodes {
                prop_assert_eq!(zones.len(), 1, "one zone at a time");
            }
        }
    }
}

#[test]
fn kubevirt_compatibility_is_refused_not_panicked() {
    let strategy = Strategy {
        compatibility: Compatibility::KubeVirt,
        ..Strategy::kubevirt()
    };
    assert_eq!(
        decide_pods(&strategy, &StepPlan::default(), &PodObservation::default()).phase,
        Phase::Failed
    );
}

/// A stalled nodes step names what it counted, deferred nodes left out: "1 of 5 pods" with a
/// sixth, cordoned node (cargo-mutants found the counts of the deadline's message unpinned).
#[test]
fn a_stalled_step_names_the_counted_pods_in_its_failure() {
    let mut nodes = cluster(3, 1);
    nodes.push(node("n98", true, false));
    let mut cordoned = node("n99", false, true);
    cordoned.health = NodeHealth::Cordoned;
    nodes.push(cordoned);
    let mut stalled = at(1, Phase::Increasing, nodes);
    stalled.previous = Some(PreviousPass {
        updated_ready: 1,
        since_progress: Duration::from_secs(601),
        ..previous(Phase::Increasing)
    });
    let decision = by_default(&stalled);
    assert_eq!(
        decision.failure,
        Some(FailureReason::ProgressDeadlineExceeded)
    );
    let message = decision.error.clone().unwrap_or_default();
    assert!(
        message.contains("1 of 5 pods updated and ready"),
        "{message}"
    );
}

/// The deferral of nodes is announced when their number changes, and only then.
#[test]
fn deferred_nodes_are_announced_when_their_number_changes() {
    let deferred_now = |before: u32, cordoned: usize| {
        let mut nodes = cluster(4, 0);
        for node in nodes.iter_mut().take(cordoned) {
            node.health = NodeHealth::Cordoned;
        }
        let mut observation = at(0, Phase::Canary, nodes);
        if let Some(position) = observation.position.as_mut() {
            position.deferred = before;
        }
        let decision = by_default(&observation);
        reasons(&decision).contains(&event_reason::NODES_DEFERRED)
    };
    assert!(deferred_now(0, 1), "a first deferred node");
    assert!(deferred_now(1, 2), "one more");
    assert!(!deferred_now(1, 1), "the same one");
    assert!(!deferred_now(1, 0), "none any more: nothing to warn of");
}

/// The wording of completed steps: nodes listed up to `LISTED_NODES`, a count beyond, and the
/// plural right (cargo-mutants found these unpinned).
#[test]
fn completed_steps_list_their_nodes_or_count_them() {
    let plan = StepPlan::new(vec![
        Step::Nodes {
            nodes: MaxUnavailable::ONE,
            max_unavailable: None,
        },
        Step::Nodes {
            nodes: MaxUnavailable::Count(2),
            max_unavailable: None,
        },
        Step::Nodes {
            nodes: MaxUnavailable::Count(12),
            max_unavailable: None,
        },
        Step::Pause { duration: None },
    ]);
    let messages = |ready: usize| -> Vec<String> {
        let decision = decide_pods(
            &pods(),
            &plan,
            &at(0, Phase::Canary, cluster(12 - ready, ready)),
        );
        decision
            .events
            .iter()
            .filter(|e| e.reason == event_reason::STEP_COMPLETED)
            .map(|e| e.message.clone())
            .collect()
    };
    let twelve = messages(12);
    assert!(twelve[0].ends_with("step 1 of 5 completed: canary on n00, n01, n02, n03, n04, n05, n06, n07, n08, n09 and 2 more"), "{twelve:?}");
    assert!(
        twelve[2].ends_with("step 3 of 5 completed: 12 nodes updated and ready"),
        "{twelve:?}"
    );
    let two = messages(2);
    assert!(
        two[1].ends_with("step 2 of 5 completed: updated and ready: n10, n11"),
        "{two:?}"
    );
}
