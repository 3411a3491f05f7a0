//! The report: a Markdown table per measurement, the goals of issue 10 with pass/miss, and the
//! same figures as JSON.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use anyhow::Result;
use serde_json::json;

use crate::baseline::{BaselineFigures, median, percentile};
use crate::demo::DemoFigures;
use crate::goals::{Goal, Verdict};
use crate::oracle::OracleFigures;
use crate::pods::PodsFigures;
use crate::process::ProcessFigures;
use crate::rollout::RolloutFigures;

/// The simulated kubelet's nominal times (what `Sim::builder()` uses: canary-sim's
/// `KubeletConfig::default()`, before its seeded jitter): a pod replacement is the old pod's
/// termination, the new pod's start, then its readiness.
pub struct KubeletTimes {
    /// Old pod's termination grace.
    pub termination: Duration,
    /// From scheduling to containers running.
    pub start: Duration,
    /// From running to Ready.
    pub ready: Duration,
}

impl KubeletTimes {
    /// The simulator's defaults.
    pub fn of_sim() -> Self {
        let config = canary_sim::cluster::KubeletConfig::default();
        Self {
            termination: config.termination_grace,
            start: config.start_latency,
            ready: config.ready_delay,
        }
    }

    /// One pod replaced, from the DaemonSet controller deleting the old pod to the new one Ready.
    pub fn replacement(&self) -> Duration {
        self.termination + self.start + self.ready
    }
}

/// The 10% waves after the canary: the remaining pods in batches of ceil(10% of nodes).
pub fn waves(nodes: u32) -> u32 {
    if nodes <= 1 {
        return 0;
    }
    (nodes - 1).div_ceil(nodes.div_ceil(10))
}

/// The ideal makespan: the canary's replacement, then each wave's.
pub fn ideal(nodes: u32, kubelet: &KubeletTimes) -> Duration {
    kubelet.replacement() * (1 + waves(nodes))
}

/// Everything measured in one run.
#[derive(Default)]
pub struct Report {
    /// Per-rollout figures, every size.
    pub rollouts: Vec<RolloutFigures>,
    /// Baseline comparisons (first: the full cluster; second: one DaemonSet).
    pub baseline: Vec<BaselineFigures>,
    /// Controller-process figures.
    pub processes: Vec<ProcessFigures>,
    /// Pods-driver rollouts, every size.
    pub pods: Vec<PodsFigures>,
    /// The whole demo process, every size.
    pub demos: Vec<DemoFigures>,
    /// Our first rollout of each size against the oracle's.
    pub oracles: Vec<OracleFigures>,
}

const MIB: f64 = 1024.0 * 1024.0;

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

impl Report {
    fn kubelet(&self) -> KubeletTimes {
        KubeletTimes::of_sim()
    }

    fn by_size(&self) -> BTreeMap<u32, Vec<&RolloutFigures>> {
        let mut sizes: BTreeMap<u32, Vec<&RolloutFigures>> = BTreeMap::new();
        for figures in &self.rollouts {
            sizes.entry(figures.nodes).or_default().push(figures);
        }
        sizes
    }

    fn latencies(rollouts: &[&RolloutFigures]) -> (Vec<f64>, usize) {
        let mut found = Vec::new();
        let mut untriggered = 0;
        for reaction in rollouts.iter().flat_map(|r| &r.reactions) {
            match reaction.latency {
                Some(latency) => found.push(ms(latency)),
                None => untriggered += 1,
            }
        }
        (found, untriggered)
    }

