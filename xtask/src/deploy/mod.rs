//! `cargo xtask lint-deploy`: checks deploy/ with the tools operators and the ecosystem use.
//!
//! Ten checks, one module each, each reported on its own so one failure does not hide another
//! (this module builds the shared context and runs them in order):
//! - [`kustomize`]: every kustomization under deploy/ builds with `kubectl kustomize`, and
//!   [`helm`] renders the chart with `helm template` for each of its variants (the others read
//!   these builds and renders);
//! - [`validate`]: kubernetes-validate, strict, on every built-in kind (kustomize builds and
//!   chart renders) and on the DaemonSet embedded in each CanaryDaemonSet; custom kinds are never
//!   waved through;
//! - [`rbac`]: least privilege, in the builds and the renders;
//! - [`custom_resources`]: CanaryDaemonSets against the CRD's schema and CEL rules,
//!   ServiceMonitors against the metrics Service;
//! - [`helm`]: `helm lint --strict`, values the chart must refuse, and each variant installs the
//!   same objects as the kustomize builds it stands for;
//! - [`krew`]: the kubectl plugin's krew manifest has what krew requires;
//! - [`rules`]: promtool check/test rules on the deployed PrometheusRule, test and runbook
//!   coverage of every alert;
//! - [`dashboard`]: every query is PromQL, the panels are laid out cleanly;
//! - [`metrics`]: every `canary_` metric the alerts and the dashboard use is exported by the
//!   binary;
//! - [`checkov`]: no failed check in deploy/, the chart's renders and the Dockerfile.
//!
//! Outputs land in `target/lint-deploy/` for inspection.

mod checkov;
mod custom_resources;
mod dashboard;
mod helm;
mod integrations;
mod krew;
mod kustomize;
mod metrics;
mod rbac;
mod rules;
mod scrape;
mod validate;

use crate::tools;
use anyhow::{Context, Result, bail};
use kustomize::{Build, build_all};
use serde_json::Value;
use std::path::{Path, PathBuf};
use xshell::Shell;

/// Root of the manifests.
const DEPLOY_DIR: &str = "deploy";

/// Options of `cargo xtask lint-deploy`.
#[derive(clap::Args, Default)]
pub struct LintArgs {
    /// A `/metrics` scrape of the binary (Prometheus text format) to check metric names against,
    /// instead of reading the binary's sources (repeatable). Only families the scrapes show
    /// count, and every metric the binary registers must show in one of them.
    #[arg(long = "exposition", value_name = "FILE", conflicts_with = "scrape")]
    expositions: Vec<PathBuf>,
    /// Scrape the binary for the metric-name check: a demo rollout (`demo --metrics-file`) and
    /// `observe-kubevirt` on the served simulator with a KubeVirt object (what CI does).
    #[arg(long, alias = "from-demo")]
    scrape: bool,
}

impl LintArgs {
    /// What CI runs: the metric names checked against scrapes of the binary in both modes.
    pub fn scraping_the_binary() -> Self {
        Self {
            expositions: Vec::new(),
            scrape: true,
        }
    }
}

/// What every check reads: the shell, the output directory, the tools and the builds.
struct Lint {
    sh: Shell,
    work: PathBuf,
    venv_bin: PathBuf,
    builds: Vec<Build>,
    /// The chart rendered for each of [`helm::VARIANTS`], in that order.
    charts: Vec<Build>,
    /// The Helm binary.
    helm: PathBuf,
    /// `/metrics` scrapes of the binary; none: the metric check reads its sources.
    expositions: Vec<PathBuf>,
}

type Check = fn(&Lint) -> Result<()>;

const CHECKS: &[(&str, Check)] = &[
    ("kubernetes-validate", validate::check),
    ("least privilege", rbac::check),
    ("custom resources", custom_resources::check),
    ("helm chart", helm::check),
    ("krew manifest", krew::check),
    ("argo cd health and kstatus", integrations::check),
    ("prometheus rules", rules::check),
    ("dashboard", dashboard::check),
    ("metric names", metrics::check),
    ("checkov", checkov::check),
    ("server-side dry-run", |_| {
        crate::cluster::server_dry_run_deploy()
    }),
];

