//! The install-strategy target, its annotation keys, and the "up to date" / "updated" predicates.

use std::collections::BTreeMap;

use crate::PodFacts;
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};

/// KubeVirt's annotation carrying the install-strategy version.
pub const KUBEVIRT_VERSION_ANNOTATION: &str = "kubevirt.io/install-strategy-version";
/// KubeVirt's annotation carrying the install-strategy image registry.
pub const KUBEVIRT_REGISTRY_ANNOTATION: &str = "kubevirt.io/install-strategy-registry";
/// KubeVirt's annotation carrying the install-strategy (deployment) identifier.
pub const KUBEVIRT_ID_ANNOTATION: &str = "kubevirt.io/install-strategy-identifier";
/// KubeVirt's annotation carrying the KubeVirt CR's `metadata.generation` on the DaemonSets
/// virt-operator writes (not on their pods): any CR spec edit changes it (spec quirk 4).
pub const KUBEVIRT_GENERATION_ANNOTATION: &str = "kubevirt.io/generation";
/// The label the Kubernetes DaemonSet controller puts on every pod (and every `ControllerRevision`)
/// with the hash of the pod template revision it was created from.
pub const CONTROLLER_REVISION_HASH_LABEL: &str = "controller-revision-hash";

/// The three annotation keys that carry a [`Target`].
///
/// [`Default`] gives KubeVirt's keys, so that pods managed by KubeVirt and by this project read the same.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnnotationKeys {
    /// Key of the version annotation.
    pub version: String,
    /// Key of the registry annotation.
    pub registry: String,
    /// Key of the deployment-id annotation.
    pub id: String,
}

impl Default for AnnotationKeys {
    fn default() -> Self {
        Self {
            version: KUBEVIRT_VERSION_ANNOTATION.to_owned(),
            registry: KUBEVIRT_REGISTRY_ANNOTATION.to_owned(),
            id: KUBEVIRT_ID_ANNOTATION.to_owned(),
        }
    }
}

impl AnnotationKeys {
    /// The same three key names as KubeVirt's under another prefix:
    /// `<prefix>/install-strategy-version`, `-registry` and `-identifier`.
    ///
    /// ```
    /// let keys = canary_predicates::AnnotationKeys::with_prefix("canary.example.com");
    /// assert_eq!(keys.version, "canary.example.com/install-strategy-version");
    /// assert_eq!(keys.id, "canary.example.com/install-strategy-identifier");
    /// ```
    pub fn with_prefix(prefix: &str) -> Self {
        Self {
            version: format!("{prefix}/install-strategy-version"),
            registry: format!("{prefix}/install-strategy-registry"),
            id: format!("{prefix}/install-strategy-identifier"),
        }
    }
}

/// What a rollout moves to: the values KubeVirt keeps in `status.targetKubeVirtVersion`,
/// `targetKubeVirtRegistry` and `targetDeploymentID`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Target {
    /// Target version.
    pub version: String,
    /// Target image registry.
    pub registry: String,
    /// Target deployment id (any change of it is a new target).
    pub deployment_id: String,
}

impl Target {
    /// The three annotations to inject on the DaemonSet and on its pod template.
    pub fn annotations(&self, keys: &AnnotationKeys) -> BTreeMap<String, String> {
        BTreeMap::from([
            (keys.version.clone(), self.version.clone()),
            (keys.registry.clone(), self.registry.clone()),
            (keys.id.clone(), self.deployment_id.clone()),
        ])
    }

    /// The target a DaemonSet's install-strategy annotations name, a missing annotation (or a
    /// missing annotation map) reading as `""`, as KubeVirt's `DaemonSetIsUpToDate` reads them.
    pub fn of_daemon_set(ds: &DaemonSet, keys: &AnnotationKeys) -> Self {
        let annotation = |key: &str| {
            ds.metadata
                .annotations
                .as_ref()
                .and_then(|annotations| annotations.get(key))
                .cloned()
                .unwrap_or_default()
        };
        Target {
            version: annotation(&keys.version),
            registry: annotation(&keys.registry),
            deployment_id: annotation(&keys.id),
        }
    }

    /// `(key, value)` pairs in a fixed order, for comparisons.
    fn pairs<'a>(&'a self, keys: &'a AnnotationKeys) -> [(&'a str, &'a str); 3] {
        [
            (&keys.version, &self.version),
            (&keys.registry, &self.registry),
            (&keys.id, &self.deployment_id),
        ]
    }
}

