//! RBAC stays least-privilege: no wildcard, no non-resource URL, no Secret access but `get` of
//! named Secrets through a namespaced Role (the notification receivers' Secrets, in the
//! controller's own namespace), no escalate/bind/impersonate, and leases only through a
//! namespaced Role; in the kustomize builds and the chart's renders alike.

use super::{Lint, describe, kind};
use anyhow::{Result, ensure};
use serde_json::Value;

pub(super) fn check(context: &Lint) -> Result<()> {
    let roles: Vec<&Value> = context
        .every_document()
        .filter(|d| matches!(kind(d), "ClusterRole" | "Role"))
        .collect();
    ensure!(!roles.is_empty(), "no Role or ClusterRole in any build");
    let problems: Vec<String> = roles.iter().flat_map(|role| rbac_problems(role)).collect();
    ensure!(problems.is_empty(), "{}", problems.join("\n"));
    eprintln!(
        "{} roles: no wildcard, secrets only named and namespaced, leases only namespaced",
        roles.len()
    );
    Ok(())
}

/// What breaks least privilege in one Role or ClusterRole.
pub(super) fn rbac_problems(role: &Value) -> Vec<String> {
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
        // The one Secret access allowed: `get` of Secrets named one by one, in one namespace.
        let named_get = kind(role) == "Role"
            && verbs.iter().all(|v| v == "get")
            && !list("resourceNames").is_empty();
        if resources.iter().any(|r| r == "secrets") && !named_get {
            problems.push(format!(
                "{where_}: grants access to Secrets (only get of named Secrets through a Role)"
            ));
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
        let named = json!([{ "apiGroups": [""], "resources": ["secrets"], "resourceNames": ["hooks"], "verbs": ["get"] }]);
        assert!(rbac_problems(&role("Role", named.clone())).is_empty());
        assert_eq!(rbac_problems(&role("ClusterRole", named)).len(), 1);
        let listed = json!([{ "apiGroups": [""], "resources": ["secrets"], "resourceNames": ["hooks"], "verbs": ["get", "list"] }]);
        assert_eq!(rbac_problems(&role("Role", listed)).len(), 1);
        let leases = json!([{
            "apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get"]
        }]);
        assert!(rbac_problems(&role("Role", leases.clone())).is_empty());
        assert_eq!(rbac_problems(&role("ClusterRole", leases)).len(), 1);
    }
}
