//! The PrometheusRule: its rule groups are extracted to `target/lint-deploy/rules.yaml` (so the
//! tests run on exactly what is deployed) for `promtool check rules` and `promtool test rules`;
//! every alert has a test where it fires, one where it stays quiet, and a runbook entry.

#![expect(
    clippy::indexing_slicing,
    reason = "only serde_json::Value is indexed here: a missing key or index reads as Null, and \
              writes by index go to objects this module built"
)]

use super::{Lint, parse_documents};
use anyhow::{Context, Result, bail, ensure};
use serde_json::{Value, json};
use xshell::cmd;

/// The PrometheusRule whose groups promtool checks and tests.
pub(super) const PROMETHEUS_RULE: &str = "deploy/prometheus/prometheus_rule.yaml";

/// promtool unit tests of the rules; they name `rules.yaml` as their rule file.
pub(super) const RULE_TESTS: &str = "deploy/prometheus/tests/alerts.test.yaml";

/// Where every alert has its runbook entry (a `### AlertName` heading).
pub(super) const RUNBOOKS: &str = "docs/operations.md";

/// The rule groups of the PrometheusRule, as a promtool rule file.
pub(super) fn rule_groups(context: &Lint) -> Result<Value> {
    let rules: Vec<&Value> = context.documents_of_kind("PrometheusRule").collect();
    let [rule] = rules.as_slice() else {
        bail!(
            "expected exactly one PrometheusRule across the builds, found {}",
            rules.len()
        );
    };
    let groups = &rule["spec"]["groups"];
    ensure!(
        groups.as_array().is_some_and(|g| !g.is_empty()),
        "the PrometheusRule has no rule groups"
    );
    Ok(json!({ "groups": groups }))
}

pub(super) fn alerts(groups: &Value) -> Vec<(&str, &Value)> {
    groups["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().into_iter().flatten())
        .filter_map(|rule| rule["alert"].as_str().map(|name| (name, rule)))
        .collect()
}

pub(super) fn check(context: &Lint) -> Result<()> {
    // The built PrometheusRule must be the one in the source file (kustomize only adds labels).
    let source = std::fs::read_to_string(PROMETHEUS_RULE)
        .with_context(|| format!("cannot read {PROMETHEUS_RULE}"))?;
    let source_groups = parse_documents(&source)?
        .into_iter()
        .next()
        .map(|d| d["spec"]["groups"].clone());
    let groups = rule_groups(context)?;
    ensure!(
        source_groups.as_ref() == Some(&groups["groups"]),
        "the built PrometheusRule differs from {PROMETHEUS_RULE}"
    );
    let rules_file = context.write("rules.yaml", &serde_json::to_string_pretty(&groups)?)?;
    let tests_text =
        std::fs::read_to_string(RULE_TESTS).with_context(|| format!("cannot read {RULE_TESTS}"))?;
    let tests_file = context.write("alerts.test.yaml", &tests_text)?;
    cmd!(context.sh, "promtool check rules {rules_file}").run()?;
    cmd!(context.sh, "promtool test rules {tests_file}").run()?;
    let tests: Value = serde_saphyr::from_str(&tests_text)
        .with_context(|| format!("cannot parse {RULE_TESTS}"))?;
    let runbooks =
        std::fs::read_to_string(RUNBOOKS).with_context(|| format!("cannot read {RUNBOOKS}"))?;
    let mut problems = Vec::new();
    for (alert, rule) in alerts(&groups) {
        problems.extend(alert_coverage(alert, &tests));
        problems.extend(runbook_problems(alert, rule, &runbooks));
    }
    ensure!(
        problems.is_empty(),
        "alerts not fully covered:\n{}",
        problems.join("\n")
    );
    eprintln!(
        "{} alerts: each fires in a test, stays quiet in another, and has a runbook",
        alerts(&groups).len()
    );
    Ok(())
}

/// Problems with the tests of `alert`: it needs a case where it fires and one where it is quiet.
pub(super) fn alert_coverage(alert: &str, tests: &Value) -> Vec<String> {
    let cases: Vec<&Value> = tests["tests"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|t| t["alert_rule_test"].as_array().into_iter().flatten())
        .filter(|case| case["alertname"] == alert)
        .collect();
    let fires = cases
        .iter()
        .any(|c| c["exp_alerts"].as_array().is_some_and(|a| !a.is_empty()));
    let quiet = cases
        .iter()
        .any(|c| c["exp_alerts"].as_array().is_none_or(|a| a.is_empty()));
    let mut problems = Vec::new();
    if !fires {
        problems.push(format!("{alert}: no promtool test where it fires"));
    }
    if !quiet {
        problems.push(format!("{alert}: no promtool test where it stays quiet"));
    }
    problems
}

/// Problems with the runbook of `alert`: a `### alert` heading and a runbook_url to its anchor.
pub(super) fn runbook_problems(alert: &str, rule: &Value, runbooks: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let heading = format!("### {alert}");
    if !runbooks.lines().any(|line| line.trim_end() == heading) {
        problems.push(format!(
            "{alert}: no `{heading}` runbook entry in {RUNBOOKS}"
        ));
    }
    let anchor = format!("{RUNBOOKS}#{}", alert.to_lowercase());
    let url = rule["annotations"]["runbook_url"]
        .as_str()
        .unwrap_or_default();
    if !url.ends_with(&anchor) {
        problems.push(format!(
            "{alert}: runbook_url {url:?} does not end with {anchor:?}"
        ));
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alert_coverage_wants_a_firing_and_a_quiet_case() {
        let tests = json!({ "tests": [
            { "alert_rule_test": [
                { "alertname": "A", "exp_alerts": [{ "exp_labels": {} }] },
                { "alertname": "A", "exp_alerts": [] },
                { "alertname": "B" },
            ]},
            { "alert_rule_test": [
                { "alertname": "C", "exp_alerts": [{ "exp_labels": {} }] },
            ]},
        ]});
        assert!(alert_coverage("A", &tests).is_empty());
        assert_eq!(
            alert_coverage("B", &tests),
            ["B: no promtool test where it fires"]
        );
        assert_eq!(
            alert_coverage("C", &tests),
            ["C: no promtool test where it stays quiet"]
        );
        assert_eq!(alert_coverage("D", &tests).len(), 2);
    }

    #[test]
    fn runbook_needs_heading_and_matching_url() {
        let rule = json!({ "annotations": {
            "runbook_url": "https://example.invalid/blob/main/docs/operations.md#canarynoleader"
        }});
        let runbooks = "# Operations\n\n### CanaryNoLeader\n\ntext\n";
        assert!(runbook_problems("CanaryNoLeader", &rule, runbooks).is_empty());
        assert_eq!(
            runbook_problems("CanaryNoLeader", &rule, "# nothing").len(),
            1
        );
        assert_eq!(runbook_problems("CanaryOther", &rule, runbooks).len(), 2);
    }
}
