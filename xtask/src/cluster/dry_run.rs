//! The server-side dry-run of deploy/ against the real API server (a check of `lint-deploy`).
//!
//! Job: build every kustomization under deploy/, install the CRDs among them for real (a
//! dry-run CRD registers nothing, so the CanaryDaemonSet examples could not be checked against
//! it) and the namespaces the manifests use, then `kubectl apply --dry-run=server` the rest of
//! each kustomization. The API server runs the whole admission chain on them: the CRD's OpenAPI
//! schema and CEL rules, built-in validation, defaulting.
//!
//! Invariants: kinds the cluster does not serve (the prometheus-operator's ServiceMonitor and
//! PrometheusRule: their CRDs are not vendored) are listed as not checked here, never silently
//! dropped; a cluster this check started is stopped again, one it found running is left running.

#![expect(
    clippy::indexing_slicing,
    reason = "only serde_json::Value is indexed here: a missing key or index reads as Null, and \
              writes by index go to objects this module built"
)]

use super::{Cluster, Layout, UpArgs};
use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Root of the manifests.
const DEPLOY_DIR: &str = "deploy";

/// Runs the dry-run on a running local cluster, or on one started (and stopped) for it.
pub fn server_dry_run_deploy() -> Result<()> {
    let layout = Layout::new()?;
    let cluster = super::up(&layout, &UpArgs::with_nodes(1))?;
    let result = dry_run(&cluster);
    if cluster.started {
        super::down(&layout)?;
    }
    result
}

fn dry_run(cluster: &Cluster) -> Result<()> {
    let mut builds = Vec::new();
    for dir in kustomization_dirs(Path::new(DEPLOY_DIR))? {
        let dir_text = dir.display().to_string();
        let text = cluster.kubectl(&["kustomize", &dir_text])?;
        let documents: Vec<Value> = serde_saphyr::from_multiple(&text)
            .with_context(|| format!("kubectl kustomize {dir_text} printed no YAML"))?;
        builds.push((
            dir_text,
            documents
                .into_iter()
                .filter(|d| !d.is_null())
                .collect::<Vec<_>>(),
        ));
    }
    let all = || builds.iter().flat_map(|(_, docs)| docs.iter());

    let crds: Vec<&Value> = all()
        .filter(|d| d["kind"] == "CustomResourceDefinition")
        .collect();
    let mut seen = BTreeSet::new();
    for crd in crds {
        let name = crd["metadata"]["name"].as_str().unwrap_or_default();
        if !seen.insert(name.to_owned()) {
            continue;
        }
        cluster.kubectl_with_input(
            &[
                "apply",
                "--server-side",
                "--force-conflicts",
                "--field-manager=xtask-lint-deploy",
                "-f",
                "-",
            ],
            &crd.to_string(),
        )?;
        cluster.wait_crd_established(name)?;
        eprintln!("installed CRD {name}");
    }
    let namespaces: BTreeSet<&str> = all()
        .filter_map(|d| {
            if d["kind"] == "Namespace" {
                d["metadata"]["name"].as_str()
            } else {
                d["metadata"]["namespace"].as_str()
            }
        })
        .collect();
    for namespace in namespaces {
        let object =
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}});
        cluster.kubectl_with_input(
            &[
                "apply",
                "--server-side",
                "--field-manager=xtask-lint-deploy",
                "-f",
                "-",
            ],
            &object.to_string(),
        )?;
    }

    let served_groups = served_api_groups(cluster)?;
    let mut failures = Vec::new();
    for (dir, documents) in &builds {
        let (checked, unserved): (Vec<&Value>, Vec<&Value>) = documents
            .iter()
            .filter(|d| d["kind"] != "CustomResourceDefinition")
            .partition(|d| served_groups.contains(api_group(d)));
        for document in &unserved {
            eprintln!(
                "{dir}: {} {} not checked here: the cluster does not serve {}",
                document["kind"].as_str().unwrap_or_default(),
                document["metadata"]["name"].as_str().unwrap_or_default(),
                document["apiVersion"].as_str().unwrap_or_default(),
            );
        }
        if checked.is_empty() {
            continue;
        }
        let list = json!({"apiVersion": "v1", "kind": "List", "items": checked});
        match cluster
            .kubectl_with_input(&["apply", "--dry-run=server", "-f", "-"], &list.to_string())
        {
            Ok(out) => eprintln!(
                "{dir}: {} objects pass the server-side dry-run\n{}",
                checked.len(),
                out.trim_end()
            ),
            Err(error) => failures.push(format!("{dir}: {error:#}")),
        }
    }
    if !failures.is_empty() {
        bail!(
            "the API server rejected manifests of deploy/:\n{}",
            failures.join("\n")
        );
    }
    Ok(())
}

/// `group` of an object's apiVersion (`""` for core).
fn api_group(object: &Value) -> &str {
    let api_version = object["apiVersion"].as_str().unwrap_or_default();
    api_version.split_once('/').map_or("", |(group, _)| group)
}

/// The API groups the cluster serves (`""` is the core group).
fn served_api_groups(cluster: &Cluster) -> Result<BTreeSet<String>> {
    let text = cluster.kubectl(&["api-versions"])?;
    let mut groups: BTreeSet<String> = text
        .lines()
        .map(|line| line.split_once('/').map_or("", |(g, _)| g).to_owned())
        .collect();
    groups.insert(String::new());
    Ok(groups)
}

/// Every directory under `root` with a kustomization.yaml, sorted.
fn kustomization_dirs(root: &Path) -> Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        if dir.join("kustomization.yaml").is_file() {
            found.push(dir.clone());
        }
        for entry in
            std::fs::read_dir(&dir).with_context(|| format!("cannot list {}", dir.display()))?
        {
            let path = entry?.path();
            if path.is_dir() {
                stack.push(path);
            }
        }
    }
    found.sort();
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_group_of_core_and_named_groups() {
        assert_eq!(api_group(&json!({"apiVersion": "v1"})), "");
        assert_eq!(api_group(&json!({"apiVersion": "apps/v1"})), "apps");
        assert_eq!(
            api_group(&json!({"apiVersion": "monitoring.coreos.com/v1"})),
            "monitoring.coreos.com"
        );
    }

    #[test]
    fn every_kustomization_of_deploy_is_found() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join(DEPLOY_DIR);
        let dirs = kustomization_dirs(&root).unwrap_or_default();
        assert!(dirs.iter().any(|d| d.ends_with("default")), "{dirs:?}");
        assert!(dirs.iter().any(|d| d.ends_with("examples")), "{dirs:?}");
    }
}
