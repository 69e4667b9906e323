//! What a door reads of a request body before its check: the values at
//! the JSON pointers its rules key on (`key = "request_json:/model"`) and
//! estimate from (`estimate = "max_tokens"`), and the size of the prompt
//! (`estimate = "prompt"`), from at most a bounded prefix of the body.
//!
//! The door ([`crate::decide::RuleKeys::body_plan`] says whether it must
//! read at all) pushes the body's bytes into a [`BodyScan`] as they come,
//! stops when [`BodyScan::wants_more`] says so, and hands the
//! [`BodyFacts`] to [`crate::decide::RuleKeys::keys_with_body`]. The
//! bytes read are its to forward; nothing here holds them.
//!
//! What counts as found, so that a key names what the upstream will read:
//!
//! * a string (its text), a number or a bool (its JSON text) at the
//!   pointer, met once within the first `limit` bytes;
//! * not an object, array or `null`, nor a value longer than
//!   [`crate::json::MAX_TEXT`];
//! * not a member given twice (`{"model":"a","model":"b"}`): JSON parsers
//!   disagree on which wins (most take the last), so neither counts.
//!   Reading goes on past a value found once until the document ends (or
//!   the limit), so that a second one is seen;
//! * not in a body that is not JSON: malformed before the limit, or ended
//!   before its document did (within the limit: a longer body's prefix
//!   is a prefix, not a document cut short).
//!
//! A leading UTF-8 byte order mark is skipped (Python's `json.loads` of
//! bytes, behind most LLM servers, skips it too).
//!
//! Anything else is a missing value: a missing key under `[proxy]
//! on_missing_key`, the `estimate_default` for an estimate.

use std::sync::Arc;

use http::HeaderMap;
use http::header::CONTENT_ENCODING;

use crate::json::{Found, Pointer, Scanner};

/// `[proxy] request_body_limit` unless set: 1 MiB read at most before the
/// check.
pub const DEFAULT_REQUEST_BODY_LIMIT: usize = 1 << 20;

/// Whether a message's body has a content coding other than `identity`
/// (on any `Content-Encoding` field line): its bytes are not the JSON
/// they encode. A request's body is then read as no body (the proxy); a
/// response's usage is unreadable (the usage meter).
#[must_use]
pub fn is_encoded(head: &HeaderMap) -> bool {
    head.get_all(CONTENT_ENCODING)
        .iter()
        .any(|v| !v.as_bytes().eq_ignore_ascii_case(b"identity"))
}

/// What a door reads of a request body for its rules: the pointers to
/// find and whether the prompt's size is wanted. Built once per set of
/// rules ([`crate::decide::RuleKeys::body_plan`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BodyPlan {
    /// The pointers' canonical text, in the scanner's order.
    texts: Vec<String>,
    pointers: Arc<[Pointer]>,
    /// Some rule estimates from the prompt's size: the whole prefix is
    /// read, not only up to the last pointer.
    prompt: bool,
}

impl BodyPlan {
    /// A plan finding `pointers` (each once) and, when `prompt`, sizing
    /// the prompt.
    ///
    /// # Errors
    /// A pointer that does not parse.
    pub fn new<'a>(
        pointers: impl IntoIterator<Item = &'a str>,
        prompt: bool,
    ) -> Result<Self, String> {
        let mut texts: Vec<String> = Vec::new();
        let mut parsed = Vec::new();
        for text in pointers {
            let p: Pointer = text.parse()?;
            let canonical = p.to_string();
            if !texts.contains(&canonical) {
                texts.push(canonical);
                parsed.push(p);
            }
        }
        Ok(Self {
            texts,
            pointers: parsed.into(),
            prompt,
        })
    }

    /// The pointers looked for, as text.
    #[must_use]
    pub fn pointers(&self) -> &[String] {
        &self.texts
    }

    /// Whether the prompt's size is wanted.
    #[must_use]
    pub fn sizes_prompt(&self) -> bool {
        self.prompt
    }

    /// A scan of one request body: at most `limit` bytes are scanned;
    /// `content_length` is the body's declared length, if any.
    #[must_use]
    pub fn start(self: &Arc<Self>, limit: usize, content_length: Option<u64>) -> BodyScan {
        BodyScan {
            plan: Arc::clone(self),
            scanner: Scanner::new(Arc::clone(&self.pointers)),
            limit,
            content_length,
            scanned: 0,
            seen: 0,
            ended: false,
            text: TextCount::default(),
            bom: 0,
        }
    }
}

/// The UTF-8 byte order mark. JSON must not start with one, but parsers
/// may skip it, and Python's `json.loads` of bytes (the servers behind
/// most LLM APIs) does: a body starting with one is read past it, or a
/// client could hide its keys from the rules while the upstream reads
/// them.
const BOM: &[u8; 3] = b"\xEF\xBB\xBF";

/// The characters of a body's prefix as a tokenizer sees them: ASCII
/// bytes and other characters (a UTF-8 sequence or a `\uXXXX` escape each
/// count once), for [`crate::estimate::prompt_tokens`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TextCount {
    /// ASCII bytes, `\uXXXX` escapes left out.
    pub ascii: u64,
    /// Characters outside ASCII.
    pub other: u64,
    /// Inside the scan: the backslashes just before, odd or even.
    escaped: bool,
    /// Bytes of a `\uXXXX` escape still to come.
    in_escape: u8,
}

