//! The simulated API server: Kubernetes REST paths and JSON over the [`Store`].
//!
//! Request handling follows `staging/src/k8s.io/apiserver/pkg/endpoints/handlers/` (get, list,
//! watch, create, update, patch, delete) with the store semantics of
//! `staging/src/k8s.io/apiserver/pkg/registry/generic/registry/store.go`. Errors are `Status`
//! bodies with Kubernetes' `reason` and `code`.

pub mod discovery;
pub mod managed;
pub mod patch;
pub mod selector;
pub mod watch;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use serde_json::{Map, Value, json};

use crate::faults::{FaultAction, Faults, FiredFaults, Verb};
use crate::registry::ResourceInfo;
use crate::store::{DeleteOptions, ResourceKey, Store, StoreError, UpdateScope, status_body};
use patch::PatchType;
use selector::{FieldSelector, LabelSelector};
use watch::{Selection, WatchRequest};

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

/// Where a request goes.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Route {
    Version,
    CoreVersions,
    GroupList,
    Group(String),
    ResourceList { group: String, version: String },
    Health,
    Object(ObjectRoute),
    NotFound,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct ObjectRoute {
    info: ResourceInfo,
    api_version: String,
    namespace: Option<String>,
    name: Option<String>,
    subresource: Option<String>,
}

impl ObjectRoute {
    fn resource_label(&self) -> String {
        match &self.subresource {
            Some(sub) => format!("{}/{sub}", self.info.key.plural),
            None => self.info.key.plural.clone(),
        }
    }

    fn scope(&self) -> Result<UpdateScope, StoreError> {
        match self.subresource.as_deref() {
            None => Ok(UpdateScope::Main),
            Some("status") if self.info.status_subresource => Ok(UpdateScope::Status),
            Some(_) => Err(not_found_path()),
        }
    }

    fn name(&self) -> Result<&str, StoreError> {
        self.name.as_deref().ok_or_else(|| StoreError::BadRequest {
            message: "a name is required for this request".into(),
        })
    }
}

/// Parsed query parameters.
#[derive(Clone, Debug, Default)]
struct Query(Vec<(String, String)>);

