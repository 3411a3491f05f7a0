//! Label and field selectors, as `staging/src/k8s.io/apimachinery/pkg/labels/selector.go` and
//! `.../pkg/fields/selector.go` parse them.

use serde_json::Value;

use crate::store::StoreError;

#[derive(Clone, Debug, PartialEq, Eq)]
enum LabelRequirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed `labelSelector`: every requirement must hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector {
    requirements: Vec<LabelRequirement>,
}

impl LabelSelector {
    /// Whether it selects everything.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Parses `a=b,c!=d,e in (x,y),f notin (z),g,!h` (`==` is accepted for `=`).
    pub fn parse(text: &str) -> Result<Self, StoreError> {
        let mut requirements = Vec::new();
        for term in split_outside_parens(text) {
            let term = term.trim();
            if term.is_empty() {
                continue;
            }
            requirements.push(parse_label_term(term)?);
        }
        Ok(Self { requirements })
    }

    /// Whether the object's `metadata.labels` satisfy the selector.
    pub fn matches(&self, object: &Value) -> bool {
        let labels = object.pointer("/metadata/labels");
        let label = |key: &str| labels.and_then(|l| l.get(key)).and_then(Value::as_str);
        self.requirements.iter().all(|req| match req {
            LabelRequirement::Equals(k, v) => label(k) == Some(v.as_str()),
            LabelRequirement::NotEquals(k, v) => label(k) != Some(v.as_str()),
            LabelRequirement::In(k, vs) => label(k).is_some_and(|l| vs.iter().any(|v| v == l)),
            LabelRequirement::NotIn(k, vs) => label(k).is_none_or(|l| vs.iter().all(|v| v != l)),
            LabelRequirement::Exists(k) => label(k).is_some(),
            LabelRequirement::NotExists(k) => label(k).is_none(),
        })
    }
}

fn split_outside_parens(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

fn bad_selector(term: &str) -> StoreError {
    StoreError::BadRequest {
        message: format!("unable to parse requirement: {term:?}"),
    }
}

fn parse_set(term: &str, rest: &str) -> Result<Vec<String>, StoreError> {
    let inner = rest
        .trim()
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| bad_selector(term))?;
    Ok(inner
        .split(',')
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
        .collect())
}

fn parse_label_term(term: &str) -> Result<LabelRequirement, StoreError> {
    if let Some(key) = term.strip_prefix('!') {
        return Ok(LabelRequirement::NotExists(key.trim().to_owned()));
    }
    if let Some((key, value)) = term.split_once("!=") {
        return Ok(LabelRequirement::NotEquals(
            key.trim().to_owned(),
            value.trim().to_owned(),
        ));
    }
    if let Some((key, value)) = term.split_once("==").or_else(|| term.split_once('=')) {
        return Ok(LabelRequirement::Equals(
            key.trim().to_owned(),
            value.trim().to_owned(),
        ));
    }
    if let Some((key, rest)) = term.split_once(" notin ") {
        return Ok(LabelRequirement::NotIn(
            key.trim().to_owned(),
            parse_set(term, rest)?,
        ));
    }
    if let Some((key, rest)) = term.split_once(" in ") {
        return Ok(LabelRequirement::In(
            key.trim().to_owned(),
            parse_set(term, rest)?,
        ));
    }
    if term.contains(char::is_whitespace) || term.contains('(') {
        return Err(bad_selector(term));
    }
    Ok(LabelRequirement::Exists(term.to_owned()))
}

/// A parsed `fieldSelector`: `path=value`, `path==value` or `path!=value` terms, where `path` is
/// a dotted JSON path (`metadata.name`, `metadata.namespace`, `spec.nodeName`, `status.phase`).
///
/// Kubernetes accepts only a few fields per kind; the simulator accepts any path and compares
/// the value's string form (a missing field reads as `""`, as in Kubernetes).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSelector {
    terms: Vec<(Vec<String>, bool, String)>,
}

impl FieldSelector {
    /// Whether it selects everything.
    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    /// Parses a field selector.
    pub fn parse(text: &str) -> Result<Self, StoreError> {
        let mut terms = Vec::new();
        for term in text.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let (path, equal, value) = if let Some((p, v)) = term.split_once("!=") {
                (p, false, v)
            } else if let Some((p, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
                (p, true, v)
            } else {
                return Err(bad_selector(term));
            };
            let path = path.trim().split('.').map(str::to_owned).collect();
            terms.push((path, equal, value.trim().to_owned()));
        }
        Ok(Self { terms })
    }

    /// Whether the object satisfies every term.
    pub fn matches(&self, object: &Value) -> bool {
        self.terms.iter().all(|(path, equal, value)| {
            let found = path.iter().try_fold(object, |v, segment| v.get(segment));
            let text = match found {
                None | Some(Value::Null) => String::new(),
                Some(Value::String(s)) => s.clone(),
                Some(other) => other.to_string(),
            };
            (text == *value) == *equal
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj() -> Value {
        json!({
            "metadata": {"name": "p", "namespace": "ns", "labels": {"app": "web", "tier": "node"}},
            "spec": {"nodeName": "node-1"},
            "status": {"phase": "Running"}
        })
    }

    #[test]
    fn label_selector_forms() {
        let o = obj();
        let yes = [
            "",
            "app=web",
            "app==web",
            "app!=db",
            "app in (web, db)",
            "tier notin (x)",
            "app",
            "!missing",
            "app=web,tier=node",
        ];
        for s in yes {
            assert!(LabelSelector::parse(s).unwrap().matches(&o), "{s}");
        }
        let no = [
            "app=db",
            "app!=web",
            "app in (db)",
            "app notin (web)",
            "missing",
            "!app",
        ];
        for s in no {
            assert!(!LabelSelector::parse(s).unwrap().matches(&o), "{s}");
        }
        assert!(LabelSelector::parse("app in web").is_err());
    }

    #[test]
    fn field_selector_forms() {
        let o = obj();
        for s in [
            "metadata.name=p",
            "spec.nodeName==node-1",
            "status.phase!=Pending",
            "spec.missing=",
        ] {
            assert!(FieldSelector::parse(s).unwrap().matches(&o), "{s}");
        }
        for s in [
            "metadata.name=q",
            "spec.nodeName=node-2",
            "metadata.namespace!=ns",
        ] {
            assert!(!FieldSelector::parse(s).unwrap().matches(&o), "{s}");
        }
        assert!(FieldSelector::parse("nonsense").is_err());
    }
}
