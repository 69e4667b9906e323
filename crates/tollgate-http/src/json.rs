//! A push-based JSON scanner that picks the values at a few JSON pointers
//! (RFC 6901) out of a document as its bytes pass, in bounded memory.
//!
//! The reverse proxy reads a request body's `model` or `max_tokens`, and a
//! response body's `usage`, without holding the body: bytes are pushed in
//! whatever pieces the connection delivers them, nothing is kept but the
//! path to the current value (one small frame per nesting level, at most
//! [`MAX_DEPTH`]) and the text of a value a pointer targets (at most
//! [`MAX_TEXT`] bytes). A document nested deeper than that is malformed;
//! a targeted key or scalar longer than that is [`Found::Unreadable`].
//!
//! ```
//! use tollgate_http::json::{Found, Pointer, Scalar, Scanner};
//!
//! let pointers: Vec<Pointer> = vec!["/usage/total_tokens".parse()?, "/model".parse()?];
//! let mut scanner = Scanner::new(pointers);
//! for piece in [&br#"{"model":"gpt-4o","usage":{"total_"#[..], br#"tokens": 42}}"#] {
//!     scanner.push(piece);
//! }
//! scanner.finish();
//! assert!(scanner.complete());
//! assert_eq!(scanner.found(0), &Found::One(Scalar::Number("42".into())));
//! assert_eq!(scanner.found(0).as_u64(), Some(42));
//! assert_eq!(scanner.found(1).key_text().as_deref(), Some("gpt-4o"));
//! # Ok::<(), String>(())
//! ```

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

/// The deepest nesting of arrays and objects a document may have.
pub const MAX_DEPTH: usize = 128;
/// The longest key or scalar text kept, in bytes (after unescaping).
pub const MAX_TEXT: usize = 4096;
/// The most pointers one scanner looks for.
pub const MAX_POINTERS: usize = 64;

/// An RFC 6901 JSON pointer such as `/usage/total_tokens` (`~1` is a `/`
/// in a key, `~0` a `~`). The empty pointer (the whole document) is
/// refused: a scanner picks scalars, never the document itself.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Pointer {
    tokens: Vec<String>,
}

impl Pointer {
    /// The reference tokens, unescaped.
    #[must_use]
    pub fn tokens(&self) -> &[String] {
        &self.tokens
    }
}

impl FromStr for Pointer {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let Some(rest) = s.strip_prefix('/') else {
            return Err(format!(
                "JSON pointer {s:?} must start with '/' (RFC 6901), e.g. \"/usage/total_tokens\""
            ));
        };
        let mut tokens = Vec::new();
        for raw in rest.split('/') {
            let mut token = String::with_capacity(raw.len());
            let mut chars = raw.chars();
            while let Some(c) = chars.next() {
                if c != '~' {
                    token.push(c);
                    continue;
                }
                match chars.next() {
                    Some('0') => token.push('~'),
                    Some('1') => token.push('/'),
                    _ => {
                        return Err(format!(
                            "JSON pointer {s:?}: '~' must be followed by 0 or 1 (\"~0\" is '~', \"~1\" is '/')"
                        ));
                    }
                }
            }
            if token.len() > MAX_TEXT {
                return Err(format!(
                    "JSON pointer {s:?}: a key longer than {MAX_TEXT} bytes"
                ));
            }
            tokens.push(token);
        }
        if tokens.len() > MAX_DEPTH {
            return Err(format!(
                "JSON pointer {s:?} is deeper than {MAX_DEPTH} levels"
            ));
        }
        Ok(Self { tokens })
    }
}

impl fmt::Display for Pointer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for t in &self.tokens {
            write!(f, "/{}", t.replace('~', "~0").replace('/', "~1"))?;
        }
        Ok(())
    }
}

/// A scalar value found at a pointer.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Scalar {
    /// A number, as its JSON text (`42`, `-1.5e3`).
    Number(String),
    /// A string, unescaped (invalid UTF-8 and lone surrogates replaced).
    String(String),
    /// `true` or `false`.
    Bool(bool),
    /// `null`.
    Null,
}

impl Scalar {
    /// A whole number of units: a number written with digits only, that
    /// fits in a `u64` (`-1`, `1.5`, `1e3` and strings are not).
    #[must_use]
    pub fn as_u64(&self) -> Option<u64> {
        match self {
            Self::Number(n) if n.bytes().all(|b| b.is_ascii_digit()) => n.parse().ok(),
            _ => None,
        }
    }

