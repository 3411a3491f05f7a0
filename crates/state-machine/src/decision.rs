//! The parts of what one pass decides (the write, its kind, the events): the words both
//! drivers' decisions ([`Decision`](crate::Decision)) are made of.

use crate::max_unavailable::MaxUnavailable;

/// A template change the TLS migration needs (spec section 6), applied by the caller with
/// its TLS plan before the write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TemplateEdit {
    /// Append the TLS flag to the selected container's args.
    InsertTlsFlag,
    /// Remove the old client-certificate secret volume and its mount.
    DetachCertSecret,
}

/// Why a write is made; selects the error message when the write fails and labels metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WriteKind {
    /// Create the DaemonSet (see [`decide_create`](crate::decide_create)).
    Create,
    /// Reference row 1: the new template with the canary `maxUnavailable`.
    Start,
    /// Reference row 3a: widen to the fast `maxUnavailable`.
    Widen,
    /// Reference row 4: back to the resting (canary) `maxUnavailable`.
    Finish,
    /// A TLS completion step (spec section 6), in place of row 4.
    TlsStep,
    /// A hold on request: the live DaemonSet as it is, with its update strategy `OnDelete`, so
    /// that the DaemonSet controller replaces no pod (`maxUnavailable` stays as it was).
    Hold,
    /// The end of a hold on request: the live DaemonSet as it is, back to `RollingUpdate`.
    Resume,
    /// A hand edit of a failed rollout's DaemonSet written over (`driftPolicy: Revert`): the
    /// desired DaemonSet under the failure's hold, its update strategy `OnDelete`, so that the
    /// DaemonSet controller replaces no pod with the release that failed (issue 46).
    RevertHeld,
}

impl WriteKind {
    /// Stable lower-case name for metric labels (`"create"`, `"start"`, ...).
    pub const fn as_str(self) -> &'static str {
        match self {
            WriteKind::Create => "create",
            WriteKind::Start => "start",
            WriteKind::Widen => "widen",
            WriteKind::Finish => "finish",
            WriteKind::TlsStep => "tls_step",
            WriteKind::Hold => "hold",
            WriteKind::Resume => "resume",
            WriteKind::RevertHeld => "revert_held",
        }
    }
}

/// The one DaemonSet write of a pass: the desired DaemonSet, with these changes applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DaemonSetWrite {
    /// Why the write is made. [`WriteKind::Hold`] and [`WriteKind::Resume`] are the
    /// exception to "the desired DaemonSet": they change only the live one's strategy type.
    pub kind: WriteKind,
    /// The `maxUnavailable` to set. How it is applied is the caller's business: the adapter
    /// replaces the whole `rollingUpdate` in `KubeVirt` compatibility (quirk 12, `maxSurge`
    /// dropped) and sets only `maxUnavailable` otherwise. `None` leaves `rollingUpdate` as the
    /// desired DaemonSet has it (reference TLS steps and create).
    pub max_unavailable: Option<MaxUnavailable>,
    /// A TLS template change to apply to the desired DaemonSet first.
    pub template_edit: Option<TemplateEdit>,
}

/// Kubernetes event type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    /// `Normal`.
    Normal,
    /// `Warning`.
    Warning,
}

