//! The reference scenarios (spec section 8) against the default strategy, each test saying how
//! the default differs from `Strategy::kubevirt()` (or that it does not), then the quirk fixes.

use std::time::Duration;

use canary_state_machine::{
    Compatibility, CrashLoopSeen, Decision, DriftPolicy, DriftSeen, EventType, FailureReason,
    LiveMaxUnavailable, MaxUnavailable, Observation, Phase, PreviousPass, Strategy, TemplateEdit,
    TlsFacts, WriteKind, decide, decide_create, event_reason,
};

use crate::common::{
    NAME, TableEvent, VERSION, after_start, assert_no_write_in, assert_starts_the_canary, handler,
    write,
};

fn fixed(observation: &Observation) -> Decision {
    decide(&Strategy::default(), observation)
}

fn crash() -> Option<CrashLoopSeen> {
    Some(CrashLoopSeen {
        pod: "virt-handler-abcde".into(),
        reason: "CrashLoopBackOff".into(),
    })
}

fn previous(
    phase: Phase,
    failure: Option<FailureReason>,
    ready: u32,
    secs: u64,
) -> Option<PreviousPass> {
    Some(PreviousPass {
        phase,
        failure,
        updated_ready: ready,
        since_progress: Duration::from_secs(secs),
        drifted: false,
    })
}

fn assert_started(decision: &Decision) {
    assert_starts_the_canary(decision);
    assert_eq!(
        decision.table_event().as_ref().unwrap().reason,
        event_reason::ROLLOUT_STARTED
    );
}

/// Difference (kubevirt#18666): the revert pass is `waiting` with done = false.
fn assert_reverting(decision: &Decision) {
    assert_eq!(decision.phase, Phase::Waiting);
    assert_eq!(
        decision.write,
        Some(write(WriteKind::Finish, Some(MaxUnavailable::ONE), None))
    );
    assert!(decision.action.record_generation);
    assert!(!decision.done, "done only once the revert is observed");
    assert_eq!(decision.error, None);
}

/// The pass after the revert: generation recorded, maxUnavailable back at 1.
fn assert_quiet_completion(previous_phase: Phase, desired: u32) {
    let next = Observation {
        desired_pods: desired,
        updated_pods: desired,
        updated_ready_pods: desired,
        previous: previous(previous_phase, None, desired, 1),
        ..handler()
    };
    let decision = fixed(&next);
    assert!(decision.action.quiet);
    assert!(decision.done);
    assert_eq!(decision.phase, Phase::Successful);
    assert_eq!(decision.write, None);
    assert_eq!(
        decision.table_event().unwrap().reason,
        event_reason::ROLLOUT_COMPLETED
    );
}

#[test]
fn scenario_01_create_is_supervised_and_not_done_yet() {
    let decision = decide_create(&Strategy::default(), NAME, VERSION);
    assert_eq!(decision.phase, Phase::Started);
    assert_eq!(
        decision.write,
        Some(write(WriteKind::Create, Some(MaxUnavailable::ONE), None))
    );
    assert!(
        !decision.action.record_generation,
        "the next passes supervise the new pods"
    );
    assert!(!decision.done);
    // The passes that follow: unknown generation (nothing recorded), pods coming up.
    assert_no_write_in(&fixed(&after_start(2, 0)), Phase::Canary);
    assert_reverting(&fixed(&after_start(1, 1)));
    assert_quiet_completion(Phase::Waiting, 1);
}

#[test]
fn scenario_02_same_as_reference_every_metadata_change_patches() {
    let with_flag = Observation {
        object_changed: true,
        desired_pods: 1,
        ..handler()
    };
    assert_started(&fixed(&with_flag));
    assert_started(&fixed(&Observation {
        generation_known: false,
        ..with_flag
    }));
}

#[test]
fn scenario_03_reverts_then_reports_done_on_the_next_pass() {
    assert_reverting(&fixed(&after_start(1, 1)));
    assert_quiet_completion(Phase::Waiting, 1);
}

#[test]
fn scenario_04_same_as_reference_waits_during_ongoing_rollout() {
    let observation = Observation {
        live_max_unavailable: LiveMaxUnavailable::Str("10%".into()),
        ..after_start(2, 1)
    };
    assert_no_write_in(&fixed(&observation), Phase::Waiting);
}

#[test]
fn scenario_05_and_06_same_as_reference_start_at_one() {
    for live in [
        LiveMaxUnavailable::Unset,
        LiveMaxUnavailable::Str("10%".into()),
    ] {
        assert_started(&fixed(&Observation {
            object_changed: true,
            desired_pods: 1,
            live_max_unavailable: live,
            ..handler()
        }));
    }
}

#[test]
fn scenario_07_and_08_same_as_reference_wait_in_canary() {
    assert_no_write_in(&fixed(&after_start(1, 0)), Phase::Canary);
    assert_no_write_in(
        &fixed(&Observation {
            updated_pods: 1,
            ..after_start(1, 0)
        }),
        Phase::Canary,
    );
}

#[test]
fn scenario_09_same_as_reference_widens_from_unset() {
    let decision = fixed(&Observation {
        live_max_unavailable: LiveMaxUnavailable::Unset,
        ..after_start(2, 1)
    });
    assert_eq!(decision.phase, Phase::Increasing);
    assert_eq!(
        decision.write,
        Some(write(
            WriteKind::Widen,
            Some(MaxUnavailable::TEN_PERCENT),
            None
        ))
    );
    assert!(decision.action.record_generation);
    assert!(!decision.done);
}

