//! The command line as a user meets it: help text, bad input, an unreachable cluster, a missing
//! CRD, `crd` output, and the demo's exit codes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Output};

fn binary() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_daemonset-canary"));
    // The tests must not depend on the environment they run in.
    for (name, _) in std::env::vars() {
        if name.starts_with("CANARY_") || name == "KUBECONFIG" || name == "RUST_LOG" {
            command.env_remove(name);
        }
    }
    command.env("RUST_BACKTRACE", "1");
    command
}

fn run(args: &[&str]) -> Output {
    binary().args(args).output().unwrap()
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// An error is one `error: ...` line: no panic, no Debug dump, no backtrace.
fn assert_one_error_line(output: &Output) {
    let text = stderr(output);
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "expected one line on stderr, got:\n{text}");
    assert!(lines[0].starts_with("error: "), "{text}");
    for noise in [
        "panicked",
        "backtrace",
        "Backtrace",
        "Error {",
        "ErrorResponse",
    ] {
        assert!(!text.contains(noise), "{noise:?} in {text}");
    }
}

#[test]
fn every_subcommand_explains_itself() {
    let top = run(&["--help"]);
    assert!(top.status.success());
    let text = stdout(&top);
    for command in ["run", "demo", "crd", "status", "sim"] {
        assert!(
            text.lines()
                .any(|l| l.trim_start().starts_with(&format!("{command} "))),
            "{command} missing from:\n{text}"
        );
    }
    let expectations: &[(&[&str], &[&str])] = &[
        (
            &["run", "--help"],
            &[
                "--kubeconfig",
                "--namespace",
                "--metrics-addr",
                "--leader-election",
                "--lease-name",
                "--lease-namespace",
                "CANARY_METRICS_ADDR",
                "POD_NAME",
            ],
        ),
        (
            &["demo", "--help"],
            &[
                "--nodes",
                "--scenario",
                "crashloop-canary",
                "--seed",
                "--compatibility",
                "--real-time",
                "--json",
                "--plot",
                "--metrics-addr",
                "--hold",
                "CANARY_DEMO_NODES",
            ],
        ),
        (
            &["status", "--help"],
            &["<NAME>", "--namespace", "--kubeconfig"],
        ),
        (&["crd", "--help"], &["kubectl apply"]),
        (&["sim", "serve", "--help"], &["--nodes", "--kubeconfig"]),
    ];
    for (args, needles) in expectations {
        let output = run(args);
        assert!(output.status.success(), "{args:?}: {}", stderr(&output));
        let text = stdout(&output);
        for needle in *needles {
            assert!(
                text.contains(needle),
                "{args:?} help lacks {needle}:\n{text}"
            );
        }
    }
}

#[test]
fn bad_flags_exit_2_with_a_clear_message() {
    for (args, hint) in [
        (&["run", "--no-such-flag"][..], "--no-such-flag"),
        (&["demo", "--nodes", "many"][..], "many"),
        (&["demo", "--scenario", "meteor"][..], "meteor"),
        (&["demo", "--hold", "5"][..], "--metrics-addr"),
        (
            &["run", "--metrics-addr", "not-an-address"][..],
            "not-an-address",
        ),
        (&["status"][..], "<NAME>"),
        (&["frobnicate"][..], "frobnicate"),
    ] {
        let output = run(args);
        assert_eq!(
            output.status.code(),
            Some(2),
            "{args:?}: {}",
            stderr(&output)
        );
        let text = stderr(&output);
        assert!(text.starts_with("error: "), "{args:?}: {text}");
        assert!(
            text.contains(hint),
            "{args:?} should mention {hint}: {text}"
        );
        assert!(!text.contains("panicked"), "{text}");
    }
}

#[test]
fn flags_are_read_from_the_environment() {
    // A bad value through the environment is reported like a bad flag.
    let output = binary()
        .args(["demo"])
        .env("CANARY_DEMO_NODES", "zero")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(stderr(&output).contains("zero"), "{}", stderr(&output));
}

