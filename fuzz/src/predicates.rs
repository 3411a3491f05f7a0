//! `maxUnavailable` strings (the state machine's and the predicates' parsers) and the pod and
//! DaemonSet predicates (annotations, updated rules, readiness, crash loops, ownership).

use canary_predicates::k8s_openapi::api::apps::v1::DaemonSet;
use canary_predicates::k8s_openapi::api::core::v1::Pod;
use canary_predicates::k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use canary_predicates::{
    AnnotationKeys, CountRule, CrashLoopPolicy, LiveMaxUnavailable, MaxUnavailable,
    MaxUnavailableWire, OwnerMatch, PodSummary, Target, UpdatedRule, count_pods,
    daemonset_controller_max_unavailable, daemonset_is_up_to_date, has_default_rollout_strategy,
    kubernetes_max_unavailable, live_max_unavailable, pod_crash_loop, pod_is_owned_by,
    pod_is_ready, pod_is_terminating, pod_is_up_to_date, pod_is_updated, pod_revision_hash,
    reference_max_unavailable,
};

/// Pod counts the scaled values are checked against.
const DESIRED: [u32; 6] = [0, 1, 7, 10, 101, u32::MAX];

/// Fuzz target `max_unavailable`: the input as a `maxUnavailable` string (and its first bytes
/// as an int) through every parser: the state machine's `FromStr` (a parsed value is valid,
/// round-trips through `Display`, matches its own live form, which reads back as it), the
/// live value's readings (`value`, Go's `IntValue` in `reference_int_value`, `matches`,
/// `Display` as typed), and the predicates' wire parsers (`parse` of a string accepts only
/// percentages up to 100%, which `from_str_value` and the live reading agree with;
/// `from_str_value` round-trips through `to_int_or_string`; an int parses iff it is not
/// negative), with the DaemonSet controller's scaled budget of each parsed value.
pub fn max_unavailable(data: &[u8]) {
    let text = String::from_utf8_lossy(data).into_owned();

    if let Ok(value) = text.parse::<MaxUnavailable>() {
        assert_eq!(value.validate(), Ok(()), "{text:?}");
        assert_eq!(value.to_string().parse::<MaxUnavailable>(), Ok(value));
        assert!(value.to_live().matches(value));
        assert_eq!(LiveMaxUnavailable::from(value), value.to_live());
        assert_eq!(value.to_live().value(), Some(value));
        scaled_within_bounds(value);
    }

    let live = LiveMaxUnavailable::Str(text.clone());
    assert_eq!(live.to_string(), text);
    let read = live.value();
    if let Some(value) = read {
        assert!(matches!(value, MaxUnavailable::Percent(_)) && text.ends_with('%'));
    }
    let int_value = live.reference_int_value();
    if let Ok(parsed) = text.parse::<i64>() {
        assert_eq!(int_value, parsed, "Go's Atoi of {text:?}");
    } else if !text.bytes().any(|b| b.is_ascii_digit()) {
        assert_eq!(int_value, 0, "Go's Atoi of {text:?} fails: 0");
    }
    for wanted in [MaxUnavailable::ONE, MaxUnavailable::TEN_PERCENT] {
        assert_eq!(
            live.matches(wanted),
            text == wanted.to_string() && read.is_some()
        );
    }

    let wire = MaxUnavailable::parse(&IntOrString::String(text.clone()));
    if let Ok(value) = wire {
        assert!(
            matches!(value, MaxUnavailable::Percent(p) if p <= 100),
            "{text:?}"
        );
        assert_eq!(MaxUnavailable::from_str_value(&text), Ok(value));
        assert_eq!(read, Some(value));
    }
    if let Ok(value) = MaxUnavailable::from_str_value(&text) {
        assert_eq!(MaxUnavailable::parse(&value.to_int_or_string()), Ok(value));
        scaled_within_bounds(value);
    }

    let mut int = [0u8; 8];
    for (slot, byte) in int.iter_mut().zip(data) {
        *slot = *byte;
    }
    let wide = i64::from_le_bytes(int);
    let narrow = i32::from_le_bytes([int[0], int[1], int[2], int[3]]);
    let parsed = MaxUnavailable::parse(&IntOrString::Int(narrow));
    assert_eq!(parsed.is_ok(), narrow >= 0);
    if let Ok(value) = parsed {
        assert_eq!(value.to_int_or_string(), IntOrString::Int(narrow));
    }
    let live = LiveMaxUnavailable::Int(wide);
    assert_eq!(live.reference_int_value(), wide);
    assert_eq!(
        live.value(),
        u32::try_from(wide).ok().map(MaxUnavailable::Count)
    );
}

/// A percentage up to 100% never allows more pods than desired; a count is itself; the
/// controller's budget falls back to 1 only when nothing else lets a pod go.
fn scaled_within_bounds(value: MaxUnavailable) {
    for desired in DESIRED {
        let scaled = value.scaled(desired);
        match value {
            MaxUnavailable::Count(count) => assert_eq!(scaled, count),
            MaxUnavailable::Percent(percent) if percent <= 100 => assert!(scaled <= desired),
            MaxUnavailable::Percent(_) => {}
        }
        let budget = daemonset_controller_max_unavailable(value, None, desired);
        if desired > 0 && scaled == 0 {
            assert_eq!(budget, 1);
        } else {
            assert_eq!(budget, scaled);
        }
    }
}

