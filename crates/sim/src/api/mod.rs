//! The simulated API server: Kubernetes REST paths and JSON over the [`Store`].
//!
//! Request handling follows `staging/src/k8s.io/apiserver/pkg/endpoints/handlers/` (get, list,
//! watch, create, update, patch, delete) with the store semantics of
//! `staging/src/k8s.io/apiserver/pkg/registry/generic/registry/store.go`. Errors are `Status`
//! bodies with Kubernetes' `reason` and `code`. Reads come as plain JSON, or as the Table kubectl
//! asks for ([`table`], [`printers`]).
//!
//! Layout: this module answers a request (faults, routing, dispatch by verb); `discovery` and
//! `openapi` serve the documents clients read before they ask; `route` and
//! `query` parse it, `read` and `write` serve the verbs (`validation` checks
//! the fields a write of a custom resource sets, `admission` validates its values by the CRD's
//! schema and rules), `response` shapes the bodies.

mod admission;
pub mod discovery;
mod format;
mod jsonpath;
pub mod managed;
pub mod openapi;
mod paging;
pub mod patch;
pub mod printers;
mod query;
mod read;
mod response;
mod route;
pub mod selector;
pub mod table;
mod validation;
pub mod watch;
mod write;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, header};
use http_body_util::combinators::UnsyncBoxBody;
use serde_json::Value;

use crate::faults::{FaultAction, Faults, FiredFaults, Verb};
use crate::store::{Store, StoreError, status_body};
use query::Query;
use response::{error_response, json_response, not_found_path, text_response};
use route::{ObjectRoute, Route, verb_of};
use selector::{FieldSelector, LabelSelector};
use table::TableView;
use watch::Selection;
use write::field_manager;

/// The body type of every response: a full JSON document, or a never-ending watch stream.
pub type ResponseBody = UnsyncBoxBody<Bytes, Infallible>;

/// The watch timeout when the client gives none (Kubernetes picks 30-60 minutes at random).
pub const DEFAULT_WATCH_TIMEOUT: Duration = Duration::from_secs(1800);

/// Serves Kubernetes API requests from a [`Store`], applying [`Faults`] and counting requests.
#[derive(Clone, Debug)]
pub struct ApiServer {
    store: Store,
    faults: Faults,
}

impl ApiServer {
    /// A server over `store` with `faults`.
    pub fn new(store: Store, faults: Faults) -> Self {
        Self { store, faults }
    }

    /// The store served.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The faults applied.
    pub fn faults(&self) -> &Faults {
        &self.faults
    }

