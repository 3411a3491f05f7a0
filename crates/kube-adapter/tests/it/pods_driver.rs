//! The Pods driver against canary-sim through the unmodified kube client: the canary lands on
//! the selected node, a pause holds exactly the first step's nodes, zones go one at a time, a
//! NotReady node is deferred without stalling (a removed one is not), a crash-looping canary
//! stops every deletion, a promotion ends an open pause, and a DaemonSet someone else owns (`workloadRef`) follows its
//! owner's template changes without the controller ever writing it.

use std::collections::BTreeMap;
use std::time::Duration;

use canary_kube_adapter::crd::{CanaryDaemonSetSpec, PROMOTE_ANNOTATION, WorkloadRef};
use canary_kube_adapter::observer::Report;
use canary_sim::{FaultAction, FaultRule, Verb};
use canary_testkit::node_names;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::support::*;

async fn label_node(client: &Client, node: &str, key: &str, value: &str) {
    Api::<Node>::all(client.clone())
        .patch(
            node,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {key: value}}})),
        )
        .await
        .unwrap();
}

/// `agent` installed at v1 on `nodes` nodes by the Pods driver with `steps`, the canary node
/// selector picking the node at `chosen` (by name) alone; one replica running. Returns the
/// node names too.
async fn installed_with_a_chosen_canary(
    nodes: u32,
    chosen: usize,
    steps: Vec<canary_kube_adapter::crd::StepSpec>,
) -> (Env, Client, Replica, Vec<String>) {
    let sim = sim(nodes);
    let client = sim.client();
    let names = node_names(&client).await;
    label_node(&client, &names[chosen], "canary.example/first", "yes").await;
    let replica = Replica::start(&sim, None);
    let mut spec = pods_spec("v1", None, steps);
    spec.strategy.canary_node_selector = Some(LabelSelector {
        match_labels: Some([("canary.example/first".to_owned(), "yes".to_owned())].into()),
        ..LabelSelector::default()
    });
    create_cds(&client, "agent", spec).await;
    until_agent_phase(&client, "successful", 300, "v1 installed").await;
    (sim, client, replica, names)
}

async fn status_field(client: &Client, name: &str) -> serde_json::Value {
    serde_json::to_value(get_cds(client, name).await.status).unwrap()
}

#[tokio::test(start_paused = true)]
async fn the_canary_lands_on_the_selected_node_and_a_30s_pause_holds_exactly_it() {
    let (_sim, client, replica, nodes) =
        installed_with_a_chosen_canary(6, 4, vec![nodes_step("1"), pause(Some("30s"))]).await;
    let chosen = nodes[4].clone();
    let ds = get_ds(&client, "agent").await;
    let strategy = ds.spec.unwrap().update_strategy.unwrap();
    assert_eq!(strategy.type_.as_deref(), Some("OnDelete"));

    set_version(&client, "agent", "v2").await;
    until_agent_phase(&client, "paused", 120, "paused after the canary").await;
    assert_eq!(
        nodes_on(&client, "agent:v2").await,
        std::slice::from_ref(&chosen)
    );
    let status = status_field(&client, "agent").await;
    assert_eq!(status["canaryNodes"], json!([chosen]));
    assert_eq!(
        status["targetVersion"], "v2",
        "the version being rolled out"
    );
    assert_eq!(
        (
            status["currentStepIndex"].clone(),
            status["stepCount"].clone()
        ),
        (json!(1), json!(3))
    );
    // During the pause, nothing else moves.
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(
            nodes_on(&client, "agent:v2").await,
            std::slice::from_ref(&chosen)
        );
    }
    until_agent_phase(&client, "successful", 300, "the rest after the pause").await;
    assert_eq!(nodes_on(&client, "agent:v2").await, nodes);
    assert_eq!(
        replica.observer.stats().pod_deletions(),
        6,
        "one deletion per old pod, no more"
    );
    replica.stop().await;
}

