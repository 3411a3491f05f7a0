//! Two controller replicas, as deploy/manager runs them (leader election on one Lease, the same
//! ServiceAccount), and the leader SIGKILLed, or frozen (SIGSTOP) and woken later, in the
//! middle of a rollout: the standby takes the Lease once it expires and the rollout ends as it
//! would have without the fault. The API server's audit log is the judge: each replica has a
//! token of its own, whose id the server records with every request, so it tells which replica
//! sent each write; neither wrote without the Lease (the standby nothing before it took the
//! Lease, the old leader nothing after the fault, even once woken), and the writes add up to
//! one rollout's (the MaxUnavailable driver: the reference's three DaemonSet writes, no canary
//! started again; the Pods driver: one deletion per old pod, none twice).

use crate::audit;
use crate::harness::{Controller, E2e, with_strategy};
use canary_kube_adapter::CanaryDaemonSet;
use daemonset_canary::demo::scenario::NAME;
use k8s_openapi::jiff::Timestamp;
use std::time::{Duration, Instant};

/// The replicas of a scenario, `a` leading and `b` standing by, with an agent installed at v1.
async fn two_replicas(e2e: &E2e) -> (Controller, Controller) {
    let a = e2e.spawn_controller("a").await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while !a.leads() {
        assert!(
            Instant::now() < deadline,
            "a never led\n{}",
            a.endpoint.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let b = e2e.spawn_controller("b").await;
    // b is up (ready) and stands by: the Lease is a's.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!b.leads(), "two leaders\n{}", b.endpoint.log_tail());
    assert!(a.leads());
    (a, b)
}

/// What happens to the leader.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    /// SIGKILL: gone, its Lease left to expire.
    Kill,
    /// SIGSTOP until the standby has finished the rollout, then SIGCONT: a leader frozen (a
    /// stalled node, a long GC pause) that wakes up with its work in flight, after its Lease
    /// has passed to the other replica.
    Freeze,
}

/// Hits `a` with `fault` once `ready` holds, waits for the rollout to end `successful` on
/// `b` (and, for a freeze, lets `a` wake up and step down), and checks the audit log's
/// invariants; returns the writes of the rollout (after `since`) and the time `b` took the
/// Lease.
async fn fault_leader_when(
    e2e: &E2e,
    a: &mut Controller,
    b: &Controller,
    generation: Option<i64>,
    since: Timestamp,
    fault: Fault,
    ready: impl AsyncFn() -> bool,
) -> (Vec<audit::Event>, Timestamp) {
    let deadline = Instant::now() + Duration::from_secs(240);
    while !ready().await {
        assert!(
            Instant::now() < deadline,
            "the rollout never reached the point of the kill: {:?}\n{}",
            e2e.status().await,
            a.endpoint.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(a.leads(), "a lost the Lease before the fault");
    match fault {
        Fault::Kill => a.kill(),
        Fault::Freeze => a.signal("STOP"),
    }
    let killed = Timestamp::now();
    let phase = e2e.status().await.phase;
    eprintln!("{fault:?} the leader at {killed}, phase {phase:?}");

    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let status = e2e.status().await;
        if status.observed_generation >= generation && status.phase_name() == Some("successful") {
            break;
        }
        assert_ne!(status.phase_name(), Some("failed"), "{status:?}");
        assert!(
            Instant::now() < deadline,
            "b did not finish the rollout: {status:?}\n{}",
            b.endpoint.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(b.leads(), "b finished without leading?");
    let taken = audit::lease_taken(&e2e.namespace, &b.credential)
        .unwrap_or_else(|| panic!("b never took the Lease {}", e2e.namespace));
    eprintln!(
        "b took the Lease {:.1} s after the fault",
        (taken.as_millisecond() - killed.as_millisecond()) as f64 / 1000.0
    );
    assert!(
        taken > killed,
        "b took the Lease while a was alive and leading"
    );
    if fault == Fault::Freeze {
        // a wakes up with whatever it was doing: it must find its right to write gone, write
        // nothing, and stand by.
        a.signal("CONT");
        tokio::time::sleep(Duration::from_secs(15)).await;
        assert!(
            a.running(),
            "a exited after it woke up\n{}",
            a.endpoint.log_tail()
        );
        assert!(!a.leads(), "a leads again\n{}", a.endpoint.log_tail());
        assert!(b.leads(), "b lost the Lease to a woken a");
        let stolen: Vec<String> = audit::events()
            .iter()
            .filter(|e| {
                e.is_write()
                    && e.succeeded()
                    && e.resource() == "leases"
                    && e.name() == e2e.namespace
                    && e.credential() == Some(&a.credential)
                    && e.stage_timestamp > taken
            })
            .map(audit::Event::line)
            .collect();
        assert!(
            stolen.is_empty(),
            "a wrote the Lease after b took it: {stolen:#?}"
        );
        let woken = a.endpoint.log_tail();
        eprintln!("a after it woke up:\n{woken}");
    }

    let writes: Vec<audit::Event> = audit::writes_in(&e2e.namespace)
        .into_iter()
        .filter(|w| w.stage_timestamp > since)
        .collect();
    let by = |credential: &str| -> Vec<&audit::Event> {
        writes
            .iter()
            .filter(|w| w.credential() == Some(credential))
            .collect()
    };
    for write in by(&a.credential) {
        assert!(
            write.stage_timestamp <= killed,
            "a wrote after the fault ({fault:?}): {}",
            write.line()
        );
    }
    for write in by(&b.credential) {
        assert!(
            write.stage_timestamp >= taken,
            "b wrote before it took the Lease at {taken}: {}",
            write.line()
        );
    }
    // Pod status writes are the kubelet's, played by KWOK and `sim kwok` (the audit policy
    // records them for `bench --real`'s reaction times): no replica's.
    let unknown: Vec<String> = writes
        .iter()
        .filter(|w| w.credential() != Some(&a.credential) && w.credential() != Some(&b.credential))
        .filter(|w| w.resource() != "pods/status")
        .map(audit::Event::line)
        .collect();
    assert!(
        unknown.is_empty(),
        "writes by neither replica: {unknown:#?}"
    );
    (writes, taken)
}

/// The MaxUnavailable driver: the leader is killed after the widening; the standby finishes
/// with the reference's last write. Four DaemonSet writes in all (the start at
/// `maxUnavailable` 1, the canary soak's hold, `10%`, 1), the first three by the old leader,
/// the last by the new one: no canary started again.
/// Creates `cds` (v1) and waits until it is `successful`: the replicas' leader installed it.
async fn installed_by_a(e2e: &E2e, cds: &CanaryDaemonSet) {
    let created = e2e
        .canaries()
        .create(&Default::default(), cds)
        .await
        .unwrap();
    e2e.wait_for("v1 installed by a", Duration::from_secs(120), || async {
        let status = e2e.status().await;
        status.observed_generation >= created.metadata.generation
            && status.phase_name() == Some("successful")
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs `cargo xtask e2e`"]
async fn the_standby_finishes_a_max_unavailable_rollout_after_the_leader_is_killed() {
    let e2e = E2e::isolated("failover-mu")
        .nodes(12)
        .without_controller()
        .start()
        .await;
    let (mut a, b) = two_replicas(&e2e).await;
    installed_by_a(&e2e, &e2e.agent("v1", "healthy")).await;
    let since = Timestamp::now();
    // Slow pods (Ready 6 s after they start): the widened rollout lasts long enough to kill
    // the leader in its middle.
    let generation = e2e.upgrade("v2", "slow-start=6s").await;
    let (writes, _) = fault_leader_when(
        &e2e,
        &mut a,
        &b,
        generation,
        since,
        Fault::Kill,
        async || {
            let status = e2e.status().await;
            status.phase_name() == Some("waiting") && status.updated_ready >= 3
        },
    )
    .await;
    assert_eq!(e2e.version_counts().await, [("v2".into(), 12)].into());

    let ds_writes: Vec<&audit::Event> = writes
        .iter()
        .filter(|w| w.resource() == "daemonsets" && w.name() == NAME)
        .collect();
    let summary: Vec<(String, String)> = ds_writes
        .iter()
        .map(|w| {
            let who = if w.credential() == Some(&a.credential) {
                "a"
            } else {
                "b"
            };
            let max_unavailable = w
                .request_object
                .as_ref()
                .and_then(|ops| {
                    ops.as_array()?
                        .iter()
                        .find(|op| op["path"] == "/spec")
                        .map(|op| {
                            op["value"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"]
                                .to_string()
                        })
                })
                .unwrap_or_default();
            (who.to_owned(), max_unavailable)
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("a".to_owned(), "1".to_owned()),
            // The hold's write keeps the strategy's numbers, on OnDelete.
            ("a".to_owned(), "1".to_owned()),
            ("a".to_owned(), "\"10%\"".to_owned()),
            ("b".to_owned(), "1".to_owned()),
        ],
        "the rollout's DaemonSet writes, by replica"
    );
}

/// The Pods driver: the leader is killed in the last nodes step; the standby deletes the old
/// pods that are left, from where the status says the rollout was. Every old pod deleted once,
/// by one replica or the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs `cargo xtask e2e`"]
async fn the_standby_finishes_a_pods_rollout_after_the_leader_is_killed() {
    pods_rollout_with_a_fault("failover-pods", Fault::Kill).await;
}

/// The same with the leader frozen (SIGSTOP) in the last nodes step and woken (SIGCONT) once
/// the standby has finished: it wrote nothing after it froze, not even the Lease, and stands
/// by; the rollout stays as the standby finished it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs `cargo xtask e2e`"]
async fn a_frozen_leader_writes_nothing_when_it_wakes_after_the_standby_took_over() {
    pods_rollout_with_a_fault("failover-frozen", Fault::Freeze).await;
}

async fn pods_rollout_with_a_fault(scenario: &str, fault: Fault) {
    let e2e = E2e::isolated(scenario)
        .nodes(10)
        .without_controller()
        .start()
        .await;
    let (mut a, b) = two_replicas(&e2e).await;
    let strategy = serde_json::json!({
        "driver": "Pods",
        "steps": [{"nodes": "1"}, {"pause": {"duration": "5s"}}, {"nodes": "100%", "maxUnavailable": "2"}]
    });
    let agent = |version: &str, behavior: &str| {
        with_strategy(e2e.agent_json(version, behavior), strategy.clone())
    };
    installed_by_a(
        &e2e,
        &serde_json::from_value(agent("v1", "healthy")).unwrap(),
    )
    .await;
    let recorder = e2e.record().await;
    let since = Timestamp::now();
    let generation = e2e.set_spec(&agent("v2", "slow-start=6s")).await;
    let (writes, _) = fault_leader_when(&e2e, &mut a, &b, generation, since, fault, async || {
        let status = e2e.status().await;
        status.current_step_index == Some(2) && status.updated_ready >= 3
    })
    .await;
    assert_eq!(e2e.version_counts().await, [("v2".into(), 10)].into());

    let old: std::collections::BTreeSet<String> =
        recorder.pods_on("v1").into_iter().map(|p| p.name).collect();
    let deleted: Vec<(&str, &str)> = writes
        .iter()
        .filter(|w| w.verb == "delete" && w.resource() == "pods")
        .map(|w| {
            let who = if w.credential() == Some(&a.credential) {
                "a"
            } else {
                "b"
            };
            (w.name(), who)
        })
        .collect();
    let names: std::collections::BTreeSet<String> =
        deleted.iter().map(|(n, _)| (*n).to_owned()).collect();
    assert_eq!(
        deleted.len(),
        names.len(),
        "a pod deleted twice: {deleted:?}"
    );
    assert_eq!(names, old, "every old pod deleted once: {deleted:?}");
    assert!(deleted.iter().any(|(_, who)| *who == "a"), "{deleted:?}");
    assert!(deleted.iter().any(|(_, who)| *who == "b"), "{deleted:?}");
    // The template went out once, at the start, by a (the DaemonSet is OnDelete: the pods
    // move only by the deletions above).
    let ds_writers: Vec<bool> = writes
        .iter()
        .filter(|w| w.resource() == "daemonsets")
        .map(|w| w.credential() == Some(&a.credential))
        .collect();
    assert_eq!(ds_writers, [true], "one template write, by a");
}
