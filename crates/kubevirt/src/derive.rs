//! From one KubeVirt object, one DaemonSet and the operator's pods to the phase virt-operator is
//! in: the reference's `syncDaemonSet` flags (spec section 3) fed to [`decide`] in KubeVirt mode.
//!
//! Pure: no I/O. What cannot be seen from outside virt-operator is listed on [`derive`].

use canary_predicates::{
    AnnotationKeys, CountRule, OwnerMatch, PodCounts, Target, count_pods_owned_by,
    daemonset_is_up_to_date, observe_daemon_set,
};
use canary_state_machine::{Decision, Observation, Strategy, SyncFlags, decide};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Pod;

use crate::view::{KUBEVIRT_GENERATION_ANNOTATION, KubeVirtView};

/// Everything one derivation found, for metrics, logs and tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Derived {
    /// The observation handed to [`decide`].
    pub observation: Observation,
    /// What virt-operator decides on this state (KubeVirt mode); `decision.phase` is its phase.
    pub decision: Decision,
    /// The three sync-gate flags, as [`SyncFlags::of`] computes them in KubeVirt mode.
    pub flags: SyncFlags,
    /// Part of `object_changed`: the DaemonSet's install-strategy annotations differ from the
    /// KubeVirt status targets (`!DaemonSetIsUpToDate`).
    pub target_changed: bool,
    /// Part of `object_changed`: the DaemonSet's `kubevirt.io/generation` annotation is present
    /// and differs from the KubeVirt `metadata.generation` (an edit of the KubeVirt spec that
    /// virt-operator has not pushed to the DaemonSet yet; spec quirk 4).
    pub kubevirt_generation_changed: bool,
    /// The pod counts (reference rules: owner name only, annotations only, any restart is a
    /// crash loop, terminating pods counted).
    pub counts: PodCounts,
    /// The install-strategy annotations on the DaemonSet (absent keys read as `""`).
    pub daemon_set_target: Target,
}

/// Derives the phase of virt-operator's canary upgrade of `ds` from observation only.
///
/// - `object_changed` = `!DaemonSetIsUpToDate(kv, ds)` or the DaemonSet's `kubevirt.io/generation`
///   annotation differs from the KubeVirt generation. virt-operator's real flag is
///   `objectMetaModified`, which also compares every label and annotation of the desired
///   DaemonSet built from the install strategy; the install strategy is not read here, so a label
///   change that only the install strategy carries is not seen (template changes are not part of
///   the flag in the reference either, spec quirk 5).
/// - `generation_unknown` = `ds.metadata.generation` differs from the `apps`/`daemonsets` entry of
///   `kv.status.generations` (−1 when absent): exactly the reference's lookup.
/// - `ongoing_rollout` = the live `maxUnavailable` is not Go-`IntValue` 1 (spec quirk 3).
/// - The counts walk `pods` (the caller passes virt-operator's pod cache: pods labelled
///   `app.kubernetes.io/managed-by in (virt-operator,kubevirt-operator)`, all namespaces) and match
///   them by controller-owner name, as the reference does (quirk 9).
pub fn derive<'p>(
    kv: &KubeVirtView,
    ds: &DaemonSet,
    pods: impl IntoIterator<Item = &'p Pod>,
) -> Derived {
    let keys = AnnotationKeys::default();
    let name = ds.metadata.name.clone().unwrap_or_default();
    let namespace = ds.metadata.namespace.as_deref().unwrap_or_default();
    let target_changed = !daemonset_is_up_to_date(ds, &kv.target, &keys);
    let kubevirt_generation_changed = kubevirt_generation_changed(kv, ds);
    let expected = kv.expected_daemon_set_generation(namespace, &name);
    let rule = CountRule::reference(&kv.target, &keys);
    let counts = count_pods_owned_by(pods, &OwnerMatch::NameOnly { name: &name }, &rule);
    let observation = Observation {
        version: kv.target.version.clone(),
        object_changed: target_changed || kubevirt_generation_changed,
        generation_known: ds.metadata.generation.unwrap_or(0) == expected,
        // Only the default strategy reads it; KubeVirt mode never looks.
        rollout_observed: true,
        ..observe_daemon_set(ds, &counts)
    };
    let strategy = Strategy::kubevirt();
    Derived {
        flags: SyncFlags::of(&strategy, &observation),
        decision: decide(&strategy, &observation),
        observation,
        target_changed,
        kubevirt_generation_changed,
        counts,
        daemon_set_target: Target::of_daemon_set(ds, &keys),
    }
}