fn write_kubeconfig(name: &str, server: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("canary-cli-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("kubeconfig");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\n\
             contexts:\n- name: c\n  context:\n    cluster: c\n    user: u\n    namespace: default\n\
             current-context: c\nusers:\n- name: u\n  user: {{}}\n"
        ),
    )
    .unwrap();
    path
}

/// A loopback port nothing listens on.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

#[test]
fn an_unreachable_cluster_is_one_line_and_a_failure() {
    let kubeconfig = write_kubeconfig(
        "unreachable",
        &format!("http://127.0.0.1:{}", closed_port()),
    );
    for args in [
        vec!["run", "--metrics-addr", "127.0.0.1:0", "--kubeconfig"],
        vec!["status", "node-agent", "--kubeconfig"],
    ] {
        let output = binary().args(&args).arg(&kubeconfig).output().unwrap();
        assert_eq!(
            output.status.code(),
            Some(1),
            "{args:?}: {}",
            stderr(&output)
        );
        assert_one_error_line(&output);
        let text = stderr(&output);
        assert!(
            text.contains("cannot reach the Kubernetes API at http://127.0.0.1:")
                && text.contains("connection refused"),
            "{text}"
        );
    }
}

#[test]
fn a_missing_kubeconfig_is_one_line_and_a_failure() {
    let output = run(&["run", "--kubeconfig", "/nonexistent/kubeconfig"]);
    assert_eq!(output.status.code(), Some(1));
    assert_one_error_line(&output);
    assert!(
        stderr(&output).contains("the kubeconfig /nonexistent/kubeconfig does not exist"),
        "{}",
        stderr(&output)
    );
}

/// KUBECONFIG naming a file that is not there is said once, as kubectl users know it: not
/// "no KUBECONFIG" with the cause repeated three times.
#[test]
fn kubeconfig_naming_a_missing_file_says_it_does_not_exist() {
    for command in [&["status", "x"][..], &["run"][..], &["observe-kubevirt"][..]] {
        let output = binary()
            .args(command)
            .env("KUBECONFIG", "/missing")
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(1), "{command:?}");
        assert_one_error_line(&output);
        let text = stderr(&output);
        assert!(
            text.contains("KUBECONFIG names /missing, which does not exist"),
            "{command:?}: {text}"
        );
        assert_eq!(text.matches("/missing").count(), 1, "{text}");
    }
}

#[test]
fn crd_prints_the_committed_crd() {
    let output = run(&["crd"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let committed = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/crd/canarydaemonsets.yaml"
    ))
    .unwrap();
    assert_eq!(
        stdout(&output),
        committed,
        "deploy/crd is stale: run `cargo xtask codegen`"
    );
}

#[test]
fn demo_exit_codes_follow_the_expected_end() {
    let healthy = run(&["demo", "--nodes", "5"]);
    assert_eq!(healthy.status.code(), Some(0), "{}", stderr(&healthy));
    let text = stdout(&healthy);
    assert!(text.contains("rollout successful"), "{text}");

    // A crash-looping canary failing the rollout is the expected end of that scenario.
    let crashloop = run(&[
        "demo",
        "--nodes",
        "5",
        "--scenario",
        "crashloop-canary",
        "--json",
    ]);
    assert_eq!(crashloop.status.code(), Some(0), "{}", stderr(&crashloop));
    let lines: Vec<serde_json::Value> = stdout(&crashloop)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let summary = lines.last().unwrap();
    assert_eq!(summary["event"], "summary");
    assert_eq!(summary["result"], "failed");
    assert_eq!(summary["reason"], "CanaryCrashLooping");
    assert!(
        lines[..lines.len() - 1]
            .iter()
            .all(|l| l["event"] == "phase")
    );

    // A demo that cannot finish within its deadline exits non-zero, with one line.
    let too_short = run(&["demo", "--nodes", "5", "--timeout", "1"]);
    assert_eq!(too_short.status.code(), Some(1), "{}", stderr(&too_short));
    assert_one_error_line(&too_short);
    assert!(
        stderr(&too_short).contains("did not finish"),
        "{}",
        stderr(&too_short)
    );
}
