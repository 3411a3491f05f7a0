//! What the demo records of a rollout and how it prints it: one line per step for people, one
//! JSON object per step for machines, and a summary.
//!
//! The record is made of the controller's own [`Transition`]s (its typed report of every status
//! change, `canary_kube_adapter::observer`), not of samples of the status: a phase that lasts
//! less than a virtual instant (`started`, often `increasing`) is still there, in the order the
//! controller went through it. A *step* is a transition that changed the phase or wrote the
//! DaemonSet; the other transitions only move the pod counts (the live bar and the plot use
//! them). Crash scenarios add samples when the new pods' restart count moves.
//!
//! Pure: rendering is a function of the samples, so the output is pinned by golden tests.

use crate::format::{count, format_seconds, progress_bar};
use canary_kube_adapter::Transition;
use canary_predicates::LiveMaxUnavailable;
use canary_state_machine::{Phase, WriteKind};
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;

/// The rollout as it stood after one transition (or one restart).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Sample {
    /// Seconds since the upgrade began (virtual or real).
    pub t: f64,
    /// Phase of the CanaryDaemonSet's status after the transition.
    #[serde(serialize_with = "phase_name")]
    pub phase: Phase,
    /// Whether the transition changed the phase (`started` is a change from the previous
    /// rollout's `successful`).
    pub phase_changed: bool,
    /// The DaemonSet write this transition made: `create`, `start`, `widen`, `revert` or
    /// `TLS step`.
    pub write: Option<String>,
    /// The DaemonSet's maxUnavailable as written (`1`, `10%`), empty when unset or unknown.
    pub max_unavailable: String,
    /// The maxUnavailable scaled to pods.
    pub max_unavailable_pods: u32,
    /// Desired pods.
    pub desired: u32,
    /// Updated pods.
    pub updated: u32,
    /// Updated and ready pods.
    pub updated_ready: u32,
    /// DaemonSet writes made by the controller since the upgrade began, this one included.
    pub daemon_set_writes: u32,
    /// Container restarts of the new version's pods so far (crash scenarios watch them).
    pub restarts: u32,
    /// Why the rollout failed, when this transition failed it.
    pub reason: Option<String>,
    /// The Pods driver's step after the transition, `(index, count)`: `index == count` once
    /// every step is done. `None` with the MaxUnavailable driver.
    pub step: Option<(u32, u32)>,
    /// Whether the transition moved the step (a line of its own, as a phase change is).
    pub step_changed: bool,
    /// Pods the controller deleted since the upgrade began (the Pods driver's writes).
    pub pod_deletions: u32,
    /// Nodes deferred (NotReady, cordoned, unschedulable) after the transition.
    pub deferred: u32,
}

impl Sample {
    /// The sample after `transition`, `t` seconds into the upgrade that began at `start`;
    /// `previous` is the sample before it (writes and restarts carry over).
    pub fn from_transition(
        transition: &Transition,
        start: Timestamp,
        previous: Option<&Sample>,
    ) -> Self {
        let t = transition.at.duration_since(start).as_secs_f64().max(0.0);
        let writes = previous.map_or(0, |p| p.daemon_set_writes);
        let max_unavailable = transition.max_unavailable.as_ref();
        let pods = transition.pods.as_deref();
        let step = pods.map(|p| (p.step, p.step_count));
        let deleted = pods.map_or(0, |p| u32::try_from(p.deleted.len()).unwrap_or(u32::MAX));
        Self {
            t,
            phase: transition.to,
            phase_changed: transition.from != Some(transition.to),
            write: transition.write.map(|w| write_name(w).to_owned()),
            max_unavailable: max_unavailable
                .filter(|m| !matches!(m, LiveMaxUnavailable::Unset))
                .map(ToString::to_string)
                .unwrap_or_default(),
            max_unavailable_pods: max_unavailable
                .and_then(LiveMaxUnavailable::value)
                .map_or(0, |m| m.scaled(transition.desired)),
            desired: transition.desired,
            updated: transition.updated,
            updated_ready: transition.updated_ready,
            daemon_set_writes: writes + u32::from(transition.write.is_some()),
            restarts: previous.map_or(0, |p| p.restarts),
            reason: transition.failure.map(|f| f.as_str().to_owned()),
            step,
            step_changed: step.is_some() && step != previous.and_then(|p| p.step),
            pod_deletions: previous
                .map_or(0, |p| p.pod_deletions)
                .saturating_add(deleted),
            deferred: pods.map_or(0, |p| u32::try_from(p.deferred.len()).unwrap_or(u32::MAX)),
        }
    }

