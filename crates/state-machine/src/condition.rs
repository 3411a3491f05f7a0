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
//! | `PrePullBlocked` | the API server refused the image pre-pull's pods (`spec.prePull`; no `pods: create`): the rollout goes on without it | `Forbidden`, `PodsCreated` |
//! | `Ready` | the spec's target is rolled out and verified (`successful`, no pod crash-looping) | `RolloutComplete`, else what is missing (below) |
//! | `Reconciling` | a rollout runs on its own (not held by a gate that needs a person) | the phase's ([`Phase::progressing`]) |
//! | `Stalled` | the rollout failed, was rolled back, crash-loops at rest, or waits for a person ([`Gate`]) | the [`FailureReason`], `RolledBack`, `CrashLoopingAtRest`, `HeldOnRequest`, `AwaitingPromotion`; `AsExpected` |
//!
//! Before any phase, an object whose `workloadRef` names a DaemonSet that does not exist yet
//! carries `Progressing`, `Ready`, `Reconciling` and `Stalled` with reason `WaitingForDaemonSet`
//! ([`awaiting_workload`]).
//!
//! `Ready`, `Reconciling` and `Stalled` are the conditions kstatus reads (`sigs.k8s.io/cli-utils`:
//! Flux's health checks, kpt, `kubectl wait --for=condition=Ready`): at most one of `Reconciling`
//! and `Stalled` is true, and `Ready` is true only when neither is. [`kstatus`] decides all three
//! from the phase, once, for the adapter to write beside the others.

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
    /// kstatus: the spec's target is rolled out and verified.
    Ready,
    /// kstatus: a rollout runs and moves on its own.
    Reconciling,
    /// kstatus: the rollout cannot move on without a person (failed, rolled back, held).
    Stalled,
    /// The API server refused the image pre-pull's pods (issue 50: no `pods: create`); the
    /// rollout goes on without pre-pull. Only once `spec.prePull` was refused.
    PrePullBlocked,
}

impl ConditionType {
    /// Every condition type, in the order a status lists them.
    pub const ALL: [ConditionType; 9] = [
        ConditionType::Progressing,
        ConditionType::Available,
        ConditionType::Degraded,
        ConditionType::Drifted,
        ConditionType::AnalysisPassing,
        ConditionType::Ready,
        ConditionType::Reconciling,
        ConditionType::Stalled,
        ConditionType::PrePullBlocked,
    ];

    /// The stable name (`"Progressing"`, ...).
    pub const fn as_str(self) -> &'static str {
        match self {
            ConditionType::Progressing => "Progressing",
            ConditionType::Available => "Available",
            ConditionType::Degraded => "Degraded",
            ConditionType::Drifted => "Drifted",
            ConditionType::AnalysisPassing => "AnalysisPassing",
            ConditionType::Ready => "Ready",
            ConditionType::Reconciling => "Reconciling",
            ConditionType::Stalled => "Stalled",
            ConditionType::PrePullBlocked => "PrePullBlocked",
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
    /// `Stalled`: held on request (`pause`) until someone resumes it.
    HeldOnRequest,
    /// `Stalled`: in a pause step without a duration (`pause: {}`) until someone promotes it.
    AwaitingPromotion,
    /// No phase yet: `spec.workloadRef` names a DaemonSet that does not exist (yet); the
    /// rollout begins when its owner creates it ([`awaiting_workload`]).
    WaitingForDaemonSet,
    /// `PrePullBlocked`: the API server answered 403 to a pre-pull request.
    Forbidden,
    /// `PrePullBlocked`: pre-pull pods were created again.
    PodsCreated,
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
            ConditionReason::HeldOnRequest => "HeldOnRequest",
            ConditionReason::AwaitingPromotion => "AwaitingPromotion",
            ConditionReason::WaitingForDaemonSet => "WaitingForDaemonSet",
            ConditionReason::Forbidden => "Forbidden",
            ConditionReason::PodsCreated => "PodsCreated",
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

/// A gate that holds a rollout until a person acts: the rollout is `Stalled`, not
/// `Reconciling`, while it holds (a timed pause or an analysis still measuring moves on alone).
/// The health gates' `onUnhealthy: Hold` is the next of these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Gate {
    /// Held on request (`canary.daemonset.dev/paused`): `resume` ends it.
    HeldOnRequest,
    /// A pause step without a duration: `promote` ends it.
    AwaitingPromotion,
}

impl Gate {
    /// The reason of the conditions while this gate holds.
    pub const fn reason(self) -> ConditionReason {
        match self {
            Gate::HeldOnRequest => ConditionReason::HeldOnRequest,
            Gate::AwaitingPromotion => ConditionReason::AwaitingPromotion,
        }
    }
}

/// What a status says beyond its phase, for the kstatus conditions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Standing {
    /// Why the rollout failed (a `failed` phase).
    pub failure: Option<FailureReason>,
    /// A gate that needs a person holds the rollout.
    pub gate: Option<Gate>,
    /// Updated pods crash-loop after the rollout (or rollback) ended (the `Degraded` reason
    /// `CrashLoopingAtRest`).
    pub crash_looping_at_rest: bool,
}

/// One condition's verdict: its status and reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConditionVerdict {
    /// The condition's type.
    pub type_: ConditionType,
    /// True or False.
    pub status: bool,
    /// Its reason.
    pub reason: ConditionReason,
}

