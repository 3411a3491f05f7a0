//! From `spec.analysis` to the plan a run follows: where the queries go ([`Source`]), how
//! long one may take, how often a round starts, and the metrics as the state machine judges
//! them.
//!
//! Pure. A spec that cannot be acted on is a [`PlanError`] whose message names the field, for
//! the status and the `InvalidSpec` event; the checks repeat the CRD's rules, because an API
//! server that does not run them must not make the controller act on a spec they reject.

use std::time::Duration;

use canary_state_machine::{
    AnalysisError, InvalidDuration, MetricCheck, parse_duration, validate_metrics,
};

use crate::prometheus::query_uri;
use crate::provider::{ProviderKind, QueryError};
use crate::spec::{AnalysisSpec, SecretKeyRef};

/// What a spec's analysis asks for, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct AnalysisPlan {
    /// Where the queries go.
    pub source: Source,
    /// Deadline of one query.
    pub timeout: Duration,
    /// Time between two rounds of measurements.
    pub interval: Duration,
    /// The metrics, in the spec's order.
    pub checks: Vec<MetricCheck>,
}

/// Where a plan's queries go, before its Secrets are read: the provider, its address and the
/// Secret keys of its credentials (read at each round, [`Source::endpoint`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    /// Which provider answers.
    pub provider: ProviderKind,
    /// The server's base URL.
    pub address: String,
    /// The Secret key of the bearer token (https only).
    pub bearer_token_secret: Option<SecretKeyRef>,
    /// The Secret key of the CA certificates (https only).
    pub ca_secret: Option<SecretKeyRef>,
}

/// Why a spec's analysis cannot be acted on; the message names the field.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlanError {
    /// The address is no `http://` or `https://` URL.
    #[error("spec.analysis.prometheus.address: {0}")]
    Address(QueryError),
    /// A bearer token would go over plain http.
    #[error(
        "spec.analysis.prometheus.bearerTokenSecret: a bearer token goes over https:// only, it would cross the network in clear text"
    )]
    TokenInClear,
    /// A CA with a plain http address.
    #[error("spec.analysis.prometheus.caSecret verifies an https:// address")]
    CaWithoutHttps,
    /// The timeout is no duration.
    #[error("spec.analysis.prometheus.timeout: {0}")]
    Timeout(InvalidDuration),
    /// The interval is no duration.
    #[error("spec.analysis.interval: {0}")]
    Interval(InvalidDuration),
    /// A zero interval or timeout.
    #[error("spec.analysis: interval and prometheus.timeout must be longer than zero")]
    Zero,
    /// The metrics cannot be judged (a duplicate name, an unknown placeholder, no bound).
    #[error("spec.analysis.metrics: {0}")]
    Metrics(AnalysisError),
}

impl AnalysisPlan {
    /// The plan of `spec`, or why it cannot be used; the durations read as the pause steps'
    /// are.
    pub fn new(spec: &AnalysisSpec) -> Result<AnalysisPlan, PlanError> {
        let prometheus = &spec.prometheus;
        let uri = query_uri(&prometheus.address).map_err(PlanError::Address)?;
        let https = uri.scheme() == Some(&hyper::http::uri::Scheme::HTTPS);
        if !https && prometheus.bearer_token_secret.is_some() {
            return Err(PlanError::TokenInClear);
        }
        if !https && prometheus.ca_secret.is_some() {
            return Err(PlanError::CaWithoutHttps);
        }
        let timeout = parse_duration(&prometheus.timeout).map_err(PlanError::Timeout)?;
        let interval = parse_duration(&spec.interval).map_err(PlanError::Interval)?;
        if interval.is_zero() || timeout.is_zero() {
            return Err(PlanError::Zero);
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
        validate_metrics(&checks).map_err(PlanError::Metrics)?;
        Ok(AnalysisPlan {
            source: Source {
                provider: ProviderKind::Prometheus,
                address: prometheus.address.clone(),
                bearer_token_secret: prometheus.bearer_token_secret.clone(),
                ca_secret: prometheus.ca_secret.clone(),
            },
            timeout,
            interval,
            checks,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new(spec: &AnalysisSpec) -> Result<AnalysisPlan, String> {
        AnalysisPlan::new(spec).map_err(|e| e.to_string())
    }

    #[test]
    fn a_plan_reads_the_durations_and_checks_the_metrics() {
        let spec: AnalysisSpec = serde_json::from_value(serde_json::json!({
            "prometheus": {"address": "http://prom:9090"},
            "metrics": [{"name": "m", "query": "up", "max": 1}]
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let plan = new(&spec).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (plan.interval, plan.timeout),
            (Duration::from_secs(60), Duration::from_secs(10))
        );
        assert_eq!(plan.source.provider, ProviderKind::Prometheus);
        assert_eq!(plan.checks[0].failure_limit, 1);
        assert_eq!(plan.checks[0].inconclusive_limit, 3);
        let mut ftp = spec.clone();
        ftp.prometheus.address = "ftp://prom".into();
        assert!(new(&ftp).unwrap_err().contains("https:// URL"));
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
        let https = new(&https).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(https.source.bearer_token_secret, Some(token.clone()));
        let mut clear = spec.clone();
        clear.prometheus.bearer_token_secret = Some(token);
        assert!(new(&clear).unwrap_err().contains("clear text"));
        let mut typo = spec.clone();
        typo.metrics[0].query = "x{{node}}".into();
        assert!(new(&typo).unwrap_err().contains("unknown placeholder"));
        let mut never = spec;
        never.interval = "1d".into();
        assert_eq!(
            new(&never).unwrap_err(),
            r#"spec.analysis.interval: "1d" is not a duration such as 30s, 10m or 1h30m"#
        );
    }
}
