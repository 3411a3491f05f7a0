//! Which resources the simulated API server knows: the built-in kinds and the kinds of every
//! registered CustomResourceDefinition, each named by a [`ResourceKey`].
//!
//! This is the simulator's counterpart of the API server's REST mapping (the `APIGroupInfo`s
//! installed in `pkg/controlplane` and the CRD handler's per-version storage in
//! `staging/src/k8s.io/apiextensions-apiserver/pkg/apiserver/customresource_handler.go`).
//! Invariant: a key is served iff it is in the [`Registry`]; registering a key again replaces
//! what was known about it.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceColumnDefinition, CustomResourceDefinition,
};
use serde::Deserialize;
use serde_json::Value;

use crate::structural::StructuralSchema;

/// Identifies a resource type: API group (empty for core), version and plural name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ResourceKey {
    /// API group, `""` for the core group.
    pub group: String,
    /// API version (`v1`).
    pub version: String,
    /// Plural resource name (`daemonsets`).
    pub plural: String,
}

impl ResourceKey {
    /// A key from its parts.
    pub fn new(group: &str, version: &str, plural: &str) -> Self {
        Self {
            group: group.to_owned(),
            version: version.to_owned(),
            plural: plural.to_owned(),
        }
    }

    /// The key of a Rust resource type (k8s-openapi types and `#[derive(CustomResource)]` types).
    pub fn of<K: kube::Resource<DynamicType = ()>>() -> Self {
        Self::new(&K::group(&()), &K::version(&()), &K::plural(&()))
    }

    /// `group/version`, or just `version` for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

/// The built-in kinds the simulator gives rules of their own (write strategies, defaults,
/// printers), whatever the version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BuiltinKind {
    /// `pods`.
    Pod,
    /// `daemonsets.apps`.
    DaemonSet,
    /// `nodes`.
    Node,
    /// `namespaces`.
    Namespace,
    /// `events` and `events.events.k8s.io`.
    Event,
    /// `controllerrevisions.apps`.
    ControllerRevision,
    /// `leases.coordination.k8s.io`.
    Lease,
    /// `configmaps`.
    ConfigMap,
    /// `secrets`.
    Secret,
    /// `serviceaccounts`.
    ServiceAccount,
    /// `customresourcedefinitions.apiextensions.k8s.io`.
    CustomResourceDefinition,
}

impl ResourceKey {
    /// The built-in kind this key names, if any.
    pub fn builtin_kind(&self) -> Option<BuiltinKind> {
        use BuiltinKind as K;
        Some(match (self.group.as_str(), self.plural.as_str()) {
            ("", "pods") => K::Pod,
            ("apps", "daemonsets") => K::DaemonSet,
            ("", "nodes") => K::Node,
            ("", "namespaces") => K::Namespace,
            ("" | "events.k8s.io", "events") => K::Event,
            ("apps", "controllerrevisions") => K::ControllerRevision,
            ("coordination.k8s.io", "leases") => K::Lease,
            ("", "configmaps") => K::ConfigMap,
            ("", "secrets") => K::Secret,
            ("", "serviceaccounts") => K::ServiceAccount,
            ("apiextensions.k8s.io", "customresourcedefinitions") => K::CustomResourceDefinition,
            _ => return None,
        })
    }
}

impl std::fmt::Display for ResourceKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.group.is_empty() {
            write!(f, "{}", self.plural)
        } else {
            write!(f, "{}.{}", self.plural, self.group)
        }
    }
}

/// What the API server knows about one resource (one group/version/plural).
#[derive(Clone, Debug, PartialEq)]
pub struct ResourceInfo {
    /// Group, version and plural name.
    pub key: ResourceKey,
    /// `kind` of the objects (`DaemonSet`).
    pub kind: String,
    /// Lower-case singular name (`daemonset`).
    pub singular: String,
    /// Namespaced (true) or cluster-scoped (false).
    pub namespaced: bool,
    /// Whether a `/status` subresource exists: then writes to the main resource ignore
    /// `status` and writes to `/status` change nothing but `status`.
    pub status_subresource: bool,
    /// Short names kubectl accepts (`ds`).
    pub short_names: Vec<String>,
    /// Whether strategic merge patch is accepted (built-in kinds only, as in Kubernetes).
    pub strategic_merge: bool,
    /// The CRD version's `additionalPrinterColumns` for a custom resource (empty: the CRD
    /// declares none); `None` for a built-in kind, which has its own printer.
    pub printer_columns: Option<Vec<CustomResourceColumnDefinition>>,
    /// The CRD version's structural schema, which prunes and defaults every write of a custom
    /// resource; `None` for a built-in kind and a version without `openAPIV3Schema`.
    pub schema: Option<Arc<StructuralSchema>>,
}

