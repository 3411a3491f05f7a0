//! The edges of the analysis rules that cargo-mutants found no test pinned (2026-12-02): the
//! bounds are inclusive, one bound is enough, exactly [`MAX_METRICS`] metrics are allowed, a
//! NaN baseline is inconclusive, placeholders are read one after another, and the names the
//! status and the metrics carry.

use canary_state_machine::{
    AnalysisVerdict, MAX_METRICS, MetricCheck, Verdict, judge, placeholders, validate_metrics,
};

fn check(min: Option<f64>, max: Option<f64>, max_ratio: Option<f64>) -> MetricCheck {
    MetricCheck {
        name: "errors".into(),
        query: "up".into(),
        baseline_query: max_ratio.map(|_| "up".into()),
        min,
        max,
        max_ratio,
        failure_limit: 1,
        inconclusive_limit: 1,
    }
}

#[test]
fn one_bound_is_enough_and_min_may_equal_max() {
    assert!(check(None, Some(1.0), None).validate().is_ok());
    assert!(check(Some(1.0), None, None).validate().is_ok());
    assert!(check(None, None, Some(2.0)).validate().is_ok());
    assert!(check(Some(1.0), Some(1.0), None).validate().is_ok());
    assert!(check(Some(2.0), Some(1.0), None).validate().is_err());
    assert!(check(None, None, None).validate().is_err());
}

#[test]
fn exactly_max_metrics_metrics_are_allowed() {
    let named = |count: usize| -> Vec<MetricCheck> {
        (0..count)
            .map(|i| MetricCheck {
                name: format!("m{i}"),
                ..check(None, Some(1.0), None)
            })
            .collect()
    };
    assert!(validate_metrics(&named(MAX_METRICS)).is_ok());
    assert!(validate_metrics(&named(MAX_METRICS + 1)).is_err());
    assert!(validate_metrics(&named(1)).is_ok());
}

#[test]
fn the_bounds_are_inclusive() {
    let at_max = judge(&check(None, Some(1.0), None), Ok(1.0), None);
    assert_eq!(at_max.verdict, Verdict::Pass, "{}", at_max.detail);
    let at_min = judge(&check(Some(1.0), None, None), Ok(1.0), None);
    assert_eq!(at_min.verdict, Verdict::Pass, "{}", at_min.detail);
    let at_ratio = judge(&check(None, None, Some(2.0)), Ok(2.0), Some(Ok(1.0)));
    assert_eq!(at_ratio.verdict, Verdict::Pass, "{}", at_ratio.detail);
    let above = judge(&check(None, None, Some(2.0)), Ok(2.5), Some(Ok(1.0)));
    assert_eq!(above.verdict, Verdict::Fail);
}

#[test]
fn a_nan_baseline_is_inconclusive_and_keeps_the_value() {
    let measured = judge(&check(None, None, Some(2.0)), Ok(0.5), Some(Ok(f64::NAN)));
    assert_eq!(measured.verdict, Verdict::Inconclusive);
    assert_eq!((measured.value, measured.baseline), (Some(0.5), None));
    assert!(measured.detail.contains("baseline"), "{}", measured.detail);
}

#[test]
fn placeholders_are_read_one_after_another() {
    assert_eq!(
        placeholders(r#"sum(x{node=~"{{nodes}}"}) / sum(x{pod=~"{{ pods }}"}) > {{revision}}"#),
        Ok(vec!["nodes", "pods", "revision"])
    );
    assert_eq!(placeholders("no placeholder"), Ok(vec![]));
}

#[test]
fn the_names_in_the_status_and_the_metrics() {
    let names: Vec<_> = [Verdict::Pass, Verdict::Fail, Verdict::Inconclusive]
        .into_iter()
        .map(|v| (v.as_str(), v.label(), v.to_string()))
        .collect();
    assert_eq!(
        names,
        [
            ("Pass", "pass", "Pass".to_owned()),
            ("Fail", "fail", "Fail".to_owned()),
            ("Inconclusive", "inconclusive", "Inconclusive".to_owned()),
        ]
    );
    let failed = AnalysisVerdict::Failed {
        metric: "m".into(),
        detail: "d".into(),
    };
    let inconclusive = AnalysisVerdict::Inconclusive {
        metric: "m".into(),
        detail: "d".into(),
    };
    assert_eq!(
        [
            AnalysisVerdict::Pending.as_str(),
            AnalysisVerdict::Passing.as_str(),
            failed.as_str(),
            inconclusive.as_str(),
        ],
        ["Pending", "Passing", "Failed", "Inconclusive"]
    );
}
