//! The kubelet model: what a pod's containers do (per [`PodBehavior`]) and the pod status
//! a kubelet reports for it (kubernetes `pkg/kubelet/kubelet_pods.go`
//! `generateAPIPodStatus`, `pkg/kubelet/status/generate.go` for the conditions,
//! `pkg/kubelet/kuberuntime/kuberuntime_manager.go` `doBackOff` for crash-loop back-off,
//! `pkg/kubelet/images/image_manager.go` for image-pull back-off).

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus, HostIP, Pod, PodCondition, PodIP, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

/// Pod annotation (usually set on the DaemonSet's pod template) choosing the simulated
/// behaviour of the pod's containers: `healthy`, `crashloop`, `never-ready`,
/// `image-pull-backoff`, `slow-start=60s`, `crash-after-ready=30s`. It takes precedence
/// over [`KubeletConfig::image_behaviors`].
pub const BEHAVIOR_ANNOTATION: &str = "sim.canary.daemonset.dev/behavior";

/// What a pod's containers do once the kubelet starts them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum PodBehavior {
    /// Start, become ready after [`KubeletConfig::ready_delay`], stay ready.
    #[default]
    Healthy,
    /// Like `Healthy`, but readiness takes this long instead of the ready delay.
    SlowStart(Duration),
    /// Exit with code 1 shortly after every start; restarted with back-off forever.
    CrashLoop,
    /// Become ready, then exit with code 1 after this long; every restart repeats it.
    CrashAfterReady(Duration),
    /// Run, but never pass readiness.
    NeverReady,
    /// The image never pulls: `ErrImagePull`, then `ImagePullBackOff`, and again.
    ImagePullBackOff,
}

/// A [`BEHAVIOR_ANNOTATION`] value that is not one of the known behaviours.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown pod behavior {0:?} (expected healthy, crashloop, never-ready, image-pull-backoff, slow-start=<duration>, crash-after-ready=<duration>)"
)]
pub struct ParseBehaviorError(pub String);

impl FromStr for PodBehavior {
    type Err = ParseBehaviorError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let error = || ParseBehaviorError(text.to_owned());
        let text = text.trim();
        let (name, argument) = match text.split_once('=') {
            Some((name, argument)) => (name.trim(), Some(argument.trim())),
            None => (text, None),
        };
        let duration = || argument.and_then(parse_duration).ok_or_else(error);
        match name {
            "healthy" if argument.is_none() => Ok(Self::Healthy),
            "crashloop" | "crash-loop" if argument.is_none() => Ok(Self::CrashLoop),
            "never-ready" if argument.is_none() => Ok(Self::NeverReady),
            "image-pull-backoff" if argument.is_none() => Ok(Self::ImagePullBackOff),
            "slow-start" => Ok(Self::SlowStart(duration()?)),
            "crash-after-ready" => Ok(Self::CrashAfterReady(duration()?)),
            _ => Err(error()),
        }
    }
}

impl fmt::Display for PodBehavior {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Healthy => f.write_str("healthy"),
            Self::SlowStart(d) => write!(f, "slow-start={}ms", d.as_millis()),
            Self::CrashLoop => f.write_str("crashloop"),
            Self::CrashAfterReady(d) => write!(f, "crash-after-ready={}ms", d.as_millis()),
            Self::NeverReady => f.write_str("never-ready"),
            Self::ImagePullBackOff => f.write_str("image-pull-backoff"),
        }
    }
}

/// Parses `500ms`, `30s`, `2m`, `1h` (a bare number means seconds).
pub fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number.parse().ok()?;
    let millis = match unit {
        "ms" => number,
        "" | "s" => number.checked_mul(1_000)?,
        "m" => number.checked_mul(60_000)?,
        "h" => number.checked_mul(3_600_000)?,
        _ => return None,
    };
    Some(Duration::from_millis(millis))
}

