//! Checks: a single check (batched with concurrent ones on the lean
//! connection), and multi-rule checks, all-or-nothing also across the nodes
//! of a cluster.

use futures_util::future::join_all;

use super::encode::{Pair, Pairs, RuleCache, encode_check, subset};
use super::eval::{decision, gcra_decision, lean_eval};
use super::{Backend, RedisStore, keys, protocol, scripts};
use crate::decision::{Decision, MultiDecision};
use crate::error::StoreError;
use crate::rule::{Algorithm, Rule};
use crate::store::KeyCheck;
use crate::time::Micros;

/// Merges pairs naming the same (rule, key), adding their costs. Returns the
/// merged pairs and, for each input, the index of its merged pair.
fn merge<'a>(prefix: &str, checks: &[KeyCheck<'a>]) -> (Vec<Pair<'a>>, Vec<usize>) {
    let mut pairs: Vec<Pair<'a>> = Vec::with_capacity(checks.len());
    let mut index = Vec::with_capacity(checks.len());
    for c in checks {
        let key = keys::redis_key(prefix, c.rule.name(), c.rule.algorithm(), c.key);
        if let Some(i) = pairs.iter().position(|p| p.key == key) {
            pairs[i].cost = pairs[i].cost.saturating_add(c.cost);
            index.push(i);
        } else {
            index.push(pairs.len());
            pairs.push(Pair {
                rule: c.rule,
                key,
                cost: c.cost,
            });
        }
    }
    (pairs, index)
}

impl RedisStore {
    pub(super) async fn check_one(
        &self,
        rule: &Rule,
        key: &[u8],
        cost: u64,
        at: Option<Micros>,
    ) -> Result<Decision, StoreError> {
        let reply = match &self.inner.backend {
            // May share a script run with other checks (see `conn/`).
            Backend::Lean(conn) => {
                let (code, prefix) = (scripts::code(rule.algorithm()), &*self.inner.prefix);
                lean_eval(conn, |via| {
                    let encode = move |out: &mut Vec<u8>, cache: &mut RuleCache| {
                        encode_check(out, cache, prefix, rule, key, cost)
                    };
                    conn.check(code, via, at, encode)
                })
                .await?
            }
            _ => {
                let script = self.inner.scripts.single(rule.algorithm());
                self.eval(script, Pairs::One { rule, key, cost }, "c", at)
                    .await?
            }
        };
        match reply.as_slice() {
            [t, r @ ..] if r.len() == 4 && *t >= 0 => decision(r, rule),
            // a GCRA check decided in a batch (see `gcra_decision`)
            [t, used] if *t >= 0 && rule.algorithm() == Algorithm::Gcra => {
                gcra_decision(*used, rule, cost)
            }
            other => Err(protocol(format!(
                "script replied {other:?} to a single check"
            ))),
        }
    }

