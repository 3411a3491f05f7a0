//! Trigger streams for kube-runtime's `Controller` that never carry an error.
//!
//! kube-runtime 5.0.0 splits the Controller's queue into an `Ok` half (feeding the scheduler)
//! and an `Err` half (feeding the output) that share one peeked item. A half that peeks the
//! other half's item returns `Pending` without arranging a wake-up, trusting the other half to
//! be polled next in the same round. When the `Err` half goes first and peeks an object, and
//! the `Ok` half then takes that object and peeks an error, nothing polls the queue again
//! until some unrelated wake-up: the error's backoff timer is never armed, the watchers are no
//! longer read, and while the caches are not ready yet the controller makes no pass at all, for
//! as long as the cluster stays quiet. The deterministic simulation found this (soak seed
//! 1000827, docs/reliability.md, finding 7).
//!
//! So watch errors are handled here: counted ([`Stats::watch_errors`]), noted in the
//! [`Health`], logged through the [`WatchLog`] and dropped before the Controller sees them.
//! Nothing is lost: each watcher retries on its own with [`WatchBackoff`], and the relist or
//! rewatch that follows an error delivers the objects again.
//!
//! The [`WatchLog`] of one controller term is shared by its watchers, so that an outage of the
//! API server (every watcher failing on every retry, for the same reason) is one warning line
//! saying why, repeated at most every [`REPEAT_WARNING`] while it lasts, and one line when every
//! watch works again. A different cause is warned at once. A failure is warned when the retry
//! fails too: a blip that the first retry mends is only counted (and logged at debug), and the
//! retry's error is the one that says why the server cannot be reached (the first error of an
//! outage is often a reset connection, the next ones "connection refused").
//!
//! Not every watch item is a trigger: [`WatchErrors::quiet_or_trigger`] takes items that say
//! the watcher works but ask for no pass (`Ok(None)`), such as a pod event that moved nothing a
//! pass reads (see [`OwnerIndex::apply`]); a rollout on 5,000 nodes has tens of thousands of
//! them (issue 20). They reach neither the Controller nor [`Health::triggered`], which would
//! otherwise wait for a pass that never comes.
//!
//! [`WatchBackoff`] replaces kube-runtime's default: that one starts over at 0.8 s on every
//! item a watcher delivers, and a list that fails after its `Init` marker delivers one each
//! time, so a list that always failed was retried about every second for ever.
//!
//! [`Stats::watch_errors`]: crate::Stats::watch_errors
//! [`OwnerIndex::apply`]: crate::index::OwnerIndex::apply

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{Stream, StreamExt, TryStreamExt, future};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::utils::Backoff;
use kube::runtime::watcher::{self, watcher};
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::error::{chain, transport_failure};
use crate::health::Health;
use crate::observer::{Observer, Report};
use crate::sync::lock;

/// How often the same watch failure is warned again while it lasts.
pub(crate) const REPEAT_WARNING: Duration = Duration::from_secs(300);

#[derive(Debug, Default)]
struct WatchLogState {
    /// Resources whose last watch item was an error, with their consecutive failures.
    failing: BTreeMap<&'static str, u32>,
    /// The last cause warned (`unreachable` for every failure to reach the server), and when.
    warned: Option<(String, Instant)>,
}

/// The watch failures of one controller term (or of the KubeVirt observer's watches), logged
/// once per cause: the first failure of a resource at debug, a second one as one warning per
/// cause (every failure to reach the API server is one cause), repeated at most every five
/// minutes while it lasts, and one line when every watch works again.
#[derive(Debug, Clone, Default)]
pub struct WatchLog {
    /// The API server's URL, named in the message when it cannot be reached.
    server: Option<Arc<str>>,
    /// Fast path for every successful watch item: nothing is failing.
    any_failing: Arc<AtomicBool>,
    state: Arc<Mutex<WatchLogState>>,
}

impl WatchLog {
    /// A log naming `server` (the API server's URL) in its messages, when known.
    pub fn new(server: Option<String>) -> Self {
        Self {
            server: server.map(Arc::from),
            ..Self::default()
        }
    }

    /// One line saying why a watch failed: the API server's address and the operating
    /// system's words when it cannot be reached, else the error's chain.
    pub fn describe(&self, error: &watcher::Error) -> String {
        match transport_failure(error) {
            Some(why) => match &self.server {
                Some(server) => format!("cannot reach the API server at {server}: {why}"),
                None => format!("cannot reach the API server: {why}"),
            },
            None => chain(error),
        }
    }

