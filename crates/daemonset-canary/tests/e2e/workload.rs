//! `spec.workloadRef` on a DaemonSet its owner writes (as `helm install` leaves one: Helm's
//! labels and annotations, `updateStrategy: OnDelete`), on the real DaemonSet controller, which
//! records each template the owner writes as a ControllerRevision: the controller moves the
//! pods to the new revision through the steps and writes nothing of the DaemonSet but its claim
//! (one annotation, `canary.daemonset.dev/claimed-by`, issue 47: one CanaryDaemonSet per
//! DaemonSet), never its spec.

use crate::audit;
use crate::harness::{Cli, E2e, accepted, refused, workload_claimant};
use daemonset_canary::demo::scenario::NAME;
use std::time::Duration;

/// The chart's DaemonSet, as Helm names and labels it.
const RELEASE: &str = "helm-agent";

/// The owner ships a new image: the canary node first, a pause until promoted, then the rest,
/// one DELETE per old pod. The owner ships a crash-looping one: it fails at its canary and no
/// other pod is touched. The owner rolls back (`helm rollback` writes the earlier template): the
/// crash-looping pod is replaced and every pod runs the earlier image again. Meanwhile the
/// verbs that would write the template are refused, and the API server recorded no write of
/// the DaemonSet by the controller, ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs `cargo xtask e2e`"]
async fn a_daemon_set_helm_owns_follows_each_owner_change_and_only_its_claim_is_written() {
    let e2e = E2e::isolated("workload").nodes(6).start().await;
    let (_, container) = e2e
        .owned_daemon_set(
            RELEASE,
            serde_json::json!({
                "labels": {"app.kubernetes.io/managed-by": "Helm", "app.kubernetes.io/instance": "agent"},
                "annotations": {"meta.helm.sh/release-name": "agent", "meta.helm.sh/release-namespace": e2e.namespace},
            }),
        )
        .await;

    let steps = serde_json::json!([{"nodes": "1"}, {"pause": {}}, {"nodes": "100%"}]);
    let cds = workload_claimant(&e2e, NAME, (RELEASE, &container), steps);
    e2e.install(&cds, Duration::from_secs(120)).await;
    assert_eq!(e2e.status().await.target_version.as_deref(), Some("v1"));

    // The owner changes the template with a strategic merge patch, as `helm upgrade` and
    // `helm rollback` send one (Helm 3 patches; it does not apply).
    let owner_sets = |image: &'static str, behavior: &'static str| {
        e2e.owner_writes(RELEASE, "helm", &container, image, Some(behavior))
    };
    let on = |image: &'static str| e2e.live_on(image);
    owner_sets("registry.example/node-agent:v2", "healthy").await;
    e2e.wait_for(
        "v2's canary, held by the pause",
        Duration::from_secs(120),
        || async {
            let status = e2e.status().await;
            status.phase_name() == Some("paused") && status.target_version.as_deref() == Some("v2")
        },
    )
    .await;
    assert_eq!(on("registry.example/node-agent:v2").await, 1);
    // The verb table's refusal, the same words the controller's event would give.
    let not_ours = "the DaemonSet belongs to spec.workloadRef's owner (Helm, Argo CD, Flux); \
                    roll back where it is defined";
    refused(
        &e2e.verb(Cli::Binary, &["abort"]),
        &format!("abort refused: {not_ours}"),
    );
    refused(
        &e2e.verb(Cli::Plugin, &["undo"]),
        &format!("undo refused: {not_ours}"),
    );
    accepted(&e2e.verb(Cli::Plugin, &["promote"]), "promoted");
    e2e.wait_for("every pod on v2", Duration::from_secs(120), || async {
        let status = e2e.status().await;
        status.phase_name() == Some("successful") && on("registry.example/node-agent:v2").await == 6
    })
    .await;

    // A crash-looping release: failed at its canary, nothing else touched.
    owner_sets("registry.example/node-agent:v3", "crashloop").await;
    e2e.wait_for(
        "v3 failed at its canary",
        Duration::from_secs(120),
        || async {
            let status = e2e.status().await;
            status.phase_name() == Some("failed") && status.target_version.as_deref() == Some("v3")
        },
    )
    .await;
    assert_eq!(e2e.status().await.reason_name(), Some("CanaryCrashLooping"));
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(
        e2e.version_counts().await,
        [("v2".into(), 5), ("v3".into(), 1)].into()
    );

    // `helm rollback`: the owner writes v2's template again; the DaemonSet controller reuses
    // v2's ControllerRevision under a new number, and the controller moves the one v3 pod back.
    owner_sets("registry.example/node-agent:v2", "healthy").await;
    e2e.wait_for("every pod back on v2", Duration::from_secs(180), || async {
        let status = e2e.status().await;
        if status.phase_name() == Some("paused") {
            accepted(&e2e.verb(Cli::Binary, &["promote"]), "promoted");
        }
        status.phase_name() == Some("successful")
            && status.target_version.as_deref() == Some("v2")
            && on("registry.example/node-agent:v2").await == 6
    })
    .await;

    // The one write the owner's DaemonSet gets: the claim, a JSON Patch that tests the
    // resourceVersion it read and adds the claim annotation (and the annotations map, if none).
    let claim_path = format!(
        "/metadata/annotations/{}",
        canary_kube_adapter::claim::CLAIM_ANNOTATION.replace('/', "~1")
    );
    let writes = audit::daemon_set_writes(&e2e.namespace, RELEASE);
    let beyond_the_claim: Vec<String> = writes
        .iter()
        .filter(|write| {
            let ops = write
                .request_object
                .as_ref()
                .and_then(|body| body.as_array())
                .cloned()
                .unwrap_or_default();
            let only_the_claim = write.verb == "patch"
                && !ops.is_empty()
                && ops.iter().all(|op| match op["op"].as_str() {
                    Some("test") => op["path"] == "/metadata/resourceVersion",
                    Some("add") => {
                        op["path"] == "/metadata/annotations" || op["path"] == claim_path.as_str()
                    }
                    _ => false,
                });
            !only_the_claim
        })
        .map(|write| format!("{}: {:?}", write.line(), write.request_object))
        .collect();
    assert!(
        beyond_the_claim.is_empty(),
        "the controller wrote the owner's DaemonSet beyond its claim: {beyond_the_claim:#?}"
    );
    let claims = writes.iter().filter(|write| write.succeeded()).count();
    assert!(
        claims <= 1,
        "the claim was written {claims} times: {writes:#?}"
    );
    let deletions = audit::writes_in(&e2e.namespace)
        .into_iter()
        .filter(|w| w.verb == "delete" && w.resource() == "pods")
        .count();
    // v2: six old pods; v3: its canary's; the rollback: the v3 pod.
    assert_eq!(deletions, 6 + 1 + 1, "one DELETE per replaced pod");
}
