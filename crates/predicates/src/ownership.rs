//! Which DaemonSet a pod belongs to: its controller `ownerReference`.

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use crate::PodFacts;

/// The pod's controller owner: the first owner reference with `controller: true`.
///
/// Kubernetes allows at most one such reference per object.
pub fn controller_owner(pod: &Pod) -> Option<&OwnerReference> {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .find(|owner| owner.controller == Some(true))
}

/// How a pod is matched to its DaemonSet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OwnerMatch<'a> {
    /// The reference rule: the controller owner's name only (spec quirk 9). Kind, UID and namespace are
    /// not checked, so a same-named ReplicaSet's pods, or pods of a deleted and re-created DaemonSet,
    /// match too.
    NameOnly {
        /// The DaemonSet's name.
        name: &'a str,
    },
    /// The production rule: the controller owner's name **and** UID, with kind `DaemonSet`.
    Uid {
        /// The DaemonSet's name.
        name: &'a str,
        /// The DaemonSet's `metadata.uid`.
        uid: &'a str,
    },
}

impl<'a> OwnerMatch<'a> {
    /// [`OwnerMatch::Uid`] when the DaemonSet has a UID (any object read from a cluster does),
    /// otherwise [`OwnerMatch::NameOnly`]. A DaemonSet without a name matches owners named `""`.
    pub fn for_daemonset(ds: &'a DaemonSet) -> Self {
        let name = ds.metadata.name.as_deref().unwrap_or("");
        match ds.metadata.uid.as_deref() {
            Some(uid) => OwnerMatch::Uid { name, uid },
            None => OwnerMatch::NameOnly { name },
        }
    }
}

/// The `kind` of a DaemonSet owner reference.
const DAEMONSET_KIND: &str = "DaemonSet";

/// Whether the pod's controller owner matches `owner`. Pods without a controller owner belong to no one.
pub fn pod_is_owned_by<P: PodFacts + ?Sized>(pod: &P, owner: &OwnerMatch<'_>) -> bool {
    let Some(controller) = pod.controller() else {
        return false;
    };
    match *owner {
        OwnerMatch::NameOnly { name } => controller.name == name,
        OwnerMatch::Uid { name, uid } => {
            controller.name == name && controller.uid == uid && controller.kind == DAEMONSET_KIND
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn owner(kind: &str, name: &str, uid: &str, controller: Option<bool>) -> OwnerReference {
        OwnerReference {
            api_version: "apps/v1".into(),
            kind: kind.into(),
            name: name.into(),
            uid: uid.into(),
            controller,
            block_owner_deletion: Some(true),
        }
    }

    fn pod_owned(owners: Option<Vec<OwnerReference>>) -> Pod {
        Pod {
            metadata: ObjectMeta {
                owner_references: owners,
                ..ObjectMeta::default()
            },
            ..Pod::default()
        }
    }

    #[test]
    fn controller_owner_is_the_one_with_controller_true() {
        let pod = pod_owned(Some(vec![
            owner("Node", "n1", "u0", None),
            owner("ConfigMap", "cm", "u1", Some(false)),
            owner("DaemonSet", "virt-handler", "u2", Some(true)),
        ]));
        assert_eq!(controller_owner(&pod).map(|o| o.uid.as_str()), Some("u2"));
        assert_eq!(controller_owner(&pod_owned(None)), None);
        assert_eq!(
            controller_owner(&pod_owned(Some(vec![owner("DaemonSet", "a", "u", None)]))),
            None
        );
    }

    #[test]
    fn ownership_table() {
        let name_only = OwnerMatch::NameOnly {
            name: "virt-handler",
        };
        let by_uid = OwnerMatch::Uid {
            name: "virt-handler",
            uid: "random-id",
        };
        let rows = [
            (
                "exact DaemonSet owner",
                owner("DaemonSet", "virt-handler", "random-id", Some(true)),
                true,
                true,
            ),
            (
                "quirk 9: other uid (re-created DS)",
                owner("DaemonSet", "virt-handler", "other", Some(true)),
                true,
                false,
            ),
            (
                "quirk 9: same name, other kind",
                owner("ReplicaSet", "virt-handler", "random-id", Some(true)),
                true,
                false,
            ),
            (
                "other name",
                owner("DaemonSet", "kube-proxy", "random-id", Some(true)),
                false,
                false,
            ),
            (
                "not the controller",
                owner("DaemonSet", "virt-handler", "random-id", Some(false)),
                false,
                false,
            ),
            (
                "controller unset",
                owner("DaemonSet", "virt-handler", "random-id", None),
                false,
                false,
            ),
        ];
        for (case, reference, by_name_expected, by_uid_expected) in rows {
            let pod = pod_owned(Some(vec![reference]));
            assert_eq!(
                pod_is_owned_by(&pod, &name_only),
                by_name_expected,
                "name only: {case}"
            );
            assert_eq!(
                pod_is_owned_by(&pod, &by_uid),
                by_uid_expected,
                "uid: {case}"
            );
        }
        assert!(!pod_is_owned_by(&pod_owned(None), &name_only));
    }

    #[test]
    fn for_daemonset_prefers_uid() {
        let mut ds = DaemonSet {
            metadata: ObjectMeta {
                name: Some("virt-handler".into()),
                ..ObjectMeta::default()
            },
            ..DaemonSet::default()
        };
        assert_eq!(
            OwnerMatch::for_daemonset(&ds),
            OwnerMatch::NameOnly {
                name: "virt-handler"
            }
        );
        ds.metadata.uid = Some("random-id".into());
        assert_eq!(
            OwnerMatch::for_daemonset(&ds),
            OwnerMatch::Uid {
                name: "virt-handler",
                uid: "random-id"
            }
        );
    }
}
