//! Analysis on both drivers, all the time (issue 46): the MaxUnavailable driver's widen waits
//! until the canary's analysis passes (missing data holds it, a failure fails it), and on both
//! drivers a failed measurement at any time of the rollout fails it through the shared failure
//! row, before anything else is deleted or widened.

use std::time::Duration;

use canary_state_machine::{
    ANALYSIS_CANARY, ANALYSIS_WIDENED, AnalysisVerdict, Compatibility, FailureReason, HealthFacts,
    HealthPolicy, LiveMaxUnavailable, MaxUnavailable, Observation, Phase, PodObservation,
    PreviousPass, Stamp, StepAnalysis, StepPlan, Strategy, WriteKind, analysis_step, decide,
    decide_pods, event_reason,
};

use crate::common::{after_start, assert_first_event_says};
use crate::pods::{at, by_default, canary_then_hold, cluster, deleted_nodes, pods, previous};

fn analysis(step: u32, verdict: AnalysisVerdict, announced: bool) -> Option<StepAnalysis> {
    Some(StepAnalysis {
        step,
        verdict,
        announced,
    })
}

fn failed() -> AnalysisVerdict {
    AnalysisVerdict::Failed {
        metric: "error-ratio".into(),
        detail: "0.1 is 10 times the baseline's 0.01, above maxRatio 2".into(),
    }
}

fn inconclusive() -> AnalysisVerdict {
    AnalysisVerdict::Inconclusive {
        metric: "error-ratio".into(),
        detail: "no data (the query matched no series)".into(),
    }
}

fn event_reasons<A>(decision: &canary_state_machine::Decision<A>) -> Vec<&str> {
    decision.events.iter().map(|e| e.reason).collect()
}

/// The MaxUnavailable driver's canary, ready on 1 of 3 nodes at `maxUnavailable` 1, about
/// to widen, with the canary's analysis at `step`.
fn canary_ready(analysis: Option<StepAnalysis>) -> Observation {
    Observation {
        previous: Some(previous(Phase::Canary)),
        live_max_unavailable: LiveMaxUnavailable::Int(1),
        analysis,
        ..after_start(3, 1)
    }
}

/// `observation` with the DaemonSet controller held (`OnDelete`, the hold's write in).
fn held(observation: Observation) -> Observation {
    Observation {
        live_on_hold: true,
        ..observation
    }
}

/// The same rollout widened: 2 of 3 updated at `10%`.
fn widened(analysis: Option<StepAnalysis>) -> Observation {
    Observation {
        previous: Some(previous(Phase::Increasing)),
        live_max_unavailable: LiveMaxUnavailable::Str("10%".into()),
        generation_known: true,
        analysis,
        ..after_start(3, 2)
    }
}

#[test]
fn max_unavailable_stretches_are_the_canary_then_the_widened_rollout() {
    let strategy = Strategy::default();
    assert_eq!(
        analysis_step(&strategy, &canary_ready(None)),
        ANALYSIS_CANARY
    );
    assert_eq!(analysis_step(&strategy, &widened(None)), ANALYSIS_WIDENED);
    // The finish writes the canary value back with every pod updated: still the widened
    // rollout's measurements, not a new canary's.
    let finishing = Observation {
        live_max_unavailable: LiveMaxUnavailable::Int(1),
        ..after_start(3, 3)
    };
    assert_eq!(analysis_step(&strategy, &finishing), ANALYSIS_WIDENED);
    // KubeVirt mode reads the live value as the reference does (`IntValue() == 1`).
    let kubevirt = Strategy {
        compatibility: Compatibility::KubeVirt,
        ..Strategy::default()
    };
    assert_eq!(
        analysis_step(&kubevirt, &canary_ready(None)),
        ANALYSIS_CANARY
    );
    assert_eq!(analysis_step(&kubevirt, &widened(None)), ANALYSIS_WIDENED);
}

