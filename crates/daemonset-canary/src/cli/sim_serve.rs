//! `daemonset-canary sim serve`: the simulated cluster over HTTP, until interrupted.
//!
//! - `--speed N` runs the simulated kubelets and DaemonSet controller N times faster in real
//!   time (every delay of the cluster model divided by N), so a walkthrough of a 20-node
//!   rollout with kubectl takes seconds. The controller (`run`) is not part of the simulator:
//!   it reacts to watch events, which come N times sooner.
//! - The API is plain HTTP without authentication: anyone who reaches it can change the
//!   cluster. It listens on loopback unless `--insecure-listen-anywhere` says otherwise.
//! - The kubeconfig is written to an exclusively created temporary file next to it (never an
//!   existing file or a symlink planted there) and renamed into place, so a reader never sees
//!   half of it and nothing else is overwritten on the way.
//! - `--state FILE` keeps the cluster across restarts, as etcd keeps it across a restart of
//!   kube-apiserver: a snapshot and a journal of every change ([`state`]), loaded at start.
//!   Started again, even after SIGKILL, the simulator serves the same objects and its
//!   `resourceVersion`s continue; a watch from before the restart gets 410 Gone, as from a
//!   restarted kube-apiserver's fresh watch cache (see `canary_sim::store::SavedStore`).
//! - Without `--state`, a restart is a new cluster; its objects' uids still differ from those
//!   of any earlier run (they are salted with the start time), as a new cluster's would.
//! - The simulator's stand-in Prometheus (`canary_sim::prometheus`: each node's error ratio from
//!   the pods it runs, `sim.canary.daemonset.dev/error-ratio`) answers the instant-query API on
//!   `--prometheus-addr`, for a CanaryDaemonSet's `spec.analysis`. Its URL is printed on stdout
//!   (`prometheus: http://127.0.0.1:PORT`) and, with `--prometheus-url-file`, written to that
//!   file before the kubeconfig, so a script that waits for the kubeconfig can read it.

use std::io::Write;
use std::net::SocketAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::shutdown_signal;
use anyhow::Context;
use canary_sim::cluster::{ClusterConfig, KubeletConfig};
use canary_sim::{Sim, SimPrometheus};
use daemonset_canary::listen::{bind_error, parse_listen_addr};

/// Arguments of `sim serve`.
#[derive(Debug, clap::Args)]
pub struct SimServeArgs {
    /// Nodes in the simulated cluster.
    #[arg(long, default_value_t = 3)]
    nodes: u32,
    /// Where to write the kubeconfig (written once the server accepts connections).
    #[arg(long)]
    kubeconfig: PathBuf,
    /// Address to listen on; port 0 picks a free port. Loopback only, unless
    /// --insecure-listen-anywhere.
    #[arg(long, default_value = "127.0.0.1:0", value_parser = parse_listen_addr)]
    addr: SocketAddr,
    /// Allow --addr on a non-loopback address. The simulated API server is plain HTTP with no
    /// authentication: anyone who can reach the address can change the cluster.
    #[arg(long)]
    insecure_listen_anywhere: bool,
    /// Run the simulated kubelets and DaemonSet controller this many times faster than real
    /// time (pods start, become ready and crash N times sooner).
    #[arg(long, default_value_t = 1.0, value_parser = parse_speed)]
    speed: f64,
    /// Seed of the simulator's random choices.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Keep the cluster in this file (and journals beside it, FILE.journal-N): loaded at start
    /// if it exists; every change is journaled before it is acknowledged, so a restart with the
    /// same file, even after SIGKILL, continues where the last run stopped, resourceVersions
    /// included.
    #[arg(long, value_name = "FILE")]
    state: Option<PathBuf>,
    /// Append a line per request answered to FILE, in kube-apiserver's audit format (level
    /// Metadata): what a client did, counted as on a real API server.
    #[arg(long, value_name = "FILE")]
    audit_log: Option<PathBuf>,
    /// Delay from a pod's creation on a node to its containers running (the kubelet model's
    /// start latency; `cargo xtask cluster up` has the same flag for KWOK).
    #[arg(long, value_name = "MS", default_value_t = 2000)]
    start_delay_ms: u64,
    /// Delay from running to ready for `healthy` pods.
    #[arg(long, value_name = "MS", default_value_t = 3000)]
    ready_delay_ms: u64,
    /// Plain pods on every node (namespace `neighbours`), ready from the start: what a pod
    /// with the behaviour `breaks-neighbours=<duration>` breaks.
    #[arg(long, default_value_t = 0)]
    neighbours_per_node: u32,
    /// Address of the simulated Prometheus (the instant-query API, `/api/v1/query`); port 0
    /// picks a free port. Loopback only, unless --insecure-listen-anywhere.
    #[arg(long, default_value = "127.0.0.1:0", value_parser = parse_listen_addr)]
    prometheus_addr: SocketAddr,
    /// Also write the simulated Prometheus' URL (`http://ADDR`) to this file, before the
    /// kubeconfig.
    #[arg(long)]
    prometheus_url_file: Option<PathBuf>,
}

