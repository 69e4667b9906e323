//! The subcommands other than the server itself: [`serve`] (the flags of
//! `tollgate serve` laid over the config file; [`crate::server::run`] then
//! serves), [`validate`], [`replay`] and [`check`]. `main.rs` parses the
//! command line and calls in here.

pub mod check;
pub mod replay;
pub mod serve;
pub mod validate;
