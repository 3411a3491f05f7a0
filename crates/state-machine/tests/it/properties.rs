//! Properties of `decide()` over arbitrary observations and strategies: whatever the input, the
//! decision respects the crate invariants.

use crate::common::TableEvent;
use std::time::Duration;

use canary_state_machine::{
    Compatibility, CrashLoopSeen, DriftPolicy, DriftSeen, FailureReason, LiveMaxUnavailable,
    MaxUnavailable, Observation, Phase, PreviousPass, Strategy, SyncFlags, TlsFacts, WriteKind,
    decide, event_reason,
};
use proptest::prelude::*;
use proptest::strategy::Strategy as _;

fn max_unavailable() -> impl proptest::strategy::Strategy<Value = MaxUnavailable> {
    prop_oneof![
        (0u32..4).prop_map(MaxUnavailable::Count),
        (0u32..120).prop_map(MaxUnavailable::Percent),
    ]
}

fn strategy() -> impl proptest::strategy::Strategy<Value = Strategy> {
    (
        prop_oneof![Just(Compatibility::KubeVirt), Just(Compatibility::Fixed)],
        max_unavailable(),
        max_unavailable(),
        proptest::option::of(0u64..1_000),
        prop_oneof![Just(DriftPolicy::Revert), Just(DriftPolicy::Report)],
    )
        .prop_map(
            |(compatibility, canary, fast, deadline, drift_policy)| Strategy {
                compatibility,
                canary_max_unavailable: canary,
                fast_max_unavailable: fast,
                progress_deadline: deadline.map(Duration::from_secs),
                drift_policy,
            },
        )
}

fn live_max_unavailable() -> impl proptest::strategy::Strategy<Value = LiveMaxUnavailable> {
    prop_oneof![
        Just(LiveMaxUnavailable::NoRollingUpdate),
        Just(LiveMaxUnavailable::Unset),
        (-2i64..5).prop_map(LiveMaxUnavailable::Int),
        prop_oneof![
            Just("1".to_owned()),
            Just("10%".to_owned()),
            Just("100%".to_owned()),
            Just("25%".to_owned()),
            "[0-9%a-z]{0,4}",
        ]
        .prop_map(LiveMaxUnavailable::Str),
    ]
}

fn phase() -> impl proptest::strategy::Strategy<Value = Phase> {
    proptest::sample::select(Phase::ALL.to_vec())
}

fn previous() -> impl proptest::strategy::Strategy<Value = Option<PreviousPass>> {
    proptest::option::of(
        (
            phase(),
            proptest::option::of(proptest::sample::select(FailureReason::ALL.to_vec())),
            0u32..6,
            0u64..2_000,
            any::<bool>(),
        )
            .prop_map(
                |(phase, failure, updated_ready, secs, drifted)| PreviousPass {
                    phase,
                    failure,
                    updated_ready,
                    since_progress: Duration::from_secs(secs),
                    drifted,
                },
            ),
    )
}

prop_compose! {
    fn observation()(
        object_changed: bool,
        generation_known: bool,
        desired_pods in 0u32..6,
        updated_pods in 0u32..7,
        updated_ready_pods in 0u32..7,
        crash in proptest::option::of("[a-z]{1,5}"),
        live_max_unavailable in live_max_unavailable(),
        surge: bool,
        rollout_observed: bool,
        daemon_set_rolled_out: bool,
        drift in proptest::option::of("[a-z ]{1,8}"),
        tls in proptest::option::of((any::<bool>(), any::<bool>(), any::<bool>())),
        previous in previous(),
    ) -> Observation {
        Observation {
            name: "ds".into(),
            version: "v2".into(),
            object_changed,
            generation_known,
            desired_pods,
            updated_pods,
            updated_ready_pods,
            old_pods: desired_pods.saturating_sub(updated_pods),
            crash_loop: crash.map(|pod| CrashLoopSeen { pod, reason: "CrashLoopBackOff".into() }),
            live_max_unavailable,
            surge,
            surge_unsettled_nodes: None,
            surge_canary_alone: None,
            rollout_observed,
            daemon_set_rolled_out,
            drift: drift.map(|what| DriftSeen { what }),
            tls: tls.map(|(supported, live_has_flag, desired_has_cert_volume)| TlsFacts {
                supported,
                live_has_flag,
                desired_has_cert_volume,
            }),
            previous,
            ..Observation::default()
        }
    }
}

