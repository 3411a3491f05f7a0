//! The health gates (issue 46) through both drivers' tables: a node broken after its update
//! fails the rollout with `NodeUnhealthy` before anything is deleted or widened; a node
//! unhealthy before its update does not; the canary soaks before the widen or the next step;
//! `onUnhealthy: Hold` holds as the `pause` verb does; a canary whose neighbours are
//! disrupted fails with `NeighboursDisrupted` against a quiet baseline, and does not against
//! a disrupted one or with the gate off.

use std::time::Duration;

use canary_state_machine::{
    Compatibility, FailureReason, HealthFacts, HealthPolicy, LiveMaxUnavailable, MaxUnavailable,
    NeighbourFacts, NeighbourNode, NeighbourPolicy, NeighbourTally, NodeHealth, NodePod, NodeSeen,
    Observation, OnUnhealthy, Phase, PodObservation, Stamp, Strategy, UnhealthyNode, WriteKind,
    decide, event_reason,
};

use crate::common::after_start;
use crate::pods::{at, by_default, cluster, deleted_nodes, previous, reasons};

const CREATED: i64 = 1_000;

fn broken(node: &str, since: i64, pod: NodePod) -> UnhealthyNode {
    UnhealthyNode {
        node: node.into(),
        since: Stamp(since),
        seen: NodeSeen {
            condition: "Ready".into(),
            status: "Unknown".into(),
            reason: "NodeStatusUnknown".into(),
            message: "Kubelet stopped posting node status.".into(),
        },
        pod,
    }
}

fn updated() -> NodePod {
    NodePod::Updated {
        created: Stamp(CREATED),
    }
}

fn facts(policy: HealthPolicy, unhealthy: Vec<UnhealthyNode>) -> HealthFacts {
    HealthFacts {
        policy,
        now: Stamp(CREATED + 120),
        unhealthy,
        canary_ready_since: Some(Stamp(CREATED + 10)),
        answered: None,
        neighbours: NeighbourFacts::default(),
        rested_since: None,
    }
}

/// The canary `node` updated at `CREATED`, `disrupted` of its `pods` neighbours disrupted a
/// minute later, against `baseline` disrupted of 49 nodes not updated.
fn neighbours(node: &str, pods: u32, disrupted: u32, baseline: u32) -> NeighbourFacts {
    NeighbourFacts {
        updated: vec![NeighbourNode {
            node: node.into(),
            updated: Stamp(CREATED),
            tally: NeighbourTally {
                pods,
                lost_readiness: disrupted,
                restarted: 0,
                first: (disrupted > 0).then_some(Stamp(CREATED + 60)),
            },
        }],
        baseline_disrupted: baseline,
        baseline_nodes: 49,
    }
}

fn with_neighbours(policy: HealthPolicy, neighbours: NeighbourFacts) -> HealthFacts {
    HealthFacts {
        neighbours,
        ..facts(policy, Vec::new())
    }
}

fn no_soak() -> HealthPolicy {
    HealthPolicy {
        canary_soak: Duration::ZERO,
        ..HealthPolicy::default()
    }
}

/// The MaxUnavailable driver's canary is ready on 1 of 3 nodes, about to widen.
fn canary_ready(health: Option<HealthFacts>) -> Observation {
    Observation {
        previous: Some(canary_pass()),
        health,
        ..after_start(3, 1)
    }
}

fn canary_pass() -> canary_state_machine::PreviousPass {
    previous(Phase::Canary)
}

#[test]
fn max_unavailable_a_node_broken_after_its_update_fails_before_the_widen() {
    let observation = canary_ready(Some(facts(
        no_soak(),
        vec![broken("n2", CREATED + 60, updated())],
    )));
    let decision = decide(&Strategy::default(), &observation);
    assert_eq!(decision.phase, Phase::Failed);
    assert_eq!(decision.failure, Some(FailureReason::NodeUnhealthy));
    // Nothing widened, and the DaemonSet controller stopped too: a broken node may keep its
    // pod ready, and at maxUnavailable 1 it would go on to the next node by itself.
    assert_eq!(decision.write.map(|w| w.kind), Some(WriteKind::Hold));
    let on_hold = Observation {
        live_on_hold: true,
        ..observation.clone()
    };
    assert_eq!(
        decide(&Strategy::default(), &on_hold).write,
        None,
        "held already"
    );
    let event = decision
        .event(event_reason::NODE_UNHEALTHY)
        .expect("a Warning");
    assert!(
        event
            .message
            .contains("n2 (Ready Unknown, NodeStatusUnknown"),
        "{}",
        event.message
    );
    // Sticky: the next pass stays failed without announcing it again, even once the node
    // is out of the window or back.
    let again = canary_ready(Some(facts(no_soak(), Vec::new())));
    let again = Observation {
        previous: Some(canary_state_machine::PreviousPass {
            failure: Some(FailureReason::NodeUnhealthy),
            ..previous(Phase::Failed)
        }),
        ..again
    };
    let decision = decide(&Strategy::default(), &again);
    assert_eq!(decision.failure, Some(FailureReason::NodeUnhealthy));
    assert!(decision.events.is_empty() && decision.write.is_none());
}

