//! `daemonset-canary status NAME`: one CanaryDaemonSet as a person reads it, in the spirit of
//! `kubectl argo rollouts get`: where the rollout is and since when, how far it got, what the
//! DaemonSet allows right now, the Pods driver's steps (the current one marked) and pods per
//! revision, the conditions and the recent events.
//!
//! Pure: the caller fetches the objects, [`render`] only formats them, so it is tested without a
//! cluster. The per-node ledger of `--nodes` is in `nodes.rs`.

mod nodes;

pub use nodes::{Availability, NodeRow, node_ledger, render_nodes};

use crate::format::{age, count, one_line, printable, progress_bar};
use canary_kube_adapter::CanaryDaemonSet;
use canary_kube_adapter::crd::CanaryDaemonSetStatus;
use canary_state_machine::{Driver, Phase};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::jiff::Timestamp;
use std::fmt::Write;

/// How many of the most recent events [`render`] shows.
pub const RECENT_EVENTS: usize = 10;

/// Formats `cds` with its `events` (any order; only those about it should be passed) as seen at
/// `now`.
pub fn render(cds: &CanaryDaemonSet, events: &[Event], now: Timestamp) -> String {
    let status = cds.status.clone().unwrap_or_default();
    let mut out = String::new();
    let field = |out: &mut String, name: &str, value: &str| {
        let _ = writeln!(out, "{:<17}{value}", format!("{name}:"));
    };
    field(
        &mut out,
        "Name",
        cds.metadata.name.as_deref().unwrap_or("?"),
    );
    field(
        &mut out,
        "Namespace",
        cds.metadata.namespace.as_deref().unwrap_or("?"),
    );
    let daemon_set = status
        .daemon_set_name
        .clone()
        .unwrap_or_else(|| cds.daemon_set_name());
    field(&mut out, "DaemonSet", &daemon_set);
    field(&mut out, "Target", &target(cds));
    field(&mut out, "Strategy", &strategy_line(cds));
    let phase = Phase::name_or_pending(status.phase);
    let since = status
        .phase_start_time
        .as_ref()
        .map(|t| format!("  (since {}, {} ago)", t.0, age(t.0, now)))
        .unwrap_or_default();
    field(
        &mut out,
        "Phase",
        &format!("{} {phase}{since}", symbol(status.phase)),
    );
    if let Some(hold) = hold_line(cds, &status) {
        field(&mut out, "Held", &hold);
    }
    if let Some(reason) = status.reason {
        field(&mut out, "Reason", reason.as_str());
    }
    if let Some(message) = status.message.as_deref().filter(|m| !m.is_empty()) {
        field(&mut out, "Message", &one_line(message));
    }
    if let Some(count) = status.unhealthy_node_count {
        field(&mut out, "Unhealthy nodes", &unhealthy_line(&status, count));
    }
    if let Some(history) = &status.history {
        field(&mut out, "Revisions", &revisions_line(history));
    }
    if let Some(downtime) = downtime_line(&status) {
        field(&mut out, "Agent downtime", &downtime);
    }
    field(
        &mut out,
        "Pods",
        &format!(
            "{} {}/{} updated and ready ({} updated, {} desired)",
            progress_bar(status.updated_ready, status.desired, 20),
            status.updated_ready,
            status.desired,
            status.updated,
            status.desired
        ),
    );
    field(
        &mut out,
        "maxUnavailable",
        status.current_max_unavailable.as_deref().unwrap_or("-"),
    );
    field(&mut out, "Generations", &generations(cds));
    steps(&mut out, cds, &status);
    pods_by_revision(&mut out, &status);
    analysis(&mut out, cds, now);
    conditions(&mut out, cds, now);
    recent_events(&mut out, events, now);
    // Free texts are escaped where they are written (a newline in them too); this catches a
    // control character in any other field.
    printable(&out)
}

/// The agent downtime of the rollout (issue 50): node-seconds in all, over how many gaps, and
/// the worst node; `None` before a gap was measured.
pub fn downtime_line(status: &CanaryDaemonSetStatus) -> Option<String> {
    let downtime = status.agent_downtime.as_ref()?;
    let worst = match (&downtime.worst_node, downtime.worst_seconds) {
        (Some(node), Some(seconds)) => format!(", worst {node} {seconds}s"),
        _ => String::new(),
    };
    Some(format!(
        "{} node-seconds over {} ({}){worst}",
        downtime.node_seconds,
        crate::format::count(downtime.gaps, "node", "nodes"),
        downtime.version
    ))
}

