//! Notifications (issue 51): a receiver the cluster admin defined ([`Receivers`], the
//! controller's `--notification-receivers` file) is told of a CanaryDaemonSet's events its
//! author subscribed to (`spec.notifications`, [`NotificationSubscription`]).
//!
//! The occurrences are read where the events are published (`reconcile/report.rs`), never
//! re-derived from the status: [`NotificationEvent::of`] maps an event's reason to what it
//! tells. A pass hands them to the [`Notifier`] and goes on; a task of its own delivers them.
//!
//! # Invariants
//!
//! - A notification never delays or stops a rollout: [`Notifier::offer`] takes no lock across
//!   an await and never waits (a full queue drops the notification, counted
//!   `result="dropped"`); an unknown receiver is a Warning event on the object, never a
//!   failure of its rollout.
//! - The queue ([`QUEUE`]) and the deliveries at once ([`DELIVERY_SLOTS`]) are bounded; each
//!   request has a deadline (the receiver's `timeout`, 10 s by default); a delivery is tried
//!   again with exponential back-off ([`RetryPolicy`]) on no answer, a 429 or a 5xx, and given
//!   up after its last attempt (`result="failed"`).
//! - An occurrence is sent once ([`Dedupe`]): object UID, event, generation, the rollout's
//!   series and message. What a restart loses or repeats: the queue and the dedupe set live
//!   in memory, so a notification still queued or retried when the process stops is lost,
//!   and an event that a restarted controller publishes again is told again. A restarted
//!   controller publishes an event again only when the status write of the pass that first
//!   published it did not land (events go out after the status write), so a repeat is rare
//!   and names the same occurrence; the loss is that of a notification in flight. Both are
//!   accepted: notifications are advice, and the object's status, events and metrics stay the
//!   record; persisting the queue would cost a write per notification to the API server.
//! - Nothing secret is logged: a URL (a Slack URL is a secret) or a header never appears in a
//!   log, an event or an error; the receiver is named by its name.

mod body;
mod dedupe;
mod receivers;
mod spec;

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use canary_analysis::HttpPrometheus;
use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client, ResourceExt};
use tokio::sync::{Semaphore, mpsc};
use tracing::{debug, warn};

pub use body::{MESSAGE_BYTES, Occurrence, body};
pub use dedupe::{CAPACITY as DEDUPE_CAPACITY, Dedupe, Key};
pub use receivers::{
    BodyFormat, DEFAULT_TIMEOUT, MAX_TIMEOUT, Receiver, Receivers, ReceiversError, SecretKey,
};
pub use spec::{NotificationEvent, NotificationSubscription};

use crate::crd::CanaryDaemonSet;
use crate::observer::{Observer, Report};
use crate::sync::lock;

/// Notifications waiting for a delivery slot; past this many, a new one is dropped.
pub const QUEUE: usize = 256;

/// Deliveries at once: a receiver that hangs holds at most this many for its timeout.
pub const DELIVERY_SLOTS: usize = 16;

/// The `result` label of `canary_notifications_total`.
pub mod result {
    /// The receiver answered 2xx.
    pub const SENT: &str = "sent";
    /// An attempt failed and another comes after the back-off.
    pub const RETRIED: &str = "retried";
    /// The last attempt failed: the notification is given up.
    pub const FAILED: &str = "failed";
    /// The receiver answered 4xx (not 429): sending the same again would not help.
    pub const REJECTED: &str = "rejected";
    /// The queue was full: the notification was never tried.
    pub const DROPPED: &str = "dropped";
    /// Every result.
    pub const ALL: [&str; 5] = [SENT, RETRIED, FAILED, REJECTED, DROPPED];
}

/// How a delivery is tried again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included.
    pub attempts: u32,
    /// The wait after the first failed attempt; doubled after each.
    pub first_backoff: Duration,
    /// The longest wait.
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            attempts: 8,
            first_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(30),
        }
    }
}

impl RetryPolicy {
    /// The wait after failed attempt `attempt` (1-based).
    pub fn backoff(&self, attempt: u32) -> Duration {
        let factor = 2u32.saturating_pow(attempt.saturating_sub(1));
        self.first_backoff
            .saturating_mul(factor)
            .min(self.max_backoff)
    }
}

/// One notification to deliver.
#[derive(Debug)]
struct Delivery {
    receiver: Arc<Receiver>,
    occurrence: Occurrence,
}

/// What the delivery task shares.
struct Sender {
    client: Client,
    /// The controller's namespace: the receivers' Secrets are read there, and only there.
    namespace: String,
    http: HttpPrometheus,
    observer: Observer,
    retry: RetryPolicy,
}

