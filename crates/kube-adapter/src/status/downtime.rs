//! The agent downtime a rollout caused, in its status: the gaps the DaemonSet's nodes closed
//! (from the pod index), added up per target version, with the worst node.

use crate::crd::{AgentDowntime, CanaryDaemonSetStatus};
use crate::observer::Transition;

/// The agent downtime of the rollout after a pass: the previous figures (those of the same
/// target version: a new target starts again) and the gaps that closed since. `None` until a
/// rollout has measured a gap.
pub(super) fn agent_downtime(
    prev: &CanaryDaemonSetStatus,
    pass: &Transition,
) -> Option<AgentDowntime> {
    let version = &pass.target.version;
    let kept = prev
        .agent_downtime
        .clone()
        .filter(|downtime| downtime.version == *version || version.is_empty());
    if pass.downtime.is_empty() || version.is_empty() {
        return kept;
    }
    let mut downtime = kept.unwrap_or_else(|| AgentDowntime {
        version: version.clone(),
        ..AgentDowntime::default()
    });
    downtime.node_seconds = downtime
        .node_seconds
        .saturating_add(pass.downtime.node_seconds);
    downtime.gaps = downtime.gaps.saturating_add(pass.downtime.count);
    if let Some(worst) = pass.downtime.gaps.iter().max_by_key(|gap| gap.seconds)
        && downtime
            .worst_seconds
            .is_none_or(|seconds| worst.seconds > seconds)
    {
        downtime.worst_node = Some(worst.node.clone());
        downtime.worst_seconds = Some(worst.seconds);
    }
    Some(downtime)
}
