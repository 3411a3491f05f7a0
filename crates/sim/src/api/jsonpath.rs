//! The JSONPath subset CRD printer columns use (`additionalPrinterColumns[].jsonPath`, which the
//! API server evaluates with `staging/src/k8s.io/client-go/util/jsonpath` and which the CRD
//! validation limits to "simple" paths): `.field`, `['field.with.dots']`, `[0]`, `[*]` and
//! filters `[?(@.path=="value")]` (or `!=`).
//!
//! Invariant: a missing key yields no result, never an error (`AllowMissingKeys(true)`).

use serde_json::Value;

/// One step of a path.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Step {
    Field(String),
    Index(usize),
    All,
    Filter {
        path: Vec<String>,
        value: String,
        equal: bool,
    },
}

/// A parsed path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JsonPath(Vec<Step>);

impl JsonPath {
    /// Parses `text` (`.status.phase`, with or without the `{...}` braces kubectl uses).
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        let text = text
            .strip_prefix('{')
            .and_then(|t| t.strip_suffix('}'))
            .unwrap_or(text);
        let mut steps = Vec::new();
        let mut rest = text.strip_prefix('$').unwrap_or(text);
        while !rest.is_empty() {
            if let Some(after) = rest.strip_prefix('.') {
                let end = after.find(['.', '[']).unwrap_or(after.len());
                let (field, tail) = after.split_at(end);
                if !field.is_empty() {
                    steps.push(Step::Field(field.to_owned()));
                }
                rest = tail;
            } else if let Some(after) = rest.strip_prefix('[') {
                let end = closing_bracket(after).ok_or_else(|| format!("unclosed [ in {text}"))?;
                steps.push(parse_bracket(&after[..end])?);
                rest = &after[end + 1..];
            } else {
                return Err(format!("unexpected {rest:?} in {text}"));
            }
        }
        Ok(Self(steps))
    }

    /// Every value the path reaches in `root`, in document order.
    pub fn find<'a>(&self, root: &'a Value) -> Vec<&'a Value> {
        let mut current = vec![root];
        for step in &self.0 {
            current = current
                .into_iter()
                .flat_map(|value| apply(step, value))
                .collect();
        }
        current
    }
}

fn closing_bracket(text: &str) -> Option<usize> {
    let mut quote = None;
    for (index, c) in text.char_indices() {
        match (quote, c) {
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, ']') => return Some(index),
            _ => {}
        }
    }
    None
}

fn unquote(text: &str) -> &str {
    let text = text.trim();
    text.strip_prefix('"')
        .and_then(|t| t.strip_suffix('"'))
        .or_else(|| text.strip_prefix('\'').and_then(|t| t.strip_suffix('\'')))
        .unwrap_or(text)
}

fn parse_bracket(inner: &str) -> Result<Step, String> {
    let inner = inner.trim();
    if inner == "*" {
        return Ok(Step::All);
    }
    if let Some(filter) = inner.strip_prefix("?(").and_then(|f| f.strip_suffix(')')) {
        let (left, right, equal) = match filter.split_once("!=") {
            Some((l, r)) => (l, r, false),
            None => {
                let (l, r) = filter
                    .split_once("==")
                    .ok_or_else(|| format!("unsupported filter {filter}"))?;
                (l, r, true)
            }
        };
        let path = left
            .trim()
            .strip_prefix('@')
            .ok_or_else(|| format!("a filter starts with @: {filter}"))?;
        let path = path
            .split('.')
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect();
        return Ok(Step::Filter {
            path,
            value: unquote(right).to_owned(),
            equal,
        });
    }
    if inner.starts_with(['"', '\'']) {
        return Ok(Step::Field(unquote(inner).to_owned()));
    }
    inner
        .parse()
        .map(Step::Index)
        .map_err(|_| format!("unsupported subscript [{inner}]"))
}

fn apply<'a>(step: &Step, value: &'a Value) -> Vec<&'a Value> {
    match step {
        Step::Field(name) => value.get(name).into_iter().collect(),
        Step::Index(index) => value.get(index).into_iter().collect(),
        Step::All => match value {
            Value::Array(items) => items.iter().collect(),
            Value::Object(map) => map.values().collect(),
            _ => Vec::new(),
        },
        Step::Filter {
            path,
            value: wanted,
            equal,
        } => value
            .as_array()
            .into_iter()
            .flatten()
            .filter(|item| {
                let found = path.iter().try_fold(*item, |v, segment| v.get(segment));
                let text = found.map(|v| match v {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                });
                (text.as_deref() == Some(wanted.as_str())) == *equal
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn eval(path: &str, value: &Value) -> Vec<Value> {
        JsonPath::parse(path)
            .unwrap()
            .find(value)
            .into_iter()
            .cloned()
            .collect()
    }

    #[test]
    fn simple_paths_indexes_and_filters() {
        let object = json!({
            "metadata": {"name": "a", "labels": {"app.kubernetes.io/name": "x"}},
            "status": {"phase": "canary", "conditions": [
                {"type": "Progressing", "status": "True"},
                {"type": "Available", "status": "False"},
            ]},
        });
        assert_eq!(eval(".status.phase", &object), [json!("canary")]);
        assert_eq!(eval("{.metadata.name}", &object), [json!("a")]);
        assert_eq!(eval(".status.missing", &object), Vec::<Value>::new());
        assert_eq!(
            eval(".status.conditions[1].type", &object),
            [json!("Available")]
        );
        assert_eq!(
            eval(
                ".status.conditions[?(@.type==\"Available\")].status",
                &object
            ),
            [json!("False")]
        );
        assert_eq!(
            eval(".status.conditions[?(@.type!='Available')].type", &object),
            [json!("Progressing")]
        );
        assert_eq!(eval(".status.conditions[*].status", &object).len(), 2);
        assert_eq!(
            eval(".metadata.labels['app.kubernetes.io/name']", &object),
            [json!("x")]
        );
        assert!(JsonPath::parse(".a[").is_err());
        assert!(JsonPath::parse(".a[x]").is_err());
    }
}
