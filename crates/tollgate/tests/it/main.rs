//! The library's integration tests: one binary, a module per area (each
//! was its own binary once, and each linked the library again), and one
//! `support` module for what they share. Run one area with its module
//! path: `cargo test -p tollgate --all-features --test it -- redis_store::`.
//!
//! The areas that need Redis or the conformance kit are compiled with the
//! feature they need, as their `required-features` once said; without it
//! the rest still run. Two tests keep binaries of their own
//! (`tests/memory_footprint.rs`, `tests/top_denied.rs`): each counts heap
//! bytes with a global allocator, which is per binary, and nothing else
//! may allocate while it counts.

mod support;

#[cfg(feature = "redis")]
mod cluster_breaker;
mod concurrency;
#[cfg(feature = "conformance")]
mod conformance_memory;
#[cfg(all(feature = "redis", feature = "conformance"))]
mod conformance_redis;
mod eviction;
#[cfg(feature = "redis")]
mod faults;
#[cfg(feature = "redis")]
mod faults_leases;
#[cfg(feature = "redis")]
mod hybrid;
#[cfg(feature = "redis")]
mod hybrid_schedule;
mod limiter;
mod memory_store;
#[cfg(feature = "redis")]
mod per_call_limit;
mod properties;
#[cfg(all(feature = "redis", feature = "conformance"))]
mod redis_acl;
#[cfg(feature = "redis")]
mod redis_batches;
#[cfg(feature = "redis")]
mod redis_connection;
#[cfg(feature = "redis")]
mod redis_store;
#[cfg(feature = "redis-tls")]
mod redis_tls;
#[cfg(feature = "redis")]
mod redis_topologies;
#[cfg(feature = "redis")]
mod reset_reservations;
#[cfg(feature = "redis")]
mod settle_overrides;
#[cfg(feature = "redis")]
mod tickets;
