//! `cargo xtask fuzz`: every cargo-fuzz target of `fuzz/` for a fixed time (or a fixed number
//! of executions) each, seeded from the repository's real fixtures, with a table of the
//! executions each target made; fails when a target crashes or times out.
//!
//! The targets need the nightly toolchain and cargo-fuzz (both checked first, with the command
//! that installs what is missing). Each run starts from `fuzz/corpus/<target>/` (kept between
//! runs, git-ignored), into which the seeds are written first: the DaemonSets and pods of
//! `testdata/`, the CanaryDaemonSets of `deploy/examples/`, and hand-picked `maxUnavailable`
//! strings and patches. A crashing input is saved under `fuzz/artifacts/<target>/` by
//! libFuzzer; the failure prints the command that replays it.
//!
//! Not a CI step: one target needs minutes to reach useful depths.

#![expect(
    clippy::indexing_slicing,
    reason = "only serde_json::Value is indexed here: a missing key or index reads as Null, and \
              writes by index go to objects this module built"
)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

/// Every target of `fuzz/Cargo.toml`, in the order they run.
pub const TARGETS: [&str; 9] = [
    "decide",
    "lease",
    "analysis",
    "max_unavailable",
    "predicates",
    "tls_plan",
    "spec",
    "decode",
    "sim_patch",
];

/// Options of `cargo xtask fuzz`.
#[derive(clap::Args)]
pub struct FuzzArgs {
    /// How long each target runs, in seconds.
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// Stop each target after this many executions instead (still bounded by --seconds).
    #[arg(long)]
    runs: Option<u64>,
    /// Only these targets (repeatable; default: all).
    #[arg(long = "target", value_name = "NAME")]
    targets: Vec<String>,
    /// libFuzzer's per-input time limit, in seconds: an input slower than this is a timeout.
    #[arg(long, default_value_t = 10)]
    timeout: u64,
    /// Build with AddressSanitizer (slower; the crates forbid unsafe code, so the default is
    /// none: the targets look for panics, overflows, failed assertions and timeouts).
    #[arg(long)]
    asan: bool,
}

/// What one target did.
struct Ran {
    target: String,
    executions: u64,
    seconds: f64,
    corpus: usize,
    ok: bool,
}

/// Runs the targets one after the other and prints the table.
pub fn run(args: &FuzzArgs) -> Result<()> {
    let targets: Vec<String> = if args.targets.is_empty() {
        TARGETS.iter().map(|t| (*t).to_owned()).collect()
    } else {
        args.targets.clone()
    };
    if let Some(unknown) = targets.iter().find(|t| !TARGETS.contains(&t.as_str())) {
        bail!(
            "unknown fuzz target {unknown:?}; targets: {}",
            TARGETS.join(", ")
        );
    }
    check_tools()?;
    write_seeds(Path::new("."))?;
    let mut ran = Vec::new();
    for target in &targets {
        ran.push(run_target(args, target)?);
    }
    println!(
        "\n{:<16} {:>14} {:>10} {:>12} {:>8}  result",
        "target", "executions", "seconds", "exec/s", "corpus"
    );
    for r in &ran {
        let per_second = if r.seconds > 0.0 {
            r.executions as f64 / r.seconds
        } else {
            0.0
        };
        println!(
            "{:<16} {:>14} {:>10.0} {:>12.0} {:>8}  {}",
            r.target,
            r.executions,
            r.seconds,
            per_second,
            r.corpus,
            if r.ok { "ok" } else { "CRASH or TIMEOUT" }
        );
    }
    let failed: Vec<&str> = ran
        .iter()
        .filter(|r| !r.ok)
        .map(|r| r.target.as_str())
        .collect();
    if !failed.is_empty() {
        bail!(
            "fuzz targets failed: {} (inputs under fuzz/artifacts/<target>/; replay one with `cd fuzz && rustup run nightly cargo fuzz run <target> <input>`)",
            failed.join(", ")
        );
    }
    Ok(())
}

/// The nightly toolchain and cargo-fuzz, or the commands that install them.
fn check_tools() -> Result<()> {
    let toolchain = nightly().args(["--version"]).output();
    if !toolchain.is_ok_and(|o| o.status.success()) {
        bail!(
            "the nightly toolchain is missing: rustup toolchain install nightly --profile minimal"
        );
    }
    let fuzz = nightly().args(["fuzz", "--version"]).output();
    if !fuzz.is_ok_and(|o| o.status.success()) {
        bail!("cargo-fuzz is missing: cargo install cargo-fuzz --locked");
    }
    Ok(())
}

/// `cargo` of the nightly toolchain, whatever toolchain runs this (the root's
/// rust-toolchain.toml says stable, and cargo passes its own toolchain down).
fn nightly() -> Command {
    let mut command = Command::new("rustup");
    command
        .args(["run", "nightly", "cargo"])
        .env_remove("RUSTUP_TOOLCHAIN")
        .env_remove("CARGO")
        .env_remove("RUSTC")
        .env_remove("RUSTDOC");
    command
}

