//! Remembers the phase last reported per observed DaemonSet and turns new derivations into
//! [`Transition`]s, filling in the phases virt-operator passed through between two observations.
//!
//! virt-operator leaves `started` and `increasing` in the same pass it enters them: the write it
//! makes there (the new template at 1, the widen to 10%) moves the DaemonSet on at once. An
//! observer whose caches deliver the operator's status write and its DaemonSet patch together
//! never sees those states. The write itself is visible, though, so the tracker infers the pass:
//! - the DaemonSet's install-strategy annotations changed since the last observation: only row 1
//!   (or a create) writes new annotations, so virt-operator went through `started`;
//! - the live `maxUnavailable` left Go-`IntValue` 1 (or the target changed and it is not 1):
//!   only row 3a writes 10%, so it went through `increasing`.
//!
//! An inferred phase is reported as a transition of its own, at the time of the observation that
//! revealed it.

use std::collections::HashMap;

use canary_kube_adapter::Transition;
use canary_predicates::{Target, available_pods};
use canary_state_machine::{FailureReason, LiveMaxUnavailable, Phase};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::jiff::Timestamp;

use crate::derive::Derived;

/// What was reported last for one DaemonSet.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Reported {
    uid: Option<String>,
    phase: Phase,
    failure: Option<FailureReason>,
    phase_started_at: Timestamp,
    target: Target,
    reference_max_unavailable: i64,
    counts: (u32, u32, u32),
    available: u32,
    max_unavailable: Option<LiveMaxUnavailable>,
}

/// Per-DaemonSet memory of the observed phase; see the module docs.
#[derive(Debug, Default)]
pub struct PhaseTracker {
    reported: HashMap<(String, String), Reported>,
}

impl PhaseTracker {
    /// An empty tracker: the first observation of each DaemonSet has no `from` phase.
    pub fn new() -> Self {
        Self::default()
    }

    /// The phase last reported for `namespace/name`.
    pub fn phase(&self, namespace: &str, name: &str) -> Option<Phase> {
        self.reported
            .get(&(namespace.to_owned(), name.to_owned()))
            .map(|reported| reported.phase)
    }

    /// Records `derived` (computed from `ds` at `now`) and returns the transitions to report, in
    /// order: inferred pass-through phases first, then the derived phase. Nothing is returned when
    /// neither the phase nor the counts nor `maxUnavailable` changed.
    pub fn observe(
        &mut self,
        ds: &DaemonSet,
        derived: &Derived,
        now: Timestamp,
    ) -> Vec<Transition> {
        let namespace = ds.metadata.namespace.clone().unwrap_or_default();
        let name = ds.metadata.name.clone().unwrap_or_default();
        let key = (namespace.clone(), name.clone());
        // A re-created DaemonSet (new UID) starts a fresh history.
        let previous = self
            .reported
            .get(&key)
            .filter(|reported| reported.uid == ds.metadata.uid)
            .cloned();
        let current = Reported {
            uid: ds.metadata.uid.clone(),
            phase: derived.decision.phase,
            failure: derived.decision.failure,
            phase_started_at: now,
            target: derived.daemon_set_target.clone(),
            reference_max_unavailable: derived
                .observation
                .live_max_unavailable
                .reference_int_value(),
            counts: (
                derived.observation.desired_pods,
                derived.counts.updated,
                derived.counts.updated_ready,
            ),
            available: available_pods(ds),
            max_unavailable: effective_max_unavailable(derived),
        };
        let mut transitions = Vec::new();
        let mut last = previous.clone();
        for phase in passed_through(previous.as_ref(), &current) {
            let inferred = Reported {
                phase,
                failure: None,
                ..current.clone()
            };
            transitions.push(transition(&namespace, &name, last.as_ref(), &inferred, now));
            last = Some(inferred);
        }
        let mut current = current;
        if let Some(last) = last.as_ref().filter(|last| last.phase == current.phase) {
            current.phase_started_at = last.phase_started_at;
        }
        if last.as_ref() != Some(&current) {
            transitions.push(transition(&namespace, &name, last.as_ref(), &current, now));
        }
        self.reported.insert(key, current);
        transitions
    }

    /// Forgets every DaemonSet for which `keep(namespace, name)` is false and returns them.
    pub fn retain(&mut self, mut keep: impl FnMut(&str, &str) -> bool) -> Vec<(String, String)> {
        let gone: Vec<_> = self
            .reported
            .keys()
            .filter(|(namespace, name)| !keep(namespace, name))
            .cloned()
            .collect();
        for key in &gone {
            self.reported.remove(key);
        }
        gone
    }
}

