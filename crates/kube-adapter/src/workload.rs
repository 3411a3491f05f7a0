//! Watches of the pods and ControllerRevisions of DaemonSets someone else owns
//! (`spec.workloadRef`): the controller's own watches select by its owner label, which a Helm
//! chart's pods do not carry, and watching every pod of the cluster would cost far more than
//! these few selected watches.
//!
//! One watch pair per referenced DaemonSet, selected by the DaemonSet's own `spec.selector`
//! (immutable, so it never needs to change), started by the first pass that needs it and
//! stopped when no CanaryDaemonSet references the DaemonSet any more or the controller term
//! ends. Each watch fills its own [`OwnerIndex`] (a relist swaps a whole index, so watches never
//! share one) and triggers a pass of every CanaryDaemonSet that references the DaemonSet: at
//! once for a change a decision turns on, within `FACTS_WAIT` (200 ms, the controller's) for a
//! pod's facts (one pass for the events of that while, as for the controller's own pods), never
//! for a change of nothing a pass reads.
//!
//! # Invariants
//!
//! - A pass reads a referenced DaemonSet's pods only once its watch has listed them
//!   ([`WorkloadIndexes::ready`]); before that it waits, it never decides from an empty index.
//! - Every watch task is aborted when its last referrer is released or the
//!   [`WorkloadWatches`] is dropped (the end of a controller term).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use canary_predicates::PodSummary;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::Api;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use tokio::sync::mpsc;
use tokio::task::AbortHandle;

use crate::crd::CanaryDaemonSet;
use crate::health::Health;
use crate::index::{Moved, OwnerIndex, WatchedPod};
use crate::observer::Observer;
use crate::sync::lock;
use crate::trigger::{
    Coalesced, FACTS_WAIT, WatchBackoff, WatchErrors, WatchLog, relisting_watcher,
};

/// The indexes of one referenced DaemonSet.
#[derive(Debug, Clone)]
pub struct WorkloadIndexes {
    /// Its pods, by controller-owner name.
    pub pods: OwnerIndex<PodSummary>,
    /// Its ControllerRevisions, by controller-owner UID.
    pub revisions: OwnerIndex<ControllerRevision>,
}

impl WorkloadIndexes {
    /// Both watches have listed once.
    pub fn ready(&self) -> bool {
        self.pods.is_ready() && self.revisions.is_ready()
    }
}

struct Watch {
    indexes: WorkloadIndexes,
    referrers: Arc<Mutex<HashSet<ObjectRef<CanaryDaemonSet>>>>,
    tasks: [AbortHandle; 2],
}

impl Drop for Watch {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// The watches of one controller term; see the module documentation.
pub struct WorkloadWatches {
    client: Client,
    errors: WatchErrors,
    triggers: mpsc::UnboundedSender<ObjectRef<CanaryDaemonSet>>,
    /// The same channel, for the pod events that may wait (`FACTS_WAIT`).
    later: Coalesced<CanaryDaemonSet>,
    watches: Mutex<HashMap<(String, String), Watch>>,
}

impl std::fmt::Debug for WorkloadWatches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkloadWatches")
            .field("watches", &lock(&self.watches).len())
            .finish_non_exhaustive()
    }
}

/// Why a referenced DaemonSet cannot be watched.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorkloadError {
    /// The DaemonSet has no namespace or name (never from an API server).
    #[error("the DaemonSet has no namespace or name")]
    Unnamed,
    /// Its selector selects everything, or uses an operator Kubernetes does not know.
    #[error("the DaemonSet's spec.selector {0}")]
    Selector(String),
}

impl WorkloadWatches {
    /// No watch yet; `triggers` receives the CanaryDaemonSets to reconcile.
    pub fn new(
        client: Client,
        observer: Observer,
        health: Health,
        triggers: mpsc::UnboundedSender<ObjectRef<CanaryDaemonSet>>,
    ) -> Self {
        Self {
            client,
            errors: WatchErrors {
                observer,
                health,
                log: WatchLog::default(),
            },
            later: Coalesced::sending_to(triggers.clone(), FACTS_WAIT),
            triggers,
            watches: Mutex::default(),
        }
    }

    /// The same, logging watch failures through the controller term's `log` (one warning per
    /// outage for every watcher of the term).
    #[must_use]
    pub(crate) fn with_log(mut self, log: WatchLog) -> Self {
        self.errors.log = log;
        self
    }

