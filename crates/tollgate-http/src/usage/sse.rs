//! A `text/event-stream` parser (WHATWG HTML, "Parsing an event stream")
//! that hands each event's data on in pieces as the bytes pass, so it
//! keeps no event in memory: a few bytes of field name and three flags.
//!
//! Lines end with CRLF, LF or CR, split anywhere across pushes; a leading
//! byte-order mark is skipped; a line starting with `:` is a comment; a
//! field without `:` has an empty value; one space after the colon is
//! dropped; each `data` line adds its value (lines joined by LF); a blank
//! line dispatches the event (none when it had no `data`); other fields
//! (`event`, `id`, `retry`) are ignored: the data says what an event is.
//! An event whose data passes [`MAX_EVENT`] bytes is skipped (told once,
//! [`Piece::Skipped`]); an event still open when the stream ends is
//! discarded, as the spec says ([`Piece::Cut`]).

/// The most data bytes one event may carry before it is skipped: 1 MiB,
/// far above any usage event (a few hundred bytes) and any chunk a model
/// server sends.
pub const MAX_EVENT: usize = 1 << 20;

/// What the parser hands on, in stream order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Piece<'a> {
    /// More of the current event's data (its first piece opens the event).
    Data(&'a [u8]),
    /// The event is complete: its data is everything since the last
    /// `Dispatch`, `Skipped` or `Cut`.
    Dispatch,
    /// The event passed [`MAX_EVENT`]: what came of it is to be
    /// forgotten; the rest of it is not handed on.
    Skipped,
    /// The stream ended inside an event, which is dropped.
    Cut,
}

/// The longest field name kept: `data` is all that matters.
const NAME: usize = 4;
const BOM: &[u8] = b"\xEF\xBB\xBF";

/// Where in a line the parser is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Line {
    /// Reading the field name: its first bytes, its length so far.
    Name { name: [u8; NAME], len: usize },
    /// Past the colon; `data` when the field is `data`, `fresh` until the
    /// one optional space after the colon is past.
    Value { data: bool, fresh: bool },
}

const START: Line = Line::Name {
    name: [0; NAME],
    len: 0,
};

/// The parser's state: O(1), whatever the stream.
#[derive(Debug, Clone)]
pub struct SseParser {
    line: Line,
    /// The last byte was a CR: an LF right after it ends nothing more.
    after_cr: bool,
    /// Bytes of the byte-order mark matched at the stream's start; `None`
    /// once past it.
    bom: Option<usize>,
    /// `data` lines in the current event.
    data_lines: usize,
    /// Data bytes of the current event so far.
    size: usize,
    /// The current event passed [`MAX_EVENT`].
    skipped: bool,
}

impl Default for SseParser {
    fn default() -> Self {
        Self::new()
    }
}

impl SseParser {
    /// A parser at the start of a stream.
    #[must_use]
    pub fn new() -> Self {
        Self {
            line: START,
            after_cr: false,
            bom: Some(0),
            data_lines: 0,
            size: 0,
            skipped: false,
        }
    }

    /// Parses the next `bytes` of the stream, handing each piece to `out`.
    pub fn push(&mut self, mut bytes: &[u8], out: &mut impl FnMut(Piece<'_>)) {
        if let Some(mut m) = self.bom {
            // The mark may itself be split across pushes.
            while m < BOM.len() && !bytes.is_empty() && bytes[0] == BOM[m] {
                bytes = &bytes[1..];
                m += 1;
            }
            if m < BOM.len() && bytes.is_empty() {
                self.bom = Some(m);
                return;
            }
            self.bom = None;
            if m < BOM.len() {
                // Not the mark after all: its first bytes are the stream's.
                self.feed(&BOM[..m], out);
            }
        }
        self.feed(bytes, out);
    }

    fn feed(&mut self, bytes: &[u8], out: &mut impl FnMut(Piece<'_>)) {
        let mut i = 0;
        while i < bytes.len() {
            let b = bytes[i];
            if self.after_cr {
                self.after_cr = false;
                if b == b'\n' {
                    i += 1;
                    continue;
                }
            }
            if b == b'\r' || b == b'\n' {
                self.after_cr = b == b'\r';
                self.end_of_line(out);
                i += 1;
                continue;
            }
            match &mut self.line {
                Line::Name { name, len } => {
                    if b == b':' {
                        let data = *len == NAME && name == b"data";
                        self.line = Line::Value { data, fresh: true };
                        if data {
                            self.data_line(out);
                        }
                    } else {
                        if *len < NAME {
                            name[*len] = b;
                        }
                        // Longer names are never `data`: only the count grows.
                        *len = len.saturating_add(1);
                    }
                    i += 1;
                }
                Line::Value { data, fresh } => {
                    if *fresh {
                        *fresh = false;
                        if b == b' ' {
                            i += 1;
                            continue;
                        }
                    }
                    let end = bytes[i..]
                        .iter()
                        .position(|&c| c == b'\r' || c == b'\n')
                        .map_or(bytes.len(), |n| i + n);
                    if *data {
                        self.data(&bytes[i..end], out);
                    }
                    i = end;
                }
            }
        }
    }

    /// The stream ended: an event still open is dropped.
    pub fn finish(&mut self, out: &mut impl FnMut(Piece<'_>)) {
        if let Line::Name { name, len } = self.line
            && len == NAME
            && &name == b"data"
        {
            // A last `data` line without a colon, and without its end of
            // line: it still belongs to the open event.
            self.data_lines += 1;
        }
        if self.data_lines > 0 && !self.skipped {
            out(Piece::Cut);
        }
        self.reset_event();
        self.line = START;
    }

    fn end_of_line(&mut self, out: &mut impl FnMut(Piece<'_>)) {
        match self.line {
            Line::Name { len: 0, .. } => {
                // A blank line: the event is complete.
                if self.data_lines > 0 && !self.skipped {
                    out(Piece::Dispatch);
                }
                self.reset_event();
            }
            // A field without a colon: its value is empty.
            Line::Name { name, len } if len == NAME && &name == b"data" => self.data_line(out),
            _ => {}
        }
        self.line = START;
    }

    /// A `data` line begins: lines after the first are joined by an LF.
    fn data_line(&mut self, out: &mut impl FnMut(Piece<'_>)) {
        if self.data_lines > 0 {
            self.data(b"\n", out);
        }
        self.data_lines += 1;
    }

    fn data(&mut self, piece: &[u8], out: &mut impl FnMut(Piece<'_>)) {
        if self.skipped || piece.is_empty() {
            return;
        }
        self.size = self.size.saturating_add(piece.len());
        if self.size > MAX_EVENT {
            self.skipped = true;
            out(Piece::Skipped);
            return;
        }
        out(Piece::Data(piece));
    }

    fn reset_event(&mut self) {
        self.data_lines = 0;
        self.size = 0;
        self.skipped = false;
    }
}

#[cfg(test)]
#[path = "sse_tests.rs"]
mod tests;