/// The nodes the health gates name (issue 46): each with what was seen and since when, and
/// how many more.
fn unhealthy_line(status: &CanaryDaemonSetStatus, count: u32) -> String {
    let listed: Vec<String> = status
        .unhealthy_nodes
        .iter()
        .map(|node| {
            let since = node
                .since
                .as_ref()
                .map(|t| format!(" since {}", t.0))
                .unwrap_or_default();
            let reason = if node.reason.is_empty() {
                String::new()
            } else {
                format!(" {}", node.reason)
            };
            format!(
                "{} ({} {}{reason}{since})",
                node.name, node.condition, node.status
            )
        })
        .collect();
    let more = usize::try_from(count)
        .unwrap_or(usize::MAX)
        .saturating_sub(listed.len());
    let mut line = format!("{count}: {}", listed.join(", "));
    if more > 0 {
        line.push_str(&format!(" and {more} more"));
    }
    line
}

/// The hold on request (the `pause` verb) as asked and as acted on; `None` when neither.
fn hold_line(cds: &CanaryDaemonSet, status: &CanaryDaemonSetStatus) -> Option<String> {
    let asked = canary_kube_adapter::crd::hold_requested(cds);
    let acted_on = status.held == Some(true);
    let name = cds.metadata.name.as_deref().unwrap_or("NAME");
    let namespace = cds.metadata.namespace.as_deref().unwrap_or("default");
    match (asked, acted_on) {
        (true, true) => Some(format!(
            "on request: nothing moves until {} resume {name} -n {namespace}",
            crate::format::command_name()
        )),
        (true, false) => Some("asked for, not acted on yet".to_owned()),
        (false, true) => Some("resume asked for, not acted on yet".to_owned()),
        (false, false) => None,
    }
}

/// Pods driver: the steps the rollout walks, `✓` done, `▶` the current one (a rollback walks
/// them without the pauses).
fn steps(out: &mut String, cds: &CanaryDaemonSet, status: &CanaryDaemonSetStatus) {
    let Some(current) = status.current_step_index else {
        return;
    };
    let Ok(plan) = canary_kube_adapter::reconcile::step_plan(cds) else {
        return;
    };
    let rolling_back = status
        .history
        .as_ref()
        .is_some_and(|history| history.going_back());
    let plan = if rolling_back {
        plan.without_pauses()
    } else {
        plan
    };
    let _ = writeln!(
        out,
        "Steps:{}",
        if rolling_back {
            "           (the rollback's: pauses left out)"
        } else {
            ""
        }
    );
    let at_rest = status.phase.is_some_and(Phase::is_at_rest);
    for (index, step) in plan.steps().iter().enumerate() {
        let index = u32::try_from(index).unwrap_or(u32::MAX);
        let mark = if index < current || at_rest {
            "✓"
        } else if index == current {
            "▶"
        } else {
            " "
        };
        let _ = writeln!(out, "  {mark} {}. {step}", index + 1);
    }
}

/// `Pods driver, 5 steps; maxUnavailable 1 in the canary step, then 10%; onFailure Rollback`:
/// the driver first, since it decides what the budgets mean (the DaemonSet's own
/// `maxUnavailable`, or the pods the controller deletes at once in a step).
fn strategy_line(cds: &CanaryDaemonSet) -> String {
    let strategy = &cds.spec.strategy;
    let (canary, fast) = (
        &strategy.canary_max_unavailable,
        &strategy.fast_max_unavailable,
    );
    let budgets = match strategy.driver {
        Driver::MaxUnavailable => format!(
            "canary maxUnavailable {canary}, then {fast}; compatibility {:?}",
            strategy.compatibility
        ),
        Driver::Pods => {
            // The plan's steps, as `Steps:` lists them (a last `nodes: 100%` is added to a
            // spec that does not end with one).
            let steps = match canary_kube_adapter::reconcile::step_plan(cds) {
                Ok(plan) => count(u64::from(plan.len()), "step", "steps"),
                Err(_) => "steps that do not validate".to_owned(),
            };
            format!("Pods driver, {steps}; maxUnavailable {canary} in the canary step, then {fast}")
        }
    };
    format!("{budgets}; onFailure {}", strategy.on_failure.as_str())
}

