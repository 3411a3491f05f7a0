//! canary-sim: a simulated Kubernetes cluster for testing controllers without one.
//!
//! It models Kubernetes, not any particular controller: an object [`Store`] with Kubernetes'
//! `resourceVersion`, `generation`, status-subresource, defaulting and deletion semantics, the
//! REST API on top of it ([`api`]: an unmodified `kube::Client` and `kubectl` work), a
//! DaemonSet controller and a kubelet model ([`cluster`]), and injectable [`faults`]. [`Sim`]
//! wires them together; [`Sim::client`] is a `kube::Client` without sockets and
//! [`Sim::serve`] serves HTTP with a kubeconfig. `docs/simulator.md` lists every modelled
//! behaviour with its place in Kubernetes' source, and what is not modelled.
//!
//! Invariants:
//! - `resourceVersion` is one cluster-wide counter that increases with every change.
//! - `metadata.generation` increases only when the spec (anything outside `metadata` and
//!   `status`) changes.
//! - All time goes through tokio time ([`SimClock`]), so runs under `tokio::time::pause()` are
//!   deterministic.
//!
//! ```
//! use canary_sim::{SimClock, Store};
//! use k8s_openapi::api::apps::v1::{DaemonSet, DaemonSetSpec};
//! use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
//!
//! let store = Store::new(SimClock::new());
//! let ds = DaemonSet {
//!     metadata: ObjectMeta {
//!         name: Some("agent".into()),
//!         namespace: Some("default".into()),
//!         ..Default::default()
//!     },
//!     spec: Some(DaemonSetSpec::default()),
//!     status: None,
//! };
//! let created = store.create(&ds)?;
//! assert_eq!(created.metadata.generation, Some(1));
//!
//! // A label change is not a spec change: the generation stays.
//! let mut labelled = created.clone();
//! labelled.metadata.labels = Some([("tier".to_owned(), "node".to_owned())].into());
//! assert_eq!(store.update(&labelled)?.metadata.generation, Some(1));
//!
//! // Writing with the stale resourceVersion of `created` is a conflict (HTTP 409).
//! let mut stale = created;
//! stale.spec = Some(DaemonSetSpec { min_ready_seconds: Some(5), ..Default::default() });
//! assert_eq!(store.update(&stale).unwrap_err().code(), 409);
//! # Ok::<(), canary_sim::StoreError>(())
//! ```

pub mod api;
pub mod audit;
pub mod clock;
pub mod cluster;
pub mod conversion;
pub mod crds;
pub mod defaults;
pub mod faults;
pub mod kwok;
mod object;
pub mod prometheus;
pub mod registry;
pub mod service;
mod sim;
pub mod store;
pub mod strategy;
pub mod structural;

pub use api::ApiServer;
pub use clock::SimClock;
pub use faults::{FaultAction, FaultRule, Faults, RequestCounts, RequestRecord, Trigger, Verb};
pub use prometheus::{ServedPrometheus, SimPrometheus, SimQueryError, listed_nodes};
pub use registry::{ResourceInfo, ResourceKey};
pub use service::{ServedSim, SimService};
pub use sim::{INITIAL_NAMESPACES, Sim, SimBuilder};
pub use store::{
    DeleteOptions, DeleteOutcome, EventKind, Store, StoreError, StoreEvent, UpdateScope,
};

/// The README's examples, compiled and run as doc tests so that they stay true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
