//! `daemonset-canary crd`: the CustomResourceDefinition, as committed in deploy/crd/.

use anyhow::Context;
use std::io::Write;

/// Prints the CRD YAML on stdout.
pub fn print() -> anyhow::Result<()> {
    let yaml = canary_kube_adapter::crd_yaml().context("cannot render the CRD")?;
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(yaml.as_bytes())
        .and_then(|()| stdout.flush())
    {
        // `crd | head` closing the pipe early is not an error.
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other.context("cannot write the CRD to stdout"),
    }
}
