//! Rollout phases and failure reasons, with the stable string names used in status and metrics.

use std::fmt;
use std::str::FromStr;

/// The phase of a rollout, as reported in status and as the `phase` label of metrics.
///
/// The string names are the reference's (`started`, `canary`, `increasing`, `waiting`,
/// `successful`, `failed`) and never change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Phase {
    /// The new template went out with the canary `maxUnavailable`: one pod is being replaced.
    Started,
    /// Waiting for the first updated pod to become ready (the canary).
    Canary,
    /// The canary is ready: the rollout was just widened to the fast `maxUnavailable`.
    Increasing,
    /// Waiting for the remaining pods (or, in the default strategy, for the revert to be observed).
    Waiting,
    /// Held on purpose: a pause step of the Pods driver (a timed soak, or until promoted).
    /// Crashes and readiness are still watched; nothing is updated.
    Paused,
    /// Every pod is updated and ready and the DaemonSet rests at the canary `maxUnavailable`.
    Successful,
    /// The rollout stopped; [`FailureReason`] says why.
    Failed,
}

impl Phase {
    /// Every phase, in rollout order.
    pub const ALL: [Phase; 7] = [
        Phase::Started,
        Phase::Canary,
        Phase::Increasing,
        Phase::Waiting,
        Phase::Paused,
        Phase::Successful,
        Phase::Failed,
    ];

    /// The stable lower-case name (`"started"`, `"canary"`, ...).
    pub const fn as_str(self) -> &'static str {
        match self {
            Phase::Started => "started",
            Phase::Canary => "canary",
            Phase::Increasing => "increasing",
            Phase::Waiting => "waiting",
            Phase::Paused => "paused",
            Phase::Successful => "successful",
            Phase::Failed => "failed",
        }
    }

    /// True for the phases of a rollout that has not ended (`started` to `paused`).
    pub const fn is_in_progress(self) -> bool {
        matches!(
            self,
            Phase::Started | Phase::Canary | Phase::Increasing | Phase::Waiting | Phase::Paused
        )
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A string that is not one of the six phase names.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown phase {0:?}: expected one of started, canary, increasing, waiting, paused, successful, failed"
)]
pub struct ParsePhaseError(pub String);

impl FromStr for Phase {
    type Err = ParsePhaseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Phase::ALL
            .into_iter()
            .find(|phase| phase.as_str() == s)
            .ok_or_else(|| ParsePhaseError(s.to_owned()))
    }
}

/// Why a rollout is in [`Phase::Failed`]; the CamelCase name is the status reason and metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FailureReason {
    /// An updated pod is crash-looping (per the crash-loop policy the caller applies).
    CanaryCrashLooping,
    /// The DaemonSet write decided on was rejected by the API server.
    WriteRejected,
    /// More pods are updated and ready than desired (reference row 5; only in KubeVirt mode).
    UnexpectedState,
    /// A phase made no progress for longer than the strategy's progress deadline.
    ProgressDeadlineExceeded,
    /// The strategy does not validate; nothing is written until it is fixed.
    InvalidStrategy,
    /// The caller cannot act on the resource's spec (for example a DaemonSet controlled by
    /// someone else, or a TLS container that is not there); nothing is written until it is
    /// fixed. Never decided by [`decide`](crate::decide): the caller reports it itself.
    InvalidSpec,
}

impl FailureReason {
    /// Every reason.
    pub const ALL: [FailureReason; 6] = [
        FailureReason::CanaryCrashLooping,
        FailureReason::WriteRejected,
        FailureReason::UnexpectedState,
        FailureReason::ProgressDeadlineExceeded,
        FailureReason::InvalidStrategy,
        FailureReason::InvalidSpec,
    ];

    /// The stable CamelCase name (`"CanaryCrashLooping"`, ...).
    pub const fn as_str(self) -> &'static str {
        match self {
            FailureReason::CanaryCrashLooping => "CanaryCrashLooping",
            FailureReason::WriteRejected => "WriteRejected",
            FailureReason::UnexpectedState => "UnexpectedState",
            FailureReason::ProgressDeadlineExceeded => "ProgressDeadlineExceeded",
            FailureReason::InvalidStrategy => "InvalidStrategy",
            FailureReason::InvalidSpec => "InvalidSpec",
        }
    }

    /// Whether, in the default strategy, this failure holds until the target changes.
    ///
    /// A crash-looping canary or a stalled rollout says something about the new version, so
    /// retrying the same version would only repeat it. A rejected write or an invalid strategy
    /// says nothing about the version: those are re-evaluated on every pass.
    pub const fn is_sticky(self) -> bool {
        matches!(
            self,
            FailureReason::CanaryCrashLooping | FailureReason::ProgressDeadlineExceeded
        )
    }
}

impl fmt::Display for FailureReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A string that is not one of the failure reason names.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown failure reason {0:?}")]
pub struct ParseFailureReasonError(pub String);

impl FromStr for FailureReason {
    type Err = ParseFailureReasonError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        FailureReason::ALL
            .into_iter()
            .find(|reason| reason.as_str() == s)
            .ok_or_else(|| ParseFailureReasonError(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phase_names_round_trip() {
        for phase in Phase::ALL {
            assert_eq!(phase.as_str().parse::<Phase>(), Ok(phase));
            assert_eq!(phase.to_string(), phase.as_str());
        }
        let names: Vec<_> = Phase::ALL.iter().map(|p| p.as_str()).collect();
        assert_eq!(
            names,
            [
                "started",
                "canary",
                "increasing",
                "waiting",
                "paused",
                "successful",
                "failed"
            ]
        );
    }

    #[test]
    fn unknown_phase_is_an_error() {
        assert_eq!(
            "Successful".parse::<Phase>(),
            Err(ParsePhaseError("Successful".into()))
        );
        assert!("upgrading daemonset".parse::<Phase>().is_err());
    }

    #[test]
    fn failure_reasons_round_trip() {
        for reason in FailureReason::ALL {
            assert_eq!(reason.as_str().parse::<FailureReason>(), Ok(reason));
            assert_eq!(reason.to_string(), reason.as_str());
        }
        assert!("canaryCrashLooping".parse::<FailureReason>().is_err());
    }

    #[test]
    fn only_version_failures_are_sticky() {
        assert!(FailureReason::CanaryCrashLooping.is_sticky());
        assert!(FailureReason::ProgressDeadlineExceeded.is_sticky());
        assert!(!FailureReason::WriteRejected.is_sticky());
        assert!(!FailureReason::InvalidStrategy.is_sticky());
    }

    #[test]
    fn only_phases_of_an_unended_rollout_are_in_progress() {
        let moving: Vec<_> = Phase::ALL
            .into_iter()
            .filter(|p| p.is_in_progress())
            .collect();
        assert_eq!(
            moving,
            [
                Phase::Started,
                Phase::Canary,
                Phase::Increasing,
                Phase::Waiting,
                Phase::Paused
            ]
        );
    }
}