    /// The text a key is made of: a string's text, a number's or a bool's
    /// JSON text; `null` has none.
    #[must_use]
    pub fn key_text(&self) -> Option<String> {
        match self {
            Self::Number(n) => Some(n.clone()),
            Self::String(s) => Some(s.clone()),
            Self::Bool(b) => Some(b.to_string()),
            Self::Null => None,
        }
    }
}

/// What a scanner found at one pointer.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Found {
    /// Nothing at the pointer (so far).
    Absent,
    /// One scalar.
    One(Scalar),
    /// The pointer matched more than once (a key given twice in an object).
    Repeated,
    /// An object or array, or a scalar longer than [`MAX_TEXT`].
    Unreadable,
}

impl Found {
    /// [`Scalar::as_u64`] of the one scalar found.
    #[must_use]
    pub fn as_u64(&self) -> Option<u64> {
        match self {
            Self::One(s) => s.as_u64(),
            _ => None,
        }
    }

    /// [`Scalar::key_text`] of the one scalar found.
    #[must_use]
    pub fn key_text(&self) -> Option<String> {
        match self {
            Self::One(s) => s.key_text(),
            _ => None,
        }
    }

    fn record(&mut self, what: Found) {
        *self = match self {
            Self::Absent => what,
            _ => Self::Repeated,
        };
    }
}

/// A set of pointers, as bits (at most [`MAX_POINTERS`]).
type Mask = u64;

/// One open array or object.
#[derive(Debug, Clone, Copy)]
struct Frame {
    object: bool,
    /// The pointers whose tokens so far match the path to this container.
    mask: Mask,
    /// Members or elements seen (the next element's index).
    index: usize,
}

/// Where the scanner is between tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// A value (the document's, an element, or a member's).
    Value,
    /// A value or `]` (just after `[`).
    ValueOrClose,
    /// A key or `}` (just after `{`).
    KeyOrClose,
    /// A key (after `,` in an object).
    Key,
    /// `:` after a key.
    Colon,
    /// `,` or the container's close.
    CommaOrClose,
    /// The document's value has ended: only whitespace may follow.
    Done,
}