    /// Records a failed watch of `resource`; true when it was warned (not a repeat).
    ///
    /// A watch stream that breaks (`WatchFailed`: the server closed it, or went away) is only
    /// logged at debug: the watcher starts a new one at once, and that attempt says whether the
    /// server is there. Every failure to reach the server counts as one cause, whatever words
    /// the system used (a reset, then refused connections).
    pub fn failed(&self, resource: &'static str, error: &watcher::Error) -> bool {
        let why = self.describe(error);
        if matches!(error, watcher::Error::WatchFailed(_)) {
            debug!(resource, error = %why, "watch stream broke, the watcher starts a new one");
            return false;
        }
        let cause = match transport_failure(error) {
            Some(_) => "unreachable".to_owned(),
            None => why.clone(),
        };
        let now = Instant::now();
        let mut state = lock(&self.state);
        let failures = state.failing.entry(resource).or_insert(0);
        *failures += 1;
        let first = *failures == 1;
        self.any_failing.store(true, Ordering::Release);
        if first {
            debug!(resource, error = %why, "watch failed, the watcher retries with backoff");
            return false;
        }
        let repeat = state
            .warned
            .as_ref()
            .is_some_and(|(last, at)| *last == cause && now.duration_since(*at) < REPEAT_WARNING);
        if repeat {
            debug!(resource, error = %why, "watch failed again, the watcher retries with backoff");
            false
        } else {
            warn!(resource, error = %why, "watch failed, the watchers retry with backoff");
            state.warned = Some((cause, now));
            true
        }
    }

    /// Records a working watch of `resource`; true when that ends a warned outage (logged).
    pub fn succeeded(&self, resource: &'static str) -> bool {
        if !self.any_failing.load(Ordering::Acquire) {
            return false;
        }
        let mut state = lock(&self.state);
        if state.failing.remove(resource).is_some() && state.failing.is_empty() {
            self.any_failing.store(false, Ordering::Release);
            if state.warned.take().is_some() {
                info!("watches work again");
                return true;
            }
        }
        false
    }
}

/// Where the watch errors of one controller term go: counted by the observer, noted in the
/// health, logged through the term's shared log. One value for every watcher of the term, so
/// that each wraps its stream with the same three.
#[derive(Clone)]
pub(crate) struct WatchErrors {
    pub(crate) observer: Observer,
    pub(crate) health: Health,
    pub(crate) log: WatchLog,
}

impl WatchErrors {
    /// `stream` without its errors, each counted against `resource`, noted in the health and
    /// logged first; every item that passes is a trigger of the Controller, and says the
    /// watcher works.
    pub(crate) fn without_errors<S, T>(
        &self,
        stream: S,
        resource: &'static str,
    ) -> impl Stream<Item = Result<T, watcher::Error>> + Send + 'static + use<S, T>
    where
        S: Stream<Item = Result<T, watcher::Error>> + Send + 'static,
        T: Send + 'static,
    {
        self.quiet_or_trigger(stream.map_ok(Some), resource)
    }

    /// A pass-through of a watcher's events that notes, on each but `Init`, that the watcher of
    /// `resource` works: for a stream that drops the list markers before
    /// [`WatchErrors::without_errors`] sees them (`touched_objects`, `applied_objects`), where
    /// an empty list would otherwise never say that the watcher works again.
    pub(crate) fn working<K>(
        &self,
        resource: &'static str,
    ) -> impl FnMut(watcher::Event<K>) -> watcher::Event<K> + Send + 'static {
        let health = self.health.clone();
        let log = self.log.clone();
        move |event| {
            if !matches!(event, watcher::Event::Init) {
                health.watch_succeeded(resource);
                let _resumed = log.succeeded(resource);
            }
            event
        }
    }

    /// [`WatchErrors::without_errors`] over a stream whose `Ok(None)` items say the watcher
    /// works and trigger nothing: they are dropped too, without counting as a trigger.
    pub(crate) fn quiet_or_trigger<S, T>(
        &self,
        stream: S,
        resource: &'static str,
    ) -> impl Stream<Item = Result<T, watcher::Error>> + Send + 'static + use<S, T>
    where
        S: Stream<Item = Result<Option<T>, watcher::Error>> + Send + 'static,
        T: Send + 'static,
    {
        let WatchErrors {
            observer,
            health,
            log,
        } = self.clone();
        stream.filter_map(move |item| {
            let kept = match item {
                Ok(trigger) => {
                    health.watch_succeeded(resource);
                    let _resumed = log.succeeded(resource);
                    trigger.map(|object| {
                        health.triggered();
                        Ok(object)
                    })
                }
                Err(error) => {
                    observer.report(Report::WatchError { resource });
                    // A broken stream is resumed at once (see `relisting_watcher`): only a
                    // failed request says the watcher does not work. A resumed watch of a
                    // quiet resource delivers nothing, so marking it would leave it failing.
                    if !matches!(error, watcher::Error::WatchFailed(_)) {
                        health.watch_failed(resource);
                    }
                    let _warned = log.failed(resource, &error);
                    None
                }
            };
            future::ready(kept)
        })
    }
}

