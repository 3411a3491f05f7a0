//! `cargo xtask`: the project's build, check and benchmark automation.
//!
//! Every check that CI runs is a step of `cargo xtask ci`, so a developer runs exactly what CI runs.
//! Invariants: steps run from the workspace root; every external tool a step needs is installed (or
//! reported with the exact install command) by the `tools` step before any other step runs, so a
//! missing tool fails loudly instead of skipping tests.

mod bench;
mod ci;
mod cluster;
mod codegen;
mod deploy;
mod e2e;
mod fuzz;
mod soak;
mod tools;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

/// Command-line interface of `cargo xtask`.
#[derive(Parser)]
#[command(about = "daemonset-canary automation: CI checks, code generation, benchmarks")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run every CI step (tools, fmt, clippy, tests, docs, benches compiled) and print a summary.
    Ci(ci::CiArgs),
    /// Regenerate the files generated from the code (the CRD in deploy/crd/); `--check` only
    /// compares and fails on a difference.
    Codegen(codegen::CodegenArgs),
    /// Install (or check for) the external tools the tests need: kubectl (built with the local
    /// cluster's binaries), promtool, prometheus, and kubernetes-validate and checkov in a
    /// virtualenv.
    Tools,
    /// Check deploy/: kustomize builds, kubernetes-validate, CRD schemas, promtool rules and
    /// tests, metric names, checkov.
    LintDeploy(deploy::LintArgs),
    /// Benchmarks: rollouts of 10 to 5,000 nodes, the reference's pod counting as baseline,
    /// controller CPU and memory; report in target/bench/ (docs/benchmarks.md).
    Bench(bench::BenchArgs),
    /// Deterministic simulation on many seeds (up to 500 nodes) with a progress bar; prints
    /// the seeds, rollouts, faults and restarts exercised.
    Soak(soak::SoakArgs),
    /// Every cargo-fuzz target of fuzz/ for --seconds each (nightly and cargo-fuzz needed),
    /// seeded from testdata/ and deploy/examples/; fails on a crash or a timeout.
    Fuzz(fuzz::FuzzArgs),
    /// A real control plane on loopback (etcd, kube-apiserver, kube-controller-manager,
    /// kube-scheduler, KWOK nodes), built from released sources through the Go module proxy:
    /// `cluster up [--nodes N] [--kubeconfig PATH]`, `cluster down`, `cluster status`.
    Cluster(cluster::ClusterArgs),
    /// The end-to-end suite: `cluster up` with 50 nodes (or the running cluster), the CRD, the
    /// real `daemonset-canary run`, then crates/daemonset-canary/tests/e2e.rs against them.
    E2e(e2e::E2eArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Print the error chain ourselves: anyhow's Debug output adds a backtrace when RUST_BACKTRACE
    // is set, which buries the one line that matters.
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<()> {
    let root = workspace_root()?;
    std::env::set_current_dir(&root)
        .with_context(|| format!("cannot enter the workspace root {}", root.display()))?;
    match cli.command {
        Command::Ci(args) => ci::run(&args),
        Command::Codegen(args) => codegen::run(&args),
        Command::Tools => tools::ensure_all(),
        Command::LintDeploy(args) => deploy::run(&args),
        Command::Bench(args) => bench::run(&args),
        Command::Soak(args) => soak::run(&args),
        Command::Fuzz(args) => fuzz::run(&args),
        Command::Cluster(args) => cluster::run(&args),
        Command::E2e(args) => e2e::run(&args),
    }
}

/// The workspace root: xtask lives one level below it.
fn workspace_root() -> Result<PathBuf> {
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .context("CARGO_MANIFEST_DIR is not set: run this through `cargo xtask`")?;
    manifest_dir
        .parent()
        .map(PathBuf::from)
        .context("xtask has no parent directory")
}

/// The cargo that invoked us, so nested calls use the same toolchain.
pub(crate) fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned())
}
