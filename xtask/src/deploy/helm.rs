//! The Helm chart, `deploy/helm/daemonset-canary`, with real Helm 4 (built and cached by
//! `cargo xtask cluster`, [`crate::cluster::ensure_helm`]).
//!
//! [`render_all`] runs `helm template` for each of [`VARIANTS`] (the values a user picks: the
//! defaults, a namespaced install, observe-kubevirt, every option on); the renders join the
//! other checks of lint-deploy (kubernetes-validate, least privilege, ServiceMonitors, checkov).
//! [`check`] runs `helm lint --strict` on each variant, makes sure the chart refuses the values
//! it must ([`REFUSED`]), and compares each variant that stands for a kustomize build with that
//! build, object by object: the chart installs the same objects as deploy/. Only what says who
//! installed an object is left out of the comparison ([`INSTALLER_LABELS`], Helm's keep policy);
//! every other difference, and every object one side has and the other lacks, fails, unless the
//! variant names it with its reason.
//!
//! Helm runs with its cache, configuration and data under `target/helm-home/`, never the
//! user's.

use super::kustomize::Build;
use super::{Lint, describe, kind, parse_documents};
use anyhow::{Context, Result, ensure};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use xshell::{Shell, cmd};

/// The chart.
pub(super) const CHART: &str = "deploy/helm/daemonset-canary";

/// One set of values the chart is rendered with.
pub(super) struct Variant {
    /// Short name, for the render's file and the messages.
    pub(super) name: &'static str,
    /// The release name and namespace (`helm install NAME -n NAMESPACE`).
    pub(super) release: &'static str,
    pub(super) namespace: &'static str,
    /// `--set` arguments.
    pub(super) values: &'static [&'static str],
    /// The kustomize builds this variant must equal (empty: compared with none).
    pub(super) same_as: &'static [&'static str],
    /// Objects of those builds the chart does not install, and why.
    pub(super) not_in_chart: &'static [(&'static str, &'static str, &'static str)],
    /// Objects the chart names differently: (kind, chart's name, kustomize's name, why).
    pub(super) renamed: &'static [(&'static str, &'static str, &'static str, &'static str)],
}

/// Helm creates the release namespace (`helm install --create-namespace`); the chart does not
/// template it, so that it never owns, or deletes, the namespace it is installed into.
const NAMESPACE_BY_HELM: &str = "helm install --create-namespace creates it";

/// The variants rendered and linted.
pub(super) const VARIANTS: &[Variant] = &[
    Variant {
        name: "defaults",
        release: "daemonset-canary",
        namespace: "daemonset-canary-system",
        values: &[],
        same_as: &["deploy/default"],
        not_in_chart: &[("Namespace", "daemonset-canary-system", NAMESPACE_BY_HELM)],
        renamed: &[],
    },
    Variant {
        name: "monitoring-and-policy",
        release: "daemonset-canary",
        namespace: "daemonset-canary-system",
        values: &[
            "metrics.serviceMonitor.enabled=true",
            "metrics.prometheusRule.enabled=true",
            "policy.enabled=true",
        ],
        same_as: &["deploy/default", "deploy/prometheus", "deploy/policy"],
        not_in_chart: &[("Namespace", "daemonset-canary-system", NAMESPACE_BY_HELM)],
        renamed: &[],
    },
    Variant {
        name: "namespaced",
        release: "daemonset-canary",
        namespace: "node-agents",
        values: &["scope=Namespace", "crds.install=false"],
        same_as: &["deploy/namespaced"],
        not_in_chart: &[],
        renamed: &[
            (
                "ClusterRole",
                "daemonset-canary-node-reader-node-agents",
                "daemonset-canary-node-reader",
                "cluster-wide: the namespace in the name lets one release per namespace coexist",
            ),
            (
                "ClusterRoleBinding",
                "daemonset-canary-node-reader-node-agents",
                "daemonset-canary-node-reader",
                "cluster-wide: the namespace in the name lets one release per namespace coexist",
            ),
        ],
    },
    Variant {
        name: "pre-pull",
        release: "daemonset-canary",
        namespace: "daemonset-canary-system",
        values: &["prePull.enabled=true"],
        same_as: &["deploy/pre-pull"],
        not_in_chart: &[("Namespace", "daemonset-canary-system", NAMESPACE_BY_HELM)],
        renamed: &[],
    },
    Variant {
        name: "observe-kubevirt",
        release: "daemonset-canary-observer",
        namespace: "daemonset-canary-observer",
        values: &[
            "mode=observe-kubevirt",
            "metrics.serviceMonitor.enabled=true",
        ],
        same_as: &["deploy/observe"],
        not_in_chart: &[("Namespace", "daemonset-canary-observer", NAMESPACE_BY_HELM)],
        renamed: &[],
    },
    Variant {
        name: "every-option",
        release: "canary",
        namespace: "platform",
        values: &[
            "scope=Namespace",
            "prePull.enabled=true",
            "policy.enabled=true",
            "policy.allowedGroups={oncall,platform-admins}",
            "analysis.allowedAddresses={http://prometheus-operated.monitoring.svc:9090/,https://thanos.example.com/}",
            "image.digest=sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            "leaderElection.leaseDurationSeconds=30",
            "logLevel=debug",
            "logFormat=plain",
            "replicaCount=3",
            "extraArgs={--concurrency=8}",
            "metrics.serviceMonitor.enabled=true",
            "metrics.serviceMonitor.labels.release=kube-prometheus-stack",
            "metrics.prometheusRule.enabled=true",
            "notifications.receivers[0].name=oncall-slack",
            "notifications.receivers[0].format=slack",
            "notifications.receivers[0].urlSecret.name=canary-notifications",
            "notifications.receivers[0].urlSecret.key=slack-url",
            "notifications.receivers[1].name=audit",
            "notifications.receivers[1].url=https://hooks.example.com/canary",
            "notifications.receivers[1].headersSecret=canary-audit-headers",
            "notifications.receivers[1].timeout=5s",
        ],
        same_as: &[],
        not_in_chart: &[],
        renamed: &[],
    },
];

