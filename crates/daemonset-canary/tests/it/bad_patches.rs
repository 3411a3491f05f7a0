//! The bad patches of issue 52's trial on `sim serve`, with the real `kubectl`: each is refused
//! with exactly what kubectl printed when kube-apiserver refused it (the table in
//! `tests/support/bad_patches.rs`, which `tests/e2e.rs` checks against the real control plane),
//! and none changes the stored object. Needs `kubectl`; fails, never skips, without it.

use crate::support;
use crate::support::bad_patches::{BAD_PATCHES, TARGET};

#[test]
fn sim_serve_refuses_each_bad_patch_with_the_real_api_servers_words() {
    let sim = support::serve_sim("bad-patches", &["--nodes", "2"]);
    sim.apply_crd();
    let example = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/examples/node-agent.yaml"
    );
    sim.kubectl_ok(&["apply", "-f", example]);
    let (name, namespace) = TARGET;
    let stored = || sim.kubectl_ok(&["-n", namespace, "get", "cds", name, "-o", "json"]);
    let before = stored();
    let mut differences = Vec::new();
    for bad in BAD_PATCHES {
        let mut args = vec!["-n", namespace, "patch", "cds", name];
        args.extend(bad.kind.flags());
        args.extend(["-p", bad.patch]);
        let output = sim.kubectl(&args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        if output.status.success() {
            differences.push(format!("{}: accepted", bad.what));
        } else if stderr != bad.refusal {
            differences.push(format!(
                "{}:\n  the real API server: {:?}\n  sim serve:           {stderr:?}",
                bad.what, bad.refusal
            ));
        }
    }
    assert!(differences.is_empty(), "{}", differences.join("\n"));
    assert!(
        BAD_PATCHES.len() >= 14,
        "the trial's 14 patches are all in the table"
    );
    assert_eq!(
        stored(),
        before,
        "a refused patch changed the stored object"
    );
}
