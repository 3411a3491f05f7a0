//! `daemonset-canary demo`: a rollout on the embedded simulator, shown as it happens.
//!
//! The scenario ([`daemonset_canary::demo::scenario`]) starts canary-sim and the real controller in
//! process, installs `v1` and upgrades to `v2`. By default it runs in virtual time (a
//! current-thread runtime with a paused clock: timers fire as soon as nothing else can run), so a
//! rollout of hours takes seconds; `--real-time` runs on the wall clock, for watching it live or
//! letting Prometheus scrape it. The metrics server, when asked for, runs on its own thread with a
//! real clock, so scrapes and `--hold` work whichever clock the rollout uses.
//!
//! Output: one line per step of the controller (every phase change and every DaemonSet write,
//! in order), one JSON object per step with `--json`, and on a terminal a live bar (indicatif)
//! below the lines. `--plot` is checked before the rollout and written after it.

use super::shutdown_signal;
use anyhow::Context;
use canary_kube_adapter::Health;
use canary_state_machine::{Compatibility, Driver};
use clap::builder::TypedValueParser;
use daemonset_canary::demo::plot::PlotFile;
use daemonset_canary::demo::scenario::{Scenario, ScenarioConfig, ScenarioKind, ScenarioReport};
use daemonset_canary::demo::timeline::{Sample, step_json, step_line, summary_json, summary_line};
use daemonset_canary::format::count;
use daemonset_canary::listen::{bind_error, parse_listen_addr};
use daemonset_canary::metrics::{Metrics, Mode, bridge};
use daemonset_canary::server::{Server, ServerState};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::{IsTerminal, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Arguments of `demo`.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Nodes of the simulated cluster (at most 65,000, GKE's largest clusters; about 2.5 GB of
    /// memory and a minute there: docs/benchmarks.md).
    #[arg(long, env = "CANARY_DEMO_NODES", default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=65_000))]
    nodes: u32,
    /// What happens to the new version: `healthy` (every pod becomes ready), `crashloop-canary`
    /// (the canary crash-loops: the rollout fails, which is this scenario's expected end),
    /// `slow-start` (pods take 90 s to become ready), `node-churn` (nodes join, leave and go
    /// NotReady during the rollout), `zone-by-zone` (Pods driver: one canary node, then each of
    /// three zones whole before the next), `unhealthy-node` (Pods driver: one node NotReady
    /// throughout, deferred, the rollout still successful), `rollback` (the canary crash-loops
    /// and `onFailure: Rollback` rolls back to v1), `bad-metrics` (the new version is ready
    /// everywhere but its agents report 10% errors: the canary's analysis fails it before
    /// anything widens, on either driver), `surge` (surge on the MaxUnavailable driver, a 30 s
    /// image pull: the agent downtime is 0), `pre-pull` (Pods driver: a pause pre-pulls every
    /// other node, whose pods then start without the 20 s pull).
    #[arg(long, env = "CANARY_DEMO_SCENARIO", value_enum, default_value_t = ScenarioKind::Healthy)]
    scenario: ScenarioKind,
    /// Seed of the simulator's random choices (timing jitter): the same seed replays the same
    /// rollout in virtual time.
    #[arg(long, env = "CANARY_DEMO_SEED", default_value_t = 1)]
    seed: u64,
    /// Decision table: `fixed` (quirks fixed) or `kubevirt` (the reference, quirk for quirk).
    #[arg(long, env = "CANARY_DEMO_COMPATIBILITY", default_value = "fixed", value_parser = compatibility_arg())]
    compatibility: Compatibility,
    /// Driver: `max-unavailable` (the DaemonSet controller replaces the pods, steered through
    /// maxUnavailable) or `pods` (the DaemonSet is OnDelete; the controller deletes old pods
    /// step by step: one canary node, a 30 s soak judged by the agents' error ratio (analysis
    /// against the simulator's Prometheus), half the nodes 10% at a time, the rest).
    /// `zone-by-zone` and `unhealthy-node` use `pods` whatever this says.
    #[arg(long, env = "CANARY_DEMO_DRIVER", default_value = "max-unavailable", value_parser = driver_arg())]
    driver: Driver,
    /// Run on the wall clock instead of virtual time (a 50-node rollout then takes minutes).
    #[arg(long, env = "CANARY_DEMO_REAL_TIME")]
    real_time: bool,
    /// Print one JSON object per step (phase change or DaemonSet write), then a summary object,
    /// instead of text.
    #[arg(long, env = "CANARY_DEMO_JSON")]
    json: bool,
    /// Also draw the rollout into this file: SVG for a name ending in .svg, PNG for .png.
    #[arg(long, env = "CANARY_DEMO_PLOT", value_name = "FILE.svg|FILE.png")]
    plot: Option<PathBuf>,
    /// Serve /metrics, /healthz and /readyz on this address while the demo runs (port 0: any
    /// free port, printed on stderr).
    #[arg(long, env = "CANARY_METRICS_ADDR", value_parser = parse_listen_addr)]
    metrics_addr: Option<SocketAddr>,
    /// Keep serving /metrics this many seconds after the rollout ended (so Prometheus can scrape
    /// the end state); SIGINT/SIGTERM end it early.
    #[arg(
        long,
        env = "CANARY_DEMO_HOLD",
        value_name = "SECONDS",
        default_value_t = 0,
        requires = "metrics_addr"
    )]
    hold: u64,
    /// Write the final /metrics exposition to this file (for `cargo xtask lint-deploy
    /// --exposition FILE`).
    #[arg(long, env = "CANARY_DEMO_METRICS_FILE", value_name = "FILE")]
    metrics_file: Option<PathBuf>,
    /// Give up when the rollout has not ended after this many (virtual or real) seconds.
    #[arg(long, env = "CANARY_DEMO_TIMEOUT", value_name = "SECONDS", default_value_t = 6 * 3600)]
    timeout: u64,
}

