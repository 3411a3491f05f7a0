//! The words of a rollout's events: how every message names its DaemonSet and version, and the
//! events of the rows both drivers share.

use crate::decision::{Event, EventType, event_reason};

/// The `Retried` event of a retry on request (both drivers).
pub fn retried_event(name: &str, version: &str) -> Event {
    normal(
        event_reason::RETRIED,
        format!(
            "daemonSet {name}: retrying {} from its first step on request",
            rollout_of(version)
        ),
    )
}

/// The `Paused` event of a hold on request; `what` says what stops (each driver its own).
pub(super) fn paused_event(name: &str, what: &str) -> Event {
    normal(
        event_reason::PAUSED,
        format!("daemonSet {name}: paused on request, {what} until it is resumed"),
    )
}

/// The `Resumed` event of the end of a hold on request.
pub(super) fn resumed_event(name: &str) -> Event {
    normal(
        event_reason::RESUMED,
        format!("daemonSet {name}: resumed on request, the rollout goes on"),
    )
}

/// The `RolloutStarted` event.
pub(super) fn started_event(name: &str, version: &str) -> Event {
    normal(
        event_reason::ROLLOUT_STARTED,
        format!("daemonSet {name}: started {}", rollout_of(version)),
    )
}

/// The `RolloutCompleted` event.
pub(crate) fn completed_event(name: &str, version: &str) -> Event {
    normal(
        event_reason::ROLLOUT_COMPLETED,
        format!(
            "daemonSet {name}: {} complete, every pod updated and ready",
            rollout_of(version)
        ),
    )
}

/// `rollout of v1.9.4`, or `rollout` when the version is not known. Every message of a
/// rollout names its version, so that two rollouts' events read apart (`kubectl get events`).
pub(crate) fn rollout_of(version: &str) -> String {
    if version.is_empty() {
        "rollout".to_owned()
    } else {
        format!("rollout of {version}")
    }
}

/// `v1.9.4`, or `the target` when the version is not known.
pub(crate) fn version_or_target(version: &str) -> &str {
    if version.is_empty() {
        "the target"
    } else {
        version
    }
}

/// A `Normal` event.
pub(crate) fn normal(reason: &'static str, message: String) -> Event {
    Event {
        type_: EventType::Normal,
        reason,
        message,
    }
}

/// A `Warning` event.
pub(crate) fn warning(reason: &'static str, message: String) -> Event {
    Event {
        type_: EventType::Warning,
        reason,
        message,
    }
}
