//! `cargo xtask traces`: the request traces of the deterministic simulation, recorded and
//! compared, to show that a change changes no behaviour (issue 45).
//!
//! `traces record --out DIR` runs seeds of `crates/daemonset-canary/tests/simulation.rs` (its
//! ignored `soak` test; by default the CI set, seeds 0..200 of profile `ci`) with
//! `DST_TRACE_DIR=DIR`: each seed writes every request the controller's replicas sent, in order,
//! per replica, to `DIR/seed-<seed>.trace` (`tests/simulation/requests.rs` says what a line
//! holds). `traces compare A B` prints the seeds whose traces differ, each with its first
//! differing request, and fails when any does. Record the base before the change (keep it under
//! `target/`, it is no source), the change after, and compare; recording one code twice gives
//! identical traces (the seeds replay exactly on virtual time). `traces compare --earlier-rollback`
//! accepts, and names, the seeds whose first difference is a rollback decided before any write
//! (issue 45's one change of behaviour: see [`earlier_rollback_rule`]).
//!
//! One thing in a request is not the seed's: kube-runtime's event recorder stamps each event
//! with the wall clock (`eventTime`, a series' `lastObservedTime`) and names it after that
//! time. The comparison reads those as `<wall clock>` (see [`normalized`]). The recorder also
//! folds a repeated event into a series (a PATCH instead of a POST) for six minutes of wall
//! time; a seed that ran longer than that could send a POST where a faster run sent a PATCH.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

use crate::cargo;

/// Options of `cargo xtask traces`.
#[derive(clap::Args)]
pub struct TracesArgs {
    #[command(subcommand)]
    command: TracesCommand,
}

#[derive(clap::Subcommand)]
enum TracesCommand {
    /// Run seeds with the request trace on, one file per seed in --out (emptied first).
    Record(RecordArgs),
    /// Compare two recorded directories: the seeds that differ and their first differing
    /// request; fails when any seed differs or is missing on one side.
    Compare(CompareArgs),
}

#[derive(clap::Args)]
struct RecordArgs {
    /// Where the traces go (emptied first).
    #[arg(long)]
    out: PathBuf,
    /// How many seeds to run.
    #[arg(long, default_value_t = 200)]
    seeds: u64,
    /// The first seed (the CI set is 0..200).
    #[arg(long, default_value_t = 0)]
    first: u64,
    /// The plans' profile: `ci` (up to 40 nodes, the CI set's) or `soak` (up to 500).
    #[arg(long, default_value = "ci")]
    profile: String,
    /// Seeds run at once (default: the test picks, at most 4); the traces do not depend on it.
    #[arg(long)]
    threads: Option<usize>,
    /// Build in the release profile instead of the tests' `ci` (faster seeds, a build of its own).
    #[arg(long)]
    release: bool,
}

#[derive(clap::Args)]
struct CompareArgs {
    /// The base: traces recorded before the change.
    base: PathBuf,
    /// The traces recorded after it.
    changed: PathBuf,
    /// Accept a seed whose first difference is a rollback decided before any write (issue
    /// 45): the changed side goes back where the base made another write first, or writes the
    /// revision at once where the base waited a requeue after recording the rollback. Each
    /// such seed is still printed, with the rule that accepts it.
    #[arg(long)]
    earlier_rollback: bool,
}

/// Runs `cargo xtask traces`.
pub fn run(args: &TracesArgs) -> Result<()> {
    match &args.command {
        TracesCommand::Record(record_args) => record(record_args),
        TracesCommand::Compare(compare_args) => compare(
            &compare_args.base,
            &compare_args.changed,
            compare_args.earlier_rollback,
        ),
    }
}

