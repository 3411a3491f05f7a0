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

use canary_analysis::{AnalysisRun, RunKey, RunReporting};
use canary_predicates::{
    Labels, OwnerMatch, PodFacts, PodSummary, Target, available_pods, current_revision_hash,
    label_selector_matches, pod_crash_loop, pod_is_owned_by, pod_is_ready,
};
use canary_state_machine::{
    AnalysisVerdict, DriftSeen, NodeHealth, NodeState, Phase, PodDecision, PodObservation,
    PodState, Step, StepAnalysis, StepPlan, TemplateValues, decide_pods,
};
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Preconditions};
use kube::runtime::controller::Action;
use tracing::{debug, info, warn};

use super::plan::{Plan, PodsPlan};
use super::{Pass, describe_api_error, describe_drift, unrecorded_start};
use crate::Error;
use crate::crd::{AnalysisStatus, PROMOTE_ANNOTATION, hold_requested, promotion_asked};
use crate::desired::live_template_hash;
use crate::index::OwnerIndex;
use crate::meta::object_meta_modified;
use crate::observer::{PodsRecord, Report, Transition, WriteOutcome};
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
            return self.invalid_spec(message).await;
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

    /// Observe, decide, write the template (own DaemonSets only), delete, report.
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
        let status = self.status.as_ref();
        let uid = live.metadata.uid.clone().unwrap_or_default();
        let generation = live.metadata.generation.unwrap_or_default();
        let ds_status = live.status.clone().unwrap_or_default();
        let observed = ds_status
            .observed_generation
            .is_some_and(|g| g >= generation);
        let current = {
            let revisions = revisions.get(&uid);
            current_revision_hash(revisions.iter().map(|r| &**r)).map(str::to_owned)
        };
        let target = status.and_then(|s| s.target_revision.clone());

        let live_hash = live_template_hash(live)?;
        let rollback_revision_live = self.live_is_rollback_revision(&live_hash);
        let written_hash = status.and_then(|s| s.daemon_set_template_hash.clone());
        // Our own write whose record a lost status write or an ended term dropped is no
        // drift: recorded now (see `WriteLedger`); nor is a rollback's write, by any process,
        // of the exact revision it goes back to, nor the start of the current target (or an
        // undo) whose record a replaced leader lost (`unrecorded_start`).
        let own_unrecorded = written_hash
            .as_ref()
            .is_some_and(|written| *written != live_hash)
            && (self.ctx.memory.live_is_own_write(self.cds, live)
                || rollback_revision_live
                || match (&desired, status) {
                    (Some(desired), Some(status)) => {
                        unrecorded_start(live, desired, status, &plan.target)
                    }
                    _ => false,
                });
        let (template_changed, drift) = match &desired {
            Some(desired) => {
                let drift = match (&written_hash, status) {
                    (Some(written), Some(status)) if *written != live_hash && !own_unrecorded => {
                        Some(DriftSeen {
                            what: describe_drift(live, desired, status),
                        })
                    }
                    _ => None,
                };
                (
                    object_meta_modified(&desired.metadata, &live.metadata),
                    drift,
                )
            }
            None => (false, None),
        };
        // While a hand edit of the template is kept (reported, or held on request), the
        // rollout still stands on the recorded revision, not the edit's: the pods count
        // against it and the status keeps naming it. Counted against the edit, every pod of
        // a finished rollout would show as not updated.
        let current = match (&drift, &target) {
            (Some(_), Some(recorded)) if !template_changed => Some(recorded.clone()),
            _ => current,
        };
        let new_revision = observed && current.is_some() && current != target;
        let (nodes, by_revision, versions) =
            self.node_states(plan, pods_plan, live, pod_index, current.as_deref());
        let mark = self.new_mark(
            PROMOTE_ANNOTATION,
            status.and_then(|s| s.promotion.as_deref()),
        );
        let promotion = mark.as_deref().map(promotion_asked);
        let held = hold_requested(self.cds);
        let retry_mark = self.new_retry_mark();
        let retry = retry_mark.is_some();
        let hold_recorded = status.is_some_and(|s| s.held == Some(true));
        let rollout_target = match &desired {
            Some(_) => plan.target.clone(),
            // A referenced DaemonSet: `fromContainer` reads the live template.
            None => Target {
                version: crate::desired::target_version(&self.cds.spec.target, live.spec.as_ref())
                    .unwrap_or_default(),
                ..plan.target.clone()
            },
        };
        let position = step_position(status, self.now);
        let recorded_step = position.map_or(0, |p| p.index);
        let recorded_key = self.analysis_key(current.as_deref(), recorded_step);
        // The measurements so far of the analysed step the previous pass left the rollout in.
        let measured = pods_plan
            .analysis
            .as_ref()
            .and_then(|_| self.ctx.memory.analysis_snapshot(self.cds, &recorded_key));
        let analysis = pods_plan.analysis.as_ref().map(|_| {
            let verdict = measured
                .as_ref()
                .map_or(AnalysisVerdict::Pending, |(verdict, _)| verdict.clone());
            let announced = status.and_then(|s| s.analysis.as_ref()).is_some_and(|a| {
                a.step == recorded_step
                    && a.revision.as_deref() == current.as_deref()
                    && a.verdict == verdict.as_str()
            });
            StepAnalysis {
                step: recorded_step,
                verdict,
                announced,
            }
        });
        let rolling_back = self.rolling_back();
        let observation = PodObservation {
            name: self.ds_name.clone(),
            version: rollout_target.version.clone(),
            template_changed,
            drift,
            rollout_observed: observed,
            new_revision,
            desired_pods: u32::try_from(ds_status.desired_number_scheduled).unwrap_or(0),
            nodes,
            promotion,
            held,
            hold_recorded,
            retry,
            position,
            previous: self.previous_pass_for(&rollout_target),
            analysis,
            rollback: rolling_back,
        };
        // A rollback goes canary first but waits for nobody: its pause steps are left out.
        let rollback_steps = rolling_back.then(|| pods_plan.steps.without_pauses());
        let steps = rollback_steps.as_ref().unwrap_or(&pods_plan.steps);
        let mut decision = decide_pods(&plan.strategy, steps, &observation);
        tracing::debug!(ds = %self.ds_name, ?decision, "decided (pods)");
        let kept = self.keep_analysis(
            pods_plan,
            steps,
            &decision,
            &observation.nodes,
            current.as_deref(),
        );
        let analysis_status = self.shown_analysis(
            pods_plan,
            kept,
            &recorded_key,
            measured.map(|(_, status)| status),
        );

        let mut record = Transition {
            target: rollout_target,
            desired: decision.tally.desired,
            updated: decision.tally.updated,
            updated_ready: decision.tally.updated_ready,
            available: available_pods(live),
            // OnDelete: no maxUnavailable to report.
            max_unavailable: None,
            recorded_generation: status.and_then(|s| s.recorded_daemon_set_generation),
            drift: decision
                .drifted
                .then(|| observation.drift.as_ref().map(|d| d.what.clone()))
                .flatten(),
            template_hash: (desired.is_some() && (written_hash.is_none() || own_unrecorded))
                .then(|| live_hash.clone()),
            ..self.blank_record()
        };

        // Write the template (the controller's own DaemonSet only).
        if let (Some(write), Some(desired)) = (decision.write, &desired) {
            match self.patch(live, desired).await {
                Ok(patched) => {
                    self.report_write(write.kind, WriteOutcome::Ok);
                    self.ctx.memory.remember_write(self.cds, &patched, true);
                    record.write = Some(write.kind);
                    record.template_hash = Some(live_template_hash(&patched)?);
                    self.note_rollout_started(desired, &record.target.version)
                        .await;
                    info!(namespace = %self.namespace, name = %self.cds.name_any(), ds = %self.ds_name, kind = write.kind.as_str(), "daemonSet written (OnDelete)");
                }
                Err(error) if error.is_conflict() => {
                    self.report_write(write.kind, WriteOutcome::Conflict);
                    return Err(error);
                }
                Err(error) => {
                    self.report_write(write.kind, WriteOutcome::Rejected);
                    decision = decision.write_failed(
                        &plan.strategy,
                        &self.ds_name,
                        &describe_api_error(&error),
                    );
                }
            }
        }

        let promotion = if decision.promotion_consumed {
            mark
        } else {
            status.and_then(|s| s.promotion.clone())
        };
        record.to = decision.phase;
        record.failure = decision.failure;
        record.message = decision.error.clone();
        record.held = decision.held;
        // Acted on whatever the phase: an old mark never retries a later failure.
        if retry_mark.is_some() {
            record.retry = retry_mark;
        }
        record.pods = Some(Box::new(PodsRecord {
            step: decision.step,
            step_count: steps.len(),
            target_revision: if observed { current.clone() } else { target },
            canary_nodes: decision.canary_nodes.clone(),
            deferred: decision.deferred.clone(),
            failed_nodes: decision.failed_nodes.clone(),
            revisions: revision_counts(by_revision, current.as_deref()),
            promotion,
            tally: decision.tally,
            deleted: Vec::new(),
            analysis: analysis_status,
        }));

        // Delete, in a step the status names.
        self.record_step_before_deleting(&record, &decision).await?;
        let deletions = self.delete_pods(&decision, &versions).await;
        if let Some(pods) = record.pods.as_mut() {
            pods.deleted = deletions.deleted;
        }
        let action = self.finish_pods(record, &decision).await?;
        match deletions.first_error {
            Some(error) => Err(error),
            // The rest of the deletions, decided again from what the cluster and the object
            // say now.
            None if deletions.cut_short => Ok(Action::requeue(std::time::Duration::ZERO)),
            None => Ok(action),
        }
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
        pods_plan: &PodsPlan,
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
            (None, None) if pods_plan.analysis.is_some() => {
                self.status.as_ref().and_then(|s| s.analysis.clone())
            }
            (None, None) => None,
        }
    }

    /// Which measurements an analysis of `step` of the rollout toward `revision` takes.
    fn analysis_key(&self, revision: Option<&str>, step: u32) -> RunKey {
        RunKey {
            revision: revision.unwrap_or_default().to_owned(),
            step,
            generation: self.cds.metadata.generation.unwrap_or_default(),
        }
    }

    /// Keeps an analysis run measuring the pause step the decision leaves the rollout in, or
    /// stops the one that runs when it leaves no analysed pause (a nodes step, a failure, a
    /// rollback, which has no pause). Returns the key of the run kept.
    fn keep_analysis(
        &self,
        pods_plan: &PodsPlan,
        steps: &StepPlan,
        decision: &PodDecision,
        nodes: &[NodeState],
        revision: Option<&str>,
    ) -> Option<RunKey> {
        let Some(plan) = pods_plan.analysis.as_ref() else {
            self.ctx.memory.stop_analysis(self.cds);
            return None;
        };
        let in_pause = matches!(
            steps.steps().get(decision.step as usize),
            Some(Step::Pause { .. })
        );
        let measuring = in_pause && decision.phase == Phase::Paused && revision.is_some();
        if !measuring {
            self.ctx.memory.stop_analysis(self.cds);
            return None;
        }
        let key = self.analysis_key(revision, decision.step);
        let values = TemplateValues {
            nodes: nodes
                .iter()
                .filter(|node| node.pod.as_ref().is_some_and(|pod| pod.updated))
                .map(|node| node.name.clone())
                .collect(),
            baseline_nodes: nodes
                .iter()
                .filter(|node| node.pod.as_ref().is_some_and(|pod| !pod.updated))
                .map(|node| node.name.clone())
                .collect(),
            pods: nodes
                .iter()
                .filter_map(|node| node.pod.as_ref().filter(|pod| pod.updated))
                .map(|pod| pod.name.clone())
                .collect(),
            namespace: self.namespace.clone(),
            daemon_set: self.ds_name.clone(),
            revision: revision.unwrap_or_default().to_owned(),
        };
        let start = |key: RunKey, values: TemplateValues| {
            info!(namespace = %self.namespace, name = %self.cds.name_any(), step = key.step, revision = %key.revision, "analysis started");
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
        self.ctx
            .memory
            .keep_analysis(self.cds, key.clone(), values, start);
        Some(key)
    }

    /// The nodes with a pod of `live` (or being replaced), as the state machine sees them, and
    /// `(pods, ready)` per revision.
    fn node_states(
        &self,
        plan: &Plan,
        pods_plan: &PodsPlan,
        live: &DaemonSet,
        pod_index: &OwnerIndex<PodSummary>,
        current: Option<&str>,
    ) -> (Vec<NodeState>, BTreeMap<String, (u32, u32)>, PodVersions) {
        let uid = live.metadata.uid.clone().unwrap_or_default();
        let owner = OwnerMatch::Uid {
            name: &self.ds_name,
            uid: &uid,
        };
        let mut by_node: BTreeMap<String, Option<PodState>> = BTreeMap::new();
        let mut by_revision: BTreeMap<String, (u32, u32)> = BTreeMap::new();
        let mut versions = PodVersions::new();
        // This driver reads every pod's facts, not the counts: any change of them must trigger.
        pod_index.forget_counts(&self.ds_name);
        pod_index.with_group(&self.ds_name, |pods| {
            for pod in pods.filter(|pod| pod_is_owned_by(&***pod, &owner)) {
                let Some(node) = pod.node_name() else {
                    continue; // Not scheduled yet: it has no node to count on.
                };
                let slot = by_node.entry(node.to_owned()).or_default();
                if pod.is_terminating() {
                    continue; // The node is being replaced: an entry without a pod.
                }
                let ready = pod_is_ready(&**pod);
                let revision = pod.revision_hash().unwrap_or_default();
                let counts = by_revision.entry(revision.to_owned()).or_default();
                counts.0 += 1;
                counts.1 += u32::from(ready);
                let updated = current.is_some_and(|c| c == revision);
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
        (nodes, by_revision, versions)
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
        if decision.delete.is_empty() {
            return Ok(());
        }
        let previous = self.status.as_ref();
        let ahead = self.ahead_of_deletions(record);
        let status = next_status(previous, &ahead, self.now);
        let named = |s: &crate::crd::CanaryDaemonSetStatus| {
            (
                s.phase.clone(),
                s.current_step_index,
                s.target_revision.clone(),
            )
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
        for deletion in &decision.delete {
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
                    info!(namespace = %self.namespace, name = %self.cds.name_any(), ds = %self.ds_name, pod = %deletion.pod, node = %deletion.node, step = decision.step, "pod deleted");
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

    /// Status, events and the next requeue of a Pods-driver pass.
    async fn finish_pods(
        &self,
        record: Transition,
        decision: &PodDecision,
    ) -> Result<Action, Error> {
        let drift = record.drift.clone();
        // Each step's events are a series of their own: kube's recorder would fold a second
        // `StepStarted` into the first one (same reason, same objects) and keep its note.
        let series = format!(
            "{}/{}",
            record
                .pods
                .as_ref()
                .and_then(|p| p.target_revision.clone())
                .unwrap_or_default(),
            decision.step
        );
        let history = self.write_status(record).await?;
        self.publish_events(decision.events.iter(), drift, &series)
            .await;
        // Not in the step's series: a rollback's events belong to no step.
        self.publish_events(history.events.iter(), None, "").await;
        Ok(self.next_pass(
            history.act_again,
            decision.phase,
            decision.failure,
            |requeue| match decision.phase {
                // The next pass acts at once (the target revision recorded, the steps begin):
                // no watch event would bring it.
                Phase::Started => requeue.conflict,
                Phase::Successful if decision.done => requeue.resync,
                _ => decision
                    .wake_after
                    .map_or(requeue.in_progress, |wake| wake.min(requeue.in_progress)),
            },
        ))
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
