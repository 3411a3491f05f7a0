//! Analysis gates of the Pods driver against canary-sim, with a fake Prometheus whose answers
//! the test sets: a passing analysis lets the pause end, a canary with ten times the
//! baseline's error rate fails the rollout (`AnalysisFailed`) and is rolled back, and an
//! unreachable Prometheus holds the rollout (`AnalysisInconclusive`) until it answers again.
//! The bearer token and CA of an https Prometheus come from Secrets, read at every round: a
//! rotated token is used at the next round, a deleted Secret holds the rollout.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use canary_analysis::{Endpoint, Provider, QueryError};
use canary_kube_adapter::controller::ControllerConfig;
use canary_kube_adapter::crd::{
    AnalysisSpec, CanaryDaemonSetSpec, MetricSpec, PrometheusSpec, SecretKeyRef,
};
use canary_testkit::put_secret;
use futures::future::BoxFuture;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use crate::support::*;

/// What the fake Prometheus answers.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Answers {
    /// Every node's error ratio is 1%.
    Healthy,
    /// The nodes of the new revision report 10%, the baseline 1%.
    CanaryErrors,
    /// Connection refused.
    Down,
}

/// A Prometheus that answers as told (`baseline_errors{...}` is the baseline's query), and
/// keeps every query.
#[derive(Debug)]
struct FakePrometheus {
    answers: Mutex<Answers>,
    queries: Mutex<Vec<String>>,
    endpoints: Mutex<Vec<Endpoint>>,
}

impl FakePrometheus {
    fn new(answers: Answers) -> Arc<Self> {
        Arc::new(Self {
            answers: Mutex::new(answers),
            queries: Mutex::new(Vec::new()),
            endpoints: Mutex::new(Vec::new()),
        })
    }

    fn set(&self, answers: Answers) {
        *self.answers.lock().unwrap() = answers;
    }

    fn queries(&self) -> Vec<String> {
        self.queries.lock().unwrap().clone()
    }

    fn endpoints(&self) -> Vec<Endpoint> {
        self.endpoints.lock().unwrap().clone()
    }
}

impl Provider for FakePrometheus {
    fn query<'a>(
        &'a self,
        endpoint: &'a Endpoint,
        promql: &'a str,
        _timeout: Duration,
    ) -> BoxFuture<'a, Result<f64, QueryError>> {
        assert!(endpoint.address.ends_with("://prometheus.test:9090"));
        self.queries.lock().unwrap().push(promql.to_owned());
        self.endpoints.lock().unwrap().push(endpoint.clone());
        let answers = *self.answers.lock().unwrap();
        let baseline = promql.starts_with("baseline_errors");
        Box::pin(async move {
            match answers {
                Answers::Down => Err(QueryError::Unreachable("connection refused".into())),
                Answers::CanaryErrors if !baseline => Ok(0.1),
                Answers::Healthy | Answers::CanaryErrors => Ok(0.01),
            }
        })
    }
}

