//! The conformance kit against the memory store, and against stores broken
//! on purpose to show the kit notices (and names the case and step).

use std::sync::Arc;
use std::time::Duration;

use tollgate::algorithm::Charged;
use tollgate::conformance::{self, Config, Failure};
use tollgate::store::{KeyCheck, Released, SettlePair, Settled, Store};
use tollgate::ticket::Ticket;
use tollgate::{
    Decision, FakeClock, MemoryStore, Micros, MultiDecision, Rule, StoreError, StoreErrorKind,
};

#[tokio::test]
async fn memory_store_conforms() {
    let store = MemoryStore::new();
    let report = match conformance::run(&store, "memory").await {
        Ok(report) => report,
        Err(failure) => panic!("{failure}"),
    };
    // 57 scripted single-rule cases (3 scripts x 19 rules), 4 special
    // cases, 5 x 4 random single-rule traces and 4 random multi-rule ones.
    assert_eq!(report.cases, 109, "{report}");
    assert!(report.leases > 300, "{report}");
    assert!(
        report.reservations > 200 && report.settles > 300,
        "{report}"
    );
    assert!(report.charges > 500, "{report}");
    assert!(report.refunds > 100, "{report}");
    assert!(report.checks > 3_000, "{report}");
    assert!(report.multi_checks > 300, "{report}");
    assert!(report.denied > 1_000, "{report}");
}

