//! Which circuit breakers a store call goes through (docs/failure-modes.md):
//! the store's, or on a store of parts (a Redis Cluster) those of the
//! masters its keys live on. What a failure or a success does to them is
//! `guard.rs`'s.

use super::Inner;
use super::breaker::Gate;
use crate::store::{DomainKey, KeyCheck, Store};
use crate::ticket::Ticket;

impl<S: Store> Inner<S> {
    /// The breakers a call over `pairs` goes through: on a store of parts
    /// (a Redis Cluster), those of the parts their keys live on.
    pub(super) fn gate(&self, pairs: &[KeyCheck<'_>]) -> Gate<'_> {
        let store = self.limiter.store();
        self.guard.breakers.gate(
            pairs
                .iter()
                .map(|c| store.failure_domain(c.rule.name(), DomainKey::Caller(c.key))),
        )
    }

    /// The breakers a call over a ticket's pairs goes through.
    pub(super) fn ticket_gate(&self, ticket: &Ticket) -> Gate<'_> {
        let store = self.limiter.store();
        self.guard.breakers.gate(
            ticket
                .pairs
                .iter()
                .map(|p| store.failure_domain(&p.rule, DomainKey::Named(&p.key))),
        )
    }
}
