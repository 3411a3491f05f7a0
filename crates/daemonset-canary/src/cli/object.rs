//! Which CanaryDaemonSet a command is about, as `status` and every verb name it: the flags they
//! share ([`ObjectArgs`]), finding the object, and how a message names it ([`which`]).
//!
//! Where it looks: `-n NAMESPACE`, else the kubeconfig's namespace; `-A` searches every
//! namespace (one match is shown, several are listed). A name missing from the namespace
//! looked in is searched in the others, so the error can say where it is, or suggest `-A`.

use super::{Connection, KubeArgs, describe};
use canary_kube_adapter::CanaryDaemonSet;
use kube::api::ListParams;
use kube::{Api, ResourceExt};

/// Which CanaryDaemonSet a command is about, and how to reach its cluster: the flags `status`
/// and the verbs share.
#[derive(Debug, clap::Args)]
pub struct ObjectArgs {
    /// Name of the CanaryDaemonSet.
    pub name: String,
    /// Its namespace. Default: the kubeconfig's namespace.
    #[arg(long, short = 'n', env = "CANARY_NAMESPACE")]
    pub namespace: Option<String>,
    /// Look for NAME in every namespace (as `kubectl get -A`).
    #[arg(long, short = 'A', conflicts_with = "namespace")]
    pub all_namespaces: bool,
    #[command(flatten)]
    pub kube: KubeArgs,
}

impl ObjectArgs {
    /// Connects and fetches the CanaryDaemonSet, or fails with one line (not found, and where
    /// it is instead; unreachable; no CRD).
    pub async fn find(&self) -> anyhow::Result<(Connection, CanaryDaemonSet)> {
        let connection = self.kube.connect().await?;
        let cds = if self.all_namespaces {
            find_anywhere(&connection, &self.name).await?
        } else {
            let namespace = self
                .namespace
                .clone()
                .unwrap_or_else(|| connection.client.default_namespace().to_owned());
            find_in(&connection, &self.name, &namespace).await?
        };
        Ok((connection, cds))
    }
}

/// `canarydaemonset NAMESPACE/NAME`, the way every command names its object.
pub(super) fn which(namespace: &str, name: &str) -> String {
    format!("canarydaemonset {namespace}/{name}")
}

/// The CanaryDaemonSets named `name` in every namespace.
async fn everywhere(
    connection: &Connection,
    name: &str,
) -> Result<Vec<CanaryDaemonSet>, kube::Error> {
    let api: Api<CanaryDaemonSet> = Api::all(connection.client.clone());
    let params = ListParams::default().fields(&format!("metadata.name={name}"));
    Ok(api
        .list(&params)
        .await?
        .items
        .into_iter()
        .filter(|cds| cds.name_any() == name)
        .collect())
}

async fn find_anywhere(connection: &Connection, name: &str) -> anyhow::Result<CanaryDaemonSet> {
    let mut found = everywhere(connection, name)
        .await
        .map_err(|error| anyhow::anyhow!(describe(&error, &connection.url)))?;
    match found.len() {
        0 => anyhow::bail!(
            "no CanaryDaemonSet {name:?} in any namespace (list them with `kubectl get cds -A`)"
        ),
        1 => Ok(found.remove(0)),
        _ => anyhow::bail!(
            "CanaryDaemonSets named {name:?} are in namespaces {}: choose one with -n",
            namespaces(&found)
        ),
    }
}

async fn find_in(
    connection: &Connection,
    name: &str,
    namespace: &str,
) -> anyhow::Result<CanaryDaemonSet> {
    let api: Api<CanaryDaemonSet> = Api::namespaced(connection.client.clone(), namespace);
    match api.get_opt(name).await {
        Ok(Some(cds)) => Ok(cds),
        Ok(None) => {
            // Where is it, then? Best effort: listing every namespace may not be allowed.
            let elsewhere = everywhere(connection, name).await.unwrap_or_default();
            match elsewhere.as_slice() {
                [] => anyhow::bail!(
                    "no CanaryDaemonSet {name:?} in namespace {namespace:?}; -A looks in every namespace (or list them with `kubectl get cds -A`)"
                ),
                [one] => anyhow::bail!(
                    "no CanaryDaemonSet {name:?} in namespace {namespace:?}, but there is one in {:?}: add `-n {}` (or -A)",
                    one.namespace().unwrap_or_default(),
                    one.namespace().unwrap_or_default()
                ),
                several => anyhow::bail!(
                    "no CanaryDaemonSet {name:?} in namespace {namespace:?}; there are in namespaces {}: choose one with -n",
                    namespaces(several)
                ),
            }
        }
        Err(error) => anyhow::bail!(describe(&error, &connection.url)),
    }
}

fn namespaces(found: &[CanaryDaemonSet]) -> String {
    let mut names: Vec<String> = found
        .iter()
        .map(|c| c.namespace().unwrap_or_default())
        .collect();
    names.sort();
    names.join(", ")
}
