//! Tenant safety on the real control plane (issue 47): what one CanaryDaemonSet's author can
//! make the controller do beyond their own DaemonSet.
//!
//! - One DaemonSet, one CanaryDaemonSet: a second one naming a DaemonSet that another drives
//!   (here through `workloadRef`, on a DaemonSet its owner writes) fails with `DaemonSetClaimed`
//!   naming the first, and the API server records no pod deleted for it while the first holds
//!   its canary behind an approval gate; once the first is deleted, the claim passes on and the
//!   second drives the DaemonSet.
//! - Analysis addresses are the administrator's: an address the controller was not allowed
//!   (`--allow-analysis-address`) ends the object in `InvalidSpec` naming the flag, and the
//!   address is never asked.

use crate::audit;
use crate::harness::{E2e, workload_claimant};
use canary_kube_adapter::CanaryDaemonSet;
use canary_kube_adapter::claim::CLAIM_ANNOTATION;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// The DaemonSet an owner (a GitOps tool) writes, that both CanaryDaemonSets name.
const SHARED: &str = "shared-agent";

/// A CanaryDaemonSet of the Pods driver that drives `SHARED` through `workloadRef`.
fn claimant(e2e: &E2e, name: &str, container: &str, steps: serde_json::Value) -> CanaryDaemonSet {
    workload_claimant(e2e, name, (SHARED, container), steps)
}

