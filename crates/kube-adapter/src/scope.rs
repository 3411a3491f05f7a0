//! The API of a kind in one namespace, or in all of them: the one namespaced-or-all helper,
//! typed ([`api`]) and untyped ([`api_with`], for kinds read as `DynamicObject`).
//!
//! Every watch and list of the controller and of observe mode is scoped by `--namespace` (or
//! not) through these two, so that the scope is decided in one place.

use kube::api::{ApiResource, DynamicObject};
use kube::{Api, Client};

/// The API of `K` in `namespace`, or in all namespaces.
pub fn api<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// The untyped API of `resource` in `namespace`, or in all namespaces.
pub fn api_with(
    client: &Client,
    namespace: Option<&str>,
    resource: &ApiResource,
) -> Api<DynamicObject> {
    match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, resource),
        None => Api::all_with(client.clone(), resource),
    }
}
