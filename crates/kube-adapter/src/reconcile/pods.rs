//! One pass of the Pods driver: the DaemonSet is `OnDelete`, and the controller deletes old
//! pods on the nodes the state machine's [`decide_pods`] chooses.
//!
//! Read the DaemonSet (the controller's own, or a referenced one through [`WorkloadWatches`]),
//! its pods by node, the nodes (health, zone, canary selector), its ControllerRevisions (the
//! target revision) and the promotion mark; decide; write the template when the decision says
//! so (only the controller's own); delete the chosen pods, each with a UID precondition; write
//! the status; publish the events.
//!
//! # Invariants
//!
//! - A referenced DaemonSet (`spec.workloadRef`) is never written; one that is not `OnDelete`
//!   gets a condition and nothing else.
//! - One DELETE per chosen pod, no more: a pod that is gone (404) or was replaced under the same
//!   name (409, the UID precondition) is skipped, not retried.
//! - Nothing is decided from a cache that has not listed (nodes, or a referenced DaemonSet's
//!   pods and revisions).
//!
//! [`WorkloadWatches`]: crate::workload::WorkloadWatches

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use canary_analysis::{AnalysisPlan, RunKey};
use canary_predicates::{
    Labels, OwnerMatch, PodFacts, PodSummary, Target, current_revision_hash,
    label_selector_matches, pod_crash_loop, pod_is_owned_by, pod_is_ready, pod_runs_revision,
};
use canary_state_machine::{
    AnalysisVerdict, NodeHealth, NodeState, Phase, PodDecision, PodObservation, PodState,
    PodsAction, Step, StepAnalysis, StepPlan, decide_pods, pre_pull_nodes,
};
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Preconditions};
use kube::runtime::controller::Action;
use tracing::{debug, info, warn};

use super::analysis::{Placed, template_values};
use super::context::Requeue;
use super::pass::{Acted, Driver, Seen};
use super::plan::{Plan, PodsPlan};
use super::report::Series;
use super::{Pass, describe_api_error};
use crate::Error;
use crate::crd::{AnalysisStatus, PROMOTE_ANNOTATION, promotion_asked};
use crate::index::{OwnerIndex, pod_group};
use crate::observer::{PodsRecord, Report, Transition, UnhealthyRecord};
use crate::status::{next_status, step_position};
use crate::watched_node::{ALL_NODES, CachedNode, NodeLabels};

/// The resource version of each pod a pass saw, by UID: what its deletions are conditioned on.
type PodVersions = std::collections::HashMap<String, String>;

