//! The reference test scenarios (spec section 8) and the decision quirks (section 10) against
//! `Strategy::kubevirt()`. Scenario numbers follow the spec.
//!
//! The reference table calls `processCanaryUpgrade` directly in several scenarios, bypassing
//! the sync gate; here every pass goes through the gate, so those scenarios carry the flag that
//! lets them through in a real run (normally `generation_known: false`, the state right after
//! row 1's unrecorded write).

use std::time::Duration;

use canary_state_machine::{
    CrashLoopSeen, Decision, EventType, FailureReason, LiveMaxUnavailable, MaxUnavailable,
    Observation, Phase, PreviousPass, Strategy, TemplateEdit, TlsFacts, WriteKind, decide,
    decide_create, event_reason,
};

use crate::common::{
    NAME, TableEvent, VERSION, after_start, assert_no_write_in, assert_starts_the_canary, handler,
    write,
};

fn kubevirt(observation: &Observation) -> Decision {
    decide(&Strategy::kubevirt(), observation)
}

fn crash() -> Option<CrashLoopSeen> {
    Some(CrashLoopSeen {
        pod: "virt-handler-abcde".into(),
        reason: "restartCount 1".into(),
    })
}

/// [`assert_no_write_in`], and no failure either.
fn assert_quiet_in(decision: &Decision, phase: Phase) {
    assert_no_write_in(decision, phase);
    assert_eq!(decision.failure, None);
}

fn assert_started(decision: &Decision) {
    assert_starts_the_canary(decision);
    assert_eq!(decision.error, None);
}

fn assert_completed(decision: &Decision) {
    assert_eq!(decision.phase, Phase::Successful);
    assert_eq!(
        decision.write,
        Some(write(WriteKind::Finish, Some(MaxUnavailable::ONE), None))
    );
    assert!(decision.action.record_generation);
    assert!(decision.done, "reference reports done in the revert pass");
    assert_eq!(decision.error, None);
}

/// The pass after row 1's unrecorded write on one node, the live DaemonSet in the TLS era
/// described by `tls`.
fn tls_era(tls: TlsFacts) -> Observation {
    Observation {
        tls: Some(tls),
        ..after_start(1, 1)
    }
}

/// A TLS migration step that makes `edit`: still `waiting`, the generation recorded.
fn assert_tls_step(decision: &Decision, edit: TemplateEdit) {
    assert_eq!(decision.phase, Phase::Waiting);
    assert_eq!(
        decision.write,
        Some(write(WriteKind::TlsStep, None, Some(edit)))
    );
    assert!(decision.action.record_generation);
    assert!(!decision.done);
}

#[test]
fn scenario_01_create_reports_done_at_once() {
    let decision = decide_create(&Strategy::kubevirt(), NAME, VERSION);
    assert_eq!(decision.phase, Phase::Successful);
    assert_eq!(decision.write, Some(write(WriteKind::Create, None, None)));
    assert!(decision.action.record_generation);
    assert!(decision.done);
    assert_eq!(decision.error, None);
}

#[test]
fn scenario_02_every_metadata_change_patches_again() {
    // maxDevices added (KubeVirt generation 2), then removed (generation 3): the mock cache never
    // updates, so both passes see a metadata diff and both are row 1.
    let with_flag = Observation {
        object_changed: true,
        desired_pods: 1,
        ..handler()
    };
    assert_started(&kubevirt(&with_flag));
    let without_flag = Observation {
        generation_known: true,
        ..with_flag
    };
    assert_started(&kubevirt(&without_flag));
}

#[test]
fn scenario_03_generation_unknown_spec_up_to_date_completes() {
    assert_completed(&kubevirt(&after_start(1, 1)));
}

#[test]
fn scenario_03_tls_era_completes_when_tls_is_done() {
    let observation = tls_era(TlsFacts {
        supported: true,
        live_has_flag: true,
        desired_has_cert_volume: false,
    });
    assert_completed(&kubevirt(&observation));
}

#[test]
fn scenario_04_generation_unknown_during_ongoing_rollout_waits() {
    let observation = Observation {
        live_max_unavailable: LiveMaxUnavailable::Str("10%".into()),
        ..after_start(2, 1)
    };
    let decision = kubevirt(&observation);
    assert_quiet_in(&decision, Phase::Waiting);
}

