//! Envoy's rate limit quota service (RLQS, docs/rlqs.md): Envoys report
//! their buckets' usage on one long-lived stream each, and tollgate
//! answers every report with each bucket's assignment, a lease of the
//! rule's counter through the gate (so RLQS shares one limit with every
//! other door).
//!
//! `bucket.rs` maps a bucket id to a rule and key; `grant.rs` sizes a
//! lease and builds the assignment; `holders.rs` counts the streams
//! sharing a (rule, key); `stream.rs` answers one stream's reports;
//! `service.rs` is the gRPC service; `metric.rs` its metric names.

pub mod bucket;
pub mod grant;
mod holders;
pub mod metric;
pub mod service;
mod stream;
#[cfg(test)]
mod stream_tests;

pub use service::{RlqsService, RlqsSource};
