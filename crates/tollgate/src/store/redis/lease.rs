//! Leases for the hybrid store: take up to `n` units of a (rule, key) in one
//! script run, giving back what an earlier lease left unspent (see
//! `scripts/lease.lua` for the exact semantics).

use std::sync::LazyLock;

use redis::{ErrorKind, ServerErrorKind};

use super::conn;
#[cfg(test)]
use super::keys;
use super::resp::{self, Reply, Value};
use super::{Backend, RedisStore, protocol, scripts, store_error};
use crate::error::StoreError;
use crate::rule::Rule;
use crate::time::Micros;

/// The lease script: the prelude, all five algorithms, then `lease.lua`.
struct LeaseScript {
    source: &'static str,
    sha: String,
}

static LEASE: LazyLock<LeaseScript> = LazyLock::new(|| {
    let source = concat!(
        include_str!("scripts/prelude.lua"),
        include_str!("scripts/gcra.lua"),
        include_str!("scripts/token_bucket.lua"),
        include_str!("scripts/fixed_window.lua"),
        include_str!("scripts/sliding_window.lua"),
        include_str!("scripts/sliding_log.lua"),
        include_str!("scripts/lease.lua"),
    );
    LeaseScript {
        source,
        sha: sha1_smol::Sha1::from(source).digest().to_string(),
    }
});

/// Units of an earlier lease to give back before leasing again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GiveBack {
    /// Units left unspent.
    pub(crate) units: u64,
    /// The Redis time the lease was taken at.
    pub(crate) t0: Micros,
    /// The lease's `reset_after` right after it was taken.
    pub(crate) reset_after: Micros,
}

/// What one lease run answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Lease {
    /// The Redis time of the run.
    pub(crate) t: Micros,
    /// Units taken (0, or between `need` and `n`).
    pub(crate) units: u64,
    /// A peek after the lease: remaining.
    pub(crate) remaining: u64,
    /// A peek after the lease: reset_after, µs.
    pub(crate) reset_after: Micros,
    /// µs until a check of cost `n` would be admitted (0: now); `None`: never.
    pub(crate) wait: Option<Micros>,
    /// The end of the current window (fixed and sliding window).
    pub(crate) window_end: Option<Micros>,
}

impl RedisStore {
    /// Leases between `need` and `n` units of (rule, key) at the server's
    /// time (or `at`, for tests), first giving back `give_back`. Takes
    /// nothing when fewer than `need` units are available. `n` must not
    /// exceed the rule's capacity. One script run: one Redis call.
    #[cfg(test)]
    pub(crate) async fn lease(
        &self,
        rule: &Rule,
        key: &[u8],
        need: u64,
        n: u64,
        give_back: Option<GiveBack>,
        at: Option<Micros>,
    ) -> Result<Lease, StoreError> {
        let redis_key = keys::redis_key(&self.inner.prefix, rule.name(), rule.algorithm(), key);
        self.lease_at(&redis_key, rule, need, n, give_back, at)
            .await
    }

    /// [`RedisStore::lease`] on the Redis key of the pair (see
    /// [`RedisStore::redis_key`]).
    pub(crate) async fn lease_at(
        &self,
        redis_key: &[u8],
        rule: &Rule,
        need: u64,
        n: u64,
        give_back: Option<GiveBack>,
        at: Option<Micros>,
    ) -> Result<Lease, StoreError> {
        let code = u64::from(scripts::code(rule.algorithm()));
        let params = if matches!(
            rule.algorithm(),
            crate::Algorithm::Gcra | crate::Algorithm::TokenBucket
        ) {
            [rule.tau_micros(), rule.interval_micros(), rule.burst(), 0]
        } else {
            [rule.period_micros(), rule.limit(), 0, 0]
        };
        let g = give_back.unwrap_or(GiveBack {
            units: 0,
            t0: 0,
            reset_after: 0,
        });
        let margin = if at.is_some() {
            self.inner.margin_ms
        } else {
            0
        };
        let numbers = [
            margin,
            code,
            params[0],
            params[1],
            params[2],
            params[3],
            need,
            n,
            g.units,
            g.t0,
            g.reset_after,
        ];
        let texts: Vec<String> = numbers.iter().map(u64::to_string).collect();
        let t_arg = at.map(|t| t.to_string()).unwrap_or_default();
        let mut args: Vec<&[u8]> = Vec::with_capacity(16);
        args.extend([&b"EVALSHA"[..], LEASE.sha.as_bytes(), b"1", redis_key]);
        args.push(t_arg.as_bytes());
        args.extend(texts.iter().map(String::as_bytes));
        let ints = self.run_lease(&mut args).await?;
        parse(&ints)
    }

    /// Sends the lease command in `args` (`EVALSHA sha …`), by source on
    /// `NOSCRIPT`; returns the reply's integers.
    async fn run_lease(&self, args: &mut [&[u8]]) -> Result<Vec<i64>, StoreError> {
        let Backend::Lean(conn) = &self.inner.backend else {
            let build = |args: &[&[u8]]| {
                let mut cmd = redis::cmd(std::str::from_utf8(args[0]).unwrap_or("EVALSHA"));
                for a in &args[1..] {
                    cmd.arg(*a);
                }
                cmd
            };
            let reply: Vec<i64> = match self.query_raw(&build(args)).await {
                Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                    args[0] = b"EVAL";
                    args[1] = LEASE.source.as_bytes();
                    self.query_raw(&build(args))
                        .await
                        .map_err(|e| store_error(&e))?
                }
                other => other.map_err(|e| store_error(&e))?,
            };
            return Ok(reply);
        };
        let mut retried = false;
        loop {
            let encode = |out: &mut Vec<u8>, _: &mut super::RuleCache| resp::command(out, args);
            match conn.call(encode).await? {
                Reply::Ints(ints) => return Ok(ints.as_slice().to_vec()),
                Reply::Other(Value::Array(values)) => {
                    return values
                        .iter()
                        .map(|v| match v {
                            Value::Int(i) => Ok(*i),
                            other => Err(protocol(format!("the lease script answered {other:?}"))),
                        })
                        .collect();
                }
                Reply::Error(e) if args[0] == b"EVALSHA" && e.starts_with("NOSCRIPT") => {
                    args[0] = b"EVAL";
                    args[1] = LEASE.source.as_bytes();
                }
                Reply::Error(e)
                    if !retried && e.starts_with("READONLY") && conn.follows_sentinel() =>
                {
                    retried = true;
                }
                Reply::Error(e) => return Err(conn::server_error(&e)),
                Reply::Other(v) => {
                    return Err(protocol(format!("the lease script answered {v:?}")));
                }
            }
        }
    }
}

fn parse(reply: &[i64]) -> Result<Lease, StoreError> {
    let [t, units, remaining, reset_after, wait, window_end] = reply else {
        return Err(protocol(format!(
            "the lease script replied {reply:?}, not 6 integers"
        )));
    };
    let unsigned = |v: i64| u64::try_from(v).map_err(|_| protocol(format!("negative value {v}")));
    Ok(Lease {
        t: unsigned(*t)?,
        units: unsigned(*units)?,
        remaining: unsigned(*remaining)?,
        reset_after: unsigned(*reset_after)?,
        wait: u64::try_from(*wait).ok(),
        window_end: u64::try_from(*window_end).ok(),
    })
}
