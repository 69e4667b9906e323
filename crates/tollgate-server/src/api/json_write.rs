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

/// The answer's JSON body (with its trailing newline); `debts`, one per
/// pair (each charge's `debt`), for a charge's or settle's answer; `tail`,
/// fields a usage endpoint adds.
#[inline]
pub(super) fn answer_body(
    req: &CheckRequest<'_>,
    multi: &MultiDecision,
    degraded: bool,
    debts: Option<&[Charged]>,
    tail: &[Tail<'_>],
) -> Vec<u8> {
    let mut out = Vec::with_capacity(if req.multi {
        160 * (1 + req.pairs.len())
    } else {
        160
    });
    let deciding = multi.decision();
    let debt = |i: usize| debts.and_then(|d| d.get(i)).map(|c| c.debt);
    push_decision(
        &mut out,
        multi.allowed,
        &req.pairs[multi.deciding].rule,
        deciding,
        debt(multi.deciding),
    );
    if req.multi {
        out.extend_from_slice(b",\"checks\":[");
        for (i, (pair, d)) in req.pairs.iter().zip(&multi.decisions).enumerate() {
            if i > 0 {
                out.push(b',');
            }
            push_decision(&mut out, d.allowed, &pair.rule, d, debt(i));
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
