//! `cargo xtask lint-deploy`: checks deploy/ with the tools operators and the ecosystem use.
//!
//! Checks, each reported on its own so one failure does not hide another:
//! - every kustomization under deploy/ builds with `kubectl kustomize`;
//! - every built manifest of a built-in kind (and the DaemonSet embedded in each CanaryDaemonSet)
//!   validates with kubernetes-validate in strict mode for [`KUBERNETES_VERSION`], the oldest
//!   Kubernetes the project supports (k8s-openapi's `v1_33`);
//! - RBAC stays least-privilege: no wildcard, no Secret access, leases only through a Role;
//! - custom kinds are never waved through: CanaryDaemonSets are checked strictly against the
//!   schema of the CRD in deploy/crd and its CEL rules (cel-python), ServiceMonitors against the
//!   metrics Service they select,
//!   PrometheusRules by promtool; the reason per kind is in [`CUSTOM_KINDS`];
//! - the PrometheusRule's rule groups are extracted to `target/lint-deploy/rules.yaml` (so the
//!   tests run on exactly what is deployed) for `promtool check rules` and `promtool test rules`;
//!   every alert has a test where it fires, one where it stays quiet, and a runbook entry;
//! - every dashboard query parses as PromQL (promtool, as recording rules), and the dashboard's
//!   panels have unique ids, the dashboard's data source variable and non-overlapping places;
//! - every `canary_` metric the alerts and the dashboard use is exported by the binary: a text
//!   check against its metrics source, or, with `--exposition FILE`, against a real `/metrics`
//!   scrape saved to FILE;
//! - checkov finds no failed check in deploy/ and the Dockerfile (skips: deploy/.checkov.yaml).
//!
//! Outputs land in `target/lint-deploy/` for inspection.

use crate::tools;
use anyhow::{Context, Result, bail, ensure};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use xshell::{Shell, cmd};

/// The oldest Kubernetes the project supports: kube 5's minimum, k8s-openapi feature `v1_33`.
const KUBERNETES_VERSION: &str = "1.33.0";
/// Root of the manifests.
const DEPLOY_DIR: &str = "deploy";
/// The PrometheusRule whose groups promtool checks and tests.
const PROMETHEUS_RULE: &str = "deploy/prometheus/prometheus_rule.yaml";
/// promtool unit tests of the rules; they name `rules.yaml` as their rule file.
const RULE_TESTS: &str = "deploy/prometheus/tests/alerts.test.yaml";
/// The Grafana dashboard.
const DASHBOARD: &str = "deploy/grafana/dashboard.json";
/// Where the binary defines its metrics.
const METRICS_SOURCE: &str = "crates/daemonset-canary/src/metrics.rs";
/// Where every alert has its runbook entry (a `### AlertName` heading).
const RUNBOOKS: &str = "docs/operations.md";
/// checkov's configuration, with every skipped check and its reason.
const CHECKOV_CONFIG: &str = "deploy/.checkov.yaml";
/// Validates custom resources against their CRD schemas.
const CUSTOM_RESOURCE_CHECK: &str = include_str!("deploy/check_custom_resources.py");

/// Kinds kubernetes-validate has no schema for, and how this module checks them instead.
const CUSTOM_KINDS: &[(&str, &str, &str)] = &[
    (
        "canary.daemonset.dev/",
        "CanaryDaemonSet",
        "strictly against the schema and CEL rules of deploy/crd; its embedded DaemonSet by kubernetes-validate",
    ),
    (
        "monitoring.coreos.com/",
        "ServiceMonitor",
        "no vendored prometheus-operator CRD: its selector and port must match the metrics Service",
    ),
    (
        "monitoring.coreos.com/",
        "PrometheusRule",
        "no vendored prometheus-operator CRD: its rule groups go through promtool check/test rules",
    ),
];

/// Options of `cargo xtask lint-deploy`.
#[derive(clap::Args, Default)]
pub struct LintArgs {
    /// A `/metrics` scrape of the binary (Prometheus text format) to check metric names against,
    /// instead of reading the metrics source. Only families the scrape shows count, so scrape a
    /// binary that has exercised every metric (e.g. after a demo rollout).
    #[arg(long, value_name = "FILE", conflicts_with = "from_demo")]
    exposition: Option<PathBuf>,
    /// Scrape a demo rollout for the metric-name check: runs `daemonset-canary demo
    /// --metrics-file` and checks against that exposition (what CI does).
    #[arg(long)]
    from_demo: bool,
}

impl LintArgs {
    /// What CI runs: the metric names checked against a demo rollout's exposition.
    pub fn from_demo() -> Self {
        Self {
            exposition: None,
            from_demo: true,
        }
    }
}

/// Runs a 20-node demo rollout and saves its final `/metrics` exposition in `work`.
fn demo_exposition(sh: &Shell, work: &Path) -> Result<PathBuf> {
    let file = work.join("demo-metrics.prom");
    let cargo = crate::cargo();
    eprintln!("==> lint-deploy: scraping a demo rollout");
    cmd!(
        sh,
        "{cargo} run --quiet --locked -p daemonset-canary -- demo --nodes 20 --metrics-file {file}"
    )
    .ignore_stdout()
    .run()
    .context("the demo rollout for the metrics scrape failed")?;
    Ok(file)
}

/// One built kustomization.
struct Build {
    dir: PathBuf,
    documents: Vec<Value>,
}

