//! The MaxUnavailable driver's part of a pass (the reference's): it observes the pod counts
//! under its updated rule, the TLS facts and the live `maxUnavailable`, decides with
//! [`decide`] (the state machine's MaxUnavailable table on the shared life cycle), and acts
//! through the template write alone: the DaemonSet controller replaces the pods, steered by
//! the `maxUnavailable` that write sets.

use std::time::Duration;

use canary_predicates::{PodCounts, PodSummary, Target, UpdatedRule, current_revision_hash};
use canary_state_machine::{
    Compatibility, Decision, HealthFacts, MaxUnavailableAction, Observation, Stamp, TlsFacts,
    decide,
};
use k8s_openapi::api::apps::v1::DaemonSet;

use super::Pass;
use super::context::Requeue;
use super::health;
use super::pass::{Acted, Driver, Seen};
use super::plan::Plan;
use super::report::Series;
use crate::Error;
use crate::desired::{ON_DELETE, strategy_type};
use crate::index::{PodCountRule, pod_group};
use crate::observer::{Transition, UnhealthyRecord};
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
        let rule = pass.count_rule(plan, live);
        self.counts = pass
            .ctx
            .caches
            .pods
            .count(&pod_group(&pass.namespace, &pass.ds_name), &rule);
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
        self.observation.health = Some(pass.health_facts(plan, &rule, &self.observation));
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
        record.unhealthy = UnhealthyRecord::of(self.observation.health.as_ref());
        record.unhealthy_answered = self
            .observation
            .health
            .as_ref()
            .and_then(|facts| facts.answered)
            .map(|stamp| stamp.0);
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
            // The canary soaks: back when it ends (issue 46), not a busy loop.
            decision
                .action
                .wake_after
                .map_or(requeue.in_progress, |soak| soak.min(requeue.in_progress))
        }
    }
}

impl Pass<'_> {
    /// The health gates' facts (issue 46): the troubled nodes of the cache, the DaemonSet's
    /// pod on each (walked only when there is one), and the canary's `Ready` time while it
    /// may soak (walked only then: before the widen, with a soak).
    fn health_facts(
        &self,
        plan: &Plan,
        rule: &PodCountRule,
        observation: &Observation,
    ) -> HealthFacts {
        let counted = |pod: &PodSummary| rule.count_of(pod);
        // The state machine holds the DaemonSet controller while the canary soaks (at
        // maxUnavailable 1 it replaces the next pod as soon as the canary is available); the
        // Ready times are walked only while it may.
        let may_soak = !plan.health.policy.canary_soak.is_zero()
            && observation.updated_ready_pods > 0
            && observation.updated_pods < observation.desired_pods
            && observation.old_pods > 0
            && observation
                .live_max_unavailable
                .matches(plan.strategy.canary_max_unavailable);
        let canary_ready_since = may_soak
            .then(|| {
                self.ctx.caches.pods.with_group(
                    &pod_group(&self.namespace, &self.ds_name),
                    |pods| {
                        pods.filter(|pod| counted(pod).is_some_and(|c| c.updated_ready))
                            .filter_map(|pod| pod.ready_since())
                            .max()
                    },
                )
            })
            .flatten();
        let troubled = self.ctx.caches.nodes.troubled();
        let now = Stamp(self.now.as_second());
        let held = crate::crd::hold_requested(self.cds);
        let answered = health::answered(&plan.health, self.status.as_ref(), held, now);
        let facts = health::facts(
            &plan.health,
            now,
            &troubled,
            |nodes| {
                self.ctx.caches.pods.with_group(
                    &pod_group(&self.namespace, &self.ds_name),
                    |pods| {
                        health::pods_on(nodes, pods.map(|pod| &**pod), |pod| {
                            counted(pod).is_some_and(|c| c.updated)
                        })
                    },
                )
            },
            canary_ready_since,
        );
        HealthFacts { answered, ..facts }
    }

    /// The rule the DaemonSet's pods are counted by (the pod index's tally counts by it: O(1),
    /// and O(classes of pods) when the rule moves to the new target or revision).
    fn count_rule(&self, plan: &Plan, live: &DaemonSet) -> PodCountRule {
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
        PodCountRule {
            owner_name: self.ds_name.clone(),
            owner_uid,
            target: plan.target.clone(),
            keys: plan.keys.clone(),
            updated,
            crash_loop: plan.crash_loop.clone(),
            skip_terminating,
        }
    }
}