/// A kube-runtime watcher that starts over with a list after every failure but a broken stream,
/// instead of resuming from the last `resourceVersion` it saw.
///
/// kube-runtime's watcher (like client-go's reflector after "connection refused") resumes its
/// watch from the last `resourceVersion` once the server answers again. Against a restarted
/// kube-apiserver that costs nothing: its fresh watch cache answers 410 Gone and the watcher
/// lists anyway. But a server whose store went back in time (an etcd restored from a backup, a
/// `sim serve` started again without its state) accepts a watch from a `resourceVersion` it has
/// not reached and sends nothing until it gets there, which can be never: the controller
/// of issue 48 sat 5.5 minutes on such watches after `sim serve` was restarted, silent, and its
/// probes said all was well. A list after the failure learns the server's present instead.
///
/// A stream that breaks mid-way (`WatchFailed`: a proxy cut it, the server closed it) is still
/// resumed at once, as kube-runtime does: the next request says whether the server is there,
/// and it is that request's failure that starts the watcher over.
///
/// The watcher's `Init` is held back until the list's first page (or the next failure) is in:
/// `Init` comes before the list request, so passing it on at once would tell the health and the
/// log that a watcher works whose list is about to fail. Nothing is lost: a held `Init` that a
/// failure follows is dropped, and the next attempt sends its own.
pub fn relisting_watcher<K>(
    api: kube::Api<K>,
    config: watcher::Config,
) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    relisting(move || watcher(api.clone(), config.clone()))
}

/// [`relisting_watcher`] over any watcher `start` makes (the tests feed it scripted streams).
fn relisting<K, S>(
    mut start: impl FnMut() -> S + Send + 'static,
) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static
where
    K: Send + 'static,
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
{
    struct Relisting<S> {
        current: std::pin::Pin<Box<S>>,
        /// The last item was a failure that starts the watcher over at the next poll.
        start_over: bool,
    }
    let first = Relisting {
        current: Box::pin(start()),
        start_over: false,
    };
    futures::stream::unfold(first, move |mut state| {
        if std::mem::take(&mut state.start_over) {
            state.current = Box::pin(start());
        }
        async move {
            let mut held_init = false;
            loop {
                let item = state.current.next().await?;
                let out = match item {
                    Ok(watcher::Event::Init) => {
                        held_init = true;
                        continue;
                    }
                    Ok(event) if held_init => vec![Ok(watcher::Event::Init), Ok(event)],
                    Ok(event) => vec![Ok(event)],
                    // A broken stream is resumed; unless it broke a list that sent its `Init`
                    // already (no `InitApply` may come without one).
                    Err(error @ watcher::Error::WatchFailed(_)) if !held_init => vec![Err(error)],
                    Err(error) => {
                        state.start_over = true;
                        vec![Err(error)]
                    }
                };
                return Some((futures::stream::iter(out), state));
            }
        }
    })
    .flatten()
}

/// The watchers' backoff: exponential from [`WatchBackoff::MIN`] to [`WatchBackoff::MAX`],
/// starting over only once the watcher has gone [`WatchBackoff::HEALTHY`] without an error. No
/// jitter: the deterministic simulation replays it exactly.
#[derive(Debug, Clone)]
pub(crate) struct WatchBackoff {
    next: Duration,
    last_error: Option<Instant>,
}

