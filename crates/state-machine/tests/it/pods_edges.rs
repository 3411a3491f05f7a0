//! Edges of the Pods driver that cargo-mutants found no test pinned (issue 22). In the walk:
//! the zone of a broken old pod, the pods already on the way, the deadline of a step entered
//! in the same pass, the full promotion's message, the wait after the last step and its
//! deadline, a list of exactly `LISTED_NODES` nodes. Around it: a plan that opens with a
//! pause, a retry's first step, the hold over a start or a drift, a drift kept as reported,
//! the names in messages, and the plan's own API; and a rollback's completed steps, which name
//! no canary (found trying a rollback, 2026-12-05). Builders from [`super::pods`].

use std::time::Duration;

use canary_state_machine::{
    DriftPolicy, DriftSeen, FailureReason, MAX_STEPS, MaxUnavailable, NodeHealth, Phase,
    PodObservation, PreviousPass, Promotion, Step, StepPlan, Strategy, WriteKind, decide_pods,
    event_reason,
};

use super::pods::{
    at, by_default, canary_then_hold, cluster, deleted_nodes, node, pods, previous, reasons,
    zoned_cluster, zoned_plan,
};

/// An old pod that is not ready is unavailable already, but it is no disruption of its zone:
/// it is replaced first, and its zone goes first, when no zone is disrupted; when another zone
/// is, that zone goes on and the broken pod waits for its own zone's turn.
#[test]
fn a_broken_old_pod_leads_its_zone_but_does_not_disrupt_it() {
    // z-a n00 (updated) to n03, z-b n04 to n07, z-c n08 to n11; n09's old pod is not ready.
    let mut nodes = zoned_cluster();
    if let Some(pod) = nodes[9].pod.as_mut() {
        pod.ready = false;
    }
    let decision = decide_pods(
        &pods(),
        &zoned_plan(),
        &at(1, Phase::Increasing, nodes.clone()),
    );
    assert_eq!(decision.action.tally.unavailable, 1);
    assert_eq!(
        deleted_nodes(&decision),
        ["n09", "n08", "n10", "n11"],
        "the broken pod first, then the rest of its zone"
    );

    // An updated pod starting in z-b: z-b is the disrupted zone, the one that goes on.
    if let Some(pod) = nodes[5].pod.as_mut() {
        pod.updated = true;
        pod.ready = false;
    }
    let decision = decide_pods(&pods(), &zoned_plan(), &at(1, Phase::Increasing, nodes));
    assert_eq!(decision.action.tally.unavailable, 2);
    assert_eq!(deleted_nodes(&decision), ["n04", "n06", "n07"]);
}

/// A nodes step deletes only what its target still lacks once the pods on the way (updated
/// but starting, or not created yet) are counted: with 2 of a 3-node step's nodes updated,
/// one old pod goes, though the step's budget would allow more.
#[test]
fn pods_on_the_way_count_toward_the_step() {
    let plan = StepPlan::new(vec![
        Step::Nodes {
            nodes: MaxUnavailable::ONE,
            max_unavailable: None,
        },
        Step::Nodes {
            nodes: MaxUnavailable::Count(3),
            max_unavailable: Some(MaxUnavailable::Count(5)),
        },
    ]);
    // n08 updated and ready (the canary); n09 updated and starting, then with no pod yet.
    let mut starting = cluster(8, 2);
    if let Some(pod) = starting[9].pod.as_mut() {
        pod.ready = false;
    }
    let mut missing = cluster(8, 2);
    missing[9].pod = None;
    for nodes in [starting, missing] {
        let decision = decide_pods(&pods(), &plan, &at(1, Phase::Increasing, nodes));
        assert_eq!(
            (decision.phase, decision.action.step),
            (Phase::Increasing, 1)
        );
        assert_eq!(
            (decision.action.tally.target, decision.action.tally.budget),
            (3, 5),
            "{:?}",
            decision.action.tally
        );
        assert_eq!(deleted_nodes(&decision), ["n00"]);
    }
}

