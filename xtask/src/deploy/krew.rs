//! The krew plugin manifest, `deploy/krew/canary.yaml`, has what krew requires of a plugin
//! manifest: the rules of krew's own validation (`ValidatePlugin` and `validate-krew-manifest`,
//! which the krew-index runs on every plugin), written out here because krew is not built on
//! these machines:
//! - `apiVersion: krew.googlecontainertools.github.com/v1alpha2`, `kind: Plugin`, a safe name
//!   that is the file's name;
//! - `spec.version` a semantic version with a leading `v`; a one-line `shortDescription`;
//! - `platforms`, each with a selector on `os` and `arch` only that matches a platform krew
//!   supports, and no two selecting the same one; `uri`, a 64-hex `sha256`, `bin`, and `files`
//!   either absent or each with `from` and `to`;
//! - description and caveats lines of at most 80 characters, the short description of at most
//!   70 (krew warns; here they fail).
//!
//! And what keeps the manifest in step with the project: its version, and the version in each
//! URI, is the workspace's.

#![expect(
    clippy::indexing_slicing,
    reason = "only serde_json::Value is indexed here: a missing key or index reads as Null"
)]

use super::Lint;
use anyhow::{Context, Result, ensure};
use serde_json::Value;
use std::path::Path;

/// The manifest.
pub(super) const MANIFEST: &str = "deploy/krew/canary.yaml";

/// The (os, arch) pairs krew installs plugins on.
const PLATFORMS: &[(&str, &str)] = &[
    ("linux", "amd64"),
    ("linux", "arm64"),
    ("linux", "386"),
    ("linux", "arm"),
    ("linux", "ppc64le"),
    ("linux", "s390x"),
    ("darwin", "amd64"),
    ("darwin", "arm64"),
    ("windows", "amd64"),
    ("windows", "arm64"),
    ("windows", "386"),
];

pub(super) fn check(_context: &Lint) -> Result<()> {
    let problems = problems_of_file(Path::new(MANIFEST), env!("CARGO_PKG_VERSION"))?;
    ensure!(problems.is_empty(), "{MANIFEST}:\n{}", problems.join("\n"));
    eprintln!("{MANIFEST} has every field krew requires");
    Ok(())
}

/// The problems of the manifest at `path`, for the workspace version `version`.
fn problems_of_file(path: &Path, version: &str) -> Result<Vec<String>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let manifest: Value =
        serde_saphyr::from_str(&text).with_context(|| format!("{} is not YAML", path.display()))?;
    let file_name = path
        .file_name()
        .and_then(|n| n.to_str())
        .context("the manifest has no file name")?;
    Ok(problems(&manifest, file_name, version))
}

