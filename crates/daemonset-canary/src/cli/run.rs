//! `daemonset-canary run`: the controller, its metrics and health endpoints, leader election and a
//! graceful stop.
//!
//! Order of events: bind the metrics address (so `/healthz` answers at once), check that the API
//! server answers and the CRD is installed (one clear error line otherwise), mark `/readyz` ready,
//! then run the controller until SIGTERM or SIGINT. On a signal the controller stops taking new
//! work, lets the reconciles in flight finish their writes, releases the lease, and the process
//! exits 0.
//!
//! `/readyz` semantics: 200 once the API server answered and the CRD is installed, on the leader
//! and on a standby replica alike. A standby is healthy, it only waits for the lease; taking it out
//! of the Service's endpoints would only hide its metrics (`canary_leader 0`).

use super::{Connection, EndpointArgs, KubeArgs, describe, shutdown_signal};
use anyhow::Context;
use canary_analysis::AllowedAddresses;
use canary_kube_adapter::notify::{Notifier, Receivers, RetryPolicy};
use canary_kube_adapter::scope::api;
use canary_kube_adapter::{CanaryDaemonSet, ControllerConfig, LeaderElection, Observer};
use daemonset_canary::metrics::Metrics;
use daemonset_canary::metrics::{Mode, bridge};
use kube::api::ListParams;
use std::sync::Arc;
use std::time::Duration;

/// How long the first request to the API server may take before `run` gives up.
const PREFLIGHT_TIMEOUT: Duration = Duration::from_secs(20);

/// Arguments of `run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    #[command(flatten)]
    kube: KubeArgs,
    /// Only watch CanaryDaemonSets (and their DaemonSets and pods) in this namespace. Default: all
    /// namespaces.
    #[arg(long, short = 'n', env = "CANARY_NAMESPACE")]
    namespace: Option<String>,
    #[command(flatten)]
    endpoints: EndpointArgs,
    /// Only run the controller while this replica holds a Lease, so several replicas can run and
    /// exactly one acts. Required with more than one replica.
    #[arg(long, env = "CANARY_LEADER_ELECTION")]
    leader_election: bool,
    /// Name of the Lease.
    #[arg(long, env = "CANARY_LEASE_NAME", default_value = "daemonset-canary")]
    lease_name: String,
    /// Namespace of the Lease. Default: POD_NAMESPACE, else the kubeconfig's namespace.
    #[arg(long, env = "CANARY_LEASE_NAMESPACE")]
    lease_namespace: Option<String>,
    /// Lease duration in seconds: how long a vanished leader blocks the standby. The leader stops
    /// writing two thirds of it after its last renewal if it cannot renew (a frozen or cut-off
    /// leader writes nothing once a standby may have taken over), and renews every sixth.
    #[arg(long, env = "CANARY_LEASE_DURATION_SECONDS", default_value_t = 15)]
    lease_duration_seconds: u64,
    /// This replica's identity in the Lease and in events. Default: POD_NAME, else host name and
    /// process id.
    #[arg(long, env = "CANARY_IDENTITY")]
    identity: Option<String>,
    /// Field manager of every write (and the reporter of events).
    #[arg(long, env = "CANARY_FIELD_MANAGER", default_value = "daemonset-canary")]
    field_manager: String,
    /// Reconciles running at once (0: unbounded; one object is never reconciled twice at once).
    #[arg(long, env = "CANARY_CONCURRENCY", default_value_t = 0)]
    concurrency: u16,
    /// An analysis address the controller may query (and send a bearerTokenSecret to): a URL
    /// prefix of scheme, host, port and path, such as
    /// http://prometheus-k8s.monitoring.svc:9090, compared by parsed parts. Repeatable; the
    /// environment variable takes several, comma-separated. `*` allows any address: only when
    /// whoever may create a CanaryDaemonSet may also make the controller's network requests.
    /// With none, every spec.analysis is refused (InvalidSpec).
    #[arg(
        long = "allow-analysis-address",
        env = "CANARY_ALLOW_ANALYSIS_ADDRESS",
        value_name = "PREFIX",
        value_delimiter = ','
    )]
    allow_analysis_address: Vec<String>,
    /// The notification receivers (a YAML file, docs/notifications.md): the only addresses a
    /// CanaryDaemonSet's spec.notifications can make the controller send to. Without it, a
    /// subscription is a Warning event on its object and nothing is sent.
    #[arg(long, env = "CANARY_NOTIFICATION_RECEIVERS", value_name = "FILE")]
    notification_receivers: Option<std::path::PathBuf>,
    /// The namespace of the receivers' Secrets (urlSecret, headersSecret): the controller's
    /// own. Default: POD_NAMESPACE, else the kubeconfig's namespace.
    #[arg(long, env = "CANARY_NOTIFICATION_NAMESPACE")]
    notification_namespace: Option<String>,
}

