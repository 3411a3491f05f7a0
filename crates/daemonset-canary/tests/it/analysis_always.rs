//! Analysis on the MaxUnavailable driver (issue 46), on the real binary against `sim serve` and
//! its stand-in Prometheus, as a user meets it: a release ready everywhere but reporting 50%
//! errors fails with `AnalysisFailed` while only its canary runs it (the DaemonSet held on
//! `OnDelete`, never widened), and `daemonset-canary status` says which stretch was measured;
//! a good release then passes its canary's analysis, is widened and measured on to the end.
use crate::support;

use canary_kube_adapter::CanaryDaemonSet;
use canary_state_machine::{Compatibility, Driver, FailureReason};
use daemonset_canary::demo::scenario::{NAME, NAMESPACE, error_ratio_analysis, manifest_for};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use std::process::Stdio;
use std::time::{Duration, Instant};

/// The MaxUnavailable driver's manifest of `version`, judged by the agents' error ratio (at
/// most 5%, at most twice the old nodes'), its canary soaking 5 s; `error_ratio` is what the
/// new version's agents report.
fn manifest(prometheus: &str, version: &str, error_ratio: Option<&str>) -> serde_json::Value {
    let mut manifest = manifest_for(
        Compatibility::Fixed,
        Driver::MaxUnavailable,
        None,
        version,
        "healthy",
    );
    manifest["spec"]["analysis"] = error_ratio_analysis(prometheus, "2s");
    manifest["spec"]["health"] = serde_json::json!({"canarySoak": "5s"});
    if let Some(ratio) = error_ratio {
        manifest["spec"]["template"]["spec"]["template"]["metadata"]["annotations"]
            [canary_sim::prometheus::ERROR_RATIO_ANNOTATION] = ratio.into();
    }
    manifest
}

/// Polls (60 s at most) until the status is `phase` on `generation`, and returns it.
async fn until_phase(
    api: &Api<CanaryDaemonSet>,
    generation: Option<i64>,
    phase: &str,
) -> canary_kube_adapter::crd::CanaryDaemonSetStatus {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let status = api.get(NAME).await.unwrap().status.unwrap_or_default();
        if status.observed_generation == generation && status.phase_name() == Some(phase) {
            return status;
        }
        assert!(Instant::now() < deadline, "not {phase}: {status:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// How many live pods run `version`.
async fn pods_on(pods: &Api<Pod>, version: &str) -> usize {
    pods.list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|pod| pod.metadata.deletion_timestamp.is_none())
        .filter(|pod| {
            pod.spec
                .as_ref()
                .and_then(|s| s.containers.first())
                .and_then(|c| c.image.as_deref())
                .is_some_and(|image| image.ends_with(&format!(":{version}")))
        })
        .count()
}

fn status_view(kubeconfig: &std::path::Path) -> String {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_daemonset-canary"))
        .args(["status", "-n", NAMESPACE, NAME, "--kubeconfig"])
        .arg(kubeconfig)
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[tokio::test]
async fn max_unavailable_a_ready_release_with_bad_metrics_fails_on_its_canary() {
    let url_file = std::env::temp_dir().join(format!(
        "canary-analysis-always-{}.prometheus",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&url_file);
    let url_arg = url_file.to_string_lossy().into_owned();
    let sim = support::serve_sim(
        "analysis-always",
        &[
            "--nodes",
            "4",
            "--speed",
            "10",
            "--prometheus-url-file",
            &url_arg,
        ],
    );
    let prometheus = std::fs::read_to_string(&url_file)
        .unwrap()
        .trim()
        .to_owned();
    let client = support::client_with_crd(&sim.kubeconfig).await;
    let log = std::fs::File::create(sim.dir.join("controller.log")).unwrap();
    let _run = support::spawn_run_allowing(&sim.kubeconfig, Stdio::from(log), &[&prometheus]);
    let api: Api<CanaryDaemonSet> = Api::namespaced(client.clone(), NAMESPACE);
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let daemon_sets: Api<DaemonSet> = Api::namespaced(client.clone(), NAMESPACE);

    let v1: CanaryDaemonSet = serde_json::from_value(manifest(&prometheus, "v1", None)).unwrap();
    let created = api.create(&PostParams::default(), &v1).await.unwrap();
    until_phase(&api, created.metadata.generation, "successful").await;

    // v2: ready everywhere, 50% errors. Failed on its canary, nothing widened, held.
    let v2 = manifest(&prometheus, "v2", Some("0.5"));
    let patched = api
        .patch(
            NAME,
            &PatchParams::default(),
            &Patch::Merge(&serde_json::json!({"spec": v2["spec"]})),
        )
        .await
        .unwrap();
    let status = until_phase(&api, patched.metadata.generation, "failed").await;
    assert_eq!(status.reason, Some(FailureReason::AnalysisFailed));
    let analysis = status.analysis.clone().unwrap_or_default();
    assert_eq!((analysis.step, analysis.verdict.as_str()), (0, "Failed"));
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(pods_on(&pods, "v2").await, 1, "only the canary runs v2");
    let strategy = daemon_sets
        .get(NAME)
        .await
        .unwrap()
        .spec
        .and_then(|s| s.update_strategy)
        .and_then(|s| s.type_);
    assert_eq!(strategy.as_deref(), Some("OnDelete"));
    let view = status_view(&sim.kubeconfig);
    assert!(
        view.contains("Analysis:        the canary, revision")
            && view.contains("error-ratio")
            && view.contains("0.5 is above max 0.05"),
        "{view}"
    );

    // v3, a good release: its canary passes, the widen, every node, measured to the end.
    // (A merge patch keeps v2's annotation unless it is given: 1%, as v1 reports.)
    let v3 = manifest(&prometheus, "v3", Some("0.01"));
    let patched = api
        .patch(
            NAME,
            &PatchParams::default(),
            &Patch::Merge(&serde_json::json!({"spec": v3["spec"]})),
        )
        .await
        .unwrap();
    let status = until_phase(&api, patched.metadata.generation, "successful").await;
    assert_eq!(pods_on(&pods, "v3").await, 4);
    let analysis = status.analysis.unwrap_or_default();
    assert_eq!(analysis.step, 1, "the widened rollout measured last");
    assert_eq!(analysis.measurements[0].failures, 0);
}