#[test]
fn max_unavailable_the_widen_waits_until_the_canarys_analysis_passes() {
    let strategy = Strategy::default();
    // Without analysis, as before: the ready canary widens.
    let before = decide(&strategy, &canary_ready(None));
    assert_eq!(before.write.map(|w| w.kind), Some(WriteKind::Widen));
    // Nothing measured yet, or not every metric passed: the DaemonSet controller is held
    // (at maxUnavailable 1 it would replace the next pod as soon as the canary is available),
    // and then nothing more is written until the analysis passes.
    for verdict in [AnalysisVerdict::Pending, inconclusive()] {
        let observation = canary_ready(analysis(ANALYSIS_CANARY, verdict.clone(), true));
        let decision = decide(&strategy, &observation);
        assert_eq!(decision.phase, Phase::Canary, "{verdict:?}");
        assert_eq!(
            decision.write.map(|w| w.kind),
            Some(WriteKind::Hold),
            "{verdict:?}"
        );
        assert!(decision.failure.is_none() && decision.events.is_empty());
        let held = decide(&strategy, &held(observation));
        assert_eq!(
            (held.phase, held.write),
            (Phase::Canary, None),
            "{verdict:?}"
        );
        assert!(held.failure.is_none() && held.events.is_empty());
    }
    // Held before the canary is ready too: its first pod is enough.
    let starting = Observation {
        updated_ready_pods: 0,
        ..canary_ready(analysis(ANALYSIS_CANARY, AnalysisVerdict::Pending, false))
    };
    assert_eq!(
        decide(&strategy, &starting).write.map(|w| w.kind),
        Some(WriteKind::Hold)
    );
    // The widened stretch's verdict is not the canary's: it holds too.
    let elsewhere = decide(
        &strategy,
        &held(canary_ready(analysis(
            ANALYSIS_WIDENED,
            AnalysisVerdict::Passing,
            false,
        ))),
    );
    assert_eq!(elsewhere.write, None);
    // Every metric passed once: the widen, whose write (RollingUpdate at 10%) ends the hold.
    let passing = decide(
        &strategy,
        &held(canary_ready(analysis(
            ANALYSIS_CANARY,
            AnalysisVerdict::Passing,
            false,
        ))),
    );
    assert_eq!(passing.phase, Phase::Increasing);
    assert_eq!(
        passing.write.and_then(|w| w.max_unavailable),
        Some(MaxUnavailable::TEN_PERCENT)
    );
}

#[test]
fn max_unavailable_an_inconclusive_canary_is_announced_once() {
    let strategy = Strategy::default();
    let first = decide(
        &strategy,
        &canary_ready(analysis(ANALYSIS_CANARY, inconclusive(), false)),
    );
    assert_eq!(first.phase, Phase::Canary);
    assert_eq!(first.write.map(|w| w.kind), Some(WriteKind::Hold));
    let held_first = decide(
        &strategy,
        &held(canary_ready(analysis(
            ANALYSIS_CANARY,
            inconclusive(),
            false,
        ))),
    );
    assert_eq!(
        event_reasons(&held_first),
        [event_reason::ANALYSIS_INCONCLUSIVE]
    );
    assert_eq!(event_reasons(&first), [event_reason::ANALYSIS_INCONCLUSIVE]);
    assert!(
        first.events[0].message.contains("in the canary"),
        "{}",
        first.events[0].message
    );
}

#[test]
fn max_unavailable_a_failed_canary_analysis_fails_before_the_widen_and_stops_the_daemonset_controller()
 {
    let strategy = Strategy::default();
    let observation = canary_ready(analysis(ANALYSIS_CANARY, failed(), false));
    let decision = decide(&strategy, &observation);
    assert_eq!(decision.phase, Phase::Failed);
    assert_eq!(decision.failure, Some(FailureReason::AnalysisFailed));
    // No widen, and the DaemonSet controller stops too: at maxUnavailable 1 it would go on
    // replacing pods by itself.
    assert_eq!(decision.write.map(|w| w.kind), Some(WriteKind::Hold));
    assert_eq!(event_reasons(&decision), [event_reason::ANALYSIS_FAILED]);
    assert_first_event_says(
        &decision.events,
        "analysis metric error-ratio failed in the canary: 0.1 is 10 times",
    );
    // Sticky, silent, nothing written again, whatever the analysis says next.
    let after = Observation {
        previous: Some(PreviousPass {
            failure: Some(FailureReason::AnalysisFailed),
            ..previous(Phase::Failed)
        }),
        live_on_hold: true,
        ..canary_ready(analysis(ANALYSIS_CANARY, AnalysisVerdict::Passing, false))
    };
    let stays = decide(&strategy, &after);
    assert_eq!(stays.failure, Some(FailureReason::AnalysisFailed));
    assert!(stays.events.is_empty() && stays.write.is_none());
}