fn record(args: &RecordArgs) -> Result<()> {
    if !matches!(args.profile.as_str(), "ci" | "soak") {
        bail!("--profile is ci or soak, not {:?}", args.profile);
    }
    if args.out.exists() {
        std::fs::remove_dir_all(&args.out)
            .with_context(|| format!("cannot empty {}", args.out.display()))?;
    }
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("cannot create {}", args.out.display()))?;
    let out = std::fs::canonicalize(&args.out)
        .with_context(|| format!("cannot resolve {}", args.out.display()))?;
    let mut command = Command::new(cargo());
    command.args([
        "test",
        "-q",
        "-p",
        "daemonset-canary",
        "--test",
        "simulation",
    ]);
    if args.release {
        command.arg("--release");
    } else {
        // The tests' profile (`crate::PROFILE`), whose build CI and `cargo xtask` share.
        command.args(["--profile", crate::PROFILE]);
    }
    command
        .args(["--", "--ignored", "--exact", "soak", "--nocapture"])
        .env("DST_SEEDS", args.seeds.to_string())
        .env("DST_FIRST", args.first.to_string())
        .env("DST_PROFILE", &args.profile)
        .env("DST_TRACE_DIR", &out)
        .stdout(Stdio::piped());
    if let Some(threads) = args.threads {
        command.env("DST_THREADS", threads.to_string());
    }
    eprintln!(
        "traces: seeds {}..{} (profile {}) into {}",
        args.first,
        args.first + args.seeds,
        args.profile,
        out.display()
    );
    let mut child = command.spawn().context("cannot start cargo test")?;
    let stdout = child.stdout.take().context("no stdout from cargo test")?;
    for line in BufReader::new(stdout).lines() {
        let line = line.context("cannot read the test output")?;
        match line.strip_prefix("dst-progress ") {
            Some(progress) => eprintln!("{progress}"),
            None => println!("{line}"),
        }
    }
    let status = child.wait().context("cargo test did not finish")?;
    let written = trace_files(&out)?.len() as u64;
    if written != args.seeds {
        bail!(
            "{written} of {} seeds wrote a trace into {} (a seed that never ended writes none)",
            args.seeds,
            out.display()
        );
    }
    if !status.success() {
        bail!(
            "the seeds found violations (reports above); their traces are in {}",
            out.display()
        );
    }
    eprintln!("traces: {written} seeds recorded in {}", out.display());
    Ok(())
}

/// The trace files of `dir`, by file name.
fn trace_files(dir: &Path) -> Result<BTreeMap<String, PathBuf>> {
    let mut files = BTreeMap::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))? {
        let path = entry
            .with_context(|| format!("cannot list {}", dir.display()))?
            .path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_owned();
        if name.starts_with("seed-") && name.ends_with(".trace") {
            files.insert(name, path);
        }
    }
    Ok(files)
}

fn compare(base: &Path, changed: &Path, earlier_rollback: bool) -> Result<()> {
    let base_files = trace_files(base)?;
    let changed_files = trace_files(changed)?;
    if base_files.is_empty() {
        bail!("no trace in {}", base.display());
    }
    let mut differing = 0_usize;
    let mut rollbacks = 0_usize;
    let names: std::collections::BTreeSet<&String> =
        base_files.keys().chain(changed_files.keys()).collect();
    for name in &names {
        let seed = name
            .trim_start_matches("seed-")
            .trim_end_matches(".trace")
            .trim_start_matches('0');
        let seed = if seed.is_empty() { "0" } else { seed };
        let (Some(a), Some(b)) = (base_files.get(*name), changed_files.get(*name)) else {
            differing += 1;
            let side = if base_files.contains_key(*name) {
                changed
            } else {
                base
            };
            println!("seed {seed}: no trace in {}", side.display());
            continue;
        };
        let read = |path: &PathBuf| {
            std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))
        };
        let (a, b) = (read(a)?, read(b)?);
        if let Some(difference) = first_difference(&a, &b) {
            differing += 1;
            println!("seed {seed}: {difference}");
            if let Some(rule) = earlier_rollback_rule(&a, &b) {
                rollbacks += 1;
                println!("  the earlier rollback: {rule}");
            }
        }
    }
    println!(
        "traces: {} seeds compared, {differing} differ ({} and {}), {rollbacks} of them by a rollback decided before any write",
        names.len(),
        base.display(),
        changed.display()
    );
    let unexplained = if earlier_rollback {
        differing - rollbacks
    } else {
        differing
    };
    if unexplained > 0 {
        bail!("{unexplained} seeds differ");
    }
    Ok(())
}

