//! Whole rollouts through `daemonset_canary::demo::scenario`, in virtual time: the phases a user sees,
//! the number of DaemonSet writes, and the end each scenario should reach.
use canary_state_machine::{Compatibility, Driver, Phase};
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
    let report = scenario.upgrade(|_| {}).await.unwrap();
    scenario.stop().await.unwrap();
    report
}

/// The phases gone through, by name (as a user reads them).
fn phases(report: &ScenarioReport) -> Vec<&'static str> {
    report
        .timeline
        .phases()
        .into_iter()
        .map(Phase::as_str)
        .collect()
}

/// `(phase, write)` of every step: phase changes and DaemonSet writes, in order.
/// The steps of a healthy rollout up to `waiting` in the default strategy. KubeVirt
/// compatibility has the same without the soak's hold (its canary does not soak), and differs
/// in how the revert ends it.
const UNTIL_WAITING: [(&str, Option<&str>); 5] = [
    ("started", Some("start")),
    ("canary", None),
    // The canary soaks (spec.health.canarySoak) with the DaemonSet controller held.
    ("canary", Some("hold")),
    ("increasing", Some("widen")),
    ("waiting", None),
];

fn steps(report: &ScenarioReport) -> Vec<(&str, Option<&str>)> {
    report
        .timeline
        .steps()
        .map(|s| (s.phase.as_str(), s.write.as_deref()))
        .collect()
}

/// Runs scenario `kind` on `nodes` nodes with the default strategy, which must end as the
/// scenario expects: `failed` for `reason`.
async fn failed_as_expected(kind: ScenarioKind, nodes: u32, reason: &str) -> ScenarioReport {
    let report = run(kind, nodes, Compatibility::Fixed).await;
    assert!(report.as_expected, "{:?}", report.summary);
    assert_eq!(report.summary.result, "failed");
    assert_eq!(report.summary.reason.as_deref(), Some(reason));
    report
}