/// Fuzz target `predicates`: the input as a DaemonSet and a pod (JSON, split at the first NUL
/// byte; without one the same bytes are tried as both). On the DaemonSet: its live
/// `maxUnavailable` readings agree (`reference_max_unavailable` is the clamped
/// `reference_int_value`, `has_default_rollout_strategy` is "it is 1"), Kubernetes' budget never
/// panics, and the DaemonSet is up to date for the target its own annotations name. On the pod:
/// every predicate answers the same for the pod and its `PodSummary` (as the crate promises), a
/// pod given the target's annotations is up to date, and both updated rules agree with it.
pub fn predicates(data: &[u8]) {
    let (ds_bytes, pod_bytes) = crate::two_parts(data);
    let ds = serde_json::from_slice::<DaemonSet>(ds_bytes).ok();
    let pod = serde_json::from_slice::<Pod>(pod_bytes).ok();
    let keys_sets = [
        AnnotationKeys::default(),
        AnnotationKeys::with_prefix("canary.example.com"),
    ];
    if let Some(ds) = &ds {
        let reference = live_max_unavailable(ds).reference_int_value();
        let clamped =
            i32::try_from(reference).unwrap_or(if reference < 0 { i32::MIN } else { i32::MAX });
        assert_eq!(reference_max_unavailable(ds), clamped);
        assert_eq!(has_default_rollout_strategy(ds), clamped == 1);
        for desired in DESIRED {
            let _ = kubernetes_max_unavailable(ds, desired);
        }
        for keys in &keys_sets {
            let target = Target::of_daemon_set(ds, keys);
            assert!(daemonset_is_up_to_date(ds, &target, keys));
        }
    }
    let Some(pod) = pod else {
        return;
    };
    let default_ds = DaemonSet::default();
    let owner_ds = ds.as_ref().unwrap_or(&default_ds);
    let target = ds
        .as_ref()
        .map(|ds| Target::of_daemon_set(ds, &keys_sets[0]))
        .unwrap_or_default();
    same_answers(&pod, &PodSummary::of(&pod), owner_ds, &target, &keys_sets);

    // The same pod with the target's annotations injected: up to date, and updated under the
    // revision rule exactly when its revision hash is the wanted one.
    let mut annotated = pod.clone();
    for keys in &keys_sets {
        annotated
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .extend(target.annotations(keys));
    }
    for keys in &keys_sets {
        assert!(pod_is_up_to_date(&annotated, &target, keys));
        assert!(pod_is_updated(
            &annotated,
            &target,
            keys,
            &UpdatedRule::Annotations
        ));
        let hash = pod_revision_hash(&annotated).map(str::to_owned);
        let by_revision = UpdatedRule::AnnotationsAndRevision {
            revision_hash: hash.clone().unwrap_or_else(|| "none".to_owned()),
        };
        assert_eq!(
            pod_is_updated(&annotated, &target, keys, &by_revision),
            hash.is_some()
        );
    }
    same_answers(
        &annotated,
        &PodSummary::of(&annotated),
        owner_ds,
        &target,
        &keys_sets,
    );
    let pods = [pod, annotated];
    let summaries: Vec<PodSummary> = pods.iter().map(PodSummary::of).collect();
    for policy in policies(&pods[0]) {
        for skip_terminating in [false, true] {
            let rule = CountRule {
                target: &target,
                keys: &keys_sets[0],
                updated: &UpdatedRule::Annotations,
                crash_loop: &policy,
                skip_terminating,
            };
            let counts = count_pods(&pods, &rule);
            assert_eq!(counts, count_pods(&summaries, &rule));
            assert!(counts.updated_ready <= counts.updated && counts.updated <= counts.total);
            assert!(counts.crash_looping <= counts.updated);
        }
    }
}

/// The crash-loop policies to try: the reference's, the default, and thresholds around the
/// pod's own restart counts (so that the threshold's edge is reached).
fn policies(pod: &Pod) -> Vec<CrashLoopPolicy> {
    let restarts = pod
        .status
        .iter()
        .flat_map(|status| status.container_statuses.iter().flatten())
        .map(|status| status.restart_count)
        .next()
        .unwrap_or(0);
    let mut policies = vec![CrashLoopPolicy::KubeVirt, CrashLoopPolicy::default()];
    for threshold in [i32::MIN, 0, 1, restarts, restarts.saturating_add(1)] {
        for include_init_containers in [false, true] {
            policies.push(CrashLoopPolicy::Strict {
                restart_threshold: threshold,
                include_init_containers,
            });
        }
    }
    policies
}

/// Every predicate answers the same for `pod` and `summary`.
fn same_answers(
    pod: &Pod,
    summary: &PodSummary,
    ds: &DaemonSet,
    target: &Target,
    keys_sets: &[AnnotationKeys],
) {
    assert_eq!(pod_is_ready(pod), pod_is_ready(summary));
    assert_eq!(pod_is_terminating(pod), pod_is_terminating(summary));
    assert_eq!(pod_revision_hash(pod), pod_revision_hash(summary));
    for policy in policies(pod) {
        assert_eq!(
            pod_crash_loop(pod, &policy),
            pod_crash_loop(summary, &policy)
        );
    }
    for keys in keys_sets {
        assert_eq!(
            pod_is_up_to_date(pod, target, keys),
            pod_is_up_to_date(summary, target, keys)
        );
    }
    let name = ds.metadata.name.as_deref().unwrap_or("");
    for owner in [OwnerMatch::for_daemonset(ds), OwnerMatch::NameOnly { name }] {
        assert_eq!(
            pod_is_owned_by(pod, &owner),
            pod_is_owned_by(summary, &owner)
        );
    }
}
