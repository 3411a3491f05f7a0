//! The one home of cutting text that comes from outside the controller (a Prometheus answer or
//! error, an API server's refusal, a connection error) before it reaches a status, an event or
//! a log, and of the limits it is cut to.
//!
//! Why: such text is as long as whoever wrote it wants. Copied whole, one Prometheus that answers
//! every query with a 1 MiB JSON error took the controller to 1 GB of memory, one object to
//! 18 MB and the log to gigabytes (issue 47). Every caller cuts with [`cut`] and one of the
//! limits below, so that the limits are read in one place.
//!
//! # Invariants
//!
//! - [`cut`]`(text, max)` is at most `max` bytes (for `max` ≥ [`MIN_CUT_BYTES`]), ends on a
//!   character boundary, and is `text` itself (borrowed) when `text` fits.
//! - A cut text says that it was cut and how long the whole was.

use std::borrow::Cow;

/// The most of one outside text (an error, an answer's start) kept for a status field, an
/// event or a log line: enough to say what went wrong, never a page.
pub const OUTSIDE_TEXT_BYTES: usize = 300;

/// The most of a short outside text shown per item of a list (a node condition's reason or
/// message, one of up to ten nodes in a status): a line, not a paragraph.
pub const SHORT_TEXT_BYTES: usize = 128;

/// The most of an event's note: the API server refuses a longer one (`note` must be under
/// 1 KiB), and a refused event is lost.
pub const EVENT_NOTE_BYTES: usize = 1024;

/// The smallest limit [`cut`] keeps: below it, the note that says the text was cut would not
/// fit (the note is then cut too).
pub const MIN_CUT_BYTES: usize = 48;

/// `text`, cut to at most `max_bytes` bytes on a character boundary, ending with a note that
/// says so and how long the whole was; `text` itself when it fits.
pub fn cut(text: &str, max_bytes: usize) -> Cow<'_, str> {
    if text.len() <= max_bytes {
        return Cow::Borrowed(text);
    }
    let note = format!("… [cut from {} bytes]", text.len());
    let keep = floor_char_boundary(text, max_bytes.saturating_sub(note.len()));
    let mut out = String::with_capacity(max_bytes);
    out.push_str(&text[..keep]);
    out.push_str(&note);
    if out.len() > max_bytes {
        // Only when `max_bytes` < MIN_CUT_BYTES: the note itself does not fit.
        let end = floor_char_boundary(&out, max_bytes);
        out.truncate(end);
    }
    Cow::Owned(out)
}

/// The largest character boundary of `text` at or below `index`.
fn floor_char_boundary(text: &str, index: usize) -> usize {
    if index >= text.len() {
        return text.len();
    }
    (0..=index)
        .rev()
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_text_is_kept_as_it_is() {
        assert!(matches!(cut("refused", 300), Cow::Borrowed("refused")));
        let exact = "x".repeat(300);
        assert_eq!(cut(&exact, 300), exact);
    }

    #[test]
    fn a_long_text_is_cut_to_the_limit_and_says_so() {
        let long = "e".repeat(1 << 20);
        let shown = cut(&long, OUTSIDE_TEXT_BYTES);
        assert!(shown.len() <= OUTSIDE_TEXT_BYTES, "{}", shown.len());
        assert!(shown.starts_with("eeee"));
        assert!(shown.ends_with("[cut from 1048576 bytes]"), "{shown}");
    }

    #[test]
    fn a_cut_never_splits_a_character_and_never_exceeds_the_limit() {
        // 3-byte characters, at every limit from tiny to past the end.
        let text = "€".repeat(200);
        for max in 0..700 {
            let shown = cut(&text, max);
            assert!(shown.len() <= max || shown.len() == text.len(), "{max}");
            if max >= MIN_CUT_BYTES && max < text.len() {
                assert!(shown.contains("[cut from 600 bytes]"), "{max}: {shown}");
            }
        }
    }
}