impl Pass<'_> {
    /// A DaemonSet someone else owns: checked (it exists, it is `OnDelete`), its pods watched,
    /// then driven as any Pods-driver DaemonSet, without a template.
    pub(super) async fn run_workload(
        &self,
        plan: &Plan,
        pods: &PodsPlan,
        workload: &str,
    ) -> Result<Action, Error> {
        let Some(live) = self.ctx.caches.daemon_sets.get(&self.ds_ref()) else {
            let message = format!(
                "DaemonSet {workload} (spec.workloadRef) does not exist in namespace {}; the rollout begins once its owner creates it",
                self.namespace
            );
            return self.await_workload(message).await;
        };
        if live.metadata.deletion_timestamp.is_some() {
            return Ok(Action::requeue(self.ctx.requeue.conflict));
        }
        if let Some(refused) = self.claimed_by_another(&live).await {
            return refused;
        }
        let update_strategy = crate::desired::strategy_type(&live);
        if update_strategy != crate::desired::ON_DELETE {
            let message = format!(
                "DaemonSet {workload} has updateStrategy {update_strategy}: the Pods driver needs OnDelete, so that only the pods it deletes are replaced; set it where the DaemonSet is defined (docs/operations.md shows the values for Cilium, Calico and node-exporter). Nothing is done until then"
            );
            return self.invalid_spec(message).await;
        }
        let indexes = match self.ctx.caches.workloads.indexes(self.cds, &live) {
            Ok(indexes) => indexes,
            Err(error) => {
                return self
                    .invalid_spec(format!("DaemonSet {workload}: {error}"))
                    .await;
            }
        };
        if !indexes.ready() {
            return Ok(Action::requeue(self.ctx.requeue.conflict));
        }
        self.run_pods(plan, pods, &live, None, &indexes.pods, &indexes.revisions)
            .await
    }

    /// Drives the Pods driver over `live` (toward `desired`, the controller's own template,
    /// or `None` for a DaemonSet someone else owns), once the node cache has listed.
    pub(super) async fn run_pods(
        &self,
        plan: &Plan,
        pods_plan: &PodsPlan,
        live: &DaemonSet,
        desired: Option<DaemonSet>,
        pod_index: &OwnerIndex<PodSummary>,
        revisions: &OwnerIndex<ControllerRevision>,
    ) -> Result<Action, Error> {
        if !self.ctx.caches.nodes.is_ready() {
            return Ok(Action::requeue(self.ctx.requeue.conflict));
        }
        let driver = PodsDriver {
            pods_plan,
            pod_index,
            revisions,
            seen: None,
        };
        self.drive(plan, live, desired, driver).await
    }

    /// The analysis record the status of this pass shows: what the decision read (a round
    /// that ended since then shows in the next pass, which it wakes).
    ///
    /// - The write that ends an analysed step records that step's measurements, why it could
    ///   end, even when the next analysed step has measured already (its run measures at once,
    ///   and may have answered before this pass writes); the next pass shows the new run.
    /// - Until that write is stored, every later write carries it too: a lost write must not
    ///   let the next one replace the evidence with the new step's.
    /// - Without analysis, nothing.
    fn shown_analysis(
        &self,
        analysed: bool,
        kept: Option<RunKey>,
        recorded_key: &RunKey,
        measured: Option<AnalysisStatus>,
    ) -> Option<AnalysisStatus> {
        let stored = |record: &AnalysisStatus| {
            self.cds.status.as_ref().and_then(|s| s.analysis.as_ref()) == Some(record)
        };
        let unwritten_ending = self
            .status
            .as_ref()
            .filter(|_| !self.status_persisted)
            .and_then(|s| s.analysis.clone())
            .filter(|ended| {
                ended.step < recorded_key.step
                    && ended.revision.as_deref() == Some(recorded_key.revision.as_str())
                    && !stored(ended)
            });
        match (kept, measured) {
            (Some(key), measured) if key == *recorded_key => unwritten_ending.or(measured),
            (Some(_), Some(ended)) => Some(ended),
            (Some(key), None) => unwritten_ending.or_else(|| {
                self.ctx
                    .memory
                    .analysis_snapshot(self.cds, &key)
                    .map(|(_, status)| status)
            }),
            (None, Some(measured)) => Some(measured),
            (None, None) if analysed => self.status.as_ref().and_then(|s| s.analysis.clone()),
            (None, None) => None,
        }
    }

    /// Keeps an analysis run measuring the step the decision leaves the rollout in (issue 46:
    /// a pause step, or a nodes step once a pod is updated), or stops the one that runs when
    /// the decision leaves no measured step (a failure, the end, a rollback). Returns the key
    /// of the run kept.
    fn keep_analysis(
        &self,
        analysis: Option<&Arc<AnalysisPlan>>,
        steps: &StepPlan,
        decision: &PodDecision,
        nodes: &[NodeState],
        revision: Option<&str>,
    ) -> Option<RunKey> {
        let Some(plan) = analysis else {
            self.ctx.memory.stop_analysis(self.cds);
            return None;
        };
        let any_updated = || {
            nodes
                .iter()
                .any(|node| node.pod.as_ref().is_some_and(|pod| pod.updated))
        };
        let measuring = revision.is_some()
            && !self.rolling_back()
            && match steps.steps().get(decision.action.step as usize) {
                Some(Step::Pause { .. }) => decision.phase == Phase::Paused,
                // `paused` in a nodes step: held on request, which does not stop the
                // measurements (a held rollout can still fail).
                Some(Step::Nodes { .. }) => {
                    matches!(
                        decision.phase,
                        Phase::Canary | Phase::Increasing | Phase::Paused
                    ) && any_updated()
                }
                None => false,
            };
        if !measuring {
            self.ctx.memory.stop_analysis(self.cds);
            return None;
        }
        let key = self.analysis_key(revision, decision.action.step);
        let values = template_values(
            &self.namespace,
            &self.ds_name,
            revision.unwrap_or_default(),
            nodes.iter().filter_map(|node| {
                node.pod.as_ref().map(|pod| Placed {
                    node: &node.name,
                    pod: &pod.name,
                    updated: pod.updated,
                })
            }),
        );
        self.keep_run(plan, key.clone(), values);
        Some(key)
    }

    /// The health gates' facts (issue 46) for the Pods driver: the troubled nodes of the
    /// cache and the DaemonSet's pod on each (its pods walked only when there is one), and,
    /// in the first nodes step with a soak, since when its updated pods are all ready.
    fn pods_health_facts(
        &self,
        plan: &Plan,
        pods_plan: &PodsPlan,
        live: &DaemonSet,
        pod_index: &OwnerIndex<PodSummary>,
        current: Option<&str>,
        step: u32,
    ) -> canary_state_machine::HealthFacts {
        let uid = live.metadata.uid.clone().unwrap_or_default();
        let owner = OwnerMatch::Uid {
            name: &self.ds_name,
            uid: &uid,
        };
        let updated = |pod: &PodSummary| current.is_some_and(|c| pod_runs_revision(pod, c));
        let group = pod_group(&self.namespace, &self.ds_name);
        let soaking = !plan.health.policy.canary_soak.is_zero()
            && pods_plan.steps.first_nodes_step() == Some(step as usize);
        let canary_ready_since = soaking
            .then(|| {
                pod_index.with_group(&group, |pods| {
                    pods.filter(|pod| pod_is_owned_by(&***pod, &owner) && updated(pod))
                        .filter(|pod| !pod.is_terminating() && pod_is_ready(&***pod))
                        .filter_map(|pod| pod.ready_since())
                        .max()
                })
            })
            .flatten();
        let troubled = self.ctx.caches.nodes.troubled();
        let now = canary_state_machine::Stamp(self.now.as_second());
        let held = crate::crd::hold_requested(self.cds);
        let answered = super::health::answered(&plan.health, self.status.as_ref(), held, now);
        let mut facts = super::health::facts(
            &plan.health,
            now,
            &troubled,
            |nodes| {
                pod_index.with_group(&group, |pods| {
                    super::health::pods_on(
                        nodes,
                        pods.filter(|pod| pod_is_owned_by(&***pod, &owner))
                            .map(|pod| &**pod),
                        updated,
                    )
                })
            },
            canary_ready_since,
        );
        facts.neighbours = pod_index.with_group(&group, |pods| {
            super::health::neighbour_facts(
                &plan.health,
                &self.ctx.caches.neighbours,
                &uid,
                facts.now,
                &facts.unhealthy,
                pods.filter(|pod| pod_is_owned_by(&***pod, &owner))
                    .map(|pod| &**pod),
                updated,
            )
        });
        facts.answered = answered;
        facts.rested_since = super::health::rested_since(self.status.as_ref(), now);
        facts
    }

    /// The nodes with a pod of `live` (or being replaced), as the state machine sees them,
    /// `(pods, ready)` per revision, and how soon the next updated pod becomes available
    /// (`minReadySeconds`, issue 50: an updated pod counts as ready only from then).
    fn node_states(
        &self,
        plan: &Plan,
        pods_plan: &PodsPlan,
        live: &DaemonSet,
        pod_index: &OwnerIndex<PodSummary>,
        current: Option<&str>,
    ) -> NodeStates {
        let uid = live.metadata.uid.clone().unwrap_or_default();
        let min_ready = min_ready_seconds(live);
        let now = self.now.as_second();
        let mut next_available: Option<u64> = None;
        let owner = OwnerMatch::Uid {
            name: &self.ds_name,
            uid: &uid,
        };
        let mut by_node: BTreeMap<String, Option<PodState>> = BTreeMap::new();
        let mut by_revision: BTreeMap<String, (u32, u32)> = BTreeMap::new();
        let mut versions = PodVersions::new();
        // This driver reads every pod's facts, not the counts: any change of them must trigger.
        let group = pod_group(&self.namespace, &self.ds_name);
        pod_index.forget_counts(&group);
        pod_index.with_group(&group, |pods| {
            for pod in pods.filter(|pod| pod_is_owned_by(&***pod, &owner)) {
                let Some(node) = pod.node_name() else {
                    continue; // Not scheduled yet: it has no node to count on.
                };
                let slot = by_node.entry(node.to_owned()).or_default();
                if pod.is_terminating() {
                    continue; // The node is being replaced: an entry without a pod.
                }
                // The Pods driver's rule (`UpdatedRule::Revision`): the pod runs the target.
                let updated = current.is_some_and(|c| pod_runs_revision(&**pod, c));
                let (ready, wait) = counts_ready(pod, updated, min_ready, now);
                if let Some(wait) = wait {
                    next_available = Some(next_available.map_or(wait, |n| n.min(wait)));
                }
                let revision = pod.revision_hash().unwrap_or_default();
                let counts = by_revision.entry(revision.to_owned()).or_default();
                counts.0 += 1;
                counts.1 += u32::from(ready);
                let state = PodState {
                    name: pod.name().to_owned(),
                    uid: pod.uid().to_owned(),
                    updated,
                    ready,
                    crash_loop: pod_crash_loop(&**pod, &plan.crash_loop)
                        .map(|crash| crash.reason.as_str().to_owned()),
                };
                // Two live pods on one node (a surge): the updated one speaks for the node.
                if slot.as_ref().is_none_or(|held| !held.updated) {
                    versions.insert(state.uid.clone(), pod.resource_version().to_owned());
                    *slot = Some(state);
                }
            }
        });
        let live: Vec<(&str, &str)> = by_node
            .iter()
            .filter_map(|(node, pod)| Some((node.as_str(), pod.as_ref()?.uid.as_str())))
            .collect();
        let replacing = self.ctx.memory.replacing(self.cds, &live);
        let selector = pods_plan.canary_selector.as_ref();
        let nodes = self.ctx.caches.nodes.with_group(ALL_NODES, |cached| {
            let cached: HashMap<&str, &CachedNode> =
                cached.map(|node| (node.name.as_str(), &**node)).collect();
            // A pod this controller deleted is being replaced even while the cache still shows
            // it live (the watch is late): choosing it again would delete it twice.
            // A node removed since its pod was deleted is not being replaced: it is gone, and
            // listing it would defer it (`NodeMissing`) until the memory forgets it.
            for (node, uid) in replacing {
                match by_node.get_mut(&node) {
                    Some(slot) if slot.as_ref().is_some_and(|pod| pod.uid == uid) => *slot = None,
                    Some(_) => {} // Already without a pod: the deleted one is terminating.
                    None if cached.contains_key(node.as_str()) => {
                        by_node.insert(node, None);
                    }
                    None => {}
                }
            }
            by_node
                .into_iter()
                .map(|(name, pod)| {
                    let node = cached.get(name.as_str()).copied();
                    let labels = node.map(|n| &n.labels);
                    NodeState {
                        zone: pods_plan
                            .topology_key
                            .as_deref()
                            .and_then(|key| labels?.label(key))
                            .map(str::to_owned),
                        canary: selector.is_some_and(|s| {
                            label_selector_matches(s, labels.unwrap_or(&NodeLabels::default()))
                                .unwrap_or(false)
                        }),
                        health: node.map_or(NodeHealth::Missing, |n| n.health),
                        pod,
                        name,
                    }
                })
                .collect::<Vec<_>>()
        });
        NodeStates {
            nodes,
            by_revision,
            versions,
            available_wake: next_available.map(Duration::from_secs),
        }
    }

    /// Writes the status of `record` before its pass deletes in a step, phase or revision the
    /// stored status does not name yet.
    ///
    /// Why: deletions can take long (one request each), and a pass cut short after them (the
    /// lease lost, the process killed) would leave a status that names an earlier step, whose
    /// budget is smaller than what was taken down: a reader, or the leader that takes over,
    /// would see the rollout where it was not. Recorded first, the stored status always
    /// covers the pods down; a failed write deletes nothing and the pass is retried.
    async fn record_step_before_deleting(
        &self,
        record: &Transition,
        decision: &PodDecision,
    ) -> Result<(), Error> {
        if decision.action.delete.is_empty() {
            return Ok(());
        }
        let previous = self.status.as_ref();
        let ahead = self.ahead_of_deletions(record);
        let status = next_status(previous, &ahead, self.now);
        let named = |s: &crate::crd::CanaryDaemonSetStatus| {
            (s.phase, s.current_step_index, s.target_revision.clone())
        };
        // Only a stored status covers the deletions. One this process computed and failed to
        // write (this very write-ahead, refused in an earlier pass) does not (soak seed
        // 28001322: the retried pass deleted a v3 canary behind a status still `failed`), so
        // it is written first, as it is: written over by this pass's record instead, a
        // rollout that turns `successful` in a catch-up pass would say so before the node it
        // catches up is replaced, not listed as deferred any more (soak seed 29000063).
        if let Some(owed) = previous.filter(|_| !self.status_persisted) {
            self.patch_status(owed).await?;
        }
        if previous.map(named) == Some(named(&status)) {
            return Ok(());
        }
        self.patch_status(&status).await
    }

    /// Deletes the decided pods, one request each, with a precondition on the UID and on the
    /// resource version the decision saw (`versions`). A pod that changed since is refused
    /// (409) and left to the next pass: an old pod the cache showed not ready, which takes no
    /// budget, may have turned ready meanwhile, and deleting it then would take availability
    /// the step does not have (soak seed 8000245).
    ///
    /// A pod refused that way, or already gone (404), is not asked again from the same copy:
    /// until the watch brings a newer one the cache is behind for it, and a second request
    /// would be refused too (soak seed 26008792: with the pods watch down, every pass asked
    /// for all 182 pods again, and a refusal ended the pass as cut short, so the next came at
    /// once: 3,356 DELETEs in one virtual minute).
    ///
    /// The deletions of one pass stop after [`DELETIONS_PER_PASS`] of time: the pass then
    /// ends and the next one decides the rest afresh, so that a hold, an abort or a new spec
    /// asked meanwhile is acted on within that time, however many pods the step has and
    /// however slow the API server answers (soak seeds 21002206 and 21002316: a pass of a
    /// 423-node step, with answers up to 1.8 s, still deleted a minute after a hold).
    async fn delete_pods(&self, decision: &PodDecision, versions: &PodVersions) -> Deletions {
        let api: Api<Pod> = Api::namespaced(self.ctx.client.clone(), &self.namespace);
        let outdated = self.ctx.memory.outdated(self.cds, versions);
        let mut deletions = Deletions::default();
        let started = tokio::time::Instant::now();
        for deletion in &decision.action.delete {
            if outdated.contains(&deletion.uid) {
                debug!(namespace = %self.namespace, name = %self.cds.name_any(), pod = %deletion.pod, "not deleted: refused from the copy the cache still holds");
                continue;
            }
            if started.elapsed() >= DELETIONS_PER_PASS {
                deletions.cut_short = true;
                break;
            }
            let version = versions.get(&deletion.uid).cloned().unwrap_or_default();
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: Some(deletion.uid.clone()),
                    resource_version: Some(version.clone()).filter(|version| !version.is_empty()),
                }),
                ..DeleteParams::default()
            };
            match api.delete(&deletion.pod, &params).await {
                Ok(_) => {
                    self.ctx
                        .memory
                        .note_replacing(self.cds, &deletion.node, &deletion.uid);
                    self.ctx.observer.report(Report::PodDeleted);
                    info!(namespace = %self.namespace, name = %self.cds.name_any(), ds = %self.ds_name, pod = %deletion.pod, node = %deletion.node, step = decision.action.step, "pod deleted");
                    deletions.deleted.push(deletion.pod.clone());
                }
                // Gone already, replaced under the same name (the UID precondition) or changed
                // since the decision (the version): the next pass that sees a newer copy
                // decides the node as it is then.
                Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => {
                    self.ctx
                        .memory
                        .note_outdated(self.cds, &deletion.uid, &version);
                }
                Err(error) => {
                    let error = Error::from(error);
                    warn!(namespace = %self.namespace, name = %self.cds.name_any(), pod = %deletion.pod, error = %describe_api_error(&error), "could not delete pod");
                    deletions.first_error.get_or_insert(error);
                }
            }
        }
        deletions
    }
}

