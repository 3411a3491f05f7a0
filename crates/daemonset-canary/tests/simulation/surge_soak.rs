//! Invariant 36, the surge canary's soak holds the DaemonSet controller (issue 50): with
//! `spec.strategy.surge`, while the canary soaks, no node but the canary's is replaced.
//!
//! A node is replaced when a ready, available pod of an earlier target is taken down on a Ready
//! node that keeps a ready pod of the target beside it: the DaemonSet controller's surge
//! handover, at `maxUnavailable: 0` and the canary's `maxSurge: 1` (a widened DaemonSet surges
//! `10%`, a hold is `OnDelete`). The canary is the node of the first handover of the
//! DaemonSet's target (a node whose old pod was not available gets a new pod at once too, and
//! may be the first to get one: soak seed 8 with surge). A handover on another node is a
//! violation while the canary's new pod has not been ready for the soak (`health.canarySoak`, 30 s by default, at least the DaemonSet's
//! `minReadySeconds`; 1 s of margin for the checker seeing readiness an event late).
//!
//! The race the controller cannot close: `OnDelete` keeps a node's oldest pod, so the soak's
//! hold waits for the canary's own old pod to be gone; in the sync that deletes it the
//! DaemonSet controller already surges the next node. That node normally loses its new pod to
//! the hold; a handover that lands within `stale` seconds of the canary's (the controller's view
//! lags the API by up to that) is no violation, nor one while the controller wrote no status
//! since the canary's handover (it is down: killed, cut off or frozen). Not checked either: a canary pod gone (its node
//! went away: the controller's canary is then another pod), and a node whose old pod was not
//! available (the DaemonSet controller replaces it whatever the budget).

use k8s_openapi::api::core::v1::Pod;

use super::{Invariant, Target, World, node_of};

/// The soak the scenarios run with: `health.canarySoak`'s default (the simulation sets none).
const CANARY_SOAK_SECONDS: f64 = 30.0;

/// The checker's memory for invariant 36.
#[derive(Debug, Default)]
pub struct SurgeSoak {
    canary: Option<Canary>,
    /// The scenario's status as last seen, and when it last changed (checker time): a
    /// controller that wrote nothing since the canary's handover never saw it (killed, cut
    /// off, frozen: CI seed 58), and cannot have held anything.
    status: Option<canary_kube_adapter::crd::CanaryDaemonSetStatus>,
    status_changed_at: f64,
}

#[derive(Debug)]
struct Canary {
    target: Target,
    pod: String,
    node: String,
    /// When the canary's node lost its old pod (checker time).
    handed_over_at: f64,
}

/// One node's surge handover, as the checker saw it.
pub struct Handover<'a> {
    /// The DaemonSet's target (the new pods').
    pub target: &'a Target,
    /// The old pod taken down.
    pub pod: &'a Pod,
    /// The ready pod of the target beside it.
    pub new_pod: &'a str,
    /// The canary pod's ready time (checker time) by its name: `None` when the pod is gone,
    /// `Some(None)` while it is not ready.
    pub canary_ready_since: &'a dyn Fn(&str) -> Option<Option<f64>>,
    /// The DaemonSet's `minReadySeconds`.
    pub min_ready_seconds: f64,
    /// The checker's staleness allowance.
    pub stale: f64,
}

impl SurgeSoak {
    /// The DaemonSet's target seen: a canary of another target is forgotten (a rollback, then
    /// the same target again, has a canary of its own).
    pub fn on_target(&mut self, target: &Target) {
        if self.canary.as_ref().is_some_and(|c| c.target != *target) {
            self.canary = None;
        }
    }

    /// The scenario's CanaryDaemonSet seen at `now` with `status`.
    pub fn on_status(
        &mut self,
        now: f64,
        status: Option<&canary_kube_adapter::crd::CanaryDaemonSetStatus>,
    ) {
        if self.status.as_ref() != status {
            self.status = status.cloned();
            self.status_changed_at = now;
        }
    }

    /// A surge handover (see the module doc) at `now`, the DaemonSet at the canary's step.
    pub fn on_handover(&mut self, world: &World, now: f64, handover: &Handover<'_>) {
        let Some(node) = node_of(handover.pod) else {
            return;
        };
        self.on_target(handover.target);
        let canary = self.canary.get_or_insert_with(|| Canary {
            target: handover.target.clone(),
            pod: handover.new_pod.to_owned(),
            node: node.to_owned(),
            handed_over_at: now,
        });
        if canary.node == node
            || now - canary.handed_over_at <= handover.stale
            || self.status_changed_at <= canary.handed_over_at
        {
            return;
        }
        // The canary's pod gone: the controller's canary is another pod now.
        let Some(ready_since) = (handover.canary_ready_since)(&canary.pod) else {
            return;
        };
        let soak = CANARY_SOAK_SECONDS.max(handover.min_ready_seconds);
        if ready_since.is_some_and(|since| now >= since + soak - 1.0) {
            return;
        }
        let name = handover.pod.metadata.name.as_deref().unwrap_or("?");
        let ready = ready_since.map_or("not ready".to_owned(), |since| {
            format!("ready for {:.1} s", now - since)
        });
        world.violate(
            Invariant::SurgeSoakHoldsTheDaemonSet,
            format!(
                "node {node} replaced (old pod {name} taken down beside a ready pod of {:?}) while the canary {} on {} soaks ({ready}, soak {soak:.0} s), under surge",
                handover.target.0, canary.pod, canary.node
            ),
        );
    }
}
