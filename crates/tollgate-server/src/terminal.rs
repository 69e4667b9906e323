//! Text from a config file made safe to print on an operator's terminal.
//!
//! A YAML or TOML key, a descriptor value, a file name: any of them may hold
//! escape sequences that recolour or rewrite the terminal, a CR that
//! overprints the line, a NUL, or bidirectional overrides that show text in
//! another order than it is. `validate` and every config error print them
//! escaped, as Rust's `escape_debug` spells them (`\u{1b}`, `\r`, `\0`).

use std::fmt;

/// `text`, displayed with control and bidirectional formatting characters
/// escaped; everything else as it is.
#[derive(Debug, Clone, Copy)]
pub struct Escaped<'a>(pub &'a str);

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut rest = self.0;
        while let Some(at) = rest.find(needs_escape) {
            f.write_str(&rest[..at])?;
            let c = rest[at..].chars().next().unwrap_or_default();
            if c.is_control() {
                write!(f, "{}", c.escape_debug())?;
            } else {
                write!(f, "{}", c.escape_unicode())?;
            }
            rest = &rest[at + c.len_utf8()..];
        }
        f.write_str(rest)
    }
}

/// Control characters (C0, DEL, C1) and the bidirectional formatting
/// characters.
fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

#[cfg(test)]
mod tests {
    use super::Escaped;

    #[test]
    fn control_and_bidi_characters_are_escaped_and_the_rest_kept() {
        let cases = [
            ("plain.name-1", "plain.name-1"),
            ("\u{1b}[31mred", "\\u{1b}[31mred"),
            ("a\r\nb\0c\td", "a\\r\\nb\\0c\\td"),
            ("\u{7f}\u{9b}", "\\u{7f}\\u{9b}"),
            ("abc\u{202e}fed", "abc\\u{202e}fed"),
            ("grüße, 日本", "grüße, 日本"),
            ("back\\slash", "back\\slash"),
        ];
        for (raw, shown) in cases {
            assert_eq!(Escaped(raw).to_string(), shown, "{raw:?}");
        }
    }
}
