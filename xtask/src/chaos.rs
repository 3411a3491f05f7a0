//! `cargo xtask chaos`: faults on the real control plane of `cargo xtask cluster`, with the
//! controller mid-rollout, judged by the API server's audit log.
//!
//! Job: start the cluster with [`NODES`] KWOK nodes and the chaos settings ([`APISERVER_ARGS`]),
//! supervise every component ([`cluster::supervise`]: kube-controller-manager exits when it
//! loses its lease in an API server outage, as it is designed to, and a real kubelet would start
//! it again), install the CRD and the controller's identity as `cargo xtask e2e` does, and run
//! the ignored test target `crates/daemonset-canary/tests/chaos.rs`, which injects the faults and
//! starts (and kills) the controller itself. Each scenario appends one JSON line to a results
//! file; this command prints them as the table docs/reliability.md shows: fault, phase it hit,
//! outcome (and the outcome the fault-free rollout has), recovery time, whether the probes told
//! the truth, and the audit-log invariants held.
//!
//! Invariants: what this command started (the cluster unless it was running with the same
//! settings, the supervisor) is stopped when it ends, passed or failed; a row that did not
//! recover, or whose invariants or probes failed, fails the command.

use crate::cargo;
use crate::cluster::{self, Layout, UpArgs};
use anyhow::{Context, Result, bail};
use serde_json::Value;
use std::path::Path;
use std::process::Command;

/// Nodes of the chaos cluster: enough for a canary, a widening of 50% and a Pods-driver step of
/// several nodes, few enough that a rollout takes seconds.
pub const NODES: u32 = 10;
/// kube-apiserver settings of the chaos cluster: pods are watched from etcd, not from the watch
/// cache, so that a watch resumed from a `resourceVersion` etcd compacted away gets etcd's 410
/// Gone (with the cache, the cache's own window decides, and etcd's compaction is invisible).
pub const APISERVER_ARGS: &[&str] = &["--watch-cache-sizes=pods#0"];
/// The test target of the scenarios.
const TEST_TARGET: &str = "chaos";

/// Options of `cargo xtask chaos`.
#[derive(clap::Args, Default)]
pub struct ChaosArgs {
    /// Leave the cluster running afterwards (stop it with `cargo xtask cluster down`).
    #[arg(long)]
    keep_cluster: bool,
    /// Run only the scenarios whose names contain this filter.
    #[arg(long)]
    filter: Option<String>,
    /// Also write the table (Markdown) to this file.
    #[arg(long, value_name = "PATH")]
    table: Option<std::path::PathBuf>,
}

impl ChaosArgs {
    /// The scenarios CI runs (all of them).
    pub fn ci() -> Self {
        Self::default()
    }
}

/// Runs the chaos scenarios and prints their table.
pub fn run(args: &ChaosArgs) -> Result<()> {
    let layout = Layout::new()?;
    let up = UpArgs {
        start_delay_ms: 1000,
        ready_delay_ms: 1000,
        apiserver_args: APISERVER_ARGS.iter().map(|a| (*a).to_owned()).collect(),
        ..UpArgs::with_nodes(NODES)
    };
    let cluster = cluster::up(&layout, &up)?;
    let result = run_on(&layout, &cluster, args);
    if cluster.started
        && !args.keep_cluster
        && let Err(error) = cluster::down(&layout)
    {
        eprintln!("error: stopping the cluster: {error:#}");
    }
    result
}

fn run_on(layout: &Layout, cluster: &cluster::Cluster, args: &ChaosArgs) -> Result<()> {
    let supervisor = cluster::supervise(layout);
    let cargo = cargo();
    let status = Command::new(&cargo)
        .args([
            "build",
            "--locked",
            "--profile",
            crate::PROFILE,
            "-p",
            "daemonset-canary",
            "--bin",
            "daemonset-canary",
        ])
        .status()
        .context("cannot run cargo build")?;
    if !status.success() {
        bail!(
            "cargo build --profile {} -p daemonset-canary failed",
            crate::PROFILE
        );
    }
    // Built in the tests' profile, like the chaos test target below: one build for both.
    let binary = crate::ci_binary()?;
    crate::e2e::install_crd(cluster, &binary)?;
    // The identity (ServiceAccount, RBAC) as deploy/ defines it; the scenarios make a token per
    // controller process, so that the audit log tells the processes apart.
    crate::e2e::controller_identity(layout, cluster)?;
    let state = cluster::running_state(layout)?;
    let results = layout.run_dir().join("chaos-results.jsonl");
    let _ = std::fs::remove_file(&results);
    let mut test = crate::e2e::ignored_tests_of(&cargo, TEST_TARGET);
    test.args([
        // One fault at a time: they share the control plane.
        "--test-threads=1",
        "--nocapture",
    ]);
    if let Some(filter) = &args.filter {
        test.arg(filter);
    }
    let status = test
        .env("CHAOS_KUBECONFIG", &cluster.kubeconfig)
        .env("KUBECTL", &cluster.kubectl)
        .env("CHAOS_BINARY", &binary)
        .env("CHAOS_RUN_DIR", layout.run_dir())
        .env("CHAOS_LOG_DIR", layout.logs())
        .env("CHAOS_AUDIT_LOG", layout.audit_log())
        .env("CHAOS_BIN_DIR", &layout.bin)
        .env("CHAOS_RESULTS", &results)
        .env(
            "CHAOS_APISERVER",
            state
                .get("apiserver")
                .and_then(Value::as_str)
                .unwrap_or_default(),
        )
        .env(
            "CHAOS_ETCD",
            state
                .get("etcd")
                .and_then(Value::as_str)
                .unwrap_or_default(),
        )
        .status()
        .context("cannot run cargo test")?;
    drop(supervisor);
    let (fidelity, rows): (Vec<Value>, Vec<Value>) = read_rows(&results)?
        .into_iter()
        .partition(|row| row.get("fidelity") == Some(&Value::Bool(true)));
    let mut table = table(&rows);
    for row in &fidelity {
        table.push('\n');
        table.push_str(&fidelity_table(row));
    }
    println!("\n{table}");
    if let Some(path) = &args.table {
        std::fs::write(path, &table).with_context(|| format!("cannot write {}", path.display()))?;
    }
    if !status.success() {
        bail!(
            "the chaos scenarios failed; logs in {} (the controllers' too)",
            layout.logs().display()
        );
    }
    if let Some(row) = rows
        .iter()
        .find(|row| row.get("passed") != Some(&Value::Bool(true)))
    {
        bail!("a chaos row did not pass: {row}");
    }
    Ok(())
}