    /// The Markdown report.
    pub fn markdown(&self) -> String {
        let mut out = String::new();
        let kubelet = self.kubelet();
        let _ = writeln!(out, "## Rollouts (in process, virtual time)\n");
        let _ = writeln!(
            out,
            "Ideal = (1 + waves) x {:.0} s (termination {:?} + start {:?} + ready {:?}); medians over the rollouts of each size.\n",
            kubelet.replacement().as_secs_f64(),
            kubelet.termination,
            kubelet.start,
            kubelet.ready
        );
        let _ = writeln!(
            out,
            "| nodes | rollouts | DaemonSet writes | status writes | API requests | reconciles | makespan (s) | ideal (s) | ratio | reaction p50 (ms) | reaction p99 (ms) |"
        );
        let _ = writeln!(
            out,
            "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"
        );
        for (nodes, rollouts) in self.by_size() {
            let writes: Vec<String> = rollouts
                .iter()
                .map(|r| r.daemon_set_writes.to_string())
                .collect();
            let med = |f: &dyn Fn(&RolloutFigures) -> f64| {
                let mut v: Vec<f64> = rollouts.iter().map(|r| f(r)).collect();
                median(&mut v)
            };
            let makespan = med(&|r| r.makespan.as_secs_f64());
            let ideal = ideal(nodes, &kubelet).as_secs_f64();
            let (mut latencies, untriggered) = Self::latencies(&rollouts);
            let _ = writeln!(
                out,
                "| {nodes} | {} | {} | {:.0} | {:.0} | {:.0} | {makespan:.1} | {ideal:.0} | {:.3} | {:.2} | {:.2}{} |",
                rollouts.len(),
                writes.join(", "),
                med(&|r| r.status_writes as f64),
                med(&|r| r.requests as f64),
                med(&|r| r.reconciles as f64),
                makespan / ideal,
                median(&mut latencies),
                percentile(&mut latencies, 0.99),
                if untriggered > 0 {
                    format!(" ({untriggered} without trigger)")
                } else {
                    String::new()
                },
            );
        }
        let _ = writeln!(out, "\nReaction latency by write, every size (ms):\n");
        let _ = writeln!(out, "| write | samples | p50 | p99 | max |");
        let _ = writeln!(out, "|---|---:|---:|---:|---:|");
        for write in ["start", "widen", "finish"] {
            let mut values: Vec<f64> = self
                .rollouts
                .iter()
                .flat_map(|r| &r.reactions)
                .filter(|x| x.write == write)
                .filter_map(|x| x.latency.map(ms))
                .collect();
            let max = values.iter().copied().fold(0.0, f64::max);
            let _ = writeln!(
                out,
                "| {write} | {} | {:.2} | {:.2} | {max:.2} |",
                values.len(),
                median(&mut values),
                percentile(&mut values, 0.99)
            );
        }
        if !self.pods.is_empty() {
            let _ = writeln!(
                out,
                "\n## Pods driver rollouts (in process, virtual time)\n"
            );
            let _ = writeln!(
                out,
                "Steps `[{{nodes: 1}}, {{pause: 30s}}, {{nodes: 10%}}]` then `{{nodes: 100%}}`, maxUnavailable 10% after the canary. Ideal = 30 s + (1 + waves) x {:.0} s. Requests per node = all requests / nodes.\n",
                kubelet.replacement().as_secs_f64()
            );
            let _ = writeln!(
                out,
                "| nodes | pod DELETEs | per node updated | DaemonSet writes | status writes | event writes | other requests | all requests | requests per node | makespan (s) | ideal (s) | ratio |"
            );
            let _ = writeln!(
                out,
                "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
            );
            for p in &self.pods {
                let ideal = crate::pods::ideal(p.nodes, &kubelet).as_secs_f64();
                let other = p.requests.saturating_sub(
                    p.pod_deletes + p.daemon_set_writes + p.status_writes + p.event_writes,
                );
                let _ = writeln!(
                    out,
                    "| {} | {} | {:.2} | {} | {} | {} | {other} | {} | {:.2} | {:.1} | {ideal:.0} | {:.3} |",
                    p.nodes,
                    p.pod_deletes,
                    p.pod_deletes as f64 / f64::from(p.nodes.max(1)),
                    p.daemon_set_writes,
                    p.status_writes,
                    p.event_writes,
                    p.requests,
                    p.requests as f64 / f64::from(p.nodes.max(1)),
                    p.makespan.as_secs_f64(),
                    p.makespan.as_secs_f64() / ideal
                );
            }
        }
        let _ = writeln!(
            out,
            "\n## Baseline: counting one DaemonSet's pods per reconcile\n"
        );
        let _ = writeln!(
            out,
            "| nodes | DaemonSets cached | reference: 2 scans by owner name (µs) | ours: index by owner (µs) | reference / ours | ours among all pods (µs) | ours, this DaemonSet's pods alone (µs) | ratio |"
        );
        let _ = writeln!(out, "|---:|---:|---:|---:|---:|---:|---:|---:|");
        for b in &self.baseline {
            let _ = writeln!(
                out,
                "| {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.2} |",
                b.nodes,
                b.daemon_sets,
                b.reference_ns / 1e3,
                b.ours_ns / 1e3,
                b.speedup(),
                b.ours_among_others_ns / 1e3,
                b.ours_alone_ns / 1e3,
                b.independence()
            );
        }
        if !self.processes.is_empty() {
            let _ = writeln!(
                out,
                "\n## Controller process (real time, separate processes)\n"
            );
            let _ = writeln!(
                out,
                "| cluster | nodes | CanaryDaemonSets | peak memory (MiB) | of it, peak anonymous (MiB) | mapped from the binary (MiB) | CPU install + rollout (s) | CPU rollout (s) | rollout wall (s) |"
            );
            let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|");
            for p in &self.processes {
                let _ = writeln!(
                    out,
                    "| {} | {} | {} | {:.1} | {:.1} | {:.1} | {:.2} | {:.2} | {:.1} |",
                    p.target,
                    p.nodes,
                    p.daemon_sets,
                    p.peak_memory as f64 / MIB,
                    p.peak_anonymous as f64 / MIB,
                    p.file_resident as f64 / MIB,
                    p.cpu_total,
                    p.cpu_rollout,
                    p.rollout_wall.as_secs_f64(),
                );
            }
            if let Some(p) = self.processes.first() {
                let _ = writeln!(out, "\nController command: `{}`", p.controller);
            }
        }
        self.demo_markdown(&mut out);
        let _ = writeln!(out, "\n## Goals (issue 10)\n");
        for (ok, line) in self.goals() {
            let _ = writeln!(out, "- {} {line}", if ok { "PASS" } else { "MISS" });
        }
        let _ = writeln!(out, "\n## Goals (issue 20)\n");
        for goal in crate::goals::issue_20(self) {
            let _ = writeln!(out, "- {} {}", goal.verdict, goal.text);
        }
        let _ = writeln!(
            out,
            "\n## Goals (issue 53, {} nodes)\n",
            crate::goals::LARGE_NODES
        );
        for goal in crate::goals::issue_53(self) {
            let _ = writeln!(out, "- {} {}", goal.verdict, goal.text);
        }
        let missed = self.missed();
        if !missed.is_empty() {
            let _ = writeln!(out, "\n**{} goal(s) missed:**\n", missed.len());
            for line in &missed {
                let _ = writeln!(out, "- {line}");
            }
        }
        out
    }

