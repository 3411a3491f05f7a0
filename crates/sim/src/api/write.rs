//! The write verbs: create, update (replace), patch (JSON, merge, strategic merge, apply) and
//! delete, as `staging/src/k8s.io/apiserver/pkg/endpoints/handlers/{create,update,patch,delete}.go`
//! handle them, with field ownership recorded ([`super::managed`]) and `dryRun` honoured.
//! Invariant: every write goes through one store call, so it is atomic and conflicts like the
//! API server's.

#![expect(
    clippy::indexing_slicing,
    reason = "only serde_json::Value is indexed here: a missing key or index reads as Null, and \
              writes by index go to objects this module built"
)]

use bytes::Bytes;
use http::{Response, header};
use serde_json::{Map, Value, json};

use super::admission::{Write, admit};
use super::patch::{self, PatchType};
use super::query::Query;
use super::response::{json_response, not_found_path, unsupported_media_type};
use super::route::ObjectRoute;
use super::validation::{FieldValidation, Warnings, check_apply};
use super::{ApiServer, ObjectRequest, ResponseBody, managed};
use crate::object::metadata_mut;
use crate::store::{DeleteOptions, StoreError, UpdateScope};

pub(super) fn field_manager(query: &Query, headers: &http::HeaderMap) -> String {
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

pub(super) fn writer<'a>(
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

pub(super) fn is_dry_run(query: &Query) -> bool {
    query.get("dryRun").is_some_and(|d| !d.is_empty())
}

/// Only JSON bodies are understood: protobuf and CBOR get 415, on which client-go falls back
/// to JSON.
pub(super) fn require_json(content_type: &str) -> Result<(), StoreError> {
    let essence = content_type.split(';').next().unwrap_or("").trim();
    if essence.is_empty() || essence == "application/json" || essence == "*/*" {
        Ok(())
    } else {
        Err(unsupported_media_type(content_type))
    }
}

pub(super) fn parse_object(body: &Bytes) -> Result<Map<String, Value>, StoreError> {
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

/// Fills the namespace from the URL; a different namespace in the body is a 400.
pub(super) fn set_path_namespace(
    object: &mut Map<String, Value>,
    route: &ObjectRoute,
) -> Result<(), StoreError> {
    let Some(namespace) = route.namespace.as_deref() else {
        return Ok(());
    };
    let meta = metadata_mut(object);
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

impl ApiServer {
    pub(super) fn create(
        &self,
        route: &ObjectRoute,
        request: &ObjectRequest<'_>,
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
        let validation = FieldValidation::of(request.query, "CreateOptions")?;
        let mut object = parse_object(request.body)?;
        set_path_namespace(&mut object, route)?;
        let mut object = Value::Object(object);
        let mut warnings = validation.prune(route, &mut object)?;
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
        warnings.extend(admit(route, Write::Create, None, &mut object)?);
        if is_dry_run(request.query) {
            return Ok(warnings.attach(json_response(201, &object)));
        }
        let created = self.store.create_value(&route.info.key, object)?;
        Ok(warnings.attach(json_response(201, &created)))
    }

    pub(super) fn replace(
        &self,
        route: &ObjectRoute,
        request: &ObjectRequest<'_>,
    ) -> Result<Response<ResponseBody>, StoreError> {
        let scope = route.scope()?;
        let name = route.name()?;
        require_json(request.content_type)?;
        let validation = FieldValidation::of(request.query, "UpdateOptions")?;
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
        let mut object = Value::Object(object);
        let mut warnings = validation.prune(route, &mut object)?;
        let time = self.now();
        let writer = writer(route, request.manager, false, false, scope, &time);
        let updated = self.store.patch_value(
            &route.info.key,
            route.namespace.as_deref(),
            name,
            scope,
            is_dry_run(request.query),
            |current| {
                managed::record(current, &mut object, None, &writer)?;
                warnings.extend(admit(route, Write::of(scope), Some(current), &mut object)?);
                Ok(object)
            },
        )?;
        Ok(warnings.attach(json_response(200, &updated)))
    }

    pub(super) fn patch(
        &self,
        route: &ObjectRoute,
        request: &ObjectRequest<'_>,
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
        let validation = FieldValidation::of(query, "PatchOptions")?;
        let mut parsed = match patch_type {
            PatchType::Json => Value::Null,
            PatchType::Apply => patch::parse_apply_body(body)?,
            PatchType::Merge | PatchType::StrategicMerge => {
                serde_json::from_slice(body).map_err(|e| StoreError::BadRequest {
                    message: format!("invalid patch body: {e}"),
                })?
            }
        };
        if apply {
            check_apply(route, name, &mut parsed)?;
        }
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
            metadata_mut(&mut object).insert("name".into(), json!(name));
            let mut object = Value::Object(object);
            managed::record(&json!({}), &mut object, Some(&parsed), &writer)?;
            let warnings = Warnings::from(admit(route, Write::Create, None, &mut object)?);
            let created = self.store.create_value(&route.info.key, object)?;
            return Ok(warnings.attach(json_response(201, &created)));
        }
        let strategic = route.info.strategic_merge;
        let mut warnings = Warnings::default();
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
                let meta = metadata_mut(&mut next);
                meta.insert("name".into(), current["metadata"]["name"].clone());
                if !current["metadata"]["namespace"].is_null() {
                    meta.insert("namespace".into(), current["metadata"]["namespace"].clone());
                }
                let mut next = Value::Object(next);
                // What a patch adds is pruned from the patched object, as the API server
                // decodes it (a stored custom resource holds no undeclared field), before the
                // writer's managed fields are recorded from it.
                if !apply {
                    warnings = validation.prune(route, &mut next)?;
                }
                managed::record(current, &mut next, apply.then_some(&parsed), &writer)?;
                warnings.extend(admit(route, Write::of(scope), Some(current), &mut next)?);
                Ok(next)
            },
        )?;
        Ok(warnings.attach(json_response(200, &patched)))
    }

    pub(super) fn now(&self) -> String {
        crate::clock::format_time(self.store.clock().now())
    }

    pub(super) fn delete(
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

    pub(super) fn delete_collection(
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
