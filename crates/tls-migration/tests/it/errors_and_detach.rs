//! Bad inputs as typed errors, container selection, and what detaching leaves behind.

use crate::common::*;
use canary_tls_migration::{
    ContainerSelector, InsertMode, TemplateEdit, TlsConfig, TlsError, apply_preamble, apply_step,
    detach_cert_secret, has_cert_volume, has_tls_flag, insert_tls_flag, observe,
    prepare_for_create,
};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Container, VolumeMount};

/// Every fallible function, run against `ds` (as desired and as live), must fail with `expected`
/// and leave `ds` unchanged.
fn assert_all_fail(ds: &DaemonSet, cfg: &TlsConfig, expected: &TlsError) {
    let ok = virt_handler();
    let check = |result: Result<(), TlsError>, what: &str| {
        assert_eq!(result.as_ref().err(), Some(expected), "{what}");
    };
    check(has_tls_flag(ds, cfg).map(drop), "has_tls_flag");
    let mut copy = ds.clone();
    check(insert_tls_flag(&mut copy, cfg).map(drop), "insert_tls_flag");
    check(
        detach_cert_secret(&mut copy, cfg).map(drop),
        "detach_cert_secret",
    );
    check(
        apply_step(&mut copy, TemplateEdit::InsertTlsFlag, cfg).map(drop),
        "apply_step insert",
    );
    check(
        apply_step(&mut copy, TemplateEdit::DetachCertSecret, cfg).map(drop),
        "apply_step detach",
    );
    check(
        prepare_for_create(&mut copy, cfg).map(drop),
        "prepare_for_create",
    );
    assert_eq!(&copy, ds, "a failed edit changed the DaemonSet");
    check(observe(ds, &ok, cfg).map(drop), "observe(live)");
    let mut desired = ok.clone();
    check(
        apply_preamble(ds, &mut desired, cfg).map(drop),
        "apply_preamble(live)",
    );
    let mut copy = ds.clone();
    check(
        apply_preamble(&ok, &mut copy, cfg).map(drop),
        "apply_preamble(desired)",
    );
}

fn named(name: &str) -> TlsConfig {
    TlsConfig {
        container: ContainerSelector::Name(name.into()),
        ..TlsConfig::default()
    }
}

#[test]
fn no_containers_is_a_typed_error() {
    let mut empty = virt_handler();
    pod_spec_mut(&mut empty).containers.clear();
    let mut no_pod_spec = virt_handler();
    no_pod_spec.spec.as_mut().unwrap().template.spec = None;
    let mut no_spec = virt_handler();
    no_spec.spec = None;
    for ds in [empty, no_pod_spec, no_spec] {
        for cfg in both_modes() {
            assert_all_fail(&ds, &cfg, &TlsError::NoContainers);
        }
        assert_all_fail(&ds, &named("virt-handler"), &TlsError::NoContainers);
    }
}

#[test]
fn missing_named_container_is_a_typed_error_listing_the_real_ones() {
    let cfg = named("handler");
    let expected = TlsError::ContainerNotFound {
        name: "handler".into(),
        available: vec!["virt-handler".into()],
    };
    assert_all_fail(&virt_handler(), &cfg, &expected);
    assert_eq!(
        expected.to_string(),
        r#"the DaemonSet pod template has no container named "handler" (containers: ["virt-handler"])"#
    );
}

#[test]
fn index_out_of_range_is_a_typed_error() {
    for index in [1, 7, usize::MAX] {
        let cfg = TlsConfig {
            container: ContainerSelector::Index(index),
            ..TlsConfig::reference()
        };
        assert_all_fail(
            &virt_handler(),
            &cfg,
            &TlsError::IndexOutOfRange { index, len: 1 },
        );
    }
}

#[test]
fn invalid_config_is_a_typed_error() {
    let cfg = TlsConfig {
        flag: "--".into(),
        ..TlsConfig::default()
    };
    assert!(matches!(
        has_tls_flag(&virt_handler(), &cfg),
        Err(TlsError::InvalidConfig { field: "flag", .. })
    ));
    let cfg = TlsConfig {
        cert_volume: String::new(),
        ..TlsConfig::default()
    };
    let mut ds = virt_handler();
    assert!(matches!(
        detach_cert_secret(&mut ds, &cfg),
        Err(TlsError::InvalidConfig {
            field: "cert_volume",
            ..
        })
    ));
    assert_eq!(ds, virt_handler());
}

/// Regression, fuzz target `tls_plan` (input `crash-bbe2fa129a7ff7e6e907b2613102b3b19d8e2ff5`:
/// the node-exporter fixture with the flag `migration-cn-types`): a flag without one or two
/// leading dashes was accepted, but the idempotent mode only finds `-name` and `--name`, so the
/// flag inserted was never found again and every step inserted it once more. Such a flag is
/// now an invalid configuration, in both modes, and nothing is edited.
#[test]
fn a_flag_without_one_or_two_dashes_is_refused() {
    for flag in ["migration-cn-types", "---migration-cn-types"] {
        for insert in [InsertMode::Idempotent, InsertMode::Reference] {
            let cfg = TlsConfig {
                flag: flag.into(),
                insert,
                ..TlsConfig::default()
            };
            let mut ds = virt_handler();
            let refused = |result: Result<bool, TlsError>| {
                matches!(result, Err(TlsError::InvalidConfig { field: "flag", .. }))
            };
            assert!(
                refused(insert_tls_flag(&mut ds, &cfg)),
                "{flag:?} {insert:?}"
            );
            assert!(refused(has_tls_flag(&ds, &cfg)), "{flag:?} {insert:?}");
            assert_eq!(ds, virt_handler(), "{flag:?} {insert:?}: nothing edited");
        }
    }
    for flag in ["-m", "--migration-cn-types"] {
        let cfg = TlsConfig {
            flag: flag.into(),
            ..TlsConfig::default()
        };
        let mut ds = virt_handler();
        assert_eq!(insert_tls_flag(&mut ds, &cfg), Ok(true), "{flag:?}");
        assert_eq!(insert_tls_flag(&mut ds, &cfg), Ok(false), "{flag:?} twice");
    }
}

