//! The API server's audit log as the oracle: what the server recorded of the controller's
//! requests, and the invariants the deterministic simulation checks
//! (`tests/simulation/checker.rs`), on that record instead of on what the client believes.
//!
//! `cargo xtask cluster up` has kube-apiserver write one JSON line per request of the
//! controller's ServiceAccount (`target/cluster/logs/audit.log`, level Metadata, stage
//! `ResponseComplete`). A line names the verb, the object, the answer's code, when the request
//! came in, and the credential: each `kubectl create token` gets its own JTI
//! (`authentication.kubernetes.io/credential-id`), so the requests of two controller processes
//! with tokens of their own are told apart.
//!
//! Use: [`read`] the log, [`since`] a moment, then the checks: [`daemon_set_writes`],
//! [`pod_deletions`], [`writes_without_the_lease`], [`writes_after`]. Each returns what it found;
//! the caller asserts.

use k8s_openapi::jiff::Timestamp;
use serde_json::Value;
use std::path::Path;

/// One request the API server answered.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, ...
    pub verb: String,
    /// Plural resource (`daemonsets`, `leases`, ...).
    pub resource: String,
    /// `status`, or empty.
    pub subresource: String,
    /// The object's namespace, or empty.
    pub namespace: String,
    /// The object's name, or empty (lists, creates with generateName).
    pub name: String,
    /// The answer's HTTP code.
    pub code: u16,
    /// When the server received the request.
    pub received: Timestamp,
    /// When it answered.
    pub completed: Timestamp,
    /// The credential's id (the token's JTI), or empty.
    pub credential: String,
    /// The request's path and query.
    pub uri: String,
}

impl Request {
    /// A write: create, update, patch, delete or deletecollection.
    pub fn is_write(&self) -> bool {
        matches!(
            self.verb.as_str(),
            "create" | "update" | "patch" | "delete" | "deletecollection"
        )
    }

    /// Answered with 2xx.
    pub fn succeeded(&self) -> bool {
        (200..300).contains(&self.code)
    }

    /// A successful write.
    pub fn successful_write(&self) -> bool {
        self.is_write() && self.succeeded()
    }

    /// The `resourceVersion` parameter of a list or watch.
    pub fn resource_version(&self) -> Option<u64> {
        let query = self.uri.split_once('?')?.1;
        query
            .split('&')
            .find_map(|pair| pair.strip_prefix("resourceVersion="))?
            .parse()
            .ok()
    }
}

/// Every request of `user` in the audit log at `path` (see [`read_where`]), in the order the
/// server recorded them.
///
/// # Panics
///
/// When the log cannot be read; a line that is not an audit event is skipped (a line cut short
/// by a killed kube-apiserver).
pub fn read(path: &Path, user: &str) -> Vec<Request> {
    read_where(path, |event| event["user"]["username"] == user)
}

/// Every request the audit log at `path` records once (a finished request, or a watch when
/// it opened: `sim serve --audit-log` records no watch's end), whose raw event `chosen` picks
/// (canary-sim has no users: pick by `userAgent`).
pub fn read_where(path: &Path, chosen: impl Fn(&Value) -> bool) -> Vec<Request> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read the audit log {}: {e}", path.display()));
    text.lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|event| {
            let watch = event["verb"] == "watch";
            let stage = &event["stage"];
            stage == "Panic"
                || (!watch && stage == "ResponseComplete")
                || (watch && stage == "ResponseStarted")
        })
        .filter(|event| chosen(event))
        .filter_map(|event| parse(&event))
        .collect()
}

fn parse(event: &Value) -> Option<Request> {
    let text = |value: &Value| value.as_str().unwrap_or_default().to_owned();
    let object = &event["objectRef"];
    let credential = event["user"]["extra"]["authentication.kubernetes.io/credential-id"]
        .get(0)
        .map(text)
        .unwrap_or_default();
    Some(Request {
        verb: text(&event["verb"]),
        resource: text(&object["resource"]),
        subresource: text(&object["subresource"]),
        namespace: text(&object["namespace"]),
        name: text(&object["name"]),
        code: u16::try_from(event["responseStatus"]["code"].as_u64().unwrap_or(0)).ok()?,
        received: event["requestReceivedTimestamp"].as_str()?.parse().ok()?,
        completed: event["stageTimestamp"].as_str()?.parse().ok()?,
        credential: credential
            .strip_prefix("JTI=")
            .map(str::to_owned)
            .unwrap_or(credential),
        uri: text(&event["requestURI"]),
    })
}

/// The requests received at or after `from`.
pub fn since(requests: &[Request], from: Timestamp) -> Vec<Request> {
    requests
        .iter()
        .filter(|r| r.received >= from)
        .cloned()
        .collect()
}

/// The successful writes of the DaemonSet `namespace/name` (its spec: the status is the
/// DaemonSet controller's).
pub fn daemon_set_writes<'a>(
    requests: &'a [Request],
    namespace: &str,
    name: &str,
) -> Vec<&'a Request> {
    requests
        .iter()
        .filter(|r| r.resource == "daemonsets" && r.subresource.is_empty())
        .filter(|r| r.namespace == namespace && (r.name == name || r.verb == "create"))
        .filter(|r| r.successful_write())
        .collect()
}

