//! Whose a live DaemonSet is, and what changed in it: the controller owner of a DaemonSet,
//! the controller's own write whose status record was lost (not drift), and the one-line
//! description of a hand edit for the `DriftDetected` event and log.
//!
//! Invariant: drift is told from what the controller wrote (its template hash), never from a
//! deep comparison that the API server's defaulting would break.

use canary_predicates::live_max_unavailable;
use canary_state_machine::{MaxUnavailable, Phase, Strategy};
use k8s_openapi::api::apps::v1::DaemonSet;

use crate::Error;
use crate::crd::{CanaryDaemonSet, CanaryDaemonSetStatus};
use crate::desired::{RollingUpdateWrite, live_template_hash, set_max_unavailable};

/// Who controls a live DaemonSet, as far as this CanaryDaemonSet is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Controller {
    /// This CanaryDaemonSet (its controller owner reference, by UID).
    Us,
    /// Another controller.
    Other {
        /// Its kind.
        kind: String,
        /// Its name.
        name: String,
    },
    /// No controller: adopting it must be asked for.
    Nobody,
}

pub(super) fn controller_of(live: &DaemonSet, cds: &CanaryDaemonSet) -> Controller {
    let owner = live
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true));
    match owner {
        None => Controller::Nobody,
        Some(owner)
            if owner.kind == "CanaryDaemonSet" && Some(&owner.uid) == cds.metadata.uid.as_ref() =>
        {
            Controller::Us
        }
        Some(owner) => Controller::Other {
            kind: owner.kind.clone(),
            name: owner.name.clone(),
        },
    }
}

/// Whether a template hash that differs from the recorded one is this controller's own write
/// whose record was lost: the process died, or the status write was refused, between the
/// DaemonSet write and the status write. Its widen and finish writes move only
/// `maxUnavailable`, to the canary or the fast value, while a rollout is under way; the live
/// DaemonSet is then the recorded one with only that field moved. That is the rollout's own
/// progress, not drift (the state machine reads `maxUnavailable` from the live object anyway),
/// and calling it drift would restart a finished rollout after every such crash.
pub(super) fn own_unrecorded_write(
    live: &DaemonSet,
    status: &CanaryDaemonSetStatus,
    written_hash: &str,
    strategy: &Strategy,
) -> Result<bool, Error> {
    let in_flight = status
        .phase
        .as_deref()
        .and_then(|p| p.parse::<Phase>().ok())
        .is_some_and(|phase| {
            matches!(
                phase,
                Phase::Started | Phase::Canary | Phase::Increasing | Phase::Waiting
            )
        });
    let live_max = live_max_unavailable(live);
    let written_by_us = [
        strategy.canary_max_unavailable,
        strategy.fast_max_unavailable,
    ]
    .iter()
    .any(|max| max.to_live() == live_max);
    let recorded = status
        .current_max_unavailable
        .as_deref()
        .and_then(|max| max.parse::<MaxUnavailable>().ok());
    let (true, true, Some(recorded)) = (in_flight, written_by_us, recorded) else {
        return Ok(false);
    };
    let mut as_recorded = live.clone();
    set_max_unavailable(&mut as_recorded, recorded, RollingUpdateWrite::KeepMaxSurge);
    Ok(live_template_hash(&as_recorded)? == written_hash)
}

/// What someone else changed in `live` against what the controller wants (`desired`): the
/// images of the containers that differ, else the update strategy, else "pod template".
pub(super) fn describe_drift(
    live: &DaemonSet,
    desired: &DaemonSet,
    status: &CanaryDaemonSetStatus,
) -> String {
    let containers = |ds: &DaemonSet| {
        ds.spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .map(|s| s.containers.clone())
            .unwrap_or_default()
    };
    let wanted = containers(desired);
    let images: Vec<String> = containers(live)
        .iter()
        .filter_map(|container| {
            let before = wanted.iter().find(|w| w.name == container.name)?;
            (before.image != container.image).then(|| {
                format!(
                    "image of container {}: {} → {}",
                    container.name,
                    before.image.as_deref().unwrap_or("-"),
                    container.image.as_deref().unwrap_or("-")
                )
            })
        })
        .collect();
    if !images.is_empty() {
        return images.join(", ");
    }
    let live_max = live_max_unavailable(live).to_string();
    match status.current_max_unavailable.as_deref() {
        Some(written) if written != live_max => {
            format!("update strategy: maxUnavailable {written} → {live_max}")
        }
        _ => "pod template".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::Resource;

    #[test]
    fn the_controller_of_a_daemon_set_is_told_by_uid() {
        let cds = crate::reconcile::plan::tests::cds();
        let mut live = DaemonSet::default();
        assert_eq!(controller_of(&live, &cds), Controller::Nobody);
        live.metadata.owner_references = Some(vec![cds.controller_owner_ref(&()).unwrap()]);
        assert_eq!(controller_of(&live, &cds), Controller::Us);
        let mut other = cds.controller_owner_ref(&()).unwrap();
        other.uid = "someone-else".into();
        live.metadata.owner_references = Some(vec![other]);
        assert_eq!(
            controller_of(&live, &cds),
            Controller::Other {
                kind: "CanaryDaemonSet".into(),
                name: "agent".into()
            }
        );
    }
}
