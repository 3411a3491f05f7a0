//! Server-side field validation of custom resources: the `fieldValidation` query parameter of
//! create, update and patch (`staging/src/k8s.io/apimachinery/pkg/apis/meta/v1/types.go`), and
//! server-side apply's refusal of undeclared fields.
//!
//! What a write of a custom resource gets for a field its version's schema does not declare
//! (the field is pruned in every case, [`crate::structural`], here before the writer's managed
//! fields are recorded, so they never name it):
//! - `Strict`: 400 `<Kind> in version "<v>" cannot be handled as a <Kind>: strict decoding
//!   error: unknown field "spec.foo", ...`, nothing written (what `kubectl apply`, `create` and
//!   `replace` send by default);
//! - `Warn`, or no parameter: the write succeeds with one `Warning: 299 - "unknown field
//!   \"spec.foo\""` header per field (what `kubectl patch` and kube-rs get);
//! - `Ignore`: the write succeeds silently;
//! - server-side apply: 500 `failed to create typed patch object (...)`, whatever the
//!   parameter, naming the applied fields the schema does not declare.
//!
//! The messages are those a kube-apiserver v1.35 answered (2026-12-05, `cargo xtask cluster
//! up`). Invariant: built-in kinds (no schema here) are never checked.

use http::{HeaderValue, Response, header};
use serde_json::Value;

use super::ResponseBody;
use super::query::Query;
use super::route::ObjectRoute;
use crate::store::StoreError;

/// What to do with undeclared fields, from `?fieldValidation=`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum FieldValidation {
    /// Drop them silently.
    Ignore,
    /// Drop them with a warning each (the API server's default).
    Warn,
    /// Refuse the write.
    Strict,
}

impl FieldValidation {
    /// The directive of a request; `options` names its options kind in the error
    /// (`CreateOptions`, `UpdateOptions`, `PatchOptions`).
    pub(super) fn of(query: &Query, options: &str) -> Result<Self, StoreError> {
        match query.get("fieldValidation").unwrap_or("") {
            "" | "Warn" => Ok(Self::Warn),
            "Ignore" => Ok(Self::Ignore),
            "Strict" => Ok(Self::Strict),
            other => Err(StoreError::invalid(format!(
                "{options}.meta.k8s.io \"\" is invalid: fieldValidation: Unsupported value: \
                 \"{other}\": supported values: \"\", \"Ignore\", \"Strict\", \"Warn\""
            ))),
        }
    }

    /// Prunes `object`, as written to `route`, of its undeclared fields: the warnings to send
    /// with the answer, or the error that refuses the write.
    pub(super) fn prune(
        self,
        route: &ObjectRoute,
        object: &mut Value,
    ) -> Result<Warnings, StoreError> {
        let Some(schema) = route.info.schema.as_deref() else {
            return Ok(Warnings::default());
        };
        let unknown = schema.prune_unknown(object);
        if unknown.is_empty() || self == Self::Ignore {
            return Ok(Warnings::default());
        }
        let messages = unknown
            .iter()
            .map(|path| format!("unknown field \"{path}\""));
        match self {
            Self::Strict => {
                let kind = &route.info.kind;
                Err(StoreError::BadRequest {
                    message: format!(
                        "{kind} in version \"{}\" cannot be handled as a {kind}: strict decoding \
                         error: {}",
                        route.info.key.version,
                        messages.collect::<Vec<_>>().join(", ")
                    ),
                })
            }
            Self::Warn | Self::Ignore => Ok(Warnings(messages.collect())),
        }
    }
}

/// Refuses a server-side apply whose configuration sets fields the schema does not declare
/// (pruning `applied` of them on the way: it is refused if there were any).
pub(super) fn check_apply(
    route: &ObjectRoute,
    name: &str,
    applied: &mut Value,
) -> Result<(), StoreError> {
    let Some(schema) = route.info.schema.as_deref() else {
        return Ok(());
    };
    let unknown = schema.prune_unknown(applied);
    let errors: Vec<String> = unknown
        .iter()
        .map(|path| format!(".{path}: field not declared in schema"))
        .collect();
    let listed = match errors.as_slice() {
        [] => return Ok(()),
        [one] => one.clone(),
        many => format!("errors:\n  {}", many.join("\n  ")),
    };
    let object = match &route.namespace {
        Some(namespace) => format!("{namespace}/{name}"),
        None => name.to_owned(),
    };
    Err(StoreError::Internal {
        message: format!(
            "failed to create typed patch object ({object}; {}, Kind={}): {listed}",
            route.info.api_version(),
            route.info.kind
        ),
    })
}

/// The warnings of one write, each sent as a `Warning` header.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Warnings(Vec<String>);

impl From<Vec<String>> for Warnings {
    fn from(texts: Vec<String>) -> Self {
        Self(texts)
    }
}

impl Warnings {
    /// Adds more warnings after these.
    pub(super) fn extend(&mut self, texts: Vec<String>) {
        self.0.extend(texts);
    }

    /// Adds the warnings to `response` (`299 - "<text>"`, the text quoted as Go quotes it).
    pub(super) fn attach(self, mut response: Response<ResponseBody>) -> Response<ResponseBody> {
        for text in self.0 {
            let quoted = text.replace('\\', "\\\\").replace('"', "\\\"");
            if let Ok(value) = HeaderValue::from_str(&format!("299 - \"{quoted}\"")) {
                response.headers_mut().append(header::WARNING, value);
            }
        }
        response
    }
}
