//! The subcommands other than the server itself: [`serve`] (the flags of
//! `tollgate serve` laid over the config file; [`crate::server::run`] then
//! serves), [`ratelimit`] (the reference's environment, served the same
//! way), [`validate`], [`replay`] and [`check`]. `main.rs` parses the
//! command line and calls in here.

pub mod check;
pub mod ratelimit;
pub mod replay;
pub mod serve;
pub mod validate;
