//! The demo's wall time against the cluster size, as an SVG (`target/bench/demo-wall.svg`),
//! from the harness's JSON report: the best run per size, the goal (5 s at 5,000 nodes), and
//! linear growth from the 1,000-node time for comparison (time(5,000)/time(1,000) at most 6
//! means little worse than linear).
//!
//! plotters' SVG backend, with the font the demo's plots compile in (DejaVu Sans, Latin-1,
//! `crates/daemonset-canary/assets/`) registered for text: the workspace builds plotters with
//! `ab_glyph`, which lays text out from a registered font and finds no system font (a
//! workspace test run failed with `FontUnavailable` when xtask asked for plotters without it
//! and relied on feature unification not happening).

use anyhow::{Context, Result, bail};
use plotters::prelude::*;
use serde_json::Value;
use std::path::Path;

/// The demo sizes and best wall times (seconds) in the harness's JSON report.
pub fn demo_points(report: &Value) -> Vec<(f64, f64)> {
    report["demo"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|d| Some((d["nodes"].as_f64()?, d["best_wall_seconds"].as_f64()?)))
        .collect()
}

/// The demo sizes and least peak resident memory (MiB) in the harness's JSON report.
pub fn demo_memory_points(report: &Value) -> Vec<(f64, f64)> {
    report["demo"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|d| {
            Some((
                d["nodes"].as_f64()?,
                d["least_peak_memory_bytes"].as_f64()? / (1024.0 * 1024.0),
            ))
        })
        .collect()
}

/// Issue 53's memory goal: 25 KB of demo memory a node, in MiB for `nodes`.
fn memory_goal_mib(nodes: f64) -> f64 {
    nodes * 25_000.0 / (1024.0 * 1024.0)
}

/// Draws the demo's peak memory `points` (nodes, MiB) into `path`, with issue 53's goal
/// (25 KB a node) as a line.
pub fn draw_memory(points: &[(f64, f64)], path: &Path) -> Result<()> {
    if points.is_empty() {
        bail!("no demo memory figures to plot");
    }
    ensure_font()?;
    let max_nodes = points.iter().map(|p| p.0).fold(0.0, f64::max) * 1.05;
    let max_mib = points
        .iter()
        .map(|p| p.1)
        .fold(memory_goal_mib(max_nodes), f64::max)
        * 1.15;
    let root = SVGBackend::new(path, (800, 480)).into_drawing_area();
    let draw_error = |e: DrawingAreaErrorKind<_>| anyhow::anyhow!("cannot draw the plot: {e:?}");
    root.fill(&WHITE).map_err(draw_error)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "daemonset-canary demo: peak memory against nodes",
            (FONT, 20),
        )
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(65)
        .build_cartesian_2d(0.0..max_nodes, 0.0..max_mib)
        .map_err(draw_error)?;
    chart
        .configure_mesh()
        .x_desc("nodes")
        .y_desc("peak resident memory (MiB)")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.0}"))
        .draw()
        .map_err(draw_error)?;
    draw_measured(&mut chart, points, "measured (least of the runs)")?;
    chart
        .draw_series(LineSeries::new(
            [(0.0, 0.0), (max_nodes, memory_goal_mib(max_nodes))],
            RED.stroke_width(1),
        ))
        .map_err(draw_error)?
        .label("goal: 25 KB a node")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RED.stroke_width(1)));
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(draw_error)?;
    root.present()
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

/// The font every text of the plot is drawn in.
const FONT: &str = "sans-serif";
static FONT_BYTES: &[u8] =
    include_bytes!("../../../crates/daemonset-canary/assets/DejaVuSans-Latin1.ttf");

/// Registers [`FONT_BYTES`] as [`FONT`] once.
/// The measured points as a line with a dot on each, in the legend as `label`.
fn draw_measured(
    chart: &mut ChartContext<
        '_,
        SVGBackend<'_>,
        Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
    >,
    points: &[(f64, f64)],
    label: &str,
) -> Result<()> {
    let draw_error = |e: DrawingAreaErrorKind<_>| anyhow::anyhow!("cannot draw the plot: {e:?}");
    chart
        .draw_series(LineSeries::new(
            points.iter().copied(),
            BLUE.stroke_width(2),
        ))
        .map_err(draw_error)?
        .label(label)
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLUE.stroke_width(2)));
    chart
        .draw_series(
            points
                .iter()
                .map(|&(x, y)| Circle::new((x, y), 4, BLUE.filled())),
        )
        .map_err(draw_error)?;
    Ok(())
}