impl Query {
    fn parse(query: Option<&str>) -> Self {
        Self(
            query
                .unwrap_or("")
                .split('&')
                .filter(|pair| !pair.is_empty())
                .map(|pair| {
                    let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
                    (percent_decode(k), percent_decode(v))
                })
                .collect(),
        )
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    fn flag(&self, name: &str) -> bool {
        matches!(self.get(name), Some("true" | "1"))
    }
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(byte) => {
                        out.push(byte);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            other => out.push(other),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn not_found_path() -> StoreError {
    StoreError::NotFound {
        resource: String::new(),
        name: String::new(),
    }
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
            Route::NotFound => Err(not_found_path()),
            Route::Object(object) => {
                let request = WriteRequest {
                    query: &query,
                    content_type: &content_type,
                    body: &body,
                    manager: &manager,
                };
                self.serve_object(verb, &object, &request, &fired)
            }
        };
        result.unwrap_or_else(|error| error_response(&error))
    }

    fn route(&self, path: &str) -> Route {
        let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
        match segments.as_slice() {
            ["version"] => Route::Version,
            ["healthz" | "readyz" | "livez"] => Route::Health,
            ["api"] => Route::CoreVersions,
            ["apis"] => Route::GroupList,
            ["apis", group] => Route::Group((*group).to_owned()),
            ["api", version, rest @ ..] => self.route_resources("", version, rest),
            ["apis", group, version, rest @ ..] => self.route_resources(group, version, rest),
            _ => Route::NotFound,
        }
    }

    fn route_resources(&self, group: &str, version: &str, rest: &[&str]) -> Route {
        let lookup = |plural: &str| {
            self.store
                .resource_info(&ResourceKey::new(group, version, plural))
        };
        let (info, namespace, tail) = match rest {
            [] => {
                return Route::ResourceList {
                    group: group.to_owned(),
                    version: version.to_owned(),
                };
            }
            ["namespaces", namespace, plural, tail @ ..]
                if lookup(plural).is_some_and(|i| i.namespaced) =>
            {
                (lookup(plural), Some((*namespace).to_owned()), tail)
            }
            [plural, tail @ ..] => (lookup(plural), None, tail),
        };
        let Some(info) = info else {
            return Route::NotFound;
        };
        if tail.len() > 2 {
            return Route::NotFound;
        }
        Route::Object(ObjectRoute {
            api_version: info.api_version(),
            info,
            namespace,
            name: tail.first().map(|s| (*s).to_owned()),
            subresource: tail.get(1).map(|s| (*s).to_owned()),
        })
    }

    fn serve_object(
        &self,
        verb: Verb,
        route: &ObjectRoute,
        request: &WriteRequest<'_>,
        fired: &FiredFaults,
    ) -> Result<Response<ResponseBody>, StoreError> {
        let query = request.query;
        if route.info.namespaced && route.namespace.is_none() && route.name.is_some() {
            return Err(not_found_path());
        }
        match verb {
            Verb::List => self.list(route, query),
            Verb::Watch => self.watch(route, query, fired),
            Verb::Get => {
                route.scope()?;
                let object = self.get_existing(route)?;
                Ok(json_response(200, &object))
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

    fn list(
        &self,
        route: &ObjectRoute,
        query: &Query,
    ) -> Result<Response<ResponseBody>, StoreError> {
        let selection = Self::selection(route, query)?;
        let (objects, resource_version) = self
            .store
            .list_values(&route.info.key, route.namespace.as_deref());
        // One buffer, objects written in place: lists of thousands of pods stay cheap.
        let mut out = format!(
            "{{\"kind\":\"{}List\",\"apiVersion\":\"{}\",\"metadata\":{{\"resourceVersion\":\"{}\"}},\"items\":[",
            route.info.kind,
            route.info.api_version(),
            resource_version
        )
        .into_bytes();
        let mut first = true;
        for object in objects.iter().filter(|o| selection.matches(o)) {
            if !first {
                out.push(b',');
            }
            first = false;
            let _ = serde_json::to_writer(&mut out, object.as_ref());
        }
        out.extend_from_slice(b"]}");
        Ok(bytes_response(200, Bytes::from(out)))
    }

    fn watch(
        &self,
        route: &ObjectRoute,
        query: &Query,
        fired: &FiredFaults,
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
        };
        let body = watch::watch_body(&self.store, request);
        let mut response = Response::new(body);
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static("application/json"),
        );
        Ok(response)
    }

    fn create(
        &self,
        route: &ObjectRoute,
        request: &WriteRequest<'_>,
    ) -> Result<Response<ResponseBody>, StoreError> {
        if route.name.is_some() {
            return Err(StoreError::BadRequest {
                message: "create takes no name in the path".into(),
            });
        }
        if route.info.namespaced && route.namespace.is_none() {
            return Err(not_found_path());
        }
        require_json(request.content_type)?;
        let mut object = parse_object(request.body)?;
        set_path_namespace(&mut object, route)?;
        let mut object = Value::Object(object);
        let time = self.now();
        let writer = writer(
            route,
            request.manager,
            false,
            false,
            UpdateScope::Main,
            &time,
        );
        managed::record(&json!({}), &mut object, None, &writer)?;
        if is_dry_run(request.query) {
            return Ok(json_response(201, &object));
        }
        let created = self.store.create_value(&route.info.key, object)?;
        Ok(json_response(201, &created))
    }

    fn replace(
        &self,
        route: &ObjectRoute,
        request: &WriteRequest<'_>,
    ) -> Result<Response<ResponseBody>, StoreError> {
        let scope = route.scope()?;
        let name = route.name()?;
        require_json(request.content_type)?;
        let mut object = parse_object(request.body)?;
        set_path_namespace(&mut object, route)?;
        let body_name = object
            .get("metadata")
            .and_then(|m| m.get("name"))
            .and_then(Value::as_str);
        if body_name != Some(name) {
            return Err(StoreError::BadRequest {
                message: format!(
                    "the name of the object ({}) does not match the name on the URL ({name})",
                    body_name.unwrap_or("")
                ),
            });
        }
        let time = self.now();
        let writer = writer(route, request.manager, false, false, scope, &time);
        let updated = self.store.patch_value(
            &route.info.key,
            route.namespace.as_deref(),
            name,
            scope,
            is_dry_run(request.query),
            |current| {
                let mut next = Value::Object(object);
                managed::record(current, &mut next, None, &writer)?;
                Ok(next)
            },
        )?;
        Ok(json_response(200, &updated))
    }

    fn patch(
        &self,
        route: &ObjectRoute,
        request: &WriteRequest<'_>,
    ) -> Result<Response<ResponseBody>, StoreError> {
        let (query, content_type, body) = (request.query, request.content_type, request.body);
        let scope = route.scope()?;
        let name = route.name()?;
        let patch_type = PatchType::from_content_type(content_type)
            .ok_or_else(|| unsupported_media_type(content_type))?;
        if patch_type == PatchType::StrategicMerge && !route.info.strategic_merge {
            return Err(unsupported_media_type(content_type));
        }
        let apply = patch_type == PatchType::Apply;
        if apply && query.get("fieldManager").is_none_or(str::is_empty) {
            return Err(StoreError::BadRequest {
                message: "PATCH /apply requires fieldManager".into(),
            });
        }
        let parsed = match patch_type {
            PatchType::Json => Value::Null,
            PatchType::Apply => patch::parse_apply_body(body)?,
            PatchType::Merge | PatchType::StrategicMerge => {
                serde_json::from_slice(body).map_err(|e| StoreError::BadRequest {
                    message: format!("invalid patch body: {e}"),
                })?
            }
        };
        let time = self.now();
        let writer = writer(
            route,
            request.manager,
            apply,
            query.flag("force"),
            scope,
            &time,
        );
        let namespace = route.namespace.as_deref();
        let exists = self
            .store
            .get_value(&route.info.key, namespace, name)
            .is_some();
        if apply && !exists && scope == UpdateScope::Main {
            let Value::Object(mut object) = parsed.clone() else {
                return Err(StoreError::BadRequest {
                    message: "apply body must be an object".into(),
                });
            };
            set_path_namespace(&mut object, route)?;
            metadata_entry(&mut object).insert("name".into(), json!(name));
            let mut object = Value::Object(object);
            managed::record(&json!({}), &mut object, Some(&parsed), &writer)?;
            let created = self.store.create_value(&route.info.key, object)?;
            return Ok(json_response(201, &created));
        }
        let strategic = route.info.strategic_merge;
        let patched = self.store.patch_value(
            &route.info.key,
            namespace,
            name,
            scope,
            is_dry_run(query),
            |current| {
                let mut next = current.clone();
                match patch_type {
                    PatchType::Json => patch::apply_json_patch(&mut next, body)?,
                    PatchType::Merge => patch::apply_merge_patch(&mut next, &parsed),
                    PatchType::StrategicMerge => patch::apply_strategic_merge(&mut next, &parsed)?,
                    PatchType::Apply if strategic => {
                        patch::apply_strategic_merge(&mut next, &parsed)?
                    }
                    PatchType::Apply => patch::apply_merge_patch(&mut next, &parsed),
                }
                let Value::Object(mut next) = next else {
                    return Err(StoreError::BadRequest {
                        message: "the patched object is not an object".into(),
                    });
                };
                // Name and namespace come from the URL, whatever the patch says.
                let meta = metadata_entry(&mut next);
                meta.insert("name".into(), current["metadata"]["name"].clone());
                if !current["metadata"]["namespace"].is_null() {
                    meta.insert("namespace".into(), current["metadata"]["namespace"].clone());
                }
                let mut next = Value::Object(next);
                managed::record(current, &mut next, apply.then_some(&parsed), &writer)?;
                Ok(next)
            },
        )?;
        Ok(json_response(200, &patched))
    }

    fn now(&self) -> String {
        crate::clock::format_time(self.store.clock().now())
    }

    fn delete(
        &self,
        route: &ObjectRoute,
        query: &Query,
        body: &Bytes,
    ) -> Result<Response<ResponseBody>, StoreError> {
        let name = route.name()?;
        if route.subresource.is_some() {
            return Err(not_found_path());
        }
        let mut options = DeleteOptions::default();
        if !body.is_empty() {
            let parsed: Value =
                serde_json::from_slice(body).map_err(|e| StoreError::BadRequest {
                    message: format!("invalid DeleteOptions: {e}"),
                })?;
            options.grace_period_seconds = parsed["gracePeriodSeconds"].as_i64();
            options.precondition_resource_version = parsed["preconditions"]["resourceVersion"]
                .as_str()
                .map(str::to_owned);
            options.precondition_uid = parsed["preconditions"]["uid"].as_str().map(str::to_owned);
        }
        if let Some(grace) = query.get("gracePeriodSeconds").and_then(|g| g.parse().ok()) {
            options.grace_period_seconds = Some(grace);
        }
        if is_dry_run(query) {
            return Ok(json_response(200, self.get_existing(route)?.as_ref()));
        }
        let outcome =
            self.store
                .delete_value(&route.info.key, route.namespace.as_deref(), name, &options)?;
        Ok(json_response(200, outcome.object()))
    }

    fn delete_collection(
        &self,
        route: &ObjectRoute,
        query: &Query,
    ) -> Result<Response<ResponseBody>, StoreError> {
        let selection = Self::selection(route, query)?;
        let (objects, _) = self
            .store
            .list_values(&route.info.key, route.namespace.as_deref());
        let mut deleted = Vec::new();
        for object in objects.iter().filter(|o| selection.matches(o)) {
            let name = object["metadata"]["name"].as_str().unwrap_or_default();
            let namespace = object["metadata"]["namespace"].as_str();
            if let Ok(outcome) =
                self.store
                    .delete_value(&route.info.key, namespace, name, &DeleteOptions::default())
            {
                deleted.push(outcome.object().as_ref().clone());
            }
        }
        let list = json!({
            "kind": format!("{}List", route.info.kind),
            "apiVersion": route.info.api_version(),
            "metadata": {"resourceVersion": self.store.resource_version().to_string()},
            "items": deleted,
        });
        Ok(json_response(200, &list))
    }
}

/// The parts of a request a write needs.
struct WriteRequest<'a> {
    query: &'a Query,
    content_type: &'a str,
    body: &'a Bytes,
    /// `fieldManager`, else the client's user agent up to the first `/` (as Kubernetes
    /// defaults it), else `unknown`.
    manager: &'a str,
}

fn field_manager(query: &Query, headers: &http::HeaderMap) -> String {
    if let Some(manager) = query.get("fieldManager").filter(|m| !m.is_empty()) {
        return manager.to_owned();
    }
    headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .and_then(|agent| agent.split('/').next())
        .filter(|agent| !agent.is_empty())
        .unwrap_or("unknown")
        .to_owned()
}

fn writer<'a>(
    route: &'a ObjectRoute,
    manager: &'a str,
    apply: bool,
    force: bool,
    scope: UpdateScope,
    time: &'a str,
) -> managed::Writer<'a> {
    managed::Writer {
        manager,
        apply,
        force,
        scope,
        status_subresource: route.info.status_subresource,
        api_version: &route.api_version,
        time,
    }
}

