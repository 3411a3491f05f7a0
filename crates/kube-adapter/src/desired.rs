//! Building the desired DaemonSet from a `CanaryDaemonSet`.
//!
//! The desired object is the template plus injected metadata: the install-strategy annotations
//! (on the DaemonSet and on the pod template), the [`OWNER_LABEL`] (on both, so that the pod and
//! ControllerRevision watches can use a label selector) and the CanaryDaemonSet as controller
//! owner. Nothing here reads the cluster.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{
    DaemonSet, DaemonSetSpec, DaemonSetUpdateStrategy, RollingUpdateDaemonSet,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;

use canary_predicates::{
    AnnotationKeys, KUBEVIRT_GENERATION_ANNOTATION, MaxUnavailableWire, Target,
};
use canary_state_machine::{Compatibility, Driver, LiveMaxUnavailable, MaxUnavailable};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::Error;
use crate::crd::{CanaryDaemonSet, DaemonSetTemplate, TargetSpec};

/// Label set on the owned DaemonSet and its pod template; its value is the CanaryDaemonSet name.
pub const OWNER_LABEL: &str = "canary.daemonset.dev/owner";

/// The resolved install-strategy target of `cds`: the annotation keys from
/// `spec.annotationKeys` (default KubeVirt's) and the target, its version from
/// [`target_version`] and its deployment id defaulting to [`template_hash`].
///
/// # Errors
///
/// [`Error::InvalidSpec`] when the version cannot be resolved (see [`target_version`]).
pub fn target_of(cds: &CanaryDaemonSet) -> Result<(AnnotationKeys, Target), Error> {
    let keys = match &cds.spec.annotation_keys {
        Some(k) => AnnotationKeys {
            version: k.version.clone(),
            registry: k.registry.clone(),
            id: k.id.clone(),
        },
        None => AnnotationKeys::default(),
    };
    let spec = &cds.spec.target;
    let deployment_id = match (&spec.deployment_id, &cds.spec.template) {
        (Some(id), _) => id.clone(),
        (None, Some(template)) => template_hash(template)?,
        // A referenced DaemonSet: its pods carry no install-strategy annotations, the revision
        // says which are updated (`UpdatedRule::Revision`).
        (None, None) => String::new(),
    };
    let target = Target {
        version: target_version(spec, cds.spec.template.as_ref().map(|t| &t.spec))?,
        registry: spec.registry.clone(),
        deployment_id,
    };
    Ok((keys, target))
}

/// The version `target` names: `version` as written, or the tag of the image of the
/// DaemonSet spec's container `fromContainer` (`registry:5000/agent:v2@sha256:…` gives `v2`).
///
/// `spec` is the template's DaemonSet spec; `None` for a referenced DaemonSet (`workloadRef`),
/// whose `fromContainer` is resolved from the live DaemonSet by each pass (an empty version
/// here).
///
/// # Errors
///
/// [`Error::InvalidSpec`] with the message the user sees: neither or both set, no container
/// of that name, or an image without a tag.
pub fn target_version(target: &TargetSpec, spec: Option<&DaemonSetSpec>) -> Result<String, Error> {
    let invalid = |message: String| Err(Error::InvalidSpec(message));
    let container = match (target.version.as_str(), target.from_container.as_deref()) {
        ("", Some(container)) if !container.is_empty() => container,
        (version, None) if !version.is_empty() => return Ok(version.to_owned()),
        ("", None) => return invalid("spec.target.version must not be empty".to_owned()),
        _ => {
            return invalid(
                "set exactly one of spec.target.version and spec.target.fromContainer".to_owned(),
            );
        }
    };
    let Some(spec) = spec else {
        return Ok(String::new());
    };
    let containers = spec
        .template
        .spec
        .as_ref()
        .map(|pod| pod.containers.as_slice())
        .unwrap_or_default();
    let Some(found) = containers.iter().find(|c| c.name == container) else {
        let names: Vec<&str> = containers.iter().map(|c| c.name.as_str()).collect();
        return invalid(format!(
            "spec.target.fromContainer: the template has no container named {container:?} (its containers: {})",
            names.join(", ")
        ));
    };
    let Some(image) = found.image.as_deref().filter(|i| !i.is_empty()) else {
        return invalid(format!(
            "spec.target.fromContainer: container {container:?} has no image"
        ));
    };
    match image_tag(image) {
        Some(tag) => Ok(tag.to_owned()),
        None => invalid(format!(
            "spec.target.fromContainer: the image {image:?} of container {container:?} has no tag to take the version from; tag it, or set spec.target.version"
        )),
    }
}

