//! What the predicates read from a pod: the [`PodFacts`] trait, implemented by the full
//! `k8s-openapi` [`Pod`] and by the compact [`PodSummary`] a cache can keep instead.
//!
//! A `Pod` value is over 2 KiB before any of its strings (its `PodSpec` is stored inline even
//! when absent), so a controller caching the pods of 10 DaemonSets on 5,000 nodes would hold
//! hundreds of MiB. [`PodSummary::of`] keeps only what the predicates read, a few hundred
//! bytes, and every predicate gives the same answer for a pod and its summary.

use k8s_openapi::api::core::v1::{ContainerState, ContainerStatus, Pod};

use crate::CONTROLLER_REVISION_HASH_LABEL;

/// A pod's controller owner reference, borrowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OwnerFacts<'a> {
    /// `kind`, e.g. `DaemonSet`.
    pub kind: &'a str,
    /// `name`.
    pub name: &'a str,
    /// `uid`.
    pub uid: &'a str,
}

/// One container status, reduced to what readiness and crash-loop detection read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContainerFacts<'a> {
    /// The container's name.
    pub name: &'a str,
    /// `ready`.
    pub ready: bool,
    /// `restartCount`.
    pub restart_count: i32,
    /// `state.waiting.reason`.
    pub waiting_reason: Option<&'a str>,
    /// `state.terminated` is set.
    pub terminated: bool,
    /// `lastState.terminated` is set.
    pub last_terminated: bool,
    /// `lastState.terminated.reason`.
    pub last_terminated_reason: Option<&'a str>,
}

impl<'a> ContainerFacts<'a> {
    /// The facts of a `k8s-openapi` container status.
    pub fn of(status: &'a ContainerStatus) -> Self {
        let terminated =
            |state: Option<&'a ContainerState>| state.and_then(|state| state.terminated.as_ref());
        let last = terminated(status.last_state.as_ref());
        ContainerFacts {
            name: &status.name,
            ready: status.ready,
            restart_count: status.restart_count,
            waiting_reason: status
                .state
                .as_ref()
                .and_then(|state| state.waiting.as_ref())
                .and_then(|waiting| waiting.reason.as_deref()),
            terminated: terminated(status.state.as_ref()).is_some(),
            last_terminated: last.is_some(),
            last_terminated_reason: last.and_then(|t| t.reason.as_deref()),
        }
    }
}

/// The pod fields the predicates read. Implemented by [`Pod`] and [`PodSummary`]; every
/// predicate of this crate takes any `PodFacts`.
pub trait PodFacts {
    /// `metadata.name` (`""` when absent).
    fn name(&self) -> &str;
    /// The value of annotation `key`.
    fn annotation(&self, key: &str) -> Option<&str>;
    /// The `controller-revision-hash` label.
    fn revision_hash(&self) -> Option<&str>;
    /// The controller owner reference (the first one with `controller: true`).
    fn controller(&self) -> Option<OwnerFacts<'_>>;
    /// `metadata.deletionTimestamp` is set.
    fn is_terminating(&self) -> bool;
    /// `status.phase`.
    fn phase(&self) -> Option<&str>;
    /// `status.containerStatuses`, in order.
    fn containers(&self) -> impl Iterator<Item = ContainerFacts<'_>>;
    /// `status.initContainerStatuses`, in order.
    fn init_containers(&self) -> impl Iterator<Item = ContainerFacts<'_>>;
    /// `spec.nodeName`: the node the pod is bound to.
    fn node_name(&self) -> Option<&str>;
    /// `metadata.uid` (`""` when absent).
    fn uid(&self) -> &str;
}

