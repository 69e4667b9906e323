//! The memory store's records beside its keys: reservations
//! (`reserve.rs`) and the lease index (`inflight.rs`), kept apart from the
//! code that uses them so the shards' `Core` can hold them.

use std::collections::HashMap;

use parking_lot::Mutex;

use super::fingerprint::Fp;
use crate::rule::Rule;
use crate::time::Micros;

/// The records of open and recently closed reservations.
#[derive(Debug, Default)]
pub(super) struct Reservations {
    pub(super) records: Mutex<HashMap<[u8; 16], Record>>,
}

/// One reservation.
#[derive(Debug)]
pub(super) struct Record {
    /// The ticket's pairs as it names them (`Core::named`, in `reserve.rs`): a settle
    /// must name the same, so an id rewritten to another rule finds
    /// nothing.
    pub(super) named: Fp,
    /// Each pair's key, estimate and the rule that admitted it (a per-key
    /// override's, a per-call limit's): its settle is counted under that
    /// rule, whatever the key's rule is by then. In the ticket's order.
    pub(super) pairs: Vec<(Fp, u64, Rule)>,
    /// When it was made: the check it is, and the window it counted in.
    pub(super) made: Micros,
    /// The end of its ttl.
    pub(super) due: Micros,
    /// When it is forgotten.
    pub(super) forget: Micros,
    /// Settled or cancelled.
    pub(super) closed: bool,
}

impl Reservations {
    pub(super) fn len(&self) -> usize {
        self.records.lock().len()
    }
}

/// The keys a lease holds slots of, when it ends, and its ticket's pairs
/// as it names them (`Core::named`, in `reserve.rs`).
pub(super) type Held = (Vec<Fp>, Micros, Fp);

/// Lease id → what it holds.
#[derive(Debug, Default)]
pub(super) struct LeaseIndex {
    pub(super) leases: Mutex<HashMap<[u8; 16], Held>>,
}

/// Drops the entries past their end (`end`: a record's memory, a lease's
/// end); if fewer than an eighth of them go, also the ones that end
/// soonest, down to seven eighths: the records and the lease index stay
/// within the store's capacity, live or not.
pub(super) fn make_room<V>(
    entries: &mut HashMap<[u8; 16], V>,
    t: Micros,
    end: impl Fn(&V) -> Micros,
) {
    let before = entries.len();
    entries.retain(|_, v| end(v) > t);
    let low = before - before / 8;
    if entries.len() > low {
        let mut by_end: Vec<([u8; 16], Micros)> =
            entries.iter().map(|(k, v)| (*k, end(v))).collect();
        by_end.sort_unstable_by_key(|e| e.1);
        for (k, _) in by_end.into_iter().take(entries.len() - low) {
            entries.remove(&k);
        }
    }
}
