//! The status after a pass, as [`super::next_status`] computes it, and read back.

use super::*;
use crate::crd::AgentDowntime;
use canary_state_machine::LiveMaxUnavailable;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::SignedDuration;

fn t(seconds: i64) -> Timestamp {
    Timestamp::from_second(1_767_225_600 + seconds).unwrap()
}

fn pass(phase: Phase, updated_ready: u32) -> Transition {
    let target = Target {
        version: "v2".into(),
        ..Target::default()
    };
    Transition {
        desired: 4,
        updated: updated_ready,
        updated_ready,
        available: 4,
        max_unavailable: Some(LiveMaxUnavailable::Int(1)),
        observed_generation: Some(1),
        recorded_generation: Some(3),
        ..Transition::phase_change("ns", "agent", target, None, phase, t(0))
    }
}

fn condition<'a>(status: &'a CanaryDaemonSetStatus, type_: &str) -> &'a Condition {
    status.conditions.iter().find(|c| c.type_ == type_).unwrap()
}

fn gaps(gaps: &[(&str, u64)]) -> crate::index::ClosedGaps {
    crate::index::ClosedGaps {
        gaps: gaps
            .iter()
            .map(|(node, seconds)| crate::index::DowntimeGap {
                node: (*node).to_owned(),
                seconds: *seconds,
            })
            .collect(),
        count: gaps.len() as u64,
        node_seconds: gaps.iter().map(|(_, s)| s).sum(),
    }
}

/// The downtime of a rollout adds up pass by pass, keeps its worst node, survives passes
/// that close no gap, and starts again with a new target.
#[test]
fn agent_downtime_adds_up_per_target() {
    let first = next_status(None, &pass(Phase::Canary, 0), t(0));
    assert_eq!(first.agent_downtime, None, "nothing measured yet");
    let one = Transition {
        downtime: gaps(&[("n1", 12)]),
        ..pass(Phase::Waiting, 1)
    };
    let status = next_status(Some(&first), &one, t(10));
    let two = Transition {
        downtime: gaps(&[("n2", 30), ("n3", 5)]),
        ..pass(Phase::Increasing, 3)
    };
    let status = next_status(Some(&status), &two, t(20));
    let status = next_status(Some(&status), &pass(Phase::Increasing, 3), t(30));
    assert_eq!(
        status.agent_downtime,
        Some(AgentDowntime {
            version: "v2".into(),
            node_seconds: 47,
            gaps: 3,
            worst_node: Some("n2".into()),
            worst_seconds: Some(30),
        })
    );
    let next = Transition {
        target: Target {
            version: "v3".into(),
            ..Target::default()
        },
        downtime: gaps(&[("n1", 4)]),
        ..pass(Phase::Canary, 0)
    };
    let status = next_status(Some(&status), &next, t(40));
    let downtime = status.agent_downtime.unwrap();
    assert_eq!(
        (
            downtime.version.as_str(),
            downtime.node_seconds,
            downtime.gaps
        ),
        ("v3", 4, 1)
    );
}

#[test]
fn unchanged_pass_gives_identical_status() {
    let first = next_status(None, &pass(Phase::Canary, 0), t(0));
    let second = next_status(Some(&first), &pass(Phase::Canary, 0), t(30));
    assert_eq!(first, second);
}

#[test]
fn phase_start_and_progress_times() {
    let canary = next_status(None, &pass(Phase::Canary, 0), t(0));
    assert_eq!(canary.phase_start_time, Some(Time(t(0))));
    let waiting = next_status(Some(&canary), &pass(Phase::Waiting, 1), t(10));
    assert_eq!(waiting.phase_start_time, Some(Time(t(10))));
    let progressed = next_status(Some(&waiting), &pass(Phase::Waiting, 2), t(20));
    assert_eq!(progressed.phase_start_time, Some(Time(t(10))));
    assert_eq!(progressed.last_progress_time, Some(Time(t(20))));
    assert_eq!(progressed.ready_ratio.as_deref(), Some("2/4"));

    let previous = previous_pass(Some(&progressed), t(50)).unwrap();
    assert_eq!(previous.phase, Phase::Waiting);
    assert_eq!(previous.updated_ready, 2);
    assert_eq!(previous.since_progress, Duration::from_secs(30));
}

