//! Analysis gates: what one metric measurement means for a rollout, and how the measurements of
//! one step add up to a verdict.
//!
//! A rollout with analysis measures each [`MetricCheck`] at every interval of a pause step: its
//! PromQL `query` (and `baseline_query`) is first [`render`]ed with the step's
//! [`TemplateValues`] (the nodes that run the new revision, those still on the old one, ...),
//! the caller asks Prometheus, and [`judge`] turns the answers into a [`Measurement`]. A
//! [`MetricTally`] per metric counts them; [`verdict`] says what the step may do:
//!
//! - a metric with `failure_limit` failed measurements fails the rollout
//!   ([`AnalysisVerdict::Failed`], reason `AnalysisFailed`);
//! - a metric with `inconclusive_limit` inconclusive measurements in a row holds it
//!   ([`AnalysisVerdict::Inconclusive`], reason `AnalysisInconclusive`) until a conclusive one;
//! - every metric passed at least once, and none of the above: [`AnalysisVerdict::Passing`],
//!   the step may end;
//! - else [`AnalysisVerdict::Pending`].
//!
//! This module does no I/O: the caller queries Prometheus and keeps the tallies. The Pods
//! driver reads the verdict through [`PodObservation::analysis`](crate::PodObservation).
//!
//! # Invariants
//!
//! - An unreachable Prometheus, an error answer, no series, more than one series, a NaN, or a
//!   list placeholder with nothing in it is *inconclusive*, never a failure and never a pass.
//! - A failure is decided from a number out of range only.
//! - Every value substituted into a query is regex-escaped and escaped for a PromQL
//!   double-quoted string, so a name can never change the query's structure.

use std::fmt;

/// The most metrics an analysis may have (the CRD's `maxItems`).
pub const MAX_METRICS: usize = 16;

/// The placeholders a query may use, each written `{{name}}`.
pub const PLACEHOLDERS: [&str; 6] = [
    "nodes",
    "baselineNodes",
    "pods",
    "namespace",
    "daemonSet",
    "revision",
];

/// One metric of an analysis, as the spec states it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MetricCheck {
    /// Unique within the analysis; the `metric` label of the analysis metrics.
    pub name: String,
    /// The PromQL template whose single sample is the measured value.
    pub query: String,
    /// The PromQL template of the baseline, compared through [`max_ratio`](Self::max_ratio).
    pub baseline_query: Option<String>,
    /// A value below is a failure.
    pub min: Option<f64>,
    /// A value above is a failure.
    pub max: Option<f64>,
    /// A value over the baseline's above this is a failure.
    pub max_ratio: Option<f64>,
    /// Failed measurements in one step that fail the rollout (at least 1).
    pub failure_limit: u32,
    /// Inconclusive measurements in a row that hold the rollout (at least 1).
    pub inconclusive_limit: u32,
}

/// Why an analysis spec cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnalysisError {
    /// No metric at all.
    #[error("analysis needs at least one metric")]
    NoMetric,
    /// More metrics than [`MAX_METRICS`].
    #[error("analysis has {0} metrics; at most {MAX_METRICS}")]
    TooManyMetrics(usize),
    /// Two metrics share a name.
    #[error("metric name {0:?} is used twice")]
    DuplicateName(String),
    /// A metric without a name.
    #[error("metric {index}: the name is empty")]
    EmptyName {
        /// Position in the list.
        index: usize,
    },
    /// A problem in one metric.
    #[error("metric {metric:?}: {reason}")]
    Metric {
        /// The metric's name.
        metric: String,
        /// What is wrong.
        reason: String,
    },
}