/// Why the first difference of two traces of one seed is a rollback decided before any write
/// (issue 45), or `None`. In the replica where they first differ, either
/// - the last write of the common part is a status write that starts a rollback (and only
///   reads and events follow it), and the change's next request comes before the base's: the
///   base waited a requeue, the change writes the revision at once; or
/// - from the difference on, the change reads (and records revision outcomes), then starts a
///   rollback in a status write where the base wrote something else first (the write of a
///   rollout it then left).
///
/// Reads, events and lease renewals are background; the replica whose first difference comes
/// first in virtual time is the one judged.
///
/// A rollback starts in a status write whose `history.rollback` (reason, revision left,
/// revision gone back to) differs from the one of the object's status write before it.
fn earlier_rollback_rule(base: &str, changed: &str) -> Option<&'static str> {
    let (a, b) = (sections(base), sections(changed));
    let replicas: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    let empty = Vec::new();
    // The replica whose first difference comes first in virtual time: a rollback in one
    // replica shifts the background requests (lease renewals) of the others.
    let mut first: Option<(u64, Vec<&str>, Vec<&str>, usize)> = None;
    for replica in replicas {
        let lines_a: Vec<&str> = a
            .get(replica)
            .unwrap_or(&empty)
            .iter()
            .map(|(_, l)| l.as_str())
            .collect();
        let lines_b: Vec<&str> = b
            .get(replica)
            .unwrap_or(&empty)
            .iter()
            .map(|(_, l)| l.as_str())
            .collect();
        let Some(index) = lines_a
            .iter()
            .zip(&lines_b)
            .position(|(x, y)| x != y)
            .or_else(|| (lines_a.len() != lines_b.len()).then(|| lines_a.len().min(lines_b.len())))
        else {
            continue;
        };
        let at = [lines_a.get(index), lines_b.get(index)]
            .into_iter()
            .flatten()
            .filter_map(|l| millis(l))
            .min()
            .unwrap_or(u64::MAX);
        if first.as_ref().is_none_or(|(t, ..)| at < *t) {
            first = Some((at, lines_a, lines_b, index));
        }
    }
    let (_, lines_a, lines_b, index) = first?;
    let is_write = |lines: &[&str], i: usize| lines.get(i).is_some_and(|l| !is_background(l));
    let last_write = (0..index).rev().find(|&i| is_write(&lines_a, i));
    let base_waited = match (lines_a.get(index), lines_b.get(index)) {
        (Some(x), Some(y)) => millis(x) > millis(y),
        (None, Some(_)) => true,
        _ => false,
    };
    if base_waited && last_write.is_some_and(|i| starts_rollback(&lines_a, i)) {
        return Some(
            "the base waited a requeue after recording the rollback; the change writes at once",
        );
    }
    // The pass's record step writes the history's revisions before its status.
    let next_write = (index..lines_b.len())
        .find(|&i| is_write(&lines_b, i) && !lines_b.get(i).is_some_and(|l| is_history_write(l)));
    if next_write.is_some_and(|i| starts_rollback(&lines_b, i)) {
        return Some("the change goes back before the write the base made first");
    }
    None
}

/// A write of the history (a ControllerRevision's outcome), which a pass's record step makes
/// before its status write.
fn is_history_write(line: &str) -> bool {
    request(line).is_some_and(|(_, path, _)| path.contains("/controllerrevisions/"))
}

/// A trace line's virtual time, in milliseconds.
fn millis(line: &str) -> Option<u64> {
    let (time, _) = line.trim_start().split_once(' ')?;
    time.strip_suffix("ms")?.parse().ok()
}

