//! What one pass decided: the output of [`decide`](crate::decide).

use crate::max_unavailable::MaxUnavailable;
use crate::phase::{FailureReason, Phase};
use crate::strategy::{Compatibility, Strategy};

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

/// The `reason` strings of the events [`Decision::event`] carries.
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

/// The outcome of one pass.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Decision {
    /// The phase to report.
    pub phase: Phase,
    /// Why, when `phase` is `Failed`.
    pub failure: Option<FailureReason>,
    /// At most one DaemonSet write.
    pub write: Option<DaemonSetWrite>,
    /// Record the DaemonSet generation, from the write's response when there is a write.
    pub record_generation: bool,
    /// The upgrade of this DaemonSet is done: the caller may move on (reference `done`).
    pub done: bool,
    /// The event to record, if any (only on transitions, except KubeVirt's `FailedUpdate`).
    pub event: Option<Event>,
    /// The error to report (reference `err`; the caller sets a Degraded condition from it).
    pub error: Option<String>,
    /// The sync gate found nothing to do: no flag set, no API call.
    pub quiet: bool,
    /// The live DaemonSet is drifted from what the controller wrote (the caller reports it as
    /// a condition); with the `Revert` policy this pass writes the desired template back.
    pub drifted: bool,
    /// A retry on request forgot a failure in this pass (the caller announces it with
    /// [`retried_event`](crate::retried_event) and records the mark).
    pub retried: bool,
    /// The pass was held on request (the caller records it, see [`Observation::held`]).
    ///
    /// [`Observation::held`]: crate::Observation::held
    pub held: bool,
    /// `Paused` when the pass acted on a new hold, `Resumed` when it acted on its end; told
    /// apart from [`event`](Self::event), which a pass that resumes may carry as well.
    pub hold_event: Option<Event>,
}

impl Decision {
    /// A decision in `phase` with nothing else set (nothing written, announced or recorded).
    pub fn hold(phase: Phase) -> Self {
        Decision {
            phase,
            failure: None,
            write: None,
            record_generation: false,
            done: false,
            event: None,
            error: None,
            quiet: false,
            drifted: false,
            retried: false,
            held: false,
            hold_event: None,
        }
    }

    /// Maps a rejected write to the failed phase of the row that made it.
    ///
    /// The messages are the reference's in KubeVirt mode, including the literal `<nil>` of
    /// rows 1 and 3a (spec quirk 15, a Go formatting slip). The default strategy names the
    /// DaemonSet instead and adds a `WriteRejected` Warning event. Conflicts (a failed `test` op,
    /// HTTP 409) are not rollout failures: the caller should requeue instead of calling this.
    /// A decision without a write is returned unchanged; the hold on request and its
    /// announcement are kept (a refused hold write is still a held pass).
    #[must_use]
    pub fn write_failed(self, strategy: &Strategy, name: &str, api_error: &str) -> Decision {
        let Some(write) = self.write else {
            return self;
        };
        // The API server's message is outside text: cut before it reaches status and events.
        let api_error = crate::cut(api_error, crate::OUTSIDE_TEXT_BYTES);
        let message = write_failure_message(strategy.compatibility, write.kind, name, &api_error);
        let event = (strategy.compatibility == Compatibility::Fixed).then(|| Event {
            type_: EventType::Warning,
            reason: event_reason::WRITE_REJECTED,
            message: message.clone(),
        });
        Decision {
            failure: Some(FailureReason::WriteRejected),
            event,
            error: Some(message),
            held: self.held,
            hold_event: self.hold_event,
            ..Decision::hold(Phase::Failed)
        }
    }
}

fn write_failure_message(
    compatibility: Compatibility,
    kind: WriteKind,
    name: &str,
    api_error: &str,
) -> String {
    let patch_error = format!("unable to update daemonset {name}: {api_error}");
    match (compatibility, kind) {
        (_, WriteKind::Create) => format!("unable to create daemonset {name}: {api_error}"),
        (Compatibility::KubeVirt, WriteKind::Start) => {
            format!("unable to start canary upgrade for daemonset <nil>: {patch_error}")
        }
        (Compatibility::KubeVirt, WriteKind::Widen) => {
            format!("unable to update daemonset <nil>: {patch_error}")
        }
        (Compatibility::KubeVirt, WriteKind::Finish | WriteKind::TlsStep) => patch_error,
        (Compatibility::Fixed, WriteKind::Start) => {
            format!("unable to start canary upgrade for daemonset {name}: {api_error}")
        }
        (Compatibility::Fixed, WriteKind::Widen) => {
            format!("unable to widen the rollout of daemonset {name}: {api_error}")
        }
        (Compatibility::Fixed, WriteKind::Finish) => {
            format!("unable to revert daemonset {name} to its resting maxUnavailable: {api_error}")
        }
        (Compatibility::Fixed, WriteKind::TlsStep) => {
            format!("unable to apply the TLS migration step to daemonset {name}: {api_error}")
        }
        (_, WriteKind::Hold) => {
            format!("unable to hold daemonset {name} (updateStrategy OnDelete): {api_error}")
        }
        (_, WriteKind::Resume) => {
            format!("unable to resume daemonset {name} (updateStrategy RollingUpdate): {api_error}")
        }
    }
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