impl MetricCheck {
    /// Checks the metric: a query, at least one bound, `maxRatio` only with a baseline,
    /// finite bounds with `min <= max`, limits of at least 1, and known placeholders only.
    pub fn validate(&self) -> Result<(), AnalysisError> {
        let invalid = |reason: String| AnalysisError::Metric {
            metric: self.name.clone(),
            reason,
        };
        if self.query.trim().is_empty() {
            return Err(invalid("the query is empty".to_owned()));
        }
        if self.min.is_none() && self.max.is_none() && self.max_ratio.is_none() {
            return Err(invalid(
                "nothing to judge by: set min, max or maxRatio".to_owned(),
            ));
        }
        if self.max_ratio.is_some() && self.baseline_query.is_none() {
            return Err(invalid("maxRatio needs a baselineQuery".to_owned()));
        }
        for (field, value) in [
            ("min", self.min),
            ("max", self.max),
            ("maxRatio", self.max_ratio),
        ] {
            if value.is_some_and(|v| !v.is_finite()) {
                return Err(invalid(format!("{field} must be a finite number")));
            }
        }
        if let (Some(min), Some(max)) = (self.min, self.max)
            && min > max
        {
            return Err(invalid(format!("min {min} is above max {max}")));
        }
        if self.max_ratio.is_some_and(|ratio| ratio <= 0.0) {
            return Err(invalid("maxRatio must be above 0".to_owned()));
        }
        if self.failure_limit == 0 || self.inconclusive_limit == 0 {
            return Err(invalid(
                "failureLimit and inconclusiveLimit must be at least 1".to_owned(),
            ));
        }
        for (field, template) in [
            ("query", Some(&self.query)),
            ("baselineQuery", self.baseline_query.as_ref()),
        ] {
            if let Some(template) = template {
                placeholders(template).map_err(|e| invalid(format!("{field}: {e}")))?;
            }
        }
        Ok(())
    }
}

/// Checks a whole list of metrics: each one, their count and their names.
pub fn validate_metrics(metrics: &[MetricCheck]) -> Result<(), AnalysisError> {
    if metrics.is_empty() {
        return Err(AnalysisError::NoMetric);
    }
    if metrics.len() > MAX_METRICS {
        return Err(AnalysisError::TooManyMetrics(metrics.len()));
    }
    for (index, metric) in metrics.iter().enumerate() {
        if metric.name.trim().is_empty() {
            return Err(AnalysisError::EmptyName { index });
        }
        if metrics.iter().take(index).any(|m| m.name == metric.name) {
            return Err(AnalysisError::DuplicateName(metric.name.clone()));
        }
        metric.validate()?;
    }
    Ok(())
}

/// What the placeholders stand for in one step.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TemplateValues {
    /// Nodes whose pod runs the new revision (`{{nodes}}`).
    pub nodes: Vec<String>,
    /// Nodes whose pod runs an older revision (`{{baselineNodes}}`).
    pub baseline_nodes: Vec<String>,
    /// The new revision's pods (`{{pods}}`).
    pub pods: Vec<String>,
    /// The DaemonSet's namespace (`{{namespace}}`).
    pub namespace: String,
    /// The DaemonSet's name (`{{daemonSet}}`).
    pub daemon_set: String,
    /// The new revision's `controller-revision-hash` (`{{revision}}`).
    pub revision: String,
}

/// A template that cannot be rendered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenderError {
    /// `{{` without its `}}`.
    #[error("a placeholder opened with {{{{ is not closed")]
    Unclosed,
    /// A name that is not one of [`PLACEHOLDERS`].
    #[error(
        "unknown placeholder {{{{{0}}}}}; known: nodes, baselineNodes, pods, namespace, daemonSet, revision"
    )]
    Unknown(String),
    /// A list placeholder with nothing to list: the query would match series it should not.
    #[error("{{{{{0}}}}} is empty in this step (no such node or pod yet)")]
    Empty(&'static str),
}

/// The placeholder names a template uses, in order; an error for an unknown or unclosed one.
pub fn placeholders(template: &str) -> Result<Vec<&'static str>, RenderError> {
    let mut used = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find("{{") {
        let after = &rest[open + 2..];
        let close = after.find("}}").ok_or(RenderError::Unclosed)?;
        let name = after[..close].trim();
        let known = PLACEHOLDERS
            .iter()
            .find(|known| **known == name)
            .ok_or_else(|| RenderError::Unknown(name.to_owned()))?;
        used.push(*known);
        rest = &after[close + 2..];
    }
    Ok(used)
}

