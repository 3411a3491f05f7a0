//! The watches of one controller term, each a named stream of triggers for kube-runtime's
//! `Controller`: the CanaryDaemonSets (decoded one by one), every DaemonSet, the labelled pods
//! and ControllerRevisions (indexed by owner), and the nodes. Each keeps its cache or index up
//! to date as its events pass, says when it has listed once ([`Listed`]), and hands on only the
//! events that ask for a pass; its errors stop at [`WatchErrors`] (see `trigger`).
//!
//! # Invariants
//!
//! - A watch builds its stream and sends nothing: the requests start when the `Controller`
//!   polls it, in the order the term hands the streams to it.
//! - An event that concerns no CanaryDaemonSet is no trigger (it would be waiting work no pass
//!   serves, which the liveness check counts as a wedge).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use canary_predicates::PodSummary;
use futures::{TryStreamExt, future};
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use kube::api::{Api, DynamicObject};
use kube::runtime::reflector::{ObjectRef, store::Writer};
use kube::runtime::{PredicateConfig, predicates};
use kube::runtime::{WatchStreamExt, reflector::Store, watcher};
use kube::{Client, ResourceExt};
use tokio::sync::mpsc;
use tracing::info;

use crate::crd::CanaryDaemonSet;
use crate::daemon_set_trigger::DaemonSetTriggers;
use crate::desired::OWNER_LABEL;
use crate::health::Health;
use crate::index::{Moved, OwnerIndex, WatchedPod};
use crate::reconcile::Context;
use crate::scope::api;
use crate::trigger::{Coalesced, WatchBackoff, WatchErrors, relisting_watcher};
use crate::undecodable::Notice;
use crate::watched_node::{CachedNode, WatchedNode};

/// A stream of triggers of kinds `K`, as the `Controller` takes them.
pub(super) type Triggers<K> = futures::stream::BoxStream<'static, Result<K, watcher::Error>>;

/// What the watches of one term share: the client and the namespace they watch, whether each
/// cache has listed, and where their errors go.
pub(super) struct Watching<'a> {
    pub(super) client: &'a Client,
    pub(super) namespace: Option<&'a str>,
    pub(super) listed: Listed,
    pub(super) errors: WatchErrors,
}

