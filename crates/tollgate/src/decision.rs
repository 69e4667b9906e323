//! What a check answers.

use std::time::Duration;

/// The answer to one check of one (rule, key) pair. See docs/semantics.md,
/// "The decision".
///
/// A denial is not an error: `allowed == false` with `retry_after` set says
/// when the same check would be admitted; `retry_after == None` on a denial
/// means it can never be admitted (its cost exceeds the rule's capacity).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Decision {
    /// The request is admitted. A denied check consumed nothing.
    pub allowed: bool,
    /// The rule's capacity: `limit`, or `burst` for GCRA and token bucket.
    pub limit: u64,
    /// How many cost-1 checks would be admitted right now, after this one.
    pub remaining: u64,
    /// Time until the key is back to its empty/full state.
    pub reset_after: Duration,
    /// Denied only: the earliest wait after which the same check would be
    /// admitted with no other traffic. `None` when admitted or never.
    pub retry_after: Option<Duration>,
}

/// The three ways a check can end, for callers that prefer to `match`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// Admitted.
    Allowed,
    /// Denied; the same check would be admitted after this wait.
    Denied {
        /// The wait.
        retry_after: Duration,
    },
    /// Denied; the cost exceeds the rule's capacity, so no wait helps.
    Never,
}

impl Decision {
    /// Which of the three outcomes this decision is.
    #[must_use]
    pub fn outcome(&self) -> Outcome {
        match (self.allowed, self.retry_after) {
            (true, _) => Outcome::Allowed,
            (false, Some(retry_after)) => Outcome::Denied { retry_after },
            (false, None) => Outcome::Never,
        }
    }

    /// Denied, and no wait will ever admit the same check.
    #[must_use]
    pub fn is_never(&self) -> bool {
        !self.allowed && self.retry_after.is_none()
    }

    /// `reset_after` in whole milliseconds, rounded up.
    #[must_use]
    pub fn reset_after_ms(&self) -> u64 {
        ceil_ms(self.reset_after)
    }

    /// `retry_after` in whole milliseconds, rounded up.
    #[must_use]
    pub fn retry_after_ms(&self) -> Option<u64> {
        self.retry_after.map(ceil_ms)
    }
}

fn ceil_ms(d: Duration) -> u64 {
    crate::time::micros_to_millis_ceil(crate::time::duration_to_micros(d))
}

/// The answer to an all-or-nothing check of several (rule, key) pairs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MultiDecision {
    /// Every pair admitted (and consumed). If false, no pair consumed.
    pub allowed: bool,
    /// Index of the deciding pair: when denied, the denying pair with the
    /// longest `retry_after` (a "never" pair counts as longest); when
    /// admitted, the pair with the fewest `remaining`.
    pub deciding: usize,
    /// One decision per pair, in the order given. On a denial, the pairs
    /// that would have admitted report their state without consuming.
    pub decisions: Vec<Decision>,
}

impl MultiDecision {
    /// Builds the combined answer from per-pair decisions evaluated against
    /// one snapshot. `decisions` must not be empty.
    #[must_use]
    pub fn from_decisions(decisions: Vec<Decision>) -> Self {
        Self {
            allowed: decisions.iter().all(|d| d.allowed),
            deciding: Self::deciding_index(&decisions),
            decisions,
        }
    }

    /// The index [`MultiDecision::deciding`] names among `decisions` (0 when
    /// there are none): for callers holding the decisions in another shape.
    #[must_use]
    pub fn deciding_index<'a, I>(decisions: I) -> usize
    where
        I: IntoIterator<Item = &'a Decision>,
        I::IntoIter: Clone,
    {
        let decisions = decisions.into_iter();
        if decisions.clone().all(|d| d.allowed) {
            // fewest remaining; first one on ties
            decisions
                .enumerate()
                .min_by_key(|(i, d)| (d.remaining, *i))
                .map_or(0, |(i, _)| i)
        } else {
            // longest retry_after among denials; "never" is longest; first on ties
            decisions
                .enumerate()
                .filter(|(_, d)| !d.allowed)
                .max_by_key(|(i, d)| {
                    (
                        d.retry_after.map_or(Duration::MAX, |r| r),
                        std::cmp::Reverse(*i),
                    )
                })
                .map_or(0, |(i, _)| i)
        }
    }

    /// The deciding pair's decision.
    #[must_use]
    pub fn decision(&self) -> &Decision {
        &self.decisions[self.deciding]
    }
}
