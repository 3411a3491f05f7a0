//! What the controller remembers about each `CanaryDaemonSet` between passes, in one map, and
//! the timers that bring an object back to write a deferred status.
//!
//! The status is the controller's memory across restarts; this is the short-term memory of one
//! process, which only ever makes a pass *more* careful: our last DaemonSet write not yet in the
//! cache, a DaemonSet we created that the watch has not delivered, our last status (fresher than
//! the cache's), the error streak for the backoff, when the status was last written, the event
//! recorders of the current spec generation (one per distinct message), the Pods driver's deletions (nodes being replaced,
//! pods refused from an outdated copy), and the analysis run of the pause step being
//! measured (its task stops when the entry drops it or is forgotten). All of it starts empty
//! with each leader term, but the [`WriteLedger`] of the process's own DaemonSet writes, which
//! cannot go stale.
//!
//! # Invariants
//!
//! - One entry per CanaryDaemonSet ([`ObjectRef`]), holding everything remembered about it; a
//!   remembered fact about a DaemonSet carries that DaemonSet's name (and UID where a re-created
//!   DaemonSet must not be mistaken for the old one), so a renamed or re-created DaemonSet
//!   never inherits it.
//! - Every critical section is one map operation: the lock is never held across an await.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::apps::v1::DaemonSet;
use kube::runtime::events::Recorder;
use kube::runtime::reflector::ObjectRef;
use tokio::sync::mpsc;
use tokio::time::Instant;

use canary_analysis::{AnalysisRun, RunKey};
use canary_state_machine::{AnalysisVerdict, TemplateValues};

use crate::crd::{AnalysisStatus, CanaryDaemonSet, CanaryDaemonSetStatus};
use crate::sync::lock;

/// How long a DaemonSet this controller created (or was told exists) may be missing from the
/// cache before the controller creates it again: about the DaemonSet watcher's longest backoff.
/// Without it, every pod event during a watch outage would send a create the server refuses.
pub(crate) const CREATE_GRACE: Duration = Duration::from_secs(30);

/// How long a node whose pod was deleted counts as being replaced without a new pod: the
/// DaemonSet controller normally creates it within seconds; one that never comes is left to the
/// DaemonSet's own desired count.
pub(crate) const REPLACE_GRACE: Duration = Duration::from_secs(300);

/// How long kube-runtime's `Recorder` folds a repeated event into the earlier one (its
/// private `CACHE_TTL`): a recorder unused for longer has nothing left to fold into.
pub(crate) const EVENT_FOLD_WINDOW: Duration = Duration::from_secs(6 * 60);

/// The most event identities remembered per object: a bound on what a flood of distinct
/// messages (one per pod count, say) can make the controller keep.
pub(crate) const MAX_EVENT_IDENTITIES: usize = 64;

/// What tells one event from another for folding (see [`Memory::recorder`]): the series of the
/// pass it belongs to, its type, reason and note (the note as published, cut to fit).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct EventIdentity {
    pub series: String,
    pub warning: bool,
    pub reason: String,
    pub note: String,
}

/// The event recorders of one spec of one object, by event identity, each with its last use.
struct Recorders {
    uid: String,
    generation: Option<i64>,
    by_identity: HashMap<EventIdentity, (Recorder, Instant)>,
}

/// The last status this controller computed for an object.
#[derive(Debug, Clone)]
struct RememberedStatus {
    /// The object's UID: a deleted and re-created CanaryDaemonSet starts from its own status.
    uid: String,
    status: CanaryDaemonSetStatus,
    /// False when the write failed or was deferred: the next pass must write it even if
    /// nothing changed.
    persisted: bool,
}

/// A successful DaemonSet write of ours: `(DaemonSet name, its UID, the generation it got)`.
type WrittenGeneration = (String, String, i64);

