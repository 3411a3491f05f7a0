//! Shared formatting of durations, ages, counts and progress for everything the binary prints
//! (the demo's timeline and plot, the status view).
//!
//! Pure functions of their arguments; one home, so that every view says `1m15s` the same way.

use k8s_openapi::jiff::Timestamp;

/// `1 pod`, `3 pods`: a count and its noun, singular for exactly one.
pub fn count(n: u64, one: &str, many: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {many}")
    }
}

/// A fixed-width bar of `done` out of `total`.
pub fn progress_bar(done: u32, total: u32, width: usize) -> String {
    let filled = if total == 0 {
        width
    } else {
        (done.min(total) as usize * width) / total as usize
    };
    format!("[{}{}]", "#".repeat(filled), ".".repeat(width - filled))
}

/// `75.3s`, `12m05s` or `1h02m`.
pub fn format_seconds(seconds: f64) -> String {
    let seconds = seconds.max(0.0);
    let whole = seconds.round() as u64;
    if seconds < 60.0 {
        let tenths = format!("{seconds:.1}");
        return format!("{}s", tenths.strip_suffix(".0").unwrap_or(&tenths));
    }
    if whole < 3600 {
        format!("{}m{:02}s", whole / 60, whole % 60)
    } else {
        format!("{}h{:02}m", whole / 3600, (whole % 3600) / 60)
    }
}

/// How long ago `at` was, seen at `now`, in whole seconds and [`format_seconds`]' form; never
/// negative (a clock skew reads as `0s`).
pub fn age(at: Timestamp, now: Timestamp) -> String {
    let seconds = now.duration_since(at).as_secs_f64();
    format_seconds(seconds.max(0.0).round())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_bar_and_durations_read_well() {
        assert_eq!(progress_bar(5, 10, 10), "[#####.....]");
        assert_eq!(progress_bar(0, 0, 4), "[####]");
        assert_eq!(progress_bar(20, 10, 4), "[####]");
        assert_eq!(format_seconds(75.0), "1m15s");
        assert_eq!(format_seconds(3725.0), "1h02m");
        assert_eq!(format_seconds(12.5), "12.5s");
        assert_eq!(format_seconds(12.0), "12s");
    }

    #[test]
    fn counts_are_singular_for_one() {
        assert_eq!(count(1, "node", "nodes"), "1 node");
        assert_eq!(count(0, "pod", "pods"), "0 pods");
        assert_eq!(
            count(3, "DaemonSet write", "DaemonSet writes"),
            "3 DaemonSet writes"
        );
    }

    #[test]
    fn age_rounds_and_never_goes_negative() {
        let at = Timestamp::from_second(1_000).unwrap();
        let now = Timestamp::from_second(1_075).unwrap();
        assert_eq!(age(at, now), "1m15s");
        assert_eq!(age(now, at), "0s");
    }
}
