//! Leader election: the controller's own loop on a `coordination.k8s.io/v1` Lease, timed by the
//! controller's [`Clock`] (issue 22).
//!
//! The protocol is client-go's, rule by rule ([`rules`]). The loop ([`Elector::campaign`])
//! reads the Lease every retry period and creates, renews or takes it over with `replace` and
//! the `resourceVersion` it read. Server-side apply was the other choice; it was not taken
//! because an apply that creates carries no precondition: two candidates that both saw no
//! Lease would both "create" it, the second overwriting the first. `create` answers the second
//! with 409.
//!
//! Invariants:
//! - [`Leadership::may_write`] is true only before the renew deadline that follows the start
//!   of the last successful renewal, on the injected clock. That deadline comes before any
//!   other replica may take over (rule 7). [`guarded`] refuses every write except to Leases
//!   once it is false. A leader that was frozen or cut off therefore writes nothing when it
//!   comes back, whatever its tasks had in flight.
//! - Nothing here reads the system clock or sleeps on anything but tokio's timer. Under a
//!   paused tokio clock with [`Clock::tokio_virtual`], expiry, renewal and takeover follow
//!   virtual time. That is what lets the deterministic simulation freeze a leader.
//! - A leader that observes another holder steps down at once. Stepping down early is always
//!   safe.

pub mod rules;

mod guard;

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};
use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::clock::Clock;
pub use guard::{NotLeading, guarded};
use rules::{Observed, Record, Step};

/// Leader election through a `coordination.k8s.io/v1` Lease: the settings of a campaign.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderElection {
    /// Lease name.
    pub lease_name: String,
    /// Namespace of the Lease (the controller's own).
    pub namespace: String,
    /// This replica's identity (its pod name).
    pub identity: String,
    /// Lease duration in seconds: how long a dead leader blocks the others.
    pub duration_seconds: u64,
    /// How long before another replica may take over the leader stops writing: the renew
    /// deadline is the duration less this. Renewals are tried every half of it.
    pub grace_seconds: u64,
}

impl LeaderElection {
    /// Defaults: lease `daemonset-canary`, 15 s duration, 5 s grace.
    pub fn new(namespace: impl Into<String>, identity: impl Into<String>) -> Self {
        Self {
            lease_name: "daemonset-canary".to_owned(),
            namespace: namespace.into(),
            identity: identity.into(),
            duration_seconds: 15,
            grace_seconds: 5,
        }
    }
}

/// Whether this replica leads, shared by the campaign, the controller and the write guard.
#[derive(Clone)]
pub struct Leadership {
    clock: Clock,
    /// End of the right to write: the renew deadline after the last successful renewal.
    valid_until: Arc<Mutex<Option<Timestamp>>>,
    leading: watch::Sender<bool>,
}

impl std::fmt::Debug for Leadership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leadership")
            .field("valid_until", &self.valid_until())
            .field("leading", &*self.leading.borrow())
            .finish()
    }
}

impl Leadership {
    /// Not leading, on `clock`.
    pub fn new(clock: Clock) -> Self {
        Self {
            clock,
            valid_until: Arc::new(Mutex::new(None)),
            leading: watch::Sender::new(false),
        }
    }

    /// Whether a write may be sent now (rule 7): leading, and before the renew deadline.
    pub fn may_write(&self) -> bool {
        self.valid_until()
            .is_some_and(|until| self.clock.now() < until)
    }

    /// Follows the leading flag: true from a successful acquisition until the deadline passes
    /// or another holder is seen.
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.leading.subscribe()
    }

    fn valid_until(&self) -> Option<Timestamp> {
        *self
            .valid_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn renewed(&self, until: Timestamp) {
        *self
            .valid_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(until);
        self.leading
            .send_if_modified(|leading| !std::mem::replace(leading, true));
    }

    fn lose(&self) {
        *self
            .valid_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = None;
        self.leading
            .send_if_modified(|leading| std::mem::replace(leading, false));
    }
}

/// The outcome of one attempt to acquire or renew.
#[derive(Debug)]
enum Attempt {
    /// We hold the Lease, as of the attempt's start.
    Leading,
    /// Another replica holds it.
    Held(String),
    /// The API failed or a write conflicted: nothing learnt.
    Failed(String),
}

