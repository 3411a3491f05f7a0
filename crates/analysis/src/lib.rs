//! Analysis of a DaemonSet canary: the metrics that judge a release while a rollout pauses,
//! asked of a provider (Prometheus' instant-query API today) every interval, judged and counted.
//!
//! A `CanaryDaemonSet` with `spec.analysis` ([`AnalysisSpec`]) names a provider and up to 16
//! metrics, each a query template with bounds (`min`, `max`, `maxRatio` against the nodes
//! still on the old revision). While the Pods driver holds a pause step, its caller keeps one
//! [`AnalysisRun`] for that step: at once and then every interval, the run reads the
//! provider's credentials from Secrets, renders the queries with the step's nodes and pods,
//! asks them through a [`Provider`], judges each answer and counts the judgements; the caller
//! reads the verdict and the [`AnalysisStatus`] it shows from [`AnalysisRun::snapshot`].
//!
//! # What lives where
//!
//! - **Here**: the spec and status types ([`spec`](AnalysisSpec), embedded as they are by the
//!   adapter's CRD), the checked plan ([`AnalysisPlan::new`]), the providers behind one trait
//!   ([`Provider`], [`Providers`], [`HttpPrometheus`]), the credentials ([`Source::endpoint`])
//!   and the runs ([`AnalysisRun`]): what is measured, how, and how often.
//! - **In `canary-state-machine`** (pure, no I/O): rendering a template with escaped
//!   placeholders, judging one measurement, the tallies and the verdict. This crate calls
//!   them; it decides nothing of the rollout.
//! - **In the adapter**: *when* a run measures (a pass keeps one run per analysed pause and
//!   drops it when the rollout leaves the pause) and where its results go (the wake-up that
//!   brings the object back for a pass, the metrics through its observer, its clock). They
//!   reach a run through [`RunReporting`], so this crate depends on nothing of the adapter.
//!
//! The run scheduler is here rather than in the adapter because it is the part every caller
//! would otherwise write again (a task per step, a round every interval, the tallies, the
//! status it shows), and because a provider's credentials are read by the run at each round:
//! with the run here, a provider's whole path, from spec to measurement, is in this crate.
//!
//! # A new provider
//!
//! A second provider (Datadog, CloudWatch, a generic JSON web endpoint) goes here and nowhere
//! else: a module beside `prometheus.rs` implementing [`Provider`] (one query in, one number or
//! a [`QueryError`] out, within the timeout); a variant of [`ProviderKind`]; its spec beside
//! [`PrometheusSpec`] in `spec.rs`, as an optional field of [`AnalysisSpec`] with a CEL rule
//! that exactly one provider is set (which makes `prometheus` optional: regenerate the CRD);
//! [`AnalysisPlan::new`] reads it into the plan's [`Source`], `credentials.rs` reads its
//! Secrets when they are more than a bearer token and a CA, and [`Providers`]
//! (`providers.rs`) hands the new kind to its client. The adapter, the binary and the
//! simulations hold only an `Arc<dyn Provider>` (by default [`Providers`]), an
//! [`AnalysisPlan`] and its runs: none of them changes. [`QueryError`]'s words name Prometheus
//! today; the second provider gives them neutral words or variants of its own.
//!
//! # Invariants
//!
//! - A run never blocks its caller: it is a task of its own, its lock is never held across an
//!   await, and every query has a deadline ([`Provider::query`]'s `timeout`).
//! - No request is sent to an address the controller's administrator did not allow
//!   ([`AllowedAddresses`], `run --allow-analysis-address`): the caller checks a plan's
//!   address before it starts a run, and a refused one is the object's `InvalidSpec`. So a
//!   Secret of `bearerTokenSecret` or `caSecret` only ever goes to an allowed address.
//! - A bearer token goes over https only (the CRD's rule and [`AnalysisPlan::new`] both refuse
//!   it over http) and never appears in a log or a `Debug` output.
//! - What a status, an event or a log shows of a measurement is bounded (issue 47): a query
//!   shown is cut to 1 KiB, an answer is read up to 64 KiB, and every text from the provider
//!   (its error, a page that is not its JSON, a connection error) is cut to a few hundred bytes
//!   by `canary_state_machine::cut`, the one home of that cut.
//! - A measurement that cannot be taken (no credentials, no answer, no single number) is
//!   inconclusive with its reason, never a failure of the release.
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//! use canary_analysis::{AnalysisPlan, AnalysisSpec, QueryError, parse_answer};
//!
//! let spec: AnalysisSpec = serde_json::from_value(serde_json::json!({
//!     "prometheus": {"address": "http://prometheus-operated.monitoring.svc:9090"},
//!     "interval": "30s",
//!     "metrics": [{
//!         "name": "error-ratio",
//!         "query": "sum(rate(errors{node=~\"{{nodes}}\"}[1m]))",
//!         "max": 0.01
//!     }]
//! }))?;
//! let plan = AnalysisPlan::new(&spec)?;
//! assert_eq!((plan.interval, plan.timeout), (Duration::from_secs(30), Duration::from_secs(10)));
//!
//! // What the Prometheus provider makes of an answer: one number, or why there is none.
//! let answer = br#"{"status":"success","data":{"resultType":"vector","result":[]}}"#;
//! assert_eq!(parse_answer(200, answer), Err(QueryError::NoData));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod allow;
mod credentials;
mod plan;
mod prometheus;
mod provider;
mod providers;
mod run;
mod spec;
mod webhook;

pub use allow::{
    ALLOW_ENV, ALLOW_FLAG, AddressError, AllowedAddresses, AnalysisAddress, NotAllowed,
};
/// The state machine's types in this crate's signatures, for users who take it alone.
pub use canary_state_machine::{AnalysisVerdict, Measurement, MetricCheck, TemplateValues};
pub use credentials::CredentialError;
pub use plan::{AnalysisPlan, PlanError, Source};
pub use prometheus::{HttpPrometheus, form_body, parse_answer, query_uri, tls_config};
pub use provider::{Endpoint, Provider, ProviderKind, QueryError};
pub use providers::Providers;
pub use run::{AnalysisRun, Measured, RunKey, RunReporting};
pub use spec::{
    AnalysisSpec, AnalysisStatus, MeasurementStatus, MetricSpec, PrometheusSpec, SecretKeyRef,
};
pub use webhook::WebhookError;

/// The README's examples, compiled and run as doc tests so that they stay true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
