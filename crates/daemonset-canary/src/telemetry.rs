//! Logging setup: tracing-subscriber with an env filter, plain or JSON lines, on stderr.
//!
//! - Plain lines carry ANSI colours only when stderr is a terminal: a log file or a pipe gets
//!   plain text.
//! - JSON lines put every field of an event at the top level (`flatten_event`), so that the
//!   `namespace` and `name` the controller logs are fields of their own for a log collector,
//!   next to `timestamp`, `level`, `target` and `message`.

use std::io::IsTerminal;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Plain,
    /// One JSON object per line, for log collectors.
    Json,
}

/// The default filter of the commands that talk to a cluster: `info`, without the client
/// library's own lines about failed requests (kube_client logs one per failed request and per
/// broken watch stream; the controller reports each failure itself, once, with context) and
/// without kube-runtime's span around every reconcile (the controller's lines name the
/// object). `--log-level debug` shows them all.
pub const DEFAULT_FILTER: &str = "info,kube_client=warn,kube_client::client=off,kube_runtime=warn";

/// Installs the global subscriber. `level` is an EnvFilter directive such as `info` or
/// `canary_kube_adapter=debug,info`; `RUST_LOG`, when set, wins.
pub fn init(level: &str, format: LogFormat) -> anyhow::Result<()> {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(level))
        .map_err(|e| anyhow::anyhow!("invalid log level {level:?}: {e}"))?;
    let registry = tracing_subscriber::registry().with(filter);
    let result = match format {
        LogFormat::Plain => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .with_ansi(std::io::stderr().is_terminal())
                    .with_writer(std::io::stderr),
            )
            .try_init(),
        LogFormat::Json => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .json()
                    .flatten_event(true)
                    .with_current_span(false)
                    .with_span_list(true)
                    .with_writer(std::io::stderr),
            )
            .try_init(),
    };
    result.map_err(|e| anyhow::anyhow!("cannot install the log subscriber: {e}"))
}
