//! The MaxUnavailable driver's part of a pass (the reference's): it observes the pod counts
//! under its updated rule, the TLS facts and the live `maxUnavailable`, decides with
//! [`decide`] (the state machine's MaxUnavailable table on the shared life cycle), and acts
//! through the template write alone: the DaemonSet controller replaces the pods, steered by
//! the `maxUnavailable` that write sets.

use std::time::Duration;

use canary_predicates::{PodCounts, Target, UpdatedRule, current_revision_hash};
use canary_state_machine::{
    Compatibility, Decision, MaxUnavailableAction, Observation, TlsFacts, decide,
};
use k8s_openapi::api::apps::v1::DaemonSet;

use super::Pass;
use super::context::Requeue;
use super::pass::{Acted, Driver, Seen};
use super::plan::Plan;
use super::report::Series;
use crate::Error;
use crate::desired::{ON_DELETE, strategy_type};
use crate::index::{PodCountRule, pod_group};
use crate::observer::Transition;
use canary_predicates::observe_daemon_set;

/// The MaxUnavailable driver of one pass: what it observed, for its record.
pub(super) struct Steer {
    tls: Option<TlsFacts>,
    target: Target,
    counts: PodCounts,
    observation: Observation,
}

impl Steer {
    /// The driver of a pass whose desired DaemonSet has these TLS facts (`None`: no TLS
    /// migration).
    pub(super) fn new(tls: Option<TlsFacts>) -> Self {
        Steer {
            tls,
            target: Target::default(),
            counts: PodCounts::default(),
            observation: Observation::default(),
        }
    }
}

impl Driver for Steer {
    type Action = MaxUnavailableAction;

    fn observe(&mut self, pass: &Pass<'_>, plan: &Plan, seen: &Seen<'_>) -> Result<(), String> {
        let live = seen.live;
        self.counts = pass.count_pods(plan, live);
        let recorded = pass
            .status
            .as_ref()
            .and_then(|s| s.recorded_daemon_set_generation);
        self.target = plan.target.clone();
        self.observation = Observation {
            version: plan.target.version.clone(),
            object_changed: seen.template_changed,
            generation_known: recorded == live.metadata.generation,
            drift: seen.drift.drift.clone(),
            tls: self.tls,
            previous: pass.previous_pass_for(&plan.target),
            retry: seen.retry_mark.is_some(),
            held: seen.held,
            hold_recorded: seen.hold_recorded,
            live_on_hold: strategy_type(live) == ON_DELETE,
            ..observe_daemon_set(live, &self.counts)
        };
        Ok(())
    }

    fn decide(&mut self, _pass: &Pass<'_>, plan: &Plan) -> Decision {
        decide(&plan.strategy, &self.observation)
    }

    fn record(&self, _decision: &Decision, record: &mut Transition) {
        record.target = self.target.clone();
        record.desired = self.observation.desired_pods;
        record.updated = self.counts.updated;
        record.updated_ready = self.counts.updated_ready;
        record.max_unavailable = Some(self.observation.live_max_unavailable.clone());
    }

    async fn act(
        &self,
        _pass: &Pass<'_>,
        _decision: &Decision,
        _record: &mut Transition,
    ) -> Result<Acted, Error> {
        // The template write was the action: the DaemonSet controller replaces the pods.
        Ok(Acted::default())
    }

    fn series(&self, _decision: &Decision, record: &Transition) -> Series {
        Series::of_target(&record.target)
    }

    fn requeue(&self, decision: &Decision, requeue: &Requeue) -> Duration {
        if decision.action.quiet {
            requeue.resync
        } else {
            requeue.in_progress
        }
    }
}

impl Pass<'_> {
    /// The DaemonSet's pod counts, from the pod index's tally: O(1), and O(classes of pods)
    /// when the rule moves to the new target or revision.
    fn count_pods(&self, plan: &Plan, live: &DaemonSet) -> PodCounts {
        let uid = live.metadata.uid.clone().unwrap_or_default();
        let (owner_uid, updated, skip_terminating) = match plan.strategy.compatibility {
            // The reference: owner name only, annotations only, terminating pods counted.
            Compatibility::KubeVirt => (None, UpdatedRule::Annotations, false),
            Compatibility::Fixed => {
                let revisions = self.ctx.caches.revisions.get(&uid);
                let revision_hash = current_revision_hash(revisions.iter().map(|r| &**r))
                    .unwrap_or_default()
                    .to_owned();
                (
                    Some(uid),
                    UpdatedRule::AnnotationsAndRevision { revision_hash },
                    true,
                )
            }
        };
        let rule = PodCountRule {
            owner_name: self.ds_name.clone(),
            owner_uid,
            target: plan.target.clone(),
            keys: plan.keys.clone(),
            updated,
            crash_loop: plan.crash_loop.clone(),
            skip_terminating,
        };
        self.ctx
            .caches
            .pods
            .count(&pod_group(&self.namespace, &self.ds_name), &rule)
    }
}