#[tokio::test(start_paused = true)]
async fn later_steps_go_zone_by_zone_never_two_zones_at_once() {
    let sim = sim(9);
    let client = sim.client();
    let nodes = node_names(&client).await;
    let zone_of: BTreeMap<String, String> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.clone(), ["zone-a", "zone-b", "zone-c"][i % 3].to_owned()))
        .collect();
    for (node, zone) in &zone_of {
        label_node(&client, node, "topology.kubernetes.io/zone", zone).await;
    }
    let replica = Replica::start(&sim, None);
    let mut wide = nodes_step("100%");
    wide.max_unavailable = Some("100%".into());
    let mut spec = pods_spec("v1", None, vec![nodes_step("1"), wide]);
    spec.strategy.topology_key = Some("topology.kubernetes.io/zone".into());
    create_cds(&client, "agent", spec).await;
    until_agent_phase(&client, "successful", 300, "v1 installed").await;

    set_version(&client, "agent", "v2").await;
    let mut disrupted_at_once = 0;
    let mut zone_order: Vec<String> = Vec::new();
    for _ in 0..600 {
        let pods = pods_by_node(&client).await;
        let disrupted: std::collections::BTreeSet<&String> = zone_of
            .iter()
            .filter(|(node, _)| !pods.get(*node).is_some_and(|(_, ready)| *ready))
            .map(|(_, zone)| zone)
            .collect();
        let step = status_field(&client, "agent").await["currentStepIndex"].clone();
        if step == json!(1) {
            disrupted_at_once = disrupted_at_once.max(disrupted.len());
        }
        for zone in disrupted {
            if zone_order.last() != Some(zone) && !zone_order.contains(zone) {
                zone_order.push(zone.clone());
            }
        }
        if phase_is(&client, "agent", "successful").await
            && nodes_on(&client, "agent:v2").await.len() == 9
        {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert_eq!(nodes_on(&client, "agent:v2").await.len(), 9, "rolled out");
    assert_eq!(disrupted_at_once, 1, "one zone at a time after the canary");
    assert_eq!(
        zone_order,
        ["zone-a", "zone-b", "zone-c"],
        "the canary's zone first, then in order"
    );
    replica.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_not_ready_node_is_deferred_the_rollout_succeeds_and_the_node_is_updated_when_back() {
    let sim = sim(5);
    let client = sim.client();
    let nodes = node_names(&client).await;
    let replica = Replica::start(&sim, None);
    create_cds(&client, "agent", pods_spec("v1", None, vec![])).await;
    until_agent_phase(&client, "successful", 300, "v1 installed").await;
    let sick = nodes[2].clone();
    sim.cluster.set_node_ready(&sick, false).unwrap();

    set_version(&client, "agent", "v2").await;
    eventually(
        Duration::from_secs(600),
        "successful with a deferred node",
        || async {
            phase_is(&client, "agent", "successful").await
                && nodes_on(&client, "agent:v2").await.len() == 4
        },
    )
    .await;
    let status = status_field(&client, "agent").await;
    assert_eq!(
        status["deferredNodes"],
        json!([{"name": sick, "reason": "NotReady"}]),
        "{status}"
    );
    assert_eq!(status["deferredNodeCount"], json!(1));
    assert!(!nodes_on(&client, "agent:v2").await.contains(&sick));

    sim.cluster.set_node_ready(&sick, true).unwrap();
    eventually(Duration::from_secs(300), "the node caught up", || async {
        nodes_on(&client, "agent:v2").await.len() == 5
    })
    .await;
    assert!(phase_is(&client, "agent", "successful").await);
    replica.stop().await;
}

/// A node removed right after the controller deleted its pod is gone, not being replaced:
/// the rollout comes to rest without deferring it (soak seed 24005538, where the status at
/// rest listed such a node as deferred, `node gone`, until the controller's five-minute memory
/// of its deletions forgot it).
#[tokio::test(start_paused = true)]
async fn a_node_removed_after_its_pod_was_deleted_is_not_deferred() {
    let (sim, client, replica, nodes) =
        installed_with_a_chosen_canary(4, 1, vec![nodes_step("1")]).await;
    let chosen = nodes[1].clone();
    let deletions = replica.observer.stats().pod_deletions();
    let started = tokio::time::Instant::now();

    set_version(&client, "agent", "v2").await;
    eventually(
        Duration::from_secs(120),
        "the canary's old pod deleted",
        || async { replica.observer.stats().pod_deletions() > deletions },
    )
    .await;
    sim.cluster.remove_node(&chosen).unwrap();
    let others: Vec<String> = nodes.iter().filter(|n| **n != chosen).cloned().collect();
    eventually(
        Duration::from_secs(240),
        "v2 on the other nodes, at rest",
        || async {
            phase_is(&client, "agent", "successful").await
                && nodes_on(&client, "agent:v2").await == others
        },
    )
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(300),
        "at rest while the deletion is still remembered"
    );
    let status = status_field(&client, "agent").await;
    assert_eq!(status.get("deferredNodes"), None, "{status}");
    assert_eq!(status.get("deferredNodeCount"), None, "{status}");
    replica.stop().await;
}

/// `agent`'s target and template set to a v2 whose pods crash-loop.
async fn set_crash_looping_v2(client: &Client) {
    let broken = pods_spec("v2", Some("crashloop"), vec![]);
    Api::<canary_kube_adapter::crd::CanaryDaemonSet>::namespaced(client.clone(), NS)
        .patch(
            "agent",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"target": broken.target, "template": broken.template}})),
        )
        .await
        .unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_crash_looping_canary_stops_all_deletions() {
    let (_sim, client, replica) = started(6);
    create_cds(&client, "agent", pods_spec("v1", None, vec![])).await;
    until_agent_phase(&client, "successful", 300, "v1 installed").await;
    set_crash_looping_v2(&client).await;
    until_agent_phase(&client, "failed", 600, "failed").await;
    let status = status_field(&client, "agent").await;
    assert_eq!(status["reason"], "CanaryCrashLooping");
    assert_eq!(status["failedNodeCount"], json!(1));
    let deleted = replica.observer.stats().pod_deletions();
    assert_eq!(deleted, 1, "only the canary's old pod");
    tokio::time::sleep(Duration::from_secs(300)).await;
    assert_eq!(replica.observer.stats().pod_deletions(), deleted);
    assert_eq!(nodes_on(&client, "agent:v1").await.len(), 5);
    replica.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_pause_without_duration_holds_until_promoted_once() {
    let (_sim, client, replica) = started(4);
    create_cds(
        &client,
        "agent",
        pods_spec("v1", None, vec![nodes_step("1"), pause(None)]),
    )
    .await;
    until_agent_phase(&client, "successful", 300, "v1 installed").await;
    set_version(&client, "agent", "v2").await;
    until_agent_phase(&client, "paused", 120, "paused").await;
    tokio::time::sleep(Duration::from_secs(3_600)).await;
    assert!(
        phase_is(&client, "agent", "paused").await,
        "an hour later, still held"
    );
    assert_eq!(nodes_on(&client, "agent:v2").await.len(), 1);

    // `kubectl annotate cds agent canary.daemonset.dev/promote=1`
    let api: Api<canary_kube_adapter::crd::CanaryDaemonSet> = Api::namespaced(client.clone(), NS);
    api.patch(
        "agent",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {PROMOTE_ANNOTATION: "1"}}})),
    )
    .await
    .unwrap();
    eventually(Duration::from_secs(300), "promoted to the end", || async {
        phase_is(&client, "agent", "successful").await
            && nodes_on(&client, "agent:v2").await.len() == 4
    })
    .await;
    assert_eq!(status_field(&client, "agent").await["promotion"], "1");

    // The same mark does not promote the next rollout's pause.
    set_version(&client, "agent", "v3").await;
    until_agent_phase(&client, "paused", 120, "paused again").await;
    tokio::time::sleep(Duration::from_secs(120)).await;
    assert!(phase_is(&client, "agent", "paused").await);
    replica.stop().await;
}