#[test]
fn conditions_follow_phase_and_keep_transition_times() {
    let canary = next_status(None, &pass(Phase::Canary, 0), t(0));
    assert_eq!(condition(&canary, PROGRESSING).status, "True");
    assert_eq!(condition(&canary, DEGRADED).status, "False");
    assert_eq!(condition(&canary, AVAILABLE).status, "True");

    let mut failing = pass(Phase::Failed, 0);
    failing.failure = Some(FailureReason::CanaryCrashLooping);
    failing.message = Some("daemonSet agent rollout failed".into());
    failing.available = 3;
    let failed = next_status(Some(&canary), &failing, t(5));
    let degraded = condition(&failed, DEGRADED);
    assert_eq!(
        (degraded.status.as_str(), degraded.reason.as_str()),
        ("True", "CanaryCrashLooping")
    );
    assert_eq!(degraded.last_transition_time, Time(t(5)));
    assert_eq!(condition(&failed, PROGRESSING).status, "False");
    assert_eq!(condition(&failed, AVAILABLE).reason, "PodsUnavailable");
    assert_eq!(
        condition(&failed, AVAILABLE).message,
        "3 of 4 pods available"
    );
    let mut one = pass(Phase::Successful, 1);
    one.desired = 1;
    one.available = 1;
    let single = next_status(None, &one, t(6));
    assert_eq!(
        condition(&single, AVAILABLE).message,
        "1 of 1 pod available"
    );

    let still = next_status(Some(&failed), &failing, t(60));
    assert_eq!(condition(&still, DEGRADED).last_transition_time, Time(t(5)));
    let previous = previous_pass(Some(&still), t(60)).unwrap();
    assert_eq!(previous.failure, Some(FailureReason::CanaryCrashLooping));
}

#[test]
fn previous_pass_of_a_new_object_is_none() {
    assert_eq!(previous_pass(None, t(0)), None);
    assert_eq!(
        previous_pass(Some(&CanaryDaemonSetStatus::default()), t(0)),
        None
    );
    // A phase that is none of the names (a status edited by hand) reads as none.
    let bogus: CanaryDaemonSetStatus =
        serde_json::from_value(serde_json::json!({"phase": "exploded", "reason": "Boom"})).unwrap();
    assert_eq!((bogus.phase, bogus.reason), (None, None));
    assert_eq!(previous_pass(Some(&bogus), t(0)), None);
}

#[test]
fn the_status_records_the_target_it_was_decided_for() {
    let target = Target {
        version: "v2".into(),
        registry: "reg".into(),
        deployment_id: "abc".into(),
    };
    let mut record = pass(Phase::Failed, 0);
    record.target = target.clone();
    let status = next_status(None, &record, t(10));
    assert_eq!(recorded_target(Some(&status)), target);
    assert!(!decided_for_another_target(&status, &target));
    for other in [
        Target {
            version: "v3".into(),
            ..target.clone()
        },
        Target {
            registry: "other".into(),
            ..target.clone()
        },
        Target {
            deployment_id: "def".into(),
            ..target.clone()
        },
    ] {
        assert!(decided_for_another_target(&status, &other), "{other:?}");
    }
    // A status an older controller wrote records the version only: the rest matches.
    let older = CanaryDaemonSetStatus {
        target_registry: None,
        target_deployment_id: None,
        ..status
    };
    assert!(!decided_for_another_target(
        &older,
        &Target {
            deployment_id: "def".into(),
            ..target.clone()
        }
    ));
    // A pass that never knew a target records none.
    let unknown = next_status(None, &pass(Phase::Failed, 0), t(10));
    assert_eq!(unknown.target_registry.as_deref(), Some(""));
    let mut blank = pass(Phase::Failed, 0);
    blank.target = Target::default();
    let blank = next_status(None, &blank, t(10));
    assert_eq!(blank.target_version, None);
    assert_eq!(blank.target_deployment_id, None);
    assert_eq!(recorded_target(Some(&blank)), Target::default());
}