/// Runs every check and fails if any failed.
pub fn run(args: &LintArgs) -> Result<()> {
    let venv_bin = tools::ensure_deploy_tools()?;
    let helm = tools::ensure_helm()?;
    let sh = Shell::new()?;
    let work = tools::target_dir()?.join("lint-deploy");
    if work.exists() {
        std::fs::remove_dir_all(&work)
            .with_context(|| format!("cannot clear {}", work.display()))?;
    }
    std::fs::create_dir_all(work.join("built"))
        .with_context(|| format!("cannot create {}", work.display()))?;
    eprintln!("==> lint-deploy: kustomize builds");
    let builds = build_all(&sh, &work)?;
    eprintln!("==> lint-deploy: helm template");
    let charts = helm::render_all(&sh, &work, &helm)?;
    let expositions = if args.scrape {
        vec![
            scrape::demo(&sh, &work, "max-unavailable")?,
            scrape::demo(&sh, &work, "pods")?,
            scrape::observe_kubevirt(&sh, &work)?,
            scrape::controller_with_receivers(&sh, &work)?,
        ]
    } else {
        args.expositions.clone()
    };
    let context = Lint {
        sh,
        work,
        venv_bin,
        builds,
        charts,
        helm,
        expositions,
    };
    let mut failed = Vec::new();
    for (name, check) in CHECKS {
        eprintln!("\n==> lint-deploy: {name}");
        match check(&context) {
            Ok(()) => eprintln!("passed: {name}"),
            Err(err) => {
                eprintln!("FAILED: {name}: {err:#}");
                failed.push(*name);
            }
        }
    }
    if !failed.is_empty() {
        bail!("lint-deploy failed: {}", failed.join(", "));
    }
    let dirs: Vec<String> = context
        .builds
        .iter()
        .map(|b| b.dir.display().to_string())
        .collect();
    eprintln!(
        "\nlint-deploy: {} checks passed on {}",
        CHECKS.len(),
        dirs.join(", ")
    );
    Ok(())
}

/// The YAML documents of `text` as JSON values, empty documents dropped.
fn parse_documents(text: &str) -> Result<Vec<Value>> {
    let documents: Vec<Value> = serde_saphyr::from_multiple(text)?;
    Ok(documents.into_iter().filter(|d| !d.is_null()).collect())
}

fn api_version(object: &Value) -> &str {
    object["apiVersion"].as_str().unwrap_or_default()
}

fn kind(object: &Value) -> &str {
    object["kind"].as_str().unwrap_or_default()
}

fn describe(object: &Value) -> String {
    format!(
        "{} {}/{}",
        kind(object),
        object
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or_default(),
        object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
    )
}

impl Lint {
    /// The objects of the kustomize builds.
    fn all_documents(&self) -> impl Iterator<Item = &Value> {
        self.builds.iter().flat_map(|b| b.documents.iter())
    }

    /// The objects of the kustomize builds and of the chart's renders.
    fn every_document(&self) -> impl Iterator<Item = &Value> {
        self.all_documents()
            .chain(self.charts.iter().flat_map(|b| b.documents.iter()))
    }

    fn documents_of_kind<'a>(&'a self, kind_name: &'a str) -> impl Iterator<Item = &'a Value> {
        self.all_documents().filter(move |d| kind(d) == kind_name)
    }

    fn venv_tool(&self, name: &str) -> PathBuf {
        self.venv_bin.join(name)
    }

    fn write(&self, name: &str, contents: &str) -> Result<PathBuf> {
        let path = self.work.join(name);
        std::fs::write(&path, contents)
            .with_context(|| format!("cannot write {}", path.display()))?;
        Ok(path)
    }
}

/// Every file under `root`, recursively, sorted.
fn files_under(root: &Path) -> Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let entries =
            std::fs::read_dir(&dir).with_context(|| format!("cannot list {}", dir.display()))?;
        for entry in entries {
            let path = entry?.path();
            if path.is_dir() {
                pending.push(path);
            } else {
                found.push(path);
            }
        }
    }
    found.sort();
    Ok(found)
}

/// Multi-document YAML (each document as JSON, which is YAML).
fn to_multi_document(documents: &[Value]) -> Result<String> {
    let mut text = String::new();
    for document in documents {
        text.push_str("---\n");
        text.push_str(&serde_json::to_string(document)?);
        text.push('\n');
    }
    Ok(text)
}
