//! Helpers over objects kept as JSON maps, shared by the store, the write strategies and the
//! REST layer so that each reads and shapes `metadata` the same way.

use serde_json::{Map, Value};

/// `object.metadata` as a map, made one (empty) when absent or not an object.
pub fn metadata_mut(object: &mut Map<String, Value>) -> &mut Map<String, Value> {
    let metadata = object
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !metadata.is_object() {
        *metadata = Value::Object(Map::new());
    }
    match metadata {
        Value::Object(meta) => meta,
        _ => unreachable!("metadata was just made an object"),
    }
}

/// A non-empty string field of `map`.
pub fn string_field(map: &Map<String, Value>, field: &str) -> Option<String> {
    map.get(field)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}