/// A trace line's method, path and body.
fn request(line: &str) -> Option<(&str, &str, &str)> {
    let (_time, rest) = line.trim_start().split_once(' ')?;
    let (method, rest) = rest.split_once(' ')?;
    let (path, body) = rest.split_once(' ').unwrap_or((rest, ""));
    Some((method, path, body))
}

/// A read, an event, a lease renewal, or a replica's start or stop mark: nothing that a pass
/// decides, so nothing a rollback changes the order of.
fn is_background(line: &str) -> bool {
    match request(line) {
        Some((method, path, _)) => {
            method == "GET"
                || path.starts_with("/apis/events.k8s.io/")
                || path.starts_with("/apis/coordination.k8s.io/")
        }
        None => true,
    }
}

/// The object and the rollback (reason, revision left, revision gone back to) a status write
/// records; `None` when the line is no status write of a CanaryDaemonSet.
fn status_rollback(line: &str) -> Option<(String, Option<String>)> {
    let (method, path, body) = request(line)?;
    let object = path.split('?').next()?.strip_suffix("/status")?;
    if method != "PATCH" || !object.contains("/canarydaemonsets/") {
        return None;
    }
    let body: serde_json::Value = serde_json::from_str(body).ok()?;
    let rollback = body
        .pointer("/status/history/rollback")
        .filter(|r| !r.is_null());
    let key = rollback.map(|r| {
        format!(
            "{} {} {}",
            r.get("reason").unwrap_or(&serde_json::Value::Null),
            r.get("from").unwrap_or(&serde_json::Value::Null),
            r.pointer("/to/name").unwrap_or(&serde_json::Value::Null)
        )
    });
    Some((object.to_owned(), key))
}

/// Whether line `at` of `lines` is a status write that starts a rollback.
fn starts_rollback(lines: &[&str], at: usize) -> bool {
    let Some((object, Some(rollback))) = lines.get(at).and_then(|l| status_rollback(l)) else {
        return false;
    };
    let before = lines
        .iter()
        .take(at)
        .rev()
        .filter_map(|l| status_rollback(l))
        .find(|(o, _)| *o == object)
        .and_then(|(_, r)| r);
    before.as_ref() != Some(&rollback)
}

/// The lines of a trace, per replica section, each with its line number: the requests and the
/// replica's start and stop marks (a replica started at another time is a difference too); the
/// heading (the plan) is left out. Each line is [`normalized`].
fn sections(text: &str) -> BTreeMap<String, Vec<(usize, String)>> {
    let mut sections: BTreeMap<String, Vec<(usize, String)>> = BTreeMap::new();
    let mut current = String::from("(no replica)");
    for (number, line) in text.lines().enumerate() {
        if let Some(replica) = line.strip_prefix("== ") {
            current = replica.to_owned();
            sections.entry(current.clone()).or_default();
        } else if !line.starts_with('#') {
            sections
                .entry(current.clone())
                .or_default()
                .push((number + 1, normalized(line)));
        }
    }
    sections
}

/// The first request in which two traces of one seed differ, replica by replica, described.
fn first_difference(base: &str, changed: &str) -> Option<String> {
    let (a, b) = (sections(base), sections(changed));
    let replicas: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    for replica in replicas {
        let empty = Vec::new();
        let (lines_a, lines_b) = (
            a.get(replica).unwrap_or(&empty),
            b.get(replica).unwrap_or(&empty),
        );
        let position = lines_a
            .iter()
            .zip(lines_b)
            .position(|((_, x), (_, y))| x != y)
            .or_else(|| (lines_a.len() != lines_b.len()).then(|| lines_a.len().min(lines_b.len())));
        let Some(index) = position else { continue };
        let show =
            |lines: &Vec<(usize, String)>, other: &Vec<(usize, String)>| match lines.get(index) {
                Some((number, line)) => {
                    let column = other
                        .get(index)
                        .map_or(0, |(_, o)| first_differing_char(line, o));
                    format!("line {number}: {}", excerpt(line, column))
                }
                None => "(no more requests)".to_owned(),
            };
        return Some(format!(
            "{replica}, request {}:\n  base:    {}\n  changed: {}",
            index + 1,
            show(lines_a, lines_b),
            show(lines_b, lines_a)
        ));
    }
    None
}