/// Pods driver: how many pods run each revision, the target first.
fn pods_by_revision(out: &mut String, status: &CanaryDaemonSetStatus) {
    if status.revisions.is_empty() {
        return;
    }
    let _ = writeln!(out, "Pods by revision:");
    for revision in &status.revisions {
        let target = if status.target_revision.as_deref() == Some(revision.revision.as_str()) {
            "  (target)"
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "  {:<14}{}, {} ready{target}",
            revision.revision,
            count(u64::from(revision.pods), "pod", "pods"),
            revision.ready
        );
    }
}

/// `current 4 (v2), stable 3 (v1); rolling back to 3 (v1) after an abort`: where the object
/// stands in its history (`daemonset-canary history NAME` lists it whole).
fn revisions_line(history: &canary_kube_adapter::crd::HistoryStatus) -> String {
    let named =
        |r: &canary_kube_adapter::crd::RevisionRef| format!("{} ({})", r.revision, r.version);
    let mut text = [("current", &history.current), ("stable", &history.stable)]
        .into_iter()
        .filter_map(|(what, r)| r.as_ref().map(|r| format!("{what} {}", named(r))))
        .collect::<Vec<_>>()
        .join(", ");
    if let Some(rollback) = &history.rollback {
        let why = match rollback.reason.as_str() {
            "Abort" => "after an abort",
            "OnFailure" => "after a failure (onFailure: Rollback)",
            _ => "on request (undo)",
        };
        let _ = write!(
            text,
            "; {} {} {why}, until the spec's template changes",
            if rollback.reason == "Undo" {
                "rolled out:"
            } else {
                "rolled back to"
            },
            named(&rollback.to)
        );
    }
    if text.is_empty() {
        "-".to_owned()
    } else {
        text
    }
}

fn target(cds: &CanaryDaemonSet) -> String {
    let target = &cds.spec.target;
    let resolved = cds.status.as_ref().and_then(|s| s.target_version.clone());
    let mut text = match (target.from_container.as_deref(), resolved) {
        (Some(container), Some(version)) => {
            format!("{version} (the tag of container {container}'s image)")
        }
        (Some(container), None) => format!("the tag of container {container}'s image"),
        (None, _) => target.version.clone(),
    };
    if !target.registry.is_empty() {
        let _ = write!(text, ", registry {}", target.registry);
    }
    if let Some(id) = target.deployment_id.as_deref() {
        let _ = write!(text, ", deployment id {id}");
    }
    text
}

fn generations(cds: &CanaryDaemonSet) -> String {
    let status = cds.status.clone().unwrap_or_default();
    let show = |g: Option<i64>| g.map_or_else(|| "-".to_owned(), |g| g.to_string());
    let mut text = format!(
        "spec {}, observed {}, recorded DaemonSet generation {}",
        show(cds.metadata.generation),
        show(status.observed_generation),
        show(status.recorded_daemon_set_generation)
    );
    if status.observed_generation.is_some() && status.observed_generation != cds.metadata.generation
    {
        text.push_str(" (the controller has not seen the latest spec yet)");
    }
    text
}

fn symbol(phase: Option<Phase>) -> &'static str {
    match phase {
        Some(Phase::Successful) => "✔",
        Some(Phase::RolledBack) => "↺",
        Some(Phase::Failed) => "✖",
        None => "…",
        Some(_) => "◌",
    }
}

fn conditions(out: &mut String, cds: &CanaryDaemonSet, now: Timestamp) {
    let conditions = cds
        .status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default();
    let _ = writeln!(out, "\nConditions:");
    if conditions.is_empty() {
        let _ = writeln!(out, "  (none yet)");
        return;
    }
    let _ = writeln!(
        out,
        "  {:<15} {:<7} {:<24} {:>7}  MESSAGE",
        "TYPE", "STATUS", "REASON", "AGE"
    );
    for condition in conditions {
        let _ = writeln!(
            out,
            "  {:<15} {:<7} {:<24} {:>7}  {}",
            condition.type_,
            condition.status,
            one_line(&condition.reason),
            age(condition.last_transition_time.0, now),
            one_line(&condition.message)
        );
    }
}