#[tokio::test]
async fn namespaces_keep_runs_apart_even_concurrently() {
    let store = Arc::new(MemoryStore::new());
    let (a, b) = tokio::join!(
        conformance::run(&store, "ns-a"),
        conformance::run(&store, "ns-b")
    );
    assert_eq!(a.map(|r| r.cases), Ok(109));
    assert_eq!(b.map(|r| r.cases), Ok(109));
    // other seeds and sizes pass too
    let mut config = Config::default();
    config.seed = 42;
    config.random_traces = 2;
    config.steps = 400;
    let report = conformance::run_with(&store, "ns-c", &config).await;
    assert!(report.is_ok(), "{report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kit_runs_on_a_spawned_task() {
    // The kit's future is `Send`, so a store's tests can spawn it.
    let store = Arc::new(MemoryStore::new());
    let task = tokio::spawn(async move { conformance::run(&*store, "spawned").await });
    let report = task.await.expect("the task did not panic");
    assert_eq!(report.map(|r| r.cases), Ok(109));
}

#[tokio::test]
async fn reusing_a_namespace_is_noticed() {
    let store = MemoryStore::new();
    assert!(conformance::run(&store, "twice").await.is_ok());
    let failure = conformance::run(&store, "twice")
        .await
        .expect_err("the first run's state is still there");
    // the first check of the first case: a peek that finds the key used
    assert_eq!(
        (failure.case.as_str(), failure.step),
        ("gcra/drain-and-retry 2 per 1000000us burst 2", 0)
    );
}

/// A store wrapper that breaks one thing.
struct Broken {
    inner: MemoryStore<FakeClock>,
    flaw: Flaw,
}

#[derive(Clone, Copy)]
enum Flaw {
    /// Reports `retry_after` one microsecond too long.
    RetryOneMicroLate,
    /// Consumes the admitting pairs of a denied multi-rule check.
    ConsumesOnDenial,
    /// Decides at its own clock, ignoring `at`.
    IgnoresAt,
    /// Keys state by `rule name + key`, so ("iso.a", "bx") and
    /// ("iso.ab", "x") share one counter.
    ConcatenatesNames,
    /// Fails every multi-rule check.
    MultiUnavailable,
}

impl Broken {
    fn new(flaw: Flaw) -> Self {
        Self {
            inner: MemoryStore::builder().clock(FakeClock::new()).build(),
            flaw,
        }
    }

    fn rename(rule: &Rule, key: &[u8]) -> (Rule, Vec<u8>) {
        let mut spec = rule.spec();
        spec.name = "shared".into();
        let mut joined = rule.name().as_bytes().to_vec();
        joined.extend_from_slice(key);
        (spec.build().expect("same rule, another name"), joined)
    }
}

impl Store for Broken {
    async fn check(
        &self,
        rule: &Rule,
        key: &[u8],
        cost: u64,
        at: Option<Micros>,
    ) -> Result<Decision, StoreError> {
        let mut d = match self.flaw {
            Flaw::IgnoresAt => self.inner.check_sync(rule, key, cost, None),
            Flaw::ConcatenatesNames => {
                let (rule, key) = Self::rename(rule, key);
                self.inner.check_sync(&rule, &key, cost, at)
            }
            _ => self.inner.check_sync(rule, key, cost, at),
        };
        if let (Flaw::RetryOneMicroLate, Some(r)) = (self.flaw, d.retry_after) {
            d.retry_after = Some(r + Duration::from_micros(1));
        }
        Ok(d)
    }

    async fn check_all(
        &self,
        checks: &[KeyCheck<'_>],
        at: Option<Micros>,
    ) -> Result<MultiDecision, StoreError> {
        match self.flaw {
            Flaw::MultiUnavailable => Err(StoreError::new(
                StoreErrorKind::Unavailable,
                "connection refused",
            )),
            Flaw::ConsumesOnDenial => {
                let m = self.inner.check_all_sync(checks, at);
                if !m.allowed {
                    for (c, d) in checks.iter().zip(&m.decisions) {
                        if d.allowed {
                            self.inner.check_sync(c.rule, c.key, c.cost, at);
                        }
                    }
                }
                Ok(m)
            }
            Flaw::ConcatenatesNames => {
                let renamed: Vec<(Rule, Vec<u8>)> =
                    checks.iter().map(|c| Self::rename(c.rule, c.key)).collect();
                let checks: Vec<KeyCheck<'_>> = renamed
                    .iter()
                    .zip(checks)
                    .map(|((rule, key), c)| KeyCheck {
                        rule,
                        key,
                        cost: c.cost,
                    })
                    .collect();
                Ok(self.inner.check_all_sync(&checks, at))
            }
            _ => Ok(self.inner.check_all_sync(checks, at)),
        }
    }

    // The flaws are in checks only: everything else is the memory store's.

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
}

async fn failure_of(flaw: Flaw) -> Failure {
    match conformance::run(&Broken::new(flaw), "broken").await {
        Ok(report) => panic!("a broken store passed: {report}"),
        Err(failure) => failure,
    }
}

#[tokio::test]
async fn a_retry_one_microsecond_late_fails_at_the_first_denial() {
    let f = failure_of(Flaw::RetryOneMicroLate).await;
    // peek, admit, admit, then the denial: GCRA 2 per 1 s retries after 500 ms.
    assert_eq!(f.case, "gcra/drain-and-retry 2 per 1000000us burst 2");
    assert_eq!(f.step, 3);
    assert!(f.expected.contains("retry_after: Some(500ms)"), "{f}");
    assert!(f.got.contains("retry_after: Some(500.001ms)"), "{f}");
    assert!(f.check.contains("cost 1, at START+3600250000us"), "{f}");
    assert!(f.to_string().contains("step 3"), "{f}");
}

#[tokio::test]
async fn consuming_on_a_denied_multi_rule_check_is_caught() {
    let f = failure_of(Flaw::ConsumesOnDenial).await;
    // The third check of the scripted multi-rule case is the first denied
    // one; its answer is right, but the next one sees what it consumed.
    assert_eq!((f.case.as_str(), f.step), ("multi-rule scripted", 3), "{f}");
    assert!(f.check.starts_with("check_all(["), "{f}");
}

#[tokio::test]
async fn ignoring_the_given_time_is_caught() {
    let f = failure_of(Flaw::IgnoresAt).await;
    // The first three checks look the same at any time; the retry 1 µs
    // early is where the store's own clock gives another answer.
    assert_eq!(
        (f.case.as_str(), f.step),
        ("gcra/drain-and-retry 2 per 1000000us burst 2", 4),
        "{f}"
    );
}

#[tokio::test]
async fn colliding_rule_and_key_names_are_caught() {
    let f = failure_of(Flaw::ConcatenatesNames).await;
    assert_eq!(f.case, "isolation of rules and keys", "{f}");
    assert!(f.check.contains("rule iso.ab"), "{f}");
}

#[tokio::test]
async fn a_store_error_is_a_failure_naming_the_check() {
    let f = failure_of(Flaw::MultiUnavailable).await;
    assert_eq!((f.case.as_str(), f.step), ("multi-rule scripted", 0), "{f}");
    assert_eq!(f.got, "store error: store unavailable: connection refused");
}
