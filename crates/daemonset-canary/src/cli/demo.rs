//! `daemonset-canary demo`: placeholder until the scenario runner lands.

use std::process::ExitCode;

/// Arguments of `demo`.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {}

/// Runs the demo.
pub fn run(_args: DemoArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("the demo is not available yet")
}
