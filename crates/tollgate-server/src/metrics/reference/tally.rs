//! The reference service's arithmetic for one descriptor's stats
//! (envoyproxy/ratelimit `src/limiter/base_limiter.go`): how many of a
//! call's hits go to `total_hits`, `within_limit`, `near_limit`,
//! `over_limit` and `shadow_mode`. Counts are in hits (cost units), and a
//! call that crosses the limit splits its hits between near and over, so
//! `total_hits` need not equal `within_limit + over_limit`.

/// What the store said of a descriptor's key: its count before this call
/// and the limit it was decided under (the decision's capacity).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    /// The window's count before this call's hits.
    pub before: u64,
    /// The limit (`requests_per_unit`, or the override decided under).
    pub limit: u64,
}

impl Seen {
    /// From a decision's `limit` and `remaining` after the call, the
    /// units over the limit the key holds (`debt`, after a charge) and the
    /// units this call added to the key (`added`: its cost when it
    /// consumed, else 0).
    #[must_use]
    pub fn after_call(limit: u64, remaining: u64, debt: u64, added: u64) -> Self {
        let used = limit.saturating_sub(remaining).saturating_add(debt);
        Self {
            before: used.saturating_sub(added),
            limit,
        }
    }
}

/// The five counters of a stats key, in [`super::RATE_LIMIT`] order.
pub type Counts = [u64; 5];

/// Index of `total_hits` in [`Counts`].
pub const TOTAL_HITS: usize = 0;
/// Index of `over_limit`.
pub const OVER_LIMIT: usize = 1;
/// Index of `near_limit`.
pub const NEAR_LIMIT: usize = 2;
/// Index of `within_limit`.
pub const WITHIN_LIMIT: usize = 3;
/// Index of `shadow_mode`.
pub const SHADOW_MODE: usize = 4;

/// The near-limit threshold as the reference computes it: in `float32`
/// (`math.Floor(float64(float32(limit) * nearLimitRatio))`), so a limit
/// whose product rounds differently in `f64` lands where it does there.
#[must_use]
#[allow(
    clippy::cast_precision_loss,
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss
)] // as the reference: float32 on purpose, ratio in (0, 1]
pub fn near_threshold(limit: u64, ratio: f64) -> u64 {
    let product = limit as f32 * ratio as f32;
    f64::from(product).floor() as u64
}

/// One descriptor's counts for a call of `hits`: `seen` is `None` when
/// the store did not decide it (it failed; the reference counts the hits
/// and then fails the call), `over` whether tollgate answered it over the
/// limit (a shadow limit: whether it was over), `shadow` whether the
/// limit is in shadow mode.
///
/// The count after the call is `before + hits`, as the reference's
/// `INCRBY` leaves it, whether or not tollgate consumed (a denied request
/// consumes nothing here). An answer over the limit whose count would not
/// pass it (an algorithm other than the fixed window, an operator's
/// block) counts all its hits over.
#[must_use]
pub fn tally(hits: u64, seen: Option<Seen>, ratio: f64, over: bool, shadow: bool) -> Counts {
    let mut c = [0; 5];
    c[TOTAL_HITS] = hits;
    let Some(Seen { before, limit }) = seen else {
        return c;
    };
    let after = before.saturating_add(hits);
    let near = near_threshold(limit, ratio);
    if over || after > limit {
        let over_hits = if before >= limit || after <= limit {
            hits
        } else {
            // Only part of the hits passed the limit; the part below it
            // and above the near threshold was near.
            c[NEAR_LIMIT] = limit - near.max(before);
            after - limit
        };
        c[OVER_LIMIT] = over_hits;
        if shadow {
            c[SHADOW_MODE] = over_hits;
        }
    } else {
        c[WITHIN_LIMIT] = hits;
        if after > near {
            c[NEAR_LIMIT] = if before >= near { hits } else { after - near };
        }
    }
    c
}

#[cfg(test)]
mod tests {
    //! The cases of the reference's own tests (envoyproxy/ratelimit
    //! `test/redis/fixed_cache_impl_test.go` `TestNearLimit`, `TestRedis`,
    //! and `test/limiter/base_limiter_test.go`), each a counter
    //! before and after one `INCRBY`, near-limit ratio 0.8.
    use super::*;

