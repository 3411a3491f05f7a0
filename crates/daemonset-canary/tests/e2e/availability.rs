//! Availability during a rollout (issue 50) on the real control plane, with the real
//! controller and kube-controller-manager's DaemonSet controller doing the replacing:
//!
//! - Surge (`spec.strategy.surge: true`, a 15 s canary soak): the DaemonSet is written
//!   `maxUnavailable: 0` with `maxSurge: 1` for the canary, put on `OnDelete` for the soak once
//!   the canary's node has lost its old pod, so that no other node is replaced during the soak,
//!   then `10%` once it has soaked; the DaemonSet controller starts each new pod
//!   beside the old one (a node is seen with two live pods), and at no poll (every 200 ms) is
//!   a node without a ready agent pod, although every new pod takes its start delay, a 3 s
//!   image pull (`sim.canary.daemonset.dev/pull`, played by `daemonset-canary sim kwok`) and
//!   the ready delay of the cluster's KWOK Stages to become ready: a plain rollout of the same
//!   template leaves each node that long without its agent.
//! - Pre-pull (`spec.prePull`): while the canary soaks, the nodes the widen replaces next get a
//!   pre-pull pod each, at most `maxConcurrent` pulling at once, never on the canary's node; the
//!   agent pods that replace them start without the pull (creation to Ready well under the
//!   8 s pull), the canary's pays it; no pre-pull pod is left once the rollout is over. The
//!   install grants no `pods: create`: the scenario grants it in its namespace with a Role, as
//!   docs/operations.md tells a user to.
//!
//! The image pull on KWOK: the pod Stage that starts containers waits for the pod annotation
//! `sim.canary.daemonset.dev/pull-wait`, which `sim kwok` writes from the template's pull time
//! and its per-node record of pulled images (0 for an image the node has), so a pull is paid
//! once per node and image, by whichever pod of the node asks first: the pre-pull pod here.

use crate::harness::{CONTROLLER_NAMESPACE, E2e, with_strategy};
use canary_kube_adapter::reconcile::PRE_PULL_LABEL;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::Api;
use kube::api::{ListParams, PostParams};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

const PULL_ANNOTATION: &str = "sim.canary.daemonset.dev/pull";

/// The scenario's agent at `version`: a pull of `pull` per new image, a short canary soak.
fn agent(e2e: &E2e, version: &str, pull: &str, soak: &str) -> serde_json::Value {
    let mut object = e2e.agent_json(version, "healthy");
    object["spec"]["template"]["spec"]["template"]["metadata"]["annotations"][PULL_ANNOTATION] =
        serde_json::json!(pull);
    object["spec"]["health"] = serde_json::json!({"canarySoak": soak});
    object
}

fn ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn node_of(pod: &Pod) -> Option<String> {
    pod.spec.as_ref()?.node_name.clone()
}

