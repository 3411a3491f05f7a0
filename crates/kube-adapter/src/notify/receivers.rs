//! The receivers the controller's administrator defines (`run --notification-receivers FILE`,
//! a ConfigMap mounted by the Helm chart): the only addresses a notification goes to.
//!
//! ```yaml
//! receivers:
//!   - name: oncall-slack
//!     format: slack                 # {"text": ...}
//!     urlSecret: {name: canary-notifications, key: slack-url}
//!   - name: audit
//!     url: https://hooks.example.com/canary
//!     headersSecret: canary-audit-headers   # each key a header, each value its value
//!     timeout: 5s
//! ```
//!
//! # Invariants
//!
//! - A Secret named here is read in the controller's own namespace only, one `get` at each
//!   delivery (a rotated Secret is used at the next one), never listed or watched.
//! - A URL and a header value never appear in a log, an event or a `Debug` output: a Slack
//!   URL and an `Authorization` header are secrets. What is shown is the receiver's name.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

/// The default deadline of one request.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest deadline a receiver may ask for: a delivery holds one of the few delivery
/// slots for that long.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(60);

/// How a notification's body is written.
#[derive(Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum BodyFormat {
    /// A JSON object of the occurrence's fields (`event`, `reason`, `namespace`, ...).
    #[default]
    Json,
    /// Slack's incoming webhooks (and Mattermost's, Rocket.Chat's): `{"text": ...}`.
    Slack,
}

/// A key of a Secret in the controller's namespace.
#[derive(Deserialize, Clone, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SecretKey {
    /// The Secret's name.
    pub name: String,
    /// The key.
    pub key: String,
}

/// One receiver of the file.
#[derive(Deserialize, Clone, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Receiver {
    /// The name a CanaryDaemonSet subscribes by.
    pub name: String,
    /// The webhook's URL; exactly one of `url` and `urlSecret`.
    #[serde(default)]
    pub url: Option<String>,
    /// The key of a Secret that holds the URL (a Slack webhook URL is a secret).
    #[serde(default)]
    pub url_secret: Option<SecretKey>,
    /// A Secret whose every key is a header sent with each request.
    #[serde(default)]
    pub headers_secret: Option<String>,
    /// The body's format (default `json`).
    #[serde(default)]
    pub format: BodyFormat,
    /// The deadline of one request (`10s` by default, at most `60s`).
    #[serde(default, with = "duration_text")]
    pub timeout: Option<Duration>,
}

impl std::fmt::Debug for Receiver {
    /// The URL and the Secrets' names are left out: see the module's invariants.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Receiver")
            .field("name", &self.name)
            .field("format", &self.format)
            .finish_non_exhaustive()
    }
}

impl Receiver {
    /// The deadline of one request.
    pub fn timeout(&self) -> Duration {
        self.timeout.unwrap_or(DEFAULT_TIMEOUT)
    }
}

