//! From a `CanaryDaemonSet` spec to the settings a pass acts on: the state machine's
//! [`Strategy`], the install-strategy target, the crash-loop policy and the TLS plan.
//!
//! Pure. A spec that cannot be acted on is an `Err` with the message the user sees in the
//! status and the `InvalidSpec` event; nothing here panics on any spec the API server stored.

use std::time::Duration;

use canary_predicates::{AnnotationKeys, CrashLoopPolicy, Target};
use canary_state_machine::{Compatibility, MaxUnavailable, Strategy};
use canary_tls_migration::{ContainerSelector, InsertMode, TlsConfig};

use crate::crd::{CanaryDaemonSet, CrashLoopPolicyName};
use crate::desired::target_of;

/// The settings derived from a spec.
#[derive(Debug)]
pub(crate) struct Plan {
    /// The decision table and its values.
    pub(crate) strategy: Strategy,
    /// The install-strategy annotation keys.
    pub(crate) keys: AnnotationKeys,
    /// The target every pod must reach.
    pub(crate) target: Target,
    /// What counts as a crash-looping pod.
    pub(crate) crash_loop: CrashLoopPolicy,
    /// The TLS migration, when enabled.
    pub(crate) tls: Option<TlsConfig>,
}

/// The plan of `cds`, or why its spec cannot be acted on.
pub(crate) fn plan(cds: &CanaryDaemonSet) -> Result<Plan, String> {
    let spec = &cds.spec;
    // The version first: a spec naming no version, or a container that is not there, says so.
    let (keys, target) = match target_of(cds) {
        Ok(resolved) => resolved,
        Err(crate::Error::InvalidSpec(message)) => return Err(message),
        Err(error) => return Err(error.to_string()),
    };
    let parse = |field: &str, value: &str| {
        value
            .parse::<MaxUnavailable>()
            .map_err(|e| format!("spec.strategy.{field} {value:?}: {e}"))
    };
    let compatibility = spec.strategy.compatibility;
    let seconds = spec.strategy.progress_deadline_seconds;
    let progress_deadline = match compatibility {
        Compatibility::KubeVirt => None,
        Compatibility::Fixed => u64::try_from(seconds)
            .ok()
            .filter(|s| *s > 0)
            .map(Duration::from_secs),
    };
    let strategy = Strategy {
        compatibility,
        canary_max_unavailable: parse(
            "canaryMaxUnavailable",
            &spec.strategy.canary_max_unavailable,
        )?,
        fast_max_unavailable: parse("fastMaxUnavailable", &spec.strategy.fast_max_unavailable)?,
        progress_deadline,
    };
    strategy
        .validate()
        .map_err(|e| format!("spec.strategy: {e}"))?;
    let crash = &spec.strategy.crash_loop;
    let crash_loop = match crash.policy {
        CrashLoopPolicyName::KubeVirt => CrashLoopPolicy::KubeVirt,
        CrashLoopPolicyName::Strict => CrashLoopPolicy::Strict {
            restart_threshold: crash.restart_threshold.max(1),
            include_init_containers: crash.include_init_containers,
        },
    };
    let tls = spec.tls_migration.enabled.then(|| {
        let t = &spec.tls_migration;
        TlsConfig {
            support_label: t.support_label.clone(),
            support_value: t.support_value.clone(),
            flag: t.flag.clone(),
            flag_value: t.flag_value.clone(),
            cert_volume: t.cert_secret_volume.clone(),
            container: t
                .container
                .clone()
                .map_or(ContainerSelector::Index(0), ContainerSelector::Name),
            insert: match compatibility {
                Compatibility::KubeVirt => InsertMode::Reference,
                Compatibility::Fixed => InsertMode::Idempotent,
            },
        }
    });
    Ok(Plan {
        strategy,
        keys,
        target,
        crash_loop,
        tls,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{CanaryDaemonSetSpec, DaemonSetTemplate, TargetSpec};
    use serde_json::json;

    fn cds() -> CanaryDaemonSet {
        let spec = CanaryDaemonSetSpec {
            template: DaemonSetTemplate {
                metadata: Default::default(),
                spec: serde_json::from_value(json!({"selector": {}, "template": {}})).unwrap(),
            },
            daemon_set_name: None,
            target: TargetSpec {
                version: "v1".into(),
                from_container: None,
                registry: String::new(),
                deployment_id: None,
            },
            annotation_keys: None,
            strategy: Default::default(),
            tls_migration: Default::default(),
        };
        let mut cds = CanaryDaemonSet::new("agent", spec);
        cds.metadata.namespace = Some("ns".into());
        cds.metadata.uid = Some("u".into());
        cds
    }

    #[test]
    fn default_plan_is_fixed_with_deadline_and_strict_crash_loops() {
        let plan = plan(&cds()).unwrap();
        assert_eq!(plan.strategy.compatibility, Compatibility::Fixed);
        assert_eq!(
            plan.strategy.canary_max_unavailable,
            MaxUnavailable::Count(1)
        );
        assert_eq!(
            plan.strategy.fast_max_unavailable,
            MaxUnavailable::Percent(10)
        );
        assert_eq!(
            plan.strategy.progress_deadline,
            Some(Duration::from_secs(600))
        );
        assert_eq!(
            plan.crash_loop,
            CrashLoopPolicy::Strict {
                restart_threshold: 3,
                include_init_containers: true
            }
        );
        assert!(plan.tls.is_none());
    }

    #[test]
    fn kubevirt_plan_has_no_deadline_and_reference_tls_insert() {
        let mut cds = cds();
        cds.spec.strategy.compatibility = Compatibility::KubeVirt;
        cds.spec.strategy.crash_loop.policy = CrashLoopPolicyName::KubeVirt;
        cds.spec.tls_migration.enabled = true;
        cds.spec.tls_migration.container = Some("handler".into());
        let plan = plan(&cds).unwrap();
        assert_eq!(plan.strategy.progress_deadline, None);
        assert_eq!(plan.crash_loop, CrashLoopPolicy::KubeVirt);
        let tls = plan.tls.unwrap();
        assert_eq!(tls.insert, InsertMode::Reference);
        assert_eq!(tls.container, ContainerSelector::Name("handler".into()));
    }

    #[test]
    fn zero_deadline_disables_it() {
        let mut cds = cds();
        cds.spec.strategy.progress_deadline_seconds = 0;
        assert_eq!(plan(&cds).unwrap().strategy.progress_deadline, None);
    }

    #[test]
    fn invalid_specs_are_reported_not_panicked() {
        for (field, value) in [
            ("canary", "abc"),
            ("canary", "0"),
            ("fast", "150%"),
            ("fast", "-1"),
            ("fast", ""),
        ] {
            let mut cds = cds();
            match field {
                "canary" => cds.spec.strategy.canary_max_unavailable = value.into(),
                _ => cds.spec.strategy.fast_max_unavailable = value.into(),
            }
            let error = plan(&cds)
                .err()
                .unwrap_or_else(|| panic!("{field}={value:?} accepted"));
            assert!(error.contains("spec.strategy"), "{error}");
        }
        let mut empty_version = cds();
        empty_version.spec.target.version = String::new();
        assert!(plan(&empty_version).unwrap_err().contains("target.version"));
    }
}