/// `[{nodes: 1}, {pause: 30s}]` with an analysis every 10 s: the canary's error ratio at most
/// twice the baseline's.
fn analysed_spec(version: &str) -> CanaryDaemonSetSpec {
    let mut spec = pods_spec(version, None, vec![nodes_step("1"), pause(Some("30s"))]);
    spec.analysis = Some(AnalysisSpec {
        prometheus: PrometheusSpec {
            address: "http://prometheus.test:9090".into(),
            timeout: "5s".into(),
            bearer_token_secret: None,
            ca_secret: None,
        },
        interval: "10s".into(),
        metrics: vec![MetricSpec {
            name: "error-ratio".into(),
            query: r#"canary_errors{node=~"{{nodes}}"}"#.into(),
            baseline_query: Some(r#"baseline_errors{node=~"{{baselineNodes}}"}"#.into()),
            min: None,
            max: None,
            max_ratio: Some(2.0),
            failure_limit: 1,
            inconclusive_limit: 2,
        }],
    });
    spec
}

/// The fake Prometheus's address, allowed as an administrator allows theirs.
fn allowed() -> Arc<canary_analysis::AllowedAddresses> {
    Arc::new(
        canary_analysis::AllowedAddresses::from_flags([
            "http://prometheus.test:9090",
            "https://prometheus.test:9090",
        ])
        .unwrap(),
    )
}

fn replica_with(sim: &Env, prometheus: &Arc<FakePrometheus>) -> Replica {
    let analysis: Arc<dyn Provider> = prometheus.clone();
    Replica::start_with(sim, sim.client(), |config| ControllerConfig {
        analysis,
        allowed_analysis_addresses: allowed(),
        ..config
    })
}

/// Six nodes, a fake Prometheus giving `answers` and one replica asking it.
fn with_prometheus(answers: Answers) -> (Env, Client, Arc<FakePrometheus>, Replica) {
    let sim = sim(6);
    let client = sim.client();
    let prometheus = FakePrometheus::new(answers);
    let replica = replica_with(&sim, &prometheus);
    (sim, client, prometheus, replica)
}

async fn analysis_status(client: &Client) -> serde_json::Value {
    let status = get_cds(client, "agent").await.status;
    serde_json::to_value(status.and_then(|s| s.analysis)).unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_passing_analysis_ends_the_pause_and_a_failing_one_fails_and_rolls_back() {
    let (_sim, client, prometheus, replica) = with_prometheus(Answers::Healthy);
    create_cds(&client, "agent", analysed_spec("v1")).await;
    until_agent_phase(&client, "successful", 300, "v1 installed").await;
    assert!(
        prometheus.queries().is_empty(),
        "a first install has no pause to analyse"
    );

    set_version(&client, "agent", "v2").await;
    until_agent_phase(&client, "paused", 120, "the canary paused").await;
    let canary = nodes_on(&client, "agent:v2").await;
    assert_eq!(canary.len(), 1);
    until_agent_phase(&client, "successful", 600, "v2 rolled out").await;
    // The queries named the canary node, and the old nodes as the baseline.
    let queries = prometheus.queries();
    let expected = format!(r#"canary_errors{{node=~"{}"}}"#, canary[0]);
    assert!(queries.contains(&expected), "{expected} not in {queries:?}");
    let status = analysis_status(&client).await;
    assert_eq!(status["verdict"], "Passing");
    // Measured on through the last nodes step to the end of the rollout (issue 46).
    assert_eq!(status["step"], 2);
    assert_eq!(status["measurements"][0]["metric"], "error-ratio");
    // Once every node runs v2, `{{baselineNodes}}` is empty: the last measurements may be
    // inconclusive, which holds nothing in a nodes step.
    assert_eq!(status["measurements"][0]["failures"], 0);
    let cds = get_cds(&client, "agent").await;
    let passing = condition(&cds, "AnalysisPassing").unwrap();
    assert_eq!(
        (passing.0.as_str(), passing.1.as_str()),
        ("True", "AnalysisPassing")
    );

    // v3's canary reports ten times the baseline's errors: failed, then rolled back to v2.
    prometheus.set(Answers::CanaryErrors);
    Api::<canary_kube_adapter::CanaryDaemonSet>::namespaced(client.clone(), NS)
        .patch(
            "agent",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"strategy": {"onFailure": "Rollback"}}})),
        )
        .await
        .unwrap();
    set_version(&client, "agent", "v3").await;
    until_agent_phase(&client, "rolledBack", 600, "v3 rolled back").await;
    let failed = events_with_reason(&client, "AnalysisFailed").await;
    assert_eq!(failed.len(), 1, "{failed:?}");
    let note = failed[0].note.clone().unwrap_or_default();
    assert!(
        note.contains("error-ratio") && note.contains("above maxRatio 2"),
        "{note}"
    );
    let status = analysis_status(&client).await;
    assert_eq!(status["verdict"], "Failed");
    assert_eq!(status["measurements"][0]["verdict"], "Fail");
    assert_eq!(status["measurements"][0]["failures"], 1);
    assert_eq!(nodes_on(&client, "agent:v3").await, Vec::<String>::new());
    assert_eq!(nodes_on(&client, "agent:v2").await.len(), 6);
    replica.stop().await;
}

