//! `daemonset-canary status NAME`: one CanaryDaemonSet as a person reads it, in the spirit of
//! `kubectl argo rollouts get`: where the rollout is and since when, how far it got, what the
//! DaemonSet allows right now, the conditions and the recent events.
//!
//! Pure: the caller fetches the objects, [`render`] only formats them, so it is tested without a
//! cluster.

use crate::format::{age, progress_bar};
use canary_kube_adapter::CanaryDaemonSet;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::jiff::Timestamp;
use std::fmt::Write;

/// How many of the most recent events [`render`] shows.
pub const RECENT_EVENTS: usize = 10;

/// Formats `cds` with its `events` (any order; only those about it should be passed) as seen at
/// `now`.
pub fn render(cds: &CanaryDaemonSet, events: &[Event], now: Timestamp) -> String {
    let status = cds.status.clone().unwrap_or_default();
    let mut out = String::new();
    let field = |out: &mut String, name: &str, value: &str| {
        let _ = writeln!(out, "{:<17}{value}", format!("{name}:"));
    };
    field(
        &mut out,
        "Name",
        cds.metadata.name.as_deref().unwrap_or("?"),
    );
    field(
        &mut out,
        "Namespace",
        cds.metadata.namespace.as_deref().unwrap_or("?"),
    );
    let daemon_set = status
        .daemon_set_name
        .clone()
        .unwrap_or_else(|| cds.daemon_set_name());
    field(&mut out, "DaemonSet", &daemon_set);
    field(&mut out, "Target", &target(cds));
    let strategy = &cds.spec.strategy;
    field(
        &mut out,
        "Strategy",
        &format!(
            "canary maxUnavailable {}, then {}; compatibility {:?}",
            strategy.canary_max_unavailable, strategy.fast_max_unavailable, strategy.compatibility
        ),
    );
    let phase = status.phase.as_deref().unwrap_or("pending");
    let since = status
        .phase_start_time
        .as_ref()
        .map(|t| format!("  (since {}, {} ago)", t.0, age(t.0, now)))
        .unwrap_or_default();
    field(
        &mut out,
        "Phase",
        &format!("{} {phase}{since}", symbol(phase)),
    );
    if let Some(reason) = status.reason.as_deref().filter(|r| !r.is_empty()) {
        field(&mut out, "Reason", reason);
    }
    if let Some(message) = status.message.as_deref().filter(|m| !m.is_empty()) {
        field(&mut out, "Message", message);
    }
    field(
        &mut out,
        "Pods",
        &format!(
            "{} {}/{} updated and ready ({} updated, {} desired)",
            progress_bar(status.updated_ready, status.desired, 20),
            status.updated_ready,
            status.desired,
            status.updated,
            status.desired
        ),
    );
    field(
        &mut out,
        "maxUnavailable",
        status.current_max_unavailable.as_deref().unwrap_or("-"),
    );
    field(&mut out, "Generations", &generations(cds));
    conditions(&mut out, cds, now);
    recent_events(&mut out, events, now);
    out
}

fn target(cds: &CanaryDaemonSet) -> String {
    let target = &cds.spec.target;
    let resolved = cds.status.as_ref().and_then(|s| s.target_version.clone());
    let mut text = match (target.from_container.as_deref(), resolved) {
        (Some(container), Some(version)) => {
            format!("{version} (the tag of container {container}'s image)")
        }
        (Some(container), None) => format!("the tag of container {container}'s image"),
        (None, _) => target.version.clone(),
    };
    if !target.registry.is_empty() {
        let _ = write!(text, ", registry {}", target.registry);
    }
    if let Some(id) = target.deployment_id.as_deref() {
        let _ = write!(text, ", deployment id {id}");
    }
    text
}