/// The progress deadline measures a nodes step that was already running: the canary step
/// entered after a long start (the DaemonSet controller slow to observe the write) is not
/// failed for the time spent starting.
#[test]
fn a_step_entered_in_this_pass_is_not_judged_by_the_time_before_it() {
    let mut observation = at(0, Phase::Started, cluster(5, 0));
    observation.previous = Some(PreviousPass {
        since_progress: Duration::from_secs(3_600),
        ..previous(Phase::Started)
    });
    let decision = by_default(&observation);
    assert_eq!(decision.failure, None, "{:?}", decision.error);
    assert_eq!((decision.phase, decision.action.step), (Phase::Canary, 0));
    assert_eq!(deleted_nodes(&decision), ["n00"]);
}

/// The full promotion's event names what it skipped, one step or several, and says that the
/// last nodes step still keeps its budget only when there is one ahead.
#[test]
fn a_full_promotion_names_the_steps_it_skipped() {
    // `[{nodes: 1}, {pause: {}}, all]`, in the pause: only the pause is skipped.
    let mut nodes = cluster(4, 0);
    nodes.push(node("n99", true, true));
    let observation = PodObservation {
        promotion: Some(Promotion::Full),
        ..at(1, Phase::Paused, nodes)
    };
    let decision = decide_pods(&pods(), &canary_then_hold(), &observation);
    assert_eq!(
        (decision.phase, decision.action.step),
        (Phase::Increasing, 2)
    );
    assert_eq!(reasons(&decision)[0], event_reason::PROMOTED);
    assert_eq!(
        decision.events[0].message,
        "daemonSet node-agent: fully promoted, step 2 of 3 skipped; the last nodes step updates every node at its budget"
    );
    assert_eq!(deleted_nodes(&decision), ["n00"]);
}

/// Every step done but an old pod left (a node uncordoned during the closing pause): the
/// rollout waits and replaces it at the canary budget instead of reporting `successful`.
#[test]
fn a_full_promotion_past_the_last_nodes_step_waits_for_the_old_pods_left() {
    let plan = StepPlan::new(vec![
        Step::Nodes {
            nodes: MaxUnavailable::ONE,
            max_unavailable: None,
        },
        Step::ALL_NODES,
        Step::Pause { duration: None },
    ]);
    assert_eq!(
        plan.len(),
        3,
        "nothing appended after a last step of every node"
    );
    let observation = PodObservation {
        promotion: Some(Promotion::Full),
        ..at(2, Phase::Paused, cluster(1, 4))
    };
    let decision = decide_pods(&pods(), &plan, &observation);
    assert_eq!(reasons(&decision), [event_reason::PROMOTED]);
    assert_eq!(
        decision.events[0].message,
        "daemonSet node-agent: fully promoted, step 3 of 3 skipped"
    );
    assert_eq!((decision.phase, decision.action.step), (Phase::Waiting, 3));
    assert!(!decision.done);
    assert_eq!(deleted_nodes(&decision), ["n00"]);

    let replaced = decide_pods(&pods(), &plan, &at(3, Phase::Waiting, cluster(0, 5)));
    assert_eq!((replaced.phase, replaced.done), (Phase::Successful, true));
    assert_eq!(reasons(&replaced), [event_reason::ROLLOUT_COMPLETED]);
}

