//! `daemonset-canary abort NAME`, `undo NAME [--to-revision N]` and `history NAME`: going back,
//! and what there is to go back to.
//!
//! The controller remembers each template it rolled out as a ControllerRevision owned by the
//! CanaryDaemonSet, numbered, with the outcome of its rollout (`history` lists them). `abort`
//! marks the object with `canary.daemonset.dev/abort`: the controller rolls back to the last
//! revision that finished `successful` (phases `rollingBack`, then `rolledBack`), canary first.
//! `undo` marks it with `canary.daemonset.dev/undo=N@TIME` (or `previous@TIME`): the controller
//! rolls out revision N as any rollout. Both last until the spec changes: a new version in Git
//! wins. Each verb checks what it can here and exits non-zero with the reason; what only the
//! controller knows (a rollback already running) comes back as a `VerbRefused` event.

use super::status::ObjectArgs;
use super::verb::{TargetArgs, template_owner_target};
use super::{Connection, describe};
use anyhow::{Context as _, bail};
use canary_kube_adapter::CanaryDaemonSet;
use canary_kube_adapter::crd::{ABORT_ANNOTATION, CanaryDaemonSetStatus, UNDO_ANNOTATION};
use canary_kube_adapter::history::{Entry, History};
use canary_state_machine::Phase;
use k8s_openapi::jiff::Timestamp;

/// Arguments of `undo`.
#[derive(Debug, clap::Args)]
pub struct UndoArgs {
    #[command(flatten)]
    object: ObjectArgs,
    /// The revision to roll out (`history` lists them). Default: the one before the current.
    #[arg(long)]
    to_revision: Option<i64>,
}

fn phase_of(status: &CanaryDaemonSetStatus) -> Option<Phase> {
    status.phase.as_deref().and_then(|p| p.parse().ok())
}

async fn entries(connection: &Connection, cds: &CanaryDaemonSet) -> anyhow::Result<Vec<Entry>> {
    let history = History::new(connection.client.clone(), cds, "daemonset-canary")
        .context("the CanaryDaemonSet has no namespace or uid")?;
    history.list().await.map_err(|error| match error {
        canary_kube_adapter::Error::Kube(error) => {
            anyhow::anyhow!(describe(&error, &connection.url))
        }
        other => anyhow::anyhow!(other),
    })
}

/// `abort`: marks the CanaryDaemonSet and prints where it goes back to.
pub async fn abort(args: TargetArgs) -> anyhow::Result<()> {
    let target = template_owner_target(
        &args.object,
        "abort rolls back to the last successful revision",
    )
    .await?;
    let (cds, which) = (&target.cds, &target.which);
    let status = cds.status.clone().unwrap_or_default();
    let phase = phase_of(&status);
    let history = status.history.clone().unwrap_or_default();
    match phase {
        Some(phase) if phase.is_at_rest() => bail!("{which} is {phase}: nothing to abort"),
        Some(Phase::RollingBack) => bail!("{which} is rolling back already"),
        _ => {}
    }
    let Some(stable) = history.stable else {
        bail!("{which} has no revision that finished successfully: there is nothing to go back to");
    };
    if history
        .current
        .as_ref()
        .is_some_and(|c| c.revision == stable.revision)
    {
        bail!(
            "{which} is rolling out revision {}, the last successful one: there is nothing to go back to",
            stable.revision
        );
    }
    let mark = Timestamp::now().to_string();
    target.mark(ABORT_ANNOTATION, Some(&mark)).await?;
    println!(
        "{which} aborted (was {}): rolling back to revision {} ({}), canary first",
        phase.map_or("pending", Phase::as_str),
        stable.revision,
        stable.version
    );
    Ok(())
}

