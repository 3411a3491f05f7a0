//! `daemonset-canary get [NAME]`: the CanaryDaemonSets of a namespace (or of all, `-A`), one
//! line each, rendered by [`daemonset_canary::status_view::render_table`]; `-o wide` adds the
//! driver, the DaemonSet, the updated pods and the kstatus verdict; `-o yaml` and `-o json`
//! print the objects as kubectl does (a `List`, or the one object named). `-w` goes on after
//! the list and prints each change as it comes (a line, or a YAML document or JSON object),
//! until interrupted, as `kubectl get -w` does. An object that does not decode is listed from
//! its metadata and status, and a warning after the list says why.

use std::collections::BTreeMap;

use super::{KubeArgs, describe, object};
use anyhow::Context;
use canary_kube_adapter::CanaryDaemonSet;
use daemonset_canary::status_view;
use futures::StreamExt;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::ListParams;
use kube::runtime::watcher;

/// How `get` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    /// Extra columns: driver, DaemonSet, updated pods, kstatus verdict.
    Wide,
    /// The objects, as YAML.
    Yaml,
    /// The objects, as JSON.
    Json,
}

/// Arguments of `get`.
#[derive(Debug, clap::Args)]
pub struct GetArgs {
    /// Only this CanaryDaemonSet.
    name: Option<String>,
    /// The namespace. Default: the kubeconfig's namespace.
    #[arg(long, short = 'n', env = "CANARY_NAMESPACE")]
    namespace: Option<String>,
    /// Every namespace (as `kubectl get -A`).
    #[arg(long, short = 'A', conflicts_with = "namespace")]
    all_namespaces: bool,
    /// Output format: wide, yaml or json (default: the table).
    #[arg(long, short = 'o', value_enum)]
    output: Option<Output>,
    /// After the list, print each change until interrupted.
    #[arg(long, short = 'w')]
    watch: bool,
    #[command(flatten)]
    kube: KubeArgs,
}

/// Lists them, or says there are none (and where); with `-w`, goes on.
pub async fn run(args: GetArgs) -> anyhow::Result<()> {
    let connection = args.kube.connect().await?;
    // Untyped, each object decoded alone (see `object`): one stored object that does not
    // decode is listed from what does (its metadata and status) and a warning after the list
    // says why, instead of the whole list failing.
    let scope = (!args.all_namespaces).then(|| {
        args.namespace
            .clone()
            .unwrap_or_else(|| connection.client.default_namespace().to_owned())
    });
    let place = match &scope {
        Some(namespace) => format!("namespace {namespace:?}"),
        None => "any namespace".to_owned(),
    };
    let params = match &args.name {
        Some(name) => ListParams::default().fields(&format!("metadata.name={name}")),
        None => ListParams::default(),
    };
    let reads = object::list(&connection, scope.as_deref(), &params)
        .await
        .map_err(|error| anyhow::anyhow!(describe(&error, &connection.url)))?;
    let items: Vec<CanaryDaemonSet> = reads
        .iter()
        .map(|read| object::object_of(read).clone())
        .collect();
    match (&args.name, items.is_empty()) {
        (Some(name), true) if !args.watch => {
            anyhow::bail!("no CanaryDaemonSet {name:?} in {place}")
        }
        (None, true) => eprintln!("no CanaryDaemonSets in {place}"),
        _ => print!("{}", render(&args, &items, true)?),
    }
    for undecoded in reads.iter().filter_map(|read| read.as_ref().err()) {
        let cds = &undecoded.stand_in;
        eprintln!(
            "warning: {} does not decode: {}",
            object::which(&cds.namespace().unwrap_or_default(), &cds.name_any()),
            object::why(undecoded)
        );
    }
    if !args.watch {
        return Ok(());
    }
    // As `kubectl get -w`: each later version of an object, once. The watcher lists again after
    // a broken stream; what it lists that was printed already is not printed twice.
    let mut printed: BTreeMap<(String, String), String> = items.iter().map(version_of).collect();
    let config = match &args.name {
        Some(name) => watcher::Config::default().fields(&format!("metadata.name={name}")),
        None => watcher::Config::default(),
    };
    let mut events = std::pin::pin!(object::watch(&connection, scope.as_deref(), config));
    loop {
        let event = tokio::select! {
            event = events.next() => event,
            () = super::shutdown_signal() => return Ok(()),
        };
        let Some(event) = event else {
            return Ok(());
        };
        let read = match event {
            Ok(watcher::Event::Apply(read) | watcher::Event::InitApply(read)) => read,
            Ok(watcher::Event::Delete(read)) => {
                printed.remove(&version_of(object::object_of(&read)).0);
                read
            }
            Ok(watcher::Event::Init | watcher::Event::InitDone) => continue,
            Err(error) => {
                tracing::warn!("the watch broke, it starts again: {error}");
                continue;
            }
        };
        let changed = object::object_of(&read);
        let (key, version) = version_of(changed);
        if printed.get(&key) == Some(&version) {
            continue;
        }
        printed.insert(key, version);
        print!("{}", render(&args, std::slice::from_ref(changed), false)?);
        if let Err(undecoded) = &read {
            eprintln!(
                "warning: {} does not decode: {}",
                object::which(
                    &changed.namespace().unwrap_or_default(),
                    &changed.name_any()
                ),
                object::why(undecoded)
            );
        }
    }
}

/// The object's (namespace, name) and resource version.
fn version_of(cds: &CanaryDaemonSet) -> ((String, String), String) {
    (
        (cds.namespace().unwrap_or_default(), cds.name_any()),
        cds.resource_version().unwrap_or_default(),
    )
}

/// `items` as `args` asks: the table (`first`: with its header), or YAML or JSON (`first`: the
/// one object named, else a `List`; under `-w`, each later object alone).
fn render(args: &GetArgs, items: &[CanaryDaemonSet], first: bool) -> anyhow::Result<String> {
    let document = |items: &[CanaryDaemonSet]| -> anyhow::Result<serde_json::Value> {
        Ok(match items {
            [one] if args.name.is_some() || !first => serde_json::to_value(one)?,
            _ => serde_json::json!({
                "apiVersion": "v1",
                "kind": "List",
                "metadata": {"resourceVersion": ""},
                "items": items,
            }),
        })
    };
    Ok(match args.output {
        Some(Output::Json) => {
            let mut text = serde_json::to_string_pretty(&document(items)?)?;
            text.push('\n');
            text
        }
        Some(Output::Yaml) => {
            let text = serde_saphyr::to_string(&document(items)?).context("cannot write YAML")?;
            if first { text } else { format!("---\n{text}") }
        }
        wide => status_view::render_table(
            items,
            args.all_namespaces,
            wide == Some(Output::Wide),
            first,
            Timestamp::now(),
        ),
    })
}