/// The phases virt-operator must have passed through between `previous` and `current` without
/// the observer seeing them (see the module docs).
fn passed_through(previous: Option<&Reported>, current: &Reported) -> Vec<Phase> {
    let Some(previous) = previous else {
        return Vec::new();
    };
    let mut phases = Vec::new();
    let target_written = previous.target != current.target;
    if target_written && previous.phase != Phase::Started && current.phase != Phase::Started {
        phases.push(Phase::Started);
    }
    let widened = current.reference_max_unavailable != 1
        && (previous.reference_max_unavailable == 1 || target_written);
    let already_reported = previous.phase == Phase::Increasing && !target_written;
    if widened && !already_reported && current.phase != Phase::Increasing {
        phases.push(Phase::Increasing);
    }
    phases
}

fn transition(
    namespace: &str,
    name: &str,
    from: Option<&Reported>,
    to: &Reported,
    now: Timestamp,
) -> Transition {
    Transition {
        unhealthy_answered: None,
        downtime: Default::default(),
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        daemon_set: name.to_owned(),
        target: to.target.clone(),
        from: from.map(|reported| reported.phase),
        to: to.phase,
        failure: to.failure,
        message: None,
        // The observer never writes; virt-operator's writes are not ours to count.
        write: None,
        desired: to.counts.0,
        updated: to.counts.1,
        updated_ready: to.counts.2,
        available: to.available,
        max_unavailable: to.max_unavailable.clone(),
        observed_generation: None,
        recorded_generation: None,
        drift: None,
        pre_pull: canary_kube_adapter::observer::PrePullStanding::Unknown,
        template_hash: None,
        phase_started_at: to.phase_started_at,
        pods: None,
        history: None,
        retry: None,
        held: false,
        unhealthy: None,
        analysis: None,
        at: now,
    }
}

