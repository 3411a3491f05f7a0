//! Legacy discovery documents (`/version`, `/api`, `/apis`, `/api/v1`, `/apis/<g>/<v>`), as
//! `staging/src/k8s.io/apiserver/pkg/endpoints/discovery/` serves them. kubectl asks for
//! aggregated discovery first and falls back to these when the answer is plain JSON.

#![expect(
    clippy::indexing_slicing,
    reason = "only serde_json::Value is indexed here: a missing key or index reads as Null, and \
              writes by index go to objects this module built"
)]

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::registry::ResourceInfo;

/// The Kubernetes version the simulator claims (the oldest kube 5 supports).
pub fn version() -> Value {
    json!({
        "major": "1",
        "minor": "33",
        "gitVersion": "v1.33.0-canary-sim",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.24.0",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}

/// `GET /api`.
pub fn core_versions() -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}],
    })
}

/// `GET /apis`: one entry per non-core group, versions in registration order.
pub fn group_list(resources: &[ResourceInfo]) -> Value {
    let mut groups: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for info in resources.iter().filter(|i| !i.key.group.is_empty()) {
        let versions = groups.entry(&info.key.group).or_default();
        if !versions.contains(&info.key.version.as_str()) {
            versions.push(&info.key.version);
        }
    }
    let groups: Vec<Value> = groups
        .into_iter()
        .map(|(group, versions)| {
            let entries: Vec<Value> = versions
                .iter()
                .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
                .collect();
            json!({"name": group, "versions": entries, "preferredVersion": entries.first().cloned().unwrap_or_default()})
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `GET /apis/<group>` (the group document), or `None` for an unknown group.
pub fn group(resources: &[ResourceInfo], name: &str) -> Option<Value> {
    let list = group_list(resources);
    let found = list["groups"]
        .as_array()?
        .iter()
        .find(|g| g["name"] == name)?
        .clone();
    let mut found = found;
    found["kind"] = json!("APIGroup");
    found["apiVersion"] = json!("v1");
    Some(found)
}

/// `GET /api/v1` or `GET /apis/<group>/<version>`, or `None` when nothing is served there.
pub fn resource_list(resources: &[ResourceInfo], group: &str, version: &str) -> Option<Value> {
    let mut entries = Vec::new();
    for info in resources
        .iter()
        .filter(|i| i.key.group == group && i.key.version == version)
    {
        entries.push(json!({
            "name": info.key.plural,
            "singularName": info.singular,
            "namespaced": info.namespaced,
            "kind": info.kind,
            "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"],
            "shortNames": info.short_names,
        }));
        if info.status_subresource {
            entries.push(json!({
                "name": format!("{}/status", info.key.plural),
                "singularName": "",
                "namespaced": info.namespaced,
                "kind": info.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
    }
    if entries.is_empty() {
        return None;
    }
    let group_version = if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    };
    Some(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": entries,
    }))
}