#[test]
fn scenario_05_version_change_starts_the_canary() {
    let observation = Observation {
        object_changed: true,
        desired_pods: 1,
        updated_pods: 0,
        ..handler()
    };
    assert_started(&kubevirt(&observation));
}

#[test]
fn scenario_06_start_with_max_unavailable_one_even_from_ten_percent() {
    let observation = Observation {
        object_changed: true,
        desired_pods: 1,
        live_max_unavailable: LiveMaxUnavailable::Str("10%".into()),
        ..handler()
    };
    let decision = kubevirt(&observation);
    assert_started(&decision);
    let written = decision.write.unwrap().max_unavailable.unwrap();
    assert_eq!(written.to_live().reference_int_value(), 1);
}

#[test]
fn scenario_07_wait_for_the_canary_pod_to_be_created() {
    assert_quiet_in(&kubevirt(&after_start(1, 0)), Phase::Canary);
}

#[test]
fn scenario_08_wait_for_the_canary_pod_to_be_ready() {
    let observation = Observation {
        updated_pods: 1,
        ..after_start(1, 0)
    };
    assert_quiet_in(&kubevirt(&observation), Phase::Canary);
}

#[test]
fn scenario_09_widen_to_ten_percent_from_unset_max_unavailable() {
    let observation = Observation {
        live_max_unavailable: LiveMaxUnavailable::Unset,
        ..after_start(2, 1)
    };
    let decision = kubevirt(&observation);
    assert_eq!(decision.phase, Phase::Increasing);
    assert_eq!(
        decision.write,
        Some(write(
            WriteKind::Widen,
            Some(MaxUnavailable::Percent(10)),
            None
        ))
    );
    assert_eq!(
        decision.write.unwrap().max_unavailable.unwrap().to_string(),
        "10%"
    );
    assert!(decision.action.record_generation);
    assert!(!decision.done);
    assert_eq!(decision.error, None);
    let event = decision.table_event().unwrap();
    assert_eq!(
        (event.type_, event.reason, event.message.as_str()),
        (
            EventType::Normal,
            event_reason::ROLLOUT_WIDENED,
            "daemonSet virt-handler: canary of v1.6.0 ready, maxUnavailable 10%"
        )
    );
}

#[test]
fn scenario_10_crash_looping_canary_fails_with_event() {
    let observation = Observation {
        updated_pods: 1,
        crash_loop: crash(),
        ..after_start(1, 0)
    };
    let decision = kubevirt(&observation);
    assert_eq!(decision.phase, Phase::Failed);
    assert_eq!(decision.failure, Some(FailureReason::CanaryCrashLooping));
    assert_eq!(decision.write, None);
    assert!(!decision.done);
    assert!(!decision.action.record_generation);
    assert_eq!(
        decision.error.as_deref(),
        Some("daemonSet virt-handler rollout failed")
    );
    let event = decision.table_event().unwrap();
    assert_eq!(event.type_, EventType::Warning);
    assert_eq!(event.reason, "FailedUpdate");
    assert_eq!(event.message, "daemonSet virt-handler rollout failed");
}

#[test]
fn scenario_11_wait_for_the_new_rollout_at_ten_percent() {
    // Generation recorded by row 3a: only ongoingRollout brings this pass in.
    let observation = Observation {
        generation_known: true,
        live_max_unavailable: LiveMaxUnavailable::Str("10%".into()),
        ..after_start(2, 1)
    };
    assert_quiet_in(&kubevirt(&observation), Phase::Waiting);
}

#[test]
fn scenario_12_complete_the_rollout_in_the_revert_pass() {
    let decision = kubevirt(&after_start(1, 1));
    assert_completed(&decision);
    assert_eq!(
        decision.table_event().unwrap().reason,
        event_reason::ROLLOUT_COMPLETED
    );
}

#[test]
fn scenario_13_detach_the_secret_before_completing() {
    let observation = tls_era(TlsFacts {
        supported: true,
        live_has_flag: true,
        desired_has_cert_volume: true,
    });
    let decision = kubevirt(&observation);
    assert_tls_step(&decision, TemplateEdit::DetachCertSecret);
    assert_eq!(decision.error, None);
    let event = decision.table_event().unwrap();
    assert_eq!(
        (event.type_, event.reason, event.message.as_str()),
        (
            EventType::Normal,
            event_reason::TLS_MIGRATION_STEP,
            "daemonSet virt-handler at v1.6.0: detaching the client certificate secret"
        )
    );
}

