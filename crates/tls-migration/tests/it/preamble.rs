//! Every preamble combination: live flag × desired flag × live cert volume × desired cert
//! volume, in both modes.

use crate::common::*;
use canary_tls_migration::{
    PreambleOutcome, apply_preamble, has_cert_volume, has_tls_flag, observe,
};
use k8s_openapi::api::apps::v1::DaemonSet;

fn handler(flag: bool, cert: bool) -> DaemonSet {
    match (flag, cert) {
        (false, true) => virt_handler(),
        (true, true) => virt_handler_with_flag(),
        (false, false) => virt_handler_without_cert(),
        (true, false) => {
            let mut ds = virt_handler_without_cert();
            args_mut(&mut ds, 0).extend(["--migration-cn-types".into(), "migration".into()]);
            ds
        }
    }
}

#[test]
fn every_preamble_combination() {
    let mut cases = 0;
    for cfg in both_modes() {
        for live_flag in [false, true] {
            for desired_flag in [false, true] {
                for live_cert in [false, true] {
                    for desired_cert in [false, true] {
                        let case = format!(
                            "{:?} live_flag={live_flag} desired_flag={desired_flag} live_cert={live_cert} desired_cert={desired_cert}",
                            cfg.insert
                        );
                        let live = handler(live_flag, live_cert);
                        let built = handler(desired_flag, desired_cert);
                        let mut desired = built.clone();
                        let outcome = apply_preamble(&live, &mut desired, &cfg).unwrap();

                        // (a) a flag on live is kept; (b) a volume gone from live stays gone.
                        let expected = PreambleOutcome {
                            kept_flag: live_flag && !desired_flag,
                            kept_cert_removed: !live_cert && desired_cert,
                        };
                        assert_eq!(outcome, expected, "{case}");
                        assert_eq!(
                            has_tls_flag(&desired, &cfg).unwrap(),
                            live_flag || desired_flag,
                            "{case}"
                        );
                        let flags = usize::from(live_flag || desired_flag);
                        assert_eq!(
                            count_arg(&desired, 0, "--migration-cn-types"),
                            flags,
                            "{case}"
                        );
                        assert_eq!(count_arg(&desired, 0, "migration"), flags, "{case}");
                        assert_eq!(
                            has_cert_volume(&desired, &cfg),
                            live_cert && desired_cert,
                            "{case}"
                        );
                        assert!(dangling_mounts(&desired).is_empty(), "{case}");
                        // The result is exactly the handler with the merged facts.
                        assert_eq!(
                            desired,
                            handler(live_flag || desired_flag, live_cert && desired_cert),
                            "{case}"
                        );
                        if !outcome.changed() {
                            assert_eq!(desired, built, "{case}");
                        }
                        // The observation reads the merged facts.
                        let obs = observe(&live, &desired, &cfg).unwrap();
                        assert_eq!(obs.live_has_flag, live_flag, "{case}");
                        assert_eq!(
                            obs.desired_has_cert_volume,
                            live_cert && desired_cert,
                            "{case}"
                        );
                        assert!(obs.supported, "{case}");

                        // Twice equals once.
                        let once = desired.clone();
                        let again = apply_preamble(&live, &mut desired, &cfg).unwrap();
                        assert_eq!(again, PreambleOutcome::default(), "{case}");
                        assert_eq!(desired, once, "{case}");
                        cases += 1;
                    }
                }
            }
        }
    }
    assert_eq!(cases, 32);
}

#[test]
fn preamble_ignores_the_support_label_as_the_reference_does() {
    for cfg in both_modes() {
        let mut live = handler(true, false);
        live.metadata.labels = None;
        let mut desired = handler(false, true);
        desired.metadata.labels = None;
        let outcome = apply_preamble(&live, &mut desired, &cfg).unwrap();
        assert!(
            outcome.kept_flag && outcome.kept_cert_removed,
            "{:?}",
            cfg.insert
        );
    }
}
