//! The Kubernetes side of daemonset-canary: the `CanaryDaemonSet` resource and its reconcile
//! loop on kube-rs.
//!
//! A [`CanaryDaemonSet`] owns one DaemonSet. The controller injects the
//! target (version, registry, deployment id) as install-strategy annotations on the DaemonSet
//! and its pod template, and rolls every change out the KubeVirt way: the new template at
//! `maxUnavailable: 1` (one canary pod), `10%` once an updated pod is ready, back to `1` when
//! every pod is updated and ready. The decisions come from `canary-state-machine`; this crate
//! observes the cluster, applies the decisions and remembers them in the status.
//!
//! # Invariants
//!
//! - **At most one DaemonSet write per reconcile**: a create, or an RFC 6902 JSON Patch whose
//!   first op is `test /metadata/generation` with the cached generation (the reference format,
//!   [`patch::daemon_set_patch`]). A failed test (422) or a 409 is a conflict: the pass is
//!   retried shortly, the rollout does not fail. A healthy rollout costs three writes (two on
//!   a single node).
//! - **The status is the only memory**: phase, the recorded DaemonSet generation, phase start
//!   and progress times. A restarted controller resumes from it and never restarts a canary.
//!   The status is written once per pass, and only when it changed.
//! - **A reconcile never scans all pods**: pods and ControllerRevisions are indexed by their
//!   owning DaemonSet ([`index::OwnerIndex`]), watched with the [`desired::OWNER_LABEL`]
//!   selector (a referenced DaemonSet's by its own selector, [`workload`]) and stored slimmed.
//! - **Two drivers**: `MaxUnavailable` steers the DaemonSet controller with at most one
//!   DaemonSet write per pass; `Pods` keeps the DaemonSet `OnDelete` and deletes the old pods the
//!   state machine's `decide_pods` chooses, one DELETE per pod with a UID precondition
//!   (`reconcile` module, `pods`).
//! - **A spec it cannot act on** (bad maxUnavailable, empty version, missing TLS container, a
//!   DaemonSet controlled by someone else) sets `Degraded` with reason `InvalidSpec`, emits one
//!   Warning event and waits for the next spec change: no hot loop, no panic.
//! - **Two replicas never both write**: with [`controller::LeaderElection`] the controller only
//!   runs while this replica holds the Lease.
//! - **A failing watch never stops the controller**: list and watch errors are logged and
//!   reported ([`Report::WatchError`]) and each watcher retries with backoff; they never reach
//!   kube-runtime's queue, which can strand an error there (docs/reliability.md, finding 7).
//! - **One channel out**: everything the controller tells the outside is a typed [`Report`]
//!   through the [`Observer`] (transitions, writes, passes, watch errors, leadership); its
//!   [`Stats`] counters are sums of those reports.
//!
//! # Modules
//!
//! - [`crd`](mod@crd): the resource, [`crd::crd()`] and [`crd::crd_yaml()`] (committed as
//!   `deploy/crd/canarydaemonsets.yaml`; regenerate with
//!   `UPDATE_CRD=1 cargo test -p canary-kube-adapter crd_yaml_is_current`).
//! - [`desired`], [`meta`], [`patch`], [`status`]: pure functions (desired DaemonSet, the
//!   reference's `EnsureObjectMeta` comparison, the JSON Patch, status and conditions).
//! - [`index`], [`reconcile`], [`controller`], [`observer`], [`clock`]: the running controller.
//! - [`error`]: the error type and one-line descriptions of failed requests.
//!
//! Two neighbours take what other tooling would take piecemeal: `canary-analysis` (the
//! `spec.analysis` types the CRD embeds, the providers, the runs; this crate decides when a
//! run measures) and `canary-kubevirt` (KubeVirt observe mode, which reports through this
//! crate's [`Observer`] and sits above it).
//!
//! # Example
//!
//! Build the DaemonSet a `CanaryDaemonSet` asks for, and the patch that would move a live
//! DaemonSet to it:
//!
//! ```
//! use canary_kube_adapter::crd::{CanaryDaemonSet, CanaryDaemonSetSpec};
//! use canary_kube_adapter::desired::{desired_daemon_set, target_of, OWNER_LABEL};
//! use canary_kube_adapter::patch::daemon_set_patch;
//!
//! let spec: CanaryDaemonSetSpec = serde_json::from_value(serde_json::json!({
//!     "template": {"spec": {
//!         "selector": {"matchLabels": {"app": "agent"}},
//!         "template": {"metadata": {"labels": {"app": "agent"}},
//!                      "spec": {"containers": [{"name": "agent", "image": "agent:v2"}]}}
//!     }},
//!     "target": {"version": "v2"}
//! }))?;
//! let mut cds = CanaryDaemonSet::new("agent", spec);
//! cds.metadata.namespace = Some("default".into());
//! cds.metadata.uid = Some("0b1c".into());
//!
//! let (keys, target) = target_of(&cds)?;
//! let desired = desired_daemon_set(&cds, &keys, &target)?;
//! let annotations = desired.metadata.annotations.clone().unwrap_or_default();
//! assert_eq!(annotations["kubevirt.io/install-strategy-version"], "v2");
//! assert_eq!(desired.metadata.labels.clone().unwrap_or_default()[OWNER_LABEL], "agent");
//!
//! let mut live = desired.clone();
//! live.metadata.generation = Some(4);
//! let ops = serde_json::to_value(daemon_set_patch(&live, &desired)?)?;
//! assert_eq!(ops[0], serde_json::json!({"op": "test", "path": "/metadata/generation", "value": 4}));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Running it (the binary does this):
//!
//! ```no_run
//! # async fn demo() -> Result<(), canary_kube_adapter::Error> {
//! use canary_kube_adapter::controller::{run, ControllerConfig};
//! let client = kube::Client::try_default().await?;
//! let config = ControllerConfig::default();
//! let transitions = config.observer.subscribe();
//! run(client, config, async { let _ = tokio::signal::ctrl_c().await; }).await?;
//! # drop(transitions);
//! # Ok(())
//! # }
//! ```

pub mod claim;
pub mod clock;
pub mod controller;
pub mod crd;
mod daemon_set_trigger;
pub mod desired;
pub mod error;
pub mod health;
pub mod history;
pub mod index;
pub mod lease;
pub mod meta;
pub mod neighbours;
pub mod notify;
pub mod observer;
pub mod patch;
pub mod reconcile;
pub mod scope;
pub mod status;
mod sync;
mod trigger;
mod undecodable;
pub mod watched_node;
mod wire;
pub mod workload;

pub use controller::{ControllerConfig, LeaderElection, run};
pub use crd::{CanaryDaemonSet, crd, crd_yaml};
pub use error::Error;
pub use health::Health;
pub use observer::{
    Observer, PodsRecord, Report, Reports, Stats, Transition, Transitions, WriteOutcome,
};
pub use trigger::{WatchLog, relisting_watcher};

/// The README's examples, compiled and run as doc tests so that they stay true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
