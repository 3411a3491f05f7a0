//! The kubelet model: what a pod's containers do (per [`PodBehavior`]) and the pod status
//! a kubelet reports for it (kubernetes `pkg/kubelet/kubelet_pods.go`
//! `generateAPIPodStatus`, `pkg/kubelet/status/generate.go` for the conditions,
//! `pkg/kubelet/kuberuntime/kuberuntime_manager.go` `doBackOff` for crash-loop back-off,
//! `pkg/kubelet/images/image_manager.go` for image pulls and their back-off,
//! `pkg/kubelet/prober/` for what failing probes do).

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::behavior::{Behavior, ParseBehaviorError};

mod status;
pub(crate) use status::go_duration;
pub use status::{PodAddresses, render_status};

/// Pod annotation (usually set on the DaemonSet's pod template) choosing the simulated
/// behaviour of the pod: its containers' (`healthy`, `crashloop`, `never-ready`,
/// `image-pull-backoff`, `slow-start=60s`, `crash-after-ready=30s`) and its effects on the
/// node (`breaks-node=30s`, `breaks-neighbours=30s`, `node-condition=KernelDeadlock`),
/// comma-separated ([`Behavior`]). It takes precedence over
/// [`KubeletConfig::image_behaviors`].
pub const BEHAVIOR_ANNOTATION: &str = "sim.canary.daemonset.dev/behavior";

/// Pod annotation: how long pulling each of the pod's images takes on a node that does not
/// have it yet (`30s`). It takes precedence over [`KubeletConfig::image_pull_times`].
pub const PULL_ANNOTATION: &str = "sim.canary.daemonset.dev/pull";

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

impl FromStr for PodBehavior {
    type Err = ParseBehaviorError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let error = || {
            ParseBehaviorError::new(
                text,
                "unknown container behaviour (expected healthy, crashloop, never-ready, image-pull-backoff, slow-start=<duration>, crash-after-ready=<duration>)",
            )
        };
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
    /// From the pod landing on the node to its containers running (sandbox, and an image
    /// pull too small to model); a modelled pull ([`KubeletConfig::image_pull_times`]) comes
    /// on top of it.
    pub start_latency: Duration,
    /// From running to Ready (readiness probe passing).
    pub ready_delay: Duration,
    /// How long a deleted pod takes to stop (capped by its own grace period).
    pub termination_grace: Duration,
    /// Crash-loop and image-pull back-off.
    pub crash_backoff: BackoffConfig,
    /// Behaviour by container image; a key matches an image equal to it or starting with
    /// it (`quay.io/org/agent` matches every tag), the longest key wins.
    pub image_behaviors: BTreeMap<String, Behavior>,
    /// Pull time by image, matched as [`KubeletConfig::image_behaviors`] are; the
    /// [`PULL_ANNOTATION`] takes precedence. A node pulls an image once: later pods of that
    /// image there start without a pull.
    pub image_pull_times: BTreeMap<String, Duration>,
    /// Pull time of an image no rule names. Zero (the default): pulls are not modelled
    /// (their cost is inside [`KubeletConfig::start_latency`]) and record no events.
    pub default_pull_time: Duration,
    /// How long a container whose probes fail (its node's network broken by a neighbour,
    /// `breaks-neighbours`) runs before the kubelet kills it for its failed liveness probe:
    /// the default probe's period (10s) times its failure threshold (3).
    pub liveness_kill_after: Duration,
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
            image_pull_times: BTreeMap::new(),
            default_pull_time: Duration::ZERO,
            liveness_kill_after: Duration::from_secs(30),
            jitter: 0.1,
        }
    }
}

/// One image a pod pulls with a pull time above zero: a modelled pull.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelledPull {
    /// The image.
    pub image: String,
    /// How long its pull takes.
    pub time: Duration,
    /// `spec.containers{<name>}` (or `spec.initContainers{<name>}`) of the first container
    /// running it: what the pull's events regard.
    pub field_path: String,
}

/// Who a kubelet event is about: a pod on a node.
#[derive(Clone, Copy, Debug)]
pub struct EventSubject<'a> {
    /// The pod's namespace.
    pub namespace: &'a str,
    /// The pod's name.
    pub pod: &'a str,
    /// The pod's uid.
    pub uid: &'a str,
    /// The node whose kubelet reports.
    pub node: &'a str,
}

