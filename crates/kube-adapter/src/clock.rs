//! Where "now" comes from.
//!
//! Phase start times and the progress deadline are wall-clock timestamps in the status. In
//! production they come from the system clock; under `tokio::time::pause()` (the simulator tests)
//! they must follow tokio's virtual time, or a rollout that takes ten virtual minutes would look
//! like it took a few milliseconds.

use std::fmt;
use std::sync::Arc;

use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// A source of wall-clock time; cheap to clone.
#[derive(Clone)]
pub struct Clock {
    now: Arc<dyn Fn() -> Timestamp + Send + Sync>,
}

impl Clock {
    /// The system clock.
    pub fn system() -> Self {
        Self::from_fn(Timestamp::now)
    }

    /// `epoch` plus the tokio time elapsed since this call: follows a paused, advanced clock.
    /// Must be called inside a tokio runtime.
    pub fn tokio_virtual(epoch: Timestamp) -> Self {
        let start = tokio::time::Instant::now();
        Self::from_fn(move || {
            let elapsed = SignedDuration::try_from(start.elapsed()).unwrap_or(SignedDuration::MAX);
            epoch.checked_add(elapsed).unwrap_or(Timestamp::MAX)
        })
    }

    /// Any function, for example a simulator's clock.
    pub fn from_fn(now: impl Fn() -> Timestamp + Send + Sync + 'static) -> Self {
        Self { now: Arc::new(now) }
    }

    /// The current time.
    pub fn now(&self) -> Timestamp {
        (self.now)()
    }

    /// This clock as a function, for a caller that takes one (an analysis run).
    pub fn boxed(&self) -> Box<dyn Fn() -> Timestamp + Send + Sync> {
        let now = Arc::clone(&self.now);
        Box::new(move || now())
    }
}

impl Default for Clock {
    fn default() -> Self {
        Self::system()
    }
}

impl fmt::Debug for Clock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Clock").field("now", &self.now()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn virtual_clock_follows_paused_tokio_time() {
        let epoch = Timestamp::from_second(1_767_225_600).unwrap();
        let clock = Clock::tokio_virtual(epoch);
        assert_eq!(clock.now(), epoch);
        tokio::time::sleep(Duration::from_secs(600)).await;
        assert_eq!(
            clock.now(),
            epoch.checked_add(SignedDuration::from_secs(600)).unwrap()
        );
    }
}
