//! The rollout history: one ControllerRevision per desired DaemonSet the controller rolled
//! out, owned by the CanaryDaemonSet (the mechanism DaemonSets and StatefulSets use for
//! `kubectl rollout history`), with the outcome of its rollout.
//!
//! Each revision holds the whole desired DaemonSet (`data`), a number (`revision`), and, as
//! annotations, the target version, the outcome (`progressing`, `successful`, `failed`,
//! `aborted`, `superseded`) and when its rollout started and ended. Its name is the
//! CanaryDaemonSet's name and a hash of the desired DaemonSet, so the same template rolled out
//! again is the same revision, renumbered to the newest (as the DaemonSet controller does).
//! `undo` and rollbacks read a revision's `data` back as the desired DaemonSet.
//!
//! # Invariants
//!
//! - Revisions are labelled [`HISTORY_LABEL`] (not the owner label the pods carry): the
//!   controller's DaemonSet-revision watch never sees them.
//! - At most `spec.revisionHistoryLimit` revisions are kept; the current and the stable one
//!   are never pruned.
//! - The history is read only when it changes (a rollout starts or ends) or a verb needs it,
//!   never on every pass.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Resource, ResourceExt};

use crate::Error;
use crate::crd::{CanaryDaemonSet, RevisionRef};
use crate::desired::json_hash;
use canary_state_machine::Phase;

/// The label of every history revision; its value is the CanaryDaemonSet's name.
pub const HISTORY_LABEL: &str = "canary.daemonset.dev/history";
/// Annotation: the target version the revision rolls out.
pub const VERSION_ANNOTATION: &str = "canary.daemonset.dev/version";
/// Annotation: the outcome of the revision's last rollout ([`Outcome`]).
pub const OUTCOME_ANNOTATION: &str = "canary.daemonset.dev/outcome";
/// Annotation: when its last rollout started (RFC 3339).
pub const STARTED_ANNOTATION: &str = "canary.daemonset.dev/started-at";
/// Annotation: when its last rollout ended (RFC 3339); absent while it runs.
pub const FINISHED_ANNOTATION: &str = "canary.daemonset.dev/finished-at";

/// How a revision's last rollout ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// It runs.
    Progressing,
    /// Every pod ran it, updated and ready.
    Successful,
    /// It failed (a crash-looping pod, a progress deadline).
    Failed,
    /// It was aborted on request, or rolled back after a failure, before it finished.
    Aborted,
    /// Another revision went out before it finished.
    Superseded,
}

impl Outcome {
    /// The stable lower-case name, as the annotation spells it.
    pub const fn as_str(self) -> &'static str {
        match self {
            Outcome::Progressing => "progressing",
            // A rollout's outcome is named as the phase it ended in.
            Outcome::Successful => Phase::Successful.as_str(),
            Outcome::Failed => Phase::Failed.as_str(),
            Outcome::Aborted => "aborted",
            Outcome::Superseded => "superseded",
        }
    }

    /// The outcome named `name`, if any.
    pub fn parse(name: &str) -> Option<Outcome> {
        [
            Outcome::Progressing,
            Outcome::Successful,
            Outcome::Failed,
            Outcome::Aborted,
            Outcome::Superseded,
        ]
        .into_iter()
        .find(|outcome| outcome.as_str() == name)
    }
}

/// One revision, as `history` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The ControllerRevision's name.
    pub name: String,
    /// Its number.
    pub revision: i64,
    /// The version it rolls out (empty when unknown).
    pub version: String,
    /// How its last rollout ended (`None`: an annotation someone removed or mangled).
    pub outcome: Option<Outcome>,
    /// When its last rollout started.
    pub started: Option<String>,
    /// When its last rollout ended.
    pub finished: Option<String>,
}

impl Entry {
    /// The entry of a history revision.
    pub fn of(revision: &ControllerRevision) -> Entry {
        let annotation = |key: &str| revision.annotations().get(key).cloned();
        Entry {
            name: revision.name_any(),
            revision: revision.revision,
            version: annotation(VERSION_ANNOTATION).unwrap_or_default(),
            outcome: annotation(OUTCOME_ANNOTATION).and_then(|o| Outcome::parse(&o)),
            started: annotation(STARTED_ANNOTATION),
            finished: annotation(FINISHED_ANNOTATION),
        }
    }