/// Everything remembered about one CanaryDaemonSet.
#[derive(Default)]
struct Remembered {
    /// The `kubectl.kubernetes.io/restartedAt` of a `kubectl rollout restart` this controller
    /// took into the spec (see `Pass::take_restart`): the live template carrying it is no
    /// drift once the spec carries it too.
    restart_taken: Option<String>,
    /// Our last successful DaemonSet write in this term.
    written_generation: Option<WrittenGeneration>,
    /// When we created (or were told of) the DaemonSet of that name.
    created: Option<(String, Instant)>,
    status: Option<RememberedStatus>,
    /// Consecutive failed passes, for the exponential backoff.
    error_streak: u32,
    /// When the status was last written.
    status_written_at: Option<Instant>,
    /// A flush timer is running for this object.
    flush_due: bool,
    /// The invalid spec last logged: `(generation, message)`.
    invalid_logged: Option<(i64, String)>,
    /// Pods driver: nodes whose pod this controller deleted, by node name: the deleted pod's
    /// UID and when. The node has no pod until the DaemonSet controller creates the new one;
    /// until then it still counts as unavailable in its zone.
    replacing: HashMap<String, (String, Instant)>,
    /// Pods driver: pods whose deletion the API server refused because the copy it was asked
    /// from is outdated (404 gone, 409 replaced or changed), by UID: the resource version
    /// of that copy. Asking again from the same copy would be refused again.
    outdated: HashMap<String, String>,
    /// The event recorders of one spec, one per event identity (see [`Memory::recorder`]).
    recorders: Option<Recorders>,
    /// The measurements of the analysed pause step the rollout is in (its task ends when it
    /// is replaced or forgotten).
    analysis: Option<AnalysisRun>,
}

impl std::fmt::Debug for Remembered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // kube's Recorder is not Debug; which spec it serves is what matters.
        f.debug_struct("Remembered")
            .field("written_generation", &self.written_generation)
            .field("created", &self.created)
            .field("status", &self.status)
            .field("error_streak", &self.error_streak)
            .field("status_written_at", &self.status_written_at)
            .field("flush_due", &self.flush_due)
            .field("invalid_logged", &self.invalid_logged)
            .field("replacing", &self.replacing)
            .field("outdated", &self.outdated)
            .field(
                "recorders",
                &self.recorders.as_ref().map(|r| {
                    (
                        &r.uid,
                        r.generation,
                        r.by_identity.keys().collect::<Vec<_>>(),
                    )
                }),
            )
            .field("analysis", &self.analysis.as_ref().map(AnalysisRun::key))
            .finish()
    }
}

type Key = ObjectRef<CanaryDaemonSet>;

/// Our last successful DaemonSet write for each CanaryDaemonSet, `(DaemonSet name, its UID,
/// the generation it got)`, kept by the process across its leader terms (the rest of
/// [`Memory`] starts empty with each term).
///
/// It outlives a term because it cannot go stale: while the live DaemonSet still has that
/// name, UID and generation, nobody has changed its spec since, so its template is ours even
/// when the status write that would have recorded it was lost when the term ended (soak seed
/// 20001008: a rollback's write, then the lease lost and taken back; under `driftPolicy:
/// Report` the rollback then held forever as "changed outside the controller").
#[derive(Debug, Clone, Default)]
pub(crate) struct WriteLedger(Arc<Mutex<HashMap<Key, WrittenGeneration>>>);

/// The per-object memory of the running controller; see the module documentation.
#[derive(Debug)]
pub(crate) struct Memory {
    objects: Arc<Mutex<HashMap<Key, Remembered>>>,
    ledger: WriteLedger,
    flush_tx: mpsc::UnboundedSender<Arc<CanaryDaemonSet>>,
    flush_rx: Mutex<Option<mpsc::UnboundedReceiver<Arc<CanaryDaemonSet>>>>,
}

