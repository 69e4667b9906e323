//! Checking a config a `[[rules]]` table at a time (docs/operations.md,
//! "What a rule costs"). The TOML parser lexes a whole document into
//! tokens and events before it builds the tree: for a file of 10,000
//! rules that was 3.3 KB a rule at once, ten times what the checked
//! config keeps. So the file is cut before each line that is exactly
//! `[[rules]]` (a comment may follow) and each piece is parsed and checked
//! alone, then dropped: what is held at once is the text, the config so
//! far and one piece.
//!
//! The result is the whole document's, or the cut is not used: a cut
//! inside a multi-line string or array leaves the piece before it
//! unterminated, a syntax error; a piece that holds anything but
//! `[[rules]]` tables (a `[store]` after the rules) is not one rule's.
//! Either way, and whenever the part before the first rule names `rules`
//! itself, the whole document is checked instead, with the errors it
//! gives (a file with a syntax error is always reported from the whole).

use std::collections::HashMap;

use toml::de::{DeTable, DeValue};

use super::checker::Checker;
use super::model::Config;
use crate::config::file::ConfigErrors;

/// Where each line that is exactly `[[rules]]` (whitespace and a comment
/// aside) starts in `source`.
fn rule_headers(source: &str) -> Vec<usize> {
    let mut at = 0;
    let mut starts = Vec::new();
    for line in source.split_inclusive('\n') {
        let text = line.split_once('#').map_or(line, |(text, _)| text);
        if text.trim() == "[[rules]]" {
            starts.push(at);
        }
        at += line.len();
    }
    starts
}

impl Checker<'_> {
    /// The config of `source` checked a rule at a time, or `None` when it
    /// must be checked whole (see the module docs).
    pub(super) fn by_rule(mut self, source: &str) -> Option<Result<Config, ConfigErrors>> {
        let starts = rule_headers(source);
        let first = *starts.first()?;
        let (head, syntax) = DeTable::parse_recoverable(&source[..first]);
        if !syntax.is_empty() || head.get_ref().contains_key("rules") {
            return None;
        }
        let mut rules = Vec::with_capacity(starts.len());
        let mut seen = HashMap::with_capacity(starts.len());
        let mut all_ok = true;
        let mut i = 0;
        for (n, &start) in starts.iter().enumerate() {
            let end = starts.get(n + 1).copied().unwrap_or(source.len());
            let (piece, syntax) = DeTable::parse_recoverable(&source[start..end]);
            let piece = piece.get_ref();
            if !syntax.is_empty() || piece.len() != 1 {
                return None;
            }
            let items = match piece.get("rules").map(toml::Spanned::get_ref) {
                Some(DeValue::Array(items)) if !items.is_empty() => items,
                _ => return None,
            };
            self.base = start;
            for item in items {
                all_ok &= self.rule_entry(i, item, &mut seen, &mut rules);
                i += 1;
            }
            self.base = 0;
        }
        drop(seen);
        let config = self.root_with(head.get_ref(), all_ok.then_some(rules));
        Some(match config {
            Some(config) if self.errors.is_empty() => Ok(config),
            _ => Err(self.finish()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RULE: &str = "algorithm = 'gcra'\nlimit = 1\nperiod = '1s'\n";

    /// Whether `source` is checked a rule at a time.
    fn cut(source: &str) -> bool {
        Checker::new(source, "f.toml").by_rule(source).is_some()
    }

    fn same(source: &str) {
        let cut = Config::parse(source, "f.toml").map_err(|e| e.to_string());
        let whole = Config::parse_whole(source, "f.toml", false).map_err(|e| e.to_string());
        assert_eq!(cut, whole, "{source}");
    }

    #[test]
    fn headers_are_found_at_their_lines_only() {
        let source = "[store]\n[[rules]]\nname = 'a'\n  [[rules]] # b\nx = '[[rules]]'\n";
        assert_eq!(rule_headers(source), vec![8, 29]);
    }

    #[test]
    fn cut_and_whole_agree() {
        // Good, with overrides and a comment on a header.
        let good = format!(
            "[store]\nmax_keys = 9\n[[rules]]\nname = 'a'\n{RULE}key = 'header:x'\n\
             [[rules.overrides]]\nkey = 'k'\nlimit = 2\n[[rules]] # b\nname = 'b'\n{RULE}"
        );
        assert!(cut(&good));
        same(&good);
        // A duplicate name, reported at its own line with the first's.
        let twice = format!("[[rules]]\nname = 'a'\n{RULE}\n[[rules]]\nname = 'a'\n{RULE}");
        assert!(cut(&twice));
        same(&twice);
        // A section after the rules: not one rule's piece.
        same(&format!(
            "[[rules]]\nname = 'a'\n{RULE}[store]\nmax_keys = 0\n[[rules]]\nname = 'b'\n{RULE}"
        ));
        // A header line inside a multi-line string: the piece before it is
        // unterminated, and the whole document decides.
        same(&format!(
            "[[rules]]\nname = 'a'\n{RULE}key = '''\n[[rules]]\n'''\n[[rules]]\nname = 'b'\n{RULE}"
        ));
        // `rules` named before the first header.
        same(&format!("rules = []\n[[rules]]\nname = 'a'\n{RULE}"));
        // A syntax error in a rule.
        same(&format!(
            "[[rules]]\nname = 'a'\n{RULE}limit = \n[[rules]]\nname = 'b'\n{RULE}"
        ));
    }

    #[test]
    fn lines_are_the_files() {
        let source = format!("[[rules]]\nname = 'a'\n{RULE}\n[[rules]]\nname = 'b'\n{RULE}");
        let config = Config::parse(&source, "f.toml").expect("valid");
        let lines: Vec<usize> = config.rules.iter().map(|r| r.line).collect();
        assert_eq!(lines, vec![1, 7]);
    }
}