/// Runs the demo; the exit code says whether the scenario ended as it should.
pub fn run(args: DemoArgs) -> anyhow::Result<ExitCode> {
    let driver = args.scenario.required_driver().unwrap_or(args.driver);
    if args.scenario == ScenarioKind::Surge && args.compatibility == Compatibility::KubeVirt {
        anyhow::bail!(
            "the surge scenario needs --compatibility fixed: virt-operator (KubeVirt compatibility) has no surge"
        );
    }
    if driver == Driver::Pods && args.compatibility == Compatibility::KubeVirt {
        anyhow::bail!(
            "the {} driver needs --compatibility fixed: virt-operator (KubeVirt compatibility) only steers maxUnavailable",
            driver
        );
    }
    // A bad plot path fails now, not after the rollout.
    let plot = args.plot.as_deref().map(PlotFile::check).transpose()?;
    let metrics = Arc::new(Metrics::new().context("cannot create the metrics")?);
    let served = args
        .metrics_addr
        .map(|addr| MetricsServer::start(addr, metrics.clone()))
        .transpose()?;
    let rollout_runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(!args.real_time)
        .build()
        .context("cannot start the demo's runtime")?;
    let started = Instant::now();
    let mut printer = Printer::new(args.json);
    let config = ScenarioConfig {
        nodes: args.nodes,
        seed: args.seed,
        kind: args.scenario,
        compatibility: args.compatibility,
        driver: args.driver,
        timeout: Duration::from_secs(args.timeout),
        ..ScenarioConfig::default()
    };
    if !args.json {
        printer.intro(&args);
    }
    let report = rollout_runtime.block_on(rollout(config, metrics.clone(), &mut printer))?;
    // The simulated cluster lives in this runtime's tasks: at 5,000 nodes, hundreds of MB of
    // JSON trees (every object and the watch history), which took about a tenth of the
    // demo's wall time to free one allocation at a time. Nothing runs on the runtime any
    // more and the process ends soon: the OS takes the memory back at once.
    std::mem::forget(rollout_runtime);
    printer.finish(&report);
    if !args.json {
        eprintln!(
            "({}, {} in {:.1}s of wall time)",
            count(u64::from(args.nodes), "node", "nodes"),
            if args.real_time {
                "real time"
            } else {
                "virtual time"
            },
            started.elapsed().as_secs_f64()
        );
    }
    if let Some(plot) = &plot {
        let title = format!(
            "{}, scenario {}, compatibility {}",
            count(u64::from(args.nodes), "node", "nodes"),
            scenario_name(args.scenario),
            args.compatibility
        );
        plot.write(&title, report.timeline.samples(), &report.summary)?;
        eprintln!("plot written to {}", plot.path.display());
    }
    if let Some(path) = &args.metrics_file {
        let text = metrics.encode().context("cannot encode the metrics")?;
        std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))?;
    }
    if let Some(server) = served {
        server.hold(Duration::from_secs(args.hold));
    }
    if report.as_expected {
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!(
            "error: the {} scenario should end {}, it ended {}",
            scenario_name(args.scenario),
            args.scenario.expected_result(),
            report.summary.result
        );
        Ok(ExitCode::FAILURE)
    }
}