impl Default for Memory {
    fn default() -> Self {
        let (flush_tx, flush_rx) = mpsc::unbounded_channel();
        Self {
            objects: Arc::default(),
            ledger: WriteLedger::default(),
            flush_tx,
            flush_rx: Mutex::new(Some(flush_rx)),
        }
    }
}

impl Memory {
    fn with<R>(&self, cds: &CanaryDaemonSet, f: impl FnOnce(&mut Remembered) -> R) -> R {
        let mut objects = lock(&self.objects);
        f(objects.entry(ObjectRef::from_obj(cds)).or_default())
    }

    /// Whether our last successful write of `cached` (same name and UID) has a generation the
    /// cache has not caught up with: deciding now would redo it.
    pub(crate) fn cache_behind(&self, cds: &CanaryDaemonSet, cached: &DaemonSet) -> bool {
        let name = cached.metadata.name.as_deref().unwrap_or_default();
        let uid = cached.metadata.uid.as_deref().unwrap_or_default();
        let generation = cached.metadata.generation.unwrap_or_default();
        self.with(cds, |r| {
            r.written_generation
                .as_ref()
                .is_some_and(|(n, u, g)| n == name && u == uid && *g > generation)
        })
    }

    /// Remembers our successful write of `written`; in the [`WriteLedger`] too when its whole
    /// template is ours (`template_ours`: not a hold or its end carrying a hand edit along).
    pub(crate) fn remember_write(
        &self,
        cds: &CanaryDaemonSet,
        written: &DaemonSet,
        template_ours: bool,
    ) {
        let meta = &written.metadata;
        if let (Some(name), Some(uid), Some(generation)) = (&meta.name, &meta.uid, meta.generation)
        {
            let written = (name.clone(), uid.clone(), generation);
            if template_ours {
                lock(&self.ledger.0).insert(ObjectRef::from_obj(cds), written.clone());
            }
            self.with(cds, |r| r.written_generation = Some(written));
        }
    }

    /// Whether `live` is, unchanged since, this process's own last write for `cds`, in this
    /// leader term or an earlier one (see [`WriteLedger`]).
    pub(crate) fn live_is_own_write(&self, cds: &CanaryDaemonSet, live: &DaemonSet) -> bool {
        let meta = &live.metadata;
        let (Some(name), Some(uid), Some(generation)) = (&meta.name, &meta.uid, meta.generation)
        else {
            return false;
        };
        lock(&self.ledger.0)
            .get(&ObjectRef::from_obj(cds))
            .is_some_and(|(n, u, g)| n == name && u == uid && *g == generation)
    }

    /// Remembers that the restart stamped `restarted_at` was taken into the spec.
    pub(crate) fn take_restart(&self, cds: &CanaryDaemonSet, restarted_at: &str) {
        self.with(cds, |r| r.restart_taken = Some(restarted_at.to_owned()));
    }

    /// Whether the restart stamped `restarted_at` is one this controller took into the spec.
    pub(crate) fn restart_taken(&self, cds: &CanaryDaemonSet, restarted_at: &str) -> bool {
        self.with(cds, |r| r.restart_taken.as_deref() == Some(restarted_at))
    }

    /// Uses `ledger`, shared with the memories of this process's other leader terms.
    pub(crate) fn with_ledger(self, ledger: WriteLedger) -> Self {
        Self { ledger, ..self }
    }

    /// Whether the DaemonSet `ds_name` is missing from the cache only because the cache is
    /// behind: this controller created it, or was told it exists, less than [`CREATE_GRACE`] ago.
    pub(crate) fn create_in_flight(&self, cds: &CanaryDaemonSet, ds_name: &str) -> bool {
        self.with(cds, |r| {
            r.created
                .as_ref()
                .is_some_and(|(name, at)| name == ds_name && at.elapsed() < CREATE_GRACE)
        })
    }

    /// Notes that the DaemonSet `ds_name` exists on the server (created, or refused as existing).
    pub(crate) fn note_created(&self, cds: &CanaryDaemonSet, ds_name: &str) {
        self.with(cds, |r| {
            r.created = Some((ds_name.to_owned(), Instant::now()))
        });
    }

