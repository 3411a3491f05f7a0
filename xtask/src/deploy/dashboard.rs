//! The Grafana dashboard: every query parses as PromQL (promtool, as recording rules), and the
//! panels have unique ids, the dashboard's data source variable and non-overlapping places.

use super::Lint;
use anyhow::{Context, Result, ensure};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use xshell::cmd;

/// The Grafana dashboard.
pub(super) const DASHBOARD: &str = "deploy/grafana/dashboard.json";

/// Every `expr` in the dashboard, in panel order.
pub(super) fn read_dashboard_queries() -> Result<Vec<String>> {
    let text =
        std::fs::read_to_string(DASHBOARD).with_context(|| format!("cannot read {DASHBOARD}"))?;
    let dashboard: Value =
        serde_json::from_str(&text).with_context(|| format!("{DASHBOARD} is not JSON"))?;
    let mut queries = Vec::new();
    collect_exprs(&dashboard, &mut queries);
    Ok(queries)
}

pub(super) fn collect_exprs(value: &Value, into: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                match (key.as_str(), child) {
                    ("expr", Value::String(expr)) => into.push(expr.clone()),
                    _ => collect_exprs(child, into),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|item| collect_exprs(item, into)),
        _ => {}
    }
}

/// A dashboard query with Grafana's variables replaced by values promtool can parse.
pub(super) fn as_promql(query: &str) -> String {
    [
        ("$__rate_interval", "5m"),
        ("$__interval", "1m"),
        ("$__range", "1h"),
        ("$namespace", ".*"),
        ("$name", ".*"),
    ]
    .iter()
    .fold(query.to_owned(), |q, (variable, value)| {
        q.replace(variable, value)
    })
}

pub(super) fn check(context: &Lint) -> Result<()> {
    let text =
        std::fs::read_to_string(DASHBOARD).with_context(|| format!("cannot read {DASHBOARD}"))?;
    let dashboard: Value =
        serde_json::from_str(&text).with_context(|| format!("{DASHBOARD} is not JSON"))?;
    let problems = dashboard_layout_problems(&dashboard);
    ensure!(problems.is_empty(), "{DASHBOARD}:\n{}", problems.join("\n"));
    let queries = read_dashboard_queries()?;
    ensure!(!queries.is_empty(), "{DASHBOARD} has no queries");
    let rules: Vec<Value> = queries
        .iter()
        .enumerate()
        .map(|(i, q)| json!({ "record": format!("dashboard:query_{i}"), "expr": as_promql(q) }))
        .collect();
    let file = context.write(
        "dashboard-queries.yaml",
        &serde_json::to_string_pretty(
            &json!({ "groups": [{ "name": "dashboard", "rules": rules }] }),
        )?,
    )?;
    cmd!(context.sh, "promtool check rules {file}")
        .run()
        .context("a dashboard query is not valid PromQL")?;
    Ok(())
}

/// Width of Grafana's grid.
pub(super) const GRID_COLUMNS: u64 = 24;

/// Mistakes a hand edit of the dashboard JSON makes: duplicate panel ids, a panel or query not on
/// the `${datasource}` variable (so it breaks on import), panels off the grid or overlapping.
pub(super) fn dashboard_layout_problems(dashboard: &Value) -> Vec<String> {
    let panels: Vec<&Value> = dashboard["panels"]
        .as_array()
        .into_iter()
        .flatten()
        .collect();
    let mut problems = Vec::new();
    if panels.is_empty() {
        problems.push("no panels".to_owned());
    }
    let mut ids = BTreeSet::new();
    let mut cells: BTreeMap<(u64, u64), String> = BTreeMap::new();
    for panel in panels {
        let title = panel["title"].as_str().unwrap_or("(untitled)").to_owned();
        match panel["id"].as_u64() {
            Some(id) if !ids.insert(id) => problems.push(format!("{title}: duplicate id {id}")),
            Some(_) => {}
            None => problems.push(format!("{title}: no numeric id")),
        }
        let is_row = panel["type"] == "row";
        let on_variable = |v: &Value| v["uid"] == "${datasource}";
        if !is_row && !on_variable(&panel["datasource"]) {
            problems.push(format!("{title}: data source is not ${{datasource}}"));
        }
        for target in panel["targets"].as_array().into_iter().flatten() {
            if !on_variable(&target["datasource"]) {
                problems.push(format!(
                    "{title}: a query's data source is not ${{datasource}}"
                ));
            }
        }
        let place = &panel["gridPos"];
        let (Some(x), Some(y), Some(w), Some(h)) = (
            place["x"].as_u64(),
            place["y"].as_u64(),
            place["w"].as_u64(),
            place["h"].as_u64(),
        ) else {
            problems.push(format!("{title}: incomplete gridPos"));
            continue;
        };
        if w == 0 || h == 0 || x + w > GRID_COLUMNS {
            problems.push(format!(
                "{title}: gridPos off the {GRID_COLUMNS}-column grid"
            ));
            continue;
        }
        let mut overlapped = BTreeSet::new();
        for column in x..x + w {
            for row in y..y + h {
                if let Some(other) = cells.insert((column, row), title.clone()) {
                    overlapped.insert(other);
                }
            }
        }
        for other in overlapped {
            problems.push(format!("{title}: overlaps {other}"));
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn panel(id: u64, x: u64, y: u64, w: u64) -> Value {
        let source = json!({ "type": "prometheus", "uid": "${datasource}" });
        json!({
            "id": id, "type": "timeseries", "title": format!("p{id}"), "datasource": source,
            "gridPos": { "x": x, "y": y, "w": w, "h": 4 },
            "targets": [{ "datasource": source, "expr": "up" }],
        })
    }

    #[test]
    fn dashboard_layout_accepts_a_clean_grid() {
        let dashboard =
            json!({ "panels": [panel(1, 0, 0, 12), panel(2, 12, 0, 12), panel(3, 0, 4, 24)] });
        assert_eq!(dashboard_layout_problems(&dashboard), Vec::<String>::new());
    }

    #[test]
    fn dashboard_layout_finds_duplicates_overlaps_and_foreign_sources() {
        let mut foreign = panel(3, 0, 8, 24);
        foreign["targets"][0]["datasource"]["uid"] = json!("prometheus-prod");
        let dashboard = json!({ "panels": [
            panel(1, 0, 0, 12), panel(1, 6, 0, 12), foreign, panel(4, 20, 12, 8),
        ]});
        let problems = dashboard_layout_problems(&dashboard);
        assert!(
            problems.iter().any(|p| p.contains("duplicate id 1")),
            "{problems:?}"
        );
        assert!(
            problems.iter().any(|p| p.contains("overlaps p1")),
            "{problems:?}"
        );
        assert!(
            problems
                .iter()
                .any(|p| p.starts_with("p3: a query's data source")),
            "{problems:?}"
        );
        assert!(
            problems.iter().any(|p| p.starts_with("p4: gridPos off")),
            "{problems:?}"
        );
        assert_eq!(problems.len(), 4, "{problems:?}");
    }

    #[test]
    fn the_committed_dashboard_has_a_clean_layout() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join(DASHBOARD);
        let dashboard: Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        assert_eq!(dashboard_layout_problems(&dashboard), Vec::<String>::new());
    }

    #[test]
    fn dashboard_variables_become_parsable_promql() {
        assert_eq!(
            as_promql(r#"rate(x{namespace=~"$namespace",name=~"$name"}[$__rate_interval])"#),
            r#"rate(x{namespace=~".*",name=~".*"}[5m])"#
        );
    }
}
