//! Which circuit breakers a store call goes through (docs/failure-modes.md):
//! the store's, or on a store of parts (a Redis Cluster) those of the
//! masters its keys live on; and what a failure or a success does to them.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::breaker::{Breaker, Gate};
use super::{Inner, metric};
use crate::error::StoreError;
use crate::store::{DomainKey, KeyCheck, Store};
use crate::ticket::Ticket;

impl<S: Store> Inner<S> {
    /// The breakers a call over `pairs` goes through: on a store of parts
    /// (a Redis Cluster), those of the parts their keys live on.
    pub(super) fn gate(&self, pairs: &[KeyCheck<'_>]) -> Gate<'_> {
        let store = self.limiter.store();
        self.breakers.gate(
            pairs
                .iter()
                .map(|c| store.failure_domain(c.rule.name(), DomainKey::Caller(c.key))),
        )
    }

    /// The breakers a call over a ticket's pairs goes through.
    pub(super) fn ticket_gate(&self, ticket: &Ticket) -> Gate<'_> {
        let store = self.limiter.store();
        self.breakers.gate(
            ticket
                .pairs
                .iter()
                .map(|p| store.failure_domain(&p.rule, DomainKey::Named(&p.key))),
        )
    }

    /// Counts a failure on breaker `b` (of store node `node`, when one),
    /// and reports its opening.
    pub(super) fn failed(&self, b: &Breaker, node: Option<&str>, e: &StoreError) {
        if !b.failure() {
            return;
        }
        match node {
            None => {
                ::metrics::counter!(metric::BREAKER_OPENED).increment(1);
                ::metrics::gauge!(metric::BREAKER_OPEN).set(1.0);
            }
            Some(n) => {
                ::metrics::counter!(metric::BREAKER_OPENED, "node" => n.to_owned()).increment(1);
                ::metrics::gauge!(metric::BREAKER_OPEN, "node" => n.to_owned()).set(1.0);
            }
        }
        let open_for = b.open_for;
        // Since the last success: the threshold when it first opens, more
        // when a probe fails and it opens again.
        let failed = b.failures.load(Ordering::Acquire);
        let which = node.map_or_else(String::new, |n| format!(" of store node {n}"));
        self.breaker_log.report(|suppressed| {
            let more = if suppressed > 0 {
                format!(" (opened {suppressed} more times since the last report)")
            } else {
                String::new()
            };
            tracing::warn!(
                "circuit breaker{which} open: the store failed {failed} times in a row \
                 ({e}); skipping it for {open_for:?}{more}"
            );
        });
    }

    /// A call through the breakers of `parts` succeeded: each closes.
    pub(super) fn parts_answered(&self, parts: &[(Arc<str>, Arc<Breaker>)]) {
        for (node, b) in parts {
            if b.success() {
                ::metrics::gauge!(metric::BREAKER_OPEN, "node" => node.to_string()).set(0.0);
                tracing::info!("store node {node} answering again; its circuit breaker closed");
            }
        }
    }
}
