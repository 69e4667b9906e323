//! The replay CSV: header, rows, ops and their columns, replayed through
//! a fresh memory-store limiter (with a plot) each run.
#![no_main]

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use tollgate::{Limiter, MemoryStore, Rule};
use tollgate_fuzz::RUNTIME;
use tollgate_server::cmd::replay::{Plot, replay};

static RULES: LazyLock<Vec<Rule>> = LazyLock::new(|| {
    tollgate_fuzz::config()
        .rules
        .iter()
        .map(|r| r.rule.clone())
        .collect()
});

fuzz_target!(|data: &[u8]| {
    let limiter = Limiter::new(MemoryStore::new(), RULES.iter().cloned()).expect("the rules");
    let mut plot = Plot::new(limiter.rules().len());
    let _ = RUNTIME.block_on(replay(
        &limiter,
        data,
        "fuzz.csv",
        std::io::sink(),
        Some(&mut plot),
    ));
});
