//! Reaction latency: wall time from the store change that makes a controller write possible to
//! the store change that is that write.
//!
//! The events come from the simulator's store (every change, in commit order, each with the
//! wall-clock instant of its commit), reduced to [`Fact`]s as they arrive during one rollout and
//! analysed afterwards. Three writes are expected per rollout:
//!
//! | write  | recognised by (DaemonSet generation moved and)  | made possible by                          |
//! |--------|-------------------------------------------------|-------------------------------------------|
//! | start  | the pod template's target version changed       | the CanaryDaemonSet's generation moving   |
//! | widen  | maxUnavailable changed to a percentage          | the first pod on the target becoming ready |
//! | finish | maxUnavailable changed back to a number         | the last pod on the target becoming ready  |
//!
//! "Ready" is read the way the controller reads it (phase Running, every container ready) from
//! the pod's own status; pods are the DaemonSet's by controller owner name.

#![expect(
    clippy::indexing_slicing,
    reason = "only serde_json::Value is indexed here: a missing key or index reads as Null, and \
              writes by index go to objects this module built"
)]

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

/// What the analysis reads of one store event, taken as the event arrives so that no object
/// version outlives the store's own watch history: a recorder that kept the events (their
/// objects, about 30,000 versions per 5,000-node rollout) freed them all right before the next
/// rollout's change, and glibc's heap consolidation landed in that rollout's measured start.
#[derive(Debug, Clone, PartialEq)]
pub enum Fact {
    /// The CanaryDaemonSet's generation moved (its spec changed).
    SpecChanged { at: Instant },
    /// A pod of the DaemonSet changed: on the target version and ready, or deleted.
    Pod {
        name: String,
        state: Option<PodState>,
        at: Instant,
    },
    /// The DaemonSet's spec changed: `start`, `widen`, `finish` or `other`, with the spec it
    /// left and, but for `other`, the DaemonSet before it (for the oracle).
    DaemonSetWrite {
        write: &'static str,
        spec: Value,
        before: Option<Value>,
        at: Instant,
    },
}

/// A pod as the analysis reads it.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct PodState {
    on_target: bool,
    ready: bool,
}

/// What `event` means for the rollout of the DaemonSet `name` to `version`, if anything.
pub fn fact_of(event: &StoreEvent, name: &str, version: &str) -> Option<Fact> {
    let at = event.committed_at;
    match (event.key.plural.as_str(), event.key.group.as_str()) {
        ("canarydaemonsets", _)
            if event.name == name
                && generation(event.previous.as_deref()) < generation(Some(&event.object)) =>
        {
            Some(Fact::SpecChanged { at })
        }
        ("pods", "") if owner_name(&event.object) == Some(name) => Some(Fact::Pod {
            name: event.name.clone(),
            state: (event.kind != EventKind::Deleted).then(|| PodState {
                on_target: on_target(&event.object, version),
                ready: is_ready(&event.object),
            }),
            at,
        }),
        ("daemonsets", "apps") if event.name == name => {
            classify_write(event).map(|write| Fact::DaemonSetWrite {
                write,
                spec: event.object["spec"].clone(),
                before: (write != "other")
                    .then(|| event.previous.as_deref().cloned())
                    .flatten(),
                at,
            })
        }
        _ => None,
    }
}

/// Replays the `facts` of one rollout on `desired` nodes.
pub fn reactions(facts: &[Fact], desired: usize) -> Vec<Reaction> {
    let mut pods: HashMap<&str, PodState> = HashMap::new();
    let mut spec_changed: Option<Instant> = None;
    let mut first_ready: Option<Instant> = None;
    let mut all_ready: Option<Instant> = None;
    let mut found = Vec::new();
    for fact in facts {
        match fact {
            Fact::SpecChanged { at } => {
                spec_changed.get_or_insert(*at);
            }
            Fact::Pod { name, state, at } => {
                match state {
                    Some(state) => {
                        pods.insert(name, *state);
                    }
                    None => {
                        pods.remove(name.as_str());
                    }
                }
                let ready_on_target = pods.values().filter(|p| p.on_target && p.ready).count();
                if ready_on_target >= 1 {
                    first_ready.get_or_insert(*at);
                }
                if ready_on_target == desired && pods.len() == desired {
                    all_ready.get_or_insert(*at);
                }
            }
            Fact::DaemonSetWrite { write, at, .. } => {
                let trigger = match *write {
                    "start" => spec_changed,
                    "widen" => first_ready,
                    "finish" => all_ready,
                    _ => None,
                };
                found.push(Reaction {
                    write,
                    latency: trigger.map(|t| at.saturating_duration_since(t)),
                });
            }
        }
    }
    found
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

/// The controller's writes among the `facts`, to replay in the oracle: the DaemonSet before
/// the first one, and the spec each one left.
pub fn recorded(facts: &[Fact]) -> Recorded {
    let mut recorded = Recorded::default();
    for fact in facts {
        let Fact::DaemonSetWrite {
            write,
            spec,
            before,
            ..
        } = fact
        else {
            continue;
        };
        if *write == "other" {
            continue;
        }
        if recorded.before.is_none() {
            recorded.before = before.clone();
        }
        recorded.writes.push((write, spec.clone()));
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
