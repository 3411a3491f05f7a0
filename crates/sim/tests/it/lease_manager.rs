//! kube-lease-manager (server-side apply with conflict detection) against the simulator: one
//! holder at a time, and the lease passes on release. Runs in real time (the crate reads the
//! wall clock), a few seconds.

use std::time::Duration;

use canary_sim::Sim;
use k8s_openapi::api::coordination::v1::Lease;
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder};

async fn manager(sim: &Sim, identity: &str) -> LeaseManager {
    LeaseManagerBuilder::new(sim.client(), "leader")
        .with_namespace("default")
        .with_identity(identity)
        .with_duration(5)
        .with_grace(1)
        .build()
        .await
        .unwrap()
}

fn holder(sim: &Sim) -> Option<String> {
    sim.store()
        .get::<Lease>(Some("default"), "leader")
        .and_then(|lease| lease.spec)
        .and_then(|spec| spec.holder_identity)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_holder_at_a_time_and_handover_on_release() {
    let sim = Sim::builder().nodes(0).build().unwrap();
    let a = manager(&sim, "a").await;
    let b = manager(&sim, "b").await;

    let acquired = tokio::time::timeout(Duration::from_secs(10), a.changed()).await;
    assert!(matches!(acquired, Ok(Ok(true))), "a acquires: {acquired:?}");
    assert_eq!(holder(&sim).as_deref(), Some("a"));

    let contender = tokio::time::timeout(Duration::from_secs(2), b.changed()).await;
    assert!(
        !matches!(contender, Ok(Ok(true))),
        "b must not acquire a held lease: {contender:?}"
    );
    assert_eq!(holder(&sim).as_deref(), Some("a"));

    a.release().await.unwrap();
    let acquired = tokio::time::timeout(Duration::from_secs(10), b.changed()).await;
    assert!(
        matches!(acquired, Ok(Ok(true))),
        "b acquires after release: {acquired:?}"
    );
    assert_eq!(holder(&sim).as_deref(), Some("b"));
}
