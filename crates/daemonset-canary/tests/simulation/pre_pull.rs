//! Invariant 35, image pre-pull (issue 50): the pre-pull pods of the scenario's
//! CanaryDaemonSet (its label) never pull more at once than `spec.prePull.maxConcurrent`, are
//! never the DaemonSet's (no owner but the CanaryDaemonSet, none of the agent's labels), and
//! none is left once the rollout is at rest (`successful`, `failed`, `rolledBack`).
//!
//! Kept apart from `checker.rs` (one call from its pod events, one from the quiescence
//! checks), so that the other invariants' changes merge without this one.

use std::collections::BTreeMap;

use canary_kube_adapter::CanaryDaemonSet;
use canary_kube_adapter::desired::OWNER_LABEL;
use canary_kube_adapter::reconcile::PRE_PULL_LABEL;
use canary_sim::{EventKind, Store, StoreEvent};
use k8s_openapi::api::core::v1::Pod;

use super::world::{Invariant, World};
use super::{NAME, NAMESPACE};

/// Follows the pre-pull pods through the store's events.
#[derive(Debug)]
pub struct PrePullCheck {
    /// `spec.prePull.maxConcurrent`.
    bound: usize,
    /// Pre-pull pod name → still pulling (an image not on its node yet).
    pods: BTreeMap<String, bool>,
}

impl PrePullCheck {
    /// A check of pre-pull with `bound` pulling at once.
    pub fn new(bound: u32) -> Self {
        Self {
            bound: usize::try_from(bound).unwrap_or(usize::MAX),
            pods: BTreeMap::new(),
        }
    }

    /// Whether `pod` is a pre-pull pod of the scenario.
    pub fn is_pre_pull(pod: &Pod) -> bool {
        pod.metadata.namespace.as_deref() == Some(NAMESPACE)
            && pod
                .metadata
                .labels
                .as_ref()
                .and_then(|labels| labels.get(PRE_PULL_LABEL))
                .is_some_and(|name| name == NAME)
    }

    /// At each event of a pre-pull pod: the bound, and whose it is.
    pub fn on_pod(&mut self, world: &World, event: &StoreEvent, pod: &Pod) {
        if event.kind == EventKind::Deleted {
            self.pods.remove(&event.name);
            return;
        }
        let owners = pod.metadata.owner_references.as_deref().unwrap_or_default();
        let agent_labelled = pod
            .metadata
            .labels
            .as_ref()
            .is_some_and(|labels| labels.contains_key(OWNER_LABEL));
        if agent_labelled || owners.len() != 1 || owners[0].kind != "CanaryDaemonSet" {
            world.violate(
                Invariant::PrePullBoundedAndCleanedUp,
                format!(
                    "pre-pull pod {} is not the CanaryDaemonSet's alone (owners {:?}, agent label {agent_labelled})",
                    event.name,
                    owners.iter().map(|o| (&o.kind, &o.name)).collect::<Vec<_>>()
                ),
            );
        }
        self.pods.insert(event.name.clone(), pulling(pod));
        let now_pulling = self.pods.values().filter(|p| **p).count();
        if now_pulling > self.bound {
            world.violate(
                Invariant::PrePullBoundedAndCleanedUp,
                format!(
                    "{now_pulling} pre-pull pods pulling at once, maxConcurrent {}",
                    self.bound
                ),
            );
        }
    }
}

/// A pre-pull pod whose images are not all on its node yet (the controller's own reading is
/// its business: this one only reads what the kubelet wrote). Deleted or ended: not pulling.
fn pulling(pod: &Pod) -> bool {
    if pod.metadata.deletion_timestamp.is_some() {
        return false;
    }
    let Some(status) = pod.status.as_ref() else {
        return true;
    };
    if matches!(status.phase.as_deref(), Some("Succeeded" | "Failed")) {
        return false;
    }
    let statuses = status.container_statuses.as_deref().unwrap_or_default();
    statuses.is_empty() || statuses.iter().any(|c| c.image_id.is_empty())
}

/// At quiescence: a rollout at rest leaves no pre-pull pod behind.
pub fn at_quiescence(store: &Store, world: &World) {
    let phase = store
        .get::<CanaryDaemonSet>(Some(NAMESPACE), NAME)
        .and_then(|cds| cds.status)
        .and_then(|status| status.phase_name().map(str::to_owned))
        .unwrap_or_default();
    if !matches!(phase.as_str(), "successful" | "failed" | "rolledBack") {
        return;
    }
    let left: Vec<String> = store
        .list::<Pod>(Some(NAMESPACE))
        .iter()
        .filter(|pod| PrePullCheck::is_pre_pull(pod))
        .filter_map(|pod| pod.metadata.name.clone())
        .collect();
    if !left.is_empty() {
        world.violate(
            Invariant::PrePullBoundedAndCleanedUp,
            format!(
                "{} pre-pull pods left at rest ({phase}): {left:?}",
                left.len()
            ),
        );
    }
}
