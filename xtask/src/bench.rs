//! `cargo xtask bench`: builds the harness (`crates/daemonset-canary/examples/bench/`) and the
//! `daemonset-canary` binary with optimisations, runs it, and saves its report.
//!
//! The figures are never asserted: CI only runs `--smoke`, a tiny size in the dev profile, to
//! check that the harness still works. `--real-cluster` adds the real control plane of `cargo
//! xtask cluster` (not in CI: minutes per size). docs/benchmarks.md explains every figure.

use crate::cargo;
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use xshell::{Shell, cmd};

/// Options of `cargo xtask bench`.
#[derive(clap::Args, Default)]
pub struct BenchArgs {
    /// A tiny run in the dev profile (what CI runs): checks the harness, measures nothing useful.
    #[arg(long)]
    smoke: bool,
    /// The real-control-plane row instead of the usual run: for each size of
    /// `--real-cluster-nodes`, `cargo xtask cluster up` with that many KWOK nodes, then one
    /// rollout by the controller process on canary-sim and on the real cluster (CPU, memory,
    /// API requests, makespan), beside the in-process rollout on canary-sim. Not in CI.
    #[arg(long, conflicts_with = "smoke")]
    real_cluster: bool,
    /// Cluster sizes of `--real-cluster`.
    #[arg(long, value_delimiter = ',', default_value = "1000,5000")]
    real_cluster_nodes: Vec<u32>,
    /// Arguments for the harness itself (see `cargo xtask bench -- --help`), e.g.
    /// `-- --nodes 10,100 --process-nodes 0`.
    #[arg(last = true)]
    harness_args: Vec<String>,
}

impl BenchArgs {
    /// The CI run.
    pub fn smoke() -> Self {
        Self {
            smoke: true,
            ..Self::default()
        }
    }
}

/// Arguments of the smoke run: every measurement, each at a size that takes seconds.
const SMOKE_ARGS: &[&str] = &[
    "--nodes",
    "3,10",
    "--rollouts",
    "1",
    "--baseline-nodes",
    "200",
    "--baseline-millis",
    "60",
    "--process-nodes",
    "2",
    "--process-daemon-sets",
    "1,2",
    "--pods-nodes",
    "3,10",
];

/// Builds and runs the harness; the report goes to stdout and `target/bench/`.
pub fn run(args: &BenchArgs) -> Result<()> {
    let sh = Shell::new()?;
    let cargo = cargo();
    let profile = if args.smoke { "dev" } else { "release" };
    cmd!(
        sh,
        "{cargo} build --profile {profile} -p daemonset-canary --bin daemonset-canary --example bench"
    )
    .run()?;
    let profile_dir = target_dir().join(if args.smoke { "debug" } else { "release" });
    let out_dir = target_dir().join("bench");
    // Private copies: other builds sharing the target directory overwrite target/<profile>/
    // daemonset-canary at any time, possibly with a binary built from other sources.
    let bin_dir = out_dir.join(format!("bin-{}", std::process::id()));
    std::fs::create_dir_all(&bin_dir)
        .with_context(|| format!("cannot create {}", bin_dir.display()))?;
    let harness = copy_into(&profile_dir.join("examples").join("bench"), &bin_dir)?;
    let binary = copy_into(&profile_dir.join("daemonset-canary"), &bin_dir)?;
    let json = out_dir.join(if args.smoke {
        "smoke.json"
    } else {
        "latest.json"
    });
    if args.real_cluster {
        let result = real_cluster(&sh, args, &harness, &binary, &out_dir);
        let _ = std::fs::remove_dir_all(&bin_dir);
        return result;
    }
    let mut extra: Vec<String> = if args.smoke {
        SMOKE_ARGS.iter().map(|s| (*s).to_owned()).collect()
    } else {
        Vec::new()
    };
    extra.extend(args.harness_args.iter().cloned());
    let report = cmd!(sh, "{harness} --binary {binary} --json {json} {extra...}")
        .read()
        .context("the benchmark harness failed");
    let _ = std::fs::remove_dir_all(&bin_dir);
    save(&report?, &json)
}

/// Prints the report and saves it as Markdown beside `json`.
fn save(report: &str, json: &Path) -> Result<()> {
    println!("{report}");
    let markdown = json.with_extension("md");
    std::fs::write(&markdown, format!("{report}\n"))
        .with_context(|| format!("cannot write {}", markdown.display()))?;
    eprintln!(
        "report saved to {} and {}",
        markdown.display(),
        json.display()
    );
    Ok(())
}

/// `--real-cluster`: per size, the cluster with that many nodes, the CRD and the controller's
/// ServiceAccount (as `cargo xtask e2e` installs them), then the harness with the cluster's
/// kubeconfigs and audit log. Reports go to `target/bench/real-cluster-<nodes>.{md,json}`. A
/// cluster this started is stopped at the end.
fn real_cluster(
    sh: &Shell,
    args: &BenchArgs,
    harness: &Path,
    binary: &Path,
    out_dir: &Path,
) -> Result<()> {
    let layout = crate::cluster::Layout::new()?;
    let mut started = false;
    let result = (|| -> Result<()> {
        for &nodes in &args.real_cluster_nodes {
            let cluster = crate::cluster::up(&layout, &crate::cluster::UpArgs::with_nodes(nodes))?;
            started |= cluster.started;
            crate::e2e::install_crd(&cluster, binary)?;
            let controller = crate::e2e::controller_identity(&layout, &cluster)?;
            let admin = &cluster.kubeconfig;
            let audit = layout.audit_log();
            let json = out_dir.join(format!("real-cluster-{nodes}.json"));
            let nodes = nodes.to_string();
            let extra = &args.harness_args;
            eprintln!("==> bench: {nodes} nodes, canary-sim and the real control plane");
            let report = cmd!(
                sh,
                "{harness} --binary {binary} --json {json} --nodes {nodes} --rollouts 1
                 --baseline-nodes 200 --baseline-millis 100
                 --process-nodes {nodes} --process-daemon-sets 1
                 --cluster-kubeconfig {admin} --cluster-controller-kubeconfig {controller}
                 --cluster-audit-log {audit} {extra...}"
            )
            .read()
            .context("the benchmark harness failed")?;
            save(&report, &json)?;
        }
        Ok(())
    })();
    if started {
        crate::cluster::down(&layout)?;
    }
    result
}

/// Copies `file` into `dir`, returning the copy's path.
fn copy_into(file: &Path, dir: &Path) -> Result<PathBuf> {
    let name = file
        .file_name()
        .with_context(|| format!("{} has no file name", file.display()))?;
    let copy = dir.join(name);
    std::fs::copy(file, &copy)
        .with_context(|| format!("cannot copy {} to {}", file.display(), copy.display()))?;
    Ok(copy)
}

/// The cargo target directory (CARGO_TARGET_DIR, else `target/` in the workspace root, which is
/// the current directory of every xtask command).
fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| PathBuf::from("target"), PathBuf::from)
}
