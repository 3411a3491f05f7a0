//! The conditions a rollout's status carries, and their reasons: one vocabulary, named here,
//! that the adapter writes (Kubernetes `Condition`s) and every reader compares against.
//!
//! | type | true when | reasons |
//! |---|---|---|
//! | `Progressing` | a rollout is under way | the phase's ([`Phase::progressing`]) |
//! | `Available` | every desired pod is available | `AllPodsAvailable`, `PodsUnavailable` |
//! | `Degraded` | the rollout failed, the spec cannot be acted on, or pods crash-loop at rest | the [`FailureReason`], `Failed`, `CrashLoopingAtRest`, `AsExpected` |
//! | `Drifted` | someone else changed the live template | `ChangedOutsideTheController`, `AsDesired` |
//! | `AnalysisPassing` | the analysis of the last analysed pause step passes | `Analysis` and the verdict (`AnalysisPending`, ...) |

use std::fmt;

use crate::phase::{FailureReason, Phase};

/// The type of a status condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ConditionType {
    /// A rollout is in progress.
    Progressing,
    /// Every desired pod is available.
    Available,
    /// The rollout failed or the spec cannot be acted on (or pods crash-loop at rest).
    Degraded,
    /// Someone else changed the owned DaemonSet's template or update strategy.
    Drifted,
    /// The analysis of the last analysed pause step passes (`spec.analysis`).
    AnalysisPassing,
}

impl ConditionType {
    /// Every condition type, in the order a status lists them.
    pub const ALL: [ConditionType; 5] = [
        ConditionType::Progressing,
        ConditionType::Available,
        ConditionType::Degraded,
        ConditionType::Drifted,
        ConditionType::AnalysisPassing,
    ];

    /// The stable name (`"Progressing"`, ...).
    pub const fn as_str(self) -> &'static str {
        match self {
            ConditionType::Progressing => "Progressing",
            ConditionType::Available => "Available",
            ConditionType::Degraded => "Degraded",
            ConditionType::Drifted => "Drifted",
            ConditionType::AnalysisPassing => "AnalysisPassing",
        }
    }
}

impl fmt::Display for ConditionType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The reason of a status condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConditionReason {
    /// `Progressing`: the canary started.
    CanaryStarted,
    /// `Progressing`: waiting for the canary.
    WaitingForCanary,
    /// `Progressing`: the rollout was widened.
    RolloutWidened,
    /// `Progressing`: waiting for the rest of the pods.
    WaitingForRollout,
    /// `Progressing`: paused (a pause step, or a hold on request).
    Paused,
    /// `Progressing`: the rollout is complete.
    RolloutComplete,
    /// `Progressing`: the rollout failed.
    RolloutFailed,
    /// `Progressing`: a rollback is under way.
    RollingBack,
    /// `Progressing`: the rollback is done.
    RolledBack,
    /// `Available`: every desired pod is available.
    AllPodsAvailable,
    /// `Available`: some are not.
    PodsUnavailable,
    /// `Degraded`: the failure's reason.
    Failure(FailureReason),
    /// `Degraded`: failed for no recorded reason.
    Failed,
    /// `Degraded`: updated pods crash-loop after the rollout ended well.
    CrashLoopingAtRest,
    /// `Degraded`: not degraded.
    AsExpected,
    /// `Drifted`: someone else changed the live template.
    ChangedOutsideTheController,
    /// `Drifted`: the live template is as the controller wrote it again.
    AsDesired,
}

impl ConditionReason {
    /// The stable CamelCase name (`"CanaryStarted"`, a failure reason's name, ...).
    pub const fn as_str(self) -> &'static str {
        match self {
            ConditionReason::CanaryStarted => "CanaryStarted",
            ConditionReason::WaitingForCanary => "WaitingForCanary",
            ConditionReason::RolloutWidened => "RolloutWidened",
            ConditionReason::WaitingForRollout => "WaitingForRollout",
            ConditionReason::Paused => "Paused",
            ConditionReason::RolloutComplete => "RolloutComplete",
            ConditionReason::RolloutFailed => "RolloutFailed",
            ConditionReason::RollingBack => "RollingBack",
            ConditionReason::RolledBack => "RolledBack",
            ConditionReason::AllPodsAvailable => "AllPodsAvailable",
            ConditionReason::PodsUnavailable => "PodsUnavailable",
            ConditionReason::Failure(reason) => reason.as_str(),
            ConditionReason::Failed => "Failed",
            ConditionReason::CrashLoopingAtRest => "CrashLoopingAtRest",
            ConditionReason::AsExpected => "AsExpected",
            ConditionReason::ChangedOutsideTheController => "ChangedOutsideTheController",
            ConditionReason::AsDesired => "AsDesired",
        }
    }
}

impl fmt::Display for ConditionReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Phase {
    /// The `Progressing` condition of a status in this phase: whether a rollout is under way,
    /// and its reason.
    pub const fn progressing(self) -> (bool, ConditionReason) {
        match self {
            Phase::Started => (true, ConditionReason::CanaryStarted),
            Phase::Canary => (true, ConditionReason::WaitingForCanary),
            Phase::Increasing => (true, ConditionReason::RolloutWidened),
            Phase::Waiting => (true, ConditionReason::WaitingForRollout),
            Phase::Paused => (true, ConditionReason::Paused),
            Phase::Successful => (false, ConditionReason::RolloutComplete),
            Phase::Failed => (false, ConditionReason::RolloutFailed),
            Phase::RollingBack => (true, ConditionReason::RollingBack),
            Phase::RolledBack => (false, ConditionReason::RolledBack),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names are the wire's: statuses written by earlier versions use them.
    #[test]
    fn names_are_stable() {
        let names: Vec<&str> = ConditionType::ALL.iter().map(|t| t.as_str()).collect();
        assert_eq!(
            names,
            [
                "Progressing",
                "Available",
                "Degraded",
                "Drifted",
                "AnalysisPassing"
            ]
        );
        assert_eq!(
            ConditionReason::Failure(FailureReason::InvalidSpec).as_str(),
            "InvalidSpec"
        );
        for phase in Phase::ALL {
            let (progressing, _) = phase.progressing();
            assert_eq!(
                progressing,
                phase.is_in_progress(),
                "{phase}: progressing exactly while in progress"
            );
        }
    }
}