/// The stretch of the rollout measured last (`status.analysis`): its verdict, and each
/// metric's last measurement with the query as sent, to paste into Prometheus.
fn analysis(out: &mut String, cds: &CanaryDaemonSet, now: Timestamp) {
    let Some(analysis) = cds.status.as_ref().and_then(|s| s.analysis.as_ref()) else {
        return;
    };
    // The MaxUnavailable driver measures two stretches (issue 46), the Pods driver its steps.
    let stretch = match (cds.spec.strategy.driver, analysis.step) {
        (Driver::MaxUnavailable, canary_state_machine::ANALYSIS_CANARY) => "the canary".to_owned(),
        (Driver::MaxUnavailable, _) => "the widened rollout".to_owned(),
        (Driver::Pods, step) => format!("step {}", step + 1),
    };
    let _ = write!(
        out,
        "\nAnalysis:        {stretch}, revision {}: {}",
        analysis.revision.as_deref().unwrap_or("-"),
        analysis.verdict
    );
    if let Some(message) = &analysis.message {
        let _ = write!(out, " ({})", one_line(message));
    }
    let _ = writeln!(out);
    if analysis.measurements.is_empty() {
        let _ = writeln!(out, "  (no measurement yet)");
        return;
    }
    let _ = writeln!(
        out,
        "  {:<20} {:<12} {:>10} {:>10} {:>8} {:>8} {:>7}",
        "METRIC", "VERDICT", "VALUE", "BASELINE", "FAILURES", "IN A ROW", "AGE"
    );
    for m in &analysis.measurements {
        let _ = writeln!(
            out,
            "  {:<20} {:<12} {:>10} {:>10} {:>8} {:>8} {:>7}",
            m.metric,
            m.verdict,
            m.value.as_deref().unwrap_or("-"),
            m.baseline.as_deref().unwrap_or("-"),
            m.failures,
            m.inconclusive,
            m.time
                .as_ref()
                .map_or_else(|| "-".to_owned(), |t| age(t.0, now))
        );
        if let Some(detail) = &m.detail {
            let _ = writeln!(out, "    {}", one_line(detail));
        }
        let _ = writeln!(out, "    query: {}", one_line(&m.query));
        if let Some(baseline) = &m.baseline_query {
            let _ = writeln!(out, "    baseline: {}", one_line(baseline));
        }
    }
}

fn recent_events(out: &mut String, events: &[Event], now: Timestamp) {
    let mut events: Vec<(Timestamp, &Event)> = events.iter().map(|e| (event_time(e), e)).collect();
    events.sort_by_key(|(at, _)| *at);
    let skip = events.len().saturating_sub(RECENT_EVENTS);
    let _ = writeln!(out, "\nEvents (most recent last):");
    if events.is_empty() {
        let _ = writeln!(out, "  (none)");
        return;
    }
    let _ = writeln!(
        out,
        "  {:>7}  {:<7} {:<22} MESSAGE",
        "AGE", "TYPE", "REASON"
    );
    for (at, event) in events.into_iter().skip(skip) {
        let count = event
            .series
            .as_ref()
            .map(|s| format!(" (x{})", s.count))
            .or_else(|| {
                event
                    .deprecated_count
                    .filter(|c| *c > 1)
                    .map(|c| format!(" (x{c})"))
            })
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "  {:>7}  {:<7} {:<22} {}{count}",
            age(at, now),
            one_line(event.type_.as_deref().unwrap_or("-")),
            one_line(event.reason.as_deref().unwrap_or("-")),
            one_line(event.note.as_deref().unwrap_or(""))
        );
    }
}

/// When the event last happened: its series' last observation, else its event time, else the
/// deprecated timestamps older emitters set.
fn event_time(event: &Event) -> Timestamp {
    event
        .series
        .as_ref()
        .map(|s| s.last_observed_time.0)
        .or_else(|| event.event_time.as_ref().map(|t| t.0))
        .or_else(|| event.deprecated_last_timestamp.as_ref().map(|t| t.0))
        .or_else(|| event.metadata.creation_timestamp.as_ref().map(|t| t.0))
        .unwrap_or(Timestamp::UNIX_EPOCH)
}