/// The template with every placeholder replaced by its escaped value: a list as a regex
/// alternation (`a|b`), a single name regex-escaped; both escaped for a PromQL double-quoted
/// string. A list placeholder with an empty list is an error ([`RenderError::Empty`]).
pub fn render(template: &str, values: &TemplateValues) -> Result<String, RenderError> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(open) = rest.find("{{") {
        out.push_str(&rest[..open]);
        let after = &rest[open + 2..];
        let close = after.find("}}").ok_or(RenderError::Unclosed)?;
        let name = after[..close].trim();
        let list = |key: &'static str, items: &[String]| {
            if items.is_empty() {
                Err(RenderError::Empty(key))
            } else {
                Ok(regex_alternation(items))
            }
        };
        let value = match name {
            "nodes" => list("nodes", &values.nodes)?,
            "baselineNodes" => list("baselineNodes", &values.baseline_nodes)?,
            "pods" => list("pods", &values.pods)?,
            "namespace" => regex_alternation(std::slice::from_ref(&values.namespace)),
            "daemonSet" => regex_alternation(std::slice::from_ref(&values.daemon_set)),
            "revision" => regex_alternation(std::slice::from_ref(&values.revision)),
            other => return Err(RenderError::Unknown(other.to_owned())),
        };
        out.push_str(&value);
        rest = &after[close + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

/// `items` as one RE2 alternation, each item matched literally, written for the inside of a
/// PromQL double-quoted string: `ip-10-0-0-1.ec2` becomes `ip-10-0-0-1\\.ec2`.
pub fn regex_alternation(items: &[String]) -> String {
    let mut regex = String::new();
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            regex.push('|');
        }
        for c in item.chars() {
            if "\\.+*?()|[]{}^$".contains(c) {
                regex.push('\\');
            }
            regex.push(c);
        }
    }
    let mut quoted = String::with_capacity(regex.len());
    for c in regex.chars() {
        match c {
            '\\' => quoted.push_str("\\\\"),
            '"' => quoted.push_str("\\\""),
            '\n' => quoted.push_str("\\n"),
            c => quoted.push(c),
        }
    }
    quoted
}

/// What one measurement says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Verdict {
    /// In range.
    Pass,
    /// Out of range.
    Fail,
    /// Nothing to judge by: no answer, no data, or not one number.
    Inconclusive,
}

impl Verdict {
    /// Every verdict.
    pub const ALL: [Verdict; 3] = [Verdict::Pass, Verdict::Fail, Verdict::Inconclusive];

    /// The status name: `Pass`, `Fail`, `Inconclusive`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Verdict::Pass => "Pass",
            Verdict::Fail => "Fail",
            Verdict::Inconclusive => "Inconclusive",
        }
    }

    /// The metric label: `pass`, `fail`, `inconclusive`.
    pub const fn label(self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Fail => "fail",
            Verdict::Inconclusive => "inconclusive",
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One measurement of one metric, judged.
#[derive(Debug, Clone, PartialEq)]
pub struct Measurement {
    /// The query's value, when there was one number.
    pub value: Option<f64>,
    /// The baseline's value, when asked and there was one number.
    pub baseline: Option<f64>,
    /// What it says.
    pub verdict: Verdict,
    /// Why, in words: the range missed, or what made it inconclusive.
    pub detail: String,
}

/// Judges one measurement: `value` and `baseline` are the numbers Prometheus gave, or why there
/// was none (unreachable, an error, no series, several series). `baseline` is `None` when the
/// metric has no baseline query.
pub fn judge(
    check: &MetricCheck,
    value: Result<f64, String>,
    baseline: Option<Result<f64, String>>,
) -> Measurement {
    let inconclusive = |value: Option<f64>, baseline: Option<f64>, detail: String| Measurement {
        value,
        baseline,
        verdict: Verdict::Inconclusive,
        detail,
    };
    let value = match value {
        Ok(v) if v.is_nan() => return inconclusive(None, None, "the query gave NaN".to_owned()),
        Ok(v) => v,
        Err(why) => return inconclusive(None, None, why),
    };
    let baseline = match baseline {
        None => None,
        Some(Ok(b)) if b.is_nan() => {
            return inconclusive(Some(value), None, "the baseline query gave NaN".to_owned());
        }
        Some(Ok(b)) => Some(b),
        Some(Err(why)) => return inconclusive(Some(value), None, format!("baseline: {why}")),
    };
    let fail = |detail: String| Measurement {
        value: Some(value),
        baseline,
        verdict: Verdict::Fail,
        detail,
    };
    if let Some(min) = check.min
        && value < min
    {
        return fail(format!("{value} is below min {min}"));
    }
    if let Some(max) = check.max
        && value > max
    {
        return fail(format!("{value} is above max {max}"));
    }
    if let (Some(max_ratio), Some(baseline)) = (check.max_ratio, baseline) {
        // 0 over 0 is as good as the baseline; anything over 0 is infinitely worse.
        let ratio = if baseline == 0.0 {
            if value == 0.0 { 1.0 } else { f64::INFINITY }
        } else {
            value / baseline
        };
        if ratio > max_ratio {
            return fail(format!(
                "{value} is {} the baseline's {baseline}, above maxRatio {max_ratio}",
                if ratio.is_finite() {
                    format!("{ratio:.3} times")
                } else {
                    "infinitely above".to_owned()
                }
            ));
        }
    }
    Measurement {
        value: Some(value),
        baseline,
        verdict: Verdict::Pass,
        detail: String::new(),
    }
}

/// The measurements of one metric in one step, counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct MetricTally {
    /// Measurements taken.
    pub measured: u32,
    /// Of those, passing.
    pub passed: u32,
    /// Of those, failing.
    pub failures: u32,
    /// Inconclusive measurements since the last conclusive one.
    pub inconclusive_in_a_row: u32,
}