fn pods_record(step: u32, nodes: usize) -> crate::observer::PodsRecord {
    use canary_state_machine::{Deferral, NodeTally};
    crate::observer::PodsRecord {
        step,
        step_count: 4,
        target_revision: Some("7b9f5d4c6d".into()),
        canary_nodes: Some((0..nodes).map(|i| format!("node-{i:05}")).collect()),
        deferred: (0..nodes)
            .map(|i| {
                (
                    format!("ip-10-0-{i}-1.eu-west-1.compute.internal"),
                    Deferral::NodeNotReady,
                )
            })
            .collect(),
        failed_nodes: (0..nodes).map(|i| format!("node-{i:05}")).collect(),
        revisions: (0..nodes).map(|i| (format!("{i:010}"), 1, 1)).collect(),
        promotion: None,
        tally: NodeTally::default(),
        deleted: Vec::new(),
        awaiting_promotion: false,
    }
}

/// kstatus' conditions beside the others: Reconciling with the step while a rollout runs,
/// Stalled (and not Reconciling) while a gate waits for a person or once failed, Ready once
/// successful; each with the status's observedGeneration.
#[test]
fn the_kstatus_conditions_follow_the_rollout() {
    let kstatus = |status: &CanaryDaemonSetStatus| {
        [READY, RECONCILING, STALLED].map(|type_| {
            let c = condition(status, type_);
            assert_eq!(c.observed_generation, Some(1), "{type_}");
            (c.status.clone(), c.reason.clone())
        })
    };
    let pair = |s: &str, r: &str| (s.to_owned(), r.to_owned());
    let mut canary = pass(Phase::Canary, 0);
    canary.pods = Some(Box::new(pods_record(0, 0)));
    let status = next_status(None, &canary, t(0));
    assert_eq!(
        kstatus(&status),
        [
            pair("False", "WaitingForCanary"),
            pair("True", "WaitingForCanary"),
            pair("False", "AsExpected")
        ]
    );
    assert!(
        condition(&status, RECONCILING)
            .message
            .starts_with("step 1 of 4"),
        "{}",
        condition(&status, RECONCILING).message
    );
    let mut waiting = pass(Phase::Paused, 1);
    let mut record = pods_record(1, 0);
    record.awaiting_promotion = true;
    waiting.pods = Some(Box::new(record));
    let status = next_status(Some(&status), &waiting, t(10));
    assert_eq!(
        kstatus(&status)[1..],
        [
            pair("False", "AwaitingPromotion"),
            pair("True", "AwaitingPromotion")
        ]
    );
    assert!(
        condition(&status, STALLED)
            .message
            .contains("daemonset-canary promote agent"),
        "{}",
        condition(&status, STALLED).message
    );
    let mut held = pass(Phase::Paused, 1);
    held.held = true;
    let status = next_status(Some(&status), &held, t(20));
    assert_eq!(kstatus(&status)[2], pair("True", "HeldOnRequest"));
    let mut failing = pass(Phase::Failed, 0);
    failing.failure = Some(FailureReason::ProgressDeadlineExceeded);
    let status = next_status(Some(&status), &failing, t(30));
    assert_eq!(
        kstatus(&status)[2],
        pair("True", "ProgressDeadlineExceeded")
    );
    let status = next_status(Some(&status), &pass(Phase::Successful, 4), t(40));
    assert_eq!(
        kstatus(&status),
        [
            pair("True", "RolloutComplete"),
            pair("False", "RolloutComplete"),
            pair("False", "AsExpected")
        ]
    );
    assert_eq!(condition(&status, READY).last_transition_time, Time(t(40)));
    let mut crashing = pass(Phase::Successful, 3);
    crashing.pods = Some(Box::new(pods_record(4, 2)));
    let status = next_status(Some(&status), &crashing, t(50));
    assert_eq!(kstatus(&status)[2], pair("True", CRASH_LOOPING_AT_REST));
    assert!(condition(&status, STALLED).message.contains("crash-loop"));
}

