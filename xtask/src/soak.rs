//! `cargo xtask soak`: the deterministic simulation on many more seeds than CI runs, with larger
//! clusters (up to 500 nodes), a progress bar, and the totals of what was exercised; optionally
//! the spec fuzzers with more cases.
//!
//! It runs the ignored `soak` test of `crates/daemonset-canary/tests/simulation.rs`, which prints
//! one `dst-progress` line per seed and a `dst-summary` line; everything else it prints (failure
//! reports with their replay commands) is passed through.

use std::io::{BufRead, BufReader, IsTerminal};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};
use indicatif::{ProgressBar, ProgressStyle};

use crate::cargo;

/// Options of `cargo xtask soak`.
#[derive(clap::Args)]
pub struct SoakArgs {
    /// How many seeds to run.
    #[arg(long, default_value_t = 1000)]
    seeds: u64,
    /// The first seed (the CI set is 0..200; the soak defaults to fresh seeds).
    #[arg(long, default_value_t = 1_000_000)]
    first: u64,
    /// Seeds run at once (default: the test picks, at most 4).
    #[arg(long)]
    threads: Option<usize>,
    /// Build in the tests' profile (`ci`: dev with optimized dependencies) instead of release
    /// (slower seeds, no build beyond the tests' own).
    #[arg(long)]
    debug: bool,
    /// Also run the CanaryDaemonSet spec fuzzers with this many cases per property.
    #[arg(long, value_name = "CASES")]
    fuzz_cases: Option<u32>,
}

/// Runs the soak and, if asked, the fuzzers.
pub fn run(args: &SoakArgs) -> Result<()> {
    simulate(args)?;
    if let Some(cases) = args.fuzz_cases {
        fuzz(args, cases)?;
    }
    Ok(())
}

fn profile_args(args: &SoakArgs) -> Vec<&'static str> {
    if args.debug {
        vec!["--profile", crate::PROFILE]
    } else {
        vec!["--release"]
    }
}

fn simulate(args: &SoakArgs) -> Result<()> {
    let mut command = Command::new(cargo());
    command
        .args([
            "test",
            "-q",
            "-p",
            "daemonset-canary",
            "--test",
            "simulation",
        ])
        .args(profile_args(args))
        .args(["--", "--ignored", "--exact", "soak", "--nocapture"])
        .env("DST_SEEDS", args.seeds.to_string())
        .env("DST_FIRST", args.first.to_string())
        .stdout(Stdio::piped());
    if let Some(threads) = args.threads {
        command.env("DST_THREADS", threads.to_string());
    }
    eprintln!(
        "soak: seeds {}..{} (profile soak: 1 to 500 nodes)",
        args.first,
        args.first + args.seeds
    );
    let mut child = command.spawn().context("cannot start cargo test")?;
    let stdout = child.stdout.take().context("no stdout from cargo test")?;
    // A bar on a terminal; plain progress lines otherwise (a CI log keeps every seed).
    let bar = if std::io::stderr().is_terminal() {
        ProgressBar::new(args.seeds)
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template("[{bar:40}] {pos}/{len} seeds, {msg} [{elapsed}]")
            .context("the progress bar's template")?
            .progress_chars("#>-"),
    );
    let mut failures = 0_u64;
    bar.set_message("0 failing");
    for line in BufReader::new(stdout).lines() {
        let line = line.context("cannot read the test output")?;
        if let Some(progress) = line.strip_prefix("dst-progress ") {
            if progress.contains(" FAIL ") {
                failures += 1;
                bar.set_message(format!("{failures} failing"));
            }
            if bar.is_hidden() {
                eprintln!("{progress}");
            }
            bar.inc(1);
        } else if let Some(summary) = line.strip_prefix("dst-summary ") {
            bar.finish();
            println!("soak summary: {}", summary.replace(' ', "\n  "));
        } else {
            bar.suspend(|| println!("{line}"));
        }
    }
    let status = child.wait().context("cargo test did not finish")?;
    if !status.success() {
        bail!("the soak found violations (see the reports and replay commands above)");
    }
    Ok(())
}

fn fuzz(args: &SoakArgs, cases: u32) -> Result<()> {
    eprintln!("fuzz: {cases} cases per property (crates/kube-adapter/tests/fuzz_spec.rs)");
    let status = Command::new(cargo())
        .args([
            "test",
            "-p",
            "canary-kube-adapter",
            "--test",
            "it",
            "fuzz_spec::",
        ])
        .args(profile_args(args))
        .env("PROPTEST_CASES", cases.to_string())
        .status()
        .context("cannot start cargo test")?;
    if !status.success() {
        bail!("the spec fuzzers found a failing case (proptest prints it, minimised, above)");
    }
    Ok(())
}
