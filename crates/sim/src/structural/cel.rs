//! CEL validation rules (`x-kubernetes-validations`) of a structural schema, run as
//! kube-apiserver runs them (`apiextensions-apiserver/pkg/apiserver/schema/cel/validation.go`),
//! with the `cel` crate as the interpreter.
//!
//! Every value with rules is checked, the root first, then the values under it (an object's
//! `additionalProperties` values, then its declared properties; a list's items). A rule sees
//! `self`, the value typed by its schema as the API server types it: an object with declared
//! properties shows only those, a `null` one as absent (`has()` is false); a map under
//! `additionalProperties` shows every key; `number` is a double even when written `1`;
//! `x-kubernetes-int-or-string` is an int or a string; the resource root shows `apiVersion`,
//! `kind` and `metadata.name`/`generateName` besides its declared properties. A rule that
//! reads `oldSelf` (a transition rule) runs only on an update, where the old object has a value
//! at the same place (matched by key; list items are not matched, as for a list that is not
//! `x-kubernetes-list-type: map`).
//!
//! A rule that is false gives `Invalid value: <value>: <message>` (the value left out for an
//! object or a list) at its value's path (`<nil>` for the root), or the `reason` it names; the
//! message is `messageExpression`'s result when that gives one line of text, else `message`,
//! else `failed rule: <rule>`. A rule that cannot be evaluated gives `<error> evaluating rule:
//! <message or rule>`. Ratcheting: on an update, a rule without `oldSelf` that fails on a value
//! equal to its old value (or inside one) is a warning, not an error.
//!
//! Not modelled: the cost budget (no rule is stopped), the type check at CRD creation (a rule
//! that does not compile fails every write that reaches it with `rule compile error`), the
//! string formats `byte`, `duration`, `date` and `date-time` as CEL types (they are strings),
//! `optionalOldSelf`, `fieldPath` other than a dotted path, list types `set` and `map`, and
//! the Kubernetes CEL libraries beyond the standard ones (`quantity`, `url`, `ip`, ...).

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use cel::objects::{Key, Map as CelMap};
use cel::{Context, Env, ExecutionError, Program, Value as CelValue};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::ValidationRule;
use serde_json::{Map, Value};

use super::field::{BadValue, FieldError, FieldErrorType};
use super::{Additional, StructuralSchema};

/// The longest message a `messageExpression` may give (`MaxEvaluatedMessageExpressionSizeBytes`).
const MAX_MESSAGE_EXPRESSION_BYTES: usize = 5 * 1024;

/// The standard CEL environment, built once.
static ENV: LazyLock<Arc<Env>> = LazyLock::new(|| Arc::new(Env::stdlib()));

/// A CEL expression compiled once; its error text when it does not compile.
#[derive(Clone, Debug)]
struct Compiled {
    source: String,
    program: Result<Arc<Program>, String>,
}

impl Compiled {
    fn new(source: &str) -> Self {
        Self {
            source: source.to_owned(),
            program: Program::compile(source)
                .map(Arc::new)
                .map_err(|error| error.to_string()),
        }
    }
}

/// One `x-kubernetes-validations` entry.
#[derive(Clone, Debug)]
pub(super) struct Rule {
    rule: Compiled,
    message: String,
    message_expression: Option<Compiled>,
    reason: FieldErrorType,
    /// `fieldPath`, without its leading dot: where a failure is reported, under the value.
    field_path: Option<String>,
    /// Whether the rule reads `oldSelf` (a transition rule).
    uses_old_self: bool,
}

impl PartialEq for Rule {
    fn eq(&self, other: &Self) -> bool {
        self.rule.source == other.rule.source
            && self.message == other.message
            && self.message_expression.as_ref().map(|m| &m.source)
                == other.message_expression.as_ref().map(|m| &m.source)
            && self.reason == other.reason
            && self.field_path == other.field_path
    }
}

