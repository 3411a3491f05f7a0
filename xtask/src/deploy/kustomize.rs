//! The first check, on which every other one reads: every kustomization under deploy/ builds
//! with `kubectl kustomize`; each build is saved under `target/lint-deploy/built/` and parsed.

use super::{DEPLOY_DIR, files_under, parse_documents};
use anyhow::{Context, Result, ensure};
use serde_json::Value;
use std::path::{Path, PathBuf};
use xshell::{Shell, cmd};

/// One built kustomization.
pub(super) struct Build {
    pub(super) dir: PathBuf,
    pub(super) documents: Vec<Value>,
}

/// Builds every kustomization under deploy/ and parses its output.
pub(super) fn build_all(sh: &Shell, work: &Path) -> Result<Vec<Build>> {
    let dirs = kustomization_dirs(Path::new(DEPLOY_DIR))?;
    ensure!(!dirs.is_empty(), "no kustomization under {DEPLOY_DIR}/");
    let mut builds = Vec::new();
    for dir in dirs {
        let output = cmd!(sh, "kubectl kustomize {dir}")
            .quiet()
            .read()
            .with_context(|| format!("kubectl kustomize {} failed", dir.display()))?;
        let file = work.join("built").join(format!("{}.yaml", flat_name(&dir)));
        std::fs::write(&file, &output)
            .with_context(|| format!("cannot write {}", file.display()))?;
        let documents = parse_documents(&output)
            .with_context(|| format!("cannot parse the build of {}", dir.display()))?;
        eprintln!("built {:<24} {} objects", dir.display(), documents.len());
        builds.push(Build { dir, documents });
    }
    Ok(builds)
}

/// Every directory under `root` (itself included) that holds a kustomization file, sorted.
pub(super) fn kustomization_dirs(root: &Path) -> Result<Vec<PathBuf>> {
    let mut found: Vec<PathBuf> = files_under(root)?
        .into_iter()
        .filter(|path| {
            path.file_name().is_some_and(|name| {
                ["kustomization.yaml", "kustomization.yml", "Kustomization"]
                    .iter()
                    .any(|k| name == *k)
            })
        })
        .filter_map(|path| path.parent().map(Path::to_path_buf))
        .collect();
    found.sort();
    found.dedup();
    Ok(found)
}

/// `deploy/prometheus` -> `deploy-prometheus`.
pub(super) fn flat_name(dir: &Path) -> String {
    dir.to_string_lossy().replace(['/', '\\'], "-")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kustomization_dirs_finds_nested_kustomizations() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy");
        let dirs = kustomization_dirs(&root).unwrap();
        let names: Vec<String> = dirs
            .iter()
            .filter_map(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
            .collect();
        for expected in [
            "default",
            "rbac",
            "manager",
            "prometheus",
            "grafana",
            "examples",
        ] {
            assert!(
                names.iter().any(|n| n == expected),
                "{expected} in {names:?}"
            );
        }
    }
}