/// A hold on request over a failed rollout, resumed: the failure's `OnDelete` stays, so that
/// the DaemonSet controller does not go on with the release that broke a node (simulation
/// seed 18 with a release that breaks its node, invariant 33: the resume wrote
/// `RollingUpdate` back and the DaemonSet controller replaced the next pods).
#[test]
fn max_unavailable_a_resume_after_the_failure_keeps_the_daemon_set_held() {
    let failed_on_hold = Observation {
        live_on_hold: true,
        previous: Some(canary_state_machine::PreviousPass {
            failure: Some(FailureReason::NodeUnhealthy),
            ..previous(Phase::Failed)
        }),
        ..canary_ready(Some(facts(
            no_soak(),
            vec![broken("n2", CREATED + 60, updated())],
        )))
    };
    let paused = decide(
        &Strategy::default(),
        &Observation {
            held: true,
            ..failed_on_hold.clone()
        },
    );
    assert_eq!((paused.phase, paused.write), (Phase::Failed, None));
    let resumed = decide(
        &Strategy::default(),
        &Observation {
            hold_recorded: true,
            ..failed_on_hold
        },
    );
    assert_eq!(resumed.phase, Phase::Failed);
    assert_eq!(resumed.write, None, "the failure's OnDelete stays");
    assert_eq!(
        resumed.hold_event().map(|e| e.reason),
        Some(event_reason::RESUMED)
    );
}

#[test]
fn max_unavailable_a_node_unhealthy_before_its_update_is_no_evidence() {
    let observation = canary_ready(Some(facts(
        no_soak(),
        vec![broken("n2", CREATED - 300, updated())],
    )));
    let decision = decide(&Strategy::default(), &observation);
    assert_eq!(decision.phase, Phase::Increasing, "widens as before");
    assert_eq!(decision.write.map(|w| w.kind), Some(WriteKind::Widen));
}

#[test]
fn max_unavailable_the_reference_table_fails_too_and_the_failure_stays() {
    let strategy = Strategy::kubevirt();
    let observation = Observation {
        live_max_unavailable: LiveMaxUnavailable::Int(1),
        ..canary_ready(Some(facts(
            HealthPolicy::kubevirt(),
            vec![broken("n2", CREATED + 60, updated())],
        )))
    };
    let decision = decide(&strategy, &observation);
    assert_eq!(decision.failure, Some(FailureReason::NodeUnhealthy));
    let after_the_window = Observation {
        previous: Some(canary_state_machine::PreviousPass {
            failure: Some(FailureReason::NodeUnhealthy),
            ..previous(Phase::Failed)
        }),
        health: Some(facts(HealthPolicy::kubevirt(), Vec::new())),
        ..observation
    };
    assert_eq!(
        decide(&strategy, &after_the_window).failure,
        Some(FailureReason::NodeUnhealthy)
    );
    assert_eq!(strategy.compatibility, Compatibility::KubeVirt);
}

#[test]
fn max_unavailable_the_canary_soaks_before_the_widen_with_the_daemon_set_controller_held() {
    let mut soaking = facts(HealthPolicy::default(), Vec::new());
    soaking.now = Stamp(CREATED + 20);
    // At maxUnavailable 1 the DaemonSet controller would replace the next pod as soon as the
    // canary is available: the soak holds it (`OnDelete`), then comes back when it ends.
    let decision = decide(&Strategy::default(), &canary_ready(Some(soaking.clone())));
    assert_eq!(decision.phase, Phase::Canary);
    assert_eq!(decision.write.map(|w| w.kind), Some(WriteKind::Hold));
    assert_eq!(decision.action.wake_after, Some(Duration::from_secs(20)));
    let held = Observation {
        live_on_hold: true,
        ..canary_ready(Some(soaking.clone()))
    };
    let decision = decide(&Strategy::default(), &held);
    assert_eq!((decision.phase, decision.write), (Phase::Canary, None));
    assert_eq!(decision.action.wake_after, Some(Duration::from_secs(20)));
    // Held before the canary is ready too: nothing proves it yet.
    let mut not_ready = soaking.clone();
    not_ready.canary_ready_since = None;
    let starting = Observation {
        updated_ready_pods: 0,
        ..canary_ready(Some(not_ready))
    };
    assert_eq!(
        decide(&Strategy::default(), &starting)
            .write
            .map(|w| w.kind),
        Some(WriteKind::Hold)
    );
    // A DaemonSet just created (pods missing, none old) has nothing to hold back.
    let created = Observation {
        updated_ready_pods: 0,
        old_pods: 0,
        ..canary_ready(Some(soaking.clone()))
    };
    assert_eq!(decide(&Strategy::default(), &created).write, None);
    // A restarted controller reads the same Ready time: the soak does not start again; the
    // widen's write (RollingUpdate at 10%) ends the hold.
    soaking.now = Stamp(CREATED + 40);
    let decision = decide(
        &Strategy::default(),
        &Observation {
            live_on_hold: true,
            ..canary_ready(Some(soaking))
        },
    );
    assert_eq!(decision.phase, Phase::Increasing);
    let write = decision.write.unwrap();
    assert_eq!(
        (write.kind, write.max_unavailable),
        (WriteKind::Widen, Some(MaxUnavailable::TEN_PERCENT))
    );
}