/// One replica's candidacy for the Lease named in a [`LeaderElection`].
pub struct Elector {
    api: Api<Lease>,
    name: String,
    identity: String,
    duration: Duration,
    renew_deadline: Duration,
    retry: Duration,
    clock: Clock,
    observed: Option<Observed>,
    /// Told whether the Lease can be reached (readiness), when set.
    health: Option<crate::health::Health>,
}

impl Elector {
    /// A candidate for `election`'s Lease, on `clock`. The renew deadline is the duration less
    /// the grace; the loop retries every half grace (at least 100 ms).
    pub fn new(client: &Client, election: &LeaderElection, clock: Clock) -> Self {
        let duration = Duration::from_secs(election.duration_seconds.max(1));
        let grace = Duration::from_secs(election.grace_seconds)
            .min(duration.saturating_sub(Duration::from_millis(500)));
        Self {
            api: Api::namespaced(client.clone(), &election.namespace),
            name: election.lease_name.clone(),
            identity: election.identity.clone(),
            duration,
            renew_deadline: duration.saturating_sub(grace),
            retry: (grace / 2).max(Duration::from_millis(100)),
            clock,
            observed: None,
            health: None,
        }
    }

    /// Tells `health` whether each attempt reached the Lease: a standby that cannot reach the
    /// API server is not ready, as a leader whose watches fail is not.
    #[must_use]
    pub fn reporting_to(mut self, health: crate::health::Health) -> Self {
        self.health = Some(health);
        self
    }

    /// Campaigns until `stop` completes: acquires, renews, steps down on the deadline or on
    /// seeing another holder; then releases the Lease if it still holds it (rule 8).
    pub async fn campaign(mut self, leadership: Leadership, stop: impl Future<Output = ()>) {
        let mut stop = std::pin::pin!(stop);
        let mut last_failure: Option<String> = None;
        // The holder a standby last said it waits for: said once per holder, not per retry.
        let mut standing_by_for: Option<String> = None;
        loop {
            let started = self.clock.now();
            // An attempt that hangs (a frozen connection) must not hold the step-down up: the
            // deadline interrupts it. A renewal cut short that landed anyway is renewed again
            // by the next attempt (the Lease names us).
            let deadline = leadership.valid_until();
            let clock = self.clock.clone();
            let attempt = tokio::select! {
                // In order, not at random: a simulation seed replays exactly.
                biased;
                () = &mut stop => break,
                () = sleep_until(&clock, deadline) => None,
                attempt = tokio::time::timeout(self.renew_deadline, self.attempt()) => Some(
                    attempt.unwrap_or_else(|_| Attempt::Failed("no answer within the renew deadline".to_owned())),
                ),
            };
            if let Some(health) = &self.health {
                match &attempt {
                    Some(Attempt::Leading | Attempt::Held(_)) => health.lease_answered(),
                    Some(Attempt::Failed(_)) => health.lease_failed(),
                    None => {}
                }
            }
            match attempt {
                Some(Attempt::Leading) => {
                    if !*leadership.leading.borrow() {
                        info!(identity = %self.identity, lease = %self.name, "acquired the lease");
                    }
                    leadership.renewed(rules::add(started, self.renew_deadline));
                    last_failure = None;
                    standing_by_for = None;
                }
                Some(Attempt::Held(holder)) => {
                    if *leadership.leading.borrow() {
                        warn!(identity = %self.identity, %holder, "another replica holds the lease: stepping down");
                    } else if standing_by_for.as_deref() != Some(holder.as_str()) {
                        // A standby that says nothing looks hung: say whom it waits for.
                        info!(identity = %self.identity, lease = %self.name, %holder, "standing by: another replica holds the lease; this one takes over if it is not renewed");
                    }
                    standing_by_for = Some(holder);
                    leadership.lose();
                    last_failure = None;
                }
                Some(Attempt::Failed(why)) => {
                    // One line per kind of failure, not one per retry.
                    if last_failure.as_deref() != Some(why.as_str()) {
                        warn!(identity = %self.identity, lease = %self.name, %why, "lease attempt failed");
                    }
                    last_failure = Some(why);
                }
                None => {}
            }
            self.step_down_after_deadline(&leadership);
            // Sleep to the next attempt, waking at the deadline to step down on time.
            let next = rules::add(started, self.retry);
            let wake = leadership
                .valid_until()
                .map_or(next, |until| until.min(next));
            tokio::select! {
                // In order, not at random: a simulation seed replays exactly.
                biased;
                () = &mut stop => break,
                () = sleep_until(&self.clock, Some(wake)) => {}
            }
            self.step_down_after_deadline(&leadership);
        }
        let was_leading = leadership.may_write();
        leadership.lose();
        if was_leading {
            self.release().await;
        }
    }

