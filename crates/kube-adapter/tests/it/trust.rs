//! What the controller will and will not do to a DaemonSet, against canary-sim through the
//! unmodified kube client: hand edits (drift) reverted canary first or reported, an object that
//! does not decode failing alone, no adoption without opt-in, refused writes failing with the
//! API server's message and backing off, every change of the desired template written, the
//! DaemonSet's name kept.

use std::time::Duration;

use canary_kube_adapter::crd::CanaryDaemonSet;
use canary_kube_adapter::observer::{Report, Reports};
use canary_sim::{FaultAction, FaultRule, Verb};
use canary_state_machine::{DriftPolicy, WriteKind};
use canary_testkit::first_container;
use k8s_openapi::api::apps::v1::DaemonSet;
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::support::*;

/// `kubectl set image ds/agent agent=<image>`: a strategic merge patch of the template.
async fn set_image_by_hand(client: &Client, image: &str) {
    let patch = json!({"spec": {"template": {"spec": {"containers": [{"name": "agent", "image": image}]}}}});
    Api::<DaemonSet>::namespaced(client.clone(), NS)
        .patch("agent", &PatchParams::default(), &Patch::Strategic(patch))
        .await
        .unwrap();
}

/// Nothing was taken for drift: no drift counted, no `DriftDetected` event.
async fn assert_no_drift(client: &Client, replica: &Replica) {
    assert_eq!(replica.observer.stats().drifts(), 0);
    assert!(events_with_reason(client, "DriftDetected").await.is_empty());
}

/// `daemonset-canary pause` (`true`) or `resume` (`false`) on `agent`: the
/// `canary.daemonset.dev/paused` annotation set or removed.
async fn hold(client: &Client, on: bool) {
    let value = on.then_some("true");
    let patch =
        json!({"metadata": {"annotations": {canary_kube_adapter::crd::PAUSE_ANNOTATION: value}}});
    Api::<CanaryDaemonSet>::namespaced(client.clone(), NS)
        .patch("agent", &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
}

/// Waits until the hold is in force: `agent` paused, its DaemonSet on `OnDelete`.
async fn held_on_on_delete(client: &Client) {
    eventually(Duration::from_secs(60), "held on OnDelete", || async {
        let ds = get_ds(client, "agent").await;
        let on_delete = ds
            .spec
            .as_ref()
            .and_then(|s| s.update_strategy.as_ref())
            .and_then(|u| u.type_.as_deref())
            == Some("OnDelete");
        on_delete && phase_is(client, "agent", "paused").await
    })
    .await;
}

/// `agent` created with `spec` (at v1) and one replica started, once v1 runs on every node.
async fn installed(
    sim: &Env,
    client: &Client,
    spec: canary_kube_adapter::crd::CanaryDaemonSetSpec,
    nodes: u32,
) -> Replica {
    create_cds(client, "agent", spec).await;
    let replica = Replica::start(sim, None);
    until_rolled_out(client, "v1", nodes, 1800, "the first install").await;
    replica
}

/// The Lease cannot be renewed until `replica`'s term ends; then every fault is cleared and
/// everything answers again.
async fn end_the_term(sim: &Env, replica: &Replica) {
    sim.faults().add(FaultRule::new(
        None,
        Some("leases"),
        FaultAction::internal_error(),
    ));
    eventually(Duration::from_secs(60), "the term ended", || async {
        !replica.observer.stats().is_leader()
    })
    .await;
    sim.faults().clear();
}

/// A first replica, `replica-a`, on a connection the test can cut.
struct DoomedLeader {
    replica: Replica,
    alive: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl DoomedLeader {
    fn start(sim: &Env) -> Self {
        let (doomed, alive) = killable_client(sim);
        Self {
            replica: Replica::start_on(sim, doomed, Some(short_lease("replica-a"))),
            alive,
        }
    }

    /// This leader dies before any record it owes lands (its connection cut, its task
    /// aborted); the faults are cleared and another process, `replica-b`, takes over.
    fn replaced(self, sim: &Env) -> Replica {
        self.alive
            .store(false, std::sync::atomic::Ordering::Release);
        self.replica.task.abort();
        sim.faults().clear();
        Replica::start(sim, Some(short_lease("replica-b")))
    }
}

/// Waits up to `secs` virtual seconds for the status history of `agent` to record a
/// rollback (an automatic one, an abort or an undo).
async fn until_rollback_recorded(client: &Client, secs: u64, what: &str) {
    eventually(Duration::from_secs(secs), what, || async {
        get_cds(client, "agent")
            .await
            .status
            .and_then(|s| s.history)
            .is_some_and(|h| h.rollback.is_some())
    })
    .await;
}

/// `agent` is not `Drifted`, and `replica` reported no drift: `what`, the controller's own
/// write, was not taken for a hand edit.
async fn assert_own_write_not_drift(client: &Client, replica: &Replica, what: &str) {
    let cds = get_cds(client, "agent").await;
    assert_ne!(
        condition(&cds, "Drifted").map(|c| c.0).as_deref(),
        Some("True"),
        "{what} reported as drift"
    );
    assert_no_drift(client, replica).await;
}

/// Every status write refused (500) until the faults are cleared.
fn refuse_status_writes(sim: &Env) {
    sim.faults().add(FaultRule::new(
        Some(Verb::Patch),
        Some("canarydaemonsets/status"),
        FaultAction::internal_error(),
    ));
}

/// The spec of `agent` moved to v2, whose pods crash-loop.
async fn ask_for_crashing_v2(client: &Client) {
    let crashing = spec("v2", Some("crashloop"));
    Api::<CanaryDaemonSet>::namespaced(client.clone(), NS)
        .patch(
            "agent",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"target": crashing.target, "template": crashing.template}}),
            ),
        )
        .await
        .unwrap();
}

