//! Resident memory of the simulator's store holding N pods (default 5,000) copied from a real
//! DaemonSet pod (testdata/pods/daemonset-pod-healthy.yaml), with every change retained in the
//! watch history. Linux only (reads /proc/self/statm).
//!
//! `cargo run --release -p canary-sim --example store_memory -- 5000`

use canary_sim::{SimClock, Store};
use k8s_openapi::api::core::v1::Pod;

fn main() -> anyhow::Result<()> {
    let count: usize = std::env::args()
        .nth(1)
        .map(|n| n.parse())
        .transpose()?
        .unwrap_or(5000);
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../testdata/pods/daemonset-pod-healthy.yaml"
    );
    let mut template: Pod = serde_saphyr::from_str(&std::fs::read_to_string(path)?)?;
    template.metadata.namespace = Some("default".into());
    template.metadata.resource_version = None;
    let pod_json_bytes = serde_json::to_vec(&template)?.len();

    let store = Store::new(SimClock::new());
    let before = canary_testkit::resident_bytes();
    for i in 0..count {
        let mut pod = template.clone();
        pod.metadata.name = Some(format!("agent-{i}"));
        pod.spec.get_or_insert_with(Default::default).node_name = Some(format!("node-{i}"));
        store.create(&pod)?;
    }
    let after = canary_testkit::resident_bytes();
    let grown = after.saturating_sub(before);
    println!(
        "{count} pods ({pod_json_bytes} bytes of JSON each): store objects {}, resident memory grew by {:.1} MiB ({} bytes per pod)",
        store.object_count(),
        grown as f64 / (1024.0 * 1024.0),
        grown / count.max(1) as u64
    );
    Ok(())
}
