//! The driver: sends each check to the store and to the reference, and
//! compares every field; and the helpers that name rules, keys and times
//! in a [`Failure`].

use std::collections::HashMap;
use std::time::Duration;

use super::{Failure, HOUR, Report, START};
use crate::algorithm::{self, Charged, KeyState};
use crate::decision::{Decision, MultiDecision};
use crate::rule::{Algorithm, Rule, RuleSpec};
use crate::store::{KeyCheck, Released, SettlePair, Settled, Store};
use crate::ticket::{Ticket, TicketKind, TicketPair};
use crate::time::{Micros, duration_to_micros};

/// Sends checks to the store and to the reference, and compares.
pub(super) struct Driver<'a, S> {
    pub(super) store: &'a S,
    pub(super) namespace: &'a str,
    pub(super) report: Report,
    pub(super) case: String,
    pub(super) case_index: usize,
    pub(super) step: usize,
    /// The kit's clock: only moves forward, across cases too.
    pub(super) now: Micros,
    /// Reference state per (rule name, full key).
    pub(super) states: HashMap<(String, Vec<u8>), KeyState>,
    /// Reservations made, by nonce.
    pub(super) reservations: HashMap<[u8; 16], OpenReservation>,
    /// Rules by name, for settles (the store takes them from the ticket).
    pub(super) rules: HashMap<String, Rule>,
}

impl<S: Store> Driver<'_, S> {
    /// Starts a case at the next whole hour plus `offset` µs.
    pub(super) fn begin(&mut self, name: String, offset: Micros) -> Micros {
        self.case = name;
        self.case_index += 1;
        self.step = 0;
        self.states.clear();
        self.report.cases += 1;
        self.now = (self.now / HOUR + 1) * HOUR + offset;
        self.now
    }

    /// `name@namespace/case`: the namespace goes last so that a store which
    /// runs rule names and keys together shows it (see [`isolation`]).
    pub(super) fn full_key(&self, name: &[u8]) -> Vec<u8> {
        let mut key = name.to_vec();
        key.extend_from_slice(format!("@{}/{}", self.namespace, self.case_index).as_bytes());
        key
    }

    pub(super) fn advance(&mut self, t: Micros) {
        debug_assert!(t >= self.now, "the kit's clock only moves forward");
        self.now = self.now.max(t);
    }

    pub(super) fn failure(&self, check: String, expected: String, got: String) -> Failure {
        Failure {
            case: self.case.clone(),
            step: self.step,
            check,
            expected,
            got,
        }
    }

    /// The store's answer `got` if it is `want`; else the failure of
    /// `check` (named only then: building the name costs).
    fn compare<T: PartialEq + std::fmt::Debug>(
        &self,
        check: impl FnOnce() -> String,
        want: T,
        got: Result<T, crate::error::StoreError>,
    ) -> Result<T, Failure> {
        match got {
            Ok(got) if got == want => Ok(want),
            other => Err(self.failure(
                check(),
                format!("{want:?}"),
                match other {
                    Ok(got) => format!("{got:?}"),
                    Err(e) => format!("store error: {e}"),
                },
            )),
        }
    }

    /// One check of `key` under `rule` at `t`; returns the (matching) answer.
    pub(super) async fn one(
        &mut self,
        rule: &Rule,
        key: &[u8],
        cost: u64,
        t: Micros,
    ) -> Result<Decision, Failure> {
        self.advance(t);
        let full = self.full_key(key);
        let state = self
            .states
            .entry((rule.name().to_owned(), full.clone()))
            .or_default();
        let want = algorithm::decide(rule, state, t, cost);
        let got = self.store.check(rule, &full, cost, Some(t)).await;
        let check = || {
            format!(
                "check({}, key {}, cost {cost}, at {})",
                describe(rule),
                show_key(&full),
                show_time(t)
            )
        };
        let result = self.compare(check, want, got);
        self.step += 1;
        self.report.checks += 1;
        if !want.allowed {
            self.report.denied += 1;
        }
        result
    }

    /// The reference's all-or-nothing decision of distinct `pairs` (their
    /// full `keys`) at `t`, applied to its states.
    fn decide_all(
        &mut self,
        pairs: &[(&Rule, &[u8], u64)],
        keys: &[Vec<u8>],
        t: Micros,
    ) -> MultiDecision {
        self.advance(t);
        for p in pairs {
            self.rules.insert(p.0.name().to_owned(), p.0.clone());
        }
        let empty = KeyState::Empty;
        let evaluated: Vec<Decision> = pairs
            .iter()
            .zip(keys)
            .map(|(&(rule, _, cost), key)| {
                let state = self.states.get(&(rule.name().to_owned(), key.clone()));
                algorithm::evaluate(rule, state.unwrap_or(&empty), t, cost)
            })
            .collect();
        let decisions: Vec<Decision> = if evaluated.iter().all(|d| d.allowed) {
            pairs
                .iter()
                .zip(keys)
                .map(|(&(rule, _, cost), key)| {
                    let state = self
                        .states
                        .entry((rule.name().to_owned(), key.clone()))
                        .or_default();
                    algorithm::decide(rule, state, t, cost)
                })
                .collect()
        } else {
            pairs
                .iter()
                .zip(keys)
                .zip(evaluated)
                .map(|((&(rule, _, _), key), d)| {
                    if d.allowed {
                        let state = self.states.get(&(rule.name().to_owned(), key.clone()));
                        algorithm::evaluate(rule, state.unwrap_or(&empty), t, 0)
                    } else {
                        d
                    }
                })
                .collect()
        };
        MultiDecision {
            allowed: decisions.iter().all(|d| d.allowed),
            deciding: deciding(&decisions),
            decisions,
        }
    }

    /// One all-or-nothing check of several distinct (rule, key, cost) pairs.
    pub(super) async fn all(
        &mut self,
        pairs: &[(&Rule, &[u8], u64)],
        t: Micros,
    ) -> Result<MultiDecision, Failure> {
        self.advance(t);
        let keys: Vec<Vec<u8>> = pairs.iter().map(|p| self.full_key(p.1)).collect();
        let want = self.decide_all(pairs, &keys, t);
        let checks = key_checks(pairs, &keys);
        let got = self.store.check_all(&checks, Some(t)).await;
        let check = || format!("check_all([{}], at {})", listed(pairs, &keys), show_time(t));
        let result = self.compare(check, want.clone(), got);
        self.step += 1;
        self.report.multi_checks += 1;
        if !want.allowed {
            self.report.denied += 1;
        }
        result
    }
}

