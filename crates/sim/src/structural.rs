//! The structural schema of one served version of a CustomResourceDefinition, and what the API
//! server does with it to every custom resource written: **pruning** of the fields the schema
//! does not declare (`staging/src/k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning/
//! algorithm.go`), then the removal of `null`s the schema does not allow and **defaulting**
//! (`.../schema/defaulting/prunenulls.go` and `algorithm.go`).
//!
//! The rules, as upstream:
//! - an object keeps the properties its schema declares; any other key goes, unless the schema
//!   has `additionalProperties` (then every value follows that schema) or
//!   `x-kubernetes-preserve-unknown-fields: true` (then unknown keys stay, unpruned);
//! - `apiVersion`, `kind` and `metadata` stay at the resource's root and in an object marked
//!   `x-kubernetes-embedded-resource`;
//! - a list's items follow `items`; a scalar is never pruned;
//! - a `null` where the schema allows none and has no default goes; a missing (or such a
//!   `null`) property with a `default` gets a copy of it, and the copy is defaulted in turn.
//!
//! Pruning reports the paths of what it removed, sorted, in the API server's spelling
//! (`spec.foo`, `spec.items[0].bar`): the `fieldValidation` of a write turns them into warnings
//! or a 400 ([`crate::api`]), the store drops them silently.
//!
//! Invariant: a custom resource written since its CRD's last change carries no field its
//! version's schema does not declare, so pruning it again removes nothing. Not modelled: the
//! coercion of `metadata` (unknown fields inside `metadata` are kept), `allOf`/`anyOf`/`oneOf`
//! (a structural schema repeats their properties at the top level, which is what is read), and
//! pruning and defaulting on read of objects stored before their CRD changed (they change at
//! their next write).

use std::collections::BTreeMap;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};
use serde_json::{Map, Value};

use self::cel::Rule;
pub use self::field::{BadValue, FieldError, FieldErrorType};
use self::validate::Constraints;

mod cel;
pub mod field;
mod validate;

/// The fields kept at a resource root and in an embedded resource, whatever the schema says.
const META_FIELDS: [&str; 3] = ["apiVersion", "kind", "metadata"];

/// What `additionalProperties` allows in an object.
#[derive(Clone, Debug, PartialEq)]
enum Additional {
    /// `additionalProperties: <schema>`: every key, its value following the schema.
    Schema(Box<StructuralSchema>),
    /// `additionalProperties: true`: every key, its value pruned as if it had no schema.
    Any,
}

/// The parts of a JSON schema that pruning, null removal, defaulting and validation read.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StructuralSchema {
    properties: BTreeMap<String, StructuralSchema>,
    additional: Option<Additional>,
    items: Option<Box<StructuralSchema>>,
    preserve_unknown_fields: bool,
    embedded_resource: bool,
    nullable: bool,
    default: Option<Value>,
    /// Types, formats, ranges, lengths, enums, required ([`validate`]).
    constraints: Constraints,
    /// `x-kubernetes-validations` ([`cel`]).
    rules: Vec<Rule>,
    /// Whether this schema or one under it has rules (the rules' walk skips the others).
    has_rules: bool,
}

/// What validating a write found: the errors that refuse it (a 422 Invalid, in the API
/// server's order) and the warnings it is answered with (rules ratcheted on an update).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Findings {
    /// The fields at fault.
    pub errors: Vec<FieldError>,
    /// `Warning` texts.
    pub warnings: Vec<String>,
}

impl StructuralSchema {
    /// The schema of a CRD version's `openAPIV3Schema`.
    pub fn new(props: &JSONSchemaProps) -> Self {
        let additional = match &props.additional_properties {
            Some(JSONSchemaPropsOrBool::Schema(schema)) => {
                Some(Additional::Schema(Box::new(Self::new(schema))))
            }
            Some(JSONSchemaPropsOrBool::Bool(true)) => Some(Additional::Any),
            Some(JSONSchemaPropsOrBool::Bool(false)) | None => None,
        };
        let items = match &props.items {
            Some(JSONSchemaPropsOrArray::Schema(schema)) => Some(Box::new(Self::new(schema))),
            // A list of schemas is not structural; the API server refuses such a CRD.
            Some(JSONSchemaPropsOrArray::Schemas(_)) | None => None,
        };
        let properties: BTreeMap<String, StructuralSchema> = props
            .properties
            .iter()
            .flatten()
            .map(|(name, schema)| (name.clone(), Self::new(schema)))
            .collect();
        let rules: Vec<Rule> = props
            .x_kubernetes_validations
            .iter()
            .flatten()
            .map(Rule::new)
            .collect();
        let has_rules = !rules.is_empty()
            || properties.values().any(|schema| schema.has_rules)
            || items.as_ref().is_some_and(|schema| schema.has_rules)
            || matches!(&additional, Some(Additional::Schema(schema)) if schema.has_rules);
        Self {
            properties,
            additional,
            items,
            preserve_unknown_fields: props.x_kubernetes_preserve_unknown_fields == Some(true),
            embedded_resource: props.x_kubernetes_embedded_resource == Some(true),
            nullable: props.nullable == Some(true),
            default: props.default.as_ref().map(|json| json.0.clone()),
            constraints: Constraints::of(props),
            rules,
            has_rules,
        }
    }

