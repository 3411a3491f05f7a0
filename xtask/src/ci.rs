//! The CI pipeline: an ordered list of named steps, each a function that either passes or fails.
//!
//! Adding a step is one line in [`STEPS`].

use crate::{PROFILE, cargo, tools};
use anyhow::{Result, bail};
use std::time::{Duration, Instant};
use xshell::{Shell, cmd};

/// Options of `cargo xtask ci`.
#[derive(clap::Args)]
pub struct CiArgs {
    /// Run only the named steps (repeatable), e.g. `--step fmt --step clippy`.
    #[arg(long = "step", value_name = "NAME")]
    steps: Vec<String>,
    /// Keep going after a failed step and report every result at the end.
    #[arg(long)]
    keep_going: bool,
}

/// One CI step.
struct Step {
    name: &'static str,
    what: &'static str,
    run: fn(&Shell) -> Result<()>,
}

/// Every CI step, in the order they run.
const STEPS: &[Step] = &[
    Step {
        name: "tools",
        what: "external tools the tests need (kubectl and the control plane, virt-operator)",
        run: tools_step,
    },
    Step {
        name: "fmt",
        what: "cargo fmt --check",
        run: fmt,
    },
    Step {
        name: "fn-length",
        what: "no function in crates/*/src over 120 lines (a lexical scan of fn items, braces matched)",
        run: |_| crate::fn_length::run(),
    },
    Step {
        name: "deny",
        what: "cargo deny check licenses bans sources (deny.toml; advisories need a database CI cannot fetch)",
        run: deny,
    },
    Step {
        name: "clippy",
        what: "clippy, all targets, -D warnings; the controller without the simulator (ci profile)",
        run: clippy,
    },
    Step {
        name: "test",
        what: "all tests (nextest) and doc tests, in the ci profile",
        run: test,
    },
    Step {
        name: "doc",
        what: "rustdoc with warnings denied",
        run: doc,
    },
    Step {
        name: "package",
        what: "every library crate packages; canary-state-machine builds from its package alone",
        run: package,
    },
    Step {
        name: "codegen",
        what: "generated files are current (cargo xtask codegen --check)",
        run: |_| crate::codegen::run(&crate::codegen::CodegenArgs::check_only()),
    },
    Step {
        name: "lint-deploy",
        what: "deploy/: kustomize, helm lint and helm template, kubernetes-validate, promtool, checkov, krew manifest, metric names from scrapes of the binary",
        // Metric names are checked against what the binary really exports: a demo rollout and
        // observe-kubevirt, which between them export every metric it registers.
        run: |_| crate::deploy::run(&crate::deploy::LintArgs::scraping_the_binary()),
    },
    Step {
        name: "e2e",
        what: "end-to-end suites on a real control plane (cargo xtask e2e): the main one on 50 KWOK nodes, KubeVirt's real virt-operator on 20, then the deploy suite (the Helm chart installed, upgraded and taken over from kustomize with real Helm; deploy/policy)",
        run: |_| crate::e2e::run(&crate::e2e::E2eArgs::default()),
    },
    Step {
        name: "chaos",
        what: "faults on the real control plane mid-rollout, judged by the audit log (cargo xtask chaos)",
        run: |_| crate::chaos::run(&crate::chaos::ChaosArgs::ci()),
    },
    Step {
        name: "bench-build",
        what: "benches compile (ci profile)",
        run: bench_build,
    },
    Step {
        name: "fuzz-build",
        what: "the cargo-fuzz targets compile on stable (cargo check of fuzz/, so they never rot)",
        run: fuzz_build,
    },
    Step {
        name: "bench-smoke",
        what: "the benchmark harness runs on a tiny size (no timed assertions)",
        run: |_| crate::bench::run(&crate::bench::BenchArgs::smoke()),
    },
];

enum Outcome {
    Passed(Duration),
    Failed(Duration, String),
    NotRun,
}