fn generations(cds: &CanaryDaemonSet) -> String {
    let status = cds.status.clone().unwrap_or_default();
    let show = |g: Option<i64>| g.map_or_else(|| "-".to_owned(), |g| g.to_string());
    let mut text = format!(
        "spec {}, observed {}, recorded DaemonSet generation {}",
        show(cds.metadata.generation),
        show(status.observed_generation),
        show(status.recorded_daemon_set_generation)
    );
    if status.observed_generation.is_some() && status.observed_generation != cds.metadata.generation
    {
        text.push_str(" (the controller has not seen the latest spec yet)");
    }
    text
}

fn symbol(phase: &str) -> &'static str {
    match phase {
        "successful" => "✔",
        "failed" => "✖",
        "pending" => "…",
        _ => "◌",
    }
}

fn conditions(out: &mut String, cds: &CanaryDaemonSet, now: Timestamp) {
    let conditions = cds
        .status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default();
    let _ = writeln!(out, "\nConditions:");
    if conditions.is_empty() {
        let _ = writeln!(out, "  (none yet)");
        return;
    }
    let _ = writeln!(
        out,
        "  {:<12} {:<7} {:<24} {:>7}  MESSAGE",
        "TYPE", "STATUS", "REASON", "AGE"
    );
    for condition in conditions {
        let _ = writeln!(
            out,
            "  {:<12} {:<7} {:<24} {:>7}  {}",
            condition.type_,
            condition.status,
            condition.reason,
            age(condition.last_transition_time.0, now),
            condition.message
        );
    }
}

fn recent_events(out: &mut String, events: &[Event], now: Timestamp) {
    let mut events: Vec<(Timestamp, &Event)> = events.iter().map(|e| (event_time(e), e)).collect();
    events.sort_by_key(|(at, _)| *at);
    let skip = events.len().saturating_sub(RECENT_EVENTS);
    let _ = writeln!(out, "\nEvents (most recent last):");
    if events.is_empty() {
        let _ = writeln!(out, "  (none)");
        return;
    }
    let _ = writeln!(
        out,
        "  {:>7}  {:<7} {:<22} MESSAGE",
        "AGE", "TYPE", "REASON"
    );
    for (at, event) in events.into_iter().skip(skip) {
        let count = event
            .series
            .as_ref()
            .map(|s| format!(" (x{})", s.count))
            .or_else(|| {
                event
                    .deprecated_count
                    .filter(|c| *c > 1)
                    .map(|c| format!(" (x{c})"))
            })
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "  {:>7}  {:<7} {:<22} {}{count}",
            age(at, now),
            event.type_.as_deref().unwrap_or("-"),
            event.reason.as_deref().unwrap_or("-"),
            event.note.as_deref().unwrap_or("")
        );
    }
}

/// When the event last happened: its series' last observation, else its event time, else the
/// deprecated timestamps older emitters set.
fn event_time(event: &Event) -> Timestamp {
    event
        .series
        .as_ref()
        .map(|s| s.last_observed_time.0)
        .or_else(|| event.event_time.as_ref().map(|t| t.0))
        .or_else(|| event.deprecated_last_timestamp.as_ref().map(|t| t.0))
        .or_else(|| event.metadata.creation_timestamp.as_ref().map(|t| t.0))
        .unwrap_or(Timestamp::UNIX_EPOCH)
}