/// `agent` installed at v1 on `nodes` nodes, one replica running, with the steps
/// `[{nodes: 1}, {nodes: 100%, maxUnavailable: wide}]`.
/// No pod is deleted until a stored status names the step it is deleted in: while every
/// status write is refused, the passes of a new revision retry and delete nothing, however
/// many (soak seed 28001322: the retry took its own refused write-ahead, remembered, for a
/// stored one, and deleted a canary behind a status still `failed` for the old revision).
/// Once the writes answer again, the rollout goes on.
#[tokio::test(start_paused = true)]
async fn no_pod_is_deleted_before_a_stored_status_names_its_step() {
    let nodes = 6;
    let (sim, client, replica) = installed_with_a_wide_step(nodes, "2").await;
    let deletes_before = sim.requests().count(Verb::Delete, "pods");
    sim.faults().add(FaultRule::new(
        Some(Verb::Patch),
        Some("canarydaemonsets/status"),
        FaultAction::internal_error(),
    ));
    set_version(&client, "agent", "v2").await;
    tokio::time::sleep(Duration::from_secs(120)).await;
    assert!(
        sim.requests().count(Verb::Patch, "canarydaemonsets/status") > 2,
        "the passes retried their status write"
    );
    assert_eq!(
        sim.requests().count(Verb::Delete, "pods"),
        deletes_before,
        "a pod deleted while no status named the step"
    );
    sim.faults().clear();
    until_v2_everywhere(&client, nodes).await;
    replica.stop().await;
}

