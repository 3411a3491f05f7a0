//! Property tests: maxUnavailable arithmetic and parsing, Go `Atoi` emulation, and count invariants.

use std::collections::BTreeMap;

use canary_predicates::k8s_openapi::api::apps::v1::{DaemonSet, DaemonSetSpec};
use canary_predicates::k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateWaiting, ContainerStatus, Pod, PodStatus,
};
use canary_predicates::k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use canary_predicates::k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use canary_predicates::*;
use canary_testkit::rolling_update;
use proptest::prelude::*;

fn valid_max_unavailable() -> impl Strategy<Value = MaxUnavailable> {
    prop_oneof![
        (0..=i32::MAX as u32).prop_map(MaxUnavailable::Count),
        (0..=100_u32).prop_map(MaxUnavailable::Percent),
    ]
}

fn ds_with_max_unavailable(value: IntOrString) -> DaemonSet {
    DaemonSet {
        spec: Some(DaemonSetSpec {
            update_strategy: Some(rolling_update(value)),
            ..DaemonSetSpec::default()
        }),
        ..DaemonSet::default()
    }
}

proptest! {
    #[test]
    fn scaled_is_monotone_in_desired(percent in 0..=100_u32, a: u32, b: u32) {
        let (low, high) = if a <= b { (a, b) } else { (b, a) };
        let value = MaxUnavailable::Percent(percent);
        prop_assert!(value.scaled(low) <= value.scaled(high));
    }

    #[test]
    fn scaled_percent_never_exceeds_desired(percent in 0..=100_u32, desired: u32) {
        prop_assert!(MaxUnavailable::Percent(percent).scaled(desired) <= desired);
    }

    #[test]
    fn scaled_percent_is_the_ceiling(percent in 0..=100_u32, desired: u32) {
        let scaled = u64::from(MaxUnavailable::Percent(percent).scaled(desired));
        let exact_times_100 = u64::from(percent) * u64::from(desired);
        // smallest integer s with 100 * s >= percent * desired
        prop_assert!(scaled * 100 >= exact_times_100);
        prop_assert!(scaled == 0 || (scaled - 1) * 100 < exact_times_100);
        if percent > 0 && desired > 0 {
            prop_assert!(scaled >= 1, "a positive percentage of a positive count rounds up to at least one pod");
        }
    }

    #[test]
    fn scaled_matches_kubernetes_float_formula(percent in 0..=100_u32, desired: u32) {
        // intstr.GetScaledValueFromIntOrPercent: int(math.Ceil(float64(value) * float64(total) / 100))
        let kubernetes = (f64::from(percent) * f64::from(desired) / 100.0).ceil();
        prop_assert_eq!(f64::from(MaxUnavailable::Percent(percent).scaled(desired)), kubernetes);
    }

    #[test]
    fn count_scales_to_itself(count: u32, desired: u32) {
        prop_assert_eq!(MaxUnavailable::Count(count).scaled(desired), count);
    }

    #[test]
    fn display_and_from_str_round_trip(value in valid_max_unavailable()) {
        let text = value.to_string();
        prop_assert_eq!(MaxUnavailable::from_str_value(&text), Ok(value));
        prop_assert_eq!(MaxUnavailable::parse(&value.to_int_or_string()), Ok(value));
    }

    #[test]
    fn any_string_is_handled_without_panic(text in any::<String>()) {
        if let Ok(value) = MaxUnavailable::from_str_value(&text) {
            prop_assert_eq!(MaxUnavailable::from_str_value(&value.to_string()), Ok(value));
        }
        let parsed = MaxUnavailable::parse(&IntOrString::String(text.clone()));
        if let Ok(value) = parsed {
            prop_assert!(text.ends_with('%'), "only percentages are valid strings: {:?}", text);
            prop_assert!(matches!(value, MaxUnavailable::Percent(p) if p <= 100));
        }
        let _ = reference_max_unavailable(&ds_with_max_unavailable(IntOrString::String(text)));
    }

    #[test]
    fn percent_like_strings_are_validated(number in "[-+]?[0-9]{0,12}", suffix in prop_oneof![Just("%"), Just("")]) {
        let text = format!("{number}{suffix}");
        let parsed = MaxUnavailable::parse(&IntOrString::String(text.clone()));
        let digits_only = !number.is_empty() && number.bytes().all(|b| b.is_ascii_digit());
        let in_range = digits_only && number.parse::<u64>().is_ok_and(|n| n <= 100);
        prop_assert_eq!(parsed.is_ok(), suffix == "%" && in_range, "{:?} -> {:?}", text, parsed);
    }

    #[test]
    fn negative_ints_are_rejected(value in i32::MIN..0) {
        prop_assert!(MaxUnavailable::parse(&IntOrString::Int(value)).is_err());
    }

    #[test]
    fn reference_reads_decimal_strings_like_go_atoi(value: i32, plus: bool) {
        let text = if plus && value >= 0 { format!("+{value}") } else { value.to_string() };
        let ds = ds_with_max_unavailable(IntOrString::String(text));
        prop_assert_eq!(reference_max_unavailable(&ds), value);
        prop_assert_eq!(has_default_rollout_strategy(&ds), value == 1);
    }

    #[test]
    fn reference_reads_percentages_as_zero(percent in 0..=100_u32) {
        let ds = ds_with_max_unavailable(IntOrString::String(format!("{percent}%")));
        prop_assert_eq!(reference_max_unavailable(&ds), 0);
        prop_assert!(!has_default_rollout_strategy(&ds));
    }

    #[test]
    fn controller_budget_never_stalls_a_rollout(
        unavailable in valid_max_unavailable(),
        surge in proptest::option::of(valid_max_unavailable()),
        desired in 0..100_000_u32,
    ) {
        let budget = daemonset_controller_max_unavailable(unavailable, surge, desired);
        let surge_scaled = surge.map_or(0, |s| s.scaled(desired));
        if desired > 0 {
            prop_assert!(budget > 0 || surge_scaled > 0, "some progress is always allowed");
        }
        prop_assert!(budget <= unavailable.scaled(desired).max(1));
        if unavailable.scaled(desired) > 0 {
            prop_assert_eq!(budget, unavailable.scaled(desired));
        }
    }
}

