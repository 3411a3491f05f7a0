//! `cargo xtask`: the project's build, check and benchmark automation.
//!
//! Every check that CI runs is a step of `cargo xtask ci`, so a developer runs exactly what CI runs.
//! Invariants: steps run from the workspace root; every external tool a step needs is installed (or
//! reported with the exact install command) by the `tools` step before any other step runs, so a
//! missing tool fails loudly instead of skipping tests; the commands xtask runs never see the
//! variables `cargo run` sets for xtask itself (see [`xtask_package_vars`]), so a build through
//! xtask and one from a terminal reuse each other's artifacts.

mod bench;
mod chaos;
mod ci;
mod cluster;
mod codegen;
mod deploy;
mod e2e;
mod e2e_deploy;
mod fn_length;
mod fuzz;
mod kubevirt;
mod soak;
mod tools;
mod traces;
mod verdicts;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
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
    /// Request traces of the deterministic simulation: `traces record --out DIR [--seeds 200]`
    /// writes every request of each seed; `traces compare BASE CHANGED` names the seeds that
    /// differ and their first differing request (a change of no behaviour shows none).
    Traces(traces::TracesArgs),
    /// Every cargo-fuzz target of fuzz/ for --seconds each (nightly and cargo-fuzz needed),
    /// seeded from testdata/ and deploy/examples/; fails on a crash or a timeout.
    Fuzz(fuzz::FuzzArgs),
    /// A real control plane on loopback (etcd, kube-apiserver, kube-controller-manager,
    /// kube-scheduler, KWOK nodes), built from released sources through the Go module proxy:
    /// `cluster up [--nodes N] [--kubeconfig PATH]`, `cluster down`, `cluster status`.
    Cluster(cluster::ClusterArgs),
    /// The end-to-end suite: `cluster up` with 50 nodes (or the running cluster), the CRD, the
    /// real `daemonset-canary run`, then crates/daemonset-canary/tests/e2e/ against them.
    E2e(e2e::E2eArgs),
    /// Faults on the real control plane with the controller mid-rollout (API server, etcd,
    /// compaction, the controller killed in each phase, a slow and lossy API server), judged by
    /// the audit log; prints the table of docs/reliability.md.
    Chaos(chaos::ChaosArgs),
    /// KubeVirt's real virt-operator, built from its release, on the running local cluster:
    /// `kubevirt up`, `kubevirt upgrade --to VERSION`, `kubevirt status`, `kubevirt down`.
    Kubevirt(kubevirt::KubeVirtArgs),
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
    let package_vars = xtask_package_vars();
    if !package_vars.is_empty() {
        // Replaces this process: every command xtask runs inherits the environment without them.
        let mut again = std::process::Command::new(
            std::env::current_exe().context("cannot find xtask's own executable")?,
        );
        again
            .args(std::env::args_os().skip(1))
            .env(WORKSPACE_ROOT_VAR, &root);
        for name in package_vars {
            again.env_remove(name);
        }
        let error = again.exec();
        return Err(error)
            .context("cannot start xtask again without cargo run's package variables");
    }
    std::env::set_current_dir(&root)
        .with_context(|| format!("cannot enter the workspace root {}", root.display()))?;
    match cli.command {
        Command::Ci(args) => ci::run(&args),
        Command::Codegen(args) => codegen::run(&args),
        Command::Tools => tools::ensure_all(),
        Command::LintDeploy(args) => deploy::run(&args),
        Command::Bench(args) => bench::run(&args),
        Command::Soak(args) => soak::run(&args),
        Command::Traces(args) => traces::run(&args),
        Command::Fuzz(args) => fuzz::run(&args),
        Command::Cluster(args) => cluster::run(&args),
        Command::E2e(args) => e2e::run(&args),
        Command::Chaos(args) => chaos::run(&args),
        Command::Kubevirt(args) => kubevirt::run(&args),
    }
}

