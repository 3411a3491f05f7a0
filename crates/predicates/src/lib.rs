//! Pure predicates for DaemonSet canary upgrades, over `k8s-openapi` types.
//!
//! This crate answers the questions a canary rollout asks about one DaemonSet and its pods, with the
//! exact semantics of KubeVirt virt-operator's canary upgrade (its `readycheck.go` and `apps.go`), and
//! with stricter alternatives where those semantics hurt on real clusters:
//!
//! | question | reference (KubeVirt) | stricter alternative |
//! |---|---|---|
//! | is the DaemonSet / pod on the [`Target`]? | [`daemonset_is_up_to_date`], [`pod_is_up_to_date`] | – |
//! | is the pod updated? | [`UpdatedRule::Annotations`] | [`UpdatedRule::AnnotationsAndRevision`] (`controller-revision-hash`) |
//! | is the pod ready? | [`pod_is_ready`] | – |
//! | is the pod crash-looping, and why? | [`CrashLoopPolicy::KubeVirt`] | [`CrashLoopPolicy::Strict`] (the default) |
//! //! | may the node take a new pod now? | – | [`node_health`] (Ready, not cordoned) |
//! | does the pod belong to the DaemonSet? | [`OwnerMatch::NameOnly`] | [`OwnerMatch::Uid`] |
//! | is the strategy at rest? | [`has_default_rollout_strategy`] (Go `IntValue` quirk) | [`MaxUnavailable`] parsed and [`MaxUnavailable::scaled`] as Kubernetes does |
//! | how many pods go down at once? | [`reference_max_unavailable`] | [`kubernetes_max_unavailable`] (API defaults, rounding up, the controller's fallback to 1) |
//!
//! [`count_pods`] puts them together into the [`PodCounts`] a reconcile needs, and
//! [`observe_daemon_set`] turns a live DaemonSet and those counts into the state machine's
//! `Observation` (the controller's passes and the KubeVirt observer read it the same way). Every
//! pod predicate takes any [`PodFacts`]: a `Pod`, or the compact [`PodSummary`] a cache keeps.
//!
//! # Invariants
//!
//! - Pure: no I/O, no clock, no global state; every function is deterministic in its arguments.
//! - Never panics on any input, whatever the cluster or the user wrote: invalid `maxUnavailable`
//!   values are [`InvalidMaxUnavailable`] errors, missing fields have documented meanings.
//! - The reference semantics are kept bit for bit where a function or variant says "reference", quirks
//!   included (spec quirks 3, 6, 7, 8 and 9); the alternatives are separate functions or variants,
//!   never silent changes.
//! - One `k8s-openapi` for everyone: it is re-exported as [`k8s_openapi`].
//!
//! # Example
//!
//! ```
//! use canary_predicates::k8s_openapi::api::core::v1::{ContainerStatus, Pod, PodStatus};
//! use canary_predicates::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
//! use canary_predicates::{
//!     AnnotationKeys, CountRule, CrashLoopPolicy, CrashLoopReason, Target, UpdatedRule, count_pods,
//! };
//!
//! let keys = AnnotationKeys::default(); // kubevirt.io/install-strategy-*
//! let target = Target { version: "v1.8.0".into(), registry: "quay.io/kubevirt".into(), deployment_id: "abc".into() };
//!
//! let pod = |name: &str, target: &Target, ready: bool, restarts: i32| Pod {
//!     metadata: ObjectMeta {
//!         name: Some(name.into()),
//!         annotations: Some(target.annotations(&keys)),
//!         ..ObjectMeta::default()
//!     },
//!     status: Some(PodStatus {
//!         phase: Some("Running".into()),
//!         container_statuses: Some(vec![ContainerStatus {
//!             name: "handler".into(),
//!             ready,
//!             restart_count: restarts,
//!             ..ContainerStatus::default()
//!         }]),
//!         ..PodStatus::default()
//!     }),
//!     ..Pod::default()
//! };
//! let pods = [
//!     pod("old", &Target::default(), true, 0),
//!     pod("canary", &target, true, 1),
//!     pod("second", &target, false, 5),
//! ];
//!
//! let mut rule = CountRule {
//!     target: &target,
//!     keys: &keys,
//!     updated: &UpdatedRule::Annotations,
//!     crash_loop: &CrashLoopPolicy::default(), // Strict: 3 restarts, init containers included
//!     skip_terminating: true,
//! };
//! let counts = count_pods(&pods, &rule);
//! assert_eq!((counts.total, counts.updated, counts.updated_ready), (3, 2, 1));
//! // One transient restart of "canary" is tolerated; five restarts of "second" are not.
//! let first = counts.first_crash_loop.as_ref().map(|(name, crash)| (name.as_str(), crash.reason));
//! assert_eq!(first, Some(("second", CrashLoopReason::RestartThreshold)));
//!
//! // The reference fails the canary on its single restart.
//! rule.crash_loop = &CrashLoopPolicy::KubeVirt;
//! let counts = count_pods(&pods, &rule);
//! assert_eq!(counts.first_crash_loop.map(|(name, _)| name).as_deref(), Some("canary"));
//! ```

pub use k8s_openapi;

/// The README's examples, compiled and run as doc tests so that they stay true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

mod count;
mod crash_loop;
mod daemon_set;
mod max_unavailable;
mod nodes;
mod ownership;
mod pod_facts;
mod readiness;
mod target;
mod texts;

pub use canary_state_machine::{LiveMaxUnavailable, MaxUnavailable};
pub use count::{CountRule, PodCount, PodCounts, count_pod, count_pods, count_pods_owned_by};
pub use crash_loop::{CrashLoop, CrashLoopPolicy, CrashLoopReason, pod_crash_loop};
pub use daemon_set::{available_pods, every_pod_updated_and_available, observe_daemon_set};
pub use max_unavailable::{
    InvalidMaxUnavailable, MaxUnavailableWire, daemonset_controller_max_unavailable,
    has_default_rollout_strategy, kubernetes_max_unavailable, live_max_surge, live_max_unavailable,
    max_unavailable_field, reference_max_unavailable,
};
pub use nodes::{InvalidSelector, Labels, label_selector_matches, node_health, node_label};
pub use ownership::{OwnerMatch, controller_owner, pod_is_owned_by};
pub use pod_facts::{ContainerFacts, OwnerFacts, PodFacts, PodSummary};
pub use readiness::{pod_is_ready, pod_is_terminating};
pub use target::{
    AnnotationKeys, CONTROLLER_REVISION_HASH_LABEL, KUBEVIRT_GENERATION_ANNOTATION,
    KUBEVIRT_ID_ANNOTATION, KUBEVIRT_REGISTRY_ANNOTATION, KUBEVIRT_VERSION_ANNOTATION, Target,
    UpdatedRule, current_revision_hash, daemonset_is_up_to_date, pod_is_up_to_date, pod_is_updated,
    pod_revision_hash, pod_runs_revision,
};
pub use texts::{Texts, TextsBuilder};