/// With surge (issue 50) the canary starts beside its node's old pod, and `OnDelete` would make
/// the DaemonSet controller delete the younger pod, the canary itself: the soak writes its hold
/// only once the canary has its node to itself (the DaemonSet controller deleted the old pod
/// once the canary was available). The nodes surging then lose only their new pod; until then
/// the widen waits all the same. Each row names its case.
#[test]
fn max_unavailable_with_surge_the_soak_holds_once_the_canary_has_its_node() {
    let mut soaking = facts(HealthPolicy::default(), Vec::new());
    soaking.now = Stamp(CREATED + 20);
    // (case, surge, canary ready, old pods, canary alone, on hold, the write)
    type Row = (
        &'static str,
        bool,
        bool,
        u32,
        Option<bool>,
        bool,
        Option<WriteKind>,
    );
    let rows: [Row; 7] = [
        (
            "the canary starts beside its old pod",
            true,
            false,
            3,
            Some(false),
            false,
            None,
        ),
        (
            "ready, its old pod not yet gone",
            true,
            true,
            3,
            Some(false),
            false,
            None,
        ),
        ("not counted: no hold", true, true, 3, None, false, None),
        (
            "its node lost its old pod: the hold",
            true,
            true,
            2,
            Some(true),
            false,
            Some(WriteKind::Hold),
        ),
        (
            "held already: kept, nothing written",
            true,
            true,
            2,
            Some(true),
            true,
            None,
        ),
        (
            "held already (a pause) before the canary's handover",
            true,
            true,
            3,
            Some(false),
            true,
            None,
        ),
        (
            "without surge it holds at once",
            false,
            false,
            3,
            None,
            false,
            Some(WriteKind::Hold),
        ),
    ];
    for (name, surge, ready, old, alone, on_hold, write) in rows {
        let mut facts = soaking.clone();
        if !ready {
            facts.canary_ready_since = None;
        }
        let observation = Observation {
            surge,
            surge_canary_alone: alone,
            updated_ready_pods: u32::from(ready),
            old_pods: old,
            live_on_hold: on_hold,
            ..canary_ready(Some(facts))
        };
        let decision = decide(&Strategy::default(), &observation);
        assert_eq!(decision.phase, Phase::Canary, "{name}");
        assert_eq!(decision.write.map(|w| w.kind), write, "{name}");
        // Held (or about to be), the pass keeps the hold; not yet, it holds nothing.
        assert_eq!(
            decision.action.keeps_hold,
            on_hold || write.is_some(),
            "{name}"
        );
        if ready {
            assert!(
                decision.action.wake_after.is_some(),
                "{name}: back when the soak ends"
            );
        }
    }
    // Two nodes: the canary's handover surges the other node at once, so every desired pod
    // counts as updated while an old one is left; the soak still holds (simulation seed 0
    // with surge once read it as nothing left to hold).
    let two_nodes = Observation {
        surge: true,
        surge_canary_alone: Some(true),
        desired_pods: 2,
        updated_pods: 2,
        updated_ready_pods: 1,
        old_pods: 1,
        ..canary_ready(Some(soaking.clone()))
    };
    let decision = decide(&Strategy::default(), &two_nodes);
    assert_eq!(decision.phase, Phase::Canary);
    assert_eq!(decision.write.map(|w| w.kind), Some(WriteKind::Hold));
    // The hold written under surge still waits for a node whose oldest pod is not ready
    // beside a younger one (a rollback's crash-looping pod beside its surged good one).
    let unsettled = Observation {
        surge: true,
        surge_canary_alone: Some(true),
        surge_unsettled_nodes: Some(1),
        old_pods: 2,
        ..canary_ready(Some(soaking.clone()))
    };
    assert_eq!(decide(&Strategy::default(), &unsettled).write, None);
    // The widen ends the hold: written from `OnDelete` once the canary has soaked (the
    // adapter writes the fast value as `maxSurge` again).
    soaking.now = Stamp(CREATED + 40);
    let widened = decide(
        &Strategy::default(),
        &Observation {
            surge: true,
            surge_canary_alone: Some(true),
            old_pods: 2,
            live_on_hold: true,
            ..canary_ready(Some(soaking))
        },
    );
    assert_eq!(widened.phase, Phase::Increasing);
    let write = widened.write.unwrap();
    assert_eq!(
        (write.kind, write.max_unavailable),
        (WriteKind::Widen, Some(MaxUnavailable::TEN_PERCENT))
    );
}

