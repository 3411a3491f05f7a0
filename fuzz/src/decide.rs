//! `decide` (and `decide_create`, `Decision::write_failed`) against the state machine's
//! invariants, on observations and strategies built from the fuzzer's bytes.
//!
//! The invariants are those of `canary_state_machine`'s crate documentation and of
//! `crates/state-machine/tests/it/properties.rs`, here over the whole input space (any count,
//! any string, any duration) instead of proptest's small ranges.

use std::time::Duration;

use arbitrary::{Result, Unstructured};
use canary_state_machine::{
    Compatibility, CrashLoopSeen, DriftPolicy, DriftSeen, FailureReason, LiveMaxUnavailable,
    MaxUnavailable, Observation, Phase, PreviousPass, Strategy, SyncFlags, TlsFacts, WriteKind,
    decide as decide_pass, decide_create, event_reason,
};

/// A count: mostly small (where the equalities of the table are), sometimes anything.
fn count(u: &mut Unstructured<'_>) -> Result<u32> {
    Ok(match u.int_in_range(0u8..=3)? {
        0 | 1 => u.int_in_range(0..=6)?,
        2 => u.int_in_range(0..=120)?,
        _ => u.arbitrary()?,
    })
}

fn max_unavailable(u: &mut Unstructured<'_>) -> Result<MaxUnavailable> {
    let value = count(u)?;
    Ok(if u.arbitrary()? {
        MaxUnavailable::Count(value)
    } else {
        MaxUnavailable::Percent(value)
    })
}

fn strategy(u: &mut Unstructured<'_>) -> Result<Strategy> {
    let compatibility = if u.arbitrary()? {
        Compatibility::KubeVirt
    } else {
        Compatibility::Fixed
    };
    let deadline = if u.arbitrary()? {
        Some(Duration::new(
            u.arbitrary()?,
            u.int_in_range(0..=999_999_999)?,
        ))
    } else {
        None
    };
    Ok(Strategy {
        compatibility,
        canary_max_unavailable: max_unavailable(u)?,
        fast_max_unavailable: max_unavailable(u)?,
        progress_deadline: deadline,
        drift_policy: if u.arbitrary()? {
            DriftPolicy::Revert
        } else {
            DriftPolicy::Report
        },
    })
}

fn live_max_unavailable(u: &mut Unstructured<'_>) -> Result<LiveMaxUnavailable> {
    Ok(match u.int_in_range(0u8..=5)? {
        0 => LiveMaxUnavailable::NoRollingUpdate,
        1 => LiveMaxUnavailable::Unset,
        2 => LiveMaxUnavailable::Int(i64::from(u.int_in_range(-2i8..=6)?)),
        3 => LiveMaxUnavailable::Int(u.arbitrary()?),
        4 => LiveMaxUnavailable::Str(max_unavailable(u)?.to_string()),
        _ => LiveMaxUnavailable::Str(u.arbitrary()?),
    })
}

fn previous(u: &mut Unstructured<'_>) -> Result<Option<PreviousPass>> {
    if !u.arbitrary()? {
        return Ok(None);
    }
    let failure = if u.arbitrary()? {
        Some(*u.choose(&FailureReason::ALL)?)
    } else {
        None
    };
    Ok(Some(PreviousPass {
        phase: *u.choose(&Phase::ALL)?,
        failure,
        updated_ready: count(u)?,
        since_progress: Duration::new(u.arbitrary()?, u.int_in_range(0..=999_999_999)?),
        drifted: u.arbitrary()?,
    }))
}

