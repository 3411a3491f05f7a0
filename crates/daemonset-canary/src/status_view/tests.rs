//! Tests of the `status NAME` view: what each part of the status reads as.

use super::*;
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::{Node, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, MicroTime, Time};

fn at(second: i64) -> Timestamp {
    Timestamp::from_second(1_767_225_600 + second).unwrap()
}

fn cds() -> CanaryDaemonSet {
    let mut cds: CanaryDaemonSet = serde_json::from_value(serde_json::json!({
        "apiVersion": "canary.daemonset.dev/v1alpha1",
        "kind": "CanaryDaemonSet",
        "metadata": {"name": "node-agent", "namespace": "default", "generation": 2},
        "spec": {
            "target": {"version": "v2", "registry": "registry.example"},
            "template": {"spec": {
                "selector": {"matchLabels": {"app": "a"}},
                "template": {"metadata": {"labels": {"app": "a"}},
                             "spec": {"containers": [{"name": "a", "image": "a:v2"}]}}
            }}
        }
    }))
    .unwrap();
    let status = cds.status.get_or_insert_default();
    status.phase = Some(canary_state_machine::Phase::Canary);
    status.desired = 50;
    status.updated = 1;
    status.updated_ready = 0;
    status.current_max_unavailable = Some("1".into());
    status.observed_generation = Some(2);
    status.recorded_daemon_set_generation = Some(4);
    status.phase_start_time = Some(Time(at(100)));
    status.conditions = vec![Condition {
        type_: "Progressing".into(),
        status: "True".into(),
        reason: "CanaryStarted".into(),
        message: "waiting for the canary pod".into(),
        last_transition_time: Time(at(100)),
        observed_generation: Some(2),
    }];
    cds
}

fn event(second: i64, reason: &str, name: &str) -> Event {
    Event {
        reason: Some(reason.into()),
        type_: Some("Normal".into()),
        note: Some(format!("{reason} happened")),
        event_time: Some(MicroTime(at(second))),
        regarding: Some(ObjectReference {
            kind: Some("CanaryDaemonSet".into()),
            name: Some(name.into()),
            ..ObjectReference::default()
        }),
        ..Event::default()
    }
}

#[test]
fn shows_phase_since_counts_and_conditions() {
    let text = render(&cds(), &[], at(142));
    assert!(
        text.contains("◌ canary  (since 2026-01-01T00:01:40Z, 42s ago)"),
        "{text}"
    );
    assert!(
        text.contains("0/50 updated and ready (1 updated, 50 desired)"),
        "{text}"
    );
    assert!(text.contains("maxUnavailable:  1\n"), "{text}");
    assert!(
        text.contains(
            "Strategy:        canary maxUnavailable 1, then 10%; compatibility Fixed; onFailure Hold\n"
        ),
        "{text}"
    );
    assert!(
        text.contains("Target:          v2, registry registry.example"),
        "{text}"
    );
    assert!(text.contains("recorded DaemonSet generation 4"), "{text}");
    assert!(!text.contains("not seen the latest spec"), "{text}");
    let progressing = text
        .lines()
        .find(|l| l.trim_start().starts_with("Progressing"))
        .unwrap();
    assert!(progressing.contains("CanaryStarted"), "{progressing}");
    assert!(progressing.contains("42s"), "{progressing}");
    assert!(
        text.contains("Events (most recent last):\n  (none)"),
        "{text}"
    );
}

#[test]
fn events_are_sorted_and_only_the_most_recent_shown() {
    let events: Vec<Event> = (0..15i64)
        .rev()
        .map(|i| event(i, &format!("Step{i:02}"), "node-agent"))
        .collect();
    let text = render(&cds(), &events, at(20));
    let shown: Vec<&str> = text
        .lines()
        .filter_map(|l| {
            l.split_whitespace()
                .nth(2)
                .filter(|r| r.starts_with("Step"))
        })
        .collect();
    let expected: Vec<String> = (5..15).map(|i| format!("Step{i:02}")).collect();
    assert_eq!(shown, expected, "{text}");
}

