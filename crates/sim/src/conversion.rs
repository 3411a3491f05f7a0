//! One stored form, several served forms: the API server keeps core `v1` Events and
//! `events.k8s.io/v1` Events in one store (the internal `core.Event`, stored as `v1`) and
//! converts on every read and write (`pkg/apis/events/v1/conversion.go`,
//! `pkg/registry/core/event/`), so an event written through either API is read through both.
//!
//! The field mapping (`events.k8s.io/v1` ↔ core `v1`): `regarding` ↔ `involvedObject`, `note`
//! ↔ `message`, `deprecatedSource` ↔ `source`, `deprecatedFirstTimestamp` ↔ `firstTimestamp`,
//! `deprecatedLastTimestamp` ↔ `lastTimestamp`, `deprecatedCount` ↔ `count`,
//! `reportingController` ↔ `reportingComponent`; `eventTime`, `series`, `reportingInstance`,
//! `action`, `reason`, `related`, `type` and `metadata` keep their names.
//!
//! Invariants: the conversion is lossless both ways for every field of either form; a
//! resource without another form is served as stored, at no cost.

use std::sync::Arc;

use serde_json::{Map, Value};

use crate::registry::ResourceKey;

/// `(events.k8s.io/v1 name, core v1 name)` of the fields that are renamed.
const EVENT_FIELDS: [(&str, &str); 7] = [
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
    ("reportingController", "reportingComponent"),
];

/// How a resource's objects are served, relative to how they are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServedForm {
    /// Served exactly as stored.
    AsStored,
    /// `events.k8s.io/v1` Events, stored as core `v1` Events.
    EventsV1,
}

impl ServedForm {
    /// Where the objects of `key` are stored, and how they are served under `key`.
    pub fn of(key: &ResourceKey) -> (ResourceKey, Self) {
        if key.group == "events.k8s.io" && key.version == "v1" && key.plural == "events" {
            (ResourceKey::new("", "v1", "events"), Self::EventsV1)
        } else {
            (key.clone(), Self::AsStored)
        }
    }

    /// `object` (in this form) in its stored form.
    pub fn to_storage(self, object: Value) -> Value {
        match (self, object) {
            (Self::EventsV1, Value::Object(mut map)) => {
                for (served, stored) in EVENT_FIELDS {
                    rename(&mut map, served, stored);
                }
                set_type(&mut map, "v1", "Event");
                Value::Object(map)
            }
            (_, object) => object,
        }
    }

    /// A stored object in this form (the same object when served as stored).
    pub fn from_storage(self, object: &Arc<Value>) -> Arc<Value> {
        match (self, object.as_ref()) {
            (Self::EventsV1, Value::Object(stored)) => {
                let mut map = stored.clone();
                for (served, stored) in EVENT_FIELDS {
                    rename(&mut map, stored, served);
                }
                set_type(&mut map, "events.k8s.io/v1", "Event");
                Arc::new(Value::Object(map))
            }
            _ => Arc::clone(object),
        }
    }
}

fn rename(map: &mut Map<String, Value>, from: &str, to: &str) {
    match map.remove(from) {
        Some(value) => {
            map.insert(to.to_owned(), value);
        }
        // A field of the target's name left in the source form has no meaning there.
        None => {
            map.remove(to);
        }
    }
}

fn set_type(map: &mut Map<String, Value>, api_version: &str, kind: &str) {
    if map.contains_key("apiVersion") || map.contains_key("kind") {
        map.insert("apiVersion".into(), Value::String(api_version.to_owned()));
        map.insert("kind".into(), Value::String(kind.to_owned()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn events_round_trip_through_the_stored_form() {
        let (stored_key, form) = ServedForm::of(&ResourceKey::new("events.k8s.io", "v1", "events"));
        assert_eq!(stored_key, ResourceKey::new("", "v1", "events"));
        let served = json!({
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": "e", "namespace": "ns"},
            "eventTime": "2026-01-01T00:00:00.000000Z",
            "series": {"count": 2, "lastObservedTime": "2026-01-01T00:01:00.000000Z"},
            "reportingController": "canary.daemonset.dev/controller", "reportingInstance": "pod-1",
            "action": "Rollout", "reason": "RolloutStarted", "type": "Normal",
            "regarding": {"kind": "CanaryDaemonSet", "name": "agent", "namespace": "ns"},
            "note": "started", "deprecatedCount": 3,
        });
        let stored = form.to_storage(served.clone());
        assert_eq!(stored["apiVersion"], "v1");
        assert_eq!(stored["message"], "started");
        assert_eq!(stored["involvedObject"]["name"], "agent");
        assert_eq!(
            stored["reportingComponent"],
            "canary.daemonset.dev/controller"
        );
        assert_eq!(stored["count"], 3);
        assert_eq!(stored["series"]["count"], 2);
        assert!(stored.get("note").is_none() && stored.get("regarding").is_none());
        assert_eq!(*form.from_storage(&Arc::new(stored)), served);
    }

    #[test]
    fn other_resources_are_served_as_stored() {
        let key = ResourceKey::new("", "v1", "events");
        let (stored_key, form) = ServedForm::of(&key);
        assert_eq!((stored_key, form), (key, ServedForm::AsStored));
        let object = Arc::new(json!({"message": "m"}));
        assert!(Arc::ptr_eq(&form.from_storage(&object), &object));
    }
}
