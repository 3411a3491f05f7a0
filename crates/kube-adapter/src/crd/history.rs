//! Where a CanaryDaemonSet stands in its rollout history: the status types of the revisions
//! it rolled out and of a rollback in force (`status.history`). The revisions themselves are
//! ControllerRevisions, kept by [`crate::history`].
//!
//! Invariant: every optional field serializes as `null` rather than being left out, because the
//! status is written with a JSON merge patch (see [`HistoryStatus`]).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Where the object stands in its history (`daemonset-canary history NAME` lists it).
///
/// Its absent fields serialize as `null`, not left out: the status is written with a JSON
/// merge patch, in which a left-out field of a nested object would keep its old value (a
/// rollback that ended would stay recorded).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HistoryStatus {
    /// The revision rolled out last (or being rolled out).
    #[serde(default)]
    pub current: Option<RevisionRef>,
    /// The last revision that finished `successful`: where an abort or a rollback goes.
    #[serde(default)]
    pub stable: Option<RevisionRef>,
    /// A rollback or an undo in force: the desired template is this revision's, not the
    /// spec's, until the spec's template changes.
    #[serde(default)]
    pub rollback: Option<RollbackStatus>,
    /// The last `canary.daemonset.dev/abort` value acted on.
    #[serde(default)]
    pub abort: Option<String>,
    /// The last `canary.daemonset.dev/undo` value acted on.
    #[serde(default)]
    pub undo: Option<String>,
}

/// One remembered revision: the ControllerRevision's name and number.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RevisionRef {
    /// The ControllerRevision's name.
    pub name: String,
    /// Its revision number.
    pub revision: i64,
    /// The target version it rolls out.
    #[serde(default)]
    pub version: String,
    /// The live DaemonSet's template hash (pod template and update strategy as the API server
    /// stores them) when this revision's rollout ended well. A live DaemonSet that hashes the
    /// same runs exactly this revision, whoever wrote it: a rollback to it whose record a
    /// replaced leader lost is the rollback's own write, not drift.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template_hash: Option<String>,
}

impl RevisionRef {
    /// This reference with the live template hash its revision ended well with.
    #[must_use]
    pub fn with_template_hash(self, template_hash: Option<String>) -> Self {
        Self {
            template_hash,
            ..self
        }
    }
}

/// A rollback in force.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RollbackStatus {
    /// The revision rolled back to.
    pub to: RevisionRef,
    /// Why: `Undo`, `Abort` or `OnFailure`.
    pub reason: String,
    /// The revision (ControllerRevision name) the spec's template had when the rollback
    /// started: a spec whose template differs (a new version, a fix) ends the rollback; an
    /// edit of anything else (steps, deadlines) does not.
    pub from: String,
    /// The phase the rollout table decided under the reported `rollingBack`/`rolledBack`.
    #[serde(default, deserialize_with = "super::lenient")]
    #[schemars(with = "Option<String>")]
    pub decided_phase: Option<canary_state_machine::Phase>,
}

impl HistoryStatus {
    /// Whether a rollback in force goes back (an abort, `onFailure: Rollback`): it reports
    /// `rollingBack`/`rolledBack` and walks the Pods driver's steps without their pauses. An
    /// undo is a rollout like any other.
    pub fn going_back(&self) -> bool {
        self.rollback.as_ref().is_some_and(|rollback| {
            canary_state_machine::RollbackReason::parse(&rollback.reason)
                .is_some_and(canary_state_machine::RollbackReason::reports_rollback_phases)
        })
    }
}