/// What the deletions of one pass did.
#[derive(Default)]
struct Deletions {
    /// The pods deleted.
    deleted: Vec<String>,
    /// The first error that is not "already gone" or "changed".
    first_error: Option<Error>,
    /// Stopped by [`DELETIONS_PER_PASS`] with pods left: the next pass decides them at once.
    /// Pods refused or skipped leave nothing for an immediate pass to do.
    cut_short: bool,
}

/// How long one pass may spend deleting pods before it ends and leaves the rest to the next
/// pass (see `Pass::delete_pods`).
const DELETIONS_PER_PASS: std::time::Duration = std::time::Duration::from_secs(5);

/// `(revision, pods, ready)`, the target revision first, then by pod count.
fn revision_counts(
    by_revision: BTreeMap<String, (u32, u32)>,
    current: Option<&str>,
) -> Vec<(String, u32, u32)> {
    let mut counts: Vec<_> = by_revision
        .into_iter()
        .map(|(revision, (pods, ready))| (revision, pods, ready))
        .collect();
    counts.sort_by(|a, b| {
        let target = |r: &str| current != Some(r);
        (target(&a.0), std::cmp::Reverse(a.1), &a.0).cmp(&(
            target(&b.0),
            std::cmp::Reverse(b.1),
            &b.0,
        ))
    });
    counts
}

