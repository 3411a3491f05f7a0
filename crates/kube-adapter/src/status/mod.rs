//! Status and conditions as pure functions of the previous status and this pass.
//!
//! The status is the controller's only memory: [`previous_pass`] reads back what the state
//! machine needs (phase, failure, progress) and [`next_status`] writes it. Times only move when
//! something changes, so an unchanged pass produces an identical status and no write.

use std::time::Duration;

use canary_predicates::Target;
use canary_state_machine::{
    ConditionReason, ConditionType, FailureReason, LISTED_NODES, Phase, PreviousPass, StepPosition,
    awaiting_workload,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use crate::crd::{CanaryDaemonSetStatus, NodeNote, RevisionPods, UnhealthyNodeNote};
use crate::observer::Transition;

mod conditions;
mod downtime;
#[cfg(test)]
mod tests;

pub use conditions::condition_is;
use conditions::{conditions, set_condition};
use downtime::agent_downtime;

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
        agent_downtime: agent_downtime(prev, pass),
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
