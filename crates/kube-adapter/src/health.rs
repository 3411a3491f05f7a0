//! Whether the running controller is ready and alive, for `/readyz` and `/healthz`.
//!
//! - **Ready**: the process has started (the binary's preflight passed, [`Health::set_started`]),
//!   no watcher has been failing for longer than [`Health::watch_grace`], the Lease (with
//!   leader election) has not been out of reach that long either, and, while this replica
//!   leads, its caches have listed once. A standby replica is ready while it reaches the Lease:
//!   it only waits for it.
//! - **Alive** ([`Health::not_alive`]): the reconcile loop is not wedged (no trigger has waited
//!   longer than [`Health::wedge_timeout`] without the controller finishing any work, and no
//!   pass has run that long; a wedged leader stops and gives up its Lease, see
//!   `controller::run`), and no watcher has been failing for longer than
//!   [`Health::watch_liveness`]: a controller that cannot see the cluster for that long is
//!   restarted by its liveness probe, in case what holds it is in the process. An API server
//!   outage of a minute makes the replica not ready, never not alive.
//!
//! A watcher fails from a failed request until it delivers something again: with
//! `trigger::relisting_watcher`, every failure but a broken stream is followed by a list, so a
//! watcher that works again says so with the list's items, even on a quiet resource.
//!
//! Cheap to clone (shared), updated from the watch streams and the controller's output.
//!
//! # Invariants
//!
//! - A fresh `Health` is alive and not ready.
//! - Every method is a few atomic or mutex-guarded field updates: it never blocks on I/O.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

#[derive(Debug, Default)]
struct State {
    /// Per watched resource: since when its watcher has been failing without a success.
    failing_since: HashMap<&'static str, Instant>,
    /// Since when every attempt on the Lease has failed (leader election only).
    lease_failing_since: Option<Instant>,
    /// The oldest trigger that no finished piece of work has followed yet.
    oldest_waiting_trigger: Option<Instant>,
    /// Start times of the passes running now.
    running: Vec<(u64, Instant)>,
    next_pass: u64,
}

#[derive(Debug, Default)]
struct Shared {
    started: AtomicBool,
    leading: AtomicBool,
    caches_ready: AtomicBool,
    state: Mutex<State>,
}

/// The controller's readiness and liveness; see the module documentation.
#[derive(Debug, Clone)]
pub struct Health {
    shared: Arc<Shared>,
    /// How long a watcher may fail before the replica is not ready.
    pub watch_grace: Duration,
    /// How long work may wait (or a pass may run) before the loop counts as wedged.
    pub wedge_timeout: Duration,
    /// How long a watcher may fail before the replica is not alive.
    pub watch_liveness: Duration,
}

impl Default for Health {
    fn default() -> Self {
        Self {
            shared: Arc::default(),
            watch_grace: Duration::from_secs(30),
            wedge_timeout: Duration::from_secs(300),
            // Six times the readiness grace: an API server restart or a minute-long outage
            // (watchers retry every 16 s at most) is far inside it.
            watch_liveness: Duration::from_secs(180),
        }
    }
}

/// A pass in progress; dropping it marks the pass finished.
#[derive(Debug)]
pub struct PassGuard {
    health: Health,
    id: u64,
}

impl Drop for PassGuard {
    fn drop(&mut self) {
        let mut state = self.health.lock();
        state.running.retain(|(id, _)| *id != self.id);
    }
}