/// Values the chart must refuse, and a word of the message that says why.
pub(super) const REFUSED: &[(&[&str], &str)] = &[
    (
        &["replicaCount=2", "leaderElection.enabled=false"],
        "leaderElection",
    ),
    (&["logFormat=xml"], "logFormat"),
    (&["scope=cluster"], "scope"),
    (
        &["analysis.allowedAddresses={prometheus:9090}"],
        "allowedAddresses",
    ),
    (
        &["policy.enabled=true", "policy.allowedGroups=null"],
        "allowedGroups",
    ),
    (&["replicas=2"], "replicas"),
    (&["notifications.receivers[0].name=audit"], "urlSecret"),
    (
        &[
            "notifications.receivers[0].name=audit",
            "notifications.receivers[0].url=ftp://hooks.example.com/",
        ],
        "/notifications/receivers/0/url",
    ),
    (
        &["mode=observe-kubevirt", "policy.enabled=true"],
        "policy.enabled needs mode=controller",
    ),
    (
        &["mode=observe-kubevirt", "scope=Namespace"],
        "scope=Namespace needs mode=controller",
    ),
];

/// Labels that say who installed an object (kustomize's `labels:` or Helm's release), not what
/// it is: left out of the comparison in the object's own `metadata.labels` only. Selectors and
/// pod templates must be the same, so that Helm can adopt a kustomize install without replacing
/// anything (a Deployment's selector cannot change).
pub(super) const INSTALLER_LABELS: &[&str] = &[
    "app.kubernetes.io/instance",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/part-of",
    "app.kubernetes.io/version",
    "helm.sh/chart",
];

/// Helm's annotation that keeps the CRD when the release is uninstalled.
const KEEP_POLICY: &str = "helm.sh/resource-policy";

/// The `helm` command with its homes under `target/helm-home/`.
pub(crate) fn helm_env(sh: &Shell) -> Result<Vec<xshell::PushEnv<'_>>> {
    let home = crate::tools::target_dir()?.join("helm-home");
    Ok(["HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME"]
        .iter()
        .zip(["cache", "config", "data"])
        .map(|(var, dir)| sh.push_env(var, home.join(dir)))
        .collect())
}

/// `--set` arguments for `values`.
fn set_args(values: &[&str]) -> Vec<String> {
    values
        .iter()
        .flat_map(|v| ["--set".to_owned(), (*v).to_owned()])
        .collect()
}

