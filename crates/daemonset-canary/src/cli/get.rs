//! `daemonset-canary get`: the CanaryDaemonSets of a namespace (or of all, `-A`), one line each,
//! rendered by [`daemonset_canary::status_view::render_list`].

use super::{KubeArgs, describe};
use canary_kube_adapter::CanaryDaemonSet;
use daemonset_canary::status_view;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
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

/// Lists them, or says there are none (and where).
pub async fn run(args: GetArgs) -> anyhow::Result<()> {
    let connection = args.kube.connect().await?;
    let (api, place): (Api<CanaryDaemonSet>, String) = if args.all_namespaces {
        (
            Api::all(connection.client.clone()),
            "any namespace".to_owned(),
        )
    } else {
        let namespace = args
            .namespace
            .clone()
            .unwrap_or_else(|| connection.client.default_namespace().to_owned());
        (
            Api::namespaced(connection.client.clone(), &namespace),
            format!("namespace {namespace:?}"),
        )
    };
    let items = api
        .list(&ListParams::default())
        .await
        .map_err(|error| anyhow::anyhow!(describe(&error, &connection.url)))?
        .items;
    if items.is_empty() {
        eprintln!("no CanaryDaemonSets in {place}");
        return Ok(());
    }
    print!(
        "{}",
        status_view::render_list(&items, args.all_namespaces, Timestamp::now())
    );
    Ok(())
}