async fn status_of(
    e2e: &E2e,
    name: &str,
) -> Option<canary_kube_adapter::crd::CanaryDaemonSetStatus> {
    e2e.canaries()
        .get_opt(name)
        .await
        .unwrap()
        .and_then(|cds| cds.status)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs `cargo xtask e2e`"]
async fn a_second_canary_daemon_set_on_a_claimed_daemon_set_is_refused_and_deletes_nothing() {
    let e2e = E2e::isolated("claim").nodes(4).start().await;
    let (_, container) = e2e.owned_daemon_set(SHARED, serde_json::Value::Null).await;
    let daemon_sets: Api<DaemonSet> = Api::namespaced(e2e.client.clone(), &e2e.namespace);
    let canaries = e2e.canaries();

    // The first holds its release on the canary with an approval gate.
    let first = canaries
        .create(
            &PostParams::default(),
            &claimant(
                &e2e,
                "first",
                &container,
                serde_json::json!([{"nodes": "1"}, {"pause": {}}, {"nodes": "100%"}]),
            ),
        )
        .await
        .unwrap();
    let first_uid = first.metadata.uid.clone().unwrap();
    let claim = || async {
        daemon_sets
            .get(SHARED)
            .await
            .unwrap()
            .metadata
            .annotations
            .unwrap_or_default()
            .get(CLAIM_ANNOTATION)
            .cloned()
            .unwrap_or_default()
    };
    e2e.wait_for(
        "first claims the DaemonSet",
        Duration::from_secs(60),
        || async { claim().await.ends_with(&first_uid) },
    )
    .await;
    e2e.owner_writes(
        SHARED,
        "gitops",
        &container,
        "registry.example/node-agent:v2",
        None,
    )
    .await;
    let on_v2 = || e2e.live_on("registry.example/node-agent:v2");
    e2e.wait_for(
        "first's canary on v2, held by its pause",
        Duration::from_secs(120),
        || async {
            status_of(&e2e, "first")
                .await
                .is_some_and(|s| s.phase_name() == Some("paused"))
        },
    )
    .await;
    assert_eq!(on_v2().await, 1, "one canary before the gate");

    // The second: one step to every node. It must skip no gate of the first.
    let second_created = Timestamp::now();
    let second = canaries
        .create(
            &PostParams::default(),
            &claimant(
                &e2e,
                "second",
                &container,
                serde_json::json!([{"nodes": "100%"}]),
            ),
        )
        .await
        .unwrap();
    e2e.wait_for(
        "second refused with DaemonSetClaimed",
        Duration::from_secs(60),
        || async {
            status_of(&e2e, "second")
                .await
                .is_some_and(|s| s.reason_name() == Some("DaemonSetClaimed"))
        },
    )
    .await;
    let message = status_of(&e2e, "second")
        .await
        .and_then(|s| s.message)
        .unwrap_or_default();
    assert!(
        message.contains("first"),
        "the refusal names the first: {message}"
    );
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(
        on_v2().await,
        1,
        "the second moved pods past the first's gate"
    );
    let deleted_meanwhile: Vec<String> = audit::writes_in(&e2e.namespace)
        .into_iter()
        .filter(|w| w.verb == "delete" && w.resource() == "pods")
        .filter(|w| w.stage_timestamp > second_created)
        .map(|w| w.line())
        .collect();
    assert!(
        deleted_meanwhile.is_empty(),
        "pods deleted while the second was refused: {deleted_meanwhile:#?}"
    );
    assert!(
        claim().await.ends_with(&first_uid),
        "the claim moved while the first lives"
    );

    // The first goes (a GitOps tool pruned it): the claim passes on, and the second drives the
    // DaemonSet to its own end.
    canaries
        .delete("first", &DeleteParams::default())
        .await
        .unwrap();
    let second_uid = second.metadata.uid.clone().unwrap();
    e2e.wait_for(
        "the claim passes on to the second",
        Duration::from_secs(90),
        || async { claim().await.ends_with(&second_uid) },
    )
    .await;
    e2e.wait_for(
        "the second moves every pod to v2",
        Duration::from_secs(180),
        || async {
            status_of(&e2e, "second")
                .await
                .is_some_and(|s| s.phase_name() == Some("successful"))
                && on_v2().await == 4
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs `cargo xtask e2e`"]
async fn an_analysis_address_the_administrator_did_not_allow_is_refused_and_never_asked() {
    // A listener that counts every connection, where the author points their analysis.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let asked_port = listener.local_addr().unwrap().port();
    let connections = Arc::new(AtomicUsize::new(0));
    {
        let connections = connections.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                connections.fetch_add(1, Ordering::SeqCst);
                drop(stream);
            }
        });
    }
    // The administrator allowed another Prometheus only.
    let e2e = E2e::isolated("allowlist")
        .nodes(2)
        .allow_analysis_address("http://prometheus.monitoring.svc:9090/".into())
        .start()
        .await;
    let mut manifest = e2e.agent_json("v1", "healthy");
    manifest["spec"]["strategy"]["driver"] = "Pods".into();
    manifest["spec"]["strategy"]["steps"] =
        serde_json::json!([{"nodes": "1"}, {"pause": {"duration": "5s"}}, {"nodes": "100%"}]);
    manifest["spec"]["analysis"] = serde_json::json!({
        "prometheus": {"address": format!("http://127.0.0.1:{asked_port}")},
        "metrics": [{"name": "errors", "query": "vector(0)", "max": 1}]
    });
    let cds: CanaryDaemonSet = serde_json::from_value(manifest).unwrap();
    e2e.canaries()
        .create(&PostParams::default(), &cds)
        .await
        .unwrap();
    e2e.wait_for(
        "the object refused with InvalidSpec",
        Duration::from_secs(60),
        || async {
            let status = e2e.status().await;
            status.reason_name() == Some("InvalidSpec")
        },
    )
    .await;
    let status = e2e.status().await;
    let message = status.message.unwrap_or_default();
    assert!(
        message.contains("--allow-analysis-address"),
        "the refusal names the flag: {message}"
    );
    assert!(
        !e2e.event_messages("InvalidSpec").is_empty(),
        "an InvalidSpec event on the object: {}",
        e2e.events_dump()
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        connections.load(Ordering::SeqCst),
        0,
        "the controller connected to an address it was not allowed"
    );
    assert!(
        e2e.pods().await.is_empty(),
        "a refused spec created a DaemonSet: {:?}",
        e2e.version_counts().await
    );
}
