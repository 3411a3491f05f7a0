//! Which DaemonSet watch events are triggers: those that change something a pass reads.
//!
//! During a rollout the DaemonSet controller rewrites the DaemonSet's status on nearly every
//! pod change (`numberReady`, `numberAvailable`, `updatedNumberScheduled`, ...), some 10,000
//! writes on 5,000 nodes. A pass reads few of those fields: the counts of pods come from the
//! pod index, which triggers on its own when they move (see `OwnerIndex::apply`). So a
//! DaemonSet event triggers a pass only when its [`DaemonSetFacts`] change (issue 20).
//!
//! # Invariants
//!
//! - The facts hold every field a pass reads from a DaemonSet (the observation, the plan's
//!   checks, drift, adoption, the hold, `cache_behind`): metadata but the resource version and
//!   the managed fields, the whole spec, and of the status the observed generation, the desired
//!   and misscheduled counts and whether the DaemonSet reports itself rolled out
//!   ([`observe_daemon_set`](canary_predicates::observe_daemon_set)).
//! - A deletion, and the first sight of a DaemonSet (a relist included), always trigger.
//! - The status counts a pass only reports (`numberAvailable` for the status' `available`) may
//!   lag until the next trigger; the last one of a rollout (rolled out) refreshes them.

use std::collections::HashMap;

use k8s_openapi::api::apps::v1::{DaemonSet, DaemonSetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use kube::runtime::watcher;

use canary_predicates::every_pod_updated_and_available;

/// What a pass reads from one DaemonSet (see the module documentation).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DaemonSetFacts {
    uid: Option<String>,
    generation: Option<i64>,
    deletion: Option<Time>,
    labels: Option<std::collections::BTreeMap<String, String>>,
    annotations: Option<std::collections::BTreeMap<String, String>>,
    owners: Option<Vec<OwnerReference>>,
    spec: Option<DaemonSetSpec>,
    observed_generation: Option<i64>,
    desired: i32,
    misscheduled: i32,
    rolled_out: bool,
}

impl DaemonSetFacts {
    pub(crate) fn of(ds: &DaemonSet) -> Self {
        let meta = &ds.metadata;
        let status = ds.status.as_ref();
        DaemonSetFacts {
            uid: meta.uid.clone(),
            generation: meta.generation,
            deletion: meta.deletion_timestamp.clone(),
            labels: meta.labels.clone(),
            annotations: meta.annotations.clone(),
            owners: meta.owner_references.clone(),
            spec: ds.spec.clone(),
            observed_generation: status.and_then(|s| s.observed_generation),
            desired: status.map_or(0, |s| s.desired_number_scheduled),
            misscheduled: status.map_or(0, |s| s.number_misscheduled),
            rolled_out: status.is_none_or(every_pod_updated_and_available),
        }
    }
}

/// The facts last seen of each DaemonSet, by namespace and name.
#[derive(Debug, Default)]
pub(crate) struct DaemonSetTriggers {
    seen: HashMap<(String, String), DaemonSetFacts>,
}

impl DaemonSetTriggers {
    /// The DaemonSet of `event` when it is a trigger, `None` when it moved nothing a pass reads
    /// (or is a marker of the watch).
    pub(crate) fn filter(&mut self, event: watcher::Event<DaemonSet>) -> Option<DaemonSet> {
        match event {
            watcher::Event::Apply(ds) => {
                let facts = DaemonSetFacts::of(&ds);
                let changed = self.seen.insert(key(&ds), facts.clone()) != Some(facts);
                changed.then_some(ds)
            }
            // A relist after a watch outage: each DaemonSet is a pass, as the pods of a
            // relist are (a few passes, and nothing missed meanwhile is left waiting).
            watcher::Event::InitApply(ds) => {
                self.seen.insert(key(&ds), DaemonSetFacts::of(&ds));
                Some(ds)
            }
            watcher::Event::Delete(ds) => {
                self.seen.remove(&key(&ds));
                Some(ds)
            }
            watcher::Event::Init | watcher::Event::InitDone => None,
        }
    }
}

fn key(ds: &DaemonSet) -> (String, String) {
    (
        ds.metadata.namespace.clone().unwrap_or_default(),
        ds.metadata.name.clone().unwrap_or_default(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ds(resource_version: &str, available: i32, observed: i64) -> DaemonSet {
        serde_json::from_value(json!({
            "metadata": {"name": "agent", "namespace": "default", "generation": 2,
                         "resourceVersion": resource_version},
            "spec": {"selector": {}, "template": {}},
            "status": {"desiredNumberScheduled": 3, "currentNumberScheduled": 3,
                       "numberMisscheduled": 0, "numberReady": available,
                       "numberAvailable": available, "updatedNumberScheduled": 3,
                       "observedGeneration": observed}
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn only_what_a_pass_reads_triggers() {
        use watcher::Event::{Apply, Delete, InitApply, InitDone};
        let mut edited = ds("5", 3, 3);
        if let Some(spec) = edited.spec.as_mut() {
            spec.min_ready_seconds = Some(10);
        }
        // Each event in turn, whether it triggers a pass, and what it is.
        let events = [
            (InitApply(ds("1", 1, 2)), true, "listed"),
            // A count the pass does not read, a new resource version: quiet.
            (Apply(ds("2", 2, 2)), false, "a count moved"),
            // Every pod available: rolled out, a trigger.
            (Apply(ds("3", 3, 2)), true, "rolled out"),
            // The DaemonSet controller catching up with a write: a trigger.
            (Apply(ds("4", 3, 3)), true, "write observed"),
            // A hand edit of the spec: a trigger.
            (Apply(edited), true, "edited"),
            // Deleted, then seen again: both trigger.
            (Delete(ds("6", 3, 3)), true, "deleted"),
            (Apply(ds("7", 3, 3)), true, "seen again"),
            (InitDone, false, "list done"),
        ];
        let mut triggers = DaemonSetTriggers::default();
        for (event, triggers_a_pass, what) in events {
            assert_eq!(triggers.filter(event).is_some(), triggers_a_pass, "{what}");
        }
    }
}