impl TextCount {
    /// Counts `bytes`, the next piece of a body.
    pub fn push(&mut self, bytes: &[u8]) {
        for &b in bytes {
            if self.in_escape > 0 {
                self.in_escape -= 1;
                continue;
            }
            if b >= 0x80 {
                // A lead byte starts a character; continuation bytes
                // (0x80..0xC0) belong to it.
                if b >= 0xC0 {
                    self.other += 1;
                }
                self.escaped = false;
                continue;
            }
            if self.escaped && b == b'u' {
                // `\u` and four hex digits: one character. The `\` was
                // counted as ASCII; take it back.
                self.ascii -= 1;
                self.other += 1;
                self.in_escape = 4;
                self.escaped = false;
                continue;
            }
            self.escaped = b == b'\\' && !self.escaped;
            self.ascii += 1;
        }
    }
}

/// One request body being scanned ([`BodyPlan::start`]).
#[derive(Debug, Clone)]
pub struct BodyScan {
    plan: Arc<BodyPlan>,
    scanner: Scanner,
    limit: usize,
    content_length: Option<u64>,
    /// Bytes pushed into the scanner (at most `limit`).
    scanned: usize,
    /// Bytes pushed, the scanned ones and any past the limit.
    seen: u64,
    ended: bool,
    text: TextCount,
    /// Bytes of a leading [`BOM`] matched so far; 3 once decided (a whole
    /// one skipped, or the body does not start with one).
    bom: usize,
}

impl BodyScan {
    /// Scans the next piece of the body: the part of it within the limit.
    pub fn push(&mut self, bytes: &[u8]) {
        self.seen += bytes.len() as u64;
        let room = self.limit.saturating_sub(self.scanned);
        let mut take = &bytes[..bytes.len().min(room)];
        if take.is_empty() {
            return;
        }
        self.scanned += take.len();
        // A leading byte order mark, possibly split across pieces.
        while self.bom < BOM.len() {
            match take.first() {
                None => return,
                Some(&b) if b == BOM[self.bom] => {
                    self.bom += 1;
                    take = &take[1..];
                }
                Some(_) => self.no_bom(),
            }
        }
        self.feed(take);
    }

    /// The body does not start with a whole byte order mark: the bytes of
    /// one held back so far are the body's. Nothing once decided.
    fn no_bom(&mut self) {
        if self.bom < BOM.len() {
            let held = &BOM[..self.bom];
            self.bom = BOM.len();
            self.feed(held);
        }
    }

    /// Bytes of the body for the scanner (and the prompt's count).
    fn feed(&mut self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        self.scanner.push(bytes);
        if self.plan.prompt {
            self.text.push(bytes);
        }
    }

    /// The body has ended. Past the limit, only the scanned prefix is
    /// the scanner's: its document did not end there, so it is left as a
    /// prefix (fields met in it count), not judged a document cut short.
    pub fn finish(&mut self) {
        self.ended = true;
        // A body that is a part of a byte order mark: its bytes.
        self.no_bom();
        if !self.truncated() {
            self.scanner.finish();
        }
    }

    /// Whether the body went on past the limit (bytes pushed and not
    /// scanned).
    fn truncated(&self) -> bool {
        self.seen > self.scanned as u64
    }

    /// Whether reading on can change the facts: the body has not ended,
    /// the limit is not reached, and a pointer is still open (a value met
    /// once may yet come again) or the prompt is being sized.
    #[must_use]
    pub fn wants_more(&self) -> bool {
        !self.ended && self.scanned < self.limit && (self.plan.prompt || !self.scanner.settled())
    }

    /// What was read.
    #[must_use]
    pub fn facts(&self) -> BodyFacts {
        // A body that is not JSON (malformed, or ended before its
        // document did) names nothing.
        let broken = self.scanner.malformed()
            || (self.ended && !self.truncated() && !self.scanner.complete());
        let found = (0..self.plan.texts.len())
            .map(|i| {
                if broken {
                    Found::Absent
                } else {
                    self.scanner.found(i).clone()
                }
            })
            .collect();
        BodyFacts {
            plan: Arc::clone(&self.plan),
            found,
            scanned: self.scanned as u64,
            length: if self.ended {
                Some(self.seen)
            } else {
                self.content_length
            },
            text: self.text,
        }
    }
}

/// What a request body said, for its keys and estimates
/// ([`crate::decide::RuleKeys::keys_with_body`]).
#[derive(Debug, Clone)]
pub struct BodyFacts {
    plan: Arc<BodyPlan>,
    found: Vec<Found>,
    scanned: u64,
    length: Option<u64>,
    text: TextCount,
}

impl BodyFacts {
    /// What was found at `pointer` (canonical text, as
    /// [`BodyPlan::pointers`] holds it); [`Found::Absent`] for a pointer
    /// not looked for.
    #[must_use]
    pub fn found(&self, pointer: &str) -> &Found {
        self.plan
            .texts
            .iter()
            .position(|t| t == pointer)
            .and_then(|i| self.found.get(i))
            .unwrap_or(&Found::Absent)
    }

    /// The key text at `pointer`: a string's text, a number's or bool's
    /// JSON text; `None` when missing (see the module docs).
    #[must_use]
    pub fn key_text(&self, pointer: &str) -> Option<String> {
        self.found(pointer).key_text()
    }

    /// Bytes of the body scanned (at most the limit).
    #[must_use]
    pub fn scanned(&self) -> u64 {
        self.scanned
    }

    /// The body's whole length when known: read to its end within the
    /// limit, else its `Content-Length`.
    #[must_use]
    pub fn length(&self) -> Option<u64> {
        self.length
    }

    /// The characters of the scanned prefix (counted only when the plan
    /// sizes the prompt).
    #[must_use]
    pub fn text(&self) -> TextCount {
        self.text
    }
}

#[cfg(test)]
mod tests;
