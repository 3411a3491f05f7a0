//! `daemonset-canary status NAME`: fetches one CanaryDaemonSet and its events and prints them
//! with [`daemonset_canary::status_view::render`]; `--nodes` adds the per-node ledger
//! ([`daemonset_canary::status_view::node_ledger`]) from the DaemonSet's pods, its
//! ControllerRevisions and the nodes.
//!
//! `--watch` redraws the view on every change of the object (a watch on it) and every two
//! seconds for the ages and events, like `kubectl argo rollouts get rollout -w`, until
//! interrupted or the object is deleted. Off a terminal it prints a new view, after a `---`
//! line with the time, only when the object or its events changed: plain lines a log keeps.
//!
//! Where it looks is [`ObjectArgs`]'s (`-n`, `-A`), as for every verb.

use super::object::{ObjectArgs, Read, object_of};
use super::{Connection, describe};
use canary_kube_adapter::CanaryDaemonSet;
use canary_kube_adapter::crd::Undecoded;
use canary_kube_adapter::workload::selector_string;
use daemonset_canary::status_view;
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::jiff::Timestamp;
use kube::api::ListParams;
use kube::{Api, ResourceExt};
use std::fmt::Write as _;

/// Arguments of `status`.
#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    #[command(flatten)]
    object: ObjectArgs,
    /// Also print the per-node ledger: for each node, the revision its pod runs, since when,
    /// and where it stands (updated, old, deferred, failed), from the DaemonSet's pods and
    /// ControllerRevisions and the nodes.
    #[arg(long)]
    nodes: bool,
    /// Redraw on every change until interrupted (Ctrl-C) or the object is deleted.
    #[arg(long, short = 'w')]
    watch: bool,
}

/// Prints the view, or fails with one line (not found, unreachable, no CRD).
/// An object that does not decode is shown from what does (its metadata, status and events),
/// after a line saying why its spec cannot be read.
pub async fn run(args: StatusArgs) -> anyhow::Result<()> {
    let (connection, read) = args.object.read().await?;
    if args.watch {
        return watch(&args, &connection, read).await;
    }
    print!("{}", view(&args, &connection, &read).await?.text);
    Ok(())
}

/// The line above the view of an object that does not decode: why, and how to fix it.
fn undecodable_warning(undecoded: &Undecoded) -> String {
    format!(
        "⚠ the stored spec does not decode, so the controller cannot act on it: {}\n  fix it with `kubectl edit canarydaemonset {} -n {}`\n\n",
        super::object::why(undecoded),
        undecoded.stand_in.name_any(),
        undecoded.stand_in.namespace().unwrap_or_default()
    )
}

/// One rendering of the view, and what it was drawn from (the object's resource version and
/// its events), to tell a change from the clock moving.
struct View {
    text: String,
    drawn_from: (Option<String>, Vec<String>),
}

async fn view(args: &StatusArgs, connection: &Connection, read: &Read) -> anyhow::Result<View> {
    let cds = object_of(read);
    let namespace = cds.namespace().unwrap_or_default();
    let events: Api<Event> = Api::namespaced(connection.client.clone(), &namespace);
    // Events are a courtesy: without permission to list them the rest is still worth showing.
    let about: Vec<Event> = match events.list(&ListParams::default()).await {
        Ok(list) => list
            .items
            .into_iter()
            .filter(|e| status_view::is_about(e, cds))
            .collect(),
        Err(error) => {
            tracing::warn!("cannot list events: {}", describe(&error, &connection.url));
            Vec::new()
        }
    };
    // An object that does not decode is shown from what does (its metadata, status and
    // events), after a line saying why its spec cannot be read.
    let mut text = match read {
        Ok(_) => String::new(),
        Err(undecoded) => undecodable_warning(undecoded),
    };
    text.push_str(&status_view::render(cds, &about, Timestamp::now()));
    if args.nodes {
        let rows = ledger(connection, cds, &namespace).await?;
        text.push_str("\nNodes:\n");
        if rows.is_empty() {
            let _ = writeln!(text, "  (no DaemonSet {} yet)", cds.daemon_set_name());
        } else {
            text.push_str(&status_view::render_nodes(&rows, Timestamp::now()));
        }
        if let Some(status) = &cds.status
            && let Some(downtime) = status_view::downtime_line(status)
        {
            let _ = writeln!(text, "Agent downtime: {downtime}");
        }
    }
    let event_versions = about
        .iter()
        .map(|e| e.metadata.resource_version.clone().unwrap_or_default())
        .collect();
    Ok(View {
        text,
        drawn_from: (cds.resource_version(), event_versions),
    })
}

