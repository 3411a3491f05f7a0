//! The plan of a spec: every field's checks (the CRD's rules again, for API servers that do
//! not run them) and the settings derived from it.

use super::*;
use crate::crd::{CanaryDaemonSetSpec, DaemonSetTemplate, TargetSpec};
use serde_json::json;

/// A CanaryDaemonSet `ns/agent` (UID `u`) with an empty template at `v1`; shared by the
/// pass's and the memory's tests.
pub(in crate::reconcile) fn cds() -> CanaryDaemonSet {
    let spec = CanaryDaemonSetSpec::with_template(
        DaemonSetTemplate {
            metadata: Default::default(),
            spec: serde_json::from_value(json!({"selector": {}, "template": {}})).unwrap(),
        },
        TargetSpec {
            version: "v1".into(),
            from_container: None,
            registry: String::new(),
            deployment_id: None,
        },
    );
    let mut cds = CanaryDaemonSet::new("agent", spec);
    cds.metadata.namespace = Some("ns".into());
    cds.metadata.uid = Some("u".into());
    cds
}

#[test]
fn the_health_gates_default_by_compatibility_and_are_checked_as_the_crd_checks_them() {
    use crate::crd::HealthSpec;
    use canary_state_machine::OnUnhealthy;
    let fixed = plan(&cds()).unwrap().health;
    assert_eq!(fixed.policy, HealthPolicy::default());
    assert_eq!(fixed.node_conditions, ["NetworkUnavailable"]);
    let mut kubevirt = cds();
    kubevirt.spec.strategy.compatibility = Compatibility::KubeVirt;
    assert_eq!(
        plan(&kubevirt).unwrap().health.policy.canary_soak,
        Duration::ZERO
    );

    let with = |health: HealthSpec| {
        let mut cds = cds();
        cds.spec.health = Some(health);
        plan(&cds).map(|plan| plan.health)
    };
    let set = with(HealthSpec {
        window: Some("1h".into()),
        node_conditions: Some(vec!["KernelDeadlock".into()]),
        canary_soak: Some("0s".into()),
        on_unhealthy: OnUnhealthy::Hold,
        neighbours: Some(NeighboursSpec {
            enabled: Some(false),
            min_pods: Some(1),
            min_percent: None,
        }),
    })
    .unwrap();
    assert_eq!(
        set.policy.neighbours,
        NeighbourPolicy {
            enabled: false,
            min_pods: 1,
            min_percent: 50,
        }
    );
    assert_eq!(set.policy.window, Duration::from_secs(3600));
    assert_eq!(set.policy.canary_soak, Duration::ZERO);
    assert_eq!(set.policy.on_unhealthy, OnUnhealthy::Hold);
    assert_eq!(set.node_conditions, ["KernelDeadlock"]);
    assert!(
        with(HealthSpec {
            node_conditions: Some(Vec::new()),
            ..HealthSpec::default()
        })
        .unwrap()
        .node_conditions
        .is_empty()
    );
    for (bad, says) in [
        (
            HealthSpec {
                window: Some("0s".into()),
                ..HealthSpec::default()
            },
            "spec.health.window \"0s\" is out of range",
        ),
        (
            HealthSpec {
                window: Some("25h".into()),
                ..HealthSpec::default()
            },
            "out of range (1s to 24h)",
        ),
        (
            HealthSpec {
                canary_soak: Some("soon".into()),
                ..HealthSpec::default()
            },
            "spec.health.canarySoak \"soon\"",
        ),
        (
            HealthSpec {
                node_conditions: Some(vec!["Ready".into()]),
                ..HealthSpec::default()
            },
            "Ready is always judged",
        ),
        (
            HealthSpec {
                node_conditions: Some(vec!["bad type".into()]),
                ..HealthSpec::default()
            },
            "nodeConditions[0]",
        ),
        (
            HealthSpec {
                node_conditions: Some(vec!["A".into(), "A".into()]),
                ..HealthSpec::default()
            },
            "nodeConditions[1] \"A\" is named twice",
        ),
        (
            HealthSpec {
                neighbours: Some(NeighboursSpec {
                    min_percent: Some(101),
                    ..NeighboursSpec::default()
                }),
                ..HealthSpec::default()
            },
            "spec.health.neighbours.minPercent 101 is out of range (1 to 100)",
        ),
        (
            HealthSpec {
                neighbours: Some(NeighboursSpec {
                    min_pods: Some(0),
                    ..NeighboursSpec::default()
                }),
                ..HealthSpec::default()
            },
            "spec.health.neighbours.minPods 0",
        ),
    ] {
        let error = with(bad).unwrap_err();
        assert!(error.contains(says), "{error}");
    }
}