/// With surge (issue 50) a hold's `OnDelete` waits while a node's oldest pod is not ready
/// beside a younger one: the DaemonSet controller, no longer surging, would keep that pod and
/// delete the younger, ready one. It is written once no such node is left, by a pause's next
/// pass and by a sticky failure's (whose own pass could not write it). Each row names its case.
#[test]
fn max_unavailable_with_surge_the_hold_waits_for_the_nodes_to_settle() {
    let failed = |failure| canary_state_machine::PreviousPass {
        failure: Some(failure),
        ..previous(Phase::Failed)
    };
    let rows: [(&str, Observation, Option<WriteKind>); 7] = [
        (
            "a pause, a node unsettled: waits",
            Observation {
                held: true,
                surge: true,
                surge_unsettled_nodes: Some(1),
                ..canary_ready(None)
            },
            None,
        ),
        (
            "a pause, every node settled: holds",
            Observation {
                held: true,
                surge: true,
                surge_unsettled_nodes: Some(0),
                ..canary_ready(None)
            },
            Some(WriteKind::Hold),
        ),
        (
            "a pause without surge holds at once",
            Observation {
                held: true,
                surge_unsettled_nodes: Some(1),
                ..canary_ready(None)
            },
            Some(WriteKind::Hold),
        ),
        (
            "failed on a broken node, settled now: the hold is written",
            Observation {
                surge: true,
                surge_unsettled_nodes: Some(0),
                previous: Some(failed(FailureReason::NodeUnhealthy)),
                ..canary_ready(None)
            },
            Some(WriteKind::Hold),
        ),
        (
            "failed analysis, still unsettled: waits",
            Observation {
                surge: true,
                surge_unsettled_nodes: Some(2),
                previous: Some(failed(FailureReason::AnalysisFailed)),
                ..canary_ready(None)
            },
            None,
        ),
        (
            "failed, on hold already: nothing",
            Observation {
                surge: true,
                live_on_hold: true,
                previous: Some(failed(FailureReason::NeighboursDisrupted)),
                ..canary_ready(None)
            },
            None,
        ),
        (
            "a crash-looping canary holds nothing (the surge waits on it by itself)",
            Observation {
                surge: true,
                surge_unsettled_nodes: Some(0),
                previous: Some(failed(FailureReason::CanaryCrashLooping)),
                ..canary_ready(None)
            },
            None,
        ),
    ];
    for (name, observation, write) in rows {
        let decision = decide(&Strategy::default(), &observation);
        assert_eq!(decision.write.map(|w| w.kind), write, "{name}");
        if observation.surge_unsettled_nodes.unwrap_or(0) > 0 && observation.surge {
            assert_eq!(
                decision.action.wake_after,
                Some(canary_state_machine::SURGE_SETTLE_RECHECK),
                "{name}"
            );
            assert!(!decision.action.keeps_hold, "{name}");
        }
    }
}

/// A `pause` during the canary's soak reuses the soak's hold (the DaemonSet is on `OnDelete`
/// already): nothing is written while paused, and the resume writes no `RollingUpdate` while
/// the soak still holds (soak seeds 18, 64 and 89 once paid two writes more for it); once the
/// canary has soaked, the widen's write ends both holds.
#[test]
fn max_unavailable_a_pause_during_the_soak_reuses_its_hold() {
    let mut soaking = facts(HealthPolicy::default(), Vec::new());
    soaking.now = Stamp(CREATED + 20);
    let on_soak_hold = Observation {
        live_on_hold: true,
        ..canary_ready(Some(soaking.clone()))
    };
    let paused = decide(
        &Strategy::default(),
        &Observation {
            held: true,
            ..on_soak_hold.clone()
        },
    );
    assert_eq!((paused.phase, paused.write), (Phase::Paused, None));
    assert_eq!(
        paused.hold_event().map(|e| e.reason),
        Some(event_reason::PAUSED)
    );
    // Resumed within the soak: announced, nothing written, back when the soak ends.
    let resumed = decide(
        &Strategy::default(),
        &Observation {
            hold_recorded: true,
            previous: Some(previous(Phase::Paused)),
            ..on_soak_hold.clone()
        },
    );
    assert_eq!((resumed.phase, resumed.write), (Phase::Canary, None));
    assert_eq!(
        resumed.hold_event().map(|e| e.reason),
        Some(event_reason::RESUMED)
    );
    assert_eq!(resumed.action.wake_after, Some(Duration::from_secs(20)));
    // Paused before the canary's pod exists (a hold on request, `OnDelete`), resumed once it
    // does: the soak keeps that hold too.
    let mut not_ready = soaking.clone();
    not_ready.canary_ready_since = None;
    let resumed_starting = decide(
        &Strategy::default(),
        &Observation {
            hold_recorded: true,
            live_on_hold: true,
            updated_ready_pods: 0,
            previous: Some(previous(Phase::Paused)),
            ..canary_ready(Some(not_ready))
        },
    );
    assert_eq!(resumed_starting.write, None);
    // Paused before the canary's pod exists and resumed still without it: the DaemonSet
    // controller must create it, so the resume writes `RollingUpdate` back.
    let mut no_canary = soaking.clone();
    no_canary.canary_ready_since = None;
    let resumed_early = decide(
        &Strategy::default(),
        &Observation {
            hold_recorded: true,
            live_on_hold: true,
            updated_pods: 0,
            updated_ready_pods: 0,
            previous: Some(previous(Phase::Paused)),
            ..canary_ready(Some(no_canary))
        },
    );
    assert_eq!(resumed_early.write.map(|w| w.kind), Some(WriteKind::Resume));
    // Resumed after the soak: the widen's write, which sets `RollingUpdate` itself.
    soaking.now = Stamp(CREATED + 40);
    let widened = decide(
        &Strategy::default(),
        &Observation {
            hold_recorded: true,
            previous: Some(previous(Phase::Paused)),
            live_on_hold: true,
            ..canary_ready(Some(soaking))
        },
    );
    assert_eq!(widened.write.map(|w| w.kind), Some(WriteKind::Widen));
}

#[test]
fn max_unavailable_on_unhealthy_hold_pauses_with_the_hold_write() {
    let policy = HealthPolicy {
        on_unhealthy: OnUnhealthy::Hold,
        ..no_soak()
    };
    let observation = canary_ready(Some(facts(
        policy,
        vec![broken("n2", CREATED + 60, updated())],
    )));
    let decision = decide(&Strategy::default(), &observation);
    assert_eq!(decision.phase, Phase::Paused);
    assert_eq!(decision.failure, None);
    assert!(decision.held);
    assert_eq!(decision.write.map(|w| w.kind), Some(WriteKind::Hold));
    let warning = decision
        .event(event_reason::NODE_UNHEALTHY)
        .expect("a Warning");
    assert!(warning.message.contains("n2"));
}

