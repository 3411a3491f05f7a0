//! `canary-verdicts`: the verdicts of the tools that wait on a CanaryDaemonSet, computed with
//! their own libraries (kstatus of `sigs.k8s.io/cli-utils`, Argo CD's Lua interpreter
//! `github.com/yuin/gopher-lua`). Its source is ours (`xtask/go/verdicts/`, a main package whose
//! go.mod pins both libraries); it is built through the Go module proxy like the control plane
//! and cached in `target/cluster/bin/` under a stamp of its sources, so a second run builds
//! nothing.
//!
//! Used by lint-deploy (the fixtures of `deploy/integrations/argocd/`) and by the e2e suite
//! (objects of the real control plane, through `DAEMONSET_CANARY_E2E_VERDICTS`).

use anyhow::{Context, Result, ensure};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// The program's source, relative to the workspace root.
const SOURCE: &str = "xtask/go/verdicts";
/// The files whose content makes the cache stamp.
const SOURCE_FILES: [&str; 3] = ["go.mod", "go.sum", "main.go"];
/// The binary's name in `target/cluster/bin/`.
const BINARY: &str = "canary-verdicts";

/// Builds `canary-verdicts` unless the cached one was built from these sources; returns it.
pub fn ensure_built() -> Result<PathBuf> {
    let source = crate::workspace_root()?.join(SOURCE);
    let bin = crate::cluster::Layout::new()?.bin;
    std::fs::create_dir_all(&bin).with_context(|| format!("cannot create {}", bin.display()))?;
    let binary = bin.join(BINARY);
    let stamp_file = bin.join(format!("{BINARY}.stamp"));
    let stamp = stamp_of(&source)?;
    if binary.is_file() && std::fs::read_to_string(&stamp_file).ok().as_deref() == Some(&stamp) {
        return Ok(binary);
    }
    eprintln!("==> building {BINARY} (kstatus, gopher-lua) from {SOURCE}");
    let started = Instant::now();
    let status = Command::new(crate::cluster::build::go_command()?)
        .args(["build", "-trimpath", "-o"])
        .arg(&binary)
        .arg(".")
        .current_dir(&source)
        .env("GOTOOLCHAIN", "local")
        .status()
        .context("cannot run go build")?;
    ensure!(status.success(), "go build of {SOURCE} failed ({status})");
    std::fs::write(&stamp_file, &stamp)
        .with_context(|| format!("cannot write {}", stamp_file.display()))?;
    eprintln!(
        "    built {} in {:.0} s",
        binary.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(binary)
}

/// The sources, verbatim, as the stamp: a changed byte rebuilds.
fn stamp_of(source: &Path) -> Result<String> {
    let mut stamp = String::new();
    for file in SOURCE_FILES {
        let path = source.join(file);
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        stamp.push_str(&format!("== {file} {}\n{text}", text.len()));
    }
    Ok(stamp)
}

/// One verdict: the tool's status of an object and its message.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub struct Verdict {
    /// The file read.
    pub file: String,
    /// `Current`, `InProgress`, `Failed`, ... (kstatus); `Healthy`, `Progressing`, ... (Argo CD).
    pub status: String,
    /// The tool's message.
    pub message: String,
}

/// Runs `canary-verdicts` with `args` and reads its lines.
pub fn run(binary: &Path, args: &[&str]) -> Result<Vec<Verdict>> {
    let output = Command::new(binary)
        .args(args)
        .output()
        .with_context(|| format!("cannot run {}", binary.display()))?;
    ensure!(
        output.status.success(),
        "{BINARY} {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr).trim()
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).with_context(|| format!("not a verdict: {line}")))
        .collect()
}
