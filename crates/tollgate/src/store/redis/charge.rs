//! Charges and refunds (docs/semantics.md, "Charge", "Refund"): one run of
//! the script in mode `g` (`f`) per cluster slot (one in all off Cluster).
//! Neither is ever denied, so pairs on several slots need no
//! all-or-nothing: each slot's run is atomic by itself.

use futures_util::future::join_all;

use super::encode::{CHARGE, Pair, Pairs, subset};
use super::eval::decision;
use super::{RedisStore, protocol};
use crate::algorithm::Charged;
use crate::error::StoreError;
use crate::store::KeyCheck;
use crate::time::Micros;

impl RedisStore {
    pub(super) async fn charge_pairs(
        &self,
        checks: &[KeyCheck<'_>],
        at: Option<Micros>,
        mode: &'static str,
    ) -> Result<Vec<Charged>, StoreError> {
        let pairs = self.pairs_of(checks);
        let groups = self.slot_groups(&pairs);
        let runs = groups.iter().map(|members| {
            let group = subset(&pairs, members);
            async move { self.charge_run(group, at, mode).await }
        });
        let mut out: Vec<Option<Charged>> = vec![None; pairs.len()];
        for (members, result) in groups.iter().zip(join_all(runs).await) {
            for (&i, charged) in members.iter().zip(result?) {
                out[i] = Some(charged);
            }
        }
        out.into_iter()
            .map(|c| c.ok_or_else(|| protocol("a pair was left uncharged")))
            .collect()
    }

    /// One run of `mode` (a charge or a refund) over pairs of one slot.
    async fn charge_run(
        &self,
        pairs: Vec<Pair<'_>>,
        at: Option<Micros>,
        mode: &'static str,
    ) -> Result<Vec<Charged>, StoreError> {
        let script = self.inner.scripts.for_pairs(pairs.iter().map(|p| p.rule));
        let reply = self.eval(script, Pairs::Many(&pairs), mode, at).await?;
        let reply = reply.as_slice();
        if reply.len() != 1 + 6 * pairs.len() || reply[0] < 0 {
            return Err(protocol(format!(
                "the charge script replied {reply:?} for {} pairs",
                pairs.len()
            )));
        }
        reply[1..]
            .chunks_exact(6)
            .zip(&pairs)
            .map(|(r, p)| {
                let unsigned =
                    |v: i64| u64::try_from(v).map_err(|_| protocol(format!("negative value {v}")));
                // a refund records nothing and clamps nothing
                let units = if mode == CHARGE {
                    unsigned(r[5])?
                } else {
                    p.cost
                };
                Ok(Charged {
                    decision: decision(&r[..4], p.rule)?,
                    debt: unsigned(r[4])?,
                    clamped: p
                        .cost
                        .checked_sub(units)
                        .ok_or_else(|| protocol(format!("charged {units} units of {}", p.cost)))?,
                })
            })
            .collect()
    }
}