/// One random pod: target or not, phase, readiness, restarts, waiting reason, terminating.
fn arbitrary_pod() -> impl Strategy<Value = Pod> {
    let waiting = prop_oneof![
        Just(None),
        Just(Some("CrashLoopBackOff")),
        Just(Some("ImagePullBackOff")),
        Just(Some("ContainerCreating")),
    ];
    (
        any::<bool>(),
        prop_oneof![Just("Running"), Just("Pending"), Just("Failed")],
        proptest::collection::vec((any::<bool>(), 0..6_i32, waiting), 0..3),
        any::<bool>(),
        "[a-z]{1,6}",
    )
        .prop_map(|(on_target, phase, containers, terminating, name)| {
            let keys = AnnotationKeys::default();
            let target = if on_target {
                target()
            } else {
                Target::default()
            };
            Pod {
                metadata: ObjectMeta {
                    name: Some(name),
                    annotations: Some(target.annotations(&keys)),
                    labels: Some(BTreeMap::from([(
                        CONTROLLER_REVISION_HASH_LABEL.into(),
                        "h".into(),
                    )])),
                    deletion_timestamp: terminating.then_some(Time(
                        canary_predicates::k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                    )),
                    ..ObjectMeta::default()
                },
                status: Some(PodStatus {
                    phase: Some(phase.into()),
                    container_statuses: Some(
                        containers
                            .into_iter()
                            .enumerate()
                            .map(|(i, (ready, restart_count, waiting))| ContainerStatus {
                                name: format!("c{i}"),
                                ready,
                                restart_count,
                                state: waiting.map(|reason| ContainerState {
                                    waiting: Some(ContainerStateWaiting {
                                        reason: Some(reason.into()),
                                        message: None,
                                    }),
                                    ..ContainerState::default()
                                }),
                                ..ContainerStatus::default()
                            })
                            .collect(),
                    ),
                    ..PodStatus::default()
                }),
                ..Pod::default()
            }
        })
}

/// `pod` with a controller owner, a terminated last state, init containers and a revision
/// label, for the checks that read them.
fn enrich(
    mut pod: Pod,
    owner: Option<(&str, &str, &str)>,
    oom_last: bool,
    init: &[(i32, bool)],
    revision: Option<&str>,
) -> Pod {
    use canary_predicates::k8s_openapi::api::core::v1::ContainerStateTerminated;
    use canary_predicates::k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    pod.metadata.owner_references = owner.map(|(kind, name, uid)| {
        vec![OwnerReference {
            api_version: "apps/v1".into(),
            kind: kind.into(),
            name: name.into(),
            uid: uid.into(),
            controller: Some(true),
            block_owner_deletion: None,
        }]
    });
    pod.metadata.labels = revision
        .map(|hash| BTreeMap::from([(CONTROLLER_REVISION_HASH_LABEL.to_owned(), hash.to_owned())]));
    let terminated = |reason: &str| ContainerState {
        terminated: Some(ContainerStateTerminated {
            reason: Some(reason.into()),
            ..ContainerStateTerminated::default()
        }),
        ..ContainerState::default()
    };
    if let Some(status) = pod.status.as_mut() {
        for container in status.container_statuses.iter_mut().flatten() {
            if oom_last {
                container.last_state = Some(terminated("OOMKilled"));
            }
        }
        status.init_container_statuses = Some(
            init.iter()
                .enumerate()
                .map(|(i, (restart_count, done))| ContainerStatus {
                    name: format!("init{i}"),
                    restart_count: *restart_count,
                    state: done.then(|| terminated("Completed")),
                    ..ContainerStatus::default()
                })
                .collect(),
        );
    }
    pod
}