/// The Pods driver in its first nodes step, the canary `n02` updated.
fn pods_canary(health: Option<HealthFacts>, canary_health: NodeHealth) -> PodObservation {
    let mut nodes = cluster(2, 1);
    nodes[2].health = canary_health;
    PodObservation {
        health,
        ..at(0, Phase::Canary, nodes)
    }
}

#[test]
fn pods_a_node_broken_after_its_update_fails_and_deletes_nothing() {
    let observation = pods_canary(
        Some(facts(
            no_soak(),
            vec![broken("n02", CREATED + 60, updated())],
        )),
        NodeHealth::NotReady,
    );
    let decision = by_default(&observation);
    assert_eq!(decision.phase, Phase::Failed);
    assert_eq!(decision.failure, Some(FailureReason::NodeUnhealthy));
    assert!(deleted_nodes(&decision).is_empty());
    assert_eq!(reasons(&decision), [event_reason::NODE_UNHEALTHY]);
    // Without the gate (wave 2), the canary's node was set aside and the next one deleted.
    let before = by_default(&pods_canary(None, NodeHealth::NotReady));
    assert!(!deleted_nodes(&before).is_empty(), "{before:?}");
}

#[test]
fn pods_a_node_unhealthy_before_its_update_is_set_aside_as_before() {
    let observation = pods_canary(
        Some(facts(
            no_soak(),
            vec![broken("n02", CREATED - 1, updated())],
        )),
        NodeHealth::NotReady,
    );
    let decision = by_default(&observation);
    assert_ne!(decision.phase, Phase::Failed);
    assert_eq!(
        decision,
        by_default(&pods_canary(None, NodeHealth::NotReady))
    );
}

#[test]
fn pods_the_canary_soaks_before_the_next_step() {
    let mut soaking = facts(HealthPolicy::default(), Vec::new());
    soaking.now = Stamp(CREATED + 15);
    let decision = by_default(&pods_canary(Some(soaking.clone()), NodeHealth::Healthy));
    assert_eq!(decision.phase, Phase::Canary);
    assert!(deleted_nodes(&decision).is_empty());
    assert_eq!(decision.action.wake_after, Some(Duration::from_secs(25)));
    assert_eq!(decision.action.step, 0);
    soaking.now = Stamp(CREATED + 41);
    let decision = by_default(&pods_canary(Some(soaking), NodeHealth::Healthy));
    assert_eq!(decision.action.step, 1, "soaked: the next step");
    assert!(!deleted_nodes(&decision).is_empty());
}

#[test]
fn pods_on_unhealthy_hold_pauses_and_deletes_nothing() {
    let policy = HealthPolicy {
        on_unhealthy: OnUnhealthy::Hold,
        ..no_soak()
    };
    let observation = pods_canary(
        Some(facts(policy, vec![broken("n02", CREATED + 60, updated())])),
        NodeHealth::NotReady,
    );
    let decision = by_default(&observation);
    assert_eq!(decision.phase, Phase::Paused);
    assert!(decision.held);
    assert!(deleted_nodes(&decision).is_empty());
    assert!(decision.write.is_none());
    assert!(reasons(&decision).contains(&event_reason::NODE_UNHEALTHY));
}

/// `onFailure: Rollback` after `NodeUnhealthy`: the rollback replaces the pod on the node the
/// release broke (NotReady), which a rollout would defer, first; only that node waits for it.
#[test]
fn pods_a_rollback_replaces_the_pod_on_the_node_the_release_broke() {
    // Rolling back to v1: n00 and n01 never left it (updated, for the rollback), n02 runs
    // the failed v2 and is NotReady.
    let mut nodes = cluster(0, 3);
    nodes[2].health = NodeHealth::NotReady;
    if let Some(pod) = &mut nodes[2].pod {
        pod.updated = false;
        pod.ready = false;
    }
    let observation = PodObservation {
        rollback: true,
        ..at(0, Phase::Canary, nodes.clone())
    };
    let decision = by_default(&observation);
    assert_eq!(deleted_nodes(&decision), ["n02"], "{decision:?}");
    assert!(decision.action.deferred.is_empty());
    // Not a rollback: the same NotReady node on an old pod is deferred as before.
    let rollout = by_default(&at(0, Phase::Canary, nodes));
    assert!(deleted_nodes(&rollout).is_empty(), "{rollout:?}");
    assert_eq!(rollout.action.deferred.len(), 1);
}

/// A pause step right after the canary's is its soak: the rollout goes into it at once.
#[test]
fn pods_a_pause_after_the_canary_step_is_its_soak() {
    let mut soaking = facts(HealthPolicy::default(), Vec::new());
    soaking.now = Stamp(CREATED + 15);
    let decision = canary_state_machine::decide_pods(
        &Strategy::default(),
        &crate::pods::canary_then_hold(),
        &pods_canary(Some(soaking), NodeHealth::Healthy),
    );
    assert_eq!(decision.phase, Phase::Paused);
    assert_eq!(decision.action.step, 1);
}

