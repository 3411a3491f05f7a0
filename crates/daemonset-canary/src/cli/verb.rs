//! What the verbs that steer a rollout share (`promote`, `pause`, `resume`, `retry`, `abort`,
//! `undo`): finding the object, the refusal and the mark. A verb marks the CanaryDaemonSet
//! with an annotation, never a spec field: a GitOps sync neither undoes it nor shows it as
//! drift, and it bumps no generation. The controller acts on a mark once and records that it
//! did in the status, with an event.
//!
//! Whether a verb is refused is the verb table's ([`Verb::refusal`]), the same the controller
//! reads: a verb exits non-zero with the table's reason, and one it accepts prints what the
//! controller will do with it.

use super::object::ObjectArgs;
use super::{Connection, describe};
use anyhow::bail;
use canary_kube_adapter::CanaryDaemonSet;
use canary_kube_adapter::crd::hold_requested;
use canary_state_machine::{Revision, RollbackReason, Verb, VerbContext};
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};

/// Arguments of a verb that takes nothing but its object (`pause`, `resume`, `retry`, `abort`,
/// `history`): one type, so that they all name their object the same way.
#[derive(Debug, clap::Args)]
pub struct TargetArgs {
    #[command(flatten)]
    pub(super) object: ObjectArgs,
}

/// The CanaryDaemonSet a verb acts on, as found.
pub struct Target {
    /// The connection it was found through.
    pub connection: Connection,
    /// The object.
    pub cds: CanaryDaemonSet,
    /// Its name.
    pub name: String,
    /// Its namespace.
    pub namespace: String,
    /// `canarydaemonset NAMESPACE/NAME`.
    pub which: String,
}

/// Finds the CanaryDaemonSet of `object`.
pub async fn find(object: &ObjectArgs) -> anyhow::Result<Target> {
    let (connection, cds) = object.find().await?;
    let name = object.name.clone();
    let namespace = cds.namespace().unwrap_or_default();
    let which = super::object::which(&namespace, &name);
    Ok(Target {
        connection,
        cds,
        name,
        namespace,
        which,
    })
}

/// What the verb table reads of `cds`: its driver, its stored phase and history, the hold.
pub fn verb_context(cds: &CanaryDaemonSet) -> VerbContext {
    let status = cds.status.clone().unwrap_or_default();
    let history = status.history.unwrap_or_default();
    let revision = |r: &canary_kube_adapter::crd::RevisionRef| Revision {
        number: r.revision,
        version: r.version.clone(),
    };
    VerbContext {
        driver: cds.spec.strategy.driver,
        phase: status.phase,
        held: hold_requested(cds),
        owns_template: cds.spec.workload_ref.is_none(),
        rolling_back: history.rollback.as_ref().is_some_and(|rollback| {
            RollbackReason::parse(&rollback.reason)
                .is_some_and(RollbackReason::reports_rollback_phases)
        }),
        current: history.current.as_ref().map(revision),
        stable: history.stable.as_ref().map(revision),
    }
}

impl Target {
    /// What the verb table reads of the object.
    pub fn context(&self) -> VerbContext {
        verb_context(&self.cds)
    }

    /// Fails with the verb table's reason when it refuses `verb` here.
    pub fn check(&self, verb: Verb) -> anyhow::Result<()> {
        match verb.refusal(&self.context()) {
            Some(why) => bail!("{}: {} refused: {why}", self.which, verb.name()),
            None => Ok(()),
        }
    }
}

/// `daemonset-canary (USER)`, with the user the API server authenticates the caller as (a
/// `SelfSubjectReview`, Kubernetes 1.28 and later), else `daemonset-canary`. At most 128
/// printable characters, as the API server requires of a field manager.
pub(super) async fn field_manager(connection: &Connection) -> String {
    use k8s_openapi::api::authentication::v1::SelfSubjectReview;
    let review = Api::<SelfSubjectReview>::all(connection.client.clone())
        .create(&Default::default(), &SelfSubjectReview::default())
        .await;
    let user = review
        .ok()
        .and_then(|review| review.status?.user_info?.username)
        .filter(|user| !user.is_empty());
    let manager = match user {
        Some(user) => format!("daemonset-canary ({user})"),
        None => "daemonset-canary".to_owned(),
    };
    manager
        .chars()
        .filter(|c| !c.is_control())
        .take(128)
        .collect()
}

impl Target {
    /// Sets the annotation `key` to `value`, or removes it (`None`), with a merge patch whose
    /// field manager names the caller (see [`field_manager`]): the controller's event for the
    /// mark says who asked. Every verb marks through this one call, so that none patches its
    /// object another way.
    pub async fn mark(&self, key: &str, value: Option<&str>) -> anyhow::Result<()> {
        let connection = &self.connection;
        let patch = serde_json::json!({"metadata": {"annotations": {key: value}}});
        let params = PatchParams {
            field_manager: Some(field_manager(connection).await),
            ..PatchParams::default()
        };
        Api::<CanaryDaemonSet>::namespaced(connection.client.clone(), &self.namespace)
            .patch(&self.name, &params, &Patch::Merge(&patch))
            .await
            .map_err(|error| anyhow::anyhow!(describe(&error, &connection.url)))?;
        Ok(())
    }
}
