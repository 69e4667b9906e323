//! What the fuzz targets share: one config with a rule of every kind, a
//! gate over a memory store built from it, and a current-thread runtime
//! to drive the async doors. Built once per process: a target's runs share
//! the gate's state, as a server's requests do.

use std::sync::{Arc, LazyLock};

use tollgate::MemoryStore;
use tollgate_server::config::Config;
use tollgate_server::doors::envoy::limits::EnvoyLimits;
use tollgate_server::gate::Gate;
use tollgate_server::store::AnyStore;

/// One rule per algorithm, a `concurrency` rule, a rule with overrides
/// and a rule settled from a response header.
pub const CONFIG: &str = r#"
[store]
url = "memory"
max_keys = 10000

[[rules]]
name = "g"
algorithm = "gcra"
limit = 10
period = "1s"
burst = 20
key = "header:x-api-key"

[[rules]]
name = "tb"
algorithm = "token_bucket"
limit = 60
period = "1m"
burst = 30

[[rules]]
name = "fw"
algorithm = "fixed_window"
limit = 5
period = "1m"
key = "client_ip"

[[rules]]
name = "sw"
algorithm = "sliding_window"
limit = 100
period = "10s"
overrides = [{ key = "vip-*", limit = 1000 }]

[[rules]]
name = "sl"
algorithm = "sliding_log"
limit = 3
period = "1h"

[[rules]]
name = "inflight"
algorithm = "concurrency"
limit = 4
lease = "2m"

[[rules]]
name = "tpm"
algorithm = "sliding_window"
limit = 10000
period = "1m"
cost = "response_header:x-usage-tokens"
estimate = 1000
"#;

/// The Envoy limits the gRPC target decides by (the example file).
pub const ENVOY_YAML: &str = include_str!("../../examples/envoy/edge-ratelimit.yaml");

/// [`CONFIG`], parsed.
///
/// # Panics
/// When it does not load (a fuzz setup error).
#[must_use]
pub fn config() -> Config {
    Config::parse(CONFIG, "fuzz.toml").expect("the fuzz config loads")
}

/// [`ENVOY_YAML`], loaded beside `config`'s rules (as `serve` loads its
/// `--envoy-config` files).
///
/// # Panics
/// When it does not load (a fuzz setup error).
#[must_use]
pub fn envoy(config: &Config) -> Arc<EnvoyLimits> {
    let taken: Vec<&str> = config.rules.iter().map(|r| r.rule.name()).collect();
    let limits = EnvoyLimits::parse(&[("envoy.yaml".to_owned(), ENVOY_YAML.to_owned())], &taken)
        .expect("the example Envoy config loads");
    Arc::new(limits)
}

/// A gate over a fresh memory store with `config`'s rules, then `envoy`'s.
///
/// # Panics
/// When `config` is refused (a valid config never is).
#[must_use]
pub fn gate(config: &Config, envoy: &EnvoyLimits) -> Arc<Gate> {
    Arc::new(
        Gate::new(
            config,
            envoy.all_rules(),
            AnyStore::from(MemoryStore::new()),
        )
        .expect("a gate over a valid config"),
    )
}

/// The runtime every target blocks on.
pub static RUNTIME: LazyLock<tokio::runtime::Runtime> = LazyLock::new(|| {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a tokio runtime")
});