    /// The status's reference to this entry.
    pub fn to_ref(&self) -> RevisionRef {
        RevisionRef {
            name: self.name.clone(),
            revision: self.revision,
            version: self.version.clone(),
            template_hash: None,
        }
    }
}

/// The name of the revision that holds `desired`: `<name>-<hash>`, the hash over what a
/// rollout writes (labels, annotations, spec), so that the same template is the same revision.
pub fn revision_name(cds_name: &str, desired: &DaemonSet) -> Result<String, Error> {
    let hash = json_hash(&(
        &desired.metadata.labels,
        &desired.metadata.annotations,
        &desired.spec,
    ))?;
    Ok(format!("{cds_name}-{}", &hash[..10]))
}

/// The history of one CanaryDaemonSet.
pub struct History {
    api: Api<ControllerRevision>,
    cds_name: String,
    owner: OwnerReference,
    field_manager: String,
}

impl History {
    /// The history of `cds`, written as `field_manager`.
    pub fn new(
        client: kube::Client,
        cds: &CanaryDaemonSet,
        field_manager: &str,
    ) -> Result<Self, Error> {
        let namespace = cds
            .namespace()
            .ok_or(Error::MissingField("metadata.namespace"))?;
        let owner = cds
            .controller_owner_ref(&())
            .ok_or(Error::MissingField("metadata.uid"))?;
        Ok(History {
            api: Api::namespaced(client, &namespace),
            cds_name: cds.name_any(),
            owner,
            field_manager: field_manager.to_owned(),
        })
    }

    /// Every revision, oldest first.
    pub async fn list(&self) -> Result<Vec<Entry>, Error> {
        let params = ListParams::default().labels(&format!("{HISTORY_LABEL}={}", self.cds_name));
        let mut entries: Vec<Entry> = self
            .api
            .list(&params)
            .await?
            .items
            .iter()
            .filter(|revision| self.owns(revision))
            .map(Entry::of)
            .collect();
        entries.sort_by_key(|entry| entry.revision);
        Ok(entries)
    }

