//! The controller against canary-sim (in process, paused tokio clock): whole rollouts,
//! failures, restarts, out-of-band edits, node churn, API faults and leader election.

use std::sync::atomic::Ordering;
use std::time::Duration;

use canary_kube_adapter::crd::{CanaryDaemonSet, CanaryDaemonSetSpec};
use canary_sim::{FaultAction, FaultRule, Trigger, Verb};
use canary_state_machine::WriteKind;
use canary_testkit::template_meta;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use crate::support::*;

#[tokio::test(start_paused = true)]
async fn creates_the_daemonset_owned_and_annotated() {
    let (_sim, client, replica) = started(3);
    create_cds(&client, "agent", spec("v1", None)).await;
    eventually(Duration::from_secs(60), "the DaemonSet", || async {
        Api::<DaemonSet>::namespaced(client.clone(), NS)
            .get_opt("agent")
            .await
            .unwrap()
            .is_some()
    })
    .await;
    let ds = get_ds(&client, "agent").await;
    let owner = &ds.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.controller),
        ("CanaryDaemonSet", Some(true))
    );
    let annotations = ds.metadata.annotations.as_ref().unwrap();
    assert_eq!(annotations["kubevirt.io/install-strategy-version"], "v1");
    let template_annotations = template_meta(&ds).annotations.clone().unwrap();
    assert_eq!(
        template_annotations["kubevirt.io/install-strategy-version"],
        "v1"
    );
    eventually(Duration::from_secs(60), "a status", || async {
        get_cds(&client, "agent").await.status.is_some()
    })
    .await;
    assert_eq!(replica.writes(WriteKind::Create), 1);
    replica.stop().await;
}

/// Writes of each kind made by `observer` since `before`.
async fn healthy_rollout(nodes: u32) {
    let (sim, client, replica) = started_and_installed(nodes).await;

    let before = write_counts(&replica.observer);
    let events_before = replica.observer.stats().events();
    let status_writes_before = replica.observer.stats().status_writes();
    let mut transitions = replica.observer.subscribe();
    let started = tokio::time::Instant::now();
    set_version(&client, "agent", "v2").await;
    until_rolled_out(&client, "v2", nodes, 3600, "the upgrade").await;
    // Count-only status changes are written at most once a second: the status writes follow
    // the rollout's duration, not its pods (one per pod event would be thousands here).
    let status_writes = replica.observer.stats().status_writes() - status_writes_before;
    let seconds = started.elapsed().as_secs();
    assert!(
        status_writes <= seconds + 6,
        "{status_writes} status writes in {seconds} s"
    );
    // Started, (widened,) completed: once each, never once per pass.
    let events = replica.observer.stats().events() - events_before;
    assert_eq!(events, if nodes == 1 { 2 } else { 3 });

    let seen = drain(&mut transitions);
    let writes = writes_since(&replica.observer, before);
    let stats = replica.observer.stats();
    eprintln!(
        "{nodes} nodes: writes {writes:?}, {} reconciles, {} status writes, {} transitions, {} API requests",
        stats.reconciles(),
        stats.status_writes(),
        seen.len(),
        sim.requests().total()
    );
    if nodes == 1 {
        assert_eq!(
            writes,
            [0, 1, 0, 1, 0, 0, 0, 0],
            "start and finish only: nothing to widen"
        );
        assert_eq!(written_max_unavailable(&seen), ["1", "1"]);
    } else {
        assert_eq!(writes, START_WIDEN_FINISH);
        // The start, the canary's soak held at 1 (issue 46), the widen, the finish.
        assert_eq!(written_max_unavailable(&seen), ["1", "1", "10%", "1"]);
    }
    let phases: Vec<_> = seen.iter().map(|t| t.to.as_str()).collect();
    assert_eq!(phases.first(), Some(&"started"), "{phases:?}");
    assert_eq!(phases.last(), Some(&"successful"), "{phases:?}");
    assert!(!phases.contains(&"failed"), "{phases:?}");
    assert_eq!(
        live_max_unavailable(&client).await,
        Some(IntOrString::Int(1))
    );
    assert_eq!(replica.observer.stats().write_conflicts(), 0);
    replica.stop().await;
}

#[tokio::test(start_paused = true)]
async fn healthy_rollout_on_one_node_takes_two_writes() {
    healthy_rollout(1).await;
}

#[tokio::test(start_paused = true)]
async fn healthy_rollout_on_two_nodes() {
    healthy_rollout(2).await;
}

#[tokio::test(start_paused = true)]
async fn healthy_rollout_on_ten_nodes() {
    healthy_rollout(10).await;
}

#[tokio::test(start_paused = true)]
async fn healthy_rollout_on_a_thousand_nodes() {
    healthy_rollout(1000).await;
}