/// A `Normal` event about a pod, as its node's kubelet records it (`source.component`
/// `kubelet`, the node as host), named `name`, regarding `field_path` when not empty.
pub fn kubelet_event(
    name: String,
    subject: EventSubject<'_>,
    field_path: &str,
    reason: &str,
    message: String,
    now: Timestamp,
) -> k8s_openapi::api::core::v1::Event {
    use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    Event {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(subject.namespace.to_owned()),
            ..ObjectMeta::default()
        },
        involved_object: ObjectReference {
            api_version: Some("v1".to_owned()),
            kind: Some("Pod".to_owned()),
            name: Some(subject.pod.to_owned()),
            namespace: Some(subject.namespace.to_owned()),
            uid: Some(subject.uid.to_owned()),
            field_path: (!field_path.is_empty()).then(|| field_path.to_owned()),
            ..ObjectReference::default()
        },
        reason: Some(reason.to_owned()),
        message: Some(message),
        type_: Some("Normal".to_owned()),
        source: Some(EventSource {
            component: Some("kubelet".to_owned()),
            host: Some(subject.node.to_owned()),
        }),
        first_timestamp: Some(Time(now)),
        last_timestamp: Some(Time(now)),
        count: Some(1),
        reporting_component: Some("kubelet".to_owned()),
        reporting_instance: Some(subject.node.to_owned()),
        ..Event::default()
    }
}

/// `spec.containers{<name>}` (or `spec.initContainers{<name>}`) of the first container of
/// `pod` running `image`: the `fieldPath` of the kubelet's events about it.
pub fn field_path_of(pod: &Pod, image: &str) -> String {
    let Some(spec) = pod.spec.as_ref() else {
        return String::new();
    };
    let uses = |c: &&Container| c.image.as_deref() == Some(image);
    if let Some(c) = spec.init_containers.iter().flatten().find(uses) {
        return format!("spec.initContainers{{{}}}", c.name);
    }
    spec.containers
        .iter()
        .find(uses)
        .map(|c| format!("spec.containers{{{}}}", c.name))
        .unwrap_or_default()
}

/// The value of the longest key of `rules` that `image` starts with.
fn longest_prefix_rule<'r, V>(
    rules: &'r BTreeMap<String, V>,
    image: &str,
) -> Option<(usize, &'r V)> {
    rules
        .iter()
        .filter(|(key, _)| image.starts_with(key.as_str()))
        .map(|(key, value)| (key.len(), value))
        .max_by_key(|(len, _)| *len)
}

impl KubeletConfig {
    /// The behaviour of `pod`: its [`BEHAVIOR_ANNOTATION`], else the image rules, else
    /// healthy. An unparsable annotation counts as healthy (and is reported as an error).
    pub fn behavior_for(&self, pod: &Pod) -> Result<Behavior, ParseBehaviorError> {
        if let Some(value) = pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(BEHAVIOR_ANNOTATION))
        {
            return value.parse();
        }
        let best = containers(pod)
            .filter_map(|c| c.image.as_deref())
            .filter_map(|image| longest_prefix_rule(&self.image_behaviors, image))
            .max_by_key(|(len, _)| *len);
        Ok(best.map(|(_, b)| b.clone()).unwrap_or_default())
    }

    /// [`KubeletConfig::behavior_for`], an unparsable annotation logged and taken as healthy.
    pub fn behavior_or_healthy(&self, pod: &Pod) -> Behavior {
        self.behavior_for(pod).unwrap_or_else(|error| {
            let name = pod.metadata.name.as_deref().unwrap_or_default();
            tracing::warn!(pod = %name, %error, "ignoring the behavior annotation");
            Behavior::default()
        })
    }

    /// The pod's modelled pulls: [`KubeletConfig::pulls_for`] but the zero ones, each with
    /// the field path its events regard; an unparsable pull annotation is logged.
    pub fn modelled_pulls(&self, pod: &Pod) -> Vec<ModelledPull> {
        let (pulls, error) = self.pulls_for(pod);
        if let Some(error) = error {
            let name = pod.metadata.name.as_deref().unwrap_or_default();
            tracing::warn!(pod = %name, %error, "ignoring the pull annotation");
        }
        pulls
            .into_iter()
            .filter(|(_, time)| !time.is_zero())
            .map(|(image, time)| ModelledPull {
                field_path: field_path_of(pod, &image),
                image,
                time,
            })
            .collect()
    }

    /// Every distinct image of `pod` (init containers first, as the kubelet pulls them) with
    /// its pull time: the [`PULL_ANNOTATION`], else the longest matching
    /// [`KubeletConfig::image_pull_times`] rule, else [`KubeletConfig::default_pull_time`].
    /// An unparsable annotation counts as absent (and is reported as an error).
    pub fn pulls_for(&self, pod: &Pod) -> (Vec<(String, Duration)>, Option<ParseBehaviorError>) {
        let annotation = pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(PULL_ANNOTATION));
        let mut error = None;
        let from_annotation = annotation.and_then(|value| {
            let parsed = parse_duration(value);
            if parsed.is_none() {
                error = Some(ParseBehaviorError::new(
                    value,
                    format!("{PULL_ANNOTATION} needs a duration such as 30s, 500ms or 2m"),
                ));
            }
            parsed
        });
        let spec = pod.spec.as_ref();
        let images = spec
            .and_then(|s| s.init_containers.as_ref())
            .into_iter()
            .flatten()
            .chain(spec.into_iter().flat_map(|s| s.containers.iter()))
            .filter_map(|c| c.image.as_deref());
        let mut pulls: Vec<(String, Duration)> = Vec::new();
        for image in images {
            if pulls.iter().any(|(seen, _)| seen == image) {
                continue;
            }
            let time = from_annotation.unwrap_or_else(|| {
                longest_prefix_rule(&self.image_pull_times, image)
                    .map_or(self.default_pull_time, |(_, time)| *time)
            });
            pulls.push((image.to_owned(), time));
        }
        (pulls, error)
    }
}

