//! Counting the pods of one DaemonSet: what a reconcile needs.

use crate::PodFacts;

use crate::{
    AnnotationKeys, CrashLoop, CrashLoopPolicy, OwnerMatch, Target, UpdatedRule, pod_crash_loop,
    pod_is_owned_by, pod_is_ready, pod_is_terminating, pod_is_updated,
};

/// The rules [`count_pods`] applies.
#[derive(Debug, Clone, Copy)]
pub struct CountRule<'a> {
    /// The target the pods move to.
    pub target: &'a Target,
    /// The annotation keys carrying the target.
    pub keys: &'a AnnotationKeys,
    /// How a pod counts as updated.
    pub updated: &'a UpdatedRule,
    /// How a pod counts as crash-looping.
    pub crash_loop: &'a CrashLoopPolicy,
    /// Leave out terminating pods entirely (the reference counts them: `false`).
    pub skip_terminating: bool,
}

impl<'a> CountRule<'a> {
    /// The reference's rule (KubeVirt mode): updated by the install-strategy annotations,
    /// crash loops as `PodIsCrashLooping` judges them, terminating pods counted.
    pub fn reference(target: &'a Target, keys: &'a AnnotationKeys) -> Self {
        CountRule {
            target,
            keys,
            updated: &UpdatedRule::Annotations,
            crash_loop: &CrashLoopPolicy::KubeVirt,
            skip_terminating: false,
        }
    }
}

/// Pod counts of one DaemonSet.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodCounts {
    /// Pods counted (terminating pods excluded when the rule says so).
    pub total: u32,
    /// Updated pods (the reference's canary pods).
    pub updated: u32,
    /// Updated pods that are also ready (the reference's `updatedAndReady`).
    pub updated_ready: u32,
    /// Updated pods that are crash-looping.
    pub crash_looping: u32,
    /// The first crash-looping updated pod in iteration order: its name and its failing container.
    pub first_crash_loop: Option<(String, CrashLoop)>,
}

/// What one pod adds to [`PodCounts`] besides `total`: the per-pod half of [`count_pods`], for
/// a cache that keeps counts up to date one pod change at a time.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodCount {
    /// The pod is updated.
    pub updated: bool,
    /// The pod is updated and ready.
    pub updated_ready: bool,
    /// The pod is updated and crash-looping: its first failing container.
    pub crash_loop: Option<CrashLoop>,
}

/// What `pod` adds to the counts under `rule`, or `None` when it is not counted at all (a
/// terminating pod the rule leaves out). Owner matching is the caller's part.
///
/// Crash loops are looked for on **updated** pods only, as the reference does with its canary
/// pods; an updated pod that is crash-looping may still be ready (deciding what wins is the
/// state machine's job).
pub fn count_pod<P: PodFacts + ?Sized>(pod: &P, rule: &CountRule<'_>) -> Option<PodCount> {
    if rule.skip_terminating && pod_is_terminating(pod) {
        return None;
    }
    if !pod_is_updated(pod, rule.target, rule.keys, rule.updated) {
        return Some(PodCount::default());
    }
    Some(PodCount {
        updated: true,
        updated_ready: pod_is_ready(pod),
        crash_loop: pod_crash_loop(pod, rule.crash_loop),
    })
}

/// Counts `pods`, already filtered to one DaemonSet (see [`count_pods_owned_by`] otherwise),
/// with [`count_pod`] for each. Counts saturate at `u32::MAX`.
pub fn count_pods<'p, P: PodFacts + ?Sized + 'p>(
    pods: impl IntoIterator<Item = &'p P>,
    rule: &CountRule<'_>,
) -> PodCounts {
    let mut counts = PodCounts::default();
    for pod in pods {
        let Some(count) = count_pod(pod, rule) else {
            continue;
        };
        counts.total = counts.total.saturating_add(1);
        counts.updated = counts.updated.saturating_add(u32::from(count.updated));
        counts.updated_ready = counts
            .updated_ready
            .saturating_add(u32::from(count.updated_ready));
        if let Some(crash_loop) = count.crash_loop {
            counts.crash_looping = counts.crash_looping.saturating_add(1);
            if counts.first_crash_loop.is_none() {
                counts.first_crash_loop = Some((pod.name().to_owned(), crash_loop));
            }
        }
    }
    counts
}