impl PodFacts for Pod {
    fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }

    fn annotation(&self, key: &str) -> Option<&str> {
        self.metadata
            .annotations
            .as_ref()?
            .get(key)
            .map(String::as_str)
    }

    fn revision_hash(&self) -> Option<&str> {
        self.metadata
            .labels
            .as_ref()?
            .get(CONTROLLER_REVISION_HASH_LABEL)
            .map(String::as_str)
    }

    fn controller(&self) -> Option<OwnerFacts<'_>> {
        crate::controller_owner(self).map(|owner| OwnerFacts {
            kind: &owner.kind,
            name: &owner.name,
            uid: &owner.uid,
        })
    }

    fn is_terminating(&self) -> bool {
        self.metadata.deletion_timestamp.is_some()
    }

    fn phase(&self) -> Option<&str> {
        self.status.as_ref()?.phase.as_deref()
    }

    fn containers(&self) -> impl Iterator<Item = ContainerFacts<'_>> {
        self.status
            .iter()
            .flat_map(|status| status.container_statuses.iter().flatten())
            .map(ContainerFacts::of)
    }

    fn init_containers(&self) -> impl Iterator<Item = ContainerFacts<'_>> {
        self.status
            .iter()
            .flat_map(|status| status.init_container_statuses.iter().flatten())
            .map(ContainerFacts::of)
    }

    fn node_name(&self) -> Option<&str> {
        self.spec.as_ref()?.node_name.as_deref()
    }

    fn uid(&self) -> &str {
        self.metadata.uid.as_deref().unwrap_or_default()
    }
}

/// A container status as [`PodSummary`] keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct ContainerSummary {
    name: Box<str>,
    ready: bool,
    restart_count: i32,
    terminated: bool,
    last_terminated: bool,
    waiting_reason: Option<Box<str>>,
    last_terminated_reason: Option<Box<str>>,
}

impl ContainerSummary {
    fn of(facts: ContainerFacts<'_>) -> Self {
        ContainerSummary {
            name: facts.name.into(),
            ready: facts.ready,
            restart_count: facts.restart_count,
            terminated: facts.terminated,
            last_terminated: facts.last_terminated,
            waiting_reason: facts.waiting_reason.map(Box::from),
            last_terminated_reason: facts.last_terminated_reason.map(Box::from),
        }
    }

    fn facts(&self) -> ContainerFacts<'_> {
        ContainerFacts {
            name: &self.name,
            ready: self.ready,
            restart_count: self.restart_count,
            waiting_reason: self.waiting_reason.as_deref(),
            terminated: self.terminated,
            last_terminated: self.last_terminated,
            last_terminated_reason: self.last_terminated_reason.as_deref(),
        }
    }
}

/// The compact, owned form of a pod: its namespace, name, UID and resource version,
/// annotations, revision hash,
/// controller owner, node, termination, phase and container statuses, and nothing else.
///
/// ```
/// use canary_predicates::k8s_openapi::api::core::v1::{ContainerStatus, Pod, PodStatus};
/// use canary_predicates::{PodFacts, PodSummary, pod_is_ready};
///
/// let pod = Pod {
///     status: Some(PodStatus {
///         phase: Some("Running".into()),
///         container_statuses: Some(vec![ContainerStatus { ready: true, ..Default::default() }]),
///         ..PodStatus::default()
///     }),
///     ..Pod::default()
/// };
/// let summary = PodSummary::of(&pod);
/// assert!(pod_is_ready(&pod) && pod_is_ready(&summary));
/// assert_eq!(summary.phase(), Some("Running"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PodSummary {
    namespace: Box<str>,
    name: Box<str>,
    uid: Box<str>,
    resource_version: Box<str>,
    node_name: Option<Box<str>>,
    annotations: Box<[(Box<str>, Box<str>)]>,
    revision_hash: Option<Box<str>>,
    controller: Option<Box<[Box<str>; 3]>>,
    terminating: bool,
    phase: Option<Box<str>>,
    containers: Box<[ContainerSummary]>,
    init_containers: Box<[ContainerSummary]>,
}

impl PodSummary {
    /// What the predicates need of `pod`.
    pub fn of(pod: &Pod) -> Self {
        let annotations = pod
            .metadata
            .annotations
            .iter()
            .flatten()
            .map(|(key, value)| (Box::from(key.as_str()), Box::from(value.as_str())))
            .collect();
        PodSummary {
            namespace: pod.metadata.namespace.as_deref().unwrap_or_default().into(),
            name: pod.name().into(),
            uid: pod.uid().into(),
            resource_version: pod
                .metadata
                .resource_version
                .as_deref()
                .unwrap_or_default()
                .into(),
            node_name: pod.node_name().map(Box::from),
            annotations,
            revision_hash: pod.revision_hash().map(Box::from),
            controller: pod
                .controller()
                .map(|owner| Box::new([owner.kind.into(), owner.name.into(), owner.uid.into()])),
            terminating: pod.is_terminating(),
            phase: pod.phase().map(Box::from),
            containers: pod.containers().map(ContainerSummary::of).collect(),
            init_containers: pod.init_containers().map(ContainerSummary::of).collect(),
        }
    }

