//! Forgetting one key's state ([`crate::Store::reset`], docs/admin.md,
//! "Reset a key"): an operator's call, not a check's, so it takes the
//! shard's exclusive lock and may scan the shard's GCRA table and the
//! reservations' records.

use super::check::Core;
use super::table::GcraTable;
use crate::rule::{Algorithm, Rule};

impl Core {
    /// Drops (rule, key)'s state, and the reservations counted in it (as
    /// its leases go with the state): whether there was any state.
    pub(super) fn reset(&self, rule: &Rule, key: &[u8]) -> bool {
        let fp = self.fingerprint(rule, key);
        let held = {
            let mut table = self.shard_of(fp).0.write();
            if rule.algorithm() == Algorithm::Gcra {
                let held = table.gcra.get(fp).is_some();
                if held {
                    table.gcra.retain(|f, _| !GcraTable::same(f, fp));
                }
                held
            } else {
                let held = table.other.contains_key(&fp);
                table.remove_other(fp);
                held
            }
        };
        // After the shard's lock: a settle takes the records' lock, then
        // shards'. A reservation of several pairs goes whole, as a lease
        // of several pairs no longer releases once one pair is reset.
        self.reservations
            .records
            .lock()
            .retain(|_, r| r.pairs.iter().all(|p| p.0 != fp));
        held
    }
}