/// The wait after the last step has the progress deadline too, counted over the nodes that
/// are not deferred: "3 of 4 pods" with a fifth, cordoned node.
#[test]
fn the_wait_after_the_last_step_fails_past_the_deadline_naming_the_counted_pods() {
    let mut nodes = cluster(0, 4);
    if let Some(pod) = nodes[3].pod.as_mut() {
        pod.ready = false;
    }
    let mut cordoned = node("n99", false, true);
    cordoned.health = NodeHealth::Cordoned;
    nodes.push(cordoned);
    let waiting = |since_progress: u64| {
        let mut observation = at(2, Phase::Waiting, nodes.clone());
        observation.previous = Some(PreviousPass {
            updated_ready: 3,
            since_progress: Duration::from_secs(since_progress),
            ..previous(Phase::Waiting)
        });
        by_default(&observation)
    };

    let within = waiting(599);
    assert_eq!((within.phase, within.failure), (Phase::Waiting, None));

    let stalled = waiting(601);
    assert_eq!(
        stalled.failure,
        Some(FailureReason::ProgressDeadlineExceeded)
    );
    assert!(stalled.action.delete.is_empty());
    let message = stalled.error.clone().unwrap_or_default();
    assert!(
        message.contains("made no progress in phase waiting for 601s"),
        "{message}"
    );
    assert!(
        message.ends_with(": 3 of 4 pods updated and ready"),
        "{message}"
    );
}

/// Exactly `LISTED_NODES` (10) nodes are all listed, with no "and 0 more".
#[test]
fn ten_canary_nodes_are_listed_without_a_remainder() {
    let plan = StepPlan::new(vec![
        Step::Nodes {
            nodes: MaxUnavailable::Count(10),
            max_unavailable: None,
        },
        Step::Pause { duration: None },
    ]);
    let decision = decide_pods(&pods(), &plan, &at(0, Phase::Canary, cluster(2, 10)));
    assert_eq!((decision.phase, decision.action.step), (Phase::Paused, 1));
    assert_eq!(
        decision.action.canary_nodes.as_ref().map(Vec::len),
        Some(10)
    );
    assert_eq!(reasons(&decision)[0], event_reason::STEP_COMPLETED);
    assert_eq!(
        decision.events[0].message,
        "daemonSet node-agent: step 1 of 3 completed: canary on n02, n03, n04, n05, n06, n07, n08, n09, n10, n11"
    );
}

/// A plan may open with a pause: its first nodes step is still the canary (selected nodes
/// first, the canary budget), not a later step.
#[test]
fn the_first_nodes_step_is_the_canary_after_an_opening_pause() {
    let plan = StepPlan::new(vec![
        Step::Pause { duration: None },
        Step::Nodes {
            nodes: MaxUnavailable::ONE,
            max_unavailable: None,
        },
    ]);
    let mut nodes = cluster(5, 0);
    nodes[3].canary = true;
    let decision = decide_pods(&pods(), &plan, &at(1, Phase::Canary, nodes));
    assert_eq!((decision.phase, decision.action.step), (Phase::Canary, 1));
    assert_eq!(deleted_nodes(&decision), ["n03"]);
}

/// A retry goes through every step again, pauses included: a rollout that failed in the last
/// nodes step, retried with its canary ready, holds in the pause after the canary.
#[test]
fn a_retry_goes_through_the_pauses_again() {
    let mut nodes = cluster(3, 0);
    nodes.push(node("n99", true, true));
    let observation = PodObservation {
        retry: true,
        previous: Some(PreviousPass {
            failure: Some(FailureReason::CanaryCrashLooping),
            ..previous(Phase::Failed)
        }),
        ..at(2, Phase::Failed, nodes)
    };
    let decision = decide_pods(&pods(), &canary_then_hold(), &observation);
    assert!(decision.retried);
    assert_eq!((decision.phase, decision.action.step), (Phase::Paused, 1));
    assert!(decision.action.delete.is_empty());
    assert_eq!(
        reasons(&decision),
        [
            event_reason::RETRIED,
            event_reason::STEP_COMPLETED,
            event_reason::STEP_STARTED
        ]
    );
}