fn ensure_font() -> Result<()> {
    static REGISTERED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let ok = *REGISTERED.get_or_init(|| {
        plotters::style::register_font(FONT, FontStyle::Normal, FONT_BYTES).is_ok()
    });
    if !ok {
        bail!(
            "the plot's font (crates/daemonset-canary/assets/DejaVuSans-Latin1.ttf) does not load"
        );
    }
    Ok(())
}

/// Draws `points` (nodes, seconds) into `path`.
pub fn draw(points: &[(f64, f64)], path: &Path) -> Result<()> {
    if points.is_empty() {
        bail!("no demo figures to plot");
    }
    ensure_font()?;
    let max_nodes = points.iter().map(|p| p.0).fold(0.0, f64::max) * 1.05;
    let max_seconds = points.iter().map(|p| p.1).fold(5.0, f64::max) * 1.15;
    let root = SVGBackend::new(path, (800, 480)).into_drawing_area();
    let draw_error = |e: DrawingAreaErrorKind<_>| anyhow::anyhow!("cannot draw the plot: {e:?}");
    root.fill(&WHITE).map_err(draw_error)?;
    let mut chart = ChartBuilder::on(&root)
        .caption("daemonset-canary demo: wall time against nodes", (FONT, 20))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(55)
        .build_cartesian_2d(0.0..max_nodes, 0.0..max_seconds)
        .map_err(draw_error)?;
    chart
        .configure_mesh()
        .x_desc("nodes")
        .y_desc("wall time (s), best run")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.0}"))
        .draw()
        .map_err(draw_error)?;
    draw_measured(&mut chart, points, "measured")?;
    if let Some(&(_, at_1000)) = points.iter().find(|p| p.0 == 1000.0) {
        let linear = [(0.0, 0.0), (max_nodes, at_1000 * max_nodes / 1000.0)];
        chart
            .draw_series(LineSeries::new(linear, RGBColor(150, 150, 150)))
            .map_err(draw_error)?
            .label("linear from 1,000 nodes")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RGBColor(150, 150, 150)));
    }
    chart
        .draw_series(std::iter::once(Cross::new(
            (5000.0, 5.0),
            7,
            RED.stroke_width(2),
        )))
        .map_err(draw_error)?
        .label("goal: 5 s at 5,000 nodes")
        .legend(|(x, y)| Cross::new((x + 10, y), 5, RED.stroke_width(2)));
    if max_nodes >= 65_000.0 {
        chart
            .draw_series(std::iter::once(Cross::new(
                (65_000.0, 60.0),
                7,
                MAGENTA.stroke_width(2),
            )))
            .map_err(draw_error)?
            .label("goal: 60 s at 65,000 nodes")
            .legend(|(x, y)| Cross::new((x + 10, y), 5, MAGENTA.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(draw_error)?;
    root.present()
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_demo_figures_and_draws_them() {
        let report = serde_json::json!({"demo": [
            {"nodes": 500, "best_wall_seconds": 0.7},
            {"nodes": 1000, "best_wall_seconds": 1.3},
            {"nodes": 5000, "best_wall_seconds": 4.9},
            {"nodes": 10000, "best_wall_seconds": 11.0},
        ]});
        let points = demo_points(&report);
        assert_eq!(points.len(), 4);
        let path = std::env::temp_dir().join(format!("demo-wall-{}.svg", std::process::id()));
        draw(&points, &path).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        if let Some(keep) = std::env::var_os("KEEP_PLOT") {
            std::fs::copy(&path, keep).unwrap();
        }
        let _ = std::fs::remove_file(&path);
        assert!(svg.contains("<svg") && svg.contains("wall time against nodes"));
        assert!(draw(&[], &path).is_err());
    }

    #[test]
    fn reads_the_demo_memory_and_draws_it() {
        let report = serde_json::json!({"demo": [
            {"nodes": 500, "best_wall_seconds": 0.7, "least_peak_memory_bytes": 200_000_000},
            {"nodes": 65000, "best_wall_seconds": 70.0, "least_peak_memory_bytes": 2_500_000_000_u64},
            {"nodes": 1000, "best_wall_seconds": 1.3},
        ]});
        let points = demo_memory_points(&report);
        assert_eq!(points.len(), 2, "a size without memory is left out");
        assert!((points[1].1 - 2_500_000_000.0 / 1_048_576.0).abs() < 1e-6);
        let path = std::env::temp_dir().join(format!("demo-memory-{}.svg", std::process::id()));
        draw_memory(&points, &path).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        assert!(svg.contains("<svg") && svg.contains("peak memory against nodes"));
        assert!(draw_memory(&[], &path).is_err());
    }
}
