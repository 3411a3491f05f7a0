//! Image pre-pull (issue 50) against canary-sim, whose kubelet models pulls (20 s per image
//! here, cached per node): a pause step of the Pods driver and the canary soak of the
//! MaxUnavailable driver pre-pull the new image on the nodes replaced next, so their new pods
//! start without a pull (`Pulled: ... already present on machine`); never more pre-pull pods
//! pulling than `maxConcurrent`, none left once the rollout is over.

use std::collections::BTreeSet;
use std::time::Duration;

use canary_kube_adapter::crd::{CanaryDaemonSetSpec, PrePullSpec};
use canary_kube_adapter::reconcile::PRE_PULL_LABEL;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::support::*;

const PULL: &str = "sim.canary.daemonset.dev/pull";

/// `spec` with a 20 s pull of every image and pre-pull on, `max_concurrent` at once.
fn pulling(mut spec: CanaryDaemonSetSpec, max_concurrent: u32) -> CanaryDaemonSetSpec {
    if let Some(template) = spec.template.as_mut() {
        template
            .spec
            .template
            .metadata
            .get_or_insert_with(Default::default)
            .annotations
            .get_or_insert_with(Default::default)
            .insert(PULL.to_owned(), "20s".to_owned());
    }
    spec.pre_pull = Some(PrePullSpec {
        enabled: None,
        max_concurrent: Some(max_concurrent),
    });
    spec
}

async fn pre_pull_pods(client: &Client) -> Vec<Pod> {
    Api::<Pod>::namespaced(client.clone(), NS)
        .list(&ListParams::default().labels(PRE_PULL_LABEL))
        .await
        .unwrap()
        .items
}

/// The `Pulled` event messages of pod `name`.
async fn pulled(client: &Client, name: &str) -> Vec<String> {
    events_with_reason(client, "Pulled")
        .await
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .filter_map(|e| e.note)
        .collect()
}

/// Polls until `agent` is `successful` at v2, asserting at every poll that at most
/// `max_concurrent` pre-pull pods pull at once; returns the nodes that ever had one.
async fn roll_v2_watching_pre_pulls(client: &Client, max_concurrent: usize) -> BTreeSet<String> {
    set_version(client, "agent", "v2").await;
    let mut pre_pulled = BTreeSet::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(900);
    loop {
        let pods = pre_pull_pods(client).await;
        let pulling = pods
            .iter()
            .filter(|pod| canary_testkit::pulling(pod))
            .count();
        assert!(
            pulling <= max_concurrent,
            "{pulling} pre-pull pods pulling at once"
        );
        for pod in &pods {
            let node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
            pre_pulled.extend(node);
            assert!(
                pod.labels().get("app").is_none(),
                "a pre-pull pod carries none of the agent's labels"
            );
        }
        if phase_is(client, "agent", "successful").await
            && nodes_on(client, "agent:v1").await.is_empty()
        {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "rollout not over");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    eventually(Duration::from_secs(30), "no pre-pull pod left", || async {
        pre_pull_pods(client).await.is_empty()
    })
    .await;
    pre_pulled
}

/// The v2 pods by node, and whether each started without a pull.
async fn started_without_pull(client: &Client) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    for pod in live_pods(client, "app=agent").await {
        let node = pod.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap();
        let messages = pulled(client, &pod.name_any()).await;
        let present = messages
            .iter()
            .any(|m| m.contains("already present on machine"));
        out.push((node, present));
    }
    out.sort();
    out
}

#[tokio::test(start_paused = true)]
async fn a_pause_pre_pulls_the_next_step_so_its_pods_start_without_a_pull() {
    let (_sim, client, replica) = started(5);
    let spec = pulling(
        pods_spec("v1", None, vec![nodes_step("1"), pause(Some("60s"))]),
        2,
    );
    create_cds(&client, "agent", spec).await;
    until_agent_phase(&client, "successful", 300, "v1 installed").await;
    assert!(
        pre_pull_pods(&client).await.is_empty(),
        "a first install pre-pulls nothing"
    );

    let pre_pulled = roll_v2_watching_pre_pulls(&client, 2).await;
    let canary = get_cds(&client, "agent").await.status.unwrap().canary_nodes;
    assert_eq!(canary.len(), 1, "{canary:?}");
    let started = started_without_pull(&client).await;
    assert_eq!(started.len(), 5);
    for (node, present) in &started {
        // The canary pulls (nothing ran before it); the 4 nodes of the last step were
        // pre-pulled in the 60 s pause, 2 at a time, 20 s each.
        assert_eq!(*present, !canary.contains(node), "{node}: {started:?}");
    }
    let expected: BTreeSet<String> = started
        .iter()
        .map(|(node, _)| node.clone())
        .filter(|node| !canary.contains(node))
        .collect();
    assert_eq!(pre_pulled, expected, "exactly the next step's nodes");
    replica.stop().await;
}

