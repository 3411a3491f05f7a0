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
//! So watch errors are handled here: logged, counted ([`Stats::watch_errors`]) and dropped
//! before the Controller sees them. Nothing is lost: each watcher retries on its own with
//! backoff (`default_backoff`), and the relist or rewatch that follows an error delivers the
//! objects again.
//!
//! [`Stats::watch_errors`]: crate::Stats::watch_errors

use futures::{Stream, StreamExt, future};
use kube::runtime::watcher;
use tracing::warn;

use crate::observer::{Observer, Report};

/// `stream` without its errors, each logged and counted against `resource` first.
pub(crate) fn without_errors<S, T>(
    stream: S,
    resource: &'static str,
    observer: Observer,
) -> impl Stream<Item = Result<T, watcher::Error>> + Send + 'static
where
    S: Stream<Item = Result<T, watcher::Error>> + Send + 'static,
    T: Send + 'static,
{
    stream.filter_map(move |item| {
        let kept = match item {
            Ok(object) => Some(Ok(object)),
            Err(error) => {
                observer.report(Report::WatchError { resource });
                warn!(resource, %error, "watch failed, the watcher retries with backoff");
                None
            }
        };
        future::ready(kept)
    })
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
