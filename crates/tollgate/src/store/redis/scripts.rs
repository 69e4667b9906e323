//! The Lua scripts, composed from one file per algorithm and run by hash.
//!
//! Each runnable script is `prelude.lua` + the algorithm file(s) +
//! `check.lua`: one script per algorithm for single-rule checks, and one
//! holding all five for multi-rule checks. They are sent with `EVALSHA`; on
//! `NOSCRIPT` (after a restart, a failover or `SCRIPT FLUSH`) the store falls
//! back to `EVAL`, which also caches the script again.

use crate::rule::Algorithm;

macro_rules! script {
    ($($file:literal),*) => {
        concat!(
            include_str!("scripts/prelude.lua"),
            $(include_str!(concat!("scripts/", $file)),)*
            include_str!("scripts/check.lua")
        )
    };
}

/// One script's source and its SHA-1.
#[derive(Debug, Clone)]
pub(crate) struct Script {
    pub(crate) source: &'static str,
    pub(crate) sha: String,
}

impl Script {
    fn new(source: &'static str) -> Self {
        Self {
            source,
            sha: sha1_smol::Sha1::from(source).digest().to_string(),
        }
    }
}

/// Every script the store runs.
#[derive(Debug, Clone)]
pub(crate) struct Scripts {
    single: [Script; 5],
    pub(crate) multi: Script,
}

impl Scripts {
    pub(crate) fn new() -> Self {
        Self {
            single: [
                Script::new(script!("gcra.lua")),
                Script::new(script!("token_bucket.lua")),
                Script::new(script!("fixed_window.lua")),
                Script::new(script!("sliding_window.lua")),
                Script::new(script!("sliding_log.lua")),
            ],
            multi: Script::new(script!(
                "gcra.lua",
                "token_bucket.lua",
                "fixed_window.lua",
                "sliding_window.lua",
                "sliding_log.lua"
            )),
        }
    }

    /// The script for single checks of `algorithm`.
    pub(crate) fn single(&self, algorithm: Algorithm) -> &Script {
        &self.single[usize::from(code(algorithm)) - 1]
    }
}

/// The algorithm's code in the scripts' calling convention.
pub(crate) fn code(algorithm: Algorithm) -> u8 {
    match algorithm {
        Algorithm::Gcra => 1,
        Algorithm::TokenBucket => 2,
        Algorithm::FixedWindow => 3,
        Algorithm::SlidingWindow => 4,
        Algorithm::SlidingLog => 5,
    }
}