/// What every check reads: the shell, the output directory, the tools and the builds.
struct Lint {
    sh: Shell,
    work: PathBuf,
    venv_bin: PathBuf,
    builds: Vec<Build>,
    exposition: Option<PathBuf>,
}

type Check = fn(&Lint) -> Result<()>;

const CHECKS: &[(&str, Check)] = &[
    ("kubernetes-validate", kubernetes_validate),
    ("least privilege", least_privilege),
    ("custom resources", custom_resources),
    ("prometheus rules", prometheus_rules),
    ("dashboard", dashboard),
    ("metric names", metric_names),
    ("checkov", checkov),
    ("server-side dry-run", |_| {
        crate::cluster::server_dry_run_deploy()
    }),
];

/// Runs every check and fails if any failed.
pub fn run(args: &LintArgs) -> Result<()> {
    let venv_bin = tools::ensure_deploy_tools()?;
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
    let exposition = match (&args.exposition, args.from_demo) {
        (Some(file), _) => Some(file.clone()),
        (None, true) => Some(demo_exposition(&sh, &work)?),
        (None, false) => None,
    };
    let context = Lint {
        sh,
        work,
        venv_bin,
        builds,
        exposition,
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

/// Builds every kustomization under deploy/ and parses its output.
fn build_all(sh: &Shell, work: &Path) -> Result<Vec<Build>> {
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
fn kustomization_dirs(root: &Path) -> Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let entries =
            std::fs::read_dir(&dir).with_context(|| format!("cannot list {}", dir.display()))?;
        for entry in entries {
            let path = entry?.path();
            if path.is_dir() {
                pending.push(path);
            } else if path.file_name().is_some_and(|name| {
                ["kustomization.yaml", "kustomization.yml", "Kustomization"]
                    .iter()
                    .any(|k| name == *k)
            }) {
                found.push(dir.clone());
            }
        }
    }
    found.sort();
    Ok(found)
}

/// `deploy/prometheus` -> `deploy-prometheus`.
fn flat_name(dir: &Path) -> String {
    dir.to_string_lossy().replace(['/', '\\'], "-")
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
        object["metadata"]["namespace"].as_str().unwrap_or_default(),
        object["metadata"]["name"].as_str().unwrap_or_default()
    )
}

/// The reason a custom kind is not checked by kubernetes-validate, or `None` for a built-in kind.
fn custom_kind_reason(object: &Value) -> Option<&'static str> {
    CUSTOM_KINDS
        .iter()
        .find(|(group, kind_name, _)| {
            api_version(object).starts_with(group) && kind(object) == *kind_name
        })
        .map(|(_, _, reason)| *reason)
}