impl Watching<'_> {
    /// Every DaemonSet (not only labelled ones), so that an existing DaemonSet is found (and
    /// adopted when asked) instead of being created again, into `writer`'s cache. An event is
    /// a trigger only when it changed what a pass reads (the DaemonSet controller's status
    /// writes of a rollout mostly move counts the pod index triggers on already, issue 20),
    /// and only when it concerns a CanaryDaemonSet of `canaries`.
    pub(super) fn daemon_sets(
        &self,
        writer: Writer<DaemonSet>,
        canaries: Store<CanaryDaemonSet>,
    ) -> Triggers<DaemonSet> {
        let listed = self.listed.clone();
        let mut triggers = DaemonSetTriggers::default();
        let stream = relisting_watcher(
            api::<DaemonSet>(self.client, self.namespace),
            watcher::Config::default(),
        )
        .backoff(WatchBackoff::default())
        .map_ok(move |event| {
            listed.note(&event, Source::DaemonSets);
            event
        })
        .reflect(writer)
        .map_ok(move |event| triggers.filter(event))
        .map_ok(move |ds| ds.filter(|ds| !owner_or_referrers(ds, &canaries.state()).is_empty()));
        Box::pin(self.errors.quiet_or_trigger(stream, "daemonsets"))
    }

    /// The pods labelled with the [`OWNER_LABEL`], into `index`. A pod event is a trigger only
    /// when it moved something a pass reads (issue 20: most pod events of a rollout move
    /// nothing a decision reads, an old pod's readiness or its end, a new resource version;
    /// see `OwnerIndex::apply`). A relist's pods always are. One that moves counts no decision
    /// turns on waits, with the others of its CanaryDaemonSet, in `counts_moved` (one pass per
    /// `COUNTS_WAIT`, which brings the status' counts up to date); one that moves the facts a
    /// Pods-driver pass reads, in `facts_moved`.
    pub(super) fn pods(
        &self,
        index: OwnerIndex<PodSummary>,
        counts_moved: Coalesced<CanaryDaemonSet>,
        facts_moved: Coalesced<CanaryDaemonSet>,
    ) -> Triggers<WatchedPod> {
        let listed = self.listed.clone();
        let owned = watcher::Config::default().labels(OWNER_LABEL);
        let stream = relisting_watcher(api::<WatchedPod>(self.client, self.namespace), owned)
            .backoff(WatchBackoff::default())
            .map_ok(move |event| {
                let moved = index.apply(&event);
                listed.note(&event, Source::Pods);
                match event {
                    watcher::Event::Apply(pod) | watcher::Event::Delete(pod) => match moved {
                        Moved::Decision => Some(pod),
                        Moved::Facts => {
                            if let Some(owner) = owner_of_labelled(pod) {
                                facts_moved.later(owner);
                            }
                            None
                        }
                        Moved::Counts => {
                            if let Some(owner) = owner_of_labelled(pod) {
                                counts_moved.later(owner);
                            }
                            None
                        }
                        Moved::Nothing => None,
                    },
                    watcher::Event::InitApply(pod) => Some(pod),
                    watcher::Event::Init | watcher::Event::InitDone => None,
                }
            });
        Box::pin(self.errors.quiet_or_trigger(stream, "pods"))
    }

    /// The ControllerRevisions labelled with the [`OWNER_LABEL`], into `index`; each event
    /// triggers its CanaryDaemonSet.
    pub(super) fn revisions(
        &self,
        index: OwnerIndex<ControllerRevision>,
    ) -> Triggers<ControllerRevision> {
        let listed = self.listed.clone();
        let owned = watcher::Config::default().labels(OWNER_LABEL);
        let stream = relisting_watcher(
            api::<ControllerRevision>(self.client, self.namespace),
            owned,
        )
        .backoff(WatchBackoff::default())
        .map_ok(move |event| {
            index.apply(&event);
            listed.note(&event, Source::Revisions);
            event
        })
        .map_ok(self.errors.working("controllerrevisions"))
        .touched_objects();
        Box::pin(self.errors.without_errors(stream, "controllerrevisions"))
    }

    /// Nodes, for the health gates and the Pods driver: health and troubled conditions, zone
    /// and canary labels, nothing else, decoded as
    /// `WatchedNode` (a node's status carries its image list and more, several KiB each) and
    /// kept in `index` as `CachedNode`. Not part of readiness: a controller without node
    /// permissions still runs the MaxUnavailable driver. Kubelets report their status every
    /// few minutes: only a change of what the drivers read triggers (`NodeTally`), and only
    /// when there is a CanaryDaemonSet.
    pub(super) fn nodes(
        &self,
        index: OwnerIndex<CachedNode>,
        canaries: Store<CanaryDaemonSet>,
    ) -> Triggers<WatchedNode> {
        let stream = relisting_watcher(
            Api::<WatchedNode>::all(self.client.clone()),
            watcher::Config::default(),
        )
        .backoff(WatchBackoff::default())
        .map_ok(move |event| {
            let moved = index.apply(&event);
            let node = match event {
                watcher::Event::Apply(node) | watcher::Event::Delete(node) => {
                    (moved != Moved::Nothing).then_some(node)
                }
                watcher::Event::InitApply(node) => Some(node),
                watcher::Event::Init | watcher::Event::InitDone => None,
            };
            node.filter(|_| !canaries.state().is_empty())
        });
        Box::pin(self.errors.quiet_or_trigger(stream, "nodes"))
    }

    /// CanaryDaemonSets, into `writer`'s cache: listed and watched untyped and decoded one by
    /// one, so that one object that does not decode (an out-of-range integer an old API
    /// server stored, say) goes to `undecodable` and ends as an InvalidSpec on that object, and
    /// never fails the list, which would stop every other object's rollout. Only spec changes
    /// (generation) and the verbs' marks trigger a pass: the status is this controller's own
    /// writing (see `spec_or_marks`). The cache still sees every change.
    pub(super) fn canary_daemon_sets(
        &self,
        writer: Writer<CanaryDaemonSet>,
        undecodable: mpsc::UnboundedSender<Notice>,
        ctx: Arc<Context>,
    ) -> Triggers<CanaryDaemonSet> {
        let listed = self.listed.clone();
        let stream = relisting_watcher(
            crate::crd::dynamic_api(self.client, self.namespace),
            watcher::Config::default(),
        )
        .backoff(WatchBackoff::default())
        .try_filter_map(move |event| {
            listed.note(&event, Source::CanaryDaemonSets);
            future::ready(Ok(typed_event(event, &undecodable, &ctx)))
        })
        .map_ok(say_when_none(self.namespace))
        .map_ok(self.errors.working("canarydaemonsets"))
        .reflect(writer)
        .applied_objects()
        .predicate_filter(spec_or_marks, PredicateConfig::default());
        Box::pin(self.errors.without_errors(stream, "canarydaemonsets"))
    }
}

