//! What ties the DaemonSet controller's objects to their DaemonSet: the controller owner
//! reference and the labels it puts on the pods and ControllerRevisions it creates
//! (`pkg/controller/daemon/daemon_controller.go`, `pkg/controller/daemon/update.go`).
//!
//! Invariant: one definition of each, read by the controller model ([`super::daemonset`],
//! [`super::revision`]) and by the cluster task's indexes alike.

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

/// Label carrying the revision hash on pods and ControllerRevisions
/// (`DefaultDaemonSetUniqueLabelKey`).
pub const REVISION_HASH_LABEL: &str = "controller-revision-hash";
/// Label carrying the template generation on DaemonSet pods (`DaemonSetTemplateGenerationKey`).
pub const TEMPLATE_GENERATION_LABEL: &str = "pod-template-generation";

/// The owner reference the controller puts on what it creates (`NewControllerRef`).
pub fn controller_ref(ds: &DaemonSet) -> OwnerReference {
    OwnerReference {
        api_version: "apps/v1".to_owned(),
        kind: "DaemonSet".to_owned(),
        name: ds.metadata.name.clone().unwrap_or_default(),
        uid: ds.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// The uid of the object's controller, whatever its kind (`metav1.GetControllerOf`).
pub fn any_controller_uid(meta: &ObjectMeta) -> Option<String> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true))
        .map(|r| r.uid.clone())
}

/// The uid of the controller of `kind` that owns the object (`GetControllerOf`).
pub fn controller_uid(meta: &ObjectMeta, kind: &str) -> Option<String> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true) && r.kind == kind)
        .map(|r| r.uid.clone())
}
