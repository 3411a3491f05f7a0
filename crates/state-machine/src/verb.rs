//! The verbs that steer a rollout, one table that the controller and the CLI both read: each
//! verb's annotation, the event that answers it, the drivers that act on it, and when it is
//! refused. A refusal is decided here, once, so that the CLI can never print an outcome the
//! controller refuses.
//!
//! | verb | annotation | answered by | drivers | refused when |
//! |---|---|---|---|---|
//! | `promote` | `canary.daemonset.dev/promote` (`full@TIME` for `--full`) | `Promoted` | Pods | another driver; held on request; not paused (a step promotion); no rollout under way (`--full`) |
//! | `pause` | `canary.daemonset.dev/paused` set | `Paused` | both | held on request already |
//! | `resume` | `canary.daemonset.dev/paused` removed | `Resumed` | both | not held on request |
//! | `retry` | `canary.daemonset.dev/retry` | `Retried` | both | not failed |
//! | `abort` | `canary.daemonset.dev/abort` | `Aborted` | both, own template | a workload someone else owns; a rollback under way; at rest; nothing successful to go back to |
//! | `undo` | `canary.daemonset.dev/undo` (`N@TIME`, `previous@TIME`) | `UndoStarted` | both, own template | a workload someone else owns; no such revision; that revision rolled out already |
//!
//! A verb is a mark (an annotation), never a spec field: a GitOps sync neither undoes it nor
//! shows it as drift. The controller acts on a mark once and records that it did; a mark it
//! refuses is answered with a `VerbRefused` warning and counts as acted on. A hold on request
//! stops what moves, not what is asked: an `abort` or an `undo` asked while held is recorded at
//! once and goes out when the hold ends (the CLI says so); a `promote` is refused while held
//! (resume first), as the controller keeps a promotion for after the hold.
//!
//! A new verb: a variant here with its row, the adapter's part that reads its mark into the
//! observation, and the row of the life cycle (or of a driver's progress) that acts on it.

use crate::decision::event_reason;
use crate::lifecycle::{Revision, UndoTarget};
use crate::phase::Phase;
use crate::strategy::Driver;

/// A verb of the CLI, acted on by the controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Verb {
    /// End the current pause step (`--full`: skip every remaining step and pause).
    Promote,
    /// Hold the rollout on request.
    Pause,
    /// End a hold on request.
    Resume,
    /// Start a failed rollout again from its first step.
    Retry,
    /// Go back to the last successful revision.
    Abort,
    /// Roll out an earlier revision.
    Undo,
}

/// What a verb's refusal depends on: what the object's spec and stored status say.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct VerbContext {
    /// The driver of the spec.
    pub driver: Driver,
    /// The phase: the reported one for the CLI, the decided one for the controller's pass.
    pub phase: Option<Phase>,
    /// A hold on request is asked for (the mark is set).
    pub held: bool,
    /// The controller writes the template (no `spec.workloadRef`).
    pub owns_template: bool,
    /// An abort or an automatic rollback is in force.
    pub rolling_back: bool,
    /// The revision being rolled out (or at rest).
    pub current: Option<Revision>,
    /// The last revision that finished `successful`.
    pub stable: Option<Revision>,
}

/// What the refusal of a verb that goes back to the template of a workload someone else owns
/// says.
const NOT_OUR_TEMPLATE: &str = "the DaemonSet belongs to spec.workloadRef's owner (Helm, Argo CD, Flux); roll back where it is defined";

impl Verb {
    /// Every verb.
    pub const ALL: [Verb; 6] = [
        Verb::Promote,
        Verb::Pause,
        Verb::Resume,
        Verb::Retry,
        Verb::Abort,
        Verb::Undo,
    ];

