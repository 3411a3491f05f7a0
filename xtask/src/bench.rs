//! `cargo xtask bench`: builds the harness (`crates/daemonset-canary/examples/bench/`), the
//! `daemonset-canary` binary with optimisations and the controller as the image ships it (no
//! simulator, `dist` profile) for the controller-process rows, runs it, and saves its report.
//!
//! The full run checks the goals of issues 10 and 20 (the harness's `--check-goals`): the
//! report is saved and printed either way, the missed goals are listed at its end, and the
//! command fails when one is missed. It also draws the demo's wall time against the nodes
//! (`target/bench/demo-wall.svg`). CI only runs `--smoke`, tiny sizes in the tests' profile (`ci`), which
//! checks that the harness works and asserts no figure. `--real` (alias `--real-cluster`)
//! measures on the real control plane of `cargo xtask cluster` instead, and fails on a missed
//! goal of issue 53 (not in CI: about 15 minutes per size). docs/benchmarks.md explains every
//! figure.

mod plot;

use crate::cargo;
use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use xshell::{Shell, cmd};

/// Options of `cargo xtask bench`.
#[derive(clap::Args, Default)]
pub struct BenchArgs {
    /// A tiny run in the tests' profile (what CI runs): checks the harness, measures nothing
    /// useful.
    #[arg(long)]
    smoke: bool,
    /// The real control plane instead of the usual run: for each size of `--real-nodes`,
    /// `cargo xtask cluster up` with that many KWOK nodes, then the harness's `real`
    /// measurement (the controller's rollouts against native RollingUpdates at 10% of the same
    /// DaemonSet, its requests and reaction from the audit log; issue 53's goals, which fail the
    /// command when missed), beside canary-sim's figures for the same rollout (in process, and
    /// the controller process on `sim serve`). Not in CI.
    #[arg(long, visible_alias = "real-cluster", conflicts_with = "smoke")]
    real: bool,
    /// Cluster sizes of `--real`.
    #[arg(
        long,
        visible_alias = "real-cluster-nodes",
        value_delimiter = ',',
        default_value = "1000"
    )]
    real_nodes: Vec<u32>,
    /// Rollout rounds of `--real` per size (a controller rollout and a native one each).
    #[arg(long, default_value_t = 3)]
    real_rollouts: u32,
    /// Builds the harness and the controller in the tests' profile instead of release and
    /// dist: a first try of `--real` without the long optimised builds (the control plane's
    /// figures barely move; the controller's CPU and memory are not the shipped binary's).
    #[arg(long, requires = "real")]
    tests_profile: bool,
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
    "--demo-nodes",
    "3,10",
    "--demo-runs",
    "1",
    "--downtime-nodes",
    "5",
];

