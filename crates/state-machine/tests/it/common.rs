//! Builders shared by the scenario tests of both strategies.

use canary_state_machine::{
    DaemonSetWrite, Decision, Event, LiveMaxUnavailable, MaxUnavailable, Observation, Phase,
    TemplateEdit, WriteKind, event_reason,
};

/// The DaemonSet every scenario is about.
pub const NAME: &str = "virt-handler";
/// The version every scenario rolls out.
pub const VERSION: &str = "v1.6.0";

/// A virt-handler DaemonSet at rest (`maxUnavailable: 1`).
pub fn handler() -> Observation {
    Observation {
        name: NAME.into(),
        version: VERSION.into(),
        live_max_unavailable: LiveMaxUnavailable::Int(1),
        ..Observation::default()
    }
}

/// Asserts that the first of `events` says `text` (in its message).
#[track_caller]
pub fn assert_first_event_says(events: &[Event], text: &str) {
    let message = &events.first().expect("an event").message;
    assert!(message.contains(text), "{message:?} does not say {text:?}");
}

/// A pass after row 1's unrecorded write: only the generation flag is set.
pub fn after_start(desired: u32, updated_ready: u32) -> Observation {
    Observation {
        generation_known: false,
        desired_pods: desired,
        updated_pods: updated_ready,
        updated_ready_pods: updated_ready,
        old_pods: desired.saturating_sub(updated_ready),
        ..handler()
    }
}

/// The write a decision is expected to carry.
pub fn write(
    kind: WriteKind,
    max: Option<MaxUnavailable>,
    edit: Option<TemplateEdit>,
) -> DaemonSetWrite {
    DaemonSetWrite {
        kind,
        max_unavailable: max,
        template_edit: edit,
    }
}

/// A pass in `phase` that writes, records and reports nothing, and is not done.
pub fn assert_no_write_in(decision: &Decision, phase: Phase) {
    assert_eq!(decision.phase, phase);
    assert_eq!(decision.write, None);
    assert!(!decision.action.record_generation);
    assert!(!decision.done);
    assert_eq!(decision.error, None);
}

/// Row 1: the canary starts at maxUnavailable 1, nothing recorded, not done.
pub fn assert_starts_the_canary(decision: &Decision) {
    assert_eq!(decision.phase, Phase::Started);
    assert_eq!(
        decision.write,
        Some(write(WriteKind::Start, Some(MaxUnavailable::ONE), None))
    );
    assert!(!decision.action.record_generation, "row 1 never records");
    assert!(!decision.done);
}

/// The event of the table's own row in a MaxUnavailable decision: the last one that is not the
/// hold's announcement (`Paused`, `Resumed`) or a retry's (`Retried`).
pub trait TableEvent {
    /// That event, if any.
    fn table_event(&self) -> Option<Event>;
}

impl TableEvent for Decision {
    fn table_event(&self) -> Option<Event> {
        self.events
            .iter()
            .rev()
            .find(|event| {
                ![
                    event_reason::PAUSED,
                    event_reason::RESUMED,
                    event_reason::RETRIED,
                ]
                .contains(&event.reason)
            })
            .cloned()
    }
}
