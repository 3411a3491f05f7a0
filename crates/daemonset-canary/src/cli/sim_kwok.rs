//! `daemonset-canary sim kwok`: plays canary-sim's pod behaviours on a real cluster whose nodes
//! are KWOK's, where KWOK's Stages cannot (`canary_sim::kwok`): a pod breaking its node
//! (`breaks-node`), reporting a node condition (`node-condition`) or breaking the pods beside
//! it (`breaks-neighbours`), node annotations set by hand, and image pulls with a per-node
//! cache (`sim.canary.daemonset.dev/pull`). `cargo xtask cluster up` runs it beside KWOK; it
//! writes node conditions, pod annotations and events, so it needs a kubeconfig allowed to.

use super::{KubeArgs, shutdown_signal};
use anyhow::Context;
use std::time::Duration;

/// Arguments of `sim kwok`.
#[derive(Debug, clap::Args)]
pub struct SimKwokArgs {
    #[command(flatten)]
    kube: KubeArgs,
    /// KWOK's delay from a pod's creation to its containers starting (`cargo xtask cluster up
    /// --start-delay-ms`): the image pulls begin then.
    #[arg(long, value_name = "MS", default_value_t = 2000)]
    start_delay_ms: u64,
}

/// Plays the behaviours until SIGINT or SIGTERM.
pub async fn run(args: SimKwokArgs) -> anyhow::Result<()> {
    let connection = args.kube.connect().await?;
    tracing::info!(server = %connection.url, "playing canary-sim's node and neighbour behaviours");
    tokio::select! {
        result = canary_sim::kwok::run(connection.client, Duration::from_millis(args.start_delay_ms)) => {
            result.with_context(|| format!("cannot watch the cluster at {}", connection.url))?;
        }
        () = shutdown_signal() => tracing::info!("shutting down"),
    }
    Ok(())
}