impl WatchBackoff {
    /// The first delay.
    pub(crate) const MIN: Duration = Duration::from_secs(1);
    /// The longest delay: also how long the watchers may take to notice that the API server is
    /// back after an outage (client-go's reflector waits up to 30 s; issue 48 asks for recovery
    /// within 30 s of the server's return, the list after it included).
    pub(crate) const MAX: Duration = Duration::from_secs(16);
    /// How long a watcher must go without an error before the delay starts over.
    pub(crate) const HEALTHY: Duration = Duration::from_secs(120);
}

impl Default for WatchBackoff {
    fn default() -> Self {
        Self {
            next: Self::MIN,
            last_error: None,
        }
    }
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        if self
            .last_error
            .is_some_and(|at| at.elapsed() > Self::HEALTHY)
        {
            self.next = Self::MIN;
        }
        self.last_error = Some(Instant::now());
        let delay = self.next;
        self.next = (self.next * 2).min(Self::MAX);
        Some(delay)
    }
}

impl Backoff for WatchBackoff {
    /// Called on every item the watcher delivers: ignored, the delay starts over only after
    /// [`WatchBackoff::HEALTHY`] without an error (see [`Iterator::next`]).
    fn reset(&mut self) {}
}

/// How long pod events that move only reported counts wait for their pass (see
/// [`Moved::Counts`](crate::index::Moved::Counts)): the status' counts lag the pods by at most this much.
pub(crate) const COUNTS_WAIT: Duration = Duration::from_secs(1);

/// How long the pod events of a Pods-driver rollout wait for their pass (see
/// [`Moved::Facts`](crate::index::Moved::Facts)): the pass reads every pod, so one pass takes the events of this while
/// at once, instead of one pass per event. A replacement the budget allows starts at most this
/// much later (a node's replacement takes seconds), and a crash loop stops the deletions at
/// most this much later (no pass deletes meanwhile).
pub(crate) const FACTS_WAIT: Duration = Duration::from_millis(200);

/// Triggers that may wait: at most one pass per object per `wait`, however many ask for one
/// meanwhile. For pod events that move counts a pass only reports (see
/// [`Moved::Counts`](crate::index::Moved::Counts)): the status' counts follow the rollout
/// every `wait` instead of on each of its thousands of pod events; and for the pod events of
/// a Pods-driver rollout ([`Moved::Facts`](crate::index::Moved::Facts)), whose passes read
/// every pod.
pub(crate) struct Coalesced<K: kube::Resource> {
    pending: Arc<Mutex<std::collections::HashSet<ObjectRef<K>>>>,
    sender: tokio::sync::mpsc::UnboundedSender<ObjectRef<K>>,
    wait: Duration,
}

impl<K: kube::Resource> Clone for Coalesced<K> {
    fn clone(&self) -> Self {
        Coalesced {
            pending: Arc::clone(&self.pending),
            sender: self.sender.clone(),
            wait: self.wait,
        }
    }
}