#[test]
fn a_hold_on_request_shows_as_asked_and_as_acted_on() {
    let mut held = cds();
    let view = render(&held, &[], at(100));
    assert!(!view.contains("Held:"), "{view}");
    held.metadata.annotations = Some(
        [(
            canary_kube_adapter::crd::PAUSE_ANNOTATION.to_owned(),
            "true".to_owned(),
        )]
        .into(),
    );
    let view = render(&held, &[], at(100));
    assert!(
        view.contains("Held:            asked for, not acted on yet"),
        "{view}"
    );
    held.status.get_or_insert_with(Default::default).held = Some(true);
    let view = render(&held, &[], at(100));
    assert!(
        view.contains("Held:            on request: nothing moves until daemonset-canary resume"),
        "{view}"
    );
    held.metadata.annotations = None;
    let view = render(&held, &[], at(100));
    assert!(
        view.contains("Held:            resume asked for, not acted on yet"),
        "{view}"
    );
}

#[test]
fn the_analysis_shows_its_verdict_and_each_query_as_sent() {
    use canary_kube_adapter::crd::{AnalysisStatus, MeasurementStatus};
    let mut analysed = cds();
    analysed.spec.strategy.driver = canary_state_machine::Driver::Pods;
    assert!(!render(&analysed, &[], at(100)).contains("Analysis:"));
    analysed
        .status
        .get_or_insert_with(Default::default)
        .analysis = Some(AnalysisStatus {
        step: 1,
        revision: Some("7fcdd5986b".into()),
        verdict: "Failed".into(),
        message: Some("errors: 0.1 is above max 0.05".into()),
        measurements: vec![MeasurementStatus {
            metric: "errors".into(),
            query: r#"max(agent_error_ratio{node=~"node-1"})"#.into(),
            baseline_query: None,
            value: Some("0.1".into()),
            baseline: None,
            verdict: "Fail".into(),
            detail: Some("0.1 is above max 0.05".into()),
            time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at(90))),
            failures: 1,
            inconclusive: 0,
        }],
    });
    let view = render(&analysed, &[], at(100));
    assert!(
        view.contains(
            "Analysis:        step 2, revision 7fcdd5986b: Failed (errors: 0.1 is above max 0.05)"
        ),
        "{view}"
    );
    let row = view
        .lines()
        .find(|l| l.trim_start().starts_with("errors "))
        .unwrap_or_default();
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        cells,
        ["errors", "Fail", "0.1", "-", "1", "0", "10s"],
        "{view}"
    );
    assert!(
        view.contains(r#"    query: max(agent_error_ratio{node=~"node-1"})"#),
        "{view}"
    );
    // The MaxUnavailable driver's stretches are named (issue 46): 0 the canary, 1 the rest.
    analysed.spec.strategy.driver = canary_state_machine::Driver::MaxUnavailable;
    let view = render(&analysed, &[], at(100));
    assert!(
        view.contains("Analysis:        the widened rollout, revision 7fcdd5986b: Failed"),
        "{view}"
    );
    if let Some(shown) = analysed.status.as_mut().and_then(|s| s.analysis.as_mut()) {
        shown.step = 0;
    }
    let view = render(&analysed, &[], at(100));
    assert!(
        view.contains("Analysis:        the canary, revision 7fcdd5986b: Failed"),
        "{view}"
    );
}

#[test]
fn a_stale_status_and_a_failure_say_so() {
    let mut cds = cds();
    cds.metadata.generation = Some(3);
    let status = cds.status.as_mut().unwrap();
    status.phase = Some(canary_state_machine::Phase::Failed);
    status.reason = Some(canary_state_machine::FailureReason::CanaryCrashLooping);
    let text = render(&cds, &[], at(200));
    assert!(text.contains("✖ failed"), "{text}");
    assert!(
        text.contains("Reason:          CanaryCrashLooping"),
        "{text}"
    );
    assert!(text.contains("not seen the latest spec"), "{text}");
}

