//! What a simulated pod does, as its [`BEHAVIOR_ANNOTATION`] spells it: what its containers
//! do ([`PodBehavior`]) and what it does to its node and the pods beside it ([`Effect`]s),
//! the failures of node agents that a health gate must catch: a GPU driver or kernel module
//! that takes its node NotReady, a CNI that is Ready but breaks the pods' network, an agent
//! that makes node-problem-detector report a condition.
//!
//! Syntax: comma-separated terms, at most one container term (default `healthy`) and any
//! effect terms: `breaks-node=30s`, `slow-start=10s,breaks-neighbours=1m`,
//! `node-condition=KernelDeadlock`, `node-condition=NetworkUnavailable@90s,breaks-node=5m`.
//! Every effect counts its delay from the pod's first Ready, so it needs a container
//! behaviour that becomes ready (`healthy`, `slow-start`, `crash-after-ready`); the others
//! are refused with the reason.
//!
//! Invariants: parsing what [`Behavior`]'s `Display` writes gives the same value back; at
//! most one effect of each kind, except `node-condition` (one per distinct type).
//!
//! [`BEHAVIOR_ANNOTATION`]: super::BEHAVIOR_ANNOTATION

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use super::kubelet::{PodBehavior, parse_duration};

/// A [`super::BEHAVIOR_ANNOTATION`] value that does not parse, and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("pod behavior {value:?}: {problem}")]
pub struct ParseBehaviorError {
    /// The value as written.
    pub value: String,
    /// What is wrong with it.
    pub problem: String,
}

impl ParseBehaviorError {
    pub(crate) fn new(value: &str, problem: impl Into<String>) -> Self {
        Self {
            value: value.to_owned(),
            problem: problem.into(),
        }
    }
}

/// What a pod does to its node or its neighbours, once it has been Ready for a while.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Effect {
    /// The node goes NotReady (the kubelet reports its container runtime's network not
    /// ready) and stays so while the pod exists.
    BreaksNode,
    /// Every other pod on the node, except the pods of the same owner (the DaemonSet's own),
    /// fails its probes while the pod exists: not ready at once, killed and restarted when
    /// its liveness probe has failed long enough.
    BreaksNeighbours,
    /// The node reports this condition True while the pod exists.
    NodeCondition(String),
}

impl Effect {
    /// The term's name in the annotation.
    fn name(&self) -> &'static str {
        match self {
            Self::BreaksNode => "breaks-node",
            Self::BreaksNeighbours => "breaks-neighbours",
            Self::NodeCondition(_) => "node-condition",
        }
    }
}

/// An [`Effect`] and how long after the pod's first Ready it begins.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TimedEffect {
    /// What happens.
    pub effect: Effect,
    /// From the pod's first Ready to the effect.
    pub after: Duration,
}

/// Everything a simulated pod does: its containers' behaviour and its effects on the node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Behavior {
    /// What the containers do.
    pub containers: PodBehavior,
    /// What the pod does to its node and neighbours, in the order written.
    pub effects: Vec<TimedEffect>,
}

impl From<PodBehavior> for Behavior {
    fn from(containers: PodBehavior) -> Self {
        Self {
            containers,
            effects: Vec::new(),
        }
    }
}

impl Behavior {
    /// `containers` with `effects`, checked as the annotation's parser checks them.
    pub fn with_effects(
        containers: PodBehavior,
        effects: Vec<TimedEffect>,
    ) -> Result<Self, ParseBehaviorError> {
        let behavior = Self {
            containers,
            effects,
        };
        behavior.check(&behavior.to_string())?;
        Ok(behavior)
    }

    /// The effects' rules: each needs a pod that becomes ready; one of each kind, one
    /// `node-condition` per type.
    fn check(&self, text: &str) -> Result<(), ParseBehaviorError> {
        if let Some(first) = self.effects.first()
            && !becomes_ready(&self.containers)
        {
            return Err(ParseBehaviorError::new(
                text,
                format!(
                    "{} counts from the pod's first Ready, and {} never becomes ready (combine it with healthy, slow-start or crash-after-ready)",
                    first.effect.name(),
                    self.containers
                ),
            ));
        }
        for (i, effect) in self.effects.iter().enumerate() {
            if self
                .effects
                .iter()
                .take(i)
                .any(|e| e.effect == effect.effect)
            {
                return Err(ParseBehaviorError::new(
                    text,
                    format!("{} is given twice", effect_text(&effect.effect)),
                ));
            }
            if let Effect::NodeCondition(condition) = &effect.effect {
                check_condition_type(text, condition)?;
            }
        }
        Ok(())
    }
}

