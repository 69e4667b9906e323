//! Test doubles for a store that is down, one failing and one hanging.
//! (Not Redis mocks: the Redis store's own failures are tested against
//! real servers in the core crate.) Every method of [`Store`] is required,
//! so each double says what every call answers, not only checks.

use tollgate::algorithm::Charged;
use tollgate::store::{KeyCheck, Released, SettlePair, Settled};
use tollgate::ticket::Ticket;
use tollgate::{Decision, Micros, MultiDecision, Rule, Store, StoreError, StoreErrorKind};

/// A test double for a store that is down: every call fails.
pub(crate) struct FailingStore;

/// The failure of [`FailingStore`]'s calls but `check_all`.
fn down<T>() -> Result<T, StoreError> {
    Err(StoreError::new(
        StoreErrorKind::Unavailable,
        "test double: down",
    ))
}

impl Store for FailingStore {
    async fn check(
        &self,
        _rule: &Rule,
        _key: &[u8],
        _cost: u64,
        _at: Option<Micros>,
    ) -> Result<Decision, StoreError> {
        down()
    }

    async fn check_all(
        &self,
        _checks: &[KeyCheck<'_>],
        _at: Option<Micros>,
    ) -> Result<MultiDecision, StoreError> {
        Err(StoreError::new(
            StoreErrorKind::Timeout,
            "test double: down",
        ))
    }

    async fn charge_all(
        &self,
        _checks: &[KeyCheck<'_>],
        _at: Option<Micros>,
    ) -> Result<Vec<Charged>, StoreError> {
        down()
    }

    async fn refund_all(
        &self,
        _checks: &[KeyCheck<'_>],
        _at: Option<Micros>,
    ) -> Result<Vec<Charged>, StoreError> {
        down()
    }

    async fn reserve_all(
        &self,
        _checks: &[KeyCheck<'_>],
        _ticket: &Ticket,
        _ttl: Micros,
        _at: Option<Micros>,
    ) -> Result<MultiDecision, StoreError> {
        down()
    }

    async fn settle(
        &self,
        _ticket: &Ticket,
        _pairs: &[SettlePair<'_>],
        _at: Option<Micros>,
    ) -> Result<Settled, StoreError> {
        down()
    }

    async fn acquire_all(
        &self,
        _checks: &[KeyCheck<'_>],
        _ticket: &Ticket,
        _at: Option<Micros>,
    ) -> Result<MultiDecision, StoreError> {
        down()
    }

    async fn release(
        &self,
        _ticket: &Ticket,
        _rules: &[&Rule],
        _renew: bool,
        _at: Option<Micros>,
    ) -> Result<Released, StoreError> {
        down()
    }

    async fn reset(&self, _rule: &Rule, _key: &[u8]) -> Result<bool, StoreError> {
        down()
    }
}

/// A test double for a store that hangs: no call ever answers (what a
/// SIGSTOPped Redis looks like from here).
pub(crate) struct HungStore;

impl Store for HungStore {
    async fn check(
        &self,
        _rule: &Rule,
        _key: &[u8],
        _cost: u64,
        _at: Option<Micros>,
    ) -> Result<Decision, StoreError> {
        std::future::pending().await
    }

    async fn check_all(
        &self,
        _checks: &[KeyCheck<'_>],
        _at: Option<Micros>,
    ) -> Result<MultiDecision, StoreError> {
        std::future::pending().await
    }

    async fn charge_all(
        &self,
        _checks: &[KeyCheck<'_>],
        _at: Option<Micros>,
    ) -> Result<Vec<Charged>, StoreError> {
        std::future::pending().await
    }

    async fn refund_all(
        &self,
        _checks: &[KeyCheck<'_>],
        _at: Option<Micros>,
    ) -> Result<Vec<Charged>, StoreError> {
        std::future::pending().await
    }

    async fn reserve_all(
        &self,
        _checks: &[KeyCheck<'_>],
        _ticket: &Ticket,
        _ttl: Micros,
        _at: Option<Micros>,
    ) -> Result<MultiDecision, StoreError> {
        std::future::pending().await
    }

    async fn settle(
        &self,
        _ticket: &Ticket,
        _pairs: &[SettlePair<'_>],
        _at: Option<Micros>,
    ) -> Result<Settled, StoreError> {
        std::future::pending().await
    }

    async fn acquire_all(
        &self,
        _checks: &[KeyCheck<'_>],
        _ticket: &Ticket,
        _at: Option<Micros>,
    ) -> Result<MultiDecision, StoreError> {
        std::future::pending().await
    }

    async fn release(
        &self,
        _ticket: &Ticket,
        _rules: &[&Rule],
        _renew: bool,
        _at: Option<Micros>,
    ) -> Result<Released, StoreError> {
        std::future::pending().await
    }

    async fn reset(&self, _rule: &Rule, _key: &[u8]) -> Result<bool, StoreError> {
        std::future::pending().await
    }
}