/// Held, a start that is not written is not announced either, and a drift already announced
/// is not announced again; a first drift is.
#[test]
fn a_hold_drops_the_start_and_a_drift_already_announced() {
    let mut held = at(1, Phase::Increasing, cluster(3, 1));
    held.held = true;
    held.hold_recorded = true;
    let changed = PodObservation {
        template_changed: true,
        ..held.clone()
    };
    let decision = by_default(&changed);
    assert_eq!((decision.phase, decision.write), (Phase::Paused, None));
    assert!(decision.events.is_empty(), "{:?}", decision.events);

    let drifted = PodObservation {
        drift: Some(DriftSeen {
            what: "image".into(),
        }),
        ..held
    };
    let first = by_default(&drifted);
    assert_eq!((first.phase, first.write), (Phase::Paused, None));
    assert_eq!(reasons(&first), [event_reason::DRIFT_DETECTED]);
    let mut again = drifted.clone();
    again.previous = Some(PreviousPass {
        drifted: true,
        ..previous(Phase::Paused)
    });
    let again = by_default(&again);
    assert_eq!(again.phase, Phase::Paused);
    assert!(again.events.is_empty(), "{:?}", again.events);
}

/// A drift kept as reported (`driftPolicy: Report`) is announced once, and leaves a failed
/// rollout failed for the reason it failed.
#[test]
fn a_reported_drift_is_announced_once_and_keeps_a_failure() {
    let report = Strategy {
        drift_policy: DriftPolicy::Report,
        ..pods()
    };
    let drift = Some(DriftSeen {
        what: "image".into(),
    });
    let first = PodObservation {
        drift: drift.clone(),
        ..at(1, Phase::Increasing, cluster(3, 1))
    };
    let decision = decide_pods(&report, &StepPlan::default(), &first);
    assert_eq!(decision.phase, Phase::Increasing);
    assert_eq!(reasons(&decision), [event_reason::DRIFT_DETECTED]);
    let mut again = first.clone();
    again.previous = Some(PreviousPass {
        drifted: true,
        ..previous(Phase::Increasing)
    });
    let decision = decide_pods(&report, &StepPlan::default(), &again);
    assert!(decision.drifted && decision.events.is_empty());

    let failed = PodObservation {
        drift,
        previous: Some(PreviousPass {
            failure: Some(FailureReason::CanaryCrashLooping),
            ..previous(Phase::Failed)
        }),
        ..at(1, Phase::Failed, cluster(3, 1))
    };
    let decision = decide_pods(&report, &StepPlan::default(), &failed);
    assert_eq!(
        (decision.phase, decision.failure),
        (Phase::Failed, Some(FailureReason::CanaryCrashLooping))
    );
    assert!(decision.action.delete.is_empty());
}

/// Issue 46 (simulation invariant 21): under `driftPolicy: Revert` a hand edit of a failed
/// rollout's DaemonSet is written back under the failure's hold (`RevertHeld`), and the
/// rollout stays failed with nothing deleted: a start would delete the canary's old pod for
/// the release that failed.
#[test]
fn a_reverted_drift_keeps_a_failure_and_deletes_nothing() {
    for failure in [
        FailureReason::CanaryCrashLooping,
        FailureReason::AnalysisFailed,
        FailureReason::NodeUnhealthy,
        FailureReason::NeighboursDisrupted,
    ] {
        let failed = PodObservation {
            drift: Some(DriftSeen {
                what: "image".into(),
            }),
            previous: Some(PreviousPass {
                failure: Some(failure),
                ..previous(Phase::Failed)
            }),
            ..at(1, Phase::Failed, cluster(3, 1))
        };
        let decision = by_default(&failed);
        assert!(decision.drifted, "{failure}");
        assert_eq!(
            (decision.phase, decision.failure),
            (Phase::Failed, Some(failure)),
            "{failure}"
        );
        assert_eq!(
            decision.write.map(|write| write.kind),
            Some(WriteKind::RevertHeld),
            "{failure}"
        );
        assert!(decision.action.delete.is_empty(), "{failure}");
        assert_eq!(reasons(&decision), [event_reason::DRIFT_DETECTED]);
        // The pass after it sees the template written back: still failed, nothing deleted.
        let after = PodObservation {
            drift: None,
            previous: Some(PreviousPass {
                failure: Some(failure),
                drifted: true,
                ..previous(Phase::Failed)
            }),
            ..failed.clone()
        };
        let decision = by_default(&after);
        assert_eq!(
            (decision.phase, decision.failure, decision.write),
            (Phase::Failed, Some(failure), None),
            "{failure}"
        );
        assert!(decision.action.delete.is_empty(), "{failure}");
    }
}

