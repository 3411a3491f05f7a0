//! `cargo xtask codegen [--check]`: files generated from the code, kept in the repository so that
//! `kubectl apply -k deploy/` and `helm install deploy/helm/daemonset-canary` work without
//! building anything.
//!
//! Today: the CanaryDaemonSet CRD, `deploy/crd/canarydaemonsets.yaml`, from
//! `daemonset-canary crd` (the binary users run, so the committed file is exactly what it prints),
//! and the Helm chart's copies under `deploy/helm/daemonset-canary/files/` of that CRD and of
//! `deploy/prometheus/prometheus_rule.yaml` (a chart cannot read files outside itself).
//! With `--check` nothing is written and a difference fails, naming the command that fixes it.

use crate::{PROFILE, cargo};
use anyhow::{Context, Result, bail};
use xshell::{Shell, cmd};

/// The committed CRD.
pub const CRD_FILE: &str = "deploy/crd/canarydaemonsets.yaml";
/// The chart's copy of the CRD.
pub const CHART_CRD_FILE: &str = "deploy/helm/daemonset-canary/files/canarydaemonsets.yaml";
/// The alerts of deploy/prometheus, which the chart's copy follows.
const PROMETHEUS_RULE_FILE: &str = "deploy/prometheus/prometheus_rule.yaml";
/// The chart's copy of the alerts.
const CHART_PROMETHEUS_RULE_FILE: &str = "deploy/helm/daemonset-canary/files/prometheus_rule.yaml";

/// Options of `cargo xtask codegen`.
#[derive(clap::Args, Default)]
pub struct CodegenArgs {
    /// Only compare: fail when a generated file is out of date, write nothing.
    #[arg(long)]
    check: bool,
}

impl CodegenArgs {
    /// `--check`, as CI runs it.
    pub fn check_only() -> Self {
        Self { check: true }
    }
}

/// Regenerates (or checks) every generated file.
pub fn run(args: &CodegenArgs) -> Result<()> {
    let sh = Shell::new()?;
    let cargo = cargo();
    let crd = cmd!(
        sh,
        "{cargo} run --quiet --locked --profile {PROFILE} -p daemonset-canary -- crd"
    )
    .read()
    .context("`daemonset-canary crd` failed")?;
    // xshell trims the trailing newline the binary prints.
    let crd = format!("{crd}\n");
    let rules = std::fs::read_to_string(PROMETHEUS_RULE_FILE)
        .with_context(|| format!("cannot read {PROMETHEUS_RULE_FILE}"))?;
    let generated = [
        (CRD_FILE, crd.clone()),
        (CHART_CRD_FILE, crd),
        (
            CHART_PROMETHEUS_RULE_FILE,
            copy_of(PROMETHEUS_RULE_FILE, &rules),
        ),
    ];
    let mut stale = Vec::new();
    for (file, contents) in &generated {
        let committed = std::fs::read_to_string(file).unwrap_or_default();
        if committed == *contents {
            eprintln!("{file} is up to date");
            continue;
        }
        if args.check {
            stale.push(format!(
                "{file} differs from what codegen writes (first difference at line {})",
                first_difference(&committed, contents)
            ));
            continue;
        }
        std::fs::write(file, contents).with_context(|| format!("cannot write {file}"))?;
        eprintln!("wrote {file}");
    }
    if !stale.is_empty() {
        bail!(
            "{}; run `cargo xtask codegen` and commit the result",
            stale.join("; ")
        );
    }
    Ok(())
}

/// `contents` of `source`, under a line that says where it comes from.
fn copy_of(source: &str, contents: &str) -> String {
    format!("# A copy of {source}, written by `cargo xtask codegen`. Do not edit.\n{contents}")
}

/// 1-based line number of the first line that differs.
fn first_difference(a: &str, b: &str) -> usize {
    let mut a_lines = a.lines();
    let mut b_lines = b.lines();
    let mut line = 1;
    while let (Some(x), Some(y)) = (a_lines.next(), b_lines.next()) {
        if x != y {
            return line;
        }
        line += 1;
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_difference_names_the_line() {
        assert_eq!(first_difference("a\nb\nc\n", "a\nx\nc\n"), 2);
        assert_eq!(first_difference("a\n", "a\nb\n"), 2);
        assert_eq!(first_difference("", "a"), 1);
    }

    #[test]
    fn a_copy_names_its_source_and_keeps_the_text() {
        let copy = copy_of("deploy/x.yaml", "kind: X\n");
        assert!(copy.starts_with("# A copy of deploy/x.yaml"), "{copy}");
        assert!(copy.ends_with("\nkind: X\n"), "{copy}");
    }
}
