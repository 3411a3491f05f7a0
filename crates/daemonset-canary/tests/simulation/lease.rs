//! Invariant 23 on the Lease's history: a holder change is a takeover of an expired lease or of
//! a released one, never of a live one. Both times compared come from the same virtual clock
//! (the replicas' `Clock::tokio_virtual`), so the rule holds to the microsecond.

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::SignedDuration;

/// What a change from `before` to `after` of the one Lease is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Handover {
    /// The same holder (a renewal), or no holder after.
    None,
    /// Another replica took a lease that had no holder (released).
    Released,
    /// Another replica took a held lease at least its duration after the last renewal.
    Expired,
    /// Another replica took a held lease before its duration ran out: the violation.
    Live(String),
}

fn holder(lease: &Lease) -> Option<&str> {
    lease
        .spec
        .as_ref()?
        .holder_identity
        .as_deref()
        .filter(|holder| !holder.is_empty())
}

/// Classifies the change from `before` to `after`.
pub fn handover(before: &Lease, after: &Lease) -> Handover {
    let (Some(old), Some(new)) = (holder(before), holder(after)) else {
        return if holder(before).is_none() && holder(after).is_some() {
            Handover::Released
        } else {
            Handover::None
        };
    };
    if old == new {
        return Handover::None;
    }
    let spec = (before.spec.as_ref(), after.spec.as_ref());
    let renewed = spec.0.and_then(|s| s.renew_time.as_ref()).map(|t| t.0);
    let duration = spec.0.and_then(|s| s.lease_duration_seconds).unwrap_or(0);
    let acquired = spec.1.and_then(|s| s.acquire_time.as_ref()).map(|t| t.0);
    let (Some(renewed), Some(acquired)) = (renewed, acquired) else {
        return Handover::Live(format!(
            "{new} took the lease from {old} with no renewTime or acquireTime to judge by"
        ));
    };
    let waited = acquired.duration_since(renewed);
    if waited >= SignedDuration::from_secs(i64::from(duration)) {
        Handover::Expired
    } else {
        Handover::Live(format!(
            "{new} took the lease from {old} {waited:#} after its last renewal; its duration is {duration} s"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
    use k8s_openapi::jiff::Timestamp;

    fn lease(holder: &str, acquired: i64, renewed: i64) -> Lease {
        let at = |s| MicroTime(Timestamp::from_second(1_767_225_600 + s).unwrap());
        Lease {
            spec: Some(LeaseSpec {
                holder_identity: Some(holder.to_owned()),
                lease_duration_seconds: Some(15),
                acquire_time: Some(at(acquired)),
                renew_time: Some(at(renewed)),
                ..LeaseSpec::default()
            }),
            ..Lease::default()
        }
    }

    #[test]
    fn handovers_are_classified() {
        let a = lease("a", 0, 10);
        assert_eq!(handover(&a, &lease("a", 0, 12)), Handover::None);
        assert_eq!(handover(&a, &lease("b", 25, 25)), Handover::Expired);
        assert!(matches!(
            handover(&a, &lease("b", 24, 24)),
            Handover::Live(_)
        ));
        assert_eq!(
            handover(&lease("", 0, 10), &lease("b", 11, 11)),
            Handover::Released
        );
    }
}