#[test]
fn scenario_10_crash_fails_names_the_pod_and_sticks_without_repeating() {
    let failing = Observation {
        updated_pods: 1,
        crash_loop: crash(),
        ..after_start(1, 0)
    };
    let first = fixed(&failing);
    assert_eq!(first.phase, Phase::Failed);
    assert_eq!(first.failure, Some(FailureReason::CanaryCrashLooping));
    assert_eq!(first.write, None);
    assert!(!first.done);
    assert_eq!(
        first.error.as_deref(),
        Some(
            "daemonSet virt-handler: rollout of v1.6.0 failed: updated pod virt-handler-abcde is crash-looping (CrashLoopBackOff)"
        )
    );
    let event = first.table_event().unwrap();
    assert_eq!(
        (event.type_, event.reason),
        (EventType::Warning, "FailedUpdate")
    );

    // Difference: the failure sticks even once the pod stops crash-looping, with no new event.
    let later = Observation {
        crash_loop: None,
        updated_ready_pods: 1,
        previous: previous(
            Phase::Failed,
            Some(FailureReason::CanaryCrashLooping),
            0,
            60,
        ),
        ..failing
    };
    let stuck = fixed(&later);
    assert_eq!(stuck.phase, Phase::Failed);
    assert_eq!(stuck.failure, Some(FailureReason::CanaryCrashLooping));
    assert_eq!(stuck.write, None);
    assert_eq!(stuck.table_event(), None);
    assert!(stuck.error.is_some());

    // A new target restarts the canary.
    let retarget = Observation {
        object_changed: true,
        ..later
    };
    assert_started(&fixed(&retarget));
}

#[test]
fn scenario_11_same_as_reference_waits_at_ten_percent() {
    assert_no_write_in(
        &fixed(&Observation {
            generation_known: true,
            live_max_unavailable: LiveMaxUnavailable::Str("10%".into()),
            ..after_start(2, 1)
        }),
        Phase::Waiting,
    );
}

#[test]
fn scenario_12_completion_is_reported_one_pass_after_the_revert() {
    let revert = fixed(&Observation {
        live_max_unavailable: LiveMaxUnavailable::Str("10%".into()),
        generation_known: true,
        ..after_start(4, 4)
    });
    assert_reverting(&revert);
    assert_eq!(
        revert.table_event(),
        None,
        "completion is announced when observed"
    );
    assert_quiet_completion(Phase::Waiting, 4);
}

#[test]
fn scenario_13_detach_is_rolled_out_under_canary_supervision() {
    let decision = fixed(&Observation {
        tls: Some(TlsFacts {
            supported: true,
            live_has_flag: true,
            desired_has_cert_volume: true,
        }),
        ..after_start(1, 1)
    });
    assert_eq!(decision.phase, Phase::Started);
    assert_eq!(
        decision.write,
        Some(write(
            WriteKind::TlsStep,
            Some(MaxUnavailable::ONE),
            Some(TemplateEdit::DetachCertSecret)
        ))
    );
    assert!(
        !decision.action.record_generation,
        "the next passes supervise the re-roll"
    );
    assert!(!decision.done);
    assert_eq!(
        decision.table_event().unwrap().reason,
        event_reason::TLS_MIGRATION_STEP
    );
}

#[test]
fn scenario_14_tls_flag_is_rolled_out_under_canary_supervision() {
    let decision = fixed(&Observation {
        tls: Some(TlsFacts {
            supported: true,
            live_has_flag: false,
            desired_has_cert_volume: true,
        }),
        live_max_unavailable: LiveMaxUnavailable::Str("10%".into()),
        ..after_start(3, 3)
    });
    assert_eq!(decision.phase, Phase::Started);
    assert_eq!(
        decision.write,
        Some(write(
            WriteKind::TlsStep,
            Some(MaxUnavailable::ONE),
            Some(TemplateEdit::InsertTlsFlag)
        ))
    );
    assert!(!decision.action.record_generation);
    // The re-roll of the flag: canary first, even though all old-target pods were ready.
    let re_roll = Observation {
        tls: Some(TlsFacts {
            supported: true,
            live_has_flag: true,
            desired_has_cert_volume: true,
        }),
        live_max_unavailable: LiveMaxUnavailable::Int(1),
        ..after_start(3, 0)
    };
    assert_no_write_in(&fixed(&re_roll), Phase::Canary);
}

#[test]
fn every_pod_updated_but_one_not_ready_waits_at_the_canary_value_instead_of_widening() {
    // Soak seed 34003139: the finish write went out (maxUnavailable back to 1), then a node
    // joined and the DaemonSet controller created its pod on the target, not ready yet. No
    // old pod is left to replace, so a widen would only cost a write and its revert.
    let joined = Observation {
        updated_pods: 4,
        previous: previous(Phase::Waiting, None, 3, 5),
        ..after_start(4, 3)
    };
    assert_no_write_in(&fixed(&joined), Phase::Waiting);
    // An old pod still there (3 of 4 updated, 2 ready): the canary is ready, so it widens.
    let old_left = Observation {
        updated_pods: 3,
        ..after_start(4, 2)
    };
    assert_eq!(
        fixed(&old_left).write.map(|w| w.kind),
        Some(WriteKind::Widen)
    );
    // Once the new pod is ready: the finish, as on any rollout.
    let ready = Observation {
        updated_pods: 4,
        ..after_start(4, 4)
    };
    assert_eq!(fixed(&ready).write.map(|w| w.kind), Some(WriteKind::Finish));
    // The reference keeps its rule (row 3a: widen whenever 0 < U < D at the literal 1).
    let reference = decide(&Strategy::kubevirt(), &joined);
    assert_eq!(reference.write.map(|w| w.kind), Some(WriteKind::Widen));
}

#[test]
fn fix_quirk_01_desired_zero_is_successful() {
    assert_reverting(&fixed(&after_start(0, 0)));
    assert_quiet_completion(Phase::Waiting, 0);
}

#[test]
fn fix_quirk_02_more_ready_than_desired_waits() {
    let decision = fixed(&after_start(2, 3));
    assert_no_write_in(&decision, Phase::Waiting);
    assert_eq!(decision.failure, None);
}