#[test]
fn the_pods_driver_steps_show_done_and_current_and_the_pods_by_revision() {
    let mut cds = cds();
    cds.spec.strategy.driver = canary_state_machine::Driver::Pods;
    cds.spec.strategy.on_failure = canary_state_machine::OnFailure::Rollback;
    cds.spec.strategy.steps = serde_json::from_value(serde_json::json!(
        [{"nodes": "1"}, {"pause": {}}, {"nodes": "50%", "maxUnavailable": "2"}]
    ))
    .unwrap();
    let status = cds.status.get_or_insert_default();
    status.phase = Some(canary_state_machine::Phase::Paused);
    status.current_step_index = Some(1);
    status.target_revision = Some("new".into());
    status.revisions = vec![
        canary_kube_adapter::crd::RevisionPods {
            revision: "new".into(),
            pods: 1,
            ready: 1,
        },
        canary_kube_adapter::crd::RevisionPods {
            revision: "old".into(),
            pods: 49,
            ready: 48,
        },
    ];
    let text = render(&cds, &[], at(142));
    for line in [
        "  ✓ 1. nodes 1\n",
        "  ▶ 2. pause until promoted\n",
        "    3. nodes 50% (maxUnavailable 2)\n",
        "    4. nodes 100%\n",
        "Strategy:        Pods driver, 4 steps; maxUnavailable 1 in the canary step, then 10%; onFailure Rollback\n",
        "  new           1 pod, 1 ready  (target)\n",
        "  old           49 pods, 48 ready\n",
    ] {
        assert!(text.contains(line), "{line:?} not in\n{text}");
    }
    // Steps that do not validate are said to, not counted.
    let mut invalid = self::cds();
    invalid.spec.strategy.driver = canary_state_machine::Driver::Pods;
    invalid.spec.strategy.steps =
        serde_json::from_value(serde_json::json!([{"nodes": "a few"}])).unwrap();
    let text = render(&invalid, &[], at(142));
    assert!(
        text.contains("Strategy:        Pods driver, steps that do not validate;"),
        "{text}"
    );
    // The MaxUnavailable driver has no steps to show.
    assert!(!render(&self::cds(), &[], at(142)).contains("Steps:"));
}

#[test]
fn events_are_matched_by_kind_name_and_uid() {
    let mut cds = cds();
    cds.metadata.name = Some("node-agent".into());
    assert!(is_about(&event(1, "X", "node-agent"), &cds));
    assert!(!is_about(&event(1, "X", "other"), &cds));
    let mut of_daemon_set = event(1, "X", "node-agent");
    if let Some(r) = of_daemon_set.regarding.as_mut() {
        r.kind = Some("DaemonSet".into());
    }
    assert!(!is_about(&of_daemon_set, &cds));
    // An object deleted and created again under the same name: the events of the first one
    // (another UID) are not this one's; an event without a UID is matched by name.
    cds.metadata.uid = Some("uid-second".into());
    let with_uid = |uid: &str| {
        let mut e = event(1, "X", "node-agent");
        if let Some(r) = e.regarding.as_mut() {
            r.uid = Some(uid.into());
        }
        e
    };
    assert!(is_about(&with_uid("uid-second"), &cds));
    assert!(!is_about(&with_uid("uid-first"), &cds));
    assert!(is_about(&event(1, "X", "node-agent"), &cds));
}

#[test]
fn texts_from_the_cluster_cannot_drive_the_terminal() {
    let mut cds = cds();
    if let Some(status) = cds.status.as_mut() {
        status.message = Some("bad\u{1b}[2J\nPhase:           ✓ successful".into());
    }
    let mut note = event(1, "X", "node-agent");
    note.note = Some("note\u{1b}]0;owned\u{7}".into());
    let text = render(&cds, &[note], at(142));
    assert!(
        !text.chars().any(|c| c.is_control() && c != '\n'),
        "{text:?}"
    );
    assert!(text.contains("bad\\u{1b}[2J\\u{a}Phase:"), "{text}");
    assert!(text.contains("note\\u{1b}]0;owned\\u{7}"), "{text}");
    assert!(!text.contains("\nPhase:           ✓ successful"), "{text}");
}

fn pod(node: &str, hash: &str, created: i64, ready: bool) -> Pod {
    // The pods of the template hashed `new` carry v2, those of `old` v1; `stray` none.
    let version = match hash {
        "new" => "v2",
        "old" => "v1",
        _ => "",
    };
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("a-{node}"), "namespace": "default",
                     "creationTimestamp": at(created).to_string(),
                     "labels": {"app": "a", "controller-revision-hash": hash},
                     "annotations": {"kubevirt.io/install-strategy-version": version}},
        "spec": {"nodeName": node, "containers": [{"name": "a"}]},
        "status": {"phase": "Running", "containerStatuses": [{
            "name": "a", "ready": ready, "restartCount": 0, "image": "a", "imageID": ""
        }]}
    }))
    .unwrap()
}

