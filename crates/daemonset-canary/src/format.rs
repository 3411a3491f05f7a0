//! Shared formatting of durations, ages, counts and progress for everything the binary prints
//! (the demo's timeline and plot, the status view), and the escaping of text from the cluster
//! before it reaches a terminal.
//!
//! Pure functions of their arguments; one home, so that every view says `1m15s` the same way.

use std::borrow::Cow;

use k8s_openapi::jiff::Timestamp;
use std::ffi::OsStr;
use std::path::Path;

/// The command a hint tells the user to type: `kubectl canary` when this process runs as the
/// kubectl plugin (`kubectl-canary` on PATH, which kubectl runs for `kubectl canary ...`), else
/// `daemonset-canary`. A hint naming the other one sends a plugin user to a command they may
/// not have.
pub fn command_name() -> &'static str {
    command_name_of(std::env::args_os().next().as_deref())
}

/// [`command_name`] for the process started as `argv0`.
pub fn command_name_of(argv0: Option<&OsStr>) -> &'static str {
    let invoked = argv0
        .map(Path::new)
        .and_then(Path::file_name)
        .and_then(OsStr::to_str);
    if invoked.is_some_and(|name| name == "kubectl-canary" || name.starts_with("kubectl-canary.")) {
        "kubectl canary"
    } else {
        "daemonset-canary"
    }
}

/// `text` fit for one line of a terminal: every control character (newlines, escape sequences,
/// carriage returns, C1 controls) written as its `\u{..}` escape, everything else as it is.
///
/// Messages, event notes and condition texts are written by anyone who can write the object or
/// an event in its namespace, or come from a Prometheus answer: an escape sequence in them must
/// not move the cursor, recolour or retitle the reader's terminal, and a newline must not forge a
/// line of the view.
pub fn one_line(text: &str) -> Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return Cow::Borrowed(text);
    }
    Cow::Owned(
        text.chars()
            .map(|c| {
                if c.is_control() {
                    c.escape_unicode().to_string()
                } else {
                    c.to_string()
                }
            })
            .collect(),
    )
}

/// A whole rendered view fit for a terminal: [`one_line`] on each of its lines, so that a control
/// character that reached any field (a name, a revision) is escaped too. The view's own newlines
/// stay.
pub fn printable(view: &str) -> String {
    let mut out = String::with_capacity(view.len());
    for line in view.split_inclusive('\n') {
        let (body, end) = line
            .strip_suffix('\n')
            .map_or((line, ""), |body| (body, "\n"));
        out.push_str(&one_line(body));
        out.push_str(end);
    }
    out
}

/// `1 pod`, `3 pods`: a count and its noun, singular for exactly one.
pub fn count(n: u64, one: &str, many: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {many}")
    }
}

/// A fixed-width bar of `done` out of `total`; empty for `0/0` (nothing to do is no progress:
/// a full bar beside a DaemonSet that does not exist read as done).
pub fn progress_bar(done: u32, total: u32, width: usize) -> String {
    let filled = if total == 0 {
        0
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
        assert_eq!(progress_bar(0, 0, 4), "[....]");
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

    #[test]
    fn control_characters_from_the_cluster_are_escaped() {
        assert_eq!(one_line("plain text, ünïcode"), "plain text, ünïcode");
        assert_eq!(
            one_line("red \u{1b}[31mtext\nforged line\r\u{9b}"),
            "red \\u{1b}[31mtext\\u{a}forged line\\u{d}\\u{9b}"
        );
        assert_eq!(
            printable("Name: a\u{1b}]0;title\u{7}\nMessage: b\n"),
            "Name: a\\u{1b}]0;title\\u{7}\nMessage: b\n"
        );
        assert_eq!(printable("no newline at the end"), "no newline at the end");
    }
}

#[cfg(test)]
mod command_name_tests {
    use super::command_name_of;
    use std::ffi::OsStr;

    /// The hints follow how the binary was invoked: as the kubectl plugin, they say `kubectl
    /// canary` (issue 52: `kubectl canary pause` printed `daemonset-canary resume`).
    #[test]
    fn the_plugin_is_named_as_kubectl_runs_it() {
        for (argv0, name) in [
            (Some("/usr/local/bin/kubectl-canary"), "kubectl canary"),
            (Some("kubectl-canary"), "kubectl canary"),
            (Some("kubectl-canary.exe"), "kubectl canary"),
            (Some("/usr/bin/daemonset-canary"), "daemonset-canary"),
            (Some("./target/ci/daemonset-canary"), "daemonset-canary"),
            (None, "daemonset-canary"),
        ] {
            assert_eq!(command_name_of(argv0.map(OsStr::new)), name, "{argv0:?}");
        }
    }
}
