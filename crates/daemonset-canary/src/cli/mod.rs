//! The subcommands' front ends: flags, wiring and what they print, one module each (`run`,
//! `demo`, `status`, `crd`, `observe-kubevirt`, `sim serve`). The building blocks they wire
//! (metrics, server, bridge, scenarios) live in the library.
//!
//! Shared here: the kubeconfig flags ([`KubeArgs`], flattened into every command that talks to
//! a cluster), the connection and its one-line error messages, and the one shutdown signal.

pub mod crd;
pub mod demo;
pub mod observe_kubevirt;
pub mod run;
pub mod sim_serve;
pub mod status;

use anyhow::Context;
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

/// Connects with `kubeconfig` when given, else the default chain: `KUBECONFIG`, `~/.kube/config`,
/// then the in-cluster service account. Nothing is sent yet.
pub async fn connect(
    kubeconfig: Option<&Path>,
    context: Option<&str>,
) -> anyhow::Result<Connection> {
    let config = match kubeconfig {
        Some(path) => {
            let file = Kubeconfig::read_from(path).map_err(|e| {
                anyhow::anyhow!(
                    "cannot read the kubeconfig {}: {}",
                    path.display(),
                    root_cause(&e)
                )
            })?;
            let options = KubeConfigOptions {
                context: context.map(str::to_owned),
                ..KubeConfigOptions::default()
            };
            kube::Config::from_custom_kubeconfig(file, &options)
                .await
                .with_context(|| format!("cannot use the kubeconfig {}", path.display()))?
        }
        None if context.is_some() => {
            let options = KubeConfigOptions {
                context: context.map(str::to_owned),
                ..KubeConfigOptions::default()
            };
            kube::Config::from_kubeconfig(&options)
                .await
                .context("cannot load the kubeconfig")?
        }
        None => kube::Config::infer().await.context(
            "no Kubernetes configuration found (no KUBECONFIG, no ~/.kube/config, not in a cluster); pass --kubeconfig PATH",
        )?,
    };
    let url = config.cluster_url.to_string();
    let client = kube::Client::try_from(config).context("cannot build a Kubernetes client")?;
    Ok(Connection { client, url })
}

/// One line saying why a request to the API server failed, without kube's Debug dump.
pub fn describe(error: &kube::Error, url: &str) -> String {
    match error {
        kube::Error::Api(status) if status.code == 404 => format!(
            "the CanaryDaemonSet CRD is not installed in the cluster at {url} ({}); install it with `daemonset-canary crd | kubectl apply -f -`",
            status.message
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
            error_chain(other)
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

/// kube's own Display of transport errors is short; the chain says what actually failed.
fn error_chain(error: &kube::Error) -> String {
    let mut parts = vec![error.to_string()];
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        let text = cause.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        source = cause.source();
    }
    parts.join(": ")
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