    /// Records that a rollout of `desired` (target `version`) started at `now`: its revision
    /// is created, or renumbered as the newest when the template was rolled out before. The
    /// revision `previous` was at, if it had not ended, is marked `superseded`. Then the
    /// oldest revisions beyond `limit` are deleted, never the new one nor `stable`. One LIST,
    /// one write, and a DELETE per revision pruned.
    pub async fn record_start(
        &self,
        desired: &DaemonSet,
        version: &str,
        previous: Option<&RevisionRef>,
        stable: Option<&RevisionRef>,
        limit: usize,
        now: Timestamp,
    ) -> Result<RevisionRef, Error> {
        let name = revision_name(&self.cds_name, desired)?;
        let entries = self.list().await?;
        if let Some(previous) = previous.filter(|p| p.name != name)
            && let Some(entry) = entries.iter().find(|e| e.name == previous.name)
            && entry.outcome == Some(Outcome::Progressing)
        {
            self.record_outcome(&entry.name, Outcome::Superseded, now)
                .await?;
        }
        let newest = entries.iter().map(|e| e.revision).max().unwrap_or(0);
        let existing = entries.iter().find(|e| e.name == name);
        let number = match existing {
            Some(entry) if entry.revision == newest => entry.revision,
            _ => newest + 1,
        };
        let annotations = BTreeMap::from([
            (VERSION_ANNOTATION.to_owned(), version.to_owned()),
            (
                OUTCOME_ANNOTATION.to_owned(),
                Outcome::Progressing.as_str().to_owned(),
            ),
            (STARTED_ANNOTATION.to_owned(), now.to_string()),
        ]);
        if existing.is_some() {
            let patch = serde_json::json!({
                "metadata": {"annotations": {
                    VERSION_ANNOTATION: version,
                    OUTCOME_ANNOTATION: Outcome::Progressing.as_str(),
                    STARTED_ANNOTATION: now.to_string(),
                    FINISHED_ANNOTATION: null,
                }},
                "revision": number,
            });
            self.api
                .patch(&name, &self.patch_params(), &Patch::Merge(&patch))
                .await?;
        } else {
            let data =
                serde_json::to_value(desired).map_err(|e| Error::Serialize(e.to_string()))?;
            let revision = ControllerRevision {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    labels: Some(BTreeMap::from([(
                        HISTORY_LABEL.to_owned(),
                        self.cds_name.clone(),
                    )])),
                    annotations: Some(annotations),
                    owner_references: Some(vec![self.owner.clone()]),
                    ..ObjectMeta::default()
                },
                data: Some(RawExtension(data)),
                revision: number,
            };
            self.create_or_take_over(revision).await?;
        }
        let kept = entries.len() + usize::from(existing.is_none());
        let doomed = entries
            .iter()
            .filter(|entry| entry.name != name && Some(&entry.name) != stable.map(|s| &s.name))
            .take(kept.saturating_sub(limit.max(1)));
        self.delete_all(doomed).await?;
        Ok(RevisionRef {
            name,
            revision: number,
            version: version.to_owned(),
            template_hash: None,
        })
    }

    /// Creates `revision`; when a revision of that name exists and is no live object's (an
    /// orphan, or one owned by an earlier, deleted CanaryDaemonSet of the same name that the
    /// garbage collector has not removed yet, or never will where it does not run), takes it
    /// over: replaced whole by ours, owner included, as Kubernetes' own controllers adopt the
    /// orphaned ControllerRevisions their selector matches. Its old content is an earlier
    /// object's history, not ours, so nothing of it is kept. A revision of that name that
    /// another live controller owns is left alone, and the error says whose it is.
    async fn create_or_take_over(&self, revision: ControllerRevision) -> Result<(), Error> {
        let params = PostParams {
            field_manager: Some(self.field_manager.clone()),
            ..PostParams::default()
        };
        let name = revision.name_any();
        match self.api.create(&params, &revision).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(status)) if status.code == 409 => {}
            Err(error) => return Err(error.into()),
        }
        let Some(existing) = self.api.get_opt(&name).await? else {
            // Deleted in between: create it again (a conflict now is a real one).
            self.api.create(&params, &revision).await?;
            return Ok(());
        };
        let controller = existing
            .owner_references()
            .iter()
            .find(|owner| owner.controller == Some(true));
        let earlier_self = controller.is_none_or(|owner| {
            owner.kind == self.owner.kind
                && owner.api_version == self.owner.api_version
                && owner.name == self.cds_name
        });
        if !earlier_self {
            let owner = controller.map_or_else(String::new, |o| format!("{} {}", o.kind, o.name));
            return Err(Error::Conflict {
                what: format!("history revision {name}"),
                message: format!(
                    "a ControllerRevision of that name is owned by {owner}; delete it or rename this CanaryDaemonSet"
                ),
            });
        }
        let replacement = ControllerRevision {
            metadata: ObjectMeta {
                resource_version: existing.metadata.resource_version.clone(),
                ..revision.metadata
            },
            ..revision
        };
        self.api.replace(&name, &params, &replacement).await?;
        Ok(())
    }

    /// Records how the rollout of revision `name` ended.
    pub async fn record_outcome(
        &self,
        name: &str,
        outcome: Outcome,
        now: Timestamp,
    ) -> Result<(), Error> {
        let patch = serde_json::json!({"metadata": {"annotations": {
            OUTCOME_ANNOTATION: outcome.as_str(),
            FINISHED_ANNOTATION: now.to_string(),
        }}});
        match self
            .api
            .patch(name, &self.patch_params(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => Ok(()),
            // Pruned or deleted by hand: there is nothing left to record the outcome on.
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            Err(error) => Err(error.into()),
        }
    }

    async fn delete_all(&self, doomed: impl Iterator<Item = &Entry>) -> Result<(), Error> {
        for entry in doomed {
            match self.api.delete(&entry.name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(error) => return Err(error.into()),
            }
        }
        Ok(())
    }

    /// The desired DaemonSet revision `name` holds; `None` when the revision is gone, is not
    /// this object's, or its data does not decode (someone edited it).
    pub async fn desired(&self, name: &str) -> Result<Option<DaemonSet>, Error> {
        let Some(revision) = self.api.get_opt(name).await? else {
            return Ok(None);
        };
        if !self.owns(&revision) {
            return Ok(None);
        }
        let Some(RawExtension(data)) = revision.data else {
            return Ok(None);
        };
        Ok(serde_json::from_value(data).ok())
    }

    fn owns(&self, revision: &ControllerRevision) -> bool {
        revision
            .owner_references()
            .iter()
            .any(|owner| owner.uid == self.owner.uid && owner.controller == Some(true))
    }

    fn patch_params(&self) -> PatchParams {
        PatchParams {
            field_manager: Some(self.field_manager.clone()),
            ..PatchParams::default()
        }
    }
}