    /// A step: the phase changed, the DaemonSet was written, or the Pods driver's step moved.
    pub fn is_step(&self) -> bool {
        self.phase_changed || self.write.is_some() || self.step_changed
    }

    /// Whether the rollout ended here (`successful` or `failed`).
    pub fn is_final(&self) -> bool {
        !self.phase.is_in_progress()
    }
}

/// A phase in JSON: its name, as the status writes it.
fn phase_name<S: serde::Serializer>(phase: &Phase, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(phase.as_str())
}

/// How a write reads in the timeline.
fn write_name(kind: WriteKind) -> &'static str {
    match kind {
        WriteKind::Create => "create",
        WriteKind::Start => "start",
        WriteKind::Widen => "widen",
        WriteKind::Finish => "revert",
        WriteKind::TlsStep => "TLS step",
        WriteKind::Hold => "hold",
        WriteKind::Resume => "resume",
        WriteKind::RevertHeld => "revert under the failure's hold",
    }
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
    /// Pods the controller deleted (the Pods driver: one per node updated).
    pub pod_deletions: u32,
}

/// The recorded history of one rollout.
#[derive(Debug, Clone, Default)]
pub struct Timeline {
    samples: Vec<Sample>,
}

impl Timeline {
    /// Adds a sample.
    pub fn push(&mut self, sample: Sample) {
        self.samples.push(sample);
    }

    /// The last sample.
    pub fn last(&self) -> Option<&Sample> {
        self.samples.last()
    }

    /// Every sample, in time order.
    pub fn samples(&self) -> &[Sample] {
        &self.samples
    }

    /// The steps: phase changes and writes, in order.
    pub fn steps(&self) -> impl Iterator<Item = &Sample> {
        self.samples.iter().filter(|s| s.is_step())
    }

    /// The phases gone through, in order (each visit once).
    pub fn phases(&self) -> Vec<Phase> {
        self.samples
            .iter()
            .filter(|s| s.phase_changed)
            .map(|s| s.phase)
            .collect()
    }
}

/// One JSON object for a step (the `--json` output): `event` is `phase` for a phase change,
/// `write` for a write in the same phase, `step` for a move of the Pods driver's step; that
/// driver's objects also carry `step`, `stepCount`, `podDeletions` and `deferred`.
pub fn step_json(sample: &Sample) -> String {
    let event = if sample.phase_changed {
        "phase"
    } else if sample.write.is_some() {
        "write"
    } else {
        "step"
    };
    let mut value = serde_json::json!({
        "event": event,
        "phase": sample.phase.as_str(),
        "maxUnavailable": sample.max_unavailable,
        "desired": sample.desired,
        "updated": sample.updated,
        "updatedReady": sample.updated_ready,
        "daemonSetWrites": sample.daemon_set_writes,
        "t": round_ms(sample.t),
    });
    if let Some(map) = value.as_object_mut() {
        if let Some(write) = &sample.write {
            map.insert("write".to_owned(), write.clone().into());
        }
        if let Some(reason) = &sample.reason {
            map.insert("reason".to_owned(), reason.clone().into());
        }
        if sample.restarts > 0 {
            map.insert("restarts".to_owned(), sample.restarts.into());
        }
        if let Some((step, step_count)) = sample.step {
            map.insert("step".to_owned(), step.into());
            map.insert("stepCount".to_owned(), step_count.into());
            map.insert("podDeletions".to_owned(), sample.pod_deletions.into());
            map.insert("deferred".to_owned(), sample.deferred.into());
        }
    }
    value.to_string()
}

/// The summary JSON object (the last line of `--json` output).
pub fn summary_json(summary: &Summary) -> String {
    let mut value = serde_json::json!({
        "event": "summary",
        "result": summary.result,
        "daemonSetWrites": summary.daemon_set_writes,
        "durationSeconds": round_ms(summary.duration_seconds),
    });
    if let Some(map) = value.as_object_mut() {
        if let Some(reason) = &summary.reason {
            map.insert(
                "reason".to_owned(),
                serde_json::Value::String(reason.clone()),
            );
        }
        if summary.pod_deletions > 0 {
            map.insert("podDeletions".to_owned(), summary.pod_deletions.into());
        }
    }
    value.to_string()
}

/// A human line for a step: time, phase, a bar of updated-ready pods, counts, maxUnavailable
/// (the Pods driver: its step, pods deleted, nodes deferred), and the write the step made.
pub fn step_line(sample: &Sample) -> String {
    if let Some((step, step_count)) = sample.step {
        return pods_step_line(sample, step, step_count);
    }
    let line = format!(
        "{:>7}  {:<11} {} {:>5}/{:<5} ready  maxUnavailable {:<4} {:<10}",
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
        format!(
            "({})",
            count(u64::from(sample.max_unavailable_pods), "pod", "pods")
        ),
    );
    with_what_happened(line, sample)
}

