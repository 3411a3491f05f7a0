//! The plan on real third-party DaemonSets (testdata/daemonsets/).

use crate::common::*;
use canary_tls_migration::{
    ContainerSelector, TemplateEdit, TlsConfig, apply_preamble, apply_step, has_cert_volume,
    has_tls_flag, observe, prepare_for_create, supports_tls, tls_step,
};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{SecretVolumeSource, Volume, VolumeMount};

/// Drives the migration as the controller would: rebuild desired from `built`, preamble, and
/// when a step is due apply it and treat that template as rolled out. Returns the steps taken
/// and the final live DaemonSet.
fn migrate(built: &DaemonSet, cfg: &TlsConfig) -> (Vec<TemplateEdit>, DaemonSet) {
    let mut live = built.clone();
    let mut steps = Vec::new();
    for _ in 0..5 {
        let mut desired = built.clone();
        apply_preamble(&live, &mut desired, cfg).unwrap();
        match tls_step(observe(&live, &desired, cfg).unwrap()) {
            None => {
                assert_eq!(desired, live, "quiet state must be stable");
                return (steps, live);
            }
            Some(step) => {
                assert!(apply_step(&mut desired, step, cfg).unwrap());
                steps.push(step);
                live = desired;
            }
        }
    }
    panic!("migration did not converge: {steps:?}");
}

fn add_label(ds: &mut DaemonSet, key: &str) {
    ds.metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert(key.into(), "true".into());
}

#[test]
fn every_fixture_parses_and_is_left_alone_without_the_label() {
    for file in FIXTURES {
        let ds = fixture(file);
        for cfg in both_modes() {
            assert!(!supports_tls(&ds, &cfg), "{file}");
            assert!(!has_tls_flag(&ds, &cfg).unwrap(), "{file}");
            assert!(!has_cert_volume(&ds, &cfg), "{file}");
            let (steps, live) = migrate(&ds, &cfg);
            assert!(steps.is_empty(), "{file}: {steps:?}");
            assert_eq!(live, ds, "{file}");
            let mut created = ds.clone();
            assert!(
                !prepare_for_create(&mut created, &cfg).unwrap().changed(),
                "{file}"
            );
        }
    }
}

#[test]
fn labelled_fixtures_get_the_flag_in_one_rollout_and_nothing_else_changes() {
    for file in FIXTURES {
        let mut ds = fixture(file);
        add_label(&mut ds, "kubevirt.io/supports-migration-cn-types");
        for cfg in both_modes() {
            let (steps, live) = migrate(&ds, &cfg);
            // No cert volume to detach: one step only.
            assert_eq!(steps, [TemplateEdit::InsertTlsFlag], "{file}");
            let mut expected = ds.clone();
            args_mut(&mut expected, 0).extend(["--migration-cn-types".into(), "migration".into()]);
            assert_eq!(live, expected, "{file}");
        }
    }
}

/// node-exporter whose kube-rbac-proxy sidecar moves to a new TLS setting and drops a legacy
/// client-certificate secret that both containers mount.
fn node_exporter_with_legacy_certs() -> DaemonSet {
    let mut ds = fixture("node-exporter.yaml");
    add_label(&mut ds, "example.com/tls13-ready");
    let spec = pod_spec_mut(&mut ds);
    spec.volumes.get_or_insert_with(Vec::new).push(Volume {
        name: "legacy-client-certs".into(),
        secret: Some(SecretVolumeSource {
            secret_name: Some("legacy-client-certs".into()),
            ..SecretVolumeSource::default()
        }),
        ..Volume::default()
    });
    for container in &mut spec.containers {
        container
            .volume_mounts
            .get_or_insert_with(Vec::new)
            .push(VolumeMount {
                name: "legacy-client-certs".into(),
                mount_path: "/etc/legacy-certs".into(),
                read_only: Some(true),
                ..VolumeMount::default()
            });
    }
    ds
}

fn rbac_proxy_config() -> TlsConfig {
    TlsConfig {
        support_label: "example.com/tls13-ready".into(),
        support_value: "true".into(),
        flag: "--tls-min-version".into(),
        flag_value: "VersionTLS13".into(),
        cert_volume: "legacy-client-certs".into(),
        container: ContainerSelector::Name("kube-rbac-proxy".into()),
        ..TlsConfig::default()
    }
}

#[test]
fn configured_migration_on_node_exporter_sidecar() {
    let built = node_exporter_with_legacy_certs();
    let cfg = rbac_proxy_config();
    assert!(supports_tls(&built, &cfg));
    // The reference label alone does nothing with this config.
    assert!(!supports_tls(&built, &TlsConfig::default()));

    let (steps, live) = migrate(&built, &cfg);
    assert_eq!(
        steps,
        [TemplateEdit::InsertTlsFlag, TemplateEdit::DetachCertSecret]
    );

    let proxy = container(&live, "kube-rbac-proxy");
    let proxy_args = proxy.args.clone().unwrap();
    assert_eq!(
        proxy_args[proxy_args.len() - 2..],
        ["--tls-min-version".to_owned(), "VersionTLS13".to_owned()]
    );
    let exporter = container(&live, "node-exporter");
    assert_eq!(
        exporter,
        container(&fixture("node-exporter.yaml"), "node-exporter")
    );
    assert!(!has_cert_volume(&live, &cfg));
    assert!(
        dangling_mounts(&live).is_empty(),
        "{:?}",
        dangling_mounts(&live)
    );
    assert_eq!(volume_names(&live), ["sys", "root"]);
    // Everything outside the pod spec (strategy with its "10%", selector) is untouched.
    assert_eq!(
        live.spec.as_ref().unwrap().update_strategy,
        built.spec.as_ref().unwrap().update_strategy
    );
}

#[test]
fn configured_migration_on_node_exporter_create_path() {
    let mut created = node_exporter_with_legacy_certs();
    let outcome = prepare_for_create(&mut created, &rbac_proxy_config()).unwrap();
    assert!(outcome.kept_flag && outcome.kept_cert_removed);
    let (steps, live) = migrate(&created, &rbac_proxy_config());
    assert!(
        steps.is_empty(),
        "created DaemonSet needs no further rollout: {steps:?}"
    );
    assert_eq!(live, created);
}
