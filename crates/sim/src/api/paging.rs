//! Paged lists, as the API server serves `?limit=N` and `?continue=<token>`
//! (`staging/src/k8s.io/apiserver/pkg/storage/etcd3/store.go`, `GetList`).
//!
//! A page holds at most `limit` objects, in the store's order (namespace, then name); when
//! objects remain, the list's metadata carries a `continue` token and, without a selector,
//! `remainingItemCount`. The token is Kubernetes' own shape, unpadded URL-safe base64 of
//! `{"v":"meta.k8s.io/v1","rv":<resourceVersion of the first page>,"start":"<namespace>/<name>\u0000"}`,
//! so that clients (kubectl, client-go, kube-rs' watcher, which lists 500 at a time) page the
//! way they do against a real cluster, and no client holds a whole 5,000-node list in one body.
//!
//! One difference, by design: etcd serves every page from the first page's snapshot, while
//! this store serves each page from its current state. Every page still reports the first
//! page's `resourceVersion`, so a watch started from it replays every change made since; an
//! object changed in between is delivered twice, never missed, which is all an informer relies
//! on. A token older than the retained history is answered as Kubernetes answers a compacted
//! one: 410 Gone (reason `Expired`).

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as TOKEN_ENCODING;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::store::StoreError;

/// The `v` of every token this server issues.
const TOKEN_VERSION: &str = "meta.k8s.io/v1";

/// Where a page starts: the snapshot's `resourceVersion` and the key after the last object
/// served.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Continue {
    v: String,
    /// The `resourceVersion` of the list's first page.
    pub rv: u64,
    /// `<namespace>/<name>` of the last object served, then `\0` (the next key in order).
    start: String,
}

impl Continue {
    /// Decodes a client's `continue` parameter.
    pub(super) fn parse(token: &str) -> Result<Self, StoreError> {
        let invalid = |why: &str| StoreError::BadRequest {
            message: format!("continue key is not valid: {why}"),
        };
        let bytes = TOKEN_ENCODING
            .decode(token)
            .map_err(|_| invalid("not base64"))?;
        let key: Continue =
            serde_json::from_slice(&bytes).map_err(|_| invalid("not a continue key"))?;
        if key.v != TOKEN_VERSION {
            return Err(invalid("unknown version"));
        }
        Ok(key)
    }

    fn after(rv: u64, last: (&str, &str)) -> Self {
        Continue {
            v: TOKEN_VERSION.to_owned(),
            rv,
            start: format!("{}/{}\u{0}", last.0, last.1),
        }
    }

    fn encode(&self) -> String {
        TOKEN_ENCODING.encode(serde_json::to_vec(self).unwrap_or_default())
    }

    /// Whether the object at `key` comes after this token's start.
    fn admits(&self, key: (&str, &str)) -> bool {
        let last = self.start.trim_end_matches('\u{0}');
        let (namespace, name) = last.split_once('/').unwrap_or(("", last));
        key > (namespace, name)
    }
}

/// One page of a list: its objects, the `resourceVersion` to report, the token of the next
/// page and how many objects remain after it.
pub(super) struct Page<'a> {
    pub objects: Vec<&'a Value>,
    pub resource_version: u64,
    pub next: Option<String>,
    pub remaining: usize,
}

/// `(namespace, name)` of a stored object (`""` for a cluster-scoped one).
fn key_of(object: &Value) -> (&str, &str) {
    let meta = &object["metadata"];
    (
        meta["namespace"].as_str().unwrap_or(""),
        meta["name"].as_str().unwrap_or(""),
    )
}

/// The page of `selected` (objects in store order, already filtered by the selectors) that
/// `limit` and `token` ask for, at the store's `resource_version`. `limit` 0 or absent: every
/// object, as Kubernetes does.
pub(super) fn page<'a>(
    selected: impl Iterator<Item = &'a Value>,
    limit: Option<usize>,
    token: Option<&Continue>,
    resource_version: u64,
) -> Page<'a> {
    let resource_version = token.map_or(resource_version, |t| t.rv);
    let mut after = selected.filter(|object| token.is_none_or(|t| t.admits(key_of(object))));
    let Some(limit) = limit.filter(|l| *l > 0) else {
        return Page {
            objects: after.collect(),
            resource_version,
            next: None,
            remaining: 0,
        };
    };
    let objects: Vec<&Value> = after.by_ref().take(limit).collect();
    let remaining = after.count();
    let next = match objects.last() {
        Some(last) if remaining > 0 => {
            Some(Continue::after(resource_version, key_of(last)).encode())
        }
        _ => None,
    };
    Page {
        objects,
        resource_version,
        next,
        remaining,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn objects(names: &[(&str, &str)]) -> Vec<Value> {
        names
            .iter()
            .map(|(ns, name)| json!({"metadata": {"namespace": ns, "name": name}}))
            .collect()
    }

    fn names(page: &Page<'_>) -> Vec<String> {
        page.objects
            .iter()
            .map(|o| format!("{}/{}", key_of(o).0, key_of(o).1))
            .collect()
    }

    #[test]
    fn pages_cover_every_object_once_in_order_with_the_first_resource_version() {
        let all = objects(&[("a", "x"), ("a", "y"), ("b", "a"), ("b", "b"), ("c", "z")]);
        let first = page(all.iter(), Some(2), None, 40);
        assert_eq!(names(&first), ["a/x", "a/y"]);
        assert_eq!((first.resource_version, first.remaining), (40, 3));
        let token = Continue::parse(first.next.as_deref().unwrap()).unwrap();
        assert_eq!(token.rv, 40);
        // Later pages report the first page's version, whatever the store is at now.
        let second = page(all.iter(), Some(2), Some(&token), 57);
        assert_eq!(names(&second), ["b/a", "b/b"]);
        assert_eq!((second.resource_version, second.remaining), (40, 1));
        let token = Continue::parse(second.next.as_deref().unwrap()).unwrap();
        let last = page(all.iter(), Some(2), Some(&token), 60);
        assert_eq!(names(&last), ["c/z"]);
        assert_eq!((last.next, last.remaining), (None, 0));
    }

    #[test]
    fn no_limit_or_zero_lists_everything_and_an_exact_fit_has_no_next_page() {
        let all = objects(&[("", "n1"), ("", "n2")]);
        assert_eq!(names(&page(all.iter(), None, None, 1)), ["/n1", "/n2"]);
        assert_eq!(page(all.iter(), Some(0), None, 1).objects.len(), 2);
        let exact = page(all.iter(), Some(2), None, 1);
        assert_eq!((exact.objects.len(), exact.next), (2, None));
    }

    #[test]
    fn the_token_is_kubernetes_own_shape_and_garbage_is_a_bad_request() {
        let token = Continue::after(12, ("default", "pod-1")).encode();
        let decoded: Value =
            serde_json::from_slice(&TOKEN_ENCODING.decode(&token).unwrap()).unwrap();
        assert_eq!(
            decoded,
            json!({"v": "meta.k8s.io/v1", "rv": 12, "start": "default/pod-1\u{0}"})
        );
        for garbage in [
            "%%%",
            "bm90IGpzb24",
            &TOKEN_ENCODING.encode(r#"{"v":"x","rv":1,"start":""}"#),
        ] {
            let error = Continue::parse(garbage).unwrap_err();
            assert_eq!(error.code(), 400, "{garbage}");
        }
    }
}
