//! What the Redis store's test files share: a seeded generator, random
//! rules, a store on a test server, and checks of what the server holds.

use std::time::Duration;

use redis_harness::RedisServer;
use tollgate::store::redis::{RedisOptions, RedisStore};
use tollgate::{Algorithm, Rule, RuleSpec};

/// 2025-11-24 in µs: the scripts must be exact at epoch-sized times.
pub(crate) const EPOCH: u64 = 1_764_000_000_000_000;

/// A seeded splitmix64: the same draws on every run.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    /// The next draw.
    pub(crate) fn next(&mut self) -> u64 {
        // splitmix64
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// A draw in 0..n.
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A store on `server`, its keys under `prefix`.
pub(crate) async fn connect(server: &RedisServer, prefix: &str) -> RedisStore {
    let options = RedisOptions {
        prefix: prefix.to_owned(),
        ..RedisOptions::default()
    };
    RedisStore::connect(&server.url(), options)
        .await
        .expect("connect to the test redis-server")
}

/// A valid rule of `algorithm` with a random period, limit and burst.
pub(crate) fn random_rule(rng: &mut Rng, name: &str, algorithm: Algorithm) -> Rule {
    let periods = [1_000, 7_000, 1_000_000, 3_600_000_000, 86_400_000_000];
    let period = periods[usize::try_from(rng.below(5)).unwrap()];
    let limit = match rng.below(4) {
        0 => 1 + rng.below(3),
        1 => 1 + rng.below(20),
        2 => 3,
        _ => 1 + rng.below(1000),
    }
    .min(if algorithm.has_burst() {
        period
    } else {
        u64::MAX
    });
    let mut spec = RuleSpec::new(name, algorithm, limit, Duration::from_micros(period));
    if algorithm.has_burst() && rng.below(2) == 0 {
        spec = spec.burst(1 + rng.below(limit * 2));
    }
    spec.build().expect("random rule is valid")
}

/// Fails when any key on `server` has no TTL.
pub(crate) fn assert_no_key_without_ttl(server: &RedisServer) {
    let bare = server.keys_without_ttl();
    assert!(bare.is_empty(), "keys without a TTL: {bare:?}");
}

/// Script runs (`EVALSHA` + `EVAL`) `server` counted since its last
/// `CONFIG RESETSTAT`.
pub(crate) fn script_runs(server: &RedisServer) -> u64 {
    server.command_calls("fcall") + server.command_calls("evalsha") + server.command_calls("eval")
}