    /// The demo and oracle tables.
    fn demo_markdown(&self, out: &mut String) {
        if !self.demos.is_empty() {
            let _ = writeln!(out, "\n## The demo, whole process (wall time)\n");
            let _ = writeln!(
                out,
                "`{}`, each size run one or more times; best = the least disturbed run.\n",
                crate::demo::command(0).replace("--nodes 0", "--nodes N")
            );
            let _ = writeln!(
                out,
                "| nodes | best wall (s) | every run (s) | best / best at {} nodes | reconciles | peak memory (MiB, least run) | per node (KB) |",
                crate::goals::SMALL_NODES
            );
            let _ = writeln!(out, "|---:|---:|---|---:|---:|---:|---:|");
            let small = self
                .demos
                .iter()
                .find(|d| d.nodes == crate::goals::SMALL_NODES)
                .map(|d| d.best().as_secs_f64());
            for d in &self.demos {
                let runs: Vec<String> = d
                    .walls
                    .iter()
                    .map(|w| format!("{:.2}", w.as_secs_f64()))
                    .collect();
                let peak = d.least_peak_memory();
                let _ = writeln!(
                    out,
                    "| {} | {:.2} | {} | {} | {} | {} | {} |",
                    d.nodes,
                    d.best().as_secs_f64(),
                    runs.join(", "),
                    small.map_or_else(
                        || "—".to_owned(),
                        |s| format!("{:.2}", d.best().as_secs_f64() / s)
                    ),
                    d.reconciles
                        .map_or_else(|| "—".to_owned(), |r| r.to_string()),
                    peak.map_or_else(
                        || "—".to_owned(),
                        |m| format!("{:.0}", m as f64 / (1024.0 * 1024.0))
                    ),
                    peak.map_or_else(
                        || "—".to_owned(),
                        |m| format!("{:.1}", m as f64 / 1000.0 / f64::from(d.nodes.max(1)))
                    ),
                );
            }
        }
        if !self.oracles.is_empty() {
            let _ = writeln!(
                out,
                "\n## Makespan over the oracle (in process, virtual time)\n"
            );
            let _ = writeln!(
                out,
                "The oracle makes the controller's three DaemonSet writes of the first rollout at the exact moments they become possible, with no reaction delay, in a simulator of the same size and seed.\n"
            );
            let _ = writeln!(out, "| nodes | ours (s) | oracle (s) | ours / oracle |");
            let _ = writeln!(out, "|---:|---:|---:|---:|");
            for o in &self.oracles {
                let _ = writeln!(
                    out,
                    "| {} | {:.3} | {:.3} | {:.4} |",
                    o.nodes,
                    o.ours.as_secs_f64(),
                    o.oracle.as_secs_f64(),
                    o.ratio()
                );
            }
        }
    }