/// Every status write refused from now on, then v2 asked for; returns once the start of v2 is
/// written to the DaemonSet, its status record refused.
async fn start_v2_without_its_record(sim: &Env, client: &Client) {
    refuse_status_writes(sim);
    set_version(client, "agent", "v2").await;
    eventually(Duration::from_secs(60), "the start written", || async {
        image_of(&get_ds(client, "agent").await) == "agent:v2"
    })
    .await;
}

/// `agent` at v1 with `driftPolicy: Report`, rolled out on all `nodes`.
async fn install_reporting_drift(client: &Client, nodes: u32) {
    let mut reported = spec("v1", None);
    reported.strategy.drift_policy = DriftPolicy::Report;
    create_cds(client, "agent", reported).await;
    until_rolled_out(client, "v1", nodes, 1800, "the install").await;
}

fn image_of(ds: &DaemonSet) -> String {
    first_container(ds).image.clone().unwrap_or_default()
}

/// The DaemonSet writes reported from now on, in order.
fn writes(reports: &mut Reports) -> Vec<WriteKind> {
    let mut out = Vec::new();
    while let Some(report) = reports.try_recv() {
        if let Report::DaemonSetWrite {
            kind,
            outcome: canary_kube_adapter::WriteOutcome::Ok,
        } = report
        {
            out.push(kind);
        }
    }
    out
}

