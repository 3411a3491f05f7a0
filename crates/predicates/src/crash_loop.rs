//! Crash-loop detection, as a policy that says why.

use std::fmt;

use crate::{ContainerFacts, PodFacts};

/// How a pod is judged crash-looping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CrashLoopPolicy {
    /// The reference rule (`PodIsCrashLooping`): any regular container with `state.terminated`,
    /// `lastState.terminated` or `restartCount > 0`. Init containers are ignored, so a pod stuck in
    /// `Init:CrashLoopBackOff` is never failed (spec quirk 7), and one transient restart is a failure.
    KubeVirt,
    /// The default for real clusters. For each container (init containers first, when included):
    ///
    /// 1. `state.waiting.reason` is one of the kubelet's failure reasons
    ///    ([`CrashLoopReason::from_waiting_reason`]) → that reason;
    /// 2. else `restartCount >= restart_threshold` → [`CrashLoopReason::OomKilled`] when
    ///    `lastState.terminated.reason` is `OOMKilled`, otherwise [`CrashLoopReason::RestartThreshold`].
    ///
    /// Terminated states alone are not failures (a completed init container is terminated).
    /// **A single transient restart is not a failure**: a container that restarted fewer than
    /// `restart_threshold` times and is running again passes. The kubelet shows `CrashLoopBackOff`
    /// from the first crash on (10 s back-off at first), so a pod observed inside that window is
    /// reported; the verdict is not sticky, a caller re-evaluating later sees the recovery.
    Strict {
        /// Restarts at which a container fails; values below 1 count as 1. Default
        /// [`CrashLoopPolicy::DEFAULT_RESTART_THRESHOLD`].
        restart_threshold: i32,
        /// Whether init containers are checked too. Default `true`.
        include_init_containers: bool,
    },
}

impl CrashLoopPolicy {
    /// The default [`CrashLoopPolicy::Strict`] restart threshold.
    pub const DEFAULT_RESTART_THRESHOLD: i32 = 3;
}

impl Default for CrashLoopPolicy {
    /// `Strict { restart_threshold: 3, include_init_containers: true }`.
    fn default() -> Self {
        CrashLoopPolicy::Strict {
            restart_threshold: Self::DEFAULT_RESTART_THRESHOLD,
            include_init_containers: true,
        }
    }
}

/// Why a pod is judged crash-looping. [`CrashLoopReason::as_str`] gives stable label values for
/// status fields and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum CrashLoopReason {
    /// The reference rule hit: a terminated state (current or last) or a restart.
    RestartedOrTerminated,
    /// The container restarted at least the policy's threshold number of times.
    RestartThreshold,
    /// Waiting with reason `CrashLoopBackOff`.
    CrashLoopBackOff,
    /// Waiting with reason `ImagePullBackOff`.
    ImagePullBackOff,
    /// Waiting with reason `ErrImagePull`.
    ErrImagePull,
    /// Waiting with reason `InvalidImageName`.
    InvalidImageName,
    /// Waiting with reason `CreateContainerConfigError` (for example a missing ConfigMap key).
    CreateContainerConfigError,
    /// Waiting with reason `CreateContainerError`.
    CreateContainerError,
    /// Waiting with reason `RunContainerError`.
    RunContainerError,
    /// Restart threshold reached and the last termination was `OOMKilled`.
    OomKilled,
}

impl CrashLoopReason {
    /// Every reason, in declaration order (for example to pre-create metric series).
    pub const ALL: [CrashLoopReason; 10] = [
        CrashLoopReason::RestartedOrTerminated,
        CrashLoopReason::RestartThreshold,
        CrashLoopReason::CrashLoopBackOff,
        CrashLoopReason::ImagePullBackOff,
        CrashLoopReason::ErrImagePull,
        CrashLoopReason::InvalidImageName,
        CrashLoopReason::CreateContainerConfigError,
        CrashLoopReason::CreateContainerError,
        CrashLoopReason::RunContainerError,
        CrashLoopReason::OomKilled,
    ];

