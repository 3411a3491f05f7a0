//! The demo as a user runs it: its output pinned by golden files (the timeline of every step,
//! the JSON lines, the wording), and `--plot` checked before the rollout and written after.
//!
//! The demo runs in virtual time, deterministic for a seed, so its output is the same on every
//! run. `UPDATE_GOLDEN=1 cargo test -p daemonset-canary --test it demo::` rewrites the files after an
//! intended change; review the diff.
use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn demo(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_daemonset-canary"))
        .arg("demo")
        .args(args)
        .env_remove("RUST_LOG")
        .env_remove("CANARY_LOG_LEVEL")
        .output()
        .unwrap()
}

fn golden(name: &str, args: &[&str]) {
    let output = demo(args);
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, &stdout).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; run with UPDATE_GOLDEN=1", path.display()));
    assert_eq!(
        stdout,
        expected,
        "demo {args:?} differs from {} (UPDATE_GOLDEN=1 rewrites it)",
        path.display()
    );
}

#[test]
fn the_default_rollout_prints_every_step() {
    golden("healthy-5-nodes.txt", &["--nodes", "5"]);
}

#[test]
fn kubevirt_compatibility_says_what_differs_and_shows_it() {
    golden(
        "healthy-5-nodes-kubevirt.txt",
        &["--nodes", "5", "--compatibility", "kubevirt"],
    );
}

#[test]
fn one_node_reads_in_the_singular_with_two_writes() {
    golden("healthy-1-node.txt", &["--nodes", "1"]);
}

#[test]
fn json_lines_start_with_started_and_end_with_the_summary() {
    golden(
        "crashloop-5-nodes.jsonl",
        &["--nodes", "5", "--scenario", "crashloop-canary", "--json"],
    );
}

#[test]
fn the_plot_path_is_checked_before_the_rollout() {
    let dir = std::env::temp_dir().join(format!("demo-plot-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for (path, needle) in [
        (dir.join("missing/rollout.svg"), "does not exist"),
        (
            dir.join("rollout.pdf"),
            "SVG (name ending in .svg) or PNG (.png), not .pdf",
        ),
    ] {
        let started = Instant::now();
        // 2,000 nodes: a rollout that would take a while, were it run.
        let output = demo(&["--nodes", "2000", "--plot", path.to_str().unwrap()]);
        assert_eq!(output.status.code(), Some(1));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.starts_with("error: --plot ") && stderr.contains(needle),
            "{stderr}"
        );
        assert!(output.stdout.is_empty(), "nothing ran");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
    }
    for name in ["rollout.svg", "rollout.png"] {
        let path = dir.join(name);
        let output = demo(&[
            "--nodes",
            "5",
            "--scenario",
            "crashloop-canary",
            "--plot",
            path.to_str().unwrap(),
        ]);
        assert!(output.status.success());
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains(&format!("plot written to {}", path.display())),
            "{stderr}"
        );
        let bytes = std::fs::read(&path).unwrap();
        if name.ends_with(".svg") {
            let svg = String::from_utf8(bytes).unwrap();
            for text in [
                "failed",
                "✗ CanaryCrashLooping",
                "restarts (new pods)",
                "desired",
            ] {
                assert!(svg.contains(text), "{text} missing from the SVG");
            }
        } else {
            assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"));
        }
    }
}

#[test]
fn the_pods_driver_shows_its_steps_and_deletions() {
    golden(
        "pods-driver-10-nodes.txt",
        &["--nodes", "10", "--driver", "pods"],
    );
}

/// The lines of `demo ARGS --json` (the timeline, then the summary), the run successful.
fn demo_json(args: &[&str]) -> Vec<serde_json::Value> {
    let output = demo(&[args, &["--json"]].concat());
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// `scenario` fails the rollout with `reason` with one node ever on the release (the canary's),
/// on either driver.
fn fails_after_one_node(scenario: &str, reason: &str) {
    for driver in ["pods", "max-unavailable"] {
        let lines = demo_json(&["--nodes", "10", "--scenario", scenario, "--driver", driver]);
        let summary = lines.last().unwrap();
        assert_eq!(summary["result"], "failed", "{driver}: {summary}");
        assert_eq!(summary["reason"], reason, "{driver}: {summary}");
        let most_updated = lines
            .iter()
            .filter_map(|line| line["updated"].as_u64())
            .max();
        assert_eq!(
            most_updated,
            Some(1),
            "{driver}: only the canary's node: {lines:?}"
        );
    }
}

/// `node-killer`: the release takes its node NotReady 20 s after its pod is ready; the
/// node-health gate fails the rollout (`NodeUnhealthy`) during the canary's soak, with one node
/// ever on the release, on either driver (the MaxUnavailable driver holds the DaemonSet
/// controller while the canary soaks).
#[test]
fn a_release_that_breaks_its_node_fails_after_one_node_on_either_driver() {
    fails_after_one_node("node-killer", "NodeUnhealthy");
}

/// `unhealthy-node` keeps one node NotReady through the rollout: it still ends `successful`,
/// with that node deferred and every other node's pod deleted once; `--json` carries the step.
#[test]
fn an_unhealthy_node_is_deferred_and_the_json_carries_the_step() {
    let lines = demo_json(&["--nodes", "10", "--scenario", "unhealthy-node"]);
    let summary = lines.last().unwrap();
    assert_eq!(summary["result"], "successful");
    assert_eq!(
        summary["podDeletions"], 9,
        "one per healthy node: {summary}"
    );
    let steps: Vec<u64> = lines
        .iter()
        .filter_map(|line| line["step"].as_u64())
        .collect();
    assert!(
        steps.windows(2).all(|w| w[0] <= w[1]) && steps.first() == Some(&0),
        "steps only move forward from the first: {steps:?}"
    );
    let last_step = &lines[lines.len() - 2];
    assert_eq!(last_step["phase"], "successful");
    assert_eq!(last_step["step"], last_step["stepCount"], "every step done");
    assert_eq!(last_step["deferred"], 1);
    assert_eq!(last_step["updatedReady"], 9);
}

#[test]
fn zone_by_zone_ends_successful_and_the_kubevirt_table_refuses_the_pods_driver() {
    let zones = demo(&["--nodes", "9", "--scenario", "zone-by-zone"]);
    let stdout = String::from_utf8_lossy(&zones.stdout);
    assert!(zones.status.success(), "{stdout}");
    assert!(stdout.contains("one zone at a time"), "{stdout}");
    assert!(
        stdout.contains("rollout successful") && stdout.contains("9 pod deletions"),
        "{stdout}"
    );

    let refused = demo(&["--driver", "pods", "--compatibility", "kubevirt"]);
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("needs --compatibility fixed"), "{stderr}");
}