    fn at(before: u64, limit: u64) -> Option<Seen> {
        Some(Seen { before, limit })
    }

    /// `[total, over, near, within, shadow]` of one call.
    fn call(hits: u64, after: u64, limit: u64) -> Counts {
        tally(hits, at(after - hits, limit), 0.8, false, false)
    }

    #[test]
    fn the_reference_near_limit_cases() {
        // limit 15: threshold 12; counts 11, 13, 16 after one hit each
        assert_eq!(call(1, 11, 15), [1, 0, 0, 1, 0]);
        assert_eq!(call(1, 13, 15), [1, 0, 1, 1, 0]);
        assert_eq!(call(1, 16, 15), [1, 1, 0, 0, 0]);
        // hits above 1: all under near; some over near; all over near
        assert_eq!(call(3, 5, 20), [3, 0, 0, 3, 0]);
        assert_eq!(call(2, 7, 8), [2, 0, 1, 2, 0]);
        assert_eq!(call(3, 19, 20), [3, 0, 3, 3, 0]);
        // some over the limit, all over near; some in all three places
        assert_eq!(call(3, 22, 20), [3, 2, 1, 0, 0]);
        assert_eq!(call(7, 22, 20), [7, 2, 4, 0, 0]);
        // all of it over the limit
        assert_eq!(call(3, 30, 10), [3, 3, 0, 0, 0]);
    }

    #[test]
    fn the_reference_redis_cases() {
        // limit 10/s, count 5 after one hit: within
        assert_eq!(call(1, 5, 10), [1, 0, 0, 1, 0]);
        // limit 10/min at 11 after one hit: over
        assert_eq!(call(1, 11, 10), [1, 1, 0, 0, 0]);
        // a hits_addend of 0 over the limit adds nothing anywhere
        assert_eq!(call(0, 11, 10), [0, 0, 0, 0, 0]);
    }

    #[test]
    fn shadow_mode_counts_the_over_hits_too() {
        assert_eq!(tally(3, at(19, 20), 0.8, true, true), [3, 2, 1, 0, 2]);
        assert_eq!(tally(1, at(25, 20), 0.8, true, true), [1, 1, 0, 0, 1]);
        // a shadow limit within: no shadow hits
        assert_eq!(tally(1, at(1, 20), 0.8, false, true), [1, 0, 0, 1, 0]);
    }

    #[test]
    fn an_undecided_descriptor_counts_its_hits_only() {
        assert_eq!(tally(4, None, 0.8, true, false), [4, 0, 0, 0, 0]);
    }

    #[test]
    fn an_over_answer_below_the_count_is_all_over() {
        assert_eq!(tally(2, at(3, 10), 0.8, true, false), [2, 2, 0, 0, 0]);
        // requests_per_unit 0: every hit over
        assert_eq!(tally(5, at(0, 0), 0.8, true, false), [5, 5, 0, 0, 0]);
    }

    #[test]
    fn the_threshold_is_taken_in_float32() {
        assert_eq!(near_threshold(15, 0.8), 12);
        assert_eq!(near_threshold(10, 0.8), 8);
        assert_eq!(near_threshold(8, 0.8), 6);
        assert_eq!(near_threshold(100, 1.0), 100);
    }

    #[test]
    fn seen_reads_the_count_from_a_decision() {
        // admitted at cost 2, 3 left of 10: 7 now, 5 before
        assert_eq!(
            Seen::after_call(10, 3, 0, 2),
            Seen {
                before: 5,
                limit: 10
            }
        );
        // denied, nothing consumed: 10 now and before
        assert_eq!(
            Seen::after_call(10, 0, 0, 0),
            Seen {
                before: 10,
                limit: 10
            }
        );
        // a charge of 4 that left a debt of 3: 13 now, 9 before
        assert_eq!(
            Seen::after_call(10, 0, 3, 4),
            Seen {
                before: 9,
                limit: 10
            }
        );
    }
}
