//! The tally against a full recount, over random pod events, and which events it lets trigger.

use canary_predicates::{
    AnnotationKeys, CONTROLLER_REVISION_HASH_LABEL, CrashLoopPolicy, PodSummary, Target,
    UpdatedRule, count_pods_owned_by,
};
use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateTerminated, ContainerStatus, Pod, PodSpec, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use kube::runtime::watcher::Event;
use proptest::prelude::*;

use crate::index::{Moved, OwnerIndex, PodCountRule, WatchedPod};

/// The group of the DaemonSet `agent` in namespace `a`, the one the tests count (its namesake in
/// `b` is another group).
fn group() -> String {
    crate::index::pod_group("a", "agent")
}

/// One pod of the test universe: namespace and name from small sets, so events collide.
#[derive(Debug, Clone)]
struct PodShape {
    namespace: usize,
    name: usize,
    /// 0: the DaemonSet `agent` with UID `u1`; 1: another `agent` (UID `u2`); 2: `other`.
    owner: usize,
    /// 0: no target annotations; 1: those of [`target`]`(0)`; 2: those of `target(1)`.
    annotated: usize,
    new_revision: bool,
    ready: bool,
    restarts: i32,
    /// Its container has exited and not restarted yet (`state.terminated`, no restart).
    exited: bool,
    terminating: bool,
    resource_version: u32,
}

/// The target of the tests' rules: v2, or v3 (a rollout that moved on).
fn target(which: usize) -> Target {
    Target {
        version: ["v2", "v3"][which % 2].into(),
        registry: "r".into(),
        deployment_id: "d".into(),
    }
}

fn pod(shape: &PodShape) -> WatchedPod {
    WatchedPod::from(whole_pod(shape))
}

fn whole_pod(shape: &PodShape) -> Pod {
    let (owner, uid) = [("agent", "u1"), ("agent", "u2"), ("other", "u3")][shape.owner];
    let revision = if shape.new_revision { "new" } else { "old" };
    Pod {
        metadata: ObjectMeta {
            namespace: Some(["a", "b"][shape.namespace].into()),
            name: Some(format!("p{}", shape.name)),
            resource_version: Some(shape.resource_version.to_string()),
            annotations: (shape.annotated > 0)
                .then(|| target(shape.annotated - 1).annotations(&AnnotationKeys::default())),
            labels: Some(
                [(
                    CONTROLLER_REVISION_HASH_LABEL.to_owned(),
                    revision.to_owned(),
                )]
                .into(),
            ),
            owner_references: Some(vec![OwnerReference {
                api_version: "apps/v1".into(),
                kind: "DaemonSet".into(),
                name: owner.into(),
                uid: uid.into(),
                controller: Some(true),
                block_owner_deletion: None,
            }]),
            deletion_timestamp: shape
                .terminating
                .then_some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            node_name: Some(format!("n{}", shape.name)),
            ..PodSpec::default()
        }),
        status: Some(PodStatus {
            phase: Some("Running".into()),
            container_statuses: Some(vec![ContainerStatus {
                name: "c".into(),
                ready: shape.ready,
                restart_count: shape.restarts,
                state: shape.exited.then(|| ContainerState {
                    terminated: Some(ContainerStateTerminated::default()),
                    ..ContainerState::default()
                }),
                ..ContainerStatus::default()
            }]),
            ..PodStatus::default()
        }),
    }
}

/// The rules a pass may count under (`choice` in `0..32`, one bit each): by UID or by name,
/// the new or the old revision, target v2 or v3, the reference's crash loops or strict ones
/// at 2 restarts, the target under KubeVirt's annotation keys or under keys no pod carries.
fn rule(choice: usize) -> PodCountRule {
    let bit = |n: u32| choice & (1 << n) != 0;
    let by_uid = !bit(0);
    PodCountRule {
        owner_name: "agent".into(),
        owner_uid: by_uid.then(|| "u1".to_owned()),
        target: target(usize::from(bit(2))),
        keys: if bit(4) {
            AnnotationKeys::with_prefix("canary.example.com")
        } else {
            AnnotationKeys::default()
        },
        updated: if by_uid {
            UpdatedRule::AnnotationsAndRevision {
                revision_hash: if bit(1) { "old" } else { "new" }.into(),
            }
        } else {
            UpdatedRule::Annotations
        },
        crash_loop: if bit(3) {
            CrashLoopPolicy::Strict {
                restart_threshold: 2,
                include_init_containers: true,
            }
        } else {
            CrashLoopPolicy::KubeVirt
        },
        skip_terminating: by_uid,
    }
}

