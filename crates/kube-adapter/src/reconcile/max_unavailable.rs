//! The MaxUnavailable driver's part of a pass (the reference's): it observes the pod counts
//! under its updated rule, the TLS facts and the live `maxUnavailable`, decides with
//! [`decide`] (the state machine's MaxUnavailable table on the shared life cycle), and acts
//! through the template write alone: the DaemonSet controller replaces the pods, steered by
//! the `maxUnavailable` that write sets.

use std::time::Duration;

use canary_analysis::RunKey;
use canary_predicates::{
    PodCounts, PodFacts, PodSummary, Target, UpdatedRule, current_revision_hash,
};
use canary_state_machine::{
    AnalysisVerdict, Compatibility, Decision, HealthFacts, MaxUnavailableAction, Observation,
    Phase, Stamp, StepAnalysis, SyncFlags, TemplateValues, TlsFacts, WriteKind, analysis_step,
    at_canary_value, decide,
};
use k8s_openapi::api::apps::v1::DaemonSet;

use super::Pass;
use super::analysis::{Placed, template_values};
use super::context::Requeue;
use super::health;
use super::pass::{Acted, Driver, Seen};
use super::plan::Plan;
use super::report::Series;
use crate::Error;
use crate::desired::{ON_DELETE, live_step_value, strategy_type};
use crate::index::{PodCountRule, pod_group};
use crate::observer::{Transition, UnhealthyRecord};
use canary_predicates::observe_daemon_set;

/// The MaxUnavailable driver of one pass: what it observed, for its record.
pub(super) struct Steer {
    tls: Option<TlsFacts>,
    target: Target,
    counts: PodCounts,
    observation: Observation,
    /// The stretch of the rollout to measure (`spec.analysis`), once a pod is updated.
    measure: Option<Measure>,
    /// The analysis the status shows.
    shown: Option<Box<crate::crd::AnalysisStatus>>,
    /// The rule the pods were counted by (what pre-pull reads as "not yet updated").
    rule: Option<PodCountRule>,
}