    /// The cache has the DaemonSet: nothing to wait for any more.
    pub(crate) fn forget_created(&self, cds: &CanaryDaemonSet) {
        self.with(cds, |r| r.created = None);
    }

    /// The status of `cds` as this controller last wrote it, else as cached, and whether it
    /// is persisted.
    ///
    /// A pass can start from a cached object that does not have our last status write yet
    /// (the watch event is still in flight); deciding from that older status would, for
    /// example, write back an older recorded generation. Only this controller writes the
    /// status, so its own last write is the freshest memory. A new object (other UID) or a
    /// restarted controller uses the cache.
    pub(crate) fn status_of(&self, cds: &CanaryDaemonSet) -> (Option<CanaryDaemonSetStatus>, bool) {
        let current = cds.metadata.uid.as_ref();
        self.with(cds, |r| match (&r.status, current) {
            (Some(remembered), Some(uid)) if &remembered.uid == uid => {
                (Some(remembered.status.clone()), remembered.persisted)
            }
            _ => (cds.status.clone(), true),
        })
    }

    /// Remembers the status computed for `cds`, written (`persisted`) or not.
    pub(crate) fn remember_status(
        &self,
        cds: &CanaryDaemonSet,
        status: CanaryDaemonSetStatus,
        persisted: bool,
    ) {
        if let Some(uid) = cds.metadata.uid.clone() {
            self.with(cds, |r| {
                r.status = Some(RememberedStatus {
                    uid,
                    status,
                    persisted,
                });
            });
        }
    }

    /// Notes that the status of `cds` was written now.
    pub(crate) fn status_written(&self, cds: &CanaryDaemonSet) {
        self.with(cds, |r| r.status_written_at = Some(Instant::now()));
    }

    /// How long a count-only status change of `cds` must wait, or `None` when it may be
    /// written now.
    pub(crate) fn count_status_wait(
        &self,
        cds: &CanaryDaemonSet,
        interval: Duration,
    ) -> Option<Duration> {
        let last = self.with(cds, |r| r.status_written_at)?;
        let due = last + interval;
        let now = Instant::now();
        (due > now).then(|| due - now)
    }

    /// The CanaryDaemonSets whose deferred status is due: the controller reconciles each.
    ///
    /// A pass's own requeue cannot carry the deferred write: kube-runtime drops a requeue
    /// for an object that already has a trigger pending, and the pending pass may defer too.
    /// A timer per deferral, feeding this stream, makes sure the last counts get written.
    /// `None` after the first call.
    pub(crate) fn take_status_flushes(
        &self,
    ) -> Option<mpsc::UnboundedReceiver<Arc<CanaryDaemonSet>>> {
        lock(&self.flush_rx).take()
    }