fn observation(u: &mut Unstructured<'_>) -> Result<Observation> {
    let crash_loop = if u.arbitrary()? {
        Some(CrashLoopSeen {
            pod: u.arbitrary()?,
            reason: u.arbitrary()?,
        })
    } else {
        None
    };
    let drift = if u.arbitrary()? {
        Some(DriftSeen {
            what: u.arbitrary()?,
        })
    } else {
        None
    };
    let tls = if u.arbitrary()? {
        Some(TlsFacts {
            supported: u.arbitrary()?,
            live_has_flag: u.arbitrary()?,
            desired_has_cert_volume: u.arbitrary()?,
        })
    } else {
        None
    };
    let (name, version, object_changed, generation_known) = (
        u.arbitrary()?,
        u.arbitrary()?,
        u.arbitrary()?,
        u.arbitrary()?,
    );
    let (desired_pods, updated_pods, updated_ready_pods) = (count(u)?, count(u)?, count(u)?);
    Ok(Observation {
        name,
        version,
        object_changed,
        generation_known,
        desired_pods,
        updated_pods,
        updated_ready_pods,
        // Derived, not drawn, so that older inputs decode as before: the pods not updated.
        old_pods: desired_pods.saturating_sub(updated_pods),
        crash_loop,
        live_max_unavailable: live_max_unavailable(u)?,
        rollout_observed: u.arbitrary()?,
        daemon_set_rolled_out: u.arbitrary()?,
        drift,
        tls,
        previous: previous(u)?,
        retry: u.arbitrary()?,
        held: false,
        hold_recorded: false,
        live_on_hold: false,
        // The health gates and the analysis have table tests and the simulation of their own.
        health: None,
        analysis: None,
        // Surge (issue 50) changes only the soak's hold, which has table tests of its own.
        surge: false,
        surge_unsettled_nodes: None,
        surge_canary_alone: None,
    })
}

/// The hold on request over the same pass (drawn after the observation, so older inputs decode
/// as before): held, the only write is the one Hold write, never on a DaemonSet on `OnDelete`
/// already, and a failure stays one; not held, the rows decide alone and the one extra write
/// is the Resume of a recorded hold; each announcement is made once.
fn check_hold(u: &mut Unstructured<'_>, strategy: &Strategy, observation: &Observation) {
    let (Ok(held), Ok(hold_recorded), Ok(live_on_hold)) = (
        u.arbitrary::<bool>(),
        u.arbitrary::<bool>(),
        u.arbitrary::<bool>(),
    ) else {
        return;
    };
    let unheld = decide_pass(strategy, observation);
    let decision = decide_pass(
        strategy,
        &Observation {
            held,
            hold_recorded,
            live_on_hold,
            ..observation.clone()
        },
    );
    let kind = decision.write.map(|write| write.kind);
    let announced = decision.hold_event().map(|event| event.reason);
    assert_eq!(decision.held, held);
    if held {
        assert_eq!(announced, (!hold_recorded).then_some(event_reason::PAUSED));
        assert!(
            kind.is_none() || kind == Some(WriteKind::Hold),
            "held: only the hold is written"
        );
        if kind == Some(WriteKind::Hold) {
            assert!(!live_on_hold, "the hold is written once");
            assert_eq!(decision.phase, Phase::Paused);
        }
        if unheld.phase == Phase::Failed {
            assert_eq!(
                (decision.phase, decision.failure),
                (Phase::Failed, unheld.failure)
            );
        } else if unheld.write.is_none() && !unheld.phase.is_in_progress() {
            assert_eq!((decision.phase, decision.write), (unheld.phase, None));
        } else {
            assert_eq!(decision.phase, Phase::Paused);
            assert!(!decision.done && !decision.action.record_generation);
        }
    } else {
        assert_eq!(announced, hold_recorded.then_some(event_reason::RESUMED));
        assert_eq!(decision.phase, unheld.phase);
        let resumes = hold_recorded && live_on_hold && unheld.write.is_none() && !unheld.drifted;
        if resumes {
            assert_eq!(kind, Some(WriteKind::Resume));
        } else {
            assert_eq!(decision.write, unheld.write);
        }
    }
}