    /// The CLI's name of the verb (`"promote"`, ...), as its events and refusals say it.
    pub const fn name(self) -> &'static str {
        match self {
            Verb::Promote => "promote",
            Verb::Pause => "pause",
            Verb::Resume => "resume",
            Verb::Retry => "retry",
            Verb::Abort => "abort",
            Verb::Undo => "undo",
        }
    }

    /// The annotation that carries the verb's mark (`pause` sets it, `resume` removes it).
    pub const fn annotation(self) -> &'static str {
        match self {
            Verb::Promote => "canary.daemonset.dev/promote",
            Verb::Pause | Verb::Resume => "canary.daemonset.dev/paused",
            Verb::Retry => "canary.daemonset.dev/retry",
            Verb::Abort => "canary.daemonset.dev/abort",
            Verb::Undo => "canary.daemonset.dev/undo",
        }
    }

    /// The reason of the event that answers the verb when the controller acts on it.
    pub const fn event_reason(self) -> &'static str {
        match self {
            Verb::Promote => event_reason::PROMOTED,
            Verb::Pause => event_reason::PAUSED,
            Verb::Resume => event_reason::RESUMED,
            Verb::Retry => event_reason::RETRIED,
            Verb::Abort => event_reason::ABORTED,
            Verb::Undo => event_reason::UNDO_STARTED,
        }
    }

    /// The verb an event of `reason` answers, if any.
    pub fn answered_by(reason: &str) -> Option<Verb> {
        Verb::ALL
            .into_iter()
            .find(|verb| verb.event_reason() == reason)
    }

    /// The drivers that act on the verb.
    pub const fn drivers(self) -> &'static [Driver] {
        match self {
            Verb::Promote => &[Driver::Pods],
            _ => &[Driver::MaxUnavailable, Driver::Pods],
        }
    }

    /// Why the verb is refused in `at`, or `None` when it is acted on. `Promote` is the step
    /// promotion; [`Verb::full_promotion_refusal`] is `--full`'s.
    pub fn refusal(self, at: &VerbContext) -> Option<String> {
        if !self.drivers().contains(&at.driver) {
            return Some(format!(
                "the {} driver does not {}, only the Pods driver does (spec.strategy.driver: Pods)",
                at.driver,
                self.what()
            ));
        }
        let phase = Phase::name_or_pending(at.phase);
        match self {
            Verb::Promote if at.held => Some(held_promotion()),
            Verb::Promote if at.phase != Some(Phase::Paused) => Some(format!(
                "the rollout is not paused (phase {phase}): nothing to promote"
            )),
            Verb::Pause if at.held => Some("it is paused on request already".to_owned()),
            Verb::Resume if !at.held => Some(
                "it is not paused on request: nothing to resume (a pause step ends with promote)"
                    .to_owned(),
            ),
            Verb::Retry if at.phase != Some(Phase::Failed) => Some(format!(
                "the rollout is not failed (phase {phase}): nothing to retry"
            )),
            Verb::Abort => abort_refusal(at),
            Verb::Undo if !at.owns_template => Some(NOT_OUR_TEMPLATE.to_owned()),
            _ => None,
        }
    }

    /// Why `promote --full` is refused in `at`, or `None`: it needs a rollout under way, with
    /// steps left to skip.
    pub fn full_promotion_refusal(at: &VerbContext) -> Option<String> {
        if let Some(why) = Verb::Promote
            .refusal(at)
            .filter(|_| at.held || !Verb::Promote.drivers().contains(&at.driver))
        {
            return Some(why);
        }
        let under_way = matches!(
            at.phase,
            Some(
                Phase::Started
                    | Phase::Canary
                    | Phase::Increasing
                    | Phase::Paused
                    | Phase::RollingBack
            )
        );
        (!under_way).then(|| {
            format!(
                "there is no rollout under way (phase {}): nothing to promote",
                Phase::name_or_pending(at.phase)
            )
        })
    }

    /// What the verb does, for a refusal by driver.
    const fn what(self) -> &'static str {
        match self {
            Verb::Promote => "end pause steps",
            Verb::Pause => "hold rollouts",
            Verb::Resume => "resume held rollouts",
            Verb::Retry => "retry failed rollouts",
            Verb::Abort => "abort rollouts",
            Verb::Undo => "roll out earlier revisions",
        }
    }
}

/// The revision an `undo` to `target` rolls out, among `history`, or why it is refused: no
/// such revision, no revision before the current one, or the current one itself (outside a
/// rollback, which an undo to the current revision ends).
pub fn undo_revision(
    target: UndoTarget,
    at: &VerbContext,
    history: &[Revision],
) -> Result<Revision, String> {
    if !at.owns_template {
        return Err(NOT_OUR_TEMPLATE.to_owned());
    }
    let current = at.current.as_ref().map(|c| c.number);
    let known = || {
        let numbers: Vec<String> = history.iter().map(|r| r.number.to_string()).collect();
        if numbers.is_empty() {
            "the history is empty".to_owned()
        } else {
            format!("revisions: {}", numbers.join(", "))
        }
    };
    let found = match target {
        UndoTarget::Revision(number) => history.iter().find(|r| r.number == number).cloned(),
        UndoTarget::Previous => history
            .iter()
            .filter(|r| current.is_none_or(|c| r.number < c))
            .max_by_key(|r| r.number)
            .cloned(),
    };
    let Some(to) = found else {
        return Err(match target {
            UndoTarget::Revision(number) => {
                format!("revision {number} is not in the history ({})", known())
            }
            UndoTarget::Previous => format!("no revision before the current one ({})", known()),
        });
    };
    if Some(to.number) == current && !at.rolling_back {
        return Err(format!(
            "revision {} is the one rolled out already",
            to.number
        ));
    }
    Ok(to)
}