impl<S: Store> Driver<'_, S> {
    /// One charge of several (rule, key, cost) pairs, each in turn (a key
    /// named twice is charged twice); returns the (matching) answers.
    pub(super) async fn charge(
        &mut self,
        pairs: &[(&Rule, &[u8], u64)],
        t: Micros,
    ) -> Result<Vec<Charged>, Failure> {
        self.report.charges += 1;
        self.usage(pairs, t, false).await
    }

    /// One refund of several (rule, key, units) pairs, each in turn;
    /// returns the (matching) answers.
    pub(super) async fn refund(
        &mut self,
        pairs: &[(&Rule, &[u8], u64)],
        t: Micros,
    ) -> Result<Vec<Charged>, Failure> {
        self.report.refunds += 1;
        self.usage(pairs, t, true).await
    }

    /// A charge, or (`refund`) a refund, against the reference.
    async fn usage(
        &mut self,
        pairs: &[(&Rule, &[u8], u64)],
        t: Micros,
        refund: bool,
    ) -> Result<Vec<Charged>, Failure> {
        self.advance(t);
        let keys: Vec<Vec<u8>> = pairs.iter().map(|p| self.full_key(p.1)).collect();
        let want: Vec<Charged> = pairs
            .iter()
            .zip(&keys)
            .map(|(&(rule, _, cost), key)| {
                let state = self
                    .states
                    .entry((rule.name().to_owned(), key.clone()))
                    .or_default();
                if refund {
                    algorithm::refund(rule, state, t, cost)
                } else {
                    algorithm::charge(rule, state, t, cost)
                }
            })
            .collect();
        let checks = key_checks(pairs, &keys);
        let got = if refund {
            self.store.refund_all(&checks, Some(t)).await
        } else {
            self.store.charge_all(&checks, Some(t)).await
        };
        let what = if refund { "refund_all" } else { "charge_all" };
        let check = || format!("{what}([{}], at {})", listed(pairs, &keys), show_time(t));
        let result = self.compare(check, want, got);
        self.step += 1;
        result
    }
}

