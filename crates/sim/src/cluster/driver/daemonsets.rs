//! The DaemonSet controller part of the cluster task: its view of each DaemonSet (fit per
//! node, pods per node, revisions), the reaction to DaemonSet and ControllerRevision events,
//! and `syncDaemonSet` (history, then pods, then status) through the pure planners of
//! [`crate::cluster::daemonset`] and [`crate::cluster::revision`].

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet, DaemonSetStatus};
use k8s_openapi::api::core::v1::{Pod, PodSpec};
use serde_json::Value;
use tokio::time::Instant;

use super::super::daemonset::{
    self, DaemonPod, InvalidIntOrPercent, NodeSlot, Placement, SyncContext, SyncPlan, SyncTally,
};
use super::super::ownership::{REVISION_HASH_LABEL, controller_uid};
use super::super::revision;
use super::super::scheduling::{NodeFit, add_daemon_tolerations, node_fit};
use super::timers::Timer;
use super::{Driver, ObjKey, object_key};
use crate::store::UpdateScope;

pub(super) struct DsState {
    pub(super) ds: DaemonSet,
    /// The template spec with the daemon tolerations: what eligibility is computed on.
    pub(super) pod_spec: PodSpec,
    /// [`revision::revision_data`] of the current template.
    pub(super) revision_data: Value,
    /// The current revision hash, once the history needs no change. Cleared when the
    /// template or the DaemonSet's revisions change.
    pub(super) current_hash: Option<String>,
    /// When the earliest pending resync (for `minReadySeconds`) fires.
    pub(super) requeue_at: Option<Instant>,
    /// A delayed sync is pending.
    pub(super) sync_scheduled: bool,
    /// Every node that exists or holds one of its pods: fit and pods.
    pub(super) slots: BTreeMap<String, NodeSlot>,
    /// The plan and status by node, when the DaemonSet's strategy allows one
    /// ([`SyncTally::applies`]); `None` until the next sync makes one.
    pub(super) tally: Option<SyncTally>,
    /// Nodes whose slot changed since the tally was last updated.
    pub(super) changed: BTreeSet<String>,
}

impl DsState {
    /// Records the fit of `node` (`None`: the node is gone); returns whether it changed.
    pub(super) fn set_fit(&mut self, node: &str, fit: Option<NodeFit>) -> bool {
        self.changed.insert(node.to_owned());
        let changed = match self.slots.get_mut(node) {
            Some(slot) => std::mem::replace(&mut slot.fit, fit) != fit,
            None if fit.is_some() => {
                self.slots.insert(
                    node.to_owned(),
                    NodeSlot {
                        fit,
                        pods: Vec::new(),
                    },
                );
                true
            }
            None => false,
        };
        self.drop_empty(node);
        changed
    }

    pub(super) fn add_pod(&mut self, pod: DaemonPod) {
        self.changed.insert(pod.node.clone());
        self.slots
            .entry(pod.node.clone())
            .or_default()
            .pods
            .push(pod);
    }

    pub(super) fn remove_pod(&mut self, node: &str, name: &str) {
        self.changed.insert(node.to_owned());
        if let Some(slot) = self.slots.get_mut(node) {
            slot.pods.retain(|p| p.name != name);
        }
        self.drop_empty(node);
    }

    fn drop_empty(&mut self, node: &str) {
        if self
            .slots
            .get(node)
            .is_some_and(|s| s.fit.is_none() && s.pods.is_empty())
        {
            self.slots.remove(node);
        }
    }

    /// This sync's plan and status: from the tally, brought up to date with the nodes that
    /// changed (made anew for a new revision), when one applies; else from every node.
    fn plan_and_status(
        &mut self,
        cx: &SyncContext<'_>,
    ) -> (Result<SyncPlan, InvalidIntOrPercent>, DaemonSetStatus) {
        let changed = std::mem::take(&mut self.changed);
        if !SyncTally::applies(cx) {
            self.tally = None;
            let placement = Placement { nodes: &self.slots };
            return (
                daemonset::plan_sync(cx, &placement),
                daemonset::compute_status(cx, &placement),
            );
        }
        let tally = match &mut self.tally {
            Some(tally) if tally.is_for(cx) => {
                for node in &changed {
                    tally.update(cx, node, self.slots.get(node));
                }
                tally
            }
            stale => stale.insert(SyncTally::of_all(cx, &self.slots)),
        };
        let planned = (tally.plan(cx, &self.slots), tally.status(cx));
        if cfg!(debug_assertions) {
            // Every test of a debug build checks the tally against the full planners.
            let placement = Placement { nodes: &self.slots };
            debug_assert_eq!(planned.0, daemonset::plan_sync(cx, &placement));
            debug_assert_eq!(planned.1, daemonset::compute_status(cx, &placement));
        }
        planned
    }
}