    /// The stable CamelCase label value. Kubelet reasons keep the kubelet's spelling, so
    /// [`CrashLoopReason::OomKilled`] is `"OOMKilled"`, as `kubectl` shows it.
    pub fn as_str(&self) -> &'static str {
        match self {
            CrashLoopReason::RestartedOrTerminated => "RestartedOrTerminated",
            CrashLoopReason::RestartThreshold => "RestartThreshold",
            CrashLoopReason::CrashLoopBackOff => "CrashLoopBackOff",
            CrashLoopReason::ImagePullBackOff => "ImagePullBackOff",
            CrashLoopReason::ErrImagePull => "ErrImagePull",
            CrashLoopReason::InvalidImageName => "InvalidImageName",
            CrashLoopReason::CreateContainerConfigError => "CreateContainerConfigError",
            CrashLoopReason::CreateContainerError => "CreateContainerError",
            CrashLoopReason::RunContainerError => "RunContainerError",
            CrashLoopReason::OomKilled => "OOMKilled",
        }
    }

    /// The failure behind a kubelet `state.waiting.reason`, or `None` for a benign one
    /// (`ContainerCreating`, `PodInitializing`, ...).
    pub fn from_waiting_reason(reason: &str) -> Option<Self> {
        Some(match reason {
            "CrashLoopBackOff" => CrashLoopReason::CrashLoopBackOff,
            "ImagePullBackOff" => CrashLoopReason::ImagePullBackOff,
            "ErrImagePull" => CrashLoopReason::ErrImagePull,
            "InvalidImageName" => CrashLoopReason::InvalidImageName,
            "CreateContainerConfigError" => CrashLoopReason::CreateContainerConfigError,
            "CreateContainerError" => CrashLoopReason::CreateContainerError,
            "RunContainerError" => CrashLoopReason::RunContainerError,
            _ => return None,
        })
    }
}

impl fmt::Display for CrashLoopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The first failing container of a crash-looping pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CrashLoop {
    /// The container's name.
    pub container: String,
    /// Whether it is an init container.
    pub init_container: bool,
    /// Why it counts as failing.
    pub reason: CrashLoopReason,
    /// Its `restartCount`.
    pub restart_count: i32,
}

/// The first failing container of `pod` under `policy`, or `None` when the pod is not crash-looping.
///
/// Ephemeral (debug) containers are never considered.
pub fn pod_crash_loop<P: PodFacts + ?Sized>(
    pod: &P,
    policy: &CrashLoopPolicy,
) -> Option<CrashLoop> {
    match *policy {
        CrashLoopPolicy::KubeVirt => pod
            .containers()
            .find(restarted_or_terminated)
            .map(|container| crash_loop(container, false, CrashLoopReason::RestartedOrTerminated)),
        CrashLoopPolicy::Strict {
            restart_threshold,
            include_init_containers,
        } => {
            let init = pod
                .init_containers()
                .filter(|_| include_init_containers)
                .map(|container| (container, true));
            init.chain(pod.containers().map(|container| (container, false)))
                .find_map(|(container, is_init)| {
                    strict_reason(&container, restart_threshold.max(1))
                        .map(|reason| crash_loop(container, is_init, reason))
                })
        }
    }
}

/// The reference test for one container.
fn restarted_or_terminated(container: &ContainerFacts<'_>) -> bool {
    container.terminated || container.last_terminated || container.restart_count > 0
}

/// The strict test for one container; `restart_threshold` is at least 1.
fn strict_reason(
    container: &ContainerFacts<'_>,
    restart_threshold: i32,
) -> Option<CrashLoopReason> {
    if let Some(reason) = container
        .waiting_reason
        .and_then(CrashLoopReason::from_waiting_reason)
    {
        return Some(reason);
    }
    if container.restart_count < restart_threshold {
        return None;
    }
    Some(if container.last_terminated_reason == Some("OOMKilled") {
        CrashLoopReason::OomKilled
    } else {
        CrashLoopReason::RestartThreshold
    })
}

