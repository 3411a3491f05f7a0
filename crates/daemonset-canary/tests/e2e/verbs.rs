//! The verbs as a user types them, on the real control plane: `get`, `status --watch`,
//! `pause`, `resume`, `promote`, `promote --full`, `retry`, `abort`, `undo`, `history`, each
//! through the binary and through kubectl's plugin mechanism (`kubectl canary ...`, the binary
//! linked as `kubectl-canary` on PATH), accepted where it applies and refused, with one line and
//! exit 1, where it does not. What each verb does is checked on what the cluster shows: the
//! pods the real DaemonSet controller keeps or replaces, the DaemonSet's update strategy, and the
//! controller's DaemonSet writes as the API server recorded them.

use crate::audit;
use crate::harness::{
    Cli, E2e, accepted, first_and_last, live_uids, refused, sum_samples, with_strategy,
};
use daemonset_canary::demo::scenario::NAME;
use k8s_openapi::jiff::Timestamp;
use std::time::{Duration, Instant};

/// A Pods-driver rollout held by untimed pauses: `pause` holds it in a pause step (and then
/// `promote` is refused until `resume`), `promote` ends one pause, the next nodes step takes
/// exactly its share of nodes, `promote --full` skips the remaining pause and ends the rollout;
/// `get`, `history` and `status --watch` show it, through both ways of typing them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs `cargo xtask e2e`"]
async fn pods_driver_pause_resume_promote_and_full_promote() {
    let e2e = E2e::isolated("verbs-pods").nodes(6).start().await;
    let steps = serde_json::json!({
        "driver": "Pods",
        "steps": [{"nodes": "1"}, {"pause": {}}, {"nodes": "50%"}, {"pause": {}},
                  {"pause": {"duration": "1h"}}, {"nodes": "100%"}]
    });
    let agent = |version: &str| with_strategy(e2e.agent_json(version, "healthy"), steps.clone());
    e2e.install(
        &serde_json::from_value(agent("v1")).unwrap(),
        Duration::from_secs(120),
    )
    .await;

    // What the tools that wait on it read (kstatus, Argo CD), at each stop of this rollout.
    let verdicts = |kstatus: &str, health: &str| {
        let (k, h, message) = e2e.verdicts(NAME);
        assert_eq!((k.as_str(), h.as_str()), (kstatus, health), "{message}");
        message
    };
    verdicts("Current", "Healthy");
    e2e.kubectl(&[
        "wait",
        "--for=condition=Ready",
        &format!("cds/{NAME}"),
        "--timeout=30s",
    ]);

    // At rest, every verb that needs a rollout says why it does nothing.
    refused(
        &e2e.verb(Cli::Binary, &["promote"]),
        "promote refused: the rollout is not paused (phase successful): nothing to promote",
    );
    refused(
        &e2e.verb(Cli::Plugin, &["promote", "--full"]),
        "promote refused: there is no rollout under way (phase successful): nothing to promote",
    );
    refused(
        &e2e.verb(Cli::Plugin, &["resume"]),
        "resume refused: it is not paused on request: nothing to resume",
    );
    let listed = accepted(
        &e2e.cli(Cli::Plugin, &["get", "-n", &e2e.namespace]),
        "successful",
    );
    let row: Vec<&str> = listed.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(
        row[..5],
        [NAME, "successful", "6/6", "6/6", "v1"],
        "{listed}"
    );

    let (_watching, watched) = e2e.verb_in_background(Cli::Plugin, &["status", "--watch"]);
    let generation = e2e.set_spec(&agent("v2")).await;
    e2e.wait_phase(generation, "paused", Duration::from_secs(120))
        .await;
    assert_eq!(
        e2e.version_counts().await,
        [("v1".into(), 5), ("v2".into(), 1)].into()
    );
    let said = verdicts("Failed", "Suspended");
    assert!(said.starts_with("AwaitingPromotion: step 2 of 6"), "{said}");

    // A hold on request inside a pause step: promote waits for resume.
    accepted(&e2e.verb(Cli::Plugin, &["pause"]), "paused (was paused)");
    e2e.wait_for("the hold recorded", Duration::from_secs(30), || async {
        e2e.status().await.held == Some(true)
    })
    .await;
    e2e.wait_for("Stalled by the hold", Duration::from_secs(30), || async {
        e2e.status()
            .await
            .conditions
            .iter()
            .any(|c| c.reason == "HeldOnRequest")
    })
    .await;
    let said = verdicts("Failed", "Suspended");
    assert!(said.starts_with("HeldOnRequest"), "{said}");
    refused(
        &e2e.verb(Cli::Binary, &["pause"]),
        "pause refused: it is paused on request already",
    );
    refused(
        &e2e.verb(Cli::Binary, &["promote"]),
        "is held on request (the pause verb): resume it first",
    );
    accepted(
        &e2e.verb(Cli::Binary, &["resume"]),
        "resumed: the rollout goes on from where it was held",
    );
    e2e.wait_for("the hold lifted", Duration::from_secs(30), || async {
        e2e.status().await.held.is_none()
    })
    .await;
    // Resumed into the same pause step: still one node on v2, nothing deleted meanwhile.
    let before = live_uids(&e2e.pods().await);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let status = e2e.status().await;
    assert_eq!(
        (status.phase_name(), status.current_step_index),
        (Some("paused"), Some(1)),
        "{status:?}"
    );
    assert_eq!(
        live_uids(&e2e.pods().await),
        before,
        "a pod was replaced in a pause"
    );

    // promote: the pause ends, the 50% step updates 3 of 6 nodes, the next pause holds them.
    accepted(
        &e2e.verb(Cli::Plugin, &["promote"]),
        "promoted: step 2 of 6 (a pause) ends, the rollout goes on",
    );
    e2e.wait_for(
        "the second pause step",
        Duration::from_secs(120),
        || async {
            let status = e2e.status().await;
            status.phase_name() == Some("paused") && status.current_step_index == Some(3)
        },
    )
    .await;
    assert_eq!(
        e2e.version_counts().await,
        [("v1".into(), 3), ("v2".into(), 3)].into()
    );
    let listed = accepted(
        &e2e.cli(Cli::Binary, &["get", "-n", &e2e.namespace]),
        "paused",
    );
    let row: Vec<&str> = listed.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(row[..5], [NAME, "paused", "4/6", "3/6", "v2"], "{listed}");

    // promote --full: the untimed pause and the hour-long one are skipped.
    let started = Instant::now();
    accepted(
        &e2e.verb(Cli::Binary, &["promote", "--full"]),
        "fully promoted from step 4 of 6",
    );
    e2e.wait_phase(generation, "successful", Duration::from_secs(120))
        .await;
    assert!(
        started.elapsed() < Duration::from_secs(600),
        "the hour-long pause held"
    );
    verdicts("Current", "Healthy");
    assert_eq!(e2e.version_counts().await, [("v2".into(), 6)].into());

    let table = accepted(&e2e.verb(Cli::Plugin, &["history"]), "REVISION");
    let row = |version: &str| crate::support::history_row(&table, version);
    assert!(
        row("v1").contains("successful") && !row("v1").contains("stable"),
        "{table}"
    );
    assert!(row("v2").contains("successful (stable)"), "{table}");
    assert!(
        row("v2").split_whitespace().next().unwrap().ends_with('*'),
        "{table}"
    );

    // Each verb was acted on once: one event each, naming who asked.
    for (reason, times) in [("Paused", 1), ("Resumed", 1), ("Promoted", 2)] {
        assert_eq!(
            e2e.events_with_reason(reason),
            times,
            "{reason}: {:?}",
            e2e.event_reasons()
        );
    }
    // The plugin ran as the cluster admin of the kubeconfig; the event names that user.
    let noted = e2e.kubectl(&[
        "get",
        "events",
        "--field-selector",
        "reason=Paused",
        "-o",
        "jsonpath={.items[0].message}{.items[0].note}",
    ]);
    assert!(noted.contains("asked by daemonset-canary ("), "{noted}");

    // The watch drew each step as the current one, and ends with the object.
    e2e.canaries()
        .delete(NAME, &Default::default())
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !watched.lock().unwrap().contains("deleted") {
        assert!(
            Instant::now() < deadline,
            "the watch did not see the deletion"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let watched = watched.lock().unwrap().clone();
    for seen in [
        "▶ 1. nodes 1",
        "▶ 2. pause until promoted",
        "▶ 4. pause until promoted",
        "Held:",
        "Phase:           ✔ successful",
    ] {
        assert!(watched.contains(seen), "{seen:?} never shown:\n{watched}");
    }
}

/// `pause` on a MaxUnavailable rollout under way: the controller's one write puts the
/// DaemonSet on `OnDelete` with the rollout's template and `maxUnavailable` kept, which the real
/// API server accepts and the real DaemonSet controller obeys (no old pod replaced while held);
/// `resume` puts it back on `RollingUpdate` and the rollout ends as it would have.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs `cargo xtask e2e`"]
async fn max_unavailable_pause_holds_the_daemon_set_controller_until_resume() {
    let e2e = E2e::isolated("verbs-hold").nodes(10).start().await;
    // Three pods at a time once the canary is ready: four waves, not ten.
    let agent = |version: &str, behavior: &str| {
        with_strategy(
            e2e.agent_json(version, behavior),
            serde_json::json!({"fastMaxUnavailable": "30%"}),
        )
    };
    e2e.install(
        &serde_json::from_value(agent("v1", "healthy")).unwrap(),
        Duration::from_secs(120),
    )
    .await;
    let installed = Timestamp::now();
    let (_watching, watched) = e2e.verb_in_background(Cli::Binary, &["status", "--watch"]);
    // Slow pods: each new pod is Ready 8 s after it starts, so the rollout lasts long enough
    // to be held in the middle.
    let generation = e2e.set_spec(&agent("v2", "slow-start=8s")).await;
    e2e.wait_for("three nodes on v2", Duration::from_secs(180), || async {
        e2e.version_counts().await.get("v2").copied().unwrap_or(0) >= 3
    })
    .await;
    accepted(&e2e.verb(Cli::Binary, &["pause"]), "paused (was ");
    e2e.wait_for("the hold recorded", Duration::from_secs(30), || async {
        let status = e2e.status().await;
        status.held == Some(true) && status.phase_name() == Some("paused")
    })
    .await;
    let held = e2e.daemon_set().await;
    let spec = held.spec.clone().unwrap();
    let strategy = spec.update_strategy.clone().unwrap();
    assert_eq!(strategy.type_.as_deref(), Some("OnDelete"), "{strategy:?}");
    assert!(
        strategy
            .rolling_update
            .as_ref()
            .and_then(|r| r.max_unavailable.as_ref())
            .is_some(),
        "the rollout's maxUnavailable is kept for the resume: {strategy:?}"
    );
    let image = spec.template.spec.unwrap().containers[0].image.clone();
    assert!(
        image.unwrap().ends_with(":v2"),
        "the rollout's template is kept"
    );

    // Held: a pod that was being replaced when the hold came may still be recreated (on v2),
    // but no old pod is replaced any more.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let on_v1 = |versions: std::collections::BTreeMap<String, String>| -> Vec<String> {
        versions
            .into_iter()
            .filter(|(_, v)| v == "v1")
            .map(|(node, _)| node)
            .collect()
    };
    let old = on_v1(e2e.versions_by_node().await);
    assert!(!old.is_empty(), "the rollout ended before the hold");
    let held_for = Instant::now();
    while held_for.elapsed() < Duration::from_secs(15) {
        assert_eq!(
            on_v1(e2e.versions_by_node().await),
            old,
            "an old pod was replaced while held"
        );
        assert_eq!(e2e.status().await.phase_name(), Some("paused"));
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    refused(
        &e2e.verb(Cli::Plugin, &["pause"]),
        "pause refused: it is paused on request already",
    );

    accepted(&e2e.verb(Cli::Plugin, &["resume"]), "resumed");
    e2e.wait_phase(generation, "successful", Duration::from_secs(300))
        .await;
    assert_eq!(e2e.version_counts().await, [("v2".into(), 10)].into());
    // The binary's watch, off a terminal, printed a view per change: the hold, then the end.
    e2e.wait_for(
        "the watch showing the end",
        Duration::from_secs(30),
        || async {
            watched
                .lock()
                .unwrap()
                .contains("Phase:           ✔ successful")
        },
    )
    .await;
    let watched = watched.lock().unwrap().clone();
    let held_at = watched
        .find("Held:")
        .expect("the watch never showed the hold");
    let paused_at = watched.find("paused").unwrap_or(usize::MAX);
    assert!(paused_at < watched.len(), "never paused:\n{watched}");
    assert!(
        watched[held_at..].contains("✔ successful"),
        "the end after the hold:\n{watched}"
    );
    assert_eq!(
        e2e.update_strategy().await.as_deref(),
        Some("RollingUpdate")
    );

    // The server's record of the upgrade: the start, the hold, the resume, then the rest of
    // the reference's writes (the widening, if the hold came before it, and the revert to 1).
    // Two holds: the canary's soak (ended by the widening) and the pause (ended by the resume).
    let metrics = e2e.scrape();
    for (purpose, count) in [("hold", 2), ("resume", 1)] {
        assert_eq!(
            sum_samples(
                &metrics,
                "canary_daemonset_writes_total",
                &[&format!("purpose=\"{purpose}\""), "result=\"ok\""]
            ),
            count,
            "{purpose}: {metrics}"
        );
    }
    let strategies: Vec<String> = audit::daemon_set_writes_since(&e2e.namespace, NAME, installed)
        .iter()
        .filter(|w| w.verb == "patch")
        .map(|w| {
            let spec = w.request_object.as_ref().and_then(|ops| {
                ops.as_array()?
                    .iter()
                    .find(|op| op["path"] == "/spec")
                    .map(|op| op["value"]["updateStrategy"].clone())
            });
            let spec = spec.unwrap_or_default();
            format!(
                "{} {}",
                spec["type"].as_str().unwrap_or("?"),
                spec["rollingUpdate"]["maxUnavailable"]
            )
        })
        .collect();
    assert_eq!(
        first_and_last(&strategies),
        (Some("RollingUpdate 1"), Some("RollingUpdate 1")),
        "{strategies:?}"
    );
    assert_eq!(
        strategies
            .iter()
            .filter(|s| s.starts_with("OnDelete"))
            .count(),
        2,
        "one write for each hold, the soak's and the pause's: {strategies:?}"
    );
}

/// `retry` and `abort` on the MaxUnavailable driver: a crash-looping v2 fails at its canary;
/// `retry` starts it again without a template write and it fails again; `abort` rolls v1 back
/// out (`rollingBack`, `rolledBack`), every pod v1 and Ready; `history` shows v2 aborted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs `cargo xtask e2e`"]
async fn max_unavailable_retry_and_abort() {
    let e2e = E2e::isolated("verbs-retry").nodes(6).start().await;
    e2e.install(&e2e.agent("v1", "healthy"), Duration::from_secs(120))
        .await;
    refused(
        &e2e.verb(Cli::Binary, &["retry"]),
        "retry refused: the rollout is not failed (phase successful): nothing to retry",
    );
    refused(
        &e2e.verb(Cli::Plugin, &["abort"]),
        "abort refused: the rollout has ended successfully; nothing to abort",
    );

    let generation = e2e.upgrade("v2", "crashloop").await;
    e2e.wait_phase(generation, "failed", Duration::from_secs(120))
        .await;
    assert_eq!(
        e2e.version_counts().await,
        [("v1".into(), 5), ("v2".into(), 1)].into()
    );
    let written = e2e.daemon_set().await.metadata.generation;

    accepted(
        &e2e.verb(Cli::Plugin, &["retry"]),
        "retried: the rollout of v2 (failed: CanaryCrashLooping) starts again from its first step",
    );
    e2e.wait_for(
        "the retry acted on, and failed again",
        Duration::from_secs(90),
        || async {
            let status = e2e.status().await;
            status.retry.is_some()
                && status.phase_name() == Some("failed")
                && e2e.events_with_reason("Retried") == 1
        },
    )
    .await;
    assert_eq!(
        e2e.daemon_set().await.metadata.generation,
        written,
        "a retry writes no template"
    );
    assert_eq!(
        e2e.version_counts().await.get("v2"),
        Some(&1),
        "still only the canary"
    );

    let recorder = e2e.record().await;
    accepted(
        &e2e.verb(Cli::Binary, &["abort"]),
        "aborted (was failed): rolling back to revision 1 (v1), canary first",
    );
    e2e.wait_phase_through(
        generation,
        "rolledBack",
        &["failed"],
        Duration::from_secs(120),
    )
    .await;
    let phases = recorder.phases();
    assert!(
        phases.ends_with(&["rollingBack".to_owned(), "rolledBack".to_owned()]),
        "{phases:?}"
    );
    assert_eq!(e2e.version_counts().await, [("v1".into(), 6)].into());
    let ready = e2e
        .pods()
        .await
        .iter()
        .all(|p| crate::harness::image_and_ready(p).1);
    assert!(ready, "every pod back on v1 is Ready");
    refused(
        &e2e.verb(Cli::Plugin, &["abort"]),
        "abort refused: a rollback is already in progress",
    );
    let table = accepted(&e2e.verb(Cli::Plugin, &["history"]), "REVISION");
    let v2 = history_row(&table, "v2").1;
    // Failed, retried, failed again, then aborted: its last outcome.
    assert!(v2.contains("aborted"), "{table}");
    assert!(
        history_row(&table, "v1").1.contains("successful (stable)"),
        "{table}"
    );
    for (reason, times) in [("Retried", 1), ("Aborted", 1), ("RolledBack", 1)] {
        assert_eq!(
            e2e.events_with_reason(reason),
            times,
            "{reason}:\n{}",
            e2e.events_dump()
        );
    }
}

/// The row of `version` in a `history` table: its revision number and the line.
fn history_row(table: &str, version: &str) -> (String, String) {
    let line = table
        .lines()
        .find(|line| line.split_whitespace().nth(1) == Some(version))
        .unwrap_or_else(|| panic!("no {version} in {table}"));
    let number = line
        .split_whitespace()
        .next()
        .unwrap()
        .trim_end_matches('*');
    (number.to_owned(), line.to_owned())
}

/// `undo` and `history` on the MaxUnavailable driver: after v1, v2 and v3, `undo` rolls out
/// the revision before the current one (v2) and `undo --to-revision` v1, each a supervised
/// rollout of its own within one spec generation, each announced with its own revision (the
/// events of two such rollouts were once folded into one, keeping the first's note).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs `cargo xtask e2e`"]
async fn max_unavailable_undo_and_history() {
    let e2e = E2e::isolated("verbs-undo").nodes(6).start().await;
    // Half the nodes at a time once the canary is ready: five rollouts, each in three waves.
    let agent = |version: &str| {
        with_strategy(
            e2e.agent_json(version, "healthy"),
            serde_json::json!({"fastMaxUnavailable": "50%"}),
        )
    };
    e2e.install(
        &serde_json::from_value(agent("v1")).unwrap(),
        Duration::from_secs(120),
    )
    .await;
    refused(
        &e2e.verb(Cli::Plugin, &["undo"]),
        "undo refused: no revision before the current one",
    );
    for version in ["v2", "v3"] {
        let generation = e2e.set_spec(&agent(version)).await;
        e2e.wait_phase(generation, "successful", Duration::from_secs(180))
            .await;
    }
    let table = accepted(&e2e.verb(Cli::Binary, &["history"]), "REVISION");
    let (v1_revision, v1) = history_row(&table, "v1");
    let (v2_revision, v2) = history_row(&table, "v2");
    let (_, v3) = history_row(&table, "v3");
    assert!(
        v1.contains("successful") && v2.contains("successful"),
        "{table}"
    );
    assert!(v3.contains("successful (stable)"), "{table}");
    assert!(
        v3.split_whitespace().next().unwrap().ends_with('*'),
        "{table}"
    );

    // undo: the revision before the current one, v2, rolled out canary first.
    let recorder = e2e.record().await;
    accepted(
        &e2e.verb(Cli::Plugin, &["undo"]),
        &format!("rolling out revision {v2_revision} (v2), canary first"),
    );
    e2e.wait_for(
        "v2 rolled out by undo",
        Duration::from_secs(180),
        || async {
            let status = e2e.status().await;
            status.phase_name() == Some("successful")
                && e2e.version_counts().await == [("v2".into(), 6)].into()
        },
    )
    .await;
    // A rollout like any other: the canary first, then wider.
    let phases = recorder.phases();
    assert!(
        phases.iter().any(|p| p == "canary")
            && phases.last().map(String::as_str) == Some("successful"),
        "{phases:?}"
    );
    // undo --to-revision: v1.
    accepted(
        &e2e.verb(Cli::Binary, &["undo", "--to-revision", &v1_revision]),
        &format!("rolling out revision {v1_revision} (v1)"),
    );
    e2e.wait_for(
        "v1 rolled out by undo",
        Duration::from_secs(180),
        || async {
            let status = e2e.status().await;
            status.phase_name() == Some("successful")
                && e2e.version_counts().await == [("v1".into(), 6)].into()
        },
    )
    .await;
    refused(
        &e2e.verb(Cli::Plugin, &["undo", "--to-revision", "99"]),
        "undo refused: revision 99 is not in the history",
    );
    // Each undo's event names its own revision, and each undo's rollout has its own
    // RolloutStarted: a verb's rollout is not folded into the spec's (v3's) one.
    let undos = e2e.event_messages("UndoStarted");
    assert_eq!(undos.len(), 2, "{}", e2e.events_dump());
    for (revision, version) in [(&v2_revision, "v2"), (&v1_revision, "v1")] {
        let said = format!("rolling out revision {revision} ({version})");
        assert!(
            undos.iter().any(|m| m.contains(&said)),
            "{said}:\n{}",
            e2e.events_dump()
        );
    }
    let started = e2e.event_messages("RolloutStarted");
    // v1: installed, then undone to; v2: rolled out, then undone to; v3: once.
    for (version, times) in [("v1", 2), ("v2", 2), ("v3", 1)] {
        let said = format!("started rollout of {version}");
        assert_eq!(
            started.iter().filter(|m| m.ends_with(&said)).count(),
            times,
            "{said}:\n{}",
            e2e.events_dump()
        );
    }
}