impl Lint {
    fn all_documents(&self) -> impl Iterator<Item = &Value> {
        self.builds.iter().flat_map(|b| b.documents.iter())
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

/// The DaemonSet a CanaryDaemonSet asks for, so kubernetes-validate checks its embedded spec.
fn embedded_daemon_set(canary: &Value) -> Value {
    let metadata = &canary["metadata"];
    let template = &canary["spec"]["template"];
    let name = canary["spec"]["daemonSetName"]
        .as_str()
        .or_else(|| metadata["name"].as_str())
        .unwrap_or_default();
    let mut daemon_set_metadata = json!({ "name": name });
    if let Some(namespace) = metadata["namespace"].as_str() {
        daemon_set_metadata["namespace"] = json!(namespace);
    }
    for field in ["labels", "annotations"] {
        if !template["metadata"][field].is_null() {
            daemon_set_metadata[field] = template["metadata"][field].clone();
        }
    }
    json!({
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": daemon_set_metadata,
        "spec": template["spec"],
    })
}

fn kubernetes_validate(context: &Lint) -> Result<()> {
    let mut built_in = Vec::new();
    let mut skipped = BTreeMap::new();
    for document in context.all_documents() {
        match custom_kind_reason(document) {
            Some(reason) => {
                skipped.insert(kind(document).to_owned(), reason);
            }
            None => built_in.push(document.clone()),
        }
    }
    built_in.extend(
        context
            .documents_of_kind("CanaryDaemonSet")
            .map(embedded_daemon_set),
    );
    ensure!(!built_in.is_empty(), "no built-in object to validate");
    for (kind_name, reason) in &skipped {
        eprintln!("not by kubernetes-validate: {kind_name}: {reason}");
    }
    let file = context.write("built-in.yaml", &to_multi_document(&built_in)?)?;
    let validate = context.venv_tool("kubernetes-validate");
    let output = cmd!(
        context.sh,
        "{validate} --strict --kubernetes-version {KUBERNETES_VERSION} {file}"
    )
    .quiet()
    .ignore_status()
    .output()?;
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let passed = report.lines().filter(|l| l.contains(" passed ")).count();
    let problems: Vec<&str> = report
        .lines()
        .filter(|l| !l.starts_with("INFO") || l.contains("Couldn't find schema"))
        .filter(|l| !l.trim().is_empty())
        .collect();
    if !output.status.success() || !problems.is_empty() || passed != built_in.len() {
        bail!(
            "kubernetes-validate (strict, Kubernetes {KUBERNETES_VERSION}): {passed} of {} objects passed\n{}",
            built_in.len(),
            problems.join("\n")
        );
    }
    eprintln!(
        "{passed} objects valid for Kubernetes {KUBERNETES_VERSION} (strict), including the DaemonSets embedded in CanaryDaemonSets"
    );
    Ok(())
}

fn least_privilege(context: &Lint) -> Result<()> {
    let roles: Vec<&Value> = context
        .all_documents()
        .filter(|d| matches!(kind(d), "ClusterRole" | "Role"))
        .collect();
    ensure!(!roles.is_empty(), "no Role or ClusterRole in any build");
    let problems: Vec<String> = roles.iter().flat_map(|role| rbac_problems(role)).collect();
    ensure!(problems.is_empty(), "{}", problems.join("\n"));
    eprintln!(
        "{} roles: no wildcard, no secrets, leases only namespaced",
        roles.len()
    );
    Ok(())
}

/// What breaks least privilege in one Role or ClusterRole.
fn rbac_problems(role: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    let rules = role["rules"].as_array().into_iter().flatten();
    for (index, rule) in rules.enumerate() {
        let list = |field: &str| -> Vec<String> {
            rule[field]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        };
        let (groups, resources, verbs) = (list("apiGroups"), list("resources"), list("verbs"));
        let where_ = format!("{} rule {index}", describe(role));
        if [&groups, &resources, &verbs]
            .iter()
            .any(|l| l.iter().any(|v| v.contains('*')))
        {
            problems.push(format!("{where_}: wildcard"));
        }
        if !rule["nonResourceURLs"].is_null() {
            problems.push(format!("{where_}: nonResourceURLs"));
        }
        if resources.iter().any(|r| r == "secrets") {
            problems.push(format!("{where_}: grants access to Secrets"));
        }
        let leases = groups.iter().any(|g| g == "coordination.k8s.io")
            && resources.iter().any(|r| r == "leases");
        if leases && kind(role) == "ClusterRole" {
            problems.push(format!(
                "{where_}: leases through a ClusterRole (use a Role)"
            ));
        }
        if verbs
            .iter()
            .any(|v| matches!(v.as_str(), "escalate" | "bind" | "impersonate"))
        {
            problems.push(format!("{where_}: escalate, bind or impersonate"));
        }
    }
    problems
}

fn custom_resources(context: &Lint) -> Result<()> {
    let crds: Vec<Value> = context
        .documents_of_kind("CustomResourceDefinition")
        .cloned()
        .collect();
    let canaries: Vec<Value> = context
        .documents_of_kind("CanaryDaemonSet")
        .cloned()
        .collect();
    ensure!(!crds.is_empty(), "no CustomResourceDefinition in any build");
    ensure!(!canaries.is_empty(), "no CanaryDaemonSet in any build");
    let crd_file = context.write("crds.yaml", &to_multi_document(&crds)?)?;
    let resource_file = context.write("canarydaemonsets.yaml", &to_multi_document(&canaries)?)?;
    let script = context.write("check_custom_resources.py", CUSTOM_RESOURCE_CHECK)?;
    let python = context.venv_tool("python");
    cmd!(context.sh, "{python} {script} {crd_file} {resource_file}")
        .run()
        .context("a CanaryDaemonSet does not match the CRD schema")?;
    let monitors: Vec<&Value> = context.documents_of_kind("ServiceMonitor").collect();
    ensure!(!monitors.is_empty(), "no ServiceMonitor in any build");
    let services: Vec<&Value> = context.documents_of_kind("Service").collect();
    for monitor in monitors {
        check_service_monitor(monitor, &services)?;
        eprintln!("ok {} scrapes a Service port by name", describe(monitor));
    }
    Ok(())
}

/// A ServiceMonitor must select a Service in its namespace and name ports that Service has.
fn check_service_monitor(monitor: &Value, services: &[&Value]) -> Result<()> {
    let namespace = &monitor["metadata"]["namespace"];
    let wanted = monitor["spec"]["selector"]["matchLabels"]
        .as_object()
        .with_context(|| format!("{} has no selector.matchLabels", describe(monitor)))?;
    let selected: Vec<&&Value> = services
        .iter()
        .filter(|s| &s["metadata"]["namespace"] == namespace)
        .filter(|s| {
            wanted
                .iter()
                .all(|(key, value)| &s["metadata"]["labels"][key] == value)
        })
        .collect();
    ensure!(
        !selected.is_empty(),
        "{} selects no Service",
        describe(monitor)
    );
    let endpoints = monitor["spec"]["endpoints"]
        .as_array()
        .filter(|e| !e.is_empty())
        .with_context(|| format!("{} has no endpoints", describe(monitor)))?;
    for endpoint in endpoints {
        let port = endpoint["port"].as_str().with_context(|| {
            format!("{} has an endpoint without a port name", describe(monitor))
        })?;
        for service in &selected {
            let has_port = service["spec"]["ports"]
                .as_array()
                .is_some_and(|ports| ports.iter().any(|p| p["name"] == port));
            ensure!(
                has_port,
                "{} scrapes port {port:?}, which {} lacks",
                describe(monitor),
                describe(service)
            );
        }
    }
    Ok(())
}

/// The rule groups of the PrometheusRule, as a promtool rule file.
fn rule_groups(context: &Lint) -> Result<Value> {
    let rules: Vec<&Value> = context.documents_of_kind("PrometheusRule").collect();
    ensure!(
        rules.len() == 1,
        "expected exactly one PrometheusRule across the builds, found {}",
        rules.len()
    );
    let groups = &rules[0]["spec"]["groups"];
    ensure!(
        groups.as_array().is_some_and(|g| !g.is_empty()),
        "the PrometheusRule has no rule groups"
    );
    Ok(json!({ "groups": groups }))
}

fn alerts(groups: &Value) -> Vec<(&str, &Value)> {
    groups["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().into_iter().flatten())
        .filter_map(|rule| rule["alert"].as_str().map(|name| (name, rule)))
        .collect()
}

fn prometheus_rules(context: &Lint) -> Result<()> {
    // The built PrometheusRule must be the one in the source file (kustomize only adds labels).
    let source = std::fs::read_to_string(PROMETHEUS_RULE)
        .with_context(|| format!("cannot read {PROMETHEUS_RULE}"))?;
    let source_groups = parse_documents(&source)?
        .into_iter()
        .next()
        .map(|d| d["spec"]["groups"].clone());
    let groups = rule_groups(context)?;
    ensure!(
        source_groups.as_ref() == Some(&groups["groups"]),
        "the built PrometheusRule differs from {PROMETHEUS_RULE}"
    );
    let rules_file = context.write("rules.yaml", &serde_json::to_string_pretty(&groups)?)?;
    let tests_text =
        std::fs::read_to_string(RULE_TESTS).with_context(|| format!("cannot read {RULE_TESTS}"))?;
    let tests_file = context.write("alerts.test.yaml", &tests_text)?;
    cmd!(context.sh, "promtool check rules {rules_file}").run()?;
    cmd!(context.sh, "promtool test rules {tests_file}").run()?;
    let tests: Value = serde_saphyr::from_str(&tests_text)
        .with_context(|| format!("cannot parse {RULE_TESTS}"))?;
    let runbooks =
        std::fs::read_to_string(RUNBOOKS).with_context(|| format!("cannot read {RUNBOOKS}"))?;
    let mut problems = Vec::new();
    for (alert, rule) in alerts(&groups) {
        problems.extend(alert_coverage(alert, &tests));
        problems.extend(runbook_problems(alert, rule, &runbooks));
    }
    ensure!(
        problems.is_empty(),
        "alerts not fully covered:\n{}",
        problems.join("\n")
    );
    eprintln!(
        "{} alerts: each fires in a test, stays quiet in another, and has a runbook",
        alerts(&groups).len()
    );
    Ok(())
}

/// Problems with the tests of `alert`: it needs a case where it fires and one where it is quiet.
fn alert_coverage(alert: &str, tests: &Value) -> Vec<String> {
    let cases: Vec<&Value> = tests["tests"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|t| t["alert_rule_test"].as_array().into_iter().flatten())
        .filter(|case| case["alertname"] == alert)
        .collect();
    let fires = cases
        .iter()
        .any(|c| c["exp_alerts"].as_array().is_some_and(|a| !a.is_empty()));
    let quiet = cases
        .iter()
        .any(|c| c["exp_alerts"].as_array().is_none_or(|a| a.is_empty()));
    let mut problems = Vec::new();
    if !fires {
        problems.push(format!("{alert}: no promtool test where it fires"));
    }
    if !quiet {
        problems.push(format!("{alert}: no promtool test where it stays quiet"));
    }
    problems
}

/// Problems with the runbook of `alert`: a `### alert` heading and a runbook_url to its anchor.
fn runbook_problems(alert: &str, rule: &Value, runbooks: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let heading = format!("### {alert}");
    if !runbooks.lines().any(|line| line.trim_end() == heading) {
        problems.push(format!(
            "{alert}: no `{heading}` runbook entry in {RUNBOOKS}"
        ));
    }
    let anchor = format!("{RUNBOOKS}#{}", alert.to_lowercase());
    let url = rule["annotations"]["runbook_url"]
        .as_str()
        .unwrap_or_default();
    if !url.ends_with(&anchor) {
        problems.push(format!(
            "{alert}: runbook_url {url:?} does not end with {anchor:?}"
        ));
    }
    problems
}

/// Every `expr` in the dashboard, in panel order.
fn read_dashboard_queries() -> Result<Vec<String>> {
    let text =
        std::fs::read_to_string(DASHBOARD).with_context(|| format!("cannot read {DASHBOARD}"))?;
    let dashboard: Value =
        serde_json::from_str(&text).with_context(|| format!("{DASHBOARD} is not JSON"))?;
    let mut queries = Vec::new();
    collect_exprs(&dashboard, &mut queries);
    Ok(queries)
}

fn collect_exprs(value: &Value, into: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                match (key.as_str(), child) {
                    ("expr", Value::String(expr)) => into.push(expr.clone()),
                    _ => collect_exprs(child, into),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|item| collect_exprs(item, into)),
        _ => {}
    }
}

/// A dashboard query with Grafana's variables replaced by values promtool can parse.
fn as_promql(query: &str) -> String {
    [
        ("$__rate_interval", "5m"),
        ("$__interval", "1m"),
        ("$__range", "1h"),
        ("$namespace", ".*"),
        ("$name", ".*"),
    ]
    .iter()
    .fold(query.to_owned(), |q, (variable, value)| {
        q.replace(variable, value)
    })
}

fn dashboard(context: &Lint) -> Result<()> {
    let text =
        std::fs::read_to_string(DASHBOARD).with_context(|| format!("cannot read {DASHBOARD}"))?;
    let dashboard: Value =
        serde_json::from_str(&text).with_context(|| format!("{DASHBOARD} is not JSON"))?;
    let problems = dashboard_layout_problems(&dashboard);
    ensure!(problems.is_empty(), "{DASHBOARD}:\n{}", problems.join("\n"));
    let queries = read_dashboard_queries()?;
    ensure!(!queries.is_empty(), "{DASHBOARD} has no queries");
    let rules: Vec<Value> = queries
        .iter()
        .enumerate()
        .map(|(i, q)| json!({ "record": format!("dashboard:query_{i}"), "expr": as_promql(q) }))
        .collect();
    let file = context.write(
        "dashboard-queries.yaml",
        &serde_json::to_string_pretty(
            &json!({ "groups": [{ "name": "dashboard", "rules": rules }] }),
        )?,
    )?;
    cmd!(context.sh, "promtool check rules {file}")
        .run()
        .context("a dashboard query is not valid PromQL")?;
    Ok(())
}

/// Width of Grafana's grid.
const GRID_COLUMNS: u64 = 24;

/// Mistakes a hand edit of the dashboard JSON makes: duplicate panel ids, a panel or query not on
/// the `${datasource}` variable (so it breaks on import), panels off the grid or overlapping.
fn dashboard_layout_problems(dashboard: &Value) -> Vec<String> {
    let panels: Vec<&Value> = dashboard["panels"]
        .as_array()
        .into_iter()
        .flatten()
        .collect();
    let mut problems = Vec::new();
    if panels.is_empty() {
        problems.push("no panels".to_owned());
    }
    let mut ids = BTreeSet::new();
    let mut cells: BTreeMap<(u64, u64), String> = BTreeMap::new();
    for panel in panels {
        let title = panel["title"].as_str().unwrap_or("(untitled)").to_owned();
        match panel["id"].as_u64() {
            Some(id) if !ids.insert(id) => problems.push(format!("{title}: duplicate id {id}")),
            Some(_) => {}
            None => problems.push(format!("{title}: no numeric id")),
        }
        let is_row = panel["type"] == "row";
        let on_variable = |v: &Value| v["uid"] == "${datasource}";
        if !is_row && !on_variable(&panel["datasource"]) {
            problems.push(format!("{title}: data source is not ${{datasource}}"));
        }
        for target in panel["targets"].as_array().into_iter().flatten() {
            if !on_variable(&target["datasource"]) {
                problems.push(format!(
                    "{title}: a query's data source is not ${{datasource}}"
                ));
            }
        }
        let place = &panel["gridPos"];
        let (Some(x), Some(y), Some(w), Some(h)) = (
            place["x"].as_u64(),
            place["y"].as_u64(),
            place["w"].as_u64(),
            place["h"].as_u64(),
        ) else {
            problems.push(format!("{title}: incomplete gridPos"));
            continue;
        };
        if w == 0 || h == 0 || x + w > GRID_COLUMNS {
            problems.push(format!(
                "{title}: gridPos off the {GRID_COLUMNS}-column grid"
            ));
            continue;
        }
        let mut overlapped = BTreeSet::new();
        for column in x..x + w {
            for row in y..y + h {
                if let Some(other) = cells.insert((column, row), title.clone()) {
                    overlapped.insert(other);
                }
            }
        }
        for other in overlapped {
            problems.push(format!("{title}: overlaps {other}"));
        }
    }
    problems
}

/// The metric names the binary exports, read from its source: the registry prefix plus the
/// name given to each `*Opts::new` / `IntGauge::new` style constructor; histograms also export
/// `_bucket`, `_sum` and `_count`.
fn exported_metrics(source: &str) -> Result<BTreeSet<String>> {
    let prefix = string_after(source, "new_custom(Some(\"")
        .context("no Registry::new_custom(Some(\"prefix\"...)) in the metrics source")?;
    let mut names = BTreeSet::new();
    for constructor in [
        "HistogramOpts::new(",
        "Opts::new(",
        "IntGauge::new(",
        "Gauge::new(",
        "IntCounter::new(",
        "Counter::new(",
    ] {
        for (index, _) in source.match_indices(constructor) {
            // `Opts::new(` also matches inside `HistogramOpts::new(`; the longer one handles it.
            if constructor == "Opts::new(" && source[..index].ends_with("Histogram") {
                continue;
            }
            let rest = source[index + constructor.len()..].trim_start();
            let Some(name) = rest.strip_prefix('"').and_then(|r| r.split('"').next()) else {
                continue;
            };
            let full = format!("{prefix}_{name}");
            if constructor == "HistogramOpts::new(" {
                for suffix in ["_bucket", "_sum", "_count"] {
                    names.insert(format!("{full}{suffix}"));
                }
            }
            names.insert(full);
        }
    }
    Ok(names)
}

/// The string literal right after `marker`.
fn string_after<'a>(source: &'a str, marker: &str) -> Option<&'a str> {
    let start = source.find(marker)? + marker.len();
    source[start..].split('"').next()
}

