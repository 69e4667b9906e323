//! The memory store's records beside its keys: reservations
//! (`reserve.rs`) and the lease index (`inflight.rs`), kept apart from the
//! code that uses them so the shards' `Core` can hold them.

use std::collections::HashMap;

use parking_lot::Mutex;

use super::check::Core;
use super::fingerprint::Fp;
use crate::ticket::Ticket;
use crate::time::Micros;

/// The records of open and recently closed reservations.
#[derive(Debug, Default)]
pub(super) struct Reservations {
    pub(super) records: Mutex<HashMap<[u8; 16], Record>>,
}

/// One reservation.
#[derive(Debug)]
pub(super) struct Record {
    /// The ticket's pairs as it names them ([`Core::named`]): a settle
    /// must name the same, so an id rewritten to another rule finds
    /// nothing.
    pub(super) named: Vec<Fp>,
    /// Each pair's key and estimate, in the ticket's order.
    pub(super) pairs: Vec<(Fp, u64)>,
    /// When it was made: the check it is, and the window it counted in.
    pub(super) made: Micros,
    /// The end of its ttl.
    pub(super) due: Micros,
    /// When it is forgotten.
    pub(super) forget: Micros,
    /// Settled or cancelled.
    pub(super) closed: bool,
}

impl Core {
    /// A ticket's pairs as its text names them (rule, and key name), each
    /// fingerprinted: the nonce alone does not say which rules a record
    /// belongs to, and the rules a ticket names decide how its keys are
    /// read (docs/http-api.md, "Usage and in-flight limits").
    pub(super) fn named(&self, ticket: &Ticket) -> Vec<Fp> {
        ticket
            .pairs
            .iter()
            .map(|p| self.sip.fingerprint(p.rule.as_bytes(), &p.key))
            .collect()
    }
}

impl Reservations {
    pub(super) fn len(&self) -> usize {
        self.records.lock().len()
    }
}

/// The keys a lease holds slots of, when it ends, and its ticket's pairs
/// as it names them ([`Core::named`]).
pub(super) type Held = (Vec<Fp>, Micros, Vec<Fp>);

/// Lease id → what it holds.
#[derive(Debug, Default)]
pub(super) struct LeaseIndex {
    pub(super) leases: Mutex<HashMap<[u8; 16], Held>>,
}
