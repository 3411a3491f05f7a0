//! checkov finds no failed check in deploy/, the Dockerfile and the chart's renders (checkov reads
//! the chart's templates as what `helm template` makes of them, not as YAML: the config skips
//! deploy/helm in the scan of deploy/); every skip is in deploy/.checkov.yaml with its reason.

use super::{DEPLOY_DIR, Lint};
use anyhow::{Context, Result, ensure};
use serde_json::Value;
use xshell::cmd;

/// checkov's configuration, with every skipped check and its reason.
pub(super) const CHECKOV_CONFIG: &str = "deploy/.checkov.yaml";

pub(super) fn check(context: &Lint) -> Result<()> {
    let checkov = context.venv_tool("checkov");
    let skips = std::fs::read_to_string(CHECKOV_CONFIG)
        .with_context(|| format!("cannot read {CHECKOV_CONFIG}"))?;
    for line in skips
        .lines()
        .filter(|l| l.trim_start().starts_with("- CKV"))
    {
        eprintln!(
            "skipped (reason in {CHECKOV_CONFIG}): {}",
            line.trim_start_matches([' ', '-'])
        );
    }
    let renders: Vec<String> = super::helm::rendered_files(&context.work)
        .iter()
        .flat_map(|file| ["-f".to_owned(), file.display().to_string()])
        .chain(["--framework".to_owned(), "kubernetes".to_owned()])
        .collect();
    let renders: Vec<&str> = renders.iter().map(String::as_str).collect();
    let targets: [&[&str]; 3] = [&["-d", DEPLOY_DIR], &["-f", "Dockerfile"], &renders];
    let mut problems = Vec::new();
    for target in targets {
        let output = cmd!(
            context.sh,
            "{checkov} --config-file {CHECKOV_CONFIG} {target...} --output json"
        )
        .quiet()
        .ignore_status()
        .ignore_stderr()
        .read()?;
        let reports = checkov_reports(&output)
            .with_context(|| format!("cannot read checkov's report on {}", target.join(" ")))?;
        for report in &reports {
            let check_type = report["check_type"].as_str().unwrap_or("?");
            let summary = &report["summary"];
            let count = |key: &str| summary[key].as_u64().unwrap_or(0);
            eprintln!(
                "checkov {check_type:<11} passed {:>4}  failed {}  parsing errors {}",
                count("passed"),
                count("failed"),
                count("parsing_errors")
            );
            if count("failed") > 0 || count("parsing_errors") > 0 || count("passed") == 0 {
                problems.push(format!(
                    "{check_type}: {}",
                    failed_checks(report).join("; ")
                ));
            }
        }
        if reports.is_empty() {
            problems.push(format!("checkov scanned nothing in {}", target.join(" ")));
        }
    }
    ensure!(problems.is_empty(), "checkov:\n{}", problems.join("\n"));
    Ok(())
}

/// checkov prints one report object, or a list of them when several frameworks ran.
pub(super) fn checkov_reports(output: &str) -> Result<Vec<Value>> {
    let start = output
        .find(['{', '['])
        .context("no JSON in checkov's output")?;
    let value: Value = serde_json::from_str(&output[start..])?;
    Ok(match value {
        Value::Array(reports) => reports,
        report => vec![report],
    })
}

pub(super) fn failed_checks(report: &Value) -> Vec<String> {
    report
        .pointer("/results/failed_checks")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|c| {
            format!(
                "{} {} ({})",
                c["check_id"].as_str().unwrap_or("?"),
                c["resource"].as_str().unwrap_or("?"),
                c["file_path"].as_str().unwrap_or("?")
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkov_reports_accepts_one_report_or_a_list() {
        let one = checkov_reports("noise\n{\"check_type\": \"dockerfile\"}").unwrap();
        assert_eq!(one.len(), 1);
        let two = checkov_reports("[{\"check_type\": \"a\"}, {\"check_type\": \"b\"}]").unwrap();
        assert_eq!(two.len(), 2);
        assert!(checkov_reports("no json here").is_err());
    }
}
