//! The OpenAPI v3 discovery kubectl reads before a create, apply or replace (`GET /openapi/v3`,
//! `GET /openapi/v3/apis/<group>/<version>`), reduced to what kubectl's field-validation check
//! reads (`QueryParamVerifierV3` in `staging/src/k8s.io/cli-runtime/pkg/resource/
//! query_param_verifier_v3.go`): per served resource, a PATCH operation carrying its
//! `x-kubernetes-group-version-kind` and the `fieldValidation` query parameter.
//!
//! With it, `kubectl apply -f` works without `--validate=false`: kubectl sees the server
//! validate fields (`fieldValidation=Strict`, its default) and validates nothing itself. The
//! documents hold no schemas (`components.schemas` is empty): `kubectl explain` finds nothing,
//! and kubectl computes strategic merge patches from its compiled-in types, as it does when the
//! server serves no OpenAPI.
//!
//! Invariant: a group version is listed in the root iff a resource of it is served, and its
//! document names every resource of it.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::registry::ResourceInfo;

/// The document path of a group version: `api/v1` for the core group, `apis/<g>/<v>` otherwise.
fn document_path(info: &ResourceInfo) -> String {
    if info.key.group.is_empty() {
        format!("api/{}", info.key.version)
    } else {
        format!("apis/{}/{}", info.key.group, info.key.version)
    }
}

/// `GET /openapi/v3`: one entry per served group version.
pub fn root(resources: &[ResourceInfo]) -> Value {
    let paths: BTreeMap<String, Value> = resources
        .iter()
        .map(|info| {
            let path = document_path(info);
            let entry = json!({"serverRelativeURL": format!("/openapi/v3/{path}")});
            (path, entry)
        })
        .collect();
    json!({"paths": paths})
}

/// `GET /openapi/v3/<path>`, `path` as the root lists it; `None` for a group version not served.
pub fn group_version(resources: &[ResourceInfo], path: &str) -> Option<Value> {
    let mut paths = serde_json::Map::new();
    for info in resources.iter().filter(|info| document_path(info) == path) {
        let collection = if info.namespaced {
            format!("/{path}/namespaces/{{namespace}}/{}", info.key.plural)
        } else {
            format!("/{path}/{}", info.key.plural)
        };
        let patch = json!({"patch": {
            "operationId": format!("patch{}", info.kind),
            "parameters": [
                {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
                {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
                {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
                {"name": "force", "in": "query", "schema": {"type": "boolean", "uniqueItems": true}},
            ],
            "responses": {"200": {"description": "OK"}},
            "x-kubernetes-action": "patch",
            "x-kubernetes-group-version-kind": {
                "group": info.key.group,
                "version": info.key.version,
                "kind": info.kind,
            },
        }});
        paths.insert(format!("{collection}/{{name}}"), patch);
    }
    if paths.is_empty() {
        return None;
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.33.0-canary-sim"},
        "paths": paths,
        "components": {"schemas": {}},
    }))
}

#[cfg(test)]
mod tests {
    use super::{group_version, root};
    use crate::registry::builtin_resources;

    #[test]
    fn the_root_lists_each_group_version_and_its_document_each_resource() {
        let resources = builtin_resources();
        let listed = root(&resources);
        assert_eq!(
            listed["paths"]["apis/apps/v1"]["serverRelativeURL"],
            "/openapi/v3/apis/apps/v1"
        );
        assert_eq!(
            listed["paths"]["api/v1"]["serverRelativeURL"],
            "/openapi/v3/api/v1"
        );
        let apps = group_version(&resources, "apis/apps/v1").unwrap_or_default();
        let patch =
            &apps["paths"]["/apis/apps/v1/namespaces/{namespace}/daemonsets/{name}"]["patch"];
        assert_eq!(
            patch["x-kubernetes-group-version-kind"],
            serde_json::json!({"group": "apps", "version": "v1", "kind": "DaemonSet"})
        );
        assert!(
            patch["parameters"].as_array().is_some_and(|params| params
                .iter()
                .any(|p| p["name"] == "fieldValidation" && p["in"] == "query")),
            "{patch}"
        );
        let nodes = group_version(&resources, "api/v1").unwrap_or_default();
        assert!(nodes["paths"]["/api/v1/nodes/{name}"]["patch"].is_object());
        assert_eq!(group_version(&resources, "apis/nothing/v1"), None);
    }
}