/// KubeVirt's `DaemonSetIsUpToDate`: the DaemonSet's three annotations equal the target.
///
/// A missing annotation, or a missing annotation map, reads as `""`: a DaemonSet without annotations is
/// up to date for an all-empty target. Nothing else (template, other annotations) is compared.
pub fn daemonset_is_up_to_date(ds: &DaemonSet, target: &Target, keys: &AnnotationKeys) -> bool {
    Target::of_daemon_set(ds, keys) == *target
}

/// KubeVirt's `PodIsUpToDate`: the pod carries all three annotations and they equal the target.
///
/// Unlike [`daemonset_is_up_to_date`], an **absent** key makes the pod not up to date, even for an
/// empty target value.
pub fn pod_is_up_to_date<P: PodFacts + ?Sized>(
    pod: &P,
    target: &Target,
    keys: &AnnotationKeys,
) -> bool {
    target
        .pairs(keys)
        .iter()
        .all(|(key, wanted)| pod.annotation(key) == Some(&**wanted))
}

/// The pod's `controller-revision-hash` label, if any.
pub fn pod_revision_hash<P: PodFacts + ?Sized>(pod: &P) -> Option<&str> {
    pod.revision_hash()
}

/// The hash of the newest `ControllerRevision` (highest `revision`) among `revisions`, read from its
/// `controller-revision-hash` label.
///
/// Pass only the revisions owned by one DaemonSet. The DaemonSet controller gives the revision of the
/// current template the highest number (it renumbers an old revision when a template is rolled back
/// to), so this is the DaemonSet's current revision once the controller has observed the DaemonSet's
/// generation (`status.observedGeneration == metadata.generation`); before that it is the previous one.
/// Revisions without the label are skipped.
pub fn current_revision_hash<'r>(
    revisions: impl IntoIterator<Item = &'r ControllerRevision>,
) -> Option<&'r str> {
    revisions
        .into_iter()
        .filter_map(|revision| {
            let hash = revision
                .metadata
                .labels
                .as_ref()?
                .get(CONTROLLER_REVISION_HASH_LABEL)?;
            Some((revision.revision, hash.as_str()))
        })
        .max_by_key(|(number, _)| *number)
        .map(|(_, hash)| hash)
}

/// How to decide that a pod runs the new version ("updated"): the one definition of an updated
/// pod, one rule per driver and compatibility. The MaxUnavailable driver counts its pods with
/// [`UpdatedRule::Annotations`] (`compatibility: KubeVirt`) or
/// [`UpdatedRule::AnnotationsAndRevision`] (the default); the Pods driver, the `status --nodes`
/// ledger and so the node metrics judge them by [`UpdatedRule::Revision`], through
/// [`pod_runs_revision`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpdatedRule {
    /// The reference rule: the install-strategy annotations only ([`pod_is_up_to_date`]).
    ///
    /// Pods from an older template with the same target count as updated (spec quirk 6), so template
    /// changes that keep the target and `kubectl rollout restart` go unnoticed (kubevirt#11489, #18133).
    Annotations,
    /// The annotations **and** `controller-revision-hash == revision_hash`, the DaemonSet's current
    /// revision (see [`current_revision_hash`]). Sees every template change.
    AnnotationsAndRevision {
        /// The DaemonSet's current revision hash.
        revision_hash: String,
    },
    /// `controller-revision-hash == revision_hash` alone ([`pod_runs_revision`]): the Pods
    /// driver's rule, which a DaemonSet whose template belongs to someone else (Helm, Argo CD),
    /// with no install-strategy annotations, needs too.
    Revision {
        /// The DaemonSet's current revision hash.
        revision_hash: String,
    },
}

/// Whether `pod` counts as updated under `rule`.
pub fn pod_is_updated<P: PodFacts + ?Sized>(
    pod: &P,
    target: &Target,
    keys: &AnnotationKeys,
    rule: &UpdatedRule,
) -> bool {
    match rule {
        UpdatedRule::Annotations => pod_is_up_to_date(pod, target, keys),
        UpdatedRule::AnnotationsAndRevision { revision_hash } => {
            pod_is_up_to_date(pod, target, keys) && pod_runs_revision(pod, revision_hash)
        }
        UpdatedRule::Revision { revision_hash } => pod_runs_revision(pod, revision_hash),
    }
}

