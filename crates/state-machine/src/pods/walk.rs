//! Rows 6 to 8 of the Pods driver: the nodes sorted into classes (deferred, old, updated,
//! unavailable), then the walk through the steps from where the previous pass left them.
//!
//! The budget arithmetic lives here: `unavailable` counts every desired pod on a counted node
//! that is not ready; a nodes step deletes up to `target - on the way` old pods, the old pods
//! that are not ready first (they are unavailable already: replacing one takes nothing more
//! away, as the Kubernetes DaemonSet controller replaces unavailable old pods first), then
//! ready ones up to `budget - unavailable`, so that the pods unavailable after every pass
//! never exceed `max(budget, unavailable before it)`.

use std::time::Duration;

use super::{
    Deferral, Deletion, LISTED_NODES, NodeHealth, NodeState, NodeTally, PodDecision,
    PodObservation, PodsAction, Promotion, Step, StepPlan,
};
use crate::analysis::{AnalysisVerdict, StepAnalysis};
use crate::decision::{Event, event_reason};
use crate::health::soak_left;
use crate::lifecycle::rows::{analysis_failed, analysis_inconclusive, deadline_exceeded};
use crate::lifecycle::{Life, completed_event, normal, warning};
use crate::max_unavailable::MaxUnavailable;
use crate::phase::Phase;
use crate::strategy::Strategy;

/// The nodes sorted into what the rollout does with them.
#[derive(Debug, Clone)]
pub(super) struct Classes<'a> {
    /// Counted nodes with an old pod, ready or not.
    old: Vec<&'a NodeState>,
    /// Counted nodes, unavailable (no pod, or a pod not ready), with their zone; an old pod
    /// that is not ready is not the rollout's disruption (it is replaced first, in its zone's
    /// turn).
    disrupted_zones: Vec<&'a str>,
    pub(super) deferred: Vec<(String, Deferral)>,
    /// Updated pods that crash-loop: (node, pod, reason), on any node.
    crashing: Vec<(&'a str, &'a str, &'a str)>,
    /// Counted nodes with a ready updated pod, by name.
    updated_ready_nodes: Vec<&'a str>,
    /// Pods on unhealthy nodes that are not updated and ready: what the rollout cannot judge
    /// until their node is back.
    pub(super) unjudged_pods: u32,
    pub(super) tally: NodeTally,
}

