//! Reservation and lease ids (docs/http-api.md, "Usage"): 128 random bits
//! from the operating system, and the (rule, key) pairs they cover, so that
//! any replica, on any store, finds what a ticket holds in one call (on
//! Redis the pairs name the hash slots their records live in).
//!
//! Written `<kind>1~<nonce>~<rule>~<key>[~<rule>~<key>...]`: the kind `r`
//! (reservation) or `l` (lease), the nonce and each key in base64url
//! without padding, the key as stores name it (its bytes when at most
//! [`MAX_RAW_KEY`] long, else `#` and its SHA-1 in hex). Rule names hold no
//! `~`, base64url neither. Knowing one ticket tells nothing of another: the
//! nonces are independent.

use std::fmt;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use crate::rule::MAX_NAME_LEN;

/// Keys longer than this are named by their SHA-1 in tickets (and in
/// Redis keys).
pub const MAX_RAW_KEY: usize = 128;
/// The longest ticket accepted: 64 pairs of the longest names.
pub const MAX_TICKET_LEN: usize = 32 * 1024;
/// The most pairs one ticket covers (a multi-rule check's).
pub const MAX_TICKET_PAIRS: usize = 64;

/// The longest a reservation may stay open (its `ttl`): a day.
pub const MAX_RESERVATION_TTL: Duration = Duration::from_secs(86_400);
/// How long a store remembers a reservation after its `ttl`: a late settle
/// within it still charges what exceeds the estimate, and a second settle
/// is still told apart from an unknown id.
pub const REMEMBERED_AFTER_TTL: Duration = Duration::from_secs(3600);

/// What a ticket is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TicketKind {
    /// A reservation: settle or cancel it.
    Reservation,
    /// A lease of a `concurrency` rule: release or renew it.
    Lease,
}

impl TicketKind {
    fn tag(self) -> &'static str {
        match self {
            TicketKind::Reservation => "r1",
            TicketKind::Lease => "l1",
        }
    }

    fn name(self) -> &'static str {
        match self {
            TicketKind::Reservation => "reservation",
            TicketKind::Lease => "lease",
        }
    }
}

/// One (rule, key) pair of a ticket.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TicketPair {
    /// The rule's name.
    pub rule: String,
    /// The key as stores name it: `=` and its bytes when at most
    /// [`MAX_RAW_KEY`] long, else `#` and its SHA-1 in hex.
    pub key: Vec<u8>,
}

impl TicketPair {
    /// The pair of `rule` and the caller's `key`.
    #[must_use]
    pub fn new(rule: &str, key: &[u8]) -> Self {
        Self {
            rule: rule.to_owned(),
            key: key_name(key),
        }
    }

    /// Whether this is the pair of `rule` and the caller's `key`.
    #[must_use]
    pub fn is(&self, rule: &str, key: &[u8]) -> bool {
        self.rule == rule && self.key == key_name(key)
    }
}

/// A key as stores name it: `=` and its bytes, or `#` and its SHA-1 in hex.
#[must_use]
pub fn key_name(key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + key.len().min(40));
    write_key_name(&mut out, key);
    out
}

/// Appends [`key_name`]'s answer to `out`.
pub fn write_key_name(out: &mut Vec<u8>, key: &[u8]) {
    if key.len() <= MAX_RAW_KEY {
        out.push(b'=');
        out.extend_from_slice(key);
    } else {
        out.push(b'#');
        out.extend_from_slice(sha1_smol::Sha1::from(key).digest().to_string().as_bytes());
    }
}

/// A reservation or lease id.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Ticket {
    /// What it is for.
    pub kind: TicketKind,
    /// 128 random bits.
    pub nonce: [u8; 16],
    /// The pairs it covers, in the order they were checked.
    pub pairs: Vec<TicketPair>,
}

/// Why a string is not a ticket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TicketError(String);

impl fmt::Display for TicketError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TicketError {}

impl Ticket {
    /// A new ticket of `kind` for `pairs`, its nonce from the operating
    /// system's random source.
    ///
    /// # Panics
    /// When the operating system gives no random bytes (no ticket could
    /// then be unguessable).
    #[must_use]
    pub fn new(kind: TicketKind, pairs: Vec<TicketPair>) -> Self {
        let mut nonce = [0u8; 16];
        #[allow(clippy::expect_used)] // no secure ids without an OS random source
        getrandom::fill(&mut nonce).expect("the operating system's random source");
        Self { kind, nonce, pairs }
    }

