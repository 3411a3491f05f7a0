//! Pod counts of one owner, kept up to date as pod events arrive.
//!
//! Counting a DaemonSet's pods by walking them all made every MaxUnavailable pass O(pods), and
//! every pod event a pass, so a rollout cost O(pods²) (issue 20). A [`PodTally`] sits beside
//! each group of the pod index and holds the counts of its pods under one [`PodCountRule`]:
//! each pod change moves them by that pod's [`PodCount`] before and after, so a pass reads them
//! in O(1). The rule (target, revision hash, owner UID, policies) changes once or twice per
//! rollout; a pass that asks under another rule counts the group again from its pods' classes
//! (`classes.rs`: a handful per DaemonSet, kept from the same events), not from every pod, and
//! keeps that rule.
//!
//! Invariant: when a tally has a rule, its counts and classes equal [`PodTally::recount`] of
//! the group under that rule. Debug builds (the tests and the deterministic simulation) check it on every
//! read ([`OwnerIndex::count`](super::OwnerIndex::count)).
//!
//! The tally also tells the watch which pod events can change a decision
//! ([`Tally::replace`]): under a rule, a move of what the state machine reads (updated,
//! updated and ready, crash loops) is [`Moved::Counts`], and [`Moved::Decision`] only when it
//! crosses a threshold a decision looks at: no updated pod or some, no updated pod ready or
//! some (the canary), every counted pod updated and ready or not (the end), the crash loop
//! named; without a rule, any change of the pod's facts is a decision, or [`Moved::Facts`] in a
//! group whose passes read the facts themselves (the Pods driver's, see
//! [`PodTally::facts_only`]). A rollout on 5,000 nodes moves the counts some 10,000 times and
//! crosses a threshold a handful of times.

mod classes;
mod downtime;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use canary_predicates::{
    AnnotationKeys, CountRule, CrashLoop, CrashLoopPolicy, OwnerMatch, PodCount, PodCounts,
    PodFacts, PodSummary, Target, UpdatedRule, count_pod, pod_crash_loop, pod_is_owned_by,
};

use self::classes::{PodClasses, identity};
use super::{Id, Moved, Tally};
use classes::PodName;
use downtime::Downtime;
pub use downtime::{ClosedGaps, DowntimeGap};

/// The owned form of what counting one DaemonSet's pods depends on: its owner match and
/// [`CountRule`]. A tally is valid for exactly one of these.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodCountRule {
    /// The DaemonSet's name: the controller owner's name.
    pub owner_name: String,
    /// The DaemonSet's UID when the owner is matched by UID as well (`OwnerMatch::Uid`);
    /// `None` for the reference's match by name alone.
    pub owner_uid: Option<String>,
    /// The target the pods move to.
    pub target: Target,
    /// The annotation keys carrying the target.
    pub keys: AnnotationKeys,
    /// How a pod counts as updated (with the current revision hash, when it reads one).
    pub updated: UpdatedRule,
    /// How a pod counts as crash-looping.
    pub crash_loop: CrashLoopPolicy,
    /// Leave out terminating pods entirely.
    pub skip_terminating: bool,
}

impl PodCountRule {
    /// The owner match this rule counts the pods of.
    pub fn owner(&self) -> OwnerMatch<'_> {
        match &self.owner_uid {
            Some(uid) => OwnerMatch::Uid {
                name: &self.owner_name,
                uid,
            },
            None => OwnerMatch::NameOnly {
                name: &self.owner_name,
            },
        }
    }

    /// The borrowed rule the predicates apply.
    pub fn rule(&self) -> CountRule<'_> {
        CountRule {
            target: &self.target,
            keys: &self.keys,
            updated: &self.updated,
            crash_loop: &self.crash_loop,
            skip_terminating: self.skip_terminating,
        }
    }

    /// What `pod` adds to the counts, `None` when it is not counted (another owner, or left
    /// out): the one reading of a pod under this rule (the health gates read it too).
    pub fn count_of<P: PodFacts + ?Sized>(&self, pod: &P) -> Option<PodCount> {
        self.count(pod)
    }

    /// What `pod` adds to the counts, `None` when it is not counted (another owner, or left out).
    fn count<P: PodFacts + ?Sized>(&self, pod: &P) -> Option<PodCount> {
        if !pod_is_owned_by(pod, &self.owner()) {
            return None;
        }
        count_pod(pod, &self.rule())
    }
}