/// Kubernetes' container restart back-off: a crashed container is restarted at once the
/// first time, then after `initial`, doubling up to `max` (kubelet defaults 10s and 5m).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackoffConfig {
    /// First back-off (10s in the kubelet).
    pub initial: Duration,
    /// Cap (5 minutes in the kubelet).
    pub max: Duration,
    /// How long a crash-looping container runs before it exits with code 1.
    pub crash_after: Duration,
}

impl Default for BackoffConfig {
    fn default() -> Self {
        Self {
            initial: Duration::from_secs(10),
            max: Duration::from_secs(300),
            crash_after: Duration::from_secs(1),
        }
    }
}

impl BackoffConfig {
    /// The wait before the next restart of a container that has already restarted
    /// `restart_count` times and just exited: none the first time, then
    /// `initial * 2^(restart_count - 1)` capped at `max` (so restartCount 3 waits 40s).
    pub fn delay(&self, restart_count: i32) -> Duration {
        if restart_count <= 0 {
            return Duration::ZERO;
        }
        let doublings = u32::try_from(restart_count - 1).unwrap_or(u32::MAX).min(20);
        self.initial.saturating_mul(1u32 << doublings).min(self.max)
    }

    /// The wait before image pull attempt `attempt + 1` after `attempt` failures.
    pub fn pull_delay(&self, attempt: u32) -> Duration {
        let doublings = attempt.saturating_sub(1).min(20);
        self.initial.saturating_mul(1u32 << doublings).min(self.max)
    }
}

/// Timing and behaviour rules of every simulated kubelet.
#[derive(Clone, Debug, PartialEq)]
pub struct KubeletConfig {
    /// From the pod landing on the node to its containers running (image pull, sandbox).
    pub start_latency: Duration,
    /// From running to Ready (readiness probe passing).
    pub ready_delay: Duration,
    /// How long a deleted pod takes to stop (capped by its own grace period).
    pub termination_grace: Duration,
    /// Crash-loop and image-pull back-off.
    pub crash_backoff: BackoffConfig,
    /// Behaviour by container image; a key matches an image equal to it or starting with
    /// it (`quay.io/org/agent` matches every tag), the longest key wins.
    pub image_behaviors: BTreeMap<String, PodBehavior>,
    /// Each latency is scaled by a seeded random factor in `[1 - jitter, 1 + jitter]`.
    pub jitter: f64,
}

impl Default for KubeletConfig {
    fn default() -> Self {
        Self {
            start_latency: Duration::from_secs(2),
            ready_delay: Duration::from_secs(3),
            termination_grace: Duration::from_secs(1),
            crash_backoff: BackoffConfig::default(),
            image_behaviors: BTreeMap::new(),
            jitter: 0.1,
        }
    }
}

impl KubeletConfig {
    /// The behaviour of `pod`: its [`BEHAVIOR_ANNOTATION`], else the image rules, else
    /// healthy. An unparsable annotation counts as healthy (and is reported as an error).
    pub fn behavior_for(&self, pod: &Pod) -> Result<PodBehavior, ParseBehaviorError> {
        if let Some(value) = pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(BEHAVIOR_ANNOTATION))
        {
            return value.parse();
        }
        let images = containers(pod).filter_map(|c| c.image.as_deref());
        let best = images
            .flat_map(|image| {
                self.image_behaviors
                    .iter()
                    .filter(move |(key, _)| image.starts_with(key.as_str()))
                    .map(|(key, behavior)| (key.len(), behavior))
            })
            .max_by_key(|(len, _)| *len);
        Ok(best.map(|(_, b)| b.clone()).unwrap_or_default())
    }
}

fn containers(pod: &Pod) -> impl Iterator<Item = &Container> {
    pod.spec.iter().flat_map(|s| s.containers.iter())
}

