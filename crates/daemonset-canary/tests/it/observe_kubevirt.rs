//! `observe-kubevirt` wired to the metrics, in real time against canary-sim with a stand-in
//! virt-operator (the one canary-kubevirt's observe tests use): the exposition shows the observed
//! rollout with `mode="observed"` and the KubeVirt versions, passes `promtool check metrics`, and
//! the observer made no write request.
use crate::support;
use support::KillOnDrop;

#[path = "../../../kubevirt/tests/it/standin.rs"]
mod kubevirt_standin;

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use canary_kube_adapter::Health;
use canary_kube_adapter::Observer;
use canary_kubevirt::ObserveConfig;
use canary_sim::Sim;
use canary_sim::cluster::{ClusterConfig, KubeletConfig};
use daemonset_canary::metrics::Metrics;
use daemonset_canary::metrics::kubevirt as kubevirt_observe;
use kubevirt_standin::StandIn;

const NODES: u32 = 4;

fn fast_cluster() -> ClusterConfig {
    ClusterConfig {
        nodes: NODES,
        kubelet: KubeletConfig {
            start_latency: Duration::from_millis(40),
            ready_delay: Duration::from_millis(40),
            termination_grace: Duration::from_millis(10),
            jitter: 0.0,
            ..KubeletConfig::default()
        },
        ..ClusterConfig::default()
    }
}

fn sample<'a>(text: &'a str, series: &str) -> Option<&'a str> {
    text.lines()
        .find(|line| line.starts_with(series))
        .and_then(|line| line.rsplit(' ').next())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observed_upgrade_is_exported_with_mode_observed() {
    let sim = Sim::builder()
        .cluster_config(fast_cluster())
        .build()
        .unwrap();
    let mut standin = StandIn::new(&sim.client());
    standin.install("v1.5.0").await;
    sim.cluster().wait_idle().await.unwrap();

    let metrics = Arc::new(Metrics::observed().unwrap());
    let health = Health::default();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let observer = tokio::spawn(kubevirt_observe::run(
        sim.client(),
        metrics.clone(),
        health.clone(),
        ObserveConfig {
            observer: Observer::default(),
            ..ObserveConfig::default()
        },
        async {
            let _ = stopped.await;
        },
    ));
    for _ in 0..200 {
        if health.not_ready().is_none() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(health.not_ready(), None, "ready once the caches listed");

    standin.upgrade("v1.6.0", "healthy").await;
    for _ in 0..600 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if standin.sync().await.action.quiet {
            break;
        }
    }
    assert_eq!(
        kubevirt_standin::distinct(standin.phases.clone()).last(),
        Some(&canary_state_machine::Phase::Successful)
    );
    // The bridge copies counters every second.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let text = metrics.encode().unwrap();
    stop.send(()).unwrap();
    observer.await.unwrap().unwrap();

    let phase = |phase: &str| {
        sample(
            &text,
            &format!(
                r#"canary_rollout_phase{{mode="observed",name="virt-handler",namespace="kubevirt",phase="{phase}"}}"#
            ),
        )
    };
    assert_eq!(phase("successful"), Some("1"), "{text}");
    assert_eq!(phase("canary"), Some("0"), "{text}");
    assert_eq!(
        sample(
            &text,
            r#"canary_kubevirt_version_info{name="kubevirt",namespace="kubevirt",observed_version="",target_version="v1.6.0"}"#
        ),
        Some("1"),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            r#"canary_rollout_duration_seconds_count{mode="observed",result="successful"}"#
        ),
        Some("1"),
        "one observed rollout ended: {text}"
    );
    for entered in ["started", "canary", "increasing", "waiting"] {
        let count = sample(
            &text,
            &format!(
                r#"canary_rollout_phase_duration_seconds_count{{mode="observed",phase="{entered}"}}"#
            ),
        );
        assert_eq!(count, Some("1"), "{entered} left once: {text}");
    }
    assert_eq!(
        sample(
            &text,
            r#"canary_rollout_pods{mode="observed",name="virt-handler",namespace="kubevirt",state="updated_ready"}"#
        ),
        Some(NODES.to_string().as_str())
    );
    let passes: u64 = sample(
        &text,
        r#"canary_reconcile_duration_seconds_count{mode="observed"}"#,
    )
    .unwrap()
    .parse()
    .unwrap();
    assert!(passes > 0, "derivation passes are observed reconciles");
    assert_eq!(
        sample(&text, "canary_leader "),
        None,
        "no lease in this mode"
    );
    assert!(
        !text.contains("canary_daemonset_writes_total"),
        "virt-operator's writes are not ours, and this mode makes none: {text}"
    );
    assert!(
        !text.contains(r#"mode="driven",name="#),
        "no driven rollout series: {text}"
    );
    assert_eq!(
        sim.requests().writes(),
        standin.writes,
        "only the stand-in wrote: {:?}",
        sim.requests().iter().collect::<Vec<_>>()
    );
    support::promtool_check_metrics(&text);
}

fn wait_for(what: &str, mut probe: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !probe() {
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: not within 30 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn the_subcommand_observes_a_served_cluster_and_stops_on_sigterm() {
    let sim = support::serve_sim("observe-kubevirt", &["--nodes", "2"]);
    let kubeconfig = &sim.kubeconfig;
    let binary = env!("CARGO_BIN_EXE_daemonset-canary");

    // virt-handler installed by the stand-in, over real sockets.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let client = support::client(kubeconfig).await;
        StandIn::new(&client).install("v1.5.0").await;
    });

    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let mut observer = KillOnDrop(
        Command::new(binary)
            .args(["observe-kubevirt", "--log-format", "json", "--kubeconfig"])
            .arg(kubeconfig)
            .args(["--metrics-addr", &addr])
            .spawn()
            .unwrap(),
    );
    wait_for("/readyz 200", || {
        support::http_get(&addr, "/readyz", Duration::from_secs(10))
            .is_some_and(|r| r.starts_with("HTTP/1.1 200"))
    });
    let series = r#"canary_rollout_phase{mode="observed",name="virt-handler",namespace="kubevirt",phase="successful"} 1"#;
    wait_for("the observed phase", || {
        support::http_get(&addr, "/metrics", Duration::from_secs(10))
            .is_some_and(|r| r.contains(series))
    });
    let metrics = support::http_get(&addr, "/metrics", Duration::from_secs(10)).unwrap();
    assert!(
        metrics.contains(r#"canary_kubevirt_version_info{name="kubevirt",namespace="kubevirt",observed_version="",target_version="v1.5.0"} 1"#),
        "{metrics}"
    );
    // Only what the mode means: it never writes and elects no leader.
    for driven_only in [
        "canary_leader",
        "canary_daemonset_writes_total",
        "canary_reconcile_errors_total",
    ] {
        assert!(!metrics.contains(driven_only), "{driven_only}: {metrics}");
    }

    support::sigterm(&observer.0);
    let mut status = None;
    wait_for("exit after SIGTERM", || {
        status = observer.0.try_wait().unwrap();
        status.is_some()
    });
    assert!(status.unwrap().success(), "exit 0 on SIGTERM: {status:?}");
}
