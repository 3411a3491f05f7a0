//! `daemonset-canary abort NAME`, `undo NAME [--to-revision N]` and `history NAME`: going back,
//! and what there is to go back to.
//!
//! The controller remembers each template it rolled out as a ControllerRevision owned by the
//! CanaryDaemonSet, numbered, with the outcome of its rollout (`history` lists them). `abort`
//! marks the object with `canary.daemonset.dev/abort`: the controller rolls back to the last
//! revision that finished `successful` (phases `rollingBack`, then `rolledBack`), canary first.
//! `undo` marks it with `canary.daemonset.dev/undo=N@TIME` (or `previous@TIME`): the controller
//! rolls out revision N as any rollout. `history NAME --revision N` shows one revision: its
//! version, outcome and times, and its pod template as a diff against the revision before it
//! (as `kubectl rollout history --revision` shows a revision's template). Both last until the spec changes: a new version in Git
//! wins. Each verb asks the verb table ([`Verb::refusal`], the controller's own) and exits
//! non-zero with its reason; what changed since the object was read comes back as a
//! `VerbRefused` event.

use super::object::ObjectArgs;
use super::verb::{TargetArgs, find};
use super::{Connection, describe};
use anyhow::{Context as _, bail};
use canary_kube_adapter::CanaryDaemonSet;
use canary_kube_adapter::crd::{ABORT_ANNOTATION, CanaryDaemonSetStatus, UNDO_ANNOTATION};
use canary_kube_adapter::history::{Entry, History};
use canary_state_machine::{Phase, Revision, UndoTarget, Verb, VerbContext, undo_revision};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use std::fmt::Write as _;

/// Arguments of `undo`.
#[derive(Debug, clap::Args)]
pub struct UndoArgs {
    #[command(flatten)]
    object: ObjectArgs,
    /// The revision to roll out (`history` lists them). Default: the one before the current.
    #[arg(long)]
    to_revision: Option<i64>,
}

pub(super) async fn entries(
    connection: &Connection,
    cds: &CanaryDaemonSet,
) -> anyhow::Result<Vec<Entry>> {
    let history = History::new(connection.client.clone(), cds, "daemonset-canary")
        .context("the CanaryDaemonSet has no namespace or uid")?;
    history.list().await.map_err(|error| match error {
        canary_kube_adapter::Error::Kube(error) => {
            anyhow::anyhow!(describe(&error, &connection.url))
        }
        other => anyhow::anyhow!(other),
    })
}

/// `abort`: marks the CanaryDaemonSet and prints where it goes back to, and when.
pub async fn abort(args: TargetArgs) -> anyhow::Result<()> {
    let target = find(&args.object).await?;
    target.check(Verb::Abort)?;
    let context = target.context();
    let mark = Timestamp::now().to_string();
    target.mark(ABORT_ANNOTATION, Some(&mark)).await?;
    println!("{}", abort_outcome(&target.which, &context));
    Ok(())
}

/// What `abort` prints once the verb table accepts it: the revision it goes back to, and when
/// the rollback begins. The controller acts on an abort asked during a hold on request at
/// once (the rollback is recorded, `rollingBack`), but nothing moves until the hold ends: the
/// line says so, rather than a rollback that is not happening.
pub fn abort_outcome(which: &str, at: &VerbContext) -> String {
    let phase = Phase::name_or_pending(at.phase);
    let (revision, version) = at
        .stable
        .as_ref()
        .map_or((0, ""), |stable| (stable.number, stable.version.as_str()));
    if at.held {
        format!(
            "{which} aborted (was {phase}, held on request): the rollback to revision {revision} ({version}) is recorded and begins, canary first, once the rollout is resumed ({} resume)",
            daemonset_canary::format::command_name()
        )
    } else {
        format!(
            "{which} aborted (was {phase}): rolling back to revision {revision} ({version}), canary first"
        )
    }
}

/// `undo`: marks the CanaryDaemonSet with the revision to roll out and prints it.
pub async fn undo(args: UndoArgs) -> anyhow::Result<()> {
    let object = find(&args.object).await?;
    object.check(Verb::Undo)?;
    let (connection, cds, which) = (&object.connection, &object.cds, &object.which);
    let entries = entries(connection, cds).await?;
    let history: Vec<Revision> = entries
        .iter()
        .map(|entry| Revision {
            number: entry.revision,
            version: entry.version.clone(),
        })
        .collect();
    let wanted = match args.to_revision {
        Some(number) => UndoTarget::Revision(number),
        None => UndoTarget::Previous,
    };
    let to = match undo_revision(wanted, &object.context(), &history) {
        Ok(to) => to,
        Err(why) => bail!("{which}: undo refused: {why}"),
    };
    let mark = format!("{}@{}", to.number, Timestamp::now());
    object.mark(UNDO_ANNOTATION, Some(&mark)).await?;
    println!(
        "{which}: rolling out revision {} ({}), canary first; a spec change ends it",
        to.number, to.version
    );
    Ok(())
}

