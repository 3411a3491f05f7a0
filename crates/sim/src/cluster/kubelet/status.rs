//! The pod status a kubelet reports for a pod in a [`PodRuntime`] state (kubernetes
//! `pkg/kubelet/kubelet_pods.go` `generateAPIPodStatus`, `pkg/kubelet/status/generate.go` for
//! the conditions): phase, conditions, the containers' and init containers' statuses with their
//! deterministic ids, the QoS class. Pure: the same pod and state give the same status.

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
    ContainerStatus, HostIP, Pod, PodCondition, PodIP, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::*;

/// Where the pod lives on the network.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodAddresses {
    /// The node's InternalIP.
    pub host_ip: String,
    /// The pod's IP (the node's for hostNetwork pods).
    pub pod_ip: String,
}

/// A deterministic 64-hex-digit identifier (container and image ids).
fn hex_id(parts: &[&str]) -> String {
    let mut out = String::with_capacity(64);
    let mut state: u64 = 0xcbf2_9ce4_8422_2325;
    for round in 0u8..4 {
        for part in parts {
            for byte in part.bytes().chain([round]) {
                state ^= u64::from(byte);
                state = state.wrapping_mul(0x0000_0100_0000_01b3);
            }
        }
        out.push_str(&format!("{state:016x}"));
    }
    out
}

fn condition(
    type_: &str,
    status: bool,
    since: Timestamp,
    reason: Option<&str>,
    message: Option<String>,
) -> PodCondition {
    PodCondition {
        type_: type_.to_owned(),
        status: if status { "True" } else { "False" }.to_owned(),
        last_transition_time: Some(Time(since)),
        reason: reason.filter(|_| !status).map(str::to_owned),
        message: message.filter(|_| !status),
        ..PodCondition::default()
    }
}

/// The status a kubelet reports for `pod` in the state `runtime`.
pub fn render_status(pod: &Pod, runtime: &PodRuntime, addresses: &PodAddresses) -> PodStatus {
    let pod_name = pod.metadata.name.as_deref().unwrap_or("");
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("");
    let uid = pod.metadata.uid.as_deref().unwrap_or("");
    let scheduled_at = pod
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0)
        .unwrap_or(runtime.start_time);
    let started = runtime.sandbox_ready_at.is_some();
    let names: Vec<&str> = containers(pod).map(|c| c.name.as_str()).collect();
    let not_ready_message = Some(format!(
        "containers with unready status: [{}]",
        names.join(" ")
    ));
    let has_init = pod
        .spec
        .as_ref()
        .and_then(|s| s.init_containers.as_ref())
        .is_some_and(|c| !c.is_empty());
    let sandbox_since = runtime.sandbox_ready_at.unwrap_or(runtime.start_time);
    let conditions = vec![
        condition(
            "PodReadyToStartContainers",
            started,
            sandbox_since,
            None,
            None,
        ),
        condition(
            "Initialized",
            started || !has_init,
            if has_init {
                sandbox_since
            } else {
                runtime.start_time
            },
            Some("ContainersNotInitialized"),
            Some("containers with incomplete status: [init]".to_owned()),
        ),
        condition(
            "Ready",
            runtime.pod_ready(),
            runtime.ready_changed_at,
            Some("ContainersNotReady"),
            not_ready_message.clone(),
        ),
        condition(
            "ContainersReady",
            runtime.containers_ready(),
            runtime.ready_changed_at,
            Some("ContainersNotReady"),
            not_ready_message,
        ),
        condition("PodScheduled", true, scheduled_at, None, None),
    ];
    let pulled = !matches!(
        runtime.phase,
        ContainerPhase::Creating | ContainerPhase::PullFailed { .. }
    );
    let container_statuses = containers(pod)
        .map(|c| container_status(c, runtime, pulled, [pod_name, namespace, uid]))
        .collect();
    let init_container_statuses = pod
        .spec
        .as_ref()
        .and_then(|s| s.init_containers.as_ref())
        .map(|init| {
            init.iter()
                .map(|c| init_container_status(c, runtime, uid))
                .collect()
        });
    let running = matches!(
        runtime.phase,
        ContainerPhase::Running { .. } | ContainerPhase::BackOff { .. }
    );
    PodStatus {
        phase: Some(if running { "Running" } else { "Pending" }.to_owned()),
        conditions: Some(conditions),
        container_statuses: Some(container_statuses),
        init_container_statuses,
        host_ip: Some(addresses.host_ip.clone()),
        host_ips: Some(vec![HostIP {
            ip: addresses.host_ip.clone(),
        }]),
        pod_ip: Some(addresses.pod_ip.clone()),
        pod_ips: Some(vec![PodIP {
            ip: addresses.pod_ip.clone(),
        }]),
        qos_class: Some(qos_class(pod).to_owned()),
        start_time: Some(Time(runtime.start_time)),
        ..PodStatus::default()
    }
}

fn waiting(reason: &str, message: Option<String>) -> ContainerState {
    ContainerState {
        waiting: Some(ContainerStateWaiting {
            reason: Some(reason.to_owned()),
            message,
        }),
        ..ContainerState::default()
    }
}

