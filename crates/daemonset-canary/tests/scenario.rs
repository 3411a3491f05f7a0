//! Whole rollouts through `daemonset_canary::demo::scenario`, in virtual time: the phases a user sees,
//! the number of DaemonSet writes, and the end each scenario should reach.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use canary_state_machine::Compatibility;
use daemonset_canary::demo::scenario::{Scenario, ScenarioConfig, ScenarioKind, ScenarioReport};

async fn run(kind: ScenarioKind, nodes: u32, compatibility: Compatibility) -> ScenarioReport {
    let config = ScenarioConfig {
        nodes,
        kind,
        compatibility,
        ..ScenarioConfig::default()
    };
    let scenario = Scenario::start(config).await.unwrap();
    scenario.install().await.unwrap();
    let report = scenario.upgrade(|_, _| {}).await.unwrap();
    scenario.stop().await.unwrap();
    report
}

fn phases(report: &ScenarioReport) -> Vec<String> {
    report
        .timeline
        .phase_changes()
        .iter()
        .map(|s| s.phase.clone())
        .collect()
}

#[tokio::test(start_paused = true)]
async fn healthy_rollout_goes_canary_widen_revert_in_three_writes() {
    let report = run(ScenarioKind::Healthy, 20, Compatibility::Fixed).await;
    assert!(report.as_expected, "{:?}", report.summary);
    assert_eq!(report.summary.result, "successful");
    assert_eq!(report.summary.daemon_set_writes, 3, "start, widen, revert");
    let seen = phases(&report);
    assert!(seen.contains(&"canary".to_owned()), "{seen:?}");
    assert_eq!(
        seen.last().map(String::as_str),
        Some("successful"),
        "{seen:?}"
    );
    let widest = report
        .timeline
        .samples()
        .iter()
        .map(|s| s.max_unavailable_pods)
        .max()
        .unwrap();
    assert_eq!(widest, 2, "10% of 20 nodes");
    let last = report.timeline.samples().last().unwrap();
    assert_eq!((last.updated_ready, last.desired), (20, 20));
    assert_eq!(last.max_unavailable, "1", "rests at 1 after the rollout");
}

#[tokio::test(start_paused = true)]
async fn crash_looping_canary_fails_without_widening() {
    let report = run(ScenarioKind::CrashloopCanary, 10, Compatibility::Fixed).await;
    assert!(report.as_expected, "{:?}", report.summary);
    assert_eq!(report.summary.result, "failed");
    assert_eq!(report.summary.reason.as_deref(), Some("CanaryCrashLooping"));
    assert!(
        report
            .timeline
            .samples()
            .iter()
            .all(|s| s.max_unavailable_pods <= 1),
        "never widened"
    );
    assert_eq!(report.summary.daemon_set_writes, 1, "only the start write");
}

#[tokio::test(start_paused = true)]
async fn kubevirt_compatibility_also_completes() {
    let report = run(ScenarioKind::Healthy, 10, Compatibility::KubeVirt).await;
    assert_eq!(report.summary.result, "successful", "{:?}", report.summary);
    assert_eq!(report.summary.daemon_set_writes, 3);
}
