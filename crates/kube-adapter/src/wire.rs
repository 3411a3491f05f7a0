//! The wire form the lean watches decode ([`WatchedPod`](crate::index::WatchedPod),
//! [`WatchedNode`](crate::watched_node::WatchedNode),
//! [`WatchedNeighbour`](crate::neighbours::WatchedNeighbour)): an object's `metadata`, `spec`
//! and `status`, each as a type that names only the fields its watch keeps. Serde skips every
//! field a type does not name without building it, which is what keeps a watch of thousands of
//! pods or nodes small; each watch names its own fields, this module only their frame.

use serde::Deserialize;

/// An object as a lean watch reads it: `Meta`, `Spec` and `Status` name the fields kept.
#[derive(Deserialize)]
pub(crate) struct Wire<Meta, Spec, Status> {
    #[serde(default)]
    pub(crate) metadata: Meta,
    /// Absent or `null`: `None` (serde's rule for a missing `Option`).
    pub(crate) spec: Option<Spec>,
    pub(crate) status: Option<Status>,
}

/// A pod's spec as the pod watches keep it: the node it is bound to.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PodSpecWire {
    #[serde(default)]
    pub(crate) node_name: Option<String>,
}