/// `undo`: marks the CanaryDaemonSet with the revision to roll out and prints it.
pub async fn undo(args: UndoArgs) -> anyhow::Result<()> {
    let object = template_owner_target(&args.object, "undo rolls out an earlier revision").await?;
    let (connection, cds, which) = (&object.connection, &object.cds, &object.which);
    let entries = entries(connection, cds).await?;
    let status = cds.status.clone().unwrap_or_default();
    let current = status.history.and_then(|h| h.current).map(|c| c.revision);
    let listed = || {
        entries
            .iter()
            .map(|e| e.revision.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let target = match args.to_revision {
        Some(number) => entries.iter().find(|e| e.revision == number),
        None => entries
            .iter()
            .filter(|e| current.is_none_or(|c| e.revision < c))
            .max_by_key(|e| e.revision),
    };
    let Some(target) = target else {
        match args.to_revision {
            Some(number) => bail!("{which} has no revision {number} (revisions: {})", listed()),
            None => bail!(
                "{which} has no revision before the current one (revisions: {})",
                listed()
            ),
        }
    };
    if Some(target.revision) == current {
        bail!("{which} is at revision {} already", target.revision);
    }
    let mark = format!("{}@{}", target.revision, Timestamp::now());
    object.mark(UNDO_ANNOTATION, Some(&mark)).await?;
    println!(
        "{which}: rolling out revision {} ({}), canary first; a spec change ends it",
        target.revision, target.version
    );
    Ok(())
}

/// `history`: one line per revision, oldest first.
pub async fn history(args: TargetArgs) -> anyhow::Result<()> {
    let (connection, cds) = args.object.find().await?;
    let entries = entries(&connection, &cds).await?;
    if entries.is_empty() {
        println!("no revision recorded yet: the history starts with the next rollout");
        return Ok(());
    }
    print!("{}", history_table(&entries, cds.status.as_ref()));
    Ok(())
}

/// The table `history` prints: revision, version, outcome, start, end; the current revision
/// marked `*`, the stable one `stable`.
pub fn history_table(entries: &[Entry], status: Option<&CanaryDaemonSetStatus>) -> String {
    let history = status.and_then(|s| s.history.clone()).unwrap_or_default();
    let current = history.current.map(|c| c.name);
    let stable = history.stable.map(|s| s.name);
    let mut rows = vec![[
        "REVISION".to_owned(),
        "VERSION".to_owned(),
        "OUTCOME".to_owned(),
        "STARTED".to_owned(),
        "FINISHED".to_owned(),
    ]];
    for entry in entries {
        let mut revision = entry.revision.to_string();
        if current.as_deref() == Some(&entry.name) {
            revision.push('*');
        }
        let mut outcome = entry.outcome.map_or("unknown", |o| o.as_str()).to_owned();
        if stable.as_deref() == Some(&entry.name) {
            outcome.push_str(" (stable)");
        }
        rows.push([
            revision,
            if entry.version.is_empty() {
                "-".to_owned()
            } else {
                entry.version.clone()
            },
            outcome,
            entry.started.clone().unwrap_or_else(|| "-".to_owned()),
            entry.finished.clone().unwrap_or_else(|| "-".to_owned()),
        ]);
    }
    let mut widths = [0_usize; 5];
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.len());
        }
    }
    let mut out = String::new();
    for row in rows {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use canary_kube_adapter::crd::{HistoryStatus, RevisionRef};
    use canary_kube_adapter::history::Outcome;

    fn entry(revision: i64, version: &str, outcome: Outcome) -> Entry {
        Entry {
            name: format!("agent-{revision}"),
            revision,
            version: version.to_owned(),
            outcome: Some(outcome),
            started: Some(format!("2026-12-01T00:0{revision}:00Z")),
            finished: None,
        }
    }

    #[test]
    fn the_table_marks_the_current_and_the_stable_revision() {
        let status = CanaryDaemonSetStatus {
            history: Some(HistoryStatus {
                current: Some(RevisionRef {
                    name: "agent-2".into(),
                    revision: 2,
                    version: "v2".into(),
                    template_hash: None,
                }),
                stable: Some(RevisionRef {
                    name: "agent-1".into(),
                    revision: 1,
                    version: "v1".into(),
                    template_hash: None,
                }),
                ..HistoryStatus::default()
            }),
            ..CanaryDaemonSetStatus::default()
        };
        let table = history_table(
            &[
                entry(1, "v1", Outcome::Successful),
                entry(2, "v2", Outcome::Failed),
            ],
            Some(&status),
        );
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 3, "{table}");
        assert!(
            lines[0].starts_with("REVISION  VERSION  OUTCOME"),
            "{table}"
        );
        assert!(
            lines[1].starts_with("1         v1       successful (stable)"),
            "{table}"
        );
        assert!(lines[2].starts_with("2*        v2       failed"), "{table}");
        assert!(lines[2].ends_with('-'), "no end time yet: {table}");
    }
}
