//! One DaemonSet is driven by at most one CanaryDaemonSet (issue 47): the first claims it, any
//! other that names it (`spec.daemonSetName` or `spec.workloadRef`) fails with
//! `DaemonSetClaimed` naming the first, and writes or deletes nothing.
//!
//! # The record
//!
//! - A DaemonSet the controller created (`spec.template`) is claimed by its controller owner
//!   reference: written at creation, kept by the API server, and gone with the owner.
//! - A DaemonSet someone else owns (`spec.workloadRef`, typically GitOps') is claimed by the
//!   annotation [`CLAIM_ANNOTATION`], `<namespace>/<name>/<uid>` of the claimant, written once
//!   by a JSON patch whose `test` of `metadata.resourceVersion` makes two claims written at
//!   once exclusive: the second is refused (409) and its next pass sees the first.
//!
//! Why an annotation on the DaemonSet rather than a Lease per DaemonSet: the record must be
//! atomic with what it guards, readable from the cache every pass already reads, and survive
//! restarts and leader changes (it names the CanaryDaemonSet, not the replica, so a claim
//! written by a leader that then lost its lease stays valid for its successor). A Lease per
//! DaemonSet needs `create` on Leases in every namespace (more than the install grants today)
//! and a second object to clean up; an annotation is one field in an object the controller
//! already watches. GitOps tools leave it alone: Argo CD and Helm compare only the fields
//! they apply, Flux's server-side apply owns only its own fields, so the annotation is no
//! drift for them (a tool that strips it makes the next pass write it again, harmless).
//!
//! A claim passes on when its claimant is deleted, changes UID (deleted and created again),
//! or stops naming the DaemonSet: the claim is then stale, and the next claimant's pass
//! overwrites it. Only the leader writes (the lease's write guard), so two replicas cannot
//! both claim.

use std::sync::Arc;

use k8s_openapi::api::apps::v1::DaemonSet;
use kube::ResourceExt;

use crate::CanaryDaemonSet;

/// The annotation of a DaemonSet claimed through `spec.workloadRef`.
pub const CLAIM_ANNOTATION: &str = "canary.daemonset.dev/claimed-by";

/// Who claims a DaemonSet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claimant {
    /// The CanaryDaemonSet's namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Its UID.
    pub uid: String,
}

impl Claimant {
    /// `cds` as a claimant.
    pub fn of(cds: &CanaryDaemonSet) -> Self {
        Claimant {
            namespace: cds.namespace().unwrap_or_default(),
            name: cds.name_any(),
            uid: cds.uid().unwrap_or_default(),
        }
    }

    /// The annotation's value, `<namespace>/<name>/<uid>`; `None` when it is not one.
    pub fn parse(value: &str) -> Option<Self> {
        let mut parts = value.splitn(3, '/');
        let (namespace, name, uid) = (parts.next()?, parts.next()?, parts.next()?);
        if namespace.is_empty() || name.is_empty() || uid.is_empty() {
            return None;
        }
        Some(Claimant {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            uid: uid.to_owned(),
        })
    }

    /// The annotation's value.
    pub fn value(&self) -> String {
        format!("{}/{}/{}", self.namespace, self.name, self.uid)
    }
}

impl std::fmt::Display for Claimant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "CanaryDaemonSet {}/{} (uid {})",
            self.namespace, self.name, self.uid
        )
    }
}

/// What a DaemonSet's records say about `cds`'s claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimState {
    /// `cds` holds it (its owner, or its annotation).
    Ours,
    /// Nobody holds it: `cds` may claim it.
    Free,
    /// The cache says the holder is gone or names another DaemonSet: `cds` may take it once
    /// the API server confirms (a cache that has not listed the holder yet must not hand its
    /// claim over: see [`holds`]).
    Stale(Claimant),
    /// Another CanaryDaemonSet, alive and naming this DaemonSet, holds it.
    Other(Claimant),
}

/// The claim of `live` for `cds`; `lookup(namespace, name)` finds a CanaryDaemonSet in the
/// cache.
pub fn claim_state(
    live: &DaemonSet,
    cds: &CanaryDaemonSet,
    lookup: impl Fn(&str, &str) -> Option<Arc<CanaryDaemonSet>>,
) -> ClaimState {
    let ours = cds.uid().unwrap_or_default();
    let namespace = live.namespace().unwrap_or_default();
    // The controller owner, when it is a CanaryDaemonSet: the claim of a DaemonSet it created.
    let owner = live
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true) && o.kind == "CanaryDaemonSet");
    if let Some(owner) = owner {
        if owner.uid == ours {
            return ClaimState::Ours;
        }
        return ClaimState::Other(Claimant {
            namespace,
            name: owner.name.clone(),
            uid: owner.uid.clone(),
        });
    }
    let Some(claimant) = live
        .annotations()
        .get(CLAIM_ANNOTATION)
        .and_then(|value| Claimant::parse(value))
    else {
        return ClaimState::Free;
    };
    if claimant.uid == ours {
        return ClaimState::Ours;
    }
    let alive = lookup(&claimant.namespace, &claimant.name)
        .is_some_and(|holder| holds(&holder, &claimant, live));
    if alive {
        ClaimState::Other(claimant)
    } else {
        ClaimState::Stale(claimant)
    }
}

