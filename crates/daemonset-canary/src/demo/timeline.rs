//! What the demo records of a rollout and how it prints it: phase-change lines for people, JSON lines
//! for machines, and a summary.

use crate::format::{format_seconds, progress_bar};
use serde::Serialize;

/// The rollout as seen at one moment (virtual or real seconds since the rollout began).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Sample {
    /// Seconds since the rollout began.
    pub t: f64,
    /// Phase name of the CanaryDaemonSet's status.
    pub phase: String,
    /// The DaemonSet's maxUnavailable as written (`1`, `10%`), empty when unset.
    pub max_unavailable: String,
    /// The maxUnavailable scaled to pods.
    pub max_unavailable_pods: u32,
    /// Desired pods.
    pub desired: u32,
    /// Updated pods.
    pub updated: u32,
    /// Updated and ready pods.
    pub updated_ready: u32,
    /// DaemonSet writes made by the controller so far.
    pub daemon_set_writes: u32,
}

/// How the rollout ended.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// `successful` or `failed` (or `timeout` when the demo gave up waiting).
    pub result: String,
    /// DaemonSet writes made by the controller.
    pub daemon_set_writes: u32,
    /// Seconds from the start of the rollout to its end.
    pub duration_seconds: f64,
    /// Why it failed, when it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The recorded history of one rollout.
#[derive(Debug, Clone, Default)]
pub struct Timeline {
    samples: Vec<Sample>,
}

impl Timeline {
    /// Adds a sample; returns true when it starts a new phase (the first sample does).
    pub fn push(&mut self, sample: Sample) -> bool {
        let new_phase = self
            .samples
            .last()
            .is_none_or(|last| last.phase != sample.phase);
        self.samples.push(sample);
        new_phase
    }

    /// Every sample, in time order.
    pub fn samples(&self) -> &[Sample] {
        &self.samples
    }

    /// The first sample of each phase visit.
    pub fn phase_changes(&self) -> Vec<&Sample> {
        let mut previous: Option<&str> = None;
        let mut changes = Vec::new();
        for sample in &self.samples {
            if previous != Some(sample.phase.as_str()) {
                changes.push(sample);
                previous = Some(&sample.phase);
            }
        }
        changes
    }
}

/// One JSON object for a phase change (the `--json` output).
pub fn phase_change_json(sample: &Sample) -> String {
    serde_json::json!({
        "event": "phase",
        "phase": sample.phase,
        "maxUnavailable": sample.max_unavailable,
        "desired": sample.desired,
        "updated": sample.updated,
        "updatedReady": sample.updated_ready,
        "daemonSetWrites": sample.daemon_set_writes,
        "t": round_ms(sample.t),
    })
    .to_string()
}

/// The summary JSON object (the last line of `--json` output).
pub fn summary_json(summary: &Summary) -> String {
    let mut value = serde_json::json!({
        "event": "summary",
        "result": summary.result,
        "daemonSetWrites": summary.daemon_set_writes,
        "durationSeconds": round_ms(summary.duration_seconds),
    });
    if let (Some(reason), Some(map)) = (&summary.reason, value.as_object_mut()) {
        map.insert(
            "reason".to_owned(),
            serde_json::Value::String(reason.clone()),
        );
    }
    value.to_string()
}

/// A human line for a phase change: time, phase, a bar of updated-ready pods, counts, maxUnavailable.
pub fn phase_change_line(sample: &Sample) -> String {
    format!(
        "{:>8}  {:<11} {} {:>5}/{:<5} ready  maxUnavailable {:<4} ({} pods)  writes {}",
        format_seconds(sample.t),
        sample.phase,
        progress_bar(sample.updated_ready, sample.desired, 24),
        sample.updated_ready,
        sample.desired,
        if sample.max_unavailable.is_empty() {
            "-"
        } else {
            &sample.max_unavailable
        },
        sample.max_unavailable_pods,
        sample.daemon_set_writes,
    )
}

/// The closing human line.
pub fn summary_line(summary: &Summary) -> String {
    let reason = summary
        .reason
        .as_deref()
        .map(|r| format!(" ({r})"))
        .unwrap_or_default();
    format!(
        "rollout {}{reason} after {} with {} DaemonSet writes",
        summary.result,
        format_seconds(summary.duration_seconds),
        summary.daemon_set_writes
    )
}

fn round_ms(seconds: f64) -> f64 {
    (seconds * 1000.0).round() / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(t: f64, phase: &str, ready: u32) -> Sample {
        Sample {
            t,
            phase: phase.into(),
            max_unavailable: "1".into(),
            max_unavailable_pods: 1,
            desired: 10,
            updated: ready,
            updated_ready: ready,
            daemon_set_writes: 1,
        }
    }

    #[test]
    fn phase_changes_keep_the_first_sample_of_each_visit() {
        let mut timeline = Timeline::default();
        assert!(timeline.push(sample(0.0, "started", 0)));
        assert!(timeline.push(sample(1.0, "canary", 0)));
        assert!(!timeline.push(sample(2.0, "canary", 1)));
        assert!(timeline.push(sample(3.0, "increasing", 1)));
        let phases: Vec<(&str, f64)> = timeline
            .phase_changes()
            .iter()
            .map(|s| (s.phase.as_str(), s.t))
            .collect();
        assert_eq!(
            phases,
            vec![("started", 0.0), ("canary", 1.0), ("increasing", 3.0)]
        );
    }

    #[test]
    fn json_lines_carry_the_documented_keys() {
        let line: serde_json::Value =
            serde_json::from_str(&phase_change_json(&sample(1.23456, "canary", 1))).unwrap();
        for key in [
            "phase",
            "maxUnavailable",
            "desired",
            "updatedReady",
            "daemonSetWrites",
            "t",
        ] {
            assert!(line.get(key).is_some(), "missing {key} in {line}");
        }
        assert_eq!(line["t"], 1.235);
        let summary = Summary {
            result: "failed".into(),
            daemon_set_writes: 1,
            duration_seconds: 40.0,
            reason: Some("CanaryCrashLooping".into()),
        };
        let line: serde_json::Value = serde_json::from_str(&summary_json(&summary)).unwrap();
        assert_eq!(line["result"], "failed");
        assert_eq!(line["reason"], "CanaryCrashLooping");
        assert_eq!(line["durationSeconds"], 40.0);
    }
}