#[test]
fn has_cert_volume_is_false_without_a_pod_spec() {
    let mut ds = virt_handler();
    ds.spec = None;
    assert!(!has_cert_volume(&ds, &TlsConfig::default()));
}

/// virt-handler with a sidecar prepended that also mounts the client certificates.
fn handler_with_sidecar() -> DaemonSet {
    let mut ds = virt_handler();
    let sidecar = Container {
        name: "cert-watcher".into(),
        args: Some(vec!["--watch".into(), CERT_MOUNT_PATH.into()]),
        volume_mounts: Some(vec![VolumeMount {
            name: "kubevirt-virt-handler-certs".into(),
            mount_path: CERT_MOUNT_PATH.into(),
            read_only: Some(true),
            ..VolumeMount::default()
        }]),
        ..Container::default()
    };
    pod_spec_mut(&mut ds).containers.insert(0, sidecar);
    ds
}

#[test]
fn selecting_by_name_survives_a_prepended_sidecar() {
    let mut by_name = handler_with_sidecar();
    assert!(insert_tls_flag(&mut by_name, &named("virt-handler")).unwrap());
    assert_eq!(count_arg(&by_name, 1, "--migration-cn-types"), 1);
    assert_eq!(count_arg(&by_name, 0, "--migration-cn-types"), 0);

    // The reference's index 0 now points at the sidecar.
    let mut by_index = handler_with_sidecar();
    assert!(insert_tls_flag(&mut by_index, &TlsConfig::reference()).unwrap());
    assert_eq!(count_arg(&by_index, 0, "--migration-cn-types"), 1);
    assert_eq!(count_arg(&by_index, 1, "--migration-cn-types"), 0);
}

#[test]
fn idempotent_detach_strips_every_mount_of_the_volume() {
    let mut ds = handler_with_sidecar();
    pod_spec_mut(&mut ds).init_containers.as_mut().unwrap()[0].volume_mounts =
        Some(vec![VolumeMount {
            name: "kubevirt-virt-handler-certs".into(),
            mount_path: "/certs".into(),
            ..VolumeMount::default()
        }]);
    let cfg = named("virt-handler");
    assert!(detach_cert_secret(&mut ds, &cfg).unwrap());
    assert!(!has_cert_volume(&ds, &cfg));
    assert!(
        dangling_mounts(&ds).is_empty(),
        "{:?}",
        dangling_mounts(&ds)
    );
    // Emptied mount lists are dropped, the others keep their remaining mounts.
    let spec = pod_spec(&ds);
    assert_eq!(spec.containers[0].volume_mounts, None);
    assert_eq!(
        spec.init_containers.as_ref().unwrap()[0].volume_mounts,
        None
    );
    assert_eq!(
        mounts(&ds),
        [
            (
                "virt-handler".to_owned(),
                "kubevirt-virt-handler-server-certs".to_owned()
            ),
            ("virt-handler".to_owned(), "libvirt-runtimes".to_owned()),
        ]
    );
    assert!(
        !detach_cert_secret(&mut ds, &cfg).unwrap(),
        "second detach changed something"
    );
}

#[test]
fn reference_detach_leaves_other_containers_mounts_dangling() {
    let mut ds = handler_with_sidecar();
    let cfg = TlsConfig {
        container: ContainerSelector::Index(1),
        ..TlsConfig::reference()
    };
    assert!(detach_cert_secret(&mut ds, &cfg).unwrap());
    assert_eq!(
        dangling_mounts(&ds),
        [(
            "cert-watcher".to_owned(),
            "kubevirt-virt-handler-certs".to_owned()
        )]
    );
}

#[test]
fn detach_without_the_volume_changes_nothing() {
    for cfg in both_modes() {
        let mut ds = virt_handler_without_cert();
        assert!(!detach_cert_secret(&mut ds, &cfg).unwrap());
        assert_eq!(ds, virt_handler_without_cert());
    }
}

#[test]
fn a_mount_without_its_volume_is_still_removed() {
    // Volume already gone, mount left over (e.g. a hand-edited template): detach cleans it up.
    let mut ds = virt_handler();
    pod_spec_mut(&mut ds)
        .volumes
        .as_mut()
        .unwrap()
        .retain(|v| v.name != "kubevirt-virt-handler-certs");
    assert!(detach_cert_secret(&mut ds, &TlsConfig::default()).unwrap());
    assert_eq!(ds, virt_handler_without_cert());
}

#[test]
fn flag_without_value_is_inserted_alone() {
    let cfg = TlsConfig {
        flag: "--tls-only".into(),
        flag_value: String::new(),
        ..TlsConfig::default()
    };
    let mut ds = virt_handler();
    let before = args(&ds, 0);
    assert!(insert_tls_flag(&mut ds, &cfg).unwrap());
    assert_eq!(args(&ds, 0)[before.len()..], ["--tls-only".to_owned()]);
    assert!(!insert_tls_flag(&mut ds, &cfg).unwrap());
}

#[test]
fn insert_into_a_container_without_args_creates_them() {
    let mut ds = virt_handler();
    pod_spec_mut(&mut ds).containers[0].args = None;
    assert!(insert_tls_flag(&mut ds, &TlsConfig::default()).unwrap());
    assert_eq!(args(&ds, 0), ["--migration-cn-types", "migration"]);
}
