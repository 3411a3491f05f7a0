//! The README's kubectl walkthroughs, run as they are written: the commands of each code block
//! (found by the marker comment above it) run in bash against `sim serve --speed 10`, with the
//! real `kubectl` and the real binary. The first installs and upgrades a node agent; the second
//! tries analysis against `sim serve`'s Prometheus, a good release passing and a bad one failing.
//!
//! Only two things differ from a user's run, and both are checked to be where the test expects
//! them: the first line (`cargo build ... && export PATH=...`) is replaced by putting this test's
//! binary first on PATH (building inside a test would wait for cargo's lock), and the files under
//! /tmp get paths of the test's own (tests and people run at the same time). Needs `kubectl`;
//! fails, never skips, without it.
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const MARKER: &str = "<!-- walkthrough: the test runs this block as it is -->";
const ANALYSIS_MARKER: &str = "<!-- analysis walkthrough: the test runs this block as it is -->";
const BUILD_LINE: &str =
    r#"cargo build -p daemonset-canary && export PATH="$PWD/target/debug:$PATH""#;
const TMP_FILES: [&str; 3] = ["/tmp/sim.kubeconfig", "/tmp/sim.log", "/tmp/controller.log"];
const ANALYSIS_TMP_FILES: [&str; 4] = [
    "/tmp/sim.kubeconfig",
    "/tmp/sim.prometheus",
    "/tmp/sim.log",
    "/tmp/controller.log",
];

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The lines of the README's block after `marker`.
fn walkthrough(marker: &str) -> Vec<String> {
    let readme = std::fs::read_to_string(repository().join("README.md")).unwrap();
    let after = readme
        .split_once(marker)
        .unwrap_or_else(|| panic!("README.md lost its marker {marker:?}"))
        .1;
    let block = after
        .trim_start()
        .strip_prefix("```sh\n")
        .expect("a ```sh block right after the marker");
    let end = block.find("\n```").expect("the end of the block");
    block[..end].lines().map(str::to_owned).collect()
}

/// What a run of a block left: its stdout, and everything it wrote, for failure messages.
struct Run {
    stdout: String,
    logs: String,
    controller_log: String,
}

/// Runs the block after `marker` in a directory of its own named `name`, with `tmp_files`
/// moved there; fails the test when the block fails or takes more than 180 s.
fn run_block(name: &str, marker: &str, tmp_files: &[&str]) -> Run {
    assert!(
        Command::new("kubectl")
            .args(["version", "--client"])
            .output()
            .is_ok_and(|o| o.status.success()),
        "kubectl is not installed: install it (`cargo xtask tools` says how) to run this test"
    );
    let lines = walkthrough(marker);
    assert_eq!(lines[0], BUILD_LINE, "the README's first line changed");
    let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut script = lines[1..].join("\n");
    for file in tmp_files {
        assert!(script.contains(file), "the README no longer uses {file}");
        let name = Path::new(file).file_name().unwrap();
        script = script.replace(file, dir.join(name).to_str().unwrap());
    }
    let binary_dir = Path::new(env!("CARGO_BIN_EXE_daemonset-canary"))
        .parent()
        .unwrap();
    let path = format!(
        "{}:{}",
        binary_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // A failing command stops the script, and whatever it started is stopped with it.
    let script = format!(
        "set -eu\ntrap 'kill $(jobs -p) 2>/dev/null || true' EXIT\ntrap 'exit 1' TERM INT\n{script}\n"
    );
    let started = Instant::now();
    let mut child = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .current_dir(repository())
        .env("PATH", path)
        .env("HOME", &dir)
        .env_remove("KUBECONFIG")
        .env_remove("RUST_LOG")
        .stdout(Stdio::from(
            std::fs::File::create(dir.join("stdout")).unwrap(),
        ))
        .stderr(Stdio::from(
            std::fs::File::create(dir.join("stderr")).unwrap(),
        ))
        .spawn()
        .unwrap();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > Duration::from_secs(180) {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            let _ = child.wait();
            panic!("the walkthrough did not end within 180 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap_or_default();
    let (stdout, stderr) = (read("stdout"), read("stderr"));
    let logs = format!(
        "stdout:\n{stdout}\nstderr:\n{stderr}\nsimulator:\n{}\ncontroller:\n{}",
        read("sim.log"),
        read("controller.log")
    );
    assert!(
        status.success(),
        "the walkthrough failed ({status}):\n{logs}"
    );
    eprintln!(
        "the README walkthrough took {:.1}s",
        started.elapsed().as_secs_f64()
    );
    Run {
        stdout,
        logs,
        controller_log: read("controller.log"),
    }
}

#[test]
fn the_readme_walkthrough_runs_as_written() {
    let Run {
        stdout,
        logs,
        controller_log,
    } = run_block("readme-walkthrough", MARKER, &TMP_FILES);
    // What the README says the user sees.
    assert!(
        stdout.lines().any(|l| l.starts_with("node-agent-example")
            && l.contains("successful")
            && l.contains("20/20")
            && l.contains("v1.9.2")),
        "kubectl get cds -A:\n{logs}"
    );
    for text in [
        "started rollout of v1.9.2",
        "canary of v1.9.2 ready, maxUnavailable 10%",
        "rollout of v1.9.2 complete",
        "✔ successful",
    ] {
        assert!(stdout.contains(text), "{text:?} missing:\n{logs}");
    }
    assert!(
        !controller_log.contains(" WARN "),
        "the controller warned:\n{logs}"
    );
}

#[test]
fn the_readme_analysis_walkthrough_runs_as_written() {
    let Run {
        stdout,
        logs,
        controller_log,
    } = run_block("readme-analysis", ANALYSIS_MARKER, &ANALYSIS_TMP_FILES);
    // The good release passed its analysis, the bad one failed it, as the README says.
    assert!(
        stdout.contains("prometheus: http://127.0.0.1:"),
        "sim serve did not print its Prometheus:\n{logs}"
    );
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("agent") && l.contains("failed") && l.contains("v3")),
        "kubectl get cds agent:\n{logs}"
    );
    for text in [
        "Reason:          AnalysisFailed",
        "error-ratio: 0.5 is above max 0.05",
    ] {
        assert!(stdout.contains(text), "{text:?} missing:\n{logs}");
    }
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("agent") && l.contains("successful") && l.contains("v2")),
        "the good release did not pass:\n{logs}"
    );
    assert!(
        !controller_log.contains(" ERROR "),
        "the controller logged an error:\n{logs}"
    );
}