/// The neighbours gate on the MaxUnavailable driver: the canary's three neighbours disrupted
/// a minute after its update, none of the 49 old nodes': `NeighboursDisrupted` before the
/// widen, with the hold write; the failure stays.
#[test]
fn max_unavailable_a_canary_that_disrupts_its_neighbours_fails_before_the_widen() {
    let observation = canary_ready(Some(with_neighbours(no_soak(), neighbours("n2", 3, 3, 0))));
    let decision = decide(&Strategy::default(), &observation);
    assert_eq!(decision.phase, Phase::Failed);
    assert_eq!(decision.failure, Some(FailureReason::NeighboursDisrupted));
    assert_eq!(decision.write.map(|w| w.kind), Some(WriteKind::Hold));
    let event = decision
        .event(event_reason::NEIGHBOURS_DISRUPTED)
        .expect("a Warning");
    assert!(event.message.contains("n2"), "{}", event.message);
    assert!(event.message.contains("3/3"), "{}", event.message);
    let recovered = Observation {
        previous: Some(canary_state_machine::PreviousPass {
            failure: Some(FailureReason::NeighboursDisrupted),
            ..previous(Phase::Failed)
        }),
        health: Some(with_neighbours(no_soak(), NeighbourFacts::default())),
        ..observation
    };
    assert_eq!(
        decide(&Strategy::default(), &recovered).failure,
        Some(FailureReason::NeighboursDisrupted),
        "sticky: the neighbours recovering does not widen"
    );
}

/// Each row of the gate through the MaxUnavailable driver's table: what widens and what fails.
#[test]
fn max_unavailable_neighbour_rows() {
    let off = HealthPolicy {
        neighbours: NeighbourPolicy {
            enabled: false,
            ..NeighbourPolicy::default()
        },
        ..no_soak()
    };
    let cases = [
        (
            "3 of 3, quiet baseline",
            no_soak(),
            neighbours("n2", 3, 3, 0),
            Phase::Failed,
        ),
        (
            "3 of 3, one old node disrupted too",
            no_soak(),
            neighbours("n2", 3, 3, 1),
            Phase::Increasing,
        ),
        (
            "1 of 3: background",
            no_soak(),
            neighbours("n2", 3, 1, 0),
            Phase::Increasing,
        ),
        (
            "no neighbours",
            no_soak(),
            neighbours("n2", 0, 0, 0),
            Phase::Increasing,
        ),
        (
            "the gate off",
            off,
            neighbours("n2", 3, 3, 0),
            Phase::Increasing,
        ),
    ];
    for (name, policy, facts, phase) in cases {
        let decision = decide(
            &Strategy::default(),
            &canary_ready(Some(with_neighbours(policy, facts))),
        );
        assert_eq!(decision.phase, phase, "{name}");
    }
}

#[test]
fn pods_a_canary_that_disrupts_its_neighbours_fails_and_deletes_nothing() {
    let observation = pods_canary(
        Some(with_neighbours(no_soak(), neighbours("n02", 3, 3, 0))),
        NodeHealth::Healthy,
    );
    let decision = by_default(&observation);
    assert_eq!(decision.phase, Phase::Failed);
    assert_eq!(decision.failure, Some(FailureReason::NeighboursDisrupted));
    assert!(deleted_nodes(&decision).is_empty());
    assert_eq!(reasons(&decision), [event_reason::NEIGHBOURS_DISRUPTED]);
    // Without the gate (wave 2), the canary was ready: the next step went on.
    let quiet = by_default(&pods_canary(
        Some(with_neighbours(no_soak(), neighbours("n02", 3, 0, 0))),
        NodeHealth::Healthy,
    ));
    assert!(!deleted_nodes(&quiet).is_empty(), "{quiet:?}");
}

/// During the canary's soak the neighbours are watched: the failure comes before the soak ends.
#[test]
fn pods_the_canary_soak_watches_its_neighbours() {
    let mut soaking = with_neighbours(HealthPolicy::default(), neighbours("n02", 3, 3, 0));
    soaking.now = Stamp(CREATED + 15);
    let decision = by_default(&pods_canary(Some(soaking), NodeHealth::Healthy));
    assert_eq!(decision.failure, Some(FailureReason::NeighboursDisrupted));
    assert!(deleted_nodes(&decision).is_empty());
}

#[test]
fn pods_on_unhealthy_hold_pauses_on_disrupted_neighbours() {
    let policy = HealthPolicy {
        on_unhealthy: OnUnhealthy::Hold,
        ..no_soak()
    };
    let observation = pods_canary(
        Some(with_neighbours(policy, neighbours("n02", 3, 3, 0))),
        NodeHealth::Healthy,
    );
    let decision = by_default(&observation);
    assert_eq!(decision.phase, Phase::Paused);
    assert!(decision.held);
    assert!(deleted_nodes(&decision).is_empty());
    assert!(reasons(&decision).contains(&event_reason::NEIGHBOURS_DISRUPTED));
}