#[tokio::test(start_paused = true)]
async fn a_hand_edit_is_reverted_canary_first() {
    let nodes = 6;
    let (_sim, client, replica) = started_and_installed(nodes).await;
    let mut reports = replica.observer.reports();
    set_image_by_hand(&client, "agent:by-hand").await;

    eventually(Duration::from_secs(1800), "the revert", || async {
        image_of(&get_ds(&client, "agent").await) == "agent:v1"
            && rolled_out(&client, "agent", "v1", nodes).await
    })
    .await;
    let written = writes(&mut reports);
    assert_eq!(
        written.first(),
        Some(&WriteKind::Start),
        "the desired template goes back out at maxUnavailable 1, the canary first: {written:?}"
    );
    assert_eq!(replica.observer.stats().drifts(), 1);
    let events = events_with_reason(&client, "DriftDetected").await;
    assert_eq!(events.len(), 1);
    let note = events[0].note.clone().unwrap_or_default();
    assert!(
        note.contains("image of container agent: agent:v1 → agent:by-hand"),
        "{note}"
    );
    let cds = get_cds(&client, "agent").await;
    assert_eq!(
        condition(&cds, "Drifted").map(|c| c.0),
        Some("False".into()),
        "the drift is over"
    );
    replica.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_reported_drift_is_left_alone_until_the_desired_state_changes() {
    let nodes = 4;
    let (_sim, client, replica) = started(nodes);
    install_reporting_drift(&client, nodes).await;
    let writes_before = replica.observer.stats().total_daemon_set_writes();
    set_image_by_hand(&client, "agent:by-hand").await;
    eventually(Duration::from_secs(60), "the Drifted condition", || async {
        condition(&get_cds(&client, "agent").await, "Drifted").is_some_and(|c| c.0 == "True")
    })
    .await;
    tokio::time::sleep(Duration::from_secs(900)).await;
    assert_eq!(
        replica.observer.stats().total_daemon_set_writes(),
        writes_before,
        "nothing is written over a reported drift"
    );
    assert_eq!(image_of(&get_ds(&client, "agent").await), "agent:by-hand");
    let (_, reason, message) = condition(&get_cds(&client, "agent").await, "Drifted").unwrap();
    assert_eq!(reason, "ChangedOutsideTheController");
    assert!(message.contains("agent:by-hand"), "{message}");
    assert_eq!(events_with_reason(&client, "DriftDetected").await.len(), 1);

    // A new version is a rollout like any other, and ends the drift.
    set_version(&client, "agent", "v2").await;
    until_rolled_out(&client, "v2", nodes, 3600, "the upgrade").await;
    assert_eq!(
        condition(&get_cds(&client, "agent").await, "Drifted").map(|c| c.0),
        Some("False".into())
    );
    replica.stop().await;
}

/// The Pods driver's `OnDelete` DaemonSet replaces no pod for a hand edit: under
/// `driftPolicy: Report` the finished rollout's pods still run the recorded revision, and the
/// status keeps counting them as updated against it (not as 0 updated against the edit) and
/// keeps naming it.
#[tokio::test(start_paused = true)]
async fn a_reported_drift_of_the_pods_driver_keeps_the_rollout_counted() {
    let nodes = 4;
    let (_sim, client, replica) = started(nodes);
    let mut reported = pods_spec("v1", None, vec![]);
    reported.strategy.drift_policy = DriftPolicy::Report;
    create_cds(&client, "agent", reported).await;
    until_agent_phase(&client, "successful", 600, "v1 installed").await;
    let before = get_cds(&client, "agent").await.status.unwrap_or_default();
    set_image_by_hand(&client, "agent:by-hand").await;
    eventually(Duration::from_secs(60), "the Drifted condition", || async {
        condition(&get_cds(&client, "agent").await, "Drifted").is_some_and(|c| c.0 == "True")
    })
    .await;
    tokio::time::sleep(Duration::from_secs(30)).await;
    let status = get_cds(&client, "agent").await.status.unwrap_or_default();
    assert_eq!(
        (status.desired, status.updated, status.updated_ready),
        (4, 4, 4),
        "{status:?}"
    );
    assert_eq!(status.target_revision, before.target_revision);
    assert_eq!(nodes_on(&client, "agent:v1").await.len(), 4);
    replica.stop().await;
}

/// A CanaryDaemonSet an old API server stored with an out-of-range integer: its own status
/// says what is wrong, and the other objects roll out as if it were not there.
#[tokio::test(start_paused = true)]
async fn an_object_that_does_not_decode_fails_alone() {
    let nodes = 3;
    let sim = sim(nodes);
    let client = sim.client();
    let mut bad = serde_json::to_value(CanaryDaemonSet::new("bad", spec("v1", None))).unwrap();
    bad["spec"]["strategy"]["crashLoop"] = json!({"restartThreshold": 3_000_000_000_u64});
    bad["metadata"]["namespace"] = json!(NS);
    // Through the API, the CRD's `maximum` refuses it (422), as kube-apiserver does.
    let untyped: DynamicObject = serde_json::from_value(bad.clone()).unwrap();
    let refused = canary_kube_adapter::crd::dynamic_api(&client, Some(NS))
        .create(&PostParams::default(), &untyped)
        .await
        .unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("should be less than or equal to 1000"),
        "{refused}"
    );
    plant_cds(&sim, bad);
    let replica = Replica::start(&sim, None);
    install(&client, nodes).await;

    let bad = canary_kube_adapter::crd::dynamic_api(&client, Some(NS))
        .get("bad")
        .await
        .unwrap();
    let status = &bad.data["status"];
    assert_eq!(status["phase"], "failed", "{status}");
    assert_eq!(status["reason"], "InvalidSpec");
    let message = status["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("spec.strategy.crashLoop.restartThreshold"),
        "{message}"
    );
    let events = events_with_reason(&client, "InvalidSpec").await;
    assert_eq!(events.len(), 1, "one event, not one per pass");
    assert!(
        Api::<DaemonSet>::namespaced(client.clone(), NS)
            .get_opt("bad")
            .await
            .unwrap()
            .is_none(),
        "nothing is written for it"
    );
    // The CanaryDaemonSet list is not retried in a loop: it succeeds, object by object.
    assert!(
        sim.requests().count(Verb::List, "canarydaemonsets") <= 2,
        "{:?}",
        sim.requests().iter().collect::<Vec<_>>()
    );
    replica.stop().await;
}