/// What krew would refuse in `manifest`, read from the file `file_name`.
pub(super) fn problems(manifest: &Value, file_name: &str, version: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let text = |pointer: &str| {
        manifest
            .pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    if text("/apiVersion") != "krew.googlecontainertools.github.com/v1alpha2" {
        problems.push(format!(
            "apiVersion {:?} is not krew's v1alpha2",
            text("/apiVersion")
        ));
    }
    if text("/kind") != "Plugin" {
        problems.push(format!("kind {:?} is not Plugin", text("/kind")));
    }
    let name = text("/metadata/name");
    let safe = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if !safe {
        problems.push(format!(
            "metadata.name {name:?} is not a safe plugin name ([\\w-]+)"
        ));
    }
    match file_name.strip_suffix(".yaml") {
        Some(stem) if stem == name => {}
        _ => problems.push(format!(
            "the file {file_name} is not named after the plugin ({name}.yaml)"
        )),
    }
    let short = text("/spec/shortDescription");
    if short.is_empty() || short.contains(['\r', '\n']) {
        problems.push("spec.shortDescription must be one non-empty line".to_owned());
    }
    for (field, limit) in [
        ("shortDescription", 70),
        ("description", 80),
        ("caveats", 80),
    ] {
        let pointer = format!("/spec/{field}");
        for line in text(&pointer).lines().filter(|l| l.chars().count() > limit) {
            problems.push(format!(
                "spec.{field} has a line over {limit} characters: {line:?}"
            ));
        }
    }
    let wanted = format!("v{version}");
    let plugin_version = text("/spec/version");
    if !is_semver_with_v(plugin_version) {
        problems.push(format!(
            "spec.version {plugin_version:?} is not a semantic version vX.Y.Z"
        ));
    } else if plugin_version != wanted {
        problems.push(format!(
            "spec.version {plugin_version} is not the workspace's {wanted}"
        ));
    }
    let platforms = manifest
        .pointer("/spec/platforms")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if platforms.is_empty() {
        problems.push("spec.platforms is empty".to_owned());
    }
    let mut selected = vec![0_usize; PLATFORMS.len()];
    for (index, platform) in platforms.iter().enumerate() {
        let at = |what: String| format!("spec.platforms[{index}]: {what}");
        let field = |name: &str| platform[name].as_str().unwrap_or_default();
        let uri = field("uri");
        if !uri.starts_with("https://") {
            problems.push(at(format!("uri {uri:?} is not an https URL")));
        } else if !uri.contains(&format!("/{wanted}/")) {
            problems.push(at(format!("uri {uri} does not name the version {wanted}")));
        }
        let sha256 = field("sha256");
        if sha256.len() != 64 || !sha256.chars().all(|c| matches!(c, '0'..='9' | 'a'..='f')) {
            problems.push(at(format!(
                "sha256 {sha256:?} is not 64 lowercase hex digits"
            )));
        }
        if field("bin").is_empty() {
            problems.push(at("bin is not set".to_owned()));
        }
        match &platform["files"] {
            Value::Null => {}
            Value::Array(files) if !files.is_empty() => {
                for file in files {
                    if file["from"].as_str().unwrap_or_default().is_empty()
                        || file["to"].as_str().unwrap_or_default().is_empty()
                    {
                        problems.push(at("a files entry lacks from or to".to_owned()));
                    }
                }
            }
            _ => problems.push(at("files must be absent or a non-empty list".to_owned())),
        }
        match selector_problem(&platform["selector"]) {
            Some(problem) => problems.push(at(problem)),
            None => {
                let matches: Vec<usize> = PLATFORMS
                    .iter()
                    .enumerate()
                    .filter(|(_, (os, arch))| selects(&platform["selector"], os, arch))
                    .map(|(i, _)| i)
                    .collect();
                if matches.is_empty() {
                    problems.push(at(
                        "the selector matches no platform krew supports".to_owned()
                    ));
                }
                for i in matches {
                    selected[i] += 1;
                }
            }
        }
    }
    for ((os, arch), count) in PLATFORMS.iter().zip(selected) {
        if count > 1 {
            problems.push(format!("{count} platforms select os={os} arch={arch}"));
        }
    }
    problems
}

/// `vX.Y.Z`, with an optional `-prerelease` or `+build`.
fn is_semver_with_v(version: &str) -> bool {
    let Some(rest) = version.strip_prefix('v') else {
        return false;
    };
    let core = rest.split(['-', '+']).next().unwrap_or_default();
    let parts: Vec<&str> = core.split('.').collect();
    parts.len() == 3
        && parts.iter().all(|p| {
            !p.is_empty()
                && p.chars().all(|c| c.is_ascii_digit())
                && (p == &"0" || !p.starts_with('0'))
        })
}

/// Why krew refuses a platform selector, if it does: absent or empty, a key other than `os`
/// and `arch`, an empty `matchLabels` or `matchExpressions`.
fn selector_problem(selector: &Value) -> Option<String> {
    let Some(selector) = selector.as_object() else {
        return Some("no selector".to_owned());
    };
    let labels = selector.get("matchLabels");
    let expressions = selector.get("matchExpressions");
    let label_keys: Vec<&String> = labels
        .and_then(Value::as_object)
        .into_iter()
        .flat_map(|m| m.keys())
        .collect();
    let expression_keys: Vec<&str> = expressions
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|e| e["key"].as_str())
        .collect();
    if label_keys.is_empty() && expression_keys.is_empty() {
        return Some("an empty selector".to_owned());
    }
    if let Some(key) = label_keys
        .iter()
        .map(|k| k.as_str())
        .chain(expression_keys)
        .find(|k| !matches!(*k, "os" | "arch"))
    {
        return Some(format!("the selector key {key:?} is not os or arch"));
    }
    None
}