#[derive(Debug, Default)]
struct State {
    sent: Dedupe,
    /// The (UID, generation) whose subscriptions were checked, oldest first (bounded).
    checked: VecDeque<(String, i64)>,
    checked_set: HashSet<(String, i64)>,
}

/// The controller's notifier: the receivers, the dedupe and the queue to the delivery task.
/// One per process, shared by every leader term's passes.
pub struct Notifier {
    receivers: Receivers,
    state: Mutex<State>,
    queue: Option<mpsc::Sender<Delivery>>,
    observer: Observer,
}

impl std::fmt::Debug for Notifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Notifier")
            .field("receivers", &self.receivers.names().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl Default for Notifier {
    fn default() -> Self {
        Self::disabled()
    }
}

impl Notifier {
    /// A notifier with no receiver: every subscription names an unknown receiver.
    pub fn disabled() -> Self {
        Self {
            receivers: Receivers::default(),
            state: Mutex::default(),
            queue: None,
            observer: Observer::default(),
        }
    }

    /// A notifier to `receivers`, whose Secrets are read in `namespace`, with its delivery
    /// task started (on the current tokio runtime; it ends when the notifier is dropped).
    pub fn start(
        client: Client,
        namespace: String,
        receivers: Receivers,
        observer: Observer,
        retry: RetryPolicy,
    ) -> Self {
        let (queue, deliveries) = mpsc::channel(QUEUE);
        let sender = Arc::new(Sender {
            client,
            namespace,
            http: HttpPrometheus::default(),
            observer: observer.clone(),
            retry,
        });
        tokio::spawn(deliver_all(deliveries, sender));
        Self {
            receivers,
            state: Mutex::default(),
            queue: Some(queue),
            observer,
        }
    }

    /// The receivers `cds` subscribes to that are not defined, the first time its generation
    /// is checked (`None` after, or when every name is known): the caller publishes the
    /// Warning event once per generation.
    pub fn unknown_receivers(&self, cds: &CanaryDaemonSet) -> Option<Vec<String>> {
        let subscriptions = cds.spec.notifications.as_deref().unwrap_or_default();
        if subscriptions.is_empty() {
            return None;
        }
        let key = (
            cds.uid().unwrap_or_default(),
            cds.metadata.generation.unwrap_or_default(),
        );
        {
            let mut state = lock(&self.state);
            if !state.checked_set.insert(key.clone()) {
                return None;
            }
            state.checked.push_back(key);
            if state.checked.len() > dedupe::CAPACITY
                && let Some(oldest) = state.checked.pop_front()
            {
                state.checked_set.remove(&oldest);
            }
        }
        let unknown: Vec<String> = subscriptions
            .iter()
            .filter(|s| self.receivers.get(&s.receiver).is_none())
            .map(|s| s.receiver.clone())
            .collect();
        (!unknown.is_empty()).then_some(unknown)
    }

    /// The receivers defined, for the message of an unknown one.
    pub fn receiver_names(&self) -> Vec<String> {
        self.receivers.names().map(str::to_owned).collect()
    }

    /// Hands `occurrence` to each receiver `subscriptions` names for its event, once per
    /// occurrence; never waits.
    pub fn offer(&self, subscriptions: &[NotificationSubscription], occurrence: &Occurrence) {
        let receivers: Vec<Arc<Receiver>> = subscriptions
            .iter()
            .filter(|s| s.wants(occurrence.event))
            .filter_map(|s| self.receivers.get(&s.receiver).cloned())
            .collect();
        if receivers.is_empty() || !lock(&self.state).sent.first(Key::of(occurrence)) {
            return;
        }
        let Some(queue) = &self.queue else { return };
        for receiver in receivers {
            let name = receiver.name.clone();
            let delivery = Delivery {
                receiver,
                occurrence: occurrence.clone(),
            };
            if queue.try_send(delivery).is_err() {
                warn!(receiver = %name, namespace = %occurrence.namespace, name = %occurrence.name, event = occurrence.event.as_str(), "notification queue full: the notification is dropped");
                self.observer.report(Report::Notification {
                    receiver: name,
                    result: result::DROPPED,
                });
            }
        }
    }

    /// The rollout of the object `uid` starts again: what was sent of it may be sent again.
    pub fn starts_again(&self, uid: &str) {
        lock(&self.state).sent.forget(uid);
    }
}

/// The delivery task: each notification in a task of its own, [`DELIVERY_SLOTS`] at most.
async fn deliver_all(mut deliveries: mpsc::Receiver<Delivery>, sender: Arc<Sender>) {
    let slots = Arc::new(Semaphore::new(DELIVERY_SLOTS));
    while let Some(delivery) = deliveries.recv().await {
        let Ok(slot) = Arc::clone(&slots).acquire_owned().await else {
            return;
        };
        let sender = Arc::clone(&sender);
        tokio::spawn(async move {
            deliver(&sender, delivery).await;
            drop(slot);
        });
    }
}

/// How one attempt ended.
enum Attempt {
    Sent,
    Rejected(u16),
    Again(String),
}

async fn deliver(sender: &Sender, delivery: Delivery) {
    let Delivery {
        receiver,
        occurrence,
    } = delivery;
    let body = body(receiver.format, &occurrence).to_string().into_bytes();
    let report = |result: &'static str| {
        sender.observer.report(Report::Notification {
            receiver: receiver.name.clone(),
            result,
        });
    };
    for attempt in 1..=sender.retry.attempts {
        let why = match attempt_once(sender, &receiver, body.clone()).await {
            Attempt::Sent => {
                debug!(receiver = %receiver.name, namespace = %occurrence.namespace, name = %occurrence.name, event = occurrence.event.as_str(), attempt, "notification sent");
                report(result::SENT);
                return;
            }
            Attempt::Rejected(status) => {
                warn!(receiver = %receiver.name, namespace = %occurrence.namespace, name = %occurrence.name, event = occurrence.event.as_str(), status, "the receiver refused the notification; not sent again");
                report(result::REJECTED);
                return;
            }
            Attempt::Again(why) => why,
        };
        if attempt == sender.retry.attempts {
            warn!(receiver = %receiver.name, namespace = %occurrence.namespace, name = %occurrence.name, event = occurrence.event.as_str(), attempt, error = %why, "notification given up");
            report(result::FAILED);
            return;
        }
        let backoff = sender.retry.backoff(attempt);
        warn!(receiver = %receiver.name, namespace = %occurrence.namespace, name = %occurrence.name, event = occurrence.event.as_str(), attempt, error = %why, ?backoff, "notification not delivered, trying again");
        report(result::RETRIED);
        tokio::time::sleep(backoff).await;
    }
}