/// Runs until SIGTERM or SIGINT.
pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    let connection = args.kube.connect().await?;
    let metrics = Metrics::new().context("cannot create the metrics")?;
    let server = args.endpoints.serve(metrics).await?;
    let (metrics, metrics_addr) = (server.metrics.clone(), server.addr);

    preflight(&connection, args.namespace.as_deref()).await?;
    server.health.set_started();
    let config = ControllerConfig {
        health: server.health.clone(),
        ..controller_config(&args, &connection, Observer::new())?
    };
    for receiver in config.notifier.receiver_names() {
        metrics.notifications_known(&receiver);
    }
    tracing::info!(
        api = %connection.url,
        watching = args.namespace.as_deref().unwrap_or("all namespaces"),
        metrics = %metrics_addr,
        probes = %server.health_addr.unwrap_or(metrics_addr),
        leader_election = args.leader_election,
        "controller starting"
    );
    let bridge = tokio::spawn(bridge::run(
        config.observer.reports(),
        metrics,
        Mode::Driven,
    ));
    let result = canary_kube_adapter::run(connection.client.clone(), config, shutdown_signal())
        .await
        .context("the controller stopped with an error");
    tracing::info!("controller stopped");
    bridge.abort();
    server.stop().await;
    result
}

/// One cheap request that fails the way the controller would: unreachable server, missing CRD,
/// missing permission.
async fn preflight(connection: &Connection, namespace: Option<&str>) -> anyhow::Result<()> {
    let cds = api::<CanaryDaemonSet>(&connection.client, namespace);
    let params = ListParams::default().limit(1);
    match tokio::time::timeout(PREFLIGHT_TIMEOUT, cds.list_metadata(&params)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(error)) => Err(anyhow::anyhow!(describe(&error, &connection.url))),
        Err(_) => Err(anyhow::anyhow!(
            "the Kubernetes API at {} did not answer within {}s",
            connection.url,
            PREFLIGHT_TIMEOUT.as_secs()
        )),
    }
}

fn controller_config(
    args: &RunArgs,
    connection: &Connection,
    observer: Observer,
) -> anyhow::Result<ControllerConfig> {
    let identity = args
        .identity
        .clone()
        .or_else(|| non_empty_env("POD_NAME"))
        .unwrap_or_else(default_identity);
    let leader_election = args.leader_election.then(|| {
        let namespace = args
            .lease_namespace
            .clone()
            .or_else(|| non_empty_env("POD_NAMESPACE"))
            .unwrap_or_else(|| connection.client.default_namespace().to_owned());
        LeaderElection {
            lease_name: args.lease_name.clone(),
            duration_seconds: args.lease_duration_seconds,
            grace_seconds: (args.lease_duration_seconds / 3).max(1),
            ..LeaderElection::new(namespace, identity.clone())
        }
    });
    if args.lease_duration_seconds < 3 && args.leader_election {
        anyhow::bail!("--lease-duration-seconds must be at least 3");
    }
    let allowed =
        AllowedAddresses::from_flags(args.allow_analysis_address.iter().map(String::as_str))
            .context("--allow-analysis-address (CANARY_ALLOW_ANALYSIS_ADDRESS)")?;
    if allowed.is_none() {
        tracing::info!(
            "no analysis address is allowed (--allow-analysis-address): a CanaryDaemonSet with spec.analysis ends in InvalidSpec"
        );
    }
    let notifier = notifier(args, connection, &observer)?;
    Ok(ControllerConfig {
        notifier: Arc::new(notifier),
        namespace: args.namespace.clone(),
        field_manager: args.field_manager.clone(),
        instance: Some(identity),
        leader_election,
        observer,
        concurrency: args.concurrency,
        server_url: Some(connection.url.clone()),
        allowed_analysis_addresses: Arc::new(allowed),
        ..ControllerConfig::default()
    })
}

/// The notifier of `--notification-receivers`, its delivery task started; a disabled one
/// without the flag.
fn notifier(
    args: &RunArgs,
    connection: &Connection,
    observer: &Observer,
) -> anyhow::Result<Notifier> {
    let Some(path) = &args.notification_receivers else {
        return Ok(Notifier::disabled());
    };
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("--notification-receivers: cannot read {}", path.display()))?;
    let receivers = Receivers::from_yaml(&text)
        .with_context(|| format!("--notification-receivers {}", path.display()))?;
    let namespace = args
        .notification_namespace
        .clone()
        .or_else(|| non_empty_env("POD_NAMESPACE"))
        .unwrap_or_else(|| connection.client.default_namespace().to_owned());
    tracing::info!(receivers = ?receivers.names().collect::<Vec<_>>(), secrets_namespace = %namespace, "notification receivers");
    Ok(Notifier::start(
        connection.client.clone(),
        namespace,
        receivers,
        observer.clone(),
        RetryPolicy::default(),
    ))
}

fn non_empty_env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|value| !value.is_empty())
}

/// `host-pid`: unique enough for a replica outside Kubernetes.
fn default_identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| non_empty_env("HOSTNAME"))
        .unwrap_or_else(|| "daemonset-canary".to_owned());
    format!("{host}-{}", std::process::id())
}
