//! In-flight limits on Redis (docs/redis.md, "Concurrency"): each pair's
//! leases in one sorted set (`{prefix}:{<rule>:<key>}:cc`) scored by their
//! expiry, time from Redis `TIME`, ended leases dropped by every run that
//! looks at the key. An acquire is all-or-nothing as a multi-rule check is,
//! also across Cluster slots (a dry run, then slot by slot, released again
//! when a later slot has no room); a release or renew runs slot by slot.

use futures_util::future::join_all;

use super::encode::{ACQUIRE, Extra, Pair, Pairs, RELEASE, RENEW, Run, subset};
use super::eval::decision;
use super::{RedisStore, keys, protocol};
use crate::decision::{Decision, MultiDecision};
use crate::error::StoreError;
use crate::rule::Rule;
use crate::store::{KeyCheck, Released};
use crate::ticket::Ticket;
use crate::time::Micros;

impl RedisStore {
    pub(super) async fn acquire_pairs(
        &self,
        checks: &[KeyCheck<'_>],
        ticket: &Ticket,
        at: Option<Micros>,
    ) -> Result<MultiDecision, StoreError> {
        let id = ticket.nonce_hex();
        let pairs = self.pairs_of(checks);
        let groups = self.slot_groups(&pairs);
        if groups.len() == 1 {
            let (_, ds) = self.lease_run(&pairs, ACQUIRE, &id, at).await?;
            return Ok(MultiDecision::from_decisions(ds));
        }
        let grouped: Vec<Vec<Pair<'_>>> = groups.iter().map(|g| subset(&pairs, g)).collect();
        let multi = &self.inner.scripts.multi;
        let mut out: Vec<Option<Decision>> = vec![None; pairs.len()];
        let dry = join_all(grouped.iter().map(|g| self.run(multi, g, "d", at))).await;
        let mut all = true;
        for (g, result) in groups.iter().zip(dry) {
            for (&i, d) in g.iter().zip(result?.1) {
                all &= d.allowed;
                out[i] = Some(d);
            }
        }
        if all {
            for (n, g) in grouped.iter().enumerate() {
                let result = self.lease_run(g, ACQUIRE, &id, at).await;
                let admitted = result
                    .as_ref()
                    .is_ok_and(|(_, ds)| ds.iter().all(|d| d.allowed));
                if let Ok((_, ds)) = &result {
                    for (&i, d) in groups[n].iter().zip(ds) {
                        out[i] = Some(*d);
                    }
                }
                if admitted {
                    continue;
                }
                for earlier in &grouped[..n] {
                    let _ = self.lease_run(earlier, RELEASE, &id, at).await;
                }
                result?;
                break;
            }
        }
        let decided = out
            .into_iter()
            .map(|d| d.ok_or_else(|| protocol("a pair was left undecided")))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(MultiDecision::from_decisions(decided))
    }

    pub(super) async fn release_pairs(
        &self,
        ticket: &Ticket,
        rules: &[&Rule],
        renew: bool,
        at: Option<Micros>,
    ) -> Result<Released, StoreError> {
        if rules.len() != ticket.pairs.len() {
            return Ok(Released::Unknown);
        }
        let id = ticket.nonce_hex();
        let prefix = &*self.inner.prefix;
        let pairs: Vec<Pair<'_>> = rules
            .iter()
            .zip(&ticket.pairs)
            .map(|(r, p)| Pair {
                rule: r,
                key: keys::redis_key_of_name(prefix, r.name(), r.algorithm(), &p.key),
                cost: 0,
            })
            .collect();
        let mode = if renew { RENEW } else { RELEASE };
        let mut out: Vec<Option<Decision>> = vec![None; pairs.len()];
        for (n, g) in self.slot_groups(&pairs).iter().enumerate() {
            let group = subset(&pairs, g);
            match self.lease_run(&group, mode, &id, at).await {
                Ok((_, ds)) => {
                    for (&i, d) in g.iter().zip(ds) {
                        out[i] = Some(d);
                    }
                }
                // The first slot tells; a later one without the lease has
                // seen it end in between (see the module docs).
                Err(LeaseError::Unknown) if n == 0 => return Ok(Released::Unknown),
                Err(LeaseError::Unknown) => {}
                Err(LeaseError::Store(e)) => return Err(e),
            }
        }
        Ok(Released::Done(
            out.into_iter()
                .map(|d| d.ok_or_else(|| protocol("a pair was left unreleased")))
                .collect::<Result<Vec<_>, _>>()?,
        ))
    }

    /// One run of mode `a`, `l` or `w` over pairs of one slot.
    async fn lease_run(
        &self,
        pairs: &[Pair<'_>],
        mode: &str,
        id: &str,
        at: Option<Micros>,
    ) -> Result<(Micros, Vec<Decision>), LeaseError> {
        let run = Run {
            pairs: Pairs::Many(pairs),
            mode,
            at,
            extra: Extra::Lease { id },
        };
        let script = self.inner.scripts.for_pairs(pairs.iter().map(|p| p.rule));
        let reply = self.eval_run(script, run).await?;
        let reply = reply.as_slice();
        let (t, rest) = match (mode, reply) {
            (ACQUIRE, [t, rest @ ..]) => (*t, rest),
            (_, [_, 1]) => return Err(LeaseError::Unknown),
            (_, [t, 0, rest @ ..]) => (*t, rest),
            _ => return Err(protocol(format!("the {mode} script replied {reply:?}")).into()),
        };
        if rest.len() != 4 * pairs.len() || t < 0 {
            return Err(protocol(format!("the {mode} script replied {reply:?}")).into());
        }
        let ds = rest
            .chunks_exact(4)
            .zip(pairs)
            .map(|(r, p)| decision(r, p.rule))
            .collect::<Result<Vec<_>, _>>()?;
        Ok((u64::try_from(t).unwrap_or(0), ds))
    }
}

/// Why a release or renew run did nothing.
enum LeaseError {
    /// No such live lease.
    Unknown,
    /// The store failed.
    Store(StoreError),
}

impl From<StoreError> for LeaseError {
    fn from(e: StoreError) -> Self {
        LeaseError::Store(e)
    }
}

impl From<LeaseError> for StoreError {
    fn from(e: LeaseError) -> Self {
        match e {
            LeaseError::Store(e) => e,
            LeaseError::Unknown => protocol("an acquire found no lease"),
        }
    }
}
