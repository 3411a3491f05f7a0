//! `spec.strategy.onFailure: Rollback` on the real control plane, with both drivers: a
//! crash-looping release fails at its canary, and the controller rolls the last successful
//! revision back out by itself, canary first (`failed`, `rollingBack`, `rolledBack`), until
//! every pod runs the old revision again and is Ready; only the canary ever ran the bad one.

use crate::harness::{E2e, image_and_ready, with_strategy};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs `cargo xtask e2e`"]
async fn on_failure_rollback_with_the_max_unavailable_driver() {
    rolls_back("rollback-mu", serde_json::json!({"onFailure": "Rollback"})).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs `cargo xtask e2e`"]
async fn on_failure_rollback_with_the_pods_driver() {
    rolls_back(
        "rollback-pods",
        serde_json::json!({
            "onFailure": "Rollback",
            "driver": "Pods",
            "steps": [{"nodes": "1"}, {"pause": {"duration": "20s"}}, {"nodes": "100%"}]
        }),
    )
    .await;
}

async fn rolls_back(scenario: &str, strategy: serde_json::Value) {
    let e2e = E2e::isolated(scenario).nodes(6).start().await;
    let agent = |version: &str, behavior: &str| {
        with_strategy(e2e.agent_json(version, behavior), strategy.clone())
    };
    e2e.install(
        &serde_json::from_value(agent("v1", "healthy")).unwrap(),
        Duration::from_secs(120),
    )
    .await;
    let recorder = e2e.record().await;
    let generation = e2e.set_spec(&agent("v2", "crashloop")).await;
    e2e.wait_phase_through(
        generation,
        "rolledBack",
        &["failed"],
        Duration::from_secs(240),
    )
    .await;

    let phases = recorder.phases();
    let from_failure: Vec<&str> = phases
        .iter()
        .map(String::as_str)
        .skip_while(|p| *p != "failed")
        .collect();
    assert_eq!(
        from_failure,
        ["failed", "rollingBack", "rolledBack"],
        "{phases:?}"
    );
    let rolling_back = e2e.event_messages("RollingBack");
    assert!(
        rolling_back.len() == 1
            && rolling_back[0].contains("the rollout failed (CanaryCrashLooping)"),
        "{rolling_back:?}"
    );
    let status = e2e.status().await;
    let history = status.history.clone().unwrap_or_default();
    assert_eq!(
        history.rollback.as_ref().map(|r| r.reason.as_str()),
        Some("OnFailure"),
        "{history:?}"
    );
    assert_eq!(
        history.stable.as_ref().map(|s| s.version.as_str()),
        Some("v1")
    );

    // Every pod back on v1 and Ready; the crash-looping v2 ran on the canary's node only.
    let pods = e2e.pods().await;
    let live: Vec<_> = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect();
    assert_eq!(live.len(), 6);
    for pod in live {
        let (image, ready) = image_and_ready(pod);
        assert!(image.ends_with(":v1") && ready, "{image} ready={ready}");
    }
    let bad = recorder.pods_on("v2");
    assert_eq!(bad.len(), 1, "pods that ran v2: {bad:?}");
    assert!(
        !bad[0].ever_ready,
        "the crash-looping canary was never Ready"
    );
    for (reason, times) in [("RollingBack", 1), ("RolledBack", 1)] {
        assert_eq!(
            e2e.events_with_reason(reason),
            times,
            "{reason}: {:?}",
            e2e.event_reasons()
        );
    }
    // And it stays there: nothing rolls v2 out again.
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(e2e.status().await.phase_name(), Some("rolledBack"));
    assert_eq!(e2e.version_counts().await, [("v1".into(), 6)].into());
    assert_eq!(recorder.pods_on("v2").len(), 1);
}
