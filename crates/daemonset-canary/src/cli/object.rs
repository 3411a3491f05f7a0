//! Which CanaryDaemonSet a command is about, as `status` and every verb name it: the flags they
//! share ([`ObjectArgs`]), finding the object, and how a message names it ([`which`]).
//!
//! Where it looks: `-n NAMESPACE`, else the kubeconfig's namespace; `-A` searches every
//! namespace (one match is shown, several are listed). A name missing from the namespace
//! looked in is searched in the others, so the error can say where it is, or suggest `-A`.
//!
//! Objects are read untyped and decoded one by one ([`canary_kube_adapter::crd::decode`]), as
//! the controller reads them: a stored object that does not decode (`progressDeadlineSeconds:
//! "ten"`, stored under an older CRD or through the status subresource) is one [`Read`] that
//! failed, never an error of the whole request. `get` lists it beside the others, `status`
//! shows it with why it does not decode, and a verb says why it cannot apply ([`ObjectArgs::find`]).

use super::{Connection, KubeArgs, describe};
use canary_kube_adapter::CanaryDaemonSet;
use canary_kube_adapter::crd::{Undecoded, decode, dynamic_api};
use futures::{Stream, TryStreamExt};
use kube::ResourceExt;
use kube::api::{DynamicObject, ListParams};
use kube::runtime::watcher;

/// A stored CanaryDaemonSet as the CLI reads it: decoded, or a stand-in (its metadata and
/// status) and why its spec does not decode.
pub type Read = Result<CanaryDaemonSet, Box<Undecoded>>;

/// The most bytes of a decoding error the CLI prints: the error quotes the stored value, which
/// anyone who could write the object chose.
const WHY_BYTES: usize = 300;

/// Why `undecoded` cannot be read, cut to [`WHY_BYTES`].
pub fn why(undecoded: &Undecoded) -> String {
    canary_state_machine::cut(&undecoded.why, WHY_BYTES).into_owned()
}

/// The object a read stands for, decoded or not: its metadata and status are there either way.
pub fn object_of(read: &Read) -> &CanaryDaemonSet {
    match read {
        Ok(cds) => cds,
        Err(undecoded) => &undecoded.stand_in,
    }
}

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
    /// it is instead; unreachable; no CRD; stored in a form that does not decode, so nothing
    /// can act on it).
    pub async fn find(&self) -> anyhow::Result<(Connection, CanaryDaemonSet)> {
        let (connection, read) = self.read().await?;
        match read {
            Ok(cds) => Ok((connection, cds)),
            Err(undecoded) => {
                let cds = &undecoded.stand_in;
                let (namespace, name) = (cds.namespace().unwrap_or_default(), cds.name_any());
                anyhow::bail!(
                    "{} cannot be acted on: {}; fix its spec (`kubectl edit canarydaemonset {name} -n {namespace}`)",
                    which(&namespace, &name),
                    why(&undecoded)
                )
            }
        }
    }

    /// Connects and fetches the CanaryDaemonSet, decoded or not (see [`Read`]), or fails with
    /// one line (not found, and where it is instead; unreachable; no CRD).
    pub async fn read(&self) -> anyhow::Result<(Connection, Read)> {
        let connection = self.kube.connect().await?;
        let read = if self.all_namespaces {
            find_anywhere(&connection, &self.name).await?
        } else {
            let namespace = self
                .namespace
                .clone()
                .unwrap_or_else(|| connection.client.default_namespace().to_owned());
            find_in(&connection, &self.name, &namespace).await?
        };
        Ok((connection, read))
    }
}

/// The CanaryDaemonSets of `namespace` (all with `None`), each decoded or not.
pub async fn list(
    connection: &Connection,
    namespace: Option<&str>,
    params: &ListParams,
) -> Result<Vec<Read>, kube::Error> {
    Ok(dynamic_api(&connection.client, namespace)
        .list(params)
        .await?
        .items
        .into_iter()
        .map(decode)
        .collect())
}

/// Watches the CanaryDaemonSets of `namespace` (all with `None`) that `config` selects, each
/// event's object decoded alone: one stored object that does not decode is an event like the
/// others ([`Read`]), where a typed watch would fail, list again and fail again for as long as
/// it is stored (`get -w`, `status --watch`).
pub fn watch(
    connection: &Connection,
    namespace: Option<&str>,
    config: watcher::Config,
) -> impl Stream<Item = Result<watcher::Event<Read>, watcher::Error>> + Send + use<> {
    watcher::watcher(dynamic_api(&connection.client, namespace), config).map_ok(decode_event)
}

fn decode_event(event: watcher::Event<DynamicObject>) -> watcher::Event<Read> {
    match event {
        watcher::Event::Apply(object) => watcher::Event::Apply(decode(object)),
        watcher::Event::Delete(object) => watcher::Event::Delete(decode(object)),
        watcher::Event::InitApply(object) => watcher::Event::InitApply(decode(object)),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

/// `canarydaemonset NAMESPACE/NAME`, the way every command names its object.
pub(super) fn which(namespace: &str, name: &str) -> String {
    format!("canarydaemonset {namespace}/{name}")
}

/// The CanaryDaemonSets named `name` in every namespace.
async fn everywhere(connection: &Connection, name: &str) -> Result<Vec<Read>, kube::Error> {
    let params = ListParams::default().fields(&format!("metadata.name={name}"));
    Ok(list(connection, None, &params)
        .await?
        .into_iter()
        .filter(|read| object_of(read).name_any() == name)
        .collect())
}

async fn find_anywhere(connection: &Connection, name: &str) -> anyhow::Result<Read> {
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

async fn find_in(connection: &Connection, name: &str, namespace: &str) -> anyhow::Result<Read> {
    match dynamic_api(&connection.client, Some(namespace))
        .get_opt(name)
        .await
    {
        Ok(Some(object)) => Ok(decode(object)),
        Ok(None) => {
            // Where is it, then? Best effort: listing every namespace may not be allowed.
            let elsewhere = everywhere(connection, name).await.unwrap_or_default();
            match elsewhere.as_slice() {
                [] => anyhow::bail!(
                    "no CanaryDaemonSet {name:?} in namespace {namespace:?}; -A looks in every namespace (or list them with `kubectl get cds -A`)"
                ),
                [one] => anyhow::bail!(
                    "no CanaryDaemonSet {name:?} in namespace {namespace:?}, but there is one in {:?}: add `-n {}` (or -A)",
                    object_of(one).namespace().unwrap_or_default(),
                    object_of(one).namespace().unwrap_or_default()
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

fn namespaces(found: &[Read]) -> String {
    let mut names: Vec<String> = found
        .iter()
        .map(|read| object_of(read).namespace().unwrap_or_default())
        .collect();
    names.sort();
    names.join(", ")
}
