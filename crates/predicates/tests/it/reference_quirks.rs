//! The reference spec's predicate quirks (section 10: 3, 6, 7, 8, 9) and the section 8 pod shapes,
//! each pinned to the reference behaviour and to the alternative that fixes it.

use std::collections::BTreeMap;

use canary_predicates::k8s_openapi::api::apps::v1::{
    DaemonSet, DaemonSetSpec, DaemonSetUpdateStrategy, RollingUpdateDaemonSet,
};
use canary_predicates::k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateWaiting, ContainerStatus, Pod, PodStatus,
};
use canary_predicates::k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    ObjectMeta, OwnerReference,
};
use canary_predicates::k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use canary_predicates::*;

fn custom_target() -> Target {
    Target {
        version: "custom.version".into(),
        registry: "custom.registry".into(),
        deployment_id: "custom.id".into(),
    }
}

/// The apps_test.go handler pod: Running, one container, owned by DaemonSet `virt-handler`
/// (UID `random-id`), annotated with `target`.
fn handler_pod(target: &Target, ready: bool, restart_count: i32) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some("virt-handler-xyz".into()),
            annotations: Some(target.annotations(&AnnotationKeys::default())),
            owner_references: Some(vec![OwnerReference {
                api_version: "apps/v1".into(),
                kind: "DaemonSet".into(),
                name: "virt-handler".into(),
                uid: "random-id".into(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            ..ObjectMeta::default()
        },
        status: Some(PodStatus {
            phase: Some("Running".into()),
            container_statuses: Some(vec![ContainerStatus {
                name: "virt-handler".into(),
                ready,
                restart_count,
                ..ContainerStatus::default()
            }]),
            ..PodStatus::default()
        }),
        ..Pod::default()
    }
}

fn with_rolling_update(rolling_update: Option<RollingUpdateDaemonSet>) -> DaemonSet {
    DaemonSet {
        spec: Some(DaemonSetSpec {
            update_strategy: Some(DaemonSetUpdateStrategy {
                type_: Some("RollingUpdate".into()),
                rolling_update,
            }),
            ..DaemonSetSpec::default()
        }),
        ..DaemonSet::default()
    }
}

fn max_unavailable(value: IntOrString) -> Option<RollingUpdateDaemonSet> {
    Some(RollingUpdateDaemonSet {
        max_unavailable: Some(value),
        max_surge: None,
    })
}

#[test]
fn stale_pod_from_mark_handler_ready_is_not_up_to_date_for_a_custom_target() {
    // markHandlerReady copies the targets while they are all "" and so the pod goes stale (§8).
    let keys = AnnotationKeys::default();
    let stale = handler_pod(&Target::default(), true, 0);
    assert!(pod_is_up_to_date(&stale, &Target::default(), &keys));
    assert!(!pod_is_up_to_date(&stale, &custom_target(), &keys));
}

#[test]
fn scenario_10_canary_restarted_once_fails_only_under_the_reference() {
    // §8 #10: one up-to-date pod, Running, not ready, restartCount = 1.
    let canary = handler_pod(&custom_target(), false, 1);
    assert!(!pod_is_ready(&canary));
    let reference = pod_crash_loop(&canary, &CrashLoopPolicy::KubeVirt).unwrap();
    assert_eq!(
        (reference.reason, reference.restart_count),
        (CrashLoopReason::RestartedOrTerminated, 1)
    );
    // The strict default tolerates one transient restart.
    assert_eq!(pod_crash_loop(&canary, &CrashLoopPolicy::default()), None);
}

#[test]
fn quirk_3_int_value_reads_percentages_as_ongoing() {
    let int = |n| with_rolling_update(max_unavailable(IntOrString::Int(n)));
    let string = |s: &str| with_rolling_update(max_unavailable(IntOrString::String(s.into())));
    let rows = [
        (
            "§8 #9: nil maxUnavailable counts as default",
            with_rolling_update(Some(RollingUpdateDaemonSet::default())),
            true,
        ),
        ("§8 #12: int 1", int(1), true),
        ("string \"1\"", string("1"), true),
        ("§8 #11: \"10%\"", string("10%"), false),
        ("int 2", int(2), false),
        ("\"100%\"", string("100%"), false),
        ("nil rollingUpdate", with_rolling_update(None), false),
    ];
    for (case, ds, default) in rows {
        assert_eq!(has_default_rollout_strategy(&ds), default, "{case}");
    }
    // Kubernetes, by contrast, reads "10%" as a real budget.
    let ten = MaxUnavailable::parse(&IntOrString::String("10%".into())).unwrap();
    assert_eq!(ten.scaled(100), 10);
}

#[test]
fn quirk_6_annotations_only_miss_template_changes() {
    let keys = AnnotationKeys::default();
    let target = custom_target();
    let mut old_template_pod = handler_pod(&target, true, 0);
    old_template_pod.metadata.labels = Some(BTreeMap::from([(
        CONTROLLER_REVISION_HASH_LABEL.to_owned(),
        "old-hash".to_owned(),
    )]));
    assert!(pod_is_updated(
        &old_template_pod,
        &target,
        &keys,
        &UpdatedRule::Annotations
    ));
    let by_revision = UpdatedRule::AnnotationsAndRevision {
        revision_hash: "new-hash".into(),
    };
    assert!(!pod_is_updated(
        &old_template_pod,
        &target,
        &keys,
        &by_revision
    ));
}

#[test]
fn quirk_7_reference_ignores_init_crash_loops_and_fails_transient_restarts() {
    let mut init_stuck = handler_pod(&custom_target(), false, 0);
    let status = init_stuck.status.as_mut().unwrap();
    status.phase = Some("Pending".into());
    status.init_container_statuses = Some(vec![ContainerStatus {
        name: "virt-launcher-init".into(),
        restart_count: 12,
        state: Some(ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some("CrashLoopBackOff".into()),
                message: None,
            }),
            ..ContainerState::default()
        }),
        ..ContainerStatus::default()
    }]);
    assert_eq!(
        pod_crash_loop(&init_stuck, &CrashLoopPolicy::KubeVirt),
        None
    );
    let strict = pod_crash_loop(&init_stuck, &CrashLoopPolicy::default()).unwrap();
    assert!(strict.init_container);
    assert_eq!(strict.reason, CrashLoopReason::CrashLoopBackOff);
}

#[test]
fn quirk_8_readiness_is_vacuous_without_container_statuses_but_needs_running() {
    let mut pod = handler_pod(&custom_target(), true, 0);
    pod.status.as_mut().unwrap().container_statuses = None;
    assert!(pod_is_ready(&pod));
    pod.status.as_mut().unwrap().phase = Some("Pending".into());
    assert!(!pod_is_ready(&pod));
}

#[test]
fn quirk_9_name_only_ownership_matches_a_recreated_daemonset() {
    let pod = handler_pod(&custom_target(), true, 0);
    let recreated = DaemonSet {
        metadata: ObjectMeta {
            name: Some("virt-handler".into()),
            uid: Some("new-uid-after-recreate".into()),
            ..ObjectMeta::default()
        },
        ..DaemonSet::default()
    };
    assert!(pod_is_owned_by(
        &pod,
        &OwnerMatch::NameOnly {
            name: "virt-handler"
        }
    ));
    assert!(!pod_is_owned_by(
        &pod,
        &OwnerMatch::for_daemonset(&recreated)
    ));
}