/// Every `canary_…` metric name in a PromQL expression (string literals such as label values
/// are not names).
fn used_metrics(expr: &str) -> BTreeSet<String> {
    const PREFIX: &str = "canary_";
    let code = without_string_literals(expr);
    let is_name_char = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let mut names = BTreeSet::new();
    for (index, _) in code.match_indices(PREFIX) {
        if code[..index].chars().next_back().is_some_and(is_name_char) {
            continue;
        }
        let name: String = code[index..]
            .chars()
            .take_while(|c| is_name_char(*c))
            .collect();
        names.insert(name);
    }
    names
}

/// `expr` with the contents of its quoted strings (", ' or `) blanked out.
fn without_string_literals(expr: &str) -> String {
    let mut out = String::with_capacity(expr.len());
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for c in expr.chars() {
        match quote {
            None if matches!(c, '"' | '\'' | '`') => {
                quote = Some(c);
                out.push(c);
            }
            None => out.push(c),
            Some(_) if escaped => {
                escaped = false;
                out.push(' ');
            }
            Some(q) if c == q => {
                quote = None;
                out.push(c);
            }
            Some(q) => {
                escaped = c == '\\' && q != '`';
                out.push(' ');
            }
        }
    }
    out
}

/// The metric names a Prometheus text exposition shows: every `# TYPE` family (with the series
/// names of histograms and summaries) and every sample's name.
fn exposition_metrics(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in text.lines().map(str::trim) {
        if let Some(declaration) = line.strip_prefix("# TYPE ") {
            let mut words = declaration.split_whitespace();
            let (Some(name), Some(kind)) = (words.next(), words.next()) else {
                continue;
            };
            let suffixes: &[&str] = match kind {
                "histogram" => &["", "_bucket", "_sum", "_count"],
                "summary" => &["", "_sum", "_count"],
                _ => &[""],
            };
            names.extend(suffixes.iter().map(|suffix| format!("{name}{suffix}")));
        } else if !line.is_empty() && !line.starts_with('#') {
            let name: String = line
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            if !name.is_empty() {
                names.insert(name);
            }
        }
    }
    names
}