/// The scenarios' result lines.
fn read_rows(path: &Path) -> Result<Vec<Value>> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => return Err(error).with_context(|| format!("cannot read {}", path.display())),
    };
    text.lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| serde_json::from_str(line).context("a result line is not JSON"))
        .collect()
}

/// The Markdown table of the rows.
fn table(rows: &[Value]) -> String {
    let mut out = String::from(
        "| fault | phase it hit | outcome (fault-free) | recovery | rollout | probes | audit-log invariants |\n\
         |---|---|---|---:|---:|---|---|\n",
    );
    for row in rows {
        let text = |key: &str| {
            row.get(key)
                .and_then(Value::as_str)
                .unwrap_or("?")
                .to_owned()
        };
        let recovery = row
            .get("recovery_s")
            .and_then(Value::as_f64)
            .map_or_else(|| "none".to_owned(), |s| format!("{s:.1} s"));
        let makespan = row
            .get("makespan_s")
            .and_then(Value::as_f64)
            .map_or_else(|| "?".to_owned(), |s| format!("{s:.0} s"));
        out.push_str(&format!(
            "| {} | {} | {} ({}) | {} | {} | {} | {} |\n",
            text("fault"),
            text("phase"),
            text("outcome"),
            text("expected"),
            recovery,
            makespan,
            text("probes"),
            text("invariants"),
        ));
    }
    out
}

/// The Markdown table of a fidelity row: each figure on canary-sim and on the real control
/// plane.
fn fidelity_table(row: &Value) -> String {
    let side = |name: &str| row.get(name).cloned().unwrap_or(Value::Null);
    let (sim, real) = (side("sim"), side("real"));
    let mut figures: Vec<String> = [
        "makespan_s",
        "first_daemon_set_write_s",
        "daemon_set_writes",
        "pod_deletions",
        "status_writes",
        "events",
        "lease_writes",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    let mut verbs: Vec<String> = [&sim, &real]
        .iter()
        .filter_map(|m| m.get("requests").and_then(Value::as_object))
        .flat_map(|m| m.keys().cloned())
        .collect();
    verbs.sort();
    verbs.dedup();
    figures.extend(verbs.iter().map(|v| format!("requests.{v}")));
    let value = |side: &Value, figure: &str| {
        let found = match figure.split_once('.') {
            Some((outer, inner)) => side.get(outer).and_then(|o| o.get(inner)),
            None => side.get(figure),
        };
        found.map_or_else(|| "0".to_owned(), ToString::to_string)
    };
    let mut out = format!(
        "| {} rollout, {} nodes: figure | canary-sim (`sim serve`) | real control plane |\n|---|---:|---:|\n",
        row.get("rollout").and_then(Value::as_str).unwrap_or("?"),
        row.get("nodes")
            .map_or_else(|| "?".to_owned(), ToString::to_string)
    );
    for figure in figures {
        out.push_str(&format!(
            "| {figure} | {} | {} |\n",
            value(&sim, &figure),
            value(&real, &figure)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_has_a_row_per_result_and_says_none_for_no_recovery() {
        let rows = vec![
            serde_json::json!({"fault": "kube-apiserver killed 40 s", "phase": "canary",
                "outcome": "successful", "expected": "successful", "recovery_s": 7.25,
                "probes": "truthful", "invariants": "4/4", "passed": true}),
            serde_json::json!({"fault": "etcd killed", "phase": "waiting", "outcome": "stuck",
                "expected": "successful", "recovery_s": null, "probes": "?", "invariants": "3/4",
                "passed": false}),
        ];
        let text = table(&rows);
        assert_eq!(text.lines().count(), 4, "{text}");
        assert!(
            text.contains(
                "| kube-apiserver killed 40 s | canary | successful (successful) | 7.2 s | ? |"
            ),
            "{text}"
        );
        assert!(text.contains("| none |"), "{text}");
    }
}