/// Waits up to 900 virtual seconds for `agent` to be `successful` with v2 on all `nodes`.
async fn until_v2_everywhere(client: &Client, nodes: u32) {
    eventually(Duration::from_secs(900), "v2 everywhere", || async {
        phase_is(client, "agent", "successful").await
            && nodes_on(client, "agent:v2").await.len() == nodes as usize
    })
    .await;
}

async fn installed_with_a_wide_step(nodes: u32, wide: &str) -> (Env, Client, Replica) {
    let (sim, client, replica) = started(nodes);
    let wide = canary_kube_adapter::crd::StepSpec {
        nodes: Some("100%".into()),
        max_unavailable: Some(wide.into()),
        ..Default::default()
    };
    create_cds(
        &client,
        "agent",
        pods_spec("v1", None, vec![nodes_step("1"), wide]),
    )
    .await;
    until_agent_phase(&client, "successful", 300, "v1 installed").await;
    (sim, client, replica)
}

/// A Pods-driver pass reads every pod, so the pod events of a rollout are taken a short while
/// at a time, not one pass each: on 100 nodes with 25 pods replaced at once, the passes stay
/// within five per virtual second (`FACTS_WAIT`, 200 ms) and the few the steps and the
/// requeues add. One pass per pod event made about three times as many (soak seed 25001174:
/// 3,000 passes a minute on 475 nodes, each writing the status).
#[tokio::test(start_paused = true)]
async fn a_rollout_takes_its_pod_events_a_while_at_a_time() {
    let nodes = 100;
    let (_sim, client, replica) = installed_with_a_wide_step(nodes, "25%").await;
    let passes_before = replica.observer.stats().reconciles();
    let deletions_before = replica.observer.stats().pod_deletions();
    let started = tokio::time::Instant::now();
    set_version(&client, "agent", "v2").await;
    until_v2_everywhere(&client, nodes).await;
    let seconds = started.elapsed().as_secs_f64();
    let passes = replica.observer.stats().reconciles() - passes_before;
    eprintln!("{nodes} nodes: {passes} passes in {seconds:.1} virtual seconds");
    assert!(
        (passes as f64) <= 5.0 * seconds + 30.0,
        "{passes} passes in {seconds:.1} s"
    );
    assert_eq!(
        replica.observer.stats().pod_deletions() - deletions_before,
        u64::from(nodes),
        "one deletion per old pod"
    );
    replica.stop().await;
}

