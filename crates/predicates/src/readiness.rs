//! Pod readiness and termination, with the reference semantics.

use crate::PodFacts;

/// KubeVirt's `PodIsReady`: `status.phase == "Running"` and every entry of
/// `status.containerStatuses` is ready.
///
/// With no container statuses the pod is ready (vacuous truth, spec quirk 8). Init containers and the
/// pod's `Ready` condition are not consulted.
pub fn pod_is_ready<P: PodFacts + ?Sized>(pod: &P) -> bool {
    pod.phase() == Some("Running") && pod.containers().all(|container| container.ready)
}

/// Whether the pod is being deleted (`metadata.deletionTimestamp` is set).
///
/// The reference counts terminating pods like any other; [`crate::CountRule::skip_terminating`]
/// decides.
pub fn pod_is_terminating<P: PodFacts + ?Sized>(pod: &P) -> bool {
    pod.is_terminating()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::api::core::v1::{ContainerStatus, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    fn container(ready: bool) -> ContainerStatus {
        ContainerStatus {
            name: "c".into(),
            ready,
            ..ContainerStatus::default()
        }
    }

    fn pod(phase: Option<&str>, statuses: Option<Vec<ContainerStatus>>) -> Pod {
        Pod {
            status: Some(PodStatus {
                phase: phase.map(str::to_owned),
                container_statuses: statuses,
                ..PodStatus::default()
            }),
            ..Pod::default()
        }
    }

    #[test]
    fn ready_table() {
        let rows = [
            (
                "quirk 8: running, no statuses: vacuously ready",
                pod(Some("Running"), None),
                true,
            ),
            (
                "running, empty list",
                pod(Some("Running"), Some(vec![])),
                true,
            ),
            (
                "running, all ready",
                pod(
                    Some("Running"),
                    Some(vec![container(true), container(true)]),
                ),
                true,
            ),
            (
                "running, one not ready",
                pod(
                    Some("Running"),
                    Some(vec![container(true), container(false)]),
                ),
                false,
            ),
            (
                "pending, all ready",
                pod(Some("Pending"), Some(vec![container(true)])),
                false,
            ),
            ("pending, no statuses", pod(Some("Pending"), None), false),
            ("succeeded", pod(Some("Succeeded"), None), false),
            ("no phase", pod(None, None), false),
            ("phase is case-sensitive", pod(Some("running"), None), false),
            ("no status at all", Pod::default(), false),
        ];
        for (case, pod, expected) in rows {
            assert_eq!(pod_is_ready(&pod), expected, "{case}");
        }
    }

    #[test]
    fn init_containers_do_not_affect_readiness() {
        let mut pod = pod(Some("Running"), Some(vec![container(true)]));
        if let Some(status) = pod.status.as_mut() {
            status.init_container_statuses = Some(vec![container(false)]);
        }
        assert!(pod_is_ready(&pod));
    }

    #[test]
    fn terminating_means_deletion_timestamp_set() {
        let mut pod = Pod::default();
        assert!(!pod_is_terminating(&pod));
        pod.metadata = ObjectMeta {
            deletion_timestamp: Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)),
            ..ObjectMeta::default()
        };
        assert!(pod_is_terminating(&pod));
    }
}