/// What the pod's containers are doing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ContainerPhase {
    /// Sandbox and image being prepared (`ContainerCreating`).
    Creating,
    /// The image pull failed; `backing_off` once the kubelet waits before retrying.
    PullFailed {
        /// `ImagePullBackOff` (true) or `ErrImagePull` (false).
        backing_off: bool,
    },
    /// Containers running since `started_at`; `ready` once readiness passes.
    Running {
        /// When the current containers started.
        started_at: Timestamp,
        /// Readiness passed.
        ready: bool,
    },
    /// The containers exited and wait `delay` before the next restart (`CrashLoopBackOff`).
    BackOff {
        /// The back-off the kubelet reports.
        delay: Duration,
    },
}

/// A transition of the kubelet model, scheduled on a timer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KubeletStep {
    /// Containers start (or the image pull fails).
    Start,
    /// Readiness passes.
    BecomeReady,
    /// The containers exit with code 1.
    Crash,
    /// Back-off over: restart the containers.
    Restart,
    /// `ErrImagePull` becomes `ImagePullBackOff`.
    PullBackOff,
    /// Retry the image pull (fails again).
    PullRetry,
}

impl KubeletStep {
    /// Steps that repeat forever (crash loops, pull retries): a cluster is idle even while
    /// they are pending.
    pub fn is_perpetual(self) -> bool {
        matches!(
            self,
            Self::Crash | Self::Restart | Self::PullBackOff | Self::PullRetry
        )
    }
}

/// The delays the kubelet model uses for one pod (already jittered by the caller).
#[derive(Clone, Copy, Debug)]
pub struct StepTiming {
    /// Running to ready.
    pub ready_delay: Duration,
}

/// The kubelet's memory of one pod: enough to render its status.
#[derive(Clone, Debug)]
pub struct PodRuntime {
    /// What the containers do.
    pub behavior: PodBehavior,
    /// What they are doing now.
    pub phase: ContainerPhase,
    /// `restartCount`.
    pub restart_count: i32,
    /// Start and end of the last exited run (`lastState.terminated`).
    pub last_terminated: Option<(Timestamp, Timestamp)>,
    /// Failed pull attempts.
    pub pull_attempts: u32,
    /// When the kubelet admitted the pod (`startTime`).
    pub start_time: Timestamp,
    /// When the containers' readiness last changed.
    pub ready_changed_at: Timestamp,
    /// When the sandbox was created (containers could start).
    pub sandbox_ready_at: Option<Timestamp>,
    /// The node is Ready; when it is not, the node lifecycle controller holds the pod's
    /// Ready condition at False.
    pub node_ready: bool,
}

impl PodRuntime {
    /// A pod the kubelet has just admitted.
    pub fn admitted(behavior: PodBehavior, now: Timestamp) -> Self {
        Self {
            behavior,
            phase: ContainerPhase::Creating,
            restart_count: 0,
            last_terminated: None,
            pull_attempts: 0,
            start_time: now,
            ready_changed_at: now,
            sandbox_ready_at: None,
            node_ready: true,
        }
    }

    /// Containers ready (not counting the node's state).
    pub fn containers_ready(&self) -> bool {
        matches!(self.phase, ContainerPhase::Running { ready: true, .. })
    }

    /// The pod's Ready condition.
    pub fn pod_ready(&self) -> bool {
        self.containers_ready() && self.node_ready
    }

    /// Records that the node became (not) ready; returns whether the pod's Ready changed.
    pub fn set_node_ready(&mut self, ready: bool, now: Timestamp) -> bool {
        let before = self.pod_ready();
        self.node_ready = ready;
        let changed = before != self.pod_ready();
        if changed {
            self.ready_changed_at = now;
        }
        changed
    }

    fn set_phase(&mut self, phase: ContainerPhase, now: Timestamp) {
        let before = self.pod_ready();
        self.phase = phase;
        if before != self.pod_ready() {
            self.ready_changed_at = now;
        }
    }

