//! The typed errors of the TLS migration.

/// Why a TLS migration function could not answer. None of these is a panic in disguise: each
/// describes a DaemonSet or a configuration that the caller should report, not retry blindly.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// The DaemonSet has no spec, no pod spec, or an empty container list.
    #[error("the DaemonSet pod template has no containers")]
    NoContainers,
    /// [`ContainerSelector::Name`](crate::ContainerSelector::Name) names no container of the template.
    #[error(
        "the DaemonSet pod template has no container named {name:?} (containers: {available:?})"
    )]
    ContainerNotFound {
        /// The name that was looked for.
        name: String,
        /// The names of the containers that do exist, in template order.
        available: Vec<String>,
    },
    /// [`ContainerSelector::Index`](crate::ContainerSelector::Index) is past the end of the container list.
    #[error("container index {index} is out of range: the pod template has {len} container(s)")]
    IndexOutOfRange {
        /// The index that was asked for.
        index: usize,
        /// How many containers the template has (at least 1).
        len: usize,
    },
    /// The [`TlsConfig`](crate::TlsConfig) itself is unusable.
    #[error("invalid TLS migration configuration, field {field}: {reason}")]
    InvalidConfig {
        /// The offending field of `TlsConfig`.
        field: &'static str,
        /// What is wrong with it.
        reason: &'static str,
    },
}
