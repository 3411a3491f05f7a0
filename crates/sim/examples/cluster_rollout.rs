//! Simulates a full rolling update of a DaemonSet on a large cluster in virtual time and
//! prints the wall time it took and the process's peak memory.
//!
//! ```text
//! cargo run --release -p canary-sim --example cluster_rollout -- \
//!     [nodes] [maxUnavailable] [store history] [store channel capacity]
//! ```
//! (defaults: 5000 nodes, `10%`, and the store's defaults). The store keeps `history` past
//! events for watch resumption and up to `channel capacity` undelivered events per subscriber;
//! both hold whole objects, so they weigh on the peak memory as much as the live objects.

use std::time::{Duration, Instant};

use canary_sim::cluster::{Cluster, ClusterConfig};
use canary_sim::store::{DEFAULT_CHANNEL_CAPACITY, DEFAULT_HISTORY};
use canary_sim::{SimClock, Store};
use canary_testkit::agent_daemonset;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// Peak resident set size of this process, from `/proc/self/status` (Linux).
fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn rolled_out(store: &Store, nodes: i32) -> bool {
    let Some(ds) = store.get::<DaemonSet>(Some("default"), "agent") else {
        return false;
    };
    let status = ds.status.unwrap_or_default();
    status.observed_generation == ds.metadata.generation
        && status.desired_number_scheduled == nodes
        && status.updated_number_scheduled == Some(nodes)
        && status.number_available == Some(nodes)
}

async fn wait_rolled_out(
    store: &Store,
    cluster: &Cluster,
    nodes: i32,
) -> Result<(), Box<dyn std::error::Error>> {
    while !rolled_out(store, nodes) {
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    cluster.wait_idle().await?;
    Ok(())
}

#[tokio::main(flavor = "current_thread", start_paused = true)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let nodes: u32 = args.next().map(|a| a.parse()).transpose()?.unwrap_or(5000);
    let max_unavailable = match args.next() {
        Some(v) if v.ends_with('%') => IntOrString::String(v),
        Some(v) => IntOrString::Int(v.parse()?),
        None => IntOrString::String("10%".to_owned()),
    };
    let history: usize = args
        .next()
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(DEFAULT_HISTORY);
    let capacity: usize = args
        .next()
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(DEFAULT_CHANNEL_CAPACITY);
    let desired = i32::try_from(nodes)?;

    let wall = Instant::now();
    let store = Store::with_limits(SimClock::new(), history, capacity);
    let cluster = Cluster::start(
        store.clone(),
        ClusterConfig {
            nodes,
            seed: 1,
            ..ClusterConfig::default()
        },
    );
    store.create(&agent_daemonset(
        "default",
        "agent",
        "agent:v1",
        max_unavailable.clone(),
    ))?;
    let virtual_start = tokio::time::Instant::now();
    wait_rolled_out(&store, &cluster, desired).await?;
    let created = wall.elapsed();
    let created_virtual = virtual_start.elapsed();
    let rss_after_create = peak_rss_kib();

    let mut ds = store
        .get::<DaemonSet>(Some("default"), "agent")
        .ok_or("daemonset vanished")?;
    if let Some(c) = ds
        .spec
        .as_mut()
        .and_then(|s| s.template.spec.as_mut())
        .and_then(|s| s.containers.first_mut())
    {
        c.image = Some("agent:v2".to_owned());
    }
    store.update(&ds)?;
    let rollout_wall = Instant::now();
    let rollout_virtual = tokio::time::Instant::now();
    wait_rolled_out(&store, &cluster, desired).await?;
    println!(
        "nodes: {nodes}, maxUnavailable: {max_unavailable:?}, store history {history}, channel capacity {capacity}"
    );
    println!(
        "initial rollout: {:.2?} wall, {:.0?} virtual",
        created, created_virtual
    );
    println!(
        "rolling update:  {:.2?} wall, {:.0?} virtual",
        rollout_wall.elapsed(),
        rollout_virtual.elapsed()
    );
    println!(
        "store objects: {}, resourceVersion: {}",
        store.object_count(),
        store.resource_version()
    );
    println!(
        "peak RSS (VmHWM): {} KiB after the initial rollout, {} KiB at the end",
        rss_after_create.unwrap_or(0),
        peak_rss_kib().unwrap_or(0)
    );
    cluster.shutdown();
    Ok(())
}
