//! The analysis runs of both drivers (`spec.analysis`, issue 46): which stretch of a rollout a
//! run measures (its [`RunKey`]), the list placeholders it is given, and starting it.
//!
//! A rollout is measured from its first updated pod to its end: the Pods driver step by step
//! (a pause step as before, and now its nodes steps), the MaxUnavailable driver in two
//! stretches, the canary and the widened rollout
//! ([`analysis_step`](canary_state_machine::analysis_step)). Each stretch counts from zero.
//!
//! # Invariants
//!
//! - A list placeholder holds at most [`LISTED_NAMES`] names: a stable sample (the names of
//!   least FNV-1a hash), so that a query stays a few kilobytes at 65,000 nodes and a node
//!   sampled once stays sampled while the set grows. `{{pods}}` are the pods of the sampled
//!   updated nodes, so `node` and `pod` selections agree.
//! - The lists are sorted by name, so a pass that sees the same pods renders the same query.

use std::sync::Arc;

use canary_analysis::{AnalysisPlan, AnalysisRun, RunKey, RunReporting};
use canary_state_machine::TemplateValues;
use kube::ResourceExt;
use kube::api::Api;
use tracing::info;

use super::Pass;

/// The most names a list placeholder (`{{nodes}}`, `{{baselineNodes}}`, `{{pods}}`) holds:
/// about 30 bytes a name, some 6 KB of query at most, whatever the cluster's size. A
/// sample of 200 nodes measures an average or a ratio as well as every node does.
pub(crate) const LISTED_NAMES: usize = 200;

/// One pod of the DaemonSet as a list placeholder sees it.
pub(super) struct Placed<'a> {
    /// Its node.
    pub(super) node: &'a str,
    /// Its name.
    pub(super) pod: &'a str,
    /// It runs the new revision.
    pub(super) updated: bool,
}

/// The placeholders' values over the DaemonSet's pods (a terminating pod left out by the
/// caller): the updated nodes and their pods against the nodes still on an older revision,
/// each list a stable sample of at most [`LISTED_NAMES`].
pub(super) fn template_values<'a>(
    namespace: &str,
    daemon_set: &str,
    revision: &str,
    pods: impl IntoIterator<Item = Placed<'a>>,
) -> TemplateValues {
    let mut updated: Vec<(u64, &str, &str)> = Vec::new();
    let mut baseline: Vec<(u64, &str, &str)> = Vec::new();
    for placed in pods {
        let entry = (fnv1a(placed.node), placed.node, placed.pod);
        if placed.updated {
            updated.push(entry);
        } else {
            baseline.push(entry);
        }
    }
    let updated = sample(updated);
    let baseline = sample(baseline);
    TemplateValues {
        nodes: updated
            .iter()
            .map(|(_, node, _)| (*node).to_owned())
            .collect(),
        baseline_nodes: baseline
            .iter()
            .map(|(_, node, _)| (*node).to_owned())
            .collect(),
        pods: {
            let mut pods: Vec<String> = updated
                .iter()
                .map(|(_, _, pod)| (*pod).to_owned())
                .collect();
            pods.sort_unstable();
            pods
        },
        namespace: namespace.to_owned(),
        daemon_set: daemon_set.to_owned(),
        revision: revision.to_owned(),
    }
}

/// At most [`LISTED_NAMES`] entries, those of least hash, sorted by node name.
fn sample<'a>(mut entries: Vec<(u64, &'a str, &'a str)>) -> Vec<(u64, &'a str, &'a str)> {
    if entries.len() > LISTED_NAMES {
        entries.select_nth_unstable_by_key(LISTED_NAMES - 1, |(hash, node, _)| (*hash, *node));
        entries.truncate(LISTED_NAMES);
    }
    entries.sort_unstable_by(|a, b| a.1.cmp(b.1).then(a.2.cmp(b.2)));
    entries
}