/// Why the receivers' file cannot be used: the controller does not start (a typo found at
/// start, not at the first failed rollout).
#[derive(Debug, thiserror::Error)]
pub enum ReceiversError {
    /// Not YAML of the expected shape.
    #[error("not a receivers file (receivers: [{{name, url | urlSecret, ...}}]): {0}")]
    Shape(String),
    /// A receiver is wrong.
    #[error("receiver {name:?}: {why}")]
    Receiver {
        /// The receiver's name.
        name: String,
        /// What is wrong.
        why: String,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    receivers: Vec<Receiver>,
}

/// The receivers by name.
#[derive(Debug, Clone, Default)]
pub struct Receivers(BTreeMap<String, std::sync::Arc<Receiver>>);

impl Receivers {
    /// Reads the receivers' file (YAML or JSON).
    ///
    /// # Errors
    ///
    /// [`ReceiversError`]: the file's shape, a name twice or not a DNS label, neither or both
    /// of `url` and `urlSecret`, a URL that is not `http://` or `https://`, a timeout past
    /// [`MAX_TIMEOUT`]. The URL itself is never part of the message.
    pub fn from_yaml(text: &str) -> Result<Self, ReceiversError> {
        let file: File = serde_saphyr::from_str(text)
            // The parser's message may quote the line, and so a URL: only where it is.
            .map_err(|e| ReceiversError::Shape(location_only(&e.to_string())))?;
        let mut receivers = BTreeMap::new();
        for receiver in file.receivers {
            let bad = |why: &str| ReceiversError::Receiver {
                name: receiver.name.clone(),
                why: why.to_owned(),
            };
            let name = &receiver.name;
            if name.is_empty()
                || name.len() > 63
                || !name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            {
                return Err(bad("a name is 1 to 63 lower-case letters, digits and '-'"));
            }
            match (&receiver.url, &receiver.url_secret) {
                (Some(url), None) => {
                    if !(url.starts_with("http://") || url.starts_with("https://"))
                        || url.parse::<http::Uri>().is_err()
                    {
                        return Err(bad("url is not an http:// or https:// URL"));
                    }
                }
                (None, Some(_)) => {}
                _ => return Err(bad("set exactly one of url and urlSecret")),
            }
            if receiver.timeout() > MAX_TIMEOUT || receiver.timeout().is_zero() {
                return Err(bad("timeout is more than 0s and at most 60s"));
            }
            if receivers.contains_key(name) {
                return Err(bad("defined twice"));
            }
            receivers.insert(name.clone(), std::sync::Arc::new(receiver));
        }
        Ok(Receivers(receivers))
    }

    /// The receiver named `name`.
    pub fn get(&self, name: &str) -> Option<&std::sync::Arc<Receiver>> {
        self.0.get(name)
    }

    /// The receivers' names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.0.keys().map(String::as_str)
    }

    /// Whether none is defined.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The position part of a parser's message (`at line 3 column 5`), without the quoted text.
fn location_only(message: &str) -> String {
    let first_line = message.lines().next().unwrap_or_default();
    canary_state_machine::cut(first_line, 200).into_owned()
}

mod duration_text {
    use serde::{Deserialize, Deserializer};
    use std::time::Duration;

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        let Some(text) = Option::<String>::deserialize(d)? else {
            return Ok(None);
        };
        canary_state_machine::parse_duration(&text)
            .map(Some)
            .map_err(|e| serde::de::Error::custom(format!("timeout {text:?}: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_of_two_receivers_reads() {
        let receivers = Receivers::from_yaml(
            "receivers:\n- name: slack\n  format: slack\n  urlSecret: {name: s, key: url}\n- name: audit\n  url: http://127.0.0.1:9/hook\n  headersSecret: h\n  timeout: 2s\n",
        )
        .unwrap();
        assert_eq!(receivers.names().collect::<Vec<_>>(), ["audit", "slack"]);
        let audit = receivers.get("audit").unwrap();
        assert_eq!(audit.timeout(), Duration::from_secs(2));
        assert_eq!(audit.format, BodyFormat::Json);
        assert_eq!(receivers.get("slack").unwrap().format, BodyFormat::Slack);
        // Debug shows no URL.
        assert!(!format!("{audit:?}").contains("127.0.0.1"));
    }

    #[test]
    fn bad_receivers_are_refused_without_their_url() {
        for (text, said) in [
            (
                "receivers:\n- name: a\n",
                "exactly one of url and urlSecret",
            ),
            (
                "receivers:\n- name: a\n  url: ftp://secret-host/x\n",
                "not an http:// or https://",
            ),
            (
                "receivers:\n- name: a\n  url: http://h/1\n- name: a\n  url: http://h/2\n",
                "defined twice",
            ),
            ("receivers:\n- name: A_B\n  url: http://h/\n", "lower-case"),
            (
                "receivers:\n- name: a\n  url: http://h/\n  timeout: 5m\n",
                "at most 60s",
            ),
        ] {
            let error = Receivers::from_yaml(text).unwrap_err().to_string();
            assert!(error.contains(said), "{text}: {error}");
            assert!(!error.contains("secret-host"), "{error}");
        }
        assert!(Receivers::from_yaml("receivers:\n- name: a\n  uri: http://h/\n").is_err());
    }
}