    /// Validates `object`, a whole custom resource as it is about to be stored (pruned,
    /// defaulted, its status as the write leaves it), as the CRD strategy's `Validate` (no
    /// `old`) and `ValidateUpdate` do; `status_only`: a write of the status subresource, whose
    /// schema check covers `status` alone (`ValidateStatusUpdate`). The schema's errors come
    /// first; the rules run on the whole object unless one of those errors is a wrong type, a
    /// missing field, an unsupported value, a string too long or a list too long, which the
    /// API server says with one more error instead.
    pub fn validate(&self, object: &Value, old: Option<&Value>, status_only: bool) -> Findings {
        let mut errors = Vec::new();
        if status_only {
            if let (Some(status), Some(schema)) =
                (object.get("status"), self.properties.get("status"))
            {
                let before = errors.len();
                schema.check(
                    status,
                    old.and_then(|old| old.get("status")),
                    "",
                    &mut errors,
                );
                for error in errors.iter_mut().skip(before) {
                    error.field = if error.field.is_empty() {
                        "status".to_owned()
                    } else {
                        format!("status.{}", error.field)
                    };
                }
            }
        } else {
            self.check(object, old, "", &mut errors);
        }
        let blocking = errors.iter().any(|error| {
            matches!(
                error.kind,
                FieldErrorType::NotSupported
                    | FieldErrorType::Required
                    | FieldErrorType::TooLong
                    | FieldErrorType::TooMany
                    | FieldErrorType::TypeInvalid
            )
        });
        let mut warnings = Vec::new();
        if blocking {
            errors.push(FieldError::new(
                FieldErrorType::Invalid,
                "<nil>",
                BadValue::Value(Value::Null),
                "some validation rules were not checked because the object was invalid; \
                 correct the existing errors to complete validation",
            ));
        } else {
            let findings = self.check_rules(object, old);
            errors.extend(findings.errors);
            warnings = findings.warnings;
        }
        Findings { errors, warnings }
    }

    /// Prunes, removes disallowed nulls and defaults `object`, a whole custom resource, as the
    /// API server decodes a write; returns the paths pruned, sorted.
    pub fn apply(&self, object: &mut Value) -> Vec<String> {
        let pruned = self.prune_unknown(object);
        self.complete(object);
        pruned
    }

    /// What [`StructuralSchema::apply`] does after pruning: removes the `null`s the schema does
    /// not allow and fills the defaults. The API layer completes a pruned write with it before
    /// validating it.
    pub fn complete(&self, object: &mut Value) {
        self.drop_disallowed_nulls(object);
        self.default(object);
    }

    /// Prunes `object`, a whole custom resource, of the fields the schema does not declare, and
    /// nothing else; returns their paths, sorted. The API layer prunes a write with it before
    /// it records the writer's managed fields and reports the paths (`fieldValidation`).
    pub fn prune_unknown(&self, object: &mut Value) -> Vec<String> {
        let mut pruned = Vec::new();
        self.prune(object, true, "", &mut pruned);
        pruned.sort();
        pruned
    }

    /// `prune` of `algorithm.go`: `root` (the resource itself) is treated as an embedded
    /// resource, as `PruneWithOptions` does; `path` is where `value` is.
    fn prune(&self, value: &mut Value, root: bool, path: &str, pruned: &mut Vec<String>) {
        let embedded = root || self.embedded_resource;
        if self.preserve_unknown_fields {
            self.prune_known(value, embedded, path, pruned);
            return;
        }
        match value {
            Value::Object(map) => {
                map.retain(|key, child| {
                    if embedded && is_meta_field(key, child) {
                        return true;
                    }
                    let child_path = join(path, key);
                    match self.child(key) {
                        Some(Some(schema)) => schema.prune(child, false, &child_path, pruned),
                        Some(None) => prune_all(child, &child_path, pruned),
                        None => {
                            pruned.push(child_path);
                            return false;
                        }
                    }
                    true
                });
            }
            Value::Array(items) => {
                for (index, item) in items.iter_mut().enumerate() {
                    let item_path = format!("{path}[{index}]");
                    match &self.items {
                        Some(schema) => schema.prune(item, false, &item_path, pruned),
                        None => prune_all(item, &item_path, pruned),
                    }
                }
            }
            _ => {}
        }
    }

