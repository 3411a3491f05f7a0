//! The rollout as a picture, drawn with plotters: pods over time (desired, updated, updated and
//! ready, the maxUnavailable in pods, and the new pods' restarts when they restart), the phases
//! as coloured bands, their names in a strip above the chart where no line crosses them, the
//! failure marked, round ticks (seconds as `1m30s`, whole pods), and the legend beside the
//! chart. SVG for `.svg`, PNG for `.png`.
//!
//! Text is laid out (and, in a PNG, drawn) with a Latin-1 subset of DejaVu Sans compiled into
//! the binary (`assets/`, 41 KB), so the plot looks the same on every machine and needs no
//! system font or library. [`PlotFile::check`] validates the path before the rollout, so a bad
//! path fails at once instead of after it.

use super::timeline::{Sample, Summary};
use crate::format::format_seconds;
use anyhow::{Context, Result, bail};
use canary_state_machine::Phase;
use plotters::coord::Shift;
use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint};
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::{FontStyle, RGBColor, register_font};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

const WIDTH: u32 = 1000;
const HEIGHT: u32 = 480;
const TITLE_HEIGHT: u32 = 34;
/// Rows of phase names above the chart: phases of one instant (`started`, `canary`) stack.
const LABEL_ROWS: u32 = 3;
const LABEL_ROW_HEIGHT: u32 = 15;
const LEGEND_WIDTH: u32 = 200;
const Y_LABEL_AREA: u32 = 55;
const FONT: &str = "sans-serif";
/// DejaVu Sans, Basic Latin and Latin-1 plus a few symbols (see assets/README.md).
static FONT_BYTES: &[u8] = include_bytes!("../../assets/DejaVuSans-Latin1.ttf");

const DESIRED: RGBColor = RGBColor(0x75, 0x75, 0x75);
const UPDATED: RGBColor = RGBColor(0x15, 0x65, 0xc0);
const READY: RGBColor = RGBColor(0x2e, 0x7d, 0x32);
const MAX_UNAVAILABLE: RGBColor = RGBColor(0xef, 0x6c, 0x00);
const RESTARTS: RGBColor = RGBColor(0xc6, 0x28, 0x28);

/// Fill colour of each phase band.
fn phase_colour(phase: Phase) -> RGBColor {
    match phase {
        Phase::Started => RGBColor(0xe8, 0xea, 0xf6),
        Phase::Canary => RGBColor(0xff, 0xf3, 0xe0),
        Phase::Increasing => RGBColor(0xe3, 0xf2, 0xfd),
        Phase::Waiting => RGBColor(0xe0, 0xf7, 0xfa),
        Phase::Successful => RGBColor(0xe8, 0xf5, 0xe9),
        Phase::Failed => RGBColor(0xff, 0xeb, 0xee),
        _ => RGBColor(0xf5, 0xf5, 0xf5),
    }
}

/// The picture formats, by file extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `.svg`: text stays text, any size.
    Svg,
    /// `.png`: 1000×480 pixels.
    Png,
}

/// Where the plot goes, checked before the rollout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlotFile {
    /// The file.
    pub path: PathBuf,
    /// Its format.
    pub format: Format,
}

impl PlotFile {
    /// Checks `path` before anything runs: a `.svg` or `.png` name, in a directory that exists
    /// and can be written (probed with a file created and removed), not a directory itself.
    pub fn check(path: &Path) -> Result<Self> {
        let extension = path
            .extension()
            .map(|e| e.to_string_lossy().to_ascii_lowercase());
        let format = match extension.as_deref() {
            Some("svg") => Format::Svg,
            Some("png") => Format::Png,
            other => bail!(
                "--plot {}: the plot is written as SVG (name ending in .svg) or PNG (.png), not {}",
                path.display(),
                other.map_or_else(
                    || "a name without extension".to_owned(),
                    |e| format!(".{e}")
                )
            ),
        };
        if path.is_dir() {
            bail!("--plot {}: is a directory", path.display());
        }
        let dir = match path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir.to_owned(),
            _ => PathBuf::from("."),
        };
        if !dir.is_dir() {
            bail!(
                "--plot {}: the directory {} does not exist",
                path.display(),
                dir.display()
            );
        }
        let probe = dir.join(format!(
            ".daemonset-canary-plot-{}.probe",
            std::process::id()
        ));
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&probe)
            .with_context(|| {
                format!(
                    "--plot {}: cannot write in {}",
                    path.display(),
                    dir.display()
                )
            })?;
        let _ = std::fs::remove_file(&probe);
        Ok(Self {
            path: path.to_owned(),
            format,
        })
    }

    /// Draws the rollout into the file.
    pub fn write(&self, title: &str, samples: &[Sample], summary: &Summary) -> Result<()> {
        match self.format {
            Format::Svg => {
                let svg = render_svg(title, samples, summary)?;
                std::fs::write(&self.path, svg)
                    .with_context(|| format!("cannot write {}", self.path.display()))
            }
            Format::Png => {
                ensure_font()?;
                let root = BitMapBackend::new(&self.path, (WIDTH, HEIGHT)).into_drawing_area();
                draw(&root, title, samples, summary)
                    .and_then(|()| root.present().map_err(|e| anyhow::anyhow!("{e}")))
                    .with_context(|| format!("cannot draw {}", self.path.display()))
            }
        }
    }
}

