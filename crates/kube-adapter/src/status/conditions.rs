//! The conditions of a status after a pass: `Progressing`, `Available`, `Degraded`,
//! `Drifted`, `AnalysisPassing`, `PrePullBlocked`, and kstatus' `Ready`, `Reconciling` and `Stalled`; a
//! condition's `lastTransitionTime` moves only when its status flips.

use canary_state_machine::{
    AnalysisVerdict, ConditionReason, ConditionType, Gate, LISTED_NODES, Phase, Standing, kstatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

use crate::crd::{AnalysisStatus, CanaryDaemonSetStatus};
use crate::observer::{PrePullStanding, Transition};

/// The conditions after a pass: `Progressing`, `Available` and `Degraded` always, `Drifted`
/// once a drift was seen, `AnalysisPassing` with an analysis, `PrePullBlocked` once pre-pull
/// was refused, and kstatus' `Ready`, `Reconciling` and `Stalled` always.
pub(super) fn conditions(
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
    analysis_passing(&mut conditions, pass, analysis, now);
    pre_pull_blocked(&mut conditions, pass, now);
    conditions
}

/// `AnalysisPassing`, only with analysis: a rollout without one carries none.
fn analysis_passing(
    conditions: &mut Vec<Condition>,
    pass: &Transition,
    analysis: Option<&AnalysisStatus>,
    now: Timestamp,
) {
    match analysis {
        None => conditions.retain(|c| c.type_ != ConditionType::AnalysisPassing.as_str()),
        Some(analysis) => {
            let passing = analysis.verdict == AnalysisVerdict::Passing.as_str();
            set_condition(
                conditions,
                ConditionType::AnalysisPassing.as_str(),
                passing,
                &format!("Analysis{}", analysis.verdict),
                analysis.message.clone(),
                pass.observed_generation,
                now,
            );
        }
    }
}

/// `PrePullBlocked` (issue 50), only once pre-pull was refused, and never without
/// `spec.prePull`.
fn pre_pull_blocked(conditions: &mut Vec<Condition>, pass: &Transition, now: Timestamp) {
    let blocked_before = conditions
        .iter()
        .any(|c| c.type_ == ConditionType::PrePullBlocked.as_str());
    match &pass.pre_pull {
        PrePullStanding::Off => {
            conditions.retain(|c| c.type_ != ConditionType::PrePullBlocked.as_str());
        }
        PrePullStanding::Unknown => {}
        PrePullStanding::Created if !blocked_before => {}
        PrePullStanding::Created => set_condition(
            conditions,
            ConditionType::PrePullBlocked.as_str(),
            false,
            ConditionReason::PodsCreated.as_str(),
            None,
            pass.observed_generation,
            now,
        ),
        PrePullStanding::Forbidden(message) => set_condition(
            conditions,
            ConditionType::PrePullBlocked.as_str(),
            true,
            ConditionReason::Forbidden.as_str(),
            Some(message.clone()),
            pass.observed_generation,
            now,
        ),
    }
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
pub(super) fn set_condition(
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
