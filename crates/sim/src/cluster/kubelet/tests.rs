use super::*;
use k8s_openapi::api::core::v1::{PodSpec, PodStatus};
use serde_json::Value;
use std::collections::BTreeSet;

fn t(seconds: i64) -> Timestamp {
    Timestamp::from_second(1_767_225_600 + seconds).unwrap_or(Timestamp::UNIX_EPOCH)
}

const TIMING: StepTiming = StepTiming {
    ready_delay: Duration::from_secs(3),
    pull_wait: Duration::ZERO,
    liveness_kill_after: Duration::from_secs(30),
};

fn pod_with(image: &str, annotation: Option<&str>) -> Pod {
    let mut pod = Pod::default();
    pod.metadata.name = Some("my-pod".to_owned());
    pod.metadata.namespace = Some("argocd".to_owned());
    pod.metadata.uid = Some("63674389-f613-11e8-a057-fe5f49266390".to_owned());
    pod.metadata.creation_timestamp = Some(Time(t(0)));
    if let Some(value) = annotation {
        pod.metadata.annotations = Some(BTreeMap::from([(
            BEHAVIOR_ANNOTATION.to_owned(),
            value.to_owned(),
        )]));
    }
    pod.spec = Some(PodSpec {
        node_name: Some("node-1".to_owned()),
        containers: vec![Container {
            name: "main".to_owned(),
            image: Some(image.to_owned()),
            ..Container::default()
        }],
        ..PodSpec::default()
    });
    pod
}

fn addresses() -> PodAddresses {
    PodAddresses {
        host_ip: "10.0.0.1".to_owned(),
        pod_ip: "10.128.1.2".to_owned(),
    }
}

/// Drives `runtime` through its own schedule for `seconds` of virtual time.
fn run_for(runtime: &mut PodRuntime, seconds: u64) {
    let backoff = BackoffConfig::default();
    let mut now = t(0);
    let end = t(seconds as i64);
    let mut next = Some((KubeletStep::Start, Duration::from_secs(2)));
    while let Some((step, delay)) = next {
        let at = now.checked_add(delay).unwrap_or(now);
        if at > end {
            break;
        }
        now = at;
        next = runtime.step(step, now, TIMING, &backoff);
    }
}