/// Builds and runs the harness; the report goes to stdout and `target/bench/`.
pub fn run(args: &BenchArgs) -> Result<()> {
    let sh = Shell::new()?;
    let cargo = cargo();
    // The controller process is measured as the image ships it (Dockerfile): without the
    // simulator, in the `dist` profile; the smoke run builds that variant in the tests' profile,
    // whose dependencies CI's test step has built already.
    let (profile, controller_profile) = if args.smoke || args.tests_profile {
        (crate::PROFILE, crate::PROFILE)
    } else {
        ("release", "dist")
    };
    let out_dir = target_dir().join("bench");
    // Private copies: other builds sharing the target directory overwrite target/<profile>/
    // daemonset-canary at any time, possibly with a binary built from other sources (and the
    // two variants of the smoke run's profile share that path).
    let bin_dir = out_dir.join(format!("bin-{}", std::process::id()));
    std::fs::create_dir_all(&bin_dir)
        .with_context(|| format!("cannot create {}", bin_dir.display()))?;
    cmd!(
        sh,
        "{cargo} build --profile {controller_profile} -p daemonset-canary --no-default-features --bin daemonset-canary"
    )
    .run()?;
    let controller = copy_to(
        &profile_dir(controller_profile).join("daemonset-canary"),
        bin_dir.join("daemonset-canary-controller"),
    )?;
    cmd!(
        sh,
        "{cargo} build --profile {profile} -p daemonset-canary --bin daemonset-canary --example bench"
    )
    .run()?;
    let harness = copy_into(
        &profile_dir(profile).join("examples").join("bench"),
        &bin_dir,
    )?;
    let binary = copy_into(&profile_dir(profile).join("daemonset-canary"), &bin_dir)?;
    let json = out_dir.join(if args.smoke {
        "smoke.json"
    } else {
        "latest.json"
    });
    if args.real {
        let result = real_cluster(&sh, args, &harness, &binary, &controller, &out_dir);
        let _ = std::fs::remove_dir_all(&bin_dir);
        return result;
    }
    let mut extra: Vec<String> = if args.smoke {
        SMOKE_ARGS.iter().map(|s| (*s).to_owned()).collect()
    } else {
        vec!["--check-goals".to_owned()]
    };
    extra.extend(args.harness_args.iter().cloned());
    // Not xshell's `.read()`: a run that misses a goal exits non-zero after printing its
    // whole report, which is saved (and plotted) before the command fails. The harness's
    // progress goes to stderr as it runs.
    let output = std::process::Command::new(&harness)
        .arg("--binary")
        .arg(&binary)
        .arg("--controller-binary")
        .arg(&controller)
        .arg("--json")
        .arg(&json)
        .args(&extra)
        .stderr(std::process::Stdio::inherit())
        .output()
        .with_context(|| format!("cannot run {}", harness.display()));
    let _ = std::fs::remove_dir_all(&bin_dir);
    let output = output?;
    let report = String::from_utf8_lossy(&output.stdout);
    if !report.trim().is_empty() {
        save(&report, &json)?;
        plot_demo(&json, &out_dir)?;
    }
    if !output.status.success() {
        bail!(
            "the benchmark harness failed ({}); see the missed goals or the error above",
            output.status
        );
    }
    Ok(())
}

