//! Reservations on Redis (docs/redis.md, "Reservations"): a record per
//! pair beside the pair's state, in its hash slot
//! (`{prefix}:{<rule>:<key>}:rv:<nonce>`), written by the same script run
//! that consumes the estimate (mode `v`) and read, closed and applied by
//! one run when settled (mode `s`). Off Cluster, or with every pair in one
//! slot, each is one round trip and atomic. Across Cluster slots a
//! reservation is all-or-nothing as a multi-rule check is (a dry run of
//! every slot, then each slot in turn, refunded and its records deleted
//! when a later slot denies); a settle runs slot by slot, so a failure
//! between two slots can leave the first settled and the second open.

use futures_util::future::join_all;

use super::encode::{Extra, Pair, Pairs, RESERVE, Run, SETTLE, admitted_rule, subset};
use super::eval::decision;
use super::{Backend, RedisStore, keys, protocol};
use crate::algorithm::Charged;
use crate::decision::{Decision, MultiDecision};
use crate::error::StoreError;
use crate::store::{KeyCheck, SettlePair, Settled};
use crate::ticket::{REMEMBERED_AFTER_TTL, Ticket};
use crate::time::{Micros, duration_to_micros};

/// One Cluster slot's pairs of a reservation, their record keys and
/// their [`admitted_rule`]s.
type SlotGroup<'r> = (Vec<Pair<'r>>, Vec<Vec<u8>>, Vec<Vec<u8>>);

