//! What a CanaryDaemonSet's author writes (`spec.notifications`): the receivers, by name, and
//! the events each is told of. The receivers themselves (where, with which headers) are the
//! cluster admin's ([`super::Receivers`]): an author can make the controller send only to an
//! address the admin defined, and never read a Secret (issue 47).

use canary_state_machine::{EventType, Phase, event_reason};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One subscription of `spec.notifications`: a receiver the controller's administrator
/// defined, and the events it is told of.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct NotificationSubscription {
    /// The name of a receiver defined by the controller's administrator
    /// (`run --notification-receivers`, docs/notifications.md). An unknown name is a Warning
    /// event `NotificationReceiverUnknown` on this object; the rollout goes on.
    #[schemars(length(min = 1, max = 63))]
    pub receiver: String,
    /// The events sent to it (default: all of them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 7))]
    pub events: Vec<NotificationEvent>,
}

impl NotificationSubscription {
    /// Whether `event` is sent to this subscription's receiver.
    pub fn wants(&self, event: NotificationEvent) -> bool {
        self.events.is_empty() || self.events.contains(&event)
    }
}

/// What a notification tells of.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NotificationEvent {
    /// The rollout failed (a crash-looping canary, a deadline, a refused write, a failed
    /// gate or analysis, a spec the controller cannot act on).
    Failed,
    /// The rollout completed: every pod updated and ready.
    Succeeded,
    /// The rollout is held on request (the `pause` verb).
    Paused,
    /// A rollback completed: every pod runs the stable revision again.
    RolledBack,
    /// A metric of the analysis failed past its limit.
    AnalysisFailed,
    /// Nodes turned unhealthy after their update (the node-health gate).
    NodeUnhealthy,
    /// The pods beside the agent were disrupted after their update (the neighbours gate).
    NeighboursDisrupted,
}

impl NotificationEvent {
    /// The name, as the spec and the bodies spell it.
    pub const fn as_str(self) -> &'static str {
        match self {
            NotificationEvent::Failed => "Failed",
            NotificationEvent::Succeeded => "Succeeded",
            NotificationEvent::Paused => "Paused",
            NotificationEvent::RolledBack => "RolledBack",
            NotificationEvent::AnalysisFailed => "AnalysisFailed",
            NotificationEvent::NodeUnhealthy => "NodeUnhealthy",
            NotificationEvent::NeighboursDisrupted => "NeighboursDisrupted",
        }
    }

    /// What an event published on the object tells of, read where the events are published
    /// (`reconcile/report.rs`), never re-derived from the status: `phase` is the phase the
    /// pass decided. A Warning of a pass that decides `Failed` is a failure (one per pass:
    /// the dedupe keeps the first); `AnalysisFailed`, `NodeUnhealthy` and
    /// `NeighboursDisrupted` are also events of their own, failing or holding.
    pub fn of(reason: &str, type_: EventType, phase: Phase) -> Vec<NotificationEvent> {
        let mut events = Vec::new();
        match reason {
            event_reason::ROLLOUT_COMPLETED => events.push(NotificationEvent::Succeeded),
            event_reason::PAUSED => events.push(NotificationEvent::Paused),
            event_reason::ROLLED_BACK => events.push(NotificationEvent::RolledBack),
            event_reason::ANALYSIS_FAILED => events.push(NotificationEvent::AnalysisFailed),
            event_reason::NODE_UNHEALTHY => events.push(NotificationEvent::NodeUnhealthy),
            event_reason::NEIGHBOURS_DISRUPTED => {
                events.push(NotificationEvent::NeighboursDisrupted);
            }
            _ => {}
        }
        // A drift or a refused verb is a Warning beside a failure, never the failure itself.
        let beside = matches!(
            reason,
            event_reason::DRIFT_DETECTED
                | event_reason::VERB_REFUSED
                | event_reason::NODES_DEFERRED
        );
        if type_ == EventType::Warning && phase == Phase::Failed && !beside {
            events.insert(0, NotificationEvent::Failed);
        }
        events
    }

    /// Whether an event with this reason starts a rollout (or a new round of it) again, so
    /// that what was sent of the object before may be sent again (a second failure after a
    /// `retry`, a second `pause` after a `resume`).
    pub fn starts_again(reason: &str) -> bool {
        matches!(
            reason,
            event_reason::ROLLOUT_STARTED
                | event_reason::RETRIED
                | event_reason::UNDO_STARTED
                | event_reason::ABORTED
                | event_reason::RESUMED
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_read_from_the_reasons_published() {
        use NotificationEvent::*;
        let of = NotificationEvent::of;
        assert_eq!(
            of(
                event_reason::FAILED_UPDATE,
                EventType::Warning,
                Phase::Failed
            ),
            [Failed]
        );
        assert_eq!(
            of(
                event_reason::ANALYSIS_FAILED,
                EventType::Warning,
                Phase::Failed
            ),
            [Failed, AnalysisFailed]
        );
        // A gate that holds (`onUnhealthy: Hold`) is no failure.
        assert_eq!(
            of(
                event_reason::NODE_UNHEALTHY,
                EventType::Warning,
                Phase::Paused
            ),
            [NodeUnhealthy]
        );
        assert_eq!(
            of(
                event_reason::ROLLOUT_COMPLETED,
                EventType::Normal,
                Phase::Successful
            ),
            [Succeeded]
        );
        assert_eq!(
            of(event_reason::PAUSED, EventType::Normal, Phase::Paused),
            [Paused]
        );
        assert_eq!(
            of(
                event_reason::ROLLED_BACK,
                EventType::Normal,
                Phase::Successful
            ),
            [RolledBack]
        );
        assert!(
            of(
                event_reason::DRIFT_DETECTED,
                EventType::Warning,
                Phase::Failed
            )
            .is_empty()
        );
        assert!(
            of(
                event_reason::STEP_STARTED,
                EventType::Normal,
                Phase::Increasing
            )
            .is_empty()
        );
    }

    #[test]
    fn a_subscription_without_events_takes_them_all() {
        let all = NotificationSubscription {
            receiver: "a".into(),
            events: Vec::new(),
        };
        assert!(all.wants(NotificationEvent::Paused));
        let some = NotificationSubscription {
            receiver: "a".into(),
            events: vec![NotificationEvent::Failed],
        };
        assert!(some.wants(NotificationEvent::Failed) && !some.wants(NotificationEvent::Paused));
    }
}