/// The analysis a pass of the MaxUnavailable driver keeps running (issue 46).
struct Measure {
    key: RunKey,
    values: TemplateValues,
    /// The measurements the decision read, and what the status shows with them.
    measured: Option<(AnalysisVerdict, crate::crd::AnalysisStatus)>,
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
            measure: None,
            shown: None,
            rule: None,
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
        if plan.surge {
            // Surge cannot work beside a host port: the new pod would not start while the
            // old one holds it. Checked on what is written, and on the live DaemonSet when the
            // template is someone else's (`workloadRef`).
            if let Some(port) = shared_host_port(seen.desired.unwrap_or(live)) {
                return Err(format!(
                    "spec.strategy.surge cannot work with {port}: the new pod would start beside the old one on the same node and cannot bind it; remove the hostPort or turn surge off"
                ));
            }
            self.observation.live_max_unavailable = live_step_value(live, true);
            self.observation.surge = true;
            // The soak's hold waits for the canary to have its node to itself: walked only
            // while the canary may soak (some pods updated, some old, not on hold yet).
            let observed = &self.observation;
            if !observed.live_on_hold && observed.updated_pods > 0 && observed.old_pods > 0 {
                let group = pod_group(&pass.namespace, &pass.ds_name);
                let alone = pass.ctx.caches.pods.with_group(&group, |pods| {
                    surge_canary_alone(pods.filter_map(|pod| {
                        rule.count_of(&**pod).map(|count| (&**pod, count.updated))
                    }))
                });
                self.observation.surge_canary_alone = Some(alone);
            }
        }
        let own_uid = live.metadata.uid.as_deref().unwrap_or_default();
        let min_ready = Duration::from_secs(super::pods::min_ready_seconds(live));
        self.observation.health =
            Some(pass.health_facts(plan, &rule, &self.observation, own_uid, min_ready));
        if plan.pre_pull.is_some() || plan.surge {
            self.rule = Some(rule.clone());
        }
        // A rollback (`abort`, `onFailure: Rollback`) goes back to a revision that was judged
        // already: it is neither measured nor held for a measurement (simulation seed 7: an
        // abort's rollback held on OnDelete for an analysis no run measured, failed on the
        // deadline).
        if plan.analysis.is_some() && !pass.rolling_back() {
            let step = analysis_step(&plan.strategy, &self.observation);
            self.measure = pass.measure(plan, &rule, &self.observation, step);
            if self.measure.is_none() {
                // Nothing to measure yet (no updated pod), or nothing to judge (a first
                // install): no gate. The canary's first pod brings the next pass.
                return Ok(());
            }
            let measured = self.measure.as_ref().and_then(|m| m.measured.as_ref());
            let verdict = measured.map_or(AnalysisVerdict::Pending, |(v, _)| v.clone());
            let announced = pass
                .status
                .as_ref()
                .and_then(|s| s.analysis.as_ref())
                .zip(self.measure.as_ref())
                .is_some_and(|(shown, measure)| {
                    shown.step == step
                        && shown.revision.as_deref() == Some(measure.key.revision.as_str())
                        && shown.verdict == verdict.as_str()
                });
            self.observation.analysis = Some(StepAnalysis {
                step,
                verdict,
                announced,
            });
        }
        Ok(())
    }

    fn decide(&mut self, pass: &Pass<'_>, plan: &Plan) -> Decision {
        let mut decision = decide(&plan.strategy, &self.observation);
        // With surge a hold waits for the nodes it would leave on a pod that is not ready
        // (issue 50): counted, walking the pods, only when this pass would write it.
        let holds = decision
            .write
            .as_ref()
            .is_some_and(|write| write.kind == WriteKind::Hold);
        if self.observation.surge
            && holds
            && let Some(rule) = &self.rule
        {
            let group = pod_group(&pass.namespace, &pass.ds_name);
            let unsettled = pass.ctx.caches.pods.with_group(&group, |pods| {
                surge_unsettled_nodes(
                    pods.map(|pod| &**pod)
                        .filter(|pod| rule.count_of(*pod).is_some()),
                )
            });
            self.observation.surge_unsettled_nodes = Some(unsettled);
            decision = decide(&plan.strategy, &self.observation);
        }
        self.shown = pass.keep_measuring(plan, self.measure.take(), &decision);
        decision
    }

    fn record(&self, _decision: &Decision, record: &mut Transition) {
        record.target = self.target.clone();
        record.desired = self.observation.desired_pods;
        record.updated = self.counts.updated;
        record.updated_ready = self.counts.updated_ready;
        record.max_unavailable = Some(self.observation.live_max_unavailable.clone());
        record.unhealthy = UnhealthyRecord::of(self.observation.health.as_ref());
        record.analysis = self.shown.clone();
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

    /// While the canary soaks (or waits for its analysis) with the DaemonSet controller held,
    /// the first batch the widen will replace: the DaemonSet controller chooses which nodes,
    /// so the batch is the fast `maxUnavailable` of the desired pods, taken from the nodes
    /// still on the old revision by name (walked only in this window, and only that far).
    fn pre_pull_nodes(
        &self,
        pass: &Pass<'_>,
        plan: &Plan,
        decision: &Decision,
    ) -> Option<Vec<String>> {
        let window = decision.phase == Phase::Canary
            && decision.action.keeps_hold
            && decision.failure.is_none()
            && !decision.held;
        if !window {
            return None;
        }
        let batch = plan
            .strategy
            .fast_max_unavailable
            .scaled(self.observation.desired_pods)
            .max(1) as usize;
        let rule = self.rule.as_ref()?;
        let group = pod_group(&pass.namespace, &pass.ds_name);
        let mut old: Vec<String> = pass.ctx.caches.pods.with_group(&group, |pods| {
            pods.filter(|pod| rule.count_of(&***pod).is_some_and(|c| !c.updated))
                .filter_map(|pod| pod.node_name().map(str::to_owned))
                .collect()
        });
        // The first `batch` names without sorting them all (65,000 nodes, every few seconds).
        if old.len() > batch {
            old.select_nth_unstable(batch);
            old.truncate(batch);
        }
        old.sort_unstable();
        old.dedup();
        Some(old)
    }
}

