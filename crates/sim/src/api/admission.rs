//! The validation of a custom resource's write by its CRD version's structural schema and CEL
//! rules ([`crate::structural`]), where the CRD registry strategy's `Validate` and
//! `ValidateUpdate` (`apiextensions-apiserver/pkg/registry/customresource/strategy.go`,
//! `status_strategy.go`) run: after the write is decoded (pruned, its disallowed `null`s dropped,
//! defaulted) and prepared (a create loses its status when the kind has a status subresource; an
//! update of the main resource keeps the stored status; a status write keeps everything else),
//! before anything is stored.
//!
//! A refusal is a 422 `Invalid` whose message and causes are kube-apiserver's
//! ([`StoreError::InvalidFields`]); a rule ratcheted on an update (it fails on a value the write
//! did not change) is a `Warning` of the answer instead.
//!
//! Invariants: a refused write changes nothing (every caller validates before the store call,
//! or inside the store's read-modify-write closure, whose error aborts it); built-in kinds and
//! custom resources without a schema are not checked. The store itself does not validate: an
//! object put there directly, as a test plants one that an older CRD admitted, stays as it is,
//! and a later write of it is ratcheted.

use serde_json::{Map, Value};

use super::route::ObjectRoute;
use crate::store::{StoreError, UpdateScope};

/// Which write is validated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Write {
    /// A create: no old object.
    Create,
    /// An update or patch of the main resource.
    Update,
    /// An update or patch of the status subresource.
    Status,
}

impl Write {
    /// The update of `scope`.
    pub(super) fn of(scope: UpdateScope) -> Self {
        match scope {
            UpdateScope::Main => Self::Update,
            UpdateScope::Status => Self::Status,
        }
    }
}

/// Completes `object` (pruned already) as the store will store it and validates it against
/// `old`, the stored object (`None` for a create): the warnings to answer with, or the 422
/// that refuses the write.
pub(super) fn admit(
    route: &ObjectRoute,
    write: Write,
    old: Option<&Value>,
    object: &mut Value,
) -> Result<Vec<String>, StoreError> {
    let Some(schema) = route.info.schema.as_deref() else {
        return Ok(Vec::new());
    };
    schema.complete(object);
    if let (Value::Object(fields), old) = (&mut *object, old.and_then(Value::as_object)) {
        let status_subresource = route.info.status_subresource;
        match write {
            Write::Create if status_subresource => {
                fields.remove("status");
            }
            Write::Update if status_subresource => keep_stored(fields, old, |key| key == "status"),
            Write::Status => keep_stored(fields, old, |key| key != "status" && key != "metadata"),
            Write::Create | Write::Update => {}
        }
    }
    let old = old.filter(|_| write != Write::Create);
    let findings = schema.validate(object, old, write == Write::Status);
    if findings.errors.is_empty() {
        return Ok(findings.warnings);
    }
    let name = object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    Err(StoreError::InvalidFields {
        group: route.info.key.group.clone(),
        kind: route.info.kind.clone(),
        name: name.to_owned(),
        errors: findings.errors,
        warnings: findings.warnings,
    })
}

/// Sets the top-level fields `kept` selects to their stored values (removing those the stored
/// object lacks), copying only what differs: what the store's update does to them.
fn keep_stored(
    fields: &mut Map<String, Value>,
    old: Option<&Map<String, Value>>,
    kept: impl Fn(&str) -> bool,
) {
    let empty = Map::new();
    let old = old.unwrap_or(&empty);
    fields.retain(|key, _| !kept(key) || old.contains_key(key));
    for (key, value) in old.iter().filter(|(key, _)| kept(key)) {
        if fields.get(key) != Some(value) {
            fields.insert(key.clone(), value.clone());
        }
    }
}

#[cfg(test)]
mod tests;