/// The driver's messages name the DaemonSet and the version rolled out.
#[test]
fn messages_name_the_daemon_set_and_the_version() {
    let started = PodObservation {
        version: "v2.0.0".into(),
        template_changed: true,
        ..at(2, Phase::Successful, cluster(3, 0))
    };
    let decision = by_default(&started);
    assert_eq!(reasons(&decision), [event_reason::ROLLOUT_STARTED]);
    assert_eq!(
        decision.events[0].message,
        "daemonSet node-agent: started rollout of v2.0.0"
    );

    let zero_pause = StepPlan::new(vec![Step::Pause {
        duration: Some(Duration::ZERO),
    }]);
    let invalid = decide_pods(&pods(), &zero_pause, &at(0, Phase::Canary, cluster(3, 0)));
    let error = invalid.error.unwrap_or_default();
    assert!(
        error.starts_with("daemonSet node-agent has an invalid strategy: "),
        "{error}"
    );
}

/// A plan reads as written, is never empty, and may have up to `MAX_STEPS` steps.
#[test]
fn a_plan_reads_as_written_and_takes_up_to_max_steps() {
    let steps = [
        (Step::ALL_NODES, "nodes 100%"),
        (
            Step::Nodes {
                nodes: MaxUnavailable::ONE,
                max_unavailable: Some(MaxUnavailable::Count(2)),
            },
            "nodes 1 (maxUnavailable 2)",
        ),
        (
            Step::Pause {
                duration: Some(Duration::from_secs(30)),
            },
            "pause 30s",
        ),
        (Step::Pause { duration: None }, "pause until promoted"),
    ];
    for (step, text) in steps {
        assert_eq!(step.to_string(), text);
    }
    assert!(!StepPlan::default().is_empty());
    assert!(!StepPlan::new(vec![]).is_empty());

    let pauses = vec![Step::Pause { duration: None }; MAX_STEPS - 1];
    let full = StepPlan::new(pauses);
    assert_eq!(full.steps().len(), MAX_STEPS, "the all-nodes step appended");
    assert_eq!(full.validate(), Ok(()));
}

/// A rollback's first step is met by the nodes that never left the revision it goes back to:
/// the completed steps count them instead of naming them as canaries, and no canary nodes are
/// recorded. The same pass outside a rollback names them.
#[test]
fn a_rollbacks_steps_count_the_nodes_that_never_left_and_name_no_canary() {
    let plan = StepPlan::new(vec![
        Step::Nodes {
            nodes: MaxUnavailable::ONE,
            max_unavailable: None,
        },
        Step::Pause { duration: None },
    ])
    .without_pauses();
    let mut observation = at(0, Phase::Canary, cluster(1, 9));
    observation.rollback = true;
    let decision = decide_pods(&pods(), &plan, &observation);
    assert_eq!(decision.action.canary_nodes, Some(Vec::new()));
    assert_eq!(reasons(&decision)[0], event_reason::STEP_COMPLETED);
    assert_eq!(
        decision.events[0].message,
        "daemonSet node-agent: step 1 of 2 completed: 9 nodes on the revision rolled back to"
    );
    assert_eq!(deleted_nodes(&decision), ["n00"], "the last old pod goes");

    observation.rollback = false;
    let decision = decide_pods(&pods(), &plan, &observation);
    assert_eq!(decision.action.canary_nodes.as_ref().map(Vec::len), Some(9));
    assert!(
        decision.events[0].message.ends_with(
            "step 1 of 2 completed: canary on n01, n02, n03, n04, n05, n06, n07, n08, n09"
        ),
        "{}",
        decision.events[0].message
    );
}