#[test]
fn default_plan_is_fixed_with_deadline_and_strict_crash_loops() {
    let plan = plan(&cds()).unwrap();
    assert_eq!(plan.strategy.compatibility, Compatibility::Fixed);
    assert_eq!(
        plan.strategy.canary_max_unavailable,
        MaxUnavailable::Count(1)
    );
    assert_eq!(
        plan.strategy.fast_max_unavailable,
        MaxUnavailable::Percent(10)
    );
    assert_eq!(
        plan.strategy.progress_deadline,
        Some(Duration::from_secs(600))
    );
    assert_eq!(
        plan.crash_loop,
        CrashLoopPolicy::Strict {
            restart_threshold: 3,
            include_init_containers: true
        }
    );
    assert!(plan.tls.is_none());
}

#[test]
fn kubevirt_compatibility_alone_brings_the_reference_crash_rule() {
    let mut cds = cds();
    cds.spec.strategy.compatibility = Compatibility::KubeVirt;
    assert_eq!(plan(&cds).unwrap().crash_loop, CrashLoopPolicy::KubeVirt);
    cds.spec.strategy.crash_loop = Some(crate::crd::CrashLoopSpec::default());
    assert_eq!(
        plan(&cds).unwrap().crash_loop,
        CrashLoopPolicy::default(),
        "an explicit crashLoop wins"
    );
}

#[test]
fn names_follow_the_crd_rules() {
    let mut long = cds();
    long.metadata.name = Some("a".repeat(64));
    assert!(plan(&long).unwrap_err().contains("63"));
    for bad in ["", "Agent", "-agent", "agent-", "a_b"] {
        let mut cds = cds();
        cds.spec.daemon_set_name = Some(bad.into());
        assert!(
            plan(&cds).unwrap_err().contains("DNS-1123"),
            "{bad:?} accepted"
        );
    }
    let mut renamed = cds();
    renamed.status = Some(crate::crd::CanaryDaemonSetStatus {
        daemon_set_name: Some("agent".into()),
        ..Default::default()
    });
    renamed.spec.daemon_set_name = Some("agent-2".into());
    assert!(plan(&renamed).unwrap_err().contains("immutable"));
    let mut keys = cds();
    keys.spec.annotation_keys = Some(crate::crd::AnnotationKeysSpec {
        version: "example.com/version".into(),
        registry: "registry".into(),
        id: "not a key".into(),
    });
    assert!(plan(&keys).unwrap_err().contains("qualified name"));
    assert!(is_qualified_name("kubevirt.io/install-strategy-version"));
    assert!(!is_qualified_name("Example.com/x"));
    assert!(!is_qualified_name(&"x".repeat(64)));
}

#[test]
fn out_of_range_integers_are_an_invalid_spec() {
    let mut cds = cds();
    cds.spec.strategy.crash_loop = Some(crate::crd::CrashLoopSpec {
        restart_threshold: i32::MAX,
        ..Default::default()
    });
    assert!(plan(&cds).unwrap_err().contains("restartThreshold"));
    let mut cds = self::cds();
    cds.spec.strategy.progress_deadline_seconds = -1;
    assert!(plan(&cds).unwrap_err().contains("progressDeadlineSeconds"));
    for limit in [0, -1, 101, 500] {
        let mut cds = self::cds();
        cds.spec.revision_history_limit = Some(limit);
        let error = plan(&cds).unwrap_err();
        assert!(error.contains("revisionHistoryLimit") && error.contains(&limit.to_string()));
    }
    for limit in [1, 100] {
        let mut cds = self::cds();
        cds.spec.revision_history_limit = Some(limit);
        assert!(plan(&cds).is_ok(), "{limit} is within the CRD's range");
    }
}

#[test]
fn kubevirt_plan_has_no_deadline_and_reference_tls_insert() {
    let mut cds = cds();
    cds.spec.strategy.compatibility = Compatibility::KubeVirt;
    cds.spec.strategy.crash_loop = Some(crate::crd::CrashLoopSpec {
        policy: CrashLoopPolicyName::KubeVirt,
        ..Default::default()
    });
    cds.spec.tls_migration.enabled = true;
    cds.spec.tls_migration.container = Some("handler".into());
    let plan = plan(&cds).unwrap();
    assert_eq!(plan.strategy.progress_deadline, None);
    assert_eq!(plan.crash_loop, CrashLoopPolicy::KubeVirt);
    let tls = plan.tls.unwrap();
    assert_eq!(tls.insert, InsertMode::Reference);
    assert_eq!(tls.container, ContainerSelector::Name("handler".into()));
}