impl Pass<'_> {
    /// What to measure in this pass (issue 46): the stretch `step` of a rollout under way,
    /// from its first updated pod, over the updated nodes against those still on an older
    /// revision; `None` at rest, before any pod is updated, and with no old pod at the canary
    /// value (a first install creates every pod at once: nothing to hold back, no baseline). Walks the DaemonSet's pods (only with `spec.analysis`).
    fn measure(
        &self,
        plan: &Plan,
        rule: &PodCountRule,
        observation: &Observation,
        step: u32,
    ) -> Option<Measure> {
        if observation.updated_pods == 0 || !SyncFlags::of(&plan.strategy, observation).any() {
            return None;
        }
        let (revision, values, old_pods) =
            self.ctx
                .caches
                .pods
                .with_group(&pod_group(&self.namespace, &self.ds_name), |pods| {
                    let mut revisions: std::collections::BTreeMap<&str, u32> = Default::default();
                    let placed: Vec<Placed<'_>> = pods
                        .filter(|pod| !pod.is_terminating())
                        .filter_map(|pod| {
                            let count = rule.count_of(&**pod)?;
                            if count.updated {
                                *revisions
                                    .entry(pod.revision_hash().unwrap_or_default())
                                    .or_default() += 1;
                            }
                            Some(Placed {
                                node: pod.node_name()?,
                                pod: pod.name(),
                                updated: count.updated,
                            })
                        })
                        .collect();
                    // The revision most updated pods carry names the run (a pod of a re-rolled
                    // template may carry another for a moment).
                    let revision = revisions
                        .iter()
                        .max_by_key(|(hash, count)| (**count, std::cmp::Reverse(**hash)))
                        .map(|(hash, _)| (*hash).to_owned())
                        .unwrap_or_default();
                    let old_pods = placed.iter().filter(|p| !p.updated).count();
                    let values = template_values(&self.namespace, &self.ds_name, &revision, placed);
                    (revision, values, old_pods)
                });
        // No old pod at the canary value: a first install (every pod created at once), or a
        // finish written. Nothing to hold back, no baseline.
        if old_pods == 0 && at_canary_value(&plan.strategy, observation) {
            return None;
        }
        let key = self.analysis_key(Some(&revision), step);
        let measured = self.ctx.memory.analysis_snapshot(self.cds, &key);
        Some(Measure {
            key,
            values,
            measured,
        })
    }

    /// Keeps the run of `measure` while the rollout goes on (the decision leaves it in
    /// progress), or stops it; returns the analysis the status shows: what the decision read,
    /// the fresh run's, or the last one shown.
    fn keep_measuring(
        &self,
        plan: &Plan,
        measure: Option<Measure>,
        decision: &Decision,
    ) -> Option<Box<crate::crd::AnalysisStatus>> {
        let analysis = plan.analysis.as_ref()?;
        let going_on = decision.phase.is_in_progress()
            && decision.phase != Phase::RollingBack
            && !self.rolling_back();
        match measure {
            Some(measure) if going_on => {
                let key = measure.key.clone();
                let read = measure.measured.map(|(_, status)| status);
                self.keep_run(analysis, measure.key, measure.values);
                read.or_else(|| {
                    self.ctx
                        .memory
                        .analysis_snapshot(self.cds, &key)
                        .map(|(_, status)| status)
                })
                .map(Box::new)
            }
            measure => {
                self.ctx.memory.stop_analysis(self.cds);
                measure
                    .and_then(|m| m.measured)
                    .map(|(_, status)| status)
                    .or_else(|| self.status.as_ref().and_then(|s| s.analysis.clone()))
                    .map(Box::new)
            }
        }
    }

    /// The health gates' facts (issue 46): the troubled nodes of the cache, the DaemonSet's
    /// pod on each (walked only when there is one), and the canary's `Ready` time while it
    /// may soak (walked only then: before the widen, with a soak).
    fn health_facts(
        &self,
        plan: &Plan,
        rule: &PodCountRule,
        observation: &Observation,
        own_uid: &str,
        min_ready: Duration,
    ) -> HealthFacts {
        let counted = |pod: &PodSummary| rule.count_of(pod);
        // The DaemonSet's `minReadySeconds` (issue 50): a pod is available only once it has
        // been ready that long, so the canary soaks at least that long before the widen, with
        // a timed wake at the moment it becomes available. Not in the reference's table.
        let soak = match plan.strategy.compatibility {
            Compatibility::KubeVirt => plan.health.policy.canary_soak,
            Compatibility::Fixed => plan.health.policy.canary_soak.max(min_ready),
        };
        let group = pod_group(&self.namespace, &self.ds_name);
        // The state machine holds the DaemonSet controller while the canary soaks (at
        // maxUnavailable 1 it replaces the next pod as soon as the canary is available); the
        // Ready times are walked only while it may.
        let may_soak = !soak.is_zero()
            && observation.updated_ready_pods > 0
            // With surge the surged pods count as updated beside the old ones.
            && (observation.updated_pods < observation.desired_pods || observation.surge)
            && observation.old_pods > 0
            && observation
                .live_max_unavailable
                .matches(plan.strategy.canary_max_unavailable);
        let canary_ready_since = may_soak
            .then(|| {
                self.ctx.caches.pods.with_group(&group, |pods| {
                    pods.filter(|pod| counted(pod).is_some_and(|c| c.updated_ready))
                        .filter_map(|pod| pod.ready_since())
                        .max()
                })
            })
            .flatten();
        let troubled = self.ctx.caches.nodes.troubled();
        let now = Stamp(self.now.as_second());
        let held = crate::crd::hold_requested(self.cds);
        let answered = health::answered(&plan.health, self.status.as_ref(), held, now);
        let mut facts = health::facts(
            &plan.health,
            now,
            &troubled,
            |nodes| {
                self.ctx.caches.pods.with_group(&group, |pods| {
                    health::pods_on(nodes, pods.map(|pod| &**pod), |pod| {
                        counted(pod).is_some_and(|c| c.updated)
                    })
                })
            },
            canary_ready_since,
        );
        // The neighbours gate walks the DaemonSet's pods for the nodes updated and not: only
        // once a pod is updated (a rollout, or its last window).
        if observation.updated_pods > 0 {
            facts.neighbours = self.ctx.caches.pods.with_group(&group, |pods| {
                health::neighbour_facts(
                    &plan.health,
                    &self.ctx.caches.neighbours,
                    own_uid,
                    facts.now,
                    &facts.unhealthy,
                    pods.map(|pod| &**pod).filter(|pod| counted(pod).is_some()),
                    |pod| counted(pod).is_some_and(|c| c.updated),
                )
            });
        }
        facts.answered = answered;
        facts.rested_since = health::rested_since(self.status.as_ref(), now);
        facts.policy.canary_soak = soak;
        facts
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

/// The nodes where `OnDelete` would keep a pod that is not ready and delete a younger one
/// ([`Observation::surge_unsettled_nodes`]): the DaemonSet controller, not surging, keeps the
/// oldest pod of a node (by creation time, then name: `podByCreationTimestampAndPhase`).
/// Terminating pods are gone already as far as it is concerned.
fn surge_unsettled_nodes<'p>(pods: impl Iterator<Item = &'p PodSummary>) -> u32 {
    // Per node: how many live pods, and the oldest one's (creation, name, ready).
    let mut nodes: std::collections::HashMap<&str, (u32, (i64, &str, bool))> =
        std::collections::HashMap::new();
    for pod in pods.filter(|pod| !pod.is_terminating()) {
        let Some(node) = pod.node_name() else {
            continue;
        };
        // Ready as the DaemonSet controller reads it (`podutil.IsPodReady`: the `Ready`
        // condition), not as the reference counts pods (their containers).
        let this = (
            pod.created().unwrap_or(i64::MIN),
            pod.name(),
            pod.ready_since().is_some(),
        );
        nodes
            .entry(node)
            .and_modify(|(count, oldest)| {
                *count += 1;
                if (this.0, this.1) < (oldest.0, oldest.1) {
                    *oldest = this;
                }
            })
            .or_insert((1, this));
    }
    let unsettled = nodes
        .values()
        .filter(|(count, (_, _, ready))| *count > 1 && !ready)
        .count();
    u32::try_from(unsettled).unwrap_or(u32::MAX)
}

