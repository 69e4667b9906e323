//! The benchmark's modules, in a folder so cargo does not take each file for
//! a bench target of its own.

pub(crate) mod common;
pub(crate) mod governor_peer;
pub(crate) mod memory;