#[tokio::test(start_paused = true)]
async fn an_unreachable_prometheus_holds_the_rollout_until_it_answers() {
    let (_sim, client, prometheus, replica) = with_prometheus(Answers::Down);
    create_cds(&client, "agent", analysed_spec("v1")).await;
    until_agent_phase(&client, "successful", 300, "v1 installed").await;
    set_version(&client, "agent", "v2").await;
    eventually(Duration::from_secs(120), "inconclusive", || async {
        analysis_status(&client).await["verdict"] == "Inconclusive"
    })
    .await;
    // Long past the 30 s pause: still held at the canary, nothing failed.
    tokio::time::sleep(Duration::from_secs(120)).await;
    let cds = get_cds(&client, "agent").await;
    let status = cds.status.clone().unwrap();
    assert_eq!(status.phase_name(), Some("paused"));
    assert_eq!(status.current_step_index, Some(1));
    assert_eq!(nodes_on(&client, "agent:v2").await.len(), 1);
    let held = condition(&cds, "AnalysisPassing").unwrap();
    assert_eq!(
        (held.0.as_str(), held.1.as_str()),
        ("False", "AnalysisInconclusive")
    );
    assert!(held.2.contains("connection refused"), "{}", held.2);
    assert_eq!(
        events_with_reason(&client, "AnalysisInconclusive")
            .await
            .len(),
        1,
        "announced once"
    );

    prometheus.set(Answers::Healthy);
    until_agent_phase(&client, "successful", 600, "v2 rolled out").await;
    assert_eq!(nodes_on(&client, "agent:v2").await.len(), 6);
    replica.stop().await;
}

#[tokio::test(start_paused = true)]
async fn the_token_and_ca_of_an_https_prometheus_come_from_secrets_read_every_round() {
    let (_sim, client, prometheus, replica) = with_prometheus(Answers::Healthy);
    let ca = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
    put_secret(&client, NS, "prometheus-token", "token", "first-token\n").await;
    put_secret(&client, NS, "prometheus-ca", "ca.crt", ca).await;
    let mut spec = analysed_spec("v1");
    if let Some(analysis) = spec.analysis.as_mut() {
        analysis.prometheus.address = "https://prometheus.test:9090".into();
        analysis.prometheus.bearer_token_secret = Some(SecretKeyRef {
            name: "prometheus-token".into(),
            key: "token".into(),
        });
        analysis.prometheus.ca_secret = Some(SecretKeyRef {
            name: "prometheus-ca".into(),
            key: "ca.crt".into(),
        });
    }
    create_cds(&client, "agent", spec).await;
    until_agent_phase(&client, "successful", 300, "v1 installed").await;

    // The first round sends the token (trimmed of its newline) and the CA.
    set_version(&client, "agent", "v2").await;
    eventually(Duration::from_secs(120), "measured", || async {
        !prometheus.endpoints().is_empty()
    })
    .await;
    let first = prometheus.endpoints()[0].clone();
    assert_eq!(first.bearer_token.as_deref(), Some("first-token"));
    assert_eq!(first.ca_pem.as_deref(), Some(ca.as_bytes()));
    assert!(
        !format!("{first:?}").contains("first-token"),
        "the token never shows in a Debug output: {first:?}"
    );

    // Rotated: the next round sends the new token.
    put_secret(&client, NS, "prometheus-token", "token", "second-token").await;
    eventually(
        Duration::from_secs(60),
        "the rotated token sent",
        || async {
            prometheus
                .endpoints()
                .iter()
                .any(|e| e.bearer_token.as_deref() == Some("second-token"))
        },
    )
    .await;
    until_agent_phase(&client, "successful", 600, "v2 rolled out").await;

    // Deleted: nothing is sent, the rounds are inconclusive and the canary holds.
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), NS);
    secrets
        .delete("prometheus-token", &Default::default())
        .await
        .unwrap();
    let sent = prometheus.queries().len();
    set_version(&client, "agent", "v3").await;
    eventually(Duration::from_secs(120), "inconclusive", || async {
        analysis_status(&client).await["verdict"] == "Inconclusive"
    })
    .await;
    assert_eq!(
        prometheus.queries().len(),
        sent,
        "no query without its token"
    );
    let status = analysis_status(&client).await;
    let detail = status["measurements"][0]["detail"]
        .as_str()
        .unwrap_or_default();
    assert!(
        detail.contains("bearerTokenSecret: Secret prometheus-token not found"),
        "{detail}"
    );
    tokio::time::sleep(Duration::from_secs(120)).await;
    assert!(phase_is(&client, "agent", "paused").await);
    assert_eq!(nodes_on(&client, "agent:v3").await.len(), 1);

    // Put back: the rollout goes on.
    put_secret(&client, NS, "prometheus-token", "token", "third-token").await;
    until_agent_phase(&client, "successful", 600, "v3 rolled out").await;
    replica.stop().await;
}