impl Driver {
    pub(super) fn on_daemonset(&mut self, ds: DaemonSet) {
        let key = object_key(&ds.metadata);
        let template = ds
            .spec
            .as_ref()
            .map(|s| s.template.clone())
            .unwrap_or_default();
        let mut pod_spec = template.spec.unwrap_or_default();
        add_daemon_tolerations(&mut pod_spec);
        if let Some(uid) = ds.metadata.uid.clone() {
            self.ds_by_uid.insert(uid, key.clone());
        }
        let mut fresh = false;
        let state = self.daemonsets.entry(key.clone()).or_insert_with(|| {
            fresh = true;
            DsState {
                ds: ds.clone(),
                pod_spec: PodSpec::default(),
                revision_data: Value::Null,
                current_hash: None,
                requeue_at: None,
                sync_scheduled: false,
                slots: BTreeMap::new(),
                tally: None,
                changed: BTreeSet::new(),
            }
        });
        if fresh || state.pod_spec != pod_spec {
            for (name, node) in &self.nodes {
                state.set_fit(name, Some(node_fit(&pod_spec, &node.node)));
            }
            state.pod_spec = pod_spec;
        }
        // The controller's own status writes come back as events; they change no decision.
        let status_only = !fresh
            && state.ds.spec == ds.spec
            && state.ds.metadata.generation == ds.metadata.generation
            && state.ds.metadata.annotations == ds.metadata.annotations
            && state.ds.metadata.deletion_timestamp == ds.metadata.deletion_timestamp;
        if !status_only {
            state.revision_data = revision::revision_data(&ds);
            state.current_hash = None;
            self.dirty_daemonsets.insert(key);
        }
        state.ds = ds;
    }

    /// The garbage collector deletes what the DaemonSet owned (background propagation).
    pub(super) fn on_daemonset_deleted(&mut self, key: &ObjKey) {
        let Some(state) = self.daemonsets.remove(key) else {
            return;
        };
        self.dirty_daemonsets.remove(key);
        let uid = state.ds.metadata.uid.clone().unwrap_or_default();
        self.ds_by_uid.remove(&uid);
        let namespace = key.0.as_str();
        for pod in state
            .slots
            .values()
            .flat_map(|s| &s.pods)
            .filter(|p| !p.deleting)
        {
            if let Err(error) = self.store.delete::<Pod>(Some(namespace), &pod.name) {
                tracing::debug!(pod = %pod.name, %error, "dependent pod already gone");
            }
        }
        for name in self.revisions.remove(&uid).unwrap_or_default().into_keys() {
            if let Err(error) = self
                .store
                .remove_now::<ControllerRevision>(Some(namespace), &name)
            {
                tracing::debug!(revision = %name, %error, "dependent revision already gone");
            }
        }
    }

    pub(super) fn on_revision(&mut self, cr: ControllerRevision) {
        let (Some(owner), Some(name)) = (
            controller_uid(&cr.metadata, "DaemonSet"),
            cr.metadata.name.clone(),
        ) else {
            return;
        };
        self.revisions_changed(&owner);
        self.revisions.entry(owner).or_default().insert(name, cr);
    }

    pub(super) fn revisions_changed(&mut self, owner: &str) {
        if let Some(key) = self.ds_by_uid.get(owner) {
            if let Some(state) = self.daemonsets.get_mut(key) {
                state.current_hash = None;
            }
            self.dirty_daemonsets.insert(key.clone());
        }
    }

    pub(super) fn on_revision_deleted(&mut self, cr: &ControllerRevision) {
        let (Some(owner), Some(name)) = (
            controller_uid(&cr.metadata, "DaemonSet"),
            cr.metadata.name.as_deref(),
        ) else {
            return;
        };
        if let Some(revisions) = self.revisions.get_mut(&owner) {
            revisions.remove(name);
        }
        self.revisions_changed(&owner);
    }

    /// Syncs the DaemonSets whose turn has come. With a sync delay, a DaemonSet marked dirty
    /// is synced once, `sync_delay` later, for all the changes that arrived meanwhile (like a
    /// workqueue that holds a key while it waits).
    pub(super) fn sync_dirty_daemonsets(&mut self) -> bool {
        let dirty = std::mem::take(&mut self.dirty_daemonsets);
        let mut due = std::mem::take(&mut self.due_daemonsets);
        if self.sync_delay.is_zero() {
            due.extend(dirty);
        } else {
            for key in dirty {
                let Some(state) = self.daemonsets.get_mut(&key) else {
                    continue;
                };
                if !state.sync_scheduled {
                    state.sync_scheduled = true;
                    self.delayed_syncs += 1;
                    self.schedule(self.sync_delay, Timer::DelayedSync { key });
                }
            }
        }
        let mut wrote = false;
        for key in due {
            wrote |= self.sync_daemonset(&key);
        }
        wrote
    }

