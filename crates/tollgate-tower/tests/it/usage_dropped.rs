//! An admission dropped half-way (the client went away, or an outer
//! timeout gave up) while its store calls were still running: a lease it
//! already took is released, not left held until its lease ends
//! (docs/tower.md, "Usage and in-flight limits").

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use http::Request;
use tollgate::algorithm::Charged;
use tollgate::store::{KeyCheck, Released, SettlePair, Settled};
use tollgate::ticket::Ticket;
use tollgate::{
    Algorithm, Decision, FakeClock, Limiter, MemoryStore, Micros, MultiDecision, Rule, Store,
    StoreError,
};
use tollgate_tower::RateLimitLayer;
use tollgate_tower::cost::ResponseCost;

use crate::support::rule;

const HOUR: Duration = Duration::from_secs(3600);

/// A memory store whose reservations never answer while `stall` is set:
/// a store call still running when the admission is dropped.
struct Stalling {
    inner: MemoryStore<FakeClock>,
    stall: Arc<AtomicBool>,
}

impl Store for Stalling {
    async fn check(
        &self,
        rule: &Rule,
        key: &[u8],
        cost: u64,
        at: Option<Micros>,
    ) -> Result<Decision, StoreError> {
        self.inner.check(rule, key, cost, at).await
    }

    async fn check_all(
        &self,
        checks: &[KeyCheck<'_>],
        at: Option<Micros>,
    ) -> Result<MultiDecision, StoreError> {
        self.inner.check_all(checks, at).await
    }

    async fn charge_all(
        &self,
        checks: &[KeyCheck<'_>],
        at: Option<Micros>,
    ) -> Result<Vec<Charged>, StoreError> {
        self.inner.charge_all(checks, at).await
    }

    async fn refund_all(
        &self,
        checks: &[KeyCheck<'_>],
        at: Option<Micros>,
    ) -> Result<Vec<Charged>, StoreError> {
        self.inner.refund_all(checks, at).await
    }

    async fn reserve_all(
        &self,
        checks: &[KeyCheck<'_>],
        ticket: &Ticket,
        ttl: Micros,
        at: Option<Micros>,
    ) -> Result<MultiDecision, StoreError> {
        if self.stall.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        self.inner.reserve_all(checks, ticket, ttl, at).await
    }

    async fn settle(
        &self,
        ticket: &Ticket,
        pairs: &[SettlePair<'_>],
        at: Option<Micros>,
    ) -> Result<Settled, StoreError> {
        self.inner.settle(ticket, pairs, at).await
    }

    async fn acquire_all(
        &self,
        checks: &[KeyCheck<'_>],
        ticket: &Ticket,
        at: Option<Micros>,
    ) -> Result<MultiDecision, StoreError> {
        self.inner.acquire_all(checks, ticket, at).await
    }

    async fn release(
        &self,
        ticket: &Ticket,
        rules: &[&Rule],
        renew: bool,
        at: Option<Micros>,
    ) -> Result<Released, StoreError> {
        self.inner.release(ticket, rules, renew, at).await
    }

    async fn reset(&self, rule: &Rule, key: &[u8]) -> Result<bool, StoreError> {
        self.inner.reset(rule, key).await
    }

    fn in_process(&self) -> bool {
        true
    }
}

#[tokio::test]
async fn a_lease_taken_before_the_admission_was_dropped_is_released() {
    let stall = Arc::new(AtomicBool::new(true));
    let store = Stalling {
        inner: MemoryStore::builder().clock(FakeClock::new()).build(),
        stall: Arc::clone(&stall),
    };
    let limiter = Arc::new(
        Limiter::new(
            store,
            [
                rule("inflight", Algorithm::Concurrency, 1, HOUR),
                rule("tpm", Algorithm::Gcra, 1000, HOUR),
            ],
        )
        .expect("limiter"),
    );
    let keyed = ["inflight", "tpm"].map(|r| (r, "header:x-team".parse().expect("key")));
    let cost = ResponseCost::new(
        "response_header:x-usage-tokens".parse().expect("source"),
        100,
    )
    .expect("cost");
    let layer = RateLimitLayer::new(Arc::clone(&limiter), keyed)
        .expect("layer")
        .with_response_cost("tpm", cost)
        .expect("cost");
    let req = Request::get("/")
        .header("x-team", "a")
        .body(())
        .expect("request");

    // The lease is taken, then the reservation hangs; the caller gives up.
    let gave_up = tokio::time::timeout(Duration::from_millis(50), layer.admit(&req)).await;
    assert!(gave_up.is_err(), "the admission was still running");

    // The slot comes back (on a task: nothing waits in a drop).
    let mut remaining = 0;
    for _ in 0..200 {
        remaining = limiter
            .check("inflight", "a", 0)
            .await
            .expect("peek")
            .remaining;
        if remaining == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(remaining, 1, "the lease was left held for its whole hour");

    // And the next request is admitted.
    stall.store(false, Ordering::SeqCst);
    let next = layer.admit(&req).await;
    assert!(next.hold.is_some(), "admitted, holding its lease");
}