#[tokio::test(start_paused = true)]
async fn crash_looping_canary_fails_without_widening() {
    let (_sim, client, replica) = started_and_installed(5).await;
    let before = write_counts(&replica.observer);

    let api: Api<CanaryDaemonSet> = Api::namespaced(client.clone(), NS);
    let mut crashing = spec("v2", Some("crashloop"));
    crashing.target.deployment_id = None;
    api.patch(
        "agent",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": crashing})),
    )
    .await
    .unwrap();
    until_agent_phase(&client, "failed", 900, "the failure").await;
    // Keep running: the failure must stay, with no further write.
    tokio::time::sleep(Duration::from_secs(600)).await;

    let cds = get_cds(&client, "agent").await;
    let status = cds.status.unwrap();
    assert_eq!(status.phase_name(), Some("failed"));
    assert_eq!(status.reason_name(), Some("CanaryCrashLooping"));
    let degraded = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Degraded")
        .unwrap();
    assert_eq!(
        (degraded.status.as_str(), degraded.reason.as_str()),
        ("True", "CanaryCrashLooping")
    );
    assert_eq!(
        writes_since(&replica.observer, before),
        START_AND_SOAK_HOLD,
        "only the start"
    );
    assert_eq!(
        live_max_unavailable(&client).await,
        Some(IntOrString::Int(1))
    );
    // Only the canary was replaced: the other four pods still run v1.
    let pods = Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), NS)
        .list(&Default::default())
        .await
        .unwrap();
    let on_v1 = pods
        .items
        .iter()
        .filter(|p| {
            p.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("kubevirt.io/install-strategy-version"))
                .map(String::as_str)
                == Some("v1")
        })
        .count();
    assert_eq!(on_v1, 4);
    let events = Api::<k8s_openapi::api::events::v1::Event>::namespaced(client.clone(), NS)
        .list(&Default::default())
        .await
        .unwrap();
    let failed: Vec<_> = events
        .items
        .iter()
        .filter(|e| e.reason.as_deref() == Some("FailedUpdate"))
        .collect();
    assert_eq!(failed.len(), 1, "one Warning event, not one per pass");
    assert_eq!(failed[0].type_.as_deref(), Some("Warning"));
    replica.stop().await;
}

/// Each rollout's events name its version, and a new rollout's `RolloutStarted` is an event
/// of its own, not a repeat folded into the previous rollout's series (kube-runtime's Recorder
/// keys its series on the reason, not the note, and keeps the first note).
#[tokio::test(start_paused = true)]
async fn each_rollout_has_its_own_events_naming_its_version() {
    let (_sim, client, replica) = started_and_installed(3).await;
    for version in ["v2", "v3"] {
        set_version(&client, "agent", version).await;
        until_rolled_out(&client, version, 3, 3600, version).await;
    }
    // The completion event comes from the pass after the revert.
    tokio::time::sleep(Duration::from_secs(30)).await;
    let events = Api::<k8s_openapi::api::events::v1::Event>::namespaced(client.clone(), NS)
        .list(&Default::default())
        .await
        .unwrap();
    let notes = |reason: &str| -> Vec<(String, Option<i32>)> {
        let mut notes: Vec<_> = events
            .items
            .iter()
            .filter(|e| e.reason.as_deref() == Some(reason))
            .map(|e| {
                (
                    e.note.clone().unwrap_or_default(),
                    e.series.as_ref().map(|s| s.count),
                )
            })
            .collect();
        notes.sort();
        notes
    };
    assert_eq!(
        notes("RolloutStarted"),
        vec![
            (
                "daemonSet agent created: started rollout of v1".to_owned(),
                None
            ),
            ("daemonSet agent: started rollout of v2".to_owned(), None),
            ("daemonSet agent: started rollout of v3".to_owned(), None),
        ]
    );
    let completed = notes("RolloutCompleted");
    assert_eq!(completed.len(), 3, "{completed:?}");
    for (version, (note, series)) in ["v1", "v2", "v3"].iter().zip(&completed) {
        assert!(
            note.contains(&format!("rollout of {version} complete")),
            "{note}"
        );
        assert_eq!(*series, None, "{note}");
    }
    replica.stop().await;
}

/// `target.fromContainer`: the version is the image tag of that container, so changing the
/// image is the whole upgrade; the status says which version it resolved.
#[tokio::test(start_paused = true)]
async fn the_version_can_come_from_a_container_image_tag() {
    let (_sim, client, replica) = started(3);
    let mut from_image = spec("v1", None);
    from_image.target.version = String::new();
    from_image.target.from_container = Some("agent".into());
    create_cds(&client, "agent", from_image).await;
    until_rolled_out(&client, "v1", 3, 1800, "the install").await;
    let api: Api<CanaryDaemonSet> = Api::namespaced(client.clone(), NS);
    let image_only = json!({"spec": {"template": {"spec": {"template": {"spec": {
        "containers": [{"name": "agent", "image": "registry.example:5000/agent:v1.2.3@sha256:0123"}]}}}}}});
    api.patch("agent", &PatchParams::default(), &Patch::Merge(image_only))
        .await
        .unwrap();
    until_rolled_out(&client, "v1.2.3", 3, 3600, "the upgrade").await;
    let status = get_cds(&client, "agent").await.status.unwrap();
    assert_eq!(status.target_version.as_deref(), Some("v1.2.3"));

    // A container that is not there: the spec cannot be acted on, and says why.
    let wrong = json!({"spec": {"target": {"fromContainer": "sidecar"}}});
    api.patch("agent", &PatchParams::default(), &Patch::Merge(wrong))
        .await
        .unwrap();
    eventually(Duration::from_secs(60), "InvalidSpec", || async {
        let status = get_cds(&client, "agent").await.status.unwrap_or_default();
        status.reason_name() == Some("InvalidSpec")
            && status.message.as_deref().is_some_and(|m| {
                m.contains("no container named \"sidecar\"") && m.contains("its containers: agent")
            })
    })
    .await;
    replica.stop().await;
}