fn target() -> Target {
    Target {
        version: "v2".into(),
        registry: "r".into(),
        deployment_id: "d".into(),
    }
}

proptest! {
    #[test]
    fn counts_are_consistent_with_the_predicates(
        pods in proptest::collection::vec(arbitrary_pod(), 0..40),
        skip_terminating: bool,
        reference_policy: bool,
    ) {
        let keys = AnnotationKeys::default();
        let target = target();
        let policy = if reference_policy { CrashLoopPolicy::KubeVirt } else { CrashLoopPolicy::default() };
        let rule = CountRule {
            target: &target,
            keys: &keys,
            updated: &UpdatedRule::Annotations,
            crash_loop: &policy,
            skip_terminating,
        };
        let counts = count_pods(&pods, &rule);
        let counted: Vec<&Pod> = pods.iter().filter(|p| !(skip_terminating && pod_is_terminating(p))).collect();
        let updated: Vec<&Pod> = counted.iter().copied().filter(|p| pod_is_up_to_date(p, &target, &keys)).collect();
        prop_assert_eq!(counts.total as usize, counted.len());
        prop_assert_eq!(counts.updated as usize, updated.len());
        prop_assert_eq!(counts.updated_ready as usize, updated.iter().filter(pod_is_ready).count());
        let crashing: Vec<&&Pod> = updated.iter().filter(|p| pod_crash_loop(p, &policy).is_some()).collect();
        prop_assert_eq!(counts.crash_looping as usize, crashing.len());
        prop_assert_eq!(
            counts.first_crash_loop.map(|(name, _)| name),
            crashing.first().and_then(|p| p.metadata.name.clone())
        );
    }

    #[test]
    fn a_summary_answers_every_predicate_as_its_pod(
        pod in arbitrary_pod(),
        owner in prop_oneof![
            Just(None),
            Just(Some(("DaemonSet", "agent", "uid-1"))),
            Just(Some(("ReplicaSet", "agent", "uid-2"))),
        ],
        oom_last in any::<bool>(),
        init in proptest::collection::vec((0..5_i32, any::<bool>()), 0..3),
        revision in prop_oneof![Just(None), Just(Some("h")), Just(Some("other"))],
    ) {
        let pod = enrich(pod, owner, oom_last, &init, revision);
        let summary = PodSummary::of(&pod);
        let keys = AnnotationKeys::default();
        prop_assert_eq!(summary.name(), pod.metadata.name.as_deref().unwrap_or_default());
        // Every fact read directly, as the compact form keeps it (`Texts`): each annotation
        // by its key, keys that are not there, the owner, the node, the phase, the UID.
        for key in pod.metadata.annotations.iter().flatten().map(|(k, _)| k.as_str()) {
            prop_assert_eq!(PodFacts::annotation(&summary, key), PodFacts::annotation(&pod, key));
        }
        for absent in ["", "a", "zzz", "kubevirt.io/"] {
            prop_assert_eq!(
                PodFacts::annotation(&summary, absent),
                PodFacts::annotation(&pod, absent)
            );
        }
        prop_assert_eq!(PodFacts::controller(&summary), PodFacts::controller(&pod));
        prop_assert_eq!(PodFacts::node_name(&summary), PodFacts::node_name(&pod));
        prop_assert_eq!(PodFacts::phase(&summary), PodFacts::phase(&pod));
        prop_assert_eq!(PodFacts::uid(&summary), PodFacts::uid(&pod));
        prop_assert_eq!(pod_is_ready(&summary), pod_is_ready(&pod));
        prop_assert_eq!(pod_is_terminating(&summary), pod_is_terminating(&pod));
        prop_assert_eq!(pod_revision_hash(&summary), pod_revision_hash(&pod));
        for target in [target(), Target::default()] {
            prop_assert_eq!(
                pod_is_up_to_date(&summary, &target, &keys),
                pod_is_up_to_date(&pod, &target, &keys)
            );
            for rule in [
                UpdatedRule::Annotations,
                UpdatedRule::AnnotationsAndRevision { revision_hash: "h".into() },
            ] {
                prop_assert_eq!(
                    pod_is_updated(&summary, &target, &keys, &rule),
                    pod_is_updated(&pod, &target, &keys, &rule)
                );
            }
        }
        for owner in [
            OwnerMatch::NameOnly { name: "agent" },
            OwnerMatch::Uid { name: "agent", uid: "uid-1" },
        ] {
            prop_assert_eq!(pod_is_owned_by(&summary, &owner), pod_is_owned_by(&pod, &owner));
        }
        for policy in [
            CrashLoopPolicy::KubeVirt,
            CrashLoopPolicy::default(),
            CrashLoopPolicy::Strict { restart_threshold: 1, include_init_containers: false },
        ] {
            prop_assert_eq!(pod_crash_loop(&summary, &policy), pod_crash_loop(&pod, &policy));
        }
    }
}