/// Installs v1, upgrades to v2 and reports, with the controller's transitions in `metrics`.
async fn rollout(
    config: ScenarioConfig,
    metrics: Arc<Metrics>,
    printer: &mut Printer,
) -> anyhow::Result<ScenarioReport> {
    let reports = config.observer.reports();
    let scenario = Scenario::start(config).await?;
    let bridge = tokio::spawn(bridge::run(reports, metrics, Mode::Driven));
    scenario.install().await?;
    let mut report = scenario.upgrade(|sample| printer.sample(sample)).await?;
    // Let the bridge take the last reports before the controller goes.
    tokio::time::sleep(Duration::from_secs(2)).await;
    scenario.judge_availability(&mut report).await?;
    scenario.stop().await?;
    bridge.abort();
    Ok(report)
}

/// `--driver`: the state machine's names in any letter case, listed as `max-unavailable` and
/// `pods` in `--help`.
fn driver_arg() -> impl TypedValueParser<Value = Driver> {
    clap::builder::PossibleValuesParser::new(["max-unavailable", "pods"])
        .try_map(|name| name.parse())
}

/// `--compatibility`: the state machine's names in any letter case, listed as `fixed` and
/// `kubevirt` in `--help`.
fn compatibility_arg() -> impl TypedValueParser<Value = Compatibility> {
    clap::builder::PossibleValuesParser::new(["fixed", "kubevirt"]).try_map(|name| name.parse())
}

fn scenario_name(kind: ScenarioKind) -> String {
    clap::ValueEnum::to_possible_value(&kind)
        .map(|v| v.get_name().to_owned())
        .unwrap_or_else(|| format!("{kind:?}"))
}

/// What `--compatibility` changes, said before the rollout (the timeline shows it: in KubeVirt
/// mode `successful` comes with the revert write, in the default strategy one pass later).
fn compatibility_note(compatibility: Compatibility) -> &'static str {
    match compatibility {
        Compatibility::Fixed => {
            "compatibility Fixed: virt-operator's quirks fixed: done once the revert is observed, crash loops watched for the whole rollout, a 10-minute progress deadline (--compatibility kubevirt shows the reference)"
        }
        Compatibility::KubeVirt => {
            "compatibility KubeVirt: virt-operator's decision table quirk for quirk: done in the revert's own pass (kubevirt#18666), any restart of a new pod fails the canary but only until one is ready, no progress deadline"
        }
    }
}

/// Prints the rollout: JSON lines, plain lines, and on a terminal a live bar under the lines.
struct Printer {
    json: bool,
    bar: Option<ProgressBar>,
}

