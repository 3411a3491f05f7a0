//! The whole demo as a user runs it (issue 20): `daemonset-canary demo --nodes N --json
//! --metrics-file FILE`, one process per run, its wall time from spawn to exit.
//!
//! The process is the simulator (its DaemonSet controller, kubelets, API server and watches)
//! and the controller on one thread in virtual time: install `v1`, one `v1` → `v2` rollout.
//! Its wall time is what issue 20's goal is about; the reconciles come from the metrics file
//! (`canary_reconcile_duration_seconds_count`). Several runs per size give the best (least
//! disturbed) time on a shared machine. The process's peak resident memory (`VmHWM` of
//! `/proc/<pid>/status`, read every 10 ms while it runs; monotonic, so the last reading is the
//! peak up to the last 10 ms of a run that ends by printing its summary) is issue 53's demo
//! memory per node.

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
    /// Peak resident memory (VmHWM) of every run, bytes, in order (0 where `/proc` could not
    /// be read).
    pub peak_memory: Vec<u64>,
}

impl DemoFigures {
    /// The best wall time of the runs.
    pub fn best(&self) -> Duration {
        self.walls.iter().copied().min().unwrap_or_default()
    }

    /// The least peak memory of the runs (bytes), if any run's was read.
    pub fn least_peak_memory(&self) -> Option<u64> {
        self.peak_memory.iter().copied().filter(|&m| m > 0).min()
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
    let mut peak_memory = Vec::new();
    for _ in 0..runs.max(1) {
        let started = Instant::now();
        let mut child = Command::new(binary)
            .args(["demo", "--nodes", &nodes.to_string(), "--json"])
            .arg("--metrics-file")
            .arg(&metrics)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("cannot run {} demo", binary.display()))?;
        let status_path = format!("/proc/{}/status", child.id());
        let mut peak = 0;
        let status = loop {
            if let Some(status) = child
                .try_wait()
                .with_context(|| format!("cannot wait for demo --nodes {nodes}"))?
            {
                break status;
            }
            if let Some(kib) = std::fs::read_to_string(&status_path)
                .ok()
                .and_then(|text| vm_hwm_kib(&text))
            {
                peak = peak.max(kib * 1024);
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let wall = started.elapsed();
        if !status.success() {
            bail!("demo --nodes {nodes} failed: {status}");
        }
        walls.push(wall);
        peak_memory.push(peak);
    }
    let reconciles = std::fs::read_to_string(&metrics)
        .ok()
        .and_then(|text| reconcile_count(&text));
    let _ = std::fs::remove_file(&metrics);
    Ok(DemoFigures {
        nodes,
        walls,
        reconciles,
        peak_memory,
    })
}

/// `VmHWM` (kB) in the text of `/proc/<pid>/status`.
fn vm_hwm_kib(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
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

    #[test]
    fn reads_the_peak_resident_memory() {
        let status =
            "Name:\tdaemonset-canary\nVmPeak:\t  900 kB\nVmHWM:\t  123456 kB\nVmRSS:\t 100 kB\n";
        assert_eq!(super::vm_hwm_kib(status), Some(123_456));
        assert_eq!(super::vm_hwm_kib("Name: x\n"), None);
    }
}