#[test]
fn the_analysis_the_pass_gives_is_shown_with_its_condition() {
    let mut paused = pass(Phase::Paused, 1);
    let record = pods_record(1, 1);
    paused.analysis = Some(Box::new(crate::crd::AnalysisStatus {
        step: 1,
        revision: Some("7b9f5d4c6d".into()),
        verdict: "Inconclusive".into(),
        message: Some("errors: Prometheus unreachable: connection refused".into()),
        measurements: Vec::new(),
    }));
    paused.pods = Some(Box::new(record));
    let first = next_status(None, &paused, t(10));
    let condition = condition(&first, ANALYSIS_PASSING);
    assert_eq!(
        (condition.status.as_str(), condition.reason.as_str()),
        ("False", "AnalysisInconclusive")
    );
    assert!(condition.message.contains("errors: Prometheus unreachable"));
    // The pass says what to show: without analysis (removed from the spec), nothing, and
    // no condition either.
    let mut next = pass(Phase::Increasing, 2);
    next.pods = Some(Box::new(pods_record(2, 1)));
    let second = next_status(Some(&first), &next, t(20));
    assert_eq!(second.analysis, None);
    assert!(
        second
            .conditions
            .iter()
            .all(|c| c.type_ != ANALYSIS_PASSING)
    );
}

#[test]
fn a_status_at_5000_nodes_stays_small() {
    // Every list at its worst: 5,000 deferred, failed and canary nodes, 5,000 revisions.
    let mut pass = pass(Phase::Increasing, 2_500);
    pass.desired = 5_000;
    pass.message = Some("m".repeat(1_024));
    pass.pods = Some(Box::new(pods_record(2, 5_000)));
    let status = next_status(None, &pass, t(0));
    let bytes = serde_json::to_vec(&status.merge_patch().unwrap())
        .unwrap()
        .len();
    assert!(bytes < 64 * 1024, "{bytes} bytes");
    assert_eq!(status.deferred_nodes.len(), LISTED_NODES);
    assert_eq!(status.deferred_node_count, Some(5_000));
    assert_eq!(status.failed_node_count, Some(5_000));
    assert_eq!(status.revisions.len(), LISTED_REVISIONS);
}

#[test]
fn updated_pods_crash_looping_at_rest_degrade_a_successful_status() {
    let mut crashing = pass(Phase::Successful, 3);
    crashing.pods = Some(Box::new(pods_record(4, 2)));
    let status = next_status(None, &crashing, t(0));
    assert_eq!(status.phase, Some(Phase::Successful));
    let degraded = condition(&status, DEGRADED);
    assert_eq!(
        (degraded.status.as_str(), degraded.reason.as_str()),
        ("True", CRASH_LOOPING_AT_REST)
    );
    assert!(
        degraded
            .message
            .contains("crash-loop on 2 nodes (node-00000, node-00001)"),
        "{}",
        degraded.message
    );
    assert_eq!(status.failed_node_count, Some(2));
    // Once they run, the condition clears.
    let mut recovered = crashing.clone();
    recovered.pods.as_mut().unwrap().failed_nodes.clear();
    let status = next_status(Some(&status), &recovered, t(10));
    let degraded = condition(&status, DEGRADED);
    assert_eq!(
        (degraded.status.as_str(), degraded.reason.as_str()),
        ("False", "AsExpected")
    );
}

/// A rollback that ended on a revision whose pods crash-loop since is degraded the same
/// way (soak seed 22009504: `rolledBack`, 30 of 105 pods ready, no condition said why).
#[test]
fn updated_pods_crash_looping_at_rest_degrade_a_rolled_back_status() {
    let mut crashing = pass(Phase::RolledBack, 3);
    crashing.pods = Some(Box::new(pods_record(4, 2)));
    let status = next_status(None, &crashing, t(0));
    assert_eq!(status.phase, Some(Phase::RolledBack));
    let degraded = condition(&status, DEGRADED);
    assert_eq!(
        (degraded.status.as_str(), degraded.reason.as_str()),
        ("True", CRASH_LOOPING_AT_REST)
    );
    assert!(
        degraded.message.starts_with("the rollback succeeded"),
        "{}",
        degraded.message
    );
}