/// Runs the selected steps and prints a summary table; fails if any step failed.
pub fn run(args: &CiArgs) -> Result<()> {
    for name in &args.steps {
        if !STEPS.iter().any(|s| s.name == name) {
            bail!("unknown step {name:?}; steps are: {}", step_names());
        }
    }
    let sh = Shell::new()?;
    let selected = |s: &Step| args.steps.is_empty() || args.steps.iter().any(|n| n == s.name);
    let mut outcomes = Vec::new();
    let mut failed = false;
    for step in STEPS {
        if !selected(step) || (failed && !args.keep_going) {
            outcomes.push((step, Outcome::NotRun));
            continue;
        }
        eprintln!(
            "\n==> xtask ci: {} ({}; {})",
            step.name,
            step.what,
            disk_free(&sh)
        );
        let start = Instant::now();
        let outcome = match (step.run)(&sh) {
            Ok(()) => Outcome::Passed(start.elapsed()),
            Err(err) => {
                failed = true;
                // A full disk shows up as a failed link or write with the cause cut from the
                // log; the free space after the failure says whether that was it.
                Outcome::Failed(
                    start.elapsed(),
                    format!("{err:#} ({} after it)", disk_free(&sh)),
                )
            }
        };
        outcomes.push((step, outcome));
    }
    print_summary(&outcomes);
    if failed {
        bail!("xtask ci failed");
    }
    Ok(())
}

/// The free space on the disk that holds `target/`, as `df` prints it, for the step headers.
fn disk_free(sh: &Shell) -> String {
    let report = cmd!(sh, "df -Ph .").quiet().ignore_stderr().read();
    let available = report.ok().and_then(|out| {
        // POSIX df: a header line, then "Filesystem Size Used Avail Use% Mounted".
        let line = out.lines().nth(1)?.to_owned();
        line.split_whitespace().nth(3).map(str::to_owned)
    });
    match available {
        Some(avail) => format!("disk free: {avail}"),
        None => "disk free: unknown (df failed)".to_owned(),
    }
}

fn step_names() -> String {
    STEPS.iter().map(|s| s.name).collect::<Vec<_>>().join(", ")
}

fn print_summary(outcomes: &[(&Step, Outcome)]) {
    eprintln!("\n==> xtask ci summary");
    for (step, outcome) in outcomes {
        let line = match outcome {
            Outcome::Passed(t) => format!("passed  {:>7.1}s", t.as_secs_f64()),
            Outcome::Failed(t, why) => format!("FAILED  {:>7.1}s  {why}", t.as_secs_f64()),
            Outcome::NotRun => "not run".to_owned(),
        };
        eprintln!("  {:<12} {line}", step.name);
    }
}

fn tools_step(_sh: &Shell) -> Result<()> {
    tools::ensure_all()?;
    // virt-operator for the e2e step's KubeVirt suite (cached like the control plane), built
    // here so that the e2e step's time is the tests'.
    crate::kubevirt::ensure_built(&crate::cluster::Layout::new()?)
}

/// Licences, banned crates and sources of the dependency graph, as deny.toml says. Not
/// `advisories`: the advisory database is a git repository CI machines cannot fetch.
fn deny(sh: &Shell) -> Result<()> {
    tools::ensure_cargo_deny(sh)?;
    let cargo = cargo();
    // The duplicate-version warnings without their inclusion trees, which run to hundreds of
    // lines and say nothing a `cargo tree -d` would not.
    cmd!(
        sh,
        "{cargo} deny --locked check --hide-inclusion-graph licenses bans sources"
    )
    .run()?;
    Ok(())
}

fn fmt(sh: &Shell) -> Result<()> {
    let cargo = cargo();
    cmd!(sh, "{cargo} fmt --all -- --check").run()?;
    Ok(())
}

