//! The public entry point: rules by name over one store.

use std::collections::HashMap;
use std::time::Duration;

use crate::algorithm::Charged;
use crate::decision::{Decision, MultiDecision};
use crate::error::{Error, WaitError};
use crate::op::Op;
use crate::overrides::Overrides;
use crate::rule::{Rule, RuleError};
use crate::store::memory::MemoryStore;
use crate::store::{Released, SettlePair, Settled, Store};
use crate::ticket::{MAX_RESERVATION_TTL, Ticket, TicketKind, TicketPair};
use crate::time::{Clock, MAX_TIME, Micros, TokioClock, duration_to_micros};
use traced::store_span;
use tracing::Instrument as _;

mod resolve;
pub(crate) mod traced;

pub(crate) use resolve::Resolved;

/// The longest key accepted, in bytes. Stores hash keys, so this bounds CPU,
/// not memory.
pub const MAX_KEY_LEN: usize = 4096;

fn check_time(at: Option<Micros>) -> Result<(), Error> {
    match at {
        Some(at) if at > MAX_TIME => Err(Error::TimeOutOfRange { at }),
        _ => Ok(()),
    }
}

/// One (rule, key) pair of a multi-rule check, by rule name, and by the
/// rule's position when the caller holds it ([`Check::at_index`]).
#[derive(Debug, Clone, Copy)]
pub struct Check<'a> {
    /// The rule's name.
    pub rule: &'a str,
    /// The rule's position in the limiter's rules ([`Limiter::rule_index`]),
    /// when known: the limiter takes the rule there without looking the
    /// name up, once it sees that rule has this name ([`Check::at_index`]).
    pub index: Option<usize>,
    /// The identity being limited.
    pub key: &'a [u8],
    /// Units to consume; 0 peeks.
    pub cost: u64,
    /// A limit for this call only ([`Check::under`]): decided against this
    /// rule's limit and burst, on the named rule's counter.
    pub limit: Option<&'a Rule>,
}

impl<'a> Check<'a> {
    /// A cost-1 check of `key` under `rule`.
    pub fn new(rule: &'a str, key: &'a (impl AsRef<[u8]> + ?Sized)) -> Self {
        Self {
            rule,
            index: None,
            key: key.as_ref(),
            cost: 1,
            limit: None,
        }
    }

    /// The same check, its rule at position `index` of the limiter's rules
    /// ([`Limiter::rule_index`]): for a door that resolved its rules' names
    /// once, when it was set up, so that no check hashes the name again.
    /// The name stays the rule's identity: when the rule at `index` has
    /// another name (a position taken from another list of rules, as
    /// before a reload), the name is looked up as without it.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Algorithm, Check, Limiter, MemoryStore, RuleSpec};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
    /// let spec = |name| RuleSpec::new(name, Algorithm::FixedWindow, 1, Duration::from_secs(60));
    /// let limiter = Limiter::new(MemoryStore::new(), [spec("a").build()?, spec("b").build()?])?;
    /// let b = limiter.rule_index("b").unwrap();
    /// assert!(limiter.check_all(&[Check::new("b", "k").at_index(b)]).await?.allowed);
    /// // A stale position falls back to the name: still rule "b".
    /// assert!(!limiter.check_all(&[Check::new("b", "k").at_index(0)]).await?.allowed);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # }).unwrap();
    /// ```
    #[must_use]
    pub fn at_index(mut self, index: usize) -> Self {
        self.index = Some(index);
        self
    }

    /// The same check with another cost.
    #[must_use]
    pub fn cost(mut self, cost: u64) -> Self {
        self.cost = cost;
        self
    }

    /// The same check decided against `limit`'s limit and burst instead of
    /// the named rule's, on the named rule's counter: a per-call limit (an
    /// Envoy request's own `limit` override). `limit` must have the named
    /// rule's name, algorithm and period, so the counter means the same
    /// under both (docs/semantics.md, "Per-call limits"); anything else is
    /// [`Error::Mismatch`]. Metrics count it as the named rule.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Algorithm, Check, Limiter, MemoryStore, RuleSpec};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
    /// let spec = |limit| RuleSpec::new("api", Algorithm::FixedWindow, limit, Duration::from_secs(60));
    /// let limiter = Limiter::new(MemoryStore::new(), [spec(100).build()?])?;
    /// let three = spec(3).build()?;
    /// for _ in 0..3 {
    ///     assert!(limiter.check_all(&[Check::new("api", "k").under(&three)]).await?.allowed);
    /// }
    /// assert!(!limiter.check_all(&[Check::new("api", "k").under(&three)]).await?.allowed);
    /// // The same counter: 3 of the rule's 100 are taken.
    /// assert_eq!(limiter.check("api", "k", 0).await?.remaining, 97);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # }).unwrap();
    /// ```
    #[must_use]
    pub fn under(mut self, limit: &'a Rule) -> Self {
        self.limit = Some(limit);
        self
    }
}

