//! The reference's metadata comparison (`resourcemerge.EnsureObjectMeta`, spec section 3).
//!
//! Desired metadata is compared with the live object's: a set desired namespace or name that
//! differs, a desired label or annotation that is missing or different (a key ending in `-` means
//! "must be absent"), or an owner reference that would be added, changed or removed (matched on
//! name, kind and API group; a UID ending in `-` means "remove") marks the object modified. Keys
//! and owner references only present on the live object are ignored.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

/// Whether merging `desired` into `live` would change `live` (reference `objectMetaModified`).
pub fn object_meta_modified(desired: &ObjectMeta, live: &ObjectMeta) -> bool {
    string_differs(desired.namespace.as_deref(), live.namespace.as_deref())
        || string_differs(desired.name.as_deref(), live.name.as_deref())
        || map_modified(desired.labels.as_ref(), live.labels.as_ref())
        || map_modified(desired.annotations.as_ref(), live.annotations.as_ref())
        || owner_refs_modified(
            desired.owner_references.as_deref(),
            live.owner_references.as_deref(),
        )
}

/// EnsureString: only a non-empty desired value is enforced.
fn string_differs(desired: Option<&str>, live: Option<&str>) -> bool {
    match desired {
        Some(d) if !d.is_empty() => live != Some(d),
        _ => false,
    }
}

fn map_modified(
    desired: Option<&BTreeMap<String, String>>,
    live: Option<&BTreeMap<String, String>>,
) -> bool {
    let Some(desired) = desired else { return false };
    desired
        .iter()
        .any(|(key, value)| match key.strip_suffix('-') {
            Some(removed) => live.is_some_and(|l| l.contains_key(removed)),
            None => live.and_then(|l| l.get(key)) != Some(value),
        })
}

fn owner_refs_modified(
    desired: Option<&[OwnerReference]>,
    live: Option<&[OwnerReference]>,
) -> bool {
    let live = live.unwrap_or_default();
    desired.unwrap_or_default().iter().any(|wanted| {
        let remove = wanted.uid.ends_with('-');
        match live.iter().find(|have| owner_ref_matches(have, wanted)) {
            None => !remove,
            Some(_) if remove => true,
            Some(have) => have != wanted,
        }
    })
}

fn owner_ref_matches(a: &OwnerReference, b: &OwnerReference) -> bool {
    a.name == b.name && a.kind == b.kind && api_group(&a.api_version) == api_group(&b.api_version)
}

fn api_group(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(group, _)| group)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(labels: &[(&str, &str)], annotations: &[(&str, &str)]) -> ObjectMeta {
        let map = |kv: &[(&str, &str)]| {
            Some(
                kv.iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            )
        };
        ObjectMeta {
            name: Some("ds".into()),
            namespace: Some("ns".into()),
            labels: map(labels),
            annotations: map(annotations),
            ..Default::default()
        }
    }

    fn owner(api_version: &str, kind: &str, name: &str, uid: &str) -> OwnerReference {
        OwnerReference {
            api_version: api_version.into(),
            kind: kind.into(),
            name: name.into(),
            uid: uid.into(),
            controller: Some(true),
            block_owner_deletion: None,
        }
    }

    #[test]
    fn identical_and_superset_live_are_unmodified() {
        let desired = meta(&[("a", "1")], &[("v", "x")]);
        assert!(!object_meta_modified(&desired, &desired));
        let live = meta(&[("a", "1"), ("extra", "y")], &[("v", "x"), ("other", "z")]);
        assert!(!object_meta_modified(&desired, &live));
    }

    #[test]
    fn missing_or_different_keys_are_modified() {
        let desired = meta(&[("a", "1")], &[("v", "x")]);
        assert!(object_meta_modified(
            &desired,
            &meta(&[("a", "2")], &[("v", "x")])
        ));
        assert!(object_meta_modified(&desired, &meta(&[], &[("v", "x")])));
        assert!(object_meta_modified(
            &desired,
            &meta(&[("a", "1")], &[("v", "y")])
        ));
        let mut no_maps = meta(&[], &[]);
        no_maps.labels = None;
        no_maps.annotations = None;
        assert!(object_meta_modified(&desired, &no_maps));
    }

    #[test]
    fn dash_suffix_means_must_be_absent() {
        let desired = meta(&[("gone-", "")], &[]);
        assert!(object_meta_modified(&desired, &meta(&[("gone", "x")], &[])));
        assert!(!object_meta_modified(
            &desired,
            &meta(&[("kept", "x")], &[])
        ));
    }

    #[test]
    fn name_and_namespace_only_when_set() {
        let mut desired = meta(&[], &[]);
        desired.namespace = Some("other".into());
        assert!(object_meta_modified(&desired, &meta(&[], &[])));
        desired.namespace = None;
        desired.name = Some(String::new());
        assert!(!object_meta_modified(&desired, &meta(&[], &[])));
    }

    #[test]
    fn owner_refs_added_changed_removed() {
        let wanted = owner(
            "canary.daemonset.dev/v1alpha1",
            "CanaryDaemonSet",
            "c",
            "u1",
        );
        let mut desired = meta(&[], &[]);
        desired.owner_references = Some(vec![wanted.clone()]);
        let mut live = meta(&[], &[]);
        assert!(object_meta_modified(&desired, &live), "added");
        live.owner_references = Some(vec![wanted.clone()]);
        assert!(!object_meta_modified(&desired, &live));
        // Another version of the same group matches, and the difference is then a change.
        live.owner_references = Some(vec![owner(
            "canary.daemonset.dev/v1",
            "CanaryDaemonSet",
            "c",
            "u1",
        )]);
        assert!(object_meta_modified(&desired, &live), "changed");
        // An extra live owner is ignored.
        live.owner_references = Some(vec![wanted.clone(), owner("v1", "Node", "n", "u2")]);
        assert!(!object_meta_modified(&desired, &live));
        // Removal marker.
        desired.owner_references = Some(vec![owner("v1", "Node", "n", "u2-")]);
        assert!(object_meta_modified(&desired, &live), "removed");
        live.owner_references = Some(vec![wanted]);
        assert!(!object_meta_modified(&desired, &live), "nothing to remove");
    }
}