/// A pod whose deletion the API server refused because the cache's copy was outdated is not
/// asked again until the cache holds a newer copy, and the refusal does not start the next
/// pass at once (soak seed 26008792: with the pods watch down, every pass asked again for every
/// pod, and each refusal started the next pass: 3,356 DELETEs in a virtual minute on 182
/// nodes). Once the watch is back, the rollout goes on.
#[tokio::test(start_paused = true)]
async fn a_deletion_refused_from_an_outdated_copy_waits_for_the_watch() {
    let nodes = 4;
    let (sim, client, replica) = installed_with_a_wide_step(nodes, "100%").await;
    // The pods watch down from its next reconnection: every list and watch of pods refused.
    for verb in [Verb::List, Verb::Watch] {
        sim.faults().add(FaultRule::new(
            Some(verb),
            Some("pods"),
            FaultAction::too_many_requests(0),
        ));
    }
    // The open watch ends at its timeout (290 s): from then on the cache keeps its copies.
    tokio::time::sleep(Duration::from_secs(360)).await;
    // Every pod changes behind the cache's back (in the store: the test's own lists would
    // be refused too).
    let store = sim.store();
    for mut pod in store.list::<Pod>(Some(NS)) {
        pod.labels_mut().insert("touched".into(), "yes".into());
        store.update(&pod).unwrap();
    }
    let deletes_before = sim.requests().count(Verb::Delete, "pods");
    set_version(&client, "agent", "v2").await;
    tokio::time::sleep(Duration::from_secs(120)).await;
    assert_eq!(
        sim.requests().count(Verb::Delete, "pods") - deletes_before,
        1,
        "the canary's pod asked once, refused as changed, not asked again from the same copy"
    );
    sim.faults().clear();
    until_v2_everywhere(&client, nodes).await;
    replica.stop().await;
}

/// From now on every pod deletion is answered `latency` late.
fn slow_deletions(sim: &Env, latency: Duration) {
    sim.faults().add(canary_sim::FaultRule::new(
        Some(canary_sim::Verb::Delete),
        Some("pods"),
        canary_sim::FaultAction::Latency(latency),
    ));
}

/// A pass that deletes in a step the stored status does not name yet writes the step first:
/// while its (here slow) deletions run, a reader, or a leader taking over from a pass cut
/// short, already sees the step whose budget covers the pods going down.
#[tokio::test(start_paused = true)]
async fn the_status_names_the_step_before_its_deletions_begin() {
    let (sim, client, replica) = installed_with_a_wide_step(8, "4").await;
    set_version(&client, "agent", "v2").await;
    eventually(Duration::from_secs(300), "the canary updated", || async {
        nodes_on(&client, "agent:v2").await.len() == 1
    })
    .await;
    slow_deletions(&sim, Duration::from_secs(60));
    let deletions = replica.observer.stats().pod_deletions();
    eventually(
        Duration::from_secs(300),
        "the second step began",
        || async { status_field(&client, "agent").await["currentStepIndex"] == json!(1) },
    )
    .await;
    assert_eq!(
        replica.observer.stats().pod_deletions(),
        deletions,
        "the step was recorded before the first of its deletions ended"
    );
    eventually(Duration::from_secs(900), "v2 everywhere", || async {
        nodes_on(&client, "agent:v2").await.len() == 8
    })
    .await;
    replica.stop().await;
}

/// An undo asked while the rollout rests `rolledBack` is a rollout starting: the status the
/// pass that takes the mark writes says `started`, not `successful` at the revision it leaves
/// (soak seed 21001978, where that revision's pods crash-looped behind a cordoned node).
#[tokio::test(start_paused = true)]
async fn an_undo_from_rolled_back_is_reported_as_a_start() {
    let (sim, client, replica) = started(3);
    let mut spec = pods_spec("v1", None, vec![nodes_step("1")]);
    spec.strategy.on_failure = canary_state_machine::OnFailure::Rollback;
    create_cds(&client, "agent", spec).await;
    until_agent_phase(&client, "successful", 300, "v1 installed").await;
    set_crash_looping_v2(&client).await;
    until_agent_phase(&client, "rolledBack", 600, "v2 rolled back").await;

    let mut stored = sim.store().subscribe();
    annotate(
        &client,
        canary_kube_adapter::crd::UNDO_ANNOTATION,
        "previous@1",
    )
    .await;
    let mut phases = Vec::new();
    while phases.last().is_none_or(|p: &String| p == "rolledBack") {
        let event = tokio::time::timeout(Duration::from_secs(120), stored.recv())
            .await
            .expect("a status within two minutes")
            .unwrap();
        if event.key.plural == "canarydaemonsets"
            && event.name == "agent"
            && let Some(phase) = event.object["status"]["phase"].as_str()
        {
            phases.push(phase.to_owned());
        }
    }
    assert_eq!(
        phases.last().map(String::as_str),
        Some("started"),
        "{phases:?}"
    );
    replica.stop().await;
}

