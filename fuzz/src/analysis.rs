//! Analysis gates: the templates a user writes (`spec.analysis.metrics[].query`) rendered with
//! arbitrary node and pod names, and the answers a Prometheus server sends.
//!
//! Properties: a template whose placeholders are known renders whenever its lists are not
//! empty; a `node=~"{{nodes}}"` matcher, rendered, reads back (as PromQL reads a double-quoted
//! string, then as RE2 reads an alternation of escaped literals) as exactly the names given,
//! whatever they contain; an answer never panics the parser, and a number it gives is what the
//! sample said; a judged measurement fails only out of its range.

use arbitrary::{Result, Unstructured};
use canary_state_machine::{
    MetricCheck, MetricTally, TemplateValues, Verdict, judge, placeholders, render, verdict,
};

/// The names a rendered `{{nodes}}` stands for, read back as a matcher by the simulator's
/// stand-in Prometheus (an implementation of its own: PromQL's string escapes, then RE2's
/// alternation of escaped literals).
fn read_back(rendered: &str) -> Option<Vec<String>> {
    canary_sim::listed_nodes(&format!(r#"m{{node=~"{rendered}"}}"#))
}

fn values(u: &mut Unstructured<'_>) -> Result<TemplateValues> {
    let names = |u: &mut Unstructured<'_>| -> Result<Vec<String>> {
        let count = u.int_in_range(1..=6)?;
        (0..count).map(|_| u.arbitrary::<String>()).collect()
    };
    Ok(TemplateValues {
        nodes: names(u)?,
        baseline_nodes: names(u)?,
        pods: names(u)?,
        namespace: u.arbitrary()?,
        daemon_set: u.arbitrary()?,
        revision: u.arbitrary()?,
    })
}

fn run(u: &mut Unstructured<'_>) -> Result<()> {
    // Any template: known placeholders render with non-empty lists, unknown ones never do.
    let template: String = u.arbitrary()?;
    let values = values(u)?;
    let rendered = render(&template, &values);
    assert_eq!(
        placeholders(&template).is_ok(),
        rendered.is_ok(),
        "{template:?}: {rendered:?}"
    );
    // The escaping: the names come back exactly.
    let matcher = render("{{nodes}}", &values).expect("a known placeholder with names");
    assert_eq!(
        read_back(&matcher).as_ref(),
        Some(&values.nodes),
        "{matcher:?}"
    );
    let single = render("{{namespace}}", &values).expect("a known placeholder");
    assert_eq!(
        read_back(&single),
        Some(vec![values.namespace.clone()]),
        "{single:?}"
    );

    // An answer: never a panic; a number is the sample's.
    let status = u.int_in_range(100..=599)?;
    let body: Vec<u8> = u.arbitrary()?;
    let _ = canary_analysis::parse_answer(status, &body);
    let sample: f64 = u.arbitrary()?;
    if sample.is_finite() {
        let answer = format!(
            r#"{{"status":"success","data":{{"resultType":"vector","result":[{{"metric":{{}},"value":[1,"{sample}"]}}]}}}}"#
        );
        assert_eq!(
            canary_analysis::parse_answer(200, answer.as_bytes()),
            Ok(sample)
        );
    }

    // A measurement fails only out of range; without a number it is inconclusive.
    let bound = |u: &mut Unstructured<'_>| -> Result<Option<f64>> {
        Ok(if u.arbitrary()? {
            Some(f64::from(u.arbitrary::<i32>()?) / 100.0)
        } else {
            None
        })
    };
    let check = MetricCheck {
        name: "m".to_owned(),
        query: "q".to_owned(),
        baseline_query: None,
        min: bound(u)?,
        max: bound(u)?,
        max_ratio: None,
        failure_limit: u.int_in_range(1..=5)?,
        inconclusive_limit: u.int_in_range(1..=5)?,
    };
    let measured = judge(&check, Ok(sample), None);
    let in_range =
        check.min.is_none_or(|min| sample >= min) && check.max.is_none_or(|max| sample <= max);
    if sample.is_nan() {
        assert_eq!(measured.verdict, Verdict::Inconclusive);
    } else {
        assert_eq!(
            measured.verdict == Verdict::Pass,
            in_range,
            "{check:?} {sample}"
        );
    }
    assert_eq!(
        judge(&check, Err("down".to_owned()), None).verdict,
        Verdict::Inconclusive
    );
    // Any tallies give a verdict, without a panic.
    let mut tally = MetricTally::default();
    for _ in 0..u.int_in_range(0..=8)? {
        tally.record(*u.choose(&Verdict::ALL)?);
    }
    let _ = verdict(std::slice::from_ref(&check), &[(tally, "detail")]);
    Ok(())
}

/// The `analysis` target.
pub fn analysis(data: &[u8]) {
    let _ = run(&mut Unstructured::new(data));
}

#[cfg(test)]
mod tests {
    /// A few thousand inputs of a fixed pseudo-random stream: the properties hold without
    /// libFuzzer too (and a property that cannot hold shows here first).
    #[test]
    fn the_properties_hold_on_a_fixed_stream() {
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..5_000 {
            let data: Vec<u8> = (0..256)
                .map(|_| {
                    state = state
                        .wrapping_mul(6_364_136_223_846_793_005)
                        .wrapping_add(1_442_695_040_888_963_407);
                    (state >> 33) as u8
                })
                .collect();
            super::analysis(&data);
        }
    }
}