/// A reservation as the reference keeps it.
pub(super) struct OpenReservation {
    /// (rule, full key, estimate) per pair.
    pairs: Vec<(Rule, Vec<u8>, u64)>,
    made: Micros,
    due: Micros,
    closed: bool,
}

impl<S: Store> Driver<'_, S> {
    /// Reserves `pairs` (each cost its estimate) for `ttl` µs at `t`;
    /// returns the (matching) decision and, when admitted, the ticket.
    pub(super) async fn reserve(
        &mut self,
        pairs: &[(&Rule, &[u8], u64)],
        ttl: Micros,
        t: Micros,
    ) -> Result<Option<Ticket>, Failure> {
        let keys: Vec<Vec<u8>> = pairs.iter().map(|p| self.full_key(p.1)).collect();
        let ticket = Ticket::new(
            TicketKind::Reservation,
            pairs
                .iter()
                .zip(&keys)
                .map(|(p, k)| TicketPair::new(p.0.name(), k))
                .collect(),
        );
        // The decision is a check's: the reference and the store's answer
        // are compared by `all` (which also advances the reference).
        let checks = key_checks(pairs, &keys);
        let got = self.store.reserve_all(&checks, &ticket, ttl, Some(t)).await;
        let want = self.decide_all(pairs, &keys, t);
        let check = || {
            format!(
                "reserve_all({} pairs, ttl {ttl}us, at {})",
                pairs.len(),
                show_time(t)
            )
        };
        let result = self
            .compare(check, want.clone(), got)
            .map(|got| got.allowed.then_some(ticket.clone()));
        if want.allowed {
            self.reservations.insert(
                ticket.nonce,
                OpenReservation {
                    pairs: pairs
                        .iter()
                        .zip(keys)
                        .map(|(p, k)| (p.0.clone(), k, p.2))
                        .collect(),
                    made: t,
                    due: t + ttl,
                    closed: false,
                },
            );
        }
        self.step += 1;
        self.report.reservations += 1;
        result
    }

    /// Settles (`actual` per pair) or cancels (`None`) `ticket` at `t`.
    pub(super) async fn settle(
        &mut self,
        ticket: &Ticket,
        actual: Option<&[u64]>,
        t: Micros,
    ) -> Result<Settled, Failure> {
        self.advance(t);
        let remembered = crate::time::duration_to_micros(crate::ticket::REMEMBERED_AFTER_TTL);
        let want = match self.reservations.get_mut(&ticket.nonce) {
            // Forgotten once its memory after the ttl is over.
            Some(r) if t >= r.due + remembered => Settled::Unknown,
            None => Settled::Unknown,
            Some(r) if r.closed => Settled::Finished,
            Some(r) => {
                r.closed = true;
                let late = t > r.due;
                let estimates = r.pairs.iter().map(|p| p.2).collect();
                let mut charged = Vec::new();
                for (i, (rule, key, estimate)) in r.pairs.iter().enumerate() {
                    let state = self
                        .states
                        .entry((rule.name().to_owned(), key.clone()))
                        .or_default();
                    let a = actual.map(|a| a[i]);
                    charged.push(match a {
                        Some(a) if a >= *estimate => {
                            algorithm::charge(rule, state, t, a - estimate)
                        }
                        back => {
                            if !late {
                                let units = estimate - back.unwrap_or(0);
                                algorithm::give_back(rule, state, t, r.made, units);
                            }
                            algorithm::charge(rule, state, t, 0)
                        }
                    });
                }
                Settled::Done {
                    late,
                    charged,
                    estimates,
                }
            }
        };
        let rules: Vec<Rule> = ticket
            .pairs
            .iter()
            .filter_map(|p| self.rules.get(&p.rule).cloned())
            .collect();
        let pairs: Vec<SettlePair<'_>> = rules
            .iter()
            .enumerate()
            .map(|(i, rule)| SettlePair {
                rule,
                actual: actual.map(|a| a[i]),
            })
            .collect();
        let got = self.store.settle(ticket, &pairs, Some(t)).await;
        let check = || {
            format!(
                "settle({}, actual {actual:?}, at {})",
                ticket.nonce_hex(),
                show_time(t)
            )
        };
        let result = self.compare(check, want, got);
        self.step += 1;
        self.report.settles += 1;
        result
    }
}

