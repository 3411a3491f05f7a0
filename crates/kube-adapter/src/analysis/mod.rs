//! Analysis runs: the measurements of one analysed pause step, taken beside the reconcile.
//!
//! A pass of the Pods driver that is in (or enters) a pause step of a rollout with
//! `spec.analysis` keeps one `AnalysisRun` for that step: a task that, every `interval`,
//! renders each metric's queries with the step's [`TemplateValues`], asks Prometheus through a
//! [`QueryApi`], judges the answers ([`judge`]) and counts them. Each round ends with a wake-up
//! of the CanaryDaemonSet, so the result comes back as a trigger: the next pass reads the
//! verdict (`AnalysisRun::snapshot`) into the state machine's observation and the last
//! measurements into the status. A reconcile never waits for Prometheus.
//!
//! The Secrets a spec names (`bearerTokenSecret`, `caSecret`) are read at the start of each
//! round, so a rotated token or CA is used at the next round; one that cannot be read makes
//! the round inconclusive, with the reason (not found, forbidden, no such key) in the status.
//!
//! # Invariants
//!
//! - One run per CanaryDaemonSet, for one `(revision, step, spec generation)`: another key
//!   replaces it, and a replaced or forgotten run's task is aborted (its [`Drop`]).
//! - The tallies start at zero with each run: failures are counted per pause step.
//! - The lock of a run is never held across an await.

mod prometheus;

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use canary_state_machine::{
    AnalysisVerdict, Measurement, MetricCheck, MetricTally, TemplateValues, judge, parse_duration,
    render, validate_metrics, verdict,
};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use tracing::info;

pub use prometheus::{
    Endpoint, HttpPrometheus, QueryApi, QueryError, form_body, parse_answer, query_uri, tls_config,
};

use crate::clock::Clock;
use crate::crd::{AnalysisSpec, AnalysisStatus, MeasurementStatus, SecretKeyRef};
use crate::observer::{Observer, Report};

/// What a spec's analysis asks for, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct AnalysisPlan {
    /// Prometheus' base URL.
    pub address: String,
    /// The Secret key of the bearer token (https only).
    pub bearer_token_secret: Option<SecretKeyRef>,
    /// The Secret key of the CA certificates (https only).
    pub ca_secret: Option<SecretKeyRef>,
    /// Deadline of one query.
    pub timeout: Duration,
    /// Time between two rounds of measurements.
    pub interval: Duration,
    /// The metrics, in the spec's order.
    pub checks: Vec<MetricCheck>,
}

/// The plan of `spec`, or why it cannot be used; the durations read as the pause steps' are.
pub(crate) fn analysis_plan(spec: &AnalysisSpec) -> Result<AnalysisPlan, String> {
    let prometheus = &spec.prometheus;
    let uri = query_uri(&prometheus.address)
        .map_err(|e| format!("spec.analysis.prometheus.address: {e}"))?;
    let https = uri.scheme() == Some(&hyper::http::uri::Scheme::HTTPS);
    if !https && prometheus.bearer_token_secret.is_some() {
        return Err("spec.analysis.prometheus.bearerTokenSecret: a bearer token goes over https:// only, it would cross the network in clear text".to_owned());
    }
    if !https && prometheus.ca_secret.is_some() {
        return Err("spec.analysis.prometheus.caSecret verifies an https:// address".to_owned());
    }
    let timeout = parse_duration(&spec.prometheus.timeout)
        .map_err(|e| format!("spec.analysis.prometheus.timeout: {e}"))?;
    let interval =
        parse_duration(&spec.interval).map_err(|e| format!("spec.analysis.interval: {e}"))?;
    if interval.is_zero() || timeout.is_zero() {
        return Err(
            "spec.analysis: interval and prometheus.timeout must be longer than zero".to_owned(),
        );
    }
    let checks: Vec<MetricCheck> = spec
        .metrics
        .iter()
        .map(|metric| MetricCheck {
            name: metric.name.clone(),
            query: metric.query.clone(),
            baseline_query: metric.baseline_query.clone(),
            min: metric.min,
            max: metric.max,
            max_ratio: metric.max_ratio,
            failure_limit: metric.failure_limit,
            inconclusive_limit: metric.inconclusive_limit,
        })
        .collect();
    validate_metrics(&checks).map_err(|e| format!("spec.analysis.metrics: {e}"))?;
    Ok(AnalysisPlan {
        address: prometheus.address.clone(),
        bearer_token_secret: prometheus.bearer_token_secret.clone(),
        ca_secret: prometheus.ca_secret.clone(),
        timeout,
        interval,
        checks,
    })
}

