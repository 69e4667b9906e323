//! The memory store's records beside its keys: reservations
//! (`reserve.rs`) and the lease index (`inflight.rs`), kept apart from the
//! code that uses them so the shards' `Core` can hold them.

use std::collections::HashMap;

use parking_lot::Mutex;

use super::fingerprint::Fp;
use crate::time::Micros;

/// The records of open and recently closed reservations.
#[derive(Debug, Default)]
pub(super) struct Reservations {
    pub(super) records: Mutex<HashMap<[u8; 16], Record>>,
}

/// One reservation.
#[derive(Debug)]
pub(super) struct Record {
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

impl Reservations {
    pub(super) fn len(&self) -> usize {
        self.records.lock().len()
    }
}

/// The keys a lease holds slots of, and when it ends.
pub(super) type Held = (Vec<Fp>, Micros);

/// Lease id → what it holds.
#[derive(Debug, Default)]
pub(super) struct LeaseIndex {
    pub(super) leases: Mutex<HashMap<[u8; 16], Held>>,
}