/// Renders every variant into `work/helm/<variant>.yaml` and parses it.
pub(super) fn render_all(sh: &Shell, work: &Path, helm: &Path) -> Result<Vec<Build>> {
    let _homes = helm_env(sh)?;
    let dir = work.join("helm");
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut renders = Vec::new();
    for variant in VARIANTS {
        let (release, namespace) = (variant.release, variant.namespace);
        let sets = set_args(variant.values);
        let output = cmd!(
            sh,
            "{helm} template {release} {CHART} --namespace {namespace} {sets...}"
        )
        .quiet()
        .read()
        .with_context(|| format!("helm template of {CHART} ({}) failed", variant.name))?;
        let file = dir.join(format!("{}.yaml", variant.name));
        std::fs::write(&file, &output)
            .with_context(|| format!("cannot write {}", file.display()))?;
        let documents = parse_documents(&output)
            .with_context(|| format!("cannot parse the render of {}", variant.name))?;
        eprintln!(
            "rendered {CHART} ({:<21}) {} objects",
            variant.name,
            documents.len()
        );
        renders.push(Build {
            dir: render_name(variant),
            documents,
        });
    }
    Ok(renders)
}

/// How a render is named in messages: the chart and the variant.
fn render_name(variant: &Variant) -> PathBuf {
    PathBuf::from(format!("{CHART}[{}]", variant.name))
}

/// The rendered files, for checkov.
pub(super) fn rendered_files(work: &Path) -> Vec<PathBuf> {
    VARIANTS
        .iter()
        .map(|v| work.join("helm").join(format!("{}.yaml", v.name)))
        .collect()
}

pub(super) fn check(context: &Lint) -> Result<()> {
    let helm = &context.helm;
    let sh = &context.sh;
    let _homes = helm_env(sh)?;
    let mut problems = Vec::new();
    for variant in VARIANTS {
        let namespace = variant.namespace;
        let sets = set_args(variant.values);
        let output = cmd!(
            sh,
            "{helm} lint --strict {CHART} --namespace {namespace} {sets...}"
        )
        .quiet()
        .ignore_status()
        .output()?;
        let report = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        if output.status.success() {
            eprintln!("helm lint --strict ({}): passed", variant.name);
        } else {
            problems.push(format!("helm lint --strict ({}):\n{report}", variant.name));
        }
    }
    for (values, word) in REFUSED {
        let sets = set_args(values);
        let output = cmd!(sh, "{helm} template refused {CHART} {sets...}")
            .quiet()
            .ignore_status()
            .output()?;
        let stderr = String::from_utf8_lossy(&output.stderr);
        if output.status.success() || !stderr.contains(word) {
            problems.push(format!(
                "helm template with {values:?} should fail naming {word:?}; it {}: {stderr}",
                if output.status.success() {
                    "passed"
                } else {
                    "failed otherwise"
                }
            ));
        } else {
            eprintln!("refused {values:?}: {}", first_line(&stderr));
        }
    }
    for (variant, render) in VARIANTS.iter().zip(&context.charts) {
        if variant.same_as.is_empty() {
            continue;
        }
        let mut expected = Vec::new();
        for dir in variant.same_as {
            let build = context
                .builds
                .iter()
                .find(|b| b.dir == Path::new(dir))
                .with_context(|| format!("no kustomize build of {dir}"))?;
            expected.extend(build.documents.iter());
        }
        let differences = compare(variant, &render.documents, &expected);
        if differences.is_empty() {
            eprintln!(
                "{} installs the same {} objects as {}",
                render.dir.display(),
                render.documents.len(),
                variant.same_as.join(" + ")
            );
        } else {
            problems.push(format!(
                "{} differs from {}:\n  {}",
                render.dir.display(),
                variant.same_as.join(" + "),
                differences.join("\n  ")
            ));
        }
    }
    ensure!(problems.is_empty(), "{}", problems.join("\n"));
    Ok(())
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or_default()
}

/// (kind, namespace, name) of an object.
type Key = (String, String, String);