fn held_promotion() -> String {
    "the rollout is held on request (the pause verb): resume it first, a promotion does not end a hold"
        .to_owned()
}

/// An abort goes back to the stable revision from a rollout under way (or failed) of another
/// revision; a hold does not refuse it (the rollback goes out when the hold ends).
fn abort_refusal(at: &VerbContext) -> Option<String> {
    if !at.owns_template {
        return Some(NOT_OUR_TEMPLATE.to_owned());
    }
    if at.rolling_back || at.phase == Some(Phase::RollingBack) {
        return Some("a rollback is already in progress".to_owned());
    }
    if at.phase.is_none_or(Phase::is_at_rest) {
        return Some("the rollout has ended successfully; nothing to abort".to_owned());
    }
    match &at.stable {
        None => Some(
            "no revision has finished successfully yet: there is nothing to go back to".to_owned(),
        ),
        Some(stable) if at.current.as_ref().map(|c| c.number) == Some(stable.number) => {
            Some(format!(
                "the revision being rolled out ({}) is the last successful one: there is nothing to go back to",
                stable.number
            ))
        }
        Some(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn revision(number: i64) -> Revision {
        Revision {
            number,
            version: format!("v{number}"),
        }
    }

    fn rolling_out(phase: Phase) -> VerbContext {
        VerbContext {
            driver: Driver::Pods,
            phase: Some(phase),
            owns_template: true,
            current: Some(revision(2)),
            stable: Some(revision(1)),
            ..VerbContext::default()
        }
    }

    #[test]
    fn every_verb_has_its_mark_and_its_answer() {
        for verb in Verb::ALL {
            assert!(
                verb.annotation().starts_with("canary.daemonset.dev/"),
                "{verb:?}"
            );
            assert_eq!(Verb::answered_by(verb.event_reason()), Some(verb));
        }
        assert_eq!(Verb::Pause.annotation(), Verb::Resume.annotation());
        assert_eq!(Verb::answered_by(event_reason::VERB_REFUSED), None);
    }

    #[test]
    fn an_abort_while_held_is_no_refusal_a_promotion_is() {
        let held = VerbContext {
            held: true,
            ..rolling_out(Phase::Paused)
        };
        assert_eq!(Verb::Abort.refusal(&held), None);
        assert!(Verb::Promote.refusal(&held).is_some());
        assert!(Verb::full_promotion_refusal(&held).is_some());
        assert!(Verb::Resume.refusal(&held).is_none());
        assert!(Verb::Pause.refusal(&held).is_some());
    }

    #[test]
    fn an_abort_is_refused_at_rest_while_rolling_back_and_with_nothing_to_go_back_to() {
        for (context, why) in [
            (rolling_out(Phase::Successful), "ended successfully"),
            (rolling_out(Phase::RollingBack), "already in progress"),
            (
                VerbContext {
                    stable: None,
                    ..rolling_out(Phase::Canary)
                },
                "no revision has finished",
            ),
            (
                VerbContext {
                    stable: Some(revision(2)),
                    ..rolling_out(Phase::Canary)
                },
                "is the last successful one",
            ),
            (
                VerbContext {
                    owns_template: false,
                    ..rolling_out(Phase::Canary)
                },
                "spec.workloadRef",
            ),
        ] {
            let refusal = Verb::Abort.refusal(&context).unwrap_or_default();
            assert!(refusal.contains(why), "{context:?}: {refusal}");
        }
        for phase in [Phase::Started, Phase::Canary, Phase::Paused, Phase::Failed] {
            assert_eq!(Verb::Abort.refusal(&rolling_out(phase)), None, "{phase}");
        }
    }

    #[test]
    fn promotions_need_the_pods_driver_and_a_pause_or_a_rollout_under_way() {
        let max_unavailable = VerbContext {
            driver: Driver::MaxUnavailable,
            ..rolling_out(Phase::Paused)
        };
        assert!(Verb::Promote.refusal(&max_unavailable).is_some());
        assert!(Verb::full_promotion_refusal(&max_unavailable).is_some());
        assert_eq!(Verb::Promote.refusal(&rolling_out(Phase::Paused)), None);
        assert!(Verb::Promote.refusal(&rolling_out(Phase::Canary)).is_some());
        assert_eq!(
            Verb::full_promotion_refusal(&rolling_out(Phase::Canary)),
            None
        );
        assert!(Verb::full_promotion_refusal(&rolling_out(Phase::Successful)).is_some());
        assert!(Verb::Retry.refusal(&rolling_out(Phase::Canary)).is_some());
        assert_eq!(Verb::Retry.refusal(&rolling_out(Phase::Failed)), None);
    }
}
