//! The rollout as a picture: an SVG with updated and ready pods and the maxUnavailable over time,
//! phases shaded, and the failure marked. Plain SVG text, no plotting dependency.

use super::timeline::{Sample, Summary};
use crate::format::format_seconds;
use std::fmt::Write;

const WIDTH: f64 = 960.0;
const HEIGHT: f64 = 420.0;
const LEFT: f64 = 60.0;
const RIGHT: f64 = 200.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;

/// Fill colour of each phase band.
fn phase_colour(phase: &str) -> &'static str {
    match phase {
        "started" => "#e8eaf6",
        "canary" => "#fff3e0",
        "increasing" => "#e3f2fd",
        "waiting" => "#e0f7fa",
        "successful" => "#e8f5e9",
        "failed" => "#ffebee",
        _ => "#f5f5f5",
    }
}

struct Scale {
    t_max: f64,
    y_max: f64,
}

impl Scale {
    fn x(&self, t: f64) -> f64 {
        LEFT + (t / self.t_max) * (WIDTH - LEFT - RIGHT)
    }
    fn y(&self, value: f64) -> f64 {
        HEIGHT - BOTTOM - (value / self.y_max) * (HEIGHT - TOP - BOTTOM)
    }
}

/// Renders the samples (in time order) and the summary as an SVG document.
pub fn render(title: &str, samples: &[Sample], summary: &Summary) -> String {
    let t_max = samples
        .last()
        .map_or(1.0, |s| s.t)
        .max(summary.duration_seconds)
        .max(1.0);
    let y_max = samples
        .iter()
        .map(|s| s.desired.max(s.max_unavailable_pods))
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let scale = Scale { t_max, y_max };
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">"##
    );
    let _ = writeln!(svg, r##"<rect width="100%" height="100%" fill="white"/>"##);
    let _ = writeln!(
        svg,
        r##"<text x="{LEFT}" y="24" font-size="15" font-weight="bold">{}</text>"##,
        escape(title)
    );
    phase_bands(&mut svg, samples, &scale);
    axes(&mut svg, &scale);
    series(
        &mut svg,
        samples,
        &scale,
        |s| f64::from(s.updated_ready),
        "#2e7d32",
        "updated and ready",
    );
    series(
        &mut svg,
        samples,
        &scale,
        |s| f64::from(s.updated),
        "#1565c0",
        "updated",
    );
    series(
        &mut svg,
        samples,
        &scale,
        |s| f64::from(s.max_unavailable_pods),
        "#ef6c00",
        "maxUnavailable (pods)",
    );
    if summary.result == "failed" {
        failure_marker(&mut svg, summary, &scale);
    }
    legend(&mut svg);
    svg.push_str("</svg>\n");
    svg
}

fn phase_bands(svg: &mut String, samples: &[Sample], scale: &Scale) {
    // One band per run of samples in the same phase: a rectangle per sample would leave hairline
    // gaps between neighbours once rounded to pixels.
    let mut index = 0;
    while let Some(first) = samples.get(index) {
        let run = samples[index..]
            .iter()
            .take_while(|s| s.phase == first.phase)
            .count();
        let end = samples.get(index + run).map_or(scale.t_max, |next| next.t);
        let (x0, x1) = (scale.x(first.t), scale.x(end));
        if x1 > x0 {
            let _ = writeln!(
                svg,
                r##"<rect x="{x0:.1}" y="{TOP}" width="{:.1}" height="{:.1}" fill="{}"><title>{}</title></rect>"##,
                x1 - x0,
                HEIGHT - TOP - BOTTOM,
                phase_colour(&first.phase),
                escape(&first.phase)
            );
        }
        index += run;
    }
    let mut previous = "";
    for sample in samples {
        if sample.phase != previous {
            let x = scale.x(sample.t);
            let _ = writeln!(
                svg,
                r##"<text x="{:.1}" y="{:.1}" font-size="10" fill="#555" transform="rotate(-90 {:.1} {:.1})">{}</text>"##,
                x + 11.0,
                HEIGHT - BOTTOM - 4.0,
                x + 11.0,
                HEIGHT - BOTTOM - 4.0,
                escape(&sample.phase)
            );
            previous = &sample.phase;
        }
    }
}

fn axes(svg: &mut String, scale: &Scale) {
    let (x0, x1, y0, y1) = (LEFT, WIDTH - RIGHT, HEIGHT - BOTTOM, TOP);
    let _ = writeln!(
        svg,
        r##"<line x1="{x0}" y1="{y0}" x2="{x1}" y2="{y0}" stroke="black"/>"##
    );
    let _ = writeln!(
        svg,
        r##"<line x1="{x0}" y1="{y0}" x2="{x0}" y2="{y1}" stroke="black"/>"##
    );
    for tick in 0..=4 {
        let fraction = f64::from(tick) / 4.0;
        let t = scale.t_max * fraction;
        let pods = scale.y_max * fraction;
        let _ = writeln!(
            svg,
            r##"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
            scale.x(t),
            y0 + 16.0,
            format_seconds(t)
        );
        let _ = writeln!(
            svg,
            r##"<text x="{:.1}" y="{:.1}" text-anchor="end">{:.0}</text>"##,
            x0 - 6.0,
            scale.y(pods) + 4.0,
            pods
        );
    }
    let _ = writeln!(
        svg,
        r##"<text x="{:.1}" y="{:.1}" text-anchor="middle">time since the rollout began</text>"##,
        (x0 + x1) / 2.0,
        y0 + 36.0
    );
    let _ = writeln!(
        svg,
        r##"<text x="14" y="{:.1}" transform="rotate(-90 14 {:.1})" text-anchor="middle">pods</text>"##,
        (y0 + y1) / 2.0,
        (y0 + y1) / 2.0
    );
}