/// `status --watch`: the view again on every change of `cds` (a watch on it) and on a
/// two-second tick for the ages and events.
async fn watch(args: &StatusArgs, connection: &Connection, mut read: Read) -> anyhow::Result<()> {
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, watcher};
    use std::io::IsTerminal;

    let terminal = std::io::stdout().is_terminal();
    let cds = object_of(&read);
    let namespace = cds.namespace().unwrap_or_default();
    let config = watcher::Config::default().fields(&format!("metadata.name={}", cds.name_any()));
    // Decoded one by one: a spec that stops decoding (or starts again) is drawn, not a watch
    // that breaks. Backoff: an unreachable API server is retried at a growing interval.
    let mut changes = super::object::watch(connection, Some(&namespace), config)
        .default_backoff()
        .boxed();
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(2));
    let mut last_drawn = None;
    let interrupted = super::shutdown_signal();
    tokio::pin!(interrupted);
    loop {
        match view(args, connection, &read).await {
            Ok(view) => {
                if terminal {
                    // Home and clear, then the view: the screen shows the newest one only.
                    print!("\x1b[H\x1b[2J{}", view.text);
                } else if last_drawn.as_ref() != Some(&view.drawn_from) {
                    println!("--- {}", Timestamp::now());
                    print!("{}", view.text);
                }
                last_drawn = Some(view.drawn_from);
            }
            // A watch outlives a blip of the API server: say so and draw again on the next tick.
            Err(error) => tracing::warn!("{error:#}"),
        }
        tokio::select! {
            () = &mut interrupted => return Ok(()),
            _ = tick.tick() => {}
            change = changes.next() => match change {
                Some(Ok(watcher::Event::Apply(object) | watcher::Event::InitApply(object))) => {
                    read = object;
                }
                Some(Ok(watcher::Event::Delete(_))) => {
                    println!("{} deleted", describe_object(object_of(&read)));
                    return Ok(());
                }
                Some(Ok(watcher::Event::Init | watcher::Event::InitDone)) => {}
                // Retried after a backoff; meanwhile the ticks redraw what is known.
                Some(Err(error)) => {
                    tracing::warn!("watch of {}: {error}", describe_object(object_of(&read)));
                }
                None => return Ok(()),
            },
        }
    }
}

fn describe_object(cds: &CanaryDaemonSet) -> String {
    super::object::which(&cds.namespace().unwrap_or_default(), &cds.name_any())
}

/// The per-node ledger of `cds`'s DaemonSet: its pods and ControllerRevisions (by its
/// selector, the revisions it owns) and the nodes (best effort: without permission to list
/// them, the nodes with a pod are still shown).
async fn ledger(
    connection: &Connection,
    cds: &CanaryDaemonSet,
    namespace: &str,
) -> anyhow::Result<Vec<status_view::NodeRow>> {
    let client = &connection.client;
    let name = cds
        .status
        .as_ref()
        .and_then(|s| s.daemon_set_name.clone())
        .filter(|_| cds.spec.workload_ref.is_none())
        .unwrap_or_else(|| cds.daemon_set_name());
    let Some(daemon_set) = Api::<DaemonSet>::namespaced(client.clone(), namespace)
        .get_opt(&name)
        .await
        .map_err(|error| anyhow::anyhow!(describe(&error, &connection.url)))?
    else {
        return Ok(Vec::new());
    };
    let selector = daemon_set
        .spec
        .as_ref()
        .map(|spec| selector_string(&spec.selector))
        .transpose()
        .map_err(|why| anyhow::anyhow!("DaemonSet {name}: its selector {why}"))?
        .unwrap_or_default();
    let by_selector = ListParams::default().labels(&selector);
    let pods = Api::<Pod>::namespaced(client.clone(), namespace)
        .list(&by_selector)
        .await
        .map_err(|error| anyhow::anyhow!(describe(&error, &connection.url)))?
        .items;
    let owner = daemon_set.metadata.uid.clone();
    let revisions: Vec<ControllerRevision> =
        Api::<ControllerRevision>::namespaced(client.clone(), namespace)
            .list(&by_selector)
            .await
            .map_err(|error| anyhow::anyhow!(describe(&error, &connection.url)))?
            .items
            .into_iter()
            .filter(|revision| {
                revision
                    .metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .any(|reference| Some(&reference.uid) == owner.as_ref())
            })
            .collect();
    let nodes = match Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
    {
        Ok(list) => list.items,
        Err(error) => {
            tracing::warn!("cannot list nodes: {}", describe(&error, &connection.url));
            Vec::new()
        }
    };
    // The history's numbering, as the header and `history` show it; without it (no
    // permission, or none recorded yet) a node shows its DaemonSet revision's hash.
    let history = super::rollback::entries(connection, cds)
        .await
        .unwrap_or_else(|error| {
            tracing::warn!("cannot read the rollout history: {error:#}");
            Vec::new()
        });
    let availability = status_view::Availability {
        min_ready_seconds: daemon_set
            .spec
            .as_ref()
            .and_then(|spec| spec.min_ready_seconds)
            .and_then(|seconds| u64::try_from(seconds).ok())
            .unwrap_or(0),
        now: k8s_openapi::jiff::Timestamp::now(),
    };
    Ok(status_view::node_ledger(
        cds,
        &pods,
        &revisions,
        &nodes,
        &history,
        availability,
    ))
}
