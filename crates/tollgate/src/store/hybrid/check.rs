//! Deciding checks: spent from the units at hand when they suffice,
//! otherwise from a batch taken from Redis (one batch call in flight per
//! key) and decided all-or-nothing.

use std::sync::atomic::Ordering;

use futures_util::future::join_all;

use super::plan::Plan;
use super::{HybridStore, Pair};
use crate::decision::{Decision, MultiDecision};
use crate::error::StoreError;
use crate::rule::Rule;
use crate::store::{KeyCheck, Store};
use crate::time::Micros;

impl HybridStore {
    pub(super) async fn check_one(
        &self,
        rule: &Rule,
        key: &[u8],
        cost: u64,
        at: Option<Micros>,
    ) -> Result<Decision, StoreError> {
        if at.is_some() || cost == 0 || cost > rule.capacity() {
            return self.passed_through(rule, key, cost, at).await;
        }
        let pair = self.pair(rule, key, cost);
        // The fast path: units at hand and due, or a remembered denial. A
        // per-call limit never has units at hand (never batched) and is
        // looked for below, off this path.
        {
            let now = self.inner.clock.now();
            let mut shard = self.inner.shards[pair.shard].lock();
            shard.checks += 1;
            if let Some(e) = shard.get_mut(&pair.hash) {
                e.expire(now);
                if e.units >= cost {
                    e.last_used = now;
                    if e.is_due(now, cost) {
                        e.spend(cost);
                        return Ok(e.admitted(now));
                    }
                    // due later: this replica's next units are already in
                    // its batch, asking Redis would only take further ahead
                    return Ok(e.denied(now, cost));
                }
                // An expired batch's unspent units lift the remembered
                // denial: they go back, and this check re-asks, in one call.
                if now < e.not_before && e.give_back.is_none() {
                    e.last_used = now;
                    return Ok(e.denied(now, cost));
                }
            }
        }
        if self.per_call(rule) {
            // counted above already
            self.inner.calls.fetch_add(1, Ordering::Relaxed);
            return self
                .inner
                .redis
                .check(rule, key, cost, self.redis_time(at))
                .await;
        }
        let decided = self.decide(std::slice::from_ref(&pair)).await?;
        Ok(decided.decisions[0])
    }

    /// A check decided in Redis (explicit times, peeks, costs above the
    /// capacity): one call.
    async fn passed_through(
        &self,
        rule: &Rule,
        key: &[u8],
        cost: u64,
        at: Option<Micros>,
    ) -> Result<Decision, StoreError> {
        self.inner.checks.fetch_add(1, Ordering::Relaxed);
        self.inner.calls.fetch_add(1, Ordering::Relaxed);
        self.inner
            .redis
            .check(rule, key, cost, self.redis_time(at))
            .await
    }

    pub(super) async fn check_many(
        &self,
        checks: &[KeyCheck<'_>],
        at: Option<Micros>,
    ) -> Result<MultiDecision, StoreError> {
        self.inner.checks.fetch_add(1, Ordering::Relaxed);
        let mut pairs: Vec<Pair<'_>> = Vec::with_capacity(checks.len());
        let mut index = Vec::with_capacity(checks.len());
        for c in checks {
            let p = self.pair(c.rule, c.key, c.cost);
            if let Some(i) = pairs.iter().position(|q| q.hash == p.hash) {
                pairs[i].cost = pairs[i].cost.saturating_add(c.cost);
                index.push(i);
            } else {
                index.push(pairs.len());
                pairs.push(p);
            }
        }
        if at.is_some()
            || pairs
                .iter()
                .any(|p| p.cost == 0 || p.cost > p.rule.capacity() || self.per_call(p.rule))
        {
            self.inner.calls.fetch_add(1, Ordering::Relaxed);
            return self
                .inner
                .redis
                .check_all(checks, self.redis_time(at))
                .await;
        }
        let decided = self.decide(&pairs).await?;
        Ok(MultiDecision::from_decisions(
            index.into_iter().map(|i| decided.decisions[i]).collect(),
        ))
    }

    /// Decides merged pairs (each cost between 1 and its capacity)
    /// all-or-nothing: locally when every pair has the units, or when one
    /// is known exhausted; otherwise after taking batches (single-flight
    /// per key) for the pairs that need them.
    async fn decide(&self, pairs: &[Pair<'_>]) -> Result<MultiDecision, StoreError> {
        let inner = &*self.inner;
        let mut shard_ids: Vec<usize> = pairs.iter().map(|p| p.shard).collect();
        shard_ids.sort_unstable();
        shard_ids.dedup();
        // The flight this caller waited for (pair, generation then): its
        // error is this caller's error.
        let mut waited: Option<(usize, u64)> = None;
        loop {
            let (flights, calls) = match inner.plan(pairs, &shard_ids, waited) {
                Plan::Done(result) => return result,
                Plan::Retry => {
                    tokio::task::yield_now().await;
                    continue;
                }
                Plan::Wait(notified, w) => {
                    waited = Some(w);
                    notified.await;
                    continue;
                }
                Plan::TakeBatches(flights, calls) => (flights, calls),
            };
            let sent = inner.clock.now();
            inner.calls.fetch_add(calls.len() as u64, Ordering::Relaxed);
            let results = join_all(calls.iter().map(|c| {
                let rule = pairs[c.pair].rule;
                inner.redis.take_batch_at(
                    &c.redis_key,
                    rule,
                    c.need,
                    c.n,
                    c.give_back,
                    c.horizon,
                    inner.clock_time.then_some(sent),
                )
            }))
            .await;
            let received = inner.clock.now();
            let mut error = None;
            // pairs whose batch could not cover their cost: when the same
            // check would be admitted (µs from `received`)
            let mut short: Vec<(usize, Option<Micros>)> = Vec::new();
            for (c, result) in calls.iter().zip(results) {
                let p = &pairs[c.pair];
                let mut shard = inner.shards[p.shard].lock();
                let e = inner.entry(&mut shard, p, received);
                e.generation += 1;
                match result {
                    Ok(batch) => {
                        e.failed = None;
                        inner.apply(e, &batch, c.horizon > 0, sent, received);
                        if batch.units < c.need {
                            short.push((c.pair, batch.wait_need));
                        }
                    }
                    Err(err) => {
                        e.failed = Some((e.generation, err.clone()));
                        error = Some(err);
                    }
                }
            }
            drop(flights);
            if let Some(err) = error {
                return Err(err);
            }
            if !short.is_empty() {
                // Denied by Redis itself: answer now (asking again at once
                // would be denied again), consuming nothing.
                return Ok(inner.refused(pairs, &shard_ids, &short, received));
            }
        }
    }
}