/// How often the `--state` snapshot is written again while the cluster changes (every change
/// is in the journal at once).
pub const CHECKPOINT_INTERVAL: std::time::Duration = std::time::Duration::from_secs(10);

mod state;

/// Serves until SIGINT or SIGTERM.
pub async fn run(args: SimServeArgs) -> anyhow::Result<()> {
    if !args.addr.ip().is_loopback() && !args.insecure_listen_anywhere {
        anyhow::bail!(
            "refusing to listen on {}: the simulated API server is plain HTTP without authentication, so anyone who reaches it can change the cluster; listen on 127.0.0.1 (the default), or pass --insecure-listen-anywhere",
            args.addr
        );
    }
    if !args.prometheus_addr.ip().is_loopback() && !args.insecure_listen_anywhere {
        anyhow::bail!(
            "refusing to serve the simulated Prometheus on {}: it is plain HTTP without authentication; listen on 127.0.0.1 (the default), or pass --insecure-listen-anywhere",
            args.prometheus_addr
        );
    }
    let now = k8s_openapi::jiff::Timestamp::now();
    let mut builder = Sim::builder()
        .cluster_config(ClusterConfig {
            speed: args.speed,
            kubelet: KubeletConfig {
                start_latency: std::time::Duration::from_millis(args.start_delay_ms),
                ready_delay: std::time::Duration::from_millis(args.ready_delay_ms),
                ..KubeletConfig::default()
            },
            ..ClusterConfig::default()
        })
        .nodes(args.nodes)
        .seed(args.seed)
        .neighbours_per_node(args.neighbours_per_node)
        .epoch(now)
        // Unique per start: a new cluster never hands out an old cluster's uids.
        .uid_salt(
            u64::try_from(now.as_nanosecond()).unwrap_or_default() ^ u64::from(std::process::id()),
        );
    let files = args.state.clone().map(state::StateFiles::new);
    if let Some(files) = &files {
        let restored = files.load()?;
        let start_version = restored.as_ref().map_or(0, |saved| saved.resource_version);
        if let Some(saved) = restored {
            tracing::info!(
                state = %files.snapshot().display(),
                resource_version = saved.resource_version,
                objects = saved.objects.len(),
                "cluster restored"
            );
            builder = builder.restore(saved);
        }
        builder = builder.journal(files.sink(start_version)?);
    }
    let sim = builder
        .build()
        .context("cannot build the simulated cluster")?;
    if let Some(files) = &files {
        files.checkpoint(sim.store(), true)?;
    }
    let served = match &args.audit_log {
        Some(path) => {
            let audit = canary_sim::audit::AuditLog::append_to(path)
                .with_context(|| format!("cannot open {}", path.display()))?;
            sim.serve_recording(args.addr, std::sync::Arc::new(audit))
                .await
        }
        None => sim.serve(args.addr).await,
    }
    .map_err(|error| anyhow::anyhow!(bind_error(args.addr, &error)))?;
    let prometheus = SimPrometheus::new(sim.store().clone())
        .serve(args.prometheus_addr)
        .await
        .map_err(|error| anyhow::anyhow!(bind_error(args.prometheus_addr, &error)))?;
    if let Some(path) = &args.prometheus_url_file {
        write_atomically(path, format!("{}\n", prometheus.url()).as_bytes())?;
    }
    println!("prometheus: {}", prometheus.url());
    write_atomically(&args.kubeconfig, served.kubeconfig.as_bytes())?;
    tracing::info!(
        addr = %served.addr,
        kubeconfig = %args.kubeconfig.display(),
        prometheus = %prometheus.url(),
        nodes = args.nodes,
        speed = args.speed,
        "simulated cluster serving"
    );
    let (stop_checkpoints, checkpoints_stopped) = tokio::sync::oneshot::channel::<()>();
    let checkpoints = files.clone().map(|files| {
        tokio::spawn(checkpoint_while_changing(
            sim.store().clone(),
            files,
            checkpoints_stopped,
        ))
    });
    shutdown_signal().await;
    tracing::info!("shutting down");
    served.shutdown();
    sim.shutdown();
    if let (Some(checkpoints), Some(files)) = (checkpoints, &files) {
        // A checkpoint in progress finishes first: the last one comes last.
        let _ = stop_checkpoints.send(());
        let _ = checkpoints.await;
        let version = files.checkpoint(sim.store(), false)?;
        tracing::info!(state = %files.snapshot().display(), resource_version = version, "cluster saved");
    }
    Ok(())
}

