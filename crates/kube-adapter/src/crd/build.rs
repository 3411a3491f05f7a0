//! Building a CanaryDaemonSet spec in code rather than from YAML: the stand-in of an object that
//! does not decode, and the tests. One constructor, so that a new optional field is defaulted in
//! one place instead of in every literal.

use super::{CanaryDaemonSetSpec, DaemonSetTemplate, StrategySpec, TargetSpec, TlsMigrationSpec};

impl CanaryDaemonSetSpec {
    /// A spec that owns `template` (no `workloadRef`, no adoption) and rolls it out toward
    /// `target`, with every other field at its default: the default strategy, no TLS migration,
    /// no analysis.
    pub fn with_template(template: DaemonSetTemplate, target: TargetSpec) -> Self {
        Self {
            template: Some(template),
            workload_ref: None,
            daemon_set_name: None,
            adopt: false,
            target,
            annotation_keys: None,
            strategy: StrategySpec::default(),
            tls_migration: TlsMigrationSpec::default(),
            revision_history_limit: None,
            analysis: None,
            health: None,
            notifications: None,
        }
    }
}