/// `breaks-pods`: a CNI-like release breaks the pods beside it 20 s after its pod is ready;
/// the neighbours gate fails the rollout (`NeighboursDisrupted`) during the canary's soak,
/// with one node ever on the release, on either driver.
#[test]
fn a_release_that_breaks_its_neighbours_fails_after_one_node_on_either_driver() {
    fails_after_one_node("breaks-pods", "NeighboursDisrupted");
}

/// The README's other scenarios run as it says: `slow-start` (pods that take 90 s to start:
/// slow, but progress, so no deadline fails it) and `node-churn` (nodes join and leave during
/// the rollout: the desired count moves, and the rollout still ends well). Their exact
/// timelines are not pinned: what matters is that each ends as the README promises.
#[test]
fn the_readme_slow_start_and_node_churn_scenarios_end_successful() {
    let summary = |scenario: &str| {
        let output = demo(&["--scenario", scenario]);
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(
            output.status.success(),
            "{scenario}: {}\n{stdout}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(
            stdout
                .lines()
                .any(|l| l.starts_with("rollout successful after ")),
            "{scenario}:\n{stdout}"
        );
        stdout
    };
    let slow = summary("slow-start");
    // Minutes, not the healthy rollout's one: every pod took its 90 s to start.
    let minutes = slow
        .lines()
        .find_map(|l| l.strip_prefix("rollout successful after "))
        .and_then(|rest| rest.split_once('m'))
        .and_then(|(minutes, _)| minutes.parse::<u32>().ok());
    assert!(minutes.is_some_and(|m| m >= 5), "{minutes:?}:\n{slow}");
    let churn = summary("node-churn");
    assert!(
        churn.lines().any(|l| l.contains("/51 ")),
        "a node joined during the rollout:\n{churn}"
    );
}

/// `surge` and `pre-pull` (issue 50): each ends `successful` and says what it showed. Surge:
/// every new pod pulled its 30 s image beside the old one, and the agent downtime is 0 (a
/// plain rollout of the same template, `healthy` with the same pull, is measured for
/// contrast). Pre-pull: only the canary's pod pulled, every later one found its image on the
/// node, so the downtime is the canary's pull and start plus each later pod's start alone;
/// `--compatibility kubevirt` refuses surge.
#[test]
fn surge_has_no_downtime_and_pre_pull_takes_the_pull_out_of_the_later_pods() {
    let surge = demo_json(&["--nodes", "10", "--scenario", "surge"]);
    let summary = surge.last().unwrap();
    assert_eq!(summary["result"], "successful", "{summary}");
    assert_eq!(summary["agentDowntimeNodeSeconds"], 0, "{summary}");
    assert_eq!(summary["agentDowntimeGaps"], 0, "{summary}");
    assert_eq!(
        summary["newPodsPulled"], 10,
        "each pulled, beside its old pod: {summary}"
    );
    let text = demo(&["--nodes", "10", "--scenario", "surge"]);
    let stdout = String::from_utf8_lossy(&text.stdout);
    assert!(
        stdout.contains("agent downtime 0 node-seconds over 0 gaps"),
        "{stdout}"
    );

    let pre_pull = demo_json(&["--nodes", "20", "--scenario", "pre-pull"]);
    let summary = pre_pull.last().unwrap();
    assert_eq!(summary["result"], "successful", "{summary}");
    assert_eq!(summary["newPodsPulled"], 1, "the canary's alone: {summary}");
    assert_eq!(summary["newPodsImagePresent"], 19, "{summary}");
    let downtime = summary["agentDowntimeNodeSeconds"].as_u64().unwrap();
    // The canary: its 20 s pull and its start; the 19 others: their start (seconds) alone.
    assert!(
        (20..20 + 19 * 10).contains(&downtime),
        "{downtime} node-seconds: {summary}"
    );

    let refused = demo(&["--scenario", "surge", "--compatibility", "kubevirt"]);
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("has no surge"), "{stderr}");
}
