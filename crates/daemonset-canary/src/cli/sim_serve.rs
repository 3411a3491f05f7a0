//! `daemonset-canary sim serve`: the simulated cluster over HTTP, until interrupted.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use super::shutdown_signal;
use anyhow::Context;
use canary_sim::Sim;

/// Arguments of `sim serve`.
#[derive(Debug, clap::Args)]
pub struct SimServeArgs {
    /// Nodes in the simulated cluster.
    #[arg(long, default_value_t = 3)]
    nodes: u32,
    /// Where to write the kubeconfig (written once the server accepts connections).
    #[arg(long)]
    kubeconfig: PathBuf,
    /// Address to listen on; port 0 picks a free port.
    #[arg(long, default_value = "127.0.0.1:0")]
    addr: SocketAddr,
    /// Seed of the simulator's random choices.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

/// Serves until SIGINT or SIGTERM.
pub async fn run(args: SimServeArgs) -> anyhow::Result<()> {
    let sim = Sim::builder()
        .nodes(args.nodes)
        .seed(args.seed)
        .epoch(k8s_openapi::jiff::Timestamp::now())
        .build()
        .context("cannot build the simulated cluster")?;
    let served = sim
        .serve(args.addr)
        .await
        .with_context(|| format!("cannot listen on {}", args.addr))?;
    write_atomically(&args.kubeconfig, &served.kubeconfig)?;
    tracing::info!(
        addr = %served.addr,
        kubeconfig = %args.kubeconfig.display(),
        nodes = args.nodes,
        "simulated cluster serving"
    );
    shutdown_signal().await;
    tracing::info!("shutting down");
    served.shutdown();
    Ok(())
}

/// Writes through a temporary file and a rename, so a reader never sees half a kubeconfig.
fn write_atomically(path: &Path, contents: &str) -> anyhow::Result<()> {
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(".tmp");
    let temporary = PathBuf::from(temporary);
    std::fs::write(&temporary, contents)
        .with_context(|| format!("cannot write {}", temporary.display()))?;
    std::fs::rename(&temporary, path)
        .with_context(|| format!("cannot move the kubeconfig to {}", path.display()))
}