/// The rule-name index. Its keys come from the configuration, never from a
/// request, so a lookup costs at most a probe over the configured names
/// whatever name a request sends: a fast hasher is safe here (SipHash, the
/// standard default, was a tenth of a memory-store check, hashing the same
/// name up to three times). foldhash is already in every server build
/// (through hashbrown), and keyed at random per map.
type NameIndex = HashMap<ByName, usize, foldhash::fast::RandomState>;

/// A rule as a key by its name: the index shares the rule's own name
/// instead of holding a copy of it.
#[derive(Debug)]
struct ByName(Rule);

impl std::hash::Hash for ByName {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        // As `str` hashes: a lookup by `&str` finds it (`Borrow` below).
        self.0.name().hash(state);
    }
}

impl PartialEq for ByName {
    fn eq(&self, other: &Self) -> bool {
        self.0.name() == other.0.name()
    }
}

impl Eq for ByName {}

impl std::borrow::Borrow<str> for ByName {
    fn borrow(&self) -> &str {
        self.0.name()
    }
}

/// Rules by name over one store.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Algorithm, Check, FakeClock, Limiter, MemoryStore, RuleSpec};
///
/// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
/// let store = MemoryStore::builder().clock(FakeClock::new()).build();
/// let limiter = Limiter::new(store, [
///     RuleSpec::new("per_key", Algorithm::Gcra, 10, Duration::from_secs(1)).build()?,
///     RuleSpec::new("per_ip", Algorithm::FixedWindow, 1, Duration::from_secs(1)).build()?,
/// ])?;
/// let both = [Check::new("per_key", "k1"), Check::new("per_ip", "10.0.0.1")];
/// assert!(limiter.check_all(&both).await?.allowed);
/// let again = limiter.check_all(&both).await?;
/// assert!(!again.allowed);
/// assert_eq!(again.deciding, 1); // per_ip denied; per_key consumed nothing
/// assert_eq!(again.decisions[0].remaining, 9);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
#[derive(Debug)]
pub struct Limiter<S = MemoryStore> {
    store: S,
    rules: Vec<Rule>,
    by_name: NameIndex,
    /// Per rule (by index; empty when no rule has any), its per-key
    /// overrides.
    overrides: Vec<Option<Overrides>>,
}

impl<S> Limiter<S> {
    /// The position of the rule named `name` in [`Limiter::rules`].
    #[must_use]
    pub fn rule_index(&self, name: &str) -> Option<usize> {
        self.by_name.get(name).copied()
    }
}

/// What a reservation answered: the decision, and when admitted the ticket
/// that settles or cancels it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TicketDecision {
    /// The decision, as a check of each pair's estimate.
    pub multi: MultiDecision,
    /// `Some` when admitted.
    pub ticket: Option<Ticket>,
}

/// The former name of [`TicketDecision`], kept for one release.
#[deprecated(
    since = "0.2.0",
    note = "renamed `TicketDecision`, after `MultiDecision`"
)]
pub type Ticketed = TicketDecision;