fn key(object: &Value) -> Key {
    let text = |pointer: &str| {
        object
            .pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    (
        kind(object).to_owned(),
        text("/metadata/namespace"),
        text("/metadata/name"),
    )
}

/// Every difference between the chart's `rendered` objects and the kustomize builds'
/// `expected` ones, as lines; empty when they are the same objects.
pub(super) fn compare(variant: &Variant, rendered: &[Value], expected: &[&Value]) -> Vec<String> {
    let rename = |key: Key| -> Key {
        let (kind_name, namespace, name) = key;
        let name = variant
            .renamed
            .iter()
            .find(|(k, chart_name, _, _)| *k == kind_name && *chart_name == name)
            .map_or(name, |(_, _, kustomize_name, _)| {
                (*kustomize_name).to_owned()
            });
        (kind_name, namespace, name)
    };
    let chart: BTreeMap<Key, Value> = rendered
        .iter()
        .map(|o| {
            let mut object = normalized(o);
            for (_, chart_name, kustomize_name, _) in variant.renamed {
                rename_references(&mut object, chart_name, kustomize_name);
            }
            (rename(key(o)), object)
        })
        .collect();
    let kustomize: BTreeMap<Key, Value> =
        expected.iter().map(|o| (key(o), normalized(o))).collect();
    let mut differences = Vec::new();
    for (key, object) in &kustomize {
        let excused = variant
            .not_in_chart
            .iter()
            .any(|(k, name, _)| *k == key.0 && *name == key.2);
        match chart.get(key) {
            None if excused => {}
            None => differences.push(format!("{} {}/{}: not in the chart", key.0, key.1, key.2)),
            Some(_) if excused => differences.push(format!(
                "{} {}/{}: in the chart although the variant says it is not",
                key.0, key.1, key.2
            )),
            Some(rendered) => {
                let mut paths = Vec::new();
                diff(rendered, object, String::new(), &mut paths);
                for path in paths.into_iter().take(10) {
                    differences.push(format!("{} {}/{}: {path}", key.0, key.1, key.2));
                }
            }
        }
    }
    for key in chart.keys().filter(|k| !kustomize.contains_key(*k)) {
        differences.push(format!("{} {}/{}: only in the chart", key.0, key.1, key.2));
    }
    differences
}

/// Every string of `value` that is `from` becomes `to`: a renamed object's own name and the
/// references to it (a binding's roleRef).
fn rename_references(value: &mut Value, from: &str, to: &str) {
    match value {
        Value::String(text) if text == from => *text = to.to_owned(),
        Value::Object(map) => map
            .values_mut()
            .for_each(|v| rename_references(v, from, to)),
        Value::Array(items) => items
            .iter_mut()
            .for_each(|v| rename_references(v, from, to)),
        _ => {}
    }
}

/// `object` without what says who installed it: [`INSTALLER_LABELS`] in its own labels, Helm's
/// keep policy, and the label and annotation maps this leaves empty.
fn normalized(object: &Value) -> Value {
    let mut copy = object.clone();
    if let Some(metadata) = copy.get_mut("metadata").and_then(Value::as_object_mut) {
        if let Some(labels) = metadata.get_mut("labels").and_then(Value::as_object_mut) {
            for label in INSTALLER_LABELS {
                labels.remove(*label);
            }
        }
        if let Some(annotations) = metadata
            .get_mut("annotations")
            .and_then(Value::as_object_mut)
        {
            annotations.remove(KEEP_POLICY);
        }
        for field in ["labels", "annotations"] {
            if metadata
                .get(field)
                .and_then(Value::as_object)
                .is_some_and(Map::is_empty)
            {
                metadata.remove(field);
            }
        }
    }
    copy
}

/// JSON pointers where `a` and `b` differ, with both values (short).
fn diff(a: &Value, b: &Value, path: String, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                let child = format!("{path}/{}", k.replace('~', "~0").replace('/', "~1"));
                match (x.get(k), y.get(k)) {
                    (Some(p), Some(q)) => diff(p, q, child, out),
                    (Some(p), None) => {
                        out.push(format!("{child}: chart {}, deploy/ none", short(p)))
                    }
                    (None, Some(q)) => {
                        out.push(format!("{child}: chart none, deploy/ {}", short(q)))
                    }
                    (None, None) => {}
                }
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                diff(p, q, format!("{path}/{i}"), out);
            }
        }
        _ if a != b => out.push(format!("{path}: chart {}, deploy/ {}", short(a), short(b))),
        _ => {}
    }
}

fn short(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() > 120 {
        format!("{}…", text.chars().take(120).collect::<String>())
    } else {
        text
    }
}