    /// Answers one request.
    pub async fn handle(&self, request: Request<Bytes>) -> Response<ResponseBody> {
        let (parts, body) = request.into_parts();
        let query = Query::parse(parts.uri.query());
        let route = self.route(parts.uri.path());
        let verb = verb_of(&parts.method, &route, &query);
        let (resource, namespace, name) = match &route {
            Route::Object(object) => (
                object.resource_label(),
                object.namespace.as_deref(),
                object.name.as_deref(),
            ),
            _ => (String::new(), None, None),
        };
        let fired = self.faults.on_request_to(verb, &resource, namespace, name);
        if !fired.latency.is_zero() {
            tokio::time::sleep(fired.latency).await;
        }
        if let Some(FaultAction::Error {
            code,
            reason,
            retry_after_seconds,
        }) = &fired.error
        {
            let message = format!("injected fault: {reason}");
            let mut response = json_response(*code, &status_body(*code, reason, &message));
            if let Some(seconds) = retry_after_seconds
                && let Ok(value) = header::HeaderValue::from_str(&seconds.to_string())
            {
                response.headers_mut().insert(header::RETRY_AFTER, value);
            }
            return response;
        }
        let content_type = parts
            .headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("application/json")
            .to_owned();
        let manager = field_manager(&query, &parts.headers);
        let accept = parts
            .headers
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok());
        let result = match route {
            Route::Version => Ok(json_response(200, &discovery::version())),
            Route::CoreVersions => Ok(json_response(200, &discovery::core_versions())),
            Route::GroupList => Ok(json_response(
                200,
                &discovery::group_list(&self.store.resources()),
            )),
            Route::Group(name) => discovery::group(&self.store.resources(), &name)
                .map(|doc| json_response(200, &doc))
                .ok_or_else(not_found_path),
            Route::ResourceList { group, version } => {
                discovery::resource_list(&self.store.resources(), &group, &version)
                    .map(|doc| json_response(200, &doc))
                    .ok_or_else(not_found_path)
            }
            Route::Health => Ok(text_response(200, "ok")),
            Route::OpenApiRoot => Ok(json_response(200, &openapi::root(&self.store.resources()))),
            Route::OpenApiDocument(path) => openapi::group_version(&self.store.resources(), &path)
                .map(|doc| json_response(200, &doc))
                .ok_or_else(not_found_path),
            Route::NotFound => Err(not_found_path()),
            Route::Object(object) => {
                let request = ObjectRequest {
                    accept,
                    query: &query,
                    content_type: &content_type,
                    body: &body,
                    manager: &manager,
                };
                self.serve_object(verb, &object, &request, &fired)
            }
        };
        let response = result.unwrap_or_else(|error| error_response(&error));
        let mut warnings = response
            .headers()
            .get_all(header::WARNING)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .peekable();
        if warnings.peek().is_some() {
            self.faults.record_warnings(&resource, warnings);
        }
        response
    }

    fn serve_object(
        &self,
        verb: Verb,
        route: &ObjectRoute,
        request: &ObjectRequest<'_>,
        fired: &FiredFaults,
    ) -> Result<Response<ResponseBody>, StoreError> {
        let query = request.query;
        if route.info.namespaced && route.namespace.is_none() && route.name.is_some() {
            return Err(not_found_path());
        }
        let table = || TableView::negotiate(request.accept, query, &route.info);
        match verb {
            Verb::List => self.list(route, query, table()?),
            Verb::Watch => self.watch(route, query, fired, table()?),
            Verb::Get => {
                route.scope()?;
                let object = self.get_existing(route)?;
                Ok(match table()? {
                    Some(view) => {
                        let resource_version = object
                            .pointer("/metadata/resourceVersion")
                            .and_then(Value::as_str)
                            .unwrap_or_default();
                        let now = self.store.clock().now();
                        json_response(
                            200,
                            &view.table([object.as_ref()], resource_version, true, now),
                        )
                    }
                    None => json_response(200, &object),
                })
            }
            Verb::Create => self.create(route, request),
            Verb::Update => self.replace(route, request),
            Verb::Patch => self.patch(route, request),
            Verb::Delete => self.delete(route, query, request.body),
            Verb::DeleteCollection => self.delete_collection(route, query),
            Verb::Discovery => Err(StoreError::BadRequest {
                message: "method not allowed".into(),
            }),
        }
    }

    fn get_existing(&self, route: &ObjectRoute) -> Result<Arc<Value>, StoreError> {
        let name = route.name()?;
        self.store
            .get_value(&route.info.key, route.namespace.as_deref(), name)
            .ok_or_else(|| StoreError::NotFound {
                resource: route.info.key.to_string(),
                name: name.to_owned(),
            })
    }

    fn selection(route: &ObjectRoute, query: &Query) -> Result<Selection, StoreError> {
        Ok(Selection {
            namespace: route.namespace.clone(),
            labels: LabelSelector::parse(query.get("labelSelector").unwrap_or(""))?,
            fields: FieldSelector::parse(query.get("fieldSelector").unwrap_or(""))?,
        })
    }
}

/// The parts of a request to an object route that its verb reads.
struct ObjectRequest<'a> {
    /// The `Accept` header, which may ask for the Table form of a read.
    accept: Option<&'a str>,
    query: &'a Query,
    content_type: &'a str,
    body: &'a Bytes,
    /// `fieldManager`, else the client's user agent up to the first `/` (as Kubernetes
    /// defaults it), else `unknown`.
    manager: &'a str,
}

#[cfg(test)]
mod tests;