/// Which measurements a run takes: a new revision, step or spec starts a new run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RunKey {
    /// The target revision measured.
    pub(crate) revision: String,
    /// The pause step (index).
    pub(crate) step: u32,
    /// The CanaryDaemonSet's `metadata.generation` (the queries and limits it had).
    pub(crate) generation: i64,
}

/// One measurement taken, with the queries as sent.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Taken {
    query: String,
    baseline_query: Option<String>,
    measurement: Measurement,
    at: Timestamp,
}

#[derive(Debug, Default)]
struct Shared {
    values: TemplateValues,
    tallies: Vec<MetricTally>,
    last: Vec<Option<Taken>>,
}

/// The measurements of one analysed step, taken by a task of their own (see the module docs).
#[derive(Debug)]
pub(crate) struct AnalysisRun {
    key: RunKey,
    plan: Arc<AnalysisPlan>,
    shared: Arc<Mutex<Shared>>,
    task: tokio::task::AbortHandle,
}

impl Drop for AnalysisRun {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Where a run reports: the wake-up of its object, the metrics, the time.
pub(crate) struct RunReporting {
    /// Brings the CanaryDaemonSet back for a pass after each round.
    pub(crate) wake: Box<dyn Fn() + Send + Sync>,
    /// Namespace and name of the CanaryDaemonSet, for logs and metrics.
    pub(crate) namespace: String,
    pub(crate) name: String,
    pub(crate) observer: Observer,
    pub(crate) clock: Clock,
    /// The Secrets of the CanaryDaemonSet's namespace, for the plan's credentials.
    pub(crate) secrets: Api<Secret>,
}

impl AnalysisRun {
    /// Starts measuring `key` at once, then every interval.
    pub(crate) fn start(
        key: RunKey,
        plan: Arc<AnalysisPlan>,
        values: TemplateValues,
        api: Arc<dyn QueryApi>,
        reporting: RunReporting,
    ) -> Self {
        let metrics = plan.checks.len();
        let shared = Arc::new(Mutex::new(Shared {
            values,
            tallies: vec![MetricTally::default(); metrics],
            last: vec![None; metrics],
        }));
        let task = tokio::spawn(measure(
            Arc::clone(&plan),
            Arc::clone(&shared),
            api,
            reporting,
        ))
        .abort_handle();
        AnalysisRun {
            key,
            plan,
            shared,
            task,
        }
    }

    /// What this run measures.
    pub(crate) fn key(&self) -> &RunKey {
        &self.key
    }

    /// The nodes and pods the next round measures.
    pub(crate) fn set_values(&self, values: TemplateValues) {
        lock(&self.shared).values = values;
    }