impl<K> Coalesced<K>
where
    K: kube::Resource + Send + Sync + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Send + Sync + 'static,
{
    /// A coalescer, and the stream of its triggers (for `Controller::reconcile_on`).
    pub(crate) fn new(wait: Duration) -> (Self, impl Stream<Item = ObjectRef<K>> + Send) {
        let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
        let triggers = futures::stream::unfold(receiver, |mut receiver| async move {
            let key = receiver.recv().await?;
            Some((key, receiver))
        });
        (Self::sending_to(sender, wait), triggers)
    }

    /// A coalescer whose triggers go to `sender`, a channel the Controller already reads.
    pub(crate) fn sending_to(
        sender: tokio::sync::mpsc::UnboundedSender<ObjectRef<K>>,
        wait: Duration,
    ) -> Self {
        Coalesced {
            pending: Arc::default(),
            sender,
            wait,
        }
    }

    /// A pass of `key` within `wait`, unless one is already on its way.
    pub(crate) fn later(&self, key: ObjectRef<K>) {
        let fresh = self
            .pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(key.clone());
        if !fresh {
            return;
        }
        let this = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(this.wait).await;
            // Forgotten before the pass: a move during the pass asks for the next one.
            this.pending
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .remove(&key);
            // A stopped controller has dropped the stream: nothing left to trigger.
            let _ = this.sender.send(key);
        });
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use futures::channel::mpsc;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;
    use kube::runtime::controller::{Action, Controller};
    use kube::runtime::reflector::ObjectRef;
    use kube::runtime::{WatchStreamExt, reflector, watcher};

    use super::*;

    fn config_map() -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some("agent".into()),
                namespace: Some("default".into()),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        }
    }

    /// Runs a controller on a channel of watch events: `nudges` wake-ups from another trigger
    /// stream, then a list cut short by an error, then a list that completes. Returns whether
    /// the first pass came within ten minutes of the completed list, and the watch errors
    /// counted.
    async fn first_pass_after_a_cut_short_list(nudges: usize) -> (bool, u64) {
        let (events, watch) = mpsc::unbounded();
        let (store, writer) = reflector::store::<ConfigMap>();
        let observer = Observer::default();
        let errors = WatchErrors {
            observer: observer.clone(),
            health: Health::default(),
            log: WatchLog::default(),
        };
        let trigger = errors.without_errors(watch.reflect(writer).applied_objects(), "configmaps");
        let (nudge, nudged) = mpsc::unbounded::<ConfigMap>();
        let passes = Arc::new(AtomicUsize::new(0));
        let counted = passes.clone();
        let controller = Controller::for_stream(trigger, store)
            .watches_stream(nudged.map(Ok), |cm| Some(ObjectRef::from_obj(&cm)))
            .run(
                move |_, _: Arc<()>| {
                    counted.fetch_add(1, Ordering::SeqCst);
                    future::ready(Ok::<_, std::io::Error>(Action::await_change()))
                },
                |_, _, _| Action::await_change(),
                Arc::new(()),
            )
            .for_each(|_| future::ready(()));
        let controller = tokio::spawn(controller);

        let pause = || tokio::time::sleep(Duration::from_secs(30));
        let send = |event| events.unbounded_send(event).is_ok();
        assert!(send(Ok(watcher::Event::Init)));
        pause().await;
        for _ in 0..nudges {
            assert!(nudge.unbounded_send(config_map()).is_ok());
            pause().await;
        }
        assert!(send(Ok(watcher::Event::InitApply(config_map()))));
        assert!(send(Err(watcher::Error::NoResourceVersion)));
        pause().await;
        for event in [
            watcher::Event::Init,
            watcher::Event::InitApply(config_map()),
            watcher::Event::InitDone,
        ] {
            assert!(send(Ok(event)));
        }
        let first_pass = tokio::time::timeout(Duration::from_secs(600), async {
            while passes.load(Ordering::SeqCst) == 0 {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await;
        controller.abort();
        (first_pass.is_ok(), observer.stats().watch_errors())
    }

    #[tokio::test(start_paused = true)]
    async fn the_backoff_grows_until_the_watcher_stays_healthy() {
        let mut backoff = WatchBackoff::default();
        let delays: Vec<u64> = (0..8)
            .map(|_| {
                backoff.reset();
                backoff.next().map_or(0, |d| d.as_secs())
            })
            .collect();
        assert_eq!(
            delays,
            [1, 2, 4, 8, 16, 16, 16, 16],
            "resets on items are ignored"
        );
        tokio::time::advance(WatchBackoff::HEALTHY + Duration::from_secs(1)).await;
        assert_eq!(backoff.next(), Some(WatchBackoff::MIN));
    }

    /// An error right behind an object must not strand the Controller's queue. Which half of
    /// kube-runtime's split queue is polled first alternates from poll to poll, so the error
    /// arrives after zero to three wake-ups from another trigger stream.
    #[tokio::test(start_paused = true)]
    async fn an_error_behind_an_object_never_stalls_the_controller() {
        for nudges in 0..4 {
            let (passed, errors) = first_pass_after_a_cut_short_list(nudges).await;
            assert!(
                passed,
                "after {nudges} nudges: no pass within 600 s of a completed list, the queue stalled"
            );
            assert_eq!(errors, 1, "after {nudges} nudges");
        }
    }

    fn refused() -> watcher::Error {
        #[derive(Debug, thiserror::Error)]
        #[error("client error (Connect)")]
        struct Connect(#[source] std::io::Error);
        let io = std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            "Connection refused (os error 111)",
        );
        watcher::Error::WatchStartFailed(kube::Error::Service(Box::new(Connect(io))))
    }

    /// What the relisting watcher passes on from scripted watchers: each script is one
    /// watcher's items; a failure but a broken stream starts the next script (a fresh watcher,
    /// which lists), and an `Init` only passes with the list's first item.
    #[tokio::test]
    async fn a_failure_but_a_broken_stream_starts_the_watcher_over_with_a_list() {
        use watcher::Event::{Apply, Init, InitApply, InitDone};
        let broken = || watcher::Error::WatchFailed(kube::Error::LinesCodecMaxLineLengthExceeded);
        let scripts: Vec<Vec<Result<watcher::Event<&str>, watcher::Error>>> = vec![
            vec![
                Ok(Init),
                Ok(InitApply("a")),
                Ok(InitDone),
                Ok(Apply("b")),
                // Resumed by the same watcher: the next item is still its own.
                Err(broken()),
                Ok(Apply("c")),
                // The server is gone: the next attempt lists.
                Err(refused()),
                Ok(Apply("never: this watcher was replaced")),
            ],
            // The list fails: the held Init is dropped.
            vec![Ok(Init), Err(watcher::Error::NoResourceVersion)],
            vec![Ok(Init), Ok(InitDone), Ok(Apply("d"))],
        ];
        let started = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = started.clone();
        let mut scripts = scripts.into_iter();
        let items: Vec<String> = relisting(move || {
            count.fetch_add(1, Ordering::SeqCst);
            futures::stream::iter(scripts.next().unwrap_or_default())
        })
        .map(|item| match item {
            Ok(Init) => "Init".to_owned(),
            Ok(InitApply(x)) => format!("InitApply({x})"),
            Ok(InitDone) => "InitDone".to_owned(),
            Ok(Apply(x)) => format!("Apply({x})"),
            Ok(other) => format!("{other:?}"),
            Err(watcher::Error::WatchFailed(_)) => "broken".to_owned(),
            Err(_) => "failed".to_owned(),
        })
        .collect()
        .await;
        assert_eq!(
            items,
            [
                "Init",
                "InitApply(a)",
                "InitDone",
                "Apply(b)",
                "broken",
                "Apply(c)",
                "failed",
                "failed",
                "Init",
                "InitDone",
                "Apply(d)",
            ]
        );
        assert_eq!(started.load(Ordering::SeqCst), 3, "three watchers");
    }

    /// An outage of the API server is one warning naming the server and the cause, on the first
    /// retry, not one per watcher and retry; it is warned again after `REPEAT_WARNING`, or at
    /// once when the cause changes; its end is one line. A blip mended by the retry and a
    /// broken stream are not warned.
    #[tokio::test(start_paused = true)]
    async fn an_outage_is_one_warning_and_its_end_one_line() {
        let log = WatchLog::new(Some("http://127.0.0.1:6443/".into()));
        assert_eq!(
            log.describe(&refused()),
            "cannot reach the API server at http://127.0.0.1:6443/: connection refused (os error 111)"
        );
        let reset = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset");
        let reset = watcher::Error::WatchStartFailed(kube::Error::Service(Box::new(reset)));
        let broken = watcher::Error::WatchFailed(kube::Error::LinesCodecMaxLineLengthExceeded);
        assert!(
            !log.failed("pods", &broken),
            "a broken stream is restarted at once"
        );
        assert!(
            !log.failed("pods", &reset),
            "a first failure waits for the retry"
        );
        assert!(!log.succeeded("pods"), "a mended blip is not an outage");

        let resources = [
            "pods",
            "daemonsets",
            "controllerrevisions",
            "canarydaemonsets",
        ];
        let mut warned = Vec::new();
        for _retry in 0..5 {
            for resource in resources {
                if log.failed(resource, &refused()) {
                    warned.push(resource);
                }
            }
            tokio::time::sleep(Duration::from_secs(10)).await;
        }
        assert_eq!(
            warned,
            ["pods"],
            "20 failures, one warning, on the first retry"
        );
        assert!(
            !log.failed("pods", &reset),
            "another way of not reaching the server"
        );
        tokio::time::sleep(REPEAT_WARNING).await;
        assert!(
            log.failed("pods", &refused()),
            "a lasting outage is warned again"
        );
        assert!(
            log.failed("pods", &watcher::Error::NoResourceVersion),
            "a new cause is warned at once"
        );
        let resumed: Vec<bool> = resources.iter().map(|r| log.succeeded(r)).collect();
        assert_eq!(
            resumed,
            [false, false, false, true],
            "the last watch back ends it"
        );
        assert!(!log.succeeded("pods"), "nothing to end any more");
    }
}