#[test]
fn max_unavailable_a_failed_measurement_after_the_widen_fails_too() {
    let strategy = Strategy::default();
    let decision = decide(
        &strategy,
        &widened(analysis(ANALYSIS_WIDENED, failed(), false)),
    );
    assert_eq!(decision.failure, Some(FailureReason::AnalysisFailed));
    assert_eq!(decision.write.map(|w| w.kind), Some(WriteKind::Hold));
    assert_first_event_says(&decision.events, "in the widened rollout");
    // Pending or inconclusive after the widen holds nothing: the widen is written already.
    let going_on = decide(
        &strategy,
        &widened(analysis(ANALYSIS_WIDENED, inconclusive(), true)),
    );
    assert!(going_on.failure.is_none());
}

#[test]
fn max_unavailable_the_reference_table_gates_the_widen_and_keeps_the_failure() {
    let kubevirt = Strategy {
        compatibility: Compatibility::KubeVirt,
        ..Strategy::default()
    };
    let pending = decide(
        &kubevirt,
        &canary_ready(analysis(ANALYSIS_CANARY, AnalysisVerdict::Pending, false)),
    );
    assert_eq!((pending.phase, pending.write), (Phase::Canary, None));
    let passing = decide(
        &kubevirt,
        &canary_ready(analysis(ANALYSIS_CANARY, AnalysisVerdict::Passing, false)),
    );
    assert_eq!(passing.write.map(|w| w.kind), Some(WriteKind::Widen));
    let failing = decide(
        &kubevirt,
        &canary_ready(analysis(ANALYSIS_CANARY, failed(), false)),
    );
    assert_eq!(failing.failure, Some(FailureReason::AnalysisFailed));
    // The reference re-decides every failure; this one stays, or it would widen once the
    // measurements were forgotten (a restart).
    let after = Observation {
        previous: Some(PreviousPass {
            failure: Some(FailureReason::AnalysisFailed),
            ..previous(Phase::Failed)
        }),
        ..canary_ready(analysis(ANALYSIS_CANARY, AnalysisVerdict::Pending, false))
    };
    assert_eq!(
        decide(&kubevirt, &after).failure,
        Some(FailureReason::AnalysisFailed)
    );
}

#[test]
fn max_unavailable_the_widen_waits_for_the_soak_and_the_analysis_both() {
    let strategy = Strategy::default();
    let soaking = HealthFacts {
        policy: HealthPolicy {
            canary_soak: Duration::from_secs(30),
            ..HealthPolicy::default()
        },
        now: Stamp(1_010),
        unhealthy: Vec::new(),
        canary_ready_since: Some(Stamp(1_000)),
        ..HealthFacts::default()
    };
    let soaked = HealthFacts {
        now: Stamp(1_100),
        ..soaking.clone()
    };
    let with = |health: &HealthFacts, verdict: AnalysisVerdict| Observation {
        health: Some(health.clone()),
        live_on_hold: true,
        ..canary_ready(analysis(ANALYSIS_CANARY, verdict, false))
    };
    // Not held yet: the hold, back when the soak ends.
    let decision = decide(
        &strategy,
        &Observation {
            live_on_hold: false,
            ..with(&soaking, AnalysisVerdict::Passing)
        },
    );
    assert_eq!(decision.write.map(|w| w.kind), Some(WriteKind::Hold));
    assert_eq!(decision.action.wake_after, Some(Duration::from_secs(20)));
    let decision = decide(
        &strategy,
        &Observation {
            live_on_hold: false,
            ..with(&soaked, AnalysisVerdict::Pending)
        },
    );
    assert_eq!(decision.write.map(|w| w.kind), Some(WriteKind::Hold));
    assert_eq!(
        decision.action.wake_after, None,
        "a measurement brings the pass"
    );
    // Passing, still soaking: back when the soak ends.
    let decision = decide(&strategy, &with(&soaking, AnalysisVerdict::Passing));
    assert_eq!((decision.phase, decision.write), (Phase::Canary, None));
    assert_eq!(decision.action.wake_after, Some(Duration::from_secs(20)));
    // Soaked, analysis pending: holds, the next measurement brings the pass.
    let decision = decide(&strategy, &with(&soaked, AnalysisVerdict::Pending));
    assert_eq!((decision.phase, decision.write), (Phase::Canary, None));
    // Both: the widen.
    let decision = decide(&strategy, &with(&soaked, AnalysisVerdict::Passing));
    assert_eq!(decision.write.map(|w| w.kind), Some(WriteKind::Widen));
    // A failure does not wait for the soak.
    let decision = decide(&strategy, &with(&soaking, failed()));
    assert_eq!(decision.failure, Some(FailureReason::AnalysisFailed));
}