/// Stops the controller right after it reports `phase`, starts a new one, and checks that the
/// rollout completes with exactly one start overall.
async fn restart_in(phase: &str) {
    let nodes = 10;
    let sim = sim(nodes);
    let client = sim.client();
    let first = Replica::start(&sim, None);
    install(&client, nodes).await;
    let before = write_counts(&first.observer);
    let mut transitions = first.observer.subscribe();
    set_version(&client, "agent", "v2").await;
    until_transition_to(&mut transitions, phase).await;
    let first_writes = writes_since(&first.observer, before);
    first.stop().await;

    let second = Replica::start(&sim, None);
    until_rolled_out(&client, "v2", nodes, 3600, "the resumed upgrade").await;
    let second_writes = write_counts(&second.observer);
    let total: WriteCounts = std::array::from_fn(|i| first_writes[i] + second_writes[i]);
    assert_eq!(
        total, START_WIDEN_FINISH,
        "first {first_writes:?} second {second_writes:?}"
    );
    assert_eq!(
        second_writes[1], 0,
        "the restarted controller never restarts the canary"
    );
    second.stop().await;
}

#[tokio::test(start_paused = true)]
async fn restart_in_started_resumes() {
    restart_in("started").await;
}

#[tokio::test(start_paused = true)]
async fn restart_in_canary_resumes() {
    restart_in("canary").await;
}

#[tokio::test(start_paused = true)]
async fn restart_in_increasing_resumes() {
    restart_in("increasing").await;
}

#[tokio::test(start_paused = true)]
async fn restart_in_waiting_resumes() {
    restart_in("waiting").await;
}

/// Reference scenario 4: the generation becomes unknown (an out-of-band spec edit) while the
/// rollout is at 10%: no new canary, the rollout completes and the edit is reverted.
#[tokio::test(start_paused = true)]
async fn unknown_generation_during_rollout_does_not_restart_the_canary() {
    let nodes = 10;
    let (_sim, client, replica) = started_and_installed(nodes).await;
    let before = write_counts(&replica.observer);
    let mut transitions = replica.observer.subscribe();
    set_version(&client, "agent", "v2").await;
    until_transition_to(&mut transitions, "increasing").await;
    let ds_api: Api<DaemonSet> = Api::namespaced(client.clone(), NS);
    let edited = ds_api
        .patch(
            "agent",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"revisionHistoryLimit": 3}})),
        )
        .await
        .unwrap();
    let status = get_cds(&client, "agent").await.status.unwrap();
    assert_ne!(
        status.recorded_daemon_set_generation, edited.metadata.generation,
        "generation now unknown"
    );

    until_rolled_out(&client, "v2", nodes, 3600, "the upgrade").await;
    assert_eq!(writes_since(&replica.observer, before), START_WIDEN_FINISH);
    let ds = get_ds(&client, "agent").await;
    assert_ne!(
        ds.spec.unwrap().revision_history_limit,
        Some(3),
        "the edit is reverted by the finishing patch"
    );
    replica.stop().await;
}

