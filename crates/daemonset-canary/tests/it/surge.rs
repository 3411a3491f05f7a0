//! Availability during a rollout (issue 50), the controller as a user runs it against `sim
//! serve`: a plain rollout leaves each node without its agent for the pod's restart, measured
//! in `status.agentDowntime`; with `spec.strategy.surge` no node is without a ready agent pod at
//! any poll of the rollout (every 200 ms), the DaemonSet is written `maxUnavailable: 0` with the
//! canary's `maxSurge`, and no downtime is measured; a `hostPort` is refused as `InvalidSpec`.

use crate::support;
use support::rollout::{create, current_status, ready_since, runs, set_spec, until_rolled_out};

use canary_kube_adapter::CanaryDaemonSet;
use canary_kube_adapter::crd::CanaryDaemonSetStatus;
use canary_state_machine::Compatibility;
use daemonset_canary::demo::scenario::{NAME, NAMESPACE, manifest};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::Api;
use kube::api::ListParams;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

const NODES: usize = 3;

/// The manifest of `version`, each pod pulling its image for 2 s, with surge or not.
fn spec(version: &str, surge: bool) -> serde_json::Value {
    let mut object = manifest(Compatibility::Fixed, version, "healthy");
    object["spec"]["strategy"]["surge"] = serde_json::json!(surge);
    object["spec"]["template"]["spec"]["template"]["metadata"]["annotations"]["sim.canary.daemonset.dev/pull"] =
        serde_json::json!("2s");
    object
}

/// The nodes with a ready, not terminating pod of the DaemonSet.
async fn served_nodes(pods: &Api<Pod>) -> BTreeSet<String> {
    pods.list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|pod| pod.metadata.deletion_timestamp.is_none())
        .filter(|pod| ready_since(pod).is_some())
        .filter_map(|pod| pod.spec.and_then(|s| s.node_name))
        .collect()
}