/// The Pods driver's default steps (`[{nodes: 1}, {nodes: 100%}]`), the canary `n02` ready
/// in the first step, its analysis at `verdict`.
fn pods_canary(verdict: AnalysisVerdict, announced: bool) -> PodObservation {
    PodObservation {
        analysis: analysis(0, verdict, announced),
        ..at(0, Phase::Canary, cluster(2, 1))
    }
}

#[test]
fn pods_the_next_step_waits_until_the_canarys_analysis_passes() {
    // Without analysis the canary step ends and the next step deletes.
    let without = by_default(&at(0, Phase::Canary, cluster(2, 1)));
    assert_eq!(without.action.step, 1);
    for verdict in [AnalysisVerdict::Pending, inconclusive()] {
        let decision = by_default(&pods_canary(verdict.clone(), true));
        assert_eq!(
            (decision.phase, decision.action.step),
            (Phase::Canary, 0),
            "{verdict:?}"
        );
        assert!(deleted_nodes(&decision).is_empty());
    }
    let first = by_default(&pods_canary(inconclusive(), false));
    assert_eq!(event_reasons(&first), [event_reason::ANALYSIS_INCONCLUSIVE]);
    let passing = by_default(&pods_canary(AnalysisVerdict::Passing, false));
    assert_eq!(passing.action.step, 1);
    assert!(!deleted_nodes(&passing).is_empty());
    // A pause step after the canary judges it there: the canary step ends at once.
    let paused_next = decide_pods(
        &pods(),
        &canary_then_hold(),
        &pods_canary(AnalysisVerdict::Pending, false),
    );
    assert_eq!(
        (paused_next.phase, paused_next.action.step),
        (Phase::Paused, 1)
    );
}

#[test]
fn pods_a_failed_measurement_in_a_nodes_step_fails_and_deletes_nothing() {
    // The canary step, before the canary is even ready.
    let mut nodes = cluster(2, 1);
    if let Some(pod) = nodes[2].pod.as_mut() {
        pod.ready = false;
    }
    let observation = PodObservation {
        analysis: analysis(0, failed(), false),
        ..at(0, Phase::Canary, nodes)
    };
    let decision = by_default(&observation);
    assert_eq!(decision.failure, Some(FailureReason::AnalysisFailed));
    assert!(deleted_nodes(&decision).is_empty());
    assert_first_event_says(&decision.events, "failed in step 1 of 2: 0.1 is 10 times");
    // The last nodes step, half done.
    let observation = PodObservation {
        analysis: analysis(1, failed(), false),
        ..at(1, Phase::Increasing, cluster(2, 2))
    };
    let decision = decide_pods(&pods(), &StepPlan::default(), &observation);
    assert_eq!(decision.phase, Phase::Failed);
    assert_eq!(decision.failure, Some(FailureReason::AnalysisFailed));
    assert!(deleted_nodes(&decision).is_empty());
    // Pending or inconclusive in a later nodes step holds nothing.
    let observation = PodObservation {
        analysis: analysis(1, inconclusive(), true),
        ..at(1, Phase::Increasing, cluster(2, 2))
    };
    let decision = decide_pods(&pods(), &StepPlan::default(), &observation);
    assert_eq!(decision.phase, Phase::Increasing);
    assert!(!deleted_nodes(&decision).is_empty());
}