fn containers(pod: &Pod) -> impl Iterator<Item = &Container> {
    pod.spec.iter().flat_map(|s| s.containers.iter())
}

/// What the pod's containers are doing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ContainerPhase {
    /// Sandbox and image being prepared (`ContainerCreating`), an image pull included.
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
    /// The sandbox is ready: containers start, or their images are pulled first (or the
    /// image pull fails).
    Start,
    /// The images are pulled: containers start.
    Pulled,
    /// Readiness passes.
    BecomeReady,
    /// The containers exit with code 1.
    Crash,
    /// The kubelet kills the containers of run `run` (their `restartCount` then) for a
    /// liveness probe failing since disruption `round` began.
    ProbeKill {
        /// `restartCount` of the run to kill.
        run: i32,
        /// [`PodRuntime::disruption_round`] when the probes began to fail.
        round: u32,
    },
    /// Back-off over: restart the containers.
    Restart,
    /// `ErrImagePull` becomes `ImagePullBackOff`.
    PullBackOff,
    /// Retry the image pull (fails again).
    PullRetry,
}

impl KubeletStep {
    /// Steps that repeat forever (crash loops, pull retries, probe kills of a pod whose
    /// network stays broken): a cluster is idle even while they are pending.
    pub fn is_perpetual(self) -> bool {
        matches!(
            self,
            Self::Crash
                | Self::Restart
                | Self::PullBackOff
                | Self::PullRetry
                | Self::ProbeKill { .. }
        )
    }
}

/// The delays the kubelet model uses for one pod (already jittered by the caller).
#[derive(Clone, Copy, Debug)]
pub struct StepTiming {
    /// Running to ready.
    pub ready_delay: Duration,
    /// For [`KubeletStep::Start`]: how long until the pod's images are on the node (zero:
    /// they are, or pulls are not modelled).
    pub pull_wait: Duration,
    /// Failing probes to the liveness kill ([`KubeletConfig::liveness_kill_after`]).
    pub liveness_kill_after: Duration,
}

/// How a run of the containers ended (`lastState.terminated`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Terminated {
    /// When the run started.
    pub started_at: Timestamp,
    /// When it ended.
    pub finished_at: Timestamp,
    /// 1 for a crash; 137 (SIGKILL) for a kill after a failed liveness probe.
    pub exit_code: i32,
}

/// Exit code of a container killed by the kubelet (SIGKILL after the grace period), as a
/// liveness probe's failure shows it.
pub const KILLED_EXIT_CODE: i32 = 137;

