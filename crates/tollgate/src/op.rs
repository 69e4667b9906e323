//! What a call does to its (rule, key) pairs: one [`Op`] for the limiter,
//! which refuses a pair an op does not apply to, and for every door that
//! names ops (the Envoy service's plan, `tollgate replay`'s `op` column).

use std::fmt;

use crate::error::Error;
use crate::rule::{Algorithm, Rule};

/// What a call does to its pairs (docs/semantics.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Op {
    /// Consume the cost when admitted, all-or-nothing (0 peeks).
    Check,
    /// Consume the cost unconditionally; what goes past the limit is debt
    /// ("Charge").
    Charge,
    /// Give the cost back: the units counted last first, never past
    /// empty/full ("Refund"; Envoy's `is_negative_hits`).
    Refund,
    /// Decide like a check of the estimate and hold a reservation that a
    /// settle or a cancel ends ("Reserve, then settle").
    Reserve,
    /// End a reservation at its actual usage.
    Settle,
    /// End a reservation, its estimate given back.
    Cancel,
    /// Take slots of `concurrency` rules, all-or-nothing ("Concurrency").
    Acquire,
    /// Give a lease's slots back.
    Release,
    /// Extend a lease to a whole lease from now.
    Renew,
}

impl Op {
    /// Every op, in documentation order.
    pub const ALL: [Op; 9] = [
        Op::Check,
        Op::Charge,
        Op::Refund,
        Op::Reserve,
        Op::Settle,
        Op::Cancel,
        Op::Acquire,
        Op::Release,
        Op::Renew,
    ];

    /// The op's name: `check`, `charge`, `refund`, … (as a trace's `op`
    /// column spells the ops it takes).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Check => "check",
            Op::Charge => "charge",
            Op::Refund => "refund",
            Op::Reserve => "reserve",
            Op::Settle => "settle",
            Op::Cancel => "cancel",
            Op::Acquire => "acquire",
            Op::Release => "release",
            Op::Renew => "renew",
        }
    }

    /// Whether this op applies to `rule` at `cost` (docs/semantics.md,
    /// "Concurrency": only acquire, release, renew and peeks apply to a
    /// `concurrency` rule, and acquire to no other). The ops that end what
    /// a ticket holds are refused by the ticket's kind instead.
    ///
    /// # Errors
    /// [`Error::Mismatch`] naming the rule and why.
    pub(crate) fn applies(self, rule: &Rule, cost: u64) -> Result<(), Error> {
        let concurrency = rule.algorithm() == Algorithm::Concurrency;
        let refused = match self {
            Op::Check if concurrency && cost > 0 => {
                "is a concurrency rule: acquire and release \
                 it (a check of cost 0, a peek, applies)"
            }
            Op::Charge if concurrency => {
                "is a concurrency rule: its slots are acquired, not charged"
            }
            Op::Refund if concurrency => {
                "is a concurrency rule: its slots are released, not refunded"
            }
            Op::Reserve if concurrency => {
                "is a concurrency rule: its slots are acquired, not reserved"
            }
            Op::Acquire if !concurrency => "is not a concurrency rule: only those are acquired",
            _ => return Ok(()),
        };
        Err(Error::Mismatch(format!(
            "rule {:?} ({}) {refused}",
            rule.name(),
            rule.algorithm()
        )))
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_distinct() {
        let names: std::collections::HashSet<&str> = Op::ALL.iter().map(|o| o.as_str()).collect();
        assert_eq!(names.len(), Op::ALL.len());
        assert_eq!(Op::Refund.to_string(), "refund");
    }
}
