//! Why a store operation failed, and the Kubernetes `Status` body each failure is answered with
//! (`staging/src/k8s.io/apimachinery/pkg/api/errors/errors.go`).

use serde_json::{Value, json};

use crate::structural::{FieldError, field};

/// Why a store operation failed. Each variant maps to the HTTP status Kubernetes answers with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// 404 NotFound.
    #[error("{resource} \"{name}\" not found")]
    NotFound {
        /// Resource (`daemonsets.apps`).
        resource: String,
        /// Object name.
        name: String,
    },
    /// 409 AlreadyExists.
    #[error("{resource} \"{name}\" already exists")]
    AlreadyExists {
        /// Resource (`daemonsets.apps`).
        resource: String,
        /// Object name.
        name: String,
    },
    /// 409 Conflict: a `resourceVersion` or uid precondition failed.
    #[error(
        "Operation cannot be fulfilled on {resource} \"{name}\": the object has been modified; please apply your changes to the latest version and try again"
    )]
    Conflict {
        /// Resource (`daemonsets.apps`).
        resource: String,
        /// Object name.
        name: String,
    },
    /// 409 Conflict from server-side apply: another field manager owns a field the apply
    /// changes.
    #[error("{message}")]
    ApplyConflict {
        /// Which managers own which fields.
        message: String,
    },
    /// 422 Invalid: the object is malformed, or a JSON Patch `test` failed.
    #[error("{message}")]
    Invalid {
        /// What is wrong.
        message: String,
    },
    /// 422 Invalid with a cause per field at fault: an object its kind's validation refuses
    /// (`errors.NewInvalid`), such as a custom resource its CRD's schema or rules refuse.
    #[error(
        "{kind}.{group} {} is invalid: {}",
        field::go_quote(name),
        field::aggregate(errors)
    )]
    InvalidFields {
        /// The kind's API group (`canary.daemonset.dev`).
        group: String,
        /// The kind (`CanaryDaemonSet`).
        kind: String,
        /// The object's name.
        name: String,
        /// The fields at fault, in the order found.
        errors: Vec<FieldError>,
        /// The `Warning`s the refusal is sent with (rules ratcheted on the same write).
        warnings: Vec<String>,
    },
    /// 400 BadRequest.
    #[error("{message}")]
    BadRequest {
        /// What is wrong.
        message: String,
    },
    /// 500 with no reason: what the API server answers when server-side apply cannot build its
    /// typed patch (an applied field the schema does not declare).
    #[error("{message}")]
    Internal {
        /// What failed.
        message: String,
    },
    /// 410 Gone: the requested `resourceVersion` is older than the retained history.
    #[error("too old resource version: {requested} ({oldest})")]
    Gone {
        /// The `resourceVersion` asked for.
        requested: u64,
        /// The oldest `resourceVersion` a watch can still resume from.
        oldest: u64,
    },
}

impl StoreError {
    /// The HTTP status code Kubernetes answers with.
    pub fn code(&self) -> u16 {
        match self {
            Self::NotFound { .. } => 404,
            Self::AlreadyExists { .. } | Self::Conflict { .. } | Self::ApplyConflict { .. } => 409,
            Self::Invalid { .. } | Self::InvalidFields { .. } => 422,
            Self::BadRequest { .. } => 400,
            Self::Gone { .. } => 410,
            Self::Internal { .. } => 500,
        }
    }

    /// The `reason` of the Kubernetes `Status` object.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::NotFound { .. } => "NotFound",
            Self::AlreadyExists { .. } => "AlreadyExists",
            Self::Conflict { .. } | Self::ApplyConflict { .. } => "Conflict",
            Self::Invalid { .. } | Self::InvalidFields { .. } => "Invalid",
            Self::BadRequest { .. } => "BadRequest",
            Self::Gone { .. } => "Expired",
            // `StatusReasonUnknown`: kubectl prints "Error from server: <message>".
            Self::Internal { .. } => "",
        }
    }

    /// The Kubernetes `Status` object (`kind: Status`, `status: Failure`) for this error.
    pub fn to_status(&self) -> Value {
        let mut body = status_body(self.code(), self.reason(), &self.to_string());
        if let Self::InvalidFields {
            group,
            kind,
            name,
            errors,
            ..
        } = self
            && let Value::Object(fields) = &mut body
        {
            let causes: Vec<Value> = errors
                .iter()
                .map(|error| {
                    json!({
                        "reason": error.kind.reason(),
                        "message": error.body(),
                        "field": error.field,
                    })
                })
                .collect();
            fields.insert(
                "details".into(),
                json!({"name": name, "group": group, "kind": kind, "causes": causes}),
            );
        }
        body
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Self::Invalid {
            message: message.into(),
        }
    }
}

/// A Kubernetes `Status` failure body.
/// An empty `reason` is left out, as Go's `omitempty` does.
pub fn status_body(code: u16, reason: &str, message: &str) -> Value {
    let mut body = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    });
    if reason.is_empty()
        && let Value::Object(fields) = &mut body
    {
        fields.remove("reason");
    }
    body
}