    /// The nonce in hex: how stores name the ticket's records.
    #[must_use]
    pub fn nonce_hex(&self) -> String {
        self.nonce.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Reads a ticket of `kind`.
    ///
    /// # Errors
    /// What is wrong with `s`, naming the kind expected.
    pub fn parse(s: &str, kind: TicketKind) -> Result<Self, TicketError> {
        let what = kind.name();
        let bad = |why: &str| TicketError(format!("not a tollgate {what} id: {why}"));
        if s.len() > MAX_TICKET_LEN {
            return Err(bad(&format!(
                "{} bytes, longer than the limit of {MAX_TICKET_LEN}",
                s.len()
            )));
        }
        let mut parts = s.split('~');
        match parts.next() {
            Some(tag) if tag == kind.tag() => {}
            Some(tag) if tag == "r1" || tag == "l1" => {
                return Err(bad(
                    "it is the id of a reservation where a lease is expected, or of a lease where a reservation is",
                ));
            }
            _ => return Err(bad("it does not start with the tag of one")),
        }
        let nonce = parts
            .next()
            .and_then(|n| URL_SAFE_NO_PAD.decode(n).ok())
            .and_then(|n| <[u8; 16]>::try_from(n).ok())
            .ok_or_else(|| bad("its random part is not 16 bytes of base64url"))?;
        let mut pairs = Vec::new();
        while let Some(rule) = parts.next() {
            if rule.is_empty()
                || rule.len() > MAX_NAME_LEN
                || !rule
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
            {
                return Err(bad("a rule name in it is not one"));
            }
            let key = parts
                .next()
                .and_then(|k| URL_SAFE_NO_PAD.decode(k).ok())
                .filter(|k| valid_key_name(k))
                .ok_or_else(|| bad(&format!("the key of rule {rule:?} in it is not one")))?;
            pairs.push(TicketPair {
                rule: rule.to_owned(),
                key,
            });
            if pairs.len() > MAX_TICKET_PAIRS {
                return Err(bad(&format!("more than {MAX_TICKET_PAIRS} pairs")));
            }
        }
        if pairs.is_empty() {
            return Err(bad("it names no rule"));
        }
        Ok(Self { kind, nonce, pairs })
    }
}

/// Whether `k` is a key as [`key_name`] writes one.
fn valid_key_name(k: &[u8]) -> bool {
    match k.split_first() {
        Some((b'=', raw)) => !raw.is_empty() && raw.len() <= MAX_RAW_KEY,
        Some((b'#', hex)) => {
            hex.len() == 40 && hex.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        }
        _ => false,
    }
}

impl fmt::Display for Ticket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.kind.tag())?;
        write!(f, "~{}", URL_SAFE_NO_PAD.encode(self.nonce))?;
        for p in &self.pairs {
            write!(f, "~{}~{}", p.rule, URL_SAFE_NO_PAD.encode(&p.key))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tickets_round_trip_and_are_unguessable() {
        let long = vec![b'x'; 500];
        let pairs = vec![
            TicketPair::new("tpm.v2", b"team-a"),
            TicketPair::new("rpm", &long),
        ];
        let a = Ticket::new(TicketKind::Reservation, pairs.clone());
        let b = Ticket::new(TicketKind::Reservation, pairs);
        assert_ne!(a.nonce, b.nonce);
        let text = a.to_string();
        assert!(text.starts_with("r1~"), "{text}");
        assert_eq!(Ticket::parse(&text, TicketKind::Reservation), Ok(a.clone()));
        assert!(a.pairs[0].is("tpm.v2", b"team-a"));
        assert!(a.pairs[1].is("rpm", &long));
        assert!(!a.pairs[1].is("rpm", b"x"));
        assert!(Ticket::parse(&text, TicketKind::Lease).is_err());
    }

    #[test]
    fn garbage_is_refused_with_the_reason() {
        let good = Ticket::new(TicketKind::Lease, vec![TicketPair::new("r", b"k")]).to_string();
        for (bad, why) in [
            ("", "tag"),
            ("l1", "random part"),
            ("l1~abc~r~PWs", "random part"),
            (&good[..good.len() - 1], "key"),
            (&format!("{good}~r"), "key"),
            (&good.replace("~r~", "~r!~"), "rule name"),
            (
                &format!("l1~{}", good.split('~').nth(1).unwrap_or("")),
                "names no rule",
            ),
            (&"l1~".repeat(20_000), "longer than"),
        ] {
            let e = Ticket::parse(bad, TicketKind::Lease).expect_err(bad);
            assert!(e.to_string().contains(why), "{bad:.60}: {e}");
        }
    }
}