/// `maxUnavailable` as the DaemonSet controller reads it: `1` when unset (the API default),
/// none without a rolling update, so that only a real change is a new transition.
fn effective_max_unavailable(derived: &Derived) -> Option<LiveMaxUnavailable> {
    match &derived.observation.live_max_unavailable {
        LiveMaxUnavailable::NoRollingUpdate => None,
        LiveMaxUnavailable::Unset => Some(LiveMaxUnavailable::Int(1)),
        other => Some(other.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::derive::derive;
    use crate::view::{GenerationRecord, KubeVirtView};
    use canary_predicates::AnnotationKeys;
    use k8s_openapi::api::core::v1::Pod;
    use serde_json::json;

    fn target(version: &str) -> Target {
        Target {
            version: version.into(),
            registry: "r".into(),
            deployment_id: version.into(),
        }
    }

    fn kv(version: &str, recorded: i64) -> KubeVirtView {
        KubeVirtView {
            namespace: "kubevirt".into(),
            name: "kubevirt".into(),
            generation: Some(1),
            target: target(version),
            observed: target("v1"),
            generations: vec![GenerationRecord {
                group: "apps".into(),
                resource: "daemonsets".into(),
                namespace: "kubevirt".into(),
                name: "virt-handler".into(),
                last_generation: recorded,
            }],
        }
    }

    fn ds(
        version: &str,
        generation: i64,
        max_unavailable: serde_json::Value,
        uid: &str,
    ) -> DaemonSet {
        serde_json::from_value(json!({
            "metadata": {"name": "virt-handler", "namespace": "kubevirt", "uid": uid,
                          "generation": generation,
                          "annotations": target(version).annotations(&AnnotationKeys::default())},
            "spec": {"selector": {}, "template": {},
                     "updateStrategy": {"rollingUpdate": {"maxUnavailable": max_unavailable}}},
            "status": {"desiredNumberScheduled": 10, "currentNumberScheduled": 10,
                        "numberMisscheduled": 0, "numberReady": 10}
        }))
        .unwrap()
    }

    fn ready_pods(version: &str, count: usize) -> Vec<Pod> {
        (0..count)
            .map(|i| {
                serde_json::from_value(json!({
                    "metadata": {"name": format!("p{i}"),
                        "annotations": target(version).annotations(&AnnotationKeys::default()),
                        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet",
                            "name": "virt-handler", "uid": "u", "controller": true}]},
                    "status": {"phase": "Running"}
                }))
                .unwrap()
            })
            .collect()
    }

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(second).unwrap()
    }

    fn phases(transitions: &[Transition]) -> Vec<Phase> {
        transitions.iter().map(|t| t.to).collect()
    }

    /// What `tracker` reports on seeing `ds` with `pods` at second `second`, KubeVirt as `kv`.
    fn observe(
        tracker: &mut PhaseTracker,
        ds: &DaemonSet,
        kv: KubeVirtView,
        pods: &[Pod],
        second: i64,
    ) -> Vec<Transition> {
        tracker.observe(ds, &derive(&kv, ds, pods), at(second))
    }

    #[test]
    fn every_state_seen_gives_no_inference() {
        let mut tracker = PhaseTracker::new();
        let rest = ds("v1", 1, json!(1), "u1");
        let t = observe(&mut tracker, &rest, kv("v1", 1), &ready_pods("v1", 10), 0);
        assert_eq!(phases(&t), [Phase::Successful]);
        assert_eq!(t[0].from, None);
        let t = observe(&mut tracker, &rest, kv("v2", 1), &[], 1);
        assert_eq!(phases(&t), [Phase::Started]);
        let patched = ds("v2", 2, json!(1), "u1");
        let t = observe(&mut tracker, &patched, kv("v2", 1), &[], 2);
        assert_eq!(phases(&t), [Phase::Canary]);
        assert_eq!(t[0].from, Some(Phase::Started));
        // The same state again reports nothing.
        assert!(observe(&mut tracker, &patched, kv("v2", 1), &[], 3).is_empty());
        assert_eq!(
            tracker.phase("kubevirt", "virt-handler"),
            Some(Phase::Canary)
        );
    }

    #[test]
    fn a_missed_start_and_widen_are_inferred_from_the_writes() {
        let mut tracker = PhaseTracker::new();
        let rest = ds("v1", 1, json!(1), "u1");
        observe(&mut tracker, &rest, kv("v1", 1), &ready_pods("v1", 10), 0);
        // Target written and widened before the observer looked again.
        let widened = ds("v2", 3, json!("10%"), "u1");
        let pods = ready_pods("v2", 2);
        let t = observe(&mut tracker, &widened, kv("v2", 3), &pods, 5);
        assert_eq!(
            phases(&t),
            [Phase::Started, Phase::Increasing, Phase::Waiting]
        );
        assert_eq!(t[1].from, Some(Phase::Started));
        assert!(t.iter().all(|t| t.at == at(5) && t.write.is_none()));
    }

    #[test]
    fn an_increasing_already_reported_is_not_repeated() {
        let mut tracker = PhaseTracker::new();
        let at_one = ds("v2", 2, json!(1), "u1");
        let pods = ready_pods("v2", 1);
        let t = observe(&mut tracker, &at_one, kv("v2", 1), &pods, 0);
        assert_eq!(phases(&t), [Phase::Increasing]);
        let widened = ds("v2", 3, json!("10%"), "u1");
        let t = observe(&mut tracker, &widened, kv("v2", 3), &pods, 1);
        assert_eq!(phases(&t), [Phase::Waiting]);
    }

    #[test]
    fn counts_moving_inside_a_phase_keep_its_start_time() {
        let mut tracker = PhaseTracker::new();
        let widened = ds("v2", 3, json!("10%"), "u1");
        observe(
            &mut tracker,
            &widened,
            kv("v2", 3),
            &ready_pods("v2", 2),
            10,
        );
        let t = observe(
            &mut tracker,
            &widened,
            kv("v2", 3),
            &ready_pods("v2", 4),
            20,
        );
        assert_eq!(phases(&t), [Phase::Waiting]);
        assert_eq!(t[0].from, Some(Phase::Waiting));
        assert_eq!(t[0].phase_started_at, at(10));
        assert_eq!(t[0].updated_ready, 4);
    }

    #[test]
    fn a_recreated_daemon_set_and_forgotten_keys_start_afresh() {
        let mut tracker = PhaseTracker::new();
        let rest = ds("v1", 1, json!(1), "u1");
        observe(&mut tracker, &rest, kv("v1", 1), &ready_pods("v1", 10), 0);
        let recreated = ds("v2", 1, json!(1), "u2");
        let t = observe(
            &mut tracker,
            &recreated,
            kv("v2", 1),
            &ready_pods("v2", 10),
            1,
        );
        assert_eq!(phases(&t), [Phase::Successful]);
        assert_eq!(t[0].from, None, "no inference across UIDs");
        assert_eq!(
            tracker.retain(|_, name| name != "virt-handler"),
            [("kubevirt".to_owned(), "virt-handler".to_owned())]
        );
        assert_eq!(tracker.phase("kubevirt", "virt-handler"), None);
    }
}