    /// The indexes of `ds` for `cds`, starting its watches on first use.
    ///
    /// # Errors
    ///
    /// [`WorkloadError`] when `ds` cannot be watched by its selector.
    pub fn indexes(
        &self,
        cds: &CanaryDaemonSet,
        ds: &DaemonSet,
    ) -> Result<WorkloadIndexes, WorkloadError> {
        let namespace = ds.namespace().ok_or(WorkloadError::Unnamed)?;
        let name = ds.metadata.name.clone().ok_or(WorkloadError::Unnamed)?;
        let referrer = ObjectRef::from_obj(cds);
        let mut watches = lock(&self.watches);
        let key = (namespace.clone(), name);
        if let Some(watch) = watches.get(&key) {
            lock(&watch.referrers).insert(referrer);
            return Ok(watch.indexes.clone());
        }
        let selector = ds
            .spec
            .as_ref()
            .map(|spec| selector_string(&spec.selector))
            .transpose()
            .map_err(WorkloadError::Selector)?
            .ok_or_else(|| WorkloadError::Selector("is missing".to_owned()))?;
        let referrers = Arc::new(Mutex::new(HashSet::from([referrer])));
        let indexes = WorkloadIndexes {
            pods: OwnerIndex::new(),
            revisions: OwnerIndex::new(),
        };
        let config = watcher::Config::default().labels(&selector);
        let pods = self.spawn::<WatchedPod, PodSummary>(
            Api::namespaced(self.client.clone(), &namespace),
            config.clone(),
            indexes.pods.clone(),
            referrers.clone(),
            "pods",
        );
        let revisions = self.spawn::<ControllerRevision, ControllerRevision>(
            Api::namespaced(self.client.clone(), &namespace),
            config,
            indexes.revisions.clone(),
            referrers.clone(),
            "controllerrevisions",
        );
        watches.insert(
            key,
            Watch {
                indexes: indexes.clone(),
                referrers,
                tasks: [pods, revisions],
            },
        );
        Ok(indexes)
    }

    /// `cds` no longer references any DaemonSet (deleted, or pointed elsewhere): the watches
    /// no one references any more stop.
    pub fn release(&self, cds: &ObjectRef<CanaryDaemonSet>) {
        lock(&self.watches).retain(|_, watch| {
            let mut referrers = lock(&watch.referrers);
            referrers.remove(cds);
            !referrers.is_empty()
        });
    }

    /// Running watch pairs (for tests and debugging).
    pub fn len(&self) -> usize {
        lock(&self.watches).len()
    }

    /// No watch is running.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn spawn<K, T>(
        &self,
        api: Api<K>,
        config: watcher::Config,
        index: OwnerIndex<T>,
        referrers: Arc<Mutex<HashSet<ObjectRef<CanaryDaemonSet>>>>,
        resource: &'static str,
    ) -> AbortHandle
    where
        K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
        K::DynamicType: Default,
        T: crate::index::Indexed<Source = K>,
    {
        let triggers = self.triggers.clone();
        let stream = relisting_watcher(api, config)
            .backoff(WatchBackoff::default())
            .map_ok(move |event| {
                let moved = index.apply(&event);
                match event {
                    watcher::Event::Apply(_) | watcher::Event::Delete(_) => moved,
                    // A relist replaces the index: its passes read the new one.
                    _ => Moved::Decision,
                }
            });
        let stream = self.errors.without_errors(stream, resource);
        let later = self.later.clone();
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(moved) = stream.next().await {
                let referrers: Vec<_> = lock(&referrers).iter().cloned().collect();
                match moved {
                    // Errors were taken out (and counted) by `without_errors`.
                    Ok(Moved::Nothing) | Err(_) => {}
                    Ok(Moved::Decision) => {
                        for referrer in referrers {
                            // A stopped term has dropped the receiver: nothing to trigger.
                            let _ = triggers.send(referrer);
                        }
                    }
                    Ok(Moved::Facts | Moved::Counts) => {
                        for referrer in referrers {
                            later.later(referrer);
                        }
                    }
                }
            }
        })
        .abort_handle()
    }
}

/// A `LabelSelector` as a label-selector query string (`a=b,c in (d,e),!f`).
///
/// # Errors
///
/// An empty selector (it would select every pod of the namespace) or an unknown operator.
pub fn selector_string(selector: &LabelSelector) -> Result<String, String> {
    let mut terms: Vec<String> = selector
        .match_labels
        .iter()
        .flatten()
        .map(|(key, value)| format!("{key}={value}"))
        .collect();
    for expression in selector.match_expressions.iter().flatten() {
        let key = &expression.key;
        let values = expression.values.as_deref().unwrap_or_default().join(",");
        terms.push(match expression.operator.as_str() {
            "In" => format!("{key} in ({values})"),
            "NotIn" => format!("{key} notin ({values})"),
            "Exists" => key.clone(),
            "DoesNotExist" => format!("!{key}"),
            other => return Err(format!("has an unknown operator {other:?}")),
        });
    }
    if terms.is_empty() {
        return Err("is empty".to_owned());
    }
    Ok(terms.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    #[test]
    fn selectors_become_query_strings() {
        let selector = LabelSelector {
            match_labels: Some([("app".to_owned(), "cilium".to_owned())].into()),
            match_expressions: Some(vec![
                LabelSelectorRequirement {
                    key: "tier".into(),
                    operator: "In".into(),
                    values: Some(vec!["node".into(), "agent".into()]),
                },
                LabelSelectorRequirement {
                    key: "canary".into(),
                    operator: "DoesNotExist".into(),
                    values: None,
                },
            ]),
        };
        assert_eq!(
            selector_string(&selector).unwrap(),
            "app=cilium,tier in (node,agent),!canary"
        );
        assert!(selector_string(&LabelSelector::default()).is_err());
    }
}
