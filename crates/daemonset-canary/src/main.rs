//! daemonset-canary: the controller binary.
//!
//! Subcommands: `run` (the controller), `demo` (a rollout on the embedded simulator), `crd` (the
//! CustomResourceDefinition to install), `status NAME` (a human view of one CanaryDaemonSet),
//! `get` (a line per CanaryDaemonSet), `promote NAME` (end a pause step), `pause NAME` and
//! `resume NAME` (hold a rollout on request, let it go on), `retry NAME` (start a failed one
//! again), `abort NAME` and `undo NAME` (roll back), `history NAME` (the revisions rolled out),
//! `observe-kubevirt` (read-only metrics of KubeVirt's own upgrade) and `sim serve` (the
//! simulated cluster over HTTP, for kubectl and `run`); `demo` and `sim serve` come with the
//! default feature `simulator`, which the controller image leaves out. Every flag can also be set
//! through a `CANARY_*` environment variable, so the Deployment configures it without arguments.
//!
//! Errors end the process with one `error: ...` line on stderr and a non-zero exit code; bad flags
//! exit with 2 (clap's usage error).

mod cli;

use clap::{Parser, Subcommand};
use daemonset_canary::telemetry::{self, LogFormat};
use std::process::ExitCode;

/// Canary upgrades for DaemonSets: one canary pod first, then 10% at a time, the way KubeVirt's
/// virt-operator upgrades virt-handler.
///
/// Start with `daemonset-canary demo` to watch a rollout on a simulated 50-node cluster, then
/// install the CRD (`daemonset-canary crd | kubectl apply -f -`) and run the controller with
/// `daemonset-canary run`.
#[derive(Debug, Parser)]
#[command(name = "daemonset-canary", version, about, long_about)]
struct Cli {
    /// Log filter in tracing's EnvFilter syntax (e.g. `info` or `canary_kube_adapter=debug,info`);
    /// RUST_LOG wins when set. Default: `info` without the Kubernetes client library's lines
    /// below warn (the controller reports failed requests itself), `warn` for `demo` (its
    /// output is the timeline).
    #[arg(long, global = true, env = "CANARY_LOG_LEVEL")]
    log_level: Option<String>,
    /// Log line format: `plain` for people, `json` for log collectors. Logs go to stderr.
    #[arg(long, global = true, env = "CANARY_LOG_FORMAT", value_enum, default_value_t = LogFormat::Plain)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the controller against a cluster (current kubeconfig, --kubeconfig PATH, or in-cluster).
    Run(cli::run::RunArgs),
    /// Watch a rollout on a simulated cluster (in virtual time by default: seconds of wall time).
    #[cfg(feature = "simulator")]
    Demo(cli::demo::DemoArgs),
    /// Print the CanaryDaemonSet CustomResourceDefinition as YAML (pipe it to `kubectl apply -f -`).
    Crd,
    /// List CanaryDaemonSets (`-A`: in every namespace): phase, step, ready, version, age.
    Get(cli::get::GetArgs),
    /// Show one CanaryDaemonSet: phase and since when, pod counts, maxUnavailable, conditions,
    /// recent events.
    Status(cli::status::StatusArgs),
    /// End the pause step a Pods-driver rollout is held in (refused when it is not paused).
    Promote(cli::promote::PromoteArgs),
    /// Hold a rollout (both drivers): no pod deletion, no DaemonSet write until `resume`.
    Pause(cli::verb::TargetArgs),
    /// Let a rollout held by `pause` go on.
    Resume(cli::verb::TargetArgs),
    /// Start a failed rollout again from its first step (both drivers; refused unless failed).
    Retry(cli::verb::TargetArgs),
    /// Stop a rollout and roll back to the last revision that finished successfully, canary
    /// first (both drivers; refused at rest).
    Abort(cli::verb::TargetArgs),
    /// Roll out an earlier revision (default: the one before the current), canary first.
    Undo(cli::rollback::UndoArgs),
    /// List the revisions rolled out: number, version, outcome, start and end (`--revision N`:
    /// one revision, its pod template as a diff against the one before)
    History(cli::rollback::HistoryArgs),
    /// Wait until the rollout of the current spec is successful (or paused): exit 0 when it is,
    /// 1 when it failed or was rolled back (with the reason), 2 on timeout.
    Wait(cli::wait::WaitArgs),
    /// Replace every pod through the steps, canary first (as `kubectl rollout restart`).
    Restart(cli::edit::RestartArgs),
    /// Change the template (as `kubectl set image`).
    Set {
        #[command(subcommand)]
        command: SetCommand,
    },
    /// Read-only phase metrics for KubeVirt's own virt-handler upgrade (mode="observed"), next to
    /// an existing KubeVirt install. Never writes to the cluster.
    ObserveKubevirt(cli::observe_kubevirt::ObserveKubeVirtArgs),
    /// The simulated cluster.
    #[cfg(feature = "simulator")]
    Sim {
        #[command(subcommand)]
        command: SimCommand,
    },
}

