//! How many replicas share this Redis: a heartbeat each replica sends once
//! per interval (see `scripts/replicas.lua`).
//!
//! Each replica adds itself (its random id) to one sorted set,
//! `<prefix>:replicas`, scored with the Redis server's time, removes the
//! members whose last heartbeat is older than the time-to-live (a few
//! intervals), renews the key's TTL and reads the set's size: the live
//! replicas, itself included. One key, so it lives on one node of a
//! Cluster, and behind Sentinel on the master like every other key. The
//! key always has a TTL: it expires once no replica beats any more.
//!
//! The [`crate::resilient::ResilientLimiter`] runs the heartbeat in a
//! background task and sizes its `local` fallback by the answer.

use std::sync::LazyLock;
use std::time::Duration;

use redis::{ErrorKind, ServerErrorKind};

use super::encode::RuleCache;
use super::resp::{self, Reply};
use super::{Backend, RedisStore, conn, protocol, store_error};
use crate::error::StoreError;

/// The heartbeat script's source.
const SOURCE: &str = include_str!("scripts/replicas.lua");

/// Its SHA-1, for `EVALSHA`.
static SHA: LazyLock<String> = LazyLock::new(|| sha1_smol::Sha1::from(SOURCE).digest().to_string());

impl RedisStore {
    /// The Redis key of the live-replica set: `<prefix>:replicas`. It
    /// cannot meet a rule's key, which always holds `:{`.
    #[must_use]
    pub fn replicas_key(&self) -> String {
        format!("{}:replicas", self.inner.prefix)
    }

    /// Records a heartbeat of replica `id` and returns how many replicas
    /// (this one included) sent one within `ttl`.
    ///
    /// # Errors
    /// The store did not answer, or answered something else.
    pub(crate) async fn replica_heartbeat(
        &self,
        id: &str,
        ttl: Duration,
    ) -> Result<u64, StoreError> {
        let key = self.replicas_key();
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        let ttl_arg = ttl_ms.to_string();
        let reply: Vec<i64> = match &self.inner.backend {
            Backend::Lean(c) => {
                let (mut by_sha, mut retried) = (true, false);
                loop {
                    let encode = |out: &mut Vec<u8>, _: &mut RuleCache| {
                        let (verb, body): (&[u8], &[u8]) = if by_sha {
                            (b"EVALSHA", SHA.as_bytes())
                        } else {
                            (b"EVAL", SOURCE.as_bytes())
                        };
                        resp::command(
                            out,
                            &[
                                verb,
                                body,
                                b"1",
                                key.as_bytes(),
                                id.as_bytes(),
                                ttl_arg.as_bytes(),
                            ],
                        );
                    };
                    match c.call(encode).await? {
                        Reply::Ints(ints) => break ints.as_slice().to_vec(),
                        Reply::Error(e) if by_sha && e.starts_with("NOSCRIPT") => by_sha = false,
                        Reply::Error(e)
                            if !retried && e.starts_with("READONLY") && c.follows_sentinel() =>
                        {
                            retried = true;
                        }
                        Reply::Error(e) => return Err(conn::server_error(&e)),
                        Reply::Other(v) => {
                            return Err(protocol(format!("the heartbeat answered {v:?}")));
                        }
                    }
                }
            }
            Backend::Cluster { .. } => {
                let build = |verb: &str, body: &str| {
                    let mut cmd = redis::cmd(verb);
                    cmd.arg(body).arg(1).arg(&key).arg(id).arg(ttl_ms);
                    cmd
                };
                match self.query_raw(&build("EVALSHA", &SHA)).await {
                    Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => self
                        .query_raw(&build("EVAL", SOURCE))
                        .await
                        .map_err(|e| store_error(&e))?,
                    other => other.map_err(|e| store_error(&e))?,
                }
            }
        };
        match reply.as_slice() {
            [n, _now] if *n >= 1 => Ok(u64::try_from(*n).unwrap_or(1)),
            other => Err(protocol(format!("the heartbeat answered {other:?}"))),
        }
    }
}