#[test]
fn fix_quirk_02_more_ready_than_desired_never_hits_the_deadline() {
    // kubevirt#10254: a misscheduled updated pod keeps U above D; the count cannot move, so a
    // progress deadline would fail a rollout that has nothing wrong with it.
    let stuck = Observation {
        previous: previous(Phase::Waiting, None, 3, 3_600),
        ..after_start(2, 3)
    };
    let decision = fixed(&stuck);
    assert_no_write_in(&decision, Phase::Waiting);
    assert_eq!(decision.failure, None);
}

#[test]
fn fix_quirk_02_more_ready_than_desired_finishes_once_the_daemon_set_is_rolled_out() {
    let rolled_out = Observation {
        daemon_set_rolled_out: true,
        ..after_start(2, 3)
    };
    assert_reverting(&fixed(&rolled_out));
}

fn drifted(policy: DriftPolicy, previous_pass: Option<PreviousPass>) -> Decision {
    let strategy = Strategy {
        drift_policy: policy,
        ..Strategy::default()
    };
    decide(
        &strategy,
        &Observation {
            generation_known: false,
            desired_pods: 3,
            updated_pods: 3,
            updated_ready_pods: 3,
            drift: Some(DriftSeen {
                what: "image of container agent: agent:v2 → agent:v1".into(),
            }),
            previous: previous_pass,
            ..handler()
        },
    )
}

#[test]
fn a_drift_is_reverted_canary_first() {
    // A hand edit (`kubectl set image`, `rollout undo`) of a DaemonSet at rest: row 1 again,
    // with a Warning naming what changed; never the 10% jump of row 3a.
    let decision = drifted(
        DriftPolicy::Revert,
        previous(Phase::Successful, None, 3, 60),
    );
    assert!(decision.drifted);
    assert_eq!(decision.phase, Phase::Started);
    assert_eq!(
        decision.write,
        Some(write(WriteKind::Start, Some(MaxUnavailable::ONE), None))
    );
    assert!(!decision.action.record_generation);
    let event = decision.table_event().unwrap();
    assert_eq!(
        (event.type_, event.reason),
        (EventType::Warning, event_reason::DRIFT_DETECTED)
    );
    assert!(
        event.message.contains("agent:v2 → agent:v1"),
        "{}",
        event.message
    );
}

/// Issue 46 (simulation invariant 21): a hand edit of a DaemonSet whose rollout failed for a
/// reason that says something about the release is written over under the failure's hold
/// (`RevertHeld`: `OnDelete`), and the rollout stays failed: a start would roll the failed
/// release out again from its canary. A failure that says nothing about the release (a
/// refused write, a bad strategy) is no hold: the revert is the start, as at rest.
/// Rows: (previous failure, phase, failure, write kind).
#[test]
fn a_drift_of_a_failed_rollout_is_reverted_under_the_failures_hold() {
    use FailureReason::*;
    let rows = [
        (
            CanaryCrashLooping,
            Phase::Failed,
            Some(CanaryCrashLooping),
            WriteKind::RevertHeld,
        ),
        (
            ProgressDeadlineExceeded,
            Phase::Failed,
            Some(ProgressDeadlineExceeded),
            WriteKind::RevertHeld,
        ),
        (
            AnalysisFailed,
            Phase::Failed,
            Some(AnalysisFailed),
            WriteKind::RevertHeld,
        ),
        (
            NodeUnhealthy,
            Phase::Failed,
            Some(NodeUnhealthy),
            WriteKind::RevertHeld,
        ),
        (
            NeighboursDisrupted,
            Phase::Failed,
            Some(NeighboursDisrupted),
            WriteKind::RevertHeld,
        ),
        (WriteRejected, Phase::Started, None, WriteKind::Start),
    ];
    for (failure, phase, stays, kind) in rows {
        let decision = drifted(
            DriftPolicy::Revert,
            previous(Phase::Failed, Some(failure), 1, 60),
        );
        assert!(decision.drifted, "{failure}");
        assert_eq!(
            (decision.phase, decision.failure),
            (phase, stays),
            "{failure}"
        );
        assert_eq!(
            decision.write,
            Some(write(kind, Some(MaxUnavailable::ONE), None)),
            "{failure}"
        );
        assert!(!decision.action.record_generation, "{failure}");
        let event = decision.table_event().unwrap();
        assert_eq!(event.reason, event_reason::DRIFT_DETECTED, "{failure}");
        if kind == WriteKind::RevertHeld {
            assert!(
                event.message.contains("under the hold")
                    && event.message.contains(failure.as_str()),
                "{}",
                event.message
            );
        }
    }
}

/// A failed status without its reason (read during a rollback, whose decided phase is
/// recorded apart) names no failure to hold for: its drift is reverted by a start, as at
/// rest, never held under a reason made up (CI seed 130 reported `CanaryCrashLooping`).
#[test]
fn a_drift_of_a_failure_without_reason_is_reverted_by_a_start() {
    let decision = drifted(DriftPolicy::Revert, previous(Phase::Failed, None, 1, 60));
    assert_eq!((decision.phase, decision.failure), (Phase::Started, None));
    assert_eq!(decision.write.map(|w| w.kind), Some(WriteKind::Start));
}

#[test]
fn a_reported_drift_writes_nothing_and_warns_once() {
    let first = drifted(
        DriftPolicy::Report,
        previous(Phase::Successful, None, 3, 60),
    );
    assert!(first.drifted);
    assert_eq!((first.phase, first.write), (Phase::Successful, None));
    assert!(first.done);
    assert_eq!(
        first.table_event().map(|e| e.reason),
        Some(event_reason::DRIFT_DETECTED)
    );
    let mut seen = previous(Phase::Successful, None, 3, 60);
    if let Some(pass) = seen.as_mut() {
        pass.drifted = true;
    }
    let again = drifted(DriftPolicy::Report, seen);
    assert!(again.drifted && again.write.is_none() && again.table_event().is_none());
    // A failed rollout stays failed while drifted.
    let failed = drifted(
        DriftPolicy::Report,
        previous(
            Phase::Failed,
            Some(FailureReason::CanaryCrashLooping),
            1,
            60,
        ),
    );
    assert_eq!(
        (failed.phase, failed.failure),
        (Phase::Failed, Some(FailureReason::CanaryCrashLooping))
    );
}

