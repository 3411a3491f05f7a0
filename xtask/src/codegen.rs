//! `cargo xtask codegen [--check]`: files generated from the code, kept in the repository so that
//! `kubectl apply -k deploy/` works without building anything.
//!
//! Today: the CanaryDaemonSet CRD, `deploy/crd/canarydaemonsets.yaml`, from
//! `daemonset-canary crd` (the binary users run, so the committed file is exactly what it prints).
//! With `--check` nothing is written and a difference fails, naming the command that fixes it.

use crate::cargo;
use anyhow::{Context, Result, bail};
use xshell::{Shell, cmd};

/// The committed CRD.
pub const CRD_FILE: &str = "deploy/crd/canarydaemonsets.yaml";

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
    let generated = cmd!(
        sh,
        "{cargo} run --quiet --locked -p daemonset-canary -- crd"
    )
    .read()
    .context("`daemonset-canary crd` failed")?;
    // xshell trims the trailing newline the binary prints.
    let generated = format!("{generated}\n");
    let committed = std::fs::read_to_string(CRD_FILE).unwrap_or_default();
    if committed == generated {
        eprintln!("{CRD_FILE} is up to date");
        return Ok(());
    }
    if args.check {
        bail!(
            "{CRD_FILE} differs from `daemonset-canary crd` (first difference at line {}); run `cargo xtask codegen` and commit the result",
            first_difference(&committed, &generated)
        );
    }
    std::fs::write(CRD_FILE, generated).with_context(|| format!("cannot write {CRD_FILE}"))?;
    eprintln!("wrote {CRD_FILE}");
    Ok(())
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
}
