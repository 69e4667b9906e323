//! The bounds a rule or a check must keep, and the constants that tune
//! them: what [`RuleSpec::build`](crate::RuleSpec::build) and a check
//! refuse past, named for a door or a config checker that repeats the
//! bound in its own error.

pub use crate::limiter::MAX_KEY_LEN;
pub use crate::rule::{
    DEBT_PERIODS, DEFAULT_LEASE, MAX_BURST_WINDOW, MAX_CONCURRENCY_LIMIT, MAX_LIMIT, MAX_NAME_LEN,
    MAX_PERIOD, MAX_SLIDING_LOG_LIMIT, MIN_PERIOD,
};