impl MetricTally {
    /// Counts one more measurement.
    pub fn record(&mut self, verdict: Verdict) {
        self.measured = self.measured.saturating_add(1);
        match verdict {
            Verdict::Pass => {
                self.passed = self.passed.saturating_add(1);
                self.inconclusive_in_a_row = 0;
            }
            Verdict::Fail => {
                self.failures = self.failures.saturating_add(1);
                self.inconclusive_in_a_row = 0;
            }
            Verdict::Inconclusive => {
                self.inconclusive_in_a_row = self.inconclusive_in_a_row.saturating_add(1);
            }
        }
    }
}

/// What the analysis of a step allows.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum AnalysisVerdict {
    /// Not every metric has passed yet: a pause step that is over waits.
    Pending,
    /// Every metric passed at least once, none failed past its limit and none is inconclusive
    /// past its limit: the step may end.
    Passing,
    /// A metric failed `failure_limit` times: the rollout fails (`AnalysisFailed`).
    Failed {
        /// The metric's name.
        metric: String,
        /// Its last failure, in words.
        detail: String,
    },
    /// A metric was inconclusive `inconclusive_limit` times in a row: the rollout holds
    /// (`AnalysisInconclusive`) until a conclusive measurement.
    Inconclusive {
        /// The metric's name.
        metric: String,
        /// Its last inconclusive measurement, in words.
        detail: String,
    },
}

impl AnalysisVerdict {
    /// The status name: `Pending`, `Passing`, `Failed`, `Inconclusive`.
    pub const fn as_str(&self) -> &'static str {
        match self {
            AnalysisVerdict::Pending => "Pending",
            AnalysisVerdict::Passing => "Passing",
            AnalysisVerdict::Failed { .. } => "Failed",
            AnalysisVerdict::Inconclusive { .. } => "Inconclusive",
        }
    }
}

/// The verdict of a step from each metric's tally and last measurement's detail, in the order
/// of `checks`: a failure first (it ends the rollout), then an inconclusive streak, then
/// whether every metric passed. `runs` shorter than `checks` counts the missing ones as never
/// measured.
pub fn verdict(checks: &[MetricCheck], runs: &[(MetricTally, &str)]) -> AnalysisVerdict {
    let paired = || {
        checks
            .iter()
            .enumerate()
            .map(|(i, check)| (check, runs.get(i).copied().unwrap_or_default()))
    };
    for (check, (tally, detail)) in paired() {
        if tally.failures >= check.failure_limit.max(1) {
            return AnalysisVerdict::Failed {
                metric: check.name.clone(),
                detail: detail.to_owned(),
            };
        }
    }
    for (check, (tally, detail)) in paired() {
        if tally.inconclusive_in_a_row >= check.inconclusive_limit.max(1) {
            return AnalysisVerdict::Inconclusive {
                metric: check.name.clone(),
                detail: detail.to_owned(),
            };
        }
    }
    if paired().all(|(_, (tally, _))| tally.passed > 0) {
        AnalysisVerdict::Passing
    } else {
        AnalysisVerdict::Pending
    }
}