fn kubevirt_generation_changed(kv: &KubeVirtView, ds: &DaemonSet) -> bool {
    let annotation = ds
        .metadata
        .annotations
        .as_ref()
        .and_then(|annotations| annotations.get(KUBEVIRT_GENERATION_ANNOTATION));
    match (annotation, kv.generation) {
        (Some(value), Some(generation)) => *value != generation.to_string(),
        // Without the annotation (operators that never set it) or without a KubeVirt generation
        // there is nothing to compare: assume virt-operator sees no change.
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use canary_predicates::live_max_unavailable;
    use canary_state_machine::{FailureReason, LiveMaxUnavailable, Phase};
    use serde_json::json;

    const NS: &str = "kubevirt";

    fn target(version: &str) -> Target {
        Target {
            version: version.into(),
            registry: "quay.io/kubevirt".into(),
            deployment_id: format!("id-{version}"),
        }
    }

    fn kv(version: &str, recorded: Option<i64>) -> KubeVirtView {
        let generations = recorded
            .map(|last_generation| crate::view::GenerationRecord {
                group: "apps".into(),
                resource: "daemonsets".into(),
                namespace: NS.into(),
                name: "virt-handler".into(),
                last_generation,
            })
            .into_iter()
            .collect();
        KubeVirtView {
            namespace: NS.into(),
            name: "kubevirt".into(),
            generation: Some(2),
            target: target(version),
            observed: target("v1"),
            generations,
        }
    }

    struct Ds {
        version: &'static str,
        generation: i64,
        desired: i32,
        max_unavailable: serde_json::Value,
        kv_generation: Option<&'static str>,
    }

    const DS: Ds = Ds {
        version: "v2",
        generation: 5,
        desired: 3,
        max_unavailable: serde_json::Value::Null,
        kv_generation: Some("2"),
    };

    fn ds(spec: Ds) -> DaemonSet {
        let keys = AnnotationKeys::default();
        let mut annotations = target(spec.version).annotations(&keys);
        if let Some(generation) = spec.kv_generation {
            annotations.insert(KUBEVIRT_GENERATION_ANNOTATION.into(), generation.into());
        }
        let rolling = if spec.max_unavailable.is_null() {
            json!({})
        } else {
            json!({"maxUnavailable": spec.max_unavailable})
        };
        serde_json::from_value(json!({
            "metadata": {"name": "virt-handler", "namespace": NS, "generation": spec.generation,
                          "annotations": annotations},
            "spec": {"selector": {"matchLabels": {"kubevirt.io": "virt-handler"}}, "template": {},
                     "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": rolling}},
            "status": {"desiredNumberScheduled": spec.desired, "currentNumberScheduled": spec.desired,
                        "numberMisscheduled": 0, "numberReady": 0}
        }))
        .unwrap()
    }

    fn pod(name: &str, version: &str, ready: bool, restarts: i32) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": NS,
                          "annotations": target(version).annotations(&AnnotationKeys::default()),
                          "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet",
                              "name": "virt-handler", "uid": "u", "controller": true}]},
            "status": {"phase": "Running", "containerStatuses": [
                {"name": "virt-handler", "ready": ready, "restartCount": restarts, "image": "i",
                 "imageID": "", "started": true}]}
        }))
        .unwrap()
    }

    #[test]
    fn at_rest_is_quiet_and_successful() {
        let pods = [pod("a", "v2", true, 0)];
        let derived = derive(&kv("v2", Some(5)), &ds(DS), &pods);
        assert!(!derived.flags.any(), "{:?}", derived.flags);
        assert!(derived.decision.action.quiet);
        assert_eq!(derived.decision.phase, Phase::Successful);
    }

    #[test]
    fn a_new_target_not_yet_on_the_daemon_set_is_started() {
        let derived = derive(&kv("v3", Some(5)), &ds(DS), []);
        assert!(derived.target_changed && derived.flags.object_changed);
        assert_eq!(derived.decision.phase, Phase::Started);
        assert_eq!(derived.daemon_set_target, target("v2"));
    }

    #[test]
    fn a_kubevirt_spec_edit_restarts_the_canary_like_the_reference() {
        let derived = derive(
            &kv("v2", Some(5)),
            &ds(Ds {
                kv_generation: Some("1"),
                ..DS
            }),
            [],
        );
        assert!(!derived.target_changed);
        assert!(derived.kubevirt_generation_changed);
        assert_eq!(derived.decision.phase, Phase::Started);
        // Without the annotation nothing can be compared.
        let derived = derive(
            &kv("v2", Some(5)),
            &ds(Ds {
                kv_generation: None,
                ..DS
            }),
            [],
        );
        assert!(!derived.kubevirt_generation_changed);
        assert_eq!(derived.decision.phase, Phase::Successful);
    }

    #[test]
    fn an_unrecorded_patch_waits_for_the_canary() {
        let pods = [pod("old", "v1", true, 0), pod("canary", "v2", false, 0)];
        let derived = derive(&kv("v2", Some(4)), &ds(DS), &pods);
        assert!(derived.flags.generation_unknown);
        assert_eq!(
            (derived.counts.updated, derived.counts.updated_ready),
            (1, 0)
        );
        assert_eq!(derived.decision.phase, Phase::Canary);
    }

    #[test]
    fn one_restart_of_the_canary_fails_the_rollout() {
        let pods = [pod("canary", "v2", false, 1)];
        let derived = derive(&kv("v2", None), &ds(DS), &pods);
        assert_eq!(derived.decision.phase, Phase::Failed);
        assert_eq!(
            derived.decision.failure,
            Some(FailureReason::CanaryCrashLooping)
        );
        assert_eq!(
            derived.observation.crash_loop.map(|seen| seen.pod),
            Some("canary".to_owned())
        );
    }

    #[test]
    fn widening_waiting_and_finishing() {
        let two_ready = [
            pod("a", "v2", true, 0),
            pod("b", "v2", true, 0),
            pod("c", "v1", true, 0),
        ];
        let at_one = derive(&kv("v2", Some(4)), &ds(DS), &two_ready[..1]);
        assert_eq!(at_one.decision.phase, Phase::Increasing);
        let ten = Ds {
            max_unavailable: json!("10%"),
            ..DS
        };
        let waiting = derive(&kv("v2", Some(5)), &ds(ten), &two_ready);
        assert!(waiting.flags.ongoing_rollout && !waiting.flags.generation_unknown);
        assert_eq!(waiting.decision.phase, Phase::Waiting);
        let all = [
            pod("a", "v2", true, 0),
            pod("b", "v2", true, 0),
            pod("c", "v2", true, 0),
        ];
        let ten = Ds {
            max_unavailable: json!("10%"),
            ..DS
        };
        assert_eq!(
            derive(&kv("v2", Some(5)), &ds(ten), &all).decision.phase,
            Phase::Successful
        );
    }

    #[test]
    fn pods_of_another_owner_name_do_not_count_but_other_namespaces_do() {
        let mut foreign = pod("x", "v2", true, 0);
        if let Some(owner) = foreign.metadata.owner_references.as_mut() {
            owner[0].name = "virt-api".into();
        }
        let mut elsewhere = pod("y", "v2", true, 0);
        elsewhere.metadata.namespace = Some("default".into());
        let derived = derive(&kv("v2", Some(4)), &ds(DS), [&foreign, &elsewhere]);
        assert_eq!(derived.counts.updated_ready, 1, "quirk 9: name only");
    }

    #[test]
    fn more_ready_than_desired_is_the_unexpected_state_row() {
        let pods = [pod("a", "v2", true, 0), pod("b", "v2", true, 0)];
        let one = Ds { desired: 1, ..DS };
        let derived = derive(&kv("v2", Some(4)), &ds(one), &pods);
        assert_eq!(derived.decision.phase, Phase::Failed);
        assert_eq!(
            derived.decision.failure,
            Some(FailureReason::UnexpectedState)
        );
    }

    #[test]
    fn max_unavailable_shapes() {
        let mut daemon_set = ds(DS);
        assert_eq!(live_max_unavailable(&daemon_set), LiveMaxUnavailable::Unset);
        daemon_set.spec = None;
        assert_eq!(
            live_max_unavailable(&daemon_set),
            LiveMaxUnavailable::NoRollingUpdate
        );
        let daemon_set = ds(Ds {
            max_unavailable: json!(2),
            ..DS
        });
        assert_eq!(
            live_max_unavailable(&daemon_set),
            LiveMaxUnavailable::Int(2)
        );
    }
}