/// A pass deletes for at most a few seconds, then the next one decides the rest: a hold asked
/// while a wide step's deletions crawl (two seconds an answer here) stops them within that
/// time, not after the whole step (soak seeds 21002206 and 21002316).
#[tokio::test(start_paused = true)]
async fn a_hold_stops_a_slow_batch_of_deletions_within_seconds() {
    let (sim, client, replica) = installed_with_a_wide_step(12, "12").await;
    slow_deletions(&sim, Duration::from_secs(2));
    set_version(&client, "agent", "v2").await;
    eventually(Duration::from_secs(300), "the wide step began", || async {
        status_field(&client, "agent").await["currentStepIndex"] == json!(1)
    })
    .await;
    annotate(&client, canary_kube_adapter::crd::PAUSE_ANNOTATION, "true").await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let after_the_hold = replica.observer.stats().pod_deletions();
    tokio::time::sleep(Duration::from_secs(120)).await;
    assert_eq!(
        replica.observer.stats().pod_deletions(),
        after_the_hold,
        "no deletion 10 s after the hold"
    );
    assert!(
        after_the_hold < 12,
        "{after_the_hold} deletions: the whole step went"
    );
    replica.stop().await;
}

/// A DaemonSet as a Helm chart installs it: no owner, `OnDelete`.
fn helm_daemon_set(image: &str, update: &str) -> DaemonSet {
    serde_json::from_value(json!({
        "metadata": {"name": "cilium", "namespace": NS,
                     "labels": {"app.kubernetes.io/managed-by": "Helm"}},
        "spec": {
            "selector": {"matchLabels": {"k8s-app": "cilium"}},
            "updateStrategy": {"type": update},
            "template": {
                "metadata": {"labels": {"k8s-app": "cilium"}},
                "spec": {"containers": [{"name": "agent", "image": image}]}
            }
        }
    }))
    .unwrap()
}

fn workload_spec() -> CanaryDaemonSetSpec {
    let mut spec = pods_spec("1.16.0", None, vec![]);
    spec.template = None;
    spec.workload_ref = Some(WorkloadRef {
        name: "cilium".into(),
    });
    spec
}

async fn cilium_images(client: &Client) -> Vec<String> {
    let mut images: Vec<String> = live_pods(client, "k8s-app=cilium")
        .await
        .into_iter()
        .filter_map(|p| p.spec?.containers.first()?.image.clone())
        .collect();
    images.sort();
    images
}