/// The CanaryDaemonSets a node event concerns: every one, since the health gates of both
/// drivers read the nodes (issue 46: a node the release breaks fails the rollout at once, not
/// at the next pod event); the Pods driver also reads their zones and canary labels.
pub(super) fn node_readers(all: &[Arc<CanaryDaemonSet>]) -> Vec<ObjectRef<CanaryDaemonSet>> {
    all.iter().map(|cds| ObjectRef::from_obj(&**cds)).collect()
}

/// The CanaryDaemonSets a DaemonSet event concerns: its controller owner, and every one that
/// references it through `spec.workloadRef`.
pub(super) fn owner_or_referrers(
    ds: &DaemonSet,
    all: &[Arc<CanaryDaemonSet>],
) -> Vec<ObjectRef<CanaryDaemonSet>> {
    let namespace = ds.namespace();
    let name = ds.name_any();
    let owner = ds
        .owner_references()
        .iter()
        .find(|o| o.controller == Some(true) && o.kind == "CanaryDaemonSet")
        .and_then(|o| {
            Some(ObjectRef::<CanaryDaemonSet>::new(&o.name).within(namespace.as_deref()?))
        });
    let referrers = all.iter().filter(|cds| {
        cds.namespace() == namespace
            && cds
                .spec
                .workload_ref
                .as_ref()
                .is_some_and(|w| w.name == name)
    });
    owner
        .into_iter()
        .chain(referrers.map(|cds| ObjectRef::from_obj(&**cds)))
        .collect()
}

/// What of a CanaryDaemonSet triggers a pass: its spec (the generation) and the marks of the
/// verbs, annotations a user sets to end a pause (`promote`), to hold (`pause`, `resume`) or to
/// start a failed rollout again (`retry`) or to go back (`abort`, `undo`);
/// the status is this controller's own writing.
fn spec_or_marks(cds: &CanaryDaemonSet) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    predicates::generation(cds).hash(&mut hasher);
    cds.annotations()
        .get(crate::crd::PROMOTE_ANNOTATION)
        .hash(&mut hasher);
    crate::crd::hold_requested(cds).hash(&mut hasher);
    for mark in [
        crate::crd::RETRY_ANNOTATION,
        crate::crd::ABORT_ANNOTATION,
        crate::crd::UNDO_ANNOTATION,
    ] {
        cds.annotations().get(mark).hash(&mut hasher);
    }
    Some(hasher.finish())
}