/// The rollout as an SVG document.
pub fn render_svg(title: &str, samples: &[Sample], summary: &Summary) -> Result<String> {
    ensure_font()?;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        draw(&root, title, samples, summary)?;
        root.present().map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    Ok(svg)
}

/// Registers the compiled-in font once for every drawing.
fn ensure_font() -> Result<()> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let ok = *REGISTERED.get_or_init(|| register_font(FONT, FontStyle::Normal, FONT_BYTES).is_ok());
    if ok {
        Ok(())
    } else {
        bail!("the plot's font (assets/DejaVuSans-Latin1.ttf) does not load")
    }
}

/// What is drawn, derived from the samples.
struct Scene<'a> {
    samples: &'a [Sample],
    t_end: f64,
    t_ticks: Vec<f64>,
    y_end: f64,
    y_ticks: Vec<f64>,
    restarts: bool,
    /// The desired count when it is off the axis: the rollout never came near it (a canary
    /// that failed on one pod), and an axis up to it would squash every other line flat
    /// against 0 (issue 52). Its line is then not drawn; the legend gives the number.
    desired_off_axis: Option<u32>,
}

impl<'a> Scene<'a> {
    fn new(samples: &'a [Sample], summary: &'a Summary) -> Self {
        let t_max = samples
            .last()
            .map_or(0.0, |s| s.t)
            .max(summary.duration_seconds);
        let (t_end, t_ticks) = ticks(t_max, &TIME_STEPS);
        let restarts = samples.iter().any(|s| s.restarts > 0);
        let pods_driver = samples.iter().any(|s| s.step.is_some());
        // The highest of the lines other than desired (maxUnavailable only where it is drawn).
        let rollout_max = samples
            .iter()
            .map(|s| {
                s.updated
                    .max(s.updated_ready)
                    .max(if pods_driver {
                        0
                    } else {
                        s.max_unavailable_pods
                    })
                    .max(if restarts { s.restarts } else { 0 })
            })
            .max()
            .unwrap_or(0);
        let desired_max = samples.iter().map(|s| s.desired).max().unwrap_or(0);
        let desired_off_axis =
            (rollout_max.saturating_mul(OFF_AXIS_FACTOR) < desired_max).then_some(desired_max);
        let y_max = match desired_off_axis {
            Some(_) => rollout_max.max(1),
            None => desired_max.max(rollout_max),
        };
        let (y_end, y_ticks) = ticks(f64::from(y_max) * 1.05, &COUNT_STEPS);
        Self {
            samples,
            t_end,
            t_ticks,
            y_end,
            y_ticks,
            restarts,
            desired_off_axis,
        }
    }

    /// A step line of `value`: it holds until the next sample, and to the end of the axis.
    fn steps(&self, value: impl Fn(&Sample) -> u32) -> Vec<(f64, f64)> {
        let mut points = Vec::new();
        let mut previous: Option<f64> = None;
        for sample in self.samples {
            let v = f64::from(value(sample));
            if let Some(p) = previous {
                points.push((sample.t, p));
            }
            points.push((sample.t, v));
            previous = Some(v);
        }
        if let Some(p) = previous {
            points.push((self.t_end, p));
        }
        points
    }

    /// `(phase, from, to)` for each run of samples in one phase.
    fn bands(&self) -> Vec<(Phase, f64, f64)> {
        let mut bands: Vec<(Phase, f64, f64)> = Vec::new();
        for sample in self.samples {
            match bands.last_mut() {
                Some(last) if last.0 == sample.phase => {}
                _ => {
                    if let Some(last) = bands.last_mut() {
                        last.2 = sample.t;
                    }
                    bands.push((sample.phase, sample.t, self.t_end));
                }
            }
        }
        bands
    }
}

