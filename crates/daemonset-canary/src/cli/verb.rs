//! What the verbs that steer a rollout share (`promote`, `pause`, `resume`, `retry`, `abort`,
//! `undo`): the driver check
//! and the mark. A verb marks the CanaryDaemonSet with an annotation, never a spec field: a
//! GitOps sync neither undoes it nor shows it as drift, and it bumps no generation. The
//! controller acts on a mark once and records that it did in the status, with an event.

use super::status::ObjectArgs;
use super::{Connection, describe};
use anyhow::bail;
use canary_kube_adapter::CanaryDaemonSet;
use canary_state_machine::Driver;
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

/// Finds the CanaryDaemonSet of `object`, refused unless it uses the Pods driver (`what` says
/// what the verb does).
pub async fn pods_driver_target(object: &ObjectArgs, what: &str) -> anyhow::Result<Target> {
    let target = find(object).await?;
    require_pods_driver(&target.cds, &target.which, what)?;
    Ok(target)
}

/// Finds the CanaryDaemonSet of `object`, with no check: a verb both drivers act on.
pub async fn find(object: &ObjectArgs) -> anyhow::Result<Target> {
    let (connection, cds) = object.find().await?;
    let name = object.name.clone();
    let namespace = cds.namespace().unwrap_or_default();
    let which = which(&namespace, &name);
    Ok(Target {
        connection,
        cds,
        name,
        namespace,
        which,
    })
}

/// Finds the CanaryDaemonSet of `object`, refused when it references a DaemonSet someone else
/// owns (`spec.workloadRef`): going back writes the template, which is theirs (`what` says
/// what the verb does). Both drivers are accepted.
pub async fn template_owner_target(object: &ObjectArgs, what: &str) -> anyhow::Result<Target> {
    let target = find(object).await?;
    if let Some(workload) = &target.cds.spec.workload_ref {
        bail!(
            "{} drives DaemonSet {} that its owner (Helm, Argo CD, Flux) defines (spec.workloadRef): {what}, which writes the template; roll back where the DaemonSet is defined",
            target.which,
            workload.name
        );
    }
    Ok(target)
}

/// `canarydaemonset NAMESPACE/NAME`, the way every verb names its object.
pub(super) fn which(namespace: &str, name: &str) -> String {
    format!("canarydaemonset {namespace}/{name}")
}

/// Refuses a verb that only the Pods driver can act on; `what` says what the verb does.
fn require_pods_driver(cds: &CanaryDaemonSet, which: &str, what: &str) -> anyhow::Result<()> {
    if cds.spec.strategy.driver != Driver::Pods {
        bail!(
            "{which} uses the {} driver: {what}, which only the Pods driver does (spec.strategy.driver: Pods)",
            cds.spec.strategy.driver
        );
    }
    Ok(())
}

/// `daemonset-canary (USER)`, with the user the API server authenticates the caller as (a
/// `SelfSubjectReview`, Kubernetes 1.28 and later), else `daemonset-canary`. At most 128
/// printable characters, as the API server requires of a field manager.
async fn field_manager(connection: &Connection) -> String {
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
