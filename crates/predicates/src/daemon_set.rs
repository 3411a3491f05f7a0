//! What a live DaemonSet says of its rollout: the state machine's [`Observation`] of it and
//! its pod counts, its available pods, and whether it reports itself rolled out. One reading
//! for the controller's passes, its DaemonSet watch and the KubeVirt observe mode.
//!
//! Pure. The caller supplies what only it knows (whether the object changed, whether the
//! generation is known, the TLS facts, the previous pass) by struct update on the result.

use crate::count::PodCounts;
use crate::max_unavailable::live_max_unavailable;
use canary_state_machine::{CrashLoopSeen, Observation};
use k8s_openapi::api::apps::v1::{DaemonSet, DaemonSetStatus};

/// The observation of `live` and its `counts`: desired pods, updated and ready counts, the
/// first crash-looping updated pod, the live `maxUnavailable` and whether the DaemonSet
/// controller has caught up with the last write. Everything else is `Observation::default()`.
pub fn observe_daemon_set(live: &DaemonSet, counts: &PodCounts) -> Observation {
    let status = live.status.clone().unwrap_or_default();
    let generation = live.metadata.generation.unwrap_or_default();
    let observed = status.observed_generation.is_some_and(|g| g >= generation);
    Observation {
        name: live.metadata.name.clone().unwrap_or_default(),
        desired_pods: u32::try_from(status.desired_number_scheduled).unwrap_or(0),
        updated_pods: counts.updated,
        updated_ready_pods: counts.updated_ready,
        old_pods: counts.total.saturating_sub(counts.updated),
        crash_loop: counts
            .first_crash_loop
            .as_ref()
            .map(|(pod, crash)| CrashLoopSeen {
                pod: pod.clone(),
                reason: crash.reason.as_str().to_owned(),
            }),
        live_max_unavailable: live_max_unavailable(live),
        rollout_observed: observed,
        daemon_set_rolled_out: observed
            && every_pod_updated_and_available(&status)
            && status.number_misscheduled == 0,
        ..Observation::default()
    }
}

/// Whether the DaemonSet's status counts every desired pod updated and available (with the
/// generation observed and nothing misscheduled, the DaemonSet is rolled out). A controller's
/// DaemonSet watch can trigger a pass when this changes.
pub fn every_pod_updated_and_available(status: &DaemonSetStatus) -> bool {
    let desired = status.desired_number_scheduled;
    status.updated_number_scheduled.unwrap_or(0) >= desired
        && status.number_available.unwrap_or(0) >= desired
}

/// Available pods of the DaemonSet, whatever their version.
pub fn available_pods(live: &DaemonSet) -> u32 {
    let available = live.status.as_ref().and_then(|s| s.number_available);
    u32::try_from(available.unwrap_or(0)).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CrashLoop, CrashLoopReason};
    use canary_state_machine::LiveMaxUnavailable;
    use serde_json::json;

    #[test]
    fn reads_the_daemon_set_and_the_counts() {
        let live: DaemonSet = serde_json::from_value(json!({
            "metadata": {"name": "agent", "generation": 3},
            "spec": {"selector": {}, "template": {},
                     "updateStrategy": {"rollingUpdate": {"maxUnavailable": "10%"}}},
            "status": {"desiredNumberScheduled": 5, "currentNumberScheduled": 5,
                       "numberMisscheduled": 0, "numberReady": 4, "numberAvailable": 4,
                       "observedGeneration": 3}
        }))
        .unwrap();
        let counts = PodCounts {
            total: 5,
            updated: 2,
            updated_ready: 1,
            crash_looping: 1,
            first_crash_loop: Some((
                "agent-x".into(),
                CrashLoop {
                    container: "agent".into(),
                    init_container: false,
                    reason: CrashLoopReason::CrashLoopBackOff,
                    restart_count: 4,
                },
            )),
        };
        let observation = observe_daemon_set(&live, &counts);
        assert_eq!(observation.name, "agent");
        assert_eq!(
            (
                observation.desired_pods,
                observation.updated_pods,
                observation.updated_ready_pods
            ),
            (5, 2, 1)
        );
        assert_eq!(
            observation.live_max_unavailable,
            LiveMaxUnavailable::Str("10%".into())
        );
        assert!(observation.rollout_observed);
        assert_eq!(observation.crash_loop.unwrap().pod, "agent-x");
        assert_eq!(available_pods(&live), 4);
        let stale = DaemonSet {
            status: None,
            ..live
        };
        assert!(!observe_daemon_set(&stale, &counts).rollout_observed);
    }
}