/// Regression, fuzz target `decide` (input `crash-40f6d208f6d093a2c4961d4e7291dfe465eb3af3`: a
/// reported drift after a pass that failed with `InvalidSpec`): the Report hold kept the
/// previous failure whatever it was, so `decide` answered `InvalidSpec`, which only the caller
/// decides, and a spec (or strategy) fixed without changing the desired DaemonSet stayed
/// "failed" until the next target. A configuration failure is not held (the configuration is
/// valid, or this pass would not be here): as on a first pass. Rollout failures still are.
/// Rows: (previous failure, phase, failure, done).
#[test]
fn a_reported_drift_holds_rollout_failures_not_fixed_configuration_failures() {
    use FailureReason::*;
    let rows = [
        (InvalidSpec, Phase::Successful, None, true),
        (InvalidStrategy, Phase::Successful, None, true),
        (
            CanaryCrashLooping,
            Phase::Failed,
            Some(CanaryCrashLooping),
            false,
        ),
        (
            ProgressDeadlineExceeded,
            Phase::Failed,
            Some(ProgressDeadlineExceeded),
            false,
        ),
        (WriteRejected, Phase::Failed, Some(WriteRejected), false),
        // Only the reference table gives it: a status left by `compatibility: KubeVirt`
        // (found by the decide property).
        (UnexpectedState, Phase::Successful, None, true),
    ];
    for (failure, phase, held, done) in rows {
        let decision = drifted(
            DriftPolicy::Report,
            previous(Phase::Failed, Some(failure), 3, 60),
        );
        assert!(decision.drifted, "{failure}");
        assert_eq!(decision.write, None, "{failure}");
        assert_eq!(
            (decision.phase, decision.failure, decision.done),
            (phase, held, done),
            "{failure}"
        );
    }
}

#[test]
fn a_change_of_the_desired_state_wins_over_a_drift() {
    let strategy = Strategy {
        drift_policy: DriftPolicy::Report,
        ..Strategy::default()
    };
    let decision = decide(
        &strategy,
        &Observation {
            object_changed: true,
            drift: Some(DriftSeen { what: "x".into() }),
            desired_pods: 3,
            ..handler()
        },
    );
    assert_started(&decision);
    assert!(!decision.drifted);
}

#[test]
fn kubevirt_mode_does_not_look_at_drift() {
    // The reference reverts a hand edit at its next row 3a or 4 write, unsupervised (quirk 5).
    let decision = decide(
        &Strategy::kubevirt(),
        &Observation {
            drift: Some(DriftSeen { what: "x".into() }),
            ..Observation::default()
        },
    );
    assert!(decision.action.quiet && !decision.drifted);
}

#[test]
fn fix_quirk_07_crash_check_keeps_watching_after_the_canary() {
    for live in [
        LiveMaxUnavailable::Int(1),
        LiveMaxUnavailable::Str("10%".into()),
    ] {
        let decision = fixed(&Observation {
            updated_pods: 3,
            crash_loop: crash(),
            live_max_unavailable: live,
            ..after_start(5, 2)
        });
        assert_eq!(decision.phase, Phase::Failed);
        assert_eq!(decision.failure, Some(FailureReason::CanaryCrashLooping));
        assert_eq!(
            decision.write, None,
            "never widen or finish with a crash loop"
        );
    }
}

#[test]
fn fix_quirk_07_patch_failures_are_not_sticky() {
    let decision = fixed(&Observation {
        previous: previous(Phase::Failed, Some(FailureReason::WriteRejected), 1, 30),
        ..after_start(2, 1)
    });
    assert_eq!(decision.phase, Phase::Increasing, "the widen is retried");
}

#[test]
fn failed_without_reason_is_treated_as_sticky() {
    let decision = fixed(&Observation {
        previous: previous(Phase::Failed, None, 1, 30),
        ..after_start(2, 1)
    });
    assert_eq!(decision.phase, Phase::Failed);
    assert_eq!(decision.write, None);
}

#[test]
fn fix_quirk_03_max_unavailable_is_compared_literally() {
    for live in [LiveMaxUnavailable::Int(1), LiveMaxUnavailable::Unset] {
        assert!(
            fixed(&Observation {
                live_max_unavailable: live,
                ..handler()
            })
            .action
            .quiet
        );
    }
    for live in [
        LiveMaxUnavailable::Str("1".into()),
        LiveMaxUnavailable::NoRollingUpdate,
        LiveMaxUnavailable::Int(2),
    ] {
        let decision = fixed(&Observation {
            live_max_unavailable: live.clone(),
            desired_pods: 2,
            updated_pods: 2,
            updated_ready_pods: 2,
            ..handler()
        });
        assert!(!decision.action.quiet, "{live} is not the resting value");
        assert_reverting(&decision);
    }
}

#[test]
fn counts_are_not_trusted_before_the_daemonset_controller_caught_up() {
    let stale = Observation {
        rollout_observed: false,
        ..after_start(3, 3)
    };
    assert_no_write_in(&fixed(&stale), Phase::Waiting);
    assert_no_write_in(
        &fixed(&Observation {
            rollout_observed: false,
            ..after_start(3, 0)
        }),
        Phase::Canary,
    );
    // The reference ignores it.
    let reference = decide(&Strategy::kubevirt(), &stale);
    assert!(reference.done);
}