/// A `retry` of a rollout that failed its analysis before the canary's neighbours broke:
/// the retry forgets the failure, not the evidence. The canary (updated by the first attempt,
/// within the window) disrupted its neighbours meanwhile, so the retried pass fails again
/// with `NeighboursDisrupted`, on both drivers, with nothing deleted or widened (soak seed 4
/// with image pulls, invariant 32). Without the evidence the retry goes on.
#[test]
fn a_retry_after_analysis_failed_still_judges_the_first_attempts_nodes() {
    let failed_analysis = || canary_state_machine::PreviousPass {
        failure: Some(FailureReason::AnalysisFailed),
        ..previous(Phase::Failed)
    };
    for (name, neighbours, broken) in [
        ("broken meanwhile", neighbours("n02", 3, 3, 0), true),
        ("quiet", neighbours("n02", 3, 0, 0), false),
    ] {
        let health = with_neighbours(no_soak(), neighbours);
        let pods = PodObservation {
            previous: Some(failed_analysis()),
            retry: true,
            ..pods_canary(Some(health.clone()), NodeHealth::Healthy)
        };
        let decision = by_default(&pods);
        assert!(decision.retried, "pods, {name}");
        assert_eq!(deleted_nodes(&decision).is_empty(), broken, "pods, {name}");
        let max_unavailable = Observation {
            previous: Some(failed_analysis()),
            retry: true,
            ..canary_ready(Some(health))
        };
        let widened = decide(&Strategy::default(), &max_unavailable);
        assert!(widened.retried, "max unavailable, {name}");
        if broken {
            for (driver, failure, phase) in [
                ("pods", decision.failure, decision.phase),
                ("max unavailable", widened.failure, widened.phase),
            ] {
                assert_eq!(phase, Phase::Failed, "{driver}");
                assert_eq!(
                    failure,
                    Some(FailureReason::NeighboursDisrupted),
                    "{driver}"
                );
            }
            assert_eq!(widened.write.map(|w| w.kind), Some(WriteKind::Hold));
            assert!(reasons(&decision).contains(&event_reason::NEIGHBOURS_DISRUPTED));
        } else {
            assert_eq!(widened.phase, Phase::Increasing, "the retry widens");
            assert_eq!(decision.failure, None);
        }
    }
}

/// A node broken after its update speaks first: its neighbours lose readiness with it.
#[test]
fn the_node_gate_speaks_before_the_neighbours_gate() {
    let facts = HealthFacts {
        neighbours: neighbours("n02", 3, 3, 0),
        ..facts(no_soak(), vec![broken("n02", CREATED + 60, updated())])
    };
    let decision = by_default(&pods_canary(Some(facts), NodeHealth::NotReady));
    assert_eq!(decision.failure, Some(FailureReason::NodeUnhealthy));
}

/// Ten nodes, each with a reason and a message as long as the adapter keeps them: the failure's
/// Warning (and status message) stays under an event note's 1 KiB, and still names the first.
#[test]
fn the_warning_naming_many_nodes_is_cut_to_an_event_note() {
    let long = "x".repeat(canary_state_machine::SHORT_TEXT_BYTES);
    let nodes = (0..12)
        .map(|i| {
            let mut node = broken(&format!("node-{i:02}"), CREATED + 60, updated());
            node.seen.reason = long.clone();
            node.seen.message = long.clone();
            node
        })
        .collect();
    let decision = decide(
        &Strategy::default(),
        &canary_ready(Some(facts(no_soak(), nodes))),
    );
    assert_eq!(decision.failure, Some(FailureReason::NodeUnhealthy));
    let warning = decision
        .event(event_reason::NODE_UNHEALTHY)
        .expect("a Warning");
    assert!(
        warning.message.len() < canary_state_machine::EVENT_NOTE_BYTES,
        "{}",
        warning.message.len()
    );
    assert!(warning.message.contains("node-00"), "{}", warning.message);
    assert!(warning.message.contains("12 nodes"), "{}", warning.message);
}

/// Late updates (issue 46): the rollout ended `successful` at `CREATED - 100` with a node
/// deferred; the node recovered and the resting strategy replaced its pod at `CREATED`. The
/// facts at rest carry `rested_since`, so the gates judge that node for its window.
fn at_rest(policy: HealthPolicy, unhealthy: Vec<UnhealthyNode>) -> HealthFacts {
    HealthFacts {
        rested_since: Some(Stamp(CREATED - 100)),
        ..facts(policy, unhealthy)
    }
}

/// A pod of the release created during the rollout (before it ended `successful`).
fn updated_during_the_rollout() -> NodePod {
    NodePod::Updated {
        created: Stamp(CREATED - 300),
    }
}

/// The Pods driver at rest, every step done: `n00` recovered and still old (the catch-up's
/// next node), `n01`..`n03` updated, `n03` NotReady.
fn pods_at_rest(health: HealthFacts) -> PodObservation {
    let mut nodes = cluster(1, 3);
    nodes[3].health = NodeHealth::NotReady;
    PodObservation {
        health: Some(health),
        ..at(2, Phase::Successful, nodes)
    }
}

/// The MaxUnavailable driver at rest: nothing to sync, the DaemonSet controller catches up.
fn max_unavailable_at_rest(health: HealthFacts) -> Observation {
    Observation {
        desired_pods: 4,
        updated_pods: 4,
        updated_ready_pods: 3,
        previous: Some(previous(Phase::Successful)),
        health: Some(health),
        ..crate::common::handler()
    }
}

