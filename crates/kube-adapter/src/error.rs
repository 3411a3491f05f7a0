//! The adapter's error type.

/// Everything that can go wrong in the adapter.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A Kubernetes API call failed.
    #[error("kubernetes API error: {0}")]
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
    /// Leader election failed.
    #[error("leader election: {0}")]
    LeaderElection(String),
    /// The reconcile loop stopped making progress (see `Health::wedged`); the controller
    /// stopped and gave up its lease.
    #[error("the reconcile loop is wedged: {0}")]
    Wedged(String),
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
            Error::LeaderElection(_) => "LeaderElection",
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