/// The kstatus conditions (`Ready`, `Reconciling`, `Stalled`, in that order) of a status in
/// `phase`. A rolled back rollout is stalled: the spec's target is not what runs, and nothing
/// moves until the spec changes or someone retries; so is a failed one, and a successful one
/// whose pods crash-loop since.
pub fn kstatus(phase: Phase, standing: Standing) -> [ConditionVerdict; 3] {
    let (ready, reconciling, stalled, reason) = match (phase, standing.gate) {
        (Phase::Failed, _) => (
            false,
            false,
            true,
            match standing.failure {
                Some(failure) => ConditionReason::Failure(failure),
                None => ConditionReason::Failed,
            },
        ),
        (Phase::Successful | Phase::RolledBack, _) if standing.crash_looping_at_rest => {
            (false, false, true, ConditionReason::CrashLoopingAtRest)
        }
        (Phase::RolledBack, _) => (false, false, true, ConditionReason::RolledBack),
        (Phase::Successful, _) => (true, false, false, ConditionReason::RolloutComplete),
        (_, Some(gate)) => (false, false, true, gate.reason()),
        (_, None) => (false, true, false, phase.progressing().1),
    };
    let verdict = |type_, status, reason| ConditionVerdict {
        type_,
        status,
        reason,
    };
    [
        verdict(ConditionType::Ready, ready, reason),
        verdict(ConditionType::Reconciling, reconciling, reason),
        verdict(
            ConditionType::Stalled,
            stalled,
            if stalled {
                reason
            } else {
                ConditionReason::AsExpected
            },
        ),
    ]
}

/// The conditions of an object that waits for the DaemonSet its `spec.workloadRef` names: no
/// phase (`pending`), a rollout under way (`Progressing`) that moves on its own once the
/// DaemonSet's owner creates it (`Reconciling`, not `Stalled`: a GitOps sync wave that creates
/// the CanaryDaemonSet before the DaemonSet is no failure), not `Ready`. The other condition
/// types say nothing while there is no DaemonSet, and are dropped.
pub fn awaiting_workload() -> [ConditionVerdict; 4] {
    let verdict = |type_, status| ConditionVerdict {
        type_,
        status,
        reason: ConditionReason::WaitingForDaemonSet,
    };
    [
        verdict(ConditionType::Progressing, true),
        verdict(ConditionType::Ready, false),
        verdict(ConditionType::Reconciling, true),
        verdict(ConditionType::Stalled, false),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn statuses(phase: Phase, standing: Standing) -> [bool; 3] {
        let [ready, reconciling, stalled] = kstatus(phase, standing);
        [ready.status, reconciling.status, stalled.status]
    }

    /// Every phase, with and without each gate and a crash loop at rest: at most one of
    /// Reconciling and Stalled, Ready only when neither, and the rows the issue names.
    #[test]
    fn kstatus_conditions_of_every_phase() {
        let gates = [
            None,
            Some(Gate::HeldOnRequest),
            Some(Gate::AwaitingPromotion),
        ];
        for phase in Phase::ALL {
            for gate in gates {
                for crash_looping_at_rest in [false, true] {
                    let standing = Standing {
                        failure: None,
                        gate,
                        crash_looping_at_rest,
                    };
                    let [ready, reconciling, stalled] = statuses(phase, standing);
                    assert!(!(reconciling && stalled), "{phase} {standing:?}");
                    assert_eq!(ready, !reconciling && !stalled, "{phase} {standing:?}");
                    assert_eq!(
                        ready,
                        phase == Phase::Successful && !crash_looping_at_rest,
                        "{phase} {standing:?}: ready only once the target is out and verified"
                    );
                    if phase.is_in_progress() {
                        assert_eq!(stalled, gate.is_some(), "{phase} {standing:?}");
                    }
                }
            }
        }
        let failed = kstatus(
            Phase::Failed,
            Standing {
                failure: Some(FailureReason::CanaryCrashLooping),
                ..Standing::default()
            },
        );
        assert_eq!(
            failed.map(|c| (c.type_.as_str(), c.status, c.reason.as_str())),
            [
                ("Ready", false, "CanaryCrashLooping"),
                ("Reconciling", false, "CanaryCrashLooping"),
                ("Stalled", true, "CanaryCrashLooping"),
            ]
        );
        let canary = kstatus(Phase::Canary, Standing::default());
        assert_eq!(
            canary.map(|c| c.reason.as_str()),
            ["WaitingForCanary", "WaitingForCanary", "AsExpected"]
        );
        let held = kstatus(
            Phase::Paused,
            Standing {
                gate: Some(Gate::AwaitingPromotion),
                ..Standing::default()
            },
        );
        assert_eq!(held[2].reason.as_str(), "AwaitingPromotion");
        assert_eq!(
            statuses(Phase::RolledBack, Standing::default()),
            [false, false, true]
        );
    }

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
                "AnalysisPassing",
                "Ready",
                "Reconciling",
                "Stalled",
                "PrePullBlocked"
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

    /// Waiting for the DaemonSet a workloadRef names is the kstatus shape of a rollout that
    /// moves on alone: Reconciling, neither Ready nor Stalled (so no failure alert, no Degraded
    /// health in Argo CD while a sync wave creates the DaemonSet after its CanaryDaemonSet).
    #[test]
    fn waiting_for_a_daemon_set_reconciles_and_is_not_stalled() {
        let verdicts = awaiting_workload();
        let status_of = |type_| verdicts.iter().find(|v| v.type_ == type_).map(|v| v.status);
        assert_eq!(status_of(ConditionType::Reconciling), Some(true));
        assert_eq!(status_of(ConditionType::Progressing), Some(true));
        assert_eq!(status_of(ConditionType::Ready), Some(false));
        assert_eq!(status_of(ConditionType::Stalled), Some(false));
        assert_eq!(status_of(ConditionType::Degraded), None);
        assert!(
            verdicts
                .iter()
                .all(|v| v.reason == ConditionReason::WaitingForDaemonSet)
        );
    }
}