/// [`step_line`] of the Pods driver: the DaemonSet is `OnDelete`, there is no maxUnavailable to
/// show; the step and the pods deleted say how far it is.
fn pods_step_line(sample: &Sample, step: u32, step_count: u32) -> String {
    let step = if step >= step_count {
        "all steps done".to_owned()
    } else {
        format!("step {}/{step_count}", step + 1)
    };
    let mut line = format!(
        "{:>7}  {:<11} {} {:>5}/{:<5} ready  {step:<15} {}",
        format_seconds(sample.t),
        sample.phase,
        progress_bar(sample.updated_ready, sample.desired, 24),
        sample.updated_ready,
        sample.desired,
        count(
            u64::from(sample.pod_deletions),
            "pod deleted",
            "pods deleted"
        ),
    );
    if sample.deferred > 0 {
        line.push_str(&format!(
            ", {}",
            count(
                u64::from(sample.deferred),
                "node deferred",
                "nodes deferred"
            )
        ));
    }
    with_what_happened(line, sample)
}

/// The end of a step line, whichever the driver: the write the step made, why it failed, the
/// restarts seen.
fn with_what_happened(mut line: String, sample: &Sample) -> String {
    if let Some(write) = &sample.write {
        line.push_str(&format!(
            "  DaemonSet write {}: {write}",
            sample.daemon_set_writes
        ));
    }
    if let Some(reason) = &sample.reason {
        line.push_str(&format!("  {reason}"));
    }
    if sample.restarts > 0 {
        line.push_str(&format!(
            "  {}",
            count(u64::from(sample.restarts), "restart", "restarts")
        ));
    }
    line.trim_end().to_owned()
}

/// The closing human line.
pub fn summary_line(summary: &Summary) -> String {
    let reason = summary
        .reason
        .as_deref()
        .map(|r| format!(" ({r})"))
        .unwrap_or_default();
    let deletions = if summary.pod_deletions > 0 {
        format!(
            " and {}",
            count(
                u64::from(summary.pod_deletions),
                "pod deletion",
                "pod deletions"
            )
        )
    } else {
        String::new()
    };
    format!(
        "rollout {}{reason} after {} with {}{deletions}",
        summary.result,
        format_seconds(summary.duration_seconds),
        count(
            u64::from(summary.daemon_set_writes),
            "DaemonSet write",
            "DaemonSet writes"
        )
    )
}

