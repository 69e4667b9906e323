//! Batches for the hybrid store: take up to `n` units of a (rule, key) in
//! one script run, giving back what an earlier batch left unspent (see
//! `scripts/hybrid_batch.lua` for the exact semantics). Not a concurrency
//! rule's lease (slots held by one request), nor the connection's batch of
//! checks sent as one run (`conn/batch.rs`).

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

/// The hybrid batch script: the prelude, all five algorithms, then
/// `hybrid_batch.lua`.
struct BatchScript {
    source: &'static str,
    sha: String,
}

static BATCH: LazyLock<BatchScript> = LazyLock::new(|| {
    let source = concat!(
        "local EVAL = true\n",
        include_str!("scripts/prelude.lua"),
        include_str!("scripts/gcra.lua"),
        include_str!("scripts/token_bucket.lua"),
        include_str!("scripts/fixed_window.lua"),
        include_str!("scripts/sliding_window.lua"),
        include_str!("scripts/sliding_log.lua"),
        include_str!("scripts/hybrid_batch.lua"),
    );
    BatchScript {
        source,
        sha: sha1_smol::Sha1::from(source).digest().to_string(),
    }
});

/// Units of an earlier batch to give back before taking another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GiveBack {
    /// Units left unspent.
    pub(crate) units: u64,
    /// The Redis time the batch was taken at.
    pub(crate) t0: Micros,
    /// The batch's `reset_after` right after it was taken.
    pub(crate) reset_after: Micros,
}

/// What one batch run answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Batch {
    /// The Redis time of the run.
    pub(crate) t: Micros,
    /// Units taken (0, or between `need` and `n`).
    pub(crate) units: u64,
    /// A peek after the batch: remaining.
    pub(crate) remaining: u64,
    /// A peek after the batch: reset_after, µs.
    pub(crate) reset_after: Micros,
    /// µs until a check of cost `n` would be admitted (0: now); `None`: never.
    pub(crate) wait: Option<Micros>,
    /// The end of the current window (fixed and sliding window).
    pub(crate) window_end: Option<Micros>,
    /// µs until a check of cost `need` would be admitted (0: now); `None`:
    /// never.
    pub(crate) wait_need: Option<Micros>,
    /// A paced batch (GCRA / token bucket with a horizon): µs from `t` to
    /// the time its first unit may be spent (negative: units were there
    /// already); unit `j` may be spent `(j − 1) × T` later. 0 otherwise.
    pub(crate) first: i64,
}

impl RedisStore {
    /// Takes a batch of between `need` and `n` units of (rule, key) at the
    /// server's time (or `at`, for tests), first giving back `give_back`. Takes
    /// nothing when fewer than `need` units are available. `n` must not
    /// exceed the rule's capacity. One script run: one Redis call.
    #[cfg(test)]
    pub(crate) async fn take_batch(
        &self,
        rule: &Rule,
        key: &[u8],
        need: u64,
        n: u64,
        give_back: Option<GiveBack>,
        at: Option<Micros>,
    ) -> Result<Batch, StoreError> {
        let redis_key = keys::redis_key(&self.inner.prefix, rule.name(), rule.algorithm(), key);
        self.take_batch_at(&redis_key, rule, need, n, give_back, 0, at)
            .await
    }