#[derive(Debug, Subcommand)]
enum SetCommand {
    /// Set the image of one or more containers (`CONTAINER=IMAGE`): rolled out through the
    /// steps, canary first.
    Image(cli::edit::SetImageArgs),
}

#[cfg(feature = "simulator")]
#[derive(Debug, Subcommand)]
enum SimCommand {
    /// Serve a simulated cluster until interrupted, writing a kubeconfig once it accepts
    /// connections.
    Serve(cli::sim_serve::SimServeArgs),
    /// Play the simulator's node and neighbour behaviours on a cluster of KWOK nodes (what
    /// KWOK's Stages cannot), until interrupted.
    Kwok(cli::sim_kwok::SimKwokArgs),
}

fn main() -> ExitCode {
    // Help and usage name the command as the user typed it (`kubectl canary` as a plugin).
    let command =
        <Cli as clap::CommandFactory>::command().bin_name(daemonset_canary::format::command_name());
    let cli = match <Cli as clap::FromArgMatches>::from_arg_matches(&command.get_matches()) {
        Ok(cli) => cli,
        Err(error) => error.exit(),
    };
    // Print the error chain ourselves: returning anyhow from main prints a Debug dump (and a
    // backtrace when RUST_BACKTRACE is set), which buries the one line that matters.
    match run(cli) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    // Printing YAML needs neither logs nor a runtime.
    if let Command::Crd = cli.command {
        cli::crd::print()?;
        return Ok(ExitCode::SUCCESS);
    }
    let default_level = match cli.command {
        // The demo prints its own timeline; logs only say what goes wrong. A rollout's failure
        // is a scenario's outcome, which the timeline prints: not its WARN line as well.
        #[cfg(feature = "simulator")]
        Command::Demo(_) => "warn,canary_kube_adapter::reconcile::report=error",
        _ => telemetry::DEFAULT_FILTER,
    };
    telemetry::init(
        cli.log_level.as_deref().unwrap_or(default_level),
        cli.log_format,
    )?;
    match cli.command {
        Command::Crd => {}
        #[cfg(feature = "simulator")]
        Command::Demo(args) => return cli::demo::run(args),
        Command::Run(args) => current_thread()?.block_on(cli::run::run(args))?,
        Command::Status(args) => multi_thread()?.block_on(cli::status::run(args))?,
        Command::Get(args) => multi_thread()?.block_on(cli::get::run(args))?,
        Command::Promote(args) => multi_thread()?.block_on(cli::promote::run(args))?,
        Command::Pause(args) => multi_thread()?.block_on(cli::pause::pause(args))?,
        Command::Resume(args) => multi_thread()?.block_on(cli::pause::resume(args))?,
        Command::Retry(args) => multi_thread()?.block_on(cli::retry::run(args))?,
        Command::Abort(args) => multi_thread()?.block_on(cli::rollback::abort(args))?,
        Command::Undo(args) => multi_thread()?.block_on(cli::rollback::undo(args))?,
        Command::History(args) => multi_thread()?.block_on(cli::rollback::history(args))?,
        Command::Wait(args) => return multi_thread()?.block_on(cli::wait::run(args)),
        Command::Restart(args) => multi_thread()?.block_on(cli::edit::restart(args))?,
        Command::Set {
            command: SetCommand::Image(args),
        } => multi_thread()?.block_on(cli::edit::set_image(args))?,
        Command::ObserveKubevirt(args) => {
            multi_thread()?.block_on(cli::observe_kubevirt::run(args))?;
        }
        #[cfg(feature = "simulator")]
        Command::Sim {
            command: SimCommand::Serve(args),
        } => multi_thread()?.block_on(cli::sim_serve::run(args))?,
        #[cfg(feature = "simulator")]
        Command::Sim {
            command: SimCommand::Kwok(args),
        } => current_thread()?.block_on(cli::sim_kwok::run(args))?,
    }
    Ok(ExitCode::SUCCESS)
}

fn multi_thread() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| anyhow::anyhow!("cannot start the async runtime: {e}"))
}

/// The controller's runtime: one thread. A pass is short and the rest is decoding watch events;
/// with a worker per core, the workers woke each other for every event, and a 5,000-node
/// rollout cost 2.97 s of CPU instead of 2.15 s (issue 20, docs/benchmarks.md).
fn current_thread() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| anyhow::anyhow!("cannot start the async runtime: {e}"))
}
