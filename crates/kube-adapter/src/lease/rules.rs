//! The rules of the `coordination.k8s.io/v1` Lease protocol, as client-go's `leaderelection`
//! package plays them, written as pure functions of what a candidate observed and its clock.
//!
//! The rules (each has a test below and one against canary-sim in `tests/it/lease.rs`):
//!
//! 1. **No Lease**: create it, held by us, `leaseTransitions` 0.
//! 2. **Held by us**: renew, moving `renewTime` only (`acquireTime` and `leaseTransitions`
//!    kept).
//! 3. **Held by another, fresh**: wait. "Fresh" is judged on *our* clock: the Lease expires
//!    `leaseDurationSeconds` after we first saw its current contents, never from the
//!    `renewTime` another machine wrote, so clock skew between replicas cannot make a live
//!    lease look expired.
//! 4. **Held by another, unchanged for its duration**: take it over (`acquireTime` now,
//!    `leaseTransitions` + 1).
//! 5. **Released** (no holder, as a clean stop leaves it): take it at once.
//! 6. Every write carries the `resourceVersion` that was read (`replace`, optimistic
//!    concurrency), so of two candidates acting on one observation exactly one wins; the other
//!    gets 409 and observes again.
//! 7. A leader stops writing `renew_deadline` after the *start* of its last successful renewal
//!    ([`super::Leadership`]), a deadline shorter than the lease duration: by the time another
//!    replica may take over (rule 4), the old leader has stopped, even if it never hears back.
//! 8. On a clean stop, the leader releases the Lease (no holder, duration 1 s) if it still holds
//!    it; a release after a takeover writes nothing.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::LeaseSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// The leader-election part of a Lease's spec, as the rules read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// `holderIdentity`; `None` when empty or absent (released).
    pub holder: Option<String>,
    /// `leaseDurationSeconds`, the holder's promise: it renews within this.
    pub duration: Duration,
    /// `acquireTime`.
    pub acquire_time: Option<Timestamp>,
    /// `renewTime`.
    pub renew_time: Option<Timestamp>,
    /// `leaseTransitions`.
    pub transitions: i32,
}

impl Record {
    /// The record of `spec`; a missing or non-positive duration reads as `fallback` (the
    /// candidate's own), so a hand-made Lease cannot make a holder expire at once.
    pub fn of(spec: Option<&LeaseSpec>, fallback: Duration) -> Self {
        let spec = spec.cloned().unwrap_or_default();
        Self {
            holder: spec.holder_identity.filter(|holder| !holder.is_empty()),
            duration: spec
                .lease_duration_seconds
                .and_then(|seconds| u64::try_from(seconds).ok())
                .filter(|seconds| *seconds > 0)
                .map_or(fallback, Duration::from_secs),
            acquire_time: spec.acquire_time.map(|t| t.0),
            renew_time: spec.renew_time.map(|t| t.0),
            transitions: spec.lease_transitions.unwrap_or(0),
        }
    }
}

/// A record and when this candidate first saw it as it is (its own clock).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    /// The record.
    pub record: Record,
    /// When it was first seen with these contents.
    pub since: Timestamp,
}

impl Observed {
    /// `previous` updated with `record` read at `now`: the observation time moves only when
    /// the contents changed (rule 3).
    pub fn update(previous: Option<Self>, record: Record, now: Timestamp) -> Self {
        match previous {
            Some(previous) if previous.record == record => previous,
            _ => Self { record, since: now },
        }
    }

    /// When the holder's lease runs out if nothing changes (rule 4).
    pub fn expires_at(&self) -> Timestamp {
        add(self.since, self.record.duration)
    }
}

/// What a candidate does with what it observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Rule 1: there is no Lease; create it.
    Create,
    /// Rule 2: we hold it; renew.
    Renew,
    /// Rules 4 and 5: it is free (`released`) or expired; take it.
    TakeOver {
        /// No holder (a clean release) rather than an expired one.
        released: bool,
    },
    /// Rule 3: another replica holds it and it has not expired.
    Wait {
        /// The holder.
        holder: String,
        /// When it expires if it does not change.
        expires_at: Timestamp,
    },
}

/// The step for candidate `me` at `now`, given the Lease observed (`None`: there is none).
pub fn step(observed: Option<&Observed>, me: &str, now: Timestamp) -> Step {
    let Some(observed) = observed else {
        return Step::Create;
    };
    match observed.record.holder.as_deref() {
        None => Step::TakeOver { released: true },
        Some(holder) if holder == me => Step::Renew,
        Some(holder) => {
            let expires_at = observed.expires_at();
            if now >= expires_at {
                Step::TakeOver { released: false }
            } else {
                Step::Wait {
                    holder: holder.to_owned(),
                    expires_at,
                }
            }
        }
    }
}