#[test]
fn progress_deadline_fails_a_stalled_phase_once() {
    let stalled = Observation {
        previous: previous(Phase::Canary, None, 0, 601),
        ..after_start(3, 0)
    };
    let decision = fixed(&stalled);
    assert_eq!(decision.phase, Phase::Failed);
    assert_eq!(
        decision.failure,
        Some(FailureReason::ProgressDeadlineExceeded)
    );
    assert_eq!(decision.write, None);
    assert_eq!(
        decision.error.as_deref(),
        Some(
            "daemonSet virt-handler: rollout of v1.6.0 made no progress in phase canary for 601s (deadline 600s): 0 of 3 pods updated and ready"
        )
    );
    assert_eq!(
        decision.table_event().unwrap().reason,
        event_reason::PROGRESS_DEADLINE_EXCEEDED
    );
    // Sticky, without a second event.
    let after = fixed(&Observation {
        previous: previous(
            Phase::Failed,
            Some(FailureReason::ProgressDeadlineExceeded),
            0,
            700,
        ),
        ..after_start(3, 0)
    });
    assert_eq!(after.failure, Some(FailureReason::ProgressDeadlineExceeded));
    assert_eq!(after.table_event(), None);
}

#[test]
fn progress_deadline_spares_moving_and_writing_passes() {
    // Exactly at the deadline: not over it.
    assert_eq!(
        fixed(&Observation {
            previous: previous(Phase::Canary, None, 0, 600),
            ..after_start(3, 0)
        })
        .phase,
        Phase::Canary
    );
    // The ready count moved this pass.
    assert_eq!(
        fixed(&Observation {
            previous: previous(Phase::Waiting, None, 1, 10_000),
            live_max_unavailable: LiveMaxUnavailable::Str("10%".into()),
            ..after_start(3, 2)
        })
        .phase,
        Phase::Waiting
    );
    // A pass that writes is progress.
    assert_eq!(
        fixed(&Observation {
            previous: previous(Phase::Canary, None, 1, 10_000),
            ..after_start(3, 1)
        })
        .phase,
        Phase::Increasing
    );
    // Switched off.
    let no_deadline = Strategy {
        progress_deadline: None,
        ..Strategy::default()
    };
    assert_eq!(
        decide(
            &no_deadline,
            &Observation {
                previous: previous(Phase::Canary, None, 0, 10_000),
                ..after_start(3, 0)
            }
        )
        .phase,
        Phase::Canary
    );
    // After a completed rollout the clock of the old phase does not count.
    assert_eq!(
        fixed(&Observation {
            previous: previous(Phase::Successful, None, 3, 86_400),
            ..after_start(3, 0)
        })
        .phase,
        Phase::Canary
    );
}

#[test]
fn kubevirt_mode_honours_an_explicit_deadline() {
    let strategy = Strategy {
        progress_deadline: Some(Duration::from_secs(60)),
        ..Strategy::kubevirt()
    };
    let decision = decide(
        &strategy,
        &Observation {
            previous: previous(Phase::Waiting, None, 1, 61),
            live_max_unavailable: LiveMaxUnavailable::Str("10%".into()),
            ..after_start(3, 1)
        },
    );
    assert_eq!(
        decision.failure,
        Some(FailureReason::ProgressDeadlineExceeded)
    );
}

#[test]
fn quiet_pass_without_a_rollout_emits_nothing() {
    for prev in [None, previous(Phase::Successful, None, 2, 5)] {
        let decision = fixed(&Observation {
            previous: prev,
            ..handler()
        });
        assert!(decision.action.quiet && decision.done);
        assert_eq!(decision.table_event(), None);
    }
}

#[test]
fn custom_values_are_written() {
    let strategy = Strategy {
        canary_max_unavailable: MaxUnavailable::Count(2),
        fast_max_unavailable: MaxUnavailable::Percent(25),
        ..Strategy::default()
    };
    let start = decide(
        &strategy,
        &Observation {
            object_changed: true,
            ..handler()
        },
    );
    assert_eq!(
        start.write.unwrap().max_unavailable,
        Some(MaxUnavailable::Count(2))
    );
    // Live at 1 is not this strategy's resting value: an ongoing rollout.
    let at_one = decide(&strategy, &handler());
    assert!(!at_one.action.quiet);
    let widen = decide(
        &strategy,
        &Observation {
            live_max_unavailable: LiveMaxUnavailable::Int(2),
            ..after_start(8, 1)
        },
    );
    assert_eq!(
        widen.write.unwrap().max_unavailable,
        Some(MaxUnavailable::Percent(25))
    );
    assert!(
        decide(
            &strategy,
            &Observation {
                live_max_unavailable: LiveMaxUnavailable::Int(2),
                ..handler()
            }
        )
        .action
        .quiet
    );
}

#[test]
fn failed_writes_name_the_daemonset_and_warn() {
    let strategy = Strategy::default();
    let cases = [
        (
            fixed(&Observation {
                object_changed: true,
                ..handler()
            }),
            "unable to start canary upgrade for daemonset virt-handler: boom",
        ),
        (
            fixed(&after_start(2, 1)),
            "unable to widen the rollout of daemonset virt-handler: boom",
        ),
        (
            fixed(&after_start(2, 2)),
            "unable to revert daemonset virt-handler to its resting maxUnavailable: boom",
        ),
        (
            fixed(&Observation {
                tls: Some(TlsFacts {
                    supported: true,
                    live_has_flag: false,
                    desired_has_cert_volume: false,
                }),
                ..after_start(2, 2)
            }),
            "unable to apply the TLS migration step to daemonset virt-handler: boom",
        ),
        (
            decide_create(&strategy, NAME, VERSION),
            "unable to create daemonset virt-handler: boom",
        ),
    ];
    for (decision, message) in cases {
        assert!(decision.write.is_some());
        let failed = decision.write_failed(&strategy, NAME, "boom");
        assert_eq!(failed.phase, Phase::Failed);
        assert_eq!(failed.failure, Some(FailureReason::WriteRejected));
        assert_eq!(failed.error.as_deref(), Some(message));
        assert_eq!(failed.write, None);
        assert!(!failed.action.record_generation && !failed.done);
        let event = failed.table_event().unwrap();
        assert_eq!(
            (event.type_, event.reason),
            (EventType::Warning, "WriteRejected")
        );
    }
}

