//! Where a request goes: the Kubernetes REST paths (`/api/v1/...`,
//! `/apis/<group>/<version>/...`, `namespaces/<ns>/<plural>/<name>/<subresource>`), as
//! `staging/src/k8s.io/apiserver/pkg/endpoints/installer.go` lays them out, and the verb of a
//! request (method plus the `watch` flag, as `endpoints/request/requestinfo.go` derives it).

use http::Method;

use super::ApiServer;
use super::query::Query;
use super::response::not_found_path;
use crate::faults::Verb;
use crate::registry::{ResourceInfo, ResourceKey};
use crate::store::{StoreError, UpdateScope};

/// Where a request goes.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Route {
    Version,
    CoreVersions,
    GroupList,
    Group(String),
    ResourceList { group: String, version: String },
    Health,
    OpenApiRoot,
    OpenApiDocument(String),
    Object(Box<ObjectRoute>),
    NotFound,
}

#[derive(Clone, Debug, PartialEq)]
pub(super) struct ObjectRoute {
    pub(super) info: ResourceInfo,
    pub(super) api_version: String,
    pub(super) namespace: Option<String>,
    pub(super) name: Option<String>,
    pub(super) subresource: Option<String>,
}

impl ObjectRoute {
    pub(super) fn resource_label(&self) -> String {
        match &self.subresource {
            Some(sub) => format!("{}/{sub}", self.info.key.plural),
            None => self.info.key.plural.clone(),
        }
    }

    pub(super) fn scope(&self) -> Result<UpdateScope, StoreError> {
        match self.subresource.as_deref() {
            None => Ok(UpdateScope::Main),
            Some("status") if self.info.status_subresource => Ok(UpdateScope::Status),
            Some(_) => Err(not_found_path()),
        }
    }

    pub(super) fn name(&self) -> Result<&str, StoreError> {
        self.name.as_deref().ok_or_else(|| StoreError::BadRequest {
            message: "a name is required for this request".into(),
        })
    }
}

pub(super) fn verb_of(method: &Method, route: &Route, query: &Query) -> Verb {
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

impl ApiServer {
    pub(super) fn route(&self, path: &str) -> Route {
        let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
        match segments.as_slice() {
            ["version"] => Route::Version,
            ["healthz" | "readyz" | "livez"] => Route::Health,
            ["openapi", "v3"] => Route::OpenApiRoot,
            ["openapi", "v3", rest @ ..] => Route::OpenApiDocument(rest.join("/")),
            ["api"] => Route::CoreVersions,
            ["apis"] => Route::GroupList,
            ["apis", group] => Route::Group((*group).to_owned()),
            ["api", version, rest @ ..] => self.route_resources("", version, rest),
            ["apis", group, version, rest @ ..] => self.route_resources(group, version, rest),
            _ => Route::NotFound,
        }
    }

    pub(super) fn route_resources(&self, group: &str, version: &str, rest: &[&str]) -> Route {
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
        Route::Object(Box::new(ObjectRoute {
            api_version: info.api_version(),
            info,
            namespace,
            name: tail.first().map(|s| (*s).to_owned()),
            subresource: tail.get(1).map(|s| (*s).to_owned()),
        }))
    }
}
