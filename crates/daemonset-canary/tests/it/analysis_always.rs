//! Analysis on the MaxUnavailable driver (issue 46), on the real binary against `sim serve` and
//! its stand-in Prometheus, as a user meets it: a release ready everywhere but reporting 50%
//! errors fails with `AnalysisFailed` while only its canary runs it (the DaemonSet held on
//! `OnDelete`, never widened), and `daemonset-canary status` says which stretch was measured;
//! a good release then passes its canary's analysis, is widened and measured on to the end.
use crate::support;
use support::rollout::{create, live_pods_on, set_spec, until_phase};

use canary_kube_adapter::CanaryDaemonSet;
use canary_state_machine::{Compatibility, Driver, FailureReason};
use daemonset_canary::demo::scenario::{NAME, NAMESPACE, error_ratio_analysis, manifest_for};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use std::process::Stdio;
use std::time::Duration;

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

    let v1 = manifest(&prometheus, "v1", None);
    until_phase(&api, create(&api, v1).await, "successful").await;

    // v2: ready everywhere, 50% errors. Failed on its canary, nothing widened, held.
    let v2 = manifest(&prometheus, "v2", Some("0.5"));
    let status = until_phase(&api, set_spec(&api, &v2).await, "failed").await;
    assert_eq!(status.reason, Some(FailureReason::AnalysisFailed));
    let analysis = status.analysis.clone().unwrap_or_default();
    assert_eq!((analysis.step, analysis.verdict.as_str()), (0, "Failed"));
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        live_pods_on(&pods, "v2").await.len(),
        1,
        "only the canary runs v2"
    );
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
    let status = until_phase(&api, set_spec(&api, &v3).await, "successful").await;
    assert_eq!(live_pods_on(&pods, "v3").await.len(), 4);
    let analysis = status.analysis.unwrap_or_default();
    assert_eq!(analysis.step, 1, "the widened rollout measured last");
    assert_eq!(analysis.measurements[0].failures, 0);
}
