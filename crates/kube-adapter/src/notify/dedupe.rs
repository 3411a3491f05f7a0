//! Each occurrence is sent once: a key per occurrence (object UID, event, generation, the
//! rollout's series and the message), remembered in a bounded set.
//!
//! A key is remembered for the life of the process (up to [`CAPACITY`] keys, the oldest
//! forgotten first), and an object's keys are forgotten when its rollout starts again
//! ([`NotificationEvent::starts_again`](super::NotificationEvent::starts_again)), so that a
//! second failure after a `retry` is told too. A second pass that publishes the same event
//! again (a status write that failed after the DaemonSet write) is not told twice.

use std::collections::{HashSet, VecDeque};

use super::body::Occurrence;

/// The most keys remembered.
pub const CAPACITY: usize = 4096;

/// The key of one occurrence.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Key {
    uid: String,
    event: &'static str,
    generation: i64,
    series: String,
    message: String,
}

impl Key {
    /// The key of `occurrence`.
    pub fn of(occurrence: &Occurrence) -> Key {
        Key {
            uid: occurrence.uid.clone(),
            event: occurrence.event.as_str(),
            generation: occurrence.generation,
            series: occurrence.series.clone(),
            message: occurrence.message.clone(),
        }
    }
}

/// The keys sent, oldest first.
#[derive(Debug, Default)]
pub struct Dedupe {
    seen: HashSet<Key>,
    order: VecDeque<Key>,
}

impl Dedupe {
    /// Whether `key` is new (and now remembered).
    pub fn first(&mut self, key: Key) -> bool {
        if self.seen.contains(&key) {
            return false;
        }
        if self.order.len() >= CAPACITY
            && let Some(oldest) = self.order.pop_front()
        {
            self.seen.remove(&oldest);
        }
        self.order.push_back(key.clone());
        self.seen.insert(key);
        true
    }

    /// Forgets every key of the object `uid`.
    pub fn forget(&mut self, uid: &str) {
        self.order.retain(|key| key.uid != uid);
        self.seen.retain(|key| key.uid != uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::notify::NotificationEvent;

    fn occurrence(uid: &str, event: NotificationEvent, generation: i64) -> Occurrence {
        Occurrence {
            event,
            reason: "R".into(),
            severity: "Normal",
            namespace: "n".into(),
            name: "a".into(),
            uid: uid.into(),
            daemon_set: "a".into(),
            generation,
            version: "v1".into(),
            series: "v1//".into(),
            message: "m".into(),
            time: String::new(),
        }
    }

    #[test]
    fn an_occurrence_is_sent_once_per_object_event_and_generation() {
        let mut dedupe = Dedupe::default();
        let failed = occurrence("u1", NotificationEvent::Failed, 2);
        assert!(dedupe.first(Key::of(&failed)));
        assert!(!dedupe.first(Key::of(&failed)), "a second pass");
        // Another event, generation or object is another occurrence.
        assert!(dedupe.first(Key::of(&occurrence(
            "u1",
            NotificationEvent::AnalysisFailed,
            2
        ))));
        assert!(dedupe.first(Key::of(&occurrence("u1", NotificationEvent::Failed, 3))));
        assert!(dedupe.first(Key::of(&occurrence("u2", NotificationEvent::Failed, 2))));
        // A rollout that starts again (retry) may fail again.
        dedupe.forget("u1");
        assert!(dedupe.first(Key::of(&failed)));
        assert!(!dedupe.first(Key::of(&occurrence("u2", NotificationEvent::Failed, 2))));
    }

    #[test]
    fn the_set_is_bounded_oldest_first() {
        let mut dedupe = Dedupe::default();
        for generation in 0..(CAPACITY as i64 + 10) {
            assert!(dedupe.first(Key::of(&occurrence(
                "u",
                NotificationEvent::Paused,
                generation
            ))));
        }
        assert_eq!(dedupe.order.len(), CAPACITY);
        assert_eq!(dedupe.seen.len(), CAPACITY);
        // The oldest was forgotten, the newest is still known.
        assert!(dedupe.first(Key::of(&occurrence("u", NotificationEvent::Paused, 0))));
        assert!(!dedupe.first(Key::of(&occurrence(
            "u",
            NotificationEvent::Paused,
            CAPACITY as i64 + 9
        ))));
    }
}
