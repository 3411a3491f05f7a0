//! The edits and checks on one DaemonSet: support label, flag, certificate volume.
//!
//! Every function here looks at (or changes) only the pod template of the DaemonSet it is given,
//! never the cluster, and never panics on a malformed template.

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Container, PodSpec, VolumeMount};

use crate::{ContainerSelector, InsertMode, TlsConfig, TlsError};

/// Whether the DaemonSet opts into the TLS migration: its **metadata** labels (not the pod
/// template's) carry `cfg.support_label` with exactly `cfg.support_value`.
#[must_use]
pub fn supports_tls(ds: &DaemonSet, cfg: &TlsConfig) -> bool {
    ds.metadata
        .labels
        .as_ref()
        .and_then(|labels| labels.get(&cfg.support_label))
        .is_some_and(|value| *value == cfg.support_value)
}

/// Whether the selected container already carries the flag.
///
/// [`InsertMode::Reference`]: some `args` entry contains the flag name (dashes stripped) as a
/// substring, exactly as the reference, so `--migration-cn-types=x` counts and so does
/// `--no-migration-cn-types`. [`InsertMode::Idempotent`]: some `command` or `args` entry is the
/// flag as a whole token (`--flag`, `-flag`, `--flag=x`, `-flag=x`).
///
/// # Errors
/// The template has no containers, the selected container does not exist, or the flag in
/// `cfg` has no name (see [`TlsConfig::validate`]).
pub fn has_tls_flag(ds: &DaemonSet, cfg: &TlsConfig) -> Result<bool, TlsError> {
    cfg.validate()?;
    let container = selected_container(ds, &cfg.container)?;
    Ok(container_has_flag(container, cfg))
}

/// Appends `cfg.flag` (then `cfg.flag_value` unless it is empty) to the selected container's
/// `args`. Returns whether the DaemonSet changed.
///
/// [`InsertMode::Reference`] appends unconditionally, so a flag already present is duplicated
/// (quirk 16) and the answer is always `true`. [`InsertMode::Idempotent`] does nothing when
/// [`has_tls_flag`] is already true, so calling it twice equals calling it once.
///
/// # Errors
/// As [`has_tls_flag`]; on error the DaemonSet is unchanged.
pub fn insert_tls_flag(ds: &mut DaemonSet, cfg: &TlsConfig) -> Result<bool, TlsError> {
    cfg.validate()?;
    let container = selected_container_mut(ds, &cfg.container)?;
    if cfg.insert == InsertMode::Idempotent && container_has_flag(container, cfg) {
        return Ok(false);
    }
    let args = container.args.get_or_insert_with(Vec::new);
    args.push(cfg.flag.clone());
    if !cfg.flag_value.is_empty() {
        args.push(cfg.flag_value.clone());
    }
    Ok(true)
}

/// Whether the pod template has a **volume** named `cfg.cert_volume` (mounts are not looked at,
/// as in the reference). A DaemonSet without a pod spec has none.
#[must_use]
pub fn has_cert_volume(ds: &DaemonSet, cfg: &TlsConfig) -> bool {
    pod_spec(ds)
        .and_then(|spec| spec.volumes.as_ref())
        .is_some_and(|volumes| volumes.iter().any(|v| v.name == cfg.cert_volume))
}

/// Removes the volumes named `cfg.cert_volume` from the pod template, and the mounts of that
/// name. Returns whether the DaemonSet changed.
///
/// [`InsertMode::Reference`] removes the mounts from the selected container only, as the
/// reference (which only ever looked at container 0): another container that mounts the same
/// volume is left with a mount whose volume is gone, which the API server rejects.
/// [`InsertMode::Idempotent`] removes the mounts of that name from every container, init
/// container and ephemeral container, so the template stays valid. A list that becomes empty
/// is removed (`None`), as the API server would serve it.
///
/// # Errors
/// The template has no containers or the selected container does not exist (checked in both
/// modes, so a wrong selector is reported rather than silently ignored), or `cfg.cert_volume`
/// is empty. On error the DaemonSet is unchanged.
pub fn detach_cert_secret(ds: &mut DaemonSet, cfg: &TlsConfig) -> Result<bool, TlsError> {
    cfg.validate()?;
    let index = selected_index(ds, &cfg.container)?;
    let Some(spec) = pod_spec_mut(ds) else {
        return Err(TlsError::NoContainers);
    };
    let name = cfg.cert_volume.as_str();
    let mut changed = retain_named(&mut spec.volumes, |v| v.name != name);
    match cfg.insert {
        InsertMode::Reference => {
            if let Some(container) = spec.containers.get_mut(index) {
                changed |= remove_mounts(&mut container.volume_mounts, name);
            }
        }
        InsertMode::Idempotent => {
            for container in &mut spec.containers {
                changed |= remove_mounts(&mut container.volume_mounts, name);
            }
            for container in spec.init_containers.iter_mut().flatten() {
                changed |= remove_mounts(&mut container.volume_mounts, name);
            }
            for container in spec.ephemeral_containers.iter_mut().flatten() {
                changed |= remove_mounts(&mut container.volume_mounts, name);
            }
        }
    }
    Ok(changed)
}

