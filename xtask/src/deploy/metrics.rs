//! Metric names: every `canary_` metric the alerts and the dashboard use is exported by the
//! binary. What the binary exports is read from `/metrics` scrapes of it ([`super::scrape`]:
//! a demo rollout and `observe-kubevirt`, what CI does, or files given with `--exposition`),
//! checked against every metric registered anywhere in its sources, so a metric of one mode
//! only is neither missed nor taken for granted; without scrapes, from the sources alone.

use super::dashboard::read_dashboard_queries;
use super::rules::rule_groups;
use super::{Lint, files_under};
use anyhow::{Context, Result, ensure};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The binary's sources: its registry and every metric it registers, in whichever module.
pub(super) const BINARY_SOURCES: &str = "crates/daemonset-canary/src";

/// The metrics the binary registers, read from every source file under `dir` (test modules
/// left out): see [`exported_metrics`].
pub(super) fn registered_metrics(dir: &Path) -> Result<BTreeSet<String>> {
    let files = files_under(dir)?
        .into_iter()
        .filter(|path| path.extension().is_some_and(|e| e == "rs"));
    let mut sources = String::new();
    for file in files {
        let text = std::fs::read_to_string(&file)
            .with_context(|| format!("cannot read {}", file.display()))?;
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        sources.push_str(code);
        sources.push('\n');
    }
    exported_metrics(&sources)
}

/// The metric names the binary exports, read from its source: the registry prefix plus the
/// name given to each `*Opts::new` / `IntGauge::new` style constructor or to the binary's
/// `Families` builder (`f.counters(Scope::Driven, "name", ...)`); histograms also export
/// `_bucket`, `_sum` and `_count`.
pub(super) fn exported_metrics(source: &str) -> Result<BTreeSet<String>> {
    let prefix = string_after(source, "new_custom(Some(\"")
        .context("no Registry::new_custom(Some(\"prefix\"...)) in the metrics source")?;
    let mut names = BTreeSet::new();
    for constructor in [
        "HistogramOpts::new(",
        "Opts::new(",
        "IntGauge::new(",
        "Gauge::new(",
        "IntCounter::new(",
        "Counter::new(",
    ] {
        for (index, _) in source.match_indices(constructor) {
            // `Opts::new(` also matches inside `HistogramOpts::new(`; the longer one handles it.
            if constructor == "Opts::new(" && source[..index].ends_with("Histogram") {
                continue;
            }
            let rest = source[index + constructor.len()..].trim_start();
            let Some(name) = rest.strip_prefix('"').and_then(|r| r.split('"').next()) else {
                continue;
            };
            let full = format!("{prefix}_{name}");
            if constructor == "HistogramOpts::new(" {
                for suffix in ["_bucket", "_sum", "_count"] {
                    names.insert(format!("{full}{suffix}"));
                }
            }
            names.insert(full);
        }
    }
    // The binary's `Families` builder: `f.int_gauges(Scope::Both, "name", ...)` and its kin,
    // the name after the scope.
    for builder in [".int_gauges(", ".gauges(", ".counters(", ".histograms("] {
        for (index, _) in source.match_indices(builder) {
            let rest = source[index + builder.len()..].trim_start();
            let Some(after_scope) = rest
                .strip_prefix("Scope::")
                .and_then(|r| r.split_once(','))
                .map(|(_, after)| after.trim_start())
            else {
                continue;
            };
            let Some(name) = after_scope
                .strip_prefix('"')
                .and_then(|r| r.split('"').next())
            else {
                continue;
            };
            let full = format!("{prefix}_{name}");
            if builder == ".histograms(" {
                for suffix in ["_bucket", "_sum", "_count"] {
                    names.insert(format!("{full}{suffix}"));
                }
            }
            names.insert(full);
        }
    }
    Ok(names)
}

/// The string literal right after `marker`.
pub(super) fn string_after<'a>(source: &'a str, marker: &str) -> Option<&'a str> {
    let start = source.find(marker)? + marker.len();
    source[start..].split('"').next()
}

/// Every `canary_…` metric name in a PromQL expression (string literals such as label values
/// are not names).
pub(super) fn used_metrics(expr: &str) -> BTreeSet<String> {
    const PREFIX: &str = "canary_";
    let code = without_string_literals(expr);
    let is_name_char = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let mut names = BTreeSet::new();
    for (index, _) in code.match_indices(PREFIX) {
        if code[..index].chars().next_back().is_some_and(is_name_char) {
            continue;
        }
        let name: String = code[index..]
            .chars()
            .take_while(|c| is_name_char(*c))
            .collect();
        names.insert(name);
    }
    names
}

