//! Writing a check's answer: the JSON body, written with `itoa` into one
//! buffer, byte for byte what the `serde_json` map answer it replaced gave.

use tollgate::{Charged, Decision, MultiDecision};

use super::json_read::CheckRequest;

/// Appends `s` as a JSON string, escaped as `serde_json` escapes it.
fn push_json_str(out: &mut Vec<u8>, s: &str) {
    if s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    } else {
        // Rule names never need this ([A-Za-z0-9_.-]+), but stay exact.
        let _ = serde_json::to_writer(&mut *out, s);
    }
}

fn push_u64(out: &mut Vec<u8>, n: u64) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// Appends one decision object, fields in the order of docs/http-api.md
/// (`POST /v1/check`, the answer), and a charge's `debt` when given;
/// `allowed` is given apart (the top level shows the combined answer).
fn push_decision(out: &mut Vec<u8>, allowed: bool, rule: &str, d: &Decision, debt: Option<u64>) {
    out.extend_from_slice(if allowed {
        b"{\"allowed\":true,\"rule\":"
    } else {
        b"{\"allowed\":false,\"rule\":"
    });
    push_json_str(out, rule);
    out.extend_from_slice(b",\"limit\":");
    push_u64(out, d.limit);
    out.extend_from_slice(b",\"remaining\":");
    push_u64(out, d.remaining);
    out.extend_from_slice(b",\"reset_after_ms\":");
    push_u64(out, d.reset_after_ms());
    out.extend_from_slice(b",\"retry_after_ms\":");
    match d.retry_after_ms() {
        Some(ms) if !d.allowed => push_u64(out, ms),
        _ => out.extend_from_slice(b"null"),
    }
    if let Some(debt) = debt {
        out.extend_from_slice(b",\"debt\":");
        push_u64(out, debt);
    }
}

/// The decisions an answer reports, one per pair: a check's verdict (a
/// reservation's, an acquire's, a release's), or the answers of a charge or
/// a settle, each with its debt. A charge's are read where they are, not
/// copied into a [`MultiDecision`] first (an allocation a check does not
/// make).
#[derive(Debug, Clone, Copy)]
pub(super) enum Decided<'a> {
    /// A check's decisions.
    Checked(&'a MultiDecision),
    /// A charge's (or a settle's) answers.
    Charged(&'a [Charged]),
}

impl<'a> Decided<'a> {
    /// Every pair admitted.
    pub(super) fn allowed(self) -> bool {
        match self {
            Decided::Checked(m) => m.allowed,
            Decided::Charged(c) => c.iter().all(|c| c.decision.allowed),
        }
    }

    /// The deciding pair's index, as [`MultiDecision::deciding`].
    pub(super) fn deciding(self) -> usize {
        match self {
            Decided::Checked(m) => m.deciding,
            Decided::Charged(c) => MultiDecision::deciding_index(c.iter().map(|c| &c.decision)),
        }
    }

    /// Pair `i`'s decision.
    pub(super) fn get(self, i: usize) -> Option<&'a Decision> {
        match self {
            Decided::Checked(m) => m.decisions.get(i),
            Decided::Charged(c) => c.get(i).map(|c| &c.decision),
        }
    }

    /// The only pair's decision, when there is exactly one.
    pub(super) fn only(self) -> Option<&'a Decision> {
        match self {
            Decided::Checked(MultiDecision { decisions, .. }) if decisions.len() == 1 => {
                decisions.first()
            }
            Decided::Charged([one]) => Some(&one.decision),
            _ => None,
        }
    }

    /// Every pair's decision, in order.
    pub(super) fn iter(self) -> impl Iterator<Item = &'a Decision> {
        let (checked, charged): (&[Decision], &[Charged]) = match self {
            Decided::Checked(m) => (&m.decisions, &[]),
            Decided::Charged(c) => (&[], c),
        };
        checked.iter().chain(charged.iter().map(|c| &c.decision))
    }

    /// Pair `i`'s debt: a charge's, none for a check.
    fn debt(self, i: usize) -> Option<u64> {
        match self {
            Decided::Checked(_) => None,
            Decided::Charged(c) => c.get(i).map(|c| c.debt),
        }
    }
}

/// A top-level field a usage endpoint adds to the answer.
#[derive(Debug, Clone, Copy)]
pub(super) enum Tail<'a> {
    /// A string (a reservation or lease id).
    Str(&'static str, &'a str),
    /// `null` (no id: denied, or the failure policy answered).
    Null(&'static str),
    /// A boolean (`late`).
    Bool(&'static str, bool),
}

/// The answer's JSON body (with its trailing newline): each pair's
/// decision, with its `debt` for a charge's or settle's answer; `tail`,
/// fields a usage endpoint adds.
#[inline]
pub(super) fn answer_body(
    req: &CheckRequest<'_>,
    decided: Decided<'_>,
    degraded: bool,
    tail: &[Tail<'_>],
) -> Vec<u8> {
    let mut out = Vec::with_capacity(if req.multi {
        160 * (1 + req.pairs.len())
    } else {
        160
    });
    let at = decided.deciding();
    if let (Some(pair), Some(deciding)) = (req.pairs.get(at), decided.get(at)) {
        push_decision(
            &mut out,
            decided.allowed(),
            &pair.rule,
            deciding,
            decided.debt(at),
        );
    }
    if req.multi {
        out.extend_from_slice(b",\"checks\":[");
        for (i, (pair, d)) in req.pairs.iter().zip(decided.iter()).enumerate() {
            if i > 0 {
                out.push(b',');
            }
            push_decision(&mut out, d.allowed, &pair.rule, d, decided.debt(i));
            out.push(b'}');
        }
        out.push(b']');
    }
    if degraded {
        out.extend_from_slice(b",\"degraded\":true");
    }
    for field in tail {
        let (name, value): (&str, &[u8]) = match field {
            Tail::Str(name, _) | Tail::Null(name) => (name, b"null"),
            Tail::Bool(name, true) => (name, b"true"),
            Tail::Bool(name, false) => (name, b"false"),
        };
        out.push(b',');
        push_json_str(&mut out, name);
        out.push(b':');
        match field {
            Tail::Str(_, s) => push_json_str(&mut out, s),
            _ => out.extend_from_slice(value),
        }
    }
    out.extend_from_slice(b"}\n");
    out
}
