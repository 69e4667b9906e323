//! Charges and refunds through the resilient limiter (docs/failure-modes.md,
//! "Charges"): the store's [`Store::charge_all`] / [`Store::refund_all`]
//! within the timeout and behind the breaker; when the store fails, the
//! failure policy answers as for a check, and the units that did not reach
//! the store are counted ([`metric::CHARGE_UNRECORDED`],
//! [`metric::REFUND_UNRECORDED`]), never dropped silently.

use super::{Inner, OnError, Refusal, ResilientLimiter, metric, untouched};
use crate::algorithm::Charged;
use crate::decided::Deciders;
use crate::error::StoreError;
use crate::limiter::Check;
use crate::op::Op;
use crate::store::{KeyCheck, Store};

/// What a charge answered: one [`Charged`] per pair, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChargeVerdict {
    /// Each pair's charge.
    pub charged: Vec<Charged>,
    /// `Some(policy)` when the store failed and the failure policy
    /// (`allow` or `local`) answered instead; the units were then not
    /// recorded in the store.
    pub degraded: Option<OnError>,
    /// What decided each pair, in order, as for a check
    /// ([`super::Verdict::decided_by`]).
    pub decided_by: Deciders,
}

impl<S: Store> ResilientLimiter<S> {
    /// Charges every pair unconditionally (docs/semantics.md, "Charge"),
    /// each at its own cost; on a store failure the strictest policy among
    /// the pairs' rules answers.
    ///
    /// # Errors
    /// [`Refusal::Invalid`] for a bad request (no pairs, unknown rule, key
    /// too long); [`Refusal::Unavailable`] when the store failed and the
    /// policy is `deny`.
    pub async fn charge_all(&self, checks: &[Check<'_>]) -> Result<ChargeVerdict, Refusal> {
        self.charge_all_as(checks, None).await
    }

    /// Like [`ResilientLimiter::charge_all`], with `policy` (when given)
    /// answering a store failure instead of the rules' own.
    ///
    /// # Errors
    /// As [`ResilientLimiter::charge_all`].
    pub async fn charge_all_as(
        &self,
        checks: &[Check<'_>],
        policy: Option<OnError>,
    ) -> Result<ChargeVerdict, Refusal> {
        self.usage_all_as(checks, policy, Op::Charge).await
    }

    /// Gives every pair its cost back now (docs/semantics.md, "Refund"):
    /// the units counted last first, never past empty/full; on a store
    /// failure the strictest policy among the pairs' rules answers, as for
    /// a charge, and the units not given back are counted.
    ///
    /// # Errors
    /// As [`ResilientLimiter::charge_all`].
    pub async fn refund_all(&self, checks: &[Check<'_>]) -> Result<ChargeVerdict, Refusal> {
        self.refund_all_as(checks, None).await
    }

    /// Like [`ResilientLimiter::refund_all`], with `policy` (when given)
    /// answering a store failure instead of the rules' own.
    ///
    /// # Errors
    /// As [`ResilientLimiter::charge_all`].
    pub async fn refund_all_as(
        &self,
        checks: &[Check<'_>],
        policy: Option<OnError>,
    ) -> Result<ChargeVerdict, Refusal> {
        self.usage_all_as(checks, policy, Op::Refund).await
    }

    /// A charge or (`op` [`Op::Refund`]) a refund: the store's within the
    /// timeout and behind the breaker, counted; the policy answers a
    /// failure.
    async fn usage_all_as(
        &self,
        checks: &[Check<'_>],
        policy: Option<OnError>,
        op: Op,
    ) -> Result<ChargeVerdict, Refusal> {
        let table = self.inner.live_table();
        let resolved = self
            .inner
            .limiter
            .resolve_all(checks, op, table.as_deref())
            .map_err(Refusal::Invalid)?;
        let (pairs, index) = (resolved.pairs(), resolved.index());
        self.start_heartbeat();
        let inner = &self.inner;
        let refund = op == Op::Refund;
        let store = inner.limiter.store();
        let result = if refund {
            let gate = inner.gate(pairs);
            inner
                .guarded("refund", gate, store.refund_all(pairs, None))
                .await
        } else {
            let gate = inner.gate(pairs);
            inner
                .guarded("charge", gate, store.charge_all(pairs, None))
                .await
        };
        let answer = match result {
            Ok(charged) => {
                if refund {
                    for pair in pairs {
                        ::metrics::counter!(metric::REFUND_UNITS, "rule" => pair.rule.name().to_owned())
                            .increment(pair.cost);
                    }
                } else {
                    inner.count_charges(pairs, index, &charged);
                }
                ChargeVerdict {
                    charged,
                    degraded: None,
                    decided_by: Deciders::default(),
                }
            }
            Err(e) => {
                inner
                    .charge_failed(pairs, index, &e, policy, refund)
                    .await?
            }
        };
        // What decided, as resolved above: not looked up again.
        Ok(ChargeVerdict {
            decided_by: resolved.deciders(),
            ..answer
        })
    }
}

impl<S: Store> Inner<S> {
    /// Counts the units recorded and clamped, and the debt left, per rule
    /// (`index[n]` the rule of pair `n`).
    fn count_charges(&self, pairs: &[KeyCheck<'_>], index: &[usize], charged: &[Charged]) {
        for ((pair, &i), c) in pairs.iter().zip(index).zip(charged) {
            let recorded = pair.cost - c.clamped;
            self.meters
                .charge(i, pair.rule.name(), recorded, c.clamped, c.debt);
        }
    }

    /// The policy answers a charge (a `refund`) the store failed; every
    /// unit is counted as unrecorded in the store, labelled with the policy.
    async fn charge_failed(
        &self,
        pairs: &[KeyCheck<'_>],
        index: &[usize],
        error: &StoreError,
        policy: Option<OnError>,
        refund: bool,
    ) -> Result<ChargeVerdict, Refusal> {
        let policy = self.policy_for(index, policy, error);
        let unrecorded = if refund {
            metric::REFUND_UNRECORDED
        } else {
            metric::CHARGE_UNRECORDED
        };
        for pair in pairs {
            ::metrics::counter!(
                unrecorded,
                "rule" => pair.rule.name().to_owned(),
                "policy" => policy.as_str()
            )
            .increment(pair.cost);
        }
        match policy {
            OnError::Deny => Err(Refusal::Unavailable(error.clone())),
            OnError::Local => Ok(ChargeVerdict {
                charged: self.on_local(pairs, index, |store, local| {
                    if refund {
                        store.refund_all_sync(local, None)
                    } else {
                        store.charge_all_sync(local, None)
                    }
                }),
                degraded: Some(OnError::Local),
                decided_by: Deciders::default(),
            }),
            OnError::Allow => Ok(ChargeVerdict {
                // Nothing was decided: every pair reads as an untouched key
                // charged its cost, as a degraded check reads.
                charged: pairs
                    .iter()
                    .map(|c| Charged {
                        decision: untouched(c),
                        debt: 0,
                        clamped: 0,
                    })
                    .collect(),
                degraded: Some(OnError::Allow),
                decided_by: Deciders::default(),
            }),
        }
    }
}