#[test]
fn invalid_strategy_event_is_not_repeated() {
    let strategy = Strategy {
        fast_max_unavailable: MaxUnavailable::ONE,
        ..Strategy::default()
    };
    let first = decide(&strategy, &handler());
    assert_eq!(first.failure, Some(FailureReason::InvalidStrategy));
    assert!(first.table_event().is_some());
    let again = decide(
        &strategy,
        &Observation {
            previous: previous(Phase::Failed, Some(FailureReason::InvalidStrategy), 0, 5),
            ..handler()
        },
    );
    assert_eq!(again.failure, Some(FailureReason::InvalidStrategy));
    assert_eq!(again.table_event(), None);
    // Fixed: the next pass decides normally.
    let repaired = fixed(&Observation {
        previous: previous(Phase::Failed, Some(FailureReason::InvalidStrategy), 0, 5),
        ..after_start(2, 1)
    });
    assert_eq!(repaired.phase, Phase::Increasing);
}

/// Every event of a rollout names the version it rolls out, in both strategies, so that the
/// events of two rollouts read apart (`kubectl get events`); KubeVirt mode keeps the
/// reference's own failure message.
#[test]
fn every_rollout_event_names_its_version() {
    for strategy in [Strategy::default(), Strategy::kubevirt()] {
        let mode = strategy.compatibility;
        let events = [
            decide_create(&strategy, NAME, "v1.9.4").table_event(),
            decide(
                &strategy,
                &Observation {
                    version: "v1.9.4".into(),
                    object_changed: true,
                    desired_pods: 3,
                    ..handler()
                },
            )
            .table_event(),
            decide(
                &strategy,
                &Observation {
                    version: "v1.9.4".into(),
                    ..after_start(3, 1)
                },
            )
            .table_event(),
        ];
        // KubeVirt mode creates without an event (quirk 10: done at once, nothing to say).
        let expected: &[&str] = match mode {
            Compatibility::Fixed => &[
                "daemonSet virt-handler created: started rollout of v1.9.4",
                "daemonSet virt-handler: started rollout of v1.9.4",
                "daemonSet virt-handler: canary of v1.9.4 ready, maxUnavailable 10%",
            ],
            Compatibility::KubeVirt => &[
                "daemonSet virt-handler: started rollout of v1.9.4",
                "daemonSet virt-handler: canary of v1.9.4 ready, maxUnavailable 10%",
            ],
        };
        let messages: Vec<String> = events.into_iter().flatten().map(|e| e.message).collect();
        assert_eq!(messages, expected, "{mode}");
    }
    let completed = fixed(&Observation {
        version: "v1.9.4".into(),
        previous: previous(Phase::Waiting, None, 3, 0),
        desired_pods: 3,
        updated_pods: 3,
        updated_ready_pods: 3,
        ..handler()
    });
    assert_eq!(
        completed.table_event().map(|e| e.message).as_deref(),
        Some("daemonSet virt-handler: rollout of v1.9.4 complete, every pod updated and ready")
    );
    let reference_failure = decide(
        &Strategy::kubevirt(),
        &Observation {
            crash_loop: crash(),
            ..after_start(3, 0)
        },
    );
    assert_eq!(
        reference_failure
            .table_event()
            .map(|e| e.message)
            .as_deref(),
        Some("daemonSet virt-handler rollout failed"),
        "the reference's message, whatever the version"
    );
}

/// Pins the events of the write rows (mutation testing found them unchecked): the create, the
/// widen, and a failure whose reason differs from the previous pass's, which is a new failure
/// and warns again (`repeats` compares the phase **and** the reason). Rows: (decision, type,
/// reason, message).
#[test]
fn each_transition_carries_its_event() {
    let crash_after_rejection = fixed(&Observation {
        updated_pods: 1,
        crash_loop: crash(),
        previous: previous(Phase::Failed, Some(FailureReason::WriteRejected), 0, 5),
        ..after_start(2, 0)
    });
    let rows = [
        (
            decide_create(&Strategy::default(), NAME, "v1.9.4"),
            EventType::Normal,
            event_reason::ROLLOUT_STARTED,
            "daemonSet virt-handler created: started rollout of v1.9.4",
        ),
        (
            fixed(&after_start(3, 1)),
            EventType::Normal,
            event_reason::ROLLOUT_WIDENED,
            "daemonSet virt-handler: canary of v1.6.0 ready, maxUnavailable 10%",
        ),
        (
            crash_after_rejection,
            EventType::Warning,
            event_reason::FAILED_UPDATE,
            "daemonSet virt-handler: rollout of v1.6.0 failed: updated pod virt-handler-abcde is crash-looping (CrashLoopBackOff)",
        ),
    ];
    for (decision, type_, reason, message) in rows {
        let event = decision.table_event().expect(reason);
        assert_eq!(
            (event.type_, event.reason, event.message.as_str()),
            (type_, reason, message)
        );
    }
}

/// Pins the name in the message of a create refused for an invalid strategy (the create path
/// builds its own observation, mutation testing found the name unchecked).
#[test]
fn an_invalid_strategy_on_the_create_path_names_the_daemon_set() {
    let strategy = Strategy {
        fast_max_unavailable: MaxUnavailable::ONE,
        ..Strategy::default()
    };
    let decision = decide_create(&strategy, NAME, "v1.9.4");
    assert_eq!(decision.failure, Some(FailureReason::InvalidStrategy));
    assert_eq!(decision.write, None);
    assert_eq!(
        decision.error.as_deref(),
        Some(
            "daemonSet virt-handler has an invalid strategy: the canary and fast maxUnavailable are both 1; they must differ"
        )
    );
}

/// A canary of 10 pods at `maxUnavailable` 1, whose previous pass failed it as crash-looping.
fn failed_on_a_crash_loop() -> Observation {
    Observation {
        live_max_unavailable: LiveMaxUnavailable::Int(1),
        previous: previous(
            Phase::Failed,
            Some(FailureReason::CanaryCrashLooping),
            0,
            30,
        ),
        ..after_start(10, 0)
    }
}

