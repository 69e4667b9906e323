//! tollgate: a rate limiter whose counters survive across replicas.
//!
//! One set of decision semantics (GCRA, token bucket, fixed window, sliding
//! window, sliding log), pure algorithm steps, and stores that apply them
//! atomically. This crate holds the algorithms, rules, the [`Limiter`] and
//! the in-memory store.
//!
//! ```
//! use std::time::Duration;
//! use tollgate::{Algorithm, FakeClock, Limiter, MemoryStore, RuleSpec};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
//! let clock = FakeClock::new();
//! let store = MemoryStore::builder().clock(clock.clone()).build();
//! let rule = RuleSpec::new("per_user", Algorithm::Gcra, 2, Duration::from_secs(1)).build()?;
//! let limiter = Limiter::new(store, [rule])?;
//!
//! assert!(limiter.check("per_user", "alice", 1).await?.allowed);
//! assert!(limiter.check("per_user", "alice", 1).await?.allowed);
//! let denied = limiter.check("per_user", "alice", 1).await?;
//! assert!(!denied.allowed);
//! assert_eq!(denied.retry_after, Some(Duration::from_millis(500)));
//!
//! clock.advance(Duration::from_millis(500));
//! assert!(limiter.check("per_user", "alice", 1).await?.allowed);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```

// Library code handles every failure; tests may unwrap.
#![cfg_attr(not(test), warn(clippy::unwrap_used))]
// Time comes from the `Clock` (time.rs), never from reading the real clock
// here and there: the paths are listed in the workspace's clippy.toml.
#![deny(clippy::disallowed_methods)]

pub mod algorithm;
#[cfg(feature = "conformance")]
pub mod conformance;
mod decided;
mod decision;
mod error;
mod limiter;
pub mod limits;
mod live;
mod op;
mod overrides;
pub mod resilient;
mod rule;
pub mod store;
pub mod ticket;
pub mod time;
pub mod top;

pub use algorithm::Charged;
pub use decided::{DecidedBy, Deciders, LimitSource};
pub use decision::{Decision, MultiDecision, Outcome};
pub use error::{Error, StoreError, StoreErrorKind, WaitError};
#[allow(deprecated)]
pub use limiter::Ticketed;
pub use limiter::{Check, Limiter, TicketDecision};
pub use live::{Block, EVERY_RULE, RuntimeOverride};
pub use op::Op;
pub use overrides::{KeyPattern, Overrides};
pub use resilient::{OnError, ResilientLimiter};
pub use rule::{Algorithm, Rule, RuleError, RuleSpec};
pub use store::Store;
pub use store::memory::{MemoryStore, MemoryStoreBuilder};
pub use time::{Clock, FakeClock, Micros, MonotonicClock, TokioClock};

// The README (the crate's page on crates.io) runs as a doc test, so its
// example keeps compiling and its assertions keep holding.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