/// Whether `pod` runs the DaemonSet revision `revision_hash` (its `controller-revision-hash`
/// label): an updated pod under [`UpdatedRule::Revision`], the Pods driver's rule, for callers
/// that judge every pod of a DaemonSet against one revision without building the rule.
pub fn pod_runs_revision<P: PodFacts + ?Sized>(pod: &P, revision_hash: &str) -> bool {
    pod_revision_hash(pod) == Some(revision_hash)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn custom_target() -> Target {
        Target {
            version: "custom.version".into(),
            registry: "custom.registry".into(),
            deployment_id: "custom.id".into(),
        }
    }

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn ds_with(annotations: Option<BTreeMap<String, String>>) -> DaemonSet {
        DaemonSet {
            metadata: ObjectMeta {
                annotations,
                ..ObjectMeta::default()
            },
            ..DaemonSet::default()
        }
    }

    fn pod_with(
        annotations: Option<BTreeMap<String, String>>,
        labels: Option<BTreeMap<String, String>>,
    ) -> Pod {
        Pod {
            metadata: ObjectMeta {
                annotations,
                labels,
                ..ObjectMeta::default()
            },
            ..Pod::default()
        }
    }

    /// (case, annotations, target, expected)
    type Row<'a> = (&'a str, Option<BTreeMap<String, String>>, &'a Target, bool);

    const V: &str = KUBEVIRT_VERSION_ANNOTATION;
    const R: &str = KUBEVIRT_REGISTRY_ANNOTATION;
    const I: &str = KUBEVIRT_ID_ANNOTATION;

    #[test]
    fn target_annotations_use_the_given_keys() {
        let keys = AnnotationKeys::with_prefix("example.org");
        let got = custom_target().annotations(&keys);
        assert_eq!(
            got,
            map(&[
                ("example.org/install-strategy-version", "custom.version"),
                ("example.org/install-strategy-registry", "custom.registry"),
                ("example.org/install-strategy-identifier", "custom.id"),
            ])
        );
        assert_eq!(
            AnnotationKeys::default(),
            AnnotationKeys::with_prefix("kubevirt.io")
        );
    }

    #[test]
    fn daemonset_up_to_date_table() {
        let keys = AnnotationKeys::default();
        let empty = Target::default();
        let custom = custom_target();
        let custom_no_registry = Target {
            registry: String::new(),
            ..custom.clone()
        };
        let full = map(&[
            (V, "custom.version"),
            (R, "custom.registry"),
            (I, "custom.id"),
        ]);
        let rows: Vec<Row<'_>> = vec![
            (
                "nil map, empty target: missing reads as empty",
                None,
                &empty,
                true,
            ),
            ("empty map, empty target", Some(map(&[])), &empty, true),
            ("nil map, custom target", None, &custom, false),
            ("all three match", Some(full.clone()), &custom, true),
            (
                "all three set, empty target",
                Some(full.clone()),
                &empty,
                false,
            ),
            (
                "explicit empty values equal empty target",
                Some(map(&[(V, ""), (R, ""), (I, "")])),
                &empty,
                true,
            ),
            (
                "registry missing, target registry empty",
                Some(map(&[(V, "custom.version"), (I, "custom.id")])),
                &custom_no_registry,
                true,
            ),
            (
                "version differs",
                Some(map(&[(V, "old"), (R, "custom.registry"), (I, "custom.id")])),
                &custom,
                false,
            ),
            (
                "id differs",
                Some(map(&[
                    (V, "custom.version"),
                    (R, "custom.registry"),
                    (I, "old"),
                ])),
                &custom,
                false,
            ),
            (
                "extra annotations are ignored",
                Some({
                    let mut m = full.clone();
                    m.insert("kubevirt.io/customizer-identifier".into(), "x".into());
                    m
                }),
                &custom,
                true,
            ),
        ];
        for (case, annotations, target, expected) in rows {
            assert_eq!(
                daemonset_is_up_to_date(&ds_with(annotations), target, &keys),
                expected,
                "{case}"
            );
        }
    }

    #[test]
    fn pod_up_to_date_table() {
        let keys = AnnotationKeys::default();
        let empty = Target::default();
        let custom = custom_target();
        let rows: Vec<Row<'_>> = vec![
            (
                "nil map, empty target: absent is not empty",
                None,
                &empty,
                false,
            ),
            ("empty map, empty target", Some(map(&[])), &empty, false),
            (
                "two of three keys, empty target",
                Some(map(&[(V, ""), (R, "")])),
                &empty,
                false,
            ),
            (
                "three empty values, empty target",
                Some(map(&[(V, ""), (R, ""), (I, "")])),
                &empty,
                true,
            ),
            (
                "all three match",
                Some(map(&[
                    (V, "custom.version"),
                    (R, "custom.registry"),
                    (I, "custom.id"),
                ])),
                &custom,
                true,
            ),
            (
                "stale pod (targets copied when empty)",
                Some(map(&[(V, ""), (R, ""), (I, "")])),
                &custom,
                false,
            ),
            (
                "registry differs",
                Some(map(&[
                    (V, "custom.version"),
                    (R, "other"),
                    (I, "custom.id"),
                ])),
                &custom,
                false,
            ),
        ];
        for (case, annotations, target, expected) in rows {
            assert_eq!(
                pod_is_up_to_date(&pod_with(annotations, None), target, &keys),
                expected,
                "{case}"
            );
        }
    }

    #[test]
    fn configured_keys_are_the_ones_read() {
        let keys = AnnotationKeys::with_prefix("canary.example.com");
        let target = custom_target();
        let pod = pod_with(Some(target.annotations(&keys)), None);
        assert!(pod_is_up_to_date(&pod, &target, &keys));
        assert!(!pod_is_up_to_date(
            &pod,
            &target,
            &AnnotationKeys::default()
        ));
        let ds = ds_with(Some(target.annotations(&keys)));
        assert!(daemonset_is_up_to_date(&ds, &target, &keys));
        assert!(!daemonset_is_up_to_date(
            &ds,
            &target,
            &AnnotationKeys::default()
        ));
    }

    #[test]
    fn updated_rule_table() {
        let keys = AnnotationKeys::default();
        let target = custom_target();
        let fresh = Some(target.annotations(&keys));
        let stale = Some(Target::default().annotations(&keys));
        let hash = |h: &str| Some(map(&[(CONTROLLER_REVISION_HASH_LABEL, h)]));
        let by_revision = UpdatedRule::AnnotationsAndRevision {
            revision_hash: "new".into(),
        };
        let rows = [
            (
                "quirk 6: same target, old template, annotations rule",
                fresh.clone(),
                hash("old"),
                UpdatedRule::Annotations,
                true,
            ),
            (
                "same target, old template, revision rule",
                fresh.clone(),
                hash("old"),
                by_revision.clone(),
                false,
            ),
            (
                "same target, new template",
                fresh.clone(),
                hash("new"),
                by_revision.clone(),
                true,
            ),
            (
                "no revision label",
                fresh.clone(),
                None,
                by_revision.clone(),
                false,
            ),
            (
                "new template, stale target",
                stale.clone(),
                hash("new"),
                by_revision.clone(),
                false,
            ),
            (
                "stale target, annotations rule",
                stale,
                None,
                UpdatedRule::Annotations,
                false,
            ),
        ];
        for (case, annotations, labels, rule, expected) in rows {
            let pod = pod_with(annotations, labels);
            assert_eq!(
                pod_is_updated(&pod, &target, &keys, &rule),
                expected,
                "{case}"
            );
        }
    }

    #[test]
    fn revision_hash_label() {
        assert_eq!(pod_revision_hash(&pod_with(None, None)), None);
        let pod = pod_with(
            None,
            Some(map(&[(CONTROLLER_REVISION_HASH_LABEL, "69494898cd")])),
        );
        assert_eq!(pod_revision_hash(&pod), Some("69494898cd"));
    }

    #[test]
    fn current_revision_is_the_highest_numbered() {
        let revision = |number: i64, hash: Option<&str>| ControllerRevision {
            metadata: ObjectMeta {
                labels: hash.map(|h| map(&[(CONTROLLER_REVISION_HASH_LABEL, h)])),
                ..ObjectMeta::default()
            },
            revision: number,
            ..ControllerRevision::default()
        };
        let revisions = [
            revision(3, Some("c")),
            revision(5, Some("e")),
            revision(7, None),
            revision(4, Some("d")),
        ];
        assert_eq!(current_revision_hash(&revisions), Some("e"));
        assert_eq!(current_revision_hash(&[]), None);
        assert_eq!(current_revision_hash(&[revision(1, None)]), None);
    }
}
