//! Operators' calls on the Redis store (docs/admin.md): forgetting a key
//! ([`crate::Store::reset`]) and the shared runtime table of blocks and
//! runtime overrides ([`crate::Store::runtime_read`],
//! [`crate::Store::runtime_write`]).
//!
//! The table is one hash, `<prefix>:runtime` (field → value, as
//! `crate::resilient` encodes them), and its version,
//! `<prefix>:runtime:version`, set to a fresh random number after every
//! write: a replica polls the version (one `GET`) and reads the hash only
//! when it differs from the one it read, which no later write can repeat
//! (a counter could, once Redis lost it). Neither
//! key has a TTL: the table outlives every replica (entries carry their
//! own end). Neither can meet a rule's key, which always holds `:{`.

use std::time::Duration;

use super::encode::RuleCache;
use super::resp::{self, Reply, Value};
use super::{Backend, RedisStore, conn, keys, protocol, store_error};
use crate::error::StoreError;
use crate::rule::Rule;
use crate::store::RuntimeEntries;
use crate::ticket::{MAX_RESERVATION_TTL, REMEMBERED_AFTER_TTL, key_name};

/// A reset: the state deleted, the time marked (the server's, in µs,
/// written as digits: a Lua number would print in floating point).
const RESET: &str = "if redis.replicate_commands then pcall(redis.replicate_commands) end
local held = redis.call('DEL', KEYS[1])
local now = redis.call('TIME')
redis.call('SET', KEYS[2], now[1] .. string.rep('0', 6 - #now[2]) .. now[2], 'PX', ARGV[1])
return held";

/// How long a reset's mark outlives the longest a reservation made before
/// it is remembered (a record's PX adds a margin of its own at explicit
/// times).
const MARK_MARGIN: Duration = Duration::from_secs(3600);

impl RedisStore {
    /// The Redis key of the runtime table: `<prefix>:runtime`.
    #[must_use]
    pub fn runtime_key(&self) -> String {
        format!("{}:runtime", self.inner.prefix)
    }

    /// The Redis key of the runtime table's version counter.
    #[must_use]
    pub fn runtime_version_key(&self) -> String {
        format!("{}:runtime:version", self.inner.prefix)
    }

    /// Runs one plain command (no script) on whichever connection the
    /// store has, its reply as a [`Value`].
    pub(super) async fn command(&self, args: &[&[u8]]) -> Result<Value, StoreError> {
        if let Backend::Lean(c) = &self.inner.backend {
            let encode = |out: &mut Vec<u8>, _: &mut RuleCache| resp::command(out, args);
            return match c.call(encode).await? {
                Reply::Other(v) => Ok(v),
                Reply::Ints(ints) => Ok(Value::Array(
                    ints.as_slice().iter().map(|&n| Value::Int(n)).collect(),
                )),
                Reply::Error(e) => Err(conn::server_error(&e)),
            };
        }
        let Some((verb, rest)) = args.split_first() else {
            return Err(protocol("an empty command"));
        };
        let mut cmd = redis::cmd(std::str::from_utf8(verb).unwrap_or("PING"));
        for a in rest {
            cmd.arg(*a);
        }
        let value: redis::Value = self.query_raw(&cmd).await.map_err(|e| store_error(&e))?;
        Ok(from_redis(value))
    }

    /// Deletes (rule, key)'s state: [`crate::Store::reset`]. In the same
    /// script, marks the reset's time ([`keys::reset_mark`]) so that a
    /// settle forgets the reservations made before it (their records can
    /// only be found by their ids); the mark outlives any such record.
    pub(crate) async fn reset_key(&self, rule: &Rule, key: &[u8]) -> Result<bool, StoreError> {
        let name = self.redis_key(rule, key);
        let mark = keys::reset_mark(&self.inner.prefix, rule.name(), &key_name(key));
        let px = (MAX_RESERVATION_TTL + REMEMBERED_AFTER_TTL + MARK_MARGIN)
            .as_millis()
            .to_string();
        let args: [&[u8]; 6] = [b"EVAL", RESET.as_bytes(), b"2", &name, &mark, px.as_bytes()];
        match self.command(&args).await? {
            Value::Int(n) => Ok(n > 0),
            other => Err(protocol(format!("the reset script answered {other:?}"))),
        }
    }

    /// [`crate::Store::runtime_read`].
    pub(crate) async fn read_runtime(
        &self,
        since: Option<u64>,
    ) -> Result<Option<RuntimeEntries>, StoreError> {
        let version_key = self.runtime_version_key();
        let version = match self.command(&[b"GET", version_key.as_bytes()]).await? {
            Value::Nil => 0,
            Value::Text(t) => std::str::from_utf8(&t)
                .ok()
                .and_then(|t| t.parse::<u64>().ok())
                .ok_or_else(|| protocol("the runtime table's version is not a number"))?,
            other => return Err(protocol(format!("GET answered {other:?}"))),
        };
        if since == Some(version) {
            return Ok(None);
        }
        let key = self.runtime_key();
        let Value::Array(items) = self.command(&[b"HGETALL", key.as_bytes()]).await? else {
            return Err(protocol("HGETALL answered no array"));
        };
        let mut entries = Vec::with_capacity(items.len() / 2);
        let mut items = items.into_iter();
        while let (Some(Value::Text(f)), Some(Value::Text(v))) = (items.next(), items.next()) {
            entries.push((f, v));
        }
        Ok(Some((version, entries)))
    }

    /// [`crate::Store::runtime_write`].
    pub(crate) async fn write_runtime(
        &self,
        field: &[u8],
        value: Option<&[u8]>,
        expired: &[Vec<u8>],
    ) -> Result<(), StoreError> {
        let key = self.runtime_key();
        match value {
            Some(v) => self.command(&[b"HSET", key.as_bytes(), field, v]).await?,
            None => self.command(&[b"HDEL", key.as_bytes(), field]).await?,
        };
        if !expired.is_empty() {
            let mut args: Vec<&[u8]> = vec![b"HDEL", key.as_bytes()];
            args.extend(expired.iter().map(Vec::as_slice));
            self.command(&args).await?;
        }
        // After the hash: a replica that sees the new version reads it.
        // A fresh random version, not a counter: a counter starts over
        // when Redis loses it (a restart without persistence, FLUSHALL, a
        // failover to a lagging replica) and climbs back to a value a
        // replica holds, which then never reads the new table.
        let version = fresh_version()?.to_string();
        let version_key = self.runtime_version_key();
        self.command(&[b"SET", version_key.as_bytes(), version.as_bytes()])
            .await?;
        Ok(())
    }
}

/// A runtime table version no write made before: 63 random bits (a
/// replica of an older tollgate still `INCR`s it within an `i64`), never
/// 0 (what a missing version reads as).
fn fresh_version() -> Result<u64, StoreError> {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).map_err(|e| {
        StoreError::new(
            crate::error::StoreErrorKind::Unavailable,
            format!("no random runtime table version: {e}"),
        )
    })?;
    Ok((u64::from_le_bytes(bytes) >> 1).max(1))
}

/// A redis-rs value as the lean connection's.
fn from_redis(v: redis::Value) -> Value {
    match v {
        redis::Value::Int(n) => Value::Int(n),
        redis::Value::BulkString(b) => Value::Text(b),
        redis::Value::SimpleString(s) => Value::Text(s.into_bytes()),
        redis::Value::Okay => Value::Text(b"OK".to_vec()),
        redis::Value::Array(a) | redis::Value::Set(a) => {
            Value::Array(a.into_iter().map(from_redis).collect())
        }
        redis::Value::Map(m) => Value::Array(
            m.into_iter()
                .flat_map(|(k, v)| [from_redis(k), from_redis(v)])
                .collect(),
        ),
        _ => Value::Nil,
    }
}