/// Where xtask, started again without `cargo run`'s variables, finds the workspace root.
const WORKSPACE_ROOT_VAR: &str = "XTASK_WORKSPACE_ROOT";

/// The workspace root: xtask lives one level below it. `CARGO_MANIFEST_DIR` comes first: a
/// `cargo xtask` run by a command of another xtask inherits [`WORKSPACE_ROOT_VAR`] too, and its
/// own checkout may be another one.
fn workspace_root() -> Result<PathBuf> {
    let manifest_dir = match std::env::var_os("CARGO_MANIFEST_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => {
            return std::env::var_os(WORKSPACE_ROOT_VAR).map(PathBuf::from).context(
                "neither CARGO_MANIFEST_DIR nor XTASK_WORKSPACE_ROOT is set: run this through `cargo xtask`",
            );
        }
    };
    manifest_dir
        .parent()
        .map(PathBuf::from)
        .context("xtask has no parent directory")
}

/// The cargo that invoked us, so nested calls use the same toolchain.
pub(crate) fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned())
}

/// The cargo profile of the tests and of every build xtask makes for them (Cargo.toml: dev with
/// optimized dependencies). One profile for all, so that `cargo xtask ci` builds each dependency
/// once, and a test that runs the binary (`CARGO_BIN_EXE_daemonset-canary`) runs the one the
/// commands here built: both live in `target/ci/`.
pub(crate) const PROFILE: &str = "ci";

/// `target/ci/daemonset-canary`: the binary `cargo build --profile ci -p daemonset-canary` makes.
pub(crate) fn ci_binary() -> Result<PathBuf> {
    Ok(tools::target_dir()?.join(PROFILE).join("daemonset-canary"))
}

/// The variables `cargo run` set for xtask itself (its manifest and package), which the commands
/// xtask runs must not inherit, so xtask starts itself again without them. A cargo started with
/// them in its environment sees changed inputs for every crate whose build script reads one
/// (ring reads `CARGO_MANIFEST_DIR` and `CARGO_PKG_*` and asks to be rerun when they change), so
/// each build through xtask and the next build from a terminal rebuilt ring and all that depends
/// on it (rustls, kube, the adapter, the binary: five minutes for the `dist` controller of
/// `cargo xtask bench`).
fn xtask_package_vars() -> Vec<OsString> {
    std::env::vars_os()
        .map(|(name, _)| name)
        .filter(|name| name.to_str().is_some_and(is_package_var))
        .collect()
}

/// Whether `cargo run` sets `name` for the package it runs; `CARGO` (the cargo binary) and the
/// user's own `CARGO_*` settings (`CARGO_HOME`, `CARGO_TARGET_DIR`, ...) are not among them.
fn is_package_var(name: &str) -> bool {
    name.starts_with("CARGO_PKG_")
        || matches!(
            name,
            "CARGO_MANIFEST_DIR"
                | "CARGO_MANIFEST_PATH"
                | "CARGO_MANIFEST_LINKS"
                | "CARGO_CRATE_NAME"
                | "CARGO_BIN_NAME"
                | "CARGO_PRIMARY_PACKAGE"
        )
}

#[cfg(test)]
mod tests {
    use super::is_package_var;

    #[test]
    fn only_what_cargo_run_sets_for_xtask_is_removed() {
        for name in [
            "CARGO_MANIFEST_DIR",
            "CARGO_PKG_NAME",
            "CARGO_PKG_VERSION_MAJOR",
            "CARGO_CRATE_NAME",
            "CARGO_PRIMARY_PACKAGE",
        ] {
            assert!(is_package_var(name), "{name}");
        }
        for name in [
            "CARGO",
            "CARGO_HOME",
            "CARGO_TARGET_DIR",
            "CARGO_BUILD_JOBS",
            "PATH",
        ] {
            assert!(!is_package_var(name), "{name}");
        }
    }
}