/// KubeVirt compatibility: an out-of-band template edit at rest is reverted unsupervised, by
/// the reference's next row 3a or 4 write, without a new canary (quirk 5). The default
/// compatibility reverts it canary first instead (`trust::a_hand_edit_is_reverted_canary_first`).
#[tokio::test(start_paused = true)]
async fn out_of_band_template_edit_is_reverted_in_kubevirt_compatibility() {
    let nodes = 4;
    let (_sim, client, replica) = started(nodes);
    create_cds(&client, "agent", kubevirt_compatible(spec("v1", None))).await;
    until_rolled_out(&client, "v1", nodes, 1800, "the install").await;
    let before = write_counts(&replica.observer);
    let ds_api: Api<DaemonSet> = Api::namespaced(client.clone(), NS);
    let patch = json!({"spec": {"template": {"metadata": {"annotations": {"edited": "by-hand"}}}}});
    ds_api
        .patch("agent", &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();

    eventually(Duration::from_secs(3600), "the revert", || async {
        let ds = get_ds(&client, "agent").await;
        let annotations = ds
            .spec
            .unwrap()
            .template
            .metadata
            .unwrap()
            .annotations
            .unwrap_or_default();
        !annotations.contains_key("edited") && rolled_out(&client, "agent", "v1", nodes).await
    })
    .await;
    // Quirk 5: the edited template rolls at maxUnavailable 1 (its pods carry the target), the
    // reference's next write (a widening or the finishing patch) reverts it. No new canary.
    let written = writes_since(&replica.observer, before);
    assert_eq!(written[1], 0, "no start: {written:?}");
    assert_eq!(written[3], 1, "one finish: {written:?}");
    replica.stop().await;
}

#[tokio::test(start_paused = true)]
async fn nodes_added_and_removed_mid_rollout() {
    let nodes = 10;
    let (sim, client, replica) = started_and_installed(nodes).await;
    let before = write_counts(&replica.observer);
    let mut transitions = replica.observer.subscribe();
    set_version(&client, "agent", "v2").await;
    until_transition_to(&mut transitions, "increasing").await;
    let node_api: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    let first_node = node_api.list(&Default::default()).await.unwrap().items[0]
        .metadata
        .name
        .clone()
        .unwrap();
    sim.cluster.add_node("extra-1").unwrap();
    sim.cluster.add_node("extra-2").unwrap();
    sim.cluster.remove_node(&first_node).unwrap();

    until_rolled_out(&client, "v2", nodes + 1, 3600, "the upgrade").await;
    eprintln!(
        "node churn: writes {:?}",
        writes_since(&replica.observer, before)
    );
    assert_eq!(writes_since(&replica.observer, before), START_WIDEN_FINISH);
    replica.stop().await;
}

#[tokio::test(start_paused = true)]
async fn api_errors_and_dropped_watches_do_not_stop_the_rollout() {
    let nodes = 10;
    let (sim, client, replica) = started_and_installed(nodes).await;
    let before = write_counts(&replica.observer);
    let faults = sim.faults();
    // The widening patch fails once with a 500, a status write fails once, watches keep
    // breaking, and a DaemonSet watch resume gets 410 Gone.
    faults.add(
        FaultRule::new(
            Some(Verb::Patch),
            Some("daemonsets"),
            FaultAction::internal_error(),
        )
        .when(Trigger::Nth(2)),
    );
    faults.add(
        FaultRule::new(
            Some(Verb::Patch),
            Some("canarydaemonsets/status"),
            FaultAction::internal_error(),
        )
        .when(Trigger::Nth(3)),
    );
    faults.add(FaultRule::new(
        Some(Verb::Watch),
        Some("pods"),
        FaultAction::EndWatchAfterEvents(15),
    ));
    faults.add(FaultRule::new(
        Some(Verb::Watch),
        Some("daemonsets"),
        FaultAction::EndWatchAfter(Duration::from_secs(20)),
    ));
    faults.add(
        FaultRule::new(
            Some(Verb::Watch),
            Some("daemonsets"),
            FaultAction::GoneOnResume,
        )
        .when(Trigger::Nth(2)),
    );
    set_version(&client, "agent", "v2").await;
    until_rolled_out(&client, "v2", nodes, 3600, "the upgrade").await;
    let writes = writes_since(&replica.observer, before);
    assert_eq!(writes, START_WIDEN_FINISH, "successful writes");
    assert!(
        replica.observer.stats().write_failures() >= 1,
        "the injected 500 was seen"
    );
    assert!(replica.observer.stats().reconcile_errors() >= 1);
    // The DaemonSet watch opened before the faults ends at its timeout (290 s), the next one
    // after 20 s, and the resume after that is answered 410 Gone.
    let stats = replica.observer.stats();
    eventually(
        Duration::from_secs(600),
        "the 410 Gone counted as a watch error",
        || std::future::ready(stats.watch_errors() >= 1),
    )
    .await;
    replica.stop().await;
}

/// The DaemonSet watch is down when the controller creates the DaemonSet, so its cache does not
/// have it while every new pod triggers a pass. Those passes must wait for the cache instead of
/// creating the DaemonSet again (each refused as AlreadyExists: one request per pod event).
#[tokio::test(start_paused = true)]
async fn a_daemon_set_watch_outage_does_not_repeat_the_create() {
    let nodes = 50;
    let sim = sim(nodes);
    let client = sim.client();
    // The first list of DaemonSets succeeds (empty), then every watch and list of them fails
    // for a minute (a watcher lists again after a failed watch: the lists must fail too for
    // the cache to lack the DaemonSet).
    sim.faults().add(FaultRule::new(
        Some(Verb::Watch),
        Some("daemonsets"),
        FaultAction::internal_error(),
    ));
    let replica = Replica::start(&sim, None);
    tokio::time::sleep(Duration::from_secs(5)).await;
    sim.faults().add(FaultRule::new(
        Some(Verb::List),
        Some("daemonsets"),
        FaultAction::internal_error(),
    ));
    create_cds(&client, "agent", spec("v1", None)).await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    let creates_during_outage = sim.requests().count(Verb::Create, "daemonsets");
    let passes_during_outage = replica.observer.stats().reconciles();
    sim.faults().clear();
    until_rolled_out(&client, "v1", nodes, 1800, "the install").await;
    assert!(
        passes_during_outage >= u64::from(nodes),
        "the new pods triggered passes during the outage: {passes_during_outage}"
    );
    assert!(
        creates_during_outage <= 3,
        "{creates_during_outage} creates in a minute of watch outage (one per 30 s at most)"
    );
    assert_eq!(replica.writes(WriteKind::Create), 1);
    replica.stop().await;
}

#[tokio::test(start_paused = true)]
async fn two_replicas_with_leader_election_never_both_write() {
    let nodes = 4;
    let sim = sim(nodes);
    let client = sim.client();
    let a = Replica::start(&sim, Some(short_lease("replica-a")));
    let b = Replica::start(&sim, Some(short_lease("replica-b")));
    eventually(Duration::from_secs(120), "a leader", || async {
        a.observer.stats().is_leader() || b.observer.stats().is_leader()
    })
    .await;
    assert!(!(a.observer.stats().is_leader() && b.observer.stats().is_leader()));
    let (leader, follower) = if a.observer.stats().is_leader() {
        (a, b)
    } else {
        (b, a)
    };

    install(&client, nodes).await;
    set_version(&client, "agent", "v2").await;
    until_rolled_out(&client, "v2", nodes, 3600, "the upgrade").await;
    assert!(!follower.observer.stats().is_leader());
    assert_eq!(follower.observer.stats().total_daemon_set_writes(), 0);
    assert_eq!(follower.observer.stats().status_writes(), 0);
    assert!(leader.writes(WriteKind::Start) == 1);

    // The leader goes away: the follower takes over and runs the next upgrade alone.
    leader.stop().await;
    eventually(Duration::from_secs(30), "the takeover", || async {
        follower.observer.stats().is_leader()
    })
    .await;
    set_version(&client, "agent", "v3").await;
    until_rolled_out(&client, "v3", nodes, 3600, "the next upgrade").await;
    assert_eq!(follower.writes(WriteKind::Start), 1);
    follower.stop().await;
}

/// The leader dies mid-rollout without releasing its Lease (its process killed, its node gone):
/// the standby takes over once the Lease expires and finishes the rollout from the status,
/// without restarting the canary.
#[tokio::test(start_paused = true)]
async fn a_killed_leader_is_replaced_when_its_lease_expires_mid_rollout() {
    let nodes = 10;
    let sim = sim(nodes);
    let client = sim.client();
    let (connection, alive) = killable_client(&sim);
    let a = Replica::start_on(&sim, connection, Some(short_lease("replica-a")));
    eventually(Duration::from_secs(30), "replica-a leading", || async {
        a.observer.stats().is_leader()
    })
    .await;
    let b = Replica::start(&sim, Some(short_lease("replica-b")));
    install(&client, nodes).await;
    let before = write_counts(&a.observer);
    set_version(&client, "agent", "v2").await;
    until_agent_phase(&client, "canary", 600, "the canary of v2").await;

    alive.store(false, Ordering::Release);
    a.task.abort();
    assert!(
        !b.observer.stats().is_leader(),
        "the standby waits for the Lease to expire"
    );
    eventually(Duration::from_secs(30), "the takeover", || async {
        b.observer.stats().is_leader()
    })
    .await;
    until_rolled_out(&client, "v2", nodes, 3600, "the upgrade").await;
    assert_eq!(
        a.writes(WriteKind::Start),
        1,
        "the dead leader started the canary"
    );
    assert_eq!(
        b.writes(WriteKind::Start),
        0,
        "the new leader resumed the rollout instead of restarting the canary"
    );
    let by_both: Vec<u64> = writes_since(&a.observer, before)
        .iter()
        .zip(write_counts(&b.observer))
        .map(|(a, b)| a + b)
        .collect();
    assert_eq!(
        by_both, START_WIDEN_FINISH,
        "the v2 rollout cost one start, one widen and one finish between the two leaders"
    );
    b.stop().await;
}

/// Two replicas racing for a fresh Lease: the create's 409 decides (found by the soak with the
/// earlier leader election, seed 1000257, where both led at once).
#[tokio::test(start_paused = true)]
async fn replicas_racing_for_a_fresh_lease_never_both_lead() {
    let sim = sim(2);
    // The first create of the Lease is slow: the other replica finds none either and creates
    // it meanwhile; then the slow create lands, or rather is refused.
    sim.faults().add(
        canary_sim::FaultRule::new(
            Some(canary_sim::Verb::Create),
            Some("leases"),
            canary_sim::FaultAction::Latency(Duration::from_millis(200)),
        )
        .when(canary_sim::Trigger::FirstN(1)),
    );
    let a = Replica::start(&sim, Some(short_lease("replica-a")));
    let b = Replica::start(&sim, Some(short_lease("replica-b")));
    let mut someone_led = false;
    for _ in 0..600 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let (a_leads, b_leads) = (
            a.observer.stats().is_leader(),
            b.observer.stats().is_leader(),
        );
        assert!(!(a_leads && b_leads), "both replicas lead");
        someone_led |= a_leads || b_leads;
    }
    assert!(someone_led, "nobody took the lease");
    a.stop().await;
    b.stop().await;
}