    /// Makes sure `cds` is reconciled again after `wait`, once per deferral window.
    pub(crate) fn flush_status_after(&self, cds: &CanaryDaemonSet, wait: Duration) {
        let already = self.with(cds, |r| std::mem::replace(&mut r.flush_due, true));
        if already {
            return;
        }
        let cds = Arc::new(cds.clone());
        let tx = self.flush_tx.clone();
        let objects = self.objects.clone();
        tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            if let Some(r) = lock(&objects).get_mut(&ObjectRef::from_obj(&*cds)) {
                r.flush_due = false;
            }
            // A stopped controller has dropped the receiver: nothing left to flush for.
            let _ = tx.send(cds);
        });
    }

    /// Whether `message` is new for this generation of `cds` (then it is remembered): an invalid
    /// spec is logged once per generation, not on every pod event.
    pub(crate) fn first_invalid(
        &self,
        cds: &CanaryDaemonSet,
        generation: i64,
        message: &str,
    ) -> bool {
        self.with(cds, |r| {
            let new = r
                .invalid_logged
                .as_ref()
                .is_none_or(|(g, m)| *g != generation || m != message);
            if new {
                r.invalid_logged = Some((generation, message.to_owned()));
            }
            new
        })
    }

    /// Notes that the pod `uid` on `node` was deleted: the node is being replaced.
    pub(crate) fn note_replacing(&self, cds: &CanaryDaemonSet, node: &str, uid: &str) {
        self.with(cds, |r| {
            r.replacing
                .insert(node.to_owned(), (uid.to_owned(), Instant::now()));
        });
    }

    /// The nodes still being replaced, with the UID deleted: deleted less than
    /// [`REPLACE_GRACE`] ago, and without a live pod other than the one deleted (`live`: each
    /// node's live pod UID, as the cache has it). A node whose deleted pod the cache still
    /// shows live is still being replaced: the watch has not delivered the deletion yet, and
    /// that pod must not be chosen (and deleted) again. The others are forgotten.
    pub(crate) fn replacing(
        &self,
        cds: &CanaryDaemonSet,
        live: &[(&str, &str)],
    ) -> Vec<(String, String)> {
        self.with(cds, |r| {
            r.replacing.retain(|node, (uid, at)| {
                let replaced = live
                    .iter()
                    .any(|(n, live_uid)| *n == node.as_str() && *live_uid != uid.as_str());
                !replaced && at.elapsed() < REPLACE_GRACE
            });
            r.replacing
                .iter()
                .map(|(node, (uid, _))| (node.clone(), uid.clone()))
                .collect()
        })
    }

    /// Notes that the deletion of pod `uid`, asked from the cache's copy at
    /// `resource_version`, was refused because that copy is outdated.
    pub(crate) fn note_outdated(&self, cds: &CanaryDaemonSet, uid: &str, resource_version: &str) {
        self.with(cds, |r| {
            r.outdated
                .insert(uid.to_owned(), resource_version.to_owned());
        });
    }

    /// The pods whose deletion was refused from the copy the cache still holds (`cached`:
    /// each live pod's UID and resource version, as the cache has it): the watch has not
    /// brought the newer copy yet, and asking again would only be refused again (soak seed
    /// 26008792: the pods watch down for two minutes, 182 refused deletions a pass). The
    /// others, whose copy moved on or is gone, are forgotten.
    pub(crate) fn outdated(
        &self,
        cds: &CanaryDaemonSet,
        cached: &HashMap<String, String>,
    ) -> Vec<String> {
        self.with(cds, |r| {
            r.outdated
                .retain(|uid, version| cached.get(uid) == Some(&*version));
            r.outdated.keys().cloned().collect()
        })
    }

    /// The verdict and status of the analysis run of `cds` for `key`; `None` when no run
    /// measures that key (none yet, or one of another step).
    pub(crate) fn analysis_snapshot(
        &self,
        cds: &CanaryDaemonSet,
        key: &RunKey,
    ) -> Option<(AnalysisVerdict, AnalysisStatus)> {
        self.with(cds, |r| {
            r.analysis
                .as_ref()
                .filter(|run| run.key() == key)
                .map(AnalysisRun::snapshot)
        })
    }

    /// Keeps the analysis run of `key` measuring `values`: the running one when it measures
    /// `key`, else a new one from `start` (the one it replaces stops).
    pub(crate) fn keep_analysis(
        &self,
        cds: &CanaryDaemonSet,
        key: RunKey,
        values: TemplateValues,
        start: impl FnOnce(RunKey, TemplateValues) -> AnalysisRun,
    ) {
        self.with(cds, |r| match &r.analysis {
            Some(run) if *run.key() == key => run.set_values(values),
            _ => r.analysis = Some(start(key, values)),
        });
    }

    /// Stops the analysis run of `cds`, if one runs.
    pub(crate) fn stop_analysis(&self, cds: &CanaryDaemonSet) {
        let stopped = self.with(cds, |r| r.analysis.take());
        drop(stopped);
    }

    /// A wake-up of `cds`: each call brings it back for a pass, through the stream of
    /// [`take_status_flushes`](Self::take_status_flushes).
    pub(crate) fn waker(&self, cds: &CanaryDaemonSet) -> Box<dyn Fn() + Send + Sync> {
        let tx = self.flush_tx.clone();
        let cds = Arc::new(cds.clone());
        // A stopped controller has dropped the receiver: nobody left to wake.
        Box::new(move || drop(tx.send(Arc::clone(&cds))))
    }

    /// Forgets everything about a deleted CanaryDaemonSet, its ledger entry included.
    pub(crate) fn forget(&self, key: &ObjectRef<CanaryDaemonSet>) {
        lock(&self.objects).remove(key);
        lock(&self.ledger.0).remove(key);
    }

    /// The event recorder for the event `identity` of the current spec (UID and
    /// `metadata.generation`) of `cds`; a new one, made by `new`, for an identity not seen
    /// within [`EVENT_FOLD_WINDOW`] or when the spec changed.
    ///
    /// kube-runtime's `Recorder` folds an event into an earlier one with the same type,
    /// reason, action, regarding and related objects (its cache key has no note), for six
    /// minutes, and the series keeps the first note: an `undo` to v1 after the rollout of v2
    /// showed as `RolloutStarted (x2): started rollout of v2`, a rollback's second step as
    /// `step 1 of 3 started (x2)`. An event's identity here is what the reader sees of it
    /// (type, reason, note) and its series (see `Series`): only a repetition of the very same
    /// message folds (a repeated `FailedUpdate` is one Event counting up), any other message is
    /// an Event of its own, whatever action (verb, drift revert, rollback, a new spec) caused it.
    /// A new spec starts with fresh caches; identities unused for the fold window are dropped,
    /// and at most [`MAX_EVENT_IDENTITIES`] are kept per object (the least recently used go).
    pub(crate) fn recorder(
        &self,
        cds: &CanaryDaemonSet,
        identity: EventIdentity,
        new: impl FnOnce() -> Recorder,
    ) -> Recorder {
        let uid = cds.metadata.uid.clone().unwrap_or_default();
        let generation = cds.metadata.generation;
        let now = Instant::now();
        self.with(cds, |r| {
            let recorders = match &mut r.recorders {
                Some(recorders) if recorders.uid == uid && recorders.generation == generation => {
                    recorders
                }
                slot => slot.insert(Recorders {
                    uid,
                    generation,
                    by_identity: HashMap::new(),
                }),
            };
            let by_identity = &mut recorders.by_identity;
            by_identity.retain(|_, (_, used)| now.duration_since(*used) < EVENT_FOLD_WINDOW);
            if let Some((recorder, used)) = by_identity.get_mut(&identity) {
                *used = now;
                return recorder.clone();
            }
            if by_identity.len() >= MAX_EVENT_IDENTITIES
                && let Some(oldest) = by_identity
                    .iter()
                    .min_by_key(|(_, (_, used))| *used)
                    .map(|(key, _)| key.clone())
            {
                by_identity.remove(&oldest);
            }
            let recorder = new();
            by_identity.insert(identity, (recorder.clone(), now));
            recorder
        })
    }

    /// A pass of `cds` succeeded: the error backoff starts over.
    pub(crate) fn reset_errors(&self, cds: &CanaryDaemonSet) {
        self.with(cds, |r| r.error_streak = 0);
    }

    /// The backoff after one more failed pass of `cds`: `base` doubled per consecutive error,
    /// at most `max`.
    pub(crate) fn next_error_delay(
        &self,
        cds: &CanaryDaemonSet,
        base: Duration,
        max: Duration,
    ) -> Duration {
        self.with(cds, |r| {
            let delay = base.saturating_mul(1u32 << r.error_streak.min(16));
            r.error_streak = r.error_streak.saturating_add(1);
            delay.min(max)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reconcile::plan::tests::cds;

    /// Regression (DST soak seeds 1000042 and 1000104, watch latency injected): a node was
    /// forgotten as "being replaced" as soon as the cache showed a live pod on it, even the very
    /// pod just deleted (the watch had not delivered the deletion yet), so the next pass chose
    /// that pod again and deleted it a second time.
    #[test]
    fn a_deleted_pod_still_live_in_the_cache_keeps_its_node_being_replaced() {
        let cds = cds();
        let memory = Memory::default();
        memory.note_replacing(&cds, "node-1", "uid-old");
        let replacing = |live: &[(&str, &str)]| memory.replacing(&cds, live);
        assert_eq!(
            replacing(&[("node-1", "uid-old")]),
            [("node-1".to_owned(), "uid-old".to_owned())],
            "the cache still shows the deleted pod: still being replaced"
        );
        assert_eq!(replacing(&[]).len(), 1, "no pod yet: still being replaced");
        assert!(
            replacing(&[("node-1", "uid-new")]).is_empty(),
            "the new pod is there: replaced"
        );
        assert!(
            replacing(&[("node-1", "uid-old")]).is_empty(),
            "and forgotten"
        );
    }

    /// A deletion refused from an outdated copy is not asked again while the cache holds that
    /// copy, and is forgotten once the cache moves on (soak seed 26008792).
    #[test]
    fn a_pod_refused_from_an_outdated_copy_waits_for_a_newer_one() {
        let cds = cds();
        let memory = Memory::default();
        memory.note_outdated(&cds, "uid-1", "41");
        let cached = |entries: &[(&str, &str)]| {
            entries
                .iter()
                .map(|(uid, version)| ((*uid).to_owned(), (*version).to_owned()))
                .collect::<HashMap<_, _>>()
        };
        assert_eq!(
            memory.outdated(&cds, &cached(&[("uid-1", "41"), ("uid-2", "7")])),
            ["uid-1"],
            "the cache still holds the refused copy"
        );
        assert!(
            memory
                .outdated(&cds, &cached(&[("uid-1", "45")]))
                .is_empty(),
            "a newer copy: asked again"
        );
        assert!(
            memory
                .outdated(&cds, &cached(&[("uid-1", "41")]))
                .is_empty(),
            "and forgotten"
        );
        memory.note_outdated(&cds, "uid-1", "41");
        assert!(
            memory.outdated(&cds, &cached(&[])).is_empty(),
            "gone from the cache"
        );
    }

    /// The ledger outlives a term (a new `Memory` on the same ledger) and names a live
    /// DaemonSet as our write only while its name, UID and generation are those the write left.
    #[test]
    fn the_write_ledger_outlives_a_term_and_only_names_the_unchanged_write() {
        let cds = cds();
        let ds = |uid: &str, generation: i64| {
            let mut ds = DaemonSet::default();
            ds.metadata.name = Some("agent".into());
            ds.metadata.uid = Some(uid.into());
            ds.metadata.generation = Some(generation);
            ds
        };
        let ledger = WriteLedger::default();
        Memory::default()
            .with_ledger(ledger.clone())
            .remember_write(&cds, &ds("uid-1", 7), true);
        let next_term = Memory::default().with_ledger(ledger);
        assert!(next_term.live_is_own_write(&cds, &ds("uid-1", 7)));
        assert!(
            !next_term.live_is_own_write(&cds, &ds("uid-1", 8)),
            "changed since"
        );
        assert!(
            !next_term.live_is_own_write(&cds, &ds("uid-2", 7)),
            "another DaemonSet of that name"
        );
        assert!(
            !Memory::default().live_is_own_write(&cds, &ds("uid-1", 7)),
            "another process"
        );
        next_term.forget(&ObjectRef::from_obj(&cds));
        assert!(!next_term.live_is_own_write(&cds, &ds("uid-1", 7)));
    }
}