/// Rolls out `version` and polls every 200 ms until it is `successful` on every node; returns
/// the status and, per poll, how many nodes had no ready agent pod; meanwhile the most
/// `maxSurge` and the least `maxUnavailable` seen on the DaemonSet.
async fn roll_out(
    client: &kube::Client,
    version: &str,
    surge: bool,
) -> (CanaryDaemonSetStatus, Vec<usize>, (i32, i32)) {
    let api: Api<CanaryDaemonSet> = Api::namespaced(client.clone(), NAMESPACE);
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let daemon_sets: Api<DaemonSet> = Api::namespaced(client.clone(), NAMESPACE);
    let wanted = spec(version, surge);
    let generation = match api.get_opt(NAME).await.unwrap() {
        None => create(&api, wanted).await,
        Some(_) => set_spec(&api, &wanted).await,
    };
    let mut unserved = Vec::new();
    let (mut most_surge, mut least_unavailable) = (0, i32::MAX);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        unserved.push(NODES.saturating_sub(served_nodes(&pods).await.len()));
        if let Some(rolling) = daemon_sets
            .get_opt(NAME)
            .await
            .unwrap()
            .and_then(|ds| ds.spec?.update_strategy?.rolling_update)
        {
            // Counts only: a percentage (the widened "10%") is never 0 pods nor one surge.
            let int = |v: Option<IntOrString>| match v {
                Some(IntOrString::Int(n)) => Some(n),
                _ => None,
            };
            if let Some(surge) = int(rolling.max_surge) {
                most_surge = most_surge.max(surge);
            }
            if let Some(unavailable) = int(rolling.max_unavailable) {
                least_unavailable = least_unavailable.min(unavailable);
            }
        }
        let status = current_status(&api).await;
        if status.observed_generation >= generation
            && status.phase_name() == Some("successful")
            && status.target_version.as_deref() == Some(version)
            && status.updated_ready as usize == NODES
        {
            return (status, unserved, (most_surge, least_unavailable));
        }
        assert!(status.phase_name() != Some("failed"), "{status:?}");
        assert!(Instant::now() < deadline, "not rolled out: {status:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn surge_keeps_a_ready_agent_on_every_node_and_plain_downtime_is_measured() {
    let (_sim, client, _run) = support::controller_on_sim("surge", &["--nodes", "3"], &[]).await;
    let _ = roll_out(&client, "v1", false).await;

    // Plain: every node goes without its agent for the new pod's pull and start.
    let (status, unserved, (_, least_unavailable)) = roll_out(&client, "v2", false).await;
    assert!(unserved.iter().any(|n| *n > 0), "a plain rollout has a gap");
    assert_eq!(least_unavailable, 1, "the canary's maxUnavailable");
    let downtime = status.agent_downtime.expect("measured");
    assert_eq!((downtime.version.as_str(), downtime.gaps), ("v2", 3));
    assert!(
        downtime.node_seconds >= 3 * 2,
        "{downtime:?}: each node paid its pull"
    );
    assert!(downtime.worst_node.is_some() && downtime.worst_seconds >= Some(2));

    // Surge: never a node without a ready agent, and nothing measured.
    let (status, unserved, (most_surge, least_unavailable)) = roll_out(&client, "v3", true).await;
    assert!(
        unserved.len() > 5,
        "polled through the rollout: {unserved:?}"
    );
    assert!(
        unserved.iter().all(|n| *n == 0),
        "a node without its agent during a surge rollout: {unserved:?}"
    );
    assert_eq!(
        (most_surge, least_unavailable),
        (1, 0),
        "one surged pod, none unavailable"
    );
    assert!(
        status
            .agent_downtime
            .as_ref()
            .is_none_or(|d| d.version != "v3" || d.node_seconds == 0),
        "{:?}",
        status.agent_downtime
    );

    // A hostPort two pods of a node would share: InvalidSpec, condition and event.
    let api: Api<CanaryDaemonSet> = Api::namespaced(client.clone(), NAMESPACE);
    let mut ported = spec("v4", true);
    ported["spec"]["template"]["spec"]["template"]["spec"]["containers"][0]["ports"] =
        serde_json::json!([{"containerPort": 9100, "hostPort": 9100}]);
    set_spec(&api, &ported).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let status = current_status(&api).await;
        if status.reason_name() == Some("InvalidSpec") {
            let message = status.message.unwrap_or_default();
            assert!(message.contains("hostPort 9100"), "{message}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "hostPort not refused: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The DaemonSet's `minReadySeconds` (issue 50): with no canary soak of its own
/// (`spec.health.canarySoak: 0s`), a DaemonSet with `minReadySeconds: 30` is not widened
/// before its canary pod has been ready for 30 s (its `Ready` transition time, as the kubelet
/// wrote it), and it is widened soon after (a timed wake, not a poll of the cluster).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_ready_seconds_holds_the_widen_until_the_canary_is_available() {
    let (_sim, client, _run) =
        support::controller_on_sim("min-ready", &["--nodes", "3"], &[]).await;
    let with_min_ready = |version: &str| {
        let mut object = manifest(Compatibility::Fixed, version, "healthy");
        object["spec"]["health"] = serde_json::json!({"canarySoak": "0s"});
        object["spec"]["template"]["spec"]["minReadySeconds"] = serde_json::json!(30);
        object
    };
    let api: Api<CanaryDaemonSet> = Api::namespaced(client.clone(), NAMESPACE);
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let daemon_sets: Api<DaemonSet> = Api::namespaced(client.clone(), NAMESPACE);
    until_rolled_out(&api, create(&api, with_min_ready("v1")).await, NODES).await;
    // The v1 pods become available 30 s after they are ready: before, the DaemonSet controller
    // replaces an unavailable old pod whatever the budget, as Kubernetes does.
    tokio::time::sleep(Duration::from_secs(32)).await;
    set_spec(&api, &with_min_ready("v2")).await;
    let mut canary_ready: Option<k8s_openapi::jiff::Timestamp> = None;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        for pod in pods.list(&ListParams::default()).await.unwrap().items {
            if runs(&pod, "v2")
                && let Some(ready) = ready_since(&pod)
            {
                canary_ready = Some(canary_ready.map_or(ready, |seen| seen.min(ready)));
            }
        }
        let widened = daemon_sets
            .get(NAME)
            .await
            .unwrap()
            .spec
            .and_then(|s| s.update_strategy?.rolling_update?.max_unavailable)
            == Some(IntOrString::String("10%".into()));
        if widened {
            let ready = canary_ready.expect("the widen comes after a ready canary");
            let waited = k8s_openapi::jiff::Timestamp::now().duration_since(ready);
            assert!(
                waited.as_secs() >= 30,
                "widened {waited:?} after the canary became ready, before minReadySeconds"
            );
            assert!(waited.as_secs() < 45, "widened late: {waited:?}");
            break;
        }
        assert!(Instant::now() < deadline, "never widened");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `minReadySeconds` on the Pods driver (issue 50): with no canary soak of its own, the step
/// after the canary's (`{nodes: "100%"}`) takes no other node before the canary's pod has been
/// ready for the DaemonSet's `minReadySeconds: 20`, and takes them soon after (a timed wake).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_ready_seconds_holds_the_pods_drivers_next_step() {
    let (_sim, client, _run) =
        support::controller_on_sim("min-ready-pods", &["--nodes", "3"], &[]).await;
    let with_min_ready = |version: &str| {
        let mut object = manifest(Compatibility::Fixed, version, "healthy");
        object["spec"]["strategy"]["driver"] = serde_json::json!("Pods");
        object["spec"]["strategy"]["steps"] =
            serde_json::json!([{"nodes": "1"}, {"nodes": "100%"}]);
        object["spec"]["health"] = serde_json::json!({"canarySoak": "0s"});
        object["spec"]["template"]["spec"]["minReadySeconds"] = serde_json::json!(20);
        object
    };
    let api: Api<CanaryDaemonSet> = Api::namespaced(client.clone(), NAMESPACE);
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    until_rolled_out(&api, create(&api, with_min_ready("v1")).await, NODES).await;
    set_spec(&api, &with_min_ready("v2")).await;
    let on_v2 = |pod: &Pod| runs(pod, "v2");
    let mut canary: Option<(String, k8s_openapi::jiff::Timestamp)> = None;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let listed = pods.list(&ListParams::default()).await.unwrap().items;
        for pod in listed.iter().filter(|pod| on_v2(pod)) {
            let ready = ready_since(pod);
            let node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
            if let (None, Some(ready), Some(node)) = (&canary, ready, node) {
                canary = Some((node, ready));
            }
        }
        // The next step has begun once a node other than the canary's loses its v1 pod.
        let next_step = canary.as_ref().is_some_and(|(canary_node, _)| {
            listed.iter().any(|pod| {
                !on_v2(pod)
                    && pod.metadata.deletion_timestamp.is_some()
                    && pod.spec.as_ref().and_then(|s| s.node_name.as_deref())
                        != Some(canary_node.as_str())
            }) || listed
                .iter()
                .filter(|pod| on_v2(pod))
                .filter_map(|pod| pod.spec.as_ref()?.node_name.as_deref())
                .any(|node| node != canary_node)
        });
        if next_step {
            let (_, ready) = canary.as_ref().expect("checked above");
            let waited = k8s_openapi::jiff::Timestamp::now().duration_since(*ready);
            assert!(
                waited.as_secs() >= 20,
                "the next step began {waited:?} after the canary became ready, before minReadySeconds"
            );
            assert!(
                waited.as_secs() < 35,
                "the next step began late: {waited:?}"
            );
            break;
        }
        assert!(Instant::now() < deadline, "the next step never began");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