/// Whether `event` is about the CanaryDaemonSet `name` (events are listed per namespace).
pub fn is_about(event: &Event, name: &str) -> bool {
    event.regarding.as_ref().is_some_and(|r| {
        r.kind.as_deref() == Some("CanaryDaemonSet") && r.name.as_deref() == Some(name)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ObjectReference;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, MicroTime, Time};

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(1_767_225_600 + second).unwrap()
    }

    fn cds() -> CanaryDaemonSet {
        let mut cds: CanaryDaemonSet = serde_json::from_value(serde_json::json!({
            "apiVersion": "canary.daemonset.dev/v1alpha1",
            "kind": "CanaryDaemonSet",
            "metadata": {"name": "node-agent", "namespace": "default", "generation": 2},
            "spec": {
                "target": {"version": "v2", "registry": "registry.example"},
                "template": {"spec": {
                    "selector": {"matchLabels": {"app": "a"}},
                    "template": {"metadata": {"labels": {"app": "a"}},
                                 "spec": {"containers": [{"name": "a", "image": "a:v2"}]}}
                }}
            }
        }))
        .unwrap();
        let status = cds.status.get_or_insert_default();
        status.phase = Some("canary".into());
        status.desired = 50;
        status.updated = 1;
        status.updated_ready = 0;
        status.current_max_unavailable = Some("1".into());
        status.observed_generation = Some(2);
        status.recorded_daemon_set_generation = Some(4);
        status.phase_start_time = Some(Time(at(100)));
        status.conditions = vec![Condition {
            type_: "Progressing".into(),
            status: "True".into(),
            reason: "CanaryStarted".into(),
            message: "waiting for the canary pod".into(),
            last_transition_time: Time(at(100)),
            observed_generation: Some(2),
        }];
        cds
    }

    fn event(second: i64, reason: &str, name: &str) -> Event {
        Event {
            reason: Some(reason.into()),
            type_: Some("Normal".into()),
            note: Some(format!("{reason} happened")),
            event_time: Some(MicroTime(at(second))),
            regarding: Some(ObjectReference {
                kind: Some("CanaryDaemonSet".into()),
                name: Some(name.into()),
                ..ObjectReference::default()
            }),
            ..Event::default()
        }
    }

    #[test]
    fn shows_phase_since_counts_and_conditions() {
        let text = render(&cds(), &[], at(142));
        assert!(
            text.contains("◌ canary  (since 2026-01-01T00:01:40Z, 42s ago)"),
            "{text}"
        );
        assert!(
            text.contains("0/50 updated and ready (1 updated, 50 desired)"),
            "{text}"
        );
        assert!(text.contains("maxUnavailable:  1\n"), "{text}");
        assert!(
            text.contains("Target:          v2, registry registry.example"),
            "{text}"
        );
        assert!(text.contains("recorded DaemonSet generation 4"), "{text}");
        assert!(!text.contains("not seen the latest spec"), "{text}");
        let progressing = text
            .lines()
            .find(|l| l.trim_start().starts_with("Progressing"))
            .unwrap();
        assert!(progressing.contains("CanaryStarted"), "{progressing}");
        assert!(progressing.contains("42s"), "{progressing}");
        assert!(
            text.contains("Events (most recent last):\n  (none)"),
            "{text}"
        );
    }

    #[test]
    fn events_are_sorted_and_only_the_most_recent_shown() {
        let events: Vec<Event> = (0..15i64)
            .rev()
            .map(|i| event(i, &format!("Step{i:02}"), "node-agent"))
            .collect();
        let text = render(&cds(), &events, at(20));
        let shown: Vec<&str> = text
            .lines()
            .filter_map(|l| {
                l.split_whitespace()
                    .nth(2)
                    .filter(|r| r.starts_with("Step"))
            })
            .collect();
        let expected: Vec<String> = (5..15).map(|i| format!("Step{i:02}")).collect();
        assert_eq!(shown, expected, "{text}");
    }

    #[test]
    fn a_stale_status_and_a_failure_say_so() {
        let mut cds = cds();
        cds.metadata.generation = Some(3);
        let status = cds.status.as_mut().unwrap();
        status.phase = Some("failed".into());
        status.reason = Some("CanaryCrashLooping".into());
        let text = render(&cds, &[], at(200));
        assert!(text.contains("✖ failed"), "{text}");
        assert!(
            text.contains("Reason:          CanaryCrashLooping"),
            "{text}"
        );
        assert!(text.contains("not seen the latest spec"), "{text}");
    }

    #[test]
    fn events_are_matched_by_kind_and_name() {
        assert!(is_about(&event(1, "X", "node-agent"), "node-agent"));
        assert!(!is_about(&event(1, "X", "other"), "node-agent"));
        let mut of_daemon_set = event(1, "X", "node-agent");
        if let Some(r) = of_daemon_set.regarding.as_mut() {
            r.kind = Some("DaemonSet".into());
        }
        assert!(!is_about(&of_daemon_set, "node-agent"));
    }
}