/// Arguments of `history`.
#[derive(Debug, clap::Args)]
pub struct HistoryArgs {
    #[command(flatten)]
    object: ObjectArgs,
    /// Show revision N: its version, outcome and times, and its pod template as a diff against
    /// the revision before it (as `kubectl rollout history --revision N`).
    #[arg(long, value_name = "N")]
    revision: Option<i64>,
}

/// `history`: one line per revision, oldest first; with `--revision N`, that revision.
pub async fn history(args: HistoryArgs) -> anyhow::Result<()> {
    let (connection, cds) = args.object.find().await?;
    let entries = entries(&connection, &cds).await?;
    if let Some(number) = args.revision {
        return revision_detail(&connection, &cds, &entries, number).await;
    }
    if entries.is_empty() {
        println!("no revision recorded yet: the history starts with the next rollout");
        return Ok(());
    }
    print!("{}", history_table(&entries, cds.status.as_ref()));
    Ok(())
}

/// `history NAME --revision N`: the revision's facts, then its pod template as a diff against
/// the revision numbered before it (whole, for the first).
async fn revision_detail(
    connection: &Connection,
    cds: &CanaryDaemonSet,
    entries: &[Entry],
    number: i64,
) -> anyhow::Result<()> {
    let which = super::object::which(&cds.namespace().unwrap_or_default(), &cds.name_any());
    let Some(entry) = entries.iter().find(|entry| entry.revision == number) else {
        bail!(
            "revision {number} is not in the history of {which} (`{} history {}` lists them)",
            daemonset_canary::format::command_name(),
            cds.name_any()
        );
    };
    let previous = entries
        .iter()
        .filter(|other| other.revision < number)
        .max_by_key(|other| other.revision);
    let history = History::new(connection.client.clone(), cds, "daemonset-canary")
        .context("the CanaryDaemonSet has no namespace or uid")?;
    let template_of = async |entry: &Entry| -> anyhow::Result<Option<String>> {
        let desired = history
            .desired(&entry.name)
            .await
            .map_err(|error| match error {
                canary_kube_adapter::Error::Kube(error) => {
                    anyhow::anyhow!(describe(&error, &connection.url))
                }
                other => anyhow::anyhow!(other),
            })?;
        desired
            .and_then(|ds| ds.spec.map(|spec| spec.template))
            .map(|template| serde_saphyr::to_string(&template))
            .transpose()
            .context("cannot print the pod template")
    };
    let current = template_of(entry).await?;
    let before = match previous {
        Some(previous) => template_of(previous).await?,
        None => None,
    };
    print!(
        "{}",
        revision_text(entry, previous, before.as_deref(), current.as_deref())
    );
    Ok(())
}

/// What `history NAME --revision N` prints for `entry`: its facts, then its pod template
/// (`current`, YAML) as a unified diff against `previous`'s (`before`), or whole when there is
/// none to compare with.
pub fn revision_text(
    entry: &Entry,
    previous: Option<&Entry>,
    before: Option<&str>,
    current: Option<&str>,
) -> String {
    let mut out = String::new();
    let version = if entry.version.is_empty() {
        "-"
    } else {
        entry.version.as_str()
    };
    let _ = writeln!(out, "Revision:  {}", entry.revision);
    let _ = writeln!(out, "Version:   {version}");
    let _ = writeln!(
        out,
        "Outcome:   {}",
        entry.outcome.map_or("unknown", |o| o.as_str())
    );
    let _ = writeln!(out, "Started:   {}", when(entry.started.as_deref()));
    let _ = writeln!(out, "Finished:  {}", when(entry.finished.as_deref()));
    let Some(current) = current else {
        out.push_str("\nPod template: not readable (the revision's data was edited or is gone)\n");
        return out;
    };
    match (previous, before) {
        (Some(previous), Some(before)) => {
            let _ = writeln!(
                out,
                "\nPod template, against revision {} ({}):",
                previous.revision, previous.version
            );
            let diff = similar::TextDiff::from_lines(before, current);
            let unified = diff
                .unified_diff()
                .context_radius(3)
                .header(
                    &format!("revision {}", previous.revision),
                    &format!("revision {}", entry.revision),
                )
                .to_string();
            if unified.is_empty() {
                out.push_str("  (the same pod template)\n");
            } else {
                out.push_str(&unified);
            }
        }
        _ => {
            out.push_str("\nPod template:\n");
            for line in current.lines() {
                let _ = writeln!(out, "  {line}");
            }
        }
    }
    out
}

