//! The whole demo as a user runs it (issue 20): `daemonset-canary demo --nodes N --json
//! --metrics-file FILE`, one process per run, its wall time from spawn to exit.
//!
//! The process is the simulator (its DaemonSet controller, kubelets, API server and watches)
//! and the controller on one thread in virtual time: install `v1`, one `v1` → `v2` rollout.
//! Its wall time is what issue 20's goal is about; the reconciles come from the metrics file
//! (`canary_reconcile_duration_seconds_count`). Several runs per size give the best (least
//! disturbed) time on a shared machine.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// One size of the demo.
#[derive(Debug, Clone)]
pub struct DemoFigures {
    /// Nodes of the simulated cluster.
    pub nodes: u32,
    /// Wall time of every run, in order.
    pub walls: Vec<Duration>,
    /// Reconcile passes of the last run.
    pub reconciles: Option<u64>,
}

impl DemoFigures {
    /// The best wall time of the runs.
    pub fn best(&self) -> Duration {
        self.walls.iter().copied().min().unwrap_or_default()
    }
}

/// The command line of one run, for the report.
pub fn command(nodes: u32) -> String {
    format!("daemonset-canary demo --nodes {nodes} --json --metrics-file FILE > /dev/null")
}

/// Runs the demo `runs` times on `nodes` nodes with `binary`.
pub fn measure(binary: &Path, nodes: u32, runs: u32) -> Result<DemoFigures> {
    let metrics = std::env::temp_dir().join(format!(
        "canary-bench-demo-{}-{nodes}.prom",
        std::process::id()
    ));
    let mut walls = Vec::new();
    for _ in 0..runs.max(1) {
        let started = Instant::now();
        let status = Command::new(binary)
            .args(["demo", "--nodes", &nodes.to_string(), "--json"])
            .arg("--metrics-file")
            .arg(&metrics)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .with_context(|| format!("cannot run {} demo", binary.display()))?;
        let wall = started.elapsed();
        if !status.success() {
            bail!("demo --nodes {nodes} failed: {status}");
        }
        walls.push(wall);
    }
    let reconciles = std::fs::read_to_string(&metrics)
        .ok()
        .and_then(|text| reconcile_count(&text));
    let _ = std::fs::remove_file(&metrics);
    Ok(DemoFigures {
        nodes,
        walls,
        reconciles,
    })
}

/// The sum of `canary_reconcile_duration_seconds_count` over its series.
fn reconcile_count(metrics: &str) -> Option<u64> {
    let counts: Vec<u64> = metrics
        .lines()
        .filter(|line| line.starts_with("canary_reconcile_duration_seconds_count"))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|count| count as u64)
        .collect();
    (!counts.is_empty()).then(|| counts.iter().sum())
}

#[cfg(test)]
mod tests {
    #[test]
    fn counts_reconciles_over_modes() {
        let text = "# HELP x\ncanary_reconcile_duration_seconds_count{mode=\"driven\"} 63\ncanary_reconcile_duration_seconds_sum{mode=\"driven\"} 0.1\n";
        assert_eq!(super::reconcile_count(text), Some(63));
        assert_eq!(super::reconcile_count("nothing"), None);
    }
}
