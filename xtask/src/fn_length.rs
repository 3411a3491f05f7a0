//! The function-length lint (`cargo xtask ci --step fn-length`): no function in the product
//! crates' sources (`crates/*/src`) runs over [`MAX_FN_LINES`] lines (issue 45).
//!
//! A function that long does several things; the rule keeps each of them a named step. The scan
//! is lexical, not a parse: comments, string literals (raw ones too) and character literals are
//! blanked first, so that a brace or a `fn` inside them counts for nothing; then every `fn NAME`
//! item is found and its body's braces matched. A function's length runs from the line of its
//! `fn` keyword to the line of its closing brace, both counted; its attributes and doc comment do
//! not count. `fn(...)` pointer types and bodiless trait declarations are not functions here, and
//! a nested function counts both on its own and inside the one that holds it.
//!
//! Unit tests (`#[cfg(test)]` modules and `tests.rs` files under src/) are held to the same rule:
//! they are read as the code they test is.

use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};

/// The longest a function in `crates/*/src` may be, in lines.
pub const MAX_FN_LINES: usize = 120;

/// One function item found by the scan.
#[derive(Debug, PartialEq, Eq)]
struct FnSpan {
    name: String,
    /// 1-based line of the `fn` keyword.
    line: usize,
    /// Lines from the `fn` keyword to the closing brace, both counted.
    lines: usize,
}

/// Fails naming every function in `crates/*/src` over [`MAX_FN_LINES`] lines, longest first;
/// otherwise prints the longest one.
pub fn run() -> Result<()> {
    let root = crate::workspace_root()?;
    let mut found = Vec::new();
    for file in rust_sources(&root.join("crates"))? {
        let text = std::fs::read_to_string(&file)
            .with_context(|| format!("reading {}", file.display()))?;
        let shown = file.strip_prefix(&root).unwrap_or(&file).to_path_buf();
        found.extend(functions(&text).into_iter().map(|f| (shown.clone(), f)));
    }
    found.sort_by_key(|(_, f)| std::cmp::Reverse(f.lines));
    let too_long: Vec<_> = found
        .iter()
        .filter(|(_, f)| f.lines > MAX_FN_LINES)
        .collect();
    for (file, f) in &too_long {
        eprintln!(
            "{}:{}: fn {} is {} lines (at most {MAX_FN_LINES})",
            file.display(),
            f.line,
            f.name,
            f.lines
        );
    }
    if !too_long.is_empty() {
        bail!(
            "{} function(s) in crates/*/src over {MAX_FN_LINES} lines: split each into named steps",
            too_long.len()
        );
    }
    match found.first() {
        Some((file, f)) => eprintln!(
            "{} functions read; the longest: {}:{} fn {}, {} lines (at most {MAX_FN_LINES})",
            found.len(),
            file.display(),
            f.line,
            f.name,
            f.lines
        ),
        None => bail!("no function found under crates/*/src: is the scan reading the right tree?"),
    }
    Ok(())
}