/// A checkpoint (see [`state::StateFiles::checkpoint`]) every [`CHECKPOINT_INTERVAL`] in which
/// the cluster changed, until `stop`: it bounds the journal a restart replays.
async fn checkpoint_while_changing(
    store: canary_sim::Store,
    files: state::StateFiles,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) {
    let mut saved_at = Some(store.resource_version());
    let mut ticks = tokio::time::interval(CHECKPOINT_INTERVAL);
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            _ = &mut stop => return,
        }
        if saved_at == Some(store.resource_version()) {
            continue;
        }
        let (store, files) = (store.clone(), files.clone());
        // Encoding thousands of objects is blocking work.
        match tokio::task::spawn_blocking(move || files.checkpoint(&store, true)).await {
            Ok(Ok(version)) => saved_at = Some(version),
            Ok(Err(error)) => {
                tracing::warn!(error = %format!("{error:#}"), "cannot checkpoint the cluster");
            }
            Err(error) => tracing::warn!(%error, "the checkpoint task failed"),
        }
    }
}

/// `--speed`: a positive number (at most 1000, where a pod's whole life is milliseconds).
fn parse_speed(text: &str) -> Result<f64, String> {
    let speed: f64 = text
        .parse()
        .map_err(|_| format!("{text:?} is not a number"))?;
    if speed.is_finite() && speed > 0.0 && speed <= 1000.0 {
        Ok(speed)
    } else {
        Err(format!("{text} is not between 0 (excluded) and 1000"))
    }
}

/// Writes `contents` to `path` through a temporary file created exclusively beside it
/// (`O_CREAT|O_EXCL`, mode 0600) and renamed over `path`: a reader never sees half a
/// kubeconfig, and an existing file or symlink at the temporary name is never followed.
fn write_atomically(path: &Path, contents: &[u8]) -> anyhow::Result<()> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_owned(),
        _ => PathBuf::from("."),
    };
    let name = path
        .file_name()
        .with_context(|| format!("{} is not a file name", path.display()))?
        .to_string_lossy()
        .into_owned();
    let mut attempt = 0_u32;
    let (temporary, mut file) = loop {
        let candidate = dir.join(format!(".{name}.{}.{attempt}.tmp", std::process::id()));
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&candidate)
        {
            Ok(file) => break (candidate, file),
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists && attempt < 100 => {
                attempt += 1;
            }
            Err(error) => {
                return Err(error)
                    .with_context(|| format!("cannot create {}", candidate.display()));
            }
        }
    };
    let written = file
        .write_all(contents)
        .and_then(|()| file.sync_all())
        .with_context(|| format!("cannot write {}", temporary.display()))
        .and_then(|()| {
            std::fs::rename(&temporary, path)
                .with_context(|| format!("cannot move the new file to {}", path.display()))
        });
    if written.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kubeconfig_replaces_the_file_and_never_follows_a_planted_link() {
        let dir = std::env::temp_dir().join(format!("sim-serve-write-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("kubeconfig");
        std::fs::write(&path, "old").unwrap();
        // Someone plants a link where the first temporary file would go.
        let victim = dir.join("victim");
        std::fs::write(&victim, "keep me").unwrap();
        let planted = dir.join(format!(".kubeconfig.{}.0.tmp", std::process::id()));
        std::os::unix::fs::symlink(&victim, &planted).unwrap();
        write_atomically(&path, b"new").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me");
        let mode = std::fs::metadata(&path).unwrap().permissions();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
            0o600
        );
        let left: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".tmp") && !n.ends_with(".0.tmp"))
            .collect();
        assert!(left.is_empty(), "temporary files left: {left:?}");
    }

    #[test]
    fn speed_is_a_positive_number() {
        assert_eq!(parse_speed("10"), Ok(10.0));
        assert_eq!(parse_speed("2.5"), Ok(2.5));
        for bad in ["0", "-1", "nan", "inf", "fast", "5000"] {
            assert!(parse_speed(bad).is_err(), "{bad}");
        }
    }
}
