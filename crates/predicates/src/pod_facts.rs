//! What the predicates read from a pod: the [`PodFacts`] trait, implemented by the full
//! `k8s-openapi` [`Pod`] and by the compact [`PodSummary`] a cache can keep instead.
//!
//! A `Pod` value is over 2 KiB before any of its strings (its `PodSpec` is stored inline even
//! when absent), so a controller caching the pods of 10 DaemonSets on 5,000 nodes would hold
//! hundreds of MiB. [`PodSummary::of`] keeps only what the predicates read, a few hundred
//! bytes, and every predicate gives the same answer for a pod and its summary.

use k8s_openapi::api::core::v1::{ContainerState, ContainerStatus, Pod};

use crate::CONTROLLER_REVISION_HASH_LABEL;
use crate::texts::{Texts, TextsBuilder};

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
#[derive(Clone, PartialEq, Eq, Default)]
pub struct PodSummary {
    /// The text fields in [`Field`] order (an absent one empty, see `present`), then each
    /// annotation's key and value, in key order: two allocations for all of a pod's strings
    /// (issue 20: one `Box<str>` each made the summaries of 50,000 pods a third of the
    /// controller's heap).
    texts: Texts,
    /// Which of the optional fields the pod has, one bit each ([`Field::bit`]).
    present: u8,
    terminating: bool,
    /// `metadata.creationTimestamp`, whole seconds since the epoch (the health gates: when
    /// the pod replaced the node's old one); `None` when absent.
    created: Option<i64>,
    /// The `Ready` condition's `lastTransitionTime` while it is `True` (the canary soak counts
    /// from it); `None` otherwise.
    ready_since: Option<i64>,
    containers: Box<[ContainerSummary]>,
    init_containers: Box<[ContainerSummary]>,
}

/// The text fields of a [`PodSummary`], in the order `texts` holds them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Namespace,
    Name,
    Uid,
    ResourceVersion,
    NodeName,
    RevisionHash,
    OwnerKind,
    OwnerName,
    OwnerUid,
    Phase,
}

/// How many [`Field`]s: the annotations start there.
const FIELDS: usize = 10;

impl Field {
    /// The bit of an optional field in `present` (the owner's three fields share one);
    /// `None` for a field every pod has (empty when absent, as `Pod` reads it).
    fn bit(self) -> Option<u8> {
        match self {
            Field::Namespace | Field::Name | Field::Uid | Field::ResourceVersion => None,
            Field::NodeName => Some(1),
            Field::RevisionHash => Some(2),
            Field::OwnerKind | Field::OwnerName | Field::OwnerUid => Some(4),
            Field::Phase => Some(8),
        }
    }
}

