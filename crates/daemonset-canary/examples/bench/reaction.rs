//! Reaction latency: wall time from the store change that makes a controller write possible to
//! the store change that is that write.
//!
//! The events come from the simulator's store (every change, in commit order, each with the
//! wall-clock instant of its commit), recorded during one rollout and analysed afterwards, so
//! that the analysis costs the measured system nothing. Three writes are expected per rollout:
//!
//! | write  | recognised by (DaemonSet generation moved and)  | made possible by                          |
//! |--------|-------------------------------------------------|-------------------------------------------|
//! | start  | the pod template's target version changed       | the CanaryDaemonSet's generation moving   |
//! | widen  | maxUnavailable changed to a percentage          | the first pod on the target becoming ready |
//! | finish | maxUnavailable changed back to a number         | the last pod on the target becoming ready  |
//!
//! "Ready" is read the way the controller reads it (phase Running, every container ready) from
//! the pod's own status; pods are the DaemonSet's by controller owner name.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use canary_sim::store::{EventKind, StoreEvent};
use serde_json::Value;

use crate::oracle::Recorded;

/// The annotation carrying the target version on pods.
const VERSION_ANNOTATION: &str = "kubevirt.io/install-strategy-version";

/// One controller write and how long after its trigger it came.
#[derive(Debug, Clone, PartialEq)]
pub struct Reaction {
    /// `start`, `widen` or `finish`.
    pub write: &'static str,
    /// Wall time from the trigger's commit to the write's commit; `None` when no trigger was
    /// seen before the write (which the report flags).
    pub latency: Option<Duration>,
}

#[derive(Default)]
struct PodState {
    on_target: bool,
    ready: bool,
}

/// Replays `events` of the DaemonSet `name` moving to `version` on `desired` nodes.
pub fn reactions(
    events: &[StoreEvent],
    name: &str,
    version: &str,
    desired: usize,
) -> Vec<Reaction> {
    let mut pods: HashMap<&str, PodState> = HashMap::new();
    let mut spec_changed: Option<Instant> = None;
    let mut first_ready: Option<Instant> = None;
    let mut all_ready: Option<Instant> = None;
    let mut found = Vec::new();
    for event in events {
        match (event.key.plural.as_str(), event.key.group.as_str()) {
            ("canarydaemonsets", _)
                if event.name == name
                    && generation(event.previous.as_deref()) < generation(Some(&event.object)) =>
            {
                spec_changed.get_or_insert(event.committed_at);
            }
            ("pods", "") if owner_name(&event.object) == Some(name) => {
                track_pod(&mut pods, event, version);
                let ready_on_target = pods.values().filter(|p| p.on_target && p.ready).count();
                if ready_on_target >= 1 {
                    first_ready.get_or_insert(event.committed_at);
                }
                if ready_on_target == desired && pods.len() == desired {
                    all_ready.get_or_insert(event.committed_at);
                }
            }
            ("daemonsets", "apps") if event.name == name => {
                if let Some(write) = classify_write(event) {
                    let trigger = match write {
                        "start" => spec_changed,
                        "widen" => first_ready,
                        "finish" => all_ready,
                        _ => None,
                    };
                    found.push(Reaction {
                        write,
                        latency: trigger.map(|t| event.committed_at.saturating_duration_since(t)),
                    });
                }
            }
            _ => {}
        }
    }
    found
}

fn track_pod<'a>(pods: &mut HashMap<&'a str, PodState>, event: &'a StoreEvent, version: &str) {
    if event.kind == EventKind::Deleted {
        pods.remove(event.name.as_str());
        return;
    }
    let pod = &event.object;
    let state = pods.entry(event.name.as_str()).or_default();
    state.on_target = on_target(pod, version);
    state.ready = is_ready(pod);
}

/// Whether `pod` carries the target `version`.
pub fn on_target(pod: &Value, version: &str) -> bool {
    pod["metadata"]["annotations"][VERSION_ANNOTATION] == version
}

/// Whether `pod` is ready the way the controller reads it.
pub fn is_ready(pod: &Value) -> bool {
    let status = &pod["status"];
    let containers = status["containerStatuses"].as_array();
    status["phase"] == "Running"
        && pod["metadata"]["deletionTimestamp"].is_null()
        && containers.is_some_and(|c| !c.is_empty() && c.iter().all(|c| c["ready"] == true))
}

/// The name of `object`'s controller owner.
pub fn owner_name(object: &Value) -> Option<&str> {
    object["metadata"]["ownerReferences"]
        .as_array()?
        .iter()
        .find(|o| o["controller"] == true)?["name"]
        .as_str()
}

fn generation(object: Option<&Value>) -> i64 {
    object
        .and_then(|o| o["metadata"]["generation"].as_i64())
        .unwrap_or(0)
}

/// The controller's writes to the DaemonSet `name` among `events`, to replay in the oracle:
/// the DaemonSet before the first one, and the spec each one left.
pub fn recorded(events: &[StoreEvent], name: &str) -> Recorded {
    let mut recorded = Recorded::default();
    for event in events {
        if event.key.plural != "daemonsets" || event.name != name {
            continue;
        }
        let Some(write) = classify_write(event).filter(|w| *w != "other") else {
            continue;
        };
        if recorded.before.is_none() {
            recorded.before = event.previous.as_deref().cloned();
        }
        recorded.writes.push((write, event.object["spec"].clone()));
    }
    recorded
}

/// Which controller write `event` is, if it changed the DaemonSet's spec.
fn classify_write(event: &StoreEvent) -> Option<&'static str> {
    let previous = event.previous.as_deref()?;
    if generation(Some(previous)) >= generation(Some(&event.object)) {
        return None;
    }
    let template_version =
        |ds: &Value| ds["spec"]["template"]["metadata"]["annotations"][VERSION_ANNOTATION].clone();
    let max_unavailable =
        |ds: &Value| ds["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"].clone();
    if template_version(previous) != template_version(&event.object) {
        Some("start")
    } else if max_unavailable(previous) == max_unavailable(&event.object) {
        Some("other")
    } else if max_unavailable(&event.object).is_string() {
        Some("widen")
    } else {
        Some("finish")
    }
}