#[tokio::test(start_paused = true)]
async fn an_unowned_daemon_set_is_adopted_only_when_asked() {
    let nodes = 3;
    let sim = sim(nodes);
    let client = sim.client();
    // kube-proxy, or a Helm-installed CNI: a DaemonSet nobody owns, with the same name.
    let mut existing = DaemonSet {
        metadata: kube::api::ObjectMeta {
            name: Some("agent".into()),
            ..Default::default()
        },
        spec: spec("v0", None).template.map(|t| t.spec),
        status: None,
    };
    existing.metadata.namespace = Some(NS.into());
    let ds_api: Api<DaemonSet> = Api::namespaced(client.clone(), NS);
    ds_api
        .create(&PostParams::default(), &existing)
        .await
        .unwrap();
    let replica = Replica::start(&sim, None);
    create_cds(&client, "agent", spec("v1", None)).await;
    eventually(Duration::from_secs(60), "the refusal", || async {
        let cds = get_cds(&client, "agent").await;
        condition(&cds, "Degraded")
            .is_some_and(|c| c.1 == "InvalidSpec" && c.2.contains("spec.adopt: true"))
    })
    .await;
    tokio::time::sleep(Duration::from_secs(300)).await;
    assert_eq!(replica.observer.stats().total_daemon_set_writes(), 0);
    assert_eq!(image_of(&get_ds(&client, "agent").await), "agent:v0");

    Api::<CanaryDaemonSet>::namespaced(client.clone(), NS)
        .patch(
            "agent",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"adopt": true}})),
        )
        .await
        .unwrap();
    until_rolled_out(&client, "v1", nodes, 1800, "the adoption").await;
    replica.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_refused_write_fails_with_the_servers_message_and_backs_off() {
    let nodes = 3;
    let (sim, client, replica) = started_and_installed(nodes).await;
    sim.faults().add(FaultRule::new(
        Some(Verb::Patch),
        Some("daemonsets"),
        FaultAction::Error {
            code: 403,
            reason: "Forbidden".into(),
            retry_after_seconds: None,
        },
    ));
    let patches_before = sim.requests().count(Verb::Patch, "daemonsets");
    set_version(&client, "agent", "v2").await;
    eventually(Duration::from_secs(60), "the failure", || async {
        let cds = get_cds(&client, "agent").await;
        cds.status
            .is_some_and(|s| s.reason_name() == Some("WriteRejected"))
    })
    .await;
    let message = get_cds(&client, "agent")
        .await
        .status
        .unwrap()
        .message
        .unwrap_or_default();
    assert!(message.contains("403 Forbidden"), "{message}");
    assert!(
        !message.contains("ErrorResponse"),
        "no debug dump: {message}"
    );
    tokio::time::sleep(Duration::from_secs(600)).await;
    let attempts = sim.requests().count(Verb::Patch, "daemonsets") - patches_before;
    // 1, 2, 4, ... s: about ten in ten minutes, where a fixed 15 s requeue made forty.
    assert!(
        (2..=12).contains(&attempts),
        "{attempts} attempts in ten minutes"
    );
    sim.faults().clear();
    until_rolled_out(&client, "v2", nodes, 3600, "the upgrade once allowed").await;
    replica.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_template_only_change_with_an_explicit_deployment_id_is_written() {
    let nodes = 3;
    let (_sim, client, replica) = started(nodes);
    let mut pinned = spec("v1", None);
    pinned.target.deployment_id = Some("build-1".into());
    create_cds(&client, "agent", pinned).await;
    until_rolled_out(&client, "v1", nodes, 1800, "the install").await;
    let before = write_counts(&replica.observer);
    Api::<CanaryDaemonSet>::namespaced(client.clone(), NS)
        .patch(
            "agent",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"template": {"spec": {"template": {"spec": {
                "containers": [{"name": "agent", "image": "agent:v1-patched"}]}}}}}})),
        )
        .await
        .unwrap();
    eventually(Duration::from_secs(1800), "the new template", || async {
        image_of(&get_ds(&client, "agent").await) == "agent:v1-patched"
            && rolled_out(&client, "agent", "v1", nodes).await
    })
    .await;
    let written = writes_since(&replica.observer, before);
    assert_eq!(
        written[1], 1,
        "one start: a supervised rollout, {written:?}"
    );
    replica.stop().await;
}

#[tokio::test(start_paused = true)]
async fn kubevirt_compatibility_restarts_the_canary_on_any_spec_edit() {
    let nodes = 3;
    let (_sim, client, replica) = started(nodes);
    create_cds(&client, "agent", kubevirt_compatible(spec("v1", None))).await;
    eventually(Duration::from_secs(1800), "the install", || async {
        get_cds(&client, "agent")
            .await
            .status
            .is_some_and(|s| s.phase_name() == Some("successful"))
    })
    .await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    let before = write_counts(&replica.observer);
    // A spec edit that changes nothing of the template: quirk 4, the canary restarts.
    Api::<CanaryDaemonSet>::namespaced(client.clone(), NS)
        .patch(
            "agent",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"strategy": {"progressDeadlineSeconds": 900}}})),
        )
        .await
        .unwrap();
    eventually(Duration::from_secs(600), "the restarted canary", || async {
        writes_since(&replica.observer, before)[1] == 1
    })
    .await;
    let annotations = get_ds(&client, "agent")
        .await
        .metadata
        .annotations
        .unwrap_or_default();
    assert_eq!(annotations["kubevirt.io/generation"], "2");
    replica.stop().await;
}