/// Whether the surge canary has its node to itself ([`Observation::surge_canary_alone`]): the
/// oldest live updated pod (by creation, then name: the canary, created first) has no other
/// live pod of the DaemonSet beside it. `pods` pairs each counted pod with whether it is
/// updated; terminating pods are gone already as far as `OnDelete` is concerned. `false`
/// while no updated pod is live.
fn surge_canary_alone<'p>(pods: impl Iterator<Item = (&'p PodSummary, bool)>) -> bool {
    let live: Vec<(&PodSummary, bool)> = pods.filter(|(pod, _)| !pod.is_terminating()).collect();
    let canary = live
        .iter()
        .filter(|(_, updated)| *updated)
        .filter_map(|(pod, _)| {
            Some((
                pod.created().unwrap_or(i64::MIN),
                pod.name(),
                pod.node_name()?,
            ))
        })
        .min();
    canary.is_some_and(|(_, name, node)| {
        !live
            .iter()
            .any(|(pod, _)| pod.name() != name && pod.node_name() == Some(node))
    })
}

/// The first `hostPort` a container (or init container) of `ds`'s pod template asks for,
/// described (`container "agent" hostPort 9100`): two pods of one node cannot both bind it,
/// so surge cannot start the new pod beside the old one.
/// With `hostNetwork` every container port is a host port (the API server defaults `hostPort`
/// to it).
fn shared_host_port(ds: &DaemonSet) -> Option<String> {
    let spec = ds.spec.as_ref()?.template.spec.as_ref()?;
    let host_network = spec.host_network == Some(true);
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .find_map(|container| {
            let port = container.ports.iter().flatten().find_map(|port| {
                port.host_port
                    .filter(|host| *host > 0)
                    .or_else(|| host_network.then_some(port.container_port))
            })?;
            Some(format!("container {:?} hostPort {port}", container.name))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ds(pod_spec: serde_json::Value) -> DaemonSet {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "agent"},
            "spec": {
                "selector": {"matchLabels": {"app": "agent"}},
                "template": {"metadata": {"labels": {"app": "agent"}}, "spec": pod_spec}
            }
        }))
        .unwrap()
    }

    fn pod(name: &str, node: &str, created: &str, ready: bool, terminating: bool) -> PodSummary {
        let mut metadata = serde_json::json!({"name": name, "creationTimestamp": created});
        if terminating {
            metadata["deletionTimestamp"] = serde_json::json!("2026-01-01T00:10:00Z");
        }
        let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
            "metadata": metadata,
            "spec": {"nodeName": node, "containers": []},
            "status": {"phase": "Running", "conditions": [{
                "type": "Ready",
                "status": if ready { "True" } else { "False" },
                "lastTransitionTime": "2026-01-01T00:05:00Z"
            }]}
        }))
        .unwrap();
        PodSummary::of(&pod)
    }

    /// A node is unsettled for the hold when `OnDelete` would keep a pod that is not ready:
    /// its oldest live pod (by creation, then name, as the DaemonSet controller sorts) is not
    /// ready and another pod is beside it. Each row names its case.
    #[test]
    fn a_node_is_unsettled_when_its_oldest_pod_is_not_ready_beside_another() {
        let (old, new) = ("2026-01-01T00:00:00Z", "2026-01-01T00:01:00Z");
        let rows: [(&str, Vec<PodSummary>, u32); 7] = [
            (
                "one pod, not ready",
                vec![pod("a", "n1", old, false, false)],
                0,
            ),
            (
                "old ready beside a surged pod not ready yet: OnDelete keeps the old one",
                vec![
                    pod("a", "n1", old, true, false),
                    pod("b", "n1", new, false, false),
                ],
                0,
            ),
            (
                "old crash-looping beside a ready surged pod",
                vec![
                    pod("a", "n1", old, false, false),
                    pod("b", "n1", new, true, false),
                ],
                1,
            ),
            (
                "neither ready",
                vec![
                    pod("a", "n1", old, false, false),
                    pod("b", "n1", new, false, false),
                ],
                1,
            ),
            (
                "the old pod is terminating already: gone as far as OnDelete goes",
                vec![
                    pod("a", "n1", old, false, true),
                    pod("b", "n1", new, true, false),
                ],
                0,
            ),
            (
                "same second: the name decides which is the oldest",
                vec![
                    pod("b", "n1", old, true, false),
                    pod("a", "n1", old, false, false),
                ],
                1,
            ),
            (
                "two nodes, one unsettled",
                vec![
                    pod("a", "n1", old, false, false),
                    pod("b", "n1", new, true, false),
                    pod("c", "n2", old, true, false),
                    pod("d", "n2", new, false, false),
                ],
                1,
            ),
        ];
        for (name, pods, unsettled) in rows {
            assert_eq!(surge_unsettled_nodes(pods.iter()), unsettled, "{name}");
        }
    }

    /// The surge canary has its node to itself once no other live pod is beside it: the
    /// canary is the oldest live updated pod. Each row names its case.
    #[test]
    fn the_surge_canary_is_alone_once_its_old_pod_is_gone() {
        let (old, canary, later) = (
            "2026-01-01T00:00:00Z",
            "2026-01-01T00:01:00Z",
            "2026-01-01T00:02:00Z",
        );
        // (case, the pods with whether each is updated, alone)
        type Row = (&'static str, Vec<(PodSummary, bool)>, bool);
        let rows: [Row; 6] = [
            (
                "no updated pod",
                vec![(pod("a", "n1", old, true, false), false)],
                false,
            ),
            (
                "the canary beside its old pod",
                vec![
                    (pod("a", "n1", old, true, false), false),
                    (pod("b", "n1", canary, true, false), true),
                ],
                false,
            ),
            (
                "the old pod terminating: alone",
                vec![
                    (pod("a", "n1", old, true, true), false),
                    (pod("b", "n1", canary, true, false), true),
                ],
                true,
            ),
            (
                "alone, the next node surging beside its old pod",
                vec![
                    (pod("b", "n1", canary, true, false), true),
                    (pod("c", "n2", old, true, false), false),
                    (pod("d", "n2", later, false, false), true),
                ],
                true,
            ),
            (
                "a younger updated pod alone (a node that joined) is not the canary",
                vec![
                    (pod("a", "n1", old, true, false), false),
                    (pod("b", "n1", canary, true, false), true),
                    (pod("e", "n3", later, true, false), true),
                ],
                false,
            ),
            (
                "the canary terminating: the next oldest updated pod is the canary",
                vec![
                    (pod("b", "n1", canary, true, true), true),
                    (pod("e", "n3", later, true, false), true),
                ],
                true,
            ),
        ];
        for (name, pods, alone) in rows {
            assert_eq!(
                surge_canary_alone(pods.iter().map(|(pod, updated)| (pod, *updated))),
                alone,
                "{name}"
            );
        }
    }

    /// The ports two pods of one node would share: a `hostPort`, or any port with
    /// `hostNetwork`; a container port alone is each pod's own.
    #[test]
    fn a_host_port_is_found_in_containers_init_containers_and_the_host_network() {
        let own = ds(serde_json::json!({"containers": [
            {"name": "agent", "image": "a", "ports": [{"containerPort": 9100}]}
        ]}));
        assert_eq!(shared_host_port(&own), None);
        let host = ds(serde_json::json!({"containers": [
            {"name": "agent", "image": "a", "ports": [{"containerPort": 9100, "hostPort": 9101}]}
        ]}));
        assert_eq!(
            shared_host_port(&host).as_deref(),
            Some("container \"agent\" hostPort 9101")
        );
        let init = ds(serde_json::json!({
            "containers": [{"name": "agent", "image": "a"}],
            "initContainers": [{"name": "setup", "image": "a", "ports": [{"containerPort": 1, "hostPort": 53}]}]
        }));
        assert!(shared_host_port(&init).unwrap().contains("setup"));
        let network = ds(serde_json::json!({"hostNetwork": true, "containers": [
            {"name": "agent", "image": "a", "ports": [{"containerPort": 4240}]}
        ]}));
        assert!(shared_host_port(&network).unwrap().contains("4240"));
    }
}