impl<'a> Classes<'a> {
    pub(super) fn of(observation: &'a PodObservation) -> Self {
        let mut classes = Classes {
            old: Vec::new(),
            disrupted_zones: Vec::new(),
            deferred: Vec::new(),
            crashing: Vec::new(),
            updated_ready_nodes: Vec::new(),
            unjudged_pods: 0,
            tally: NodeTally {
                desired: observation.desired_pods,
                ..NodeTally::default()
            },
        };
        let mut ready_counted: u32 = 0;
        let mut unavailable_known: u32 = 0;
        let mut set_aside: u32 = 0;
        // Deferred or set aside because their Node is gone: `desiredNumberScheduled` no longer
        // counts them once the DaemonSet controller has seen the Node deleted.
        let mut gone: u32 = 0;
        for node in &observation.nodes {
            if let Some(pod) = &node.pod
                && pod.updated
                && let Some(reason) = &pod.crash_loop
            {
                classes.crashing.push((&node.name, &pod.name, reason));
            }
            // A rollback puts the old agent back on a NotReady node too: the release it takes
            // away may be what broke the node (issue 46), and only its pod's replacement
            // brings the node back. Not ready, its pod is replaced first, at no cost to the
            // budget (it is unavailable already).
            let rolls_back_broken = observation.rollback
                && node.health == NodeHealth::NotReady
                && node.pod.as_ref().is_some_and(|pod| !pod.updated);
            if let Some(deferral) = deferral(node).filter(|_| !rolls_back_broken) {
                if deferral == Deferral::NodeMissing {
                    gone += 1;
                }
                if node
                    .pod
                    .as_ref()
                    .is_none_or(|pod| !(pod.updated && pod.ready))
                {
                    classes.unjudged_pods += 1;
                }
                // An unhealthy node whose pod already runs the target has nothing left to do:
                // it is left out of targets and budgets like a deferred node, but not named as
                // one ("updated when it comes back" would be false).
                if node.pod.as_ref().is_some_and(|pod| pod.updated) {
                    set_aside += 1;
                } else {
                    classes.deferred.push((node.name.clone(), deferral));
                }
                continue;
            }
            match &node.pod {
                Some(pod) if pod.updated => {
                    classes.tally.updated += 1;
                    if pod.ready {
                        classes.tally.updated_ready += 1;
                        classes.updated_ready_nodes.push(&node.name);
                    }
                }
                Some(_) => classes.old.push(node),
                None => {}
            }
            match &node.pod {
                Some(pod) if pod.ready => ready_counted += 1,
                Some(pod) if !pod.updated => unavailable_known += 1,
                _ => {
                    unavailable_known += 1;
                    classes
                        .disrupted_zones
                        .push(node.zone.as_deref().unwrap_or_default());
                }
            }
        }
        classes.deferred.sort();
        classes.updated_ready_nodes.sort_unstable();
        let deferred = u32::try_from(classes.deferred.len()).unwrap_or(u32::MAX);
        // A node that is gone is not subtracted: the DaemonSet's desired count drops it as soon
        // as its controller sees the Node deleted, and subtracting it again would undercount
        // the unavailable pods by one (while that count is stale, it overcounts by one, the
        // safe way).
        // Nor is a node the desired count does not have yet: a node added a moment ago can
        // hold a ready pod before the DaemonSet controller counts it, and that pod must not
        // stand in for a counted node that is down (soak seed 23003655: 2 down against a
        // budget of 1). The nodes shown, counted one by one, are a floor.
        let shown = ready_counted + unavailable_known;
        let counted = observation
            .desired_pods
            .saturating_sub((deferred + set_aside).saturating_sub(gone))
            .max(shown);
        let unavailable = counted.saturating_sub(ready_counted);
        classes.tally.deferred = deferred;
        classes.tally.counted = counted;
        classes.tally.unavailable = unavailable;
        classes.tally.old = u32::try_from(classes.old.len()).unwrap_or(u32::MAX);
        // Missing pods the nodes do not show (a pod not created yet on a node that had none):
        // their zone is unknown, which the zone rule treats as a disruption of its own.
        if unavailable > unavailable_known {
            classes.disrupted_zones.push(UNKNOWN_ZONE);
        }
        classes.disrupted_zones.sort_unstable();
        classes.disrupted_zones.dedup();
        classes
    }

    pub(super) fn first_crash(&self) -> Option<(&'a str, &'a str, &'a str)> {
        self.crashing.iter().min().copied()
    }

    pub(super) fn crashing_nodes(&self) -> Vec<String> {
        let mut nodes: Vec<String> = self
            .crashing
            .iter()
            .map(|(node, _, _)| (*node).to_owned())
            .collect();
        nodes.sort_unstable();
        nodes
    }

    /// Counted nodes that will run the new revision without another deletion.
    fn on_the_way(&self) -> u32 {
        self.tally.counted.saturating_sub(self.tally.old)
    }
}

/// A zone name no label has: the zone of a missing pod the nodes do not show.
const UNKNOWN_ZONE: &str = "\u{0}unknown";

/// Why a node is left out, if it is: its health only. A healthy node whose old pod is not
/// ready is not deferred: it is unavailable already, so it is replaced first (deferring it
/// would leave a broken old revision in place for ever, and took it out of the budget too).
fn deferral(node: &NodeState) -> Option<Deferral> {
    match node.health {
        NodeHealth::NotReady => Some(Deferral::NodeNotReady),
        NodeHealth::Cordoned => Some(Deferral::NodeCordoned),
        NodeHealth::Missing => Some(Deferral::NodeMissing),
        NodeHealth::Healthy => None,
    }
}

/// Rows 7 and 8: through the steps from where the previous pass left them.
pub(super) struct Walk<'a> {
    pub(super) strategy: &'a Strategy,
    pub(super) plan: &'a StepPlan,
    pub(super) observation: &'a PodObservation,
    pub(super) classes: Classes<'a>,
    pub(super) life: Life<'a>,
}