fn run_target(args: &FuzzArgs, target: &str) -> Result<Ran> {
    let corpus = Path::new("fuzz/corpus").join(target);
    let mut command = nightly();
    command.current_dir("fuzz").args(["fuzz", "run", target]);
    if !args.asan {
        command.args(["--sanitizer", "none"]);
    }
    command
        .arg(Path::new("corpus").join(target))
        .arg("--")
        .arg(format!("-max_total_time={}", args.seconds))
        .arg(format!("-timeout={}", args.timeout))
        .arg("-print_final_stats=1")
        // The panic message and the saved input say what failed; a replay gives the stack.
        .env("RUST_BACKTRACE", "0")
        .stdout(Stdio::inherit())
        .stderr(Stdio::piped());
    if let Some(runs) = args.runs {
        command.arg(format!("-runs={runs}"));
    }
    eprintln!("fuzz: {target} for {} s", args.seconds);
    let started = Instant::now();
    let output = command
        .spawn()
        .with_context(|| format!("cannot start cargo fuzz run {target}"))?
        .wait_with_output()
        .with_context(|| format!("cargo fuzz run {target} did not finish"))?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    let stat = |name: &str| -> Option<u64> {
        stderr
            .lines()
            .find_map(|line| line.strip_prefix(&format!("stat::{name}:")))
            .and_then(|value| value.trim().parse().ok())
    };
    let executions = stat("number_of_executed_units").unwrap_or(0);
    let ok = output.status.success();
    if !ok {
        // From libFuzzer's output: the panic message (the assertion that failed) and where the
        // input was saved.
        let mut in_panic = false;
        for line in stderr.lines() {
            in_panic = (in_panic && !line.starts_with("note:")) || line.contains("panicked at");
            if in_panic
                || line.contains("Test unit written to")
                || line.contains("ERROR: libFuzzer")
            {
                eprintln!("{line}");
            }
        }
    }
    Ok(Ran {
        target: target.to_owned(),
        executions,
        seconds: started.elapsed().as_secs_f64(),
        corpus: fs::read_dir(&corpus).map(|d| d.count()).unwrap_or(0),
        ok,
    })
}

/// Reads one YAML (or JSON) fixture as JSON.
fn fixture(path: &Path) -> Result<Value> {
    let text =
        fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    serde_saphyr::from_str(&text).with_context(|| format!("{} is not YAML", path.display()))
}

/// Reads every document of a YAML file (an example with its Namespace first) as JSON.
fn documents(path: &Path) -> Result<Vec<Value>> {
    let text =
        fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    serde_saphyr::from_str_multiple(&text)
        .with_context(|| format!("{} is not YAML", path.display()))
}

/// The files of `dir` with one of `extensions`, sorted.
fn files(dir: &Path, extensions: &[&str]) -> Result<Vec<PathBuf>> {
    let mut found: Vec<PathBuf> = fs::read_dir(dir)
        .with_context(|| format!("cannot list {}", dir.display()))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| {
            path.extension()
                .and_then(|e| e.to_str())
                .is_some_and(|e| extensions.contains(&e))
        })
        .collect();
    found.sort();
    Ok(found)
}

