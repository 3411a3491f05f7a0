//! Analysis runs: the measurements of one analysed step, taken beside the reconcile.
//!
//! A caller (the adapter's pass of the Pods driver, in or entering a pause step of a rollout
//! with `spec.analysis`) keeps one [`AnalysisRun`] for that step: a task that, every
//! `interval`, reads the credentials of the plan's [`Source`](crate::Source), renders each
//! metric's queries with the step's [`TemplateValues`], asks them through a [`Provider`],
//! judges the answers ([`judge`]) and counts them. Each round ends with the caller's wake-up
//! ([`RunReporting::wake`]), so the result comes back to it as a trigger: its next pass reads
//! the verdict ([`AnalysisRun::snapshot`]) into the state machine's observation and the last
//! measurements into the status. A caller never waits for a provider.
//!
//! # Invariants
//!
//! - One run measures one [`RunKey`] (`(revision, step, spec generation)`); a dropped run's
//!   task is aborted (its [`Drop`]): a caller that replaces or forgets a run stops it.
//! - The tallies start at zero with each run: failures are counted per step.
//! - The lock of a run is never held across an await.

use std::sync::{Arc, Mutex, MutexGuard};

use canary_state_machine::{
    AnalysisVerdict, Measurement, MetricCheck, MetricTally, OUTSIDE_TEXT_BYTES, TemplateValues,
    cut, judge, render, verdict,
};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use tracing::info;

use crate::credentials::CredentialError;
use crate::plan::AnalysisPlan;
use crate::provider::{Endpoint, Provider};
use crate::spec::{AnalysisStatus, MeasurementStatus};

/// Which measurements a run takes: a new revision, step or spec starts a new run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunKey {
    /// The target revision measured.
    pub revision: String,
    /// The stretch measured: a Pods driver step (index), or the MaxUnavailable driver's canary
    /// (0) or widened rollout (1).
    pub step: u32,
    /// The analysed object's `metadata.generation` (the queries and limits it had).
    pub generation: i64,
}