    /// The step after the containers (re)started.
    fn after_start(
        &self,
        timing: StepTiming,
        crash_after: Duration,
    ) -> Option<(KubeletStep, Duration)> {
        match self.behavior {
            PodBehavior::Healthy | PodBehavior::CrashAfterReady(_) => {
                Some((KubeletStep::BecomeReady, timing.ready_delay))
            }
            PodBehavior::SlowStart(delay) => Some((KubeletStep::BecomeReady, delay)),
            PodBehavior::CrashLoop => Some((KubeletStep::Crash, crash_after)),
            PodBehavior::NeverReady | PodBehavior::ImagePullBackOff => None,
        }
    }

    /// The container (re)started at `now`, not ready yet; what comes next by its behaviour.
    fn run_container(
        &mut self,
        now: Timestamp,
        timing: StepTiming,
        backoff: &BackoffConfig,
    ) -> Option<(KubeletStep, Duration)> {
        self.set_phase(
            ContainerPhase::Running {
                started_at: now,
                ready: false,
            },
            now,
        );
        self.after_start(timing, backoff.crash_after)
    }

    /// One more image pull failed at `now`: the back-off begins after at most a second.
    fn pull_failed(
        &mut self,
        now: Timestamp,
        backoff: &BackoffConfig,
    ) -> Option<(KubeletStep, Duration)> {
        self.pull_attempts += 1;
        self.set_phase(ContainerPhase::PullFailed { backing_off: false }, now);
        Some((
            KubeletStep::PullBackOff,
            Duration::from_secs(1).min(backoff.initial),
        ))
    }

    /// Applies `step` at `now` and returns the next step and its delay, if any.
    pub fn step(
        &mut self,
        step: KubeletStep,
        now: Timestamp,
        timing: StepTiming,
        backoff: &BackoffConfig,
    ) -> Option<(KubeletStep, Duration)> {
        match step {
            KubeletStep::Start => {
                self.sandbox_ready_at = Some(now);
                if self.behavior == PodBehavior::ImagePullBackOff {
                    return self.pull_failed(now, backoff);
                }
                self.run_container(now, timing, backoff)
            }
            KubeletStep::BecomeReady => {
                let ContainerPhase::Running { started_at, .. } = self.phase else {
                    return None;
                };
                self.set_phase(
                    ContainerPhase::Running {
                        started_at,
                        ready: true,
                    },
                    now,
                );
                match self.behavior {
                    PodBehavior::CrashAfterReady(after) => Some((KubeletStep::Crash, after)),
                    _ => None,
                }
            }
            KubeletStep::Crash => {
                let ContainerPhase::Running { started_at, .. } = self.phase else {
                    return None;
                };
                self.last_terminated = Some((started_at, now));
                let delay = backoff.delay(self.restart_count);
                if delay.is_zero() {
                    self.restart_count += 1;
                    return self.run_container(now, timing, backoff);
                }
                self.set_phase(ContainerPhase::BackOff { delay }, now);
                Some((KubeletStep::Restart, delay))
            }
            KubeletStep::Restart => {
                self.restart_count += 1;
                self.run_container(now, timing, backoff)
            }
            KubeletStep::PullBackOff => {
                self.set_phase(ContainerPhase::PullFailed { backing_off: true }, now);
                Some((
                    KubeletStep::PullRetry,
                    backoff.pull_delay(self.pull_attempts),
                ))
            }
            KubeletStep::PullRetry => self.pull_failed(now, backoff),
        }
    }
}

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
        Some((started_at, finished_at)) => ContainerState {
            terminated: Some(ContainerStateTerminated {
                container_id: Some(run_id(
                    runtime.restart_count
                        - i32::from(!matches!(runtime.phase, ContainerPhase::BackOff { .. })),
                )),
                exit_code: 1,
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

/// Go's `time.Duration` formatting for whole seconds and minutes (`40s`, `5m0s`).
fn go_duration(d: Duration) -> String {
    let secs = d.as_secs();
    if secs >= 60 {
        format!("{}m{}s", secs / 60, secs % 60)
    } else {
        format!("{secs}s")
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

#[cfg(test)]
mod tests;