    /// Every missed goal, issue 10's and issue 20's.
    pub fn missed(&self) -> Vec<String> {
        let old = self
            .goals()
            .into_iter()
            .filter(|(ok, _)| !ok)
            .map(|(_, line)| format!("issue 10: {line}"));
        let new = crate::goals::issue_20(self)
            .into_iter()
            .filter(|g| g.verdict == Verdict::Miss)
            .map(|g: Goal| format!("issue 20: {}", g.text));
        let large = crate::goals::issue_53(self)
            .into_iter()
            .filter(|g| g.verdict == Verdict::Miss)
            .map(|g: Goal| format!("issue 53: {}", g.text));
        old.chain(new).chain(large).collect()
    }

    /// Each goal: whether it is met, and the figure behind it.
    pub fn goals(&self) -> Vec<(bool, String)> {
        let mut goals = Vec::new();
        let kubelet = self.kubelet();
        let wrong: Vec<String> = self
            .rollouts
            .iter()
            .filter(|r| r.daemon_set_writes != if r.nodes == 1 { 2 } else { 3 })
            .map(|r| format!("{} on {} nodes", r.daemon_set_writes, r.nodes))
            .collect();
        goals.push((
            wrong.is_empty() && !self.rollouts.is_empty(),
            format!(
                "three DaemonSet writes per rollout at every size ({} rollouts; off: {:?})",
                self.rollouts.len(),
                wrong
            ),
        ));
        let worst = self
            .rollouts
            .iter()
            .map(|r| {
                (
                    r.makespan.as_secs_f64() / ideal(r.nodes, &kubelet).as_secs_f64(),
                    r.nodes,
                )
            })
            .max_by(|a, b| a.0.total_cmp(&b.0));
        if let Some((ratio, nodes)) = worst {
            goals.push((
                ratio <= 1.05,
                format!("makespan within 5% of ideal (worst ratio {ratio:.3}, on {nodes} nodes)"),
            ));
        }
        if let Some(full) = self.baseline.first() {
            let ratio = full.independence();
            goals.push((
                ratio <= 1.5,
                format!(
                    "reconcile cost independent of other DaemonSets' pods (ours among {} DaemonSets' pods / ours with this DaemonSet's pods alone: {ratio:.2}); ours is {:.1}x cheaper than the reference",
                    full.daemon_sets,
                    full.speedup()
                ),
            ));
        }
        for p in &self.processes {
            let limit = if p.daemon_sets <= 1 { 64.0 } else { 256.0 };
            let mib = p.peak_memory as f64 / MIB;
            goals.push((
                mib < limit,
                format!("peak memory under {limit:.0} MiB for {} CanaryDaemonSets on {} nodes of {} ({mib:.1} MiB)", p.daemon_sets, p.nodes, p.target),
            ));
        }
        if !self.pods.is_empty() {
            let off: Vec<String> = self
                .pods
                .iter()
                .filter(|p| p.pod_deletes != u64::from(p.nodes) || p.daemon_set_writes != 1)
                .map(|p| {
                    format!(
                        "{} DELETEs, {} writes on {} nodes",
                        p.pod_deletes, p.daemon_set_writes, p.nodes
                    )
                })
                .collect();
            goals.push((
                off.is_empty(),
                format!(
                    "Pods driver: one pod DELETE per node updated and one DaemonSet write per rollout ({} rollouts; off: {off:?})",
                    self.pods.len()
                ),
            ));
        }
        let all: Vec<&RolloutFigures> = self.rollouts.iter().collect();
        let (mut latencies, untriggered) = Self::latencies(&all);
        if !latencies.is_empty() {
            let p99 = percentile(&mut latencies, 0.99);
            goals.push((
                p99 < 10.0 && untriggered == 0,
                format!("reaction p99 under 10 ms in process ({p99:.2} ms over {} writes, {untriggered} without a trigger)", latencies.len()),
            ));
        }
        goals
    }

