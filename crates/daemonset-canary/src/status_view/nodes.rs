//! The per-node ledger of `status NAME --nodes`: for each node, the revision its pod runs, since
//! when, and where it stands (updated, old, deferred, failed, unhealthy, no pod), derived from the
//! DaemonSet's pods and ControllerRevisions and the nodes, with the status's own bounded lists;
//! revisions are numbered as the rollout history numbers them (one numbering in every view).
//!
//! Pure, like the rest of the view: the caller fetches the objects.

use crate::format::age;
use canary_kube_adapter::CanaryDaemonSet;
use canary_kube_adapter::desired::target_of;
use canary_kube_adapter::history::Entry;
use canary_predicates::{
    AnnotationKeys, PodSummary, current_revision_hash, node_health, pod_is_terminating,
    pod_revision_hash, pod_runs_revision,
};
use canary_state_machine::{NodeHealth, NodeStanding};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use std::collections::BTreeMap;
use std::fmt::Write;

/// What makes an updated pod available in the ledger: the DaemonSet's `minReadySeconds` and
/// the time of the view.
#[derive(Debug, Clone, Copy)]
pub struct Availability {
    /// The DaemonSet's `minReadySeconds` (0 when unset).
    pub min_ready_seconds: u64,
    /// Now, as the view is rendered.
    pub now: Timestamp,
}

/// One node of the ledger `status NAME --nodes` prints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRow {
    /// The node's name.
    pub node: String,
    /// The revision its pod runs, in the numbering of the rollout history (`history`, the
    /// status's `Revisions`): `#3 v1.9.2`, the number and version of the history revision
    /// whose version the pod carries; the DaemonSet's revision hash (`5d4b8c7f9`) for a pod
    /// of no recorded revision; `-` without a pod. The DaemonSet's own ControllerRevision
    /// numbers are never shown: they count differently (every template the DaemonSet had).
    pub revision: String,
    /// When its pod was created, that is when the node last changed revision.
    pub since: Option<Timestamp>,
    /// Where it stands: updated, old, deferred, failed, unhealthy or no pod
    /// ([`NodeStanding::LEDGER`]).
    pub state: NodeStanding,
    /// Why, when there is more to say (`not ready`, a deferral's reason).
    pub note: String,
}

