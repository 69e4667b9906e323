//! The metric names (recorded through the `metrics` facade; install any
//! recorder, e.g. `metrics-exporter-prometheus`, to see them), and the
//! handles the limiter keeps to them.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

/// Counter, labels `rule`, `outcome` (`allowed`, `denied`, `error`,
/// `denied_by_other`, `blocked`): one per (rule, key) pair checked, with
/// that pair's own answer; `error` when the store failed and the policy
/// refused; `denied_by_other` for a pair that would have admitted in a
/// multi-rule check another pair denied (it consumed nothing); `blocked`
/// for a pair an operator's block denied (docs/admin.md).
pub const CHECKS: &str = "tollgate_checks_total";
/// Counter, label `rule`: units of admitted checks that landed past the
/// rule's near-limit threshold (docs/metrics.md, "Near limit").
///
/// The threshold is `T = floor(capacity × ratio)`, the ratio set with
/// [`ResilientLimiterBuilder::near_limit_ratio`](super::ResilientLimiterBuilder::near_limit_ratio)
/// (default [`DEFAULT_NEAR_LIMIT_RATIO`](super::DEFAULT_NEAR_LIMIT_RATIO)).
/// A (rule, key) pair admitted at cost `c` whose decision leaves
/// `used = limit − remaining` adds `min(used − T, c)` when `used > T`:
/// only the units past the threshold, as envoyproxy/ratelimit counts its
/// `near_limit`. Denied pairs (and `denied_by_other`) consumed nothing and
/// add nothing; a (rule, key) named twice in one check counts once, at the
/// costs added. Every algorithm's decision has a `limit` and a `remaining`,
/// so it means the same for all of them; under the `local` fallback the
/// threshold is taken of the replica's share of the capacity, and a pair
/// the `allow` policy admitted reads as an untouched key (only its own
/// cost can pass the threshold).
pub const NEAR_LIMIT: &str = "tollgate_near_limit_total";
/// Gauge, label `rule`: the highest share of its capacity any key of the
/// rule had used at a decision (admitted or denied; 1 = a key at its
/// limit) between the last two `/metrics` scrapes
/// ([`crate::resilient::ResilientLimiter::publish_utilization`]), so an
/// operator sees a rule's busiest key close in before the 429s. 0 when
/// nothing was decided in between; no series before the rule's first
/// decision (a rule never used costs the recorder nothing).
pub const UTILIZATION: &str = "tollgate_utilization_ratio";
/// Counter, label `rule`: pairs decided under a runtime override
/// (docs/admin.md), whatever their answer.
pub const OVERRIDDEN: &str = "tollgate_overridden_checks_total";
/// Counter, label `op`: operators' changes through the admin calls
/// (`reset`, `block`, `unblock`, `refund`, `set_override`,
/// `delete_override`).
pub const ADMIN_OPERATIONS: &str = "tollgate_admin_operations_total";
/// Histogram, seconds: the time the store took per check (success or
/// failure; not recorded for calls the open breaker skipped, nor for
/// an in-process store, see [`crate::Store::in_process`]).
pub const STORE_LATENCY: &str = "tollgate_store_latency_seconds";
/// Counter, label `kind` (`timeout`, `unavailable`, `protocol`,
/// `circuit_open`): failed store calls, and calls skipped while the
/// circuit breaker is open.
pub const STORE_ERRORS: &str = "tollgate_store_errors_total";
/// Counter, label `policy` (`allow`, `deny`, `local`): checks the
/// failure policy answered instead of the store.
pub const FAILURE_POLICY: &str = "tollgate_failure_policy_total";
/// Counter: times the circuit breaker opened; on a Redis Cluster a
/// master's breaker counts with the label `node` (`host:port`), the
/// store-wide one without.
pub const BREAKER_OPENED: &str = "tollgate_circuit_breaker_opened_total";
/// Gauge: 1 while the circuit breaker is open, else 0; per Redis Cluster
/// master with the label `node`, as [`BREAKER_OPENED`].
pub const BREAKER_OPEN: &str = "tollgate_circuit_breaker_open";
/// Gauge: the live replicas sharing the store, as last learned from
/// the heartbeat (the configured count before the first one).
pub const LIVE_REPLICAS: &str = "tollgate_live_replicas";

/// Counter, label `rule`: units charges recorded in the store (their
/// cost, less any clamped).
pub const CHARGE_UNITS: &str = "tollgate_charge_units_total";
/// Counter, label `rule`: units of charges not recorded because the key's
/// debt reached its cap ([`crate::Rule::max_debt`]).
pub const CHARGE_CLAMPED: &str = "tollgate_charge_clamped_units_total";
/// Counter, labels `rule`, `policy`: units of charges the store did not
/// take because it failed (the failure policy answered; under `local`
/// they were charged to this replica's in-process fallback only).
pub const CHARGE_UNRECORDED: &str = "tollgate_charge_unrecorded_units_total";
/// Counter, label `rule`: units refunds gave back in the store.
pub const REFUND_UNITS: &str = "tollgate_refund_units_total";
/// Counter, labels `rule`, `policy`: units of refunds the store did not
/// take back because it failed (with `local`, they were given back to this
/// replica's in-process fallback only).
pub const REFUND_UNRECORDED: &str = "tollgate_refund_unrecorded_units_total";
/// Counter, label `rule`: charges that left their key in debt.
pub const CHARGES_IN_DEBT: &str = "tollgate_charges_in_debt_total";
/// Gauge, label `rule`: the debt (units over the limit) the latest charge
/// of the rule left on its key.
pub const CHARGE_DEBT: &str = "tollgate_charge_debt_units";

