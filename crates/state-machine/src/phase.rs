//! Rollout phases and failure reasons, with the stable string names used in status and metrics.

use std::fmt;
use std::str::FromStr;

/// The phase of a rollout, as reported in status and as the `phase` label of metrics.
///
/// The string names are the reference's (`started`, `canary`, `increasing`, `waiting`,
/// `successful`, `failed`) and never change. `paused` is the Pods driver's; `rollingBack` and
/// `rolledBack` are reported instead of the rollout phases while a rollback (an abort, or
/// `onFailure: Rollback`) goes back to the last successful revision: the decision tables never
/// produce them, [`Phase::reported`] maps to them and [`Phase::decided`] back.
///
/// With the `serde` feature a phase is its name on the wire (a status's `phase`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "camelCase")
)]
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
    /// A rollback is in progress: the last successful revision goes back out, supervised like
    /// any rollout (canary first). Reported in place of `started` to `paused`.
    RollingBack,
    /// The rollback is done: every pod runs the last successful revision again. Reported in
    /// place of `successful` until the spec changes (or a `retry`).
    RolledBack,
}

impl Phase {
    /// Every phase, in rollout order.
    pub const ALL: [Phase; 9] = [
        Phase::Started,
        Phase::Canary,
        Phase::Increasing,
        Phase::Waiting,
        Phase::Paused,
        Phase::Successful,
        Phase::Failed,
        Phase::RollingBack,
        Phase::RolledBack,
    ];

    /// What a status without a phase shows: the controller has not acted on it yet.
    pub const PENDING: &'static str = "pending";

    /// The name of `phase`, or [`Phase::PENDING`] when there is none yet.
    pub const fn name_or_pending(phase: Option<Phase>) -> &'static str {
        match phase {
            Some(phase) => phase.as_str(),
            None => Phase::PENDING,
        }
    }

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
            Phase::RollingBack => "rollingBack",
            Phase::RolledBack => "rolledBack",
        }
    }

    /// True for the phases of a rollout that has not ended (`started` to `paused`, and
    /// `rollingBack`).
    pub const fn is_in_progress(self) -> bool {
        matches!(
            self,
            Phase::Started
                | Phase::Canary
                | Phase::Increasing
                | Phase::Waiting
                | Phase::Paused
                | Phase::RollingBack
        )
    }

    /// True for the phases of a rollout that ended well: `successful`, `rolledBack`.
    pub const fn is_at_rest(self) -> bool {
        matches!(self, Phase::Successful | Phase::RolledBack)
    }

    /// The phase to report for a decided `self`: during a rollback (`rolling_back`) an
    /// unfinished rollout is `rollingBack` and a finished one `rolledBack`; a failure stays
    /// `failed` (a rollback that fails holds: there is nothing further back to go to).
    pub const fn reported(self, rolling_back: bool) -> Phase {
        match self {
            _ if !rolling_back => self,
            Phase::Successful | Phase::RolledBack => Phase::RolledBack,
            Phase::Failed => Phase::Failed,
            _ => Phase::RollingBack,
        }
    }

    /// The decided phase behind a reported one: `decided` is the phase the decision table
    /// produced (recorded beside the reported phase); a reported `rolledBack` is `successful`
    /// when nothing else was recorded, `rollingBack` is `waiting`.
    pub const fn decided(self, decided: Option<Phase>) -> Phase {
        match (self, decided) {
            (Phase::RollingBack | Phase::RolledBack, Some(phase))
                if !matches!(phase, Phase::RollingBack | Phase::RolledBack) =>
            {
                phase
            }
            (Phase::RollingBack, _) => Phase::Waiting,
            (Phase::RolledBack, _) => Phase::Successful,
            (phase, _) => phase,
        }
    }
}

impl fmt::Display for Phase {
    /// The name, padded to the width asked for (`{:<11}` in the demo's lines).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

/// A string that is not one of the phase names.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown phase {0:?}: expected one of started, canary, increasing, waiting, paused, successful, failed, rollingBack, rolledBack"
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

/// Why a rollout is in [`Phase::Failed`]; the CamelCase name is the status reason and metric label
/// (with the `serde` feature, its name on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
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
    /// A metric of the analysis failed as often as its `failureLimit` allows (Pods driver,
    /// during a pause step): the release runs but misbehaves by its own metrics.
    AnalysisFailed,
    /// The caller cannot act on the resource's spec (for example a DaemonSet controlled by
    /// someone else, or a TLS container that is not there); nothing is written until it is
    /// fixed. Never decided by [`decide`](crate::decide): the caller reports it itself.
    InvalidSpec,
    /// The DaemonSet is driven by another CanaryDaemonSet, which claimed it first (issue 47):
    /// nothing is written or deleted until that one is deleted or stops naming it. Reported
    /// by the caller, like [`FailureReason::InvalidSpec`].
    DaemonSetClaimed,
    /// A node that was healthy when its agent pod was replaced turned unhealthy within the
    /// health window after it (`spec.health`, issue 46): the release broke its node.
    NodeUnhealthy,
}