#[test]
fn the_pods_driver_plans_its_steps_and_refuses_what_it_cannot_do() {
    let mut cds = cds();
    cds.spec.strategy.driver = Driver::Pods;
    cds.spec.strategy.topology_key = Some("topology.kubernetes.io/zone".into());
    cds.spec.strategy.steps = vec![
        StepSpec {
            nodes: Some("1".into()),
            ..StepSpec::default()
        },
        StepSpec {
            pause: Some(crate::crd::PauseSpec {
                duration: Some("1h30m".into()),
            }),
            ..StepSpec::default()
        },
    ];
    let DriverPlan::Pods(pods) = plan(&cds).unwrap().driver else {
        panic!("not the Pods driver");
    };
    assert!(pods.steps.zoned);
    assert_eq!(
        pods.steps.steps()[1],
        Step::Pause {
            duration: Some(Duration::from_secs(5400))
        }
    );
    assert_eq!(pods.steps.len(), 3, "the all-nodes step is appended");

    let mut kubevirt = cds.clone();
    kubevirt.spec.strategy.compatibility = Compatibility::KubeVirt;
    assert!(
        plan(&kubevirt)
            .unwrap_err()
            .contains("needs compatibility Fixed")
    );
    let mut tls = cds.clone();
    tls.spec.tls_migration.enabled = true;
    assert!(plan(&tls).unwrap_err().contains("tlsMigration"));
    let mut both = cds.clone();
    both.spec.strategy.steps[0].pause = Some(Default::default());
    assert!(plan(&both).unwrap_err().contains("either"));
    let mut workload = cds.clone();
    workload.spec.workload_ref = Some(crate::crd::WorkloadRef {
        name: "cilium".into(),
    });
    assert!(plan(&workload).unwrap_err().contains("exactly one"));
    workload.spec.template = None;
    assert!(plan(&workload).is_ok());
    workload.spec.strategy.driver = Driver::MaxUnavailable;
    assert!(
        plan(&workload)
            .unwrap_err()
            .contains("needs spec.strategy.driver: Pods")
    );
    let mut stray = self::cds();
    stray.spec.strategy.topology_key = Some("zone".into());
    assert!(
        plan(&stray)
            .unwrap_err()
            .contains("setting of the Pods driver")
    );
}

#[test]
fn zero_deadline_disables_it() {
    let mut cds = cds();
    cds.spec.strategy.progress_deadline_seconds = 0;
    assert_eq!(plan(&cds).unwrap().strategy.progress_deadline, None);
}

#[test]
fn invalid_specs_are_reported_not_panicked() {
    for (field, value) in [
        ("canary", "abc"),
        ("canary", "0"),
        ("fast", "150%"),
        ("fast", "-1"),
        ("fast", ""),
    ] {
        let mut cds = cds();
        match field {
            "canary" => cds.spec.strategy.canary_max_unavailable = value.into(),
            _ => cds.spec.strategy.fast_max_unavailable = value.into(),
        }
        let error = plan(&cds)
            .err()
            .unwrap_or_else(|| panic!("{field}={value:?} accepted"));
        assert!(error.contains("spec.strategy"), "{error}");
    }
    let mut empty_version = cds();
    empty_version.spec.target.version = String::new();
    assert!(plan(&empty_version).unwrap_err().contains("target.version"));
}

/// Surge is the MaxUnavailable driver's, in the default compatibility: the reference has
/// none, and the Pods driver never starts a new pod beside the old one.
#[test]
fn surge_is_refused_where_it_cannot_work() {
    let mut surged = cds();
    surged.spec.strategy.surge = true;
    let plan_of = plan(&surged).unwrap();
    assert!(plan_of.surge);
    assert_eq!(plan_of.rolling_update_write(), RollingUpdateWrite::Surge);
    let mut kubevirt = surged.clone();
    kubevirt.spec.strategy.compatibility = Compatibility::KubeVirt;
    let error = plan(&kubevirt).unwrap_err();
    assert!(error.contains("surge needs compatibility Fixed"), "{error}");
    let mut pods = surged.clone();
    pods.spec.strategy.driver = Driver::Pods;
    let error = plan(&pods).unwrap_err();
    assert!(
        error.contains("surge is for the MaxUnavailable driver"),
        "{error}"
    );
    assert_eq!(
        plan(&cds()).unwrap().rolling_update_write(),
        RollingUpdateWrite::KeepMaxSurge
    );
}