/// Draws `target/bench/demo-wall.svg` from the report's demo figures, if it has any.
fn plot_demo(json: &Path, out_dir: &Path) -> Result<()> {
    let Ok(text) = std::fs::read_to_string(json) else {
        return Ok(());
    };
    let report: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", json.display()))?;
    let points = plot::demo_points(&report);
    if points.is_empty() {
        return Ok(());
    }
    let svg = out_dir.join("demo-wall.svg");
    plot::draw(&points, &svg)?;
    eprintln!("plot of the demo's wall time saved to {}", svg.display());
    let memory = plot::demo_memory_points(&report);
    if !memory.is_empty() {
        let svg = out_dir.join("demo-memory.svg");
        plot::draw_memory(&memory, &svg)?;
        eprintln!("plot of the demo's peak memory saved to {}", svg.display());
    }
    Ok(())
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

/// `--real`: per size, canary-sim's figures for the same rollout (the harness's in-process
/// rollout and its controller process on `sim serve`: `target/bench/real-<nodes>-sim.{md,json}`),
/// then the cluster with that many nodes, the CRD and the controller's ServiceAccount (as
/// `cargo xtask e2e` installs them), and the harness's `real` measurement with the cluster's
/// kubeconfigs and audit log (`target/bench/real-<nodes>.{md,json}`). Every size is measured
/// and saved before a missed goal fails the command. A cluster this started is stopped at the
/// end.
fn real_cluster(
    sh: &Shell,
    args: &BenchArgs,
    harness: &Path,
    binary: &Path,
    controller: &Path,
    out_dir: &Path,
) -> Result<()> {
    let layout = crate::cluster::Layout::new()?;
    let mut started = false;
    let mut missed = Vec::new();
    let result = (|| -> Result<()> {
        for &nodes in &args.real_nodes {
            let began = std::time::Instant::now();
            let sizes = nodes.to_string();
            let none = "";
            let rollouts = args.real_rollouts.to_string();
            let extra = &args.harness_args;
            eprintln!("==> bench: {nodes} nodes on canary-sim (in process, then `sim serve`)");
            let sim_json = out_dir.join(format!("real-{nodes}-sim.json"));
            let report = cmd!(
                sh,
                "{harness} --binary {binary} --controller-binary {controller}
                 --json {sim_json} --nodes {sizes} --rollouts {rollouts}
                 --demo-nodes {none} --pods-nodes {none} --baseline-nodes 200 --baseline-millis 100
                 --process-nodes {sizes} --process-daemon-sets 1 {extra...}"
            )
            .read()
            .context("the benchmark harness failed on canary-sim")?;
            save(&report, &sim_json)?;
            let cluster = crate::cluster::up(&layout, &crate::cluster::UpArgs::with_nodes(nodes))?;
            started |= cluster.started;
            check_audit_policy(&layout)?;
            crate::e2e::install_crd(&cluster, binary)?;
            let controller_kubeconfig = crate::e2e::controller_identity(&layout, &cluster)?;
            let admin = &cluster.kubeconfig;
            let audit = layout.audit_log();
            let json = out_dir.join(format!("real-{nodes}.json"));
            eprintln!("==> bench: {nodes} nodes on the real control plane");
            // Not `.read()`: a missed goal exits non-zero after the whole report, which is
            // saved before the command fails.
            let output = std::process::Command::new(harness)
                .args([
                    "real",
                    "--check-goals",
                    "--nodes",
                    &sizes,
                    "--rollouts",
                    &rollouts,
                ])
                .arg("--kubeconfig")
                .arg(admin)
                .arg("--controller-kubeconfig")
                .arg(&controller_kubeconfig)
                .arg("--controller-binary")
                .arg(controller)
                .arg("--audit-log")
                .arg(&audit)
                .arg("--json")
                .arg(&json)
                .stderr(std::process::Stdio::inherit())
                .output()
                .with_context(|| format!("cannot run {}", harness.display()))?;
            let report = String::from_utf8_lossy(&output.stdout);
            if !report.trim().is_empty() {
                save(&report, &json)?;
            }
            eprintln!(
                "==> bench: {nodes} nodes measured in {:.0} s (load average now: {})",
                began.elapsed().as_secs_f64(),
                std::fs::read_to_string("/proc/loadavg")
                    .unwrap_or_default()
                    .trim()
            );
            if !output.status.success() {
                missed.push(format!("{nodes} nodes ({})", output.status));
            }
        }
        Ok(())
    })();
    if started {
        crate::cluster::down(&layout)?;
    }
    result?;
    if !missed.is_empty() {
        bail!(
            "the real-control-plane measurement missed a goal or failed at {}; see its report above",
            missed.join(", ")
        );
    }
    Ok(())
}

/// Fails when the running cluster's audit policy does not record the pods' status writes (a
/// cluster started by an older xtask), which the reaction is read from.
fn check_audit_policy(layout: &crate::cluster::Layout) -> Result<()> {
    let path = layout.audit_policy();
    let policy = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read the audit policy {}", path.display()))?;
    if !policy.contains("pods/status") {
        bail!(
            "the running cluster's audit policy ({}) does not record pod status writes: it was \
             started by an older xtask; restart it (`cargo xtask cluster down`)",
            path.display()
        );
    }
    Ok(())
}

/// Copies `file` into `dir`, returning the copy's path.
fn copy_into(file: &Path, dir: &Path) -> Result<PathBuf> {
    let name = file
        .file_name()
        .with_context(|| format!("{} has no file name", file.display()))?;
    copy_to(file, dir.join(name))
}

/// Copies `file` to `copy`, returning `copy`.
fn copy_to(file: &Path, copy: PathBuf) -> Result<PathBuf> {
    std::fs::copy(file, &copy)
        .with_context(|| format!("cannot copy {} to {}", file.display(), copy.display()))?;
    Ok(copy)
}

/// Where cargo puts what a profile builds: `target/debug` for `dev`, `target/<name>` otherwise.
fn profile_dir(profile: &str) -> PathBuf {
    target_dir().join(if profile == "dev" { "debug" } else { profile })
}

/// The cargo target directory (CARGO_TARGET_DIR, else `target/` in the workspace root, which is
/// the current directory of every xtask command).
fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| PathBuf::from("target"), PathBuf::from)
}
