//! The tower layer's integration tests: one binary, a module per area
//! (each was its own binary once, and each linked the crate again), and
//! one `support` module for what they share. Run one area with its module
//! path: `cargo test -p tollgate-tower --test it -- usage::`.

mod support;

mod axum;
mod client_ip;
mod layer;
mod usage;
mod usage_dropped;