/// Where the walk stands in this pass: the step, the time spent in it, and what the steps
/// passed so far said and did.
struct Stride {
    /// The step index.
    index: u32,
    /// Time spent in the step; a step entered in this pass has just begun.
    elapsed: Duration,
    events: Vec<Event>,
    /// The first nodes step completed in this pass: its nodes.
    canary_nodes: Option<Vec<String>>,
    promotion_consumed: bool,
    tally: NodeTally,
}

impl Walk<'_> {
    pub(super) fn run(self, start: u32) -> PodDecision {
        let mut at = self.begin(start);
        loop {
            let Some(step) = self.plan.steps().get(at.index as usize) else {
                return self.finished(at);
            };
            let held = match *step {
                Step::Pause { duration } => self.pause(&mut at, duration),
                Step::Nodes {
                    nodes,
                    max_unavailable,
                } => self.nodes(&mut at, start, nodes, max_unavailable),
            };
            if let Some(decision) = held {
                return decision;
            }
            self.next_step(&mut at);
        }
    }

    /// The walk at the step the previous pass left it in (`start`), after a promotion.
    fn begin(&self, start: u32) -> Stride {
        let mut at = Stride {
            index: start.min(self.plan.len()),
            elapsed: self
                .observation
                .position
                .map_or(Duration::ZERO, |p| p.elapsed),
            events: Vec::new(),
            canary_nodes: None,
            promotion_consumed: false,
            tally: self.classes.tally,
        };
        // A promotion waits for the hold to end: it is not consumed while nothing may move.
        let promotion = self
            .observation
            .promotion
            .filter(|_| !self.observation.held);
        if let Some(promotion) = promotion {
            // Acted on once, whatever it finds: a promotion that does not apply here must not
            // linger and end a later step nobody asked to end.
            at.promotion_consumed = true;
            let (to, event) = self.promote(promotion, at.index);
            at.events.push(event);
            if to != at.index {
                at.index = to;
                at.elapsed = Duration::ZERO;
                at.events.extend(self.step_started_event(at.index));
            }
        }
        if self
            .observation
            .previous
            .is_some_and(|p| p.phase == Phase::Started)
        {
            at.events.extend(self.step_started_event(at.index));
        }
        at
    }

    /// On to the next step, which begins in this pass.
    fn next_step(&self, at: &mut Stride) {
        at.index += 1;
        at.elapsed = Duration::ZERO;
        at.events.extend(self.step_started_event(at.index));
    }

    /// A pause step: it holds (`paused`) until its duration has passed (and its analysis
    /// passes) or it is promoted; a failed analysis fails the rollout. `None`: it is over.
    fn pause(&self, at: &mut Stride, duration: Option<Duration>) -> Option<PodDecision> {
        let count = self.plan.len();
        let index = at.index;
        let remaining = duration.map(|d| d.saturating_sub(at.elapsed));
        let analysis = self.analysis_at(index);
        if let Some(failure) = self.analysis_failure(at, index) {
            return Some(failure);
        }
        let gate_open = analysis.is_none_or(|a| a.verdict == AnalysisVerdict::Passing);
        if gate_open && remaining.is_some_and(|r| r.is_zero()) {
            at.events.push(self.step_completed_event(index, None));
            return None;
        }
        at.tally.budget = 0;
        at.tally.target = 0;
        let mut decision = PodDecision::hold(Phase::Paused).at(index, at.tally);
        // Over but waiting for the analysis: its next measurement brings a pass.
        decision.action.wake_after = remaining.filter(|r| !r.is_zero());
        at.events.extend(analysis_inconclusive(
            &self.observation.name,
            analysis,
            &format!("step {} of {count}", index + 1),
            "the rollout holds until a conclusive measurement",
        ));
        Some(self.finish(decision, at))
    }

    /// A nodes step: old pods are deleted, within the step's budget, until `nodes` nodes run
    /// the target updated and ready; no progress within the deadline fails it. `None`: it is
    /// done. `start`: the step the previous pass left the rollout in.
    fn nodes(
        &self,
        at: &mut Stride,
        start: u32,
        nodes: MaxUnavailable,
        max_unavailable: Option<MaxUnavailable>,
    ) -> Option<PodDecision> {
        let index = at.index;
        if let Some(failure) = self.analysis_failure(at, index) {
            return Some(failure);
        }
        let first = Some(index as usize) == self.plan.first_nodes_step();
        let counted = at.tally.counted;
        let target = nodes.scaled(counted).min(counted);
        let default_budget = if first {
            self.strategy.canary_max_unavailable
        } else {
            self.strategy.fast_max_unavailable
        };
        let budget = max_unavailable
            .unwrap_or(default_budget)
            .scaled(at.tally.desired)
            .max(1);
        at.tally.target = target;
        at.tally.budget = budget;
        let phase = if first {
            Phase::Canary
        } else {
            Phase::Increasing
        };
        // No node can be judged (every pod not yet updated and ready is on a deferred node):
        // an empty count proves nothing, so the step holds rather than completing on it (soak
        // seed 9200017: a never-ready canary whose node went NotReady, the last old pod on a
        // cordoned node, reported `successful`). No deadline: the count cannot move until a
        // node is back.
        if counted == 0 && self.classes.unjudged_pods > 0 {
            let decision = PodDecision::hold(phase).at(index, at.tally);
            return Some(self.finish(decision, at));
        }
        if at.tally.updated_ready >= target {
            // Issue 46: the canary soaks before the next step, so that a node it breaks a
            // minute after it started is caught on one node. A rollback has no canary; a
            // pause step right after the canary's is its soak already (the gates watch
            // through it, and it holds until promoted or over).
            let paused_next = matches!(
                self.plan.steps().get(index as usize + 1),
                Some(Step::Pause { .. })
            );
            if first
                && !paused_next
                && !self.observation.rollback
                && let Some(left) = self.observation.health.as_ref().and_then(soak_left)
            {
                let mut decision = PodDecision::hold(phase).at(index, at.tally);
                decision.action.wake_after = Some(left);
                return Some(self.finish(decision, at));
            }
            // Issue 46: nor before its analysis passes (missing data holds it), as the
            // MaxUnavailable driver's widen waits. A pause step next judges it there.
            let analysis = self.analysis_at(index);
            // With no old pod left there is nothing to hold back (a step of every node, a
            // full promotion): an empty baseline would keep it inconclusive for ever.
            if first
                && !paused_next
                && !self.observation.rollback
                && at.tally.old > 0
                && analysis.is_some_and(|a| a.verdict != AnalysisVerdict::Passing)
            {
                at.events.extend(analysis_inconclusive(
                    &self.observation.name,
                    analysis,
                    &format!("step {} of {}", index + 1, self.plan.len()),
                    "the next step waits for a conclusive measurement",
                ));
                let decision = PodDecision::hold(phase).at(index, at.tally);
                return Some(self.finish(decision, at));
            }
            if first {
                // A rollback's first step is met by nodes that never left: none of them is a
                // canary.
                at.canary_nodes = Some(if self.observation.rollback {
                    Vec::new()
                } else {
                    self.classes
                        .updated_ready_nodes
                        .iter()
                        .map(|n| (*n).to_owned())
                        .collect()
                });
            }
            at.events
                .push(self.step_completed_event(index, Some(first)));
            return None;
        }
        // The deadline measures a nodes step that was already running: not one entered in
        // this pass, and not the time spent paused before it.
        let same_step = index == start.min(self.plan.len())
            && self.observation.previous.is_some_and(|p| p.phase == phase);
        if same_step
            && let Some(failure) = deadline_exceeded::<PodsAction>(
                self.strategy,
                &self.life,
                at.tally.updated_ready,
                at.tally.counted,
            )
        {
            let mut decision = failure.at(index, at.tally);
            decision.action.deferred = self.classes.deferred.clone();
            return Some(decision);
        }
        let need = target.saturating_sub(self.classes.on_the_way());
        let room = budget.saturating_sub(at.tally.unavailable);
        let mut decision = PodDecision::hold(phase).at(index, at.tally);
        decision.action.delete = self.choose(need, room, first);
        Some(self.finish(decision, at))
    }

    /// The analysis of step `index` (a pause or a nodes step); `None` without analysis. A
    /// step the caller has no measurement of is pending.
    fn analysis_at(&self, index: u32) -> Option<&StepAnalysis> {
        const PENDING: &StepAnalysis = &StepAnalysis {
            step: u32::MAX,
            verdict: AnalysisVerdict::Pending,
            announced: false,
        };
        let analysis = self.observation.analysis.as_ref()?;
        Some(if analysis.step == index {
            analysis
        } else {
            PENDING
        })
    }

    /// Issue 46: a failed analysis of step `index`, pause or nodes step, fails the rollout
    /// (the shared failure row): measured from the first updated pod to the end.
    fn analysis_failure(&self, at: &mut Stride, index: u32) -> Option<PodDecision> {
        let place = format!("step {} of {}", index + 1, self.plan.len());
        let failure: PodDecision = analysis_failed(&self.life, self.analysis_at(index), &place)?;
        Some(self.finish(failure.at(index, at.tally), at))
    }

    /// Where a promotion moves the rollout from step `index`, and the event that says so (a
    /// warning when it changes nothing).
    fn promote(&self, promotion: Promotion, index: u32) -> (u32, Event) {
        let name = &self.observation.name;
        let count = self.plan.len();
        let step = |i: u32| format!("step {} of {count}", i + 1);
        let ignored = |why: String| {
            (
                index,
                warning(
                    event_reason::VERB_REFUSED,
                    format!("daemonSet {name}: promotion ignored: {why}"),
                ),
            )
        };
        let current = self.plan.steps().get(index as usize);
        let last_nodes = self
            .plan
            .last_nodes_step()
            .and_then(|i| u32::try_from(i).ok())
            .unwrap_or(count);
        match (promotion, current) {
            (_, None) => ignored("every step is done".to_owned()),
            (Promotion::Step, Some(Step::Pause { .. })) => (
                index + 1,
                normal(
                    event_reason::PROMOTED,
                    format!(
                        "daemonSet {name}: promoted, {} (a pause) ended",
                        step(index)
                    ),
                ),
            ),
            (Promotion::Step, Some(Step::Nodes { .. })) => ignored(format!(
                "{} is a nodes step, which ends when its nodes are updated; a promotion ends a pause (promote --full skips every remaining step)",
                step(index)
            )),
            (Promotion::Full, Some(current)) => {
                let to = if index < last_nodes {
                    last_nodes
                } else if matches!(current, Step::Pause { .. }) {
                    count
                } else {
                    return ignored(format!(
                        "{} is the last nodes step already, nothing to skip",
                        step(index)
                    ));
                };
                let skipped = if to == index + 1 {
                    step(index)
                } else {
                    format!("steps {} to {} of {count}", index + 1, to)
                };
                let then = if to == count {
                    ""
                } else {
                    "; the last nodes step updates every node at its budget"
                };
                (
                    to,
                    normal(
                        event_reason::PROMOTED,
                        format!("daemonSet {name}: fully promoted, {skipped} skipped{then}"),
                    ),
                )
            }
        }
    }

    /// Every step done: `successful`; a deferred node that came back is updated at the canary
    /// budget without leaving `successful`.
    fn finished(&self, mut at: Stride) -> PodDecision {
        let index = at.index;
        let mut tally = self.classes.tally;
        let budget = self
            .strategy
            .canary_max_unavailable
            .scaled(tally.desired)
            .max(1);
        tally.budget = budget;
        tally.target = tally.counted;
        let room = budget.saturating_sub(tally.unavailable);
        let delete = if self.classes.crashing.is_empty() {
            self.choose(tally.old, room, false)
        } else {
            Vec::new()
        };
        let previous = self.observation.previous;
        let at_rest = previous.is_some_and(|p| p.phase == Phase::Successful);
        if !at_rest && (tally.unavailable > 0 || tally.old > 0) {
            // Every step is done but pods are still starting (a first install), or old pods
            // remain (a promotion skipped the last nodes step): wait for them, replacing the
            // old ones at the canary budget, under the progress deadline. `successful` means
            // every counted node runs the new revision.
            let waiting = previous.is_some_and(|p| p.phase == Phase::Waiting);
            let stalled: Option<PodDecision> = waiting
                .then(|| {
                    deadline_exceeded(
                        self.strategy,
                        &self.life,
                        tally.updated_ready,
                        tally.counted,
                    )
                })
                .flatten();
            let decision = stalled.unwrap_or_else(|| PodDecision::hold(Phase::Waiting));
            let mut decision = decision.at(index, tally);
            if decision.phase != Phase::Failed {
                decision.action.delete = delete;
            }
            return self.finish(decision, &mut at);
        }
        if previous.is_some_and(|p| p.phase.is_in_progress()) {
            at.events.push(self.completed_event());
        }
        let mut decision = PodDecision::hold(Phase::Successful).at(index, tally);
        decision.done = tally.old == 0 && tally.unavailable == 0;
        decision.action.delete = delete;
        self.finish(decision, &mut at)
    }

    /// `decision` with what the walk said and did on its way to it, and the nodes it names.
    fn finish(&self, mut decision: PodDecision, at: &mut Stride) -> PodDecision {
        let mut events = std::mem::take(&mut at.events);
        let previously = self.observation.position.map(|p| p.deferred);
        if previously.is_some_and(|p| p != decision.action.tally.deferred)
            && decision.action.tally.deferred > 0
        {
            events.insert(
                0,
                warning(
                    event_reason::NODES_DEFERRED,
                    format!(
                        "daemonSet {}: {} deferred to the end of the rollout: {}",
                        self.observation.name,
                        plural(decision.action.tally.deferred, "node"),
                        list(
                            self.classes
                                .deferred
                                .iter()
                                .map(|(node, why)| format!("{node} ({})", why.as_str()))
                        )
                    ),
                ),
            );
        }
        events.append(&mut decision.events);
        decision.events = events;
        decision.action.deferred = self.classes.deferred.clone();
        // Only at rest can an updated pod crash-loop here (during a rollout it fails it before
        // the walk): named, they tell why a caught-up node waits.
        decision.action.failed_nodes = self.classes.crashing_nodes();
        decision.action.canary_nodes = at.canary_nodes.take();
        decision.action.promotion_consumed = at.promotion_consumed;
        decision
    }

    /// Up to `need` old pods to delete, in the rollout's order, of which at most `room` ready
    /// ones: an old pod that is not ready goes first and takes no room (it is unavailable
    /// already). In a nodes step after the first, zoned, only from the one zone already
    /// disrupted (none if two are, or the zone is unknown), else from the zone of the first
    /// candidate (not-ready old pods first, then zones in order).
    fn choose(&self, need: u32, room: u32, first: bool) -> Vec<Deletion> {
        if need == 0 {
            return Vec::new();
        }
        let mut order: Vec<&NodeState> = self.classes.old.clone();
        let zone = |node: &NodeState| node.zone.clone().unwrap_or_default();
        let ready = |node: &NodeState| node.pod.as_ref().is_some_and(|pod| pod.ready);
        if first {
            order.sort_by(|a, b| {
                (!a.canary, ready(a), &a.name).cmp(&(!b.canary, ready(b), &b.name))
            });
        } else if self.plan.zoned {
            order.sort_by(|a, b| (ready(a), zone(a), &a.name).cmp(&(ready(b), zone(b), &b.name)));
            let allowed = match self.classes.disrupted_zones.as_slice() {
                [] => order.first().map(|node| zone(node)),
                [only] if *only != UNKNOWN_ZONE => Some((*only).to_owned()),
                _ => None,
            };
            let Some(allowed) = allowed else {
                return Vec::new();
            };
            order.retain(|node| zone(node) == allowed);
        } else {
            order.sort_by(|a, b| (ready(a), &a.name).cmp(&(ready(b), &b.name)));
        }
        let mut chosen = Vec::new();
        let mut ready_taken = 0;
        for node in order {
            if chosen.len() >= need as usize {
                break;
            }
            let Some(pod) = node.pod.as_ref() else {
                continue;
            };
            if pod.ready {
                if ready_taken >= room {
                    continue;
                }
                ready_taken += 1;
            }
            chosen.push(Deletion {
                pod: pod.name.clone(),
                uid: pod.uid.clone(),
                node: node.name.clone(),
            });
        }
        chosen
    }

    /// The nodes the next nodes step after step `after` will replace, in the order it takes
    /// them (issue 50: what a pause or the canary's soak pre-pulls): its target less the nodes
    /// on the way, chosen as [`Walk::choose`] chooses, without the budget (the step takes
    /// them all, a budget's worth per pass). Empty when no nodes step follows.
    pub(super) fn upcoming(&self, after: u32) -> Vec<String> {
        let steps = self.plan.steps();
        let next =
            steps.iter().enumerate().skip(after as usize + 1).find_map(
                |(index, step)| match step {
                    Step::Nodes { nodes, .. } => Some((index, *nodes)),
                    Step::Pause { .. } => None,
                },
            );
        let Some((index, nodes)) = next else {
            return Vec::new();
        };
        let counted = self.classes.tally.counted;
        let target = nodes.scaled(counted).min(counted);
        let need = target.saturating_sub(self.classes.on_the_way());
        let first = Some(index) == self.plan.first_nodes_step();
        self.choose(need, u32::MAX, first)
            .into_iter()
            .map(|deletion| deletion.node)
            .collect()
    }

    fn step_started_event(&self, index: u32) -> Option<Event> {
        let step = self.plan.steps().get(index as usize)?;
        let name = &self.observation.name;
        let count = self.plan.len();
        let what = match *step {
            Step::Nodes { nodes, .. } => {
                let target = nodes.scaled(self.classes.tally.counted);
                let target = target.min(self.classes.tally.counted);
                format!("nodes {nodes} ({})", plural(target, "node"))
            }
            Step::Pause {
                duration: Some(duration),
            } => format!("paused for {}s", duration.as_secs()),
            Step::Pause { duration: None } => "paused until promoted".to_owned(),
        };
        Some(normal(
            event_reason::STEP_STARTED,
            format!(
                "daemonSet {name}: step {} of {count} started: {what}",
                index + 1
            ),
        ))
    }

    /// `first`: `Some` for a nodes step (whether it is the first), `None` for a pause.
    fn step_completed_event(&self, index: u32, first: Option<bool>) -> Event {
        let name = &self.observation.name;
        let count = self.plan.len();
        let nodes = &self.classes.updated_ready_nodes;
        let what = match first {
            None => "pause over".to_owned(),
            // Most of a rollback's nodes never left its revision: a list would name them as
            // if this rollout had moved them.
            Some(_) if self.observation.rollback => format!(
                "{} on the revision rolled back to",
                plural(self.classes.tally.updated_ready, "node")
            ),
            Some(true) => format!("canary on {}", list(nodes.iter())),
            Some(false) if nodes.len() <= LISTED_NODES => {
                format!("updated and ready: {}", list(nodes.iter()))
            }
            Some(false) => format!(
                "{} updated and ready",
                plural(self.classes.tally.updated_ready, "node")
            ),
        };
        normal(
            event_reason::STEP_COMPLETED,
            format!(
                "daemonSet {name}: step {} of {count} completed: {what}",
                index + 1
            ),
        )
    }

    fn completed_event(&self) -> Event {
        let deferred = &self.classes.deferred;
        if deferred.is_empty() {
            return completed_event(self.life.name, self.life.version);
        }
        let mut event = completed_event(self.life.name, self.life.version);
        event.message = format!(
            "{}; {} deferred, updated when they come back: {}",
            event.message,
            plural(self.classes.tally.deferred, "node"),
            list(
                deferred
                    .iter()
                    .map(|(node, why)| format!("{node} ({})", why.as_str()))
            )
        );
        event
    }
}

/// `"1 node"`, `"3 nodes"`.
fn plural(count: u32, noun: &str) -> String {
    if count == 1 {
        format!("1 {noun}")
    } else {
        format!("{count} {noun}s")
    }
}

/// At most [`LISTED_NODES`] items, comma-separated, then how many more.
fn list<T: std::fmt::Display>(items: impl ExactSizeIterator<Item = T>) -> String {
    let total = items.len();
    let shown: Vec<String> = items.take(LISTED_NODES).map(|i| i.to_string()).collect();
    let mut text = shown.join(", ");
    if total > LISTED_NODES {
        text.push_str(&format!(" and {} more", total - LISTED_NODES));
    }
    text
}
