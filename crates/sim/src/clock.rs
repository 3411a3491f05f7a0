//! A virtual wall clock driven by tokio time.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use tokio::time::Instant;

/// The instant every [`SimClock`] starts at unless told otherwise: 2026-01-01T00:00:00Z.
pub const DEFAULT_EPOCH_SECONDS: i64 = 1_767_225_600;

/// A virtual wall clock: a fixed epoch plus the tokio time elapsed since the clock was made.
///
/// Because it reads [`tokio::time::Instant`], every timestamp the simulator writes
/// (`creationTimestamp`, `deletionTimestamp`, condition `lastTransitionTime`, ...) is
/// deterministic under `tokio::time::pause()`: two runs with the same seed and the same
/// sequence of events produce byte-identical objects.
///
/// Clones share the same start, so they read the same time.
#[derive(Clone, Debug)]
pub struct SimClock {
    epoch: Timestamp,
    start: Instant,
}

impl Default for SimClock {
    fn default() -> Self {
        Self::new()
    }
}

impl SimClock {
    /// A clock reading [`DEFAULT_EPOCH_SECONDS`] now.
    pub fn new() -> Self {
        let epoch = Timestamp::from_second(DEFAULT_EPOCH_SECONDS).unwrap_or(Timestamp::UNIX_EPOCH);
        Self::starting_at(epoch)
    }

    /// A clock reading `epoch` now.
    pub fn starting_at(epoch: Timestamp) -> Self {
        Self {
            epoch,
            start: Instant::now(),
        }
    }

    /// The current virtual wall-clock time.
    pub fn now(&self) -> Timestamp {
        let elapsed = Instant::now().saturating_duration_since(self.start);
        let elapsed = SignedDuration::try_from(elapsed).unwrap_or(SignedDuration::MAX);
        self.epoch.saturating_add(elapsed).unwrap_or(self.epoch)
    }

    /// [`SimClock::now`] as the `meta/v1` `Time` used by `creationTimestamp` and conditions
    /// (serialized with second precision, as Kubernetes does).
    pub fn now_time(&self) -> Time {
        Time(self.now())
    }

    /// [`SimClock::now`] as the `meta/v1` `MicroTime` used by leases and events.
    pub fn now_micro(&self) -> MicroTime {
        MicroTime(self.now())
    }

    /// `now + seconds`, formatted as a Kubernetes `Time` string (`2026-01-01T00:00:30Z`).
    pub fn rfc3339_after(&self, seconds: i64) -> String {
        let at = self
            .now()
            .saturating_add(SignedDuration::from_secs(seconds))
            .unwrap_or_else(|_| self.now());
        format_time(at)
    }
}

/// Formats a timestamp as Kubernetes serializes `meta/v1` `Time`: RFC 3339, seconds, `Z`.
pub fn format_time(at: Timestamp) -> String {
    k8s_openapi::jiff::fmt::strtime::format("%Y-%m-%dT%H:%M:%SZ", at)
        .unwrap_or_else(|_| at.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn clock_follows_paused_tokio_time() {
        let clock = SimClock::new();
        assert_eq!(format_time(clock.now()), "2026-01-01T00:00:00Z");
        tokio::time::advance(Duration::from_secs(90)).await;
        assert_eq!(format_time(clock.now()), "2026-01-01T00:01:30Z");
        assert_eq!(clock.rfc3339_after(30), "2026-01-01T00:02:00Z");
        let copy = clock.clone();
        assert_eq!(copy.now(), clock.now());
    }
}
