//! `daemonset-canary get`: the CanaryDaemonSets of a namespace (or of all, `-A`), one line each,
//! rendered by [`daemonset_canary::status_view::render_list`]; one that does not decode is
//! listed too, and a warning after the table says why.

use super::{KubeArgs, describe, object};
use canary_kube_adapter::CanaryDaemonSet;
use daemonset_canary::status_view;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::ListParams;

/// Arguments of `get`.
#[derive(Debug, clap::Args)]
pub struct GetArgs {
    /// The namespace. Default: the kubeconfig's namespace.
    #[arg(long, short = 'n', env = "CANARY_NAMESPACE")]
    namespace: Option<String>,
    /// Every namespace (as `kubectl get -A`).
    #[arg(long, short = 'A', conflicts_with = "namespace")]
    all_namespaces: bool,
    #[command(flatten)]
    kube: KubeArgs,
}

/// Lists them, or says there are none (and where). An object that does not decode is listed
/// from what does (its metadata and status), and why it does not decode follows the table.
pub async fn run(args: GetArgs) -> anyhow::Result<()> {
    let connection = args.kube.connect().await?;
    let namespace = (!args.all_namespaces).then(|| {
        args.namespace
            .clone()
            .unwrap_or_else(|| connection.client.default_namespace().to_owned())
    });
    let place = namespace.as_ref().map_or_else(
        || "any namespace".to_owned(),
        |n| format!("namespace {n:?}"),
    );
    let reads = object::list(&connection, namespace.as_deref(), &ListParams::default())
        .await
        .map_err(|error| anyhow::anyhow!(describe(&error, &connection.url)))?;
    if reads.is_empty() {
        eprintln!("no CanaryDaemonSets in {place}");
        return Ok(());
    }
    let items: Vec<CanaryDaemonSet> = reads.iter().map(|r| object::object_of(r).clone()).collect();
    print!(
        "{}",
        status_view::render_list(&items, args.all_namespaces, Timestamp::now())
    );
    for undecoded in reads.iter().filter_map(|read| read.as_ref().err()) {
        let cds = &undecoded.stand_in;
        eprintln!(
            "warning: {} does not decode: {}",
            object::which(&cds.namespace().unwrap_or_default(), &cds.name_any()),
            object::why(undecoded)
        );
    }
    Ok(())
}