/// Seconds from a pod's creation to its `Ready` condition (as KWOK wrote them; 1 s grain).
fn creation_to_ready(pod: &Pod) -> Option<i64> {
    let created = pod.metadata.creation_timestamp.as_ref()?.0;
    let ready = pod
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready" && c.status == "True")?
        .last_transition_time
        .as_ref()?
        .0;
    Some(ready.as_second() - created.as_second())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs `cargo xtask e2e`"]
async fn surge_on_the_real_daemon_set_controller_leaves_no_node_without_a_ready_agent() {
    let e2e = E2e::isolated("surge").nodes(4).start().await;
    // A canary soak that outlasts several nodes' surge: the soak's `OnDelete` (written once the
    // canary has its node to itself) must keep every other node on its old pod until the widen
    // (by hand, 6 nodes, 15 s soak: before the hold every node was replaced inside the soak).
    let surged = |version: &str| {
        with_strategy(
            agent(&e2e, version, "3s", "15s"),
            serde_json::json!({"surge": true}),
        )
    };
    e2e.install(
        &serde_json::from_value(surged("v1")).unwrap(),
        Duration::from_secs(120),
    )
    .await;
    let nodes: BTreeSet<String> = e2e.node_names().await.into_iter().collect();
    let started = Instant::now();
    let generation = e2e.set_spec(&surged("v2")).await;
    let (mut polls, mut unserved_polls) = (0, Vec::new());
    let mut doubled_nodes = BTreeSet::new();
    let (mut surges, mut least_unavailable) = (BTreeSet::new(), i32::MAX);
    // The nodes replaced (a ready v2 pod, no other live pod) before the widen's `10%`, and
    // whether the soak's `OnDelete` was seen.
    let (mut replaced_in_soak, mut held) = (Vec::<String>::new(), false);
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let pods = e2e.pods().await;
        let live: Vec<&Pod> = pods
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect();
        let served: BTreeSet<String> = live
            .iter()
            .filter(|p| ready(p))
            .filter_map(|p| node_of(p))
            .collect();
        let unserved: Vec<&String> = nodes.difference(&served).collect();
        if !unserved.is_empty() {
            unserved_polls.push(format!("{:?}: {unserved:?}", started.elapsed()));
        }
        let mut per_node: BTreeMap<String, usize> = BTreeMap::new();
        for node in live.iter().filter_map(|p| node_of(p)) {
            *per_node.entry(node).or_default() += 1;
        }
        doubled_nodes.extend(per_node.into_iter().filter(|(_, n)| *n > 1).map(|(n, _)| n));
        let strategy = e2e.daemon_set().await.spec.and_then(|s| s.update_strategy);
        held |= strategy.as_ref().and_then(|s| s.type_.as_deref()) == Some("OnDelete");
        if !surges.contains("10%") {
            let mut by_node: BTreeMap<String, Vec<&Pod>> = BTreeMap::new();
            for pod in &live {
                if let Some(node) = node_of(pod) {
                    by_node.entry(node).or_default().push(pod);
                }
            }
            for (node, pods) in by_node {
                let only_new = pods
                    .iter()
                    .all(|p| crate::harness::version_of(p) == "v2" && ready(p));
                if only_new && !replaced_in_soak.contains(&node) {
                    replaced_in_soak.push(node);
                }
            }
        }
        if let Some(rolling) = strategy.and_then(|s| s.rolling_update) {
            if let Some(surge) = rolling.max_surge {
                surges.insert(match surge {
                    IntOrString::Int(n) => n.to_string(),
                    IntOrString::String(s) => s,
                });
            }
            if let Some(IntOrString::Int(n)) = rolling.max_unavailable {
                least_unavailable = least_unavailable.min(n);
            }
        }
        polls += 1;
        let status = e2e.status().await;
        if status.observed_generation >= generation
            && status.phase_name() == Some("successful")
            && status.updated_ready as usize == nodes.len()
        {
            break;
        }
        assert!(status.phase_name() != Some("failed"), "{status:?}");
        assert!(
            Instant::now() < deadline,
            "not rolled out: {status:?}\n{}",
            e2e.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let took = started.elapsed();
    assert!(polls > 20, "polled through the rollout: {polls} polls");
    assert!(
        unserved_polls.is_empty(),
        "nodes without a ready agent during a surge rollout: {unserved_polls:?}"
    );
    assert_eq!(
        doubled_nodes, nodes,
        "every node's new pod started beside its old one"
    );
    assert_eq!(least_unavailable, 0, "maxUnavailable 0 throughout");
    assert!(held, "the soak held the DaemonSet controller (OnDelete)");
    assert_eq!(
        replaced_in_soak.len(),
        1,
        "only the canary's node replaced before the widen: {replaced_in_soak:?}"
    );
    assert!(
        surges.contains("1") && surges.contains("10%"),
        "the canary's maxSurge 1, then 10%: {surges:?}"
    );
    assert_eq!(
        e2e.version_counts().await,
        [("v2".into(), nodes.len())].into()
    );
    eprintln!(
        "surge: successful {took:?} after the update, {polls} polls, no gap, replaced before the widen: {replaced_in_soak:?}"
    );
}

/// `pods: create` for the controller's ServiceAccount in the scenario's namespace alone, as
/// docs/operations.md tells a user of deploy/default to grant it where pre-pull is used (the
/// install grants no pod creation by default).
async fn grant_pod_create(e2e: &E2e) {
    let role: Role = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "daemonset-canary-pre-pull", "namespace": e2e.namespace},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]}]
    }))
    .unwrap();
    let binding: RoleBinding = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "daemonset-canary-pre-pull", "namespace": e2e.namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "daemonset-canary-pre-pull"},
        "subjects": [{"kind": "ServiceAccount", "name": "daemonset-canary", "namespace": CONTROLLER_NAMESPACE}]
    }))
    .unwrap();
    Api::<Role>::namespaced(e2e.client.clone(), &e2e.namespace)
        .create(&PostParams::default(), &role)
        .await
        .unwrap();
    Api::<RoleBinding>::namespaced(e2e.client.clone(), &e2e.namespace)
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs `cargo xtask e2e`"]
async fn pre_pull_pulls_on_the_next_nodes_only_bounded_and_is_cleaned_up() {
    let e2e = E2e::isolated("pre-pull").nodes(4).start().await;
    // The widen replaces the three other nodes at once: the pre-pull window's batch.
    let pulled = |version: &str| {
        let mut object = with_strategy(
            agent(&e2e, version, "8s", "30s"),
            serde_json::json!({"fastMaxUnavailable": "3"}),
        );
        object["spec"]["prePull"] = serde_json::json!({"maxConcurrent": 2});
        object
    };
    e2e.install(
        &serde_json::from_value(pulled("v1")).unwrap(),
        Duration::from_secs(120),
    )
    .await;
    grant_pod_create(&e2e).await;
    let pods: Api<Pod> = Api::namespaced(e2e.client.clone(), &e2e.namespace);
    let pre_pull_pods = ListParams::default().labels(PRE_PULL_LABEL);
    let started = Instant::now();
    let generation = e2e.set_spec(&pulled("v2")).await;
    let mut pre_pulled: BTreeSet<String> = BTreeSet::new();
    let (mut most_pulling, mut most_pods) = (0, 0);
    let mut canary_node: Option<String> = None;
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let helpers = pods.list(&pre_pull_pods).await.unwrap().items;
        let live: Vec<&Pod> = helpers
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect();
        // Pulling: no container status with its image yet (KWOK writes the image ID when the
        // containers start, after the pull).
        let pulling = live
            .iter()
            .filter(|p| {
                !p.status
                    .as_ref()
                    .and_then(|s| s.container_statuses.as_ref())
                    .is_some_and(|c| !c.is_empty() && c.iter().all(|c| !c.image_id.is_empty()))
            })
            .count();
        most_pulling = most_pulling.max(pulling);
        most_pods = most_pods.max(live.len());
        pre_pulled.extend(live.iter().filter_map(|p| node_of(p)));
        if canary_node.is_none() {
            canary_node = e2e
                .versions_by_node()
                .await
                .into_iter()
                .find(|(_, v)| v == "v2")
                .map(|(node, _)| node);
        }
        let status = e2e.status().await;
        if status.observed_generation >= generation
            && status.phase_name() == Some("successful")
            && status.updated_ready == 4
        {
            break;
        }
        assert!(status.phase_name() != Some("failed"), "{status:?}");
        assert!(
            Instant::now() < deadline,
            "not rolled out: {status:?}\n{}",
            e2e.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let took = started.elapsed();
    let canary_node = canary_node.expect("the canary's node was seen");
    let others: BTreeSet<String> = e2e
        .node_names()
        .await
        .into_iter()
        .filter(|n| *n != canary_node)
        .collect();
    assert_eq!(
        pre_pulled, others,
        "the next nodes pre-pulled, not the canary's ({canary_node})"
    );
    assert!(
        most_pulling <= 2,
        "{most_pulling} pre-pull pods pulling at once, maxConcurrent 2"
    );
    assert!(
        most_pods <= 3,
        "{most_pods} pre-pull pods at once for 3 nodes"
    );
    // The agent pods: the canary's paid the pull, the others found their image on the node.
    for pod in e2e.pods().await {
        let Some(node) = node_of(&pod) else { continue };
        let seconds = creation_to_ready(&pod).expect("ready");
        if node == canary_node {
            assert!(
                seconds >= 8,
                "the canary on {node} ready after {seconds} s: no pull"
            );
        } else {
            assert!(
                seconds < 8,
                "{node}'s new pod ready {seconds} s after its creation: it pulled"
            );
        }
    }
    e2e.wait_for("no pre-pull pod left", Duration::from_secs(60), || async {
        pods.list(&pre_pull_pods).await.unwrap().items.is_empty()
    })
    .await;
    eprintln!(
        "pre-pull: successful {took:?} after the update; pre-pulled {pre_pulled:?}, at most \
         {most_pulling} pulling"
    );
}