impl PodSummary {
    /// What the predicates need of `pod`.
    pub fn of(pod: &Pod) -> Self {
        let owner = pod.controller();
        let fields: [(Field, Option<&str>); FIELDS] = [
            (Field::Namespace, pod.metadata.namespace.as_deref()),
            (Field::Name, Some(pod.name())),
            (Field::Uid, Some(pod.uid())),
            (
                Field::ResourceVersion,
                pod.metadata.resource_version.as_deref(),
            ),
            (Field::NodeName, pod.node_name()),
            (Field::RevisionHash, pod.revision_hash()),
            (Field::OwnerKind, owner.map(|o| o.kind)),
            (Field::OwnerName, owner.map(|o| o.name)),
            (Field::OwnerUid, owner.map(|o| o.uid)),
            (Field::Phase, pod.phase()),
        ];
        let bytes = fields
            .iter()
            .map(|(_, v)| v.map_or(0, str::len))
            .sum::<usize>();
        let mut texts = TextsBuilder::with_capacity(bytes, FIELDS);
        let mut present = 0;
        for (position, (field, value)) in fields.into_iter().enumerate() {
            debug_assert_eq!(
                position, field as usize,
                "fields pushed out of `Field` order"
            );
            if let (Some(bit), Some(_)) = (field.bit(), value) {
                present |= bit;
            }
            texts.push(value.unwrap_or_default());
        }
        if let Some(annotations) = &pod.metadata.annotations {
            texts.push_pairs(annotations);
        }
        PodSummary {
            texts: texts.build(),
            present,
            terminating: pod.is_terminating(),
            created: pod
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|time| time.0.as_second()),
            ready_since: pod
                .status
                .as_ref()
                .and_then(|status| status.conditions.as_ref())
                .and_then(|conditions| conditions.iter().find(|c| c.type_ == "Ready"))
                .filter(|ready| ready.status == "True")
                .and_then(|ready| ready.last_transition_time.as_ref())
                .map(|time| time.0.as_second()),
            containers: pod.containers().map(ContainerSummary::of).collect(),
            init_containers: pod.init_containers().map(ContainerSummary::of).collect(),
        }
    }

    /// A field every pod has (empty when absent).
    fn field(&self, field: Field) -> &str {
        self.texts.get(field as usize).unwrap_or_default()
    }

    /// An optional field, `None` when the pod does not have it.
    fn optional(&self, field: Field) -> Option<&str> {
        let bit = field.bit()?;
        (self.present & bit != 0).then(|| self.field(field))
    }

    /// The pod's annotations, in key order.
    fn annotations(&self) -> impl Iterator<Item = (&str, &str)> {
        self.texts.pairs(FIELDS)
    }

    /// `metadata.namespace` (`""` when absent).
    pub fn namespace(&self) -> &str {
        self.field(Field::Namespace)
    }

    /// `metadata.creationTimestamp` in whole seconds since the epoch, if the pod has one.
    pub fn created(&self) -> Option<i64> {
        self.created
    }

    /// Since when the pod's `Ready` condition is `True` (its `lastTransitionTime`, whole
    /// seconds since the epoch); `None` while it is not, or not reported.
    pub fn ready_since(&self) -> Option<i64> {
        self.ready_since
    }

    /// How long until the pod is available as the DaemonSet's `minReadySeconds` counts it
    /// (`podutil.IsPodAvailable`, issue 50): `Some(0)` when it is, the seconds left while it is
    /// ready but not long enough, `None` while it is not ready. Ready is the reference's
    /// ([`pod_is_ready`](crate::pod_is_ready)); the time is its `Ready` condition's, and a
    /// ready pod without one counts from `now` (never available early).
    ///
    /// ```
    /// use canary_predicates::PodSummary;
    /// use canary_predicates::k8s_openapi::api::core::v1::Pod;
    ///
    /// let pod: Pod = serde_json::from_value(serde_json::json!({"status": {
    ///     "phase": "Running",
    ///     "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "1970-01-01T00:01:40Z"}]
    /// }})).unwrap();
    /// let pod = PodSummary::of(&pod); // ready since 100 s
    /// assert_eq!(pod.available_in(0, 105), Some(0));
    /// assert_eq!(pod.available_in(20, 105), Some(15));
    /// assert_eq!(pod.available_in(20, 120), Some(0));
    /// ```
    pub fn available_in(&self, min_ready_seconds: u64, now: i64) -> Option<u64> {
        if !crate::pod_is_ready(self) {
            return None;
        }
        if min_ready_seconds == 0 {
            return Some(0);
        }
        let since = self.ready_since.unwrap_or(now);
        let ready_for = u64::try_from(now.saturating_sub(since)).unwrap_or(0);
        Some(min_ready_seconds.saturating_sub(ready_for))
    }

    /// `metadata.resourceVersion` (`""` when absent): the version of the pod a decision was
    /// made on, for a delete precondition that refuses a pod changed since.
    pub fn resource_version(&self) -> &str {
        self.field(Field::ResourceVersion)
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
            texts,
            present,
            terminating,
            created,
            ready_since,
            containers,
            init_containers,
        } = self;
        let resource_version = Field::ResourceVersion as usize;
        *present == other.present
            && *terminating == other.terminating
            && *created == other.created
            && *ready_since == other.ready_since
            && *containers == other.containers
            && *init_containers == other.init_containers
            && texts.len() == other.texts.len()
            && (0..texts.len())
                .filter(|&index| index != resource_version)
                .all(|index| texts.get(index) == other.texts.get(index))
    }
}

impl std::fmt::Debug for PodSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PodSummary")
            .field("namespace", &self.namespace())
            .field("name", &PodFacts::name(self))
            .field("uid", &PodFacts::uid(self))
            .field("resource_version", &self.resource_version())
            .field("node_name", &PodFacts::node_name(self))
            .field("annotations", &self.annotations().collect::<Vec<_>>())
            .field("revision_hash", &PodFacts::revision_hash(self))
            .field("controller", &PodFacts::controller(self))
            .field("terminating", &self.terminating)
            .field("created", &self.created)
            .field("ready_since", &self.ready_since)
            .field("phase", &PodFacts::phase(self))
            .field("containers", &self.containers)
            .field("init_containers", &self.init_containers)
            .finish()
    }
}

impl PodFacts for PodSummary {
    fn name(&self) -> &str {
        self.field(Field::Name)
    }

    fn annotation(&self, key: &str) -> Option<&str> {
        self.texts.pair_value(FIELDS, key)
    }

    fn revision_hash(&self) -> Option<&str> {
        self.optional(Field::RevisionHash)
    }

    fn controller(&self) -> Option<OwnerFacts<'_>> {
        Some(OwnerFacts {
            kind: self.optional(Field::OwnerKind)?,
            name: self.field(Field::OwnerName),
            uid: self.field(Field::OwnerUid),
        })
    }

    fn is_terminating(&self) -> bool {
        self.terminating
    }

    fn phase(&self) -> Option<&str> {
        self.optional(Field::Phase)
    }

    fn containers(&self) -> impl Iterator<Item = ContainerFacts<'_>> {
        self.containers.iter().map(ContainerSummary::facts)
    }

    fn init_containers(&self) -> impl Iterator<Item = ContainerFacts<'_>> {
        self.init_containers.iter().map(ContainerSummary::facts)
    }

    fn node_name(&self) -> Option<&str> {
        self.optional(Field::NodeName)
    }

    fn uid(&self) -> &str {
        self.field(Field::Uid)
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