    /// The verdict so far and the status of the last measurements.
    pub(crate) fn snapshot(&self) -> (AnalysisVerdict, AnalysisStatus) {
        let shared = lock(&self.shared);
        let details: Vec<(MetricTally, &str)> = shared
            .tallies
            .iter()
            .zip(&shared.last)
            .map(|(tally, last)| {
                let detail = last.as_ref().map_or("", |t| t.measurement.detail.as_str());
                (*tally, detail)
            })
            .collect();
        let verdict = verdict(&self.plan.checks, &details);
        let measurements = self
            .plan
            .checks
            .iter()
            .zip(shared.tallies.iter().zip(&shared.last))
            .filter_map(|(check, (tally, last))| {
                let taken = last.as_ref()?;
                let m = &taken.measurement;
                Some(MeasurementStatus {
                    metric: check.name.clone(),
                    query: shown(&taken.query),
                    baseline_query: taken.baseline_query.as_deref().map(shown),
                    value: m.value.map(sample),
                    baseline: m.baseline.map(sample),
                    verdict: m.verdict.as_str().to_owned(),
                    detail: (!m.detail.is_empty()).then(|| m.detail.clone()),
                    time: Some(Time(taken.at)),
                    failures: tally.failures,
                    inconclusive: tally.inconclusive_in_a_row,
                })
            })
            .collect();
        let message = match &verdict {
            AnalysisVerdict::Failed { metric, detail }
            | AnalysisVerdict::Inconclusive { metric, detail } => {
                Some(format!("{metric}: {detail}"))
            }
            AnalysisVerdict::Pending | AnalysisVerdict::Passing => None,
        };
        let status = AnalysisStatus {
            step: self.key.step,
            revision: Some(self.key.revision.clone()),
            verdict: verdict.as_str().to_owned(),
            message,
            measurements,
        };
        (verdict, status)
    }
}

/// The most of a rendered query the status shows: a query listing thousands of nodes would
/// not fit an object (the log has it whole).
const SHOWN_QUERY_CHARS: usize = 1024;

/// `query`, cut to [`SHOWN_QUERY_CHARS`] with a note saying how much is left out.
fn shown(query: &str) -> String {
    match query.char_indices().nth(SHOWN_QUERY_CHARS) {
        None => query.to_owned(),
        Some((cut, _)) => format!(
            "{}… ({} more characters; the controller's log has the whole query)",
            &query[..cut],
            query.len() - cut
        ),
    }
}

/// A sample as Prometheus writes one (`0.25`, `+Inf`): a status holds no float that JSON
/// cannot carry (a NaN never gets this far: [`judge`] counts it inconclusive).
fn sample(value: f64) -> String {
    if value.is_nan() {
        "NaN".to_owned()
    } else if value == f64::INFINITY {
        "+Inf".to_owned()
    } else if value == f64::NEG_INFINITY {
        "-Inf".to_owned()
    } else {
        value.to_string()
    }
}

/// The task of a run: a round of measurements at once, then one every interval.
async fn measure(
    plan: Arc<AnalysisPlan>,
    shared: Arc<Mutex<Shared>>,
    api: Arc<dyn QueryApi>,
    reporting: RunReporting,
) {
    loop {
        let values = lock(&shared).values.clone();
        let endpoint = endpoint(&plan, &reporting.secrets).await;
        for (index, check) in plan.checks.iter().enumerate() {
            let taken =
                measure_one(&plan, &endpoint, check, &values, api.as_ref(), &reporting).await;
            let mut state = lock(&shared);
            if let Some(tally) = state.tallies.get_mut(index) {
                tally.record(taken.measurement.verdict);
            }
            if let Some(last) = state.last.get_mut(index) {
                *last = Some(taken);
            }
        }
        (reporting.wake)();
        tokio::time::sleep(plan.interval).await;
    }
}

/// Where this round's queries go: the plan's address with the token and CA its Secrets hold
/// now, or why a Secret cannot be used (every measurement of the round is then inconclusive).
async fn endpoint(plan: &AnalysisPlan, secrets: &Api<Secret>) -> Result<Endpoint, String> {
    let bearer_token = match &plan.bearer_token_secret {
        Some(key) => {
            let bytes = read_secret(secrets, key, "bearerTokenSecret").await?;
            // `echo token > file` leaves a newline that no server accepts in a header.
            let token = String::from_utf8(bytes)
                .map_err(|_| format!("bearerTokenSecret {}/{}: not UTF-8", key.name, key.key))?
                .trim()
                .to_owned();
            if token.is_empty() {
                return Err(format!("bearerTokenSecret {}/{}: empty", key.name, key.key));
            }
            Some(token)
        }
        None => None,
    };
    let ca_pem = match &plan.ca_secret {
        Some(key) => Some(read_secret(secrets, key, "caSecret").await?),
        None => None,
    };
    Ok(Endpoint {
        address: plan.address.clone(),
        bearer_token,
        ca_pem,
    })
}

/// The bytes under `key` of a Secret, or why not, naming the `field` of the spec.
async fn read_secret(
    secrets: &Api<Secret>,
    key: &SecretKeyRef,
    field: &str,
) -> Result<Vec<u8>, String> {
    let secret = match secrets.get(&key.name).await {
        Ok(secret) => secret,
        Err(kube::Error::Api(status)) if status.is_not_found() => {
            return Err(format!("{field}: Secret {} not found", key.name));
        }
        Err(kube::Error::Api(status)) if status.is_forbidden() => {
            return Err(format!(
                "{field}: the controller may not read Secret {} (grant its ServiceAccount get on it, docs/analysis.md \"Credentials\")",
                key.name
            ));
        }
        Err(error) => {
            return Err(format!(
                "{field}: Secret {}: {}",
                key.name,
                crate::error::chain(&error)
            ));
        }
    };
    secret
        .data
        .and_then(|mut data| data.remove(&key.key))
        .map(|bytes| bytes.0)
        .ok_or_else(|| format!("{field}: Secret {} has no key {}", key.name, key.key))
}

async fn measure_one<'a>(
    plan: &'a AnalysisPlan,
    endpoint: &'a Result<Endpoint, String>,
    check: &'a MetricCheck,
    values: &'a TemplateValues,
    api: &'a dyn QueryApi,
    reporting: &RunReporting,
) -> Taken {
    // The query as sent, or the template when it cannot be rendered (the status then shows
    // what would have been sent, beside why not).
    let ask = |template: &'a str| async move {
        match (render(template, values), endpoint) {
            (Ok(promql), Ok(endpoint)) => {
                let answer = api
                    .query(endpoint, &promql, plan.timeout)
                    .await
                    .map_err(|e| e.to_string());
                (promql, answer)
            }
            (Ok(promql), Err(why)) => (promql, Err(why.clone())),
            (Err(why), _) => (template.to_owned(), Err(why.to_string())),
        }
    };
    let (query, value) = ask(&check.query).await;
    let (baseline_query, baseline) = match &check.baseline_query {
        // No value, no comparison: the baseline is not asked for.
        Some(_) if value.is_err() => (None, None),
        Some(template) => {
            let (query, answer) = ask(template).await;
            (Some(query), Some(answer))
        }
        None => (None, None),
    };
    let measurement = judge(check, value, baseline);
    info!(
        namespace = %reporting.namespace,
        name = %reporting.name,
        metric = %check.name,
        query = %query,
        baseline_query = baseline_query.as_deref().unwrap_or(""),
        value = %measurement.value.map_or_else(String::new, sample),
        baseline = %measurement.baseline.map_or_else(String::new, sample),
        verdict = measurement.verdict.as_str(),
        detail = %measurement.detail,
        "analysis measurement"
    );
    reporting.observer.report(Report::AnalysisMeasured {
        namespace: reporting.namespace.clone(),
        name: reporting.name.clone(),
        metric: check.name.clone(),
        value: measurement.value,
        verdict: measurement.verdict,
    });
    Taken {
        query,
        baseline_query,
        measurement,
        at: reporting.clock.now(),
    }
}