/// Counter, labels `rule`, `outcome`: reservations per pair — `opened`
/// (admitted), `settled`, `cancelled`, `late` (settled or cancelled after
/// the ttl: the estimate stayed charged), `unknown` (a settle of an id the
/// store does not hold: never made, or forgotten an hour after its ttl),
/// `finished` (settled or cancelled before: 409), `expired` (a reservation
/// this replica made whose ttl ran out before it was settled or cancelled
/// through this replica).
pub const RESERVATIONS: &str = "tollgate_reservations_total";

/// Gauge, label `rule`: reservations this replica made that are still
/// open: neither settled nor cancelled through it, their ttl not over.
pub const RESERVATIONS_OPEN: &str = "tollgate_reservations_open";

/// Gauge, label `rule`: leases this replica took that are still held:
/// not released through it, not ended by themselves.
pub const LEASES_HELD: &str = "tollgate_leases_held";

/// Counter, labels `rule`, `outcome`: lease operations per pair —
/// `acquired`, `released`, `renewed`, `unknown` (a release or renew of a
/// lease not live: never taken, released before, or ended by itself),
/// `expired` (a lease this replica took that ended by itself, not
/// released through this replica).
pub const LEASES: &str = "tollgate_leases_total";

/// Metric handles, registered at first use and kept: `counter!` with a
/// rule label builds its key (two allocations) and looks it up in the
/// recorder on every call, which is a tenth of a memory-store check.
/// Install the metrics recorder before the first check.
///
/// A rule's handles are made at its first use, boxed: a rule never used
/// holds 40 bytes here and no series in the recorder (a config of 100,000
/// rules held 280 bytes a rule in empty handle slots, and 240 more in the
/// utilization series the first scrape made for every rule).
pub(super) struct Meters {
    /// Per rule, in the limiter's order.
    rules: Box<[RuleMeter]>,
    /// The near-limit ratio, for a decision of another capacity (the
    /// `local` fallback's share).
    ratio: f64,
    latency: OnceLock<::metrics::Histogram>,
}

/// One rule's meters.
struct RuleMeter {
    /// Its capacity and near-limit threshold, worked out once so a check
    /// pays one compare, not a float product.
    capacity: u64,
    threshold: u64,
    /// 1 + the highest use seen since the last scrape, in millionths of
    /// the capacity ([`UTILIZATION`]); 0 when nothing was decided since.
    peak: AtomicU32,
    /// Whether its [`UTILIZATION`] was shown (it is, from then on).
    shown: AtomicBool,
    /// Made at the rule's first use.
    handles: OnceLock<Box<Handles>>,
}

/// One rule's metric handles, each registered at its first use.
#[derive(Default)]
struct Handles {
    /// Allowed, denied, error, denied_by_other, blocked.
    checks: [OnceLock<::metrics::Counter>; 5],
    /// Pairs decided under a runtime override.
    overridden: OnceLock<::metrics::Counter>,
    /// Charged units, clamped units, charges in debt.
    charges: [OnceLock<::metrics::Counter>; 3],
    /// The debt the latest charge left.
    debt: OnceLock<::metrics::Gauge>,
    /// The near-limit counter.
    near: OnceLock<::metrics::Counter>,
}

impl RuleMeter {
    fn handles(&self) -> &Handles {
        self.handles.get_or_init(Box::default)
    }
}

impl Meters {
    /// Handles for rules of `capacities` (the limiter's order), counting
    /// near-limit units past `ratio` of each (validated: 0 < ratio ≤ 1).
    pub(super) fn new(capacities: impl ExactSizeIterator<Item = u64>, ratio: f64) -> Self {
        Self {
            rules: capacities
                .map(|capacity| RuleMeter {
                    capacity,
                    threshold: near_limit_threshold(capacity, ratio),
                    peak: AtomicU32::new(0),
                    shown: AtomicBool::new(false),
                    handles: OnceLock::new(),
                })
                .collect(),
            ratio,
            latency: OnceLock::new(),
        }
    }

