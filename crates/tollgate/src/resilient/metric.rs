//! The metric names (recorded through the `metrics` facade; install any
//! recorder, e.g. `metrics-exporter-prometheus`, to see them), and the
//! handles the limiter keeps to them.

use std::sync::OnceLock;

/// Counter, labels `rule`, `outcome` (`allowed`, `denied`, `error`,
/// `denied_by_other`): one per (rule, key) pair checked, with that
/// pair's own answer; `error` when the store failed and the policy
/// refused; `denied_by_other` for a pair that would have admitted in a
/// multi-rule check another pair denied (it consumed nothing).
pub const CHECKS: &str = "tollgate_checks_total";
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
/// Counter: times the circuit breaker opened.
pub const BREAKER_OPENED: &str = "tollgate_circuit_breaker_opened_total";
/// Gauge: 1 while the circuit breaker is open, else 0.
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
pub(super) struct Meters {
    /// Per rule (the limiter's order): allowed, denied, error,
    /// denied_by_other.
    checks: Vec<[OnceLock<::metrics::Counter>; 4]>,
    /// Per rule: charged units, clamped units, charges in debt.
    charges: Vec<[OnceLock<::metrics::Counter>; 3]>,
    /// Per rule: the debt the latest charge left.
    debt: Vec<OnceLock<::metrics::Gauge>>,
    latency: OnceLock<::metrics::Histogram>,
}

impl Meters {
    pub(super) fn new(rules: usize) -> Self {
        Self {
            checks: (0..rules).map(|_| Default::default()).collect(),
            charges: (0..rules).map(|_| Default::default()).collect(),
            debt: (0..rules).map(|_| OnceLock::new()).collect(),
            latency: OnceLock::new(),
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
        let Some(slots) = self.charges.get(i) else {
            return;
        };
        for (n, by) in [recorded, clamped, u64::from(debt > 0)]
            .into_iter()
            .enumerate()
        {
            if by > 0 || n == 0 {
                slots[n]
                    .get_or_init(|| ::metrics::counter!(NAMES[n], "rule" => name.to_owned()))
                    .increment(by);
            }
        }
        if let Some(gauge) = self.debt.get(i) {
            #[allow(clippy::cast_precision_loss)] // a gauge: an approximate debt is enough
            gauge
                .get_or_init(|| ::metrics::gauge!(CHARGE_DEBT, "rule" => name.to_owned()))
                .set(debt as f64);
        }
    }

    /// Counts one pair of rule `i` (named `name`) under `outcome`
    /// (0 allowed, 1 denied, 2 error, 3 denied by another pair).
    pub(super) fn count(&self, i: usize, name: &str, outcome: usize) {
        const LABELS: [&str; 4] = ["allowed", "denied", "error", "denied_by_other"];
        let Some(slot) = self.checks.get(i).and_then(|c| c.get(outcome)) else {
            return;
        };
        slot.get_or_init(
            || ::metrics::counter!(CHECKS, "rule" => name.to_owned(), "outcome" => LABELS[outcome]),
        )
        .increment(1);
    }
}