impl<S: Store> Driver<'_, S> {
    /// Acquires distinct concurrency `pairs` at `t`; returns the (matching)
    /// decision's ticket when admitted.
    pub(super) async fn acquire(
        &mut self,
        pairs: &[(&Rule, &[u8], u64)],
        t: Micros,
    ) -> Result<Option<Ticket>, Failure> {
        self.advance(t);
        let keys: Vec<Vec<u8>> = pairs.iter().map(|p| self.full_key(p.1)).collect();
        // The pairs taking slots (cost 0 peeks), as the limiter names them.
        let ticket = Ticket::new(
            TicketKind::Lease,
            pairs
                .iter()
                .zip(&keys)
                .filter(|(p, _)| p.2 > 0)
                .map(|(p, k)| TicketPair::new(p.0.name(), k))
                .collect(),
        );
        let empty = KeyState::Empty;
        let evaluated: Vec<Decision> = pairs
            .iter()
            .zip(&keys)
            .map(|(&(rule, _, cost), key)| {
                self.rules.insert(rule.name().to_owned(), rule.clone());
                let state = self.states.get(&(rule.name().to_owned(), key.clone()));
                algorithm::evaluate(rule, state.unwrap_or(&empty), t, cost)
            })
            .collect();
        let all = evaluated.iter().all(|d| d.allowed);
        let decisions: Vec<Decision> = pairs
            .iter()
            .zip(&keys)
            .zip(evaluated)
            .map(|((&(rule, _, cost), key), d)| {
                let state = self
                    .states
                    .entry((rule.name().to_owned(), key.clone()))
                    .or_default();
                if all {
                    let mut leases = match std::mem::take(state) {
                        KeyState::Concurrency(l) => l,
                        _ => algorithm::Leases::default(),
                    };
                    leases.acquire(rule, t, cost, ticket.nonce);
                    *state = KeyState::Concurrency(leases);
                    d
                } else if d.allowed {
                    algorithm::evaluate(rule, state, t, 0)
                } else {
                    d
                }
            })
            .collect();
        let want = MultiDecision {
            allowed: all,
            deciding: deciding(&decisions),
            decisions,
        };
        let checks = key_checks(pairs, &keys);
        let got = self.store.acquire_all(&checks, &ticket, Some(t)).await;
        let check = || format!("acquire_all({} pairs, at {})", pairs.len(), show_time(t));
        let result = self
            .compare(check, want, got)
            .map(|_| (all && !ticket.pairs.is_empty()).then_some(ticket));
        self.step += 1;
        self.report.leases += 1;
        result
    }

    /// Releases (or `renew`s) `ticket` at `t`.
    pub(super) async fn release(
        &mut self,
        ticket: &Ticket,
        renew: bool,
        t: Micros,
    ) -> Result<Released, Failure> {
        self.advance(t);
        let rules: Vec<Rule> = ticket
            .pairs
            .iter()
            .filter_map(|p| self.rules.get(&p.rule).cloned())
            .collect();
        let keys: Vec<(String, Vec<u8>)> = ticket
            .pairs
            .iter()
            .map(|p| (p.rule.clone(), self.full_key_of_name(&p.key)))
            .collect();
        let live = keys.iter().all(|k| match self.states.get(k) {
            Some(KeyState::Concurrency(l)) => {
                l.iter().any(|l| l.id == ticket.nonce && l.expires > t)
            }
            _ => false,
        });
        let want = if live {
            Released::Done(
                keys.iter()
                    .zip(&rules)
                    .map(|(k, rule)| {
                        let state = self.states.entry(k.clone()).or_default();
                        if let KeyState::Concurrency(l) = state {
                            if renew {
                                l.renew(rule, t, ticket.nonce);
                            } else {
                                l.release(t, ticket.nonce);
                            }
                        }
                        algorithm::evaluate(rule, state, t, 0)
                    })
                    .collect(),
            )
        } else {
            Released::Unknown
        };
        let refs: Vec<&Rule> = rules.iter().collect();
        let got = self.store.release(ticket, &refs, renew, Some(t)).await;
        let check = || {
            format!(
                "release({}, renew {renew}, at {})",
                ticket.nonce_hex(),
                show_time(t)
            )
        };
        let result = self.compare(check, want, got);
        self.step += 1;
        self.report.leases += 1;
        result
    }

    /// The full key a ticket names by `name` (`=` and its bytes: the kit's
    /// keys are short).
    fn full_key_of_name(&self, name: &[u8]) -> Vec<u8> {
        name.get(1..).unwrap_or_default().to_vec()
    }
}