#[tokio::test(start_paused = true)]
async fn the_canary_soak_pre_pulls_the_widens_first_batch() {
    let (_sim, client, replica) = started(11);
    create_cds(&client, "agent", pulling(spec("v1", None), 1)).await;
    until_agent_phase(&client, "successful", 300, "v1 installed").await;

    let pre_pulled = roll_v2_watching_pre_pulls(&client, 1).await;
    let started = started_without_pull(&client).await;
    let without: Vec<&String> = started
        .iter()
        .filter(|(_, present)| *present)
        .map(|(node, _)| node)
        .collect();
    // 10% of 11 is 2 nodes, pulled one at a time within the 30 s soak: 20 s + 20 s is more,
    // so at least the first had its image before the widen; none of them is the canary.
    assert_eq!(pre_pulled.len(), 2, "{pre_pulled:?}");
    assert!(!without.is_empty(), "{started:?}");
    assert!(
        without.iter().all(|node| pre_pulled.contains(*node)),
        "only pre-pulled nodes skip the pull: {started:?}"
    );
    replica.stop().await;
}

#[test]
fn pre_pull_is_off_unless_asked() {
    let value = serde_json::to_value(spec("v1", None)).unwrap();
    assert!(value.get("prePull").is_none());
    let asked = pulling(spec("v1", None), 3);
    assert_eq!(
        serde_json::to_value(&asked).unwrap()["prePull"],
        json!({"maxConcurrent": 3})
    );
}

/// Without `pods: create` (the API server answers 403, as RBAC does for the install's default
/// Role), the rollout goes on without pre-pull, and says so where a user looks: the
/// `PrePullBlocked` condition (reason `Forbidden`, the server's words cut to the usual bound)
/// and one Warning event, not one per refused pass. Once pods are created again (the grant
/// given), the condition turns false.
#[tokio::test(start_paused = true)]
async fn a_pre_pull_refused_by_rbac_is_a_condition_and_one_warning_and_the_rollout_goes_on() {
    use canary_sim::{FaultAction, FaultRule, Verb};
    use k8s_openapi::api::events::v1::Event as EventV1;

    let nodes = 5;
    let (sim, client, replica) = started(nodes);
    create_cds(&client, "agent", pulling(spec("v1", None), 1)).await;
    until_agent_phase(&client, "successful", 300, "v1 installed").await;
    sim.faults().add(FaultRule::new(
        Some(Verb::Create),
        Some("pods"),
        FaultAction::Error {
            code: 403,
            reason: "Forbidden".into(),
            retry_after_seconds: None,
        },
    ));
    let creates_before = sim.requests().count(Verb::Create, "pods");
    set_version(&client, "agent", "v2").await;
    until_rolled_out(&client, "v2", nodes, 1800, "the upgrade without pre-pull").await;
    assert!(pre_pull_pods(&client).await.is_empty());
    let refused = sim.requests().count(Verb::Create, "pods") - creates_before;
    assert!(refused >= 2, "refused on several passes: {refused}");
    let condition = |status: &canary_kube_adapter::crd::CanaryDaemonSetStatus| {
        status
            .conditions
            .iter()
            .find(|c| c.type_ == "PrePullBlocked")
            .cloned()
    };
    let status = get_cds(&client, "agent").await.status.unwrap();
    let blocked = condition(&status).expect("a PrePullBlocked condition");
    assert_eq!(
        (blocked.status.as_str(), blocked.reason.as_str()),
        ("True", "Forbidden")
    );
    assert!(blocked.message.contains("403"), "{}", blocked.message);
    assert!(
        blocked.message.contains("pods: create"),
        "{}",
        blocked.message
    );
    assert!(
        blocked.message.len() <= canary_state_machine::OUTSIDE_TEXT_BYTES,
        "{}",
        blocked.message
    );
    let warnings: Vec<EventV1> = Api::<EventV1>::namespaced(client.clone(), NS)
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("PrePullBlocked"))
        .collect();
    assert_eq!(warnings.len(), 1, "one Warning, not one per pass");
    assert_eq!(warnings[0].type_.as_deref(), Some("Warning"));
    assert_eq!(
        warnings[0].series.as_ref().map(|s| s.count),
        None,
        "published once, not repeated into a series"
    );

    // The grant given: the next rollout pre-pulls, and the condition turns false.
    sim.faults().clear();
    set_version(&client, "agent", "v3").await;
    until_rolled_out(&client, "v3", nodes, 1800, "the upgrade with pre-pull").await;
    let status = get_cds(&client, "agent").await.status.unwrap();
    let allowed = condition(&status).expect("the condition kept, false");
    assert_eq!(
        (allowed.status.as_str(), allowed.reason.as_str()),
        ("False", "PodsCreated")
    );
    replica.stop().await;
}
