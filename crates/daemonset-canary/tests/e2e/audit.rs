//! The API server's own record of the controller's requests: the audit log `cargo xtask cluster
//! up` writes (`target/cluster/logs/audit.log`), one JSON event per request of the controller's
//! ServiceAccount, at `Metadata` level, and at `Request` level (with the request's body) for its
//! DaemonSet writes.
//!
//! What a scenario checks here is what the server recorded, not what the client believes: the
//! DaemonSet writes of a rollout, their JSON Patch ops, which replica sent each write (every
//! controller process of a scenario has a token of its own, whose id the server records), and
//! when each replica took the Lease.

use crate::harness::{ENV_AUDIT_LOG, required_env};
use k8s_openapi::jiff::Timestamp;
use serde::Deserialize;

/// The verbs that change something.
const WRITES: [&str; 5] = ["create", "update", "patch", "delete", "deletecollection"];
/// Where the server records the id of the token a request came with.
const CREDENTIAL_ID: &str = "authentication.kubernetes.io/credential-id";

/// One audit event (the fields the suite reads).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    pub verb: String,
    pub stage: String,
    pub user: User,
    #[serde(default)]
    pub object_ref: Option<ObjectRef>,
    #[serde(default)]
    pub response_status: Option<ResponseStatus>,
    /// The request's body (`Request` level only): the patch itself for a PATCH.
    #[serde(default)]
    pub request_object: Option<serde_json::Value>,
    #[serde(deserialize_with = "timestamp")]
    pub stage_timestamp: Timestamp,
}

/// An RFC 3339 time as the server writes it (`2026-12-06T23:50:01.123456Z`).
fn timestamp<'de, D: serde::Deserializer<'de>>(from: D) -> Result<Timestamp, D::Error> {
    let text = String::deserialize(from)?;
    text.parse().map_err(serde::de::Error::custom)
}

#[derive(Debug, Clone, Deserialize)]
pub struct User {
    pub username: String,
    #[serde(default)]
    pub extra: std::collections::BTreeMap<String, Vec<String>>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    #[serde(default)]
    pub resource: String,
    #[serde(default)]
    pub namespace: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub subresource: String,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ResponseStatus {
    #[serde(default)]
    pub code: u16,
}

impl Event {
    /// Whether the request changes something.
    pub fn is_write(&self) -> bool {
        WRITES.contains(&self.verb.as_str())
    }

    /// Whether the server answered 2xx.
    pub fn succeeded(&self) -> bool {
        self.response_status
            .as_ref()
            .is_some_and(|s| (200..300).contains(&s.code))
    }

    /// The id of the token the request came with (`JTI=...`).
    pub fn credential(&self) -> Option<&str> {
        self.user
            .extra
            .get(CREDENTIAL_ID)?
            .first()
            .map(String::as_str)
    }

    /// `resource[/subresource]`.
    pub fn resource(&self) -> String {
        match &self.object_ref {
            Some(r) if !r.subresource.is_empty() => format!("{}/{}", r.resource, r.subresource),
            Some(r) => r.resource.clone(),
            None => String::new(),
        }
    }

    pub fn namespace(&self) -> &str {
        self.object_ref
            .as_ref()
            .map_or("", |r| r.namespace.as_str())
    }

    pub fn name(&self) -> &str {
        self.object_ref.as_ref().map_or("", |r| r.name.as_str())
    }

    /// `verb resource namespace/name code`, for failure messages.
    pub fn line(&self) -> String {
        format!(
            "{} {} {} {} {}/{} {}",
            self.stage_timestamp,
            self.user.username,
            self.verb,
            self.resource(),
            self.namespace(),
            self.name(),
            self.response_status.as_ref().map_or(0, |s| s.code)
        )
    }
}

/// Every completed request the audit log holds so far, in the order the server finished them.
pub fn events() -> Vec<Event> {
    let path = required_env(ENV_AUDIT_LOG);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read the audit log {path}: {e}"));
    text.lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            serde_json::from_str::<Event>(line)
                .unwrap_or_else(|e| panic!("an audit line that does not parse ({e}): {line}"))
        })
        .filter(|event| event.stage == "ResponseComplete")
        .collect()
}

/// The successful writes to objects of `namespace`.
pub fn writes_in(namespace: &str) -> Vec<Event> {
    events()
        .into_iter()
        .filter(|e| e.is_write() && e.succeeded() && e.namespace() == namespace)
        .collect()
}

/// The successful writes of the DaemonSet `name` in `namespace` (not its status: the
/// controller never writes that, the DaemonSet controller does).
pub fn daemon_set_writes(namespace: &str, name: &str) -> Vec<Event> {
    writes_in(namespace)
        .into_iter()
        .filter(|e| e.resource() == "daemonsets" && e.name() == name)
        .collect()
}

/// [`daemon_set_writes`] that the server finished after `since`.
pub fn daemon_set_writes_since(namespace: &str, name: &str, since: Timestamp) -> Vec<Event> {
    daemon_set_writes(namespace, name)
        .into_iter()
        .filter(|e| e.stage_timestamp > since)
        .collect()
}

/// When the replica with `credential` took the Lease `lease` (in the controller's namespace):
/// the first write of that Lease it sent that the server accepted. A standby only reads it.
pub fn lease_taken(lease: &str, credential: &str) -> Option<Timestamp> {
    events()
        .into_iter()
        .filter(|e| {
            e.is_write()
                && e.succeeded()
                && e.resource() == "leases"
                && e.name() == lease
                && e.credential() == Some(credential)
        })
        .map(|e| e.stage_timestamp)
        .next()
}
