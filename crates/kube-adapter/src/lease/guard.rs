//! The write guard: a [`Client`] that refuses every write while this replica may not write
//! ([`Leadership::may_write`]), checked as each request leaves, not when the pass that makes it
//! began.
//!
//! Reads (GET, and so lists and watches) pass, so that a standby's caches stay warm. Writes to
//! Leases pass, because the campaign itself must write to become leader.

use http::{Method, Request};
use kube::Client;
use kube::client::Body;

use super::Leadership;

/// The error of a write refused by [`guarded`].
#[derive(Debug, thiserror::Error)]
#[error(
    "not sent: this replica does not hold the leader lease (or could not renew it within the renew deadline), so another replica may be writing"
)]
pub struct NotLeading;

/// `client`, with every write other than to Leases refused with [`NotLeading`] unless
/// `leadership` allows it at the moment the request is sent.
pub fn guarded(client: Client, leadership: Leadership) -> Client {
    let namespace = client.default_namespace().to_owned();
    let service = tower::service_fn(move |request: Request<Body>| {
        let client = client.clone();
        let refused = is_write(request.method())
            && !is_lease(request.uri().path())
            && !leadership.may_write();
        async move {
            if refused {
                return Err(tower::BoxError::from(NotLeading));
            }
            client.send(request).await.map_err(tower::BoxError::from)
        }
    });
    Client::new(service, namespace)
}

fn is_write(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// `/apis/coordination.k8s.io/v1/namespaces/<ns>/leases[/<name>]`.
fn is_lease(path: &str) -> bool {
    path.starts_with("/apis/coordination.k8s.io/")
        && path
            .split('/')
            .rev()
            .take(2)
            .any(|segment| segment == "leases")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_lease_paths_are_leases() {
        assert!(is_lease(
            "/apis/coordination.k8s.io/v1/namespaces/ns/leases/daemonset-canary"
        ));
        assert!(is_lease(
            "/apis/coordination.k8s.io/v1/namespaces/ns/leases"
        ));
        assert!(!is_lease("/apis/apps/v1/namespaces/ns/daemonsets/leases"));
        assert!(!is_lease("/api/v1/namespaces/leases/pods/x"));
    }

    #[test]
    fn reads_are_not_writes() {
        assert!(!is_write(&Method::GET));
        for method in [Method::POST, Method::PUT, Method::PATCH, Method::DELETE] {
            assert!(is_write(&method), "{method}");
        }
    }
}