    /// `syncDaemonSet`: history, then pods, then status. Returns whether it wrote anything.
    pub(super) fn sync_daemonset(&mut self, key: &ObjKey) -> bool {
        let now = self.now();
        let Some(state) = self.daemonsets.get(key) else {
            return false;
        };
        if state.ds.metadata.deletion_timestamp.is_some() {
            return false;
        }
        let (hash, mut wrote) = match &state.current_hash {
            Some(hash) => (hash.clone(), false),
            None => {
                let uid = state.ds.metadata.uid.clone().unwrap_or_default();
                let live_hashes = state
                    .slots
                    .values()
                    .flat_map(|s| &s.pods)
                    .filter_map(|p| p.hash.as_deref());
                let owned = self
                    .revisions
                    .get(&uid)
                    .into_iter()
                    .flat_map(|r| r.values());
                let history =
                    revision::plan_history(&state.ds, &state.revision_data, owned, live_hashes);
                let wrote = self.apply_history(&key.0, &history);
                (history.hash, wrote)
            }
        };
        if !wrote && let Some(state) = self.daemonsets.get_mut(key) {
            state.current_hash = Some(hash.clone());
        }
        let Some(state) = self.daemonsets.get_mut(key) else {
            return wrote;
        };
        // The context borrows a copy of the DaemonSet: the tally beside it is updated.
        let ds = state.ds.clone();
        let cx = SyncContext::new(&ds, &hash, now);
        let (plan, status) = state.plan_and_status(&cx);
        let plan = plan.unwrap_or_else(|error| {
            tracing::warn!(daemonset = %key.1, %error, "cannot roll out");
            daemonset::SyncPlan::default()
        });
        let requeue = daemonset::requeue_after(&cx, &status);
        let new_pods: Vec<Pod> = plan
            .create_on_nodes
            .iter()
            .map(|node| daemonset::new_daemon_pod(&cx, node))
            .collect();
        let status_changed = ds.status.as_ref() != Some(&status);
        for pod in new_pods {
            match self.store.create(&pod) {
                Ok(_) => wrote = true,
                Err(error) => tracing::warn!(daemonset = %key.1, %error, "pod not created"),
            }
        }
        for name in &plan.delete_pods {
            match self.store.delete::<Pod>(Some(&key.0), name) {
                Ok(()) => wrote = true,
                Err(error) => tracing::debug!(pod = %name, %error, "pod not deleted"),
            }
        }
        if status_changed {
            let result =
                self.store
                    .modify::<DaemonSet>(Some(&key.0), &key.1, UpdateScope::Status, |ds| {
                        ds.status = Some(status);
                    });
            match result {
                Ok(_) => wrote = true,
                Err(error) => tracing::debug!(daemonset = %key.1, %error, "status not written"),
            }
        }
        if let Some(delay) = requeue {
            self.requeue(key, delay);
        }
        wrote
    }

    /// `enqueueDaemonSetAfter`: like a workqueue's `AddAfter`, only the earliest pending
    /// resync of a DaemonSet is kept.
    pub(super) fn requeue(&mut self, key: &ObjKey, delay: Duration) {
        let at = Instant::now() + self.scaled(delay);
        let Some(state) = self.daemonsets.get_mut(key) else {
            return;
        };
        if state.requeue_at.is_some_and(|pending| pending <= at) {
            return;
        }
        state.requeue_at = Some(at);
        self.schedule(delay, Timer::SyncDaemonSet { key: key.clone() });
    }

    pub(super) fn apply_history(&self, namespace: &str, history: &revision::HistoryPlan) -> bool {
        let mut wrote = false;
        if let Some(cr) = &history.create {
            match self.store.create(cr) {
                Ok(_) => wrote = true,
                Err(error) => tracing::debug!(%error, "revision not created"),
            }
        }
        if let Some((name, number)) = &history.bump {
            let result = self.store.modify::<ControllerRevision>(
                Some(namespace),
                name,
                UpdateScope::Main,
                |cr| {
                    cr.revision = *number;
                    let hash = cr
                        .metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get(REVISION_HASH_LABEL))
                        .cloned();
                    if hash.is_none() {
                        cr.metadata
                            .labels
                            .get_or_insert_with(BTreeMap::new)
                            .insert(REVISION_HASH_LABEL.to_owned(), history.hash.clone());
                    }
                },
            );
            wrote |= result.is_ok();
        }
        for name in &history.delete {
            wrote |= self
                .store
                .remove_now::<ControllerRevision>(Some(namespace), name)
                .is_ok();
        }
        wrote
    }
}