/// The per-node ledger of `cds`'s DaemonSet, derived from what the cluster holds: its pods, its
/// ControllerRevisions and the nodes, with the status's own lists of deferred and failed nodes
/// (bounded, so a node past them is judged by its health), and `history`, the rollout
/// history's revisions, whose numbers the ledger shows. Nothing here grows the status.
pub fn node_ledger(
    cds: &CanaryDaemonSet,
    pods: &[Pod],
    revisions: &[ControllerRevision],
    nodes: &[Node],
    history: &[Entry],
    availability: Availability,
) -> Vec<NodeRow> {
    let status = cds.status.clone().unwrap_or_default();
    let target = status
        .target_revision
        .clone()
        .or_else(|| current_revision_hash(revisions).map(str::to_owned));
    let version_key = target_of(cds).map_or_else(
        |_| AnnotationKeys::default().version,
        |(keys, _)| keys.version,
    );
    // The history revision of a version: the newest that rolled it out (an undo renumbers).
    let history_of = |pod: &Pod| {
        let version = pod.metadata.annotations.as_ref()?.get(&version_key)?;
        history
            .iter()
            .filter(|entry| !entry.version.is_empty() && entry.version == *version)
            .max_by_key(|entry| entry.revision)
    };
    let mut by_node: BTreeMap<String, Option<&Node>> = nodes
        .iter()
        .filter_map(|node| Some((node.metadata.name.clone()?, Some(node))))
        .collect();
    for pod in pods {
        if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) {
            by_node.entry(node).or_insert(None);
        }
    }
    by_node
        .into_iter()
        .map(|(name, node)| {
            // The node's live pod: the newest that is not terminating.
            let pod = pods
                .iter()
                .filter(|pod| {
                    pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(name.as_str())
                        && !pod_is_terminating(*pod)
                })
                .max_by_key(|pod| pod.metadata.creation_timestamp.as_ref().map(|t| t.0));
            let revision = match (pod.and_then(history_of), pod.and_then(pod_revision_hash)) {
                (Some(entry), _) => format!("#{} {}", entry.revision, entry.version),
                (None, Some(hash)) => hash.to_owned(),
                (None, None) => "-".to_owned(),
            };
            let health = node.map_or(NodeHealth::Missing, node_health);
            let deferral = status
                .deferred_nodes
                .iter()
                .find(|note| note.name == name)
                .map(|note| note.reason.clone());
            // The Pods driver's rule (`UpdatedRule::Revision`): the pod runs the target.
            let updated = pod
                .zip(target.as_deref())
                .is_some_and(|(pod, target)| pod_runs_revision(pod, target));
            let unhealthy = status.unhealthy_nodes.iter().find(|note| note.name == name);
            // What the pods say wins over the status's lists, which may be a pass behind.
            let (state, note) = if status.failed_nodes.contains(&name) {
                (
                    NodeStanding::Failed,
                    "its updated pod crash-loops".to_owned(),
                )
            } else if let Some(seen) = unhealthy {
                // Named by the health gates: broke after its update (issue 46).
                let mut note = format!("{} {}", seen.condition, seen.status);
                if !seen.reason.is_empty() {
                    let _ = write!(note, ", {}", seen.reason);
                }
                if let Some(since) = &seen.since {
                    let _ = write!(note, " since {}", since.0);
                }
                note.push_str(" after its update");
                (NodeStanding::Unhealthy, note)
            } else if updated {
                // Available as the DaemonSet counts it (`minReadySeconds`, issue 50; the one
                // definition: `PodSummary::available_in`), as the controller counts it.
                let available_in = pod.and_then(|pod| {
                    PodSummary::of(pod)
                        .available_in(availability.min_ready_seconds, availability.now.as_second())
                });
                let waiting = match available_in {
                    None => Some("not ready".to_owned()),
                    Some(0) => None,
                    Some(left) => Some(format!("ready, available in {left}s (minReadySeconds)")),
                };
                let note = [Some(health_note(health)), waiting]
                    .into_iter()
                    .flatten()
                    .filter(|part| !part.is_empty())
                    .collect::<Vec<_>>()
                    .join(", ");
                (NodeStanding::Updated, note)
            } else if let Some(reason) = deferral {
                (NodeStanding::Deferred, reason)
            } else if pod.is_none() {
                (NodeStanding::NoPod, health_note(health))
            } else if health != NodeHealth::Healthy {
                (NodeStanding::Deferred, health_note(health))
            } else {
                (NodeStanding::Old, String::new())
            };
            NodeRow {
                node: name,
                revision,
                since: pod.and_then(|pod| pod.metadata.creation_timestamp.as_ref().map(|t| t.0)),
                state,
                note,
            }
        })
        .collect()
}

fn health_note(health: NodeHealth) -> String {
    match health {
        NodeHealth::Healthy => String::new(),
        NodeHealth::NotReady => "node NotReady".to_owned(),
        NodeHealth::Cordoned => "node cordoned".to_owned(),
        NodeHealth::Missing => "node gone".to_owned(),
    }
}

/// The ledger as a table, with a line of totals, as seen at `now`.
pub fn render_nodes(rows: &[NodeRow], now: Timestamp) -> String {
    let mut out = String::new();
    let width = rows.iter().map(|r| r.node.len()).max().unwrap_or(4).max(4);
    let revision_width = rows
        .iter()
        .map(|r| r.revision.len())
        .max()
        .unwrap_or(8)
        .max(8);
    let _ = writeln!(
        out,
        "{:<width$}  {:<revision_width$}  {:>7}  {:<8}  NOTE",
        "NODE", "REVISION", "SINCE", "STATE"
    );
    for row in rows {
        let since = row.since.map_or_else(|| "-".to_owned(), |t| age(t, now));
        let line = format!(
            "{:<width$}  {:<revision_width$}  {since:>7}  {:<8}  {}",
            row.node, row.revision, row.state, row.note
        );
        let _ = writeln!(out, "{}", line.trim_end());
    }
    let mut totals: BTreeMap<NodeStanding, usize> = BTreeMap::new();
    for row in rows {
        *totals.entry(row.state).or_default() += 1;
    }
    let totals: Vec<String> = NodeStanding::LEDGER
        .into_iter()
        .filter_map(|state| totals.get(&state).map(|n| format!("{n} {state}")))
        .collect();
    let _ = writeln!(
        out,
        "\n{}: {}",
        crate::format::count(rows.len() as u64, "node", "nodes"),
        if totals.is_empty() {
            "none".to_owned()
        } else {
            totals.join(", ")
        }
    );
    // A node's note carries its pod's or node's condition message, written by the kubelet or
    // anyone who may patch the status.
    crate::format::printable(&out)
}