    /// `metadata.namespace` (`""` when absent).
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// `metadata.resourceVersion` (`""` when absent): the version of the pod a decision was
    /// made on, for a delete precondition that refuses a pod changed since.
    pub fn resource_version(&self) -> &str {
        &self.resource_version
    }

    /// Whether `self` and `other` say the same to every predicate: equal but for the resource
    /// version, which changes with every write of the pod, read or not.
    ///
    /// ```
    /// use canary_predicates::PodSummary;
    /// use canary_predicates::k8s_openapi::api::core::v1::{Pod, PodStatus};
    ///
    /// let mut pod = Pod::default();
    /// pod.metadata.resource_version = Some("1".into());
    /// let before = PodSummary::of(&pod);
    /// pod.metadata.resource_version = Some("2".into());
    /// assert!(before.same_facts(&PodSummary::of(&pod)));
    /// pod.status = Some(PodStatus { phase: Some("Running".into()), ..PodStatus::default() });
    /// assert!(!before.same_facts(&PodSummary::of(&pod)));
    /// ```
    pub fn same_facts(&self, other: &Self) -> bool {
        let PodSummary {
            namespace,
            name,
            uid,
            resource_version: _,
            node_name,
            annotations,
            revision_hash,
            controller,
            terminating,
            phase,
            containers,
            init_containers,
        } = self;
        *namespace == other.namespace
            && *name == other.name
            && *uid == other.uid
            && *node_name == other.node_name
            && *annotations == other.annotations
            && *revision_hash == other.revision_hash
            && *controller == other.controller
            && *terminating == other.terminating
            && *phase == other.phase
            && *containers == other.containers
            && *init_containers == other.init_containers
    }
}

impl PodFacts for PodSummary {
    fn name(&self) -> &str {
        &self.name
    }

    fn annotation(&self, key: &str) -> Option<&str> {
        self.annotations
            .iter()
            .find(|(k, _)| &**k == key)
            .map(|(_, value)| &**value)
    }

    fn revision_hash(&self) -> Option<&str> {
        self.revision_hash.as_deref()
    }

    fn controller(&self) -> Option<OwnerFacts<'_>> {
        self.controller
            .as_deref()
            .map(|[kind, name, uid]| OwnerFacts { kind, name, uid })
    }

    fn is_terminating(&self) -> bool {
        self.terminating
    }

    fn phase(&self) -> Option<&str> {
        self.phase.as_deref()
    }

    fn containers(&self) -> impl Iterator<Item = ContainerFacts<'_>> {
        self.containers.iter().map(ContainerSummary::facts)
    }

    fn init_containers(&self) -> impl Iterator<Item = ContainerFacts<'_>> {
        self.init_containers.iter().map(ContainerSummary::facts)
    }

    fn node_name(&self) -> Option<&str> {
        self.node_name.as_deref()
    }

    fn uid(&self) -> &str {
        &self.uid
    }
}

/// References too, so that `&&Pod` from iterator adaptors can be passed as they are.
impl<T: PodFacts + ?Sized> PodFacts for &T {
    fn name(&self) -> &str {
        (**self).name()
    }

    fn annotation(&self, key: &str) -> Option<&str> {
        (**self).annotation(key)
    }

    fn revision_hash(&self) -> Option<&str> {
        (**self).revision_hash()
    }

    fn controller(&self) -> Option<OwnerFacts<'_>> {
        (**self).controller()
    }

    fn is_terminating(&self) -> bool {
        (**self).is_terminating()
    }

    fn phase(&self) -> Option<&str> {
        (**self).phase()
    }

    fn containers(&self) -> impl Iterator<Item = ContainerFacts<'_>> {
        (**self).containers()
    }

    fn init_containers(&self) -> impl Iterator<Item = ContainerFacts<'_>> {
        (**self).init_containers()
    }

    fn node_name(&self) -> Option<&str> {
        (**self).node_name()
    }

    fn uid(&self) -> &str {
        (**self).uid()
    }
}