fn container_has_flag(container: &Container, cfg: &TlsConfig) -> bool {
    let name = cfg.flag_name();
    match cfg.insert {
        InsertMode::Reference => container
            .args
            .iter()
            .flatten()
            .any(|arg| arg.contains(name)),
        InsertMode::Idempotent => container
            .command
            .iter()
            .flatten()
            .chain(container.args.iter().flatten())
            .any(|token| is_flag_token(token, name)),
    }
}

/// `--name`, `-name`, `--name=value` or `-name=value`.
fn is_flag_token(token: &str, name: &str) -> bool {
    let Some(stripped) = token.strip_prefix('-') else {
        return false;
    };
    let stripped = stripped.strip_prefix('-').unwrap_or(stripped);
    let key = stripped.split_once('=').map_or(stripped, |(key, _)| key);
    key == name
}

fn remove_mounts(mounts: &mut Option<Vec<VolumeMount>>, name: &str) -> bool {
    retain_named(mounts, |m| m.name != name)
}

/// Keeps the items for which `keep` holds; an emptied list becomes `None`. Returns whether
/// anything was removed.
fn retain_named<T>(list: &mut Option<Vec<T>>, keep: impl FnMut(&T) -> bool) -> bool {
    let Some(items) = list.as_mut() else {
        return false;
    };
    let before = items.len();
    items.retain(keep);
    let changed = items.len() != before;
    if changed && items.is_empty() {
        *list = None;
    }
    changed
}

fn pod_spec(ds: &DaemonSet) -> Option<&PodSpec> {
    ds.spec.as_ref()?.template.spec.as_ref()
}

fn pod_spec_mut(ds: &mut DaemonSet) -> Option<&mut PodSpec> {
    ds.spec.as_mut()?.template.spec.as_mut()
}

/// The position of the selected container, or why there is none.
pub(crate) fn selected_index(
    ds: &DaemonSet,
    selector: &ContainerSelector,
) -> Result<usize, TlsError> {
    let containers = pod_spec(ds)
        .map(|spec| spec.containers.as_slice())
        .unwrap_or_default();
    if containers.is_empty() {
        return Err(TlsError::NoContainers);
    }
    match selector {
        ContainerSelector::Index(index) if *index < containers.len() => Ok(*index),
        ContainerSelector::Index(index) => Err(TlsError::IndexOutOfRange {
            index: *index,
            len: containers.len(),
        }),
        ContainerSelector::Name(name) => containers
            .iter()
            .position(|c| c.name == *name)
            .ok_or_else(|| TlsError::ContainerNotFound {
                name: name.clone(),
                available: containers.iter().map(|c| c.name.clone()).collect(),
            }),
    }
}

fn selected_container<'a>(
    ds: &'a DaemonSet,
    selector: &ContainerSelector,
) -> Result<&'a Container, TlsError> {
    let index = selected_index(ds, selector)?;
    pod_spec(ds)
        .and_then(|spec| spec.containers.get(index))
        .ok_or(TlsError::NoContainers)
}

fn selected_container_mut<'a>(
    ds: &'a mut DaemonSet,
    selector: &ContainerSelector,
) -> Result<&'a mut Container, TlsError> {
    let index = selected_index(ds, selector)?;
    pod_spec_mut(ds)
        .and_then(|spec| spec.containers.get_mut(index))
        .ok_or(TlsError::NoContainers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flag_tokens() {
        let name = "migration-cn-types";
        for yes in [
            "--migration-cn-types",
            "-migration-cn-types",
            "--migration-cn-types=migration",
            "-migration-cn-types=",
        ] {
            assert!(is_flag_token(yes, name), "{yes} rejected");
        }
        for no in [
            "migration-cn-types",
            "---migration-cn-types",
            "--migration-cn-types-v2",
            "--no-migration-cn-types",
            "--migration",
            "",
            "--",
        ] {
            assert!(!is_flag_token(no, name), "{no} accepted");
        }
    }

    #[test]
    fn retain_named_turns_an_emptied_list_into_none() {
        let mut list = Some(vec![1, 2]);
        assert!(retain_named(&mut list, |_| false));
        assert_eq!(list, None);
        let mut list = Some(vec![1, 2]);
        assert!(retain_named(&mut list, |x| *x == 1));
        assert_eq!(list, Some(vec![1]));
        let mut list: Option<Vec<i32>> = Some(vec![]);
        assert!(!retain_named(&mut list, |_| false));
        assert_eq!(list, Some(vec![]));
    }
}