/// An axis from 0 to `end` whose ticks are exactly `ticks` (plotters' own f64 axis picks its
/// ticks itself and cannot be given a label formatter together with fixed ticks).
#[derive(Clone)]
struct Axis {
    end: f64,
    ticks: Vec<f64>,
}

impl Ranged for Axis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let span = f64::from(limit.1 - limit.0);
        limit.0 + (span * value / self.end).round() as i32
    }

    fn key_points<Hint: KeyPointHint>(&self, _hint: Hint) -> Vec<f64> {
        self.ticks.clone()
    }

    fn range(&self) -> std::ops::Range<f64> {
        0.0..self.end
    }
}

/// The desired line goes off the axis when it is more than this many times the highest other
/// line: the axis then fits the lines that moved.
const OFF_AXIS_FACTOR: u32 = 4;

/// Tick spacings: seconds (up to days) and pods.
const TIME_STEPS: [f64; 17] = [
    1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1800.0, 3600.0, 7200.0,
    10800.0, 21600.0, 43200.0,
];
const COUNT_STEPS: [f64; 15] = [
    1.0, 2.0, 5.0, 10.0, 20.0, 25.0, 50.0, 100.0, 200.0, 250.0, 500.0, 1000.0, 2000.0, 5000.0,
    10000.0,
];

/// The axis end and its ticks: the smallest step from `steps` that needs at most 8 ticks, the
/// axis ending on a tick.
fn ticks(max: f64, steps: &[f64]) -> (f64, Vec<f64>) {
    let max = max.max(f64::MIN_POSITIVE);
    let step = steps
        .iter()
        .copied()
        .find(|step| max / step <= 8.0)
        .unwrap_or_else(|| (max / 8.0).ceil());
    let count = (max / step).ceil().max(1.0) as u32;
    let ticks = (0..=count).map(|i| f64::from(i) * step).collect();
    (f64::from(count) * step, ticks)
}

/// A chart drawn on the plot's area, in time (seconds) by pods.
type Chart<'a, DB> = ChartContext<'a, DB, Cartesian2d<Axis, Axis>>;

/// A legend entry: its label, colour, and whether its line is dashed.
type LegendEntry = (String, RGBColor, bool);

/// Turns a drawing error of `DB` into an `anyhow` error.
fn drawing_error<DB: DrawingBackend>(e: DrawingAreaErrorKind<DB::ErrorType>) -> anyhow::Error {
    anyhow::anyhow!("{e}")
}

/// The whole picture: the title, the chart with the phases as bands, the phase names above it
/// and the legend beside it.
fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    samples: &[Sample],
    summary: &Summary,
) -> Result<()> {
    let scene = Scene::new(samples, summary);
    let err = drawing_error::<DB>;
    root.fill(&WHITE).map_err(err)?;
    let (top, rest) = root.split_vertically(TITLE_HEIGHT + LABEL_ROWS * LABEL_ROW_HEIGHT + 6);
    let (chart_area, legend_area) = rest.split_horizontally(WIDTH - LEGEND_WIDTH);
    top.draw(&Text::new(
        title.to_owned(),
        (Y_LABEL_AREA as i32, 8),
        (FONT, 18).into_font().color(&BLACK),
    ))
    .map_err(err)?;

    let mut chart = ChartBuilder::on(&chart_area)
        .margin_right(12)
        .margin_top(4)
        .x_label_area_size(44)
        .y_label_area_size(Y_LABEL_AREA)
        .build_cartesian_2d(
            Axis {
                end: scene.t_end,
                ticks: scene.t_ticks.clone(),
            },
            Axis {
                end: scene.y_end,
                ticks: scene.y_ticks.clone(),
            },
        )
        .map_err(err)?;
    for (phase, from, to) in scene.bands() {
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [(from, 0.0), (to, scene.y_end)],
                phase_colour(phase).filled(),
            )))
            .map_err(err)?;
    }
    chart
        .configure_mesh()
        .disable_x_mesh()
        .light_line_style(TRANSPARENT)
        .bold_line_style(RGBColor(0xdd, 0xdd, 0xdd))
        .x_desc("time since the upgrade began")
        .y_desc("pods")
        .x_label_formatter(&|t| format_seconds(*t))
        .y_label_formatter(&|v| format!("{v:.0}"))
        .label_style((FONT, 13))
        .axis_desc_style((FONT, 14))
        .draw()
        .map_err(err)?;

    let legend = draw_lines(&mut chart, &scene)?;
    let failed_at = (summary.result == Phase::Failed.as_str()).then_some(summary.duration_seconds);
    if let Some(t) = failed_at {
        chart
            .draw_series(DashedLineSeries::new(
                [(t, 0.0), (t, scene.y_end)],
                6,
                3,
                RESTARTS.stroke_width(2),
            ))
            .map_err(err)?;
    }
    draw_phase_names(root, &chart, &scene, summary, failed_at)?;
    draw_legend(&legend_area, &legend)
}

