//! daemonset-canary: the controller binary.
//!
//! Subcommands so far: `sim serve`, which serves the simulated cluster (canary-sim) over HTTP on
//! loopback and writes a kubeconfig for it, so that kubectl and the controller can use it.

mod sim_serve;

use clap::{Parser, Subcommand};
use daemonset_canary::telemetry::{self, LogFormat};

/// Canary upgrades for DaemonSets.
#[derive(Debug, Parser)]
#[command(name = "daemonset-canary", version, about)]
struct Cli {
    /// Log filter (EnvFilter syntax); RUST_LOG wins when set.
    #[arg(long, global = true, default_value = "info")]
    log_level: String,
    /// Log line format.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Plain)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The simulated cluster.
    Sim {
        #[command(subcommand)]
        command: SimCommand,
    },
}

#[derive(Debug, Subcommand)]
enum SimCommand {
    /// Serve a simulated cluster until interrupted, writing a kubeconfig once it accepts
    /// connections.
    Serve(sim_serve::SimServeArgs),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    telemetry::init(&cli.log_level, cli.log_format)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    match cli.command {
        Command::Sim {
            command: SimCommand::Serve(args),
        } => runtime.block_on(sim_serve::run(args)),
    }
}
