//! The subcommands' front ends: flags, wiring and what they print, one module each (`run`,
//! `demo`, `status`, `get`, `promote`, `pause` and `resume`, `retry`, `rollback` (`abort`, `undo`
//! and `history`), `wait`, `restart` and `set image` (`edit`), `crd`, `observe-kubevirt`, `sim serve`, `sim kwok`); `verb` holds what the verbs that
//! steer a rollout share. The building blocks they wire
//! (metrics, server, bridge, scenarios) live in the library.
//!
//! Shared here: the kubeconfig flags ([`KubeArgs`], flattened into every command that talks to
//! a cluster), the endpoint address of the long-running commands ([`EndpointArgs`]), the
//! connection and its one-line error messages, and the one shutdown signal.

pub mod crd;
#[cfg(feature = "simulator")]
pub mod demo;
pub mod edit;
pub mod get;
pub mod object;
pub mod observe_kubevirt;
pub mod pause;
pub mod promote;
pub mod retry;
pub mod rollback;
pub mod run;
#[cfg(feature = "simulator")]
pub mod sim_kwok;
#[cfg(feature = "simulator")]
pub mod sim_serve;
pub mod status;
pub mod verb;
pub mod wait;

use anyhow::Context;
use canary_kube_adapter::error::{chain, transport_failure};
use kube::config::{KubeConfigOptions, Kubeconfig};
use std::path::{Path, PathBuf};

/// How to reach the cluster: the flags every cluster command shares.
#[derive(Debug, Clone, clap::Args)]
pub struct KubeArgs {
    /// Kubeconfig file to use. Default: KUBECONFIG, then ~/.kube/config, then the in-cluster
    /// service account.
    #[arg(long, env = "CANARY_KUBECONFIG", value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context to use (default: the current context).
    #[arg(long, env = "CANARY_CONTEXT")]
    pub context: Option<String>,
}

/// The endpoint flags of the long-running commands (`run`, `observe-kubevirt`).
#[derive(Debug, Clone, clap::Args)]
pub struct EndpointArgs {
    /// Address of the /metrics, /healthz and /readyz endpoints.
    /// A host name is resolved once at start (`localhost:8080`); port 0 picks a free port.
    #[arg(long, env = "CANARY_METRICS_ADDR", default_value = "0.0.0.0:8080", value_parser = daemonset_canary::listen::parse_listen_addr)]
    pub metrics_addr: std::net::SocketAddr,
    /// Address of a listener of their own for /healthz and /readyz (the kubelet's probes), so
    /// that no number of metrics clients can keep them waiting. Unset: the probes are answered
    /// on the metrics address only. The manifests in deploy/ set `:8081`.
    #[arg(long, env = "CANARY_HEALTH_ADDR", value_parser = daemonset_canary::listen::parse_listen_addr)]
    pub health_addr: Option<std::net::SocketAddr>,
}

impl EndpointArgs {
    /// Serves `metrics` (and the probes) on these addresses in the background.
    pub async fn serve(
        &self,
        metrics: daemonset_canary::metrics::Metrics,
    ) -> anyhow::Result<daemonset_canary::server::BackgroundServer> {
        daemonset_canary::server::BackgroundServer::start(
            self.metrics_addr,
            self.health_addr,
            metrics,
        )
        .await
    }
}

impl KubeArgs {
    /// Connects as these flags say (see [`connect`]).
    pub async fn connect(&self) -> anyhow::Result<Connection> {
        connect(self.kubeconfig.as_deref(), self.context.as_deref()).await
    }
}

/// A client and the API server it talks to.
pub struct Connection {
    /// The client.
    pub client: kube::Client,
    /// The API server's URL, for error messages.
    pub url: String,
}

