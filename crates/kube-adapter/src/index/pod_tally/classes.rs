//! The pods of one group by class: what counting a pod under a [`PodCountRule`] reads of it,
//! but its readiness and its containers, under one set of annotation keys.
//!
//! The rule a group is counted under changes once or twice per rollout (the new target when it
//! starts, the new revision hash once the DaemonSet controller has made it), and counting the
//! group again then walked every pod: about 3.5 ms on 5,000 nodes, in the very pass that makes
//! the rollout's first write (issue 20's reaction latency). A DaemonSet's pods fall into a
//! handful of classes (one per revision, terminating or not), so a count under a new rule reads
//! the classes instead: O(classes + pods that could be crash-looping).
//!
//! Invariants: a class's counts are those of the group's pods of that class, kept by every
//! change of the group ([`PodClasses::add`], [`PodClasses::remove`]), and a class with no pods
//! is dropped, so classes kept up to date equal classes built afresh. Whether a class's pods
//! count, and as updated, is decided by the predicates themselves on the class read as a pod
//! ([`ClassFacts`]): they read of a pod only what its class holds. Debug builds check both
//! against a full recount on every read of the counts.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{DefaultHasher, Hash, Hasher};

use canary_predicates::{
    AnnotationKeys, ContainerFacts, CrashLoopPolicy, OwnerFacts, PodFacts, PodSummary,
    pod_crash_loop, pod_is_ready,
};

/// What a class is made of, borrowed from a pod or from a stored class: the controller owner
/// (kind, name, UID), terminating or not, the revision hash label, and the target annotations
/// (version, registry, id, under the classes' keys).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct ClassView<'a> {
    controller: Option<(&'a str, &'a str, &'a str)>,
    terminating: bool,
    revision_hash: Option<&'a str>,
    target: [Option<&'a str>; 3],
}

impl<'a> ClassView<'a> {
    fn of(pod: &'a PodSummary, keys: &AnnotationKeys) -> Self {
        ClassView {
            controller: pod
                .controller()
                .map(|owner| (owner.kind, owner.name, owner.uid)),
            terminating: pod.is_terminating(),
            revision_hash: pod.revision_hash(),
            target: [
                pod.annotation(&keys.version),
                pod.annotation(&keys.registry),
                pod.annotation(&keys.id),
            ],
        }
    }

    /// A hash with fixed keys: the same for a pod and for its stored class, in every process.
    fn hash64(&self) -> u64 {
        let mut hasher = DefaultHasher::new();
        self.hash(&mut hasher);
        hasher.finish()
    }
}

/// One class, owned.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct PodClass {
    controller: Option<[Box<str>; 3]>,
    terminating: bool,
    revision_hash: Option<Box<str>>,
    target: [Option<Box<str>>; 3],
}

impl PodClass {
    fn owned(view: &ClassView<'_>) -> Self {
        PodClass {
            controller: view
                .controller
                .map(|(kind, name, uid)| [kind.into(), name.into(), uid.into()]),
            terminating: view.terminating,
            revision_hash: view.revision_hash.map(Box::from),
            target: view.target.map(|value| value.map(Box::from)),
        }
    }

    fn view(&self) -> ClassView<'_> {
        ClassView {
            controller: self
                .controller
                .as_ref()
                .map(|[kind, name, uid]| (&**kind, &**name, &**uid)),
            terminating: self.terminating,
            revision_hash: self.revision_hash.as_deref(),
            target: [
                self.target[0].as_deref(),
                self.target[1].as_deref(),
                self.target[2].as_deref(),
            ],
        }
    }
}

/// A class read as a pod, for the predicates to say whether its pods count and as updated:
/// what the class holds, and nothing else (no name, phase or containers, so never ready and
/// never crash-looping: those are counted pod by pod).
pub(super) struct ClassFacts<'a> {
    class: ClassView<'a>,
    keys: &'a AnnotationKeys,
}

impl PodFacts for ClassFacts<'_> {
    fn name(&self) -> &str {
        ""
    }

    fn annotation(&self, key: &str) -> Option<&str> {
        let [version, registry, id] = self.class.target;
        if key == self.keys.version {
            version
        } else if key == self.keys.registry {
            registry
        } else if key == self.keys.id {
            id
        } else {
            None
        }
    }

    fn revision_hash(&self) -> Option<&str> {
        self.class.revision_hash
    }

    fn controller(&self) -> Option<OwnerFacts<'_>> {
        self.class
            .controller
            .map(|(kind, name, uid)| OwnerFacts { kind, name, uid })
    }

    fn is_terminating(&self) -> bool {
        self.class.terminating
    }

    fn phase(&self) -> Option<&str> {
        None
    }

    fn containers(&self) -> impl Iterator<Item = ContainerFacts<'_>> {
        std::iter::empty()
    }

    fn init_containers(&self) -> impl Iterator<Item = ContainerFacts<'_>> {
        std::iter::empty()
    }

    fn node_name(&self) -> Option<&str> {
        None
    }

    fn uid(&self) -> &str {
        ""
    }
}