#[tokio::test(start_paused = true)]
async fn invalid_spec_is_degraded_without_hot_loop() {
    let (sim, client, replica) = started(2);
    let mut bad = spec("v1", None);
    bad.strategy.fast_max_unavailable = "lots".into();
    // The CRD's rule refuses it through the API; an older CRD without the rule stored it.
    plant_cds(
        &sim,
        serde_json::to_value(CanaryDaemonSet::new("agent", bad)).unwrap(),
    );
    eventually(
        Duration::from_secs(60),
        "the Degraded condition",
        || async {
            let status = get_cds(&client, "agent").await.status;
            status.is_some_and(|s| {
                s.conditions.iter().any(|c| {
                    c.type_ == "Degraded" && c.status == "True" && c.reason == "InvalidSpec"
                })
            })
        },
    )
    .await;
    let reconciles = replica.observer.stats().reconciles();
    tokio::time::sleep(Duration::from_secs(600)).await;
    assert!(
        replica.observer.stats().reconciles() - reconciles <= 2,
        "no hot loop"
    );
    assert_eq!(replica.observer.stats().total_daemon_set_writes(), 0);
    assert!(
        Api::<DaemonSet>::namespaced(client.clone(), NS)
            .get_opt("agent")
            .await
            .unwrap()
            .is_none()
    );

    // Fixing the spec resumes.
    let api: Api<CanaryDaemonSet> = Api::namespaced(client.clone(), NS);
    api.patch(
        "agent",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"strategy": {"fastMaxUnavailable": "10%"}}})),
    )
    .await
    .unwrap();
    until_rolled_out(&client, "v1", 2, 1800, "the install").await;
    replica.stop().await;
}

