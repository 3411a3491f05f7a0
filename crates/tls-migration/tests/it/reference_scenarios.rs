//! Reference scenarios 13 and 14 (spec section 8, TLS era) and the create path, at the
//! DaemonSet level: what the desired DaemonSet looks like after the step.

use crate::common::*;
use canary_tls_migration::{
    InsertMode, PreambleOutcome, TemplateEdit, TlsConfig, TlsFacts, apply_preamble, apply_step,
    has_cert_volume, has_tls_flag, observe, prepare_for_create, tls_step,
};
use k8s_openapi::api::apps::v1::DaemonSet;

const FLAG: &str = "--migration-cn-types";
const CERT: &str = "kubevirt-virt-handler-certs";

/// One reconcile at "rollout complete": preamble, observation, next step applied to desired.
fn complete_reconcile(
    live: &DaemonSet,
    built: &DaemonSet,
    cfg: &TlsConfig,
) -> (DaemonSet, Option<TemplateEdit>) {
    let mut desired = built.clone();
    apply_preamble(live, &mut desired, cfg).unwrap();
    let step = tls_step(observe(live, &desired, cfg).unwrap());
    if let Some(step) = step {
        assert!(
            apply_step(&mut desired, step, cfg).unwrap(),
            "{step:?} changed nothing"
        );
    }
    (desired, step)
}

#[test]
fn scenario_14_switch_to_the_tls_rollout_inserts_the_flag_and_keeps_the_cert() {
    for cfg in both_modes() {
        let live = virt_handler();
        let (desired, step) = complete_reconcile(&live, &virt_handler(), &cfg);

        assert_eq!(step, Some(TemplateEdit::InsertTlsFlag), "{:?}", cfg.insert);
        let mut expected_args = args(&live, 0);
        expected_args.extend([FLAG.to_owned(), "migration".to_owned()]);
        assert_eq!(args(&desired, 0), expected_args, "{:?}", cfg.insert);
        // The secret stays until the flag is rolled out everywhere.
        assert!(has_cert_volume(&desired, &cfg));
        assert!(mounts(&desired).contains(&("virt-handler".into(), CERT.into())));
        // Only the args changed: strategy, volumes, metadata are untouched.
        let mut without_flag = desired.clone();
        args_mut(&mut without_flag, 0).truncate(args(&live, 0).len());
        assert_eq!(without_flag, live);
    }
}

#[test]
fn scenario_13_unattach_the_secret_before_completing() {
    for cfg in both_modes() {
        let live = virt_handler_with_flag();
        let (desired, step) = complete_reconcile(&live, &virt_handler(), &cfg);

        assert_eq!(
            step,
            Some(TemplateEdit::DetachCertSecret),
            "{:?}",
            cfg.insert
        );
        // The flag is kept by the preamble, once.
        assert_eq!(count_arg(&desired, 0, FLAG), 1);
        assert_eq!(count_arg(&desired, 0, "migration"), 1);
        assert!(!volume_names(&desired).contains(&CERT.to_owned()));
        let paths: Vec<String> = container(&desired, "virt-handler")
            .volume_mounts
            .iter()
            .flatten()
            .map(|m| m.mount_path.clone())
            .collect();
        assert!(!paths.contains(&CERT_MOUNT_PATH.to_owned()), "{paths:?}");
        assert_eq!(
            volume_names(&desired),
            ["kubevirt-virt-handler-server-certs", "libvirt-runtimes"]
        );
        assert!(dangling_mounts(&desired).is_empty());
        assert_eq!(desired, virt_handler_without_cert_with_flag());
    }
}

fn virt_handler_without_cert_with_flag() -> DaemonSet {
    let mut ds = virt_handler_without_cert();
    args_mut(&mut ds, 0).extend([FLAG.to_owned(), "migration".to_owned()]);
    ds
}

#[test]
fn tls_era_scenarios_3_and_12_finish_normally_once_both_steps_are_live() {
    for cfg in both_modes() {
        let live = virt_handler_without_cert_with_flag();
        let mut desired = virt_handler();
        let outcome = apply_preamble(&live, &mut desired, &cfg).unwrap();
        assert_eq!(
            outcome,
            PreambleOutcome {
                kept_flag: true,
                kept_cert_removed: true
            }
        );
        let obs = observe(&live, &desired, &cfg).unwrap();
        assert_eq!(
            obs,
            TlsFacts {
                supported: true,
                live_has_flag: true,
                desired_has_cert_volume: false
            }
        );
        assert_eq!(tls_step(obs), None);
        assert_eq!(
            desired, live,
            "the preamble alone rebuilds the migrated template"
        );
    }
}

#[test]
fn whole_migration_takes_two_rollouts_then_stays_quiet() {
    for cfg in both_modes() {
        let built = virt_handler();
        let mut live = built.clone();
        let mut steps = Vec::new();
        for _ in 0..5 {
            let (desired, step) = complete_reconcile(&live, &built, &cfg);
            let Some(step) = step else { break };
            steps.push(step);
            live = desired; // the step's template, rolled out and observed complete
        }
        assert_eq!(
            steps,
            [TemplateEdit::InsertTlsFlag, TemplateEdit::DetachCertSecret]
        );
        assert_eq!(live, virt_handler_without_cert_with_flag());
        let (desired, step) = complete_reconcile(&live, &built, &cfg);
        assert_eq!((desired, step), (live, None));
    }
}