    /// [`RedisStore::take_batch`] on the Redis key of the pair (see
    /// [`RedisStore::redis_key`]). A `horizon` above 0 (GCRA and token
    /// bucket) makes it a paced batch: a charge of up to `n` units keeping
    /// the debt within `horizon` units, spendable one per `T` from
    /// [`Batch::first`] (`scripts/hybrid_batch.lua`). At most the rule's
    /// `max_debt`.
    #[allow(clippy::too_many_arguments)] // one script's arguments, spelled out
    pub(crate) async fn take_batch_at(
        &self,
        redis_key: &[u8],
        rule: &Rule,
        need: u64,
        n: u64,
        give_back: Option<GiveBack>,
        horizon: u64,
        at: Option<Micros>,
    ) -> Result<Batch, StoreError> {
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
            horizon.min(rule.max_debt()),
        ];
        let texts: Vec<String> = numbers.iter().map(u64::to_string).collect();
        let t_arg = at.map(|t| t.to_string()).unwrap_or_default();
        let mut args: Vec<&[u8]> = Vec::with_capacity(17);
        args.extend([&b"EVALSHA"[..], BATCH.sha.as_bytes(), b"1", redis_key]);
        args.push(t_arg.as_bytes());
        args.extend(texts.iter().map(String::as_bytes));
        let ints = self.run_batch(&mut args).await?;
        parse(&ints)
    }

    /// Sends the batch command in `args` (`EVALSHA sha …`), by source on
    /// `NOSCRIPT`; returns the reply's integers.
    async fn run_batch(&self, args: &mut [&[u8]]) -> Result<Vec<i64>, StoreError> {
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
                    args[1] = BATCH.source.as_bytes();
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
            let encode =
                |out: &mut Vec<u8>, _: &mut super::encode::RuleCache| resp::command(out, args);
            match conn.call(encode).await? {
                Reply::Ints(ints) => return Ok(ints.as_slice().to_vec()),
                Reply::Other(Value::Array(values)) => {
                    return values
                        .iter()
                        .map(|v| match v {
                            Value::Int(i) => Ok(*i),
                            other => Err(protocol(format!("the batch script answered {other:?}"))),
                        })
                        .collect();
                }
                Reply::Error(e) if args[0] == b"EVALSHA" && e.starts_with("NOSCRIPT") => {
                    args[0] = b"EVAL";
                    args[1] = BATCH.source.as_bytes();
                }
                Reply::Error(e)
                    if !retried && e.starts_with("READONLY") && conn.follows_sentinel() =>
                {
                    retried = true;
                }
                Reply::Error(e) => return Err(conn::server_error(&e)),
                Reply::Other(v) => {
                    return Err(protocol(format!("the batch script answered {v:?}")));
                }
            }
        }
    }
}