impl Rule {
    pub(super) fn new(rule: &ValidationRule) -> Self {
        let compiled = Compiled::new(&rule.rule);
        let uses_old_self = compiled
            .program
            .as_ref()
            .is_ok_and(|program| program.references().has_variable("oldSelf"));
        let reason = match rule.reason.as_deref() {
            Some("FieldValueForbidden") => FieldErrorType::Forbidden,
            Some("FieldValueRequired") => FieldErrorType::Required,
            Some("FieldValueDuplicate") => FieldErrorType::Duplicate,
            _ => FieldErrorType::Invalid,
        };
        Self {
            rule: compiled,
            message: rule.message.as_deref().unwrap_or("").trim().to_owned(),
            message_expression: rule
                .message_expression
                .as_deref()
                .filter(|source| !source.is_empty())
                .map(Compiled::new),
            reason,
            field_path: rule
                .field_path
                .as_deref()
                .map(|path| path.trim_start_matches('.').to_owned())
                .filter(|path| !path.is_empty()),
            uses_old_self,
        }
    }

    /// `ruleErrorString`: the message, else the rule.
    fn error_string(&self) -> &str {
        if self.message.is_empty() {
            self.rule.source.trim()
        } else {
            &self.message
        }
    }

    /// `ruleMessageOrDefault`.
    fn default_message(&self) -> String {
        if self.message.is_empty() {
            format!("failed rule: {}", self.rule.source.trim())
        } else {
            self.message.clone()
        }
    }
}

/// What the rules of a write found.
#[derive(Debug, Default)]
pub(super) struct RuleFindings {
    pub(super) errors: Vec<FieldError>,
    /// Failures of ratcheted rules: the API server sends them as warnings.
    pub(super) warnings: Vec<String>,
}

/// The nearest value, at or above the one checked, that the old object has at the same place:
/// a failure under it is ratcheted when it did not change.
#[derive(Clone, Copy)]
struct Correlation<'a> {
    schema: &'a StructuralSchema,
    value: &'a Value,
    old: &'a Value,
}

impl Correlation<'_> {
    fn unchanged(self) -> bool {
        self.schema.unchanged(self.value, self.old)
    }
}

/// `fldPath.Child(key)`: `key` under `parent`, or `key` when there is no parent (the root).
fn child_path(parent: Option<&str>, key: &str) -> String {
    match parent {
        Some(parent) => format!("{parent}.{key}"),
        None => key.to_owned(),
    }
}

impl StructuralSchema {
    /// Runs the rules of `object`, a whole custom resource, and of every value in it, against
    /// `old` (the stored object, on an update).
    pub(super) fn check_rules(&self, object: &Value, old: Option<&Value>) -> RuleFindings {
        let mut findings = RuleFindings::default();
        if self.has_rules {
            self.check_rules_at(object, old, None, true, None, &mut findings);
        }
        findings
    }