/// One measurement taken, with the queries as sent.
#[derive(Debug, Clone, PartialEq)]
struct Taken {
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
pub struct AnalysisRun {
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

/// What a run calls with each measurement, and the name of its metric.
pub type Measured = Box<dyn Fn(&str, &Measurement) + Send + Sync>;

/// What a run needs of its caller, and where it reports: the wake-up of the analysed object,
/// each measurement (for the caller's metrics), the time, the Secrets of the credentials.
pub struct RunReporting {
    /// Brings the analysed object back for a pass after each round.
    pub wake: Box<dyn Fn() + Send + Sync>,
    /// Namespace of the analysed object, for the logs.
    pub namespace: String,
    /// Name of the analysed object, for the logs.
    pub name: String,
    /// Told of each measurement, with the name of its metric.
    pub measured: Measured,
    /// Source of "now" for the measurements' times.
    pub now: Box<dyn Fn() -> Timestamp + Send + Sync>,
    /// The Secrets of the analysed object's namespace, for the plan's credentials.
    pub secrets: Api<Secret>,
}

impl AnalysisRun {
    /// Starts measuring `key` at once, then every interval, asking `provider`. Must be called
    /// inside a tokio runtime (the run is a task of its own).
    pub fn start(
        key: RunKey,
        plan: Arc<AnalysisPlan>,
        values: TemplateValues,
        provider: Arc<dyn Provider>,
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
            provider,
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
    pub fn key(&self) -> &RunKey {
        &self.key
    }

    /// The nodes and pods the next round measures.
    pub fn set_values(&self, values: TemplateValues) {
        lock(&self.shared).values = values;
    }

    /// The verdict so far and the status of the last measurements.
    pub fn snapshot(&self) -> (AnalysisVerdict, AnalysisStatus) {
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
const SHOWN_QUERY_BYTES: usize = 1024;

/// `query`, cut to [`SHOWN_QUERY_BYTES`] (saying so).
fn shown(query: &str) -> String {
    cut(query, SHOWN_QUERY_BYTES).into_owned()
}

/// Why a measurement has no number (a provider's error, a Secret's): outside text, cut for
/// the status, the events and the log (issue 47). A provider cuts too; this is the bound of
/// every provider, whatever it does.
fn outside(why: &str) -> String {
    cut(why, 2 * OUTSIDE_TEXT_BYTES).into_owned()
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
    provider: Arc<dyn Provider>,
    reporting: RunReporting,
) {
    loop {
        let values = lock(&shared).values.clone();
        let endpoint = plan.source.endpoint(&reporting.secrets).await;
        for (index, check) in plan.checks.iter().enumerate() {
            let taken = measure_one(
                &plan,
                &endpoint,
                check,
                &values,
                provider.as_ref(),
                &reporting,
            )
            .await;
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

async fn measure_one<'a>(
    plan: &'a AnalysisPlan,
    endpoint: &'a Result<Endpoint, CredentialError>,
    check: &'a MetricCheck,
    values: &'a TemplateValues,
    provider: &'a dyn Provider,
    reporting: &RunReporting,
) -> Taken {
    // The query as sent, or the template when it cannot be rendered (the status then shows
    // what would have been sent, beside why not).
    let ask = |template: &'a str| async move {
        match (render(template, values), endpoint) {
            (Ok(promql), Ok(endpoint)) => {
                let answer = provider
                    .query(endpoint, &promql, plan.timeout)
                    .await
                    .map_err(|e| outside(&e.to_string()));
                (promql, answer)
            }
            (Ok(promql), Err(why)) => (promql, Err(outside(&why.to_string()))),
            (Err(why), _) => (template.to_owned(), Err(outside(&why.to_string()))),
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
    (reporting.measured)(&check.name, &measurement);
    Taken {
        query,
        baseline_query,
        measurement,
        at: (reporting.now)(),
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
    use crate::plan::Source;
    use crate::provider::QueryError;
    use futures::future::BoxFuture;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::Duration;

    /// Answers every query with the number of `|` in it: the nodes it lists, less one.
    #[derive(Debug)]
    struct Counting;

    impl Provider for Counting {
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
            source: Source {
                provider: crate::provider::ProviderKind::Prometheus,
                address: "http://prometheus.test:9090".into(),
                bearer_token_secret: None,
                ca_secret: None,
            },
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

    /// Counts the wake-ups and the measurements reported.
    fn reporting(woken: Arc<AtomicU32>, measured: Arc<AtomicU32>) -> RunReporting {
        RunReporting {
            wake: Box::new(move || {
                woken.fetch_add(1, Ordering::SeqCst);
            }),
            namespace: "default".into(),
            name: "agent".into(),
            measured: Box::new(move |_metric, _measurement| {
                measured.fetch_add(1, Ordering::SeqCst);
            }),
            now: Box::new(|| Timestamp::UNIX_EPOCH),
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
        let woken = Arc::new(AtomicU32::new(0));
        let measured = Arc::new(AtomicU32::new(0));
        let run = AnalysisRun::start(
            RunKey {
                revision: "7b9f".into(),
                step: 1,
                generation: 2,
            },
            Arc::new(plan(16)),
            values,
            Arc::new(Counting),
            reporting(Arc::clone(&woken), Arc::clone(&measured)),
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(woken.load(Ordering::SeqCst), 1, "one round, one wake-up");
        assert_eq!(measured.load(Ordering::SeqCst), 16, "each metric reported");
        let (verdict, status) = run.snapshot();
        assert_eq!(verdict, AnalysisVerdict::Passing);
        assert_eq!(status.measurements.len(), 16);
        assert_eq!(status.measurements[0].value.as_deref(), Some("2499"));
        assert_eq!(status.measurements[0].baseline.as_deref(), Some("2499"));
        assert_eq!(
            status.measurements[0].time,
            Some(Time(Timestamp::UNIX_EPOCH))
        );
        let size = serde_json::to_vec(&status)
            .map(|bytes| bytes.len())
            .unwrap_or(usize::MAX);
        assert!(size < 48 * 1024, "status.analysis is {size} bytes");
        assert!(status.measurements[0].query.contains("[cut from"));
        // The next round comes an interval later.
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(woken.load(Ordering::SeqCst), 2);
        // Dropped, the run stops measuring.
        drop(run);
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(woken.load(Ordering::SeqCst), 2);
    }
}
