//! One reconcile pass of one `CanaryDaemonSet` (spec sections 3 to 7): read, decide, write.
//!
//! Read the cached DaemonSet and the indexed pods, build the desired DaemonSet (`plan`),
//! observe (`canary_predicates::observe_daemon_set`), ask the state machine, then apply its decision: at most one
//! DaemonSet write (create, or the reference JSON Patch guarded by a `test` on the generation),
//! then one status write if the status changed, then the event. The pass's typed record, a
//! [`Transition`], is what the status is computed from and what the observer reports.
//!
//! Submodules: `context` (what every pass shares, the error policy), `plan` (spec → settings),
//! `memory` (what the controller remembers between passes), `pods` (the Pods driver's pass),
//! `drift` (whose a live DaemonSet is and what a hand edit changed), `report` (status, event,
//! requeue).

mod analysis;
mod context;
mod drift;
mod health;
mod history;
mod max_unavailable;
mod memory;
mod pass;
mod plan;
pub(crate) use memory::WriteLedger;
mod pods;
mod pre_pull;
mod report;

pub use context::{Caches, Context, Requeue, error_policy};
pub use plan::step_plan;
pub use pre_pull::{NO_SUCH_COMMAND, PRE_PULL_IMAGES_ANNOTATION, PRE_PULL_LABEL};

use std::sync::Arc;

use canary_predicates::{Target, live_max_unavailable};
use canary_state_machine::{
    ConditionReason, Decision, FailureReason, Phase, WriteKind, decide_create,
};
use k8s_openapi::api::apps::v1::DaemonSet;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType as KubeEventType;
use kube::runtime::reflector::ObjectRef;
use tracing::{info, warn};

use crate::Error;
use crate::claim::{self, ClaimState};
use crate::crd::{CanaryDaemonSet, CanaryDaemonSetStatus};
use crate::desired::{desired_daemon_set, live_template_hash, set_max_unavailable};
use crate::meta::object_meta_modified;
use crate::observer::{Report, Transition, WriteOutcome};
use crate::patch::daemon_set_patch;
use crate::status::recorded_target;
use drift::{Controller, controller_of};
use plan::{DriverPlan, Plan, plan};

/// Whether a pass can act on the spec of `cds`, or the message of the `InvalidSpec` it would
/// report: the verdict of the pass's (private) plan, which checks everything the CRD's schema
/// and CEL rules check, and more.
///
/// Public for the fuzz targets (`fuzz/`), which reach every input parser through public
/// functions; the plan itself stays private, its shape is the pass's business.
pub fn check_spec(cds: &CanaryDaemonSet) -> Result<(), String> {
    plan(cds).map(|_| ())
}

/// How often an object refused with `DaemonSetClaimed` looks again whether the claim passed
/// on (its holder's deletion or change is no event of this object).
const CLAIM_RECHECK: std::time::Duration = std::time::Duration::from_secs(10);

/// One reconcile pass.
pub async fn reconcile(cds: Arc<CanaryDaemonSet>, ctx: Arc<Context>) -> Result<Action, Error> {
    // Wall-clock time: the pass's real cost, also under a paused tokio clock.
    let started = std::time::Instant::now();
    let result = reconcile_pass(&cds, &ctx).await;
    ctx.observer.report(Report::Reconciled {
        took: started.elapsed(),
        error: result.as_ref().err().map(Error::metric_label),
    });
    result
}

async fn reconcile_pass(cds: &CanaryDaemonSet, ctx: &Context) -> Result<Action, Error> {
    let _pass = ctx.health.pass_started();
    if !ctx.caches.ready() {
        return Ok(Action::requeue(ctx.requeue.conflict));
    }
    let pass = Pass::new(cds, ctx)?;
    let action = pass.run().await?;
    if !pass
        .rollback_started
        .load(std::sync::atomic::Ordering::Relaxed)
    {
        return Ok(action);
    }
    // The pass decided to go back before it wrote anything, and recorded it: the revision's
    // template is written now, by a pass that reads the status just written, not one requeue
    // later. Once: the marks are acted on, and no rollback starts from a rollback.
    Pass::new(cds, ctx)?.run().await
}