#[tokio::test(start_paused = true)]
async fn a_workload_ref_follows_a_template_changed_by_its_owner_and_is_never_written() {
    let sim = sim(5);
    let client = sim.client();
    let ds_api: Api<DaemonSet> = Api::namespaced(client.clone(), NS);
    ds_api
        .create(
            &PostParams::default(),
            &helm_daemon_set("cilium:1.15", "OnDelete"),
        )
        .await
        .unwrap();
    eventually(Duration::from_secs(120), "cilium 1.15 running", || async {
        cilium_images(&client).await.len() == 5
    })
    .await;
    let mut reports = {
        let replica_reports = Replica::start(&sim, None);
        (replica_reports.observer.reports(), replica_reports)
    };
    create_cds(&client, "cilium", workload_spec()).await;
    eventually(Duration::from_secs(120), "adopted at rest", || {
        phase_is(&client, "cilium", "successful")
    })
    .await;

    // `helm upgrade`, as far as the API server can tell.
    ds_api
        .patch(
            "cilium",
            &PatchParams::apply("helm").force(),
            &Patch::Apply(helm_daemon_set("cilium:1.16", "OnDelete")),
        )
        .await
        .unwrap();
    eventually(
        Duration::from_secs(600),
        "rolled out by the controller",
        || async {
            phase_is(&client, "cilium", "successful").await
                && cilium_images(&client).await == vec!["cilium:1.16".to_owned(); 5]
        },
    )
    .await;
    let (reports, replica) = (&mut reports.0, reports.1);
    let mut writes = 0;
    while let Some(report) = reports.try_recv() {
        if matches!(report, Report::DaemonSetWrite { .. }) {
            writes += 1;
        }
    }
    assert_eq!(writes, 0, "the referenced DaemonSet is never written");
    assert_eq!(replica.observer.stats().pod_deletions(), 5);
    let ds = ds_api.get("cilium").await.unwrap();
    assert!(ds.metadata.owner_references.is_none());
    replica.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_workload_ref_that_is_not_on_delete_gets_a_condition_and_nothing_else() {
    let sim = sim(3);
    let client = sim.client();
    Api::<DaemonSet>::namespaced(client.clone(), NS)
        .create(
            &PostParams::default(),
            &helm_daemon_set("cilium:1.15", "RollingUpdate"),
        )
        .await
        .unwrap();
    let replica = Replica::start(&sim, None);
    create_cds(&client, "cilium", workload_spec()).await;
    eventually(Duration::from_secs(120), "refused", || {
        phase_is(&client, "cilium", "failed")
    })
    .await;
    let status = status_field(&client, "cilium").await;
    assert_eq!(status["reason"], "InvalidSpec");
    assert!(
        status["message"]
            .as_str()
            .unwrap_or_default()
            .contains("needs OnDelete"),
        "{status}"
    );
    assert_eq!(replica.observer.stats().pod_deletions(), 0);
    assert_eq!(replica.observer.stats().total_daemon_set_writes(), 0);
    replica.stop().await;
}

/// Issue 52, item 6: a `workloadRef` to a DaemonSet that does not exist yet (a GitOps sync wave
/// that applies the CanaryDaemonSet first) waits without failing: no phase (`pending`, so the
/// failure alert stays quiet), Reconciling with reason `WaitingForDaemonSet` and the message;
/// the rollout begins once the DaemonSet appears, and waits again when it is deleted.
#[tokio::test(start_paused = true)]
async fn a_workload_ref_to_a_missing_daemon_set_waits_and_begins_when_it_appears() {
    let sim = sim(3);
    let client = sim.client();
    let replica = Replica::start(&sim, None);
    create_cds(&client, "cilium", workload_spec()).await;
    eventually(
        Duration::from_secs(60),
        "waiting for the DaemonSet",
        || async {
            status_field(&client, "cilium").await["conditions"]
                .as_array()
                .is_some_and(|c| {
                    c.iter().any(|c| {
                        c["type"] == "Reconciling"
                            && c["status"] == "True"
                            && c["reason"] == "WaitingForDaemonSet"
                    })
                })
        },
    )
    .await;
    let status = status_field(&client, "cilium").await;
    assert!(
        status["phase"].is_null(),
        "no phase while waiting: {status}"
    );
    assert!(status["reason"].is_null(), "{status}");
    assert!(
        status["message"]
            .as_str()
            .unwrap_or_default()
            .contains("does not exist"),
        "{status}"
    );
    let stalled = status["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Stalled").cloned());
    assert_eq!(stalled.map(|c| c["status"].clone()), Some(json!("False")));

    let ds_api: Api<DaemonSet> = Api::namespaced(client.clone(), NS);
    ds_api
        .create(
            &PostParams::default(),
            &helm_daemon_set("cilium:1.16", "OnDelete"),
        )
        .await
        .unwrap();
    eventually(
        Duration::from_secs(300),
        "at rest once the DaemonSet exists",
        || phase_is(&client, "cilium", "successful"),
    )
    .await;
    let status = status_field(&client, "cilium").await;
    assert!(
        status["conditions"]
            .as_array()
            .is_some_and(|c| c.iter().all(|c| c["reason"] != "WaitingForDaemonSet")),
        "the waiting conditions are gone: {status}"
    );

    ds_api
        .delete("cilium", &DeleteParams::default())
        .await
        .unwrap();
    eventually(Duration::from_secs(120), "waiting again", || async {
        status_field(&client, "cilium").await["phase"].is_null()
    })
    .await;
    assert_eq!(replica.observer.stats().total_daemon_set_writes(), 0);
    replica.stop().await;
}