/// A step line: the value holds until the next sample.
fn series(
    svg: &mut String,
    samples: &[Sample],
    scale: &Scale,
    value: impl Fn(&Sample) -> f64,
    colour: &str,
    label: &str,
) {
    let mut points = String::new();
    let mut previous_y: Option<f64> = None;
    for sample in samples {
        let (x, y) = (scale.x(sample.t), scale.y(value(sample)));
        if let Some(py) = previous_y {
            let _ = write!(points, "{x:.1},{py:.1} ");
        }
        let _ = write!(points, "{x:.1},{y:.1} ");
        previous_y = Some(y);
    }
    if let (Some(py), false) = (previous_y, samples.is_empty()) {
        let _ = write!(points, "{:.1},{py:.1}", scale.x(scale.t_max));
    }
    let _ = writeln!(
        svg,
        r##"<polyline fill="none" stroke="{colour}" stroke-width="2" points="{}"><title>{}</title></polyline>"##,
        points.trim_end(),
        escape(label)
    );
}

fn failure_marker(svg: &mut String, summary: &Summary, scale: &Scale) {
    let x = scale.x(summary.duration_seconds);
    let reason = summary.reason.as_deref().unwrap_or("failed");
    let _ = writeln!(
        svg,
        r##"<line x1="{x:.1}" y1="{TOP}" x2="{x:.1}" y2="{:.1}" stroke="#c62828" stroke-width="2" stroke-dasharray="6 3"/>"##,
        HEIGHT - BOTTOM
    );
    let _ = writeln!(
        svg,
        r##"<text x="{:.1}" y="{:.1}" fill="#c62828" text-anchor="end" font-weight="bold">✗ {}</text>"##,
        x - 4.0,
        TOP + 14.0,
        escape(reason)
    );
}

fn legend(svg: &mut String) {
    let x = WIDTH - RIGHT + 12.0;
    for (index, (colour, label)) in [
        ("#2e7d32", "updated and ready"),
        ("#1565c0", "updated"),
        ("#ef6c00", "maxUnavailable (pods)"),
    ]
    .into_iter()
    .enumerate()
    {
        let y = TOP + 10.0 + index as f64 * 18.0;
        let _ = writeln!(
            svg,
            r##"<line x1="{x}" y1="{y}" x2="{}" y2="{y}" stroke="{colour}" stroke-width="3"/>"##,
            x + 18.0
        );
        let _ = writeln!(
            svg,
            r##"<text x="{}" y="{}">{label}</text>"##,
            x + 24.0,
            y + 4.0
        );
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(t: f64, phase: &str, ready: u32, max_pods: u32) -> Sample {
        Sample {
            t,
            phase: phase.into(),
            max_unavailable: String::new(),
            max_unavailable_pods: max_pods,
            desired: 20,
            updated: ready,
            updated_ready: ready,
            daemon_set_writes: 0,
        }
    }

    #[test]
    fn svg_has_bands_series_and_the_failure_mark() {
        let samples = [
            sample(0.0, "started", 0, 1),
            sample(5.0, "canary", 0, 1),
            sample(30.0, "failed", 0, 1),
        ];
        let summary = Summary {
            result: "failed".into(),
            daemon_set_writes: 1,
            duration_seconds: 30.0,
            reason: Some("CanaryCrashLooping".into()),
        };
        let svg = render("crash <loop>", &samples, &summary);
        assert!(svg.starts_with("<svg"));
        assert!(svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<polyline").count(), 3);
        assert!(svg.contains("CanaryCrashLooping"));
        assert!(svg.contains("crash &lt;loop&gt;"), "title is escaped");
        assert!(svg.contains(phase_colour("canary")));
        assert!(!svg.contains("NaN"));
    }

    #[test]
    fn one_band_per_run_of_the_same_phase() {
        let samples = [
            sample(0.0, "canary", 0, 1),
            sample(1.0, "canary", 1, 1),
            sample(2.0, "waiting", 2, 2),
            sample(3.0, "waiting", 3, 2),
        ];
        let summary = Summary {
            result: "successful".into(),
            daemon_set_writes: 3,
            duration_seconds: 4.0,
            reason: None,
        };
        let svg = render("bands", &samples, &summary);
        // The white background plus one band for canary and one for waiting.
        assert_eq!(svg.matches("<rect").count(), 3, "{svg}");
    }

    #[test]
    fn successful_rollout_has_no_failure_mark() {
        let samples = [
            sample(0.0, "canary", 0, 1),
            sample(10.0, "successful", 20, 1),
        ];
        let summary = Summary {
            result: "successful".into(),
            daemon_set_writes: 3,
            duration_seconds: 10.0,
            reason: None,
        };
        let svg = render("ok", &samples, &summary);
        assert!(!svg.contains("stroke-dasharray"));
    }
}
