//! Test support shared by the workspace's tests, examples and benches: the Kubernetes objects
//! they build and the client calls they make, each written once here instead of once per test
//! crate.
//!
//! - [`agent_daemonset`] and [`rolling_update`] build DaemonSets the way the tests need them.
//! - [`node_condition`] reads a node's condition of a type.
//! - [`pulling`] says whether a pod's image is still being pulled onto its node.
//! - [`bare_pod`] builds a pod bound to a node, as the node-behaviour tests create them.
//! - [`pod_spec`], [`template_meta`], [`first_container`] (and their `_mut` forms) reach into a
//!   DaemonSet's pod template.
//! - [`node_names`] and [`put_secret`] talk to an API server (canary-sim or a real one).
//!
//! Invariants: nothing here is product code, and no library crate depends on it but as a
//! dev-dependency. A missing field or a failed request panics with what was being done: in a
//! test, the panic is the failure report, at the place it happened.
//!
//! ```
//! use canary_testkit::{agent_daemonset, first_container, first_container_mut};
//! use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
//!
//! let mut ds = agent_daemonset("default", "agent", "agent:v1", IntOrString::Int(1));
//! first_container_mut(&mut ds).image = Some("agent:v2".into());
//! assert_eq!(first_container(&ds).image.as_deref(), Some("agent:v2"));
//! ```

// Test support: a panic is how a test reports what it did not find.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{
    DaemonSet, DaemonSetSpec, DaemonSetUpdateStrategy, RollingUpdateDaemonSet,
};
use k8s_openapi::api::core::v1::{
    Container, Node, NodeCondition, Pod, PodSpec, PodTemplateSpec, Secret,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams};

/// Whether `pod`'s image is not on its node yet: no container status, or one without an
/// `imageID` (the kubelet writes it once the image is pulled).
pub fn pulling(pod: &Pod) -> bool {
    let statuses = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.clone())
        .unwrap_or_default();
    statuses.is_empty() || statuses.iter().any(|c| c.image_id.is_empty())
}

/// `node`'s condition of type `type_`, if it has one.
pub fn node_condition(node: &Node, type_: &str) -> Option<NodeCondition> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
        .cloned()
}

/// Bare pod `namespace/name` bound to `node`: one container `main` of `image`, with
/// `annotations` (the simulator's behaviours and pulls are annotations), no status.
pub fn bare_pod(
    namespace: &str,
    name: &str,
    node: &str,
    image: &str,
    annotations: &[(&str, &str)],
) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            annotations: Some(
                annotations
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            ),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            node_name: Some(node.to_owned()),
            containers: vec![Container {
                name: "main".to_owned(),
                image: Some(image.to_owned()),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
        status: None,
    }
}

/// DaemonSet `namespace/name`: one container `agent` running `image`, its pods labelled
/// `app: <name>` (the selector), updated by `RollingUpdate` with `max_unavailable`.
pub fn agent_daemonset(
    namespace: &str,
    name: &str,
    image: &str,
    max_unavailable: IntOrString,
) -> DaemonSet {
    let labels = BTreeMap::from([("app".to_owned(), name.to_owned())]);
    DaemonSet {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            ..ObjectMeta::default()
        },
        spec: Some(DaemonSetSpec {
            selector: LabelSelector {
                match_labels: Some(labels.clone()),
                ..LabelSelector::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: "agent".to_owned(),
                        image: Some(image.to_owned()),
                        ..Container::default()
                    }],
                    ..PodSpec::default()
                }),
            },
            update_strategy: Some(rolling_update(max_unavailable)),
            ..DaemonSetSpec::default()
        }),
        status: None,
    }
}

/// A `RollingUpdate` strategy with `max_unavailable` and no `maxSurge`.
pub fn rolling_update(max_unavailable: IntOrString) -> DaemonSetUpdateStrategy {
    DaemonSetUpdateStrategy {
        type_: Some("RollingUpdate".to_owned()),
        rolling_update: Some(RollingUpdateDaemonSet {
            max_unavailable: Some(max_unavailable),
            max_surge: None,
        }),
    }
}

/// The pod spec of `ds`'s template.
pub fn pod_spec(ds: &DaemonSet) -> &PodSpec {
    ds.spec
        .as_ref()
        .expect("the DaemonSet has a spec")
        .template
        .spec
        .as_ref()
        .expect("the DaemonSet's template has a spec")
}

/// The pod spec of `ds`'s template, to change.
pub fn pod_spec_mut(ds: &mut DaemonSet) -> &mut PodSpec {
    ds.spec
        .as_mut()
        .expect("the DaemonSet has a spec")
        .template
        .spec
        .as_mut()
        .expect("the DaemonSet's template has a spec")
}

/// The metadata of `ds`'s pod template.
pub fn template_meta(ds: &DaemonSet) -> &ObjectMeta {
    ds.spec
        .as_ref()
        .expect("the DaemonSet has a spec")
        .template
        .metadata
        .as_ref()
        .expect("the DaemonSet's template has metadata")
}

/// The metadata of `ds`'s pod template, to change (made empty if it had none).
pub fn template_meta_mut(ds: &mut DaemonSet) -> &mut ObjectMeta {
    ds.spec
        .as_mut()
        .expect("the DaemonSet has a spec")
        .template
        .metadata
        .get_or_insert_with(ObjectMeta::default)
}

/// The first container of `ds`'s pod template.
pub fn first_container(ds: &DaemonSet) -> &Container {
    pod_spec(ds)
        .containers
        .first()
        .expect("the DaemonSet's template has a container")
}

/// The first container of `ds`'s pod template, to change.
pub fn first_container_mut(ds: &mut DaemonSet) -> &mut Container {
    pod_spec_mut(ds)
        .containers
        .first_mut()
        .expect("the DaemonSet's template has a container")
}

/// The names of the cluster's nodes, sorted.
pub async fn node_names(client: &Client) -> Vec<String> {
    let mut names: Vec<String> = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .expect("list nodes")
        .items
        .into_iter()
        .filter_map(|node| node.metadata.name)
        .collect();
    names.sort();
    names
}

/// Secret `namespace/name` holding `key: value`, created or replaced (server-side apply).
pub async fn put_secret(client: &Client, namespace: &str, name: &str, key: &str, value: &str) {
    let secret = serde_json::json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "stringData": {key: value},
    });
    Api::<Secret>::namespaced(client.clone(), namespace)
        .patch(
            name,
            &PatchParams::apply("test").force(),
            &Patch::Apply(secret),
        )
        .await
        .expect("apply the Secret");
}