#[test]
fn scenario_14_switch_to_the_tls_rollout() {
    let observation = tls_era(TlsFacts {
        supported: true,
        live_has_flag: false,
        desired_has_cert_volume: true,
    });
    let decision = kubevirt(&observation);
    assert_tls_step(&decision, TemplateEdit::InsertTlsFlag);
    assert_eq!(
        decision.table_event().map(|e| (e.reason, e.message)),
        Some((
            event_reason::TLS_MIGRATION_STEP,
            "daemonSet virt-handler at v1.6.0: inserting the TLS flag".to_owned()
        ))
    );
}

#[test]
fn tls_unsupported_live_daemonset_completes_normally() {
    let observation = tls_era(TlsFacts {
        supported: false,
        live_has_flag: false,
        desired_has_cert_volume: true,
    });
    assert_completed(&kubevirt(&observation));
}

#[test]
fn quirk_16_tls_step_is_followed_by_a_quiet_done_pass_while_pods_re_roll() {
    // The TLS step recorded the generation and left rollingUpdate as desired has it (unset):
    // the next pass finds no flag and reports done although no pod runs the flag yet.
    let next = Observation {
        desired_pods: 3,
        updated_pods: 3,
        updated_ready_pods: 3,
        live_max_unavailable: LiveMaxUnavailable::Unset,
        tls: Some(TlsFacts {
            supported: true,
            live_has_flag: true,
            desired_has_cert_volume: true,
        }),
        ..handler()
    };
    let decision = kubevirt(&next);
    assert!(decision.action.quiet && decision.done);
    assert_eq!(decision.write, None, "step 2 waits for a later canary flow");
}

#[test]
fn quirk_01_desired_zero_stays_in_canary() {
    for _ in 0..3 {
        assert_quiet_in(&kubevirt(&after_start(0, 0)), Phase::Canary);
    }
}

#[test]
fn quirk_02_more_ready_than_desired_is_an_error_every_pass() {
    let decision = kubevirt(&after_start(2, 3));
    assert_eq!(decision.phase, Phase::Failed);
    assert_eq!(decision.failure, Some(FailureReason::UnexpectedState));
    assert_eq!(
        decision.error.as_deref(),
        Some("unexpected canary upgrade state: updatedAndReadyPods=3, desiredReadyPods=2")
    );
    assert_eq!(decision.write, None);
    assert!(!decision.done);
}

#[test]
fn quirk_03_any_max_unavailable_but_one_is_an_ongoing_rollout() {
    for live in [
        LiveMaxUnavailable::Str("10%".into()),
        LiveMaxUnavailable::Str("100%".into()),
        LiveMaxUnavailable::Int(2),
        LiveMaxUnavailable::Int(0),
        LiveMaxUnavailable::NoRollingUpdate,
    ] {
        let observation = Observation {
            live_max_unavailable: live.clone(),
            desired_pods: 2,
            updated_pods: 2,
            updated_ready_pods: 2,
            ..handler()
        };
        let decision = kubevirt(&observation);
        assert!(!decision.action.quiet, "{live} counts as ongoing");
        assert_completed(&decision);
    }
    for live in [
        LiveMaxUnavailable::Int(1),
        LiveMaxUnavailable::Unset,
        LiveMaxUnavailable::Str("1".into()),
    ] {
        let observation = Observation {
            live_max_unavailable: live.clone(),
            ..handler()
        };
        assert!(
            kubevirt(&observation).action.quiet,
            "{live} counts as resting"
        );
    }
}

#[test]
fn quirk_05_unknown_generation_alone_never_restarts_the_canary() {
    for ready in 0..=3 {
        let decision = kubevirt(&after_start(3, ready));
        assert_ne!(decision.phase, Phase::Started);
        assert_ne!(decision.write.map(|w| w.kind), Some(WriteKind::Start));
    }
}

#[test]
fn quirk_07_crash_check_stops_once_a_canary_is_ready() {
    let observation = Observation {
        updated_pods: 2,
        crash_loop: crash(),
        live_max_unavailable: LiveMaxUnavailable::Str("10%".into()),
        ..after_start(3, 1)
    };
    assert_quiet_in(&kubevirt(&observation), Phase::Waiting);
    // And it even widens with a crash-looping pod next to a ready one.
    let at_one = Observation {
        live_max_unavailable: LiveMaxUnavailable::Int(1),
        ..observation
    };
    assert_eq!(kubevirt(&at_one).phase, Phase::Increasing);
}

