//! An audit log of the requests the served simulator answers, in kube-apiserver's format
//! (`audit.k8s.io/v1` `Event`, one JSON line each, level Metadata), so that what a client did
//! to canary-sim and to a real API server is counted by the same reader from each server's own
//! record (docs/simulator.md, "Fidelity").
//!
//! What a line holds: `stage` (`ResponseComplete`, or `ResponseStarted` for a watch, whose end
//! is not recorded), `verb` (Kubernetes' request verbs: `get`, `list`, `watch`, `create`,
//! `update`, `patch`, `delete`, `deletecollection`), `requestURI`, `objectRef` (resource,
//! subresource, namespace, name, apiGroup, apiVersion, from the path), `responseStatus.code`,
//! `userAgent`, `requestReceivedTimestamp` and `stageTimestamp` (wall time), and `user` (the
//! simulator has no authentication: `system:anonymous`).
//!
//! Invariant: a line is written whole with one `write` under a lock, once the answer's head is
//! ready, before the answer is sent.

use std::io::Write;
use std::path::Path;
use std::sync::Mutex;

use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

/// The user every line names.
pub const ANONYMOUS: &str = "system:anonymous";

/// An audit log file.
#[derive(Debug)]
pub struct AuditLog {
    file: Mutex<std::fs::File>,
}

/// One request, as the log records it.
#[derive(Debug, Clone)]
pub struct Audited<'a> {
    /// The HTTP method.
    pub method: &'a http::Method,
    /// The request's path and query.
    pub uri: &'a http::Uri,
    /// The `User-Agent` header.
    pub user_agent: &'a str,
    /// The answer's status code.
    pub code: u16,
    /// When the request came in.
    pub received: Timestamp,
}

impl AuditLog {
    /// Appends to `path` (created if missing).
    ///
    /// # Errors
    ///
    /// When the file cannot be opened.
    pub fn append_to(path: &Path) -> std::io::Result<Self> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        Ok(Self {
            file: Mutex::new(file),
        })
    }

    /// Records one answered request; a failed write is dropped (the log is a record, not the
    /// service).
    pub fn record(&self, request: &Audited<'_>) {
        let mut line = serde_json::to_vec(&event(request, Timestamp::now())).unwrap_or_default();
        line.push(b'\n');
        let mut file = self
            .file
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let _ = file.write_all(&line);
    }
}

/// The audit event of `request`, finished at `now`.
fn event(request: &Audited<'_>, now: Timestamp) -> Value {
    let path = request.uri.path();
    let watching = request
        .uri
        .query()
        .unwrap_or_default()
        .split('&')
        .any(|pair| pair == "watch=true" || pair == "watch=1");
    let object = object_ref(path);
    let named = object
        .as_ref()
        .is_some_and(|o| o.get("name").is_some_and(|n| !n.is_null()));
    let verb = match *request.method {
        http::Method::GET if watching => "watch",
        http::Method::GET if named => "get",
        http::Method::GET => "list",
        http::Method::POST => "create",
        http::Method::PUT => "update",
        http::Method::PATCH => "patch",
        http::Method::DELETE if named => "delete",
        http::Method::DELETE => "deletecollection",
        _ => "unknown",
    };
    let stage = if verb == "watch" {
        "ResponseStarted"
    } else {
        "ResponseComplete"
    };
    let mut event = json!({
        "kind": "Event",
        "apiVersion": "audit.k8s.io/v1",
        "level": "Metadata",
        "stage": stage,
        "requestURI": request.uri.to_string(),
        "verb": verb,
        "user": {"username": ANONYMOUS},
        "userAgent": request.user_agent,
        "responseStatus": {"code": request.code},
        "requestReceivedTimestamp": request.received.to_string(),
        "stageTimestamp": now.to_string(),
    });
    if let (Some(object), Some(map)) = (object, event.as_object_mut()) {
        map.insert("objectRef".to_owned(), object);
    }
    event
}

/// `objectRef` of a resource path (`/api/v1/namespaces/ns/pods/name/status`, ...), or `None`
/// for discovery and other paths.
fn object_ref(path: &str) -> Option<Value> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest) = match parts.as_slice() {
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return None,
    };
    let (namespace, rest) = match rest {
        ["namespaces", namespace, rest @ ..] if !rest.is_empty() => (Some(*namespace), rest),
        _ => (None, rest),
    };
    let (resource, name, subresource) = match rest {
        [resource] => (*resource, None, None),
        [resource, name] => (*resource, Some(*name), None),
        [resource, name, subresource, ..] => (*resource, Some(*name), Some(*subresource)),
        [] => return None,
    };
    let mut object = json!({"resource": resource, "apiVersion": version});
    let map = object.as_object_mut()?;
    if !group.is_empty() {
        map.insert("apiGroup".to_owned(), json!(group));
    }
    for (key, value) in [
        ("namespace", namespace),
        ("name", name),
        ("subresource", subresource),
    ] {
        if let Some(value) = value {
            map.insert(key.to_owned(), json!(value));
        }
    }
    Some(object)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verb_and_object(method: http::Method, uri: &str) -> (String, Value) {
        let uri: http::Uri = uri.parse().unwrap_or_default();
        let request = Audited {
            method: &method,
            uri: &uri,
            user_agent: "test",
            code: 200,
            received: Timestamp::UNIX_EPOCH,
        };
        let event = event(&request, Timestamp::UNIX_EPOCH);
        (
            event["verb"].as_str().unwrap_or_default().to_owned(),
            event["objectRef"].clone(),
        )
    }

    #[test]
    fn verbs_and_objects_are_named_as_kube_apiserver_names_them() {
        let (verb, object) = verb_and_object(
            http::Method::PATCH,
            "/apis/apps/v1/namespaces/ns/daemonsets/agent",
        );
        assert_eq!(verb, "patch");
        assert_eq!(
            object,
            json!({"resource": "daemonsets", "apiGroup": "apps", "apiVersion": "v1", "namespace": "ns", "name": "agent"})
        );
        let (verb, object) = verb_and_object(
            http::Method::GET,
            "/api/v1/namespaces/ns/pods?labelSelector=a&watch=true&resourceVersion=5",
        );
        assert_eq!(verb, "watch");
        assert_eq!(object["resource"], "pods");
        assert_eq!(verb_and_object(http::Method::GET, "/api/v1/pods").0, "list");
        assert_eq!(
            verb_and_object(http::Method::GET, "/api/v1/nodes/n1").0,
            "get"
        );
        let (verb, object) = verb_and_object(http::Method::DELETE, "/api/v1/namespaces/ns");
        assert_eq!(
            (verb.as_str(), object["name"].as_str()),
            ("delete", Some("ns"))
        );
        let (_, object) = verb_and_object(
            http::Method::PATCH,
            "/apis/canary.daemonset.dev/v1alpha1/namespaces/ns/canarydaemonsets/a/status",
        );
        assert_eq!(object["subresource"], "status");
        assert_eq!(
            verb_and_object(http::Method::GET, "/version").1,
            Value::Null
        );
    }
}
