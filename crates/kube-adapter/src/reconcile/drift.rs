//! Whose a live DaemonSet is, and what changed in it: the controller owner of a DaemonSet,
//! the controller's own write whose status record was lost (not drift), and the one-line
//! description of a hand edit for the `DriftDetected` event and log.
//!
//! Invariant: drift is told from what the controller wrote (its template hash), never from a
//! deep comparison that the API server's defaulting would break.

use canary_predicates::{Target, live_max_unavailable};
use canary_state_machine::{MaxUnavailable, Phase, Strategy};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Container;

use crate::Error;
use crate::crd::{CanaryDaemonSet, CanaryDaemonSetStatus};
use crate::desired::{
    ON_DELETE, RollingUpdateWrite, live_template_hash, set_max_unavailable, strategy_type,
    with_strategy_type,
};
use crate::meta::object_meta_modified;
use crate::status::decided_for_another_target;

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

/// What the controller's own writes may have changed in a live DaemonSet since the record.
pub(super) struct OwnWrites<'a> {
    /// The strategy: its canary and fast `maxUnavailable` are the values a write sets.
    pub strategy: &'a Strategy,
    /// A hold on request is asked for or recorded: its write (or the one that ends it) may
    /// have moved the strategy type between `RollingUpdate` and `OnDelete`.
    pub hold: bool,
}