/// The analysis of the step the caller is measuring, as the Pods driver reads it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StepAnalysis {
    /// The step (index) the measurements belong to; another step counts as [`Pending`].
    ///
    /// [`Pending`]: AnalysisVerdict::Pending
    pub step: u32,
    /// What they allow.
    pub verdict: AnalysisVerdict,
    /// The previous pass reported this verdict for this step already (the status records
    /// it), so its event is not sent again.
    pub announced: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check() -> MetricCheck {
        MetricCheck {
            name: "errors".into(),
            query: r#"sum(rate(errors{node=~"{{nodes}}"}[1m]))"#.into(),
            baseline_query: Some(r#"sum(rate(errors{node=~"{{ baselineNodes }}"}[1m]))"#.into()),
            min: None,
            max: Some(0.5),
            max_ratio: Some(2.0),
            failure_limit: 2,
            inconclusive_limit: 2,
        }
    }

    fn values() -> TemplateValues {
        TemplateValues {
            nodes: vec!["node-1".into(), "ip-10.ec2".into()],
            baseline_nodes: vec!["node-2".into()],
            pods: vec!["agent-x".into()],
            namespace: "kube-system".into(),
            daemon_set: "agent".into(),
            revision: "6c9f".into(),
        }
    }

    #[test]
    fn rendering_escapes_each_value_and_joins_lists() {
        let rendered = render(&check().query, &values()).unwrap();
        assert_eq!(
            rendered,
            r#"sum(rate(errors{node=~"node-1|ip-10\\.ec2"}[1m]))"#
        );
        let baseline = render(check().baseline_query.as_deref().unwrap(), &values()).unwrap();
        assert_eq!(baseline, r#"sum(rate(errors{node=~"node-2"}[1m]))"#);
        let names = render(
            r#"up{namespace="{{namespace}}",ds="{{daemonSet}}",rev="{{revision}}",pod=~"{{pods}}"}"#,
            &values(),
        )
        .unwrap();
        assert_eq!(
            names,
            r#"up{namespace="kube-system",ds="agent",rev="6c9f",pod=~"agent-x"}"#
        );
    }

    #[test]
    fn a_value_cannot_break_out_of_its_string() {
        let quoted = |items: &[&str]| {
            regex_alternation(&items.iter().map(|i| (*i).to_owned()).collect::<Vec<_>>())
        };
        // A regex backslash is itself escaped in the string literal.
        assert_eq!(quoted(&["a.b"]), r"a\\.b");
        assert_eq!(quoted(&[r"a\b"]), r"a\\\\b");
        assert_eq!(quoted(&[r#"a"b"#]), r#"a\"b"#);
        assert_eq!(quoted(&["a", "b(c)"]), r"a|b\\(c\\)");
        let hostile = TemplateValues {
            nodes: vec![r#"a"} or vector(1) or {x=""#.into()],
            ..values()
        };
        let rendered = render(r#"m{node=~"{{nodes}}"}"#, &hostile).unwrap();
        // Every quote inside is escaped: the string literal ends where the template ends it.
        let inner = &rendered[r#"m{node=~""#.len()..rendered.len() - 2];
        let mut escaped = false;
        for c in inner.chars() {
            assert!(escaped || c != '"', "unescaped quote in {inner}");
            escaped = !escaped && c == '\\';
        }
        assert!(!escaped, "{inner} ends inside an escape");
    }

    #[test]
    fn unknown_unclosed_and_empty_placeholders_are_errors() {
        assert_eq!(
            render("x{{node}}", &values()),
            Err(RenderError::Unknown("node".into()))
        );
        assert_eq!(render("x{{nodes", &values()), Err(RenderError::Unclosed));
        let none = TemplateValues {
            nodes: Vec::new(),
            ..values()
        };
        assert_eq!(
            render("x{{nodes}}", &none),
            Err(RenderError::Empty("nodes"))
        );
        assert_eq!(render("plain", &none).unwrap(), "plain");
        assert_eq!(
            placeholders("{{nodes}}/{{ baselineNodes }}").unwrap(),
            ["nodes", "baselineNodes"]
        );
    }

    #[test]
    fn validation_names_the_problem() {
        assert!(check().validate().is_ok());
        let no_bound = MetricCheck {
            min: None,
            max: None,
            max_ratio: None,
            ..check()
        };
        assert!(
            no_bound
                .validate()
                .unwrap_err()
                .to_string()
                .contains("set min, max or maxRatio")
        );
        let ratio_alone = MetricCheck {
            baseline_query: None,
            ..check()
        };
        assert!(
            ratio_alone
                .validate()
                .unwrap_err()
                .to_string()
                .contains("needs a baselineQuery")
        );
        let upside_down = MetricCheck {
            min: Some(2.0),
            max: Some(1.0),
            ..check()
        };
        assert!(upside_down.validate().is_err());
        let typo = MetricCheck {
            query: "x{{node}}".into(),
            ..check()
        };
        assert!(
            typo.validate()
                .unwrap_err()
                .to_string()
                .contains("unknown placeholder {{node}}")
        );
        let zero = MetricCheck {
            failure_limit: 0,
            ..check()
        };
        assert!(zero.validate().is_err());
        assert_eq!(validate_metrics(&[]), Err(AnalysisError::NoMetric));
        assert_eq!(
            validate_metrics(&[check(), check()]),
            Err(AnalysisError::DuplicateName("errors".into()))
        );
    }

    #[test]
    fn judging_a_measurement() {
        let c = check();
        assert_eq!(judge(&c, Ok(0.1), Some(Ok(0.1))).verdict, Verdict::Pass);
        let high = judge(&c, Ok(0.6), Some(Ok(0.5)));
        assert_eq!(high.verdict, Verdict::Fail);
        assert!(high.detail.contains("above max 0.5"), "{}", high.detail);
        let ratio = judge(&c, Ok(0.3), Some(Ok(0.1)));
        assert_eq!(ratio.verdict, Verdict::Fail);
        assert!(ratio.detail.contains("3.000 times"), "{}", ratio.detail);
        assert_eq!(judge(&c, Ok(0.0), Some(Ok(0.0))).verdict, Verdict::Pass);
        assert_eq!(judge(&c, Ok(0.01), Some(Ok(0.0))).verdict, Verdict::Fail);
        let down = judge(&c, Err("connection refused".into()), Some(Ok(0.1)));
        assert_eq!(
            (down.verdict, down.detail.as_str()),
            (Verdict::Inconclusive, "connection refused")
        );
        assert_eq!(judge(&c, Ok(f64::NAN), None).verdict, Verdict::Inconclusive);
        assert_eq!(
            judge(&c, Ok(0.1), Some(Err("no series".into()))).verdict,
            Verdict::Inconclusive
        );
        let min_only = MetricCheck {
            min: Some(10.0),
            max: None,
            max_ratio: None,
            baseline_query: None,
            ..check()
        };
        assert_eq!(judge(&min_only, Ok(9.0), None).verdict, Verdict::Fail);
        assert_eq!(judge(&min_only, Ok(10.0), None).verdict, Verdict::Pass);
    }

    #[test]
    fn the_verdict_counts_failures_and_inconclusive_streaks() {
        let checks = [check()];
        let mut tally = MetricTally::default();
        assert_eq!(verdict(&checks, &[]), AnalysisVerdict::Pending);
        // Each measurement in turn, with its detail and the verdict after it.
        let measurements = [
            (Verdict::Inconclusive, "down", AnalysisVerdict::Pending),
            (
                Verdict::Inconclusive,
                "down",
                AnalysisVerdict::Inconclusive {
                    metric: "errors".into(),
                    detail: "down".into(),
                },
            ),
            // A conclusive measurement ends the streak on its own.
            (Verdict::Pass, "", AnalysisVerdict::Passing),
            (Verdict::Fail, "high", AnalysisVerdict::Passing),
            (
                Verdict::Fail,
                "high",
                AnalysisVerdict::Failed {
                    metric: "errors".into(),
                    detail: "high".into(),
                },
            ),
        ];
        for (i, (measured, detail, expected)) in measurements.into_iter().enumerate() {
            tally.record(measured);
            assert_eq!(
                verdict(&checks, &[(tally, detail)]),
                expected,
                "after measurement {i} ({measured:?}, {detail:?})"
            );
        }
        // A second metric never measured keeps the step pending.
        let two = [
            check(),
            MetricCheck {
                name: "b".into(),
                ..check()
            },
        ];
        let mut passed = MetricTally::default();
        passed.record(Verdict::Pass);
        assert_eq!(verdict(&two, &[(passed, "")]), AnalysisVerdict::Pending);
        assert_eq!(
            verdict(&two, &[(passed, ""), (passed, "")]),
            AnalysisVerdict::Passing
        );
    }
}