    /// `skipPrune` of `algorithm.go`: under `x-kubernetes-preserve-unknown-fields`, unknown
    /// keys stay and the declared ones are pruned by their schema.
    fn prune_known(&self, value: &mut Value, embedded: bool, path: &str, pruned: &mut Vec<String>) {
        match value {
            Value::Object(map) => {
                for (key, child) in map.iter_mut() {
                    if embedded && META_FIELDS.contains(&key.as_str()) {
                        continue;
                    }
                    if let Some(Some(schema)) = self.child(key) {
                        schema.prune(child, false, &join(path, key), pruned);
                    }
                }
            }
            Value::Array(items) => {
                if let Some(schema) = &self.items {
                    for (index, item) in items.iter_mut().enumerate() {
                        let item_path = format!("{path}[{index}]");
                        schema.prune_known(item, schema.embedded_resource, &item_path, pruned);
                    }
                }
            }
            _ => {}
        }
    }

    /// The schema of the value under `key`: `Some(Some(_))` declared or by
    /// `additionalProperties`, `Some(None)` allowed without a schema, `None` not allowed.
    fn child(&self, key: &str) -> Option<Option<&StructuralSchema>> {
        if let Some(schema) = self.properties.get(key) {
            return Some(Some(schema));
        }
        match &self.additional {
            Some(Additional::Schema(schema)) => Some(Some(schema)),
            Some(Additional::Any) => Some(None),
            None => None,
        }
    }

    /// `PruneNonNullableNullsWithoutDefaults` of `prunenulls.go`: only declared properties
    /// lose their `null`s; values under `additionalProperties` are looked into.
    fn drop_disallowed_nulls(&self, value: &mut Value) {
        match value {
            Value::Object(map) => map.retain(|key, child| {
                if child.is_null()
                    && self
                        .properties
                        .get(key)
                        .is_some_and(|schema| schema.default.is_none() && !schema.nullable)
                {
                    return false;
                }
                if let Some(Some(schema)) = self.child(key) {
                    schema.drop_disallowed_nulls(child);
                }
                true
            }),
            Value::Array(items) => {
                if let Some(schema) = &self.items {
                    items
                        .iter_mut()
                        .for_each(|item| schema.drop_disallowed_nulls(item));
                }
            }
            _ => {}
        }
    }

    /// `Default` of `defaulting/algorithm.go`: a default fills a missing property (or a `null`
    /// the schema does not allow); then every value is defaulted by its own schema.
    fn default(&self, value: &mut Value) {
        match value {
            Value::Object(map) => {
                fill_defaults(&self.properties, map);
                for (key, child) in map.iter_mut() {
                    if let Some(Some(schema)) = self.child(key) {
                        schema.default(child);
                    }
                }
            }
            Value::Array(items) => {
                if let Some(schema) = &self.items {
                    items.iter_mut().for_each(|item| schema.default(item));
                }
            }
            _ => {}
        }
    }
}

/// Sets the declared defaults of `properties` that `map` lacks.
fn fill_defaults(properties: &BTreeMap<String, StructuralSchema>, map: &mut Map<String, Value>) {
    for (key, schema) in properties {
        let Some(default) = &schema.default else {
            continue;
        };
        let missing = map
            .get(key)
            .is_none_or(|value| value.is_null() && !schema.nullable);
        if missing {
            map.insert(key.clone(), default.clone());
        }
    }
}

/// `prune(x, nil)`: with no schema, every key of an object (at any depth in lists) goes.
fn prune_all(value: &mut Value, path: &str, pruned: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            pruned.extend(map.keys().map(|key| join(path, key)));
            map.clear();
        }
        Value::Array(items) => {
            for (index, item) in items.iter_mut().enumerate() {
                prune_all(item, &format!("{path}[{index}]"), pruned);
            }
        }
        _ => {}
    }
}

/// Whether `key` is one of the meta fields an embedded resource keeps: `apiVersion` and `kind`
/// when they are strings, `metadata` when it is an object (otherwise the schema decides).
fn is_meta_field(key: &str, value: &Value) -> bool {
    match key {
        "apiVersion" | "kind" => value.is_string(),
        "metadata" => value.is_object(),
        _ => false,
    }
}

/// `parent.key`, or `key` at the root.
fn join(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_owned()
    } else {
        format!("{parent}.{key}")
    }
}

#[cfg(test)]
mod tests;