/// Whether `selector` selects `os`/`arch` (matchLabels, and matchExpressions with In or NotIn).
fn selects(selector: &Value, os: &str, arch: &str) -> bool {
    let value_of = |key: &str| match key {
        "os" => Some(os),
        "arch" => Some(arch),
        _ => None,
    };
    let labels_match = selector["matchLabels"]
        .as_object()
        .into_iter()
        .flatten()
        .all(|(key, value)| value_of(key) == value.as_str());
    let expressions_match = selector["matchExpressions"]
        .as_array()
        .into_iter()
        .flatten()
        .all(|expression| {
            let values: Vec<&str> = expression["values"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            let value = expression["key"].as_str().and_then(value_of);
            match expression["operator"].as_str() {
                Some("In") => value.is_some_and(|v| values.contains(&v)),
                Some("NotIn") => value.is_none_or(|v| !values.contains(&v)),
                Some("Exists") => value.is_some(),
                Some("DoesNotExist") => value.is_none(),
                _ => false,
            }
        });
    labels_match && expressions_match
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_committed_manifest_has_what_krew_requires() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join(MANIFEST);
        let problems = problems_of_file(&path, env!("CARGO_PKG_VERSION")).unwrap();
        assert!(problems.is_empty(), "{problems:#?}");
    }

    fn manifest() -> Value {
        json!({
            "apiVersion": "krew.googlecontainertools.github.com/v1alpha2",
            "kind": "Plugin",
            "metadata": {"name": "canary"},
            "spec": {
                "version": "v1.2.3",
                "shortDescription": "Steer canaries",
                "platforms": [{
                    "selector": {"matchLabels": {"os": "linux", "arch": "amd64"}},
                    "uri": "https://example.com/download/v1.2.3/a.tar.gz",
                    "sha256": "a".repeat(64),
                    "bin": "daemonset-canary",
                }],
            },
        })
    }

    #[test]
    fn a_minimal_manifest_passes() {
        assert_eq!(
            problems(&manifest(), "canary.yaml", "1.2.3"),
            Vec::<String>::new()
        );
    }

    #[test]
    fn each_rule_of_krew_is_enforced() {
        let broken = |edit: &dyn Fn(&mut Value), file: &str| {
            let mut m = manifest();
            edit(&mut m);
            problems(&m, file, "1.2.3")
        };
        let cases: Vec<(&str, Vec<String>)> = vec![
            (
                "apiVersion",
                broken(&|m| m["apiVersion"] = json!("v1"), "canary.yaml"),
            ),
            (
                "kind",
                broken(&|m| m["kind"] = json!("Tool"), "canary.yaml"),
            ),
            ("named after", broken(&|_| {}, "other.yaml")),
            (
                "safe plugin name",
                broken(&|m| m["metadata"]["name"] = json!("a/b"), "a/b.yaml"),
            ),
            (
                "one non-empty line",
                broken(
                    &|m| m["spec"]["shortDescription"] = json!("a\nb"),
                    "canary.yaml",
                ),
            ),
            (
                "semantic version",
                broken(&|m| m["spec"]["version"] = json!("1.2.3"), "canary.yaml"),
            ),
            (
                "workspace's",
                broken(
                    &|m| {
                        m["spec"]["version"] = json!("v1.2.4");
                    },
                    "canary.yaml",
                ),
            ),
            (
                "64 lowercase hex",
                broken(
                    &|m| m["spec"]["platforms"][0]["sha256"] = json!("ABC"),
                    "canary.yaml",
                ),
            ),
            (
                "bin",
                broken(
                    &|m| m["spec"]["platforms"][0]["bin"] = json!(""),
                    "canary.yaml",
                ),
            ),
            (
                "https",
                broken(
                    &|m| m["spec"]["platforms"][0]["uri"] = json!("http://x/v1.2.3/a"),
                    "canary.yaml",
                ),
            ),
            (
                "does not name the version",
                broken(
                    &|m| m["spec"]["platforms"][0]["uri"] = json!("https://x/v9/a"),
                    "canary.yaml",
                ),
            ),
            (
                "non-empty list",
                broken(
                    &|m| m["spec"]["platforms"][0]["files"] = json!([]),
                    "canary.yaml",
                ),
            ),
            (
                "lacks from or to",
                broken(
                    &|m| m["spec"]["platforms"][0]["files"] = json!([{"from": "a"}]),
                    "canary.yaml",
                ),
            ),
            (
                "not os or arch",
                broken(
                    &|m| {
                        m["spec"]["platforms"][0]["selector"] =
                            json!({"matchLabels": {"distro": "x"}})
                    },
                    "canary.yaml",
                ),
            ),
            (
                "empty selector",
                broken(
                    &|m| m["spec"]["platforms"][0]["selector"] = json!({}),
                    "canary.yaml",
                ),
            ),
            (
                "no platform krew supports",
                broken(
                    &|m| {
                        m["spec"]["platforms"][0]["selector"] =
                            json!({"matchLabels": {"os": "plan9"}})
                    },
                    "canary.yaml",
                ),
            ),
            (
                "platforms select",
                broken(
                    &|m| {
                        let again = m["spec"]["platforms"][0].clone();
                        m["spec"]["platforms"].as_array_mut().unwrap().push(again);
                    },
                    "canary.yaml",
                ),
            ),
            (
                "over 80",
                broken(
                    &|m| m["spec"]["description"] = json!("x ".repeat(41)),
                    "canary.yaml",
                ),
            ),
            (
                "empty",
                broken(&|m| m["spec"]["platforms"] = json!([]), "canary.yaml"),
            ),
        ];
        for (expected, found) in cases {
            assert!(
                found.iter().any(|p| p.contains(expected)),
                "expected a problem naming {expected:?}, found {found:?}"
            );
        }
    }

    #[test]
    fn selectors_match_as_label_selectors_do() {
        let expression = json!({"matchExpressions": [{"key": "os", "operator": "In", "values": ["linux", "darwin"]}]});
        assert!(selects(&expression, "linux", "arm64"));
        assert!(!selects(&expression, "windows", "amd64"));
        let not_in =
            json!({"matchExpressions": [{"key": "arch", "operator": "NotIn", "values": ["386"]}]});
        assert!(selects(&not_in, "linux", "amd64"));
        assert!(!selects(&not_in, "linux", "386"));
        assert!(is_semver_with_v("v0.1.0") && is_semver_with_v("v1.0.0-rc.1"));
        assert!(!is_semver_with_v("v01.0.0") && !is_semver_with_v("v1.0"));
    }
}