impl FailureReason {
    /// Every reason.
    pub const ALL: [FailureReason; 9] = [
        FailureReason::CanaryCrashLooping,
        FailureReason::WriteRejected,
        FailureReason::UnexpectedState,
        FailureReason::ProgressDeadlineExceeded,
        FailureReason::InvalidStrategy,
        FailureReason::AnalysisFailed,
        FailureReason::InvalidSpec,
        FailureReason::DaemonSetClaimed,
        FailureReason::NodeUnhealthy,
    ];

    /// The stable CamelCase name (`"CanaryCrashLooping"`, ...).
    pub const fn as_str(self) -> &'static str {
        match self {
            FailureReason::CanaryCrashLooping => "CanaryCrashLooping",
            FailureReason::WriteRejected => "WriteRejected",
            FailureReason::UnexpectedState => "UnexpectedState",
            FailureReason::ProgressDeadlineExceeded => "ProgressDeadlineExceeded",
            FailureReason::InvalidStrategy => "InvalidStrategy",
            FailureReason::AnalysisFailed => "AnalysisFailed",
            FailureReason::InvalidSpec => "InvalidSpec",
            FailureReason::DaemonSetClaimed => "DaemonSetClaimed",
            FailureReason::NodeUnhealthy => "NodeUnhealthy",
        }
    }

    /// Whether, in the default strategy, this failure holds until the target changes.
    ///
    /// A crash-looping canary, a stalled rollout, a failed analysis or a node broken after its
    /// update says something about the new version, so
    /// retrying the same version would only repeat it. A rejected write or an invalid strategy
    /// says nothing about the version: those are re-evaluated on every pass.
    pub const fn is_sticky(self) -> bool {
        matches!(
            self,
            FailureReason::CanaryCrashLooping
                | FailureReason::ProgressDeadlineExceeded
                | FailureReason::AnalysisFailed
                | FailureReason::NodeUnhealthy
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
                "failed",
                "rollingBack",
                "rolledBack"
            ]
        );
    }

    #[test]
    fn a_rollback_reports_its_own_phases_and_maps_back() {
        for phase in Phase::ALL {
            assert_eq!(phase.reported(false), phase, "no rollback: as decided");
            let reported = phase.reported(true);
            let expected = match phase {
                Phase::Successful | Phase::RolledBack => Phase::RolledBack,
                Phase::Failed => Phase::Failed,
                _ => Phase::RollingBack,
            };
            assert_eq!(reported, expected, "{phase} during a rollback");
            if !matches!(phase, Phase::RollingBack | Phase::RolledBack) {
                assert_eq!(
                    reported.decided(Some(phase)),
                    phase,
                    "round trip of {phase}"
                );
            }
        }
        assert_eq!(Phase::RollingBack.decided(None), Phase::Waiting);
        assert_eq!(Phase::RolledBack.decided(None), Phase::Successful);
        // A recorded rollback phase is no decided phase: the reported one maps back as without.
        assert_eq!(
            Phase::RollingBack.decided(Some(Phase::RolledBack)),
            Phase::Waiting
        );
        assert_eq!(
            Phase::RolledBack.decided(Some(Phase::RollingBack)),
            Phase::Successful
        );
        assert_eq!(Phase::Canary.decided(Some(Phase::Failed)), Phase::Canary);
        assert!(Phase::RolledBack.is_at_rest() && Phase::Successful.is_at_rest());
        assert!(!Phase::Failed.is_at_rest() && !Phase::RollingBack.is_at_rest());
    }

    /// The serde names are the stable names, so a status reads back what it wrote.
    #[cfg(feature = "serde")]
    #[test]
    fn serde_names_are_the_stable_names() {
        for phase in Phase::ALL {
            let json = serde_json::to_value(phase).unwrap_or_default();
            assert_eq!(json, phase.as_str(), "{phase}");
        }
        for reason in FailureReason::ALL {
            let json = serde_json::to_value(reason).unwrap_or_default();
            assert_eq!(json, reason.as_str(), "{reason}");
        }
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
        assert!(FailureReason::AnalysisFailed.is_sticky());
        assert!(FailureReason::NodeUnhealthy.is_sticky());
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
                Phase::Paused,
                Phase::RollingBack
            ]
        );
    }
}