/// What [`Pass::node_states`] saw of the DaemonSet's pods.
struct NodeStates {
    /// The nodes with a pod (or being replaced), as the state machine sees them.
    nodes: Vec<NodeState>,
    /// `(pods, ready)` per revision.
    by_revision: BTreeMap<String, (u32, u32)>,
    versions: PodVersions,
    /// How soon the next updated pod becomes available (`minReadySeconds`, issue 50).
    available_wake: Option<Duration>,
}

/// The DaemonSet's `minReadySeconds` (0 when unset or negative).
pub(super) fn min_ready_seconds(ds: &DaemonSet) -> u64 {
    ds.spec
        .as_ref()
        .and_then(|spec| spec.min_ready_seconds)
        .and_then(|seconds| u64::try_from(seconds).ok())
        .unwrap_or(0)
}

/// Whether the Pods driver counts `pod` as ready, and, for an updated pod ready but not yet
/// for `min_ready` seconds, how many seconds are left (issue 50): an updated pod counts once
/// it is available, as the DaemonSet controller counts it, so a step completes, and a pause
/// begins, only then. An old pod counts as ready as soon as it is: its deletion is then paid
/// from the step's budget, never taken for free.
fn counts_ready(pod: &PodSummary, updated: bool, min_ready: u64, now: i64) -> (bool, Option<u64>) {
    if !updated {
        return (pod_is_ready(pod), None);
    }
    match pod.available_in(min_ready, now) {
        None => (false, None),
        Some(0) => (true, None),
        Some(left) => (false, Some(left)),
    }
}

