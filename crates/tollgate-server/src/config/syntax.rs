//! TOML syntax errors as config errors, each at its line and each once.
//!
//! The TOML parser reports some errors without a position: a key path too
//! deep for its recursion limit is one, reported once for every such key, so
//! a file of 3,000 ever deeper table headers gave thousands of identical
//! lines, all at line 1. Such an error is reported once, at the first line
//! that has it on its own.

use std::collections::HashSet;

use toml::de::DeTable;

use crate::config::file::ConfigError;

/// `errors`, as parsing `source` (named `file`) gave them, as config errors;
/// `line` maps a byte offset to its 1-based line.
pub(super) fn syntax_errors(
    source: &str,
    file: &str,
    errors: Vec<toml::de::Error>,
    line: impl Fn(usize) -> usize,
) -> Vec<ConfigError> {
    let mut unplaced = HashSet::new();
    errors
        .into_iter()
        .filter_map(|e| {
            let at = match e.span() {
                Some(span) => line(span.start),
                None if unplaced.insert(e.message().to_owned()) => {
                    first_line_with(source, e.message()).unwrap_or(1)
                }
                None => return None,
            };
            Some(ConfigError {
                file: file.to_owned(),
                line: Some(at),
                field: None,
                message: format!("TOML syntax error: {}", e.message()),
            })
        })
        .collect()
}

/// The first line of `source` that, parsed alone, gives an error with
/// `message`. Run only for errors the parser could not place, so the cost
/// (one parse of each line) is paid only by a file that is already wrong.
fn first_line_with(source: &str, message: &str) -> Option<usize> {
    source
        .lines()
        .position(|text| {
            let (_, errors) = DeTable::parse_recoverable(text);
            errors.iter().any(|e| e.message() == message)
        })
        .map(|i| i + 1)
}

#[cfg(test)]
mod tests {
    use super::super::Config;

    #[test]
    fn a_deep_key_path_error_is_reported_once_at_its_line() {
        // 3,000 ever deeper table headers: the parser's recursion limit
        // (80 keys before the last) is passed from the 81st on, each without
        // a position.
        let source: String = (1..=3000)
            .map(|depth| format!("[{}]\n", vec!["a"; depth].join(".")))
            .collect();
        let errors = Config::parse(&source, "deep.toml").expect_err("too deep");
        let text = errors.to_string();
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(
            text.starts_with("deep.toml:81: TOML syntax error: recursion limit"),
            "{text}"
        );
    }

    #[test]
    fn placed_errors_keep_their_own_lines() {
        let errors = Config::parse("a = 1\nb = \nc = [\n", "bad.toml").expect_err("bad");
        let lines: Vec<String> = errors.to_string().lines().map(str::to_owned).collect();
        assert!(lines.len() >= 2, "{lines:?}");
        assert!(
            lines[0].starts_with("bad.toml:2: TOML syntax error"),
            "{lines:?}"
        );
    }
}