/// `expr` with the contents of its quoted strings (", ' or `) blanked out.
pub(super) fn without_string_literals(expr: &str) -> String {
    let mut out = String::with_capacity(expr.len());
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for c in expr.chars() {
        match quote {
            None if matches!(c, '"' | '\'' | '`') => {
                quote = Some(c);
                out.push(c);
            }
            None => out.push(c),
            Some(_) if escaped => {
                escaped = false;
                out.push(' ');
            }
            Some(q) if c == q => {
                quote = None;
                out.push(c);
            }
            Some(q) => {
                escaped = c == '\\' && q != '`';
                out.push(' ');
            }
        }
    }
    out
}

/// The metric names a Prometheus text exposition shows: every `# TYPE` family (with the series
/// names of histograms and summaries) and every sample's name.
pub(super) fn exposition_metrics(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in text.lines().map(str::trim) {
        if let Some(declaration) = line.strip_prefix("# TYPE ") {
            let mut words = declaration.split_whitespace();
            let (Some(name), Some(kind)) = (words.next(), words.next()) else {
                continue;
            };
            let suffixes: &[&str] = match kind {
                "histogram" => &["", "_bucket", "_sum", "_count"],
                "summary" => &["", "_sum", "_count"],
                _ => &[""],
            };
            names.extend(suffixes.iter().map(|suffix| format!("{name}{suffix}")));
        } else if !line.is_empty() && !line.starts_with('#') {
            let name: String = line
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            if !name.is_empty() {
                names.insert(name);
            }
        }
    }
    names
}

/// The exported metric names and where they come from: the scrapes when there are any (then
/// every metric the binary registers must show in one of them, or the scrapes did not exercise
/// the whole binary), else the metrics registered in the binary's sources.
pub(super) fn exported_names(context: &Lint) -> Result<(BTreeSet<String>, String)> {
    let registered = registered_metrics(Path::new(BINARY_SOURCES))?;
    ensure!(
        !registered.is_empty(),
        "found no metric in {BINARY_SOURCES}"
    );
    if context.expositions.is_empty() {
        return Ok((
            registered,
            format!("the metrics registered in {BINARY_SOURCES}"),
        ));
    }
    let mut scraped = BTreeSet::new();
    for path in &context.expositions {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the scrape {}", path.display()))?;
        scraped.extend(exposition_metrics(&text));
    }
    let unscraped = missing_from(&registered, &scraped);
    ensure!(
        unscraped.is_empty(),
        "registered in {BINARY_SOURCES} but in no scrape (give the series an initial value, or make the scrape exercise them): {}",
        unscraped.join(", ")
    );
    let files: Vec<String> = context
        .expositions
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    Ok((scraped, format!("the scrapes {}", files.join(", "))))
}

/// The registered metrics no scrape shows.
pub(super) fn missing_from<'a>(
    registered: &'a BTreeSet<String>,
    scraped: &BTreeSet<String>,
) -> Vec<&'a str> {
    registered
        .iter()
        .filter(|name| !scraped.contains(*name))
        .map(String::as_str)
        .collect()
}

pub(super) fn check(context: &Lint) -> Result<()> {
    let (exported, origin) = exported_names(context)?;
    let groups = rule_groups(context)?;
    let mut uses: BTreeMap<String, BTreeSet<&str>> = BTreeMap::new();
    let rule_exprs = groups
        .get("groups")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().into_iter().flatten())
        .filter_map(|r| r["expr"].as_str().map(str::to_owned));
    for expr in rule_exprs {
        for name in used_metrics(&expr) {
            uses.entry(name).or_default().insert("alerts");
        }
    }
    for query in read_dashboard_queries()? {
        for name in used_metrics(&query) {
            uses.entry(name).or_default().insert("dashboard");
        }
    }
    ensure!(
        !uses.is_empty(),
        "the alerts and the dashboard use no canary_ metric"
    );
    let unknown: Vec<String> = uses
        .iter()
        .filter(|(name, _)| !exported.contains(*name))
        .map(|(name, users)| format!("{name} (used by {})", join(users)))
        .collect();
    ensure!(
        unknown.is_empty(),
        "metrics not exported by the binary (per {origin}):\n{}",
        unknown.join("\n")
    );
    eprintln!(
        "{} metric names used by the alerts and the dashboard, all exported by the binary (per {origin})",
        uses.len()
    );
    let unused: Vec<&str> = exported
        .iter()
        .filter(|name| {
            !["_bucket", "_sum", "_count"]
                .iter()
                .any(|s| name.ends_with(s))
        })
        .filter(|name| {
            ["", "_bucket", "_sum", "_count"]
                .iter()
                .all(|suffix| !uses.contains_key(&format!("{name}{suffix}")))
        })
        .map(String::as_str)
        .collect();
    if !unused.is_empty() {
        eprintln!("exported but shown nowhere: {}", unused.join(", "));
    }
    Ok(())
}