/// The wall-clock marks of kube-runtime's events blanked: an event's name (its creation time
/// in hexadecimal nanoseconds), in the path and the body, its `eventTime` and its series'
/// `lastObservedTime`. Every other line as it is.
fn normalized(line: &str) -> String {
    const EVENTS: &str = " /apis/events.k8s.io/";
    let Some(at) = line.find(EVENTS) else {
        return line.to_owned();
    };
    let (head, rest) = line.split_at(at + 1);
    let (path, body) = rest.split_once(' ').unwrap_or((rest, ""));
    let path = match path.split_once("/events/") {
        Some((before, after)) => {
            let query = after
                .find('?')
                .map_or("", |q| after.get(q..).unwrap_or_default());
            format!("{before}/events/<event>{query}")
        }
        None => path.to_owned(),
    };
    let body = match serde_json::from_str::<serde_json::Value>(body) {
        Ok(mut event) => {
            let wall = || serde_json::Value::from("<wall clock>");
            if let Some(object) = event.as_object_mut() {
                if object.contains_key("eventTime") {
                    object.insert("eventTime".to_owned(), wall());
                }
                if let Some(name) = object
                    .get_mut("metadata")
                    .and_then(|m| m.as_object_mut())
                    .and_then(|m| m.get_mut("name"))
                {
                    *name = serde_json::Value::from("<event>");
                }
                if let Some(observed) = object
                    .get_mut("series")
                    .and_then(|s| s.as_object_mut())
                    .and_then(|s| s.get_mut("lastObservedTime"))
                {
                    *observed = wall();
                }
            }
            event.to_string()
        }
        Err(_) => body.to_owned(),
    };
    format!("{head}{path} {body}")
}

fn first_differing_char(a: &str, b: &str) -> usize {
    a.char_indices()
        .zip(b.chars())
        .find(|((_, x), y)| x != y)
        .map_or(a.len().min(b.len()), |((at, _), _)| at)
}