/// The `retry` verb on the MaxUnavailable driver: a failed rollout forgets its failure and is
/// decided as one that has just started; a pod still crash-looping fails it again at once; a
/// retry of a rollout that has not failed changes nothing.
#[test]
fn a_retry_forgets_a_failure_once_and_nothing_else() {
    let failed = failed_on_a_crash_loop();
    assert_eq!(
        fixed(&failed).phase,
        Phase::Failed,
        "sticky without a retry"
    );

    let retried = fixed(&Observation {
        retry: true,
        ..failed.clone()
    });
    assert!(retried.retried);
    assert_eq!((retried.phase, retried.failure), (Phase::Canary, None));

    let still_crashing = fixed(&Observation {
        retry: true,
        crash_loop: crash(),
        ..failed.clone()
    });
    assert!(still_crashing.retried);
    assert_eq!(
        (still_crashing.phase, still_crashing.failure),
        (Phase::Failed, Some(FailureReason::CanaryCrashLooping))
    );

    let canary = Observation {
        previous: previous(Phase::Canary, None, 0, 30),
        ..failed.clone()
    };
    let asked = fixed(&Observation {
        retry: true,
        ..canary.clone()
    });
    assert!(!asked.retried);
    assert_eq!(asked, fixed(&canary));
}

/// A retry of a failure whose hold (`OnDelete`) left no pod of the target: with surge the
/// DaemonSet controller keeps a node's oldest pod under `OnDelete` and took the canary away
/// (soak seed 48000024, `failed` on the deadline after the retry with 0 of 250 pods updated).
/// The retry writes the canary's strategy back, or nothing would ever be replaced. Without the
/// retry the failure stays and writes nothing; held on request, the retry's write waits.
#[test]
fn a_retry_with_no_canary_left_under_the_failure_hold_writes_the_canary_strategy() {
    let failed = Observation {
        live_on_hold: true,
        surge: true,
        rollout_observed: true,
        previous: previous(Phase::Failed, Some(FailureReason::AnalysisFailed), 0, 30),
        ..after_start(10, 0)
    };
    let stays = fixed(&failed);
    assert_eq!((stays.phase, stays.write), (Phase::Failed, None));

    let retried = fixed(&Observation {
        retry: true,
        ..failed.clone()
    });
    assert!(retried.retried);
    assert_eq!((retried.phase, retried.failure), (Phase::Canary, None));
    assert_eq!(
        retried.write,
        Some(write(
            WriteKind::Start,
            Some(Strategy::default().canary_max_unavailable),
            None
        ))
    );

    let held = fixed(&Observation {
        retry: true,
        held: true,
        ..failed.clone()
    });
    assert_eq!(held.phase, Phase::Paused);
    assert_eq!(held.write, None);
}

/// A retry of a failed rollout whose DaemonSet drifted: under `Report` nothing is written and
/// the rollout stays failed (the drift row is not read as a first pass, which would call it
/// `successful`: soak seed 11000003); under `Revert` the drift's own start is the new rollout.
#[test]
fn a_retry_under_a_reported_drift_stays_failed() {
    let failed_and_drifted = Observation {
        drift: Some(DriftSeen {
            what: "pod template".into(),
        }),
        retry: true,
        ..failed_on_a_crash_loop()
    };
    let report = Strategy {
        drift_policy: DriftPolicy::Report,
        ..Strategy::default()
    };
    let held = decide(&report, &failed_and_drifted);
    assert_eq!(held.phase, Phase::Failed);
    assert_eq!(held.failure, Some(FailureReason::CanaryCrashLooping));
    assert!(held.write.is_none() && held.drifted);
    let reverted = fixed(&failed_and_drifted);
    assert_eq!(reverted.phase, Phase::Started);
    assert!(reverted.drifted);
    assert_eq!(reverted.write.map(|w| w.kind), Some(WriteKind::Start));
}

/// The `pause` verb on the MaxUnavailable driver, pass by pass: a rollout under way is put on
/// `OnDelete` once (the Hold write, `Paused` announced once), then nothing is written while it
/// is held, whatever the rows would do (widen here); a template change waits for the resume;
/// the resume announces itself and, with no write of the rows, puts the DaemonSet back on
/// `RollingUpdate` (the Resume write); the deadline does not count the time held.
#[test]
fn a_hold_on_request_stops_the_daemon_set_controller_and_writes_nothing_else() {
    let hold = Some(write(WriteKind::Hold, None, None));
    let resume = Some(write(WriteKind::Resume, None, None));
    let strategy = Strategy {
        progress_deadline: Some(Duration::from_secs(60)),
        ..Strategy::default()
    };
    let canary = Observation {
        previous: previous(Phase::Canary, None, 0, 30),
        ..after_start(10, 0)
    };
    assert_eq!(fixed(&canary).phase, Phase::Canary, "not held: as before");

    // First held pass: the Hold write, announced.
    let held = Observation {
        held: true,
        ..canary.clone()
    };
    let first = decide(&strategy, &held);
    assert_eq!(first.phase, Phase::Paused);
    assert_eq!(first.write, hold);
    assert!(first.held);
    assert_eq!(
        first.hold_event().cloned().as_ref().map(|e| e.reason),
        Some(event_reason::PAUSED)
    );

    // The hold is in: the canary is ready and the rows would widen; nothing is written, the
    // widening is not announced, nothing repeats, and an hour held is no stall.
    let ready = Observation {
        hold_recorded: true,
        live_on_hold: true,
        previous: previous(Phase::Paused, None, 0, 3600),
        ..after_start(10, 1)
    };
    let unheld_rows = decide(
        &strategy,
        &Observation {
            held: false,
            hold_recorded: false,
            live_on_hold: false,
            previous: previous(Phase::Canary, None, 0, 30),
            ..ready.clone()
        },
    );
    assert_eq!(
        unheld_rows.write.map(|w| w.kind),
        Some(WriteKind::Widen),
        "the rows widen"
    );
    let still = decide(
        &strategy,
        &Observation {
            held: true,
            ..ready.clone()
        },
    );
    assert_eq!(
        (
            still.phase,
            still.write,
            still.table_event(),
            still.hold_event().cloned()
        ),
        (Phase::Paused, None, None, None)
    );
    assert!(still.held && !still.action.record_generation && !still.done);

    // A new template while held: no rollout starts until the resume.
    let changed = decide(
        &strategy,
        &Observation {
            held: true,
            object_changed: true,
            ..ready.clone()
        },
    );
    assert_eq!(
        (changed.phase, changed.write, changed.table_event()),
        (Phase::Paused, None, None)
    );

    // Resumed, rows without a write of their own: the Resume write, announced; the hour held
    // does not fail the rollout by its deadline.
    let waiting = Observation {
        live_max_unavailable: LiveMaxUnavailable::Str("10%".into()),
        ..ready.clone()
    };
    let resumed = decide(&strategy, &waiting);
    assert_eq!((resumed.phase, resumed.write), (Phase::Waiting, resume));
    assert!(!resumed.held);
    assert_eq!(
        resumed.hold_event().cloned().as_ref().map(|e| e.reason),
        Some(event_reason::RESUMED)
    );
    // Resumed, rows with a write: that write (every write of the desired DaemonSet sets
    // `RollingUpdate`) and its announcement.
    let widened = decide(&strategy, &ready);
    assert_eq!(widened.write.map(|w| w.kind), Some(WriteKind::Widen));
    assert_eq!(
        widened.table_event().as_ref().map(|e| e.reason),
        Some(event_reason::ROLLOUT_WIDENED)
    );
    assert_eq!(
        widened.hold_event().cloned().as_ref().map(|e| e.reason),
        Some(event_reason::RESUMED)
    );
}