/// The tag of an image reference: after the last `:` of its last path segment (a registry
/// port is not a tag), before any `@digest`.
pub fn image_tag(image: &str) -> Option<&str> {
    let name = image.split('@').next().unwrap_or(image);
    let last_segment = name.rsplit('/').next().unwrap_or(name);
    last_segment
        .rsplit_once(':')
        .map(|(_, tag)| tag)
        .filter(|tag| !tag.is_empty())
}

/// A stable hash of the template (FNV-1a 64 over its JSON form, hex): the default deployment id.
///
/// The JSON form is deterministic (struct fields in declaration order, maps sorted), so the same
/// template always hashes the same, across processes and versions of this controller.
pub fn template_hash(template: &DaemonSetTemplate) -> Result<String, Error> {
    json_hash(template)
}

/// Hash of a live DaemonSet's pod template and update strategy, as the API server stores them
/// (defaults filled in). The controller records it after each of its writes (from the write's
/// response); a live DaemonSet that hashes otherwise was changed by someone else: drift.
/// Comparing what the controller wrote, not the desired object, keeps the API server's
/// defaulting out of the comparison.
pub fn live_template_hash(ds: &DaemonSet) -> Result<String, Error> {
    let spec = ds.spec.as_ref();
    json_hash(&(
        spec.map(|s| &s.template),
        spec.and_then(|s| s.update_strategy.as_ref()),
    ))
}

