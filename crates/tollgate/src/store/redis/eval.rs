//! Running the scripts: `EVALSHA`, falling back to `EVAL`, over the lean
//! connection or redis-rs, and reading the decisions from their replies.

use std::time::Duration;

use redis::{Cmd, ErrorKind, RedisError, ServerErrorKind};

use super::conn::{self, Conn};
use super::encode::{Extra, Pair, Pairs, RuleCache, Run, clamp_cost, encode_run, script_args};
use super::resp::{Ints, Reply};
use super::scripts::{LIBRARY, Script, Via};
use super::{Backend, RedisStore, protocol, store_error};
use crate::decision::Decision;
use crate::error::{StoreError, StoreErrorKind};
use crate::rule::Rule;
use crate::time::Micros;

impl RedisStore {
    pub(super) async fn query<T: redis::FromRedisValue>(&self, cmd: &Cmd) -> Result<T, StoreError> {
        self.query_raw(cmd).await.map_err(|e| store_error(&e))
    }

    /// Runs `cmd` over a redis-rs connection (Cluster).
    pub(super) async fn query_raw<T: redis::FromRedisValue>(
        &self,
        cmd: &Cmd,
    ) -> Result<T, RedisError> {
        match &self.inner.backend {
            Backend::Cluster { client, conn, .. } => {
                let c = conn
                    .get_or_try_init(|| client.get_async_connection())
                    .await?;
                let result = cmd.query_async(&mut c.clone()).await;
                if result.is_err() {
                    // Slots may have moved (a failover): the breakers'
                    // domains follow.
                    self.read_slots_soon(true);
                }
                result
            }
            Backend::Lean(_) => Err(RedisError::from((
                ErrorKind::Client,
                "tollgate: query_raw on a lean connection",
            ))),
        }
    }