/// Every `.rs` file under `crates/*/src`, in a stable order.
fn rust_sources(crates: &Path) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let mut dirs: Vec<PathBuf> = Vec::new();
    for entry in
        std::fs::read_dir(crates).with_context(|| format!("listing {}", crates.display()))?
    {
        let src = entry?.path().join("src");
        if src.is_dir() {
            dirs.push(src);
        }
    }
    while let Some(dir) = dirs.pop() {
        for entry in
            std::fs::read_dir(&dir).with_context(|| format!("listing {}", dir.display()))?
        {
            let path = entry?.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    Ok(files)
}

/// The function items of one source file.
fn functions(text: &str) -> Vec<FnSpan> {
    let code = blank_non_code(text);
    let line_of = |at: usize| code.iter().take(at).filter(|&&c| c == '\n').count() + 1;
    let mut found = Vec::new();
    let mut at = 0;
    while let Some(fn_at) = next_keyword(&code, at, "fn") {
        at = fn_at + 2;
        let Some((name, after_name)) = identifier_after(&code, at) else {
            continue; // `fn(u8) -> u8`: a pointer type, not an item
        };
        let Some(open) = body_start(&code, after_name) else {
            continue; // a trait's declaration without a body
        };
        let Some(close) = matching_brace(&code, open) else {
            continue; // unbalanced: a macro's fragment, not a function
        };
        let line = line_of(fn_at);
        found.push(FnSpan {
            name,
            line,
            lines: line_of(close) - line + 1,
        });
    }
    found
}

/// The character at `i`, or NUL past the end (which no rule below matches).
fn at(src: &[char], i: usize) -> char {
    src.get(i).copied().unwrap_or('\0')
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The next `word` at or after `from` that stands alone (no identifier character either side).
fn next_keyword(code: &[char], from: usize, word: &str) -> Option<usize> {
    let word: Vec<char> = word.chars().collect();
    (from..code.len()).find(|&i| {
        code.get(i..i + word.len()) == Some(&word[..])
            && (i == 0 || !is_ident(at(code, i - 1)))
            && !is_ident(at(code, i + word.len()))
    })
}

/// The identifier that follows `from` after white space (a raw `r#name` too), and where it ends.
fn identifier_after(code: &[char], from: usize) -> Option<(String, usize)> {
    let mut i = from;
    while at(code, i).is_whitespace() {
        i += 1;
    }
    if at(code, i) == 'r' && at(code, i + 1) == '#' {
        i += 2;
    }
    let start = i;
    if !is_ident(at(code, i)) || at(code, i).is_ascii_digit() {
        return None;
    }
    while is_ident(at(code, i)) {
        i += 1;
    }
    Some((code.iter().take(i).skip(start).collect(), i))
}

/// The `{` that opens the body of the function whose signature starts at `from`, or `None` at a
/// `;` first (a declaration). Brackets are tracked because `[u8; 4]` may stand in a signature.
fn body_start(code: &[char], from: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (i, &c) in code.iter().enumerate().skip(from) {
        match c {
            '(' | '[' => depth += 1,
            ')' | ']' => depth = depth.saturating_sub(1),
            '{' if depth == 0 => return Some(i),
            ';' if depth == 0 => return None,
            _ => {}
        }
    }
    None
}

fn matching_brace(code: &[char], open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (i, &c) in code.iter().enumerate().skip(open) {
        match c {
            '{' => depth += 1,
            '}' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

/// The text with comments, string literals and character literals replaced by spaces (line
/// breaks kept, so that line numbers hold). Lifetimes and labels (`'a`) stay.
fn blank_non_code(text: &str) -> Vec<char> {
    let src: Vec<char> = text.chars().collect();
    let mut out = src.clone();
    let mut i = 0;
    while i < src.len() {
        let prev_is_ident = i > 0 && is_ident(at(&src, i - 1));
        let end = match (at(&src, i), at(&src, i + 1)) {
            ('/', '/') => (i..src.len())
                .find(|&j| at(&src, j) == '\n')
                .or(Some(src.len())),
            ('/', '*') => block_comment_end(&src, i),
            ('"', _) => quoted_end(&src, i + 1, '"'),
            ('r' | 'b' | 'c', _) if !prev_is_ident => raw_string_end(&src, i),
            ('\'', _) => char_literal_end(&src, i),
            _ => None,
        };
        match end {
            Some(end) => {
                for c in out.iter_mut().take(end).skip(i) {
                    if *c != '\n' {
                        *c = ' ';
                    }
                }
                i = end.max(i + 1);
            }
            None => i += 1,
        }
    }
    out
}

/// Where a (nestable) block comment that opens at `start` ends, just past its `*/`.
fn block_comment_end(src: &[char], start: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut i = start;
    while i < src.len() {
        match (at(src, i), at(src, i + 1)) {
            ('/', '*') => {
                depth += 1;
                i += 2;
            }
            ('*', '/') => {
                depth = depth.saturating_sub(1);
                i += 2;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => i += 1,
        }
    }
    Some(src.len())
}

/// Just past the unescaped `close` that ends a literal whose content starts at `from`.
fn quoted_end(src: &[char], from: usize, close: char) -> Option<usize> {
    let mut i = from;
    while i < src.len() {
        match at(src, i) {
            '\\' => i += 2,
            c if c == close => return Some(i + 1),
            _ => i += 1,
        }
    }
    Some(src.len())
}

/// A raw string (`r"…"`, `r#"…"#`, `br#"…"#`, `cr"…"`) starting at `start`: where it ends.
/// `None` for anything else, a raw identifier `r#type` or a plain `b"…"` included.
fn raw_string_end(src: &[char], start: usize) -> Option<usize> {
    let mut i = start;
    if matches!(at(src, i), 'b' | 'c') {
        i += 1;
    }
    if at(src, i) != 'r' {
        return None;
    }
    i += 1;
    let hashes = src.iter().skip(i).take_while(|&&c| c == '#').count();
    i += hashes;
    if at(src, i) != '"' {
        return None;
    }
    let closing: Vec<char> = std::iter::once('"')
        .chain(std::iter::repeat_n('#', hashes))
        .collect();
    (i + 1..src.len())
        .find(|&j| src.get(j..).is_some_and(|rest| rest.starts_with(&closing)))
        .map(|j| j + closing.len())
        .or(Some(src.len()))
}

/// A character literal (`'x'`, `'\n'`, `'\u{1F600}'`, `b'x'` from its quote) starting at
/// `start`: where it ends. `None` for a lifetime or a label (`'a`, `'outer:`).
fn char_literal_end(src: &[char], start: usize) -> Option<usize> {
    match at(src, start + 1) {
        '\\' => quoted_end(src, start + 1, '\''),
        '\0' => None,
        _ if at(src, start + 2) == '\'' => Some(start + 3),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spans(text: &str) -> Vec<(String, usize, usize)> {
        functions(text)
            .into_iter()
            .map(|f| (f.name, f.line, f.lines))
            .collect()
    }

    #[test]
    fn a_function_runs_from_its_fn_line_to_its_closing_brace() {
        let text =
            "/// doc\n#[inline]\npub(crate) async fn pass(\n    x: u8,\n) -> u8 {\n    x\n}\n";
        assert_eq!(spans(text), [("pass".to_owned(), 3, 5)]);
    }

    #[test]
    fn braces_and_fn_in_comments_strings_and_chars_count_for_nothing() {
        let text = r####"fn outer() {
    // fn hidden() { {
    /* { /* nested } */ fn also_hidden() { */
    let s = "fn in_string() { \" {";
    let r = r#"fn raw() { "# ;
    let b = br##"{"##;
    let c = '{';
    let e = '\'';
    let l: &'static str = "";
    'label: loop { break 'label; }
}
fn next() {}
"####;
        assert_eq!(
            spans(text),
            [("outer".to_owned(), 1, 11), ("next".to_owned(), 12, 1)]
        );
    }

    #[test]
    fn pointer_types_declarations_and_arrays_in_signatures_are_not_misread() {
        let text = "trait T {\n    fn declared(&self) -> [u8; 4];\n    fn with_body(f: fn(u8) -> u8, a: [u8; 2]) -> u8 {\n        f(a[0])\n    }\n}\nfn r#type() {\n}\n";
        assert_eq!(
            spans(text),
            [("with_body".to_owned(), 3, 3), ("type".to_owned(), 7, 2)]
        );
    }

    #[test]
    fn a_nested_function_counts_on_its_own_and_inside_its_holder() {
        let text = "fn holder() {\n    fn inner() {\n    }\n}\n";
        assert_eq!(
            spans(text),
            [("holder".to_owned(), 1, 4), ("inner".to_owned(), 2, 2)]
        );
    }
}