/// The ticket of a reservation of `checks`: every pair, in order, each
/// (rule, key) at most once: a store keeps one record per pair beside its
/// key (on Redis, one record key per pair and ticket), so a pair named
/// twice would share one record, and its settle would count it twice.
pub(crate) fn reservation_ticket(checks: &[Check<'_>]) -> Result<Ticket, Error> {
    ticket_of(
        TicketKind::Reservation,
        checks.iter(),
        "reservation: name them once, with the estimates added",
    )
}

/// The ticket of an acquire: its pairs that take slots (cost 0 peeks),
/// each (rule, key) at most once.
pub(crate) fn lease_ticket(checks: &[Check<'_>]) -> Result<Ticket, Error> {
    ticket_of(
        TicketKind::Lease,
        checks.iter().filter(|c| c.cost > 0),
        "acquire: name them once, with the slots added",
    )
}

/// A ticket of `kind` for `checks`, refusing a (rule, key) named twice
/// ("… named twice in one {twice}").
fn ticket_of<'c, 'a: 'c>(
    kind: TicketKind,
    checks: impl Iterator<Item = &'c Check<'a>>,
    twice: &str,
) -> Result<Ticket, Error> {
    let mut pairs: Vec<TicketPair> = Vec::with_capacity(checks.size_hint().0);
    for c in checks {
        let pair = TicketPair::new(c.rule, c.key);
        if pairs.contains(&pair) {
            return Err(Error::Mismatch(format!(
                "rule {:?} and one key are named twice in one {twice}",
                c.rule
            )));
        }
        pairs.push(pair);
    }
    Ok(Ticket::new(kind, pairs))
}

/// A reservation's ttl in µs, within 1 ms ..= [`MAX_RESERVATION_TTL`].
pub(crate) fn reservation_ttl(ttl: Duration) -> Result<Micros, Error> {
    if ttl < Duration::from_millis(1) || ttl > MAX_RESERVATION_TTL {
        return Err(Error::TtlOutOfRange {
            ttl_ms: u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX),
        });
    }
    Ok(duration_to_micros(ttl))
}

impl<S: Store> Limiter<S> {
    /// A limiter over `store` with `rules`.
    ///
    /// # Errors
    /// Two rules with the same name (field `name`).
    pub fn new(store: S, rules: impl IntoIterator<Item = Rule>) -> Result<Self, RuleError> {
        Self::with_overrides(store, rules, Vec::new())
    }

    /// [`Limiter::new`], with per-key overrides: for each named rule, keys
    /// (or key prefixes) decided under another limit, period or burst, on
    /// the rule's counter (docs/semantics.md, "Per-key overrides"). A
    /// check's own per-call limit ([`Check::under`]) still comes first.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Algorithm, KeyPattern, Limiter, MemoryStore, Overrides, RuleSpec};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
    /// let spec = |limit| RuleSpec::new("per_tenant", Algorithm::Gcra, limit, Duration::from_secs(1));
    /// let mut tiers = Overrides::new();
    /// tiers.insert(KeyPattern::parse("tenant:enterprise:*"), spec(5000).build()?)?;
    /// tiers.insert(KeyPattern::parse("tenant:acme"), spec(1000).build()?)?;
    /// let limiter = Limiter::with_overrides(
    ///     MemoryStore::new(),
    ///     [spec(100).build()?],
    ///     vec![("per_tenant".to_owned(), tiers)],
    /// )?;
    /// assert_eq!(limiter.check("per_tenant", "tenant:acme", 1).await?.limit, 1000);
    /// assert_eq!(limiter.check("per_tenant", "tenant:enterprise:x", 1).await?.limit, 5000);
    /// assert_eq!(limiter.check("per_tenant", "tenant:small", 1).await?.limit, 100);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # }).unwrap();
    /// ```
    ///
    /// # Errors
    /// As [`Limiter::new`]; and overrides of a rule not named here, or an
    /// override whose rule has another name or algorithm than the rule's
    /// (field `overrides`).
    pub fn with_overrides(
        store: S,
        rules: impl IntoIterator<Item = Rule>,
        overrides: Vec<(String, Overrides)>,
    ) -> Result<Self, RuleError> {
        let rules: Vec<Rule> = rules.into_iter().collect();
        let mut by_name = NameIndex::with_capacity_and_hasher(rules.len(), Default::default());
        for (i, rule) in rules.iter().enumerate() {
            if by_name.insert(ByName(rule.clone()), i).is_some() {
                return Err(RuleError {
                    field: "name",
                    message: format!("rule name {:?} is used twice", rule.name()),
                });
            }
        }
        let mut by_rule: Vec<Option<Overrides>> = Vec::new();
        for (name, table) in overrides {
            let Some(&i) = by_name.get(name.as_str()) else {
                return Err(RuleError {
                    field: "overrides",
                    message: format!("overrides of rule {name:?}, which is not a rule"),
                });
            };
            if let Some(bad) = table
                .rules()
                .find(|r| r.name() != name || r.algorithm() != rules[i].algorithm())
            {
                return Err(RuleError {
                    field: "overrides",
                    message: format!(
                        "an override of rule {name:?} ({}) must keep its name and algorithm; \
                         got {:?} ({})",
                        rules[i].algorithm(),
                        bad.name(),
                        bad.algorithm()
                    ),
                });
            }
            if table.is_empty() {
                continue;
            }
            by_rule.resize(rules.len(), None);
            by_rule[i] = Some(table);
        }
        // The store is told every rule it may be handed, overrides
        // included: they are fixed, not per call.
        let mut in_use = rules.clone();
        in_use.extend(by_rule.iter().flatten().flat_map(|o| o.rules().cloned()));
        store.rules_in_use(&in_use);
        Ok(Self {
            store,
            rules,
            by_name,
            overrides: by_rule,
        })
    }

