//! What this replica holds open, for `/metrics` (docs/metrics.md,
//! "Every family"): the reservations it made and the leases it took, each until
//! it ends here — settled, cancelled or released through this replica — or
//! its time runs out, which counts it `expired`. The store holds the truth
//! fleet-wide; counting it there would take a scan of every key, so each
//! replica counts what went through it: a reservation settled (a lease
//! released) through another replica counts here until its time ends.

use std::collections::{BTreeSet, HashMap};

use parking_lot::Mutex;

use super::metric;
use crate::rule::Rule;
use crate::time::Micros;

/// The most reservations and leases one replica follows at once, whatever
/// its key cap; past its cap (this or the limiter's `local_max_keys`, the
/// server's `[store] max_keys`, whichever is smaller) new ones are not
/// followed (the gauges then read low), so a client that reserves without
/// end cannot grow this replica's memory past what its operator allowed
/// for keys (an entry is about 170 bytes).
pub const MAX_FOLLOWED: usize = 1_000_000;

/// A reservation or a lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Held {
    Reservation,
    Lease,
}

impl Held {
    fn gauge(self) -> &'static str {
        match self {
            Held::Reservation => metric::RESERVATIONS_OPEN,
            Held::Lease => metric::LEASES_HELD,
        }
    }

    fn counter(self) -> &'static str {
        match self {
            Held::Reservation => metric::RESERVATIONS,
            Held::Lease => metric::LEASES,
        }
    }
}

struct Entry {
    held: Held,
    /// The rules it covers (indexes into the limiter's rules).
    rules: Vec<usize>,
    ends: Micros,
}

#[derive(Default)]
struct State {
    entries: HashMap<[u8; 16], Entry>,
    /// (end, nonce) of every entry, the soonest first.
    ends: BTreeSet<(Micros, [u8; 16])>,
    /// Per rule ever followed (by index): reservations open, leases held.
    /// Only those: a config of 100,000 rules, few of them reserved, paid
    /// 16 bytes a rule for counts that stayed 0.
    open: HashMap<usize, [u64; 2]>,
}

/// The reservations and leases this replica follows.
pub(super) struct Open {
    state: Mutex<State>,
    /// The limiter's rules, for their names (shared, not copied).
    rules: Box<[Rule]>,
    /// The most entries followed at once.
    cap: usize,
}

impl Open {
    /// Follows what is held of `rules`, at most `cap` entries at once
    /// (and never more than [`MAX_FOLLOWED`]).
    pub(super) fn new(rules: &[Rule], cap: usize) -> Self {
        Self {
            state: Mutex::new(State::default()),
            rules: rules.into(),
            cap: cap.min(MAX_FOLLOWED),
        }
    }

    /// Follows `nonce` (covering `rules`) until `ends`, or until it ends
    /// here; what ran out by `now` is counted expired first.
    pub(super) fn opened(
        &self,
        held: Held,
        nonce: [u8; 16],
        rules: Vec<usize>,
        ends: Micros,
        now: Micros,
    ) {
        let mut s = self.state.lock();
        self.sweep_locked(&mut s, now);
        if s.entries.len() >= self.cap || s.entries.contains_key(&nonce) {
            return;
        }
        for &i in &rules {
            self.add(&mut s, held, i, 1);
        }
        s.ends.insert((ends, nonce));
        s.entries.insert(nonce, Entry { held, rules, ends });
    }

    /// `nonce` ended here (settled, cancelled, released).
    pub(super) fn ended(&self, nonce: &[u8; 16], now: Micros) {
        let mut s = self.state.lock();
        if let Some(e) = s.entries.remove(nonce) {
            s.ends.remove(&(e.ends, *nonce));
            for &i in &e.rules {
                self.add(&mut s, e.held, i, -1);
            }
        }
        self.sweep_locked(&mut s, now);
    }