    pub(super) async fn check_many(
        &self,
        checks: &[KeyCheck<'_>],
        at: Option<Micros>,
    ) -> Result<MultiDecision, StoreError> {
        let (pairs, index) = merge(&self.inner.prefix, checks);
        let multi = &self.inner.scripts.multi;
        let decided = if matches!(self.inner.backend, Backend::Cluster { .. }) {
            self.check_across_slots(pairs, at).await?
        } else {
            self.run(multi, &pairs, "c", at).await?.1
        };
        Ok(MultiDecision::from_decisions(
            index.into_iter().map(|i| decided[i]).collect(),
        ))
    }

    /// All-or-nothing over pairs that may live on different cluster nodes.
    ///
    /// Pairs are grouped by slot; each group is atomic by itself. First a
    /// dry run of every group (in parallel) decides without writing: if any
    /// pair denies, nothing was consumed and that is the answer. Otherwise
    /// the groups consume in slot order; if one now denies (traffic raced
    /// in between), the groups already consumed are refunded.
    async fn check_across_slots(
        &self,
        pairs: Vec<Pair<'_>>,
        at: Option<Micros>,
    ) -> Result<Vec<Decision>, StoreError> {
        let multi = &self.inner.scripts.multi;
        let mut groups: Vec<(u16, Vec<usize>)> = Vec::new();
        for (i, p) in pairs.iter().enumerate() {
            let slot = keys::slot(&p.key);
            match groups.iter_mut().find(|g| g.0 == slot) {
                Some(g) => g.1.push(i),
                None => groups.push((slot, vec![i])),
            }
        }
        if groups.len() == 1 {
            return Ok(self.run(multi, &pairs, "c", at).await?.1);
        }
        groups.sort_unstable_by_key(|g| g.0);
        let grouped: Vec<Vec<Pair<'_>>> = groups.iter().map(|g| subset(&pairs, &g.1)).collect();
        let mut out: Vec<Option<Decision>> = vec![None; pairs.len()];

        let dry = join_all(grouped.iter().map(|g| self.run(multi, g, "d", at))).await;
        let mut all = true;
        for (g, result) in groups.iter().zip(dry) {
            let (_, ds) = result?;
            for (&i, d) in g.1.iter().zip(ds) {
                all &= d.allowed;
                out[i] = Some(d);
            }
        }
        if all {
            let mut consumed: Vec<(usize, Micros)> = Vec::new();
            for (n, g) in groups.iter().enumerate() {
                let (t, ds) = match self.run(multi, &grouped[n], "c", at).await {
                    Ok(r) => r,
                    Err(e) => {
                        self.refund(&grouped, &consumed).await;
                        return Err(e);
                    }
                };
                let admitted = ds.iter().all(|d| d.allowed);
                for (&i, d) in g.1.iter().zip(ds) {
                    out[i] = Some(d);
                }
                if admitted {
                    consumed.push((n, t));
                } else {
                    for (m, ds) in self.refund(&grouped, &consumed).await {
                        for (&i, d) in groups[m].1.iter().zip(ds) {
                            out[i] = Some(d);
                        }
                    }
                    break;
                }
            }
        }
        out.into_iter()
            .map(|d| d.ok_or_else(|| protocol("a pair was left undecided")))
            .collect()
    }

    /// Gives back what `consumed` groups took; returns their peeks after.
    async fn refund(
        &self,
        grouped: &[Vec<Pair<'_>>],
        consumed: &[(usize, Micros)],
    ) -> Vec<(usize, Vec<Decision>)> {
        let multi = &self.inner.scripts.multi;
        let runs = consumed
            .iter()
            .map(|&(n, t)| async move { (n, self.run(multi, &grouped[n], "r", Some(t)).await) });
        join_all(runs)
            .await
            .into_iter()
            .filter_map(|(n, r)| r.ok().map(|(_, ds)| (n, ds)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::rule::{Algorithm, RuleSpec};
    use crate::store::redis::RedisOptions;

    /// The refund a cross-node multi-check issues when a later node denies
    /// (traffic raced in between its dry run and its consumption) gives back
    /// exactly what was taken: every algorithm's state reads as before.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_refund_restores_the_state_before_the_consumption() {
        let server = redis_harness::RedisServer::start();
        let store = RedisStore::connect(&server.url(), RedisOptions::default())
            .await
            .expect("connect");
        let multi = &store.inner.scripts.multi;
        for algorithm in Algorithm::RATES {
            let rule = RuleSpec::new(
                format!("r_{algorithm}"),
                algorithm,
                5,
                Duration::from_secs(10),
            )
            .build()
            .unwrap();
            let key = store.redis_key(&rule, b"k");
            let pair = |cost| Pair {
                rule: &rule,
                key: key.clone(),
                cost,
            };
            let t0 = 1_764_000_000_000_000;
            // Some earlier history, then a peek to compare against.
            store.run(multi, &[pair(2)], "c", Some(t0)).await.unwrap();
            let t1 = t0 + 1_300_000;
            let (_, before) = store.run(multi, &[pair(0)], "c", Some(t1)).await.unwrap();
            // Consume 2 at t1, then refund them.
            let (t, taken) = store.run(multi, &[pair(2)], "c", Some(t1)).await.unwrap();
            assert_eq!(t, t1);
            assert!(taken[0].allowed, "{algorithm}");
            assert_eq!(taken[0].remaining + 2, before[0].remaining, "{algorithm}");
            let (_, refunded) = store.run(multi, &[pair(2)], "r", Some(t)).await.unwrap();
            assert_eq!(refunded, before, "{algorithm}: refund peek");
            let (_, after) = store.run(multi, &[pair(0)], "c", Some(t1)).await.unwrap();
            assert_eq!(after, before, "{algorithm}: state after the refund");
        }
        assert!(server.keys_without_ttl().is_empty());
    }
}