fn parse(reply: &[i64]) -> Result<Batch, StoreError> {
    let [
        t,
        units,
        remaining,
        reset_after,
        wait,
        window_end,
        wait_need,
        first,
    ] = reply
    else {
        return Err(protocol(format!(
            "the batch script replied {reply:?}, not 8 integers"
        )));
    };
    let unsigned = |v: i64| u64::try_from(v).map_err(|_| protocol(format!("negative value {v}")));
    Ok(Batch {
        t: unsigned(*t)?,
        units: unsigned(*units)?,
        remaining: unsigned(*remaining)?,
        reset_after: unsigned(*reset_after)?,
        wait: u64::try_from(*wait).ok(),
        window_end: u64::try_from(*window_end).ok(),
        wait_need: u64::try_from(*wait_need).ok(),
        first: *first,
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::algorithm::{self, KeyState};
    use crate::rule::{Algorithm, RuleSpec};
    use crate::store::Store;
    use crate::store::redis::RedisOptions;

    /// xorshift64*: reproducible histories without a dependency.
    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
        }
    }

    fn micros(d: Duration) -> u64 {
        u64::try_from(d.as_micros()).unwrap()
    }

    /// For every algorithm, on random histories of checks and batches at
    /// explicit times: a batch takes exactly the largest cost the Rust
    /// algorithm admits (cost k admits, k + 1 denies, or k = n), nothing
    /// when that is below `need`; it leaves the state a check of cost k
    /// leaves; its peek fields and its wait match the Rust algorithm; and
    /// giving units back at once leaves the state a batch of k − u leaves.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_batch_takes_the_largest_cost_the_algorithm_admits() {
        let server = redis_harness::RedisServer::start();
        let store = RedisStore::connect(&server.url(), RedisOptions::default())
            .await
            .unwrap();
        for algorithm in Algorithm::RATES {
            let mut spec = RuleSpec::new(
                format!("batch_{algorithm}"),
                algorithm,
                10,
                Duration::from_secs(1),
            );
            if algorithm.has_burst() {
                spec = spec.burst(15);
            }
            let rule = spec.build().unwrap();
            let capacity = rule.capacity();
            let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ u64::from(scripts::code(algorithm)));
            let mut state = KeyState::Empty;
            let mut t: Micros = 1_764_000_000_000_000;
            let (mut batches, mut partial, mut refused) = (0, 0, 0);
            for step in 0..400 {
                t += rng.below(250_000);
                let what = format!("{algorithm} step {step} t {t}");
                if rng.below(2) == 0 {
                    let cost = rng.below(4);
                    let d = store.check(&rule, b"k", cost, Some(t)).await.unwrap();
                    let want = algorithm::decide(&rule, &mut state, t, cost);
                    assert_eq!(d, want, "{what}: check of {cost}");
                    continue;
                }
                let n = 1 + rng.below(capacity);
                let need = if rng.below(3) == 0 {
                    1 + rng.below(n)
                } else {
                    1
                };
                let before = state.clone();
                let batch = store
                    .take_batch(&rule, b"k", need, n, None, Some(t))
                    .await
                    .unwrap();
                assert_eq!(batch.t, t, "{what}");
                let k = batch.units;
                let admits = |c: u64| algorithm::evaluate(&rule, &before, t, c).allowed;
                if k > 0 {
                    batches += 1;
                    assert!(k >= need && k <= n, "{what}: {k} not in [{need}, {n}]");
                    assert!(admits(k), "{what}: cost {k} is denied");
                    if k < n {
                        partial += 1;
                    }
                } else {
                    refused += 1;
                }
                let largest = (0..=n).rev().find(|&c| admits(c)).unwrap_or(0);
                let expected = if largest >= need { largest } else { 0 };
                assert_eq!(k, expected, "{what}: n {n} need {need}");
                algorithm::commit(&rule, &mut state, t, k);
                let peek = algorithm::evaluate(&rule, &state, t, 0);
                assert_eq!(batch.remaining, peek.remaining, "{what}: remaining");
                assert_eq!(batch.reset_after, micros(peek.reset_after), "{what}: reset");
                let next = algorithm::evaluate(&rule, &state, t, n);
                let wait = if next.allowed {
                    Some(0)
                } else {
                    next.retry_after.map(micros)
                };
                assert_eq!(batch.wait, wait, "{what}: wait for {n}");
                let short = algorithm::evaluate(&rule, &state, t, need);
                let wait_need = if short.allowed {
                    Some(0)
                } else {
                    short.retry_after.map(micros)
                };
                assert_eq!(batch.wait_need, wait_need, "{what}: wait for {need}");
                let window_end =
                    matches!(algorithm, Algorithm::FixedWindow | Algorithm::SlidingWindow)
                        .then(|| (t / rule.period_micros() + 1) * rule.period_micros());
                assert_eq!(batch.window_end, window_end, "{what}");
                if k > 0 && rng.below(2) == 0 {
                    let u = 1 + rng.below(k);
                    let g = GiveBack {
                        units: u,
                        t0: t,
                        reset_after: batch.reset_after,
                    };
                    store
                        .take_batch(&rule, b"k", 0, 0, Some(g), Some(t))
                        .await
                        .unwrap();
                    state = before;
                    algorithm::commit(&rule, &mut state, t, k - u);
                }
                let d = store.check(&rule, b"k", 0, Some(t)).await.unwrap();
                assert_eq!(d, algorithm::evaluate(&rule, &state, t, 0), "{what}: peek");
            }
            assert!(
                batches > 50 && partial > 5 && refused > 5,
                "{algorithm}: {batches} {partial} {refused}"
            );
        }
        assert!(
            server.keys_without_ttl().is_empty(),
            "{:?}",
            server.keys_without_ttl()
        );
    }

    /// A paced batch (GCRA, token bucket; a horizon): on random histories
    /// of checks and paced batches at explicit times, it is the charge of
    /// `min(n, units keeping the debt within the horizon)` (nothing below
    /// `need`), leaving the state that charge leaves; and its first unit is
    /// spendable exactly when a check of cost 1 would have been admitted
    /// before it, each later unit `T` after the one before.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_paced_batch_is_a_charge_spent_when_checks_would_be_admitted() {
        let server = redis_harness::RedisServer::start();
        let store = RedisStore::connect(&server.url(), RedisOptions::default())
            .await
            .unwrap();
        for algorithm in [Algorithm::Gcra, Algorithm::TokenBucket] {
            let rule = RuleSpec::new(
                format!("paced_{algorithm}"),
                algorithm,
                10,
                Duration::from_secs(1),
            )
            .burst(15)
            .build()
            .unwrap();
            let (tau, interval) = (rule.tau_micros(), rule.interval_micros());
            let key = keys::redis_key(&store.inner.prefix, rule.name(), algorithm, b"k");
            let mut rng = Rng(0x5DEE_CE66_D1CE_4E5B ^ u64::from(scripts::code(algorithm)));
            let mut state = KeyState::Empty;
            let mut t: Micros = 1_764_000_000_000_000;
            let (mut full, mut partial, mut refused) = (0, 0, 0);
            for step in 0..300 {
                t += rng.below(400_000);
                let what = format!("{algorithm} step {step} t {t}");
                if rng.below(3) == 0 {
                    let d = store.check(&rule, b"k", 1, Some(t)).await.unwrap();
                    assert_eq!(d, algorithm::decide(&rule, &mut state, t, 1), "{what}");
                    continue;
                }
                let n = 1 + rng.below(15);
                let need = 1 + rng.below(n);
                let horizon = 1 + rng.below(20);
                let batch = store
                    .take_batch_at(&key, &rule, need, n, None, horizon, Some(t))
                    .await
                    .unwrap();
                let before = state.clone();
                let used = micros(algorithm::evaluate(&rule, &before, t, 0).reset_after);
                let fit = (tau + horizon * interval).saturating_sub(used) / interval;
                let want = if fit >= need { fit.min(n) } else { 0 };
                assert_eq!(
                    batch.units, want,
                    "{what}: n {n} need {need} horizon {horizon}"
                );
                match want {
                    0 => refused += 1,
                    k if k == n => full += 1,
                    _ => partial += 1,
                }
                if want > 0 {
                    let c = algorithm::charge(&rule, &mut state, t, want);
                    assert_eq!(c.clamped, 0, "{what}");
                    let first =
                        i64::try_from(used + interval).unwrap() - i64::try_from(tau).unwrap();
                    assert_eq!(batch.first, first, "{what}");
                    // unit 1 spendable at t + first: a check of 1 then is
                    // admitted by the state before the batch, not 1 µs sooner
                    let at = t.checked_add_signed(first).unwrap();
                    if first > 0 {
                        assert!(algorithm::evaluate(&rule, &before, at, 1).allowed, "{what}");
                        assert!(
                            !algorithm::evaluate(&rule, &before, at - 1, 1).allowed,
                            "{what}"
                        );
                    }
                } else {
                    assert_eq!(batch.first, 0, "{what}");
                }
                let peek = store.check(&rule, b"k", 0, Some(t)).await.unwrap();
                assert_eq!(
                    peek,
                    algorithm::evaluate(&rule, &state, t, 0),
                    "{what}: peek"
                );
                assert_eq!(batch.remaining, peek.remaining, "{what}");
            }
            assert!(
                full > 20 && partial > 5 && refused > 5,
                "{algorithm}: {full} {partial} {refused}"
            );
        }
        assert!(
            server.keys_without_ttl().is_empty(),
            "{:?}",
            server.keys_without_ttl()
        );
    }

    /// GCRA and token bucket give back only what cannot have overflowed:
    /// once the bucket has refilled past the batch, a give-back adds
    /// nothing (the units would have been lost to the full bucket anyway),
    /// while the window algorithms give back exactly, in the batch's window.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_late_give_back_never_makes_the_state_more_generous() {
        let server = redis_harness::RedisServer::start();
        let store = RedisStore::connect(&server.url(), RedisOptions::default())
            .await
            .unwrap();
        for algorithm in [Algorithm::Gcra, Algorithm::TokenBucket] {
            let rule = RuleSpec::new(
                format!("late_{algorithm}"),
                algorithm,
                10,
                Duration::from_secs(1),
            )
            .build()
            .unwrap();
            let t0: Micros = 1_764_000_000_000_000;
            // take 6 of 10 at t0; reset_after = 600 ms
            let batch = store
                .take_batch(&rule, b"k", 1, 6, None, Some(t0))
                .await
                .unwrap();
            assert_eq!((batch.units, batch.reset_after), (6, 600_000));
            // 200 ms later 2 more are spent by someone else (tat = t0 + 800 ms)
            let t1 = t0 + 200_000;
            assert!(store.check(&rule, b"k", 2, Some(t1)).await.unwrap().allowed);
            // at t0 + 500 ms, 5 unspent units come back: only what the batch
            // still holds above t (tat_batch - t = 100 ms = 1 unit)
            let t2 = t0 + 500_000;
            let g = GiveBack {
                units: 5,
                t0,
                reset_after: batch.reset_after,
            };
            store
                .take_batch(&rule, b"k", 0, 0, Some(g), Some(t2))
                .await
                .unwrap();
            let peek = store.check(&rule, b"k", 0, Some(t2)).await.unwrap();
            // without the give-back: tat = t0 + 800 ms, 3 remaining at t2;
            // with it: tat = t0 + 700 ms, 8 remaining
            assert_eq!(peek.remaining, 8, "{algorithm}");
            // much later the bucket is full: a give-back changes nothing
            let t3 = t0 + 5_000_000;
            let g = GiveBack {
                units: 5,
                t0,
                reset_after: batch.reset_after,
            };
            store
                .take_batch(&rule, b"k", 0, 0, Some(g), Some(t3))
                .await
                .unwrap();
            let peek = store.check(&rule, b"k", 0, Some(t3)).await.unwrap();
            assert_eq!(peek.remaining, 10, "{algorithm}");
        }
        assert!(
            server.keys_without_ttl().is_empty(),
            "{:?}",
            server.keys_without_ttl()
        );
    }
}