/// Inside a token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token {
    /// Between tokens.
    None,
    /// In a string; `key` when it is an object's key.
    Str { key: bool, escape: Escape },
    /// In a number, at this point of its grammar.
    Num(NumState),
    /// In `true`, `false` or `null`, this many bytes matched.
    Lit { word: &'static [u8], at: usize },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Escape {
    No,
    /// After `\`.
    Backslash,
    /// After `\u` and this many hex digits, with their value so far.
    Hex(u8, u32),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NumState {
    Minus,
    Zero,
    Int,
    Dot,
    Frac,
    E,
    ESign,
    Exp,
}

impl NumState {
    /// Whether a number may end here.
    fn can_end(self) -> bool {
        matches!(self, Self::Zero | Self::Int | Self::Frac | Self::Exp)
    }

    fn next(self, b: u8) -> Option<Self> {
        use NumState::*;
        Some(match (self, b) {
            (Minus, b'0') => Zero,
            (Minus, b'1'..=b'9') | (Int, b'0'..=b'9') => Int,
            (Zero | Int, b'.') => Dot,
            (Dot | Frac, b'0'..=b'9') => Frac,
            (Zero | Int | Frac, b'e' | b'E') => E,
            (E, b'+' | b'-') => ESign,
            (E | ESign | Exp, b'0'..=b'9') => Exp,
            _ => return None,
        })
    }
}

/// Scans one JSON document pushed in pieces for the values at its
/// pointers (the module docs say what it keeps). Malformed input stops
/// the scan; what was found before stays.
#[derive(Debug, Clone)]
pub struct Scanner {
    pointers: Arc<[Pointer]>,
    found: Vec<Found>,
    stack: Vec<Frame>,
    expect: Expect,
    token: Token,
    /// The pointers the current value (or the key being read) is the
    /// target of, and those it may lead to.
    targets: Mask,
    descend: Mask,
    /// The current key, or the targeted scalar's text; `None` once it
    /// outgrew [`MAX_TEXT`].
    text: Option<Vec<u8>>,
    /// A high surrogate waiting for its low half.
    surrogate: Option<u32>,
    malformed: bool,
    finished: bool,
}

impl Scanner {
    /// A scanner for `pointers` (at most [`MAX_POINTERS`]; more are
    /// ignored, each found [`Found::Absent`]).
    pub fn new(pointers: impl Into<Arc<[Pointer]>>) -> Self {
        let pointers = pointers.into();
        let mut scanner = Self {
            found: vec![Found::Absent; pointers.len()],
            pointers,
            stack: Vec::new(),
            expect: Expect::Value,
            token: Token::None,
            targets: 0,
            descend: 0,
            text: None,
            surrogate: None,
            malformed: false,
            finished: false,
        };
        scanner.restart();
        scanner
    }

    /// Forgets everything and starts on a new document (the next event of
    /// a stream), keeping the pointers and the memory already allocated.
    pub fn restart(&mut self) {
        self.found.iter_mut().for_each(|f| *f = Found::Absent);
        self.stack.clear();
        self.expect = Expect::Value;
        self.token = Token::None;
        self.targets = 0;
        let n = self.pointers.len().min(MAX_POINTERS);
        self.descend = if n == MAX_POINTERS {
            Mask::MAX
        } else {
            (1 << n) - 1
        };
        self.text = None;
        self.surrogate = None;
        self.malformed = false;
        self.finished = false;
    }

    /// What was found at pointer `i` (in [`Scanner::new`]'s order).
    ///
    /// # Panics
    /// `i` is not the index of a pointer.
    #[must_use]
    pub fn found(&self, i: usize) -> &Found {
        &self.found[i]
    }

    /// Whether one whole, valid document was read (after [`Scanner::finish`]
    /// for a document that is a bare number).
    #[must_use]
    pub fn complete(&self) -> bool {
        !self.malformed && self.expect == Expect::Done && self.token == Token::None
    }

    /// Whether the input was not JSON (or nested deeper than
    /// [`MAX_DEPTH`], or went on after the document).
    #[must_use]
    pub fn malformed(&self) -> bool {
        self.malformed
    }

    /// Whether every pointer has been settled: found (once or more) or
    /// impossible to find now. The caller may stop pushing.
    #[must_use]
    pub fn settled(&self) -> bool {
        self.malformed
            || self.expect == Expect::Done
            || (self.descend == 0 && self.targets == 0 && self.stack.iter().all(|f| f.mask == 0))
    }

    /// The input has ended: a number at the document's end ends with it.
    pub fn finish(&mut self) {
        if self.finished || self.malformed {
            return;
        }
        self.finished = true;
        if let Token::Num(state) = self.token {
            if state.can_end() {
                self.token = Token::None;
                self.end_scalar(ScalarKind::Number);
            } else {
                self.malformed = true;
            }
        }
    }

    /// Scans the next piece of the document.
    pub fn push(&mut self, bytes: &[u8]) {
        let mut i = 0;
        while i < bytes.len() && !self.malformed {
            let b = bytes[i];
            if self.step(b) {
                i += 1;
            }
        }
    }

    /// Takes one byte; false when the byte ended a number and must be read
    /// again as what follows it.
    fn step(&mut self, b: u8) -> bool {
        match self.token {
            Token::Str { key, escape } => {
                self.string_byte(key, escape, b);
                true
            }
            Token::Num(state) => match state.next(b) {
                Some(next) => {
                    self.token = Token::Num(next);
                    self.keep(b);
                    true
                }
                None if state.can_end() => {
                    self.token = Token::None;
                    self.end_scalar(ScalarKind::Number);
                    false
                }
                None => {
                    self.malformed = true;
                    true
                }
            },
            Token::Lit { word, at } => {
                if word.get(at) == Some(&b) {
                    if at + 1 == word.len() {
                        self.token = Token::None;
                        self.end_scalar(match word {
                            b"true" => ScalarKind::True,
                            b"false" => ScalarKind::False,
                            _ => ScalarKind::Null,
                        });
                    } else {
                        self.token = Token::Lit { word, at: at + 1 };
                    }
                } else {
                    self.malformed = true;
                }
                true
            }
            Token::None => {
                self.structure(b);
                true
            }
        }
    }

    fn structure(&mut self, b: u8) {
        if matches!(b, b' ' | b'\t' | b'\n' | b'\r') {
            return;
        }
        match (self.expect, b) {
            (Expect::Value | Expect::ValueOrClose, _) if b != b']' => self.begin_value(b),
            (Expect::ValueOrClose, b']') => self.close(false),
            (Expect::KeyOrClose, b'}') => self.close(true),
            (Expect::KeyOrClose | Expect::Key, b'"') => {
                self.text = Some(Vec::new());
                self.token = Token::Str {
                    key: true,
                    escape: Escape::No,
                };
            }
            (Expect::Colon, b':') => self.expect = Expect::Value,
            (Expect::CommaOrClose, b',') => {
                let Some(frame) = self.stack.last_mut() else {
                    self.malformed = true;
                    return;
                };
                frame.index += 1;
                if frame.object {
                    self.expect = Expect::Key;
                } else {
                    self.expect = Expect::Value;
                    self.array_element();
                }
            }
            (Expect::CommaOrClose, b'}') if self.stack.last().is_some_and(|f| f.object) => {
                self.close(true);
            }
            (Expect::CommaOrClose, b']') if self.stack.last().is_some_and(|f| !f.object) => {
                self.close(false);
            }
            _ => self.malformed = true,
        }
    }

    /// The masks of the next element of the array on top of the stack.
    fn array_element(&mut self) {
        let Some(frame) = self.stack.last() else {
            return;
        };
        let (depth, index, mask) = (self.stack.len() - 1, frame.index, frame.mask);
        let index = index.to_string();
        self.member(mask, depth, index.as_bytes());
    }

    /// Sets the masks of the value at `token` inside the container at
    /// `depth` (0 for the document's own value's members) with `mask`.
    fn member(&mut self, mask: Mask, depth: usize, token: &[u8]) {
        let (mut targets, mut descend) = (0, 0);
        for (i, p) in self.pointers.iter().enumerate().take(MAX_POINTERS) {
            let bit = 1 << i;
            if mask & bit == 0 || p.tokens.get(depth).map(String::as_bytes) != Some(token) {
                continue;
            }
            if p.tokens.len() == depth + 1 {
                targets |= bit;
            } else {
                descend |= bit;
            }
        }
        self.targets = targets;
        self.descend = descend;
    }

    fn begin_value(&mut self, b: u8) {
        match b {
            b'{' | b'[' => {
                self.record(self.targets, Found::Unreadable);
                if self.stack.len() == MAX_DEPTH {
                    self.malformed = true;
                    return;
                }
                let object = b == b'{';
                let mut mask = self.descend;
                if !object {
                    // Only a token that is an index leads into an array.
                    let depth = self.stack.len();
                    for (i, p) in self.pointers.iter().enumerate().take(MAX_POINTERS) {
                        if !p.tokens.get(depth).is_some_and(|t| is_index(t)) {
                            mask &= !(1 << i);
                        }
                    }
                }
                self.stack.push(Frame {
                    object,
                    mask,
                    index: 0,
                });
                self.targets = 0;
                if object {
                    self.expect = Expect::KeyOrClose;
                } else {
                    self.expect = Expect::ValueOrClose;
                    self.array_element();
                }
            }
            b'"' => {
                self.start_text();
                self.token = Token::Str {
                    key: false,
                    escape: Escape::No,
                };
            }
            b'-' | b'0'..=b'9' => {
                self.start_text();
                self.keep(b);
                self.token = Token::Num(if b == b'-' {
                    NumState::Minus
                } else if b == b'0' {
                    NumState::Zero
                } else {
                    NumState::Int
                });
            }
            b't' => {
                self.token = Token::Lit {
                    word: b"true",
                    at: 1,
                }
            }
            b'f' => {
                self.token = Token::Lit {
                    word: b"false",
                    at: 1,
                }
            }
            b'n' => {
                self.token = Token::Lit {
                    word: b"null",
                    at: 1,
                }
            }
            _ => self.malformed = true,
        }
    }

    fn close(&mut self, object: bool) {
        match self.stack.pop() {
            Some(frame) if frame.object == object => self.after_value(),
            _ => self.malformed = true,
        }
    }

    /// A value ended: what comes next depends on its container.
    fn after_value(&mut self) {
        self.targets = 0;
        self.descend = 0;
        self.expect = if self.stack.is_empty() {
            Expect::Done
        } else {
            Expect::CommaOrClose
        };
    }

    fn start_text(&mut self) {
        self.text = (self.targets != 0).then(Vec::new);
    }

    /// Keeps a byte of the current key or targeted scalar, within bounds.
    fn keep(&mut self, b: u8) {
        if let Some(text) = &mut self.text {
            if text.len() < MAX_TEXT {
                text.push(b);
            } else {
                self.text = None;
                self.targets_overflow();
            }
        }
    }

    /// A targeted scalar (or a key) outgrew [`MAX_TEXT`].
    fn targets_overflow(&mut self) {
        if matches!(self.token, Token::Str { key: true, .. }) {
            // An over-long key matches no pointer (their keys are shorter).
            return;
        }
        self.record(self.targets, Found::Unreadable);
        self.targets = 0;
    }

    fn keep_char(&mut self, c: char) {
        let mut buf = [0; 4];
        for &b in c.encode_utf8(&mut buf).as_bytes() {
            self.keep(b);
        }
    }

    fn string_byte(&mut self, key: bool, escape: Escape, b: u8) {
        let set = |s: &mut Self, escape| s.token = Token::Str { key, escape };
        match escape {
            Escape::No => match b {
                b'"' => {
                    self.flush_surrogate();
                    self.token = Token::None;
                    if key {
                        self.end_key();
                    } else {
                        self.end_scalar(ScalarKind::String);
                    }
                }
                b'\\' => set(self, Escape::Backslash),
                0..=0x1f => self.malformed = true,
                _ => {
                    self.flush_surrogate();
                    self.keep(b);
                }
            },
            Escape::Backslash => {
                let c = match b {
                    b'"' => '"',
                    b'\\' => '\\',
                    b'/' => '/',
                    b'b' => '\u{8}',
                    b'f' => '\u{c}',
                    b'n' => '\n',
                    b'r' => '\r',
                    b't' => '\t',
                    b'u' => {
                        set(self, Escape::Hex(0, 0));
                        return;
                    }
                    _ => {
                        self.malformed = true;
                        return;
                    }
                };
                self.flush_surrogate();
                self.keep_char(c);
                set(self, Escape::No);
            }
            Escape::Hex(n, value) => {
                let Some(digit) = (b as char).to_digit(16) else {
                    self.malformed = true;
                    return;
                };
                let value = value << 4 | digit;
                if n < 3 {
                    set(self, Escape::Hex(n + 1, value));
                    return;
                }
                set(self, Escape::No);
                self.code_unit(value);
            }
        }
    }

    /// One `\uXXXX` code unit: a surrogate pair makes one character.
    fn code_unit(&mut self, unit: u32) {
        match (self.surrogate.take(), unit) {
            (Some(high), 0xdc00..=0xdfff) => {
                let c = 0x10000 + ((high - 0xd800) << 10) + (unit - 0xdc00);
                self.keep_char(char::from_u32(c).unwrap_or('\u{fffd}'));
            }
            (high, 0xd800..=0xdbff) => {
                if high.is_some() {
                    self.keep_char('\u{fffd}');
                }
                self.surrogate = Some(unit);
            }
            (high, _) => {
                if high.is_some() {
                    self.keep_char('\u{fffd}');
                }
                self.keep_char(char::from_u32(unit).unwrap_or('\u{fffd}'));
            }
        }
    }

    /// A high surrogate not followed by its low half.
    fn flush_surrogate(&mut self) {
        if self.surrogate.take().is_some() {
            self.keep_char('\u{fffd}');
        }
    }

    fn end_key(&mut self) {
        self.expect = Expect::Colon;
        let Some(frame) = self.stack.last() else {
            self.malformed = true;
            return;
        };
        let (mask, depth) = (frame.mask, self.stack.len() - 1);
        match self.text.take() {
            Some(key) => self.member(mask, depth, &key),
            None => {
                self.targets = 0;
                self.descend = 0;
            }
        }
    }

    fn end_scalar(&mut self, kind: ScalarKind) {
        if self.targets != 0 {
            let text = self.text.take().unwrap_or_default();
            let scalar = match kind {
                ScalarKind::Number => Scalar::Number(String::from_utf8_lossy(&text).into_owned()),
                ScalarKind::String => Scalar::String(String::from_utf8_lossy(&text).into_owned()),
                ScalarKind::True => Scalar::Bool(true),
                ScalarKind::False => Scalar::Bool(false),
                ScalarKind::Null => Scalar::Null,
            };
            self.record(self.targets, Found::One(scalar));
        }
        self.text = None;
        self.after_value();
    }

    fn record(&mut self, mask: Mask, what: Found) {
        for (i, found) in self.found.iter_mut().enumerate().take(MAX_POINTERS) {
            if mask & (1 << i) != 0 {
                found.record(what.clone());
            }
        }
    }
}

/// Whether a reference token can name an array element (RFC 6901 §4:
/// digits without a leading zero).
fn is_index(token: &str) -> bool {
    !token.is_empty()
        && token.bytes().all(|b| b.is_ascii_digit())
        && (token == "0" || !token.starts_with('0'))
}

#[derive(Debug, Clone, Copy)]
enum ScalarKind {
    Number,
    String,
    True,
    False,
    Null,
}

#[cfg(test)]
mod tests;