impl EventType {
    /// `"Normal"` or `"Warning"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// The `reason` strings of the events a [`Decision`](crate::Decision) carries.
pub mod event_reason {
    /// Warning: an updated pod crash-loops (the reference's only event).
    pub const FAILED_UPDATE: &str = "FailedUpdate";
    /// Normal: the new template went out with the canary `maxUnavailable`.
    pub const ROLLOUT_STARTED: &str = "RolloutStarted";
    /// Normal: the canary is ready, the rollout was widened.
    pub const ROLLOUT_WIDENED: &str = "RolloutWidened";
    /// Normal: every pod is updated and ready, the DaemonSet rests again.
    pub const ROLLOUT_COMPLETED: &str = "RolloutCompleted";
    /// Normal: a TLS completion step went out.
    pub const TLS_MIGRATION_STEP: &str = "TlsMigrationStep";
    /// Warning: a phase made no progress within the deadline.
    pub const PROGRESS_DEADLINE_EXCEEDED: &str = "ProgressDeadlineExceeded";
    /// Warning: the API server rejected the decided write.
    pub const WRITE_REJECTED: &str = "WriteRejected";
    /// Warning: the strategy does not validate.
    pub const INVALID_STRATEGY: &str = "InvalidStrategy";
    /// Warning: someone else changed the live DaemonSet's template or update strategy.
    pub const DRIFT_DETECTED: &str = "DriftDetected";
    /// Normal: a step of the Pods driver began.
    pub const STEP_STARTED: &str = "StepStarted";
    /// Normal: a step of the Pods driver is done (its nodes updated and ready, or its pause over).
    pub const STEP_COMPLETED: &str = "StepCompleted";
    /// Normal: a promotion ended a pause or skipped a step.
    pub const PROMOTED: &str = "Promoted";
    /// Normal: a rollout is held on request (the `pause` verb).
    pub const PAUSED: &str = "Paused";
    /// Normal: a hold on request ended (the `resume` verb).
    pub const RESUMED: &str = "Resumed";
    /// Normal: a failed rollout starts again from its first step (the `retry` verb).
    pub const RETRIED: &str = "Retried";
    /// Warning: nodes are left for the end of the rollout (NotReady, cordoned, gone).
    pub const NODES_DEFERRED: &str = "NodesDeferred";
    /// Normal: a rollout was aborted on request (the `abort` verb); going back to the stable
    /// revision.
    pub const ABORTED: &str = "Aborted";
    /// Warning: a rollout failed and `onFailure: Rollback` sends it back to the stable revision.
    pub const ROLLING_BACK: &str = "RollingBack";
    /// Normal: a rollback is done, every pod runs the stable revision again.
    pub const ROLLED_BACK: &str = "RolledBack";
    /// Normal: an earlier revision is rolled out on request (the `undo` verb).
    pub const UNDO_STARTED: &str = "UndoStarted";
    /// Warning: a verb could not be acted on (nothing to abort, no such revision).
    pub const VERB_REFUSED: &str = "VerbRefused";
    /// Warning: a metric of the analysis failed past its limit; the rollout fails.
    pub const ANALYSIS_FAILED: &str = "AnalysisFailed";
    /// Warning: a metric of the analysis had no conclusive measurement for too long; the
    /// rollout holds until it has one.
    pub const ANALYSIS_INCONCLUSIVE: &str = "AnalysisInconclusive";
    /// Warning: nodes turned unhealthy after their update (the node-health gate); the rollout
    /// fails, or holds with `onUnhealthy: Hold`.
    pub const NODE_UNHEALTHY: &str = "NodeUnhealthy";
    /// Warning: the pods beside the agent on updated nodes were disrupted after their update
    /// (the neighbours gate); the rollout fails, or holds with `onUnhealthy: Hold`.
    pub const NEIGHBOURS_DISRUPTED: &str = "NeighboursDisrupted";
    /// Warning: the API server refused the image pre-pull's pods (no `pods: create`); the
    /// rollout goes on without pre-pull. Once each time the `PrePullBlocked` condition turns
    /// true (issue 50), not every pass.
    pub const PRE_PULL_BLOCKED: &str = "PrePullBlocked";
}

/// An event to record on the DaemonSet.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Event {
    /// `Normal` or `Warning`.
    pub type_: EventType,
    /// One of [`event_reason`].
    pub reason: &'static str,
    /// Human-readable message.
    pub message: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pins the stable names: metric labels (`WriteKind`) and the Kubernetes event types.
    #[test]
    fn names_are_stable() {
        let rows = [
            (WriteKind::Create.as_str(), "create"),
            (WriteKind::Start.as_str(), "start"),
            (WriteKind::Widen.as_str(), "widen"),
            (WriteKind::Finish.as_str(), "finish"),
            (WriteKind::TlsStep.as_str(), "tls_step"),
            (WriteKind::Hold.as_str(), "hold"),
            (WriteKind::Resume.as_str(), "resume"),
            (EventType::Normal.as_str(), "Normal"),
            (EventType::Warning.as_str(), "Warning"),
        ];
        for (name, expected) in rows {
            assert_eq!(name, expected);
        }
    }
}
