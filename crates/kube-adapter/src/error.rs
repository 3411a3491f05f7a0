//! The adapter's error type, and the one-line descriptions of errors that the adapter and the
//! binary print ([`transport_failure`], [`chain`]).

/// Everything that can go wrong in the adapter.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A Kubernetes API call failed (shown as [`kube_error_text`]: one line, never kube's
    /// debug dump of the API server's `Status`).
    #[error("kubernetes API error: {}", kube_error_text(.0))]
    Kube(#[from] kube::Error),
    /// The DaemonSet changed under us (failed `test` op or 409): retry once the cache catches up.
    #[error("conflict writing {what}: {message}")]
    Conflict {
        /// What was being written.
        what: String,
        /// The API server's message.
        message: String,
    },
    /// The CanaryDaemonSet spec cannot be acted on; the controller waits for a spec change.
    #[error("invalid spec: {0}")]
    InvalidSpec(String),
    /// The object has no namespace or name (cannot happen for objects from the API server).
    #[error("object is missing {0}")]
    MissingField(&'static str),
    /// Serializing a patch or the CRD failed.
    #[error("serialization failed: {0}")]
    Serialize(String),
    /// The reconcile loop stopped making progress (see `Health::wedged`); the controller
    /// stopped and gave up its lease.
    #[error("the reconcile loop is wedged: {0}")]
    Wedged(String),
}

/// The most bytes of an API server's message a log line or status carries: the text is the
/// server's (and may quote what a user wrote).
pub const API_MESSAGE_BYTES: usize = 512;

/// One line for a failed request: a refusal as the API server's code, reason and message
/// (`409 AlreadyExists: controllerrevisions "x" already exists`), cut to
/// [`API_MESSAGE_BYTES`]; anything else as kube words it. kube's own `Display` of a refusal
/// appends the `Status` struct's debug dump.
pub fn kube_error_text(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) => format!(
            "{} {}: {}",
            status.code,
            status.reason,
            canary_state_machine::cut(&status.message, API_MESSAGE_BYTES)
        ),
        other => other.to_string(),
    }
}

impl Error {
    /// A short, bounded label for metrics (`reason` label values).
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube(_) => "KubeApi",
            Error::Conflict { .. } => "Conflict",
            Error::InvalidSpec(_) => "InvalidSpec",
            Error::MissingField(_) => "MissingField",
            Error::Serialize(_) => "Serialize",
            Error::Wedged(_) => "Wedged",
        }
    }

    /// Whether this error is a write conflict (retried quickly, not a rollout failure).
    pub fn is_conflict(&self) -> bool {
        match self {
            Error::Conflict { .. } => true,
            Error::Kube(kube::Error::Api(status)) => status.is_conflict(),
            _ => false,
        }
    }
}

/// The operating system's words for a failure to reach the server (`connection refused (os
/// error 111)`), when the cause of `error` is one: the innermost I/O error of its chain.
///
/// kube's own messages for a refused connection (`ServiceError: client error (Connect)`) do
/// not say what happened; the I/O error at the bottom of the chain does.
pub fn transport_failure(error: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut source = Some(error);
    let mut io = None;
    while let Some(current) = source {
        if let Some(found) = current.downcast_ref::<std::io::Error>() {
            io = Some(found);
        }
        source = current.source();
    }
    io.map(|io| lower_first(&io.to_string()))
}

/// Every message of `error`'s source chain, each once, joined by `: ` (kube's messages
/// repeat their source's text; a part already contained in an earlier one is left out), cut
/// to [`EVENT_NOTE_BYTES`](canary_state_machine::EVENT_NOTE_BYTES): an API server's or a
/// proxy's message is outside text (issue 47).
pub fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut source = Some(error);
    while let Some(current) = source {
        let text = current.to_string();
        if !parts.iter().any(|part| part.contains(&text)) {
            parts.push(text);
        }
        source = current.source();
    }
    let joined = parts.join(": ");
    match canary_state_machine::cut(&joined, canary_state_machine::EVENT_NOTE_BYTES) {
        std::borrow::Cow::Borrowed(_) => joined,
        std::borrow::Cow::Owned(cut) => cut,
    }
}

fn lower_first(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("failed to start watching object: client error (Connect)")]
    struct Outer(#[source] Inner);

    #[derive(Debug, thiserror::Error)]
    #[error("client error (Connect)")]
    struct Inner(#[source] std::io::Error);

    #[test]
    fn a_refused_connection_reads_as_the_system_says_it() {
        let error = Outer(Inner(std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            "Connection refused (os error 111)",
        )));
        assert_eq!(
            transport_failure(&error).as_deref(),
            Some("connection refused (os error 111)")
        );
        assert_eq!(
            chain(&error),
            "failed to start watching object: client error (Connect): Connection refused (os error 111)"
        );
        let no_io = Error::InvalidSpec("bad".into());
        assert_eq!(transport_failure(&no_io), None);
        assert_eq!(chain(&no_io), "invalid spec: bad");
    }

    /// A refusal reads as the API server's code, reason and message, in one line: kube's own
    /// text appends the `Status` struct's debug dump, which the history's WARN carried.
    #[test]
    fn a_refusal_is_one_line_without_the_status_struct() {
        let status = kube::core::Status::failure(
            r#"controllerrevisions.apps "agent-0123456789" already exists"#,
            "AlreadyExists",
        )
        .with_code(409);
        let error = Error::Kube(kube::Error::Api(status.boxed()));
        assert_eq!(
            error.to_string(),
            r#"kubernetes API error: 409 AlreadyExists: controllerrevisions.apps "agent-0123456789" already exists"#
        );
        let long = kube::core::Status::failure(&"x".repeat(4_096), "Invalid").with_code(422);
        let text = kube_error_text(&kube::Error::Api(long.boxed()));
        assert!(text.len() <= API_MESSAGE_BYTES + 16, "{}", text.len());
    }
}
