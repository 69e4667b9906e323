//! The TOML config checker: never a panic, and a config it accepts
//! builds a gate (validation leaves nothing for the limiter to refuse).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tollgate_server::config::Config;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(config) = Config::parse(text, "fuzz.toml") {
        drop(tollgate_fuzz::gate(&config, &Default::default()));
    }
});