proptest! {
    #[test]
    fn decisions_respect_the_invariants(strategy in strategy(), observation in observation()) {
        let decision = decide(&strategy, &observation);
        let valid = strategy.validate().is_ok();
        let kind = decision.write.map(|write| write.kind);

        prop_assert_eq!(decision.phase == Phase::Failed, decision.failure.is_some());
        prop_assert_eq!(decision.phase == Phase::Failed, decision.error.is_some());
        prop_assert!(!decision.done || decision.phase == Phase::Successful);
        prop_assert!(!decision.action.record_generation || decision.write.is_some());
        prop_assert!(kind != Some(WriteKind::Create));
        if decision.failure.is_some() {
            prop_assert!(
                matches!(kind, None | Some(WriteKind::Hold | WriteKind::RevertHeld)),
                "a failed decision writes nothing but its hold, or a drift reverted under it"
            );
        }
        if !valid {
            prop_assert_eq!(decision.failure, Some(FailureReason::InvalidStrategy));
            return Ok(());
        }

        let flags = SyncFlags::of(&strategy, &observation);
        // A drift of the live DaemonSet (default table, desired state unchanged) is its own row.
        let drifted = strategy.compatibility == Compatibility::Fixed
            && !observation.object_changed
            && observation.drift.is_some();
        prop_assert_eq!(decision.drifted, drifted);
        prop_assert_eq!(decision.action.quiet, !flags.any() && !drifted);
        if decision.action.quiet {
            prop_assert!(decision.done && decision.write.is_none());
        }
        // Only a changed object (or a drift to revert) starts a canary, and it always does.
        let reverts = drifted && strategy.drift_policy == DriftPolicy::Revert;
        // A drift of a rollout failed for the release is written over under the failure's
        // hold, no start (issue 46), unless a retry is asked for with it.
        let under_failure = !observation.retry
            && observation.previous.is_some_and(|p| {
                p.phase == Phase::Failed && p.failure.is_some_and(FailureReason::is_sticky)
            });
        prop_assert_eq!(
            kind == Some(WriteKind::Start),
            observation.object_changed || (reverts && !under_failure)
        );
        prop_assert_eq!(kind == Some(WriteKind::RevertHeld), reverts && under_failure);
        if drifted && strategy.drift_policy == DriftPolicy::Report {
            prop_assert!(decision.write.is_none(), "a reported drift is never written over");
        }

        let ready = observation.updated_ready_pods;
        if kind == Some(WriteKind::Widen) {
            prop_assert!(ready > 0, "never widen while no updated pod is ready");
            prop_assert!(ready < observation.desired_pods);
            if strategy.compatibility == Compatibility::Fixed {
                prop_assert!(
                    observation.updated_pods < observation.desired_pods,
                    "a widen with every desired pod updated replaces nothing"
                );
            }
            prop_assert_eq!(
                decision.write.and_then(|write| write.max_unavailable),
                Some(strategy.fast_max_unavailable)
            );
        }
        if let Some(write) = decision.write {
            // The failure's hold moves the strategy type alone.
            let writes_max = write.kind != WriteKind::Hold
                && (write.kind != WriteKind::TlsStep || strategy.compatibility == Compatibility::Fixed);
            if writes_max {
                prop_assert!(write.max_unavailable.is_some());
            }
            prop_assert_eq!(write.template_edit.is_some(), write.kind == WriteKind::TlsStep);
        }

        if strategy.compatibility == Compatibility::Fixed {
            prop_assert_eq!(decision.phase == Phase::Successful, decision.done);
            prop_assert!(decision.failure != Some(FailureReason::UnexpectedState));
            if !observation.object_changed && !drifted && flags.any() {
                if observation.crash_loop.is_some() {
                    prop_assert_eq!(decision.phase, Phase::Failed, "a crash loop always fails");
                }
                if matches!(kind, Some(WriteKind::Widen | WriteKind::Finish | WriteKind::TlsStep)) {
                    prop_assert!(observation.rollout_observed);
                    prop_assert!(observation.crash_loop.is_none());
                }
            }
        }
    }
}

proptest! {
    /// The hold on request against the same pass not held: held, the only write is the one
    /// Hold write (never when the DaemonSet is on `OnDelete` already), a failure stays, a
    /// pass at rest stays at rest, anything else is `paused`; not held, the rows decide alone
    /// and the one extra write is the Resume of a hold the status records. Each announcement
    /// is made once.
    #[test]
    fn a_hold_on_request_only_ever_holds_or_resumes(
        strategy in strategy(),
        observation in observation(),
        held: bool,
        hold_recorded: bool,
        live_on_hold: bool,
    ) {
        // The same live strategy type on both sides: a failure's own hold write depends on it.
        let unheld = decide(&strategy, &Observation { live_on_hold, ..observation.clone() });
        let decision = decide(&strategy, &Observation { held, hold_recorded, live_on_hold, ..observation.clone() });
        let kind = decision.write.map(|write| write.kind);
        prop_assert_eq!(decision.held, held);
        let announced = decision.hold_event().cloned().as_ref().map(|event| event.reason);
        if held {
            prop_assert_eq!(announced, (!hold_recorded).then_some(event_reason::PAUSED));
            prop_assert!(kind.is_none() || kind == Some(WriteKind::Hold));
            if kind == Some(WriteKind::Hold) {
                prop_assert!(!live_on_hold);
                prop_assert_eq!(decision.phase, Phase::Paused);
            }
            if unheld.phase == Phase::Failed {
                prop_assert_eq!((decision.phase, decision.failure), (Phase::Failed, unheld.failure));
            } else if unheld.write.is_none() && !unheld.phase.is_in_progress() {
                prop_assert_eq!(decision.phase, unheld.phase);
                prop_assert!(decision.write.is_none());
            } else {
                prop_assert_eq!(decision.phase, Phase::Paused);
                prop_assert!(!decision.done && !decision.action.record_generation);
            }
        } else {
            prop_assert_eq!(announced, hold_recorded.then_some(event_reason::RESUMED));
            prop_assert_eq!(decision.phase, unheld.phase);
            // A drift announced while held is reverted at the resume as the start it is.
            let announced_drift = hold_recorded
                && unheld.phase != Phase::Failed
                && observation.previous.is_some_and(|p| p.drifted)
                && unheld.table_event().as_ref().is_some_and(|e| e.reason == event_reason::DRIFT_DETECTED);
            if announced_drift {
                prop_assert_eq!(
                    decision.table_event().as_ref().map(|e| e.reason),
                    Some(event_reason::ROLLOUT_STARTED)
                );
            } else {
                prop_assert_eq!(&decision.table_event(), &unheld.table_event());
            }
            // A failed rollout keeps its `OnDelete` (the failure's own, under the gates).
            let resumes = hold_recorded
                && live_on_hold
                && unheld.write.is_none()
                && !unheld.drifted
                && unheld.phase != Phase::Failed;
            if resumes {
                prop_assert_eq!(kind, Some(WriteKind::Resume));
            } else {
                prop_assert_eq!(decision.write, unheld.write);
            }
        }
    }
}