/// Whether the containers ever pass readiness (what every effect counts from).
fn becomes_ready(containers: &PodBehavior) -> bool {
    matches!(
        containers,
        PodBehavior::Healthy | PodBehavior::SlowStart(_) | PodBehavior::CrashAfterReady(_)
    )
}

fn effect_text(effect: &Effect) -> String {
    match effect {
        Effect::NodeCondition(condition) => format!("node-condition={condition}"),
        other => other.name().to_owned(),
    }
}

/// A condition type as Kubernetes allows it (a qualified name: `KernelDeadlock`,
/// `example.com/GpuHealthy`), and not `Ready`, which is `breaks-node`'s.
fn check_condition_type(text: &str, condition: &str) -> Result<(), ParseBehaviorError> {
    if condition == "Ready" {
        return Err(ParseBehaviorError::new(
            text,
            "node-condition=Ready would make the node Ready; breaks-node makes it NotReady",
        ));
    }
    let (prefix, name) = match condition.rsplit_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, condition),
    };
    let name_ok = !name.is_empty()
        && name.len() <= 63
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 253
            && p.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '.'))
    });
    if name_ok && prefix_ok {
        Ok(())
    } else {
        Err(ParseBehaviorError::new(
            text,
            format!(
                "{condition:?} is not a condition type (a name such as KernelDeadlock, optionally prefixed by a DNS subdomain and '/')"
            ),
        ))
    }
}

impl FromStr for Behavior {
    type Err = ParseBehaviorError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let mut containers: Option<PodBehavior> = None;
        let mut effects = Vec::new();
        for term in text.split(',').map(str::trim) {
            if term.is_empty() {
                return Err(ParseBehaviorError::new(text, "an empty term"));
            }
            let (name, argument) = match term.split_once('=') {
                Some((name, argument)) => (name.trim(), Some(argument.trim())),
                None => (term, None),
            };
            let duration = |argument: Option<&str>| {
                argument.and_then(parse_duration).ok_or_else(|| {
                    ParseBehaviorError::new(
                        text,
                        format!("{name} needs a duration such as 30s, 500ms, 2m or 1h"),
                    )
                })
            };
            let effect = match name {
                "breaks-node" => TimedEffect {
                    effect: Effect::BreaksNode,
                    after: duration(argument)?,
                },
                "breaks-neighbours" | "breaks-neighbors" => TimedEffect {
                    effect: Effect::BreaksNeighbours,
                    after: duration(argument)?,
                },
                "node-condition" => {
                    let argument = argument.unwrap_or_default();
                    let (condition, after) = match argument.split_once('@') {
                        Some((condition, after)) => (condition.trim(), duration(Some(after))?),
                        None => (argument, Duration::ZERO),
                    };
                    TimedEffect {
                        effect: Effect::NodeCondition(condition.to_owned()),
                        after,
                    }
                }
                _ => {
                    let parsed: PodBehavior = term.parse().map_err(|_| {
                        ParseBehaviorError::new(
                            text,
                            format!(
                                "unknown term {term:?} (expected healthy, crashloop, never-ready, image-pull-backoff, slow-start=<duration>, crash-after-ready=<duration>, breaks-node=<duration>, breaks-neighbours=<duration>, node-condition=<type>[@<duration>])"
                            ),
                        )
                    })?;
                    if let Some(first) = &containers {
                        return Err(ParseBehaviorError::new(
                            text,
                            format!("two container behaviours ({first} and {parsed})"),
                        ));
                    }
                    containers = Some(parsed);
                    continue;
                }
            };
            effects.push(effect);
        }
        let behavior = Self {
            containers: containers.unwrap_or_default(),
            effects,
        };
        behavior.check(text)?;
        Ok(behavior)
    }
}