/// The kubelet's memory of one pod: enough to render its status.
#[derive(Clone, Debug)]
pub struct PodRuntime {
    /// What the containers do.
    pub behavior: PodBehavior,
    /// What they are doing now.
    pub phase: ContainerPhase,
    /// `restartCount`.
    pub restart_count: i32,
    /// The last exited run (`lastState.terminated`).
    pub last_terminated: Option<Terminated>,
    /// Failed pull attempts.
    pub pull_attempts: u32,
    /// When the kubelet admitted the pod (`startTime`).
    pub start_time: Timestamp,
    /// When the containers' readiness last changed.
    pub ready_changed_at: Timestamp,
    /// When the sandbox was created (containers could start).
    pub sandbox_ready_at: Option<Timestamp>,
    /// The node's kubelet reports; when it does not, the node lifecycle controller holds the
    /// pod's Ready condition at False.
    pub node_ready: bool,
    /// The containers have been ready at least once (what a pod's effects count from).
    pub ever_ready: bool,
    /// The probes fail: a neighbour broke the pod's network (`breaks-neighbours`).
    pub probes_failing: bool,
    /// How many times the probes began to fail: a kill scheduled in an earlier round is void.
    pub disruption_round: u32,
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
            ever_ready: false,
            probes_failing: false,
            disruption_round: 0,
        }
    }

    /// A pod already running and ready at `now`: what a workload pod that was there before
    /// the simulation started looks like.
    pub fn already_running(behavior: PodBehavior, now: Timestamp) -> Self {
        Self {
            phase: ContainerPhase::Running {
                started_at: now,
                ready: true,
            },
            sandbox_ready_at: Some(now),
            ever_ready: true,
            ..Self::admitted(behavior, now)
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

    /// Whether the behaviour's readiness ever passes.
    fn passes_readiness(&self) -> bool {
        matches!(
            self.behavior,
            PodBehavior::Healthy | PodBehavior::SlowStart(_) | PodBehavior::CrashAfterReady(_)
        )
    }

    /// The liveness kill of the current run, once the probes have failed long enough.
    fn probe_kill(&self, timing: StepTiming) -> Option<(KubeletStep, Duration)> {
        Some((
            KubeletStep::ProbeKill {
                run: self.restart_count,
                round: self.disruption_round,
            },
            timing.liveness_kill_after,
        ))
    }

    /// The step after the containers (re)started.
    fn after_start(
        &self,
        timing: StepTiming,
        crash_after: Duration,
    ) -> Option<(KubeletStep, Duration)> {
        if self.probes_failing && self.behavior != PodBehavior::CrashLoop {
            // Readiness cannot pass; the liveness probe fails until the kubelet kills it.
            return self.probe_kill(timing);
        }
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

    /// The running containers exit at `now` with `exit_code`: restarted at once the first
    /// time, after the back-off later.
    fn exit(
        &mut self,
        now: Timestamp,
        exit_code: i32,
        timing: StepTiming,
        backoff: &BackoffConfig,
    ) -> Option<(KubeletStep, Duration)> {
        let ContainerPhase::Running { started_at, .. } = self.phase else {
            return None;
        };
        self.last_terminated = Some(Terminated {
            started_at,
            finished_at: now,
            exit_code,
        });
        let delay = backoff.delay(self.restart_count);
        if delay.is_zero() {
            self.restart_count += 1;
            return self.run_container(now, timing, backoff);
        }
        self.set_phase(ContainerPhase::BackOff { delay }, now);
        Some((KubeletStep::Restart, delay))
    }

    /// A neighbour broke the pod's network at `now`: readiness fails at once, and the
    /// kubelet kills the containers when their liveness probe has failed long enough (a
    /// crash-looping container crashes sooner by itself). Returns the step to schedule.
    pub fn disrupt(
        &mut self,
        now: Timestamp,
        timing: StepTiming,
    ) -> Option<(KubeletStep, Duration)> {
        if self.probes_failing {
            return None;
        }
        self.probes_failing = true;
        self.disruption_round += 1;
        let ContainerPhase::Running { started_at, .. } = self.phase else {
            // Not running: the next start schedules the kill (`after_start`).
            return None;
        };
        self.set_phase(
            ContainerPhase::Running {
                started_at,
                ready: false,
            },
            now,
        );
        if self.behavior == PodBehavior::CrashLoop {
            return None;
        }
        self.probe_kill(timing)
    }

    /// The neighbour that broke the pod's network is gone: its probes pass again, so a
    /// running container becomes ready after the ready delay. Returns the step to schedule.
    pub fn heal(&mut self, timing: StepTiming) -> Option<(KubeletStep, Duration)> {
        if !self.probes_failing {
            return None;
        }
        self.probes_failing = false;
        match self.phase {
            ContainerPhase::Running { ready: false, .. } if self.passes_readiness() => {
                Some((KubeletStep::BecomeReady, timing.ready_delay))
            }
            _ => None,
        }
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
                if !timing.pull_wait.is_zero() {
                    return Some((KubeletStep::Pulled, timing.pull_wait));
                }
                self.run_container(now, timing, backoff)
            }
            KubeletStep::Pulled => {
                if self.phase != ContainerPhase::Creating {
                    return None;
                }
                self.run_container(now, timing, backoff)
            }
            KubeletStep::BecomeReady => {
                let ContainerPhase::Running {
                    started_at,
                    ready: false,
                } = self.phase
                else {
                    return None;
                };
                if self.probes_failing {
                    // The readiness probe fails; the liveness kill is already scheduled.
                    return None;
                }
                self.set_phase(
                    ContainerPhase::Running {
                        started_at,
                        ready: true,
                    },
                    now,
                );
                self.ever_ready = true;
                match self.behavior {
                    PodBehavior::CrashAfterReady(after) => Some((KubeletStep::Crash, after)),
                    _ => None,
                }
            }
            KubeletStep::Crash => self.exit(now, 1, timing, backoff),
            KubeletStep::ProbeKill { run, round } => {
                if !self.probes_failing
                    || run != self.restart_count
                    || round != self.disruption_round
                {
                    return None;
                }
                self.exit(now, KILLED_EXIT_CODE, timing, backoff)
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

#[cfg(test)]
mod tests;