/// FNV-1a 64 over the JSON form, hex: deterministic (struct fields in declaration order, maps
/// sorted), so the same value always hashes the same, across processes and versions.
pub(crate) fn json_hash<T: serde::Serialize>(value: &T) -> Result<String, Error> {
    let bytes = serde_json::to_vec(value).map_err(|e| Error::Serialize(e.to_string()))?;
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in bytes {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    Ok(format!("{hash:016x}"))
}

/// `spec.updateStrategy.type` of a DaemonSet whose controller replaces no pod by itself: the
/// Pods driver's, and the MaxUnavailable driver's while held on request.
pub const ON_DELETE: &str = "OnDelete";
/// `spec.updateStrategy.type` of a DaemonSet whose controller replaces pods under its
/// `maxUnavailable`, the API server's default.
pub const ROLLING_UPDATE: &str = "RollingUpdate";

/// The update strategy type of `ds`, [`ROLLING_UPDATE`] when unset (the API server's default).
pub fn strategy_type(ds: &DaemonSet) -> &str {
    ds.spec
        .as_ref()
        .and_then(|spec| spec.update_strategy.as_ref())
        .and_then(|strategy| strategy.type_.as_deref())
        .unwrap_or(ROLLING_UPDATE)
}

/// `ds` with its update strategy type set to `type_`, everything else (the template, the
/// `rollingUpdate` block and its `maxUnavailable`) as it is: the API server keeps the block of
/// an `OnDelete` DaemonSet, so a hold's resume finds the rollout's `maxUnavailable` where it was.
pub fn with_strategy_type(ds: &DaemonSet, type_: &str) -> DaemonSet {
    let mut written = ds.clone();
    written
        .spec
        .get_or_insert_with(Default::default)
        .update_strategy
        .get_or_insert_with(Default::default)
        .type_ = Some(type_.to_owned());
    written
}

/// Annotation on the owned DaemonSet (default compatibility): [`template_hash`] of the template
/// it was written from, so that every change of the desired template changes the DaemonSet's
/// metadata and is written, also with an explicit `deploymentId` that does not change.
pub const TEMPLATE_HASH_ANNOTATION: &str = "canary.daemonset.dev/template-hash";

/// The desired DaemonSet of `cds`, with `target` injected.
///
/// `updateStrategy` is left as the template has it, except with the Pods driver (`OnDelete`);
/// the MaxUnavailable driver sets maxUnavailable with [`set_max_unavailable`] (create path, or
/// as the state machine's decision says). A spec without a template (a `workloadRef`) has no
/// desired DaemonSet: [`Error::MissingField`].
pub fn desired_daemon_set(
    cds: &CanaryDaemonSet,
    keys: &AnnotationKeys,
    target: &Target,
) -> Result<DaemonSet, Error> {
    let cds_name = cds
        .metadata
        .name
        .clone()
        .ok_or(Error::MissingField("metadata.name"))?;
    let namespace = cds
        .metadata
        .namespace
        .clone()
        .ok_or(Error::MissingField("metadata.namespace"))?;
    let owner = cds
        .controller_owner_ref(&())
        .ok_or(Error::MissingField("metadata.uid"))?;
    let template = cds
        .spec
        .template
        .as_ref()
        .ok_or(Error::MissingField("spec.template"))?;

    let mut labels = template.metadata.labels.clone();
    labels.insert(OWNER_LABEL.to_owned(), cds_name.clone());
    let injected = target.annotations(keys);
    let mut annotations = template.metadata.annotations.clone();
    annotations.extend(injected.clone());
    // On the DaemonSet only, not on its pods: a change of it alone must not re-roll them.
    match cds.spec.strategy.compatibility {
        Compatibility::Fixed => {
            annotations.insert(
                TEMPLATE_HASH_ANNOTATION.to_owned(),
                template_hash(template)?,
            );
        }
        // In `KubeVirt` compatibility the CanaryDaemonSet's generation, as virt-operator writes
        // the KubeVirt CR's (spec quirk 4): any spec edit restarts the canary.
        Compatibility::KubeVirt => {
            let generation = cds.metadata.generation.unwrap_or_default();
            annotations.insert(
                KUBEVIRT_GENERATION_ANNOTATION.to_owned(),
                generation.to_string(),
            );
        }
    }

    let mut spec = template.spec.clone();
    // The Pods driver replaces pods itself: the DaemonSet controller must only recreate the
    // pods it deletes, never replace one on its own.
    if cds.spec.strategy.driver == Driver::Pods {
        spec.update_strategy = Some(DaemonSetUpdateStrategy {
            type_: Some(ON_DELETE.to_owned()),
            rolling_update: None,
        });
    }
    let pod_meta = spec
        .template
        .metadata
        .get_or_insert_with(ObjectMeta::default);
    pod_meta
        .labels
        .get_or_insert_with(BTreeMap::new)
        .insert(OWNER_LABEL.to_owned(), cds_name);
    pod_meta
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .extend(injected);

    Ok(DaemonSet {
        metadata: ObjectMeta {
            name: Some(cds.daemon_set_name()),
            namespace: Some(namespace),
            labels: Some(labels),
            annotations: Some(annotations),
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        spec: Some(spec),
        status: None,
    })
}

/// How a maxUnavailable write treats the rest of `rollingUpdate`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RollingUpdateWrite {
    /// Replace the whole `rollingUpdate` struct, dropping `maxSurge` (reference quirk 12).
    ReplaceStruct,
    /// Set only `maxUnavailable`, keeping the template's `maxSurge`.
    KeepMaxSurge,
    /// `spec.strategy.surge` (issue 50): the value is the `maxSurge`, with `maxUnavailable: 0`.
    Surge,
}

impl From<Compatibility> for RollingUpdateWrite {
    /// The reference replaces the whole struct (quirk 12); the default keeps `maxSurge`.
    fn from(compatibility: Compatibility) -> Self {
        match compatibility {
            Compatibility::KubeVirt => RollingUpdateWrite::ReplaceStruct,
            Compatibility::Fixed => RollingUpdateWrite::KeepMaxSurge,
        }
    }
}

/// Sets `spec.updateStrategy` to `RollingUpdate` with `max_unavailable` (in its wire form).
///
/// The type is forced to `RollingUpdate` because an `OnDelete` DaemonSet cannot be canaried.
pub fn set_max_unavailable(
    ds: &mut DaemonSet,
    max_unavailable: MaxUnavailable,
    mode: RollingUpdateWrite,
) {
    let spec = ds.spec.get_or_insert_with(Default::default);
    let strategy = spec
        .update_strategy
        .get_or_insert_with(DaemonSetUpdateStrategy::default);
    strategy.type_ = Some(ROLLING_UPDATE.to_owned());
    let (max_unavailable, max_surge) = match mode {
        RollingUpdateWrite::ReplaceStruct => (max_unavailable.to_int_or_string(), None),
        RollingUpdateWrite::KeepMaxSurge => (
            max_unavailable.to_int_or_string(),
            strategy
                .rolling_update
                .as_ref()
                .and_then(|r| r.max_surge.clone()),
        ),
        RollingUpdateWrite::Surge => (
            IntOrString::Int(0),
            Some(max_unavailable.to_int_or_string()),
        ),
    };
    strategy.rolling_update = Some(RollingUpdateDaemonSet {
        max_unavailable: Some(max_unavailable),
        max_surge,
    });
}

/// The step value the live DaemonSet holds, as the state machine reads it: its
/// `maxUnavailable`, or with `surge` (issue 50) its `maxSurge` while `maxUnavailable` is 0
/// (what [`RollingUpdateWrite::Surge`] writes). A DaemonSet not (yet) written for surge reads as
/// its `maxUnavailable`, so turning surge on at rest waits for the next rollout to write it.
pub fn live_step_value(ds: &DaemonSet, surge: bool) -> LiveMaxUnavailable {
    let live = canary_predicates::live_max_unavailable(ds);
    let zero = matches!(&live, LiveMaxUnavailable::Int(0))
        || matches!(&live, LiveMaxUnavailable::Str(text) if text == "0%");
    match canary_predicates::live_max_surge(ds) {
        Some(IntOrString::Int(value)) if surge && zero => {
            LiveMaxUnavailable::Int(i64::from(*value))
        }
        Some(IntOrString::String(text)) if surge && zero => LiveMaxUnavailable::Str(text.clone()),
        _ => live,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{AnnotationKeysSpec, CanaryDaemonSetSpec, TargetSpec, TemplateMetadata};
    use k8s_openapi::api::apps::v1::DaemonSetSpec;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    pub(crate) fn cds(name: &str) -> CanaryDaemonSet {
        let mut cds = CanaryDaemonSet::new(
            name,
            CanaryDaemonSetSpec::with_template(
DaemonSetTemplate {
                    metadata: TemplateMetadata {
                        labels: BTreeMap::from([("app".to_owned(), "agent".to_owned())]),
                        annotations: BTreeMap::new(),
                    },
                    spec: serde_json::from_value::<DaemonSetSpec>(serde_json::json!({
                        "selector": {"matchLabels": {"app": "agent"}},
                        "template": {
                            "metadata": {"labels": {"app": "agent"}},
                            "spec": {"containers": [{"name": "agent", "image": "agent:v1"}]}
                        },
                        "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}
                    }))
                    .unwrap(),
                },
TargetSpec {
                    version: "v1".to_owned(),
                    from_container: None,
                    registry: "reg.example".to_owned(),
                    deployment_id: None,
                },
),
        );
        cds.metadata.namespace = Some("ns".to_owned());
        cds.metadata.uid = Some("cds-uid".to_owned());
        cds
    }

    #[test]
    fn image_tags_skip_registry_ports_and_digests() {
        assert_eq!(
            image_tag("quay.io/prometheus/node-exporter:v1.9.1"),
            Some("v1.9.1")
        );
        assert_eq!(image_tag("registry:5000/agent:v2@sha256:abcd"), Some("v2"));
        assert_eq!(image_tag("agent:1.2.3-rc.1"), Some("1.2.3-rc.1"));
        assert_eq!(
            image_tag("registry:5000/agent"),
            None,
            "a port is not a tag"
        );
        assert_eq!(image_tag("agent@sha256:abcd"), None);
        assert_eq!(image_tag("agent:"), None);
    }

    #[test]
    fn the_version_comes_from_the_named_container_image() {
        let mut cds = cds("agent");
        cds.spec.target.version = String::new();
        cds.spec.target.from_container = Some("agent".into());
        let (_, target) = target_of(&cds).unwrap();
        assert_eq!(target.version, "v1", "agent:v1");
        let message = |cds: &CanaryDaemonSet| match target_of(cds) {
            Err(Error::InvalidSpec(message)) => message,
            other => panic!("{other:?}"),
        };
        cds.spec.target.from_container = Some("sidecar".into());
        assert_eq!(
            message(&cds),
            "spec.target.fromContainer: the template has no container named \"sidecar\" (its containers: agent)"
        );
        cds.spec.target.version = "v9".into();
        assert!(message(&cds).contains("exactly one of"));
        cds.spec.target.from_container = None;
        assert_eq!(target_of(&cds).unwrap().1.version, "v9");
    }

    #[test]
    fn desired_injects_target_owner_label_and_owner_ref() {
        let cds = cds("agent");
        let (keys, target) = target_of(&cds).unwrap();
        let ds = desired_daemon_set(&cds, &keys, &target).unwrap();
        let meta = &ds.metadata;
        assert_eq!(meta.name.as_deref(), Some("agent"));
        assert_eq!(meta.namespace.as_deref(), Some("ns"));
        let labels = meta.labels.as_ref().unwrap();
        assert_eq!(labels["app"], "agent");
        assert_eq!(labels[OWNER_LABEL], "agent");
        let annotations = meta.annotations.as_ref().unwrap();
        assert_eq!(annotations["kubevirt.io/install-strategy-version"], "v1");
        assert_eq!(
            annotations["kubevirt.io/install-strategy-registry"],
            "reg.example"
        );
        let id = &annotations["kubevirt.io/install-strategy-identifier"];
        assert_eq!(
            id,
            &template_hash(cds.spec.template.as_ref().unwrap()).unwrap()
        );
        let owner = &meta.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
            ("CanaryDaemonSet", "agent", "cds-uid")
        );
        assert_eq!(owner.controller, Some(true));

        let pod_meta = canary_testkit::template_meta(&ds);
        assert_eq!(pod_meta.labels.as_ref().unwrap()[OWNER_LABEL], "agent");
        // The pods carry the target; the template hash stays on the DaemonSet, so that a
        // change of it alone never re-rolls them.
        let mut on_pods = annotations.clone();
        assert_eq!(
            on_pods.remove(TEMPLATE_HASH_ANNOTATION),
            Some(template_hash(cds.spec.template.as_ref().unwrap()).unwrap())
        );
        assert_eq!(pod_meta.annotations.as_ref().unwrap(), &on_pods);
    }

    #[test]
    fn kubevirt_compatibility_carries_the_generation_instead_of_the_hash() {
        let mut cds = cds("agent");
        cds.spec.strategy.compatibility = Compatibility::KubeVirt;
        cds.metadata.generation = Some(7);
        let annotations = desired(&cds).metadata.annotations.unwrap();
        assert_eq!(annotations[KUBEVIRT_GENERATION_ANNOTATION], "7");
        assert!(!annotations.contains_key(TEMPLATE_HASH_ANNOTATION));
    }

    #[test]
    fn live_template_hash_sees_the_template_and_the_strategy_only() {
        let cds = cds("agent");
        let ds = desired(&cds);
        let hash = live_template_hash(&ds).unwrap();
        let mut relabelled = ds.clone();
        relabelled
            .metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert("x".into(), "y".into());
        assert_eq!(live_template_hash(&relabelled).unwrap(), hash);
        let mut widened = ds.clone();
        set_max_unavailable(
            &mut widened,
            MaxUnavailable::TEN_PERCENT,
            RollingUpdateWrite::KeepMaxSurge,
        );
        assert_ne!(live_template_hash(&widened).unwrap(), hash);
        let mut edited = ds;
        canary_testkit::first_container_mut(&mut edited).image = Some("agent:hand".into());
        assert_ne!(live_template_hash(&edited).unwrap(), hash);
    }

    #[test]
    fn custom_keys_name_and_explicit_id_are_used() {
        let mut cds = cds("agent");
        cds.spec.daemon_set_name = Some("node-agent".to_owned());
        cds.spec.target.deployment_id = Some("build-7".to_owned());
        cds.spec.annotation_keys = Some(AnnotationKeysSpec {
            version: "example.com/v".to_owned(),
            registry: "example.com/r".to_owned(),
            id: "example.com/id".to_owned(),
        });
        let ds = desired(&cds);
        assert_eq!(ds.metadata.name.as_deref(), Some("node-agent"));
        let annotations = ds.metadata.annotations.unwrap();
        assert_eq!(annotations["example.com/id"], "build-7");
        assert_eq!(annotations["example.com/v"], "v1");
        assert!(!annotations.contains_key("kubevirt.io/install-strategy-version"));
    }

    fn desired(cds: &CanaryDaemonSet) -> DaemonSet {
        let (keys, target) = target_of(cds).unwrap();
        desired_daemon_set(cds, &keys, &target).unwrap()
    }

    #[test]
    fn template_hash_is_stable_and_sensitive() {
        let a = cds("agent");
        let mut b = cds("agent");
        assert_eq!(
            template_hash(a.spec.template.as_ref().unwrap()).unwrap(),
            template_hash(b.spec.template.as_ref().unwrap()).unwrap()
        );
        b.spec
            .template
            .as_mut()
            .unwrap()
            .spec
            .template
            .spec
            .as_mut()
            .unwrap()
            .containers[0]
            .image = Some("agent:v2".to_owned());
        assert_ne!(
            template_hash(a.spec.template.as_ref().unwrap()).unwrap(),
            template_hash(b.spec.template.as_ref().unwrap()).unwrap()
        );
        // Known value: a change of serialization or hash function would silently change every
        // deployment id and restart every canary, so pin it.
        assert_eq!(
            template_hash(a.spec.template.as_ref().unwrap()).unwrap(),
            "f8fa7f96060f512a"
        );
    }

    #[test]
    fn surge_writes_the_step_value_as_max_surge_and_reads_it_back() {
        let cds = cds("agent");
        let mut ds = desired(&cds);
        set_max_unavailable(
            &mut ds,
            MaxUnavailable::TEN_PERCENT,
            RollingUpdateWrite::Surge,
        );
        let ru = ds
            .spec
            .as_ref()
            .and_then(|s| s.update_strategy.as_ref())
            .and_then(|s| s.rolling_update.clone())
            .unwrap();
        assert_eq!(ru.max_unavailable, Some(IntOrString::Int(0)));
        assert_eq!(ru.max_surge, Some(IntOrString::String("10%".into())));
        assert_eq!(
            live_step_value(&ds, true),
            LiveMaxUnavailable::Str("10%".into())
        );
        assert_eq!(live_step_value(&ds, false), LiveMaxUnavailable::Int(0));
        // Not written for surge yet: its maxUnavailable is the step value.
        set_max_unavailable(
            &mut ds,
            MaxUnavailable::ONE,
            RollingUpdateWrite::KeepMaxSurge,
        );
        assert_eq!(live_step_value(&ds, true), LiveMaxUnavailable::Int(1));
    }

    #[test]
    fn set_max_unavailable_modes() {
        let cds = cds("agent");
        let mut ds = desired(&cds);
        set_max_unavailable(
            &mut ds,
            MaxUnavailable::TEN_PERCENT,
            RollingUpdateWrite::KeepMaxSurge,
        );
        let ru = ds
            .spec
            .as_ref()
            .unwrap()
            .update_strategy
            .as_ref()
            .unwrap()
            .rolling_update
            .clone()
            .unwrap();
        assert_eq!(ru.max_unavailable, Some(IntOrString::String("10%".into())));
        assert_eq!(ru.max_surge, Some(IntOrString::Int(0)));
        set_max_unavailable(
            &mut ds,
            MaxUnavailable::ONE,
            RollingUpdateWrite::ReplaceStruct,
        );
        let strategy = ds.spec.as_ref().unwrap().update_strategy.clone().unwrap();
        assert_eq!(strategy.type_.as_deref(), Some("RollingUpdate"));
        let ru = strategy.rolling_update.unwrap();
        assert_eq!(ru.max_unavailable, Some(IntOrString::Int(1)));
        assert_eq!(ru.max_surge, None);
    }
}