impl ResourceInfo {
    /// A built-in resource.
    pub fn builtin(
        key: ResourceKey,
        kind: &str,
        namespaced: bool,
        status_subresource: bool,
        short_names: &[&str],
    ) -> Self {
        Self {
            key,
            kind: kind.to_owned(),
            singular: kind.to_ascii_lowercase(),
            namespaced,
            status_subresource,
            short_names: short_names.iter().map(|s| (*s).to_owned()).collect(),
            strategic_merge: true,
            printer_columns: None,
            schema: None,
        }
    }

    /// `group/version`, or `version` for the core group: the `apiVersion` of the objects.
    pub fn api_version(&self) -> String {
        self.key.api_version()
    }

    /// One [`ResourceInfo`] per served version of a CustomResourceDefinition.
    pub fn from_crd(crd: &CustomResourceDefinition) -> Vec<Self> {
        let spec = &crd.spec;
        let namespaced = spec.scope == "Namespaced";
        spec.versions
            .iter()
            .filter(|version| version.served)
            .map(|version| Self {
                key: ResourceKey::new(&spec.group, &version.name, &spec.names.plural),
                kind: spec.names.kind.clone(),
                singular: spec
                    .names
                    .singular
                    .clone()
                    .unwrap_or_else(|| spec.names.kind.to_ascii_lowercase()),
                namespaced,
                status_subresource: version
                    .subresources
                    .as_ref()
                    .is_some_and(|sub| sub.status.is_some()),
                short_names: spec.names.short_names.clone().unwrap_or_default(),
                strategic_merge: false,
                printer_columns: Some(
                    version
                        .additional_printer_columns
                        .clone()
                        .unwrap_or_default(),
                ),
                schema: version
                    .schema
                    .as_ref()
                    .and_then(|validation| validation.open_api_v3_schema.as_ref())
                    .map(|props| Arc::new(StructuralSchema::new(props))),
            })
            .collect()
    }
}

/// The built-in resources the simulator serves from the start.
pub fn builtin_resources() -> Vec<ResourceInfo> {
    let core = |plural: &str| ResourceKey::new("", "v1", plural);
    vec![
        ResourceInfo::builtin(core("nodes"), "Node", false, true, &["no"]),
        ResourceInfo::builtin(core("namespaces"), "Namespace", false, true, &["ns"]),
        ResourceInfo::builtin(core("pods"), "Pod", true, true, &["po"]),
        ResourceInfo::builtin(core("events"), "Event", true, false, &["ev"]),
        ResourceInfo::builtin(core("configmaps"), "ConfigMap", true, false, &["cm"]),
        ResourceInfo::builtin(core("secrets"), "Secret", true, false, &[]),
        ResourceInfo::builtin(
            core("serviceaccounts"),
            "ServiceAccount",
            true,
            false,
            &["sa"],
        ),
        ResourceInfo::builtin(
            ResourceKey::new("apps", "v1", "daemonsets"),
            "DaemonSet",
            true,
            true,
            &["ds"],
        ),
        ResourceInfo::builtin(
            ResourceKey::new("apps", "v1", "controllerrevisions"),
            "ControllerRevision",
            true,
            false,
            &[],
        ),
        ResourceInfo::builtin(
            ResourceKey::new("events.k8s.io", "v1", "events"),
            "Event",
            true,
            false,
            &["ev"],
        ),
        ResourceInfo::builtin(
            ResourceKey::new("coordination.k8s.io", "v1", "leases"),
            "Lease",
            true,
            false,
            &[],
        ),
        ResourceInfo::builtin(
            ResourceKey::new("apiextensions.k8s.io", "v1", "customresourcedefinitions"),
            "CustomResourceDefinition",
            false,
            true,
            &["crd", "crds"],
        ),
    ]
}

/// The resources served, by key. Starts with [`builtin_resources`].
#[derive(Clone, Debug)]
pub struct Registry {
    resources: BTreeMap<ResourceKey, ResourceInfo>,
}

impl Default for Registry {
    fn default() -> Self {
        Self {
            resources: builtin_resources()
                .into_iter()
                .map(|info| (info.key.clone(), info))
                .collect(),
        }
    }
}

impl Registry {
    /// Serves `info.key` (replacing an earlier registration of the same key).
    pub fn register(&mut self, info: ResourceInfo) {
        self.resources.insert(info.key.clone(), info);
    }

    /// Serves every served version of a stored CustomResourceDefinition; an object that does
    /// not decode as one registers nothing (the API server's CRD handler ignores it too).
    pub fn register_crd_object(&mut self, crd: &Value) {
        if let Ok(crd) = CustomResourceDefinition::deserialize(crd) {
            for info in ResourceInfo::from_crd(&crd) {
                self.register(info);
            }
        }
    }

    /// What is known about `key`.
    pub fn get(&self, key: &ResourceKey) -> Option<&ResourceInfo> {
        self.resources.get(key)
    }

    /// Every served resource, sorted by key.
    pub fn all(&self) -> impl Iterator<Item = &ResourceInfo> {
        self.resources.values()
    }
}