    /// Notes rule `i`'s decision `d` for [`UTILIZATION`]: one load and a
    /// compare, a write only when it is the new peak.
    #[inline]
    pub(super) fn utilization(&self, i: usize, d: &crate::decision::Decision) {
        let Some(rule) = self.rules.get(i) else {
            return;
        };
        if d.limit == 0 {
            return;
        }
        let used = d.limit.saturating_sub(d.remaining).min(d.limit);
        let share =
            u32::try_from(u128::from(used) * 1_000_000 / u128::from(d.limit)).unwrap_or(1_000_000);
        let slot = &rule.peak;
        if share + 1 > slot.load(Ordering::Relaxed) {
            slot.fetch_max(share + 1, Ordering::Relaxed);
        }
    }

    /// Every rule decided since the last call, or shown before, with its
    /// [`UTILIZATION`] (its peak share since the last call, 0 when nothing
    /// was decided), by name in rule order; starts the next interval. A
    /// rule never decided is left out (its series reads as 0).
    pub(super) fn take_utilization(&self, rules: &[crate::Rule]) -> Vec<(String, f64)> {
        let mut out = Vec::new();
        for (meter, rule) in self.rules.iter().zip(rules) {
            let peak = meter.peak.swap(0, Ordering::Relaxed);
            if peak == 0 && !meter.shown.load(Ordering::Relaxed) {
                continue;
            }
            meter.shown.store(true, Ordering::Relaxed);
            out.push((
                rule.name().to_owned(),
                f64::from(peak.saturating_sub(1)) / 1_000_000.0,
            ));
        }
        out
    }

    /// How far past rule `i`'s near-limit threshold an admitted decision
    /// `d` left its key: `used − T` (0 when not past it), see
    /// [`NEAR_LIMIT`].
    #[inline]
    pub(super) fn past_near(&self, i: usize, d: &crate::decision::Decision) -> u64 {
        let Some(rule) = self.rules.get(i) else {
            return 0;
        };
        // A decision under another capacity: the `local` fallback's share.
        let t = if d.limit == rule.capacity {
            rule.threshold
        } else {
            near_limit_threshold(d.limit, self.ratio)
        };
        let used = d.limit.saturating_sub(d.remaining);
        used.saturating_sub(t)
    }

    /// Counts `units` near-limit units of rule `i` (named `name`).
    pub(super) fn near(&self, i: usize, name: &str, units: u64) {
        if let Some(rule) = self.rules.get(i) {
            rule.handles()
                .near
                .get_or_init(|| ::metrics::counter!(NEAR_LIMIT, "rule" => name.to_owned()))
                .increment(units);
        }
    }

    /// Counts one pair of rule `i` (named `name`) decided under a runtime
    /// override.
    pub(super) fn overridden(&self, i: usize, name: &str) {
        if let Some(rule) = self.rules.get(i) {
            rule.handles()
                .overridden
                .get_or_init(|| ::metrics::counter!(OVERRIDDEN, "rule" => name.to_owned()))
                .increment(1);
        }
    }

    pub(super) fn latency(&self) -> &::metrics::Histogram {
        self.latency
            .get_or_init(|| ::metrics::histogram!(STORE_LATENCY))
    }

    /// Counts one charge of rule `i` (named `name`): the units it recorded
    /// and clamped, and the debt it left.
    pub(super) fn charge(&self, i: usize, name: &str, recorded: u64, clamped: u64, debt: u64) {
        const NAMES: [&str; 3] = [CHARGE_UNITS, CHARGE_CLAMPED, CHARGES_IN_DEBT];
        let Some(rule) = self.rules.get(i) else {
            return;
        };
        let handles = rule.handles();
        for (n, by) in [recorded, clamped, u64::from(debt > 0)]
            .into_iter()
            .enumerate()
        {
            if by > 0 || n == 0 {
                handles.charges[n]
                    .get_or_init(|| ::metrics::counter!(NAMES[n], "rule" => name.to_owned()))
                    .increment(by);
            }
        }
        #[allow(clippy::cast_precision_loss)] // a gauge: an approximate debt is enough
        handles
            .debt
            .get_or_init(|| ::metrics::gauge!(CHARGE_DEBT, "rule" => name.to_owned()))
            .set(debt as f64);
    }

    /// Counts one pair of rule `i` (named `name`) under `outcome`
    /// (0 allowed, 1 denied, 2 error, 3 denied by another pair, 4 blocked).
    pub(super) fn count(&self, i: usize, name: &str, outcome: usize) {
        const LABELS: [&str; 5] = ["allowed", "denied", "error", "denied_by_other", "blocked"];
        let Some(slot) = self
            .rules
            .get(i)
            .and_then(|r| r.handles().checks.get(outcome))
        else {
            return;
        };
        slot.get_or_init(
            || ::metrics::counter!(CHECKS, "rule" => name.to_owned(), "outcome" => LABELS[outcome]),
        )
        .increment(1);
    }
}

/// The near-limit threshold of `capacity` at `ratio`: `floor(capacity ×
/// ratio)`, as the reference computes it.
#[must_use]
#[allow(
    clippy::cast_precision_loss,
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss
)] // capacities are at most 10^12, exact in an f64; ratio in (0, 1]
pub fn near_limit_threshold(capacity: u64, ratio: f64) -> u64 {
    (capacity as f64 * ratio).floor() as u64
}
