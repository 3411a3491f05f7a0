//! The read verbs that return collections: list (written straight into one buffer, so lists
//! of thousands of pods stay cheap, and paged with `limit` and `continue`, [`super::paging`]) and watch ([`super::watch`]), both with label and field
//! selectors (`staging/src/k8s.io/apiserver/pkg/endpoints/handlers/get.go`), as plain JSON or
//! as a Table ([`super::table`]).

#![expect(
    clippy::indexing_slicing,
    reason = "only serde_json::Value is indexed here: a missing key or index reads as Null, and \
              writes by index go to objects this module built"
)]

use std::time::Duration;

use bytes::Bytes;
use http::{Response, header};

use super::paging::{self, Continue};
use super::query::Query;
use super::response::{bytes_response, json_response};
use super::route::ObjectRoute;
use super::table::TableView;
use super::watch::{self, WatchRequest};
use super::{ApiServer, DEFAULT_WATCH_TIMEOUT, ResponseBody};
use crate::faults::FiredFaults;
use crate::store::StoreError;

impl ApiServer {
    pub(super) fn list(
        &self,
        route: &ObjectRoute,
        query: &Query,
        table: Option<TableView>,
    ) -> Result<Response<ResponseBody>, StoreError> {
        let selection = Self::selection(route, query)?;
        let limit = match query.get("limit").filter(|l| !l.is_empty()) {
            None => None,
            Some(limit) => Some(limit.parse::<usize>().map_err(|_| StoreError::BadRequest {
                message: format!("invalid limit {limit:?}"),
            })?),
        };
        let token = match query.get("continue").filter(|c| !c.is_empty()) {
            None => None,
            Some(token) => Some(Continue::parse(token)?),
        };
        if let Some(token) = &token {
            let oldest = self.store.oldest_resumable();
            if token.rv < oldest {
                return Err(StoreError::Gone {
                    requested: token.rv,
                    oldest,
                });
            }
        }
        let (objects, resource_version) = self
            .store
            .list_values(&route.info.key, route.namespace.as_deref());
        let selected = objects
            .iter()
            .map(AsRef::as_ref)
            .filter(|o| selection.matches(o));
        let page = paging::page(selected, limit, token.as_ref(), resource_version);
        // Kubernetes counts the rest only when it can without reading it: with no selector.
        let remaining = (page.next.is_some() && !selection.filters()).then_some(page.remaining);
        if let Some(view) = table {
            let now = self.store.clock().now();
            let mut table = view.table(
                page.objects.iter().copied(),
                &page.resource_version.to_string(),
                true,
                now,
            );
            if let Some(next) = &page.next {
                table["metadata"]["continue"] = next.clone().into();
            }
            if let Some(remaining) = remaining {
                table["metadata"]["remainingItemCount"] = remaining.into();
            }
            return Ok(json_response(200, &table));
        }
        let mut metadata =
            serde_json::json!({"resourceVersion": page.resource_version.to_string()});
        if let Some(next) = &page.next {
            metadata["continue"] = next.clone().into();
        }
        if let Some(remaining) = remaining {
            metadata["remainingItemCount"] = remaining.into();
        }
        // One buffer, objects written in place: lists of thousands of pods stay cheap.
        let mut out = format!(
            "{{\"kind\":\"{}List\",\"apiVersion\":\"{}\",\"metadata\":{metadata},\"items\":[",
            route.info.kind,
            route.info.api_version(),
        )
        .into_bytes();
        let mut first = true;
        for object in page.objects {
            if !first {
                out.push(b',');
            }
            first = false;
            let _ = serde_json::to_writer(&mut out, object);
        }
        out.extend_from_slice(b"]}");
        Ok(bytes_response(200, Bytes::from(out)))
    }

    pub(super) fn watch(
        &self,
        route: &ObjectRoute,
        query: &Query,
        fired: &FiredFaults,
        table: Option<TableView>,
    ) -> Result<Response<ResponseBody>, StoreError> {
        let selection = Self::selection(route, query)?;
        let resource_version = match query.get("resourceVersion").filter(|rv| !rv.is_empty()) {
            None => None,
            Some(rv) => Some(rv.parse::<u64>().map_err(|_| StoreError::BadRequest {
                message: format!("invalid resourceVersion {rv:?}"),
            })?),
        };
        let mut timeout = query
            .get("timeoutSeconds")
            .and_then(|t| t.parse::<u64>().ok())
            .map_or(DEFAULT_WATCH_TIMEOUT, Duration::from_secs);
        if let Some(limit) = fired.end_watch_after {
            timeout = timeout.min(limit);
        }
        let request = WatchRequest {
            info: route.info.clone(),
            selection,
            resource_version,
            send_initial_events: query.flag("sendInitialEvents"),
            bookmarks: query.flag("allowWatchBookmarks"),
            timeout,
            max_events: fired.end_watch_after_events,
            gone_on_resume: fired.gone_on_resume,
            table,
        };
        let body = watch::watch_body(&self.store, request);
        let mut response = Response::new(body);
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static("application/json"),
        );
        Ok(response)
    }
}