async fn attempt_once(sender: &Sender, receiver: &Receiver, body: Vec<u8>) -> Attempt {
    let (url, headers) = match request_parts(sender, receiver).await {
        Ok(parts) => parts,
        Err(why) => return Attempt::Again(why),
    };
    match sender
        .http
        .post_json(&url, &headers, body, receiver.timeout())
        .await
    {
        Ok(status) if (200..300).contains(&status) => Attempt::Sent,
        Ok(status) if status == 429 || !(200..500).contains(&status) => {
            Attempt::Again(format!("the receiver answered {status}"))
        }
        Ok(status) => Attempt::Rejected(status),
        // A request that cannot be built is tried again too: its Secret may be fixed.
        Err(error) => Attempt::Again(error.to_string()),
    }
}

/// The URL and headers of `receiver`, its Secrets read now (a rotated one is used at once).
/// The error names a Secret and a key, never a value.
async fn request_parts(
    sender: &Sender,
    receiver: &Receiver,
) -> Result<(String, Vec<(String, String)>), String> {
    let secrets: Api<Secret> = Api::namespaced(sender.client.clone(), &sender.namespace);
    let read = |name: String| {
        let secrets = secrets.clone();
        async move {
            secrets.get(&name).await.map_err(|e| {
                format!(
                    "Secret {}/{name}: {}",
                    sender.namespace,
                    crate::error::kube_error_text(&e)
                )
            })
        }
    };
    let url = match (&receiver.url, &receiver.url_secret) {
        (Some(url), _) => url.clone(),
        (None, Some(key)) => {
            let secret = read(key.name.clone()).await?;
            let value = secret
                .data
                .as_ref()
                .and_then(|data| data.get(&key.key))
                .ok_or_else(|| {
                    format!(
                        "Secret {}/{} has no key {}",
                        sender.namespace, key.name, key.key
                    )
                })?;
            String::from_utf8(value.0.clone())
                .map_err(|_| {
                    format!(
                        "Secret {}/{} key {}: not UTF-8",
                        sender.namespace, key.name, key.key
                    )
                })?
                .trim()
                .to_owned()
        }
        (None, None) => return Err("no url".to_owned()),
    };
    let mut headers = Vec::new();
    if let Some(name) = &receiver.headers_secret {
        let secret = read(name.clone()).await?;
        for (header, value) in secret.data.iter().flatten() {
            let value = String::from_utf8(value.0.clone()).map_err(|_| {
                format!("Secret {}/{name} key {header}: not UTF-8", sender.namespace)
            })?;
            headers.push((header.clone(), value.trim().to_owned()));
        }
    }
    Ok((url, headers))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backoff_doubles_up_to_its_cap() {
        let retry = RetryPolicy::default();
        let waits: Vec<u64> = (1..=7).map(|a| retry.backoff(a).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 30, 30]);
        assert_eq!(retry.backoff(1000), retry.max_backoff);
    }
}
