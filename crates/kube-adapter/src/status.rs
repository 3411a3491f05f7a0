//! Status and conditions as pure functions of the previous status and this pass.
//!
//! The status is the controller's only memory: [`previous_pass`] reads back what the state
//! machine needs (phase, failure, progress) and [`next_status`] writes it. Times only move when
//! something changes, so an unchanged pass produces an identical status and no write.

use std::time::Duration;

use canary_predicates::Target;
use canary_state_machine::{
    AnalysisVerdict, ConditionReason, ConditionType, FailureReason, Gate, LISTED_NODES, Phase,
    PreviousPass, Standing, StepPosition, awaiting_workload, kstatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

use crate::crd::{
    AnalysisStatus, CanaryDaemonSetStatus, NodeNote, RevisionPods, UnhealthyNodeNote,
};
use crate::observer::Transition;

/// Condition type: a rollout is in progress.
pub const PROGRESSING: &str = ConditionType::Progressing.as_str();
/// Condition type: every desired pod is available.
pub const AVAILABLE: &str = ConditionType::Available.as_str();
/// Condition type: the rollout failed or the spec cannot be acted on.
pub const DEGRADED: &str = ConditionType::Degraded.as_str();
/// Condition type: someone else changed the owned DaemonSet's template or update strategy.
pub const DRIFTED: &str = ConditionType::Drifted.as_str();
/// Condition type: the analysis of the last analysed pause step passes (`spec.analysis`); its
/// reason is `AnalysisPending`, `AnalysisPassing`, `AnalysisFailed` or `AnalysisInconclusive`.
pub const ANALYSIS_PASSING: &str = ConditionType::AnalysisPassing.as_str();
/// kstatus condition type: the spec's target is rolled out and verified.
pub const READY: &str = ConditionType::Ready.as_str();
/// kstatus condition type: a rollout runs and moves on its own.
pub const RECONCILING: &str = ConditionType::Reconciling.as_str();
/// kstatus condition type: the rollout cannot move on without a person.
pub const STALLED: &str = ConditionType::Stalled.as_str();

/// Reason of a Degraded condition for a spec the controller cannot act on.
pub const INVALID_SPEC: &str = FailureReason::InvalidSpec.as_str();
/// Reason of a Degraded condition while the phase stays `successful`: updated pods crash-loop
/// after the rollout succeeded (Pods driver).
pub const CRASH_LOOPING_AT_REST: &str = ConditionReason::CrashLoopingAtRest.as_str();

/// The state machine's memory of the previous pass, read from the status.
///
/// `since_progress` is the time since the phase started or since `updatedReady` last moved,
/// whichever is later. A status without a parseable phase (a new object) gives `None`.
pub fn previous_pass(
    status: Option<&CanaryDaemonSetStatus>,
    now: Timestamp,
) -> Option<PreviousPass> {
    let status = status?;
    let reported = status.phase?;
    // During a rollback the status reports `rollingBack`/`rolledBack`; the tables read the
    // phase they decided.
    let decided = status
        .history
        .as_ref()
        .and_then(|h| h.rollback.as_ref())
        .and_then(|r| r.decided_phase);
    let phase = reported.decided(decided);
    let failure = match phase {
        // An invalid spec is not a sticky rollout failure (`is_sticky`): fixing it resumes.
        Phase::Failed => status.reason,
        _ => None,
    };
    let since = [
        status.phase_start_time.as_ref(),
        status.last_progress_time.as_ref(),
    ]
    .into_iter()
    .flatten()
    .map(|t| t.0)
    .max();
    let since_progress = since
        .and_then(|t| Duration::try_from(now.duration_since(t)).ok())
        .unwrap_or(Duration::ZERO);
    Some(PreviousPass {
        phase,
        failure,
        updated_ready: status
            .progress_updated_ready
            .unwrap_or(status.updated_ready),
        since_progress,
        drifted: condition_is(status, ConditionType::Drifted, true),
    })
}

/// The target the stored status was decided for: its version, registry and deployment id, each
/// `""` when not recorded (a status written before the controller recorded it, or by a pass
/// that never knew a target).
pub fn recorded_target(status: Option<&CanaryDaemonSetStatus>) -> Target {
    let field = |value: Option<&Option<String>>| value.cloned().flatten().unwrap_or_default();
    Target {
        version: field(status.map(|s| &s.target_version)),
        registry: field(status.map(|s| &s.target_registry)),
        deployment_id: field(status.map(|s| &s.target_deployment_id)),
    }
}

/// Whether the stored status was decided for a target other than `target`. A field the status
/// does not record (written by an older controller) matches any value.
pub fn decided_for_another_target(status: &CanaryDaemonSetStatus, target: &Target) -> bool {
    let differs =
        |recorded: &Option<String>, now: &str| recorded.as_deref().is_some_and(|r| r != now);
    differs(&status.target_version, &target.version)
        || differs(&status.target_registry, &target.registry)
        || differs(&status.target_deployment_id, &target.deployment_id)
}

/// Where the previous pass of the Pods driver left the steps: the step, how long ago it began,
/// and how many nodes were deferred. `None` before the first Pods-driver pass.
pub fn step_position(
    status: Option<&CanaryDaemonSetStatus>,
    now: Timestamp,
) -> Option<StepPosition> {
    let status = status?;
    let index = status.current_step_index?;
    let elapsed = status
        .step_start_time
        .as_ref()
        .and_then(|t| Duration::try_from(now.duration_since(t.0)).ok())
        .unwrap_or(Duration::ZERO);
    Some(StepPosition {
        index,
        elapsed,
        deferred: status.deferred_node_count.unwrap_or(0),
    })
}

/// The status of an object whose `spec.workloadRef` names a DaemonSet that does not exist
/// (yet): no phase (`pending`, so no failure alert fires while a GitOps sync wave creates the
/// DaemonSet after its CanaryDaemonSet), `message` saying what it waits for, the
/// [`awaiting_workload`] conditions, no counts. What verbs and the history recorded stays (a
/// promotion or retry counts once; the revisions outlive a deleted DaemonSet).
pub fn awaiting_workload_status(
    previous: Option<&CanaryDaemonSetStatus>,
    daemon_set: &str,
    message: String,
    generation: i64,
    now: Timestamp,
) -> CanaryDaemonSetStatus {
    let empty = CanaryDaemonSetStatus::default();
    let prev = previous.unwrap_or(&empty);
    let mut conditions = Vec::new();
    for verdict in awaiting_workload() {
        // Each keeps its transition time when its status did not change.
        if let Some(old) = prev
            .conditions
            .iter()
            .find(|c| c.type_ == verdict.type_.as_str())
        {
            conditions.push(old.clone());
        }
        set_condition(
            &mut conditions,
            verdict.type_.as_str(),
            verdict.status,
            verdict.reason.as_str(),
            Some(message.clone()),
            Some(generation),
            now,
        );
    }
    CanaryDaemonSetStatus {
        message: Some(message),
        conditions,
        observed_generation: Some(generation),
        daemon_set_name: Some(daemon_set.to_owned()),
        promotion: prev.promotion.clone(),
        retry: prev.retry.clone(),
        held: prev.held,
        history: prev.history.clone(),
        ..CanaryDaemonSetStatus::default()
    }
}

/// Most revisions listed in the status.
const LISTED_REVISIONS: usize = 5;

/// The status after a pass, as its [`Transition`] describes it (its `phase_started_at` is not
/// read: the status decides when the phase started).
pub fn next_status(
    previous: Option<&CanaryDaemonSetStatus>,
    pass: &Transition,
    now: Timestamp,
) -> CanaryDaemonSetStatus {
    let empty = CanaryDaemonSetStatus::default();
    let prev = previous.unwrap_or(&empty);
    // A pass that never knew a target (an invalid spec on a new object) records none.
    let known = !pass.target.version.is_empty();
    let phase_changed = prev.phase != Some(pass.to);
    let phase_start_time = match (&prev.phase_start_time, phase_changed) {
        (Some(start), false) => Some(start.clone()),
        _ => Some(Time(now)),
    };
    let progressed = phase_changed || prev.progress_updated_ready != Some(pass.updated_ready);
    let last_progress_time = match (&prev.last_progress_time, progressed) {
        (Some(t), false) => Some(t.clone()),
        _ => Some(Time(now)),
    };
    let pods = pass.pods.as_deref();
    let analysis = pass.analysis.as_deref().cloned();
    let conditions = conditions(prev, pass, analysis.as_ref(), now);
    CanaryDaemonSetStatus {
        promotion: pods
            .and_then(|p| p.promotion.clone())
            .or_else(|| prev.promotion.clone()),
        retry: pass.retry.clone().or_else(|| prev.retry.clone()),
        analysis,
        history: pass
            .history
            .as_deref()
            .cloned()
            .or_else(|| prev.history.clone()),
        held: pass.held.then_some(true),
        phase: Some(pass.to),
        reason: pass.failure,
        message: pass.message.clone(),
        conditions,
        observed_generation: pass.observed_generation,
        recorded_daemon_set_generation: pass.recorded_generation,
        daemon_set_name: Some(pass.daemon_set.clone()),
        target_version: known.then(|| pass.target.version.clone()),
        target_registry: known.then(|| pass.target.registry.clone()),
        target_deployment_id: known.then(|| pass.target.deployment_id.clone()),
        desired: pass.desired,
        updated: pass.updated,
        updated_ready: pass.updated_ready,
        ready_ratio: Some(format!("{}/{}", pass.updated_ready, pass.desired)),
        current_max_unavailable: pass.max_unavailable.as_ref().map(ToString::to_string),
        phase_start_time,
        progress_updated_ready: Some(pass.updated_ready),
        last_progress_time,
        daemon_set_template_hash: pass
            .template_hash
            .clone()
            .or_else(|| prev.daemon_set_template_hash.clone()),
        ..unhealthy_status(prev, pass, &steps_status(prev, pass, phase_changed, now))
    }
}

/// The nodes the health gates name (issue 46), over the Pods driver's part of the status:
/// those of this pass; while a `NodeUnhealthy` (or `NeighboursDisrupted`) failure or a hold
/// stays without them (a node that recovered, or left the window), the ones that failed or
/// held it.
fn unhealthy_status(
    prev: &CanaryDaemonSetStatus,
    pass: &Transition,
    steps: &CanaryDaemonSetStatus,
) -> CanaryDaemonSetStatus {
    let health_failure = matches!(
        pass.failure,
        Some(FailureReason::NodeUnhealthy | FailureReason::NeighboursDisrupted)
    );
    let named = health_failure || pass.held;
    let (unhealthy_nodes, unhealthy_node_count) = match &pass.unhealthy {
        Some(record) if named => (
            record
                .nodes
                .iter()
                .take(LISTED_NODES)
                .map(|node| UnhealthyNodeNote {
                    name: node.node.clone(),
                    condition: node.seen.condition.clone(),
                    status: node.seen.status.clone(),
                    reason: node.seen.reason.clone(),
                    message: node.seen.message.clone(),
                    since: Timestamp::from_second(node.since.0).ok().map(Time),
                })
                .collect(),
            Some(record.count),
        ),
        // Kept while the failure is, and while the hold they caused is (the node recovering
        // ends neither: a person resumes, and the resume answers the nodes listed).
        _ if named => (prev.unhealthy_nodes.clone(), prev.unhealthy_node_count),
        _ => (Vec::new(), None),
    };
    CanaryDaemonSetStatus {
        unhealthy_nodes,
        unhealthy_node_count,
        unhealthy_answered: pass
            .unhealthy_answered
            .and_then(|second| Timestamp::from_second(second).ok())
            .map(Time),
        ..steps.clone()
    }
}

/// The Pods driver's part of the status after a pass: the step and when it began, the canary,
/// deferred and failed nodes, the pods per revision (each list bounded). Empty for the
/// MaxUnavailable driver.
fn steps_status(
    prev: &CanaryDaemonSetStatus,
    pass: &Transition,
    phase_changed: bool,
    now: Timestamp,
) -> CanaryDaemonSetStatus {
    let Some(pods) = pass.pods.as_deref() else {
        return CanaryDaemonSetStatus::default();
    };
    let step_changed =
        prev.current_step_index != Some(pods.step) || (phase_changed && pass.to == Phase::Started);
    let step_start_time = match (&prev.step_start_time, step_changed) {
        (Some(start), false) => Some(start.clone()),
        _ => Some(Time(now)),
    };
    // The canary nodes belong to one rollout: a new one forgets them until its canary is done.
    let canary_nodes = match &pods.canary_nodes {
        Some(nodes) => nodes.iter().take(LISTED_NODES).cloned().collect(),
        None if pass.to == Phase::Started => Vec::new(),
        None => prev.canary_nodes.clone(),
    };
    let count = |n: usize| (n > 0).then(|| u32::try_from(n).unwrap_or(u32::MAX));
    CanaryDaemonSetStatus {
        current_step_index: Some(pods.step),
        step_count: Some(pods.step_count),
        step_start_time,
        target_revision: pods.target_revision.clone(),
        canary_nodes,
        deferred_nodes: pods
            .deferred
            .iter()
            .take(LISTED_NODES)
            .map(|(name, why)| NodeNote {
                name: name.clone(),
                reason: why.as_str().to_owned(),
            })
            .collect(),
        deferred_node_count: count(pods.deferred.len()),
        failed_nodes: pods
            .failed_nodes
            .iter()
            .take(LISTED_NODES)
            .cloned()
            .collect(),
        failed_node_count: count(pods.failed_nodes.len()),
        revisions: pods
            .revisions
            .iter()
            .take(LISTED_REVISIONS)
            .map(|(revision, pods, ready)| RevisionPods {
                revision: revision.clone(),
                pods: *pods,
                ready: *ready,
            })
            .collect(),
        ..CanaryDaemonSetStatus::default()
    }
}

/// The conditions after a pass: `Progressing`, `Available` and `Degraded` always, `Drifted`
/// once a drift was seen, `AnalysisPassing` with an analysis, and kstatus' `Ready`,
/// `Reconciling` and `Stalled` always.
fn conditions(
    prev: &CanaryDaemonSetStatus,
    pass: &Transition,
    analysis: Option<&AnalysisStatus>,
    now: Timestamp,
) -> Vec<Condition> {
    let mut conditions = prev.conditions.clone();
    let mut set = |type_: ConditionType, status: bool, reason: &str, message: Option<String>| {
        set_condition(
            &mut conditions,
            type_.as_str(),
            status,
            reason,
            message,
            pass.observed_generation,
            now,
        );
    };
    let (progressing, progressing_reason) = pass.to.progressing();
    set(
        ConditionType::Progressing,
        progressing,
        progressing_reason.as_str(),
        pass.message.clone(),
    );
    let all_available = pass.available >= pass.desired;
    let available_reason = if all_available {
        ConditionReason::AllPodsAvailable
    } else {
        ConditionReason::PodsUnavailable
    };
    set(
        ConditionType::Available,
        all_available,
        available_reason.as_str(),
        Some(format!(
            "{} of {} {} available",
            pass.available.min(pass.desired),
            pass.desired,
            if pass.desired == 1 { "pod" } else { "pods" }
        )),
    );
    let (degraded, degraded_reason, degraded_message) = degraded(pass);
    let crash_looping_at_rest = degraded_reason == ConditionReason::CrashLoopingAtRest;
    let kstatus_conditions =
        kstatus(pass.to, standing(pass, crash_looping_at_rest)).map(|verdict| {
            let message = kstatus_message(pass, verdict.reason, degraded_message.as_deref());
            (verdict, message)
        });
    set(
        ConditionType::Degraded,
        degraded,
        degraded_reason.as_str(),
        degraded_message,
    );
    for (verdict, message) in kstatus_conditions {
        set(
            verdict.type_,
            verdict.status,
            verdict.reason.as_str(),
            message,
        );
    }
    // Only once a drift was seen: a DaemonSet that never drifted carries no Drifted condition.
    let ever_drifted = prev
        .conditions
        .iter()
        .any(|c| c.type_ == ConditionType::Drifted.as_str());
    if pass.drift.is_some() || ever_drifted {
        let (reason, message) = match &pass.drift {
            Some(what) => (
                ConditionReason::ChangedOutsideTheController,
                Some(what.clone()),
            ),
            None => (ConditionReason::AsDesired, None),
        };
        set(
            ConditionType::Drifted,
            pass.drift.is_some(),
            reason.as_str(),
            message,
        );
    }
    // Only with analysis: a rollout without one carries no AnalysisPassing condition.
    match analysis {
        None => conditions.retain(|c| c.type_ != ConditionType::AnalysisPassing.as_str()),
        Some(analysis) => {
            let passing = analysis.verdict == AnalysisVerdict::Passing.as_str();
            set_condition(
                &mut conditions,
                ConditionType::AnalysisPassing.as_str(),
                passing,
                &format!("Analysis{}", analysis.verdict),
                analysis.message.clone(),
                pass.observed_generation,
                now,
            );
        }
    }
    conditions
}

/// What the kstatus conditions of a pass read beyond its phase.
fn standing(pass: &Transition, crash_looping_at_rest: bool) -> Standing {
    let awaiting_promotion = pass.pods.as_deref().is_some_and(|p| p.awaiting_promotion);
    Standing {
        failure: pass.failure,
        gate: if pass.held {
            Some(Gate::HeldOnRequest)
        } else if awaiting_promotion {
            Some(Gate::AwaitingPromotion)
        } else {
            None
        },
        crash_looping_at_rest,
    }
}

/// The message of a kstatus condition: what the gate waits for, the step a rollout is in, or
/// the pass's message.
fn kstatus_message(
    pass: &Transition,
    reason: ConditionReason,
    degraded_message: Option<&str>,
) -> Option<String> {
    let step = pass
        .pods
        .as_deref()
        .filter(|p| p.step < p.step_count)
        .map(|p| format!("step {} of {}", p.step.saturating_add(1), p.step_count));
    let name = &pass.name;
    let said = match reason {
        ConditionReason::HeldOnRequest => Some(format!(
            "held on request: `daemonset-canary resume {name}` lets it go on"
        )),
        ConditionReason::AwaitingPromotion => Some(format!(
            "paused until promoted: `daemonset-canary promote {name}` lets it go on"
        )),
        ConditionReason::CrashLoopingAtRest => degraded_message.map(str::to_owned),
        ConditionReason::RolledBack => Some(pass.message.clone().unwrap_or_else(|| {
            "rolled back to the last successful revision: the spec's target does not run until the spec changes".to_owned()
        })),
        _ => pass.message.clone(),
    };
    match (step, said) {
        (Some(step), Some(said)) if pass.to.is_in_progress() => Some(format!("{step}: {said}")),
        (Some(step), None) if pass.to.is_in_progress() => Some(step),
        (_, said) => said,
    }
}

/// The `Degraded` condition of a pass: whether, its reason and its message. A release whose
/// pods crash-loop after its rollout succeeded stays `successful` (it is not failed, or rolled
/// back, after the fact), but it is degraded: the crashes hold the catch-up of any node still
/// on an older revision (finding 25). So does a rollback that ended on a revision whose pods
/// crash-loop since (soak seed 22009504, finding 51).
fn degraded(pass: &Transition) -> (bool, ConditionReason, Option<String>) {
    let crashing_at_rest = match pass.pods.as_deref() {
        Some(pods)
            if matches!(pass.to, Phase::Successful | Phase::RolledBack)
                && !pods.failed_nodes.is_empty() =>
        {
            Some(&pods.failed_nodes)
        }
        _ => None,
    };
    let degraded = pass.to == Phase::Failed || crashing_at_rest.is_some();
    let reason = match (pass.to, pass.failure, crashing_at_rest) {
        (Phase::Failed, Some(reason), _) => ConditionReason::Failure(reason),
        (Phase::Failed, None, _) => ConditionReason::Failed,
        (_, _, Some(_)) => ConditionReason::CrashLoopingAtRest,
        _ => ConditionReason::AsExpected,
    };
    let message = match crashing_at_rest {
        Some(nodes) if pass.to != Phase::Failed => Some(format!(
            "the {} succeeded, but updated pods crash-loop on {} {} ({}); no old pod is replaced until they run",
            if pass.to == Phase::RolledBack {
                "rollback"
            } else {
                "rollout"
            },
            nodes.len(),
            if nodes.len() == 1 { "node" } else { "nodes" },
            nodes
                .iter()
                .take(LISTED_NODES)
                .map(String::as_str)
                .collect::<Vec<_>>()
                .join(", ")
        )),
        _ if degraded => pass.message.clone(),
        _ => None,
    };
    (degraded, reason, message)
}

/// Whether `status` has the condition `type_` with status `is` (`"True"` or `"False"`).
pub fn condition_is(status: &CanaryDaemonSetStatus, type_: ConditionType, is: bool) -> bool {
    let wanted = if is { "True" } else { "False" };
    status
        .conditions
        .iter()
        .any(|c| c.type_ == type_.as_str() && c.status == wanted)
}

/// Upserts a condition; `lastTransitionTime` only moves when the status flips.
fn set_condition(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: bool,
    reason: &str,
    message: Option<String>,
    observed_generation: Option<i64>,
    now: Timestamp,
) {
    let status = if status { "True" } else { "False" }.to_owned();
    let existing = conditions.iter_mut().find(|c| c.type_ == type_);
    let last_transition_time = match &existing {
        Some(c) if c.status == status => c.last_transition_time.clone(),
        _ => Time(now),
    };
    let condition = Condition {
        type_: type_.to_owned(),
        status,
        reason: reason.to_owned(),
        message: message.unwrap_or_default(),
        observed_generation,
        last_transition_time,
    };
    match existing {
        Some(slot) => *slot = condition,
        None => conditions.push(condition),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use canary_state_machine::LiveMaxUnavailable;
    use k8s_openapi::jiff::SignedDuration;

    fn t(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_767_225_600 + seconds).unwrap()
    }

    fn pass(phase: Phase, updated_ready: u32) -> Transition {
        Transition {
            namespace: "ns".into(),
            name: "agent".into(),
            daemon_set: "agent".into(),
            target: Target {
                version: "v2".into(),
                ..Target::default()
            },
            from: None,
            to: phase,
            failure: None,
            message: None,
            write: None,
            desired: 4,
            updated: updated_ready,
            updated_ready,
            available: 4,
            max_unavailable: Some(LiveMaxUnavailable::Int(1)),
            observed_generation: Some(1),
            recorded_generation: Some(3),
            drift: None,
            template_hash: None,
            phase_started_at: t(0),
            at: t(0),
            pods: None,
            history: None,
            retry: None,
            held: false,
            unhealthy: None,
            analysis: None,
            unhealthy_answered: None,
        }
    }

    fn condition<'a>(status: &'a CanaryDaemonSetStatus, type_: &str) -> &'a Condition {
        status.conditions.iter().find(|c| c.type_ == type_).unwrap()
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
            serde_json::from_value(serde_json::json!({"phase": "exploded", "reason": "Boom"}))
                .unwrap();
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
}
