//! The events a user reads with `kubectl get events`, after each action that does not change
//! the spec: every message names its own version and step. kube's event recorder folds an
//! event into an earlier one of the same reason and objects, keeping the first message; events
//! used to be grouped per spec generation (and series), so a second hand edit's `DriftDetected`
//! kept the first edit's text, an `undo` could read as the previous rollout, and a rollback's
//! steps as `step 1 of 3 started (x3)` (issue 52).
use crate::support;
use support::rollout::{create, set_spec};

use canary_kube_adapter::CanaryDaemonSet;
use canary_state_machine::{Compatibility, Driver};
use daemonset_canary::demo::scenario::manifest_for;
use kube::Api;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const NAMESPACE: &str = "default";

/// `kubectl ARGS --kubeconfig KUBECONFIG`, its stdout; panics with stderr on failure.
fn kubectl(kubeconfig: &Path, args: &[&str]) -> String {
    let output = Command::new("kubectl")
        .args(args)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .output()
        .expect("kubectl must be installed (.ci/run installs it)");
    assert!(
        output.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The events about `name`, read back as a user does (`kubectl get events -o json`): reason,
/// message and count of each Event object.
fn events_of(kubeconfig: &Path, name: &str) -> Vec<(String, String, i64)> {
    let listed: serde_json::Value = serde_json::from_str(&kubectl(
        kubeconfig,
        &["get", "events", "-n", NAMESPACE, "-o", "json"],
    ))
    .unwrap();
    listed["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|event| event["involvedObject"]["name"] == name)
        .map(|event| {
            (
                event["reason"].as_str().unwrap_or_default().to_owned(),
                event["message"].as_str().unwrap_or_default().to_owned(),
                event["count"].as_i64().unwrap_or(1),
            )
        })
        .collect()
}

/// Waits (90 s at most) until an event of `name` with `reason` says `said`.
async fn wait_event(kubeconfig: &Path, name: &str, reason: &str, said: &str) {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let events = events_of(kubeconfig, name);
        if events
            .iter()
            .any(|(r, message, _)| r == reason && message.contains(said))
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no {reason} saying {said:?} after 90 s; kubectl get events shows:\n{events:#?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Waits until `name` is `successful` on its current generation with every pod on `version`.
async fn wait_successful(api: &Api<CanaryDaemonSet>, name: &str, version: &str) {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let cds = api.get(name).await.unwrap();
        let status = cds.status.clone().unwrap_or_default();
        if status.observed_generation >= cds.metadata.generation
            && status.phase_name() == Some("successful")
            && status.updated_ready == 3
            && status.target_version.as_deref() == Some(version)
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{name} never successful on {version}: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// `daemonset-canary VERB... NAME -n default`, which must succeed.
fn verb(kubeconfig: &Path, words: &[&str], name: &str) {
    let output = Command::new(env!("CARGO_BIN_EXE_daemonset-canary"))
        .args(words)
        .args([name, "-n", NAMESPACE, "--kubeconfig"])
        .arg(kubeconfig)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{words:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// No Event object counts repetitions of two different messages: each distinct message of a
/// reason is an Event of its own (what `expected` lists must each be there).
fn assert_each_message_its_own(events: &[(String, String, i64)], expected: &[(&str, &str)]) {
    for (reason, said) in expected {
        assert!(
            events
                .iter()
                .any(|(r, message, _)| r == reason && message.contains(said)),
            "no {reason} saying {said:?}; kubectl get events shows:\n{events:#?}"
        );
    }
}

/// The MaxUnavailable driver: two hand edits reverted in one spec generation each get their
/// own `DriftDetected` naming what changed; an `undo` is announced and completed naming the
/// version it rolls out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drift_reverts_and_undo_each_name_their_own_change_in_kubectl_get_events() {
    let (sim, client, _run) =
        support::controller_on_sim("events-drift", &["--nodes", "3"], &[]).await;
    let kubeconfig = &sim.kubeconfig;
    let name = "node-agent";
    let manifest = |version: &str| {
        manifest_for(
            Compatibility::Fixed,
            Driver::MaxUnavailable,
            None,
            version,
            "healthy",
        )
    };
    let api: Api<CanaryDaemonSet> = Api::namespaced(client.clone(), NAMESPACE);
    create(&api, manifest("v1")).await;
    wait_successful(&api, name, "v1").await;
    set_spec(&api, &manifest("v2")).await;
    wait_successful(&api, name, "v2").await;

    // `history --revision 2`: v2's pod template against v1's, as a user reads it.
    let shown = Command::new(env!("CARGO_BIN_EXE_daemonset-canary"))
        .args([
            "history",
            name,
            "-n",
            NAMESPACE,
            "--revision",
            "2",
            "--kubeconfig",
        ])
        .arg(kubeconfig)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(
        shown.status.success(),
        "{}",
        String::from_utf8_lossy(&shown.stderr)
    );
    assert!(text.contains("Version:   v2"), "{text}");
    assert!(text.contains("against revision 1 (v1)"), "{text}");
    assert!(
        text.lines().any(|l| l.starts_with('-') && l.contains("v1"))
            && text.lines().any(|l| l.starts_with('+') && l.contains("v2")),
        "{text}"
    );
    let missing = Command::new(env!("CARGO_BIN_EXE_daemonset-canary"))
        .args([
            "history",
            name,
            "-n",
            NAMESPACE,
            "--revision",
            "7",
            "--kubeconfig",
        ])
        .arg(kubeconfig)
        .output()
        .unwrap();
    assert!(!missing.status.success());
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("revision 7 is not in the history"),
        "{}",
        String::from_utf8_lossy(&missing.stderr)
    );

    // Two hand edits of the DaemonSet, the same spec generation of the CanaryDaemonSet.
    let daemon_set = kubectl(
        kubeconfig,
        &[
            "get",
            "ds",
            "-n",
            NAMESPACE,
            "-o",
            "jsonpath={.items[0].metadata.name}",
        ],
    );
    for edit in ["hand-edit-a", "hand-edit-b"] {
        kubectl(
            kubeconfig,
            &[
                "patch",
                "ds",
                &daemon_set,
                "-n",
                NAMESPACE,
                "--type=json",
                "-p",
                &format!(
                    r#"[{{"op":"replace","path":"/spec/template/spec/containers/0/image","value":"agent:{edit}"}}]"#
                ),
            ],
        );
        wait_event(kubeconfig, name, "DriftDetected", edit).await;
        wait_successful(&api, name, "v2").await;
    }

    verb(kubeconfig, &["undo"], name);
    wait_successful(&api, name, "v1").await;
    wait_event(
        kubeconfig,
        name,
        "RolloutCompleted",
        "rollout of v1 complete",
    )
    .await;
    let events = events_of(kubeconfig, name);
    assert_each_message_its_own(
        &events,
        &[
            ("DriftDetected", "hand-edit-a"),
            ("DriftDetected", "hand-edit-b"),
            ("UndoStarted", "(v1)"),
            ("RolloutCompleted", "rollout of v2 complete"),
            ("RolloutCompleted", "rollout of v1 complete"),
        ],
    );
}

/// The Pods driver in three steps: a crash-looping v2 fails in its first step and is rolled
/// back (`onFailure: Rollback`), then a healthy v3 is held in a pause and aborted: every step
/// and every rollback reads as itself in `kubectl get events`, none is another's `(xN)`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steps_rollbacks_and_abort_each_name_their_own_step_in_kubectl_get_events() {
    let (sim, client, _run) =
        support::controller_on_sim("events-steps", &["--nodes", "3"], &[]).await;
    let kubeconfig = &sim.kubeconfig;
    let name = "node-agent";
    let manifest = |version: &str, behavior: &str| {
        let mut manifest =
            manifest_for(Compatibility::Fixed, Driver::Pods, None, version, behavior);
        manifest["spec"]["strategy"]["onFailure"] = serde_json::json!("Rollback");
        manifest["spec"]["strategy"]["steps"] = serde_json::json!([
            {"nodes": "1"}, {"nodes": "2"}, {"pause": {}}, {"nodes": "3"}
        ]);
        manifest
    };
    let api: Api<CanaryDaemonSet> = Api::namespaced(client.clone(), NAMESPACE);
    create(&api, manifest("v1", "healthy")).await;
    wait_successful(&api, name, "v1").await;

    set_spec(&api, &manifest("v2", "crashloop")).await;
    wait_event(kubeconfig, name, "RolledBack", "").await;
    set_spec(&api, &manifest("v3", "healthy")).await;
    wait_event(kubeconfig, name, "StepStarted", "step 3 of 4 started").await;
    verb(kubeconfig, &["abort"], name);
    let deadline = Instant::now() + Duration::from_secs(90);
    while events_of(kubeconfig, name)
        .iter()
        .filter(|(reason, _, _)| reason == "RolledBack")
        .count()
        < 2
    {
        assert!(Instant::now() < deadline, "the abort never rolled back");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    let events = events_of(kubeconfig, name);
    assert_each_message_its_own(
        &events,
        &[
            ("StepStarted", "step 1 of 4 started"),
            ("StepStarted", "step 2 of 4 started"),
            ("StepStarted", "step 3 of 4 started"),
            ("RolloutStarted", "v2"),
            ("RolloutStarted", "v3"),
            ("Aborted", ""),
        ],
    );
    // An Event counting repetitions is the same message repeated: no StepStarted, RolledBack
    // or RollingBack in this story happens twice with the same words.
    for (reason, message, count) in &events {
        if ["StepStarted", "RollingBack", "RolledBack", "Aborted"].contains(&reason.as_str()) {
            assert_eq!(*count, 1, "{reason} {message:?} (x{count}): {events:#?}");
        }
    }
}
