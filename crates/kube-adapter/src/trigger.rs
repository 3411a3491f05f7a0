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
//! So watch errors are handled here: logged, reported ([`Report::WatchError`]), noted in the
//! [`Health`] and dropped before the Controller sees them. Nothing is lost: each watcher
//! retries on its own with [`WatchBackoff`], and the relist or rewatch that follows an error
//! delivers the objects again.
//!
//! [`WatchBackoff`] replaces kube-runtime's default: that one starts over at 0.8 s on every
//! item a watcher delivers, and a list that fails after its `Init` marker delivers one each
//! time, so a list that always failed was retried about every second for ever.

use std::time::Duration;

use futures::{Stream, StreamExt, future};
use kube::runtime::utils::Backoff;
use kube::runtime::watcher;
use tokio::time::Instant;
use tracing::warn;

use crate::health::Health;
use crate::observer::{Observer, Report};

/// `stream` without its errors, each logged and reported against `resource` first; every item
/// that passes is a trigger of the Controller, and says the watcher works.
pub(crate) fn without_errors<S, T>(
    stream: S,
    resource: &'static str,
    observer: Observer,
    health: Health,
) -> impl Stream<Item = Result<T, watcher::Error>> + Send + 'static
where
    S: Stream<Item = Result<T, watcher::Error>> + Send + 'static,
    T: Send + 'static,
{
    stream.filter_map(move |item| {
        let kept = match item {
            Ok(object) => {
                health.watch_succeeded(resource);
                health.triggered();
                Some(Ok(object))
            }
            Err(error) => {
                observer.report(Report::WatchError { resource });
                health.watch_failed(resource);
                warn!(resource, error = %one_line(&error), "watch failed, the watcher retries with backoff");
                None
            }
        };
        future::ready(kept)
    })
}

/// A watch error in one line: the error and its innermost cause ("connection refused"), which
/// kube's own Display leaves out.
pub(crate) fn one_line(error: &watcher::Error) -> String {
    let mut innermost: &dyn std::error::Error = error;
    while let Some(source) = innermost.source() {
        innermost = source;
    }
    let text = error.to_string();
    let cause = innermost.to_string();
    if cause == text || text.contains(&cause) {
        text
    } else {
        format!("{text}: {cause}")
    }
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
    /// The longest delay.
    pub(crate) const MAX: Duration = Duration::from_secs(60);
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
        let trigger = without_errors(
            watch.reflect(writer).applied_objects(),
            "configmaps",
            observer.clone(),
            Health::default(),
        );
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
            [1, 2, 4, 8, 16, 32, 60, 60],
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
}