#[tokio::test(start_paused = true)]
async fn the_daemon_set_name_cannot_change_and_a_deleted_object_is_forgotten() {
    let nodes = 2;
    let (sim, client, replica) = started_and_installed(nodes).await;
    let mut reports = replica.observer.reports();
    let api: Api<CanaryDaemonSet> = Api::namespaced(client.clone(), NS);
    let rename = json!({"spec": {"daemonSetName": "agent-2"}});
    // The CRD's transition rule refuses the rename through the API (422); the controller's
    // own check holds where a CRD without that rule let it through.
    let refused = api
        .patch("agent", &PatchParams::default(), &Patch::Merge(&rename))
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("is immutable"), "{refused}");
    plant_patch(&sim, "agent", &rename);
    eventually(Duration::from_secs(60), "the refusal", || async {
        condition(&get_cds(&client, "agent").await, "Degraded")
            .is_some_and(|c| c.1 == "InvalidSpec" && c.2.contains("immutable"))
    })
    .await;
    tokio::time::sleep(Duration::from_secs(120)).await;
    assert!(
        Api::<DaemonSet>::namespaced(client.clone(), NS)
            .get_opt("agent-2")
            .await
            .unwrap()
            .is_none(),
        "no second DaemonSet beside the first"
    );
    assert_eq!(
        get_cds(&client, "agent")
            .await
            .status
            .unwrap()
            .daemon_set_name
            .as_deref(),
        Some("agent"),
        "the owned DaemonSet stays recorded"
    );

    api.delete("agent", &Default::default()).await.unwrap();
    eventually(Duration::from_secs(60), "the forgetting", || {
        let mut deleted = false;
        while let Some(report) = reports.try_recv() {
            deleted |= matches!(report, Report::Deleted { ref name, .. } if name == "agent");
        }
        std::future::ready(deleted)
    })
    .await;
    replica.stop().await;
}

/// A crash between the finishing write (maxUnavailable back to 1) and the status write that
/// records it leaves the status at `waiting`, 10%, with the template hash of the widened
/// DaemonSet. The next replica reads that as the rollout's own progress: it finishes the
/// rollout, and neither calls it drift nor restarts it canary first.
#[tokio::test(start_paused = true)]
async fn a_write_whose_status_was_lost_is_not_drift() {
    use canary_kube_adapter::desired::{
        RollingUpdateWrite, live_template_hash, set_max_unavailable,
    };
    use canary_state_machine::MaxUnavailable;

    let nodes = 4;
    let (sim, client, replica) = started_and_installed(nodes).await;
    replica.stop().await;

    let mut widened = get_ds(&client, "agent").await;
    set_max_unavailable(
        &mut widened,
        MaxUnavailable::Percent(10),
        RollingUpdateWrite::KeepMaxSurge,
    );
    let lost = json!({"status": {
        "phase": "waiting",
        "currentMaxUnavailable": "10%",
        "daemonSetTemplateHash": live_template_hash(&widened).unwrap(),
    }});
    Api::<CanaryDaemonSet>::namespaced(client.clone(), NS)
        .patch_status("agent", &PatchParams::default(), &Patch::Merge(lost))
        .await
        .unwrap();

    let replica = Replica::start(&sim, None);
    let mut reports = replica.observer.reports();
    until_rolled_out(&client, "v1", nodes, 600, "the finished rollout").await;
    let written = writes(&mut reports);
    assert!(
        !written.contains(&WriteKind::Start),
        "no canary restart over the rollout's own write: {written:?}"
    );
    assert_no_drift(&client, &replica).await;
    replica.stop().await;
}

/// A leader whose rollout-start write lands but whose status writes are refused, and which
/// then loses its Lease and takes it back, starts its new term without memory of the write.
/// The live DaemonSet is still at the generation that write gave it, so it is the controller's
/// own (the process keeps that across terms): under `driftPolicy: Report` the rollout goes on
/// instead of holding forever as "changed outside the controller" (soak seed 20001008).
#[tokio::test(start_paused = true)]
async fn an_own_write_whose_record_a_lost_term_dropped_is_not_drift() {
    let nodes = 4;
    let sim = sim(nodes);
    let client = sim.client();
    let replica = Replica::start(&sim, Some(short_lease("replica-a")));
    install_reporting_drift(&client, nodes).await;
    let terms = replica.observer.stats().leader_terms();

    start_v2_without_its_record(&sim, &client).await;
    end_the_term(&sim, &replica).await;
    until_rolled_out(&client, "v2", nodes, 3600, "the upgrade").await;
    assert!(replica.observer.stats().leader_terms() > terms);
    assert_no_drift(&client, &replica).await;
    replica.stop().await;
}