/// The Pods driver of one pass: the indexes it reads, and what it saw.
struct PodsDriver<'d> {
    pods_plan: &'d PodsPlan,
    pod_index: &'d OwnerIndex<PodSummary>,
    revisions: &'d OwnerIndex<ControllerRevision>,
    seen: Option<Box<PodsSeen>>,
}

/// What the Pods driver observed in a pass, and the analysis it decided with.
struct PodsSeen {
    observation: PodObservation,
    /// The DaemonSet controller has observed the live generation.
    observed: bool,
    /// The revision the pods move to (the recorded one while a hand edit is kept).
    current: Option<String>,
    /// The target revision the status records.
    recorded_revision: Option<String>,
    target: Target,
    by_revision: BTreeMap<String, (u32, u32)>,
    versions: PodVersions,
    /// The promotion mark, when new.
    mark: Option<String>,
    recorded_key: RunKey,
    measured: Option<(AnalysisVerdict, AnalysisStatus)>,
    /// The steps the decision followed (a rollback's without its pauses).
    steps: StepPlan,
    /// The analysis the status shows.
    analysis: Option<AnalysisStatus>,
    /// How soon an updated pod ready but not yet for `minReadySeconds` becomes available:
    /// no watch event marks that moment.
    available_wake: Option<Duration>,
}