/// Whether `holder` (read from the cache or the API server) still holds `claimant`'s claim on
/// `live`: the same UID, not being deleted, in the DaemonSet's namespace, naming it.
pub fn holds(holder: &CanaryDaemonSet, claimant: &Claimant, live: &DaemonSet) -> bool {
    holder.uid().as_deref() == Some(claimant.uid.as_str())
        && holder.metadata.deletion_timestamp.is_none()
        && holder.namespace() == live.namespace()
        && holder.daemon_set_name() == live.name_any()
}

/// The JSON patch that claims `live` for `claimant`, only if `live` is unchanged since it was
/// read (its `resourceVersion`).
pub fn claim_patch(live: &DaemonSet, claimant: &Claimant) -> json_patch::Patch {
    let resource_version = live.resource_version().unwrap_or_default();
    let mut operations = vec![serde_json::json!({
        "op": "test",
        "path": "/metadata/resourceVersion",
        "value": resource_version
    })];
    if live.metadata.annotations.is_none() {
        operations
            .push(serde_json::json!({"op": "add", "path": "/metadata/annotations", "value": {}}));
    }
    operations.push(serde_json::json!({
        "op": "add",
        "path": format!("/metadata/annotations/{}", CLAIM_ANNOTATION.replace('/', "~1")),
        "value": claimant.value()
    }));
    serde_json::from_value(serde_json::Value::Array(operations)).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cds(name: &str, uid: &str, workload: &str) -> CanaryDaemonSet {
        let mut cds: CanaryDaemonSet = serde_json::from_value(json!({
            "apiVersion": "canary.daemonset.dev/v1alpha1",
            "kind": "CanaryDaemonSet",
            "metadata": {"name": name, "namespace": "ns", "uid": uid},
            "spec": {
                "target": {"version": "v1"},
                "workloadRef": {"name": workload},
                "strategy": {"driver": "Pods"}
            }
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        cds.metadata.uid = Some(uid.to_owned());
        cds
    }

    fn ds(annotation: Option<&str>, owner: Option<(&str, &str)>) -> DaemonSet {
        let mut ds = DaemonSet::default();
        ds.metadata.name = Some("agent".into());
        ds.metadata.namespace = Some("ns".into());
        ds.metadata.resource_version = Some("7".into());
        if let Some(value) = annotation {
            ds.metadata.annotations =
                Some([(CLAIM_ANNOTATION.to_owned(), value.to_owned())].into());
        }
        if let Some((name, uid)) = owner {
            ds.metadata.owner_references = Some(vec![
                k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                    api_version: "canary.daemonset.dev/v1alpha1".into(),
                    kind: "CanaryDaemonSet".into(),
                    name: name.into(),
                    uid: uid.into(),
                    controller: Some(true),
                    ..Default::default()
                },
            ]);
        }
        ds
    }

    #[test]
    fn the_first_holds_and_the_claim_passes_on_when_it_goes_or_looks_elsewhere() {
        let first = Arc::new(cds("first", "u1", "agent"));
        let second = cds("second", "u2", "agent");
        let claimed = ds(Some("ns/first/u1"), None);
        let alive = |ns: &str, name: &str| (ns == "ns" && name == "first").then(|| first.clone());
        assert_eq!(claim_state(&claimed, &first, alive), ClaimState::Ours);
        assert_eq!(
            claim_state(&claimed, &second, alive),
            ClaimState::Other(Claimant::parse("ns/first/u1").unwrap_or_else(|| panic!()))
        );
        // Deleted, recreated (another UID), or naming another DaemonSet: stale.
        let stale = ClaimState::Stale(Claimant::parse("ns/first/u1").unwrap_or_else(|| panic!()));
        assert_eq!(claim_state(&claimed, &second, |_, _| None), stale);
        let recreated = Arc::new(cds("first", "u9", "agent"));
        assert_eq!(
            claim_state(&claimed, &second, |_, _| Some(recreated.clone())),
            stale
        );
        let elsewhere = Arc::new(cds("first", "u1", "other-agent"));
        assert_eq!(
            claim_state(&claimed, &second, |_, _| Some(elsewhere.clone())),
            stale
        );
        // Unclaimed, or an annotation that is no claim.
        assert_eq!(
            claim_state(&ds(None, None), &second, alive),
            ClaimState::Free
        );
        assert_eq!(
            claim_state(&ds(Some("junk"), None), &second, alive),
            ClaimState::Free
        );
    }

    #[test]
    fn a_daemon_set_a_canary_daemon_set_created_is_claimed_by_its_owner() {
        let owned = ds(None, Some(("first", "u1")));
        let first = cds("first", "u1", "agent");
        let second = cds("second", "u2", "agent");
        assert_eq!(claim_state(&owned, &first, |_, _| None), ClaimState::Ours);
        assert!(matches!(
            claim_state(&owned, &second, |_, _| None),
            ClaimState::Other(Claimant { name, .. }) if name == "first"
        ));
    }

    #[test]
    fn the_claim_patch_tests_the_resource_version() {
        let claimant = Claimant::of(&cds("second", "u2", "agent"));
        let patch =
            serde_json::to_value(claim_patch(&ds(None, None), &claimant)).unwrap_or_default();
        assert_eq!(
            patch[0],
            json!({"op": "test", "path": "/metadata/resourceVersion", "value": "7"})
        );
        assert_eq!(patch[1]["path"], "/metadata/annotations");
        assert_eq!(
            patch[2]["path"],
            "/metadata/annotations/canary.daemonset.dev~1claimed-by"
        );
        assert_eq!(patch[2]["value"], "ns/second/u2");
    }
}