fn lock(shared: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    // A poisoned lock only means a panic elsewhere: the tallies are still whole numbers.
    shared
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::future::BoxFuture;

    /// Answers every query with the number of `|` in it: the nodes it lists, less one.
    #[derive(Debug)]
    struct Counting;

    impl QueryApi for Counting {
        fn query<'a>(
            &'a self,
            _endpoint: &'a Endpoint,
            promql: &'a str,
            _timeout: Duration,
        ) -> BoxFuture<'a, Result<f64, QueryError>> {
            let bars = promql.matches('|').count();
            Box::pin(std::future::ready(Ok(bars as f64)))
        }
    }

    fn plan(metrics: usize) -> AnalysisPlan {
        AnalysisPlan {
            address: "http://prometheus.test:9090".into(),
            bearer_token_secret: None,
            ca_secret: None,
            timeout: Duration::from_secs(5),
            interval: Duration::from_secs(10),
            checks: (0..metrics)
                .map(|i| MetricCheck {
                    name: format!("metric-{i}"),
                    query: r#"max(x{node=~"{{nodes}}"})"#.into(),
                    baseline_query: Some(r#"max(x{node=~"{{baselineNodes}}"})"#.into()),
                    min: None,
                    max: Some(1e9),
                    max_ratio: Some(1e9),
                    failure_limit: 1,
                    inconclusive_limit: 1,
                })
                .collect(),
        }
    }

    fn reporting(woken: Arc<std::sync::atomic::AtomicU32>) -> RunReporting {
        RunReporting {
            wake: Box::new(move || {
                woken.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }),
            namespace: "default".into(),
            name: "agent".into(),
            observer: Observer::new(),
            clock: Clock::tokio_virtual(Timestamp::UNIX_EPOCH),
            secrets: Api::default_namespaced(unreachable_client()),
        }
    }

    /// A client whose requests go nowhere: these plans name no Secret.
    fn unreachable_client() -> kube::Client {
        let (service, _handle) = tower_test::mock::pair::<
            http::Request<kube::client::Body>,
            http::Response<kube::client::Body>,
        >();
        kube::Client::new(service, "default")
    }

    /// 16 metrics with a baseline each over 5,000 nodes: every query is sent whole (the
    /// answers count its names), and the status that shows them stays small.
    #[tokio::test(start_paused = true)]
    async fn a_round_over_5000_nodes_sends_whole_queries_and_keeps_the_status_small() {
        let names = |prefix: &str, n: usize| -> Vec<String> {
            (0..n)
                .map(|i| format!("{prefix}-{i:05}.eu-west-1.compute.internal"))
                .collect()
        };
        let values = TemplateValues {
            nodes: names("ip-new", 2_500),
            baseline_nodes: names("ip-old", 2_500),
            ..TemplateValues::default()
        };
        let woken = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let run = AnalysisRun::start(
            RunKey {
                revision: "7b9f".into(),
                step: 1,
                generation: 2,
            },
            Arc::new(plan(16)),
            values,
            Arc::new(Counting),
            reporting(Arc::clone(&woken)),
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(
            woken.load(std::sync::atomic::Ordering::SeqCst),
            1,
            "one round, one wake-up"
        );
        let (verdict, status) = run.snapshot();
        assert_eq!(verdict, AnalysisVerdict::Passing);
        assert_eq!(status.measurements.len(), 16);
        assert_eq!(status.measurements[0].value.as_deref(), Some("2499"));
        assert_eq!(status.measurements[0].baseline.as_deref(), Some("2499"));
        let size = serde_json::to_vec(&status)
            .map(|bytes| bytes.len())
            .unwrap_or(usize::MAX);
        assert!(size < 48 * 1024, "status.analysis is {size} bytes");
        assert!(status.measurements[0].query.contains("more characters"));
        // The next round comes an interval later.
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(woken.load(std::sync::atomic::Ordering::SeqCst), 2);
        // Dropped, the run stops measuring.
        drop(run);
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(woken.load(std::sync::atomic::Ordering::SeqCst), 2);
    }

    #[test]
    fn a_plan_reads_the_durations_and_checks_the_metrics() {
        let spec: AnalysisSpec = serde_json::from_value(serde_json::json!({
            "prometheus": {"address": "http://prom:9090"},
            "metrics": [{"name": "m", "query": "up", "max": 1}]
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let plan = analysis_plan(&spec).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (plan.interval, plan.timeout),
            (Duration::from_secs(60), Duration::from_secs(10))
        );
        assert_eq!(plan.checks[0].failure_limit, 1);
        assert_eq!(plan.checks[0].inconclusive_limit, 3);
        let mut ftp = spec.clone();
        ftp.prometheus.address = "ftp://prom".into();
        assert!(analysis_plan(&ftp).unwrap_err().contains("https:// URL"));
        // A token or a CA over https; a token never over http.
        let token = SecretKeyRef {
            name: "prometheus-token".into(),
            key: "token".into(),
        };
        let mut https = spec.clone();
        https.prometheus.address = "https://prom".into();
        https.prometheus.bearer_token_secret = Some(token.clone());
        https.prometheus.ca_secret = Some(SecretKeyRef {
            name: "prometheus-ca".into(),
            key: "ca.crt".into(),
        });
        let https = analysis_plan(&https).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(https.bearer_token_secret, Some(token.clone()));
        let mut clear = spec.clone();
        clear.prometheus.bearer_token_secret = Some(token);
        assert!(analysis_plan(&clear).unwrap_err().contains("clear text"));
        let mut typo = spec;
        typo.metrics[0].query = "x{{node}}".into();
        assert!(
            analysis_plan(&typo)
                .unwrap_err()
                .contains("unknown placeholder")
        );
    }
}