fn container_status(
    container: &Container,
    runtime: &PodRuntime,
    pulled: bool,
    [pod, namespace, uid]: [&str; 3],
) -> ContainerStatus {
    let image = container.image.clone().unwrap_or_default();
    let run_id = |restart: i32| {
        format!(
            "containerd://{}",
            hex_id(&[uid, &container.name, &restart.to_string()])
        )
    };
    let state = match &runtime.phase {
        ContainerPhase::Creating => waiting("ContainerCreating", None),
        ContainerPhase::PullFailed { backing_off: false } => waiting(
            "ErrImagePull",
            Some(format!(
                "failed to pull and unpack image \"{image}\": failed to resolve reference \"{image}\": not found"
            )),
        ),
        ContainerPhase::PullFailed { backing_off: true } => waiting(
            "ImagePullBackOff",
            Some(format!("Back-off pulling image \"{image}\"")),
        ),
        ContainerPhase::Running { started_at, .. } => ContainerState {
            running: Some(ContainerStateRunning {
                started_at: Some(Time(*started_at)),
            }),
            ..ContainerState::default()
        },
        ContainerPhase::BackOff { delay } => waiting(
            "CrashLoopBackOff",
            Some(format!(
                "back-off {} restarting failed container={} pod={pod}_{namespace}({uid})",
                go_duration(*delay),
                container.name
            )),
        ),
    };
    let last_state = match runtime.last_terminated {
        Some(Terminated {
            started_at,
            finished_at,
            exit_code,
        }) => ContainerState {
            terminated: Some(ContainerStateTerminated {
                container_id: Some(run_id(
                    runtime.restart_count
                        - i32::from(!matches!(runtime.phase, ContainerPhase::BackOff { .. })),
                )),
                exit_code,
                reason: Some("Error".to_owned()),
                started_at: Some(Time(started_at)),
                finished_at: Some(Time(finished_at)),
                ..ContainerStateTerminated::default()
            }),
            ..ContainerState::default()
        },
        None => ContainerState::default(),
    };
    let running = matches!(runtime.phase, ContainerPhase::Running { .. });
    ContainerStatus {
        name: container.name.clone(),
        image_id: if pulled {
            format!("sha256:{}", hex_id(&[&image]))
        } else {
            String::new()
        },
        image,
        // While backing off, the kubelet still reports the exited container's id.
        container_id: matches!(
            runtime.phase,
            ContainerPhase::Running { .. } | ContainerPhase::BackOff { .. }
        )
        .then(|| run_id(runtime.restart_count)),
        ready: running && runtime.containers_ready(),
        restart_count: runtime.restart_count,
        started: Some(running),
        state: Some(state),
        last_state: Some(last_state),
        ..ContainerStatus::default()
    }
}

fn init_container_status(
    container: &Container,
    runtime: &PodRuntime,
    uid: &str,
) -> ContainerStatus {
    let image = container.image.clone().unwrap_or_default();
    let state = match runtime.sandbox_ready_at {
        None => waiting("PodInitializing", None),
        Some(at) => ContainerState {
            terminated: Some(ContainerStateTerminated {
                container_id: Some(format!("containerd://{}", hex_id(&[uid, &container.name]))),
                exit_code: 0,
                reason: Some("Completed".to_owned()),
                started_at: Some(Time(at)),
                finished_at: Some(Time(at)),
                ..ContainerStateTerminated::default()
            }),
            ..ContainerState::default()
        },
    };
    let done = runtime.sandbox_ready_at.is_some();
    ContainerStatus {
        name: container.name.clone(),
        image_id: if done {
            format!("sha256:{}", hex_id(&[&image]))
        } else {
            String::new()
        },
        image,
        ready: done,
        restart_count: 0,
        started: Some(false),
        state: Some(state),
        last_state: Some(ContainerState::default()),
        ..ContainerStatus::default()
    }
}

/// Go's `time.Duration` formatting, truncated to milliseconds as the kubelet's messages print
/// it (`40s`, `5m0s`, `1.5s`, `250ms`, `0s`).
pub(crate) fn go_duration(d: Duration) -> String {
    let millis = d.as_millis();
    let (minutes, rest) = (millis / 60_000, millis % 60_000);
    let seconds = if rest % 1000 == 0 {
        format!("{}s", rest / 1000)
    } else {
        format!(
            "{}s",
            format!("{:.3}", rest as f64 / 1000.0).trim_end_matches('0')
        )
    };
    match minutes {
        0 if millis > 0 && millis < 1000 => format!("{millis}ms"),
        0 => seconds,
        m => format!("{m}m{seconds}"),
    }
}

/// `v1qos.GetPodQOS`, simplified: BestEffort without any requests or limits, Guaranteed when
/// every container's limits equal its requests (or only limits are set), else Burstable.
fn qos_class(pod: &Pod) -> &'static str {
    let resources: Vec<_> = containers(pod)
        .map(|c| c.resources.clone().unwrap_or_default())
        .collect();
    let empty = |r: &k8s_openapi::api::core::v1::ResourceRequirements| {
        r.requests.as_ref().is_none_or(BTreeMap::is_empty)
            && r.limits.as_ref().is_none_or(BTreeMap::is_empty)
    };
    if resources.iter().all(empty) {
        return "BestEffort";
    }
    let guaranteed = resources.iter().all(|r| {
        let limits = r.limits.clone().unwrap_or_default();
        let has_cpu_and_memory = limits.contains_key("cpu") && limits.contains_key("memory");
        has_cpu_and_memory
            && r.requests
                .as_ref()
                .is_none_or(|req| req.iter().all(|(k, v)| limits.get(k) == Some(v)))
    });
    if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}