/// The status that moves a rollout past an analysed pause shows that pause's passing
/// measurements, the reason it could end: also when the next pause's run has measured before
/// the write (its first round is at once), and also when that write is lost and a later one
/// takes its place. Half of the status writes fail here; every stored status is read.
#[tokio::test(start_paused = true)]
async fn the_status_that_ends_an_analysed_pause_shows_why_even_after_lost_writes() {
    let (sim, client, _prometheus, replica) = with_prometheus(Answers::Healthy);
    let mut stored = sim.store().subscribe();
    let statuses = Arc::new(Mutex::new(Vec::new()));
    let collected = Arc::clone(&statuses);
    let collector = tokio::spawn(async move {
        loop {
            let event = match stored.recv().await {
                Ok(event) => event,
                Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                    panic!("the test lagged {n} store events behind")
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            };
            if event.name != "agent" || event.key.plural != "canarydaemonsets" {
                continue;
            }
            let status = &event.object["status"];
            collected.lock().unwrap().push((
                status["currentStepIndex"].as_u64(),
                status["targetRevision"].clone(),
                status["analysis"].clone(),
            ));
        }
    });
    let mut spec = analysed_spec("v1");
    spec.strategy.steps = vec![nodes_step("1"), pause(Some("20s")), pause(Some("20s"))];
    create_cds(&client, "agent", spec).await;
    until_agent_phase(&client, "successful", 300, "v1 installed").await;
    sim.faults().add(
        canary_sim::FaultRule::new(
            Some(canary_sim::Verb::Patch),
            Some("canarydaemonsets/status"),
            canary_sim::FaultAction::internal_error(),
        )
        .when(canary_sim::Trigger::Rate(0.5)),
    );
    for version in ["v2", "v3", "v4"] {
        set_version(&client, "agent", version).await;
        until_agent_phase(&client, "paused", 300, "the canary paused").await;
        until_agent_phase(&client, "successful", 600, "rolled out").await;
    }
    replica.stop().await;
    collector.abort();
    let statuses = statuses.lock().unwrap().clone();
    let mut crossings = 0;
    for pair in statuses.windows(2) {
        let ((Some(from), revision, _), (Some(to), next_revision, analysis)) = (&pair[0], &pair[1])
        else {
            continue;
        };
        // Steps 1 and 2 are the pauses (3 is the last nodes step, every node); a new revision
        // starts over at step 0.
        if revision != next_revision || to <= from || !(1..=2).contains(from) {
            continue;
        }
        crossings += 1;
        assert_eq!(
            (
                &analysis["step"],
                &analysis["verdict"],
                &analysis["revision"]
            ),
            (&json!(from), &json!("Passing"), next_revision),
            "the status moving from step {from} to {to} shows {analysis}"
        );
    }
    assert!(crossings >= 3, "{crossings} pauses ended in {statuses:?}");
}