/// The exported metric names and where they come from.
fn exported_names(context: &Lint) -> Result<(BTreeSet<String>, String)> {
    let (exported, origin) = match &context.exposition {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read the scrape {}", path.display()))?;
            (
                exposition_metrics(&text),
                format!("the scrape {}", path.display()),
            )
        }
        None => {
            let source = std::fs::read_to_string(METRICS_SOURCE)
                .with_context(|| format!("cannot read {METRICS_SOURCE}"))?;
            (exported_metrics(&source)?, METRICS_SOURCE.to_owned())
        }
    };
    ensure!(!exported.is_empty(), "found no metric in {origin}");
    Ok((exported, origin))
}

fn metric_names(context: &Lint) -> Result<()> {
    let (exported, origin) = exported_names(context)?;
    let groups = rule_groups(context)?;
    let mut uses: BTreeMap<String, BTreeSet<&str>> = BTreeMap::new();
    let rule_exprs = groups["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().into_iter().flatten())
        .filter_map(|r| r["expr"].as_str().map(str::to_owned));
    for expr in rule_exprs {
        for name in used_metrics(&expr) {
            uses.entry(name).or_default().insert("alerts");
        }
    }
    for query in read_dashboard_queries()? {
        for name in used_metrics(&query) {
            uses.entry(name).or_default().insert("dashboard");
        }
    }
    ensure!(
        !uses.is_empty(),
        "the alerts and the dashboard use no canary_ metric"
    );
    let unknown: Vec<String> = uses
        .iter()
        .filter(|(name, _)| !exported.contains(*name))
        .map(|(name, users)| format!("{name} (used by {})", join(users)))
        .collect();
    ensure!(
        unknown.is_empty(),
        "metrics not exported by the binary (per {origin}):\n{}",
        unknown.join("\n")
    );
    eprintln!(
        "{} metric names used by the alerts and the dashboard, all exported by the binary (per {origin})",
        uses.len()
    );
    let unused: Vec<&str> = exported
        .iter()
        .filter(|name| {
            !["_bucket", "_sum", "_count"]
                .iter()
                .any(|s| name.ends_with(s))
        })
        .filter(|name| {
            ["", "_bucket", "_sum", "_count"]
                .iter()
                .all(|suffix| !uses.contains_key(&format!("{name}{suffix}")))
        })
        .map(String::as_str)
        .collect();
    if !unused.is_empty() {
        eprintln!("exported but shown nowhere: {}", unused.join(", "));
    }
    Ok(())
}

fn join(items: &BTreeSet<&str>) -> String {
    items.iter().copied().collect::<Vec<_>>().join(", ")
}

fn checkov(context: &Lint) -> Result<()> {
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
    let targets: [&[&str]; 2] = [&["-d", DEPLOY_DIR], &["-f", "Dockerfile"]];
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
fn checkov_reports(output: &str) -> Result<Vec<Value>> {
    let start = output
        .find(['{', '['])
        .context("no JSON in checkov's output")?;
    let value: Value = serde_json::from_str(&output[start..])?;
    Ok(match value {
        Value::Array(reports) => reports,
        report => vec![report],
    })
}

fn failed_checks(report: &Value) -> Vec<String> {
    report["results"]["failed_checks"]
        .as_array()
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

    const METRICS: &str = r#"
        let registry = Registry::new_custom(Some("canary".to_owned()), None)?;
        let phase = IntGaugeVec::new(
            Opts::new(
                "rollout_phase",
                "help",
            ),
            &["namespace"],
        )?;
        let duration = HistogramVec::new(
            HistogramOpts::new("reconcile_duration_seconds", "help"),
            &["mode"],
        )?;
        let leader = IntGauge::new("leader", "help")?;
    "#;

    #[test]
    fn exported_metrics_reads_names_prefix_and_histogram_series() {
        let names = exported_metrics(METRICS).unwrap();
        let expected: BTreeSet<String> = [
            "canary_rollout_phase",
            "canary_reconcile_duration_seconds",
            "canary_reconcile_duration_seconds_bucket",
            "canary_reconcile_duration_seconds_sum",
            "canary_reconcile_duration_seconds_count",
            "canary_leader",
        ]
        .into_iter()
        .map(str::to_owned)
        .collect();
        assert_eq!(names, expected);
    }

    #[test]
    fn exposition_metrics_reads_families_and_samples() {
        let scrape = "\
# HELP canary_leader 1 while this replica leads.
# TYPE canary_leader gauge
canary_leader 1
# TYPE canary_reconcile_duration_seconds histogram
canary_reconcile_duration_seconds_bucket{mode=\"driven\",le=\"+Inf\"} 3
canary_untyped_total 2
";
        let names: Vec<String> = exposition_metrics(scrape).into_iter().collect();
        assert_eq!(
            names,
            [
                "canary_leader",
                "canary_reconcile_duration_seconds",
                "canary_reconcile_duration_seconds_bucket",
                "canary_reconcile_duration_seconds_count",
                "canary_reconcile_duration_seconds_sum",
                "canary_untyped_total",
            ]
        );
    }

    #[test]
    fn rbac_problems_flags_wildcards_secrets_and_cluster_wide_leases() {
        let role = |kind_name: &str, rules: Value| json!({ "kind": kind_name, "metadata": { "name": "r" }, "rules": rules });
        let clean = role(
            "ClusterRole",
            json!([{ "apiGroups": ["apps"], "resources": ["daemonsets"], "verbs": ["get", "patch"] }]),
        );
        assert!(rbac_problems(&clean).is_empty());
        let wildcard = role(
            "ClusterRole",
            json!([{ "apiGroups": ["apps"], "resources": ["*"], "verbs": ["get"] }]),
        );
        assert_eq!(rbac_problems(&wildcard).len(), 1);
        let secrets = role(
            "Role",
            json!([{ "apiGroups": [""], "resources": ["secrets"], "verbs": ["get"] }]),
        );
        assert_eq!(rbac_problems(&secrets).len(), 1);
        let leases = json!([{
            "apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get"]
        }]);
        assert!(rbac_problems(&role("Role", leases.clone())).is_empty());
        assert_eq!(rbac_problems(&role("ClusterRole", leases)).len(), 1);
    }

    #[test]
    fn exported_metrics_needs_the_registry_prefix() {
        assert!(exported_metrics("IntGauge::new(\"leader\", \"help\")").is_err());
    }

    #[test]
    fn the_real_metrics_source_exports_what_the_alerts_rely_on() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let source = std::fs::read_to_string(root.join(METRICS_SOURCE)).unwrap();
        let names = exported_metrics(&source).unwrap();
        for name in [
            "canary_rollout_phase",
            "canary_rollout_phase_start_timestamp_seconds",
            "canary_reconcile_errors_total",
            "canary_reconcile_duration_seconds_count",
            "canary_leader",
            "canary_build_info",
        ] {
            assert!(names.contains(name), "{name} missing from {names:?}");
        }
    }

    #[test]
    fn used_metrics_finds_whole_canary_names_only() {
        let expr = r#"sum by (mode) (rate(canary_reconcile_errors_total{job="daemonset-canary_x", l='canary_y\' canary_z'}[5m]))
            / canary_reconcile_duration_seconds_count and my_canary_thing and canary:recorded"#;
        let names: Vec<String> = used_metrics(expr).into_iter().collect();
        assert_eq!(
            names,
            [
                "canary_reconcile_duration_seconds_count",
                "canary_reconcile_errors_total"
            ]
        );
    }

    #[test]
    fn alert_coverage_wants_a_firing_and_a_quiet_case() {
        let tests = json!({ "tests": [
            { "alert_rule_test": [
                { "alertname": "A", "exp_alerts": [{ "exp_labels": {} }] },
                { "alertname": "A", "exp_alerts": [] },
                { "alertname": "B" },
            ]},
            { "alert_rule_test": [
                { "alertname": "C", "exp_alerts": [{ "exp_labels": {} }] },
            ]},
        ]});
        assert!(alert_coverage("A", &tests).is_empty());
        assert_eq!(
            alert_coverage("B", &tests),
            ["B: no promtool test where it fires"]
        );
        assert_eq!(
            alert_coverage("C", &tests),
            ["C: no promtool test where it stays quiet"]
        );
        assert_eq!(alert_coverage("D", &tests).len(), 2);
    }

    #[test]
    fn runbook_needs_heading_and_matching_url() {
        let rule = json!({ "annotations": {
            "runbook_url": "https://example.invalid/blob/main/docs/operations.md#canarynoleader"
        }});
        let runbooks = "# Operations\n\n### CanaryNoLeader\n\ntext\n";
        assert!(runbook_problems("CanaryNoLeader", &rule, runbooks).is_empty());
        assert_eq!(
            runbook_problems("CanaryNoLeader", &rule, "# nothing").len(),
            1
        );
        assert_eq!(runbook_problems("CanaryOther", &rule, runbooks).len(), 2);
    }

    #[test]
    fn service_monitor_must_select_a_service_with_its_port() {
        let service = json!({
            "kind": "Service",
            "metadata": { "name": "m", "namespace": "ns", "labels": { "app": "x" } },
            "spec": { "ports": [{ "name": "http-metrics", "port": 8080 }] },
        });
        let monitor = |port: &str, app: &str| {
            json!({
                "kind": "ServiceMonitor",
                "metadata": { "name": "sm", "namespace": "ns" },
                "spec": {
                    "selector": { "matchLabels": { "app": app } },
                    "endpoints": [{ "port": port }],
                },
            })
        };
        assert!(check_service_monitor(&monitor("http-metrics", "x"), &[&service]).is_ok());
        assert!(check_service_monitor(&monitor("metrics", "x"), &[&service]).is_err());
        assert!(check_service_monitor(&monitor("http-metrics", "y"), &[&service]).is_err());
    }

    #[test]
    fn embedded_daemon_set_carries_name_labels_and_spec() {
        let canary = json!({
            "apiVersion": "canary.daemonset.dev/v1alpha1",
            "kind": "CanaryDaemonSet",
            "metadata": { "name": "agent", "namespace": "ns" },
            "spec": {
                "target": { "version": "v1" },
                "template": {
                    "metadata": { "labels": { "app": "agent" } },
                    "spec": { "selector": { "matchLabels": { "app": "agent" } } },
                },
            },
        });
        let daemon_set = embedded_daemon_set(&canary);
        assert_eq!(daemon_set["kind"], "DaemonSet");
        assert_eq!(daemon_set["metadata"]["name"], "agent");
        assert_eq!(daemon_set["metadata"]["namespace"], "ns");
        assert_eq!(daemon_set["metadata"]["labels"]["app"], "agent");
        assert!(daemon_set["metadata"]["annotations"].is_null());
        assert_eq!(
            daemon_set["spec"]["selector"]["matchLabels"]["app"],
            "agent"
        );
    }

    #[test]
    fn custom_kinds_are_recognised_by_group_and_kind() {
        let service_monitor =
            json!({ "apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor" });
        let deployment = json!({ "apiVersion": "apps/v1", "kind": "Deployment" });
        let unknown = json!({ "apiVersion": "monitoring.coreos.com/v1", "kind": "Probe" });
        assert!(custom_kind_reason(&service_monitor).is_some());
        assert!(custom_kind_reason(&deployment).is_none());
        // An unlisted custom kind goes to kubernetes-validate, which then fails on it loudly.
        assert!(custom_kind_reason(&unknown).is_none());
    }

    fn panel(id: u64, x: u64, y: u64, w: u64) -> Value {
        let source = json!({ "type": "prometheus", "uid": "${datasource}" });
        json!({
            "id": id, "type": "timeseries", "title": format!("p{id}"), "datasource": source,
            "gridPos": { "x": x, "y": y, "w": w, "h": 4 },
            "targets": [{ "datasource": source, "expr": "up" }],
        })
    }

    #[test]
    fn dashboard_layout_accepts_a_clean_grid() {
        let dashboard =
            json!({ "panels": [panel(1, 0, 0, 12), panel(2, 12, 0, 12), panel(3, 0, 4, 24)] });
        assert_eq!(dashboard_layout_problems(&dashboard), Vec::<String>::new());
    }

    #[test]
    fn dashboard_layout_finds_duplicates_overlaps_and_foreign_sources() {
        let mut foreign = panel(3, 0, 8, 24);
        foreign["targets"][0]["datasource"]["uid"] = json!("prometheus-prod");
        let dashboard = json!({ "panels": [
            panel(1, 0, 0, 12), panel(1, 6, 0, 12), foreign, panel(4, 20, 12, 8),
        ]});
        let problems = dashboard_layout_problems(&dashboard);
        assert!(
            problems.iter().any(|p| p.contains("duplicate id 1")),
            "{problems:?}"
        );
        assert!(
            problems.iter().any(|p| p.contains("overlaps p1")),
            "{problems:?}"
        );
        assert!(
            problems
                .iter()
                .any(|p| p.starts_with("p3: a query's data source")),
            "{problems:?}"
        );
        assert!(
            problems.iter().any(|p| p.starts_with("p4: gridPos off")),
            "{problems:?}"
        );
        assert_eq!(problems.len(), 4, "{problems:?}");
    }

    #[test]
    fn the_committed_dashboard_has_a_clean_layout() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join(DASHBOARD);
        let dashboard: Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        assert_eq!(dashboard_layout_problems(&dashboard), Vec::<String>::new());
    }

    #[test]
    fn dashboard_variables_become_parsable_promql() {
        assert_eq!(
            as_promql(r#"rate(x{namespace=~"$namespace",name=~"$name"}[$__rate_interval])"#),
            r#"rate(x{namespace=~".*",name=~".*"}[5m])"#
        );
    }

    #[test]
    fn checkov_reports_accepts_one_report_or_a_list() {
        let one = checkov_reports("noise\n{\"check_type\": \"dockerfile\"}").unwrap();
        assert_eq!(one.len(), 1);
        let two = checkov_reports("[{\"check_type\": \"a\"}, {\"check_type\": \"b\"}]").unwrap();
        assert_eq!(two.len(), 2);
        assert!(checkov_reports("no json here").is_err());
    }

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
