//! The harness's integration tests, in one binary as in every crate of
//! the workspace (docs/testing.md): `cargo test -p redis-harness --test it`.

mod harness;