/// The counts as step lines (desired dashed), and the restarts with a dot each when there are
/// any; returns their legend entries.
/// A line of counts: its legend label, its colour and the value it draws of each sample.
type CountLine = (&'static str, RGBColor, fn(&Sample) -> u32);

fn draw_lines<DB: DrawingBackend>(
    chart: &mut Chart<'_, DB>,
    scene: &Scene<'_>,
) -> Result<Vec<LegendEntry>> {
    let err = drawing_error::<DB>;
    let mut legend: Vec<LegendEntry> = Vec::new();
    match scene.desired_off_axis {
        Some(desired) => legend.push((format!("desired: {desired} (off the axis)"), DESIRED, true)),
        None => {
            legend.push(("desired".to_owned(), DESIRED, true));
            chart
                .draw_series(DashedLineSeries::new(
                    scene.steps(|s| s.desired),
                    6,
                    4,
                    DESIRED.stroke_width(2),
                ))
                .map_err(err)?;
        }
    }
    // The Pods driver's DaemonSet is `OnDelete`: it has no maxUnavailable, and a line of it
    // would lie flat at 0 under the others (issue 52). Its steps are the phase names.
    let pods_driver = scene.samples.iter().any(|s| s.step.is_some());
    let max_unavailable = (!pods_driver).then_some((
        "maxUnavailable (pods)",
        MAX_UNAVAILABLE,
        (|s: &Sample| s.max_unavailable_pods) as fn(&Sample) -> u32,
    ));
    let counts: [CountLine; 2] = [
        ("updated", UPDATED, |s| s.updated),
        ("updated and ready", READY, |s| s.updated_ready),
    ];
    for (label, colour, value) in max_unavailable.into_iter().chain(counts) {
        chart
            .draw_series(LineSeries::new(scene.steps(value), colour.stroke_width(2)))
            .map_err(err)?;
        legend.push((label.to_owned(), colour, false));
    }
    if scene.restarts {
        // From the first restart on: before it, a line at 0 would hide the ones beneath.
        let line: Vec<(f64, f64)> = scene
            .steps(|s| s.restarts)
            .into_iter()
            .skip_while(|(_, v)| *v == 0.0)
            .collect();
        chart
            .draw_series(LineSeries::new(line, RESTARTS.stroke_width(2)))
            .map_err(err)?;
        // A dot per restart: the line alone can hide under another at the same count.
        let mut before = 0;
        let dots: Vec<(f64, f64)> = scene
            .samples
            .iter()
            .filter(|s| std::mem::replace(&mut before, s.restarts) < s.restarts)
            .map(|s| (s.t, f64::from(s.restarts)))
            .collect();
        chart
            .draw_series(
                dots.into_iter()
                    .map(|p| Circle::new(p, 4, RESTARTS.filled())),
            )
            .map_err(err)?;
        legend.push(("restarts (new pods)".to_owned(), RESTARTS, false));
    }
    Ok(legend)
}

/// Phase names in rows above the chart, at the x where each phase begins (and the failure's
/// reason where it failed); a name goes in the first row where it does not overlap the
/// previous one.
fn draw_phase_names<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    chart: &Chart<'_, DB>,
    scene: &Scene<'_>,
    summary: &Summary,
    failed_at: Option<f64>,
) -> Result<()> {
    let err = drawing_error::<DB>;
    let label_style = (FONT, 12).into_font().color(&BLACK);
    let mut row_ends = [i32::MIN; LABEL_ROWS as usize];
    let mut labels: Vec<(String, f64, RGBColor)> = scene
        .samples
        .iter()
        .filter(|s| s.phase_changed)
        .map(|s| (s.phase.to_string(), s.t, phase_colour(s.phase)))
        .collect();
    if let Some(t) = failed_at {
        let reason = summary.reason.as_deref().unwrap_or(Phase::Failed.as_str());
        labels.push((format!("✗ {reason}"), t, RESTARTS));
    }
    for (text, t, colour) in labels {
        let x = chart.backend_coord(&(t, 0.0)).0;
        let (width, _) = root.estimate_text_size(&text, &label_style).map_err(err)?;
        let width = i32::try_from(width).unwrap_or(i32::MAX);
        let row = row_ends.iter().position(|end| *end < x).unwrap_or_else(|| {
            let least = row_ends.iter().enumerate().min_by_key(|(_, end)| **end);
            least.map_or(0, |(row, _)| row)
        });
        let y = (TITLE_HEIGHT + row as u32 * LABEL_ROW_HEIGHT) as i32;
        root.draw(&Rectangle::new(
            [(x, y + 2), (x + 9, y + 11)],
            colour.filled(),
        ))
        .map_err(err)?;
        root.draw(&Rectangle::new(
            [(x, y + 2), (x + 9, y + 11)],
            RGBColor(0x90, 0x90, 0x90).stroke_width(1),
        ))
        .map_err(err)?;
        root.draw(&Text::new(text, (x + 12, y), label_style.clone()))
            .map_err(err)?;
        if let Some(end) = row_ends.get_mut(row) {
            *end = x + 12 + width + 6;
        }
    }
    Ok(())
}