impl Printer {
    fn new(json: bool) -> Self {
        let live = !json && std::io::stdout().is_terminal();
        let bar = live.then(|| {
            let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stdout());
            // The template is a constant: it parses, else the bar is plain.
            if let Ok(style) = ProgressStyle::with_template(
                "{prefix:>7}  {msg:<11} [{bar:24}] {pos:>5}/{len:<5} ready",
            ) {
                bar.set_style(style.progress_chars("#>."));
            }
            bar
        });
        Self { json, bar }
    }

    fn intro(&self, args: &DemoArgs) {
        println!(
            "daemonset-canary demo: {}, scenario {}, compatibility {}, seed {}",
            count(u64::from(args.nodes), "node", "nodes"),
            scenario_name(args.scenario),
            args.compatibility,
            args.seed
        );
        println!("{}", compatibility_note(args.compatibility));
        match args.scenario {
            ScenarioKind::Surge => println!(
                "surge: the canary is one surged pod, the widening surges 10% (the lines' step values are written as maxSurge, with maxUnavailable 0); each new pod pulls its image for 30 s beside the old one, which goes once the new one is ready"
            ),
            ScenarioKind::PrePull => {
                println!(
                    "pre-pull: every new image takes 20 s to pull; driver Pods: one canary node, a pause while every other node pre-pulls the new image (at most 10 at once), then the rest at most 10% at a time"
                );
                println!(
                    "installing v1, then rolling out v2: one line per phase change, step or DaemonSet write (times are seconds since the upgrade began)"
                );
                return;
            }
            _ => {}
        }
        if args.scenario.required_driver().unwrap_or(args.driver) == Driver::Pods {
            println!(
                "driver Pods: the DaemonSet is OnDelete and the controller deletes old pods itself: one canary node, a 30 s soak judged by the agents' error ratio (analysis: at most 5% and at most twice the old nodes'), half the nodes at most 10% at a time, then the rest{}",
                if args.scenario == ScenarioKind::ZoneByZone {
                    ", one zone at a time"
                } else {
                    ""
                }
            );
            println!(
                "installing v1, then rolling out v2: one line per phase change, step or DaemonSet write (times are seconds since the upgrade began)"
            );
            return;
        }
        println!(
            "installing v1, then rolling out v2: one line per phase change or DaemonSet write (times are seconds since the upgrade began)"
        );
    }

    fn sample(&mut self, sample: &Sample) {
        if let Some(bar) = &self.bar {
            bar.set_length(u64::from(sample.desired));
            bar.set_position(u64::from(sample.updated_ready));
            bar.set_prefix(daemonset_canary::format::format_seconds(sample.t));
            bar.set_message(sample.phase.as_str());
            if sample.is_step() {
                bar.println(step_line(sample));
            }
            return;
        }
        if !sample.is_step() {
            return;
        }
        let line = if self.json {
            step_json(sample)
        } else {
            step_line(sample)
        };
        let mut stdout = std::io::stdout().lock();
        // A closed stdout must not stop the rollout: output errors are ignored here.
        let _ = writeln!(stdout, "{line}");
        let _ = stdout.flush();
    }

    fn finish(&mut self, report: &ScenarioReport) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
        let line = if self.json {
            let summary = summary_json(&report.summary);
            match (&report.availability, serde_json::from_str(&summary)) {
                (Some(a), Ok(serde_json::Value::Object(mut map))) => {
                    map.insert(
                        "agentDowntimeNodeSeconds".into(),
                        a.downtime_node_seconds.into(),
                    );
                    map.insert("agentDowntimeGaps".into(), a.gaps.into());
                    map.insert("newPodsPulled".into(), a.pulled.into());
                    map.insert("newPodsImagePresent".into(), a.already_present.into());
                    serde_json::Value::Object(map).to_string()
                }
                _ => summary,
            }
        } else {
            match &report.availability {
                Some(a) => format!("{}\n{}", a.line(), summary_line(&report.summary)),
                None => summary_line(&report.summary),
            }
        };
        let mut stdout = std::io::stdout().lock();
        let _ = writeln!(stdout, "{line}");
        let _ = stdout.flush();
    }
}

/// The metrics endpoints on their own thread and wall clock.
struct MetricsServer {
    runtime: tokio::runtime::Runtime,
    stop: tokio::sync::oneshot::Sender<()>,
}

impl MetricsServer {
    fn start(addr: SocketAddr, metrics: Arc<Metrics>) -> anyhow::Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .context("cannot start the metrics server's runtime")?;
        let health = Health::default();
        health.set_started();
        let state = ServerState { metrics, health };
        let server = runtime
            .block_on(Server::bind(addr, state))
            .map_err(|error| anyhow::anyhow!(bind_error(addr, &error)))?;
        let bound = server.local_addr().unwrap_or(addr);
        eprintln!("serving metrics on http://{bound}/metrics");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        runtime.spawn(server.serve(async {
            let _ = stopped.await;
        }));
        Ok(Self { runtime, stop })
    }

    /// Keeps serving for `hold` (or until SIGINT/SIGTERM), then stops.
    fn hold(self, hold: Duration) {
        if !hold.is_zero() {
            eprintln!("holding /metrics for {}s (Ctrl-C ends it)", hold.as_secs());
            self.runtime.block_on(async {
                tokio::select! {
                    () = tokio::time::sleep(hold) => {}
                    () = shutdown_signal() => {}
                }
            });
        }
        let _ = self.stop.send(());
        self.runtime.shutdown_timeout(Duration::from_secs(1));
    }
}
