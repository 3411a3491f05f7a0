//! The verdicts other tools give a CanaryDaemonSet, computed with their own code
//! (`canary-verdicts`, [`crate::verdicts`]) on the fixtures of `deploy/integrations/`: objects
//! as the controller writes them in each phase, taken from `sim serve` with the real controller.
//!
//! - Argo CD: `deploy/integrations/argocd/health.lua` (and the same text in `argocd-cm.yaml`,
//!   the patch a user applies), run by gopher-lua as Argo CD runs a
//!   resource customization, against `health_test.yaml` (Argo CD's own test format: each test's
//!   `inputPath` and the `healthStatus` it must give, status and message). Every fixture is
//!   tested.
//! - kstatus (Flux, kpt, cli-utils): [`KSTATUS`], the status kstatus must compute for each
//!   fixture.

#![expect(
    clippy::indexing_slicing,
    reason = "only serde_json::Value is indexed here: a missing key or index reads as Null"
)]

use super::Lint;
use anyhow::{Context, Result, ensure};
use serde_json::Value;
use std::collections::BTreeSet;

/// Argo CD's health check and its tests.
const ARGOCD: &str = "deploy/integrations/argocd";

/// What kstatus must compute for each fixture (file under `ARGOCD/testdata/`).
/// An object the controller has not written a status for yet is `Current` to kstatus: with no
/// `observedGeneration` and no condition it has nothing to go on (its generic rules; Flux's
/// health check waits the same way). Argo CD's check says Progressing.
const KSTATUS: &[(&str, &str)] = &[
    ("pending.yaml", "Current"),
    ("waiting-for-daemonset.yaml", "InProgress"),
    ("canary.yaml", "InProgress"),
    ("awaiting-promotion.yaml", "Failed"),
    ("held.yaml", "Failed"),
    ("successful.yaml", "Current"),
    ("generation-ahead.yaml", "InProgress"),
    ("failed.yaml", "Failed"),
    ("rolled-back.yaml", "Failed"),
    ("before-kstatus-conditions.yaml", "Current"),
];

/// Runs both tools on every fixture and compares.
pub(super) fn check(_: &Lint) -> Result<()> {
    let binary = crate::verdicts::ensure_built()?;
    let root = crate::workspace_root()?;
    let dir = root.join(ARGOCD);
    let tests_path = dir.join("health_test.yaml");
    let text = std::fs::read_to_string(&tests_path)
        .with_context(|| format!("cannot read {}", tests_path.display()))?;
    let tests: Value = serde_saphyr::from_str(&text)
        .with_context(|| format!("{} is not YAML", tests_path.display()))?;
    let tests = tests["tests"]
        .as_array()
        .context("health_test.yaml has no tests")?;
    let fixtures: BTreeSet<String> = std::fs::read_dir(dir.join("testdata"))
        .context("cannot list the fixtures")?
        .map(|entry| entry.map(|e| format!("testdata/{}", e.file_name().to_string_lossy())))
        .collect::<Result<_, _>>()?;
    let tested: BTreeSet<String> = tests
        .iter()
        .filter_map(|t| t["inputPath"].as_str().map(str::to_owned))
        .collect();
    ensure!(
        fixtures == tested,
        "every fixture is tested once: fixtures {fixtures:?}, tested {tested:?}"
    );
    let script = dir.join("health.lua");
    let lua = std::fs::read_to_string(&script).context("cannot read health.lua")?;
    let config_map: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(dir.join("argocd-cm.yaml"))
            .context("cannot read argocd-cm.yaml")?,
    )
    .context("argocd-cm.yaml is not YAML")?;
    ensure!(
        config_map["data"]["resource.customizations.health.canary.daemonset.dev_CanaryDaemonSet"]
            .as_str()
            == Some(lua.as_str()),
        "argocd-cm.yaml's health check is not health.lua, verbatim"
    );
    let inputs: Vec<String> = tests
        .iter()
        .map(|t| dir.join(t["inputPath"].as_str().unwrap_or_default()))
        .map(|p| p.display().to_string())
        .collect();
    let mut args = vec![
        "argocd",
        script.to_str().context("a path that is not UTF-8")?,
    ];
    args.extend(inputs.iter().map(String::as_str));
    let health = crate::verdicts::run(&binary, &args)?;
    let mut wrong = Vec::new();
    for (test, verdict) in tests.iter().zip(&health) {
        let (status, message) = (
            test["healthStatus"]["status"].as_str().unwrap_or_default(),
            test["healthStatus"]["message"].as_str().unwrap_or_default(),
        );
        if (verdict.status.as_str(), verdict.message.as_str()) != (status, message) {
            wrong.push(format!(
                "argocd {}: {} {:?}, expected {status} {message:?}",
                test["inputPath"], verdict.status, verdict.message
            ));
        }
    }
    let mut args = vec!["kstatus".to_owned()];
    args.extend(
        KSTATUS
            .iter()
            .map(|(file, _)| dir.join("testdata").join(file).display().to_string()),
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let computed = crate::verdicts::run(&binary, &args)?;
    for ((file, expected), verdict) in KSTATUS.iter().zip(&computed) {
        if verdict.status != *expected {
            wrong.push(format!(
                "kstatus {file}: {} ({}), expected {expected}",
                verdict.status, verdict.message
            ));
        }
    }
    ensure!(
        health.len() == tests.len() && computed.len() == KSTATUS.len(),
        "a verdict is missing"
    );
    ensure!(wrong.is_empty(), "{}", wrong.join("\n"));
    eprintln!(
        "    {} Argo CD health tests and {} kstatus verdicts as expected",
        tests.len(),
        KSTATUS.len()
    );
    Ok(())
}