#[test]
fn unlabelled_daemonset_gets_no_completion_step() {
    for cfg in both_modes() {
        for label in [None, Some("false"), Some("True"), Some("")] {
            let mut live = virt_handler();
            let labels = live.metadata.labels.as_mut().unwrap();
            labels.remove("kubevirt.io/supports-migration-cn-types");
            if let Some(value) = label {
                labels.insert(
                    "kubevirt.io/supports-migration-cn-types".into(),
                    value.into(),
                );
            }
            let (desired, step) = complete_reconcile(&live, &live, &cfg);
            assert_eq!(step, None, "{label:?}");
            assert_eq!(desired, live);
        }
    }
}

#[test]
fn the_label_on_the_pod_template_does_not_count() {
    let mut live = virt_handler();
    let label = live
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .remove_entry("kubevirt.io/supports-migration-cn-types")
        .unwrap();
    let template_labels = template_meta_mut(&mut live).labels.as_mut().unwrap();
    template_labels.insert(label.0, label.1);
    let obs = observe(&live, &live, &TlsConfig::default()).unwrap();
    assert!(!obs.supported);
}

#[test]
fn quirk_16_reference_step_duplicates_a_flag_already_in_desired() {
    // Live lacks the flag; desired already carries it (e.g. from customizeComponents).
    let live = virt_handler();
    for (cfg, expected_count, changed) in [
        (TlsConfig::reference(), 2, true),
        (TlsConfig::default(), 1, false),
    ] {
        let mut desired = virt_handler_with_flag();
        apply_preamble(&live, &mut desired, &cfg).unwrap();
        let step = tls_step(observe(&live, &desired, &cfg).unwrap());
        assert_eq!(step, Some(TemplateEdit::InsertTlsFlag));
        assert_eq!(
            apply_step(&mut desired, TemplateEdit::InsertTlsFlag, &cfg).unwrap(),
            changed
        );
        assert_eq!(
            count_arg(&desired, 0, FLAG),
            expected_count,
            "{:?}",
            cfg.insert
        );
    }
}

#[test]
fn create_path_inserts_and_detaches_at_once() {
    for cfg in both_modes() {
        let mut desired = virt_handler();
        let outcome = prepare_for_create(&mut desired, &cfg).unwrap();
        assert_eq!(
            outcome,
            PreambleOutcome {
                kept_flag: true,
                kept_cert_removed: true
            }
        );
        assert_eq!(desired, virt_handler_without_cert_with_flag());
    }
}

#[test]
fn create_path_with_the_flag_already_there_detaches_only_in_idempotent_mode() {
    let mut reference = virt_handler_with_flag();
    let outcome = prepare_for_create(&mut reference, &TlsConfig::reference()).unwrap();
    assert!(!outcome.changed());
    assert_eq!(reference, virt_handler_with_flag());

    let mut safe = virt_handler_with_flag();
    let outcome = prepare_for_create(&mut safe, &TlsConfig::default()).unwrap();
    assert_eq!(
        outcome,
        PreambleOutcome {
            kept_flag: false,
            kept_cert_removed: true
        }
    );
    assert_eq!(safe, virt_handler_without_cert_with_flag());
}

#[test]
fn create_path_leaves_an_unsupported_daemonset_alone() {
    for cfg in both_modes() {
        let mut desired = virt_handler();
        desired.metadata.labels = None;
        let before = desired.clone();
        assert!(!prepare_for_create(&mut desired, &cfg).unwrap().changed());
        assert_eq!(desired, before);
    }
}

#[test]
fn flag_with_equals_counts_as_present_in_both_modes() {
    for cfg in both_modes() {
        let mut live = virt_handler();
        args_mut(&mut live, 0).push("--migration-cn-types=migration".into());
        assert!(has_tls_flag(&live, &cfg).unwrap());
        let (_, step) = complete_reconcile(&live, &live, &cfg);
        assert_eq!(step, Some(TemplateEdit::DetachCertSecret));
    }
}

#[test]
fn modes_differ_on_lookalike_flags_and_on_command() {
    let mut lookalike = virt_handler();
    args_mut(&mut lookalike, 0).push("--no-migration-cn-types".into());
    assert!(has_tls_flag(&lookalike, &TlsConfig::reference()).unwrap());
    assert!(!has_tls_flag(&lookalike, &TlsConfig::default()).unwrap());

    let mut in_command = virt_handler();
    pod_spec_mut(&mut in_command).containers[0]
        .command
        .as_mut()
        .unwrap()
        .push(FLAG.into());
    assert!(!has_tls_flag(&in_command, &TlsConfig::reference()).unwrap());
    assert!(has_tls_flag(&in_command, &TlsConfig::default()).unwrap());
    assert_eq!(TlsConfig::default().insert, InsertMode::Idempotent);
}