fn round_ms(seconds: f64) -> f64 {
    (seconds * 1000.0).round() / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use canary_state_machine::FailureReason;

    fn at(seconds: f64) -> Timestamp {
        Timestamp::from_millisecond((seconds * 1000.0) as i64).unwrap()
    }

    fn transition(
        seconds: f64,
        from: Phase,
        to: Phase,
        write: Option<WriteKind>,
        ready: u32,
        max: &str,
    ) -> Transition {
        Transition {
            namespace: "default".into(),
            name: "node-agent".into(),
            daemon_set: "node-agent".into(),
            target: canary_predicates::Target {
                version: "v2".into(),
                ..canary_predicates::Target::default()
            },
            from: Some(from),
            to,
            failure: (to == Phase::Failed).then_some(FailureReason::CanaryCrashLooping),
            message: None,
            write,
            desired: 20,
            updated: ready,
            updated_ready: ready,
            available: 20,
            max_unavailable: Some(if max.ends_with('%') {
                LiveMaxUnavailable::Str(max.into())
            } else {
                LiveMaxUnavailable::Int(max.parse().unwrap())
            }),
            observed_generation: Some(2),
            recorded_generation: None,
            drift: None,
            pre_pull: canary_kube_adapter::observer::PrePullStanding::Unknown,
            template_hash: None,
            pods: None,
            history: None,
            retry: None,
            held: false,
            unhealthy: None,
            analysis: None,
            unhealthy_answered: None,
            downtime: Default::default(),
            phase_started_at: at(seconds),
            at: at(seconds),
        }
    }

    fn record(transitions: &[Transition]) -> Timeline {
        let mut timeline = Timeline::default();
        for transition in transitions {
            let sample = Sample::from_transition(transition, at(0.0), timeline.last());
            timeline.push(sample);
        }
        timeline
    }

    /// Golden: the lines of a healthy rollout of the default strategy, every step including the
    /// ones inside one instant (`started` then `canary` at 0 s, `increasing` then `waiting`),
    /// and the revert written in `waiting` before `successful` is observed.
    #[test]
    fn golden_lines_of_a_healthy_rollout() {
        use Phase::*;
        let timeline = record(&[
            transition(0.0, Successful, Started, Some(WriteKind::Start), 0, "1"),
            transition(0.0, Started, Canary, None, 0, "1"),
            transition(3.0, Canary, Canary, None, 0, "1"),
            transition(6.1, Canary, Increasing, Some(WriteKind::Widen), 1, "10%"),
            transition(6.1, Increasing, Waiting, None, 1, "10%"),
            transition(30.0, Waiting, Waiting, None, 11, "10%"),
            transition(66.0, Waiting, Waiting, Some(WriteKind::Finish), 20, "1"),
            transition(66.0, Waiting, Successful, None, 20, "1"),
        ]);
        let lines: Vec<String> = timeline.steps().map(step_line).collect();
        let expected = [
            "     0s  started     [........................]     0/20    ready  maxUnavailable 1    (1 pod)     DaemonSet write 1: start",
            "     0s  canary      [........................]     0/20    ready  maxUnavailable 1    (1 pod)",
            "   6.1s  increasing  [#.......................]     1/20    ready  maxUnavailable 10%  (2 pods)    DaemonSet write 2: widen",
            "   6.1s  waiting     [#.......................]     1/20    ready  maxUnavailable 10%  (2 pods)",
            "  1m06s  waiting     [########################]    20/20    ready  maxUnavailable 1    (1 pod)     DaemonSet write 3: revert",
            "  1m06s  successful  [########################]    20/20    ready  maxUnavailable 1    (1 pod)",
        ];
        assert_eq!(lines, expected, "\n{}", lines.join("\n"));
        assert_eq!(
            timeline.phases(),
            [
                Phase::Started,
                Phase::Canary,
                Phase::Increasing,
                Phase::Waiting,
                Phase::Successful
            ]
        );
        assert_eq!(
            timeline.samples().len(),
            8,
            "count-only transitions are kept"
        );
        let summary = Summary {
            result: "successful".into(),
            daemon_set_writes: 3,
            duration_seconds: 66.0,
            reason: None,
            pod_deletions: 0,
        };
        assert_eq!(
            summary_line(&summary),
            "rollout successful after 1m06s with 3 DaemonSet writes"
        );
    }

    /// Golden: JSON lines start with `started`; a write in the same phase is a `write` event.
    #[test]
    fn golden_json_of_a_failed_canary_and_singular_wording() {
        use Phase::*;
        let mut timeline = record(&[
            transition(0.0, Successful, Started, Some(WriteKind::Start), 0, "1"),
            transition(0.0, Started, Canary, None, 0, "1"),
        ]);
        let mut restarted = timeline.last().unwrap().clone();
        restarted.t = 4.0;
        restarted.restarts = 1;
        restarted.phase_changed = false;
        restarted.write = None;
        timeline.push(restarted);
        let failed = transition(5.1, Canary, Failed, None, 0, "1");
        let sample = Sample::from_transition(&failed, at(0.0), timeline.last());
        timeline.push(sample);
        let json: Vec<String> = timeline.steps().map(step_json).collect();
        assert_eq!(
            json,
            [
                r#"{"daemonSetWrites":1,"desired":20,"event":"phase","maxUnavailable":"1","phase":"started","t":0.0,"updated":0,"updatedReady":0,"write":"start"}"#,
                r#"{"daemonSetWrites":1,"desired":20,"event":"phase","maxUnavailable":"1","phase":"canary","t":0.0,"updated":0,"updatedReady":0}"#,
                r#"{"daemonSetWrites":1,"desired":20,"event":"phase","maxUnavailable":"1","phase":"failed","reason":"CanaryCrashLooping","restarts":1,"t":5.1,"updated":0,"updatedReady":0}"#,
            ]
        );
        let last = step_line(timeline.last().unwrap());
        assert!(
            last.ends_with("(1 pod)     CanaryCrashLooping  1 restart"),
            "{last}"
        );
        let summary = Summary {
            result: "failed".into(),
            daemon_set_writes: 1,
            duration_seconds: 5.1,
            reason: Some("CanaryCrashLooping".into()),
            pod_deletions: 0,
        };
        assert_eq!(
            summary_line(&summary),
            "rollout failed (CanaryCrashLooping) after 5.1s with 1 DaemonSet write"
        );
        assert_eq!(
            summary_json(&summary),
            r#"{"daemonSetWrites":1,"durationSeconds":5.1,"event":"summary","reason":"CanaryCrashLooping","result":"failed"}"#
        );
    }
}