pub(super) fn join(items: &BTreeSet<&str>) -> String {
    items.iter().copied().collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    const METRICS: &str = r#"
        let registry = Registry::new_custom(Some("canary".to_owned()), None)?;
        let phase = IntGaugeVec::new(
            Opts::new(
                "rollout_phase",
                "help",
            ),
            &["namespace"],
        )?;
        let duration = HistogramVec::new(
            HistogramOpts::new("reconcile_duration_seconds", "help"),
            &["mode"],
        )?;
        let leader = IntGauge::new("leader", "help")?;
    "#;

    #[test]
    fn exported_metrics_reads_names_prefix_and_histogram_series() {
        let names = exported_metrics(METRICS).unwrap();
        let expected: BTreeSet<String> = [
            "canary_rollout_phase",
            "canary_reconcile_duration_seconds",
            "canary_reconcile_duration_seconds_bucket",
            "canary_reconcile_duration_seconds_sum",
            "canary_reconcile_duration_seconds_count",
            "canary_leader",
        ]
        .into_iter()
        .map(str::to_owned)
        .collect();
        assert_eq!(names, expected);
    }

    #[test]
    fn exposition_metrics_reads_families_and_samples() {
        let scrape = "\
# HELP canary_leader 1 while this replica leads.
# TYPE canary_leader gauge
canary_leader 1
# TYPE canary_reconcile_duration_seconds histogram
canary_reconcile_duration_seconds_bucket{mode=\"driven\",le=\"+Inf\"} 3
canary_untyped_total 2
";
        let names: Vec<String> = exposition_metrics(scrape).into_iter().collect();
        assert_eq!(
            names,
            [
                "canary_leader",
                "canary_reconcile_duration_seconds",
                "canary_reconcile_duration_seconds_bucket",
                "canary_reconcile_duration_seconds_count",
                "canary_reconcile_duration_seconds_sum",
                "canary_untyped_total",
            ]
        );
    }

    #[test]
    fn exported_metrics_needs_the_registry_prefix() {
        assert!(exported_metrics("IntGauge::new(\"leader\", \"help\")").is_err());
    }

    #[test]
    fn the_binary_registers_what_the_alerts_rely_on_in_every_mode() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let names = registered_metrics(&root.join(BINARY_SOURCES)).unwrap();
        for name in [
            "canary_kubevirt_version_info",
            "canary_rollout_phase",
            "canary_rollout_phase_start_timestamp_seconds",
            "canary_reconcile_errors_total",
            "canary_reconcile_duration_seconds_count",
            "canary_leader",
            "canary_build_info",
        ] {
            assert!(names.contains(name), "{name} missing from {names:?}");
        }
    }

    #[test]
    fn a_metric_of_one_mode_missing_from_the_scrapes_is_reported() {
        let registered = exported_metrics(METRICS).unwrap();
        // The controller (demo) exports the leader gauge; the observe mode does not.
        let demo = exposition_metrics(
            "# TYPE canary_rollout_phase gauge\n# TYPE canary_leader gauge\ncanary_leader 1\n",
        );
        assert_eq!(
            missing_from(&registered, &demo),
            [
                "canary_reconcile_duration_seconds",
                "canary_reconcile_duration_seconds_bucket",
                "canary_reconcile_duration_seconds_count",
                "canary_reconcile_duration_seconds_sum",
            ]
        );
        let observe = exposition_metrics("# TYPE canary_reconcile_duration_seconds histogram\n");
        let both: BTreeSet<String> = demo.union(&observe).cloned().collect();
        assert!(missing_from(&registered, &both).is_empty());
    }

    #[test]
    fn used_metrics_finds_whole_canary_names_only() {
        let expr = r#"sum by (mode) (rate(canary_reconcile_errors_total{job="daemonset-canary_x", l='canary_y\' canary_z'}[5m]))
            / canary_reconcile_duration_seconds_count and my_canary_thing and canary:recorded"#;
        let names: Vec<String> = used_metrics(expr).into_iter().collect();
        assert_eq!(
            names,
            [
                "canary_reconcile_duration_seconds_count",
                "canary_reconcile_errors_total"
            ]
        );
    }
}
