//! [`BodyMeter`]: reads the usage a response body reports as its bytes
//! pass — one JSON document, or the JSON of each server-sent event —
//! in bounded memory, never holding a byte back or changing one
//! (docs/proxy.md, "Usage from the body").
//!
//! The reader is chosen by the response's `Content-Type`:
//! `application/json` (or any `+json`) is one document for one
//! [`Scanner`]; `text/event-stream` goes through the [`SseParser`], each
//! event's data into a fresh [`Scanner`] (`[DONE]` passed over). Any
//! other type holds no usage; an encoded body (`Content-Encoding` other
//! than `identity`) cannot be read and says so ([`Reading::Garbage`]).
//! Every scanner looks for every pointer of every body source of the
//! request, so an input, an output and a total rule settle from one pass.

use http::HeaderMap;
use http::header::CONTENT_TYPE;

use super::hold::Ended;
use super::shapes::{Finality, Val, Wanted, val};
use super::sse::{Piece, SseParser};
use crate::cost::{Reading, UsageSource};
use crate::json::{Found, Scanner};
use crate::request_body::is_encoded;

/// How a body is read.
#[derive(Debug)]
enum Reader {
    /// One JSON document.
    Json(Scanner),
    /// Server-sent events, each event's data a JSON document.
    Sse(Box<Events>),
    /// A type that holds no usage.
    Other,
    /// An encoded body, or data the meter could not see whole.
    Unreadable,
}

/// The state of an event stream.
#[derive(Debug)]
struct Events {
    parser: SseParser,
    /// The events' scanner, restarted for each event.
    scanner: Scanner,
    /// An event is open (its data has begun).
    open: bool,
    /// The open event's first bytes and length, to pass over `[DONE]`.
    head: [u8; 6],
    len: usize,
    /// Each field's value as the last event holding it left it.
    fields: Vec<Val>,
    /// Events that could not be read (malformed JSON, over
    /// [`MAX_EVENT`](super::sse::MAX_EVENT)): usage then missing counts
    /// as garbage, not as missing.
    unread: u64,
    /// The stream said its usage is final (Anthropic's `message_stop`).
    closed: bool,
    /// The stream ended inside an event.
    cut: bool,
}

/// Reads the usage of a response body for a request's body sources.
#[derive(Debug)]
pub struct BodyMeter {
    wanted: Wanted,
    reader: Reader,
    /// Some body came: an empty one (a `HEAD` answer, a 204) holds no
    /// usage rather than malformed JSON.
    fed: bool,
}

impl BodyMeter {
    /// A meter for `sources` (a hold's, in its order) over a response
    /// with `head`; `None` when no source reads the body.
    #[must_use]
    pub fn new(sources: &[UsageSource], head: &HeaderMap) -> Option<Self> {
        let wanted = Wanted::new(sources)?;
        let reader = if is_encoded(head) {
            Reader::Unreadable
        } else {
            match media_type(head).as_deref() {
                Some("application/json") => Reader::Json(Scanner::new(wanted.pointers())),
                Some(t) if t.starts_with("application/") && t.ends_with("+json") => {
                    Reader::Json(Scanner::new(wanted.pointers()))
                }
                Some("text/event-stream") => Reader::Sse(Box::new(Events {
                    parser: SseParser::new(),
                    scanner: Scanner::new(wanted.pointers()),
                    open: false,
                    head: [0; 6],
                    len: 0,
                    fields: vec![Val::Absent; wanted.field_count()],
                    unread: 0,
                    closed: false,
                    cut: false,
                })),
                _ => Reader::Other,
            }
        };
        Some(Self {
            wanted,
            reader,
            fed: false,
        })
    }

    /// The next bytes of the body, as they pass.
    pub fn push(&mut self, bytes: &[u8]) {
        self.fed |= !bytes.is_empty();
        match &mut self.reader {
            Reader::Json(scanner) => scanner.push(bytes),
            Reader::Sse(events) => {
                let wanted = &self.wanted;
                let Events { parser, .. } = &mut **events;
                let mut parser = std::mem::take(parser);
                parser.push(bytes, &mut |piece| events.piece(wanted, piece));
                events.parser = parser;
            }
            Reader::Other | Reader::Unreadable => {}
        }
    }

    /// Some of the body could not be seen (a data frame the meter could
    /// not read whole): what it reads is no longer to be trusted.
    pub fn blind(&mut self) {
        self.fed = true;
        self.reader = Reader::Unreadable;
    }

    /// The body ended — at its end (`complete`), or dropped or failed
    /// before it: one reading per source, in the order of
    /// [`BodyMeter::new`]'s ([`Reading::Absent`] for a header source),
    /// and whether the usage was cut short (not `complete`, or an event
    /// stream that stopped inside an event, however its HTTP framing
    /// ended).
    pub fn end(&mut self, complete: bool) -> (Vec<Reading>, bool) {
        let how = if complete {
            Ended::Complete
        } else {
            Ended::Dropped
        };
        let (readings, how) = self.finish(how);
        (readings, how != Ended::Complete)
    }