    /// `nonce` (a lease) was renewed: it now ends at `ends`.
    pub(super) fn renewed(&self, nonce: &[u8; 16], ends: Micros, now: Micros) {
        let mut s = self.state.lock();
        if let Some(e) = s.entries.get_mut(nonce) {
            let before = e.ends;
            e.ends = ends;
            s.ends.remove(&(before, *nonce));
            s.ends.insert((ends, *nonce));
        }
        self.sweep_locked(&mut s, now);
    }

    /// Counts as expired what ran out by `now`.
    pub(super) fn sweep(&self, now: Micros) {
        self.sweep_locked(&mut self.state.lock(), now);
    }

    fn sweep_locked(&self, s: &mut State, now: Micros) {
        while let Some(&(ends, nonce)) = s.ends.first() {
            if ends > now {
                break;
            }
            s.ends.pop_first();
            if let Some(e) = s.entries.remove(&nonce) {
                for &i in &e.rules {
                    self.add(s, e.held, i, -1);
                    ::metrics::counter!(
                        e.held.counter(),
                        "rule" => self.rules[i].name().to_owned(),
                        "outcome" => "expired"
                    )
                    .increment(1);
                }
            }
        }
    }

    /// Moves rule `i`'s count of `held` by `by` and sets its gauge.
    fn add(&self, s: &mut State, held: Held, i: usize, by: i8) {
        let Some(rule) = self.rules.get(i) else {
            return;
        };
        let counts = s.open.entry(i).or_default();
        let n = &mut counts[usize::from(held == Held::Lease)];
        *n = if by > 0 {
            n.saturating_add(1)
        } else {
            n.saturating_sub(1)
        };
        #[allow(clippy::cast_precision_loss)] // a gauge; exact below 2^53
        ::metrics::gauge!(held.gauge(), "rule" => rule.name().to_owned()).set(*n as f64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rule::{Algorithm, RuleSpec};
    use std::time::Duration;

    fn open() -> Open {
        let rules: Vec<Rule> = ["a", "b"]
            .iter()
            .map(|n| {
                RuleSpec::new(*n, Algorithm::Gcra, 1, Duration::from_secs(1))
                    .build()
                    .expect("rule")
            })
            .collect();
        Open::new(&rules, 3)
    }

    fn counts(o: &Open) -> Vec<[u64; 2]> {
        let s = o.state.lock();
        (0..o.rules.len())
            .map(|i| s.open.get(&i).copied().unwrap_or_default())
            .collect()
    }

    #[test]
    fn entries_end_here_or_expire_once() {
        let o = open();
        o.opened(Held::Reservation, [1; 16], vec![0, 1], 100, 0);
        o.opened(Held::Lease, [2; 16], vec![1], 50, 0);
        // the same nonce twice is followed once
        o.opened(Held::Lease, [2; 16], vec![1], 50, 0);
        assert_eq!(counts(&o), vec![[1, 0], [1, 1]]);
        o.renewed(&[2; 16], 150, 10);
        o.sweep(100);
        // the reservation ran out at 100; the renewed lease lives to 150
        assert_eq!(counts(&o), vec![[0, 0], [0, 1]]);
        assert!(o.state.lock().entries.len() == 1);
        o.ended(&[2; 16], 120);
        assert_eq!(counts(&o), vec![[0, 0], [0, 0]]);
        // ending what is not followed changes nothing
        o.ended(&[9; 16], 130);
        assert!(o.state.lock().ends.is_empty());
    }

    /// Past its cap nothing more is followed, until one ends.
    #[test]
    fn at_most_the_cap_is_followed() {
        let o = open();
        for n in 1..=5 {
            o.opened(Held::Reservation, [n; 16], vec![0], 1_000, 0);
        }
        assert_eq!(counts(&o), vec![[3, 0], [0, 0]]);
        assert_eq!(o.state.lock().entries.len(), 3);
        o.ended(&[1; 16], 10);
        o.opened(Held::Lease, [6; 16], vec![1], 1_000, 10);
        assert_eq!(counts(&o), vec![[2, 0], [0, 1]]);
        assert!(Open::new(&[], usize::MAX).cap == MAX_FOLLOWED);
    }
}