/// Writes the seed inputs of every target into `fuzz/corpus/<target>/seed-*` under `root`.
pub fn write_seeds(root: &Path) -> Result<()> {
    let daemon_sets: Vec<Value> = files(&root.join("testdata/daemonsets"), &["yaml", "json"])?
        .iter()
        .map(|p| fixture(p))
        .collect::<Result<_>>()?;
    let pods: Vec<Value> = files(&root.join("testdata/pods"), &["yaml", "json"])?
        .iter()
        .map(|p| fixture(p))
        .collect::<Result<_>>()?;
    let examples: Vec<Value> = files(&root.join("deploy/examples"), &["yaml"])?
        .iter()
        .map(|p| documents(p))
        .collect::<Result<Vec<_>>>()?
        .into_iter()
        .flatten()
        .filter(|v| v["kind"] == "CanaryDaemonSet")
        .collect();
    // The DaemonSets the examples ask for: the TLS planner's realistic inputs.
    let example_daemon_sets: Vec<Value> = examples
        .iter()
        .map(|cds| {
            json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
                   "metadata": cds["spec"]["template"]["metadata"],
                   "spec": cds["spec"]["template"]["spec"]})
        })
        .collect();
    let all_daemon_sets: Vec<&Value> = daemon_sets.iter().chain(&example_daemon_sets).collect();

    let mut seeds: Vec<(&str, Vec<u8>)> = Vec::new();
    let bytes = |v: &Value| serde_json::to_vec(v).unwrap_or_default();
    let pair = |a: &Value, b: &Value| [bytes(a), vec![0], bytes(b)].concat();

    for cds in &examples {
        seeds.push(("spec", bytes(&cds["spec"])));
        seeds.push(("decode", bytes(cds)));
    }
    for ds in &daemon_sets {
        let spec = json!({"template": {"metadata": {"labels": ds["metadata"]["labels"]},
                                       "spec": ds["spec"]},
                          "target": {"version": "v1"}});
        seeds.push(("spec", bytes(&spec)));
    }
    for ds in &all_daemon_sets {
        for pod in &pods {
            seeds.push(("predicates", pair(ds, pod)));
        }
        for selector in [0u8, 1, 4, 5, 0x10, 0x40, 0x80] {
            seeds.push(("tls_plan", [vec![selector], bytes(ds)].concat()));
        }
        let patches = [
            (
                0u8,
                json!([{"op": "test", "path": "/metadata/generation", "value": 1},
                         {"op": "add", "path": "/metadata/labels", "value": {"a": "b"}},
                         {"op": "replace", "path": "/spec/updateStrategy",
                          "value": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "10%"}}}]),
            ),
            (
                1,
                json!({"spec": {"updateStrategy": {"rollingUpdate": {"maxUnavailable": 1, "maxSurge": null}}}}),
            ),
            (
                2,
                json!({"spec": {"template": {"spec": {"containers": [{"name": "agent", "image": "agent:v2"}],
                                                       "volumes": [{"name": "x", "$patch": "delete"}]}}}}),
            ),
            (2, json!({"metadata": {"labels": {"a": null, "b": "c"}}})),
            (
                3,
                json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                       "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}}),
            ),
        ];
        for (kind, patch) in &patches {
            seeds.push(("sim_patch", [vec![*kind], pair(ds, patch)].concat()));
        }
    }
    for (before, after) in daemon_sets.iter().zip(daemon_sets.iter().skip(1)) {
        seeds.push(("tls_plan", [vec![0u8], pair(before, after)].concat()));
    }
    for text in [
        "1",
        "10%",
        "100%",
        "0",
        "0%",
        "101%",
        "01%",
        "+1",
        "-1",
        " 1",
        "1.5",
        "99999999999",
        "4294967295",
        "4294967296",
        "2147483648",
        "1%%",
        "%",
        "",
        "-0",
        "9223372036854775808",
    ] {
        seeds.push(("max_unavailable", text.as_bytes().to_vec()));
    }
    // Leases as a real API server holds them: fresh, released, hand-made, one of another
    // protocol (`preferredHolder`), each with candidate bytes for both rules' sides.
    for lease in [
        json!({"holderIdentity": "b", "leaseDurationSeconds": 15, "leaseTransitions": 3,
               "acquireTime": "2026-12-02T10:00:00.000000Z", "renewTime": "2026-12-02T10:05:00.000000Z"}),
        json!({"holderIdentity": "", "leaseDurationSeconds": 1, "leaseTransitions": 7}),
        json!({"holderIdentity": "a"}),
        json!({"leaseDurationSeconds": -5, "leaseTransitions": 2147483647}),
        json!({"holderIdentity": "b", "preferredHolder": "a", "strategy": "OldestEmulationVersion"}),
    ] {
        for candidate in [[0u8, 0, 15, 0], [2, 200, 15, 0], [2, 0xff, 30, 0xff]] {
            seeds.push((
                "lease",
                [bytes(&lease), vec![0], candidate.to_vec()].concat(),
            ));
        }
    }
    seeds.push(("decide", vec![0; 64]));
    seeds.push(("decide", vec![0xff; 64]));
    seeds.push(("decide", (0..=255).collect()));

    for target in TARGETS {
        fs::create_dir_all(root.join("fuzz/corpus").join(target))
            .with_context(|| format!("cannot create the corpus of {target}"))?;
    }
    let mut counts = std::collections::BTreeMap::<&str, usize>::new();
    for (target, input) in seeds {
        let index = counts.entry(target).or_default();
        let path = root
            .join("fuzz/corpus")
            .join(target)
            .join(format!("seed-{index:03}"));
        *index += 1;
        fs::write(&path, input).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The seeds come from every example (each with its Namespace in front): a change of the
    /// examples' shape must not leave `cargo xtask fuzz` unable to start, as it once did.
    #[test]
    fn every_example_yields_a_canary_daemon_set_seed() -> Result<()> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let examples = files(&root.join("deploy/examples"), &["yaml"])?;
        assert!(!examples.is_empty());
        for example in &examples {
            if example.ends_with("kustomization.yaml") {
                continue;
            }
            let found = documents(example)?
                .iter()
                .filter(|v| v["kind"] == "CanaryDaemonSet")
                .count();
            assert!(found >= 1, "{}: no CanaryDaemonSet", example.display());
        }
        Ok(())
    }
}
