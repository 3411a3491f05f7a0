//! What a notification says: an [`Occurrence`] (one event of one object, as published on it)
//! and the body a receiver gets, generic JSON or Slack-compatible.
//!
//! Invariant: every text from the object or from outside (the event's message, which may
//! carry an API error or a Prometheus answer) is cut to [`MESSAGE_BYTES`] before it goes out.

use canary_state_machine::cut;
use serde_json::{Value, json};

use super::receivers::BodyFormat;
use super::spec::NotificationEvent;

/// The most of an event's message a body carries (an event's note is at most 1 KiB anyway).
pub const MESSAGE_BYTES: usize = 1000;

/// One event of one CanaryDaemonSet, to be told to its subscribed receivers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Occurrence {
    /// What it tells of.
    pub event: NotificationEvent,
    /// The reason of the event published on the object (`FailedUpdate`, `RolloutCompleted`).
    pub reason: String,
    /// `Normal` or `Warning`.
    pub severity: &'static str,
    /// The object's namespace.
    pub namespace: String,
    /// The object's name.
    pub name: String,
    /// The object's UID.
    pub uid: String,
    /// The DaemonSet rolled out.
    pub daemon_set: String,
    /// The object's `metadata.generation` the pass acted on.
    pub generation: i64,
    /// The version rolled out (`spec.target.version`), maybe empty.
    pub version: String,
    /// The rollout within the generation (the event series: target and step), for the dedupe.
    pub series: String,
    /// The event's message.
    pub message: String,
    /// When the pass ran (RFC 3339).
    pub time: String,
}

/// The body of `occurrence` for a receiver of `format`.
pub fn body(format: BodyFormat, occurrence: &Occurrence) -> Value {
    let message = cut(&occurrence.message, MESSAGE_BYTES);
    match format {
        BodyFormat::Json => json!({
            "event": occurrence.event.as_str(),
            "reason": occurrence.reason,
            "severity": occurrence.severity,
            "namespace": occurrence.namespace,
            "name": occurrence.name,
            "uid": occurrence.uid,
            "daemonSet": occurrence.daemon_set,
            "generation": occurrence.generation,
            "version": occurrence.version,
            "message": message,
            "time": occurrence.time,
        }),
        BodyFormat::Slack => {
            let mark = if occurrence.severity == "Warning" {
                ":warning:"
            } else {
                ":white_check_mark:"
            };
            let version = if occurrence.version.is_empty() {
                String::new()
            } else {
                format!(", {}", occurrence.version)
            };
            let text = format!(
                "{mark} *{}* CanaryDaemonSet {}/{} (DaemonSet {}{version}): {}",
                occurrence.event.as_str(),
                occurrence.namespace,
                occurrence.name,
                occurrence.daemon_set,
                message
            );
            json!({ "text": slack_escaped(&text) })
        }
    }
}

/// Slack's three control characters escaped (`&`, `<`, `>`), so that a message cannot make a
/// link or a mention (`<!channel>`) of its own.
fn slack_escaped(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn failed() -> Occurrence {
        Occurrence {
            event: NotificationEvent::Failed,
            reason: "FailedUpdate".into(),
            severity: "Warning",
            namespace: "kube-system".into(),
            name: "node-agent".into(),
            uid: "u-1".into(),
            daemon_set: "node-agent".into(),
            generation: 3,
            version: "v2".into(),
            series: "v2//".into(),
            message: "pod node-agent-x crash-loops <!channel> & more".into(),
            time: "2026-12-07T10:00:00Z".into(),
        }
    }

    #[test]
    fn the_json_body_names_the_object_event_and_message() {
        let body = body(BodyFormat::Json, &failed());
        assert_eq!(body["event"], "Failed");
        assert_eq!(body["reason"], "FailedUpdate");
        assert_eq!(body["severity"], "Warning");
        assert_eq!(body["namespace"], "kube-system");
        assert_eq!(body["name"], "node-agent");
        assert_eq!(body["uid"], "u-1");
        assert_eq!(body["generation"], 3);
        assert_eq!(body["version"], "v2");
        assert_eq!(
            body["message"],
            "pod node-agent-x crash-loops <!channel> & more"
        );
    }

    #[test]
    fn the_slack_body_is_one_escaped_text() {
        let body = body(BodyFormat::Slack, &failed());
        let object = body.as_object().unwrap();
        assert_eq!(object.len(), 1, "{body}");
        assert_eq!(
            body["text"],
            ":warning: *Failed* CanaryDaemonSet kube-system/node-agent (DaemonSet node-agent, v2): pod node-agent-x crash-loops &lt;!channel&gt; &amp; more"
        );
    }

    #[test]
    fn a_long_message_is_cut() {
        let long = Occurrence {
            message: "x".repeat(100_000),
            ..failed()
        };
        for format in [BodyFormat::Json, BodyFormat::Slack] {
            let text = body(format, &long).to_string();
            assert!(text.len() < MESSAGE_BYTES + 300, "{}", text.len());
        }
    }
}