    /// The store.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The rules, in the order given.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// The rule named `name`.
    #[must_use]
    pub fn rule(&self, name: &str) -> Option<&Rule> {
        self.rule_index(name).map(|i| &self.rules[i])
    }

    fn resolve(&self, name: &str, key: &[u8]) -> Result<&Rule, Error> {
        let i = self.resolve_index(&Check::new(name, key).cost(0))?;
        Ok(self.deciding_rule(i, key, None).0)
    }

    /// Checks `key` under `rule`, consuming `cost` units when admitted
    /// (0 peeks), at the store's time.
    ///
    /// # Errors
    /// Unknown rule, key too long, or the store failed.
    pub async fn check(
        &self,
        rule: &str,
        key: impl AsRef<[u8]>,
        cost: u64,
    ) -> Result<Decision, Error> {
        self.check_at(rule, key, cost, None).await
    }

    /// Like [`Limiter::check`] at an explicit time `at` (µs) when given:
    /// for replay and tests.
    ///
    /// # Errors
    /// Unknown rule, key too long, or the store failed.
    pub async fn check_at(
        &self,
        rule: &str,
        key: impl AsRef<[u8]>,
        cost: u64,
        at: Option<Micros>,
    ) -> Result<Decision, Error> {
        let key = key.as_ref();
        let rule = self.resolve(rule, key)?;
        Op::Check.applies(rule, cost)?;
        check_time(at)?;
        let span = store_span!("store.check", self.store.kind(), 1);
        let d = self
            .store
            .check(rule, key, cost, at)
            .instrument(span.clone())
            .await?;
        traced::decided_one(&span, rule.name(), &d);
        Ok(d)
    }