#[tokio::test(start_paused = true)]
async fn leader_election_elects_one_and_hands_over_on_stop() {
    let sim = sim(1);
    let a = Replica::start(&sim, Some(short_lease("replica-a")));
    let b = Replica::start(&sim, Some(short_lease("replica-b")));
    eventually(Duration::from_secs(120), "a leader", || async {
        a.observer.stats().is_leader() || b.observer.stats().is_leader()
    })
    .await;
    // Leadership stays exclusive over time.
    for _ in 0..60 {
        assert!(!(a.observer.stats().is_leader() && b.observer.stats().is_leader()));
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let (leader, follower) = if a.observer.stats().is_leader() {
        (a, b)
    } else {
        (b, a)
    };
    assert!(!follower.observer.stats().is_leader());
    leader.stop().await;
    eventually(Duration::from_secs(30), "the takeover", || async {
        follower.observer.stats().is_leader()
    })
    .await;
    follower.stop().await;
}

/// The Lease API fails while a replica starts: it keeps trying every retry period (a pod that
/// exited here would crash-loop), then leads and reconciles.
#[tokio::test(start_paused = true)]
async fn a_replica_retries_setting_up_its_lease() {
    let nodes = 2;
    let sim = sim(nodes);
    sim.faults().add(
        FaultRule::new(None, Some("leases"), FaultAction::internal_error())
            .when(Trigger::FirstN(5)),
    );
    let replica = Replica::start(&sim, Some(short_lease("replica-a")));
    eventually(
        Duration::from_secs(120),
        "the lease set up despite the errors",
        || std::future::ready(sim.requests().count(Verb::Get, "leases") > 5),
    )
    .await;
    assert!(!replica.task.is_finished(), "run() kept going");
    eventually(Duration::from_secs(30), "leading", || async {
        replica.observer.stats().is_leader()
    })
    .await;
    install(&sim.client(), nodes).await;
    replica.stop().await;
}

/// `compatibility: KubeVirt`: the reference rules (owner name only, annotations only, the
/// generation recorded on create) give the same three writes.
#[tokio::test(start_paused = true)]
async fn kubevirt_compatibility_rollout() {
    let nodes = 10;
    let (_sim, client, replica) = started(nodes);
    create_cds(&client, "agent", kubevirt_compatible(spec("v1", None))).await;
    eventually(Duration::from_secs(60), "the create", || async {
        get_cds(&client, "agent")
            .await
            .status
            .is_some_and(|s| s.recorded_daemon_set_generation == Some(1))
    })
    .await;
    assert_eq!(
        write_counts(&replica.observer),
        [1, 0, 0, 0, 0, 0, 0, 0],
        "create records at once, done"
    );
    until_rolled_out(&client, "v1", nodes, 1800, "the install").await;

    let before = write_counts(&replica.observer);
    let mut transitions = replica.observer.subscribe();
    set_version(&client, "agent", "v2").await;
    until_rolled_out(&client, "v2", nodes, 3600, "the upgrade").await;
    // No canary soak in KubeVirt compatibility (the reference's timing): no hold.
    assert_eq!(
        writes_since(&replica.observer, before),
        [0, 1, 1, 1, 0, 0, 0, 0]
    );
    assert_eq!(
        written_max_unavailable(&drain(&mut transitions)),
        ["1", "10%", "1"]
    );
    replica.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_canary_that_never_gets_ready_fails_at_the_progress_deadline() {
    let nodes = 3;
    let (_sim, client, replica) = started_and_installed(nodes).await;
    let before = write_counts(&replica.observer);
    let started = tokio::time::Instant::now();
    let api: Api<CanaryDaemonSet> = Api::namespaced(client.clone(), NS);
    let mut stuck = spec("v2", Some("never-ready"));
    stuck.strategy.progress_deadline_seconds = 300;
    api.patch(
        "agent",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": stuck})),
    )
    .await
    .unwrap();
    until_agent_phase(&client, "failed", 1800, "the deadline").await;
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_secs(300),
        "failed after {waited:?}, before the deadline"
    );
    assert!(waited < Duration::from_secs(400), "failed after {waited:?}");
    let status = get_cds(&client, "agent").await.status.unwrap();
    assert_eq!(status.reason_name(), Some("ProgressDeadlineExceeded"));
    assert_eq!(
        writes_since(&replica.observer, before),
        START_AND_SOAK_HOLD,
        "no widening"
    );
    // The event names the pod that is not ready and its node (issue 52: "0 of 3 pods updated
    // and ready" named none).
    let canary = live_pods(&client, "app=agent")
        .await
        .into_iter()
        .find(|pod| {
            !canary_predicates::pod_is_ready(pod) && pod.metadata.deletion_timestamp.is_none()
        })
        .expect("the canary that never gets ready");
    let named = format!(
        "not ready: {} on {}",
        canary.metadata.name.unwrap(),
        canary.spec.unwrap().node_name.unwrap()
    );
    let notes: Vec<String> = events_with_reason(&client, "ProgressDeadlineExceeded")
        .await
        .into_iter()
        .filter_map(|event| event.note)
        .collect();
    assert!(
        notes.iter().any(|note| note.contains(&named)),
        "{named}: {notes:?}"
    );
    replica.stop().await;
}

/// `tlsMigration.enabled` on a virt-handler-like DaemonSet: after the version rollout, the flag
/// and then the certificate detachment each go out as a supervised rollout of their own.
#[tokio::test(start_paused = true)]
async fn tls_migration_steps_roll_out_under_supervision() {
    let nodes = 4;
    let (_sim, client, replica) = started(nodes);
    let handler = |version: &str, supported: bool| -> CanaryDaemonSetSpec {
        let labels = if supported {
            json!({"kubevirt.io/supports-migration-cn-types": "true"})
        } else {
            json!({})
        };
        let mut spec: CanaryDaemonSetSpec = serde_json::from_value(json!({
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "selector": {"matchLabels": {"kubevirt.io": "virt-handler"}},
                    "template": {
                        "metadata": {"labels": {"kubevirt.io": "virt-handler"}},
                        "spec": {
                            "containers": [{
                                "name": "virt-handler", "image": format!("virt-handler:{version}"),
                                "args": ["--port", "8443"],
                                "volumeMounts": [{"name": "kubevirt-virt-handler-certs", "mountPath": "/etc/virt-handler/clientcertificates"}]
                            }],
                            "volumes": [{"name": "kubevirt-virt-handler-certs", "secret": {"secretName": "kubevirt-virt-handler-certs"}}]
                        }
                    }
                }
            },
            "target": {"version": version},
            "tlsMigration": {"enabled": true}
        }))
        .unwrap();
        spec.daemon_set_name = Some("virt-handler".into());
        spec
    };
    let handler_done = |version: &'static str| {
        let client = client.clone();
        move || {
            let client = client.clone();
            async move {
                let status = get_cds(&client, "handler").await.status;
                let ds = Api::<DaemonSet>::namespaced(client.clone(), NS)
                    .get("virt-handler")
                    .await
                    .unwrap();
                let annotations = ds.metadata.annotations.unwrap_or_default();
                status.is_some_and(|s| {
                    s.phase_name() == Some("successful") && s.updated_ready == nodes
                }) && annotations
                    .get("kubevirt.io/install-strategy-version")
                    .map(String::as_str)
                    == Some(version)
            }
        }
    };
    // Installed without TLS support, so that the create path does not migrate at once.
    create_cds(&client, "handler", handler("v1", false)).await;
    eventually(Duration::from_secs(1800), "the install", handler_done("v1")).await;
    let before = write_counts(&replica.observer);
    let api: Api<CanaryDaemonSet> = Api::namespaced(client.clone(), NS);
    api.patch(
        "handler",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": handler("v2", true)})),
    )
    .await
    .unwrap();
    let check = handler_done("v2");
    eventually(Duration::from_secs(3600), "the migration", || {
        let check = check();
        let client = client.clone();
        async move {
            let ds = Api::<DaemonSet>::namespaced(client, NS)
                .get("virt-handler")
                .await
                .unwrap();
            let pod_spec = ds.spec.unwrap().template.spec.unwrap();
            let args = pod_spec.containers[0].args.clone().unwrap_or_default();
            let detached = pod_spec.volumes.unwrap_or_default().is_empty();
            args.contains(&"--migration-cn-types".to_owned()) && detached && check.await
        }
    })
    .await;
    let writes = writes_since(&replica.observer, before);
    // start, soak hold, widen; flag: step, soak hold, widen; detach: step, soak hold,
    // widen; finish (each step is a canary of its own, soaked: issue 46).
    assert_eq!(writes, [0, 1, 3, 1, 2, 3, 0, 0]);
    let ds = Api::<DaemonSet>::namespaced(client.clone(), NS)
        .get("virt-handler")
        .await
        .unwrap();
    let args = ds.spec.unwrap().template.spec.unwrap().containers[0]
        .args
        .clone()
        .unwrap();
    assert_eq!(
        args.iter().filter(|a| *a == "--migration-cn-types").count(),
        1,
        "{args:?}"
    );
    replica.stop().await;
}