    fn check_rules_at<'a>(
        &'a self,
        value: &'a Value,
        old: Option<&'a Value>,
        path: Option<&str>,
        root: bool,
        nearest: Option<Correlation<'a>>,
        findings: &mut RuleFindings,
    ) {
        if value.is_null() || !self.has_rules {
            return;
        }
        let old = old.filter(|old| !old.is_null());
        let correlation = match old {
            Some(old) => Some(Correlation {
                schema: self,
                value,
                old,
            }),
            None => nearest,
        };
        if !self.rules.is_empty() {
            self.run_rules(value, old, path, root, correlation, findings);
        }
        match value {
            Value::Object(map) => {
                let old_map = old.and_then(Value::as_object);
                let old_of = |key: &str| old_map.and_then(|old| old.get(key));
                if let Some(Additional::Schema(schema)) = &self.additional {
                    for (key, child) in map {
                        let child_path = format!("{}[{key}]", path.unwrap_or(""));
                        let old = old_of(key);
                        schema.check_child_rules(child, old, &child_path, correlation, findings);
                    }
                }
                for (key, child) in map {
                    if let Some(schema) = self.properties.get(key) {
                        let child_path = child_path(path, key);
                        let old = old_of(key);
                        schema.check_child_rules(child, old, &child_path, correlation, findings);
                    }
                }
            }
            Value::Array(items) => {
                if let Some(schema) = &self.items {
                    for (index, item) in items.iter().enumerate() {
                        let item_path = format!("{}[{index}]", path.unwrap_or(""));
                        schema.check_child_rules(item, None, &item_path, correlation, findings);
                    }
                }
            }
            _ => {}
        }
    }

    /// [`check_rules_at`](Self::check_rules_at) for a value below the root (a property, an
    /// additional property or an item) at `path`.
    fn check_child_rules<'a>(
        &'a self,
        value: &'a Value,
        old: Option<&'a Value>,
        path: &str,
        nearest: Option<Correlation<'a>>,
        findings: &mut RuleFindings,
    ) {
        self.check_rules_at(value, old, Some(path), false, nearest, findings);
    }

    /// `validateExpressions`: this value's own rules.
    fn run_rules(
        &self,
        value: &Value,
        old: Option<&Value>,
        path: Option<&str>,
        root: bool,
        correlation: Option<Correlation<'_>>,
        findings: &mut RuleFindings,
    ) {
        let this = self.to_cel(value, root);
        let old_this = old.map(|old| self.to_cel(old, root));
        let type_name = Value::String(self.type_name().to_owned());
        let at = path.unwrap_or("<nil>");
        for rule in &self.rules {
            if rule.uses_old_self && old_this.is_none() {
                continue;
            }
            let program = match &rule.rule.program {
                Ok(program) => program,
                Err(error) => {
                    findings.errors.push(FieldError::invalid(
                        at,
                        &type_name,
                        format!("rule compile error: {error}"),
                    ));
                    continue;
                }
            };
            let outcome = evaluate(program, &this, old_this.as_ref());
            let failure = match outcome {
                Ok(CelValue::Bool(true)) => continue,
                Ok(_) => None,
                Err(error) => Some(FieldError::invalid(
                    at,
                    &type_name,
                    evaluation_error(&error, rule.error_string()),
                )),
            };
            let error = failure.unwrap_or_else(|| {
                let detail = rule
                    .message_expression
                    .as_ref()
                    .and_then(|expression| message_from(expression, &this, old_this.as_ref()))
                    .unwrap_or_else(|| rule.default_message());
                let at = match &rule.field_path {
                    Some(field_path) => child_path(path, field_path),
                    None => at.to_owned(),
                };
                let shown = if matches!(self.type_name(), "object" | "array") {
                    BadValue::Omitted
                } else {
                    BadValue::Value(value.clone())
                };
                match rule.reason {
                    FieldErrorType::Forbidden | FieldErrorType::Required => FieldError::new(
                        rule.reason,
                        at,
                        BadValue::Value(Value::String(String::new())),
                        detail,
                    ),
                    FieldErrorType::Duplicate => FieldError::new(rule.reason, at, shown, ""),
                    _ => FieldError::new(FieldErrorType::Invalid, at, shown, detail),
                }
            });
            let ratcheted = !rule.uses_old_self && correlation.is_some_and(Correlation::unchanged);
            if ratcheted {
                findings.warnings.push(error.to_string());
            } else {
                findings.errors.push(error);
            }
        }
    }

    /// The schema's `type` as the API server names it in an error (empty when it has none).
    fn type_name(&self) -> &'static str {
        match self.constraints.types.as_slice() {
            [one] => one,
            _ => "",
        }
    }

    /// `value` as a CEL value typed by this schema (`UnstructuredToVal`); `root`: the resource
    /// root, which shows its type and object meta.
    fn to_cel(&self, value: &Value, root: bool) -> CelValue {
        match value {
            Value::Null => CelValue::Null,
            Value::Object(map) if !self.properties.is_empty() || root || self.embedded_resource => {
                let mut entries: HashMap<Key, CelValue> = HashMap::with_capacity(map.len());
                for (key, child) in map {
                    if child.is_null() {
                        continue;
                    }
                    if let Some(schema) = self.properties.get(key) {
                        entries.insert(key_of(key), schema.to_cel(child, false));
                    } else if (root || self.embedded_resource)
                        && matches!(key.as_str(), "apiVersion" | "kind")
                    {
                        entries.insert(key_of(key), plain(child));
                    } else if (root || self.embedded_resource) && key == "metadata" {
                        entries.insert(key_of(key), object_meta(child));
                    }
                }
                CelValue::Map(CelMap {
                    map: Arc::new(entries),
                })
            }
            Value::Object(map) => match &self.additional {
                Some(Additional::Schema(schema)) => CelValue::Map(CelMap {
                    map: Arc::new(
                        map.iter()
                            .map(|(key, child)| (key_of(key), schema.to_cel(child, false)))
                            .collect(),
                    ),
                }),
                _ if self.preserve_unknown_fields => plain(value),
                _ => CelValue::Map(CelMap {
                    map: Arc::new(HashMap::new()),
                }),
            },
            Value::Array(items) => CelValue::List(Arc::new(
                items
                    .iter()
                    .map(|item| match &self.items {
                        Some(schema) => schema.to_cel(item, false),
                        None => plain(item),
                    })
                    .collect(),
            )),
            Value::Number(number) if self.type_name() == "number" => {
                CelValue::Float(number.as_f64().unwrap_or(f64::NAN))
            }
            other => plain(other),
        }
    }
}