fn crash_loop(
    container: ContainerFacts<'_>,
    init_container: bool,
    reason: CrashLoopReason,
) -> CrashLoop {
    CrashLoop {
        container: container.name.to_owned(),
        init_container,
        reason,
        restart_count: container.restart_count,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ContainerState, ContainerStatus, Pod};
    use k8s_openapi::api::core::v1::{
        ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting, PodStatus,
    };

    fn running() -> Option<ContainerState> {
        Some(ContainerState {
            running: Some(ContainerStateRunning::default()),
            ..ContainerState::default()
        })
    }

    fn waiting(reason: &str) -> Option<ContainerState> {
        Some(ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some(reason.into()),
                message: None,
            }),
            ..ContainerState::default()
        })
    }

    fn terminated(reason: &str, exit_code: i32) -> Option<ContainerState> {
        Some(ContainerState {
            terminated: Some(ContainerStateTerminated {
                reason: Some(reason.into()),
                exit_code,
                ..ContainerStateTerminated::default()
            }),
            ..ContainerState::default()
        })
    }

    fn status(
        name: &str,
        state: Option<ContainerState>,
        last_state: Option<ContainerState>,
        restart_count: i32,
    ) -> ContainerStatus {
        ContainerStatus {
            name: name.into(),
            state,
            last_state,
            restart_count,
            ..ContainerStatus::default()
        }
    }

    fn pod(init: Vec<ContainerStatus>, regular: Vec<ContainerStatus>) -> Pod {
        Pod {
            status: Some(PodStatus {
                phase: Some("Running".into()),
                init_container_statuses: Some(init),
                container_statuses: Some(regular),
                ..PodStatus::default()
            }),
            ..Pod::default()
        }
    }

    fn strict(restart_threshold: i32, include_init_containers: bool) -> CrashLoopPolicy {
        CrashLoopPolicy::Strict {
            restart_threshold,
            include_init_containers,
        }
    }

    fn reason(pod: &Pod, policy: &CrashLoopPolicy) -> Option<CrashLoopReason> {
        pod_crash_loop(pod, policy).map(|c| c.reason)
    }

    use CrashLoopReason as R;

    #[test]
    fn reference_rule_table() {
        let kv = CrashLoopPolicy::KubeVirt;
        let rows = [
            ("healthy", vec![status("a", running(), None, 0)], None),
            (
                "quirk 7: one past restart is enough",
                vec![status("a", running(), None, 1)],
                Some(R::RestartedOrTerminated),
            ),
            (
                "terminated now",
                vec![status("a", terminated("Completed", 0), None, 0)],
                Some(R::RestartedOrTerminated),
            ),
            (
                "terminated last",
                vec![status("a", running(), terminated("Error", 1), 0)],
                Some(R::RestartedOrTerminated),
            ),
            (
                "waiting CrashLoopBackOff without restart count is not seen",
                vec![status("a", waiting("CrashLoopBackOff"), None, 0)],
                None,
            ),
            (
                "image pull back-off is not seen",
                vec![status("a", waiting("ImagePullBackOff"), None, 0)],
                None,
            ),
            (
                "any container",
                vec![
                    status("a", running(), None, 0),
                    status("b", running(), None, 2),
                ],
                Some(R::RestartedOrTerminated),
            ),
        ];
        for (case, regular, expected) in rows {
            assert_eq!(reason(&pod(vec![], regular), &kv), expected, "{case}");
        }
    }

    #[test]
    fn reference_ignores_init_containers() {
        // quirk 7: Init:CrashLoopBackOff waits forever under the reference.
        let stuck = pod(
            vec![status(
                "init",
                waiting("CrashLoopBackOff"),
                terminated("Error", 1),
                7527,
            )],
            vec![status("main", waiting("PodInitializing"), None, 0)],
        );
        assert_eq!(reason(&stuck, &CrashLoopPolicy::KubeVirt), None);
        assert_eq!(
            pod_crash_loop(&stuck, &CrashLoopPolicy::default()),
            Some(CrashLoop {
                container: "init".into(),
                init_container: true,
                reason: R::CrashLoopBackOff,
                restart_count: 7527,
            })
        );
        assert_eq!(reason(&stuck, &strict(3, false)), None);
    }

    #[test]
    fn strict_rule_table() {
        let policy = CrashLoopPolicy::default();
        let rows = [
            ("healthy", status("a", running(), None, 0), None),
            (
                "single transient restart, running again",
                status("a", running(), terminated("Error", 1), 1),
                None,
            ),
            (
                "two restarts",
                status("a", running(), terminated("Error", 1), 2),
                None,
            ),
            (
                "threshold reached",
                status("a", running(), terminated("Error", 1), 3),
                Some(R::RestartThreshold),
            ),
            (
                "threshold reached by OOM",
                status("a", running(), terminated("OOMKilled", 137), 3),
                Some(R::OomKilled),
            ),
            (
                "OOM below threshold",
                status("a", running(), terminated("OOMKilled", 137), 1),
                None,
            ),
            (
                "back-off wins over threshold",
                status(
                    "a",
                    waiting("CrashLoopBackOff"),
                    terminated("OOMKilled", 137),
                    5,
                ),
                Some(R::CrashLoopBackOff),
            ),
            (
                "back-off after the first crash",
                status("a", waiting("CrashLoopBackOff"), terminated("Error", 1), 1),
                Some(R::CrashLoopBackOff),
            ),
            (
                "ContainerCreating is benign",
                status("a", waiting("ContainerCreating"), None, 0),
                None,
            ),
            (
                "terminated without restarts is not a failure",
                status("a", terminated("Completed", 0), None, 0),
                None,
            ),
        ];
        for (case, container, expected) in rows {
            assert_eq!(
                reason(&pod(vec![], vec![container]), &policy),
                expected,
                "{case}"
            );
        }
        // Each of the kubelet's other failure reasons, waiting, is that failure.
        for (waiting_reason, expected) in [
            ("ImagePullBackOff", R::ImagePullBackOff),
            ("ErrImagePull", R::ErrImagePull),
            ("InvalidImageName", R::InvalidImageName),
            ("CreateContainerConfigError", R::CreateContainerConfigError),
            ("CreateContainerError", R::CreateContainerError),
            ("RunContainerError", R::RunContainerError),
        ] {
            let container = status("a", waiting(waiting_reason), None, 0);
            assert_eq!(
                reason(&pod(vec![], vec![container]), &policy),
                Some(expected),
                "{waiting_reason}"
            );
        }
    }

    #[test]
    fn strict_checks_init_containers_first_and_skips_completed_ones() {
        let completed_init = status("init", terminated("Completed", 0), None, 0);
        let healthy = pod(
            vec![completed_init.clone()],
            vec![status("main", running(), None, 0)],
        );
        assert_eq!(reason(&healthy, &CrashLoopPolicy::default()), None);

        let both_failing = pod(
            vec![status("init", waiting("ErrImagePull"), None, 0)],
            vec![status("main", waiting("CrashLoopBackOff"), None, 4)],
        );
        let found = pod_crash_loop(&both_failing, &CrashLoopPolicy::default());
        assert_eq!(
            found.map(|c| (c.container, c.init_container)),
            Some(("init".to_owned(), true))
        );
        let found = pod_crash_loop(&both_failing, &strict(3, false));
        assert_eq!(
            found.map(|c| (c.container, c.init_container)),
            Some(("main".to_owned(), false))
        );
    }

    #[test]
    fn threshold_below_one_counts_as_one() {
        let once = pod(vec![], vec![status("a", running(), None, 1)]);
        let never = pod(vec![], vec![status("a", running(), None, 0)]);
        for threshold in [i32::MIN, -1, 0, 1] {
            assert_eq!(
                reason(&once, &strict(threshold, true)),
                Some(R::RestartThreshold),
                "{threshold}"
            );
            assert_eq!(
                reason(&never, &strict(threshold, true)),
                None,
                "{threshold}"
            );
        }
        assert_eq!(reason(&once, &strict(2, true)), None);
    }

    #[test]
    fn no_status_is_not_crash_looping() {
        assert_eq!(
            pod_crash_loop(&Pod::default(), &CrashLoopPolicy::KubeVirt),
            None
        );
        assert_eq!(
            pod_crash_loop(&Pod::default(), &CrashLoopPolicy::default()),
            None
        );
    }

    #[test]
    fn labels_are_stable_and_unique() {
        let labels: Vec<&str> = CrashLoopReason::ALL
            .iter()
            .map(CrashLoopReason::as_str)
            .collect();
        assert_eq!(
            labels,
            [
                "RestartedOrTerminated",
                "RestartThreshold",
                "CrashLoopBackOff",
                "ImagePullBackOff",
                "ErrImagePull",
                "InvalidImageName",
                "CreateContainerConfigError",
                "CreateContainerError",
                "RunContainerError",
                "OOMKilled",
            ]
        );
        for reason in CrashLoopReason::ALL {
            assert_eq!(reason.to_string(), reason.as_str());
            if let Some(parsed) = CrashLoopReason::from_waiting_reason(reason.as_str()) {
                assert_eq!(parsed, reason);
            }
        }
    }
}
