//! The pod as the watch decodes it: [`WatchedPod`], a k8s-openapi [`Pod`] holding only what
//! [`PodSummary`] reads.
//!
//! Decoding a whole `Pod` from every watch event (its spec's containers, volumes and
//! tolerations, its status's conditions and addresses) was a large part of the controller's CPU
//! during a rollout (issue 20), for fields the index drops at once. Serde skips the fields a
//! type does not name without building them, so the watch decodes into [`WatchedPod`], whose
//! spec keeps only `nodeName` and whose status keeps the phase, the container statuses and the
//! `Ready` condition (its transition time: the canary soak of issue 46).
//!
//! The metadata is kept whole but for its managed fields: on a real API server every pod
//! carries the field sets of the DaemonSet controller and of the kubelet (3 KB of JSON on
//! kube-apiserver 1.35 with KWOK), which a `serde_json::Value` would build, allocation by
//! allocation, on every event, for nothing the controller reads of a pod.
//!
//! Invariant: [`PodSummary::of`] gives the same summary for a [`WatchedPod`] as for the full
//! pod it was decoded from (tested below against the pods of `testdata/pods/`). A field a
//! predicate starts reading must be kept here too.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ContainerStatus, Pod, PodCondition, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use serde::Deserialize;

/// A pod decoded with only what [`PodSummary`](canary_predicates::PodSummary) reads: the
/// metadata, `spec.nodeName`, `status.phase` and the (init) container statuses.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WatchedPod(pub Pod);

impl From<Pod> for WatchedPod {
    /// A full pod as the watch would deliver it (for tests and benches fed in process).
    fn from(pod: Pod) -> Self {
        WatchedPod(pod)
    }
}

/// The wire form: the fields kept, every other one skipped by serde unbuilt.
type Wire = crate::wire::Wire<WireMeta, crate::wire::PodSpecWire, WireStatus>;

/// `ObjectMeta` without `managedFields` (and the deprecated `selfLink`): serde skips them unbuilt.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct WireMeta {
    #[serde(default)]
    annotations: Option<BTreeMap<String, String>>,
    #[serde(default)]
    creation_timestamp: Option<Time>,
    #[serde(default)]
    deletion_grace_period_seconds: Option<i64>,
    #[serde(default)]
    deletion_timestamp: Option<Time>,
    #[serde(default)]
    finalizers: Option<Vec<String>>,
    #[serde(default)]
    generate_name: Option<String>,
    #[serde(default)]
    generation: Option<i64>,
    #[serde(default)]
    labels: Option<BTreeMap<String, String>>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    owner_references: Option<Vec<OwnerReference>>,
    #[serde(default)]
    resource_version: Option<String>,
    #[serde(default)]
    uid: Option<String>,
}