    /// Every figure as JSON.
    pub fn json(&self) -> Result<String> {
        let kubelet = self.kubelet();
        let rollouts: Vec<_> = self
            .rollouts
            .iter()
            .map(|r| {
                json!({
                    "nodes": r.nodes,
                    "daemon_set_writes": r.daemon_set_writes,
                    "status_writes": r.status_writes,
                    "requests": r.requests,
                    "reconciles": r.reconciles,
                    "makespan_seconds": r.makespan.as_secs_f64(),
                    "ideal_seconds": ideal(r.nodes, &kubelet).as_secs_f64(),
                    "reactions": r.reactions.iter().map(|x| json!({
                        "write": x.write,
                        "latency_ms": x.latency.map(ms),
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        let processes: Vec<_> = self
            .processes
            .iter()
            .map(|p| {
                json!({
                    "cluster": p.target,
                    "nodes": p.nodes,
                    "daemon_sets": p.daemon_sets,
                    "peak_memory_bytes": p.peak_memory,
                    "peak_anonymous_bytes": p.peak_anonymous,
                    "file_resident_bytes": p.file_resident,
                    "cpu_total_seconds": p.cpu_total,
                    "cpu_rollout_seconds": p.cpu_rollout,
                    "rollout_wall_seconds": p.rollout_wall.as_secs_f64(),
                    "controller": p.controller,
                })
            })
            .collect();
        let goals: Vec<_> = self
            .goals()
            .into_iter()
            .map(|(ok, what)| json!({"met": ok, "goal": what}))
            .collect();
        let pods: Vec<_> = self
            .pods
            .iter()
            .map(|p| {
                json!({
                    "nodes": p.nodes,
                    "pod_deletes": p.pod_deletes,
                    "daemon_set_writes": p.daemon_set_writes,
                    "status_writes": p.status_writes,
                    "event_writes": p.event_writes,
                    "requests": p.requests,
                    "makespan_seconds": p.makespan.as_secs_f64(),
                    "ideal_seconds": crate::pods::ideal(p.nodes, &kubelet).as_secs_f64(),
                })
            })
            .collect();
        let demos: Vec<_> = self
            .demos
            .iter()
            .map(|d| {
                json!({
                    "nodes": d.nodes,
                    "best_wall_seconds": d.best().as_secs_f64(),
                    "wall_seconds": d.walls.iter().map(Duration::as_secs_f64).collect::<Vec<_>>(),
                    "reconciles": d.reconciles,
                    "peak_memory_bytes": d.peak_memory,
                    "least_peak_memory_bytes": d.least_peak_memory(),
                })
            })
            .collect();
        let oracles: Vec<_> = self
            .oracles
            .iter()
            .map(|o| {
                json!({
                    "nodes": o.nodes,
                    "ours_seconds": o.ours.as_secs_f64(),
                    "oracle_seconds": o.oracle.as_secs_f64(),
                    "ratio": o.ratio(),
                })
            })
            .collect();
        let goals_20: Vec<_> = crate::goals::issue_20(self)
            .into_iter()
            .map(|g| json!({"verdict": g.verdict.to_string(), "goal": g.text}))
            .collect();
        let goals_53: Vec<_> = crate::goals::issue_53(self)
            .into_iter()
            .map(|g| json!({"verdict": g.verdict.to_string(), "goal": g.text}))
            .collect();
        Ok(serde_json::to_string_pretty(&json!({
            "demo": demos,
            "goals_issue_53": goals_53,
            "oracle": oracles,
            "goals_issue_20": goals_20,
            "rollouts": rollouts,
            "pods_rollouts": pods,
            "baseline": self.baseline,
            "processes": processes,
            "goals": goals,
        }))?)
    }
}
