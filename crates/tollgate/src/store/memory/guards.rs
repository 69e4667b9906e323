//! Shards held exclusively, in index order (so that any two callers take
//! them in the same order and cannot deadlock): what a multi-pair check,
//! an acquire and a release hold while they decide.

use parking_lot::RwLockWriteGuard;

use super::check::Core;
use super::fingerprint::Fp;
use super::table::Table;
use crate::time::Micros;

impl Core {
    /// Every shard of `fps`, held exclusively, in index order.
    pub(super) fn lock_all(&self, fps: impl Iterator<Item = Fp>) -> Guards<'_> {
        let mut ids: Vec<usize> = fps.map(|fp| self.shard_index(fp)).collect();
        ids.sort_unstable();
        ids.dedup();
        let held = ids.iter().map(|&i| self.shards[i].0.write()).collect();
        Guards { ids, held }
    }
}

/// Shards held exclusively, by index.
pub(super) struct Guards<'a> {
    ids: Vec<usize>,
    held: Vec<RwLockWriteGuard<'a, Table>>,
}

impl Guards<'_> {
    pub(super) fn table_of(&self, core: &Core, fp: Fp) -> &Table {
        let i = self
            .ids
            .binary_search(&core.shard_index(fp))
            .unwrap_or_default();
        &self.held[i]
    }

    pub(super) fn table_of_mut(&mut self, core: &Core, fp: Fp) -> &mut Table {
        let i = self
            .ids
            .binary_search(&core.shard_index(fp))
            .unwrap_or_default();
        &mut self.held[i]
    }

    pub(super) fn enforce_caps(&mut self, core: &Core, t: Micros, written: &[Fp]) {
        for table in &mut self.held {
            core.enforce_caps(table, t, written);
        }
    }
}