fn revision(number: i64, hash: &str) -> ControllerRevision {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("a-{hash}"), "labels": {"controller-revision-hash": hash}},
        "revision": number
    }))
    .unwrap()
}

fn node(name: &str, ready: bool, cordoned: bool) -> Node {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {"unschedulable": cordoned},
        "status": {"conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}
    }))
    .unwrap()
}

/// Every state of the ledger from the cluster's own objects: the pods' revisions wins over
/// the status's lists, an unhealthy node with an old pod is deferred even past the status's
/// bounded list, a node without a pod says so, a pod on a node that is gone still shows.
/// Revisions are numbered as the rollout history numbers them (v1 is 8, v2 is 9 there, while
/// the DaemonSet's own ControllerRevisions count 1 and 2): a node showed "#6" beside a
/// header and a `history` that called the current revision 9 (issue 52).
#[test]
fn the_node_ledger_reads_each_nodes_revision_and_state() {
    let mut cds = cds();
    let status = cds.status.get_or_insert_default();
    status.target_revision = Some("new".into());
    status.failed_nodes = vec!["n3".into()];
    status.deferred_nodes = vec![canary_kube_adapter::crd::NodeNote {
        name: "n1".into(),
        reason: "cordoned".into(),
    }];
    status.unhealthy_nodes = vec![canary_kube_adapter::crd::UnhealthyNodeNote {
        name: "n7".into(),
        condition: "Ready".into(),
        status: "False".into(),
        reason: "KubeletNotReady".into(),
        since: Some(Time(at(120))),
        ..Default::default()
    }];
    let pods = [
        pod("n0", "new", 100, true),
        pod("n1", "new", 90, true),
        pod("n2", "old", 10, true),
        pod("n3", "new", 100, false),
        pod("n4", "old", 10, true),
        pod("gone", "old", 10, true),
        pod("n6", "stray", 10, true),
        pod("n7", "new", 100, true),
    ];
    let revisions = [revision(1, "old"), revision(2, "new")];
    let nodes = [
        node("n0", true, false),
        node("n1", true, true),
        node("n2", true, false),
        node("n3", true, false),
        node("n4", false, false),
        node("n5", true, false),
        node("n6", true, false),
        node("n7", false, false),
    ];
    let entry = |revision: i64, version: &str| canary_kube_adapter::history::Entry {
        name: format!("node-agent-{version}"),
        revision,
        version: version.into(),
        outcome: None,
        started: None,
        finished: None,
    };
    let history = [entry(3, "v1"), entry(8, "v1"), entry(9, "v2")];
    let rows = node_ledger(
        &cds,
        &pods,
        &revisions,
        &nodes,
        &history,
        Availability {
            min_ready_seconds: 0,
            now: at(200),
        },
    );
    let got: Vec<(&str, &str, &str, &str)> = rows
        .iter()
        .map(|r| {
            (
                r.node.as_str(),
                r.revision.as_str(),
                r.state.as_str(),
                r.note.as_str(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("gone", "#8 v1", "deferred", "node gone"),
            ("n0", "#9 v2", "updated", ""),
            ("n1", "#9 v2", "updated", "node cordoned"),
            ("n2", "#8 v1", "old", ""),
            ("n3", "#9 v2", "failed", "its updated pod crash-loops"),
            ("n4", "#8 v1", "deferred", "node NotReady"),
            ("n5", "-", "no pod", ""),
            ("n6", "stray", "old", ""),
            (
                "n7",
                "#9 v2",
                "unhealthy",
                "Ready False, KubeletNotReady since 2026-01-01T00:02:00Z after its update"
            ),
        ]
    );
    assert_eq!(rows[1].since, Some(at(100)));
    let table = render_nodes(&rows, at(160));
    assert!(
        table.starts_with("NODE  REVISION    SINCE  STATE"),
        "{table}"
    );
    assert!(
        table.contains("\nn0    #9 v2       1m00s  updated\n"),
        "{table}"
    );
    assert!(
        table.ends_with("9 nodes: 2 updated, 2 old, 2 deferred, 1 failed, 1 unhealthy, 1 no pod\n"),
        "{table}"
    );
}

#[test]
fn the_list_has_a_line_per_object_with_its_step_and_the_namespace_only_with_all() {
    let mut second = cds();
    second.metadata.name = Some("agent".into());
    second.metadata.creation_timestamp = Some(Time(at(0)));
    let status = second.status.get_or_insert_default();
    status.phase = Some(canary_state_machine::Phase::Paused);
    status.current_step_index = Some(1);
    status.step_count = Some(4);
    status.updated_ready = 3;
    status.desired = 12;
    status.target_version = Some("v1.9.3".into());
    let items = [cds(), second];
    let list = render_list(&items, false, at(90));
    let lines: Vec<&str> = list.lines().collect();
    assert_eq!(
        lines[0],
        "NAME         PHASE    STEP   READY   VERSION   AGE"
    );
    assert_eq!(
        lines[1],
        "agent        paused   2/4    3/12    v1.9.3    1m30s"
    );
    assert!(
        lines[2].starts_with("node-agent   canary   -      0/50 "),
        "{list}"
    );
    let all = render_list(&items, true, at(90));
    assert!(all.starts_with("NAMESPACE   NAME "), "{all}");
    assert!(all.contains("\ndefault     agent "), "{all}");
}

/// `-o wide` adds the driver, the DaemonSet, the updated pods and the kstatus verdict; `-w`'s
/// later lines come without the header.
#[test]
fn the_wide_list_adds_the_driver_the_daemon_set_and_the_kstatus_verdict() {
    let mut one = cds();
    let status = one.status.get_or_insert_default();
    status.daemon_set_name = Some("node-agent".into());
    status.updated = 7;
    status
        .conditions
        .push(k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
            type_: "Stalled".into(),
            status: "True".into(),
            reason: "CanaryCrashLooping".into(),
            message: String::new(),
            observed_generation: Some(1),
            last_transition_time: Time(at(0)),
        });
    let wide = render_table(std::slice::from_ref(&one), false, true, true, at(90));
    let lines: Vec<&str> = wide.lines().collect();
    assert!(
        lines[0].ends_with("DRIVER           DAEMONSET    UPDATED   CONDITION"),
        "{wide}"
    );
    assert!(
        lines[1].ends_with("MaxUnavailable   node-agent   7/50      Stalled(CanaryCrashLooping)"),
        "{wide}"
    );
    let later = render_table(std::slice::from_ref(&one), false, false, false, at(90));
    assert_eq!(later.lines().count(), 1, "{later}");
    assert!(later.starts_with("node-agent "), "{later}");
}

/// Under the DaemonSet's `minReadySeconds` (issue 50) an updated pod ready for less than that
/// is not available yet, as the controller counts it (`PodSummary::available_in`): the ledger
/// says how long is left, and nothing once it is available.
#[test]
fn the_node_ledger_says_when_an_updated_pod_becomes_available() {
    let mut cds = cds();
    cds.status.get_or_insert_default().target_revision = Some("new".into());
    let mut ready_pod = pod("n0", "new", 90, true);
    ready_pod
        .status
        .as_mut()
        .unwrap()
        .conditions
        .get_or_insert_default()
        .push(k8s_openapi::api::core::v1::PodCondition {
            type_: "Ready".into(),
            status: "True".into(),
            last_transition_time: Some(Time(at(100))),
            ..Default::default()
        });
    let pods = [ready_pod, pod("n1", "new", 90, false)];
    let revisions = [revision(1, "old"), revision(2, "new")];
    let nodes = [node("n0", true, false), node("n1", true, false)];
    let notes = |now: i64, min_ready_seconds: u64| -> Vec<String> {
        node_ledger(
            &cds,
            &pods,
            &revisions,
            &nodes,
            &[],
            Availability {
                min_ready_seconds,
                now: at(now),
            },
        )
        .into_iter()
        .map(|row| row.note)
        .collect()
    };
    assert_eq!(
        notes(110, 30),
        ["ready, available in 20s (minReadySeconds)", "not ready"]
    );
    assert_eq!(notes(130, 30), ["", "not ready"]);
    assert_eq!(notes(110, 0), ["", "not ready"]);
}