/// The table `history` prints: revision, version, outcome, start, end; the current revision
/// marked `*`, the stable one `stable`.
/// A recorded time as the table shows it: to the second, in UTC (`2026-12-01T00:01:00Z`); the
/// annotation holds nanoseconds. Text that is no time (an annotation edited by hand) is shown
/// as it is, cut; none is `-`.
fn when(recorded: Option<&str>) -> String {
    match recorded.map(|text| (text, text.parse::<Timestamp>())) {
        None => "-".to_owned(),
        Some((_, Ok(at))) => at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        Some((text, Err(_))) => canary_state_machine::cut(text, 40).into_owned(),
    }
}

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
            when(entry.started.as_deref()),
            when(entry.finished.as_deref()),
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
    use canary_state_machine::Driver;

    /// The abort-during-hold discrepancy of issue 45: the CLI printed "rolling back" while the
    /// hold kept everything still. The verb table accepts the abort (the controller records
    /// the rollback at once), and the line says it begins when the hold ends.
    #[test]
    fn an_abort_during_a_hold_says_the_rollback_waits_for_the_resume() {
        let held = VerbContext {
            driver: Driver::Pods,
            phase: Some(Phase::Paused),
            held: true,
            owns_template: true,
            current: Some(Revision {
                number: 3,
                version: "v3".into(),
            }),
            stable: Some(Revision {
                number: 1,
                version: "v1".into(),
            }),
            ..VerbContext::default()
        };
        assert_eq!(
            Verb::Abort.refusal(&held),
            None,
            "the controller acts on it"
        );
        let line = abort_outcome("canarydaemonset d/agent", &held);
        assert!(line.contains("held on request"), "{line}");
        assert!(line.contains("once the rollout is resumed"), "{line}");
        assert!(!line.contains("rolling back"), "{line}");
        let moving = VerbContext {
            held: false,
            ..held
        };
        let line = abort_outcome("canarydaemonset d/agent", &moving);
        assert_eq!(
            line,
            "canarydaemonset d/agent aborted (was paused): rolling back to revision 1 (v1), canary first"
        );
    }

    fn entry(revision: i64, version: &str, outcome: Outcome) -> Entry {
        Entry {
            name: format!("agent-{revision}"),
            revision,
            version: version.to_owned(),
            outcome: Some(outcome),
            started: Some(format!("2026-12-01T00:0{revision}:00.123456789Z")),
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
        // To the second: the annotations' nanoseconds are noise in a table (issue 52).
        assert!(lines[1].contains("  2026-12-01T00:01:00Z"), "{table}");
        assert!(!table.contains(".123"), "{table}");
        assert_eq!(when(Some("yesterday")), "yesterday");
    }

    /// `history NAME --revision N`: the revision's facts, and its pod template as a diff
    /// against the one before (whole for the first; said so when they are the same).
    #[test]
    fn a_revision_shows_its_template_as_a_diff_against_the_one_before() {
        let before = "metadata:\n  labels:\n    app: agent\nspec:\n  containers:\n  - image: agent:v1\n    name: agent\n";
        let current = before.replace("agent:v1", "agent:v2");
        let text = revision_text(
            &entry(2, "v2", Outcome::Successful),
            Some(&entry(1, "v1", Outcome::Successful)),
            Some(before),
            Some(&current),
        );
        assert!(text.starts_with("Revision:  2\nVersion:   v2\nOutcome:   successful\nStarted:   2026-12-01T00:02:00Z\nFinished:  -\n"), "{text}");
        assert!(
            text.contains("Pod template, against revision 1 (v1):"),
            "{text}"
        );
        assert!(text.contains("--- revision 1\n+++ revision 2\n"), "{text}");
        assert!(
            text.contains("\n-  - image: agent:v1\n+  - image: agent:v2\n"),
            "{text}"
        );
        let first = revision_text(
            &entry(1, "v1", Outcome::Successful),
            None,
            None,
            Some(before),
        );
        assert!(first.contains("Pod template:\n  metadata:\n"), "{first}");
        let same = revision_text(
            &entry(2, "v1", Outcome::Successful),
            Some(&entry(1, "v1", Outcome::Successful)),
            Some(before),
            Some(before),
        );
        assert!(same.contains("(the same pod template)"), "{same}");
    }
}