/// A leader replaced between a rollback's DaemonSet write and the status write that records
/// it. The next leader, another process, knows the rollback from the stored history, and the
/// live DaemonSet hashes exactly as the revision it goes back to did when its rollout ended
/// well: that is the rollback's own write, not a hand edit. Under `driftPolicy: Report` the
/// rollback ends `rolledBack`, instead of holding `failed` with `Drifted` set for good (soak
/// seed 22008210).
#[tokio::test(start_paused = true)]
async fn a_rollback_whose_record_a_replaced_leader_lost_is_not_drift() {
    let nodes = 4;
    let sim = sim(nodes);
    let client = sim.client();
    let first = DoomedLeader::start(&sim);
    let mut reported = spec("v1", None);
    reported.strategy.drift_policy = DriftPolicy::Report;
    reported.strategy.on_failure = canary_state_machine::OnFailure::Rollback;
    create_cds(&client, "agent", reported).await;
    until_rolled_out(&client, "v1", nodes, 1800, "the install").await;

    // Slow DaemonSet writes keep the rollback's write in flight long enough to refuse its
    // record behind it.
    sim.faults().add(FaultRule::new(
        Some(Verb::Patch),
        Some("daemonsets"),
        FaultAction::Latency(Duration::from_secs(20)),
    ));
    ask_for_crashing_v2(&client).await;
    until_rollback_recorded(&client, 900, "the rollback recorded").await;
    assert_eq!(image_of(&get_ds(&client, "agent").await), "agent:v2");
    refuse_status_writes(&sim);
    eventually(Duration::from_secs(60), "the rollback written", || async {
        image_of(&get_ds(&client, "agent").await) == "agent:v1"
    })
    .await;
    let second = first.replaced(&sim);
    until_agent_phase(&client, "rolledBack", 1800, "the rollback ended").await;
    let cds = get_cds(&client, "agent").await;
    let status = cds.status.clone().unwrap_or_default();
    assert_eq!(status.target_version.as_deref(), Some("v1"));
    assert_eq!(
        status.updated_ready, nodes,
        "every pod back on v1 and ready"
    );
    assert_eq!(image_of(&get_ds(&client, "agent").await), "agent:v1");
    assert_own_write_not_drift(&client, &second, "the rollback's own write").await;
    second.stop().await;
}

/// An undo whose DaemonSet write a replaced leader wrote and did not record: the next
/// leader, another process, knows the undo from the stored history, and the live DaemonSet
/// carries the target of the revision it goes back to (its annotations and images), so that
/// is the undo's own write, not a hand edit (docs/operations.md).
#[tokio::test(start_paused = true)]
async fn an_undo_whose_record_a_replaced_leader_lost_is_not_drift() {
    let nodes = 4;
    let sim = sim(nodes);
    let client = sim.client();
    let first = DoomedLeader::start(&sim);
    install_reporting_drift(&client, nodes).await;
    set_version(&client, "agent", "v2").await;
    until_rolled_out(&client, "v2", nodes, 1800, "v2").await;

    // Slow DaemonSet writes keep the undo's write in flight long enough to refuse its record
    // behind it.
    sim.faults().add(FaultRule::new(
        Some(Verb::Patch),
        Some("daemonsets"),
        FaultAction::Latency(Duration::from_secs(20)),
    ));
    annotate(
        &client,
        canary_kube_adapter::crd::UNDO_ANNOTATION,
        "previous@1",
    )
    .await;
    until_rollback_recorded(&client, 120, "the undo recorded").await;
    refuse_status_writes(&sim);
    eventually(Duration::from_secs(60), "the undo written", || async {
        image_of(&get_ds(&client, "agent").await) == "agent:v1"
    })
    .await;
    let second = first.replaced(&sim);
    // An undo is reported as the rollout it is: `successful` at v1 once it ends.
    until_rolled_out(&client, "v1", nodes, 1800, "the undo ended").await;
    assert_own_write_not_drift(&client, &second, "the undo's own write").await;
    second.stop().await;
}

/// A failed rollout, then a new target whose start is written to the DaemonSet while every
/// status write is refused, and the term ends before one lands (the Lease cannot be renewed,
/// as in soak seed 27000373): the status still records the failure, for the old target, and
/// the next term remembers nothing else. Read as the new target's, that failure kept the new
/// rollout `failed` for good, though the DaemonSet already ran it. The new target's rollout
/// completes instead.
async fn a_start_whose_record_was_lost_is_not_failed_by_the_old_target(
    fix: serde_json::Value,
    version: &str,
) {
    let nodes = 4;
    let sim = sim(nodes);
    let client = sim.client();
    create_cds(&client, "agent", spec("v1", None)).await;
    let replica = Replica::start(&sim, Some(short_lease("replica-a")));
    until_rolled_out(&client, "v1", nodes, 1800, "the first install").await;
    ask_for_crashing_v2(&client).await;
    until_agent_phase(&client, "failed", 900, "the crash-looping v2 failed").await;

    refuse_status_writes(&sim);
    Api::<CanaryDaemonSet>::namespaced(client.clone(), NS)
        .patch("agent", &PatchParams::default(), &Patch::Merge(fix))
        .await
        .unwrap();
    eventually(Duration::from_secs(120), "the start written", || async {
        let ds = get_ds(&client, "agent").await;
        let behavior = ds
            .spec
            .and_then(|s| s.template.metadata)
            .and_then(|m| m.annotations)
            .and_then(|a| a.get("sim.canary.daemonset.dev/behavior").cloned());
        behavior.is_none()
    })
    .await;
    assert!(
        phase_is(&client, "agent", "failed").await,
        "the start's status write was refused"
    );
    let terms = replica.observer.stats().leader_terms();
    end_the_term(&sim, &replica).await;

    until_rolled_out(&client, version, nodes, 1800, "the new target").await;
    let status = get_cds(&client, "agent").await.status.unwrap_or_default();
    assert_eq!(status.phase_name(), Some("successful"));
    assert_eq!(status.target_version.as_deref(), Some(version));
    assert!(
        replica.observer.stats().leader_terms() > terms,
        "a new term"
    );
    assert_no_drift(&client, &replica).await;
    replica.stop().await;
}