impl Health {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // Every critical section is a few field updates: a poisoned state is still consistent.
        crate::sync::lock(&self.shared.state)
    }

    /// The process can do its job (the API server answered, the CRD is installed).
    pub fn set_started(&self) {
        self.shared.started.store(true, Ordering::Release);
    }

    /// This replica started or stopped running the controller.
    pub fn set_leading(&self, leading: bool) {
        self.shared.leading.store(leading, Ordering::Release);
        if !leading {
            self.shared.caches_ready.store(false, Ordering::Release);
            let mut state = self.lock();
            state.oldest_waiting_trigger = None;
            state.failing_since.clear();
        }
    }

    /// The leader's caches have listed once.
    pub fn set_caches_ready(&self, ready: bool) {
        self.shared.caches_ready.store(ready, Ordering::Release);
    }

    /// A list or watch request of `resource` failed.
    pub fn watch_failed(&self, resource: &'static str) {
        self.lock()
            .failing_since
            .entry(resource)
            .or_insert_with(Instant::now);
    }

    /// The watcher of `resource` delivered something: it works.
    pub fn watch_succeeded(&self, resource: &'static str) {
        let mut state = self.lock();
        if !state.failing_since.is_empty() {
            state.failing_since.remove(resource);
        }
    }

    /// An attempt to read or renew the Lease failed (no answer, or an error).
    pub fn lease_failed(&self) {
        self.lock()
            .lease_failing_since
            .get_or_insert_with(Instant::now);
    }

    /// The API server answered an attempt on the Lease (whoever holds it).
    pub fn lease_answered(&self) {
        self.lock().lease_failing_since = None;
    }

    /// A trigger reached the controller's queue.
    pub fn triggered(&self) {
        self.lock()
            .oldest_waiting_trigger
            .get_or_insert_with(Instant::now);
    }

    /// The controller finished a piece of work (a pass, or a trigger for an object that is
    /// gone): whatever waited before is being served.
    pub fn served(&self) {
        self.lock().oldest_waiting_trigger = None;
    }

    /// A pass starts; it counts as running until the guard is dropped.
    pub fn pass_started(&self) -> PassGuard {
        let mut state = self.lock();
        let id = state.next_pass;
        state.next_pass = state.next_pass.wrapping_add(1);
        state.running.push((id, Instant::now()));
        PassGuard {
            health: self.clone(),
            id,
        }
    }

    /// Why the replica is not ready, or `None` when it is.
    pub fn not_ready(&self) -> Option<String> {
        if !self.shared.started.load(Ordering::Acquire) {
            return Some("starting".to_owned());
        }
        let state = self.lock();
        let failing: Vec<&str> = state
            .failing_since
            .iter()
            .filter(|(_, since)| since.elapsed() > self.watch_grace)
            .map(|(resource, _)| *resource)
            .collect();
        if !failing.is_empty() {
            let mut failing = failing;
            failing.sort_unstable();
            return Some(format!("watches failing: {}", failing.join(", ")));
        }
        if let Some(since) = state.lease_failing_since
            && since.elapsed() > self.watch_grace
        {
            return Some(format!(
                "the Lease cannot be reached for {}s",
                since.elapsed().as_secs()
            ));
        }
        let leading = self.shared.leading.load(Ordering::Acquire);
        if leading && !self.shared.caches_ready.load(Ordering::Acquire) {
            return Some("leading, caches not listed yet".to_owned());
        }
        None
    }

    /// Why the replica should be restarted (`/healthz`), or `None` when it is alive: the
    /// reconcile loop is wedged ([`Health::wedged`]), or a watcher has been failing for longer
    /// than [`Health::watch_liveness`].
    pub fn not_alive(&self) -> Option<String> {
        if let Some(why) = self.wedged() {
            return Some(format!("wedged: {why}"));
        }
        let state = self.lock();
        let mut failing: Vec<&str> = state
            .failing_since
            .iter()
            .filter(|(_, since)| since.elapsed() > self.watch_liveness)
            .map(|(resource, _)| *resource)
            .collect();
        if failing.is_empty() {
            return None;
        }
        failing.sort_unstable();
        Some(format!(
            "watches failing for more than {}s: {}",
            self.watch_liveness.as_secs(),
            failing.join(", ")
        ))
    }

    /// Why the reconcile loop counts as wedged, or `None` when it is alive.
    pub fn wedged(&self) -> Option<String> {
        let state = self.lock();
        if let Some(waiting) = state.oldest_waiting_trigger
            && waiting.elapsed() > self.wedge_timeout
        {
            return Some(format!(
                "work waiting for {}s with no pass finishing",
                waiting.elapsed().as_secs()
            ));
        }
        let longest = state.running.iter().map(|(_, at)| at.elapsed()).max();
        match longest {
            Some(running) if running > self.wedge_timeout => Some(format!(
                "a pass has been running for {}s",
                running.as_secs()
            )),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn readiness_follows_start_watches_and_caches() {
        let health = Health::default();
        assert_eq!(health.not_ready().as_deref(), Some("starting"));
        health.set_started();
        assert_eq!(health.not_ready(), None, "a standby is ready");
        health.set_leading(true);
        assert!(
            health.not_ready().is_some(),
            "a leader without caches is not"
        );
        health.set_caches_ready(true);
        assert_eq!(health.not_ready(), None);
        health.watch_failed("pods");
        assert_eq!(health.not_ready(), None, "within the grace");
        tokio::time::advance(Duration::from_secs(31)).await;
        assert_eq!(health.not_ready().as_deref(), Some("watches failing: pods"));
        health.watch_succeeded("pods");
        assert_eq!(health.not_ready(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_watch_failing_for_minutes_is_not_alive_and_a_minute_is_only_not_ready() {
        let health = Health::default();
        health.set_started();
        health.set_leading(true);
        health.set_caches_ready(true);
        health.watch_failed("pods");
        tokio::time::advance(Duration::from_secs(60)).await;
        assert_eq!(health.not_ready().as_deref(), Some("watches failing: pods"));
        assert_eq!(
            health.not_alive(),
            None,
            "a minute of outage is no reason to restart"
        );
        health.watch_succeeded("pods");
        assert_eq!(health.not_ready(), None);
        health.watch_failed("pods");
        health.watch_failed("daemonsets");
        tokio::time::advance(Duration::from_secs(181)).await;
        assert_eq!(
            health.not_alive().as_deref(),
            Some("watches failing for more than 180s: daemonsets, pods")
        );
        health.watch_succeeded("pods");
        health.watch_succeeded("daemonsets");
        assert_eq!(health.not_alive(), None);
        let pass = health.pass_started();
        tokio::time::advance(Duration::from_secs(301)).await;
        assert!(health.not_alive().unwrap().starts_with("wedged: "));
        drop(pass);
    }

    #[tokio::test(start_paused = true)]
    async fn a_standby_that_cannot_reach_the_lease_is_not_ready() {
        let health = Health::default();
        health.set_started();
        health.lease_failed();
        tokio::time::advance(Duration::from_secs(20)).await;
        health.lease_failed();
        assert_eq!(health.not_ready(), None, "within the grace");
        tokio::time::advance(Duration::from_secs(11)).await;
        assert_eq!(
            health.not_ready().as_deref(),
            Some("the Lease cannot be reached for 31s")
        );
        assert_eq!(
            health.not_alive(),
            None,
            "restarting would not bring the server back"
        );
        health.lease_answered();
        assert_eq!(health.not_ready(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn waiting_work_or_a_long_pass_is_a_wedge() {
        let health = Health::default();
        health.triggered();
        tokio::time::advance(Duration::from_secs(200)).await;
        assert_eq!(health.wedged(), None);
        health.triggered();
        tokio::time::advance(Duration::from_secs(101)).await;
        assert!(health.wedged().is_some(), "the first trigger still waits");
        health.served();
        assert_eq!(health.wedged(), None);
        let pass = health.pass_started();
        tokio::time::advance(Duration::from_secs(301)).await;
        assert!(health.wedged().unwrap().contains("running"));
        drop(pass);
        assert_eq!(health.wedged(), None);
    }
}