#[test]
fn pods_a_late_update_broken_within_its_window_fails_the_generation() {
    let late = pods_at_rest(at_rest(
        no_soak(),
        vec![broken("n03", CREATED + 60, updated())],
    ));
    let decision = by_default(&late);
    assert_eq!(decision.phase, Phase::Failed);
    assert_eq!(decision.failure, Some(FailureReason::NodeUnhealthy));
    assert!(deleted_nodes(&decision).is_empty(), "the catch-up stops");
    let event = decision
        .event(event_reason::NODE_UNHEALTHY)
        .expect("a Warning");
    assert!(event.message.contains("n03"), "{}", event.message);
    assert!(event.message.contains("late update"), "{}", event.message);
    // The failure stays at rest: the node recovering does not resume the catch-up.
    let after = PodObservation {
        previous: Some(canary_state_machine::PreviousPass {
            failure: Some(FailureReason::NodeUnhealthy),
            ..previous(Phase::Failed)
        }),
        health: Some(at_rest(no_soak(), Vec::new())),
        ..late.clone()
    };
    let after = by_default(&after);
    assert_eq!(after.failure, Some(FailureReason::NodeUnhealthy));
    assert!(deleted_nodes(&after).is_empty());
    // A node updated during the rollout that breaks after it ended is not judged (it was
    // judged then); the catch-up goes on.
    let earlier = by_default(&pods_at_rest(at_rest(
        no_soak(),
        vec![broken("n03", CREATED + 60, updated_during_the_rollout())],
    )));
    assert_eq!(earlier.phase, Phase::Successful);
    assert_eq!(deleted_nodes(&earlier), ["n00"]);
    // Without `rested_since` (a controller that does not judge late updates), as before.
    let blind = by_default(&PodObservation {
        health: Some(facts(
            no_soak(),
            vec![broken("n03", CREATED + 60, updated())],
        )),
        ..late
    });
    assert_eq!(blind.phase, Phase::Successful);
}

#[test]
fn pods_a_late_update_under_on_unhealthy_hold_pauses_the_catch_up() {
    let policy = HealthPolicy {
        on_unhealthy: OnUnhealthy::Hold,
        ..no_soak()
    };
    let decision = by_default(&pods_at_rest(at_rest(
        policy,
        vec![broken("n03", CREATED + 60, updated())],
    )));
    assert_eq!(decision.phase, Phase::Paused);
    assert!(decision.held && decision.held_by_health);
    assert!(deleted_nodes(&decision).is_empty());
    assert!(reasons(&decision).contains(&event_reason::NODE_UNHEALTHY));
}

#[test]
fn max_unavailable_a_late_update_broken_within_its_window_fails_with_the_hold_write() {
    let late = max_unavailable_at_rest(at_rest(
        no_soak(),
        vec![broken("n3", CREATED + 60, updated())],
    ));
    let decision = decide(&Strategy::default(), &late);
    assert_eq!(decision.phase, Phase::Failed);
    assert_eq!(decision.failure, Some(FailureReason::NodeUnhealthy));
    assert_eq!(
        decision.write.map(|w| w.kind),
        Some(WriteKind::Hold),
        "the DaemonSet controller stops catching up"
    );
    let event = decision
        .event(event_reason::NODE_UNHEALTHY)
        .expect("a Warning");
    assert!(event.message.contains("late update"), "{}", event.message);
    // Sticky at rest, whatever the sync flags say.
    let after = decide(
        &Strategy::default(),
        &Observation {
            previous: Some(canary_state_machine::PreviousPass {
                failure: Some(FailureReason::NodeUnhealthy),
                ..previous(Phase::Failed)
            }),
            health: Some(at_rest(no_soak(), Vec::new())),
            ..late.clone()
        },
    );
    assert_eq!(after.failure, Some(FailureReason::NodeUnhealthy));
    // Neighbours too: a late update that disrupts its neighbours.
    let neighbours_late = decide(
        &Strategy::default(),
        &max_unavailable_at_rest(HealthFacts {
            neighbours: neighbours("n3", 3, 3, 0),
            ..at_rest(no_soak(), Vec::new())
        }),
    );
    assert_eq!(
        neighbours_late.failure,
        Some(FailureReason::NeighboursDisrupted)
    );
    // A node updated during the rollout, broken after it ended: not judged; quiet.
    let earlier = decide(
        &Strategy::default(),
        &max_unavailable_at_rest(at_rest(
            no_soak(),
            vec![broken("n3", CREATED + 60, updated_during_the_rollout())],
        )),
    );
    assert!(earlier.action.quiet && earlier.phase == Phase::Successful);
    // KubeVirt compatibility judges late updates too.
    let kubevirt = Strategy {
        compatibility: Compatibility::KubeVirt,
        ..Strategy::default()
    };
    let reference = decide(&kubevirt, &late);
    assert_eq!(
        reference.failure,
        Some(FailureReason::NodeUnhealthy),
        "{reference:?}"
    );
}

#[test]
fn max_unavailable_a_late_update_under_on_unhealthy_hold_pauses_with_the_hold_write() {
    let policy = HealthPolicy {
        on_unhealthy: OnUnhealthy::Hold,
        ..no_soak()
    };
    let decision = decide(
        &Strategy::default(),
        &max_unavailable_at_rest(at_rest(policy, vec![broken("n3", CREATED + 60, updated())])),
    );
    assert_eq!(decision.phase, Phase::Paused);
    assert!(decision.held_by_health);
    assert_eq!(decision.write.map(|w| w.kind), Some(WriteKind::Hold));
}