/// The legend, beside the chart so that no line crosses it.
fn draw_legend<DB: DrawingBackend>(
    legend_area: &DrawingArea<DB, Shift>,
    legend: &[LegendEntry],
) -> Result<()> {
    let err = drawing_error::<DB>;
    for (index, (label, colour, dashed)) in legend.iter().enumerate() {
        let y = 30 + index as i32 * 20;
        let line = [(10, y), (38, y)];
        if *dashed {
            legend_area
                .draw(&DashedPathElement::new(line, 5, 3, colour.stroke_width(2)))
                .map_err(err)?;
        } else {
            legend_area
                .draw(&PathElement::new(line, colour.stroke_width(2)))
                .map_err(err)?;
        }
        legend_area
            .draw(&Text::new(
                label.clone(),
                (46, y - 7),
                (FONT, 13).into_font().color(&BLACK),
            ))
            .map_err(err)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use canary_state_machine::Phase;

    fn sample(t: f64, phase: Phase, ready: u32, max_pods: u32, restarts: u32) -> Sample {
        Sample {
            t,
            phase,
            phase_changed: true,
            write: None,
            max_unavailable: String::new(),
            max_unavailable_pods: max_pods,
            desired: 20,
            updated: ready,
            updated_ready: ready,
            daemon_set_writes: 0,
            restarts,
            reason: None,
            step: None,
            step_changed: false,
            pod_deletions: 0,
            deferred: 0,
        }
    }

    fn failed() -> (Vec<Sample>, Summary) {
        let samples = vec![
            sample(0.0, Phase::Started, 0, 1, 0),
            sample(0.0, Phase::Canary, 0, 1, 0),
            sample(4.0, Phase::Canary, 0, 1, 1),
            sample(30.0, Phase::Failed, 0, 1, 1),
        ];
        let summary = Summary {
            result: "failed".into(),
            daemon_set_writes: 1,
            duration_seconds: 30.0,
            reason: Some("CanaryCrashLooping".into()),
            pod_deletions: 0,
        };
        (samples, summary)
    }

    #[test]
    fn ticks_are_round_and_end_the_axis() {
        assert_eq!(
            ticks(66.0, &TIME_STEPS),
            (70.0, vec![0.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0])
        );
        assert_eq!(
            ticks(600.0, &TIME_STEPS).1[1],
            120.0,
            "2-minute ticks for 10 minutes"
        );
        assert_eq!(ticks(52.5, &COUNT_STEPS).0, 60.0);
        assert_eq!(ticks(52.5, &COUNT_STEPS).1.len(), 7, "0 to 60 by 10");
        assert_eq!(ticks(1.05, &COUNT_STEPS), (2.0, vec![0.0, 1.0, 2.0]));
        assert_eq!(ticks(0.0, &TIME_STEPS), (1.0, vec![0.0, 1.0]));
    }

    #[test]
    fn svg_has_the_phases_the_failure_the_restarts_and_the_legend() {
        let (samples, summary) = failed();
        let svg = render_svg("20 nodes, crash <loop>", &samples, &summary).unwrap();
        assert!(svg.starts_with("<svg"), "{svg}");
        for text in [
            "started",
            "canary",
            "failed",
            "✗ CanaryCrashLooping",
            "restarts (new pods)",
            "desired",
            "updated and ready",
            "maxUnavailable (pods)",
            "time since the upgrade began",
            "crash &lt;loop&gt;",
        ] {
            assert!(svg.contains(text), "{text} missing");
        }
        assert!(!svg.contains("NaN"));
    }

    /// A canary that failed on one pod of 20: the axis fits the lines that moved (0 to 2), not
    /// the 20 desired pods they would lie flat under; the legend names desired off the axis
    /// (issue 52). A rollout that went wide keeps desired on the axis.
    #[test]
    fn a_rollout_that_stayed_small_is_not_squashed_under_desired() {
        let (samples, summary) = failed();
        let scene = Scene::new(&samples, &summary);
        assert_eq!(scene.desired_off_axis, Some(20));
        assert_eq!(scene.y_end, 2.0);
        let svg = render_svg("crash", &samples, &summary).unwrap();
        assert!(svg.contains("desired: 20 (off the axis)"), "{svg}");

        let wide = [
            sample(0.0, Phase::Started, 0, 1, 0),
            sample(10.0, Phase::Waiting, 8, 2, 0),
        ];
        let scene = Scene::new(&wide, &summary);
        assert_eq!(scene.desired_off_axis, None);
        assert!(scene.y_end >= 20.0);
    }

    /// The Pods driver's plot has no maxUnavailable line: its DaemonSet has none (`OnDelete`),
    /// and the line lay flat at 0 (issue 52).
    #[test]
    fn the_pods_driver_plot_has_no_max_unavailable_line() {
        let mut samples = vec![
            sample(0.0, Phase::Started, 0, 0, 0),
            sample(10.0, Phase::Successful, 20, 0, 0),
        ];
        for sample in &mut samples {
            sample.step = Some((1, 2));
        }
        let summary = Summary {
            result: "successful".into(),
            daemon_set_writes: 1,
            duration_seconds: 10.0,
            reason: None,
            pod_deletions: 20,
        };
        let svg = render_svg("pods", &samples, &summary).unwrap();
        assert!(!svg.contains("maxUnavailable"), "no line nor legend");
        assert!(svg.contains("updated and ready"));
    }

    #[test]
    fn a_healthy_rollout_shows_no_restarts() {
        let samples = [
            sample(0.0, Phase::Started, 0, 1, 0),
            sample(10.0, Phase::Successful, 20, 1, 0),
        ];
        let summary = Summary {
            result: "successful".into(),
            daemon_set_writes: 2,
            duration_seconds: 10.0,
            reason: None,
            pod_deletions: 0,
        };
        let svg = render_svg("ok", &samples, &summary).unwrap();
        assert!(!svg.contains("restarts"), "no restart line nor legend");
        assert!(!svg.contains('✗'));
    }

    #[test]
    fn the_path_is_checked_before_anything_runs() {
        let dir = std::env::temp_dir().join(format!("plot-check-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(
            PlotFile::check(&dir.join("a.svg")).unwrap().format,
            Format::Svg
        );
        assert_eq!(
            PlotFile::check(&dir.join("a.PNG")).unwrap().format,
            Format::Png
        );
        let no = |path: PathBuf, needle: &str| {
            let error = PlotFile::check(&path).unwrap_err().to_string();
            assert!(error.contains(needle), "{error}");
        };
        no(dir.join("a.pdf"), "not .pdf");
        no(dir.join("plot"), "without extension");
        no(dir.join("missing/a.svg"), "does not exist");
        std::fs::create_dir_all(dir.join("d.svg")).unwrap();
        no(dir.join("d.svg"), "is a directory");
        assert!(
            std::fs::read_dir(&dir)
                .unwrap()
                .flatten()
                .all(|e| !e.file_name().to_string_lossy().ends_with(".probe"))
        );
    }

    #[test]
    fn a_png_is_written_with_text() {
        let (samples, summary) = failed();
        let dir = std::env::temp_dir().join(format!("plot-png-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = PlotFile::check(&dir.join("rollout.png")).unwrap();
        file.write("crash", &samples, &summary).unwrap();
        let bytes = std::fs::read(&file.path).unwrap();
        assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "a PNG file");
        assert!(bytes.len() > 10_000, "{} bytes", bytes.len());
    }
}