/// A CanaryDaemonSet watch event, decoded object by object. An object that does not decode is
/// sent to the `undecodable` reporter (with why) and kept out of the typed store: left out of a
/// (re)list, and removed (a `Delete` of a stand-in with its metadata) when it stops decoding. A
/// deleted object is forgotten.
fn typed_event(
    event: watcher::Event<DynamicObject>,
    undecodable: &mpsc::UnboundedSender<Notice>,
    ctx: &Context,
) -> Option<watcher::Event<CanaryDaemonSet>> {
    use watcher::Event;
    // A stopped term has dropped the receiver: nothing left to report to.
    let decoded = |object: DynamicObject| match crate::crd::decode(object) {
        Ok(cds) => {
            let _ = undecodable.send(Notice::Cleared(ObjectRef::from_obj(&cds)));
            Some(cds)
        }
        Err(undecoded) => {
            let undecoded = *undecoded;
            let _ = undecodable.send(Notice::Invalid(Box::new(undecoded.stand_in), undecoded.why));
            None
        }
    };
    match event {
        Event::Init => Some(Event::Init),
        Event::InitDone => Some(Event::InitDone),
        Event::InitApply(object) => decoded(object).map(Event::InitApply),
        Event::Apply(object) => {
            let stand_in = crate::crd::stand_in(&object);
            Some(decoded(object).map_or(Event::Delete(stand_in), Event::Apply))
        }
        Event::Delete(object) => {
            let gone = crate::crd::stand_in(&object);
            let _ = undecodable.send(Notice::Cleared(ObjectRef::from_obj(&gone)));
            ctx.forget(&gone);
            Some(Event::Delete(gone))
        }
    }
}

/// The four caches of a term, and whether each has listed once: the leader is ready when all
/// have ([`Health::set_caches_ready`]).
#[derive(Clone)]
pub(super) struct Listed {
    flags: [Arc<AtomicBool>; 4],
    health: Health,
}

/// Which cache an event came from (an index into [`Listed`]).
#[derive(Clone, Copy)]
pub(super) enum Source {
    DaemonSets = 0,
    Pods = 1,
    Revisions = 2,
    CanaryDaemonSets = 3,
}

impl Listed {
    pub(super) fn new(health: Health) -> Self {
        health.set_caches_ready(false);
        Self {
            flags: Default::default(),
            health,
        }
    }

    fn note<K>(&self, event: &watcher::Event<K>, source: Source) {
        if matches!(event, watcher::Event::InitDone) {
            self.flag(source).store(true, Ordering::Release);
            if self.flags.iter().all(|flag| flag.load(Ordering::Acquire)) {
                self.health.set_caches_ready(true);
            }
        }
    }

    /// Whether `source` has listed once (shared: the pass reads the DaemonSets' one).
    pub(super) fn flag(&self, source: Source) -> Arc<AtomicBool> {
        match source {
            Source::DaemonSets => self.flags[0].clone(),
            Source::Pods => self.flags[1].clone(),
            Source::Revisions => self.flags[2].clone(),
            Source::CanaryDaemonSets => self.flags[3].clone(),
        }
    }
}

/// A pass-through of the CanaryDaemonSet watch events that says once, at info, when the first
/// complete list finds none: a controller with nothing to do is otherwise silent, and its user
/// wonders whether it works.
fn say_when_none(
    namespace: Option<&str>,
) -> impl FnMut(watcher::Event<CanaryDaemonSet>) -> watcher::Event<CanaryDaemonSet> + Send + 'static
{
    let place = match namespace {
        Some(ns) => format!("in namespace {ns}"),
        None => "in any namespace".to_owned(),
    };
    let mut listed = 0_usize;
    let mut said = false;
    move |event| {
        match &event {
            watcher::Event::Init => listed = 0,
            watcher::Event::InitApply(_) => listed += 1,
            watcher::Event::InitDone if listed == 0 && !said => {
                said = true;
                info!("no CanaryDaemonSet {place} yet: nothing to roll out until one is created");
            }
            _ => {}
        }
        event
    }
}

/// Maps a pod or ControllerRevision to its CanaryDaemonSet through the [`OWNER_LABEL`].
pub(super) fn owner_of_labelled<K: kube::Resource>(obj: K) -> Option<ObjectRef<CanaryDaemonSet>> {
    let name = obj.labels().get(OWNER_LABEL)?.clone();
    let namespace = obj.namespace()?;
    Some(ObjectRef::new(&name).within(&namespace))
}