/// Whether `event` is about `cds` (events are listed per namespace): its kind and name, and its
/// UID when both sides carry one, so that the events of an earlier object of the same name,
/// deleted and created again, are not shown as this one's (they live for an hour after it).
pub fn is_about(event: &Event, cds: &CanaryDaemonSet) -> bool {
    event.regarding.as_ref().is_some_and(|r| {
        r.kind.as_deref() == Some("CanaryDaemonSet")
            && r.name.as_deref() == cds.metadata.name.as_deref()
            && match (r.uid.as_deref(), cds.metadata.uid.as_deref()) {
                (Some(event_uid), Some(uid)) => event_uid == uid,
                _ => true,
            }
    })
}

/// The list `get` prints: a header and a line per object (sorted by namespace and name), the
/// namespace only with `all_namespaces`; `wide` adds the driver, the DaemonSet, the updated
/// pods and the kstatus verdict (`Ready`, `Reconciling` or `Stalled`, with its reason).
pub fn render_list(items: &[CanaryDaemonSet], all_namespaces: bool, now: Timestamp) -> String {
    render_table(items, all_namespaces, false, true, now)
}

/// The columns of `get`'s table.
const COLUMNS: [&str; 7] = [
    "NAMESPACE",
    "NAME",
    "PHASE",
    "STEP",
    "READY",
    "VERSION",
    "AGE",
];
/// The columns `-o wide` adds.
const WIDE_COLUMNS: [&str; 4] = ["DRIVER", "DAEMONSET", "UPDATED", "CONDITION"];

/// `get`'s table: `wide` with the wide columns (driver, DaemonSet, updated, kstatus verdict),
/// `header` with its header line (`get -w` prints the later lines without one, as `kubectl get
/// -w` does).
pub fn render_table(
    items: &[CanaryDaemonSet],
    all_namespaces: bool,
    wide: bool,
    header: bool,
    now: Timestamp,
) -> String {
    let mut rows: Vec<Vec<String>> = items.iter().map(|cds| row(cds, wide, now)).collect();
    rows.sort();
    let columns = COLUMNS
        .iter()
        .chain(WIDE_COLUMNS.iter().filter(|_| wide))
        .map(|c| (*c).to_owned())
        .collect::<Vec<_>>();
    let skip = usize::from(!all_namespaces);
    let mut widths = vec![0usize; columns.len()];
    for row in std::iter::once(&columns).chain(rows.iter()) {
        for (width, cell) in widths.iter_mut().zip(row.iter()) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let header = header.then_some(&columns);
    for row in header.into_iter().chain(rows.iter()) {
        let line: Vec<String> = row
            .iter()
            .zip(widths.iter())
            .skip(skip)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        let _ = writeln!(out, "{}", line.join("   ").trim_end());
    }
    printable(&out)
}

/// One object's cells, in the order of [`COLUMNS`] (and [`WIDE_COLUMNS`]).
fn row(cds: &CanaryDaemonSet, wide: bool, now: Timestamp) -> Vec<String> {
    let status = cds.status.clone().unwrap_or_default();
    let step = match (status.current_step_index, status.step_count) {
        (Some(index), Some(count)) if index >= count => format!("{count}/{count}"),
        (Some(index), Some(count)) => format!("{}/{count}", index + 1),
        _ => "-".to_owned(),
    };
    let mut cells = vec![
        cds.metadata.namespace.clone().unwrap_or_default(),
        cds.metadata.name.clone().unwrap_or_default(),
        Phase::name_or_pending(status.phase).to_owned(),
        step,
        format!("{}/{}", status.updated_ready, status.desired),
        status
            .target_version
            .clone()
            .unwrap_or_else(|| "-".to_owned()),
        cds.metadata
            .creation_timestamp
            .as_ref()
            .map_or_else(|| "-".to_owned(), |t| age(t.0, now)),
    ];
    if wide {
        let verdict = ["Stalled", "Reconciling", "Ready"]
            .into_iter()
            .find_map(|type_| {
                status
                    .conditions
                    .iter()
                    .find(|c| c.type_ == type_ && c.status == "True")
                    .map(|c| format!("{type_}({})", one_line(&c.reason)))
            })
            .unwrap_or_else(|| "-".to_owned());
        cells.extend([
            cds.spec.strategy.driver.to_string(),
            status
                .daemon_set_name
                .clone()
                .unwrap_or_else(|| "-".to_owned()),
            format!("{}/{}", status.updated, status.desired),
            verdict,
        ]);
    }
    cells
}

#[cfg(test)]
mod tests;