impl fmt::Display for Behavior {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut terms = Vec::new();
        if self.effects.is_empty() || self.containers != PodBehavior::Healthy {
            terms.push(self.containers.to_string());
        }
        for TimedEffect { effect, after } in &self.effects {
            let after_ms = after.as_millis();
            terms.push(match effect {
                Effect::NodeCondition(condition) if after.is_zero() => {
                    format!("node-condition={condition}")
                }
                Effect::NodeCondition(condition) => {
                    format!("node-condition={condition}@{after_ms}ms")
                }
                other => format!("{}={after_ms}ms", other.name()),
            });
        }
        f.write_str(&terms.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn effect(effect: Effect, seconds: u64) -> TimedEffect {
        TimedEffect {
            effect,
            after: Duration::from_secs(seconds),
        }
    }

    #[test]
    fn a_container_behaviour_alone_is_what_it_was() {
        assert_eq!(
            "crashloop".parse(),
            Ok(Behavior::from(PodBehavior::CrashLoop))
        );
        assert_eq!(
            "slow-start=60s".parse(),
            Ok(Behavior::from(PodBehavior::SlowStart(Duration::from_secs(
                60
            ))))
        );
    }

    #[test]
    fn effects_combine_with_a_container_behaviour_that_becomes_ready() {
        assert_eq!(
            "breaks-node=30s".parse(),
            Ok(Behavior {
                containers: PodBehavior::Healthy,
                effects: vec![effect(Effect::BreaksNode, 30)],
            })
        );
        assert_eq!(
            " slow-start=10s , breaks-neighbours=1m,node-condition=KernelDeadlock ".parse(),
            Ok(Behavior {
                containers: PodBehavior::SlowStart(Duration::from_secs(10)),
                effects: vec![
                    effect(Effect::BreaksNeighbours, 60),
                    effect(Effect::NodeCondition("KernelDeadlock".into()), 0),
                ],
            })
        );
        assert_eq!(
            "node-condition=NetworkUnavailable@90s,crash-after-ready=5m,breaks-neighbors=2s"
                .parse(),
            Ok(Behavior {
                containers: PodBehavior::CrashAfterReady(Duration::from_secs(300)),
                effects: vec![
                    effect(Effect::NodeCondition("NetworkUnavailable".into()), 90),
                    effect(Effect::BreaksNeighbours, 2),
                ],
            })
        );
        assert_eq!(
            "node-condition=example.com/GpuUnhealthy,node-condition=KernelDeadlock"
                .parse::<Behavior>()
                .map(|b| b.effects.len()),
            Ok(2)
        );
    }

    #[test]
    fn what_cannot_happen_is_refused_with_the_reason() {
        for (bad, reason) in [
            ("crashloop,breaks-node=30s", "never becomes ready"),
            (
                "never-ready,node-condition=KernelDeadlock",
                "never becomes ready",
            ),
            (
                "image-pull-backoff,breaks-neighbours=1s",
                "never becomes ready",
            ),
            ("breaks-node=30s,breaks-node=1m", "given twice"),
            ("node-condition=A,node-condition=A@5s", "given twice"),
            ("node-condition=Ready", "breaks-node makes it NotReady"),
            ("node-condition=", "not a condition type"),
            ("node-condition=Kernel Deadlock", "not a condition type"),
            ("node-condition=Bad/Prefix/X", "not a condition type"),
            ("breaks-node", "needs a duration"),
            ("breaks-node=soon", "needs a duration"),
            ("node-condition=X@soon", "needs a duration"),
            ("healthy,slow-start=3s", "two container behaviours"),
            ("healthy,,breaks-node=1s", "an empty term"),
            ("breaks-everything=1s", "unknown term"),
        ] {
            let error = bad.parse::<Behavior>().err();
            assert!(
                error.as_ref().is_some_and(|e| e.problem.contains(reason)),
                "{bad:?}: {error:?}"
            );
        }
    }

    #[test]
    fn display_parses_back_to_the_same_behaviour() {
        for text in [
            "crashloop",
            "breaks-node=30s",
            "slow-start=1500ms,breaks-neighbours=1m,node-condition=KernelDeadlock",
            "crash-after-ready=5m,node-condition=NetworkUnavailable@90s,breaks-node=2s",
        ] {
            let behavior: Behavior = text.parse().unwrap_or_default();
            assert_ne!(behavior, Behavior::default(), "{text}");
            assert_eq!(behavior.to_string().parse(), Ok(behavior.clone()), "{text}");
        }
        assert_eq!(Behavior::default().to_string(), "healthy");
        assert_eq!(
            "healthy,breaks-node=30s"
                .parse::<Behavior>()
                .map(|b| b.to_string()),
            Ok("breaks-node=30000ms".to_owned())
        );
    }

    #[test]
    fn with_effects_checks_as_the_parser_does() {
        assert!(
            Behavior::with_effects(PodBehavior::NeverReady, vec![effect(Effect::BreaksNode, 1)])
                .is_err()
        );
        assert!(
            Behavior::with_effects(PodBehavior::Healthy, vec![effect(Effect::BreaksNode, 1)])
                .is_ok()
        );
    }
}
