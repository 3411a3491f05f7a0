//! KubeVirt observe mode: the phase of virt-operator's own canary upgrade of virt-handler,
//! derived from observation only (what `daemonset-canary observe-kubevirt` runs). Read-only:
//! nothing here writes to the cluster.
//!
//! virt-operator keeps its rollout state in three places anyone may read: the `KubeVirt` status
//! (the targets `targetKubeVirtVersion` / `targetKubeVirtRegistry` / `targetDeploymentID` and the
//! recorded generations in `status.generations`), the virt-handler DaemonSet (its install-strategy
//! annotations, `metadata.generation` and `maxUnavailable`) and its pods. [`derive()`] rebuilds the
//! reference's sync-gate flags from them and runs [`canary_state_machine::decide`] with
//! [`Strategy::kubevirt`](canary_state_machine::Strategy::kubevirt): the phase it returns is the
//! one virt-operator computes on the same state. [`PhaseTracker`] turns successive derivations
//! into [`Transition`](canary_kube_adapter::Transition)s, inferring the `started` and
//! `increasing` passes an observer can miss, and [`run()`] keeps it fed from three watches.
//!
//! # Where it stands
//!
//! The derivation ([`KubeVirtView`], [`derive()`], [`PhaseTracker`]) reads the objects with
//! `canary-predicates` (the install-strategy annotations, the pod counts, and the
//! `Observation` of a DaemonSet, `observe_daemon_set`, the one the controller's passes read)
//! and decides with `canary-state-machine`'s KubeVirt table: the reference's rules are not
//! written again here. The watch loop ([`run()`]) reports through the controller's channel out,
//! `canary-kube-adapter`'s `Observer` (its `Transition`, `Reconciled`, `WatchError` and
//! `Leader` reports), so that one metrics bridge serves the controller and the observer and
//! their series are the same; it takes the adapter's `Clock`, namespace scope and `WatchLog`
//! for the same reason. So this crate sits above the adapter, and the adapter knows nothing of
//! it: `canary-kube-adapter` keeps the reconcile of CanaryDaemonSets.
//!
//! # Invariants
//!
//! - Never writes: [`run()`] only lists and watches (`kubevirts.kubevirt.io`, DaemonSets and pods
//!   labelled `app.kubernetes.io/managed-by in (virt-operator,kubevirt-operator)`).
//! - The derived phase is a pure function of the three objects (and the pods): the same state
//!   always gives the same phase, the one the reference table gives.
//! - Transitions carry no write (`write: None`): the DaemonSet writes are virt-operator's.
//!
//! # Limits
//!
//! virt-operator's `objectMetaModified` compares the DaemonSet with the desired one built from
//! the install strategy, which is not read here: `object_changed` is the target comparison plus
//! the `kubevirt.io/generation` annotation. Template-only changes are invisible to the flag, as
//! in the reference (they surface as an unknown generation). When virt-operator acts on a state
//! is not observable either: the derived phase is what it *will* decide on its next pass.
//!
//! # Example
//!
//! ```
//! use canary_kubevirt::{derive, KubeVirtView};
//! use canary_state_machine::Phase;
//! use kube::api::DynamicObject;
//! use serde_json::json;
//!
//! let kv: DynamicObject = serde_json::from_value(json!({
//!     "apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
//!     "metadata": {"name": "kubevirt", "namespace": "kubevirt", "generation": 2},
//!     "status": {
//!         "targetKubeVirtVersion": "v1.6.0", "targetKubeVirtRegistry": "quay.io/kubevirt",
//!         "targetDeploymentID": "b2",
//!         "generations": [{"group": "apps", "resource": "daemonsets", "namespace": "kubevirt",
//!                          "name": "virt-handler", "lastGeneration": 4}]
//!     }
//! }))?;
//! let kv = KubeVirtView::from_object(&kv)?;
//!
//! // virt-operator has patched the new target in (generation 5, not yet recorded); the canary
//! // pod is not ready yet.
//! let handler = serde_json::from_value(json!({
//!     "metadata": {"name": "virt-handler", "namespace": "kubevirt", "generation": 5,
//!         "annotations": {"kubevirt.io/install-strategy-version": "v1.6.0",
//!                         "kubevirt.io/install-strategy-registry": "quay.io/kubevirt",
//!                         "kubevirt.io/install-strategy-identifier": "b2",
//!                         "kubevirt.io/generation": "2"}},
//!     "spec": {"selector": {}, "template": {},
//!              "updateStrategy": {"rollingUpdate": {"maxUnavailable": 1}}},
//!     "status": {"desiredNumberScheduled": 3, "currentNumberScheduled": 3,
//!                "numberMisscheduled": 0, "numberReady": 2}
//! }))?;
//! let derived = derive(&kv, &handler, []);
//! assert!(derived.flags.generation_unknown && !derived.flags.object_changed);
//! assert_eq!(derived.decision.phase, Phase::Canary);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod derive;
mod run;
mod tracker;
mod view;

pub use derive::{Derived, derive};
pub use run::{KubeVirtVersions, ObserveConfig, ObserveError, ObservedDaemonSet, Snapshot, run};
pub use tracker::PhaseTracker;
pub use view::{
    GenerationRecord, KUBEVIRT_GENERATION_ANNOTATION, KubeVirtParseError, KubeVirtView,
    MANAGED_BY_LABEL, MANAGED_BY_VALUES, kubevirt_api_resource, managed_by_selector,
};

/// The README's examples, compiled and run as doc tests so that they stay true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