#[tokio::test(start_paused = true)]
async fn healthy_rollout_goes_canary_widen_revert_in_three_writes() {
    let report = run(ScenarioKind::Healthy, 20, Compatibility::Fixed).await;
    assert!(report.as_expected, "{:?}", report.summary);
    assert_eq!(report.summary.result, "successful");
    assert_eq!(
        report.summary.daemon_set_writes, 4,
        "start, the soak's hold, widen, revert"
    );
    // Every phase the controller went through, including those inside one instant.
    assert_eq!(
        phases(&report),
        ["started", "canary", "increasing", "waiting", "successful"]
    );
    // The default strategy writes the revert in `waiting` and reports done once it sees it.
    assert_eq!(
        steps(&report),
        [
            &UNTIL_WAITING[..],
            &[("waiting", Some("revert")), ("successful", None)],
        ]
        .concat()
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
    let report = failed_as_expected(ScenarioKind::CrashloopCanary, 10, "CanaryCrashLooping").await;
    assert!(
        report
            .timeline
            .samples()
            .iter()
            .all(|s| s.max_unavailable_pods <= 1),
        "never widened"
    );
    assert_eq!(
        report.summary.daemon_set_writes, 2,
        "only the start and the soak's hold (which stops the DaemonSet controller too)"
    );
}

/// The reference reports done in the revert's own pass (kubevirt#18666): `successful` comes with
/// the revert write, where the default strategy has a `waiting` step first.
#[tokio::test(start_paused = true)]
async fn kubevirt_compatibility_reports_done_with_the_revert() {
    let report = run(ScenarioKind::Healthy, 10, Compatibility::KubeVirt).await;
    assert_eq!(report.summary.result, "successful", "{:?}", report.summary);
    assert_eq!(report.summary.daemon_set_writes, 3);
    assert_eq!(
        steps(&report),
        UNTIL_WAITING
            .into_iter()
            .filter(|step| *step != ("canary", Some("hold")))
            .chain([("successful", Some("revert"))])
            .collect::<Vec<_>>()
    );
}

/// On one node there is nothing to widen: two writes.
#[tokio::test(start_paused = true)]
async fn one_node_takes_two_writes() {
    let report = run(ScenarioKind::Healthy, 1, Compatibility::Fixed).await;
    assert_eq!(report.summary.result, "successful", "{:?}", report.summary);
    assert_eq!(report.summary.daemon_set_writes, 2, "{:?}", steps(&report));
}

/// A crash-looping canary: its restarts are recorded before the failure they cause.
#[tokio::test(start_paused = true)]
async fn a_crash_looping_canary_restarts_before_it_fails() {
    for compatibility in [Compatibility::Fixed, Compatibility::KubeVirt] {
        let report = run(ScenarioKind::CrashloopCanary, 5, compatibility).await;
        let last = report.timeline.last().unwrap();
        assert_eq!(last.phase, Phase::Failed, "{compatibility}");
        assert!(last.restarts >= 1, "{compatibility}: {last:?}");
    }
}

/// `--scenario rollback`: the crash-looping v2 fails on its canary and `onFailure: Rollback`
/// rolls v1 back out in place, supervised like a rollout (start, widen, revert), so the phases
/// read `failed`, `rollingBack`, `rolledBack`; only the canary ever left v1.
#[tokio::test(start_paused = true)]
async fn a_failed_rollout_is_rolled_back_in_place() {
    let report = run(ScenarioKind::Rollback, 20, Compatibility::Fixed).await;
    assert!(report.as_expected, "{:?}", report.summary);
    assert_eq!(report.summary.result, "rolledBack");
    let phases: Vec<&str> = steps(&report).into_iter().map(|(phase, _)| phase).collect();
    let failed = phases.iter().position(|p| *p == "failed").unwrap();
    let back = phases.iter().position(|p| *p == "rollingBack").unwrap();
    assert!(failed < back, "{phases:?}");
    assert_eq!(phases.last(), Some(&"rolledBack"));
    // v2's start and its canary's soak hold, then the rollback's start, widen and revert (a
    // rollback is not soaked).
    assert_eq!(report.summary.daemon_set_writes, 5, "{:?}", steps(&report));
    let last = report.timeline.last().unwrap();
    assert_eq!((last.updated_ready, last.desired), (20, 20));
}

/// `--scenario bad-metrics`: v2 is ready everywhere, but its agents report ten times v1's error
/// ratio; the canary's analysis fails the rollout (`AnalysisFailed`) with one pod replaced, and
/// the rest of the nodes never leave v1, on either driver (issue 46): during the Pods driver's
/// soak, or before the MaxUnavailable driver's widen, the DaemonSet controller held meanwhile.
#[tokio::test(start_paused = true)]
async fn an_analysis_fails_a_ready_release_by_its_error_ratio() {
    let pods = ScenarioConfig {
        driver: Driver::Pods,
        ..ScenarioConfig::default()
    };
    let report = failed_on(ScenarioKind::BadMetrics, 20, pods).await;
    assert_eq!(report.summary.pod_deletions, 1, "only the canary node");
    let phases: Vec<&str> = steps(&report).into_iter().map(|(phase, _)| phase).collect();
    assert_eq!(phases, ["started", "canary", "paused", "failed"]);
    let last = report.timeline.last().unwrap();
    assert_eq!((last.updated, last.desired), (1, 20));

    let report = failed_on(ScenarioKind::BadMetrics, 20, ScenarioConfig::default()).await;
    let steps = steps(&report);
    assert!(
        !steps.iter().any(|(_, write)| *write == Some("widen")),
        "never widened: {steps:?}"
    );
    assert_eq!(
        steps.last().map(|(phase, _)| *phase),
        Some("failed"),
        "{steps:?}"
    );
    let last = report.timeline.last().unwrap();
    assert_eq!((last.updated, last.desired), (1, 20));
}

/// Runs scenario `kind` on `nodes` nodes as `config` says, which must end `failed` with
/// `AnalysisFailed`.
async fn failed_on(kind: ScenarioKind, nodes: u32, config: ScenarioConfig) -> ScenarioReport {
    let scenario = Scenario::start(ScenarioConfig {
        nodes,
        kind,
        ..config
    })
    .await
    .unwrap();
    scenario.install().await.unwrap();
    let report = scenario.upgrade(|_| {}).await.unwrap();
    scenario.stop().await.unwrap();
    assert!(report.as_expected, "{:?}", report.summary);
    assert_eq!(report.summary.result, "failed");
    assert_eq!(report.summary.reason.as_deref(), Some("AnalysisFailed"));
    report
}