/// FNV-1a, 64 bits: a hash that stays the same across processes and versions (the sample
/// must not move when the controller restarts).
fn fnv1a(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

impl Pass<'_> {
    /// Which measurements `step` (a Pods driver step, or a MaxUnavailable stretch) of the
    /// rollout toward `revision` takes.
    pub(super) fn analysis_key(&self, revision: Option<&str>, step: u32) -> RunKey {
        RunKey {
            revision: revision.unwrap_or_default().to_owned(),
            step,
            generation: self.cds.metadata.generation.unwrap_or_default(),
        }
    }

    /// Keeps the run of `key` measuring with `values` (started when it is not the one that
    /// runs, which it replaces).
    pub(super) fn keep_run(&self, plan: &Arc<AnalysisPlan>, key: RunKey, values: TemplateValues) {
        let start = |key: RunKey, values: TemplateValues| {
            info!(namespace = %self.namespace, name = %self.cds.name_any(), step = key.step + 1, revision = %key.revision, "analysis started");
            AnalysisRun::start(
                key,
                Arc::clone(plan),
                values,
                Arc::clone(&self.ctx.analysis),
                RunReporting {
                    wake: self.ctx.memory.waker(self.cds),
                    namespace: self.namespace.clone(),
                    name: self.cds.name_any(),
                    measured: self
                        .ctx
                        .observer
                        .analysis_measured(&self.namespace, &self.cds.name_any()),
                    now: self.ctx.clock.boxed(),
                    secrets: Api::namespaced(self.ctx.client.clone(), &self.namespace),
                },
            )
        };
        self.ctx.memory.keep_analysis(self.cds, key, values, start);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn placed(count: usize, updated: bool) -> Vec<(String, String)> {
        (0..count)
            .map(|i| {
                let suffix = if updated { "new" } else { "old" };
                (format!("node-{i:05}"), format!("agent-{suffix}-{i:05}"))
            })
            .collect()
    }

    fn values(pods: &[(String, String, bool)]) -> TemplateValues {
        template_values(
            "ns",
            "agent",
            "r1",
            pods.iter().map(|(node, pod, updated)| Placed {
                node,
                pod,
                updated: *updated,
            }),
        )
    }

    #[test]
    fn small_lists_are_whole_and_sorted() {
        let pods = vec![
            ("b".to_owned(), "pod-b".to_owned(), true),
            ("a".to_owned(), "pod-a".to_owned(), true),
            ("c".to_owned(), "pod-c".to_owned(), false),
        ];
        let values = values(&pods);
        assert_eq!(values.nodes, ["a", "b"]);
        assert_eq!(values.pods, ["pod-a", "pod-b"]);
        assert_eq!(values.baseline_nodes, ["c"]);
    }

    #[test]
    fn at_65000_nodes_each_list_is_a_stable_sample_of_at_most_200() {
        let with = |updated: usize| {
            let mut pods: Vec<(String, String, bool)> = placed(updated, true)
                .into_iter()
                .map(|(n, p)| (n, p, true))
                .collect();
            pods.extend(
                placed(65_000, false)
                    .into_iter()
                    .skip(updated)
                    .map(|(n, p)| (n, p, false)),
            );
            values(&pods)
        };
        let early = with(6_500);
        assert_eq!(early.nodes.len(), LISTED_NAMES);
        assert_eq!(early.pods.len(), LISTED_NAMES);
        assert_eq!(early.baseline_nodes.len(), LISTED_NAMES);
        // The pods are those of the sampled nodes.
        for (node, pod) in early.nodes.iter().zip(&early.pods) {
            assert_eq!(
                node.trim_start_matches("node-"),
                pod.trim_start_matches("agent-new-")
            );
        }
        // Spread over the names, not the first 200 of them.
        assert!(
            early
                .nodes
                .last()
                .is_some_and(|n| n.as_str() > "node-03000")
        );
        // Stable: the same pods give the same sample; an updated node sampled early whose
        // hash stays among the least stays sampled as more nodes are updated.
        assert_eq!(with(6_500), early);
        let later = with(13_000);
        let kept = early
            .nodes
            .iter()
            .filter(|n| later.nodes.contains(n))
            .count();
        assert!(
            kept >= LISTED_NAMES / 4,
            "only {kept} of the early sample kept"
        );
    }
}
