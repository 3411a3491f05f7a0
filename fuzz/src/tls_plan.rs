//! The TLS planner (`canary-tls-migration`) on arbitrary DaemonSets and configurations.

use canary_predicates::k8s_openapi::api::apps::v1::DaemonSet;
use canary_state_machine::TemplateEdit;
use canary_tls_migration::{
    ContainerSelector, InsertMode, TlsConfig, apply_preamble, apply_step, has_cert_volume,
    has_tls_flag, observe, prepare_for_create, remaining_steps, supports_tls, tls_step,
};

/// Flags a CanaryDaemonSet may name (the CRD puts no pattern on `tlsMigration.flag`): the
/// reference's, short and bare forms, and ones the configuration must refuse.
const FLAGS: [&str; 8] = [
    "--migration-cn-types",
    "-m",
    "migration-cn-types",
    "---m",
    "--m=x",
    "--",
    "",
    "--m x",
];

/// The configuration the first input byte selects: mode, container selector, flag, flag value
/// and certificate volume.
fn config(selector: u8, desired: &DaemonSet) -> TlsConfig {
    let first_container = desired
        .spec
        .as_ref()
        .and_then(|spec| spec.template.spec.as_ref())
        .and_then(|spec| spec.containers.first())
        .map(|container| container.name.clone())
        .unwrap_or_default();
    let container = match (selector >> 1) & 3 {
        0 => ContainerSelector::Index(0),
        1 => ContainerSelector::Index(1),
        2 => ContainerSelector::Name(first_container),
        _ => ContainerSelector::Name("missing".to_owned()),
    };
    let defaults = TlsConfig::default();
    TlsConfig {
        insert: if selector & 1 == 0 {
            InsertMode::Idempotent
        } else {
            InsertMode::Reference
        },
        container,
        flag: FLAGS[usize::from((selector >> 3) & 7)].to_owned(),
        flag_value: if selector & 0x40 == 0 {
            defaults.flag_value.clone()
        } else {
            String::new()
        },
        cert_volume: if selector & 0x80 == 0 {
            defaults.cert_volume.clone()
        } else {
            String::new()
        },
        ..defaults
    }
}

/// Whether any container (regular, init or ephemeral) still mounts `volume`.
fn mounts(ds: &DaemonSet, volume: &str) -> bool {
    let Some(spec) = ds.spec.as_ref().and_then(|s| s.template.spec.as_ref()) else {
        return false;
    };
    let regular = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten());
    regular
        .flat_map(|c| c.volume_mounts.iter().flatten())
        .chain(
            spec.ephemeral_containers
                .iter()
                .flatten()
                .flat_map(|c| c.volume_mounts.iter().flatten()),
        )
        .any(|mount| mount.name == volume)
}

/// Fuzz target `tls_plan`: the first byte selects a configuration, the rest is the live and
/// the desired DaemonSet (JSON, split at the first NUL byte; without one the same object is
/// both). Checked, as the crate documents: on error the desired DaemonSet is unchanged; the
/// preamble is idempotent in both modes; `changed` says whether the object changed; the
/// completion steps come flag first, then detach, at most one each, the first being
/// `tls_step`'s; a step does what it says (the flag is there after an insert, the volume gone
/// after a detach); in the idempotent mode a step or the create preparation applied twice
/// equals once, and detaching leaves no mount of the volume anywhere.
pub fn tls_plan(data: &[u8]) {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let (live_bytes, desired_bytes) = crate::two_parts(rest);
    let (Ok(live), Ok(desired)) = (
        serde_json::from_slice::<DaemonSet>(live_bytes),
        serde_json::from_slice::<DaemonSet>(desired_bytes),
    ) else {
        return;
    };
    let cfg = config(selector, &desired);
    let idempotent = cfg.insert == InsertMode::Idempotent;

    let mut once = desired.clone();
    match apply_preamble(&live, &mut once, &cfg) {
        Err(_) => assert_eq!(once, desired, "on error, desired is unchanged"),
        Ok(outcome) => {
            assert_eq!(outcome.changed(), once != desired);
            let mut twice = once.clone();
            let again = apply_preamble(&live, &mut twice, &cfg).expect("it worked once");
            assert!(!again.changed(), "the preamble is idempotent");
            assert_eq!(twice, once);
            if let Ok(facts) = observe(&live, &once, &cfg) {
                let steps = remaining_steps(&facts);
                assert_eq!(steps.first().copied(), tls_step(facts));
                assert!(matches!(
                    steps.as_slice(),
                    [] | [TemplateEdit::InsertTlsFlag]
                        | [TemplateEdit::DetachCertSecret]
                        | [TemplateEdit::InsertTlsFlag, TemplateEdit::DetachCertSecret]
                ));
            }
        }
    }

    for step in [TemplateEdit::InsertTlsFlag, TemplateEdit::DetachCertSecret] {
        let mut one = desired.clone();
        match apply_step(&mut one, step, &cfg) {
            Err(_) => assert_eq!(one, desired, "on error, desired is unchanged"),
            Ok(changed) => {
                assert_eq!(changed, one != desired, "{step:?}");
                match step {
                    TemplateEdit::InsertTlsFlag => {
                        assert_eq!(
                            has_tls_flag(&one, &cfg),
                            Ok(true),
                            "inserted: {:?}",
                            cfg.flag
                        );
                    }
                    TemplateEdit::DetachCertSecret => {
                        assert!(!has_cert_volume(&one, &cfg));
                        if idempotent {
                            assert!(
                                !mounts(&one, &cfg.cert_volume),
                                "a mount without its volume"
                            );
                        }
                    }
                }
                if idempotent {
                    let mut two = one.clone();
                    assert_eq!(
                        apply_step(&mut two, step, &cfg),
                        Ok(false),
                        "{step:?} twice"
                    );
                    assert_eq!(two, one);
                }
            }
        }
    }

    let mut created = desired.clone();
    if let Ok(outcome) = prepare_for_create(&mut created, &cfg) {
        assert_eq!(outcome.changed(), created != desired);
        if !supports_tls(&desired, &cfg) {
            assert!(!outcome.changed(), "only a supported DaemonSet is touched");
        } else if idempotent {
            assert_eq!(has_tls_flag(&created, &cfg), Ok(true));
            assert!(!has_cert_volume(&created, &cfg));
        }
        let mut again = created.clone();
        let second = prepare_for_create(&mut again, &cfg).expect("it worked once");
        assert!(!second.changed(), "the create preparation is idempotent");
        assert_eq!(again, created);
    }
}