/// [`count_pods`] over the pods of `pods` that [`pod_is_owned_by`] `owner`: the reference's walk over
/// the whole pod cache. Prefer an index by owner when there are many pods.
pub fn count_pods_owned_by<'p, P: PodFacts + ?Sized + 'p>(
    pods: impl IntoIterator<Item = &'p P>,
    owner: &OwnerMatch<'_>,
    rule: &CountRule<'_>,
) -> PodCounts {
    count_pods(
        pods.into_iter().filter(|pod| pod_is_owned_by(pod, owner)),
        rule,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CONTROLLER_REVISION_HASH_LABEL, CrashLoopReason};
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::api::core::v1::{ContainerStatus, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
    use std::collections::BTreeMap;

    struct PodSpec<'a> {
        name: &'a str,
        target: Option<&'a Target>,
        ready: bool,
        restarts: i32,
        terminating: bool,
        revision: &'a str,
        owner: &'a str,
    }

    const BASE: PodSpec<'static> = PodSpec {
        name: "p",
        target: None,
        ready: true,
        restarts: 0,
        terminating: false,
        revision: "new",
        owner: "virt-handler",
    };

    /// Pod `name`, ready, with the annotations of `target`.
    fn ready_on(name: &str, target: &Target) -> Pod {
        make(PodSpec {
            name,
            target: Some(target),
            ..BASE
        })
    }

    fn make(spec: PodSpec<'_>) -> Pod {
        let keys = AnnotationKeys::default();
        Pod {
            metadata: ObjectMeta {
                name: Some(spec.name.into()),
                annotations: spec.target.map(|t| t.annotations(&keys)),
                labels: Some(BTreeMap::from([(
                    CONTROLLER_REVISION_HASH_LABEL.into(),
                    spec.revision.into(),
                )])),
                deletion_timestamp: spec
                    .terminating
                    .then_some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)),
                owner_references: Some(vec![OwnerReference {
                    api_version: "apps/v1".into(),
                    kind: "DaemonSet".into(),
                    name: spec.owner.into(),
                    uid: format!("{}-uid", spec.owner),
                    controller: Some(true),
                    block_owner_deletion: None,
                }]),
                ..ObjectMeta::default()
            },
            status: Some(PodStatus {
                phase: Some("Running".into()),
                container_statuses: Some(vec![ContainerStatus {
                    name: "main".into(),
                    ready: spec.ready,
                    restart_count: spec.restarts,
                    ..ContainerStatus::default()
                }]),
                ..PodStatus::default()
            }),
            ..Pod::default()
        }
    }

    fn target() -> Target {
        Target {
            version: "v2".into(),
            registry: "r".into(),
            deployment_id: "id".into(),
        }
    }

    #[test]
    fn counts_updated_ready_and_crash_looping() {
        let target = target();
        let old = Target::default();
        let pods = vec![
            ready_on("stale-ready", &old),
            make(PodSpec {
                name: "stale-crashing",
                target: Some(&old),
                restarts: 9,
                ready: false,
                ..BASE
            }),
            ready_on("new-ready", &target),
            make(PodSpec {
                name: "new-not-ready",
                target: Some(&target),
                ready: false,
                ..BASE
            }),
            make(PodSpec {
                name: "new-restarted-once",
                target: Some(&target),
                restarts: 1,
                ready: false,
                ..BASE
            }),
            make(PodSpec {
                name: "new-crashing",
                target: Some(&target),
                restarts: 4,
                ready: false,
                ..BASE
            }),
            make(PodSpec {
                name: "no-annotations",
                ..BASE
            }),
        ];
        let keys = AnnotationKeys::default();
        let rule = |crash_loop| CountRule {
            target: &target,
            keys: &keys,
            updated: &UpdatedRule::Annotations,
            crash_loop,
            skip_terminating: false,
        };
        let (strict_policy, reference_policy) =
            (CrashLoopPolicy::default(), CrashLoopPolicy::KubeVirt);
        let strict = count_pods(&pods, &rule(&strict_policy));
        assert_eq!(
            (
                strict.total,
                strict.updated,
                strict.updated_ready,
                strict.crash_looping
            ),
            (7, 4, 1, 1)
        );
        let (name, crash) = strict.first_crash_loop.unwrap();
        assert_eq!(
            (name.as_str(), crash.reason, crash.restart_count),
            ("new-crashing", CrashLoopReason::RestartThreshold, 4)
        );

        // The reference fails on the single restart too, and never looks at stale pods.
        let reference = count_pods(&pods, &rule(&reference_policy));
        assert_eq!(reference.crash_looping, 2);
        assert_eq!(
            reference.first_crash_loop.map(|(name, _)| name).as_deref(),
            Some("new-restarted-once")
        );
    }

    #[test]
    fn terminating_pods_are_counted_by_the_reference_only() {
        let target = target();
        let keys = AnnotationKeys::default();
        let pods = [
            ready_on("a", &target),
            make(PodSpec {
                name: "b",
                target: Some(&target),
                terminating: true,
                ..BASE
            }),
        ];
        let mut rule = CountRule::reference(&target, &keys);
        assert_eq!(count_pods(&pods, &rule).updated_ready, 2);
        rule.skip_terminating = true;
        let counts = count_pods(&pods, &rule);
        assert_eq!((counts.total, counts.updated_ready), (1, 1));
    }

    #[test]
    fn revision_rule_sees_template_only_changes() {
        let target = target();
        let keys = AnnotationKeys::default();
        let pods = [
            make(PodSpec {
                name: "old-template",
                target: Some(&target),
                revision: "old",
                ..BASE
            }),
            ready_on("new-template", &target),
        ];
        let by_revision = UpdatedRule::AnnotationsAndRevision {
            revision_hash: "new".into(),
        };
        let mut rule = CountRule {
            target: &target,
            keys: &keys,
            updated: &UpdatedRule::Annotations,
            crash_loop: &CrashLoopPolicy::default(),
            skip_terminating: true,
        };
        assert_eq!(
            count_pods(&pods, &rule).updated_ready,
            2,
            "quirk 6: annotations only"
        );
        rule.updated = &by_revision;
        assert_eq!(count_pods(&pods, &rule).updated_ready, 1);
    }

    #[test]
    fn owned_by_filters_before_counting() {
        let target = target();
        let keys = AnnotationKeys::default();
        let pods = [
            ready_on("mine", &target),
            make(PodSpec {
                name: "other",
                target: Some(&target),
                owner: "kube-proxy",
                ..BASE
            }),
        ];
        let rule = CountRule {
            target: &target,
            keys: &keys,
            updated: &UpdatedRule::Annotations,
            crash_loop: &CrashLoopPolicy::default(),
            skip_terminating: true,
        };
        let owner = OwnerMatch::Uid {
            name: "virt-handler",
            uid: "virt-handler-uid",
        };
        assert_eq!(count_pods_owned_by(&pods, &owner, &rule).total, 1);
        assert_eq!(count_pods(&pods, &rule).total, 2);
        assert_eq!(
            count_pods(std::iter::empty::<&Pod>(), &rule),
            PodCounts::default()
        );
    }
}
