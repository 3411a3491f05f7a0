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
use canary_sim::cluster::ClusterConfig;
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
    let sim = Sim::builder()
        .cluster_config(ClusterConfig {
            speed: args.speed,
            ..ClusterConfig::default()
        })
        .nodes(args.nodes)
        .seed(args.seed)
        .neighbours_per_node(args.neighbours_per_node)
        .epoch(k8s_openapi::jiff::Timestamp::now())
        .build()
        .context("cannot build the simulated cluster")?;
    let served = sim
        .serve(args.addr)
        .await
        .map_err(|error| anyhow::anyhow!(bind_error(args.addr, &error)))?;
    let prometheus = SimPrometheus::new(sim.store().clone())
        .serve(args.prometheus_addr)
        .await
        .map_err(|error| anyhow::anyhow!(bind_error(args.prometheus_addr, &error)))?;
    if let Some(path) = &args.prometheus_url_file {
        write_atomically(path, &format!("{}\n", prometheus.url()))?;
    }
    println!("prometheus: {}", prometheus.url());
    write_atomically(&args.kubeconfig, &served.kubeconfig)?;
    tracing::info!(
        addr = %served.addr,
        kubeconfig = %args.kubeconfig.display(),
        prometheus = %prometheus.url(),
        nodes = args.nodes,
        speed = args.speed,
        "simulated cluster serving"
    );
    shutdown_signal().await;
    tracing::info!("shutting down");
    served.shutdown();
    Ok(())
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
fn write_atomically(path: &Path, contents: &str) -> anyhow::Result<()> {
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
        .write_all(contents.as_bytes())
        .and_then(|()| file.sync_all())
        .with_context(|| format!("cannot write {}", temporary.display()))
        .and_then(|()| {
            std::fs::rename(&temporary, path)
                .with_context(|| format!("cannot move {} into place", path.display()))
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
        write_atomically(&path, "new").unwrap();
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