/// What a hold on request leaves alone: a rollout at rest (its DaemonSet replaces nothing),
/// a failure (it stays failed, the hold is still recorded), a drift kept as reported; and a
/// refused Hold write fails the pass as any refused write, still held.
#[test]
fn a_hold_on_request_leaves_rest_failure_and_reported_drift_alone() {
    let at_rest = fixed(&Observation {
        held: true,
        ..handler()
    });
    assert_eq!((at_rest.phase, at_rest.write), (Phase::Successful, None));
    assert!(at_rest.held && at_rest.hold_event().cloned().is_some());

    let crashing = fixed(&Observation {
        held: true,
        crash_loop: crash(),
        previous: previous(Phase::Canary, None, 0, 30),
        ..after_start(10, 0)
    });
    assert_eq!(
        (crashing.phase, crashing.failure, crashing.write),
        (Phase::Failed, Some(FailureReason::CanaryCrashLooping), None)
    );
    assert!(crashing.held);

    let report = Strategy {
        drift_policy: DriftPolicy::Report,
        ..Strategy::default()
    };
    let drifted = decide(
        &report,
        &Observation {
            held: true,
            drift: Some(DriftSeen {
                what: "image of container agent: agent:v2 → agent:hand".into(),
            }),
            previous: previous(Phase::Canary, None, 0, 30),
            ..after_start(10, 0)
        },
    );
    assert_eq!((drifted.phase, drifted.write), (Phase::Paused, None));
    // Whatever phase the report holds, if it is a rollout's (found by the `decide` fuzz
    // target: a reported drift that holds `rollingBack`).
    let rolling_back = decide(
        &report,
        &Observation {
            held: true,
            drift: Some(DriftSeen {
                what: "pod template".into(),
            }),
            previous: previous(Phase::RollingBack, None, 0, 30),
            ..after_start(10, 0)
        },
    );
    assert_eq!(
        (rolling_back.phase, rolling_back.write),
        (Phase::Paused, None)
    );

    let held = fixed(&Observation {
        held: true,
        previous: previous(Phase::Canary, None, 0, 30),
        ..after_start(10, 0)
    });
    let refused = held.write_failed(&Strategy::default(), NAME, "422 Invalid: no");
    assert_eq!(
        (refused.phase, refused.failure),
        (Phase::Failed, Some(FailureReason::WriteRejected))
    );
    assert!(refused.held && refused.hold_event().cloned().is_some());
    assert_eq!(
        refused.error.as_deref(),
        Some("unable to hold daemonset virt-handler (updateStrategy OnDelete): 422 Invalid: no")
    );
}

/// A hand edit while held (`Revert`): announced once, saying its revert waits for the end of
/// the hold; the resume reverts it, canary first, without announcing it again.
#[test]
fn a_drift_while_held_is_announced_once_and_reverted_at_the_resume() {
    let drift = Some(DriftSeen {
        what: "image of container agent: agent:v2 → agent:hand".into(),
    });
    let held = fixed(&Observation {
        held: true,
        hold_recorded: true,
        live_on_hold: true,
        drift: drift.clone(),
        previous: previous(Phase::Paused, None, 0, 30),
        ..after_start(10, 1)
    });
    assert_eq!((held.phase, held.write), (Phase::Paused, None));
    let event = held.table_event().expect("the drift is announced");
    assert_eq!(event.reason, event_reason::DRIFT_DETECTED);
    assert!(
        event.message.ends_with("once the hold on request ends"),
        "{}",
        event.message
    );

    let mut drifted_before = previous(Phase::Paused, None, 0, 30);
    if let Some(previous) = drifted_before.as_mut() {
        previous.drifted = true;
    }
    let resumed = fixed(&Observation {
        hold_recorded: true,
        live_on_hold: true,
        drift,
        previous: drifted_before,
        ..after_start(10, 1)
    });
    assert_eq!(resumed.write.map(|w| w.kind), Some(WriteKind::Start));
    assert!(resumed.drifted);
    assert_eq!(
        resumed.table_event().map(|e| e.reason),
        Some(event_reason::ROLLOUT_STARTED),
        "the drift is not announced twice"
    );
}