fn clippy(sh: &Shell) -> Result<()> {
    let cargo = cargo();
    // In the tests' profile: the build scripts and proc macros clippy compiles are then the
    // ones the test step uses (a check of the dependencies themselves is the same at any
    // opt-level).
    cmd!(
        sh,
        "{cargo} clippy --workspace --all-targets --locked --profile {PROFILE} -- -D warnings"
    )
    .run()?;
    // The controller as the image builds it (Dockerfile): without the simulator feature.
    cmd!(
        sh,
        "{cargo} clippy -p daemonset-canary --no-default-features --lib --bins --locked --profile {PROFILE} -- -D warnings"
    )
    .run()?;
    Ok(())
}

/// `cargo xtask fuzz` needs nightly and runs for minutes; a check on stable is enough to keep
/// the targets compiling against the crates they fuzz. Its own target directory: the fuzz crate
/// is outside the workspace and would otherwise rebuild the workspace's dependencies in place.
fn fuzz_build(sh: &Shell) -> Result<()> {
    let cargo = cargo();
    cmd!(
        sh,
        "{cargo} check --manifest-path fuzz/Cargo.toml --all-targets --locked --target-dir target/fuzz-check"
    )
    .run()?;
    Ok(())
}

fn test(sh: &Shell) -> Result<()> {
    let cargo = cargo();
    // The kubectl tests run is the one built from the pinned Kubernetes release.
    let kubectl = tools::ensure_kubectl()?;
    let _kubectl = sh.push_env("KUBECTL", kubectl);
    let test_threads = test_threads().to_string();
    cmd!(
        sh,
        "{cargo} nextest run --workspace --locked --cargo-profile {PROFILE} --no-fail-fast --test-threads {test_threads}"
    )
    .run()?;
    // nextest does not run doc tests.
    cmd!(
        sh,
        "{cargo} test --workspace --locked --profile {PROFILE} --doc"
    )
    .run()?;
    Ok(())
}

/// Tests nextest runs at once: two per core. Many of the slow tests wait on real time rather
/// than compute (the binary against `sim serve` through pauses and soaks, a real Prometheus's
/// scrape intervals), and with one test per core the cores sat idle through those waits: on 2
/// cores the run took 347 s and used 426 of the 694 core-seconds it had. With two per core the
/// same tests took 241 s and 459 core-seconds (docs/benchmarks.md, issue 16).
fn test_threads() -> usize {
    2 * std::thread::available_parallelism().map_or(1, |cores| cores.get())
}

fn doc(sh: &Shell) -> Result<()> {
    let cargo = cargo();
    let _deny = sh.push_env("RUSTDOCFLAGS", "-D warnings");
    cmd!(
        sh,
        "{cargo} doc --workspace --no-deps --locked --profile {PROFILE}"
    )
    .run()?;
    Ok(())
}

/// The crates other tooling can take piecemeal, each packaged as a registry would receive it.
const LIBRARY_CRATES: [&str; 7] = [
    "canary-predicates",
    "canary-state-machine",
    "canary-tls-migration",
    "canary-analysis",
    "canary-kube-adapter",
    "canary-kubevirt",
    "canary-sim",
];

fn package(sh: &Shell) -> Result<()> {
    let cargo = cargo();
    // Verified: the packaged crate alone, unpacked, builds against the registry. The pure
    // decision core promises exactly that.
    cmd!(
        sh,
        "{cargo} package --locked --allow-dirty --package canary-state-machine"
    )
    .run()?;
    // Packaged together, because some depend on others that no registry has yet (cargo then
    // resolves them from the packages being made); not verified, which would build kube and
    // k8s-openapi again for every crate.
    let packages = LIBRARY_CRATES.iter().flat_map(|c| ["--package", c]);
    cmd!(
        sh,
        "{cargo} package --locked --allow-dirty --no-verify {packages...}"
    )
    .run()?;
    Ok(())
}

fn bench_build(sh: &Shell) -> Result<()> {
    let cargo = cargo();
    // The tests' profile compiles the bench targets against the artifacts the tests already
    // built; `cargo bench --no-run` would rebuild the whole tree with optimisations for no extra
    // check.
    cmd!(
        sh,
        "{cargo} build --workspace --benches --locked --profile {PROFILE}"
    )
    .run()?;
    Ok(())
}