    /// Checks several (rule, key) pairs all-or-nothing (docs/semantics.md,
    /// "Several rules in one check").
    ///
    /// # Errors
    /// No pairs, an unknown rule, a key too long, or the store failed.
    pub async fn check_all(&self, checks: &[Check<'_>]) -> Result<MultiDecision, Error> {
        self.check_all_at(checks, None).await
    }

    /// Like [`Limiter::check_all`] at an explicit time `at` (µs) when given.
    ///
    /// # Errors
    /// No pairs, an unknown rule, a key too long, or the store failed.
    pub async fn check_all_at(
        &self,
        checks: &[Check<'_>],
        at: Option<Micros>,
    ) -> Result<MultiDecision, Error> {
        if checks.is_empty() {
            return Err(Error::NoChecks);
        }
        check_time(at)?;
        let resolved = self.resolve_all(checks, Op::Check, None)?;
        let pairs = resolved.pairs();
        let span = store_span!("store.check", self.store.kind(), pairs.len());
        let multi = self
            .store
            .check_all(pairs, at)
            .instrument(span.clone())
            .await?;
        traced::decided(&span, pairs, &multi);
        Ok(multi)
    }

    /// Charges `cost` to `key` under `rule` unconditionally
    /// (docs/semantics.md, "Charge"): never denied; what goes past the
    /// limit is carried as debt that later checks wait out.
    ///
    /// # Errors
    /// Unknown rule, key too long, or the store failed.
    pub async fn charge(
        &self,
        rule: &str,
        key: impl AsRef<[u8]>,
        cost: u64,
    ) -> Result<Charged, Error> {
        let key = key.as_ref();
        let mut charged = self
            .charge_all_at(&[Check::new(rule, key).cost(cost)], None)
            .await?;
        charged.pop().ok_or(Error::NoChecks)
    }

    /// Charges every pair, each at its own cost, at `at` (the store's clock
    /// when `None`): one answer per pair, in order.
    ///
    /// # Errors
    /// No pairs, an unknown rule, a key too long, a time past
    /// [`MAX_TIME`], or the store failed.
    pub async fn charge_all_at(
        &self,
        checks: &[Check<'_>],
        at: Option<Micros>,
    ) -> Result<Vec<Charged>, Error> {
        check_time(at)?;
        let resolved = self.resolve_all(checks, Op::Charge, None)?;
        let pairs = resolved.pairs();
        let span = store_span!("store.charge", self.store.kind(), pairs.len());
        Ok(self.store.charge_all(pairs, at).instrument(span).await?)
    }

    /// Gives every pair its cost back at `at` (the store's clock when
    /// `None`; docs/semantics.md, "Refund"): the units counted last come
    /// off first, never past empty/full. One answer per pair, in order: the
    /// key as a charge of nothing reads it after the refund.
    ///
    /// # Errors
    /// No pairs, an unknown rule, a `concurrency` rule, a key too long, a
    /// time past [`MAX_TIME`], or the store failed.
    pub async fn refund_all_at(
        &self,
        checks: &[Check<'_>],
        at: Option<Micros>,
    ) -> Result<Vec<Charged>, Error> {
        check_time(at)?;
        let resolved = self.resolve_all(checks, Op::Refund, None)?;
        let pairs = resolved.pairs();
        let span = store_span!("store.refund", self.store.kind(), pairs.len());
        Ok(self.store.refund_all(pairs, at).instrument(span).await?)
    }

    /// Reserves: decides `checks` all-or-nothing as a check of each pair's
    /// cost (its estimate) and, when admitted, returns the ticket that
    /// settles or cancels it within `ttl` (docs/semantics.md, "Reserve,
    /// then settle"). `at` as for [`Limiter::check_all_at`].
    ///
    /// # Errors
    /// No pairs, an unknown rule, a key too long, a (rule, key) named twice,
    /// a `ttl` outside 1 ms ..= [`MAX_RESERVATION_TTL`], a time past
    /// [`MAX_TIME`], the store failed.
    pub async fn reserve_all_at(
        &self,
        checks: &[Check<'_>],
        ttl: Duration,
        at: Option<Micros>,
    ) -> Result<TicketDecision, Error> {
        check_time(at)?;
        let ttl = reservation_ttl(ttl)?;
        let resolved = self.resolve_all(checks, Op::Reserve, None)?;
        let ticket = reservation_ticket(checks)?;
        let pairs = resolved.pairs();
        let span = store_span!("store.reserve", self.store.kind(), pairs.len());
        let multi = self
            .store
            .reserve_all(pairs, &ticket, ttl, at)
            .instrument(span.clone())
            .await?;
        traced::decided(&span, pairs, &multi);
        let ticket = multi.allowed.then_some(ticket);
        Ok(TicketDecision { multi, ticket })
    }

    /// Settles the reservation `ticket` at `actual` usage: one number for
    /// every pair, or one per pair in the ticket's order; `None` cancels it
    /// (all of every estimate given back while its ttl runs).
    ///
    /// # Errors
    /// A rule of the ticket no longer configured, `actual` of another
    /// length, a time past [`MAX_TIME`], the store failed.
    pub async fn settle_at(
        &self,
        ticket: &Ticket,
        actual: Option<&[u64]>,
        at: Option<Micros>,
    ) -> Result<Settled, Error> {
        check_time(at)?;
        let pairs = self.settle_pairs(ticket, actual)?;
        let span = store_span!("store.settle", self.store.kind(), pairs.len());
        Ok(self
            .store
            .settle(ticket, &pairs, at)
            .instrument(span)
            .await?)
    }

    /// Acquires `checks` (all `concurrency` rules, each cost the slots to
    /// hold) all-or-nothing: admitted, the ticket releases or renews the
    /// leases, which end after each rule's lease unless renewed
    /// (docs/semantics.md, "Concurrency").
    ///
    /// # Errors
    /// No pairs, an unknown rule, a rule not `concurrency`, a key too long,
    /// a time past [`MAX_TIME`], the store failed.
    pub async fn acquire_all_at(
        &self,
        checks: &[Check<'_>],
        at: Option<Micros>,
    ) -> Result<TicketDecision, Error> {
        check_time(at)?;
        let resolved = self.resolve_all(checks, Op::Acquire, None)?;
        let ticket = lease_ticket(checks)?;
        let pairs = resolved.pairs();
        let span = store_span!("store.acquire", self.store.kind(), pairs.len());
        let multi = self
            .store
            .acquire_all(pairs, &ticket, at)
            .instrument(span.clone())
            .await?;
        traced::decided(&span, pairs, &multi);
        let ticket = (multi.allowed && !ticket.pairs.is_empty()).then_some(ticket);
        Ok(TicketDecision { multi, ticket })
    }

    /// Releases the lease `ticket` (or, `renew`, extends it to a whole
    /// lease from now).
    ///
    /// # Errors
    /// A ticket that is not a lease's, whose rules are gone or are no
    /// longer `concurrency`; a time past [`MAX_TIME`]; the store failed.
    pub async fn release_at(
        &self,
        ticket: &Ticket,
        renew: bool,
        at: Option<Micros>,
    ) -> Result<Released, Error> {
        check_time(at)?;
        let rules = self.lease_rules(ticket)?;
        let span = store_span!("store.release", self.store.kind(), rules.len());
        Ok(self
            .store
            .release(ticket, &rules, renew, at)
            .instrument(span)
            .await?)
    }

    /// The rules of a lease's pairs.
    pub(crate) fn lease_rules(&self, ticket: &Ticket) -> Result<Vec<&Rule>, Error> {
        if ticket.kind != TicketKind::Lease {
            return Err(Error::Mismatch(
                "a reservation is settled or cancelled, not released".into(),
            ));
        }
        ticket
            .pairs
            .iter()
            .map(|p| {
                let rule = self
                    .rule(&p.rule)
                    .ok_or_else(|| Error::UnknownRule(p.rule.clone()))?;
                Op::Acquire.applies(rule, 1)?;
                Ok(rule)
            })
            .collect()
    }

    /// The ticket's pairs with their rules and actual usage.
    pub(crate) fn settle_pairs<'t>(
        &'t self,
        ticket: &Ticket,
        actual: Option<&[u64]>,
    ) -> Result<Vec<SettlePair<'t>>, Error> {
        if ticket.kind != TicketKind::Reservation {
            return Err(Error::Mismatch("a lease is not settled: release it".into()));
        }
        let n = ticket.pairs.len();
        let each = |i: usize| match actual {
            None => Ok(None),
            Some([one]) => Ok(Some(*one)),
            Some(list) if list.len() == n => Ok(Some(list[i])),
            Some(list) => Err(Error::Mismatch(format!(
                "the reservation covers {n} pairs; give one cost for all of them or one per pair, not {}",
                list.len()
            ))),
        };
        ticket
            .pairs
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let rule = self
                    .rule(&p.rule)
                    .ok_or_else(|| Error::UnknownRule(p.rule.clone()))?;
                Ok(SettlePair {
                    rule,
                    actual: each(i)?,
                })
            })
            .collect()
    }

    /// Waits until `cost` units of `key` under `rule` are admitted, then
    /// returns that admitting decision (x/time/rate's `Wait`). With
    /// `max_wait`, fails at once — consuming nothing — when the wait the
    /// limiter reports would end past it, instead of sleeping into a
    /// failure. Waiters are not queued: after each sleep the check is tried
    /// again and may find the units taken by another caller.
    ///
    /// # Errors
    /// [`WaitError::DeadlineExceeded`] when admission would come too late,
    /// [`WaitError::Never`] when the cost exceeds the rule's capacity,
    /// [`WaitError::Check`] when the check itself fails.
    pub async fn until_ready(
        &self,
        rule: &str,
        key: impl AsRef<[u8]>,
        cost: u64,
        max_wait: Option<Duration>,
    ) -> Result<Decision, WaitError> {
        let key = key.as_ref();
        // Tokio's time, as the sleeps below are on tokio's timer (and
        // follow it when a test pauses it).
        let clock = TokioClock::new();
        let deadline = max_wait.map(duration_to_micros);
        loop {
            let decision = self.check(rule, key, cost).await?;
            if decision.allowed {
                return Ok(decision);
            }
            let Some(retry_after) = decision.retry_after else {
                return Err(WaitError::Never);
            };
            let wait_ends = clock.now().saturating_add(duration_to_micros(retry_after));
            if deadline.is_some_and(|d| wait_ends > d) {
                return Err(WaitError::DeadlineExceeded { retry_after });
            }
            tokio::time::sleep(retry_after).await;
        }
    }
}