/// ServiceMonitors of each render select a Service of the same render, by a port it has.
pub(super) fn check_service_monitors(context: &Lint) -> Result<()> {
    for render in &context.charts {
        let services: Vec<&Value> = render
            .documents
            .iter()
            .filter(|d| kind(d) == "Service")
            .collect();
        for monitor in render
            .documents
            .iter()
            .filter(|d| kind(d) == "ServiceMonitor")
        {
            super::custom_resources::check_service_monitor(monitor, &services)
                .with_context(|| format!("in {}", render.dir.display()))?;
            eprintln!(
                "ok {} ({}) scrapes a Service port by name",
                describe(monitor),
                render.dir.display()
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn variant() -> Variant {
        Variant {
            name: "test",
            release: "r",
            namespace: "ns",
            values: &[],
            same_as: &["deploy/x"],
            not_in_chart: &[("Namespace", "ns", "by helm")],
            renamed: &[("ClusterRole", "reader-ns", "reader", "per namespace")],
        }
    }

    #[test]
    fn installer_labels_and_the_keep_policy_are_not_compared() {
        let chart = json!({
            "kind": "Deployment",
            "metadata": {"name": "d", "namespace": "ns", "labels": {
                "app.kubernetes.io/name": "x", "helm.sh/chart": "c-1", "app.kubernetes.io/instance": "r"}},
            "spec": {"selector": {"matchLabels": {"app.kubernetes.io/name": "x"}}},
        });
        let kustomize = json!({
            "kind": "Deployment",
            "metadata": {"name": "d", "namespace": "ns", "labels": {
                "app.kubernetes.io/name": "x", "app.kubernetes.io/managed-by": "kustomize"}},
            "spec": {"selector": {"matchLabels": {"app.kubernetes.io/name": "x"}}},
        });
        assert!(compare(&variant(), std::slice::from_ref(&chart), &[&kustomize]).is_empty());
        let crd = |annotations: Value| {
            json!({"kind": "CustomResourceDefinition",
            "metadata": {"name": "c", "annotations": annotations}})
        };
        let kept = crd(json!({KEEP_POLICY: "keep"}));
        assert!(compare(&variant(), &[kept], &[&crd(json!({}))]).is_empty());
        // In a selector the release's label is a difference: Helm could not adopt the
        // kustomize Deployment, whose selector cannot change.
        let mut selecting_the_release = chart;
        selecting_the_release["spec"]["selector"]["matchLabels"]["app.kubernetes.io/instance"] =
            json!("r");
        let differences = compare(&variant(), &[selecting_the_release], &[&kustomize]);
        assert_eq!(differences.len(), 1, "{differences:?}");
        assert!(differences[0].contains("/spec/selector/matchLabels/app.kubernetes.io~1instance"));
    }

    #[test]
    fn every_other_difference_fails_with_its_path() {
        let object = |image: &str| {
            json!({"kind": "Deployment", "metadata": {"name": "d", "namespace": "ns"},
            "spec": {"template": {"spec": {"containers": [{"name": "m", "image": image}]}}}})
        };
        let differences = compare(&variant(), &[object("a:1")], &[&object("a:2")]);
        assert_eq!(differences.len(), 1, "{differences:?}");
        assert!(
            differences[0].contains("/spec/template/spec/containers/0/image"),
            "{differences:?}"
        );
        let missing = json!({"kind": "Service", "metadata": {"name": "s", "namespace": "ns"}});
        let extra = json!({"kind": "Secret", "metadata": {"name": "s", "namespace": "ns"}});
        let differences = compare(&variant(), &[extra], &[&missing]);
        assert!(
            differences
                .iter()
                .any(|d| d.contains("Service ns/s: not in the chart"))
        );
        assert!(
            differences
                .iter()
                .any(|d| d.contains("Secret ns/s: only in the chart"))
        );
    }

    #[test]
    fn excused_and_renamed_objects_are_matched_as_the_variant_says() {
        let namespace = json!({"kind": "Namespace", "metadata": {"name": "ns"}});
        let role =
            |name: &str| json!({"kind": "ClusterRole", "metadata": {"name": name}, "rules": []});
        assert!(
            compare(
                &variant(),
                &[role("reader-ns")],
                &[&namespace, &role("reader")]
            )
            .is_empty()
        );
        // An excused object the chart renders after all is a difference: the excuse is stale.
        let differences = compare(&variant(), std::slice::from_ref(&namespace), &[&namespace]);
        assert_eq!(differences.len(), 1, "{differences:?}");
    }

    #[test]
    fn every_comparison_names_kustomize_builds_of_deploy() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        for variant in VARIANTS {
            for dir in variant.same_as {
                assert!(
                    root.join(dir).join("kustomization.yaml").is_file(),
                    "{}: {dir}",
                    variant.name
                );
            }
        }
    }
}