/// `line` cut to its start and the stretch around byte `column` (where it first differs).
fn excerpt(line: &str, column: usize) -> String {
    const HEAD: usize = 120;
    const AROUND: usize = 160;
    if line.len() <= HEAD + 2 * AROUND {
        return line.to_owned();
    }
    let floor = |at: usize| {
        (0..=at.min(line.len()))
            .rev()
            .find(|&i| line.is_char_boundary(i))
    };
    let head = line.get(..floor(HEAD).unwrap_or(0)).unwrap_or_default();
    let from = floor(column.saturating_sub(AROUND).max(HEAD)).unwrap_or(0);
    let to = floor(column + AROUND).unwrap_or(line.len());
    format!("{head} … {} …", line.get(from..to).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::{earlier_rollback_rule, first_difference};

    const BASE: &str = "# seed 1\n== replica 0\n-- 0ms replica-a started\n  1ms GET /a\n  2ms PATCH /b {\"x\":1}\n== replica 1\n  1ms GET /a\n";

    fn status(at: &str, rollback: &str) -> String {
        format!(
            "  {at} PATCH /apis/canary.daemonset.dev/v1alpha1/namespaces/d/canarydaemonsets/a/status?&f=x {{\"status\":{{\"history\":{{\"rollback\":{rollback}}}}}}}\n"
        )
    }

    const BACK: &str = r#"{"from":"a-2","reason":"Abort","to":{"name":"a-1"}}"#;

    #[test]
    fn a_rollback_written_at_once_is_the_earlier_rollback() {
        let head = format!("# seed 1\n== replica 0\n{}", status("1ms", "null"));
        let recorded = format!(
            "{head}{}  2ms POST /apis/events.k8s.io/v1/e {{}}\n",
            status("2ms", BACK)
        );
        let base = format!("{recorded}  1002ms PATCH /apis/apps/v1/daemonsets/a [1]\n");
        let changed = format!("{recorded}  2ms PATCH /apis/apps/v1/daemonsets/a [1]\n");
        assert!(first_difference(&base, &changed).is_some());
        assert!(earlier_rollback_rule(&base, &changed).is_some_and(|r| r.contains("waited")));
        // A rollback recorded long before is no explanation of a later difference.
        let later = format!("{recorded}  5ms PATCH /apis/apps/v1/daemonsets/a [2]\n");
        let other = format!("{recorded}  5ms PATCH /apis/apps/v1/daemonsets/a [3]\n");
        let base = format!("{}{}", later, status("6ms", BACK));
        let changed = format!("{}{}", other, status("6ms", BACK));
        assert_eq!(earlier_rollback_rule(&base, &changed), None);
    }

    #[test]
    fn a_rollback_before_the_write_the_base_made_is_the_earlier_rollback() {
        let head = format!("# seed 1\n== replica 0\n{}", status("1ms", "null"));
        let base = format!(
            "{head}  2ms PATCH /apis/apps/v1/daemonsets/a [widen]\n{}",
            status("2ms", BACK)
        );
        let changed = format!(
            "{head}  2ms GET /apis/apps/v1/controllerrevisions\n{}",
            status("2ms", BACK)
        );
        assert!(
            earlier_rollback_rule(&base, &changed).is_some_and(|r| r.contains("before the write"))
        );
        // The same status write without a new rollback explains nothing.
        let changed = format!("{head}{}", status("2ms", "null"));
        assert_eq!(earlier_rollback_rule(&base, &changed), None);
    }

    #[test]
    fn identical_traces_have_no_difference() {
        assert_eq!(first_difference(BASE, BASE), None);
    }

    #[test]
    fn the_first_differing_request_is_named_with_its_replica() {
        let changed = BASE.replace("{\"x\":1}", "{\"x\":2}");
        let difference = first_difference(BASE, &changed).unwrap_or_default();
        assert!(
            difference.starts_with("replica 0, request 3:"),
            "{difference}"
        );
        assert!(difference.contains("line 5"), "{difference}");
        assert!(difference.contains("{\"x\":2}"), "{difference}");
    }

    #[test]
    fn the_wall_clock_of_events_is_no_difference() {
        let event = |name: &str, time: &str| {
            format!(
                "# seed 1\n== replica 0\n  5ms PATCH /apis/events.k8s.io/v1/namespaces/d/events/{name}?x=1 {{\"eventTime\":\"{time}\",\"metadata\":{{\"name\":\"{name}\"}},\"note\":\"started\",\"series\":{{\"count\":2,\"lastObservedTime\":\"{time}\"}}}}\n"
            )
        };
        let one = event("agent.18eecedc44194c07", "2026-12-06T23:45:46.798042Z");
        let two = event("agent.18eed1eb709579ac", "2026-12-07T00:41:50.503770Z");
        assert_eq!(first_difference(&one, &two), None);
        let other_note = two.replace("started", "widened");
        assert!(first_difference(&one, &other_note).is_some());
    }

    #[test]
    fn a_missing_request_is_a_difference() {
        let changed = BASE.replace("  1ms GET /a\n", "").replacen(
            "== replica 1\n",
            "== replica 1\n  1ms GET /a\n",
            1,
        );
        let difference = first_difference(BASE, &changed).unwrap_or_default();
        assert!(difference.contains("request 2"), "{difference}");
        let shorter = BASE.replace("== replica 1\n  1ms GET /a\n", "== replica 1\n");
        let difference = first_difference(BASE, &shorter).unwrap_or_default();
        assert!(difference.contains("replica 1, request 1"), "{difference}");
        assert!(difference.contains("(no more requests)"), "{difference}");
    }
}