/// The counts of one group of pods under one rule (none until a pass asks for counts).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PodTally {
    rule: Option<PodCountRule>,
    /// No counts on purpose: the group's passes read every pod's facts instead (the Pods
    /// driver, [`OwnerIndex::forget_counts`](super::OwnerIndex::forget_counts)).
    facts_only: bool,
    total: u32,
    updated: u32,
    updated_ready: u32,
    /// The crash-looping updated pods by identity: ordered, so the pod a failure names is the
    /// same whatever the order pods arrived in (the first by namespace and name).
    crash_loops: BTreeMap<PodName, CrashLoop>,
    /// The group's pods by class under the rule's keys, kept beside the counts so that a new
    /// rule reads them instead of every pod; `Some` exactly when `rule` is.
    classes: Option<PodClasses>,
    /// The agent downtime of the group's nodes, kept under any rule and without one (both
    /// drivers). Compares equal always: it is history, not a function of the pods.
    downtime: Downtime,
}

impl PodTally {
    /// A tally that keeps no counts, for a group whose passes read every pod's facts: a
    /// change of them is [`Moved::Facts`].
    pub(super) fn facts_only() -> Self {
        PodTally {
            facts_only: true,
            ..PodTally::default()
        }
    }

    /// The tally of `pods` under `rule`, counted from scratch pod by pod (the debug check of
    /// [`rekey`](Self::rekey) and of the counts kept from events).
    pub(super) fn recount<'p>(
        rule: PodCountRule,
        pods: impl IntoIterator<Item = &'p PodSummary> + Clone,
    ) -> Self {
        let mut tally = PodTally::default();
        for pod in pods.clone() {
            tally.add(pod, rule.count(pod));
        }
        tally.classes = Some(PodClasses::of(rule.keys.clone(), pods));
        tally.rule = Some(rule);
        tally
    }

    /// Counts the group, whose pods are `pods`, under `rule` from its classes: O(classes and
    /// the pods that could be crash-looping), not O(pods). The classes are built from `pods`
    /// the first time, and again when the rule reads the target under other keys.
    pub(super) fn rekey(&mut self, rule: PodCountRule, pods: &HashMap<Id, Arc<PodSummary>>) {
        let classes = match self.classes.take() {
            Some(classes) if *classes.keys() == rule.keys => classes,
            _ => PodClasses::of(rule.keys.clone(), pods.values().map(|pod| &**pod)),
        };
        let mut tally = PodTally::default();
        for (class, members) in classes.iter() {
            let Some(count) = rule.count(&class) else {
                continue;
            };
            tally.total = tally.total.saturating_add(members.pods);
            if !count.updated {
                continue;
            }
            tally.updated = tally.updated.saturating_add(members.pods);
            tally.updated_ready = tally.updated_ready.saturating_add(members.ready);
            for name in &members.crash_candidates {
                if let Some(crash) = pods
                    .get(&*super::id(&name.0, &name.1))
                    .and_then(|pod| pod_crash_loop(&**pod, &rule.crash_loop))
                {
                    tally.crash_loops.insert(name.clone(), crash);
                }
            }
        }
        tally.classes = Some(classes);
        tally.rule = Some(rule);
        tally.downtime = std::mem::take(&mut self.downtime);
        *self = tally;
    }

    /// Keeps no counts from now on ([`facts_only`](Self::facts_only)); the downtime measured stays.
    pub(super) fn keep_facts_only(&mut self) {
        let downtime = std::mem::take(&mut self.downtime);
        *self = PodTally {
            downtime,
            ..PodTally::facts_only()
        };
    }

    /// Takes the downtime gaps closed since the last call.
    pub(super) fn drain_downtime(&mut self) -> ClosedGaps {
        self.downtime.drain()
    }

    /// Whether the counts are kept under `rule`.
    pub(super) fn counts_under(&self, rule: &PodCountRule) -> bool {
        self.rule.as_ref() == Some(rule)
    }

    /// The counts, as [`canary_predicates::count_pods`] gives them (the crash loop named is the
    /// first by namespace and name).
    pub(super) fn counts(&self) -> PodCounts {
        PodCounts {
            total: self.total,
            updated: self.updated,
            updated_ready: self.updated_ready,
            crash_looping: u32::try_from(self.crash_loops.len()).unwrap_or(u32::MAX),
            first_crash_loop: self
                .crash_loops
                .first_key_value()
                .map(|((_, name), crash)| (name.clone(), crash.clone())),
        }
    }

    fn add(&mut self, pod: &PodSummary, count: Option<PodCount>) {
        let Some(count) = count else { return };
        self.total = self.total.saturating_add(1);
        self.updated = self.updated.saturating_add(u32::from(count.updated));
        self.updated_ready = self
            .updated_ready
            .saturating_add(u32::from(count.updated_ready));
        if let Some(crash) = count.crash_loop {
            self.crash_loops.insert(identity(pod), crash);
        }
    }

    fn subtract(&mut self, pod: &PodSummary, count: Option<PodCount>) {
        let Some(count) = count else { return };
        self.total = self.total.saturating_sub(1);
        self.updated = self.updated.saturating_sub(u32::from(count.updated));
        self.updated_ready = self
            .updated_ready
            .saturating_sub(u32::from(count.updated_ready));
        if count.crash_loop.is_some() {
            self.crash_loops.remove(&identity(pod));
        }
    }
}