    /// Runs `script` over `pairs` in `mode`, falling back from EVALSHA to
    /// EVAL when the server lost its script cache. Returns the script's time
    /// and one decision per pair.
    pub(super) async fn run(
        &self,
        script: &Script,
        pairs: &[Pair<'_>],
        mode: &str,
        at: Option<Micros>,
    ) -> Result<(Micros, Vec<Decision>), StoreError> {
        let reply = self.eval(script, Pairs::Many(pairs), mode, at).await?;
        parse_reply(reply.as_slice(), pairs)
    }

    /// Runs `script` and returns its integers, falling back from EVALSHA
    /// to EVAL on `NOSCRIPT` (after a restart, a failover or `SCRIPT
    /// FLUSH`), and, behind Sentinel, trying once more on `READONLY` (the
    /// master was demoted; nothing ran, and the connection looks the new
    /// master up).
    pub(super) async fn eval(
        &self,
        script: &Script,
        pairs: Pairs<'_, '_>,
        mode: &str,
        at: Option<Micros>,
    ) -> Result<Ints, StoreError> {
        self.eval_run(
            script,
            Run {
                pairs,
                mode,
                at,
                extra: Extra::None,
            },
        )
        .await
    }

    /// Runs `script` over `run` as [`RedisStore::eval`] does.
    pub(super) async fn eval_run(
        &self,
        script: &Script,
        run: Run<'_, '_>,
    ) -> Result<Ints, StoreError> {
        let (prefix, margin_ms) = (self.inner.prefix.as_str(), self.inner.margin_ms);
        let Backend::Lean(conn) = &self.inner.backend else {
            let build = |verb: &str, body: &str| {
                let mut cmd = redis::cmd(verb);
                cmd.arg(body).arg(run.keys());
                script_args(&mut cmd, prefix, margin_ms, run);
                cmd
            };
            let reply: Vec<i64> = match self.query_raw(&build("EVALSHA", &script.sha)).await {
                Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => self
                    .query_raw(&build("EVAL", script.source))
                    .await
                    .map_err(|e| store_error(&e))?,
                other => other.map_err(|e| store_error(&e))?,
            };
            return Ok(Ints::Heap(reply));
        };
        lean_eval(conn, |via| {
            conn.call(move |out: &mut Vec<u8>, cache: &mut RuleCache| {
                encode_run(out, cache, script, via, prefix, margin_ms, run);
            })
        })
        .await
    }
}

/// Runs a script on the lean connection through `call(via)`: as the
/// library's function while the server takes them (on `Function not
/// found`, nothing ran: the library is loaded and the call made again);
/// by hash where it has no functions or refuses them, falling back to the
/// source on `NOSCRIPT` (nothing ran); behind Sentinel, trying once more
/// on `READONLY` (the master was demoted; nothing ran, and the connection
/// looks the new master up). A server that refuses scripts altogether
/// gets a clear error (docs/redis-store.md, "Functions").
pub(super) async fn lean_eval<F, C>(conn: &Conn, mut call: F) -> Result<Ints, StoreError>
where
    F: FnMut(Via) -> C,
    C: Future<Output = Result<Reply, StoreError>>,
{
    let (mut via, mut loaded, mut retried) = (conn.via(), false, false);
    // Every call together ends within the connection's timeout (see
    // `RedisStore::bounds_calls`): the first by the connection's own
    // timer, one made again by what is left.
    let deadline = tokio::time::Instant::from_std(conn::io_now() + conn.timeout());
    let late = || {
        StoreError::new(
            StoreErrorKind::Timeout,
            format!("no reply within {:?}", conn.timeout()),
        )
    };
    let mut again = false;
    loop {
        let reply = match again {
            false => call(via).await?,
            true => tokio::time::timeout_at(deadline, call(via))
                .await
                .map_err(|_| late())??,
        };
        again = true;
        match reply {
            Reply::Ints(ints) => return Ok(ints),
            // (a check asking for a function may have gone by hash, in a
            // batch with one that asked so)
            Reply::Error(e) if via >= Via::Sha && e.starts_with("NOSCRIPT") => via = Via::Source,
            Reply::Error(e) if !retried && e.starts_with("READONLY") && conn.follows_sentinel() => {
                retried = true;
            }
            Reply::Error(e) if via == Via::Function && e.starts_with("ERR Function not found") => {
                if !loaded {
                    loaded = true;
                    // (within what is left too: the load is a call)
                    let load = tokio::time::timeout_at(deadline, load_library(conn));
                    if load.await.map_err(|_| late())?? {
                        continue;
                    }
                }
                conn.without_functions();
                via = Via::Sha;
            }
            Reply::Error(e) if via == Via::Function && refuses(&e) && names_functions(&e) => {
                conn.without_functions();
                via = Via::Sha;
            }
            // EVAL may be allowed where EVALSHA is not
            Reply::Error(e)
                if via == Via::Sha && refuses(&e) && e.to_ascii_lowercase().contains("evalsha") =>
            {
                via = Via::Source;
            }
            Reply::Error(e) if refuses(&e) => {
                return Err(StoreError::new(
                    StoreErrorKind::Protocol,
                    format!(
                        "Redis refuses tollgate's scripts ({e}): tollgate needs FUNCTION LOAD \
                         and FCALL (Redis 7), or EVALSHA and EVAL, for its user"
                    ),
                ));
            }
            Reply::Error(e) => return Err(conn::server_error(&e)),
            Reply::Other(v) => return Err(protocol(format!("the script answered {v:?}"))),
        }
    }
}

/// Whether a server's error says it does not know a command or will not
/// let this user run it (so asking again the same way is worthless).
fn refuses(e: &str) -> bool {
    // (a NOPERM about keys or channels is not about the command)
    (e.starts_with("NOPERM") && e.contains("command"))
        || e.contains("unknown command")
        || e.contains("unknown subcommand")
}

/// Whether an error is about functions (`FCALL`, `FUNCTION`).
fn names_functions(e: &str) -> bool {
    let e = e.to_ascii_lowercase();
    e.contains("fcall") || e.contains("function")
}

/// Loads the function library; false when the server refuses it (then
/// the connection goes on by hash). Loaded already (by another caller, or
/// another replica) counts as loaded.
async fn load_library(conn: &Conn) -> Result<bool, StoreError> {
    // One load at a time on this connection: whoever waited while another
    // loaded calls again at once.
    let seen = conn.loads();
    let mut loads = conn.loading().await;
    if seen != Some(*loads) {
        return Ok(true);
    }
    let load = &LIBRARY.load;
    let reply = conn
        .call(move |out: &mut Vec<u8>, _: &mut RuleCache| out.extend_from_slice(load))
        .await?;
    *loads += 1;
    match reply {
        Reply::Error(e) if e.contains("already exists") => Ok(true),
        Reply::Error(e) if refuses(&e) => Ok(false),
        Reply::Error(e) => Err(conn::server_error(&format!(
            "{e} (loading the function library {})",
            LIBRARY.name
        ))),
        _ => Ok(true),
    }
}

/// One pair's decision from its four integers.
#[inline] // called per check from check.rs, another codegen unit
pub(super) fn decision(r: &[i64], rule: &Rule) -> Result<Decision, StoreError> {
    let unsigned = |v: i64| u64::try_from(v).map_err(|_| protocol(format!("negative value {v}")));
    Ok(Decision {
        allowed: r[0] == 1,
        limit: rule.capacity(),
        remaining: unsigned(r[1])?,
        reset_after: Duration::from_micros(unsigned(r[2])?),
        retry_after: if r[3] < 0 {
            None
        } else {
            Some(Duration::from_micros(unsigned(r[3])?))
        },
    })
}

/// A GCRA check's decision from its one integer in a batch's reply (see
/// `check.lua`, mode "b"): `used`, its TAT after the check minus t, when
/// it admits, else `-1 - used`. The rest follows from the rule and the
/// cost exactly as the script computes it for a single check: remaining
/// `max(tau - used, 0) / T`, and a denied check that fits (cost <= burst)
/// may retry in `used + increment - tau`.
#[inline] // called per check from check.rs, another codegen unit
pub(super) fn gcra_decision(packed: i64, rule: &Rule, cost: u64) -> Result<Decision, StoreError> {
    let allowed = packed >= 0;
    let used = if allowed {
        Some(packed)
    } else {
        (-1i64).checked_sub(packed)
    };
    let used = used
        .and_then(|u| u64::try_from(u).ok())
        .ok_or_else(|| protocol(format!("a GCRA check answered {packed}")))?;
    let cost = clamp_cost(rule, cost);
    let tau = rule.tau_micros();
    let retry_after = (!allowed && cost <= rule.burst()).then(|| {
        let due = used.saturating_add(rule.increment_micros(cost));
        Duration::from_micros(due.saturating_sub(tau))
    });
    Ok(Decision {
        allowed,
        limit: rule.capacity(),
        remaining: tau.saturating_sub(used) / rule.interval_micros().max(1),
        reset_after: Duration::from_micros(used),
        retry_after,
    })
}

fn parse_reply(reply: &[i64], pairs: &[Pair<'_>]) -> Result<(Micros, Vec<Decision>), StoreError> {
    if reply.len() != 1 + 4 * pairs.len() {
        return Err(protocol(format!(
            "script replied {} integers for {} pairs",
            reply.len(),
            pairs.len()
        )));
    }
    let t = u64::try_from(reply[0]).map_err(|_| protocol(format!("negative time {}", reply[0])))?;
    let decisions = reply[1..]
        .chunks_exact(4)
        .zip(pairs)
        .map(|(r, p)| decision(r, p.rule))
        .collect::<Result<Vec<_>, StoreError>>()?;
    Ok((t, decisions))
}