/// A retry under a rollback in force writes, ahead of its deletions, the phase it reports
/// (`rollingBack`) with the phase it decided: a status naming `rollingBack` over the `failed`
/// of the pass before reads back as that failure without its reason. Here the undo goes back
/// to the stable v1, whose analysis then fails (its rollback has nowhere else to go); the retry
/// starts deleting v2's canary pod, and the process dies during the deletion. The next process
/// must carry the retried rollback on, not keep it `failed` as a crash-looping canary no pod
/// was (soak seed 23002141; docs/reliability.md, finding 52).
#[tokio::test(start_paused = true)]
async fn a_retried_rollback_whose_leader_dies_mid_deletion_is_not_failed_again() {
    let sim = sim(6);
    let client = sim.client();
    let prometheus = FakePrometheus::new(Answers::Healthy);
    let (doomed, alive) = killable_client(&sim);
    let answers: Arc<dyn Provider> = prometheus.clone();
    let first = Replica::start_with(&sim, doomed, |config| ControllerConfig {
        analysis: answers,
        allowed_analysis_addresses: allowed(),
        ..config
    });
    let mut spec = analysed_spec("v1");
    spec.strategy.steps = vec![pause(Some("30s")), nodes_step("1"), pause(None)];
    spec.strategy.on_failure = canary_state_machine::OnFailure::Rollback;
    if let Some(analysis) = spec.analysis.as_mut() {
        analysis.metrics[0].query = "canary_errors".into();
        analysis.metrics[0].baseline_query = None;
        analysis.metrics[0].max_ratio = None;
        analysis.metrics[0].max = Some(0.05);
    }
    create_cds(&client, "agent", spec).await;
    until_agent_phase(&client, "successful", 300, "v1 installed").await;
    set_version(&client, "agent", "v2").await;
    eventually(Duration::from_secs(600), "v2's canary, paused", || async {
        nodes_on(&client, "agent:v2").await.len() == 1 && phase_is(&client, "agent", "paused").await
    })
    .await;

    annotate(
        &client,
        canary_kube_adapter::crd::UNDO_ANNOTATION,
        "previous@1",
    )
    .await;
    prometheus.set(Answers::CanaryErrors);
    until_agent_phase(&client, "failed", 600, "v1's analysis failed").await;
    let status = get_cds(&client, "agent").await.status.unwrap_or_default();
    assert_eq!(status.reason_name(), Some("AnalysisFailed"));
    assert_eq!(nodes_on(&client, "agent:v2").await.len(), 1);

    // The retry's deletion hangs; the status it wrote ahead of it is all that is stored when
    // the process dies.
    sim.faults().add(canary_sim::FaultRule::new(
        Some(canary_sim::Verb::Delete),
        Some("pods"),
        canary_sim::FaultAction::Latency(Duration::from_secs(60)),
    ));
    annotate(&client, canary_kube_adapter::crd::RETRY_ANNOTATION, "r1").await;
    until_agent_phase(&client, "rollingBack", 120, "the retry's step recorded").await;
    alive.store(false, std::sync::atomic::Ordering::Release);
    first.task.abort();
    sim.faults().clear();
    let second = replica_with(&sim, &prometheus);
    eventually(Duration::from_secs(600), "v1 everywhere", || async {
        nodes_on(&client, "agent:v1").await.len() == 6
    })
    .await;
    until_agent_phase(&client, "rolledBack", 600, "the rollback ended").await;
    let status = get_cds(&client, "agent").await.status.unwrap_or_default();
    assert_eq!(status.reason, None, "{:?}", status.message);
    second.stop().await;
}

/// The MaxUnavailable driver's spec with [`analysed_spec`]'s analysis (issue 46).
fn max_unavailable_analysed_spec(version: &str, behavior: Option<&str>) -> CanaryDaemonSetSpec {
    let mut spec = spec(version, behavior);
    spec.analysis = analysed_spec(version).analysis;
    spec
}

async fn update_strategy_type(client: &Client) -> Option<String> {
    get_ds(client, "agent")
        .await
        .spec
        .and_then(|s| s.update_strategy)
        .and_then(|s| s.type_)
}