/// Where the counts stand against what a decision looks at: some updated pod, some updated
/// pod ready, every counted pod updated and ready, and the crash loop a failure names.
type Thresholds = (bool, bool, bool, Option<PodName>);

impl PodTally {
    fn thresholds(&self) -> Thresholds {
        (
            self.updated > 0,
            self.updated_ready > 0,
            self.total > 0 && self.updated_ready >= self.total,
            self.crash_loops.keys().next().cloned(),
        )
    }
}

impl Tally<PodSummary> for PodTally {
    fn replace_at(
        &mut self,
        old: Option<&PodSummary>,
        new: Option<&PodSummary>,
        at: i64,
        live: bool,
    ) -> Moved {
        self.downtime.replace(old, new, at, live);
        self.replace(old, new)
    }

    fn carry_over(&mut self, stale: &mut Self) {
        self.downtime.carry_over(&mut stale.downtime);
    }

    fn is_idle(&self) -> bool {
        self.downtime.is_idle()
    }

    fn replace(&mut self, old: Option<&PodSummary>, new: Option<&PodSummary>) -> Moved {
        if let Some(classes) = &mut self.classes {
            if let Some(old) = old {
                classes.remove(old);
            }
            if let Some(new) = new {
                classes.add(new);
            }
        }
        let changed_facts = match (old, new) {
            (Some(old), Some(new)) => !old.same_facts(new),
            (None, None) => false,
            _ => true,
        };
        let changed_facts = match (changed_facts, self.facts_only) {
            (false, _) => Moved::Nothing,
            (true, true) => Moved::Facts,
            // Not counted yet (or another owner's pod, below): this tally cannot say.
            (true, false) => Moved::Decision,
        };
        let Some(rule) = &self.rule else {
            return changed_facts;
        };
        let owned =
            |pod: Option<&PodSummary>| pod.is_some_and(|p| pod_is_owned_by(p, &rule.owner()));
        if !owned(old) && !owned(new) {
            // Another owner's pod in the same group (a DaemonSet of the same name in another
            // namespace): this tally cannot say whether it matters to that owner's passes.
            return changed_facts;
        }
        let before = old.and_then(|pod| rule.count(pod));
        let after = new.and_then(|pod| rule.count(pod));
        // Only what the state machine reads: a pod that is counted or not, with the same
        // facts, moves `total` alone, which no decision reads.
        let moved = before.clone().unwrap_or_default() != after.clone().unwrap_or_default();
        let thresholds = self.thresholds();
        if let Some(old) = old {
            self.subtract(old, before);
        }
        if let Some(new) = new {
            self.add(new, after);
        }
        // A pod that leaves or joins without moving a count can still cross "every counted
        // pod updated and ready" (the last old pod gone).
        match (moved, thresholds == self.thresholds()) {
            (_, false) => Moved::Decision,
            (true, true) => Moved::Counts,
            (false, true) => Moved::Nothing,
        }
    }
}

#[cfg(test)]
mod tests;