#[test]
fn the_step_start_moves_with_the_step_and_the_canary_nodes_with_the_rollout() {
    let mut first = pass(Phase::Canary, 0);
    first.pods = Some(Box::new(pods_record(0, 1)));
    let canary = next_status(None, &first, t(0));
    assert_eq!(canary.step_start_time, Some(Time(t(0))));
    let mut same = first.clone();
    same.pods.as_mut().unwrap().canary_nodes = None;
    let later = next_status(Some(&canary), &same, t(30));
    assert_eq!(later.step_start_time, Some(Time(t(0))), "same step");
    assert_eq!(later.canary_nodes, ["node-00000"], "kept");
    let mut next = same.clone();
    next.pods.as_mut().unwrap().step = 1;
    let moved = next_status(Some(&later), &next, t(40));
    assert_eq!(moved.step_start_time, Some(Time(t(40))));
    let position = step_position(Some(&moved), t(70)).unwrap();
    assert_eq!(
        (position.index, position.elapsed),
        (1, Duration::from_secs(30))
    );
    let mut restart = same;
    restart.to = Phase::Started;
    let started = next_status(Some(&moved), &restart, t(50));
    assert!(
        started.canary_nodes.is_empty(),
        "a new rollout forgets them"
    );
    assert_eq!(pass(Phase::Canary, 0).pods, None);
    assert_eq!(
        next_status(None, &pass(Phase::Canary, 0), t(0)).current_step_index,
        None
    );
}

#[test]
fn clock_going_backwards_is_zero_progress_time() {
    let status = next_status(None, &pass(Phase::Canary, 0), t(100));
    let previous = previous_pass(
        Some(&status),
        t(100).checked_sub(SignedDuration::from_secs(5)).unwrap(),
    )
    .unwrap();
    assert_eq!(previous.since_progress, Duration::ZERO);
}

/// The nodes a `NodeUnhealthy` failure names stay in the status while the failure does,
/// even once a later pass no longer sees them (the node recovered); a new rollout clears
/// them.
#[test]
fn the_unhealthy_nodes_stay_named_while_their_failure_does() {
    use crate::observer::UnhealthyRecord;
    use canary_state_machine::{NodePod, NodeSeen, Stamp, UnhealthyNode};
    let mut failed = pass(Phase::Failed, 0);
    failed.failure = Some(FailureReason::NodeUnhealthy);
    failed.unhealthy = Some(Box::new(UnhealthyRecord {
        cause: canary_state_machine::HealthCause::Node,
        nodes: vec![UnhealthyNode {
            node: "node-7".into(),
            since: Stamp(1_796_240_705),
            seen: NodeSeen {
                condition: "Ready".into(),
                status: "False".into(),
                reason: "KubeletNotReady".into(),
                message: String::new(),
            },
            pod: NodePod::Updated {
                created: Stamp(1_796_240_600),
            },
        }],
        count: 1,
    }));
    let status = next_status(None, &failed, t(1));
    assert_eq!(status.unhealthy_node_count, Some(1));
    let note = &status.unhealthy_nodes[0];
    assert_eq!(
        (note.name.as_str(), note.condition.as_str()),
        ("node-7", "Ready")
    );
    assert_eq!(
        note.since.as_ref().map(|t| t.0.as_second()),
        Some(1_796_240_705)
    );
    let mut recovered = failed.clone();
    recovered.unhealthy = None;
    let kept = next_status(Some(&status), &recovered, t(2));
    assert_eq!(kept.unhealthy_nodes, status.unhealthy_nodes);
    let next = next_status(Some(&kept), &pass(Phase::Started, 0), t(3));
    assert!(next.unhealthy_nodes.is_empty() && next.unhealthy_node_count.is_none());
}