/// [`a_start_whose_record_was_lost_is_not_failed_by_the_old_target`] for a new version.
#[tokio::test(start_paused = true)]
async fn a_new_version_whose_start_record_was_lost_rolls_out() {
    let fixed = spec("v3", None);
    a_start_whose_record_was_lost_is_not_failed_by_the_old_target(
        json!({"spec": {"target": fixed.target, "template": {"spec": {"template": {
            "metadata": {"annotations": {"sim.canary.daemonset.dev/behavior": null}},
            "spec": {"containers": [{"name": "agent", "image": "agent:v3"}]}}}}}}),
        "v3",
    )
    .await;
}

/// [`a_start_whose_record_was_lost_is_not_failed_by_the_old_target`] for a fixed template of
/// the same version: only the deployment id (the template's hash) says it is a new target.
#[tokio::test(start_paused = true)]
async fn a_fixed_template_of_the_same_version_whose_start_record_was_lost_rolls_out() {
    a_start_whose_record_was_lost_is_not_failed_by_the_old_target(
        json!({"spec": {"template": {"spec": {"template": {
            "metadata": {"annotations": {"sim.canary.daemonset.dev/behavior": null}}}}}}}),
        "v2",
    )
    .await;
}

/// A leader replaced between the DaemonSet write that starts a new version and the status
/// write that records it. The next leader, another process, finds the status `successful` at
/// the old version with the old template hash, and the live DaemonSet carrying the new
/// target's annotations and images: that is the start of the new target, whichever process
/// wrote it, not a hand edit. Under `driftPolicy: Report` the new version's rollout goes on,
/// supervised, instead of running unsupervised while the status says `successful` at the old
/// one with `Drifted` set (soak seed 28000728).
#[tokio::test(start_paused = true)]
async fn a_start_whose_record_a_replaced_leader_lost_is_not_drift() {
    let nodes = 4;
    let sim = sim(nodes);
    let client = sim.client();
    let first = DoomedLeader::start(&sim);
    install_reporting_drift(&client, nodes).await;

    start_v2_without_its_record(&sim, &client).await;
    assert!(
        phase_is(&client, "agent", "successful").await,
        "the status still records v1's rest"
    );
    let second = first.replaced(&sim);
    until_rolled_out(&client, "v2", nodes, 1800, "v2 rolled out").await;
    assert_own_write_not_drift(&client, &second, "the start's own write").await;
    second.stop().await;
}