fn verb_of(method: &Method, route: &Route, query: &Query) -> Verb {
    let Route::Object(object) = route else {
        return Verb::Discovery;
    };
    let named = object.name.is_some();
    match *method {
        Method::GET if named => Verb::Get,
        Method::GET if query.flag("watch") => Verb::Watch,
        Method::GET => Verb::List,
        Method::POST => Verb::Create,
        Method::PUT => Verb::Update,
        Method::PATCH => Verb::Patch,
        Method::DELETE if named => Verb::Delete,
        Method::DELETE => Verb::DeleteCollection,
        _ => Verb::Discovery,
    }
}

fn is_dry_run(query: &Query) -> bool {
    query.get("dryRun").is_some_and(|d| !d.is_empty())
}

fn unsupported_media_type(content_type: &str) -> StoreError {
    StoreError::BadRequest {
        message: format!("the body of the request was in an unknown format: {content_type}"),
    }
}

/// Only JSON bodies are understood: protobuf and CBOR get 415, on which client-go falls back
/// to JSON.
fn require_json(content_type: &str) -> Result<(), StoreError> {
    let essence = content_type.split(';').next().unwrap_or("").trim();
    if essence.is_empty() || essence == "application/json" || essence == "*/*" {
        Ok(())
    } else {
        Err(unsupported_media_type(content_type))
    }
}

