//! `spec.analysis` and `status.analysis` of a CanaryDaemonSet: the queries that judge a release
//! during the Pods driver's pause steps (docs/analysis.md), where they go, and what the last
//! measurements said. The adapter's CRD embeds these types as they are; their schema (and its
//! CEL rules) is part of the CRD it generates.
//!
//! Invariant: every optional field of the status serializes as `null` rather than being left
//! out, because the status is written with a JSON merge patch (a left-out field of a nested
//! object would keep its old value).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use canary_state_machine::DURATION_RULE;

/// Analysis: at every `interval` of a pause step, each metric's query goes to Prometheus and its
/// value is judged; a metric that fails `failureLimit` times fails the rollout
/// (`AnalysisFailed`), one inconclusive `inconclusiveLimit` times in a row holds it
/// (`AnalysisInconclusive`) until a conclusive measurement, and a timed pause ends only once
/// every metric has passed. Pods driver only: the DaemonSet controller cannot hold one
/// updated pod alone for a soak (docs/analysis.md, "Why the Pods driver").
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AnalysisSpec {
    /// Where the queries go.
    pub prometheus: PrometheusSpec,
    /// Time between two measurements of a metric (default `1m`).
    #[serde(default = "default_interval")]
    #[schemars(length(min = 2, max = 24))]
    #[x_kube(validation = kube::core::Rule::new(DURATION_RULE).message("a duration such as 30s, 10m or 1h30m"))]
    pub interval: String,
    /// The metrics, each judged on its own (1 to 16).
    #[schemars(length(min = 1, max = 16))]
    pub metrics: Vec<MetricSpec>,
}

/// A Prometheus server, and how the controller proves who asks.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new("!has(self.bearerTokenSecret) || self.address.startsWith('https://')").message("a bearer token goes over https:// only: it would cross the network in clear text"))]
#[x_kube(validation = kube::core::Rule::new("!has(self.caSecret) || self.address.startsWith('https://')").message("caSecret verifies an https:// address"))]
pub struct PrometheusSpec {
    /// Its base URL, `http://` or `https://` (for example
    /// `http://prometheus-operated.monitoring.svc:9090`); the queries go to
    /// `<address>/api/v1/query`.
    #[schemars(length(min = 8, max = 2048))]
    #[x_kube(validation = kube::core::Rule::new("self.startsWith('http://') || self.startsWith('https://')").message("an http:// or https:// URL such as http://prometheus-operated.monitoring.svc:9090"))]
    pub address: String,
    /// How long one query may take before it counts as inconclusive (default `10s`).
    #[serde(default = "default_timeout")]
    #[schemars(length(min = 2, max = 24))]
    #[x_kube(validation = kube::core::Rule::new(DURATION_RULE).message("a duration such as 5s or 1m"))]
    pub timeout: String,
    /// A Secret of this namespace whose key holds a bearer token, sent as `Authorization:
    /// Bearer` (a Prometheus behind kube-rbac-proxy, Thanos Querier, a managed service).
    /// Read again at every round of measurements, so a rotated token is picked up. https only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bearer_token_secret: Option<SecretKeyRef>,
    /// A Secret of this namespace whose key holds the PEM certificates of the CAs that sign
    /// the server's certificate (`ca.crt`); without it, the system's roots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_secret: Option<SecretKeyRef>,
}

/// A key of a Secret in the CanaryDaemonSet's namespace. The controller needs `get` on it
/// (docs/analysis.md, "Credentials"): the default install grants no access to Secrets.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    /// The Secret's name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// The key in its data.
    #[schemars(length(min = 1, max = 253))]
    pub key: String,
}

/// One metric: a PromQL query whose single sample is the value, and the range it must stay in.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new("has(self.min) || has(self.max) || has(self.maxRatio)").message("set min, max or maxRatio: nothing else judges the value"))]
#[x_kube(validation = kube::core::Rule::new("!has(self.maxRatio) || has(self.baselineQuery)").message("maxRatio needs a baselineQuery"))]
pub struct MetricSpec {
    /// Unique within the analysis; the `metric` label of `canary_analysis_*`.
    #[schemars(length(min = 1, max = 63))]
    pub name: String,
    /// The PromQL template. Placeholders: `{{nodes}}` (the nodes that run the new revision, as
    /// a regex alternation), `{{baselineNodes}}` (those still on an older one), `{{pods}}`,
    /// `{{namespace}}`, `{{daemonSet}}`, `{{revision}}`, each regex-escaped for use inside a
    /// double-quoted string (`node=~"{{nodes}}"`). It must give one series (aggregate it).
    #[schemars(length(min = 1, max = 8192))]
    pub query: String,
    /// The baseline's template, compared through `maxRatio`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 8192))]
    pub baseline_query: Option<String>,
    /// A value below this is a failed measurement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<f64>,
    /// A value above this is a failed measurement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<f64>,
    /// The value over the baseline's above this is a failed measurement (a baseline of 0
    /// with a value above 0 is an infinite ratio).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_ratio: Option<f64>,
    /// Failed measurements in one pause step that fail the rollout (default 1).
    #[serde(default = "default_failure_limit")]
    #[schemars(range(min = 1, max = 1000))]
    pub failure_limit: u32,
    /// Inconclusive measurements in a row (no answer, no data, several series) that hold the
    /// rollout until a conclusive one (default 3).
    #[serde(default = "default_inconclusive_limit")]
    #[schemars(range(min = 1, max = 1000))]
    pub inconclusive_limit: u32,
}

fn default_interval() -> String {
    "1m".to_owned()
}

fn default_timeout() -> String {
    "10s".to_owned()
}

fn default_failure_limit() -> u32 {
    1
}

fn default_inconclusive_limit() -> u32 {
    3
}

/// The analysis of the stretch of a rollout measured last.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AnalysisStatus {
    /// The stretch the measurements belong to: the Pods driver's step (index, as
    /// `currentStepIndex`); the MaxUnavailable driver's canary (0) or widened rollout (1).
    pub step: u32,
    /// The target revision they measured.
    #[serde(default)]
    pub revision: Option<String>,
    /// `Pending`, `Passing`, `Failed` or `Inconclusive`.
    pub verdict: String,
    /// Why, when failed or inconclusive.
    #[serde(default)]
    pub message: Option<String>,
    /// The last measurement of each metric.
    #[serde(default)]
    pub measurements: Vec<MeasurementStatus>,
}

/// The last measurement of one metric.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MeasurementStatus {
    /// The metric's name.
    pub metric: String,
    /// The query as sent, placeholders filled in: paste it into Prometheus.
    pub query: String,
    /// The baseline query as sent.
    #[serde(default)]
    pub baseline_query: Option<String>,
    /// The value, when there was one number, as Prometheus writes samples (`0.25`, `NaN`,
    /// `+Inf`: JSON has no number for the last two).
    #[serde(default)]
    pub value: Option<String>,
    /// The baseline's value, written the same way.
    #[serde(default)]
    pub baseline: Option<String>,
    /// `Pass`, `Fail` or `Inconclusive`.
    pub verdict: String,
    /// Why it failed or was inconclusive.
    #[serde(default)]
    pub detail: Option<String>,
    /// When it was taken.
    #[serde(default)]
    pub time: Option<Time>,
    /// Failed measurements of this metric in this step.
    pub failures: u32,
    /// Inconclusive measurements in a row.
    pub inconclusive: u32,
}