#[test]
fn quirk_07_failure_is_not_sticky_and_the_event_repeats() {
    let failing = Observation {
        updated_pods: 1,
        crash_loop: crash(),
        previous: Some(PreviousPass {
            phase: Phase::Failed,
            failure: Some(FailureReason::CanaryCrashLooping),
            updated_ready: 0,
            since_progress: Duration::from_secs(5),
            drifted: false,
        }),
        ..after_start(2, 0)
    };
    let again = kubevirt(&failing);
    assert_eq!(again.phase, Phase::Failed);
    assert_eq!(
        again.table_event().unwrap().reason,
        event_reason::FAILED_UPDATE
    );

    let recovered = Observation {
        crash_loop: None,
        ..failing
    };
    assert_quiet_in(&kubevirt(&recovered), Phase::Canary);
}

#[test]
fn quirk_10_create_and_revert_report_done_immediately() {
    assert!(decide_create(&Strategy::kubevirt(), NAME, VERSION).done);
    assert!(kubevirt(&after_start(5, 5)).done);
}

#[test]
fn quirk_11_row_one_without_spec_change_goes_quiet_next_pass() {
    // Row 1 patched metadata only, so the generation did not move and stays recorded.
    let next = Observation {
        desired_pods: 2,
        ..handler()
    };
    let decision = kubevirt(&next);
    assert!(decision.action.quiet && decision.done);
    assert_eq!(decision.phase, Phase::Successful);
}

#[test]
fn quirk_15_failed_writes_carry_a_literal_nil() {
    let strategy = Strategy::kubevirt();
    let start = kubevirt(&Observation {
        object_changed: true,
        ..handler()
    })
    .write_failed(&strategy, NAME, "conflict");
    assert_eq!(start.phase, Phase::Failed);
    assert_eq!(start.failure, Some(FailureReason::WriteRejected));
    assert_eq!(
        start.error.as_deref(),
        Some(
            "unable to start canary upgrade for daemonset <nil>: unable to update daemonset virt-handler: conflict"
        )
    );
    assert_eq!(start.write, None);
    assert_eq!(
        start.table_event(),
        None,
        "the reference emits no event for a failed patch"
    );

    let widen = kubevirt(&after_start(2, 1)).write_failed(&strategy, NAME, "boom");
    assert_eq!(
        widen.error.as_deref(),
        Some("unable to update daemonset <nil>: unable to update daemonset virt-handler: boom")
    );

    let finish = kubevirt(&after_start(1, 1)).write_failed(&strategy, NAME, "boom");
    assert_eq!(
        finish.error.as_deref(),
        Some("unable to update daemonset virt-handler: boom")
    );
    assert!(!finish.done && !finish.action.record_generation);

    let create = decide_create(&strategy, NAME, VERSION).write_failed(&strategy, NAME, "exists");
    assert_eq!(
        create.error.as_deref(),
        Some("unable to create daemonset virt-handler: exists")
    );
    assert!(!create.done);
}

#[test]
fn write_failed_leaves_a_decision_without_write_alone() {
    let strategy = Strategy::kubevirt();
    let canary = kubevirt(&after_start(1, 0));
    assert_eq!(canary.clone().write_failed(&strategy, NAME, "x"), canary);
}

#[test]
fn invalid_strategy_fails_without_writing() {
    let strategy = Strategy {
        canary_max_unavailable: MaxUnavailable::Count(2),
        ..Strategy::kubevirt()
    };
    let observation = Observation {
        object_changed: true,
        ..handler()
    };
    let decision = decide(&strategy, &observation);
    assert_eq!(decision.phase, Phase::Failed);
    assert_eq!(decision.failure, Some(FailureReason::InvalidStrategy));
    assert_eq!(decision.write, None);
    assert!(
        decision
            .error
            .as_deref()
            .unwrap()
            .contains("canary maxUnavailable of 1")
    );
    assert_eq!(
        decision.table_event().unwrap().reason,
        event_reason::INVALID_STRATEGY
    );
    let create = decide_create(&strategy, NAME, VERSION);
    assert_eq!(create.failure, Some(FailureReason::InvalidStrategy));
    assert_eq!(create.write, None);
}
