//! The leader-election rules (`canary_kube_adapter::lease::rules`) on arbitrary Leases and
//! times: the step each rule names, and what it writes.
//!
//! Input: a Lease spec as JSON, a NUL, then bytes for the candidate (`a` or the holder), how old
//! the observation is, and the candidate's own duration.

use std::time::Duration;

use canary_kube_adapter::lease::rules::{self, Observed, Record, Step};
use canary_predicates::k8s_openapi::api::coordination::v1::LeaseSpec;
use canary_predicates::k8s_openapi::jiff::{SignedDuration, Timestamp};

/// Checks the rules on one input.
pub fn lease(data: &[u8]) {
    let (json, rest) = crate::two_parts(data);
    let Ok(spec) = serde_json::from_slice::<LeaseSpec>(json) else {
        return;
    };
    let byte = |i: usize| rest.get(i).copied().unwrap_or(0);
    let ours = Duration::from_secs(u64::from(byte(2) % 120));
    let record = Record::of(Some(&spec), ours.max(Duration::from_secs(1)));
    let holder = record.holder.clone();
    let me = match (byte(0) % 3, &holder) {
        (0, Some(holder)) => holder.clone(),
        (1, _) => String::new(),
        _ => "a".to_owned(),
    };
    let Ok(since) = Timestamp::from_second(1_767_225_600) else {
        return;
    };
    let age = SignedDuration::from_millis(i64::from(u16::from_le_bytes([byte(1), byte(3)])) * 10);
    let Ok(now) = since.checked_add(age) else {
        return;
    };

    // Rule 3: an unchanged record keeps its observation time; a changed one is seen now.
    let observed = Observed::update(None, record.clone(), since);
    assert_eq!(observed.since, since);
    let same = Observed::update(Some(observed.clone()), record.clone(), now);
    assert_eq!(same.since, since, "an unchanged record aged");

    let step = rules::step(Some(&observed), &me, now);
    match (&holder, &step) {
        (None, Step::TakeOver { released: true }) => {}
        (Some(h), Step::Renew) if *h == me => {}
        (Some(h), Step::Wait { holder, expires_at }) => {
            assert_ne!(*h, me, "waiting for ourselves");
            assert_eq!(holder, h);
            assert!(now < *expires_at, "waiting for an expired lease");
            assert_eq!(*expires_at, rules::add(since, record.duration));
        }
        (Some(h), Step::TakeOver { released: false }) => {
            assert_ne!(*h, me, "taking over our own lease");
            assert!(
                now >= rules::add(since, record.duration),
                "a live lease taken over: {age:?} old, duration {:?}",
                record.duration
            );
        }
        (holder, step) => panic!("holder {holder:?}, me {me:?}: step {step:?}"),
    }
    assert_eq!(rules::step(None, &me, now), Step::Create);

    // What the step writes: ours, renewed now, with the transitions it owes.
    match rules::written(&step, Some(&spec), &me, ours, now) {
        None => assert!(matches!(step, Step::Wait { .. }), "{step:?} wrote nothing"),
        Some(written) => {
            assert_eq!(written.holder_identity.as_deref(), Some(me.as_str()));
            assert_eq!(written.renew_time.map(|t| t.0), Some(now));
            assert!(written.lease_duration_seconds.is_some_and(|s| s >= 1));
            assert_eq!(written.preferred_holder, spec.preferred_holder);
            assert_eq!(written.strategy, spec.strategy);
            let transitions = written.lease_transitions.unwrap_or(-1);
            match step {
                Step::Renew => {
                    assert_eq!(transitions, record.transitions);
                    assert_eq!(
                        written.acquire_time.map(|t| t.0),
                        record.acquire_time.or(Some(now))
                    );
                }
                Step::TakeOver { .. } => {
                    assert_eq!(transitions, record.transitions.saturating_add(1));
                    assert_eq!(written.acquire_time.map(|t| t.0), Some(now));
                }
                Step::Create | Step::Wait { .. } => {}
            }
        }
    }

    // Rule 8: a release leaves no holder and keeps the count.
    let released = rules::released(&spec, now);
    assert_eq!(Record::of(Some(&released), ours).holder, None);
    assert_eq!(released.lease_transitions, spec.lease_transitions);
}