    pub(crate) fn finish(&mut self, how: Ended) -> (Vec<Reading>, Ended) {
        let sources = self.wanted.sources();
        let mut how = how;
        let complete = how == Ended::Complete;
        let readings = match &mut self.reader {
            _ if !self.fed => vec![Reading::Absent; sources],
            Reader::Other => vec![Reading::Absent; sources],
            Reader::Unreadable => self.each(sources, |_, _| Reading::Garbage),
            Reader::Json(scanner) => {
                if complete {
                    scanner.finish();
                }
                let bad = scanner.malformed() || (complete && !scanner.complete());
                let fields = self.wanted.values(|p| val(scanner.found(p)));
                // One document: a value seen is the whole of it, whenever
                // the body stops.
                self.each(sources, |w, i| match w.usage(i, &fields) {
                    _ if bad => Reading::Garbage,
                    Some((v, _)) => reading(v, true),
                    None => Reading::Absent,
                })
            }
            Reader::Sse(events) => {
                if complete {
                    let wanted = &self.wanted;
                    let mut parser = std::mem::take(&mut events.parser);
                    parser.finish(&mut |piece| events.piece(wanted, piece));
                }
                if events.cut {
                    how = Ended::Dropped;
                }
                let (fields, unread, closed) =
                    (events.fields.clone(), events.unread, events.closed);
                let ended = |finality| match finality {
                    Finality::OnSight => true,
                    Finality::Open => how == Ended::Complete || closed,
                    Finality::UntilStop => closed,
                };
                self.each(sources, |w, i| match w.usage(i, &fields) {
                    Some((Val::Absent, _)) if unread > 0 => Reading::Garbage,
                    Some((v, finality)) => reading(v, ended(finality)),
                    None => Reading::Absent,
                })
            }
        };
        (readings, how)
    }

    /// `f`'s reading of each body source; a header source's is
    /// [`Reading::Absent`] here (its own comes from the head or trailers).
    fn each(&self, sources: usize, f: impl Fn(&Wanted, usize) -> Reading) -> Vec<Reading> {
        (0..sources)
            .map(|i| {
                if self.wanted.reads(i) {
                    f(&self.wanted, i)
                } else {
                    Reading::Absent
                }
            })
            .collect()
    }
}

/// A value as a reading: final, or the part seen of a stream cut short.
fn reading(v: Val, last: bool) -> Reading {
    match v {
        Val::Absent => Reading::Absent,
        Val::Bad => Reading::Garbage,
        Val::Num(n) if last => Reading::Found(n),
        Val::Num(n) => Reading::Partial(n),
    }
}

impl Events {
    fn piece(&mut self, wanted: &Wanted, piece: Piece<'_>) {
        match piece {
            Piece::Data(bytes) => {
                if !self.open {
                    self.open = true;
                    self.scanner.restart();
                }
                for (k, &b) in bytes.iter().enumerate() {
                    if self.len + k >= self.head.len() {
                        break;
                    }
                    self.head[self.len + k] = b;
                }
                self.len = self.len.saturating_add(bytes.len());
                self.scanner.push(bytes);
            }
            Piece::Dispatch => {
                let done = self.len == 6 && &self.head == b"[DONE]";
                if std::mem::take(&mut self.open) && !done {
                    let scanner = &mut self.scanner;
                    scanner.finish();
                    if scanner.malformed() || !scanner.complete() {
                        self.unread += 1;
                    } else {
                        let values = wanted.values(|p| val(scanner.found(p)));
                        // An event with any of a shape's fields set
                        // together replaces them all (a `null` total
                        // beside its parts is the parts' sum, not an
                        // earlier event's total).
                        let whole = values
                            .iter()
                            .enumerate()
                            .any(|(f, v)| wanted.together(f) && *v != Val::Absent);
                        for (f, (field, v)) in self.fields.iter_mut().zip(values).enumerate() {
                            if v != Val::Absent || (whole && wanted.together(f)) {
                                *field = v;
                            }
                        }
                        self.closed |= wanted.closes(|p| match scanner.found(p) {
                            Found::One(s) => Some(s.clone()),
                            _ => None,
                        });
                    }
                }
                self.len = 0;
            }
            Piece::Skipped => {
                self.open = false;
                self.len = 0;
                self.unread += 1;
            }
            Piece::Cut => {
                self.open = false;
                self.len = 0;
                self.cut = true;
            }
        }
    }
}

/// The response's media type, lowercase, without parameters.
fn media_type(head: &HeaderMap) -> Option<String> {
    let value = head.get(CONTENT_TYPE)?.to_str().ok()?;
    let essence = value.split(';').next()?.trim();
    Some(essence.to_ascii_lowercase())
}

#[cfg(test)]
#[path = "meter_tests.rs"]
mod tests;