/// `daemonset-canary pause` on the MaxUnavailable driver, through the annotation: the rollout
/// under way goes to `OnDelete` in one write (`Paused` once, `status.held`), the DaemonSet
/// controller replaces no pod for an hour held, the phase stays `paused` (no deadline); the
/// resume puts it back on `RollingUpdate` (`Resumed` once; the Resume write, or the rows' own
/// write when they have one) and the rollout completes, never called drift.
#[tokio::test(start_paused = true)]
async fn a_hold_on_request_stops_the_daemon_set_controller_until_the_resume() {
    let nodes = 6;
    let sim = sim(nodes);
    let client = sim.client();
    let mut spec = spec("v1", None);
    spec.strategy.progress_deadline_seconds = 300;
    let replica = installed(&sim, &client, spec, nodes).await;
    let mut reports = replica.observer.reports();
    set_version(&client, "agent", "v2").await;
    eventually(Duration::from_secs(120), "the canary under way", || async {
        get_cds(&client, "agent")
            .await
            .status
            .is_some_and(|s| s.updated >= 1)
    })
    .await;
    hold(&client, true).await;
    eventually(Duration::from_secs(60), "held", || async {
        let status = get_cds(&client, "agent").await.status.unwrap_or_default();
        status.phase_name() == Some("paused") && status.held == Some(true)
    })
    .await;
    let strategy = |ds: &DaemonSet| {
        let update = ds
            .spec
            .as_ref()
            .and_then(|s| s.update_strategy.clone())
            .unwrap_or_default();
        let max = update
            .rolling_update
            .and_then(|r| r.max_unavailable)
            .map(|m| serde_json::to_string(&m).unwrap());
        (update.type_.unwrap_or_default(), max)
    };
    assert_eq!(
        strategy(&get_ds(&client, "agent").await),
        ("OnDelete".to_owned(), Some("1".to_owned())),
        "held: OnDelete, the rollout's maxUnavailable kept"
    );
    let v2_pods = || async {
        pods_by_node(&client)
            .await
            .values()
            .filter(|(image, _)| image == "agent:v2")
            .count()
    };
    tokio::time::sleep(Duration::from_secs(120)).await;
    let held_with = v2_pods().await;
    tokio::time::sleep(Duration::from_secs(3_600)).await;
    assert_eq!(v2_pods().await, held_with, "no pod replaced while held");
    assert!(
        held_with < nodes as usize,
        "{held_with} pods of {nodes} on v2"
    );
    assert!(
        phase_is(&client, "agent", "paused").await,
        "an hour held: no deadline"
    );
    assert_eq!(writes(&mut reports), [WriteKind::Start, WriteKind::Hold]);

    hold(&client, false).await;
    until_rolled_out(&client, "v2", nodes, 1800, "the rollout resumed to its end").await;
    let after = writes(&mut reports);
    // The canary got ready while held: the widening write is the one that resumes.
    assert!(
        matches!(after.first(), Some(WriteKind::Resume | WriteKind::Widen)),
        "{after:?}"
    );
    assert!(
        !after.contains(&WriteKind::Start) && !after.contains(&WriteKind::Hold),
        "{after:?}"
    );
    assert_eq!(after.last(), Some(&WriteKind::Finish), "{after:?}");
    assert_eq!(
        strategy(&get_ds(&client, "agent").await),
        ("RollingUpdate".to_owned(), Some("1".to_owned()))
    );
    assert_eq!(
        get_cds(&client, "agent")
            .await
            .status
            .unwrap_or_default()
            .held,
        None
    );
    for reason in ["Paused", "Resumed"] {
        assert_eq!(
            events_with_reason(&client, reason).await.len(),
            1,
            "{reason}"
        );
    }
    assert!(
        events_with_reason(&client, "DriftDetected")
            .await
            .is_empty()
    );
    assert!(
        events_with_reason(&client, "ProgressDeadlineExceeded")
            .await
            .is_empty()
    );
    replica.stop().await;
}

/// A hand edit seen while a hold is asked for, at rest: the hold's `OnDelete` goes out over the
/// edited template, and the edit is still drift, written over at the resume (soak seed
/// 9000841: the hold write was recorded as the controller's own template, and the edit
/// outlived the hold).
#[tokio::test(start_paused = true)]
async fn a_hand_edit_under_a_hold_is_written_over_at_the_resume() {
    let nodes = 3;
    let sim = sim(nodes);
    let client = sim.client();
    let replica = installed(&sim, &client, spec("v1", None), nodes).await;
    hold(&client, true).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    set_image_by_hand(&client, "agent:by-hand").await;
    held_on_on_delete(&client).await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    let cds = get_cds(&client, "agent").await;
    let drifted = condition(&cds, "Drifted").unwrap_or_default();
    assert_eq!(drifted.0, "True", "still drift while held: {drifted:?}");
    hold(&client, false).await;
    eventually(
        Duration::from_secs(600),
        "the edit written over",
        || async {
            image_of(&get_ds(&client, "agent").await) == "agent:v1"
                && rolled_out(&client, "agent", "v1", nodes).await
        },
    )
    .await;
    replica.stop().await;
}

/// Regression (soak seed 9300109): the resume's write refused (a 429) recorded the hold as
/// over while the DaemonSet stayed on `OnDelete`, so no pass wrote the resume again and the
/// rollout failed on its progress deadline. The hold now stays recorded until the resume lands.
#[tokio::test(start_paused = true)]
async fn a_refused_resume_is_written_again() {
    let nodes = 20;
    let sim = sim(nodes);
    let client = sim.client();
    let replica = installed(&sim, &client, spec("v1", None), nodes).await;
    // Held in the middle of the rollout: its template is written already, so only the
    // resume takes the DaemonSet off `OnDelete`.
    set_version(&client, "agent", "v2").await;
    eventually(Duration::from_secs(60), "v2 written", || async {
        image_of(&get_ds(&client, "agent").await) == "agent:v2"
    })
    .await;
    hold(&client, true).await;
    held_on_on_delete(&client).await;
    let patches = sim.requests().count(Verb::Patch, "daemonsets");
    // The next DaemonSet write (the resume) is refused.
    sim.faults().add(
        FaultRule::new(
            Some(Verb::Patch),
            Some("daemonsets"),
            FaultAction::too_many_requests(1),
        )
        .when(canary_sim::Trigger::Nth(1)),
    );
    hold(&client, false).await;
    until_rolled_out(&client, "v2", nodes, 1800, "v2 rolled out").await;
    assert!(
        sim.requests().count(Verb::Patch, "daemonsets") >= patches + 2,
        "the refused resume and its retry"
    );
    let resumed = events_with_reason(&client, "Resumed").await;
    assert_eq!(
        resumed.len(),
        1,
        "announced once, when it landed: {resumed:?}"
    );
    replica.stop().await;
}