impl From<WireMeta> for ObjectMeta {
    fn from(meta: WireMeta) -> Self {
        ObjectMeta {
            annotations: meta.annotations,
            creation_timestamp: meta.creation_timestamp,
            deletion_grace_period_seconds: meta.deletion_grace_period_seconds,
            deletion_timestamp: meta.deletion_timestamp,
            finalizers: meta.finalizers,
            generate_name: meta.generate_name,
            generation: meta.generation,
            labels: meta.labels,
            managed_fields: None,
            name: meta.name,
            namespace: meta.namespace,
            owner_references: meta.owner_references,
            resource_version: meta.resource_version,
            self_link: None,
            uid: meta.uid,
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireStatus {
    #[serde(default)]
    phase: Option<String>,
    #[serde(default)]
    container_statuses: Option<Vec<ContainerStatus>>,
    #[serde(default)]
    init_container_statuses: Option<Vec<ContainerStatus>>,
    /// Only the `Ready` condition is kept (its transition time, for the canary soak).
    #[serde(default)]
    conditions: Option<Vec<PodCondition>>,
}

impl<'de> Deserialize<'de> for WatchedPod {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let wire = Wire::deserialize(deserializer)?;
        Ok(WatchedPod(Pod {
            metadata: wire.metadata.into(),
            spec: wire.spec.map(|spec| PodSpec {
                node_name: spec.node_name,
                ..PodSpec::default()
            }),
            status: wire.status.map(|status| PodStatus {
                phase: status.phase,
                container_statuses: status.container_statuses,
                init_container_statuses: status.init_container_statuses,
                conditions: status.conditions.map(|conditions| {
                    conditions
                        .into_iter()
                        .filter(|c| c.type_ == "Ready")
                        .map(|c| PodCondition {
                            type_: c.type_,
                            status: c.status,
                            last_transition_time: c.last_transition_time,
                            ..PodCondition::default()
                        })
                        .collect()
                }),
                ..PodStatus::default()
            }),
        }))
    }
}

/// The k8s-openapi `Resource` and `Metadata` impls of `$wrapper(pub $full)`, a type decoded in
/// part from `$full`'s JSON: it is requested, cached and watched as `$full` is.
macro_rules! partially_decoded {
    ($wrapper:ident, $full:ty) => {
        impl k8s_openapi::Resource for $wrapper {
            const API_VERSION: &'static str = <$full as k8s_openapi::Resource>::API_VERSION;
            const GROUP: &'static str = <$full as k8s_openapi::Resource>::GROUP;
            const KIND: &'static str = <$full as k8s_openapi::Resource>::KIND;
            const VERSION: &'static str = <$full as k8s_openapi::Resource>::VERSION;
            const URL_PATH_SEGMENT: &'static str =
                <$full as k8s_openapi::Resource>::URL_PATH_SEGMENT;
            type Scope = <$full as k8s_openapi::Resource>::Scope;
        }

        impl k8s_openapi::Metadata for $wrapper {
            type Ty = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

            fn metadata(&self) -> &Self::Ty {
                &self.0.metadata
            }

            fn metadata_mut(&mut self) -> &mut Self::Ty {
                &mut self.0.metadata
            }
        }
    };
}
pub(crate) use partially_decoded;

partially_decoded!(WatchedPod, Pod);

#[cfg(test)]
mod tests {
    use super::*;
    use canary_predicates::PodSummary;

    /// Every pod of `testdata/pods/` (healthy, crash-looping, init crash loop, image pull
    /// failure, running but not ready) summarises the same decoded whole or watched.
    #[test]
    fn a_watched_pod_summarises_like_the_whole_pod() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata/pods");
        let mut seen = 0;
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            let value: serde_json::Value = if path.extension().is_some_and(|e| e == "json") {
                serde_json::from_str(&text).unwrap_or_default()
            } else {
                serde_saphyr::from_str(&text).unwrap_or_default()
            };
            let whole: Pod = serde_json::from_value(value.clone()).unwrap_or_default();
            let watched: WatchedPod = serde_json::from_value(value).unwrap_or_default();
            assert_ne!(whole, Pod::default(), "{} decodes", path.display());
            assert_eq!(
                PodSummary::of(&watched.0),
                PodSummary::of(&whole),
                "{}",
                path.display()
            );
            assert!(
                watched
                    .0
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_none_or(|conditions| conditions.iter().all(|c| c.type_ == "Ready"
                        && c.reason.is_none()
                        && c.message.is_none()
                        && c.last_probe_time.is_none())),
                "the rest is left out: of the conditions, Ready's status and transition time"
            );
            seen += 1;
        }
        assert!(seen >= 6, "the pods of testdata/pods: {seen}");
    }

    /// A pod as kube-apiserver serves it, with the field sets of the DaemonSet controller and
    /// of KWOK's kubelet, decodes without them and with the rest of its metadata as the whole
    /// pod has it.
    #[test]
    fn a_watched_pod_leaves_the_managed_fields_out_and_keeps_the_rest_of_its_metadata() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../testdata/pods/kwok-daemonset-pod-managed-fields.json"
        );
        let text = std::fs::read_to_string(path).unwrap();
        let whole: Pod = serde_json::from_str(&text).unwrap();
        let managers: Vec<_> = whole
            .metadata
            .managed_fields
            .iter()
            .flatten()
            .filter_map(|entry| entry.manager.as_deref())
            .collect();
        assert_eq!(managers, ["kube-controller-manager", "kwok"]);
        let watched: WatchedPod = serde_json::from_str(&text).unwrap();
        let mut expected = whole.metadata.clone();
        expected.managed_fields = None;
        assert_eq!(watched.0.metadata, expected);
        assert!(watched.0.metadata.owner_references.is_some());
        assert!(watched.0.metadata.annotations.is_some());
    }
}