fn parse_object(body: &Bytes) -> Result<Map<String, Value>, StoreError> {
    match serde_json::from_slice(body) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(StoreError::BadRequest {
            message: "the body must be a JSON object".into(),
        }),
        Err(e) => Err(StoreError::BadRequest {
            message: format!("invalid JSON body: {e}"),
        }),
    }
}

fn metadata_entry(object: &mut Map<String, Value>) -> &mut Map<String, Value> {
    if !object.get("metadata").is_some_and(Value::is_object) {
        object.insert("metadata".into(), Value::Object(Map::new()));
    }
    match object.get_mut("metadata") {
        Some(Value::Object(meta)) => meta,
        _ => unreachable!("metadata was just made an object"),
    }
}

/// Fills the namespace from the URL; a different namespace in the body is a 400.
fn set_path_namespace(
    object: &mut Map<String, Value>,
    route: &ObjectRoute,
) -> Result<(), StoreError> {
    let Some(namespace) = route.namespace.as_deref() else {
        return Ok(());
    };
    let meta = metadata_entry(object);
    match meta.get("namespace").and_then(Value::as_str) {
        Some(body_ns) if !body_ns.is_empty() && body_ns != namespace => Err(StoreError::BadRequest {
            message: "the namespace of the provided object does not match the namespace sent on the request".into(),
        }),
        _ => {
            meta.insert("namespace".into(), json!(namespace));
            Ok(())
        }
    }
}

fn bytes_response(code: u16, body: Bytes) -> Response<ResponseBody> {
    let mut response = Response::new(Full::new(body).boxed_unsync());
    *response.status_mut() =
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    response
}

fn json_response(code: u16, body: &Value) -> Response<ResponseBody> {
    bytes_response(
        code,
        Bytes::from(serde_json::to_vec(body).unwrap_or_default()),
    )
}

fn text_response(code: u16, body: &'static str) -> Response<ResponseBody> {
    let mut response = bytes_response(code, Bytes::from_static(body.as_bytes()));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain"),
    );
    response
}

fn error_response(error: &StoreError) -> Response<ResponseBody> {
    let body = match error {
        StoreError::NotFound { resource, .. } if resource.is_empty() => status_body(
            404,
            "NotFound",
            "the server could not find the requested resource",
        ),
        StoreError::BadRequest { message }
            if message.starts_with("the body of the request was in an unknown format") =>
        {
            return json_response(415, &status_body(415, "UnsupportedMediaType", message));
        }
        other => other.to_status(),
    };
    json_response(error.code(), &body)
}

#[cfg(test)]
mod tests;
