//! What the verbs that steer a rollout share (`promote`, `pause`, `resume`): the driver check
//! and the mark. A verb marks the CanaryDaemonSet with an annotation, never a spec field: a
//! GitOps sync neither undoes it nor shows it as drift, and it bumps no generation. The
//! controller acts on a mark once and records that it did in the status, with an event.

use super::{Connection, describe};
use anyhow::bail;
use canary_kube_adapter::CanaryDaemonSet;
use canary_state_machine::Driver;
use kube::Api;
use kube::api::{Patch, PatchParams};

/// `canarydaemonset NAMESPACE/NAME`, the way every verb names its object.
pub fn which(namespace: &str, name: &str) -> String {
    format!("canarydaemonset {namespace}/{name}")
}

/// Refuses a verb that only the Pods driver can act on; `what` says what the verb does.
pub fn require_pods_driver(cds: &CanaryDaemonSet, which: &str, what: &str) -> anyhow::Result<()> {
    if cds.spec.strategy.driver != Driver::Pods {
        bail!(
            "{which} uses the {} driver: {what}, which only the Pods driver does (spec.strategy.driver: Pods)",
            cds.spec.strategy.driver
        );
    }
    Ok(())
}

/// Sets the annotation `key` to `value`, or removes it (`None`), with a merge patch.
pub async fn annotate(
    connection: &Connection,
    namespace: &str,
    name: &str,
    key: &str,
    value: Option<&str>,
) -> anyhow::Result<()> {
    let patch = serde_json::json!({"metadata": {"annotations": {key: value}}});
    Api::<CanaryDaemonSet>::namespaced(connection.client.clone(), namespace)
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|error| anyhow::anyhow!(describe(&error, &connection.url)))?;
    Ok(())
}