impl RedisStore {
    pub(super) async fn reserve_pairs(
        &self,
        checks: &[KeyCheck<'_>],
        ticket: &Ticket,
        ttl: Micros,
        at: Option<Micros>,
    ) -> Result<MultiDecision, StoreError> {
        let prefix = &*self.inner.prefix;
        let nonce = ticket.nonce_hex();
        let pairs = self.pairs_of(checks);
        let records: Vec<Vec<u8>> = checks
            .iter()
            .zip(&ticket.pairs)
            .map(|(c, p)| keys::record_key(prefix, c.rule.name(), &p.key, &nonce))
            .collect();
        let admitted: Vec<Vec<u8>> = checks.iter().map(|c| admitted_rule(c.rule)).collect();
        let groups = self.slot_groups(&pairs);
        if groups.len() == 1 {
            let (_, ds) = self
                .reserve_run(&pairs, &records, &admitted, ttl, at)
                .await?;
            return Ok(MultiDecision::from_decisions(ds));
        }
        // Across slots: a dry run of every group decides; then each group
        // consumes and records in turn, undone if a later one denies.
        let multi = &self.inner.scripts.multi;
        let grouped: Vec<SlotGroup<'_>> = groups
            .iter()
            .map(|g| {
                (
                    subset(&pairs, g),
                    g.iter().map(|&i| records[i].clone()).collect(),
                    g.iter().map(|&i| admitted[i].clone()).collect(),
                )
            })
            .collect();
        let mut out: Vec<Option<Decision>> = vec![None; pairs.len()];
        let dry = join_all(grouped.iter().map(|(g, ..)| self.run(multi, g, "d", at))).await;
        let mut all = true;
        for (g, result) in groups.iter().zip(dry) {
            for (&i, d) in g.iter().zip(result?.1) {
                all &= d.allowed;
                out[i] = Some(d);
            }
        }
        if all {
            let mut done: Vec<(usize, Micros)> = Vec::new();
            for (n, (g, recs, rules)) in grouped.iter().enumerate() {
                let result = self.reserve_run(g, recs, rules, ttl, at).await;
                let admitted = result
                    .as_ref()
                    .is_ok_and(|(_, ds)| ds.iter().all(|d| d.allowed));
                if let Ok((_, ds)) = &result {
                    for (&i, d) in groups[n].iter().zip(ds) {
                        out[i] = Some(*d);
                    }
                }
                if let (true, Ok((t, _))) = (admitted, &result) {
                    done.push((n, *t));
                    continue;
                }
                for &(m, t) in &done {
                    let _ = self.run(multi, &grouped[m].0, "r", Some(t)).await;
                    for r in &grouped[m].1 {
                        let _ = self.query::<i64>(redis::cmd("DEL").arg(r)).await;
                    }
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

    /// One run of mode `v` over pairs of one slot.
    async fn reserve_run(
        &self,
        pairs: &[Pair<'_>],
        records: &[Vec<u8>],
        admitted: &[Vec<u8>],
        ttl: Micros,
        at: Option<Micros>,
    ) -> Result<(Micros, Vec<Decision>), StoreError> {
        let run = Run {
            pairs: Pairs::Many(pairs),
            mode: RESERVE,
            at,
            extra: Extra::Reserve {
                records,
                ttl,
                remember: duration_to_micros(REMEMBERED_AFTER_TTL),
                admitted,
            },
        };
        let script = self.inner.scripts.for_pairs(pairs.iter().map(|p| p.rule));
        let reply = self.eval_run(script, run).await?;
        let reply = reply.as_slice();
        if reply.len() != 1 + 4 * pairs.len() || reply[0] < 0 {
            return Err(protocol(format!("the reserve script replied {reply:?}")));
        }
        let ds = reply[1..]
            .chunks_exact(4)
            .zip(pairs)
            .map(|(r, p)| decision(r, p.rule))
            .collect::<Result<Vec<_>, _>>()?;
        Ok((u64::try_from(reply[0]).unwrap_or(0), ds))
    }

    pub(super) async fn settle_pairs(
        &self,
        ticket: &Ticket,
        settle: &[SettlePair<'_>],
        at: Option<Micros>,
    ) -> Result<Settled, StoreError> {
        if settle.len() != ticket.pairs.len() {
            return Ok(Settled::Unknown);
        }
        let prefix = &*self.inner.prefix;
        let nonce = ticket.nonce_hex();
        let pairs: Vec<Pair<'_>> = settle
            .iter()
            .zip(&ticket.pairs)
            .map(|(s, p)| Pair {
                rule: s.rule,
                key: keys::redis_key_of_name(prefix, s.rule.name(), s.rule.algorithm(), &p.key),
                cost: 0,
            })
            .collect();
        let records: Vec<Vec<u8>> = settle
            .iter()
            .zip(&ticket.pairs)
            .map(|(s, p)| keys::record_key(prefix, s.rule.name(), &p.key, &nonce))
            .collect();
        let resets: Vec<Vec<u8>> = settle
            .iter()
            .zip(&ticket.pairs)
            .map(|(s, p)| keys::reset_mark(prefix, s.rule.name(), &p.key))
            .collect();
        let actual: Vec<Option<u64>> = settle.iter().map(|s| s.actual).collect();
        let groups = self.slot_groups(&pairs);
        let mut charged: Vec<Option<Charged>> = vec![None; pairs.len()];
        let mut estimates = vec![0; pairs.len()];
        let mut late = false;
        for (n, g) in groups.iter().enumerate() {
            let sub = |v: &[Vec<u8>]| g.iter().map(|&i| v[i].clone()).collect::<Vec<_>>();
            let group_pairs = subset(&pairs, g);
            let group_actual: Vec<Option<u64>> = g.iter().map(|&i| actual[i]).collect();
            match self
                .settle_run(
                    &group_pairs,
                    &sub(&records),
                    &sub(&resets),
                    &group_actual,
                    at,
                )
                .await?
            {
                Settled::Done {
                    late: l,
                    charged: cs,
                    estimates: es,
                } => {
                    late |= l;
                    for ((&i, c), e) in g.iter().zip(cs).zip(es) {
                        charged[i] = Some(c);
                        estimates[i] = e;
                    }
                }
                // The first slot tells; a later one finding its records
                // gone or closed after an earlier one settled is a race
                // with their expiry, reported as the earlier one's result.
                other if n == 0 => return Ok(other),
                _ => {}
            }
        }
        Ok(Settled::Done {
            late,
            charged: charged
                .into_iter()
                .map(|c| c.ok_or_else(|| protocol("a pair was left unsettled")))
                .collect::<Result<Vec<_>, _>>()?,
            estimates,
        })
    }

    /// One run of mode `s` over pairs of one slot.
    async fn settle_run(
        &self,
        pairs: &[Pair<'_>],
        records: &[Vec<u8>],
        resets: &[Vec<u8>],
        actual: &[Option<u64>],
        at: Option<Micros>,
    ) -> Result<Settled, StoreError> {
        let run = Run {
            pairs: Pairs::Many(pairs),
            mode: SETTLE,
            at,
            extra: Extra::Settle {
                records,
                resets,
                actual,
            },
        };
        let script = self.inner.scripts.for_pairs(pairs.iter().map(|p| p.rule));
        let reply = self.eval_run(script, run).await?;
        let reply = reply.as_slice();
        match reply {
            [_, 1, _] => Ok(Settled::Unknown),
            [_, 2, _] => Ok(Settled::Finished),
            [t, 0, late, rest @ ..] if *t >= 0 && rest.len() == 8 * pairs.len() => {
                let estimates = rest
                    .chunks_exact(8)
                    .map(|r| {
                        u64::try_from(r[6])
                            .map_err(|_| protocol(format!("negative estimate {}", r[6])))
                    })
                    .collect::<Result<Vec<_>, StoreError>>()?;
                let charged = rest
                    .chunks_exact(8)
                    .zip(pairs.iter().zip(actual))
                    .map(|(r, (p, a))| {
                        let unsigned = |v: i64| {
                            u64::try_from(v).map_err(|_| protocol(format!("negative value {v}")))
                        };
                        let (units, estimate) = (unsigned(r[5])?, unsigned(r[6])?);
                        // What the charge was asked for: usage above the estimate.
                        let asked = a.map_or(0, |a| a.saturating_sub(estimate));
                        let mut decision = decision(&r[..4], p.rule)?;
                        // Counted under the rule that admitted it: its
                        // capacity (-1: the pair's own rule was used).
                        if r[7] >= 0 {
                            decision.limit = unsigned(r[7])?;
                        }
                        Ok(Charged {
                            decision,
                            debt: unsigned(r[4])?,
                            clamped: asked.saturating_sub(units),
                        })
                    })
                    .collect::<Result<Vec<_>, StoreError>>()?;
                Ok(Settled::Done {
                    late: *late == 1,
                    charged,
                    estimates,
                })
            }
            other => Err(protocol(format!("the settle script replied {other:?}"))),
        }
    }

    /// Pairs grouped by Cluster slot, in the order given within each (one
    /// group off Cluster).
    pub(super) fn slot_groups(&self, pairs: &[Pair<'_>]) -> Vec<Vec<usize>> {
        if !matches!(self.inner.backend, Backend::Cluster { .. }) {
            return vec![(0..pairs.len()).collect()];
        }
        let mut groups: Vec<(u16, Vec<usize>)> = Vec::new();
        for (i, p) in pairs.iter().enumerate() {
            let slot = keys::slot(&p.key);
            match groups.iter_mut().find(|g| g.0 == slot) {
                Some(g) => g.1.push(i),
                None => groups.push((slot, vec![i])),
            }
        }
        groups.sort_unstable_by_key(|g| g.0);
        groups.into_iter().map(|g| g.1).collect()
    }
}