/// A controller with nothing to roll out stays alive however the nodes and the DaemonSets it
/// does not manage change: an event that concerns no CanaryDaemonSet is no waiting work. (It
/// counted as such, and an idle controller stopped as wedged after 300 s.)
#[tokio::test(start_paused = true)]
async fn an_idle_controller_is_not_wedged_by_events_that_concern_no_canary_daemon_set() {
    use canary_kube_adapter::controller::ControllerConfig;
    use canary_kube_adapter::health::Health;
    use k8s_openapi::api::core::v1::Node;
    let sim = sim(3);
    let client = sim.client();
    let health = Health::default();
    let replica = Replica::start_with(&sim, client.clone(), |config| ControllerConfig {
        health: health.clone(),
        ..config
    });
    let unmanaged: DaemonSet = serde_json::from_value(json!({
        "metadata": {"name": "kube-proxy", "namespace": NS},
        "spec": {
            "selector": {"matchLabels": {"app": "kube-proxy"}},
            "template": {"metadata": {"labels": {"app": "kube-proxy"}},
                         "spec": {"containers": [{"name": "proxy", "image": "proxy:1"}]}}
        }
    }))
    .unwrap();
    let daemon_sets = Api::<DaemonSet>::namespaced(client.clone(), NS);
    daemon_sets
        .create(&Default::default(), &unmanaged)
        .await
        .unwrap();
    let nodes = Api::<Node>::all(client.clone());
    for (round, unschedulable) in [(0, true), (1, false), (2, true), (3, false)] {
        nodes
            .patch(
                "node-1",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"unschedulable": unschedulable},
                                     "metadata": {"labels": {"round": round.to_string()}}})),
            )
            .await
            .unwrap();
        daemon_sets
            .patch(
                "kube-proxy",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"template": {"metadata": {"annotations": {"round": round.to_string()}}}}})),
            )
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_secs(120)).await;
        assert_eq!(health.wedged(), None, "round {round}");
        assert!(
            !replica.task.is_finished(),
            "round {round}: the controller stopped"
        );
    }
    replica.stop().await;
}