/// State of one pass.
struct Pass<'a> {
    cds: &'a CanaryDaemonSet,
    ctx: &'a Context,
    namespace: String,
    ds_name: String,
    now: k8s_openapi::jiff::Timestamp,
    status: Option<CanaryDaemonSetStatus>,
    status_persisted: bool,
    history: history::PassHistory,
    /// The pass started a rollback (decided before any write, recorded with its status).
    rollback_started: std::sync::atomic::AtomicBool,
}

impl<'a> Pass<'a> {
    fn new(cds: &'a CanaryDaemonSet, ctx: &'a Context) -> Result<Self, Error> {
        let (status, status_persisted) = ctx.memory.status_of(cds);
        Ok(Self {
            cds,
            ctx,
            namespace: cds
                .namespace()
                .ok_or(Error::MissingField("metadata.namespace"))?,
            ds_name: cds.daemon_set_name(),
            now: ctx.clock.now(),
            history: history::PassHistory::new(status.as_ref().and_then(|s| s.history.clone())),
            status,
            status_persisted,
            rollback_started: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// The owned DaemonSet's key in the cache.
    fn ds_ref(&self) -> ObjectRef<DaemonSet> {
        ObjectRef::new(&self.ds_name).within(&self.namespace)
    }

    /// The record of this pass with nothing observed yet: the previous counts carried over.
    fn record<A>(&self, decision: &Decision<A>) -> Transition {
        let previous = self.status.as_ref();
        Transition {
            namespace: self.namespace.clone(),
            name: self.cds.name_any(),
            daemon_set: self.ds_name.clone(),
            // The target a pass that cannot read the spec leaves is the last one known.
            target: recorded_target(previous),
            from: previous.and_then(|s| s.phase),
            to: decision.phase,
            failure: decision.failure,
            message: decision.error.clone(),
            write: None,
            desired: previous.map_or(0, |s| s.desired),
            updated: previous.map_or(0, |s| s.updated),
            updated_ready: previous.map_or(0, |s| s.updated_ready),
            available: previous.map_or(0, |s| s.desired),
            max_unavailable: None,
            observed_generation: self.cds.metadata.generation,
            recorded_generation: previous.and_then(|s| s.recorded_daemon_set_generation),
            drift: None,
            pre_pull: crate::observer::PrePullStanding::Unknown,
            template_hash: None,
            phase_started_at: self.now,
            pods: None,
            history: None,
            retry: previous.and_then(|s| s.retry.clone()),
            held: previous.and_then(|s| s.held) == Some(true),
            unhealthy: None,
            analysis: None,
            unhealthy_answered: previous
                .and_then(|s| s.unhealthy_answered.as_ref())
                .map(|t| t.0.as_second()),
            downtime: Default::default(),
            at: self.now,
        }
    }

    /// The retry mark on the object (`canary.daemonset.dev/retry`, the `retry` verb) when it
    /// is new, i.e. not the one the status records as acted on.
    fn new_retry_mark(&self) -> Option<String> {
        let recorded = self.status.as_ref().and_then(|s| s.retry.as_deref());
        self.new_mark(crate::crd::RETRY_ANNOTATION, recorded)
    }

    /// The value of the mark annotation `key` (a verb's) when it is set, not empty and not
    /// `recorded`, the value the status records as acted on: each mark is acted on once.
    fn new_mark(&self, key: &str, recorded: Option<&str>) -> Option<String> {
        self.cds
            .annotations()
            .get(key)
            .filter(|value| !value.is_empty() && recorded != Some(value.as_str()))
            .cloned()
    }

    /// `plan`, when its analysis address (if any) is one the administrator allows; the
    /// `InvalidSpec` message, naming the flag, otherwise: no query (and no Secret) is sent to an
    /// address not allowed.
    fn allowed_analysis(&self, plan: Plan) -> Result<Plan, String> {
        if let Some(analysis) = &plan.analysis {
            self.ctx
                .allowed_analysis_addresses
                .check(&analysis.source.address)
                .map_err(|e| format!("spec.analysis.prometheus.address: {e}"))?;
        }
        Ok(plan)
    }

    async fn run(&self) -> Result<Action, Error> {
        // Read.
        let mut plan = match plan(self.cds).and_then(|plan| self.allowed_analysis(plan)) {
            Ok(plan) => plan,
            Err(message) => {
                self.ctx.memory.stop_analysis(self.cds);
                return self.invalid_spec(message).await;
            }
        };
        // A spec without analysis (removed) measures nothing any more.
        if plan.analysis.is_none() {
            self.ctx.memory.stop_analysis(self.cds);
        }
        if let DriverPlan::Pods(pods) = &plan.driver
            && let Some(workload) = &pods.workload
        {
            return self.run_workload(&plan, pods, workload).await;
        }
        self.ctx
            .caches
            .workloads
            .release(&ObjectRef::from_obj(self.cds));
        let mut desired = desired_daemon_set(self.cds, &plan.keys, &plan.target)?;
        if let Some(rollback) = self.rollback_in_force(&desired)? {
            if !self.status_persisted
                && let Some(status) = &self.status
            {
                // Recorded before it is acted on: a leader that takes over from the stored
                // status must know the rollback, or it would roll the spec's template out again.
                self.patch_status(status).await?;
            }
            // Going back: the revision's template is desired, and its pods are the updated ones.
            match self.rollback_desired(&rollback).await? {
                Ok(revision) => {
                    plan.target = Target::of_daemon_set(&revision, &plan.keys);
                    desired = revision;
                }
                Err(message) => return self.invalid_spec(message).await,
            }
        }
        let Some(live) = self.ctx.caches.daemon_sets.get(&self.ds_ref()) else {
            if self.ctx.memory.create_in_flight(self.cds, &self.ds_name) {
                // Ours, or known to exist: the watch has not delivered it yet.
                return Ok(Action::requeue(self.ctx.requeue.conflict));
            }
            return self.create(&plan, desired).await;
        };
        self.ctx.memory.forget_created(self.cds);
        if live.metadata.deletion_timestamp.is_some() {
            return Ok(Action::requeue(self.ctx.requeue.conflict));
        }
        match controller_of(&live, self.cds) {
            Controller::Us => {}
            // Another CanaryDaemonSet created it: it holds the claim (DaemonSetClaimed, below).
            Controller::Other { kind, .. } if kind == "CanaryDaemonSet" => {}
            Controller::Other { kind, name } => {
                let message = format!(
                    "DaemonSet {} is controlled by {kind} {name}, not by this CanaryDaemonSet",
                    self.ds_name
                );
                return self.invalid_spec(message).await;
            }
            // Adopting rewrites the DaemonSet's template: kube-proxy or a Helm-managed CNI in
            // the same namespace must not be taken over by whoever can create this resource.
            Controller::Nobody if !self.cds.spec.adopt => {
                let message = format!(
                    "DaemonSet {} already exists and no controller owns it; set spec.adopt: true to let this CanaryDaemonSet take it over (its template and update strategy will be replaced by spec.template), or choose another spec.daemonSetName",
                    self.ds_name
                );
                return self.invalid_spec(message).await;
            }
            Controller::Nobody => {}
        }
        // Only now: a DaemonSet this object may not take (no spec.adopt) gets no claim written.
        if let Some(refused) = self.claimed_by_another(&live).await {
            return refused;
        }
        if self.ctx.memory.cache_behind(self.cds, &live) {
            // Our own last write is not in the cache yet: deciding now would redo it.
            return Ok(Action::requeue(self.ctx.requeue.conflict));
        }
        if !object_meta_modified(&desired.metadata, &live.metadata) {
            self.catch_up_history(&desired, &plan.target.version).await;
        }
        match &plan.driver {
            DriverPlan::Pods(pods) => {
                let revisions = self.ctx.caches.revisions.clone();
                let pod_index = self.ctx.caches.pods.clone();
                self.run_pods(&plan, pods, &live, Some(desired), &pod_index, &revisions)
                    .await
            }
            DriverPlan::MaxUnavailable => {
                let tls = match &plan.tls {
                    Some(cfg) => match tls_facts(&live, &mut desired, cfg) {
                        Ok(facts) => Some(facts),
                        Err(message) => return self.invalid_spec(message).await,
                    },
                    None => None,
                };
                let driver = max_unavailable::Steer::new(tls);
                self.drive(&plan, &live, Some(desired), driver).await
            }
        }
    }

    /// Create path (spec section 3 step 2).
    async fn create(&self, plan: &Plan, mut desired: DaemonSet) -> Result<Action, Error> {
        let decision = decide_create(&plan.strategy, &self.ds_name, &plan.target.version);
        let (decision, going_back) = self.go_back(decision).await;
        if let Some(cfg) = &plan.tls
            && let Err(e) = canary_tls_migration::prepare_for_create(&mut desired, cfg)
        {
            return self.invalid_spec(format!("TLS migration: {e}")).await;
        }
        let max = match plan.driver {
            // `desired` is OnDelete already: the Pods driver never sets a maxUnavailable.
            DriverPlan::Pods(_) => None,
            DriverPlan::MaxUnavailable => decision.write.and_then(|w| w.max_unavailable),
        };
        let remembered = desired.clone();
        if let Some(max) = max {
            set_max_unavailable(&mut desired, max, plan.rolling_update_write());
        }
        let mut record = Transition {
            target: plan.target.clone(),
            desired: 0,
            updated: 0,
            updated_ready: 0,
            available: 0,
            recorded_generation: None,
            max_unavailable: max.map(|m| m.to_live()),
            ..self.record(&decision)
        };
        let api: Api<DaemonSet> = Api::namespaced(self.ctx.client.clone(), &self.namespace);
        let params = PostParams {
            field_manager: Some(self.ctx.field_manager.clone()),
            ..PostParams::default()
        };
        let decision = match decision.write.map(|_| api.create(&params, &desired)) {
            // A rollback decided instead: the revision's template is created next.
            None => decision,
            Some(created) => match created.await {
                Ok(created) => {
                    self.report_write(WriteKind::Create, WriteOutcome::Ok);
                    self.ctx.memory.note_created(self.cds, &self.ds_name);
                    self.ctx.memory.remember_write(self.cds, &created, true);
                    record.write = Some(WriteKind::Create);
                    record.template_hash = Some(live_template_hash(&created)?);
                    if decision.action.record_generation {
                        record.recorded_generation = created.metadata.generation;
                    }
                    self.note_rollout_started(&remembered, &plan.target.version)
                        .await;
                    info!(namespace = %self.namespace, name = %self.cds.name_any(), ds = %self.ds_name, "daemonSet created");
                    decision
                }
                // Created meanwhile (or our cache is behind): come back once the watch has it.
                Err(kube::Error::Api(status)) if status.is_already_exists() => {
                    self.report_write(WriteKind::Create, WriteOutcome::Conflict);
                    self.ctx.memory.note_created(self.cds, &self.ds_name);
                    return Err(Error::Conflict {
                        what: format!("daemonset {}", self.ds_name),
                        message: status.message,
                    });
                }
                Err(error) => {
                    let error = Error::from(error);
                    self.report_write(WriteKind::Create, WriteOutcome::Rejected);
                    decision.write_failed(
                        &plan.strategy,
                        &self.ds_name,
                        &describe_api_error(&error),
                    )
                }
            },
        };
        record.to = decision.phase;
        record.failure = decision.failure;
        record.message = decision.error.clone();
        let series = report::Series::of_target(&record.target);
        self.record_pass(record, &decision, going_back, &series, None, |requeue| {
            requeue.in_progress
        })
        .await
    }

    async fn patch(&self, live: &DaemonSet, desired: &DaemonSet) -> Result<DaemonSet, Error> {
        let patch = daemon_set_patch(live, desired)?;
        let api: Api<DaemonSet> = Api::namespaced(self.ctx.client.clone(), &self.namespace);
        let params = PatchParams {
            field_manager: Some(self.ctx.field_manager.clone()),
            ..PatchParams::default()
        };
        let conflict = |message: String| Error::Conflict {
            what: format!("daemonset {}", self.ds_name),
            message,
        };
        match api
            .patch(&self.ds_name, &params, &Patch::Json::<()>(patch))
            .await
        {
            Ok(ds) => Ok(ds),
            // A concurrent write.
            Err(kube::Error::Api(status)) if status.is_conflict() => Err(conflict(status.message)),
            // 422 is a failed `test` op when our cache was stale (the generation moved), and a
            // refused change otherwise (an immutable selector, an invalid template): only the
            // server's current generation tells them apart (the Status does not).
            Err(kube::Error::Api(status)) if status.code == 422 => {
                let current = api.get_opt(&self.ds_name).await?;
                let tested = live.metadata.generation;
                match current {
                    Some(current) if current.metadata.generation == tested => {
                        Err(kube::Error::Api(status).into())
                    }
                    _ => Err(conflict(status.message)),
                }
            }
            Err(error) => Err(error.into()),
        }
    }

    fn report_write(&self, kind: WriteKind, outcome: WriteOutcome) {
        self.ctx
            .observer
            .report(Report::DaemonSetWrite { kind, outcome });
    }

    /// A spec the controller cannot act on: Degraded, one Warning event, no requeue until the
    /// spec changes.
    async fn invalid_spec(&self, message: String) -> Result<Action, Error> {
        self.refuse(FailureReason::InvalidSpec, message).await?;
        Ok(Action::await_change())
    }

    /// Reports that the DaemonSet `spec.workloadRef` names does not exist (yet): no phase
    /// (`pending`) and the message ([`crate::status::awaiting_workload_status`]), one Normal
    /// event; nothing else is written. Not a failure: a GitOps sync wave may create the
    /// CanaryDaemonSet before its DaemonSet. The DaemonSet watch brings every referrer back
    /// when the DaemonSet appears.
    async fn await_workload(&self, message: String) -> Result<Action, Error> {
        let generation = self.cds.metadata.generation.unwrap_or_default();
        let status = crate::status::awaiting_workload_status(
            self.status.as_ref(),
            &self.ds_name,
            message.clone(),
            generation,
            self.now,
        );
        if self.status.as_ref() != Some(&status) || !self.status_persisted {
            self.patch_status(&status).await?;
            if self.status.as_ref().is_some_and(|s| s.phase.is_some()) {
                self.ctx.observer.report(Report::Unphased {
                    namespace: self.namespace.clone(),
                    name: self.cds.name_any(),
                });
            }
            self.publish(
                KubeEventType::Normal,
                ConditionReason::WaitingForDaemonSet.as_str(),
                message,
                false,
                "",
            )
            .await;
        }
        Ok(Action::await_change())
    }

    /// `Some(refusal)` when another CanaryDaemonSet holds `live` ([`crate::claim`]): this
    /// object fails with `DaemonSetClaimed` and writes or deletes nothing; it looks again
    /// every [`CLAIM_RECHECK`] (the holder's deletion is no event of this object).
    /// `None` when this object holds it, or may take it: then a DaemonSet someone else owns
    /// (`spec.workloadRef`) gets this object's claim written first.
    async fn claimed_by_another(&self, live: &DaemonSet) -> Option<Result<Action, Error>> {
        let store = &self.ctx.caches.canary_daemon_sets;
        let lookup = |namespace: &str, name: &str| {
            store.get(&ObjectRef::<CanaryDaemonSet>::new(name).within(namespace))
        };
        let state = match claim::claim_state(live, self.cds, lookup) {
            // The cache may not have listed the holder yet (a new leader's first passes): only
            // the API server's word hands a claim over.
            ClaimState::Stale(holder) => match self.holder_alive(&holder, live).await {
                Ok(true) => ClaimState::Other(holder),
                Ok(false) => ClaimState::Free,
                Err(error) => return Some(Err(error)),
            },
            state => state,
        };
        match state {
            ClaimState::Ours => None,
            ClaimState::Stale(_) => None,
            ClaimState::Other(holder) => {
                let message = format!(
                    "DaemonSet {} is driven by {holder}, which claimed it first: this CanaryDaemonSet writes and deletes nothing until that one is deleted or stops naming it",
                    self.ds_name
                );
                Some(
                    self.refuse(FailureReason::DaemonSetClaimed, message)
                        .await
                        .map(|()| Action::requeue(CLAIM_RECHECK)),
                )
            }
            // A DaemonSet this controller creates is claimed by its owner reference; one it
            // adopts (spec.adopt) or that someone else owns gets the annotation.
            ClaimState::Free => self.claim(live).await.err().map(Err),
        }
    }

    /// Whether `holder`, read from the API server, still holds its claim on `live`.
    async fn holder_alive(
        &self,
        holder: &claim::Claimant,
        live: &DaemonSet,
    ) -> Result<bool, Error> {
        let api = crate::crd::dynamic_api(&self.ctx.client, Some(&holder.namespace));
        let Some(object) = api.get_opt(&holder.name).await? else {
            return Ok(false);
        };
        // Undecodable (a spec this version cannot read): its claim holds, as it may drive.
        let Ok(found) = serde_json::from_value::<CanaryDaemonSet>(
            serde_json::to_value(&object).unwrap_or_default(),
        ) else {
            return Ok(object.metadata.uid.as_deref() == Some(holder.uid.as_str()));
        };
        Ok(claim::holds(&found, holder, live))
    }

    /// Writes this object's claim on `live`, only if `live` is unchanged since it was read: a
    /// claim written meanwhile by another makes this a conflict, and the next pass sees it.
    async fn claim(&self, live: &DaemonSet) -> Result<(), Error> {
        let claimant = claim::Claimant::of(self.cds);
        let api: Api<DaemonSet> = Api::namespaced(self.ctx.client.clone(), &self.namespace);
        let params = PatchParams {
            field_manager: Some(self.ctx.field_manager.clone()),
            ..PatchParams::default()
        };
        let patch = claim::claim_patch(live, &claimant);
        match api
            .patch(&self.ds_name, &params, &Patch::Json::<()>(patch))
            .await
        {
            Ok(_) => {
                info!(namespace = %self.namespace, name = %self.cds.name_any(), ds = %self.ds_name, "claimed the DaemonSet");
                Ok(())
            }
            // 409, or 422 from the failed `test` of the resourceVersion: it changed under us.
            Err(kube::Error::Api(status)) if status.is_conflict() || status.code == 422 => {
                Err(Error::Conflict {
                    what: format!("the claim of daemonset {}", self.ds_name),
                    message: status.message,
                })
            }
            Err(error) => Err(error.into()),
        }
    }

    /// Reports the object failed with `reason` and `message` (status and one event), and
    /// writes nothing else.
    async fn refuse(&self, reason: FailureReason, message: String) -> Result<(), Error> {
        let generation = self.cds.metadata.generation.unwrap_or_default();
        if self
            .ctx
            .memory
            .first_invalid(self.cds, generation, &message)
        {
            // `detail`, not `message`: that is the line's own text (a JSON line would carry
            // two `message` keys).
            warn!(namespace = %self.namespace, name = %self.cds.name_any(), detail = %message, reason = reason.as_str(), "nothing is written until the spec changes");
        }
        let already = self
            .status
            .as_ref()
            .is_some_and(|s| s.reason == Some(reason) && s.message.as_deref() == Some(&message));
        let decision: Decision = Decision {
            failure: Some(reason),
            error: Some(message.clone()),
            ..Decision::hold(Phase::Failed)
        };
        let live = self.ctx.caches.daemon_sets.get(&self.ds_ref());
        let owned = self.status.as_ref().and_then(|s| s.daemon_set_name.clone());
        let record = Transition {
            max_unavailable: live.as_deref().map(live_max_unavailable),
            // The DaemonSet this object owns stays recorded, whatever the spec says now (a
            // renamed spec.daemonSetName is refused, not adopted on the next pass).
            daemon_set: owned.unwrap_or_else(|| self.ds_name.clone()),
            ..self.record(&decision)
        };
        let (_, going_back) = self.go_back(decision).await;
        let history = self.write_status(record, going_back).await?;
        self.check_subscriptions().await;
        self.publish_events(history.events.iter(), None, "", Phase::Failed)
            .await;
        if !already {
            self.notify(
                reason.as_str(),
                canary_state_machine::EventType::Warning,
                &message,
                Phase::Failed,
                "",
            );
            self.publish(KubeEventType::Warning, reason.as_str(), message, false, "")
                .await;
        }
        self.ctx.memory.reset_errors(self.cds);
        Ok(())
    }
}

/// One line for a refused request: the API server's code, reason and message, never a debug
/// dump of its Status.
fn describe_api_error(error: &Error) -> String {
    match error {
        Error::Kube(error) => crate::error::kube_error_text(error),
        other => other.to_string(),
    }
}

fn tls_facts(
    live: &DaemonSet,
    desired: &mut DaemonSet,
    cfg: &canary_tls_migration::TlsConfig,
) -> Result<canary_state_machine::TlsFacts, String> {
    canary_tls_migration::apply_preamble(live, desired, cfg)
        .map_err(|e| format!("TLS migration: {e}"))?;
    canary_tls_migration::observe(live, desired, cfg).map_err(|e| format!("TLS migration: {e}"))
}