fn shape() -> impl Strategy<Value = PodShape> {
    (
        (0..2usize, 0..4usize, 0..3usize),
        0..3usize,
        any::<bool>(),
        any::<bool>(),
        (0..3i32, any::<bool>()),
        any::<bool>(),
        0..3u32,
    )
        .prop_map(
            |(
                (namespace, name, owner),
                annotated,
                new_revision,
                ready,
                (restarts, exited),
                terminating,
                rv,
            )| {
                PodShape {
                    namespace,
                    name,
                    owner,
                    annotated,
                    new_revision,
                    ready,
                    restarts,
                    exited,
                    terminating,
                    resource_version: rv,
                }
            },
        )
}

#[derive(Debug, Clone)]
enum Step {
    Apply(PodShape),
    Delete(PodShape),
    Count(usize),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => shape().prop_map(Step::Apply),
        1 => shape().prop_map(Step::Delete),
        2 => (0..32usize).prop_map(Step::Count),
    ]
}

/// What a full walk of the group says under `rule`, the crash loop named being the first by
/// namespace and name.
fn recounted(index: &OwnerIndex<PodSummary>, rule: &PodCountRule) -> canary_predicates::PodCounts {
    index.with_group(&group(), |pods| {
        let mut pods: Vec<_> = pods.map(|p| &**p).collect();
        pods.sort_by_key(|p| {
            (
                p.namespace().to_owned(),
                canary_predicates::PodFacts::name(*p).to_owned(),
            )
        });
        count_pods_owned_by(pods, &rule.owner(), &rule.rule())
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Whatever the events and however the rule changes, the counts read from the tally are
    /// those of a full walk; and an event the index says cannot matter leaves them as they were.
    #[test]
    fn the_tally_equals_a_full_recount(steps in proptest::collection::vec(step(), 1..40)) {
        let index = OwnerIndex::<PodSummary>::new();
        index.apply(&Event::Init);
        index.apply(&Event::InitDone);
        let mut last_rule = None;
        for step in steps {
            let event = match step {
                Step::Count(choice) => {
                    let rule = rule(choice);
                    prop_assert_eq!(index.count(&group(), &rule), recounted(&index, &rule));
                    last_rule = Some(rule);
                    continue;
                }
                Step::Apply(shape) => Event::Apply(pod(&shape)),
                Step::Delete(shape) => Event::Delete(pod(&shape)),
            };
            let Some(rule) = &last_rule else {
                index.apply(&event);
                continue;
            };
            let before = index.count(&group(), rule);
            let matters = index.apply(&event);
            let after = index.count(&group(), rule);
            prop_assert_eq!(&after, &recounted(&index, rule));
            let thresholds = |c: &canary_predicates::PodCounts| {
                (
                    c.updated > 0,
                    c.updated_ready > 0,
                    c.total > 0 && c.updated_ready >= c.total,
                    c.first_crash_loop.as_ref().map(|(name, _)| name.clone()),
                )
            };
            match matters {
                Moved::Nothing => prop_assert_eq!(
                    (before.updated, before.updated_ready, before.first_crash_loop),
                    (after.updated, after.updated_ready, after.first_crash_loop)
                ),
                Moved::Counts => prop_assert_eq!(thresholds(&before), thresholds(&after)),
                Moved::Facts | Moved::Decision => {}
            }
        }
    }
}

fn healthy(name: usize) -> PodShape {
    PodShape {
        namespace: 0,
        name,
        owner: 0,
        annotated: 1,
        new_revision: true,
        ready: true,
        restarts: 0,
        exited: false,
        terminating: false,
        resource_version: 1,
    }
}

#[test]
fn only_events_that_move_what_a_pass_reads_matter() {
    let index = OwnerIndex::<PodSummary>::new();
    // Applies `event` and checks how much it mattered.
    let expect = |event: Event<_>, moved: Moved, why: &str| {
        assert_eq!(index.apply(&event), moved, "{why}");
    };
    let old = PodShape {
        new_revision: false,
        ..healthy(0)
    };
    expect(Event::Apply(pod(&old)), Moved::Decision, "a pod joins");
    let rewritten = PodShape {
        resource_version: 2,
        ..old.clone()
    };
    expect(
        Event::Apply(pod(&rewritten)),
        Moved::Nothing,
        "a new resource version alone changes no fact",
    );
    let not_ready = PodShape {
        ready: false,
        ..rewritten.clone()
    };
    expect(
        Event::Apply(pod(&not_ready)),
        Moved::Decision,
        "not counted yet: any fact matters",
    );

    let rule = rule(0);
    assert_eq!(index.count(&group(), &rule).total, 1);
    expect(
        Event::Apply(pod(&old)),
        Moved::Nothing,
        "counts kept: an old pod's readiness is read by no decision",
    );
    let terminating = PodShape {
        terminating: true,
        ..old.clone()
    };
    expect(
        Event::Apply(pod(&terminating)),
        Moved::Nothing,
        "nor its termination",
    );
    expect(
        Event::Delete(pod(&terminating)),
        Moved::Nothing,
        "nor its end",
    );
    let starting = PodShape {
        ready: false,
        ..healthy(1)
    };
    expect(
        Event::Apply(pod(&starting)),
        Moved::Decision,
        "an updated pod joins",
    );
    assert_eq!(
        index.apply(&Event::Apply(pod(&healthy(1)))),
        Moved::Decision,
        "and becomes ready: the first updated pod ready"
    );
    // A pass counts (the group emptied a moment ago, and its rule went with it).
    assert_eq!(index.count(&group(), &rule).updated_ready, 1);
}

/// Under a rule, from one updated pod ready: only the thresholds a decision reads matter (every
/// counted pod updated and ready, a crash loop), another owner's pod always, and everything
/// once the counts are forgotten.
#[test]
fn under_a_rule_only_the_thresholds_matter() {
    let index = OwnerIndex::<PodSummary>::new();
    let expect = |event: Event<_>, moved: Moved, why: &str| {
        assert_eq!(index.apply(&event), moved, "{why}");
    };
    let rule = rule(0);
    index.apply(&Event::Apply(pod(&healthy(1))));
    assert_eq!(index.count(&group(), &rule).updated_ready, 1);
    let another_old = PodShape {
        new_revision: false,
        ..healthy(4)
    };
    expect(
        Event::Apply(pod(&another_old)),
        Moved::Decision,
        "an old pod joins: no longer every counted pod updated and ready",
    );
    let second = PodShape {
        ready: false,
        ..healthy(3)
    };
    expect(
        Event::Apply(pod(&second)),
        Moved::Counts,
        "a second updated pod moves the counts, no threshold: its pass may wait",
    );
    assert_eq!(
        index.apply(&Event::Apply(pod(&healthy(3)))),
        Moved::Counts,
        "nor does it when it becomes ready while an old pod remains"
    );
    expect(
        Event::Delete(pod(&another_old)),
        Moved::Decision,
        "the last old pod gone: every counted pod updated and ready",
    );
    let crashing = PodShape {
        restarts: 1,
        ..healthy(1)
    };
    expect(
        Event::Apply(pod(&crashing)),
        Moved::Decision,
        "then crash-loops",
    );
    let counts = index.count(&group(), &rule);
    assert_eq!(
        counts.first_crash_loop.map(|(name, _)| name).as_deref(),
        Some("p1"),
        "the crash loop names its pod"
    );
    let stranger = PodShape {
        owner: 1,
        ..healthy(2)
    };
    assert_eq!(index.apply(&Event::Apply(pod(&stranger))), Moved::Decision);
    let stranger_not_ready = PodShape {
        ready: false,
        ..stranger
    };
    expect(
        Event::Apply(pod(&stranger_not_ready)),
        Moved::Decision,
        "another owner's pod in the group: the tally cannot tell, so it matters",
    );

    let not_ready = PodShape {
        ready: false,
        new_revision: false,
        ..healthy(0)
    };
    index.forget_counts(&group());
    expect(
        Event::Apply(pod(&not_ready)),
        Moved::Facts,
        "counts forgotten (the Pods driver): any fact matters again, in the pass soon",
    );
}

/// The debug check of [`OwnerIndex::count`] catches a tally that drifted from its pods.
#[cfg(debug_assertions)]
#[test]
#[should_panic(expected = "drifted from a full recount")]
fn a_drifted_tally_fails_the_debug_check() {
    let index = OwnerIndex::<PodSummary>::new();
    index.apply(&Event::Apply(pod(&healthy(0))));
    let rule = rule(0);
    assert_eq!(index.count(&group(), &rule).updated_ready, 1);
    if let Some(group) = index.write().live.groups.get_mut(group().as_str()) {
        group.tally = super::PodTally::recount(rule.clone(), []);
    }
    let _ = index.count(&group(), &rule);
}