/// The pods of one class: how many, how many ready, and which could be crash-looping under
/// some policy (the only ones a count looks at one by one).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct ClassPods {
    pub(super) pods: u32,
    pub(super) ready: u32,
    pub(super) crash_candidates: BTreeSet<PodName>,
}

/// The classes of one group's pods under `keys`, by the hash of their [`ClassView`].
#[derive(Debug, Clone)]
pub(super) struct PodClasses {
    keys: AnnotationKeys,
    buckets: HashMap<u64, Vec<(PodClass, ClassPods)>>,
}

impl PodClasses {
    /// The classes of `pods` under `keys`, built afresh.
    pub(super) fn of<'p>(
        keys: AnnotationKeys,
        pods: impl IntoIterator<Item = &'p PodSummary>,
    ) -> Self {
        let mut classes = PodClasses {
            keys,
            buckets: HashMap::new(),
        };
        for pod in pods {
            classes.add(pod);
        }
        classes
    }

    /// The annotation keys the classes read the target under.
    pub(super) fn keys(&self) -> &AnnotationKeys {
        &self.keys
    }

    /// `pod` joins the group (or arrives in its new form).
    pub(super) fn add(&mut self, pod: &PodSummary) {
        let view = ClassView::of(pod, &self.keys);
        let bucket = self.buckets.entry(view.hash64()).or_default();
        let index = match bucket.iter().position(|(class, _)| class.view() == view) {
            Some(index) => index,
            None => {
                bucket.push((PodClass::owned(&view), ClassPods::default()));
                bucket.len() - 1
            }
        };
        if let Some((_, pods)) = bucket.get_mut(index) {
            pods.pods = pods.pods.saturating_add(1);
            pods.ready = pods.ready.saturating_add(u32::from(pod_is_ready(pod)));
            if could_crash_loop(pod) {
                pods.crash_candidates.insert(identity(pod));
            }
        }
    }

    /// `pod` leaves the group (or leaves its old form): exactly what [`add`](Self::add) added.
    pub(super) fn remove(&mut self, pod: &PodSummary) {
        let view = ClassView::of(pod, &self.keys);
        let hash = view.hash64();
        let Some(bucket) = self.buckets.get_mut(&hash) else {
            return;
        };
        let Some(index) = bucket.iter().position(|(class, _)| class.view() == view) else {
            return;
        };
        if let Some((_, pods)) = bucket.get_mut(index) {
            pods.pods = pods.pods.saturating_sub(1);
            pods.ready = pods.ready.saturating_sub(u32::from(pod_is_ready(pod)));
            if could_crash_loop(pod) {
                pods.crash_candidates.remove(&identity(pod));
            }
            if pods.pods == 0 {
                bucket.swap_remove(index);
            }
        }
        if bucket.is_empty() {
            self.buckets.remove(&hash);
        }
    }

    /// Each class read as a pod, with its pods.
    pub(super) fn iter(&self) -> impl Iterator<Item = (ClassFacts<'_>, &ClassPods)> {
        self.buckets.values().flatten().map(|(class, pods)| {
            (
                ClassFacts {
                    class: class.view(),
                    keys: &self.keys,
                },
                pods,
            )
        })
    }

    /// The classes in a fixed order, for comparisons.
    fn sorted(&self) -> BTreeMap<&PodClass, &ClassPods> {
        self.buckets
            .values()
            .flatten()
            .map(|(class, pods)| (class, pods))
            .collect()
    }
}

impl PartialEq for PodClasses {
    /// The same keys and classes, whatever order the pods came in.
    fn eq(&self, other: &Self) -> bool {
        self.keys == other.keys && self.sorted() == other.sorted()
    }
}

impl Eq for PodClasses {}

/// Whether some crash-loop policy could call `pod` crash-looping: the reference's (any restart
/// or termination) or the strictest strict one (one restart, init containers included; a
/// higher threshold, or init containers left out, flags a subset of these pods).
fn could_crash_loop(pod: &PodSummary) -> bool {
    pod_crash_loop(pod, &CrashLoopPolicy::KubeVirt).is_some()
        || pod_crash_loop(
            pod,
            &CrashLoopPolicy::Strict {
                restart_threshold: 1,
                include_init_containers: true,
            },
        )
        .is_some()
}

/// `(namespace, name)` of a pod: crash loops are kept in this order, the order in which
/// [`canary_predicates::count_pods`] names the first one.
pub(crate) type PodName = (String, String);

/// The [`PodName`] of `pod`.
pub(super) fn identity(pod: &PodSummary) -> PodName {
    (pod.namespace().to_owned(), PodFacts::name(pod).to_owned())
}