/// The successful pod deletions in `namespace`, with the pod's name.
pub fn pod_deletions<'a>(requests: &'a [Request], namespace: &str) -> Vec<&'a Request> {
    requests
        .iter()
        .filter(|r| r.resource == "pods" && r.namespace == namespace && r.verb == "delete")
        .filter(|r| r.succeeded())
        .collect()
}

/// The successful writes (other than to the Lease `lease_namespace/lease_name`) that the
/// server received while their credential did not hold the Lease: a write whose credential
/// has not written the Lease last (another credential took it over since), or whose last
/// successful Lease write is older than `lease_duration` (the Lease had expired: anyone could
/// have taken it). This is the leader election's promise (`kube-adapter/src/lease/rules.rs`,
/// rule 7), checked on the server's record: the controller stops writing a renew deadline after
/// its last renewal, which leaves the rest of the lease duration for the write to arrive.
pub fn writes_without_the_lease<'a>(
    requests: &'a [Request],
    lease_namespace: &str,
    lease_name: &str,
    lease_duration: std::time::Duration,
) -> Vec<&'a Request> {
    let is_lease = |r: &Request| {
        r.resource == "leases"
            && r.namespace == lease_namespace
            && (r.name == lease_name || r.verb == "create" && r.name.is_empty())
    };
    let lease_writes: Vec<&Request> = requests
        .iter()
        .filter(|r| is_lease(r) && r.successful_write())
        .collect();
    let duration = k8s_openapi::jiff::SignedDuration::try_from(lease_duration)
        .unwrap_or(k8s_openapi::jiff::SignedDuration::MAX);
    requests
        .iter()
        .filter(|r| r.successful_write() && !is_lease(r))
        // Events are not guarded: what a replica says is no change to the cluster.
        .filter(|r| r.resource != "events")
        .filter(|write| {
            // The last Lease write the server finished before this write came in.
            let last = lease_writes
                .iter()
                .filter(|lease| lease.completed <= write.received)
                .max_by_key(|lease| lease.completed);
            match last {
                None => true,
                Some(lease) => {
                    lease.credential != write.credential
                        || write.received.duration_since(lease.received) > duration
                }
            }
        })
        .collect()
}

/// The successful writes to anything but the CanaryDaemonSet's status, events and leases
/// received after `moment`: what a controller must not send once a rollout failed.
pub fn writes_after(requests: &[Request], moment: Timestamp) -> Vec<&Request> {
    requests
        .iter()
        .filter(|r| r.successful_write() && r.received > moment)
        .filter(|r| !matches!(r.resource.as_str(), "events" | "leases"))
        .filter(|r| !(r.resource == "canarydaemonsets" && r.subresource == "status"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(verb: &str, resource: &str, name: &str, jti: &str, at: &str) -> String {
        serde_json::json!({
            "stage": "ResponseComplete", "verb": verb,
            "user": {"username": "me", "extra": {"authentication.kubernetes.io/credential-id": [format!("JTI={jti}")]}},
            "objectRef": {"resource": resource, "namespace": "ns", "name": name},
            "responseStatus": {"code": 200},
            "requestReceivedTimestamp": at, "stageTimestamp": at,
        })
        .to_string()
    }

    #[test]
    fn a_write_after_another_replica_took_the_lease_is_found() {
        let dir = std::env::temp_dir().join(format!("audit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("audit.log");
        let lines = [
            line("update", "leases", "l", "a", "2026-01-01T00:00:00Z"),
            line("patch", "daemonsets", "ds", "a", "2026-01-01T00:00:01Z"),
            line("update", "leases", "l", "b", "2026-01-01T00:00:20Z"),
            line("patch", "daemonsets", "ds", "b", "2026-01-01T00:00:21Z"),
            // The old leader comes back and writes: refused by its guard in the real thing.
            line("patch", "daemonsets", "ds", "a", "2026-01-01T00:00:22Z"),
            // b renews late: its write 16 s after its last renewal is one without the lease.
            line("patch", "daemonsets", "ds", "b", "2026-01-01T00:00:37Z"),
            "not json".to_owned(),
        ];
        std::fs::write(&path, lines.join("\n")).unwrap();
        let requests = read(&path, "me");
        assert_eq!(requests.len(), 6);
        assert_eq!(daemon_set_writes(&requests, "ns", "ds").len(), 4);
        let bad =
            writes_without_the_lease(&requests, "ns", "l", std::time::Duration::from_secs(15));
        let at: Vec<String> = bad
            .iter()
            .map(|r| format!("{} {}", r.credential, r.received))
            .collect();
        assert_eq!(at, ["a 2026-01-01T00:00:22Z", "b 2026-01-01T00:00:37Z"]);
        let moment: Timestamp = "2026-01-01T00:00:21Z".parse().unwrap();
        assert_eq!(writes_after(&requests, moment).len(), 2);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