/// The spec that `step` writes for `me` at `now` over `previous` (the spec read, `None` when
/// creating). `None` for [`Step::Wait`], which writes nothing. Fields this protocol does not
/// own (`preferredHolder`, `strategy`) are kept.
pub fn written(
    step: &Step,
    previous: Option<&LeaseSpec>,
    me: &str,
    duration: Duration,
    now: Timestamp,
) -> Option<LeaseSpec> {
    let mut spec = previous.cloned().unwrap_or_default();
    let record = Record::of(previous, duration);
    let now_micro = Some(MicroTime(now));
    match step {
        Step::Wait { .. } => return None,
        Step::Create => {
            spec.acquire_time = now_micro.clone();
            spec.lease_transitions = Some(0);
        }
        Step::Renew => {
            spec.acquire_time = record.acquire_time.map(MicroTime).or(now_micro.clone());
            spec.lease_transitions = Some(record.transitions);
        }
        Step::TakeOver { .. } => {
            spec.acquire_time = now_micro.clone();
            spec.lease_transitions = Some(record.transitions.saturating_add(1));
        }
    }
    spec.holder_identity = Some(me.to_owned());
    spec.lease_duration_seconds = Some(seconds(duration));
    spec.renew_time = now_micro;
    Some(spec)
}

/// The spec a clean stop leaves (rule 8): no holder, a one-second duration, the transitions
/// kept, so that the next candidate takes it at once and counts one more transition.
pub fn released(previous: &LeaseSpec, now: Timestamp) -> LeaseSpec {
    LeaseSpec {
        holder_identity: None,
        lease_duration_seconds: Some(1),
        acquire_time: Some(MicroTime(now)),
        renew_time: Some(MicroTime(now)),
        ..previous.clone()
    }
}

/// `duration` in whole seconds for `leaseDurationSeconds` (at least 1).
fn seconds(duration: Duration) -> i32 {
    i32::try_from(duration.as_secs()).unwrap_or(i32::MAX).max(1)
}