/// `metadata` as a resource root shows it to a rule: `name` and `generateName` only.
fn object_meta(metadata: &Value) -> CelValue {
    let entries: HashMap<Key, CelValue> = ["name", "generateName"]
        .iter()
        .filter_map(|key| {
            metadata
                .get(*key)
                .filter(|value| !value.is_null())
                .map(|value| (key_of(key), plain(value)))
        })
        .collect();
    CelValue::Map(CelMap {
        map: Arc::new(entries),
    })
}

fn key_of(key: &str) -> Key {
    Key::String(Arc::new(key.to_owned()))
}

/// A JSON value with no schema to type it: integers as ints, other numbers as doubles.
fn plain(value: &Value) -> CelValue {
    match value {
        Value::Null => CelValue::Null,
        Value::Bool(flag) => CelValue::Bool(*flag),
        Value::Number(number) => match number.as_i64() {
            Some(integer) => CelValue::Int(integer),
            None => match number.as_u64() {
                Some(unsigned) => CelValue::UInt(unsigned),
                None => CelValue::Float(number.as_f64().unwrap_or(f64::NAN)),
            },
        },
        Value::String(text) => CelValue::String(Arc::new(text.clone())),
        Value::Array(items) => CelValue::List(Arc::new(items.iter().map(plain).collect())),
        Value::Object(map) => plain_map(map),
    }
}

fn plain_map(map: &Map<String, Value>) -> CelValue {
    CelValue::Map(CelMap {
        map: Arc::new(
            map.iter()
                .map(|(key, value)| (key_of(key), plain(value)))
                .collect(),
        ),
    })
}

/// Runs `program` with `self` (and `oldSelf` on an update).
fn evaluate(
    program: &Program,
    this: &CelValue,
    old: Option<&CelValue>,
) -> Result<CelValue, ExecutionError> {
    let mut context = Context::with_env(ENV.clone());
    context.add_variable_from_value("self", this.clone());
    if let Some(old) = old {
        context.add_variable_from_value("oldSelf", old.clone());
    }
    program.execute(&context)
}

/// The message of a `messageExpression`, when it gives one line of text (`evalMessageExpression`:
/// otherwise the rule's message is used).
fn message_from(expression: &Compiled, this: &CelValue, old: Option<&CelValue>) -> Option<String> {
    let program = expression.program.as_ref().ok()?;
    match evaluate(program, this, old) {
        Ok(CelValue::String(text)) => {
            let trimmed = text.trim();
            (!trimmed.is_empty()
                && !trimmed.contains(['\n', '\r'])
                && trimmed.len() <= MAX_MESSAGE_EXPRESSION_BYTES)
                .then(|| trimmed.to_owned())
        }
        _ => None,
    }
}

/// The detail of a rule that could not be evaluated, in cel-go's words where the `cel` crate's
/// differ (`no such key: x`, `no such overload`).
fn evaluation_error(error: &ExecutionError, rule: &str) -> String {
    match error {
        ExecutionError::NoSuchKey(key) => format!("no such key: {key} evaluating rule: {rule}"),
        ExecutionError::NoSuchOverload(_)
        | ExecutionError::UnsupportedBinaryOperator(..)
        | ExecutionError::ValuesNotComparable(..)
        | ExecutionError::UnexpectedType { .. }
        | ExecutionError::UnsupportedTargetType { .. }
        | ExecutionError::NotSupportedAsMethod { .. } => format!(
            "'no such overload': call arguments did not match a supported operator, function or \
             macro signature for rule: {rule}"
        ),
        other => format!("{other} evaluating rule: {rule}"),
    }
}