/// `pairs` as a failure names them.
fn listed(pairs: &[(&Rule, &[u8], u64)], keys: &[Vec<u8>]) -> String {
    pairs
        .iter()
        .zip(keys)
        .map(|(&(rule, _, cost), key)| {
            format!("({}, key {}, cost {cost})", describe(rule), show_key(key))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The store's form of `pairs`, each with its full key.
fn key_checks<'a>(pairs: &[(&'a Rule, &[u8], u64)], keys: &'a [Vec<u8>]) -> Vec<KeyCheck<'a>> {
    pairs
        .iter()
        .zip(keys)
        .map(|(&(rule, _, cost), key)| KeyCheck {
            rule,
            key: key.as_slice(),
            cost,
        })
        .collect()
}

/// docs/semantics.md, "Several rules in one check": the denying pair with
/// the longest `retry_after` ("never" longest), or when admitted the pair
/// with the fewest `remaining`; the first pair on ties.
pub(super) fn deciding(decisions: &[Decision]) -> usize {
    if decisions.iter().all(|d| d.allowed) {
        let fewest = decisions.iter().map(|d| d.remaining).min();
        decisions
            .iter()
            .position(|d| Some(d.remaining) == fewest)
            .unwrap_or(0)
    } else {
        let wait = |d: &Decision| (!d.allowed).then(|| d.retry_after.unwrap_or(Duration::MAX));
        let longest = decisions.iter().filter_map(wait).max();
        decisions
            .iter()
            .position(|d| wait(d).is_some() && wait(d) == longest)
            .unwrap_or(0)
    }
}

pub(super) fn describe(rule: &Rule) -> String {
    let burst = if rule.algorithm().has_burst() {
        format!(" burst {}", rule.burst())
    } else {
        String::new()
    };
    format!(
        "rule {} [{} {} per {}us{burst}]",
        rule.name(),
        rule.algorithm(),
        rule.limit(),
        rule.period_micros()
    )
}

pub(super) fn show_key(key: &[u8]) -> String {
    if key.len() > 80 {
        format!(
            "{:?}...({} bytes)",
            String::from_utf8_lossy(&key[..40]),
            key.len()
        )
    } else {
        format!("{:?}", String::from_utf8_lossy(key))
    }
}

pub(super) fn show_time(t: Micros) -> String {
    format!("START+{}us", t - START)
}

pub(super) fn micros(d: Duration) -> Micros {
    duration_to_micros(d)
}

pub(super) fn rule(
    name: &str,
    algorithm: Algorithm,
    limit: u64,
    period: Micros,
    burst: Option<u64>,
) -> Rule {
    let mut spec = RuleSpec::new(name, algorithm, limit, Duration::from_micros(period));
    spec.burst = burst.filter(|_| algorithm.has_burst());
    match spec.build() {
        Ok(rule) => rule,
        // The kit's own rules are all valid; a failure here is a kit bug.
        Err(e) => panic!("conformance kit rule {name}: {e}"),
    }
}

pub(super) fn label(kind: &str, r: &Rule) -> String {
    let burst = if r.algorithm().has_burst() {
        format!(" burst {}", r.burst())
    } else {
        String::new()
    };
    format!(
        "{}/{kind} {} per {}us{burst}",
        r.algorithm(),
        r.limit(),
        r.period_micros()
    )
}