#[tokio::test(start_paused = true)]
async fn max_unavailable_the_widen_waits_until_the_canarys_analysis_passes() {
    let (_sim, client, prometheus, replica) = with_prometheus(Answers::Down);
    create_cds(&client, "agent", max_unavailable_analysed_spec("v1", None)).await;
    until_agent_phase(&client, "successful", 300, "v1 installed").await;
    assert!(
        prometheus.queries().is_empty(),
        "a first install has no canary to judge: {:?}",
        prometheus.queries()
    );

    // Prometheus down: the canary holds, the DaemonSet controller with it (OnDelete), long
    // past the soak, and nothing is widened or failed.
    set_version(&client, "agent", "v2").await;
    eventually(Duration::from_secs(120), "inconclusive", || async {
        analysis_status(&client).await["verdict"] == "Inconclusive"
    })
    .await;
    tokio::time::sleep(Duration::from_secs(180)).await;
    let cds = get_cds(&client, "agent").await;
    assert_eq!(
        cds.status.as_ref().and_then(|s| s.phase_name()),
        Some("canary")
    );
    assert_eq!(nodes_on(&client, "agent:v2").await.len(), 1);
    assert_eq!(
        update_strategy_type(&client).await.as_deref(),
        Some("OnDelete")
    );
    assert_eq!(
        live_max_unavailable(&client).await,
        Some(IntOrString::Int(1))
    );
    assert!(
        events_with_reason(&client, "RolloutWidened")
            .await
            .is_empty()
    );
    assert_eq!(
        events_with_reason(&client, "AnalysisInconclusive")
            .await
            .len(),
        1,
        "announced once"
    );
    let status = analysis_status(&client).await;
    assert_eq!(status["step"], 0, "the canary's stretch");
    let canary = nodes_on(&client, "agent:v2").await;
    let expected = format!(r#"canary_errors{{node=~"{}"}}"#, canary[0]);
    assert_eq!(status["measurements"][0]["query"], expected.as_str());

    // It answers, the canary passes: the widen, then the rollout measured on to its end.
    prometheus.set(Answers::Healthy);
    until_agent_phase(&client, "successful", 600, "v2 rolled out").await;
    assert_eq!(nodes_on(&client, "agent:v2").await.len(), 6);
    assert_eq!(events_with_reason(&client, "RolloutWidened").await.len(), 1);
    let status = analysis_status(&client).await;
    assert_eq!(status["step"], 1, "the widened rollout's stretch");
    assert_eq!(status["verdict"], "Passing");
    replica.stop().await;
}

#[tokio::test(start_paused = true)]
async fn max_unavailable_a_canary_with_ten_times_the_errors_fails_before_the_widen() {
    let (_sim, client, prometheus, replica) = with_prometheus(Answers::Healthy);
    create_cds(&client, "agent", max_unavailable_analysed_spec("v1", None)).await;
    until_agent_phase(&client, "successful", 300, "v1 installed").await;
    prometheus.set(Answers::CanaryErrors);
    set_version(&client, "agent", "v2").await;
    until_agent_phase(&client, "failed", 300, "v2 failed").await;
    let cds = get_cds(&client, "agent").await;
    let status = cds.status.clone().unwrap();
    assert_eq!(
        status.reason,
        Some(canary_state_machine::FailureReason::AnalysisFailed)
    );
    let failed = events_with_reason(&client, "AnalysisFailed").await;
    assert_eq!(failed.len(), 1, "{failed:?}");
    let note = failed[0].note.clone().unwrap_or_default();
    assert!(
        note.contains("error-ratio failed in the canary") && note.contains("above maxRatio 2"),
        "{note}"
    );
    // One node on v2, and it stays so: the DaemonSet controller is held.
    tokio::time::sleep(Duration::from_secs(120)).await;
    assert_eq!(nodes_on(&client, "agent:v2").await.len(), 1);
    assert_eq!(
        update_strategy_type(&client).await.as_deref(),
        Some("OnDelete")
    );
    assert!(
        events_with_reason(&client, "RolloutWidened")
            .await
            .is_empty()
    );
    assert_eq!(analysis_status(&client).await["verdict"], "Failed");
    replica.stop().await;
}

#[tokio::test(start_paused = true)]
async fn pods_a_failed_measurement_in_a_nodes_step_fails_the_rollout_there() {
    let (_sim, client, prometheus, replica) = with_prometheus(Answers::Healthy);
    // Slow pods, so that the last nodes step takes a while.
    let mut slow = analysed_spec("v1");
    slow.template = pods_spec("v1", Some("slow-start=20s"), Vec::new()).template;
    create_cds(&client, "agent", slow).await;
    until_agent_phase(&client, "successful", 600, "v1 installed").await;
    set_version(&client, "agent", "v2").await;
    // Into the last nodes step (index 2, after the pause), then the errors start.
    eventually(Duration::from_secs(600), "the last nodes step", || async {
        get_cds(&client, "agent")
            .await
            .status
            .is_some_and(|s| s.current_step_index == Some(2))
    })
    .await;
    prometheus.set(Answers::CanaryErrors);
    until_agent_phase(&client, "failed", 120, "v2 failed in its last step").await;
    let failed = events_with_reason(&client, "AnalysisFailed").await;
    assert_eq!(failed.len(), 1, "{failed:?}");
    let note = failed[0].note.clone().unwrap_or_default();
    assert!(note.contains("failed in step 3 of 3"), "{note}");
    let status = analysis_status(&client).await;
    assert_eq!(
        (status["step"].clone(), status["verdict"].clone()),
        (json!(2), json!("Failed"))
    );
    // No pod is deleted after the failure.
    let on_v2 = nodes_on(&client, "agent:v2").await.len();
    assert!(on_v2 < 6, "{on_v2} nodes on v2");
    tokio::time::sleep(Duration::from_secs(120)).await;
    assert_eq!(nodes_on(&client, "agent:v2").await.len(), on_v2);
    replica.stop().await;
}