/// `at` plus `duration`, saturating.
pub fn add(at: Timestamp, duration: Duration) -> Timestamp {
    SignedDuration::try_from(duration)
        .ok()
        .and_then(|d| at.checked_add(d).ok())
        .unwrap_or(Timestamp::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: Duration = Duration::from_secs(15);

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(1_767_225_600 + second).unwrap_or(Timestamp::UNIX_EPOCH)
    }

    fn held_by(holder: &str, since: i64) -> Observed {
        Observed {
            record: Record {
                holder: Some(holder.to_owned()),
                duration: D,
                acquire_time: Some(at(0)),
                renew_time: Some(at(since)),
                transitions: 3,
            },
            since: at(since),
        }
    }

    #[test]
    fn rule_1_no_lease_is_created_with_no_transition() {
        assert_eq!(step(None, "a", at(0)), Step::Create);
        let spec = written(&Step::Create, None, "a", D, at(0)).unwrap_or_default();
        assert_eq!(spec.holder_identity.as_deref(), Some("a"));
        assert_eq!(spec.lease_transitions, Some(0));
        assert_eq!(spec.lease_duration_seconds, Some(15));
        assert_eq!(spec.acquire_time, Some(MicroTime(at(0))));
    }

    #[test]
    fn rule_2_our_own_lease_is_renewed_keeping_acquire_time_and_transitions() {
        let observed = held_by("a", 10);
        assert_eq!(step(Some(&observed), "a", at(11)), Step::Renew);
        let previous = written(&Step::Create, None, "a", D, at(0)).unwrap_or_default();
        let spec = written(&Step::Renew, Some(&previous), "a", D, at(11)).unwrap_or_default();
        assert_eq!(spec.acquire_time, Some(MicroTime(at(0))));
        assert_eq!(spec.renew_time, Some(MicroTime(at(11))));
        assert_eq!(spec.lease_transitions, Some(0));
    }

    #[test]
    fn rule_3_a_fresh_lease_of_another_is_waited_for_on_our_clock() {
        let observed = held_by("b", 10);
        assert_eq!(
            step(Some(&observed), "a", at(24)),
            Step::Wait {
                holder: "b".to_owned(),
                expires_at: at(25)
            }
        );
        assert!(written(&step(Some(&observed), "a", at(24)), None, "a", D, at(24)).is_none());
        // A renewTime far in the past (another machine's clock) does not matter: what counts
        // is when this candidate saw the contents change.
        let mut skewed = held_by("b", 10);
        skewed.record.renew_time = Some(at(-3_600));
        assert!(matches!(
            step(Some(&skewed), "a", at(11)),
            Step::Wait { .. }
        ));
    }

    #[test]
    fn rule_3_the_observation_time_moves_only_when_the_contents_change() {
        let first = held_by("b", 10);
        let same = Observed::update(Some(first.clone()), first.record.clone(), at(20));
        assert_eq!(same.since, at(10), "unchanged contents keep their age");
        let mut renewed = first.record.clone();
        renewed.renew_time = Some(at(19));
        let moved = Observed::update(Some(first), renewed, at(20));
        assert_eq!(moved.since, at(20), "a renewal is seen as fresh");
    }

    #[test]
    fn rule_4_a_lease_unchanged_for_its_duration_is_taken_over() {
        let observed = held_by("b", 10);
        assert_eq!(
            step(Some(&observed), "a", at(25)),
            Step::TakeOver { released: false }
        );
        let previous = LeaseSpec {
            holder_identity: Some("b".to_owned()),
            acquire_time: Some(MicroTime(at(0))),
            lease_transitions: Some(3),
            ..LeaseSpec::default()
        };
        let spec = written(
            &Step::TakeOver { released: false },
            Some(&previous),
            "a",
            D,
            at(25),
        )
        .unwrap_or_default();
        assert_eq!(spec.holder_identity.as_deref(), Some("a"));
        assert_eq!(spec.acquire_time, Some(MicroTime(at(25))));
        assert_eq!(spec.lease_transitions, Some(4));
    }

    #[test]
    fn rule_4_the_holders_own_duration_counts() {
        let mut observed = held_by("b", 10);
        observed.record.duration = Duration::from_secs(60);
        assert!(matches!(
            step(Some(&observed), "a", at(30)),
            Step::Wait { .. }
        ));
        assert_eq!(
            step(Some(&observed), "a", at(70)),
            Step::TakeOver { released: false }
        );
    }

    #[test]
    fn rule_5_a_released_lease_is_taken_at_once() {
        let spec = released(
            &LeaseSpec {
                holder_identity: Some("b".to_owned()),
                lease_transitions: Some(2),
                ..LeaseSpec::default()
            },
            at(5),
        );
        assert_eq!(spec.holder_identity, None);
        assert_eq!(spec.lease_transitions, Some(2));
        let observed = Observed {
            record: Record::of(Some(&spec), D),
            since: at(5),
        };
        assert_eq!(
            step(Some(&observed), "a", at(5)),
            Step::TakeOver { released: true }
        );
        // An empty string is no holder either.
        let empty = Record::of(
            Some(&LeaseSpec {
                holder_identity: Some(String::new()),
                ..LeaseSpec::default()
            }),
            D,
        );
        assert_eq!(empty.holder, None);
    }

    #[test]
    fn a_missing_or_bad_duration_reads_as_ours() {
        for seconds in [None, Some(0), Some(-5)] {
            let record = Record::of(
                Some(&LeaseSpec {
                    lease_duration_seconds: seconds,
                    ..LeaseSpec::default()
                }),
                D,
            );
            assert_eq!(record.duration, D, "{seconds:?}");
        }
    }

    #[test]
    fn fields_of_other_protocols_are_kept() {
        let previous = LeaseSpec {
            preferred_holder: Some("b".to_owned()),
            strategy: Some("OldestEmulationVersion".to_owned()),
            ..LeaseSpec::default()
        };
        let spec = written(&Step::Renew, Some(&previous), "a", D, at(1)).unwrap_or_default();
        assert_eq!(spec.preferred_holder.as_deref(), Some("b"));
        assert_eq!(spec.strategy.as_deref(), Some("OldestEmulationVersion"));
    }

    proptest::proptest! {
        /// Over any holder, age and duration: a held lease is taken over exactly when it has
        /// been unchanged for its duration, ours is renewed, a released one taken; and every
        /// write names us, renews now and counts a transition exactly when the holder changes.
        #[test]
        fn steps_and_writes_follow_the_rules(
            holder in proptest::option::of(proptest::sample::select(vec!["a", "b"])),
            age_ms in 0u64..120_000,
            duration_s in 1u64..60,
            transitions in 0i32..i32::MAX,
        ) {
            let since = at(0);
            let now = add(since, Duration::from_millis(age_ms));
            let previous = LeaseSpec {
                holder_identity: holder.map(str::to_owned),
                lease_duration_seconds: i32::try_from(duration_s).ok(),
                acquire_time: Some(MicroTime(at(-100))),
                lease_transitions: Some(transitions),
                ..LeaseSpec::default()
            };
            let observed = Observed { record: Record::of(Some(&previous), D), since };
            let expired = age_ms >= duration_s * 1000;
            let step = step(Some(&observed), "a", now);
            let expected = match holder {
                None => Step::TakeOver { released: true },
                Some("a") => Step::Renew,
                Some(_) if expired => Step::TakeOver { released: false },
                Some(other) => Step::Wait {
                    holder: other.to_owned(),
                    expires_at: add(since, Duration::from_secs(duration_s)),
                },
            };
            proptest::prop_assert_eq!(&step, &expected);
            let written = written(&step, Some(&previous), "a", D, now);
            if let Some(spec) = written {
                proptest::prop_assert_eq!(spec.holder_identity.as_deref(), Some("a"));
                proptest::prop_assert_eq!(spec.renew_time, Some(MicroTime(now)));
                let counted = if holder == Some("a") { transitions } else { transitions.saturating_add(1) };
                proptest::prop_assert_eq!(spec.lease_transitions, Some(counted));
            } else {
                let waits = matches!(step, Step::Wait { .. });
                proptest::prop_assert!(waits, "{:?} wrote nothing", step);
            }
        }
    }
}