/// Whether a template hash that differs from the recorded one is this controller's own write
/// whose record was lost: the process died, or the status write was refused, between the
/// DaemonSet write and the status write. Its widen and finish writes move only
/// `maxUnavailable`, to the canary or the fast value, while a rollout is under way, and a
/// hold on request and its end move only the strategy type; the live DaemonSet is then the
/// recorded one with only those fields moved. That is the rollout's own progress, not drift
/// (the state machine reads `maxUnavailable` from the live object anyway), and calling it
/// drift would restart a finished rollout after every such crash. An `OnDelete` nobody asked
/// for is drift.
pub(super) fn own_unrecorded_write(
    live: &DaemonSet,
    status: &CanaryDaemonSetStatus,
    written_hash: &str,
    own: &OwnWrites<'_>,
) -> Result<bool, Error> {
    let strategy = own.strategy;
    let in_flight = status.phase.is_some_and(|phase| {
        matches!(
            phase,
            Phase::Started | Phase::Canary | Phase::Increasing | Phase::Waiting | Phase::Paused
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
    let type_moved_by_us = own.hold || strategy_type(live) != ON_DELETE;
    let (true, true, true, Some(recorded)) = (in_flight, written_by_us, type_moved_by_us, recorded)
    else {
        return Ok(false);
    };
    let mut as_recorded = live.clone();
    set_max_unavailable(&mut as_recorded, recorded, RollingUpdateWrite::KeepMaxSurge);
    if live_template_hash(&as_recorded)? == written_hash {
        return Ok(true);
    }
    // The record was taken while the hold's `OnDelete` was in (its end's record was lost).
    if own.hold {
        let held = with_strategy_type(&as_recorded, ON_DELETE);
        return Ok(live_template_hash(&held)? == written_hash);
    }
    Ok(false)
}

pub(super) use crate::crd::RESTARTED_AT;

/// The pod template's `restartedAt` of `ds`, if any.
pub(super) fn restarted_at(ds: &DaemonSet) -> Option<&str> {
    ds.spec
        .as_ref()?
        .template
        .metadata
        .as_ref()?
        .annotations
        .as_ref()?
        .get(RESTARTED_AT)
        .map(String::as_str)
}

/// `ds` with its pod template's `restartedAt` set to `value` (removed for `None`).
fn with_restarted_at(ds: &DaemonSet, value: Option<&str>) -> DaemonSet {
    let mut ds = ds.clone();
    if let Some(spec) = ds.spec.as_mut() {
        let annotations = spec
            .template
            .metadata
            .get_or_insert_with(Default::default)
            .annotations
            .get_or_insert_with(Default::default);
        match value {
            Some(value) => {
                annotations.insert(RESTARTED_AT.to_owned(), value.to_owned());
            }
            None => {
                annotations.remove(RESTARTED_AT);
            }
        }
        // What had no annotation (or no metadata) hashes as it did.
        if let Some(meta) = spec.template.metadata.as_mut() {
            if meta.annotations.as_ref().is_some_and(|a| a.is_empty()) {
                meta.annotations = None;
            }
            if *meta == k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta::default() {
                spec.template.metadata = None;
            }
        }
    }
    ds
}

/// The `restartedAt` someone else stamped on the live template (`kubectl rollout restart`),
/// when that stamp is all that differs from what the controller wrote (`written_hash`, the
/// template of the spec as it is, `desired`): a restart to roll out canary first, not a hand
/// edit to revert. `None` for any other change, or one that also moved something else.
pub(super) fn restart_by_someone_else(
    live: &DaemonSet,
    desired: &DaemonSet,
    written_hash: &str,
) -> Result<Option<String>, Error> {
    let Some(stamp) = restarted_at(live) else {
        return Ok(None);
    };
    let ours = restarted_at(desired);
    if ours == Some(stamp) {
        return Ok(None);
    }
    let unstamped = with_restarted_at(live, ours);
    Ok((live_template_hash(&unstamped)? == written_hash).then(|| stamp.to_owned()))
}

/// Whether `live` is the start of `target` that this controller wrote, in this process or in
/// another, and whose status record was lost: the status was decided for another target, and
/// `live` carries what the start of `target` writes wherever a hand edit would show, the
/// target's annotations on the object and on its pod template and the images of `desired`.
/// The process that wrote it died, or its term ended, before the status write; the leader
/// after it, another process, has no other way to know (soak seed 28000728: it reported the
/// start as a hand edit under `driftPolicy: Report`, and the new version rolled out
/// unsupervised while the status said `successful` at the old one).
pub(super) fn unrecorded_start(
    live: &DaemonSet,
    desired: &DaemonSet,
    status: &CanaryDaemonSetStatus,
    target: &Target,
) -> bool {
    let template_meta = |ds: &DaemonSet| {
        ds.spec
            .as_ref()
            .and_then(|s| s.template.metadata.clone())
            .unwrap_or_default()
    };
    decided_for_another_target(status, target)
        && !object_meta_modified(&desired.metadata, &live.metadata)
        && !object_meta_modified(&template_meta(desired), &template_meta(live))
        && changed_images(live, desired).is_empty()
}

/// The containers of `ds`'s pod template.
fn containers(ds: &DaemonSet) -> &[Container] {
    ds.spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .map_or(&[], |s| s.containers.as_slice())
}

/// The images of `live`'s containers that differ from `desired`'s, each as "image of
/// container NAME: DESIRED → LIVE"; a container `desired` does not have is not compared.
fn changed_images(live: &DaemonSet, desired: &DaemonSet) -> Vec<String> {
    let wanted = containers(desired);
    containers(live)
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
        .collect()
}

/// What someone else changed in `live` against what the controller wants (`desired`): the
/// images of the containers that differ, else the update strategy's type, else its
/// `maxUnavailable`, else "pod template".
pub(super) fn describe_drift(
    live: &DaemonSet,
    desired: &DaemonSet,
    status: &CanaryDaemonSetStatus,
) -> String {
    let images = changed_images(live, desired);
    if !images.is_empty() {
        return images.join(", ");
    }
    let (wanted_type, live_type) = (strategy_type(desired), strategy_type(live));
    if wanted_type != live_type {
        return format!("update strategy: type {wanted_type} → {live_type}");
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

    fn ds(type_: &str, image: &str) -> DaemonSet {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "agent", "generation": 3},
            "spec": {
                "selector": {"matchLabels": {"app": "agent"}},
                "template": {"spec": {"containers": [{"name": "agent", "image": image}]}},
                "updateStrategy": {"type": type_, "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}
            }
        }))
        .unwrap()
    }

    #[test]
    fn a_restart_stamp_alone_is_a_restart_anything_more_is_drift() {
        let written = ds("RollingUpdate", "agent:v1");
        let hash = live_template_hash(&written).unwrap();
        let restarted = with_restarted_at(&written, Some("2026-12-07T10:00:00Z"));
        assert_eq!(
            restart_by_someone_else(&restarted, &written, &hash)
                .unwrap()
                .as_deref(),
            Some("2026-12-07T10:00:00Z")
        );
        // A second restart over a spec that carries an earlier stamp.
        let spec_stamped = with_restarted_at(&written, Some("2026-12-01T00:00:00Z"));
        let stamped_hash = live_template_hash(&spec_stamped).unwrap();
        assert!(
            restart_by_someone_else(&restarted, &spec_stamped, &stamped_hash)
                .unwrap()
                .is_some()
        );
        // The stamp the spec already carries (the restart taken) is no restart.
        assert!(
            restart_by_someone_else(&restarted, &restarted, &hash)
                .unwrap()
                .is_none()
        );
        // A restart together with another change (an image) is drift.
        let both = with_restarted_at(
            &ds("RollingUpdate", "agent:v2"),
            Some("2026-12-07T10:00:00Z"),
        );
        assert!(
            restart_by_someone_else(&both, &written, &hash)
                .unwrap()
                .is_none()
        );
        // No stamp: no restart.
        assert!(
            restart_by_someone_else(&ds("RollingUpdate", "agent:v2"), &written, &hash)
                .unwrap()
                .is_none()
        );
    }

    fn status(phase: Phase, written: &DaemonSet) -> CanaryDaemonSetStatus {
        CanaryDaemonSetStatus {
            phase: Some(phase),
            current_max_unavailable: Some("1".into()),
            daemon_set_template_hash: Some(live_template_hash(written).unwrap()),
            ..CanaryDaemonSetStatus::default()
        }
    }

    /// A hold's write (or its end's) whose record was lost is the controller's own while the
    /// hold is asked for or recorded; an `OnDelete` nobody asked for is drift.
    #[test]
    fn the_strategy_type_moved_by_a_hold_is_ours_only_while_a_hold_is_known() {
        let strategy = Strategy::default();
        let own = |hold| OwnWrites {
            strategy: &strategy,
            hold,
        };
        let rolling = ds("RollingUpdate", "agent:v2");
        let on_delete = ds("OnDelete", "agent:v2");
        let before_hold = status(Phase::Canary, &rolling);
        let is_own = |live: &DaemonSet, status: &CanaryDaemonSetStatus, hold| {
            let written = status.daemon_set_template_hash.as_deref().unwrap();
            own_unrecorded_write(live, status, written, &own(hold)).unwrap()
        };
        assert!(
            is_own(&on_delete, &before_hold, true),
            "the hold's record lost"
        );
        assert!(
            !is_own(&on_delete, &before_hold, false),
            "a hand-made OnDelete"
        );
        let held = status(Phase::Paused, &on_delete);
        assert!(is_own(&rolling, &held, true), "the resume's record lost");
        assert!(!is_own(&rolling, &held, false));
        let edited = ds("OnDelete", "agent:hand");
        assert!(
            !is_own(&edited, &before_hold, true),
            "a template edit stays drift"
        );
        let status = status(Phase::Canary, &rolling);
        assert_eq!(
            describe_drift(&on_delete, &rolling, &status),
            "update strategy: type RollingUpdate → OnDelete"
        );
        assert_eq!(
            describe_drift(&edited, &on_delete, &status),
            "image of container agent: agent:v2 → agent:hand"
        );
    }

    /// Only a live DaemonSet that carries a new target's annotations and images, while the
    /// status names another target, is taken for that target's unrecorded start.
    #[test]
    fn an_unrecorded_start_carries_the_new_target_where_a_hand_edit_would_show() {
        let keys = canary_predicates::AnnotationKeys::default();
        let target = |version: &str| Target {
            version: version.into(),
            registry: "reg".into(),
            deployment_id: format!("id-{version}"),
        };
        let of = |version: &str, image: &str| {
            let mut ds = ds("RollingUpdate", image);
            let annotations = target(version).annotations(&keys);
            ds.metadata.annotations = Some(annotations.clone());
            if let Some(spec) = ds.spec.as_mut() {
                spec.template.metadata =
                    Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                        annotations: Some(annotations),
                        ..Default::default()
                    });
            }
            ds
        };
        let desired = of("v2", "agent:v2");
        let at_v1 = CanaryDaemonSetStatus {
            target_version: Some("v1".into()),
            target_registry: Some("reg".into()),
            target_deployment_id: Some("id-v1".into()),
            ..status(Phase::Successful, &of("v1", "agent:v1"))
        };
        assert!(unrecorded_start(&desired, &desired, &at_v1, &target("v2")));
        assert!(
            !unrecorded_start(&of("v2", "agent:hand"), &desired, &at_v1, &target("v2")),
            "an image the spec does not ask for is a hand edit"
        );
        assert!(
            !unrecorded_start(&of("v1", "agent:v2"), &desired, &at_v1, &target("v2")),
            "the old target's annotations: not the new target's start"
        );
        let at_v2 = CanaryDaemonSetStatus {
            target_version: Some("v2".into()),
            target_deployment_id: Some("id-v2".into()),
            ..at_v1
        };
        assert!(
            !unrecorded_start(&desired, &desired, &at_v2, &target("v2")),
            "a status that records the target knows its writes"
        );
    }

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