/// The analysis of the step the previous pass left the rollout in (`step` of `revision`, run
/// `key`): its measurements so far, and what they allow as the state machine reads it,
/// `announced` when the status already shows that verdict for that step. Both `None` without
/// analysis.
fn recorded_step_analysis(
    pass: &Pass<'_>,
    plan: &Plan,
    key: &RunKey,
    step: u32,
    revision: Option<&str>,
) -> (
    Option<(AnalysisVerdict, AnalysisStatus)>,
    Option<StepAnalysis>,
) {
    if plan.analysis.is_none() {
        return (None, None);
    }
    let measured = pass.ctx.memory.analysis_snapshot(pass.cds, key);
    let verdict = measured
        .as_ref()
        .map_or(AnalysisVerdict::Pending, |(verdict, _)| verdict.clone());
    let status = pass.status.as_ref();
    let announced = status.and_then(|s| s.analysis.as_ref()).is_some_and(|a| {
        a.step == step && a.revision.as_deref() == revision && a.verdict == verdict.as_str()
    });
    let analysis = StepAnalysis {
        step,
        verdict,
        announced,
    };
    (measured, Some(analysis))
}

impl Driver for PodsDriver<'_> {
    type Action = PodsAction;

    fn observe(&mut self, pass: &Pass<'_>, plan: &Plan, seen: &Seen<'_>) -> Result<(), String> {
        let live = seen.live;
        let status = pass.status.as_ref();
        let uid = live.metadata.uid.clone().unwrap_or_default();
        let generation = live.metadata.generation.unwrap_or_default();
        let ds_status = live.status.clone().unwrap_or_default();
        let observed = ds_status
            .observed_generation
            .is_some_and(|g| g >= generation);
        let current = {
            let revisions = self.revisions.get(&uid);
            current_revision_hash(revisions.iter().map(|r| &**r)).map(str::to_owned)
        };
        let recorded_revision = status.and_then(|s| s.target_revision.clone());
        // While a hand edit of the template is kept (reported, or held on request), the
        // rollout still stands on the recorded revision, not the edit's: the pods count
        // against it and the status keeps naming it. Counted against the edit, every pod of
        // a finished rollout would show as not updated.
        let current = match (&seen.drift.drift, &recorded_revision) {
            (Some(_), Some(recorded)) if !seen.template_changed => Some(recorded.clone()),
            _ => current,
        };
        let new_revision = observed && current.is_some() && current != recorded_revision;
        let NodeStates {
            nodes,
            by_revision,
            versions,
            available_wake,
        } = pass.node_states(
            plan,
            self.pods_plan,
            live,
            self.pod_index,
            current.as_deref(),
        );
        let mark = pass.new_mark(
            PROMOTE_ANNOTATION,
            status.and_then(|s| s.promotion.as_deref()),
        );
        let target = match seen.desired {
            Some(_) => plan.target.clone(),
            // A referenced DaemonSet: `fromContainer` reads the live template.
            None => Target {
                version: crate::desired::target_version(&pass.cds.spec.target, live.spec.as_ref())
                    .unwrap_or_default(),
                ..plan.target.clone()
            },
        };
        let position = step_position(status, pass.now);
        let recorded_step = position.map_or(0, |p| p.index);
        let recorded_key = pass.analysis_key(current.as_deref(), recorded_step);
        let (measured, analysis) =
            recorded_step_analysis(pass, plan, &recorded_key, recorded_step, current.as_deref());
        let rolling_back = pass.rolling_back();
        let observation = PodObservation {
            name: pass.ds_name.clone(),
            version: target.version.clone(),
            template_changed: seen.template_changed,
            drift: seen.drift.drift.clone(),
            rollout_observed: observed,
            new_revision,
            desired_pods: u32::try_from(ds_status.desired_number_scheduled).unwrap_or(0),
            nodes,
            promotion: mark.as_deref().map(promotion_asked),
            held: seen.held,
            hold_recorded: seen.hold_recorded,
            retry: seen.retry_mark.is_some(),
            position,
            previous: pass.previous_pass_for(&target),
            analysis,
            rollback: rolling_back,
            health: Some(pass.pods_health_facts(
                plan,
                self.pods_plan,
                live,
                self.pod_index,
                current.as_deref(),
                recorded_step,
            )),
        };
        self.seen = Some(Box::new(PodsSeen {
            observation,
            observed,
            current,
            recorded_revision,
            target,
            by_revision,
            versions,
            mark,
            recorded_key,
            measured,
            // A rollback goes canary first but waits for nobody: its pause steps are left out.
            steps: if rolling_back {
                self.pods_plan.steps.without_pauses()
            } else {
                self.pods_plan.steps.clone()
            },
            analysis: None,
            available_wake,
        }));
        Ok(())
    }

    fn decide(&mut self, pass: &Pass<'_>, plan: &Plan) -> PodDecision {
        let Some(seen) = self.seen.as_mut() else {
            return PodDecision::hold(Phase::Started);
        };
        let decision = decide_pods(&plan.strategy, &seen.steps, &seen.observation);
        let kept = pass.keep_analysis(
            plan.analysis.as_ref(),
            &seen.steps,
            &decision,
            &seen.observation.nodes,
            seen.current.as_deref(),
        );
        seen.analysis = pass.shown_analysis(
            plan.analysis.is_some(),
            kept,
            &seen.recorded_key,
            seen.measured.take().map(|(_, status)| status),
        );
        decision
    }

    fn record(&self, decision: &PodDecision, record: &mut Transition) {
        if let Some(seen) = &self.seen {
            record.target = seen.target.clone();
            record.unhealthy = UnhealthyRecord::of(seen.observation.health.as_ref());
            record.unhealthy_answered = seen
                .observation
                .health
                .as_ref()
                .and_then(|facts| facts.answered)
                .map(|stamp| stamp.0);
        }
        let tally = decision.action.tally;
        record.desired = tally.desired;
        record.updated = tally.updated;
        record.updated_ready = tally.updated_ready;
        // OnDelete: no maxUnavailable to report.
        record.max_unavailable = None;
    }

    async fn act(
        &self,
        pass: &Pass<'_>,
        decision: &PodDecision,
        record: &mut Transition,
    ) -> Result<Acted, Error> {
        let Some(seen) = &self.seen else {
            return Ok(Acted::default());
        };
        let status = pass.status.as_ref();
        let action = &decision.action;
        let promotion = if action.promotion_consumed {
            seen.mark.clone()
        } else {
            status.and_then(|s| s.promotion.clone())
        };
        record.pods = Some(Box::new(PodsRecord {
            step: action.step,
            step_count: seen.steps.len(),
            target_revision: if seen.observed {
                seen.current.clone()
            } else {
                seen.recorded_revision.clone()
            },
            canary_nodes: action.canary_nodes.clone(),
            deferred: action.deferred.clone(),
            failed_nodes: action.failed_nodes.clone(),
            revisions: revision_counts(seen.by_revision.clone(), seen.current.as_deref()),
            promotion,
            tally: action.tally,
            deleted: Vec::new(),
            awaiting_promotion: decision.phase == Phase::Paused
                && matches!(
                    usize::try_from(action.step)
                        .ok()
                        .and_then(|index| seen.steps.steps().get(index)),
                    Some(Step::Pause { duration: None })
                ),
        }));
        record.analysis = seen.analysis.clone().map(Box::new);
        // Delete, in a step the status names.
        pass.record_step_before_deleting(record, decision).await?;
        let deletions = pass.delete_pods(decision, &seen.versions).await;
        if let Some(pods) = record.pods.as_mut() {
            pods.deleted = deletions.deleted;
        }
        Ok(Acted {
            error: deletions.first_error,
            again: deletions.cut_short,
        })
    }

    fn series(&self, decision: &PodDecision, record: &Transition) -> Series {
        // Each step's events are a series of their own: kube's recorder would fold a second
        // `StepStarted` into the first one (same reason, same objects) and keep its note. A
        // rollback's events belong to no step.
        Series {
            pass: format!(
                "{}/{}",
                record
                    .pods
                    .as_ref()
                    .and_then(|p| p.target_revision.clone())
                    .unwrap_or_default(),
                decision.action.step
            ),
            history: String::new(),
        }
    }

    fn requeue(&self, decision: &PodDecision, requeue: &Requeue) -> Duration {
        match decision.phase {
            // The next pass acts at once (the target revision recorded, the steps begin): no
            // watch event would bring it.
            Phase::Started => requeue.conflict,
            Phase::Successful if decision.done => requeue.resync,
            _ => {
                // An updated pod turning available (`minReadySeconds`) brings no event.
                let available = self.seen.as_ref().and_then(|seen| seen.available_wake);
                [decision.action.wake_after, available]
                    .into_iter()
                    .flatten()
                    .fold(requeue.in_progress, Duration::min)
            }
        }
    }

    /// In a pause step, or while the canary's step soaks: the nodes the next nodes step
    /// replaces, exactly, in its order (the state machine's [`pre_pull_nodes`]).
    fn pre_pull_nodes(
        &self,
        _pass: &Pass<'_>,
        plan: &Plan,
        decision: &PodDecision,
    ) -> Option<Vec<String>> {
        let seen = self.seen.as_ref()?;
        pre_pull_nodes(&plan.strategy, &seen.steps, &seen.observation, decision)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A running pod whose containers are ready or not, its `Ready` condition true since
    /// `since` (seconds since the epoch) when given.
    fn pod(ready: bool, since: Option<i64>) -> PodSummary {
        let mut status = serde_json::json!({
            "phase": "Running",
            "containerStatuses": [{"name": "agent", "image": "a", "imageID": "", "restartCount": 0, "ready": ready}]
        });
        if let Some(since) = since {
            // Within the epoch's first day: hours, minutes and seconds say it.
            let at = format!(
                "1970-01-01T{:02}:{:02}:{:02}Z",
                since / 3600,
                since / 60 % 60,
                since % 60
            );
            status["conditions"] = serde_json::json!([
                {"type": "Ready", "status": "True", "lastTransitionTime": at}
            ]);
        }
        let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(
            serde_json::json!({"metadata": {"name": "p"}, "status": status}),
        )
        .unwrap();
        PodSummary::of(&pod)
    }

    /// `minReadySeconds` (issue 50): an updated pod counts as ready once it has been ready that
    /// long, with the seconds left to wake for; an old pod as soon as it is ready. Each row
    /// names its case.
    #[test]
    fn an_updated_pod_counts_as_ready_once_available() {
        const NOW: i64 = 1_000;
        /// A row: its case, the pod, updated, `minReadySeconds`, and (counts, seconds to wake).
        type Row = (&'static str, PodSummary, bool, u64, (bool, Option<u64>));
        let rows: [Row; 7] = [
            (
                "no minReadySeconds: ready",
                pod(true, Some(NOW)),
                true,
                0,
                (true, None),
            ),
            (
                "ready 5 s of 20",
                pod(true, Some(NOW - 5)),
                true,
                20,
                (false, Some(15)),
            ),
            (
                "ready exactly 20 s of 20",
                pod(true, Some(NOW - 20)),
                true,
                20,
                (true, None),
            ),
            (
                "ready 30 s of 20",
                pod(true, Some(NOW - 30)),
                true,
                20,
                (true, None),
            ),
            ("not ready", pod(false, None), true, 20, (false, None)),
            (
                "ready without a Ready time: counted from now",
                pod(true, None),
                true,
                20,
                (false, Some(20)),
            ),
            (
                "an old pod ready 5 s of 20",
                pod(true, Some(NOW - 5)),
                false,
                20,
                (true, None),
            ),
        ];
        for (name, pod, updated, min_ready, expected) in rows {
            assert_eq!(
                counts_ready(&pod, updated, min_ready, NOW),
                expected,
                "{name}"
            );
        }
    }
}
