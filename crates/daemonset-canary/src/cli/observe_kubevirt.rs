//! `daemonset-canary observe-kubevirt`: read-only phase metrics for virt-operator's own canary
//! upgrade of virt-handler, next to an existing KubeVirt install (see docs/kubevirt.md).
//!
//! Order of events: bind the metrics address (so `/healthz` answers at once), list KubeVirt
//! objects once (one clear error line when the CRD is missing or the API server is unreachable),
//! then watch until SIGTERM or SIGINT. `/readyz` answers 200 once the KubeVirt, DaemonSet and pod
//! caches have listed. The process never writes to the cluster; its RBAC is get/list/watch.

use super::{EndpointArgs, KubeArgs, describe, shutdown_signal};
use anyhow::Context;
use canary_kube_adapter::Observer;
use canary_kubevirt::{ObserveConfig, ObserveError};
use daemonset_canary::metrics::Metrics;
use daemonset_canary::metrics::kubevirt as kubevirt_metrics;

/// Arguments of `observe-kubevirt`.
#[derive(Debug, clap::Args)]
pub struct ObserveKubeVirtArgs {
    #[command(flatten)]
    kube: KubeArgs,
    /// Only watch this namespace (KubeVirt object, virt-handler and its pods). Default: all
    /// namespaces, which is what virt-operator's own pod cache sees.
    #[arg(long, short = 'n', env = "CANARY_NAMESPACE")]
    namespace: Option<String>,
    #[command(flatten)]
    endpoints: EndpointArgs,
}

/// Runs until SIGTERM or SIGINT.
pub async fn run(args: ObserveKubeVirtArgs) -> anyhow::Result<()> {
    let connection = args.kube.connect().await?;
    let metrics = Metrics::observed().context("cannot create the metrics")?;
    let server = args.endpoints.serve(metrics).await?;
    let metrics_addr = server.addr;
    tracing::info!(
        api = %connection.url,
        watching = args.namespace.as_deref().unwrap_or("all namespaces"),
        metrics = %metrics_addr,
        probes = %server.health_addr.unwrap_or(metrics_addr),
        "observing KubeVirt (read-only)"
    );
    let config = ObserveConfig {
        namespace: args.namespace.clone(),
        observer: Observer::new(),
        server_url: Some(connection.url.clone()),
        ..ObserveConfig::default()
    };
    let result = kubevirt_metrics::run(
        connection.client.clone(),
        server.metrics.clone(),
        server.health.clone(),
        config,
        shutdown_signal(),
    )
    .await
    .map_err(|error| explain(error, &connection.url));
    tracing::info!("observer stopped");
    server.stop().await;
    result
}

/// One line for the start-up failures a user can act on.
fn explain(error: anyhow::Error, url: &str) -> anyhow::Error {
    match error.downcast_ref::<ObserveError>() {
        Some(ObserveError::KubeVirtCrdMissing) => anyhow::anyhow!(
            "KubeVirt is not installed in the cluster at {url}: the kubevirts.kubevirt.io CRD (v1) is not served"
        ),
        Some(ObserveError::Kube(kube_error)) => anyhow::anyhow!(describe(kube_error, url)),
        _ => error,
    }
}
