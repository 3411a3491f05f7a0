//! Resident memory of the simulator's neighbour pods (`ClusterConfig::neighbours_per_node`):
//! a cluster of N nodes is built, then its K neighbour pods per node are created, started
//! (already running and ready: one create and one status write each) and kept; the growth of
//! the resident memory, divided by N×K, is what one neighbour pod costs: its object in the
//! store, the cluster task's state of it, and its share of the watch history (the store's
//! default, 10,000 events, holding old versions of objects). Linux only (reads
//! /proc/self/statm).
//!
//! `cargo run --release -p canary-sim --example neighbour_memory -- [nodes] [per node]`
//! (defaults: 5,000 nodes, 10 per node).

use std::time::Instant;

use canary_sim::Sim;
use canary_sim::cluster::{ClusterConfig, NEIGHBOURS_NAMESPACE};
use k8s_openapi::api::core::v1::Pod;

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let nodes: u32 = args.next().map(|n| n.parse()).transpose()?.unwrap_or(5000);
    let per_node: u32 = args.next().map(|n| n.parse()).transpose()?.unwrap_or(10);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let sim = Sim::builder()
            .cluster_config(ClusterConfig {
                neighbours_per_node: per_node,
                ..ClusterConfig::default()
            })
            .nodes(nodes)
            .build()?;
        // Cluster::start creates the nodes at once; the neighbours are created by the cluster
        // task, which has not run yet.
        let before = canary_testkit::resident_bytes();
        let started = Instant::now();
        sim.cluster().settle().await?;
        let elapsed = started.elapsed();
        let after = canary_testkit::resident_bytes();
        let pods = sim.store().list::<Pod>(Some(NEIGHBOURS_NAMESPACE));
        let ready = pods
            .iter()
            .filter(|p| {
                p.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
            })
            .count();
        let json_bytes = pods
            .first()
            .map(|p| serde_json::to_vec(p).map(|v| v.len()))
            .transpose()?
            .unwrap_or(0);
        let count = pods.len().max(1) as u64;
        let grown = after.saturating_sub(before);
        println!(
            "{nodes} nodes x {per_node} neighbours: {} pods ({ready} ready, {json_bytes} bytes of JSON each) created and started in {:.1} s; resident memory grew by {:.1} MiB, {} bytes per neighbour pod",
            pods.len(),
            elapsed.as_secs_f64(),
            grown as f64 / (1024.0 * 1024.0),
            grown / count
        );
        anyhow::Ok(())
    })
}