/// Connects with `kubeconfig` when given, else the default chain: the files `KUBECONFIG` names,
/// `~/.kube/config`, then the in-cluster service account. Nothing is sent yet.
///
/// A kubeconfig that does not exist is said so, once, with its path: kube's own error for it
/// falls through to the in-cluster config and repeats the cause three times.
pub async fn connect(
    kubeconfig: Option<&Path>,
    context: Option<&str>,
) -> anyhow::Result<Connection> {
    let options = KubeConfigOptions {
        context: context.map(str::to_owned),
        ..KubeConfigOptions::default()
    };
    let config = match kubeconfig_files(kubeconfig)? {
        Some(files) => {
            let merged = read_kubeconfigs(&files)?;
            kube::Config::from_custom_kubeconfig(merged, &options)
                .await
                .with_context(|| format!("cannot use the kubeconfig {}", join_paths(&files)))?
        }
        None if context.is_some() => anyhow::bail!(
            "--context needs a kubeconfig, and there is none (no KUBECONFIG, no ~/.kube/config); pass --kubeconfig PATH"
        ),
        None => kube::Config::incluster().map_err(|_| {
            anyhow::anyhow!(
                "no Kubernetes configuration found (no KUBECONFIG, no ~/.kube/config, not in a cluster); pass --kubeconfig PATH"
            )
        })?,
    };
    let url = config.cluster_url.to_string();
    let client = kube::Client::try_from(config).context("cannot build a Kubernetes client")?;
    Ok(Connection { client, url })
}

/// The kubeconfig files to read, as kubectl picks them: `--kubeconfig`, else every file
/// `KUBECONFIG` names that exists (kubectl skips the missing ones; all missing is an error),
/// else `~/.kube/config` when it exists; `None` for the in-cluster config.
fn kubeconfig_files(flag: Option<&Path>) -> anyhow::Result<Option<Vec<PathBuf>>> {
    if let Some(path) = flag {
        if !path.exists() {
            anyhow::bail!("the kubeconfig {} does not exist", path.display());
        }
        return Ok(Some(vec![path.to_owned()]));
    }
    if let Some(value) = std::env::var_os("KUBECONFIG") {
        let named: Vec<PathBuf> = std::env::split_paths(&value)
            .filter(|p| !p.as_os_str().is_empty())
            .collect();
        if !named.is_empty() {
            let existing: Vec<PathBuf> = named.iter().filter(|p| p.exists()).cloned().collect();
            return match (existing.is_empty(), named.len()) {
                (false, _) => Ok(Some(existing)),
                (true, 1) => anyhow::bail!(
                    "KUBECONFIG names {}, which does not exist",
                    join_paths(&named)
                ),
                (true, _) => anyhow::bail!(
                    "KUBECONFIG names {}, none of which exists",
                    join_paths(&named)
                ),
            };
        }
    }
    let home = std::env::var_os("HOME").map(|home| Path::new(&home).join(".kube/config"));
    Ok(home.filter(|path| path.exists()).map(|path| vec![path]))
}

/// The files merged the way kubectl merges them (the first to set a value wins).
fn read_kubeconfigs(files: &[PathBuf]) -> anyhow::Result<Kubeconfig> {
    let mut merged = Kubeconfig::default();
    for path in files {
        let file = Kubeconfig::read_from(path).map_err(|e| {
            anyhow::anyhow!(
                "cannot read the kubeconfig {}: {}",
                path.display(),
                root_cause(&e)
            )
        })?;
        merged = merged
            .merge(file)
            .with_context(|| format!("cannot merge the kubeconfig {}", path.display()))?;
    }
    Ok(merged)
}

fn join_paths(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// One line saying why a request to the API server failed, without kube's Debug dump.
pub fn describe(error: &kube::Error, url: &str) -> String {
    match error {
        kube::Error::Api(status) if status.code == 404 => format!(
            "the CanaryDaemonSet CRD is not installed in the cluster at {url} ({}); install it with `{} crd | kubectl apply -f -`",
            status.message,
            daemonset_canary::format::command_name()
        ),
        kube::Error::Api(status) if status.code == 401 || status.code == 403 => format!(
            "the API server at {url} refused the request ({} {}): {}",
            status.code, status.reason, status.message
        ),
        kube::Error::Api(status) => format!(
            "the API server at {url} answered {} {}: {}",
            status.code, status.reason, status.message
        ),
        other => format!(
            "cannot reach the Kubernetes API at {url}: {}",
            transport_failure(other).unwrap_or_else(|| chain(other))
        ),
    }
}

/// The innermost cause: kube's config errors repeat their source in their own message.
fn root_cause(error: &(dyn std::error::Error + 'static)) -> String {
    let mut innermost = error;
    while let Some(source) = innermost.source() {
        innermost = source;
    }
    innermost.to_string()
}

/// Completes on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGTERM; only SIGINT stops the process");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        result = tokio::signal::ctrl_c() => {
            if let Err(error) = result {
                tracing::warn!(%error, "cannot listen for SIGINT");
                std::future::pending::<()>().await;
            }
        }
        () = terminate => {}
    }
}