    /// Rule 7: a leader whose last successful renewal is older than the renew deadline stops.
    fn step_down_after_deadline(&self, leadership: &Leadership) {
        if *leadership.leading.borrow() && !leadership.may_write() {
            warn!(identity = %self.identity, deadline = ?self.renew_deadline, "no renewal within the renew deadline: stepping down");
            leadership.lose();
        }
    }

    /// One read and, unless another holds a fresh Lease, one write.
    async fn attempt(&mut self) -> Attempt {
        let lease = match self.api.get_opt(&self.name).await {
            Ok(lease) => lease,
            Err(error) => return Attempt::Failed(crate::error::chain(&error)),
        };
        // The answer's time, not the request's: a record seen at this moment was written no
        // later, so a lease judged from here cannot look older than it is (rule 3), and the
        // times written below are never before what was read.
        let now = self.clock.now();
        let previous = lease.as_ref().and_then(|lease| lease.spec.as_ref());
        self.observed = lease.as_ref().map(|lease| {
            Observed::update(
                self.observed.take(),
                Record::of(lease.spec.as_ref(), self.duration),
                now,
            )
        });
        let step = rules::step(self.observed.as_ref(), &self.identity, now);
        let Some(spec) = rules::written(&step, previous, &self.identity, self.duration, now) else {
            if let Step::Wait { holder, expires_at } = step {
                debug!(identity = %self.identity, %holder, %expires_at, "the lease is held");
                return Attempt::Held(holder);
            }
            return Attempt::Failed("nothing to write".to_owned());
        };
        let written = match lease {
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.name.clone()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(spec),
                };
                self.api.create(&PostParams::default(), &lease).await
            }
            // The object read keeps its resourceVersion: the write's precondition (rule 6).
            Some(lease) => {
                let mut next = lease;
                next.spec = Some(spec);
                self.api
                    .replace(&self.name, &PostParams::default(), &next)
                    .await
            }
        };
        match written {
            Ok(lease) => {
                self.observed = Some(Observed {
                    record: Record::of(lease.spec.as_ref(), self.duration),
                    since: now,
                });
                if let Step::TakeOver { released } = step {
                    info!(identity = %self.identity, released, "took the lease over");
                }
                Attempt::Leading
            }
            // Another candidate wrote first (rule 6): observe again next time.
            Err(kube::Error::Api(status)) if status.code == 409 => {
                Attempt::Failed(format!("conflict: {}", status.message))
            }
            Err(error) => Attempt::Failed(crate::error::chain(&error)),
        }
    }

    /// Rule 8: clears the holder if it is still us, with the version read; any failure is
    /// logged and left to expiry.
    async fn release(&self) {
        let released = async {
            let lease = self.api.get(&self.name).await?;
            let spec = lease.spec.clone().unwrap_or_default();
            if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
                return Ok(false);
            }
            let mut next = lease;
            next.spec = Some(rules::released(&spec, self.clock.now()));
            self.api
                .replace(&self.name, &PostParams::default(), &next)
                .await
                .map(|_| true)
        };
        match tokio::time::timeout(self.renew_deadline, released).await {
            Ok(Ok(true)) => info!(identity = %self.identity, "released the lease"),
            Ok(Ok(false)) => debug!(identity = %self.identity, "the lease was no longer ours"),
            Ok(Err(error)) => {
                warn!(identity = %self.identity, error = %crate::error::chain(&error), "releasing the lease failed; it will expire");
            }
            Err(_) => {
                warn!(identity = %self.identity, "releasing the lease got no answer; it will expire");
            }
        }
    }
}

/// Sleeps until `at` on `clock` (at once when it has passed), or forever when `None`.
async fn sleep_until(clock: &Clock, at: Option<Timestamp>) {
    let Some(at) = at else {
        return std::future::pending().await;
    };
    let pause = Duration::try_from(clock.now().duration_until(at)).unwrap_or(Duration::ZERO);
    tokio::time::sleep(pause).await;
}
