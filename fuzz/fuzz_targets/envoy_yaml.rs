//! The envoyproxy/ratelimit YAML loader: never a panic, and limits it
//! accepts build a gate and an Envoy service.
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use tollgate_server::doors::envoy::limits::EnvoyLimits;
use tollgate_server::doors::envoy::service::EnvoyService;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let sources = [("fuzz.yaml".to_owned(), text.to_owned())];
    let Ok(limits) = EnvoyLimits::parse_with(&sources, &[], data.len() % 2 == 0) else {
        return;
    };
    let config = tollgate_server::config::Config::without_rules();
    let limits = Arc::new(limits);
    let gate = tollgate_fuzz::gate(&config, &limits);
    EnvoyService::new(gate, limits).expect("a service over accepted limits");
});
