//! The command line as a user meets it: help text, bad input, an unreachable cluster, a missing
//! kubeconfig, listening addresses (host names, a port in use), `status` looking in the wrong
//! namespace, `crd` output, and the demo's exit codes.
use crate::support;

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
    for command in [
        &["status", "x"][..],
        &["run"][..],
        &["observe-kubevirt"][..],
    ] {
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
    // Phases, and the canary soak's hold (issue 46), a write without a phase change.
    assert!(
        lines[..lines.len() - 1]
            .iter()
            .all(|l| l["event"] == "phase" || (l["event"] == "write" && l["write"] == "hold")),
        "{lines:?}"
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

/// `--metrics-addr` takes host names, and a port in use says who holds it and what to use.
#[test]
fn metrics_addresses_take_host_names_and_a_busy_port_is_explained() {
    let kubeconfig = write_kubeconfig(
        "metrics-addr",
        &format!("http://127.0.0.1:{}", closed_port()),
    );
    // Accepted: the command gets as far as the cluster (exit 1, not a usage error).
    let output = binary()
        .args(["run", "--metrics-addr", "localhost:0", "--kubeconfig"])
        .arg(&kubeconfig)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert!(stderr(&output).contains("cannot reach the Kubernetes API"));

    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = held.local_addr().unwrap().port();
    for command in ["run", "observe-kubevirt"] {
        let output = binary()
            .args([
                command,
                "--metrics-addr",
                &format!("localhost:{port}"),
                "--kubeconfig",
            ])
            .arg(&kubeconfig)
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
        assert_one_error_line(&output);
        let text = stderr(&output);
        assert!(
            text.contains(&format!(
                "cannot listen on 127.0.0.1:{port}: the port is already in use by "
            )) && text.contains(&format!("(pid {})", std::process::id()))
                && text.contains("127.0.0.1:0"),
            "{text}"
        );
    }
    let demo = run(&[
        "demo",
        "--nodes",
        "1",
        "--metrics-addr",
        &format!("127.0.0.1:{port}"),
    ]);
    assert_eq!(demo.status.code(), Some(1), "{}", stderr(&demo));
    assert!(
        stderr(&demo).contains("already in use"),
        "{}",
        stderr(&demo)
    );
}

/// `status NAME` in the wrong namespace says where it is; `-A` finds it anywhere.
#[test]
fn status_in_the_wrong_namespace_points_to_the_right_one() {
    use canary_kube_adapter::CanaryDaemonSet;
    use canary_state_machine::Compatibility;
    use daemonset_canary::demo::scenario::manifest;
    use k8s_openapi::api::core::v1::Namespace;
    use kube::Api;
    use kube::api::PostParams;

    let sim = support::serve_sim("status", &["--nodes", "1"]);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let client = support::client_with_crd(&sim.kubeconfig).await;
        let namespace: Namespace =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "monitoring"}}))
                .unwrap();
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &namespace)
            .await
            .unwrap();
        let mut object = manifest(Compatibility::Fixed, "v1", "healthy");
        object["metadata"]["namespace"] = "monitoring".into();
        let object: CanaryDaemonSet = serde_json::from_value(object).unwrap();
        Api::<CanaryDaemonSet>::namespaced(client, "monitoring")
            .create(&PostParams::default(), &object)
            .await
            .unwrap();
    });
    let status = |args: &[&str]| {
        binary()
            .arg("status")
            .args(args)
            .arg("--kubeconfig")
            .arg(&sim.kubeconfig)
            .output()
            .unwrap()
    };
    let wrong = status(&["node-agent"]);
    assert_eq!(wrong.status.code(), Some(1));
    assert_one_error_line(&wrong);
    assert!(
        stderr(&wrong).contains(r#"no CanaryDaemonSet "node-agent" in namespace "default", but there is one in "monitoring": add `-n monitoring` (or -A)"#),
        "{}",
        stderr(&wrong)
    );
    let anywhere = status(&["node-agent", "-A"]);
    assert!(anywhere.status.success(), "{}", stderr(&anywhere));
    assert!(
        stdout(&anywhere).contains("Namespace:       monitoring"),
        "{}",
        stdout(&anywhere)
    );
    let nowhere = status(&["nothing"]);
    assert_eq!(nowhere.status.code(), Some(1));
    assert!(
        stderr(&nowhere).contains("-A looks in every namespace"),
        "{}",
        stderr(&nowhere)
    );
    let nowhere = status(&["nothing", "--all-namespaces"]);
    assert_eq!(nowhere.status.code(), Some(1));
    assert!(
        stderr(&nowhere).contains(r#"no CanaryDaemonSet "nothing" in any namespace"#),
        "{}",
        stderr(&nowhere)
    );
    let both = status(&["x", "-A", "-n", "default"]);
    assert_eq!(both.status.code(), Some(2), "-A and -n conflict");
}

/// One stored CanaryDaemonSet that does not decode (`progressDeadlineSeconds: "ten"`, admitted
/// by an older, looser CRD before the current one was applied) beside good ones: `get -A` lists
/// them all and says why the bad one does not decode; `status` shows it with that reason;
/// `pause` of it says why it cannot apply; the good ones are still shown and paused. Before,
/// every one of these failed with "cannot reach the Kubernetes API ... Error deserializing
/// response" (issue 52).
#[test]
fn an_object_that_does_not_decode_breaks_no_command_for_the_others() {
    use canary_kube_adapter::CanaryDaemonSet;
    use canary_state_machine::Compatibility;
    use daemonset_canary::demo::scenario::manifest;
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::Api;
    use kube::api::{DynamicObject, PostParams};

    let sim = support::serve_sim("undecodable-cli", &["--nodes", "1"]);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let client = support::client(&sim.kubeconfig).await;
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        // An older CRD that took any spec.
        let mut loose = serde_json::to_value(canary_kube_adapter::crd().unwrap()).unwrap();
        for version in loose["spec"]["versions"].as_array_mut().unwrap() {
            version["schema"]["openAPIV3Schema"]["properties"]["spec"] =
                serde_json::json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
            version["schema"]["openAPIV3Schema"]
                .as_object_mut()
                .unwrap()
                .remove("x-kubernetes-validations");
        }
        let loose: CustomResourceDefinition = serde_json::from_value(loose).unwrap();
        crds.create(&PostParams::default(), &loose).await.unwrap();
        let mut bad = manifest(Compatibility::Fixed, "v1", "healthy");
        bad["metadata"]["name"] = "bad".into();
        bad["spec"]["daemonSetName"] = "bad".into();
        bad["spec"]["strategy"]["progressDeadlineSeconds"] = "ten".into();
        let bad: DynamicObject = serde_json::from_value(bad).unwrap();
        canary_kube_adapter::crd::dynamic_api(&client, Some("default"))
            .create(&PostParams::default(), &bad)
            .await
            .unwrap();
        // The current CRD, applied over it: the stored object stays as it was.
        let stored = crds.get("canarydaemonsets.canary.daemonset.dev").await;
        let mut current = canary_kube_adapter::crd().unwrap();
        current.metadata.resource_version = stored.unwrap().metadata.resource_version;
        crds.replace(
            "canarydaemonsets.canary.daemonset.dev",
            &PostParams::default(),
            &current,
        )
        .await
        .unwrap();
        let api: Api<CanaryDaemonSet> = Api::namespaced(client, "default");
        for name in ["node-agent", "other-agent"] {
            let mut good = manifest(Compatibility::Fixed, "v1", "healthy");
            good["metadata"]["name"] = name.into();
            good["spec"]["daemonSetName"] = name.into();
            let good: CanaryDaemonSet = serde_json::from_value(good).unwrap();
            api.create(&PostParams::default(), &good).await.unwrap();
        }
    });
    let cli = |args: &[&str]| {
        binary()
            .args(args)
            .arg("--kubeconfig")
            .arg(&sim.kubeconfig)
            .output()
            .unwrap()
    };
    let why = "spec.strategy.progressDeadlineSeconds";

    let listed = cli(&["get", "-A"]);
    assert!(listed.status.success(), "{}", stderr(&listed));
    for name in ["node-agent", "other-agent", "bad"] {
        assert!(
            stdout(&listed).lines().any(|l| l.contains(name)),
            "{name} not listed:\n{}",
            stdout(&listed)
        );
    }
    assert!(
        stderr(&listed).contains("canarydaemonset default/bad does not decode"),
        "{}",
        stderr(&listed)
    );
    assert!(stderr(&listed).contains(why), "{}", stderr(&listed));

    let shown = cli(&["status", "bad", "-n", "default"]);
    assert!(shown.status.success(), "{}", stderr(&shown));
    assert!(stdout(&shown).contains(why), "{}", stdout(&shown));
    assert!(
        stdout(&shown).contains("kubectl edit canarydaemonset bad -n default"),
        "{}",
        stdout(&shown)
    );
    let good = cli(&["status", "node-agent", "-n", "default"]);
    assert!(good.status.success(), "{}", stderr(&good));

    let paused = cli(&["pause", "bad", "-n", "default"]);
    assert_eq!(paused.status.code(), Some(1), "{}", stdout(&paused));
    assert_one_error_line(&paused);
    assert!(
        stderr(&paused).contains("canarydaemonset default/bad cannot be acted on")
            && stderr(&paused).contains(why),
        "{}",
        stderr(&paused)
    );

    // `get -w` and `status --watch` beside it: the watch decodes each object alone, so the bad
    // one neither breaks it (a typed watch failed, listed again and failed again, warning in a
    // loop, and printed no later change) nor stops `status --watch` of it.
    let watch = |args: &[&str]| {
        binary()
            .args(args)
            .arg("--kubeconfig")
            .arg(&sim.kubeconfig)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let listing = watch(&["get", "-A", "-w"]);
    let viewing = watch(&["status", "bad", "-n", "default", "--watch"]);
    std::thread::sleep(std::time::Duration::from_secs(3));
    let paused = cli(&["pause", "other-agent", "-n", "default"]);
    assert!(paused.status.success(), "{}", stderr(&paused));
    std::thread::sleep(std::time::Duration::from_secs(3));
    let stop = |mut child: std::process::Child| {
        let _ = child.kill();
        child.wait_with_output().unwrap()
    };
    let (listed, viewed) = (stop(listing), stop(viewing));
    let rows = stdout(&listed);
    assert!(
        rows.lines().filter(|l| l.contains("other-agent")).count() >= 2,
        "the change after the list is printed:\n{rows}"
    );
    assert!(
        !stderr(&listed).contains("the watch broke"),
        "{}",
        stderr(&listed)
    );
    assert!(stdout(&viewed).contains(why), "{}", stdout(&viewed));
    assert!(
        stdout(&viewed).contains("Name:"),
        "the view is drawn: {}",
        stdout(&viewed)
    );
}

/// Run as the kubectl plugin (`kubectl-canary` on PATH), the binary names itself as the user
/// typed it: usage and hints say `kubectl canary`, not `daemonset-canary` (issue 52).
#[test]
fn as_the_kubectl_plugin_it_names_itself_kubectl_canary() {
    let dir = std::env::temp_dir().join(format!("canary-plugin-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let plugin = dir.join("kubectl-canary");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_daemonset-canary"), &plugin).unwrap();
    let help = Command::new(&plugin).arg("--help").output().unwrap();
    assert!(help.status.success(), "{}", stderr(&help));
    assert!(
        stdout(&help).contains("Usage: kubectl canary [OPTIONS] <COMMAND>"),
        "{}",
        stdout(&help)
    );
    // A missing CRD's hint, through the plugin.
    let sim = support::serve_sim("plugin-hint", &["--nodes", "1"]);
    let get = Command::new(&plugin)
        .args(["get", "--kubeconfig"])
        .arg(&sim.kubeconfig)
        .output()
        .unwrap();
    assert!(
        stderr(&get).contains("install it with `kubectl canary crd | kubectl apply -f -`"),
        "{}",
        stderr(&get)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
