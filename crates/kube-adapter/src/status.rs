//! Status and conditions as pure functions of the previous status and this pass.
//!
//! The status is the controller's only memory: [`previous_pass`] reads back what the state
//! machine needs (phase, failure, progress) and [`next_status`] writes it. Times only move when
//! something changes, so an unchanged pass produces an identical status and no write.

use std::time::Duration;

use canary_state_machine::{FailureReason, Phase, PreviousPass};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

use crate::crd::CanaryDaemonSetStatus;
use crate::observer::Transition;

/// Condition type: a rollout is in progress.
pub const PROGRESSING: &str = "Progressing";
/// Condition type: every desired pod is available.
pub const AVAILABLE: &str = "Available";
/// Condition type: the rollout failed or the spec cannot be acted on.
pub const DEGRADED: &str = "Degraded";

/// Reason of a Degraded condition for a spec the controller cannot act on.
pub const INVALID_SPEC: &str = FailureReason::InvalidSpec.as_str();

/// The state machine's memory of the previous pass, read from the status.
///
/// `since_progress` is the time since the phase started or since `updatedReady` last moved,
/// whichever is later. A status without a parseable phase (a new object) gives `None`.
pub fn previous_pass(
    status: Option<&CanaryDaemonSetStatus>,
    now: Timestamp,
) -> Option<PreviousPass> {
    let status = status?;
    let phase: Phase = status.phase.as_deref()?.parse().ok()?;
    let failure = match phase {
        // An invalid spec is not a sticky rollout failure (`is_sticky`): fixing it resumes.
        Phase::Failed => status
            .reason
            .as_deref()
            .and_then(|r| r.parse::<FailureReason>().ok()),
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
    })
}

/// The status after a pass, as its [`Transition`] describes it (its `phase_started_at` is not
/// read: the status decides when the phase started).
pub fn next_status(
    previous: Option<&CanaryDaemonSetStatus>,
    pass: &Transition,
    now: Timestamp,
) -> CanaryDaemonSetStatus {
    let empty = CanaryDaemonSetStatus::default();
    let prev = previous.unwrap_or(&empty);
    let phase = pass.to.as_str();
    let phase_changed = prev.phase.as_deref() != Some(phase);
    let phase_start_time = match (&prev.phase_start_time, phase_changed) {
        (Some(start), false) => Some(start.clone()),
        _ => Some(Time(now)),
    };
    let progressed = phase_changed || prev.progress_updated_ready != Some(pass.updated_ready);
    let last_progress_time = match (&prev.last_progress_time, progressed) {
        (Some(t), false) => Some(t.clone()),
        _ => Some(Time(now)),
    };

    let mut conditions = prev.conditions.clone();
    let (progressing, progressing_reason) = progressing(pass);
    set_condition(
        &mut conditions,
        PROGRESSING,
        progressing,
        progressing_reason,
        pass.message.clone(),
        pass.observed_generation,
        now,
    );
    let all_available = pass.available >= pass.desired;
    set_condition(
        &mut conditions,
        AVAILABLE,
        all_available,
        if all_available {
            "AllPodsAvailable"
        } else {
            "PodsUnavailable"
        },
        Some(format!(
            "{} of {} {} available",
            pass.available.min(pass.desired),
            pass.desired,
            if pass.desired == 1 { "pod" } else { "pods" }
        )),
        pass.observed_generation,
        now,
    );
    let degraded = pass.to == Phase::Failed;
    let degraded_reason = match (degraded, pass.failure) {
        (true, Some(reason)) => reason.as_str(),
        (true, None) => "Failed",
        (false, _) => "AsExpected",
    };
    let degraded_message = if degraded { pass.message.clone() } else { None };
    set_condition(
        &mut conditions,
        DEGRADED,
        degraded,
        degraded_reason,
        degraded_message,
        pass.observed_generation,
        now,
    );

    CanaryDaemonSetStatus {
        phase: Some(phase.to_owned()),
        reason: pass.failure.map(|failure| failure.as_str().to_owned()),
        message: pass.message.clone(),
        conditions,
        observed_generation: pass.observed_generation,
        recorded_daemon_set_generation: pass.recorded_generation,
        daemon_set_name: Some(pass.daemon_set.clone()),
        target_version: (!pass.version.is_empty()).then(|| pass.version.clone()),
        desired: pass.desired,
        updated: pass.updated,
        updated_ready: pass.updated_ready,
        ready_ratio: Some(format!("{}/{}", pass.updated_ready, pass.desired)),
        current_max_unavailable: pass.max_unavailable.as_ref().map(ToString::to_string),
        phase_start_time,
        progress_updated_ready: Some(pass.updated_ready),
        last_progress_time,
    }
}

fn progressing(pass: &Transition) -> (bool, &'static str) {
    match pass.to {
        Phase::Started => (true, "CanaryStarted"),
        Phase::Canary => (true, "WaitingForCanary"),
        Phase::Increasing => (true, "RolloutWidened"),
        Phase::Waiting => (true, "WaitingForRollout"),
        Phase::Successful => (false, "RolloutComplete"),
        Phase::Failed => (false, "RolloutFailed"),
    }
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
            version: "v2".into(),
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
            phase_started_at: t(0),
            at: t(0),
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
        let bogus = CanaryDaemonSetStatus {
            phase: Some("exploded".into()),
            ..Default::default()
        };
        assert_eq!(previous_pass(Some(&bogus), t(0)), None);
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
}