/// Fuzz target `decide`: a strategy and an observation from the bytes, then every documented
/// invariant of the decision: failed ⇔ a failure reason ⇔ an error; a failed decision never
/// writes; done only when successful; the generation is recorded only with a write; a drift is
/// its own row and a reported drift never writes; quiet exactly when no sync flag is set; only
/// `object_changed` or a drift revert starts a canary (and they always do); never widen with no
/// ready updated pod (nor with a crash loop or an unobserved rollout in the default table); an
/// invalid strategy always fails with `InvalidStrategy`; `decide` is deterministic; a hold on
/// request only holds or resumes ([`check_hold`]). Then the create path and `write_failed` on
/// the same strategy.
pub fn decide(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let (Ok(strategy), Ok(observation)) = (strategy(&mut u), observation(&mut u)) else {
        return;
    };
    let decision = decide_pass(&strategy, &observation);
    assert_eq!(decision, decide_pass(&strategy, &observation), "pure");
    check_hold(&mut u, &strategy, &observation);
    let valid = strategy.validate().is_ok();
    let kind = decision.write.map(|write| write.kind);

    // A drift is decided before a retry (883c355: `Report` keeps a failed rollout failed, and
    // `Revert`'s start is the new rollout), so a drifted pass is not a retried one.
    let drifted = strategy.compatibility == Compatibility::Fixed
        && !observation.object_changed
        && observation.drift.is_some();
    assert_eq!(
        decision.retried,
        valid
            && !drifted
            && observation.retry
            && observation
                .previous
                .is_some_and(|previous| previous.phase == Phase::Failed),
        "a retry forgets a failure, and only a failure, unless a drift comes first"
    );
    assert_eq!(decision.phase == Phase::Failed, decision.failure.is_some());
    assert_eq!(decision.phase == Phase::Failed, decision.error.is_some());
    assert!(!decision.done || decision.phase == Phase::Successful);
    assert!(!decision.action.record_generation || decision.write.is_some());
    assert_ne!(kind, Some(WriteKind::Create), "only decide_create creates");
    assert_ne!(decision.failure, Some(FailureReason::InvalidSpec));
    if decision.failure.is_some() {
        assert!(decision.write.is_none(), "a failed decision never writes");
    }
    if !valid {
        assert_eq!(decision.failure, Some(FailureReason::InvalidStrategy));
        return;
    }
    assert_ne!(decision.failure, Some(FailureReason::InvalidStrategy));

    let flags = SyncFlags::of(&strategy, &observation);
    assert_eq!(decision.drifted, drifted);
    assert_eq!(decision.action.quiet, !flags.any() && !drifted);
    if decision.action.quiet {
        assert!(decision.done && decision.write.is_none());
    }
    let reverts = drifted && strategy.drift_policy == DriftPolicy::Revert;
    assert_eq!(
        kind == Some(WriteKind::Start),
        observation.object_changed || reverts,
        "only object_changed or a drift revert starts, and they always do"
    );
    if drifted && strategy.drift_policy == DriftPolicy::Report {
        assert!(decision.write.is_none(), "a reported drift never writes");
    }
    if let Some(write) = decision.write {
        if write.kind != WriteKind::TlsStep || strategy.compatibility == Compatibility::Fixed {
            assert!(write.max_unavailable.is_some());
        }
        assert_eq!(
            write.template_edit.is_some(),
            write.kind == WriteKind::TlsStep
        );
        if write.kind == WriteKind::Start {
            assert_eq!(write.max_unavailable, Some(strategy.canary_max_unavailable));
        }
    }
    if kind == Some(WriteKind::Widen) {
        let ready = observation.updated_ready_pods;
        assert!(ready > 0, "never widen with no ready updated pod");
        assert!(ready < observation.desired_pods);
        if strategy.compatibility == Compatibility::Fixed {
            assert!(
                observation.updated_pods < observation.desired_pods,
                "a widen with every desired pod updated replaces nothing"
            );
        }
        assert_eq!(
            decision.write.and_then(|write| write.max_unavailable),
            Some(strategy.fast_max_unavailable)
        );
    }
    if strategy.compatibility == Compatibility::Fixed {
        assert_eq!(decision.phase == Phase::Successful, decision.done);
        assert_ne!(decision.failure, Some(FailureReason::UnexpectedState));
        if !observation.object_changed && !drifted && flags.any() {
            if observation.crash_loop.is_some() {
                assert_eq!(decision.phase, Phase::Failed, "a crash loop always fails");
            }
            if matches!(
                kind,
                Some(WriteKind::Widen | WriteKind::Finish | WriteKind::TlsStep)
            ) {
                assert!(observation.rollout_observed);
                assert!(observation.crash_loop.is_none());
            }
        }
    }

    let rejected = decision
        .clone()
        .write_failed(&strategy, &observation.name, "boom");
    if decision.write.is_some() {
        assert_eq!(rejected.phase, Phase::Failed);
        assert_eq!(rejected.failure, Some(FailureReason::WriteRejected));
        assert!(rejected.write.is_none() && rejected.error.is_some());
    } else {
        assert_eq!(rejected, decision, "no write, nothing rejected");
    }

    let create = decide_create(&strategy, &observation.name, &observation.version);
    assert_eq!(
        create.write.map(|write| write.kind),
        Some(WriteKind::Create)
    );
    assert!(create.failure.is_none());
}