/// A CanaryDaemonSet deleted and created again under the same name: the ControllerRevisions
/// of its history outlive the first object where no garbage collector removes them (the
/// simulator has none for them; on a real cluster, `--cascade=orphan` or a slow collector), and
/// the new object's first rollout has the same revision name. It takes the revision over
/// (replaced, owned by the new object) rather than failing with `AlreadyExists` at every
/// attempt, and its history then has the earlier revision an `undo` needs (issue 52).
#[tokio::test(start_paused = true)]
async fn a_recreated_object_takes_over_the_history_its_deleted_namesake_left() {
    use canary_kube_adapter::history::History;
    use k8s_openapi::api::apps::v1::ControllerRevision;
    use kube::api::{DeleteParams, ListParams};

    let (_sim, client, replica) = started_and_installed(3).await;
    set_version(&client, "agent", "v2").await;
    until_rolled_out(&client, "v2", 3, 1800, "v2").await;
    let cds_api: Api<CanaryDaemonSet> = Api::namespaced(client.clone(), NS);
    cds_api
        .delete("agent", &DeleteParams::default())
        .await
        .unwrap();
    // What the garbage collector does to the DaemonSet the object owned.
    Api::<DaemonSet>::namespaced(client.clone(), NS)
        .delete("agent", &DeleteParams::default())
        .await
        .unwrap();
    eventually(Duration::from_secs(60), "the DaemonSet gone", || async {
        Api::<DaemonSet>::namespaced(client.clone(), NS)
            .get_opt("agent")
            .await
            .unwrap()
            .is_none()
    })
    .await;
    let revisions: Api<ControllerRevision> = Api::namespaced(client.clone(), NS);
    let left = revisions
        .list(&ListParams::default().labels("canary.daemonset.dev/history=agent"))
        .await
        .unwrap()
        .items;
    assert_eq!(left.len(), 2, "the first object's history is still there");

    install(&client, 3).await;
    set_version(&client, "agent", "v2").await;
    until_rolled_out(&client, "v2", 3, 1800, "v2 again").await;
    let cds = get_cds(&client, "agent").await;
    let entries = History::new(client.clone(), &cds, "test")
        .unwrap()
        .list()
        .await
        .unwrap();
    let versions: Vec<&str> = entries.iter().map(|e| e.version.as_str()).collect();
    assert_eq!(versions, ["v1", "v2"], "{entries:?}");
    let history = cds.status.and_then(|s| s.history).unwrap_or_default();
    assert_eq!(
        history.current.map(|c| c.version).as_deref(),
        Some("v2"),
        "the current revision is recorded"
    );
    let uid = cds.metadata.uid.unwrap();
    for revision in revisions
        .list(&ListParams::default().labels("canary.daemonset.dev/history=agent"))
        .await
        .unwrap()
        .items
    {
        let owners = revision.metadata.owner_references.unwrap_or_default();
        assert_eq!(owners.len(), 1, "{owners:?}");
        assert_eq!(owners[0].uid, uid, "owned by the new object");
    }
    replica.stop().await;
}
