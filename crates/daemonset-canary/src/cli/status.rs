//! `daemonset-canary status NAME`: fetches one CanaryDaemonSet and its events and prints them
//! with [`daemonset_canary::status_view::render`].

use super::{KubeArgs, describe};
use canary_kube_adapter::CanaryDaemonSet;
use daemonset_canary::status_view;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::ListParams;

/// Arguments of `status`.
#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// Name of the CanaryDaemonSet.
    name: String,
    /// Its namespace. Default: the kubeconfig's namespace.
    #[arg(long, short = 'n', env = "CANARY_NAMESPACE")]
    namespace: Option<String>,
    #[command(flatten)]
    kube: KubeArgs,
}

/// Prints the view, or fails with one line (not found, unreachable, no CRD).
pub async fn run(args: StatusArgs) -> anyhow::Result<()> {
    let connection = args.kube.connect().await?;
    let namespace = args
        .namespace
        .clone()
        .unwrap_or_else(|| connection.client.default_namespace().to_owned());
    let api: Api<CanaryDaemonSet> = Api::namespaced(connection.client.clone(), &namespace);
    let cds = match api.get_opt(&args.name).await {
        Ok(Some(cds)) => cds,
        Ok(None) => anyhow::bail!(
            "no CanaryDaemonSet {:?} in namespace {namespace:?} (list them with `kubectl get cds -n {namespace}`)",
            args.name
        ),
        Err(error) => anyhow::bail!(describe(&error, &connection.url)),
    };
    let events: Api<Event> = Api::namespaced(connection.client.clone(), &namespace);
    // Events are a courtesy: without permission to list them the rest is still worth showing.
    let about: Vec<Event> = match events.list(&ListParams::default()).await {
        Ok(list) => list
            .items
            .into_iter()
            .filter(|e| status_view::is_about(e, &args.name))
            .collect(),
        Err(error) => {
            tracing::warn!("cannot list events: {}", describe(&error, &connection.url));
            Vec::new()
        }
    };
    print!("{}", status_view::render(&cds, &about, Timestamp::now()));
    Ok(())
}