fn fixture(name: &str) -> Value {
    let path = format!("{}/../../testdata/pods/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Every key path of a JSON value (arrays: their first element), with the value's type.
fn shape(value: &Value, prefix: &str, out: &mut BTreeSet<String>) {
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                let path = format!("{prefix}.{key}");
                out.insert(format!("{path}:{}", kind(child)));
                shape(child, &path, out);
            }
        }
        Value::Array(items) => {
            if let Some(first) = items.first() {
                shape(first, &format!("{prefix}[]"), out);
            }
        }
        _ => {}
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// The container status and Ready condition of `ours` have the fixture's shape: the same
/// key paths and types. `ignored` lists fields left out of the comparison: fields this
/// model does not produce, or fields newer than the fixture's Kubernetes.
fn assert_shape_like_fixture(ours: &PodStatus, fixture: &Value, ignored: &[&str]) {
    let ours = serde_json::to_value(ours).unwrap_or_default();
    for (label, pick) in [
        (
            "containerStatuses[0]",
            (|s: &Value| s["containerStatuses"][0].clone()) as fn(&Value) -> Value,
        ),
        ("Ready condition", |s: &Value| {
            s["conditions"]
                .as_array()
                .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
                .cloned()
                .unwrap_or_default()
        }),
    ] {
        let (mut mine, mut theirs) = (BTreeSet::new(), BTreeSet::new());
        shape(&pick(&ours), "", &mut mine);
        shape(&pick(&fixture["status"]), "", &mut theirs);
        theirs.retain(|p| !ignored.iter().any(|n| p.starts_with(n)));
        // lastProbeTime: null is dropped by k8s-openapi when serializing.
        theirs.retain(|p| !p.starts_with(".lastProbeTime"));
        mine.retain(|p| !ignored.iter().any(|n| p.starts_with(n)));
        assert_eq!(mine, theirs, "{label}: ours vs fixture");
    }
    assert_eq!(ours["phase"], fixture["status"]["phase"]);
    let their_cs = &fixture["status"]["containerStatuses"][0];
    let our_cs = &ours["containerStatuses"][0];
    for key in ["ready", "started"] {
        if !their_cs[key].is_null() {
            assert_eq!(our_cs[key], their_cs[key], "{key}");
        }
    }
    assert_eq!(
        our_cs["state"]["waiting"]["reason"],
        their_cs["state"]["waiting"]["reason"]
    );
    assert_eq!(
        our_cs["lastState"]["terminated"]["reason"],
        their_cs["lastState"]["terminated"]["reason"]
    );
    assert_eq!(
        our_cs["lastState"]["terminated"]["exitCode"],
        their_cs["lastState"]["terminated"]["exitCode"]
    );
}

#[test]
fn behaviours_parse_from_the_annotation_syntax() {
    assert_eq!("healthy".parse(), Ok(PodBehavior::Healthy));
    assert_eq!("crashloop".parse(), Ok(PodBehavior::CrashLoop));
    assert_eq!("never-ready".parse(), Ok(PodBehavior::NeverReady));
    assert_eq!(
        "image-pull-backoff".parse(),
        Ok(PodBehavior::ImagePullBackOff)
    );
    assert_eq!(
        "slow-start=60s".parse(),
        Ok(PodBehavior::SlowStart(Duration::from_secs(60)))
    );
    assert_eq!(
        "crash-after-ready=2m".parse(),
        Ok(PodBehavior::CrashAfterReady(Duration::from_secs(120)))
    );
    assert_eq!(
        " slow-start = 500ms ".parse(),
        Ok(PodBehavior::SlowStart(Duration::from_millis(500)))
    );
    for bad in [
        "",
        "sick",
        "slow-start",
        "slow-start=soon",
        "healthy=1s",
        "crash-after-ready=5d",
    ] {
        assert!(bad.parse::<PodBehavior>().is_err(), "{bad:?}");
    }
    for behavior in [
        PodBehavior::CrashLoop,
        PodBehavior::SlowStart(Duration::from_millis(1500)),
    ] {
        assert_eq!(behavior.to_string().parse(), Ok(behavior));
    }
}

#[test]
fn annotation_wins_over_image_rules_and_the_longest_image_prefix_wins() {
    let config = KubeletConfig {
        image_behaviors: BTreeMap::from([
            (
                "quay.io/org/agent".to_owned(),
                PodBehavior::NeverReady.into(),
            ),
            (
                "quay.io/org/agent:v2-broken".to_owned(),
                PodBehavior::CrashLoop.into(),
            ),
            (
                "quay.io/org/agent:v3-gpu".to_owned(),
                "breaks-node=1m".parse().unwrap_or_default(),
            ),
        ]),
        ..KubeletConfig::default()
    };
    let behavior = |image: &str, annotation: Option<&str>| {
        config
            .behavior_for(&pod_with(image, annotation))
            .map(|b| b.to_string())
    };
    assert_eq!(
        behavior("quay.io/org/agent:v1", None),
        Ok("never-ready".into())
    );
    assert_eq!(
        behavior("quay.io/org/agent:v2-broken", None),
        Ok("crashloop".into())
    );
    assert_eq!(
        behavior("quay.io/org/agent:v3-gpu", None),
        Ok("breaks-node=60000ms".into())
    );
    assert_eq!(behavior("docker.io/other:v1", None), Ok("healthy".into()));
    assert_eq!(
        behavior("quay.io/org/agent:v2-broken", Some("healthy")),
        Ok("healthy".into())
    );
    assert_eq!(
        behavior("x", Some("slow-start=2s,node-condition=KernelDeadlock")),
        Ok("slow-start=2000ms,node-condition=KernelDeadlock".into())
    );
    assert!(config.behavior_for(&pod_with("x", Some("bogus"))).is_err());
}

#[test]
fn crash_backoff_is_immediate_then_doubles_from_ten_seconds_to_five_minutes() {
    let backoff = BackoffConfig::default();
    let delays: Vec<u64> = (0..8).map(|rc| backoff.delay(rc).as_secs()).collect();
    assert_eq!(delays, vec![0, 10, 20, 40, 80, 160, 300, 300]);
}

#[test]
fn healthy_pod_is_pending_then_running_then_ready_like_a_real_daemonset_pod() {
    let pod = pod_with("registry.k8s.io/kube-proxy:v1.35.0", None);
    let mut runtime = PodRuntime::admitted(PodBehavior::Healthy, t(0));
    let pending =
        serde_json::to_value(render_status(&pod, &runtime, &addresses())).unwrap_or_default();
    assert_eq!(pending["phase"], "Pending");
    assert_eq!(
        pending["containerStatuses"][0]["state"]["waiting"]["reason"],
        "ContainerCreating"
    );
    run_for(&mut runtime, 3);
    assert!(matches!(
        runtime.phase,
        ContainerPhase::Running { ready: false, .. }
    ));
    run_for(&mut runtime, 10);
    assert!(runtime.pod_ready());
    assert_eq!(
        runtime.ready_changed_at,
        t(5),
        "ready 3s after starting at 2s"
    );
    let status = render_status(&pod, &runtime, &addresses());
    let fixture = fixture("daemonset-pod-healthy.yaml");
    assert_shape_like_fixture(
        &status,
        &fixture,
        &[
            ".user",
            ".volumeMounts",
            ".resources",
            ".observedGeneration",
        ],
    );
    let json = serde_json::to_value(&status).unwrap_or_default();
    let types: Vec<&str> = json["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["type"].as_str())
        .collect();
    let theirs: Vec<String> = fixture["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["type"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(types, theirs, "same conditions in the same order");
}

#[test]
fn crash_loop_matches_the_crashloopbackoff_fixture_at_restart_count_three() {
    let pod = pod_with("alpine:latest", None);
    let mut runtime = PodRuntime::admitted(PodBehavior::CrashLoop, t(0));
    // start 2s, crash 3s -> restart at once (1), crash 4s -> 10s, run 14s, crash 15s -> 20s,
    // run 35s, crash 36s -> 40s back-off with restartCount 3.
    run_for(&mut runtime, 40);
    assert_eq!(runtime.restart_count, 3);
    assert_eq!(
        runtime.phase,
        ContainerPhase::BackOff {
            delay: Duration::from_secs(40)
        }
    );
    let status = render_status(&pod, &runtime, &addresses());
    // `started` came with Kubernetes 1.16, after this 2018 fixture.
    assert_shape_like_fixture(&status, &fixture("crashloopbackoff.yaml"), &[".started"]);
    let json = serde_json::to_value(&status).unwrap_or_default();
    let message = json["containerStatuses"][0]["state"]["waiting"]["message"]
        .as_str()
        .unwrap_or_default();
    assert_eq!(
        message,
        "back-off 40s restarting failed container=main pod=my-pod_argocd(63674389-f613-11e8-a057-fe5f49266390)"
    );
    assert_eq!(json["containerStatuses"][0]["restartCount"], 3);
    assert_eq!(
        json["containerStatuses"][0]["lastState"]["terminated"]["startedAt"],
        "2026-01-01T00:00:35Z"
    );
    assert_eq!(
        json["containerStatuses"][0]["lastState"]["terminated"]["finishedAt"],
        "2026-01-01T00:00:36Z"
    );
}

#[test]
fn image_pull_failure_matches_the_imagepullbackoff_fixture() {
    let image = "gcr.io/heptio-images/ks-guestbook-demo:0.3";
    let pod = pod_with(image, None);
    let mut runtime = PodRuntime::admitted(PodBehavior::ImagePullBackOff, t(0));
    run_for(&mut runtime, 2);
    assert_eq!(
        runtime.phase,
        ContainerPhase::PullFailed { backing_off: false }
    );
    let err = serde_json::to_value(render_status(&pod, &runtime, &addresses())).unwrap_or_default();
    assert_eq!(
        err["containerStatuses"][0]["state"]["waiting"]["reason"],
        "ErrImagePull"
    );
    run_for(&mut runtime, 5);
    let status = render_status(&pod, &runtime, &addresses());
    assert_shape_like_fixture(&status, &fixture("imagepullbackoff.yaml"), &[".started"]);
    let json = serde_json::to_value(&status).unwrap_or_default();
    assert_eq!(
        json["containerStatuses"][0]["state"]["waiting"]["message"],
        format!("Back-off pulling image \"{image}\"")
    );
    assert_eq!(json["containerStatuses"][0]["imageID"], "");
    assert_eq!(json["containerStatuses"][0]["restartCount"], 0);
    assert!(runtime.pull_attempts >= 1);
}

#[test]
fn never_ready_matches_the_running_not_ready_fixture() {
    let pod = pod_with("alpine:latest", None);
    let mut runtime = PodRuntime::admitted(PodBehavior::NeverReady, t(0));
    run_for(&mut runtime, 600);
    let status = render_status(&pod, &runtime, &addresses());
    assert_shape_like_fixture(&status, &fixture("running-not-ready.yaml"), &[".started"]);
    let json = serde_json::to_value(&status).unwrap_or_default();
    assert_eq!(json["containerStatuses"][0]["ready"], false);
    assert!(json["containerStatuses"][0]["state"]["running"]["startedAt"].is_string());
}

#[test]
fn slow_start_and_crash_after_ready_follow_their_delays() {
    let mut slow = PodRuntime::admitted(PodBehavior::SlowStart(Duration::from_secs(60)), t(0));
    run_for(&mut slow, 61);
    assert!(!slow.pod_ready());
    run_for(&mut slow, 62);
    assert!(slow.pod_ready());
    let mut flaky =
        PodRuntime::admitted(PodBehavior::CrashAfterReady(Duration::from_secs(30)), t(0));
    run_for(&mut flaky, 34);
    assert!(flaky.pod_ready(), "ready at 5s, crashes at 35s");
    run_for(&mut flaky, 36);
    assert_eq!(flaky.restart_count, 1, "the first crash restarts at once");
    assert!(!flaky.pod_ready());
}

#[test]
fn a_not_ready_node_holds_the_ready_condition_false() {
    let pod = pod_with("agent:v1", None);
    let mut runtime = PodRuntime::admitted(PodBehavior::Healthy, t(0));
    run_for(&mut runtime, 10);
    assert!(runtime.set_node_ready(false, t(20)));
    let json =
        serde_json::to_value(render_status(&pod, &runtime, &addresses())).unwrap_or_default();
    let ready = json["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(ready["status"], "False");
    assert_eq!(ready["lastTransitionTime"], "2026-01-01T00:00:20Z");
    assert!(runtime.set_node_ready(true, t(30)));
    assert!(runtime.pod_ready());
    assert!(
        !runtime.set_node_ready(true, t(31)),
        "no change, no new transition"
    );
}

#[test]
fn init_containers_complete_when_the_pod_starts() {
    let mut pod = pod_with("flannel:v0.28", None);
    if let Some(spec) = pod.spec.as_mut() {
        spec.init_containers = Some(vec![Container {
            name: "install-cni".to_owned(),
            image: Some("flannel-cni:v1".to_owned()),
            ..Container::default()
        }]);
    }
    let mut runtime = PodRuntime::admitted(PodBehavior::Healthy, t(0));
    let before =
        serde_json::to_value(render_status(&pod, &runtime, &addresses())).unwrap_or_default();
    assert_eq!(
        before["initContainerStatuses"][0]["state"]["waiting"]["reason"],
        "PodInitializing"
    );
    run_for(&mut runtime, 10);
    let after =
        serde_json::to_value(render_status(&pod, &runtime, &addresses())).unwrap_or_default();
    assert_eq!(
        after["initContainerStatuses"][0]["state"]["terminated"]["reason"],
        "Completed"
    );
    assert_eq!(
        after["initContainerStatuses"][0]["state"]["terminated"]["exitCode"],
        0
    );
}

#[test]
fn a_pull_keeps_the_pod_creating_with_its_sandbox_ready_until_the_image_is_there() {
    let pod = pod_with("agent:v2", None);
    let mut runtime = PodRuntime::admitted(PodBehavior::Healthy, t(0));
    let backoff = BackoffConfig::default();
    let pulling = StepTiming {
        pull_wait: Duration::from_secs(30),
        ..TIMING
    };
    assert_eq!(
        runtime.step(KubeletStep::Start, t(2), pulling, &backoff),
        Some((KubeletStep::Pulled, Duration::from_secs(30)))
    );
    let json =
        serde_json::to_value(render_status(&pod, &runtime, &addresses())).unwrap_or_default();
    assert_eq!(json["phase"], "Pending");
    assert_eq!(
        json["containerStatuses"][0]["state"]["waiting"]["reason"],
        "ContainerCreating"
    );
    assert_eq!(json["containerStatuses"][0]["imageID"], "");
    assert_eq!(json["conditions"][0]["type"], "PodReadyToStartContainers");
    assert_eq!(json["conditions"][0]["status"], "True");
    assert_eq!(
        runtime.step(KubeletStep::Pulled, t(32), pulling, &backoff),
        Some((KubeletStep::BecomeReady, Duration::from_secs(3)))
    );
    assert!(
        matches!(runtime.phase, ContainerPhase::Running { started_at, .. } if started_at == t(32))
    );
    // A second Pulled (a stale timer) changes nothing.
    assert_eq!(
        runtime.step(KubeletStep::Pulled, t(33), pulling, &backoff),
        None
    );
}

#[test]
fn a_broken_network_fails_readiness_then_liveness_until_healed() {
    let pod = pod_with("web:v1", None);
    let backoff = BackoffConfig::default();
    let mut runtime = PodRuntime::already_running(PodBehavior::Healthy, t(0));
    assert!(runtime.pod_ready() && runtime.ever_ready);
    // Readiness fails at once; the liveness kill comes 30 s later.
    let kill = runtime.disrupt(t(10), TIMING);
    assert_eq!(
        kill,
        Some((
            KubeletStep::ProbeKill { run: 0, round: 1 },
            Duration::from_secs(30)
        ))
    );
    assert!(!runtime.pod_ready());
    assert_eq!(runtime.ready_changed_at, t(10));
    assert_eq!(runtime.disrupt(t(11), TIMING), None, "already failing");
    // Killed (exit 137), restarted at once, and its probes still fail.
    let next = runtime.step(
        KubeletStep::ProbeKill { run: 0, round: 1 },
        t(40),
        TIMING,
        &backoff,
    );
    assert_eq!(
        next,
        Some((
            KubeletStep::ProbeKill { run: 1, round: 1 },
            Duration::from_secs(30)
        ))
    );
    assert_eq!(runtime.restart_count, 1);
    assert_eq!(
        runtime.last_terminated.map(|t| t.exit_code),
        Some(KILLED_EXIT_CODE)
    );
    // Readiness cannot pass meanwhile.
    assert_eq!(
        runtime.step(KubeletStep::BecomeReady, t(43), TIMING, &backoff),
        None
    );
    assert!(!runtime.containers_ready());
    // The second kill waits in CrashLoopBackOff.
    assert_eq!(
        runtime.step(
            KubeletStep::ProbeKill { run: 1, round: 1 },
            t(70),
            TIMING,
            &backoff
        ),
        Some((KubeletStep::Restart, Duration::from_secs(10)))
    );
    let json =
        serde_json::to_value(render_status(&pod, &runtime, &addresses())).unwrap_or_default();
    assert_eq!(
        json["containerStatuses"][0]["state"]["waiting"]["reason"],
        "CrashLoopBackOff"
    );
    assert_eq!(
        json["containerStatuses"][0]["lastState"]["terminated"]["exitCode"],
        137
    );
    assert_eq!(json["containerStatuses"][0]["restartCount"], 1);
    // Healed while backing off: the restart runs a container that becomes ready.
    assert_eq!(runtime.heal(TIMING), None);
    assert_eq!(
        runtime.step(KubeletStep::Restart, t(80), TIMING, &backoff),
        Some((KubeletStep::BecomeReady, Duration::from_secs(3)))
    );
    // A kill scheduled before the heal is void.
    assert_eq!(
        runtime.step(
            KubeletStep::ProbeKill { run: 2, round: 1 },
            t(81),
            TIMING,
            &backoff
        ),
        None
    );
    assert_eq!(
        runtime.step(KubeletStep::BecomeReady, t(83), TIMING, &backoff),
        None
    );
    assert!(runtime.pod_ready());
    // Healed while running not ready: ready after the ready delay.
    let mut other = PodRuntime::already_running(PodBehavior::Healthy, t(0));
    other.disrupt(t(1), TIMING);
    assert_eq!(
        other.heal(TIMING),
        Some((KubeletStep::BecomeReady, Duration::from_secs(3)))
    );
    // A never-ready container is killed too; a crash-looping one crashes by itself.
    let mut never = PodRuntime::already_running(PodBehavior::NeverReady, t(0));
    assert!(never.disrupt(t(1), TIMING).is_some());
    let mut looping = PodRuntime::admitted(PodBehavior::CrashLoop, t(0));
    run_for(&mut looping, 3);
    assert_eq!(looping.disrupt(t(3), TIMING), None);
}

#[test]
fn pull_times_come_from_the_annotation_then_the_longest_image_rule_then_the_default() {
    let config = KubeletConfig {
        image_pull_times: BTreeMap::from([
            ("quay.io/org/".to_owned(), Duration::from_secs(10)),
            ("quay.io/org/agent".to_owned(), Duration::from_secs(30)),
        ]),
        default_pull_time: Duration::from_secs(1),
        ..KubeletConfig::default()
    };
    let mut pod = pod_with("quay.io/org/agent:v2", None);
    if let Some(spec) = pod.spec.as_mut() {
        spec.init_containers = Some(vec![Container {
            name: "install".to_owned(),
            image: Some("quay.io/org/installer:v2".to_owned()),
            ..Container::default()
        }]);
        spec.containers.push(Container {
            name: "sidecar".to_owned(),
            image: Some("quay.io/org/agent:v2".to_owned()),
            ..Container::default()
        });
        spec.containers.push(Container {
            name: "exporter".to_owned(),
            image: Some("docker.io/exporter:v1".to_owned()),
            ..Container::default()
        });
    }
    let (pulls, error) = config.pulls_for(&pod);
    assert_eq!(error, None);
    assert_eq!(
        pulls,
        [
            (
                "quay.io/org/installer:v2".to_owned(),
                Duration::from_secs(10)
            ),
            ("quay.io/org/agent:v2".to_owned(), Duration::from_secs(30)),
            ("docker.io/exporter:v1".to_owned(), Duration::from_secs(1)),
        ]
    );
    pod.metadata.annotations = Some(BTreeMap::from([(
        PULL_ANNOTATION.to_owned(),
        "2m".to_owned(),
    )]));
    let (pulls, _) = config.pulls_for(&pod);
    assert!(
        pulls
            .iter()
            .all(|(_, time)| *time == Duration::from_secs(120))
    );
    pod.metadata.annotations = Some(BTreeMap::from([(
        PULL_ANNOTATION.to_owned(),
        "soon".to_owned(),
    )]));
    let (pulls, error) = config.pulls_for(&pod);
    assert!(error.is_some_and(|e| e.problem.contains("needs a duration")));
    assert_eq!(
        pulls.first().map(|(_, t)| *t),
        Some(Duration::from_secs(10))
    );
    assert!(
        KubeletConfig::default()
            .pulls_for(&pod_with("x", None))
            .0
            .iter()
            .all(|(_, t)| t.is_zero())
    );
}
