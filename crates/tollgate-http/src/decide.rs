//! One decision path for HTTP: how a request becomes keys, the keys a
//! check, and the check's outcome an answer. The tower layer
//! (`tollgate_tower::RateLimitLayer`), the server's reverse proxy and its HTTP API
//! all decide through here, so a change to an answer (a degraded header, a
//! 400 body) is made once.
//!
//! * [`RuleKeys`]: the rules a door checks, each with its key extractor,
//!   plus the client-address config and the [`MissingKey`] policy.
//!   [`RuleKeys::keys`] builds a request's keys, or the 400 (problem+json)
//!   that refuses it; [`RuleKeys::check`] checks them all-or-nothing in one
//!   [`ResilientLimiter::check_all_as`] and answers with an [`HttpVerdict`].
//!   Rules that hold something past the answer (a cost read from the
//!   response, [`RuleKeys::with_response_cost`]; a `concurrency` rule) are
//!   admitted with [`RuleKeys::admit`] (in [`crate::usage`]), whose hold
//!   ends with the response body.
//! * [`answer`] and [`refusal`]: a check's outcome as an [`HttpVerdict`]
//!   (admit with RateLimit headers; 429; 503 when the store failed under
//!   `deny`), for a door that checks by itself.
//! * [`Basis`] and [`insert_verdict_headers`]: which headers an outcome
//!   gets, and the degraded marker (`tollgate-degraded`), for a door that
//!   writes its own body (the server's JSON API).
//!
//! ```
//! # use std::sync::Arc;
//! # use std::time::Duration;
//! use tollgate::resilient::ResilientLimiter;
//! use tollgate::{Algorithm, Limiter, MemoryStore, RuleSpec};
//! use tollgate_http::decide::HttpVerdict;
//! use tollgate_http::decide::RuleKeys;
//! use tollgate_http::extract::MissingKey;
//! use tollgate_http::headers::HeaderOptions;
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(async {
//! let limiter = Limiter::new(MemoryStore::new(), [
//!     RuleSpec::new("per_key", Algorithm::Gcra, 1, Duration::from_secs(60)).build()?,
//! ])?;
//! let limiter = ResilientLimiter::builder(limiter).build()?;
//! let rules = RuleKeys::new(limiter.rules(), [("per_key", "header:x-api-key".parse()?)])?
//!     .with_missing_key(MissingKey::Reject);
//!
//! let req = http::Request::get("/").header("x-api-key", "k1").body(())?;
//! let keys = rules
//!     .keys(req.method(), req.uri(), req.headers(), None)
//!     .map_err(|r| format!("refused: {}", r.status()))?;
//! let first = rules.check(&limiter, &keys, None, HeaderOptions::default()).await;
//! assert!(matches!(first, HttpVerdict::Admit { .. }));
//! let second = rules.check(&limiter, &keys, None, HeaderOptions::default()).await;
//! let HttpVerdict::Respond { response, .. } = second else { panic!("admitted twice") };
//! assert_eq!(response.status(), 429);
//!
//! // No key header under `reject`: a 400 before any check.
//! let bare = http::Request::get("/").body(())?;
//! let refused = rules.keys(bare.method(), bare.uri(), bare.headers(), None).unwrap_err();
//! assert_eq!(refused.status(), 400);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fmt;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, HeaderValue, Method, Response, StatusCode, Uri};
use tollgate::limits::MAX_KEY_LEN;
use tollgate::resilient::{self, OnError, Refusal, ResilientLimiter};
use tollgate::{Algorithm, Check, Decision, Error, MultiDecision, Rule, Store};

use crate::cost::ResponseCost;
use crate::estimate::{MAX_TOKENS_POINTERS, RequestEstimate};
use crate::request_body::{BodyFacts, BodyPlan};

use crate::extract::{ClientIpConfig, KeyError, MissingKey};
use crate::headers::{Deciding, HeaderOptions, Policy, insert_headers, insert_policy};
use crate::key::KeyExtractor;
use crate::response::{
    DEGRADED_LOCAL, DEGRADED_STORE_UNAVAILABLE, KEY_TOO_LONG, MISSING_KEY, TOLLGATE_DEGRADED,
    problem, store_unavailable, too_many_requests,
};

/// Why [`RuleKeys`] or the tower layer (`tollgate_tower::RateLimitLayer`) could not be built.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum BuildError {
    /// No rules: the layer would decide nothing.
    NoRules,
    /// The limiter has no rule of this name.
    UnknownRule(String),
    /// The rule is named twice (its RateLimit header members would clash).
    DuplicateRule(String),
    /// The rule cannot take its cost from the response: it is a
    /// `concurrency` rule, has no key here, or the estimate is more than
    /// it ever admits at once.
    BadCost {
        /// The rule's name.
        rule: String,
        /// Why.
        why: String,
    },
    /// The rule reads the request body (a `request_json` key, an
    /// estimate read from the request) and the door does not read bodies
    /// (the tower layer: [`RuleKeys::without_body`]).
    ReadsBody {
        /// The rule's name.
        rule: String,
        /// What it reads: its key, or its estimate.
        what: String,
    },
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BuildError::NoRules => f.write_str("a rate limit layer needs at least one rule"),
            BuildError::UnknownRule(name) => {
                write!(f, "the limiter has no rule named {name:?}")
            }
            BuildError::DuplicateRule(name) => write!(f, "rule {name:?} is named twice"),
            BuildError::BadCost { rule, why } => write!(f, "rule {rule:?}: {why}"),
            BuildError::ReadsBody { rule, what } => write!(
                f,
                "rule {rule:?} reads the request body ({what}), which this door does not \
                 read: key it by the request head and give it a fixed estimate (the reverse \
                 proxy reads bodies)"
            ),
        }
    }
}

impl std::error::Error for BuildError {}

/// What the layer decided about a request, before any inner service runs:
/// `tollgate_tower::RateLimitLayer::decide`, or [`RuleKeys::check`]. For a front door that is not a tower
/// service (the reverse proxy) to do exactly what the layer does.
#[derive(Debug)]
#[non_exhaustive]
pub enum HttpVerdict {
    /// Pass the request on, then add `headers` to its response.
    #[non_exhaustive]
    Admit {
        /// `RateLimit-Policy` and `RateLimit` (and legacy ones if
        /// configured), plus `tollgate-degraded: local` when the local
        /// fallback decided; or `RateLimit-Policy` and
        /// `tollgate-degraded: store-unavailable` when the store failed
        /// under [`OnError::Allow`]. Add them
        /// replacing any of the same name:
        /// `response.headers_mut().extend(headers)`.
        headers: HeaderMap,
        /// The check's answer, one decision per applying rule in the
        /// layer's order; `None` when the store failed and nothing was
        /// decided, or when every rule was skipped
        /// ([`MissingKey::Skip`]) and nothing was checked.
        decision: Option<MultiDecision>,
    },
    /// Answer `response` instead: 429 (denied, by the store or the local
    /// fallback), 503 (store failed under [`OnError::Deny`]), 400
    /// (missing key under
    /// [`MissingKey::Reject`]) or 500 (no peer address for a
    /// `client_ip` key).
    #[non_exhaustive]
    Respond {
        /// The answer.
        response: Response<String>,
        /// The denying check's answer on a 429; `None` otherwise.
        decision: Option<MultiDecision>,
    },
}

impl HttpVerdict {
    /// The headers to add to an admitted request's response (`Ok`), or the
    /// answer to send instead (`Err`); the decision is dropped.
    ///
    /// # Errors
    /// The answer refusing the request (boxed: large, and off the
    /// admitting path).
    pub fn into_headers(self) -> Result<HeaderMap, Box<Response<String>>> {
        match self {
            HttpVerdict::Admit { headers, .. } => Ok(headers),
            HttpVerdict::Respond { response, .. } => Err(Box::new(response)),
        }
    }

    /// Answer `response` instead, nothing checked (a key refused before
    /// any check: [`RuleKeys::keys`]).
    #[must_use]
    pub fn respond(response: Response<String>) -> Self {
        HttpVerdict::Respond {
            response,
            decision: None,
        }
    }

    /// Pass the request on as it is, nothing checked (every rule skipped
    /// under [`MissingKey::Skip`]: no headers to add).
    #[must_use]
    pub fn admit_unchecked() -> Self {
        HttpVerdict::Admit {
            headers: HeaderMap::new(),
            decision: None,
        }
    }
}

/// The boxed future of `tollgate_tower::RateLimitLayer::decide`.
pub type HttpVerdictFuture = Pin<Box<dyn Future<Output = HttpVerdict> + Send + 'static>>;

/// One rule a door checks: its name, its position in the limiter's rules,
/// its key extractor, and how a request is charged to it.
#[derive(Debug, Clone)]
pub(crate) struct RuleKey {
    /// The rule (shared with the limiter: its name is not copied).
    rule: Rule,
    pub(crate) index: usize,
    extractor: KeyExtractor,
    /// Read from the response (reserve, then settle) instead of 1 per
    /// request.
    pub(crate) cost: Option<ResponseCost>,
    /// A `concurrency` rule: a lease held for the life of the request,
    /// renewed within this lease.
    pub(crate) lease: Option<Duration>,
}

impl RuleKey {
    /// The rule's name.
    pub(crate) fn name(&self) -> &str {
        self.rule.name()
    }
}

/// The rules a front door checks every request against, each with its key
/// extractor, and how keys are built: the client-address config and the
/// [`MissingKey`] policy.
#[derive(Debug, Clone)]
pub struct RuleKeys {
    rules: Vec<RuleKey>,
    needs_client_ip: bool,
    /// What the rules read of a request body; `None`: nothing.
    body: Option<Arc<BodyPlan>>,
    pub(crate) client_ip: ClientIpConfig,
    pub(crate) missing_key: MissingKey,
}

/// A request's keys, from [`RuleKeys::keys`]: one per rule that applies,
/// in the rules' order (a rule skipped under [`MissingKey::Skip`] has
/// none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keys {
    keys: Vec<(usize, Vec<u8>)>,
    /// The reservation of each rule whose estimate is read from the
    /// request, by position.
    estimates: Vec<(usize, u64)>,
}

impl Keys {
    /// Whether no rule applies (every one skipped): nothing to check.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// How many rules apply.
    #[must_use]
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Each applying rule's position in [`RuleKeys::rules`] with the key.
    pub fn iter(&self) -> impl Iterator<Item = (usize, &[u8])> {
        self.keys.iter().map(|(i, k)| (*i, k.as_slice()))
    }

    /// The keys of the rules `keep` (given a position) picks.
    pub(crate) fn only(&self, keep: impl Fn(usize) -> bool) -> Keys {
        Keys {
            keys: self
                .keys
                .iter()
                .filter(|(i, _)| keep(*i))
                .cloned()
                .collect(),
            estimates: self
                .estimates
                .iter()
                .filter(|(i, _)| keep(*i))
                .copied()
                .collect(),
        }
    }

    /// The units the request's own estimate asks of the rule at position
    /// `i`, if its estimate is read from the request; admission caps them
    /// at the capacity of the limit deciding the key.
    #[must_use]
    pub fn estimate(&self, i: usize) -> Option<u64> {
        self.estimates
            .iter()
            .find_map(|&(at, n)| (at == i).then_some(n))
    }
}

impl RuleKeys {
    /// `rules`, (rule name, key extractor) pairs, each named rule one of
    /// `all` (the limiter's rules). Defaults: [`ClientIpConfig::new`],
    /// [`MissingKey::Empty`]. No rules is allowed (every request is then
    /// admitted unchecked); the tower layer refuses it.
    ///
    /// # Errors
    /// A name `all` does not hold, or a name given twice.
    pub fn new<N: Into<String>>(
        all: &[Rule],
        rules: impl IntoIterator<Item = (N, KeyExtractor)>,
    ) -> Result<Self, BuildError> {
        // By name, once: a lookup per rule, not a scan (100,000 rules).
        let mut by_name = std::collections::HashMap::with_capacity(all.len());
        for (i, r) in all.iter().enumerate() {
            // The first of a name, as a scan would find it.
            by_name.entry(r.name()).or_insert(i);
        }
        let mut taken = vec![false; all.len()];
        let rules = rules.into_iter();
        let mut keyed: Vec<RuleKey> = Vec::with_capacity(rules.size_hint().0);
        for (name, extractor) in rules {
            let name = name.into();
            let Some(&index) = by_name.get(name.as_str()) else {
                return Err(BuildError::UnknownRule(name));
            };
            if std::mem::replace(&mut taken[index], true) {
                return Err(BuildError::DuplicateRule(name));
            }
            let rule = &all[index];
            keyed.push(RuleKey {
                rule: rule.clone(),
                index,
                extractor,
                cost: None,
                lease: (rule.algorithm() == Algorithm::Concurrency).then(|| rule.period()),
            });
        }
        Ok(Self {
            needs_client_ip: keyed.iter().any(|r| r.extractor.uses_client_ip()),
            body: body_plan_of(&keyed),
            rules: keyed,
            client_ip: ClientIpConfig::new(),
            missing_key: MissingKey::default(),
        })
    }

    /// How `client_ip` is found: trusted proxies and IPv6 grouping.
    #[must_use]
    pub fn with_client_ip(mut self, config: ClientIpConfig) -> Self {
        self.client_ip = config;
        self
    }

    /// What a request missing a key header (or host) gets.
    #[must_use]
    pub fn with_missing_key(mut self, policy: MissingKey) -> Self {
        self.missing_key = policy;
        self
    }

    /// Charges the rule named `rule` by the usage its response reports
    /// ([`ResponseCost`]): its estimate reserved when a request arrives,
    /// settled when the response ends (docs/tower.md, "Usage and
    /// in-flight limits"). `all` are the limiter's rules.
    ///
    /// # Errors
    /// [`BuildError::UnknownRule`] for a rule these keys do not check;
    /// [`BuildError::BadCost`] for a `concurrency` rule (its slots are
    /// held, not charged) or an estimate above the rule's capacity (no
    /// request could ever be admitted).
    pub fn with_response_cost(
        mut self,
        all: &[Rule],
        rule: &str,
        cost: ResponseCost,
    ) -> Result<Self, BuildError> {
        let Some(entry) = self.rules.iter_mut().find(|r| r.name() == rule) else {
            return Err(BuildError::UnknownRule(rule.to_owned()));
        };
        let bad = |why: String| BuildError::BadCost {
            rule: rule.to_owned(),
            why,
        };
        if entry.lease.is_some() {
            return Err(bad(
                "a concurrency rule holds slots for the life of a request; its cost is not read                  from the response"
                    .to_owned(),
            ));
        }
        let capacity = all[entry.index].capacity();
        if cost.estimate() > capacity {
            return Err(bad(format!(
                "estimate {} is more than the rule admits at once ({capacity}):                  no request could ever be admitted",
                cost.estimate()
            )));
        }
        entry.cost = Some(cost);
        self.body = body_plan_of(&self.rules);
        Ok(self)
    }

    /// What the rules read of a request body (`request_json` keys, an
    /// estimate read from the request); `None` when nothing, and then
    /// [`RuleKeys::keys`] is all a door needs. A door that cannot read
    /// bodies refuses rules that have one (the tower layer does).
    #[must_use]
    pub fn body_plan(&self) -> Option<&Arc<BodyPlan>> {
        self.body.as_ref()
    }

    /// The rules with their costs and leases, in check order.
    pub(crate) fn entries(&self) -> &[RuleKey] {
        &self.rules
    }

    /// Whether a request holds anything past its answer: a rule charged
    /// from the response, or a `concurrency` rule. Such keys are admitted
    /// with [`RuleKeys::admit`], whose hold ends with the response body.
    #[must_use]
    pub fn holds(&self) -> bool {
        self.rules
            .iter()
            .any(|r| r.cost.is_some() || r.lease.is_some())
    }

    /// Each rule's response cost, by name (only the rules that have one).
    pub fn response_costs(&self) -> impl Iterator<Item = (&str, &ResponseCost)> {
        self.rules
            .iter()
            .filter_map(|r| Some((r.name(), r.cost.as_ref()?)))
    }

    /// The (rule name, key extractor) pairs, in check order.
    pub fn rules(&self) -> impl Iterator<Item = (&str, &KeyExtractor)> {
        self.rules.iter().map(|r| (r.name(), &r.extractor))
    }

    /// Whether there are no rules.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Whether any extractor reads the client address (else
    /// [`RuleKeys::keys`] needs no peer address).
    #[must_use]
    pub fn needs_client_ip(&self) -> bool {
        self.needs_client_ip
    }

    /// The client address configuration.
    #[must_use]
    pub fn client_ip(&self) -> &ClientIpConfig {
        &self.client_ip
    }

    /// The missing-key policy.
    #[must_use]
    pub fn missing_key(&self) -> MissingKey {
        self.missing_key
    }

    /// Every applying rule's key for a request head from `peer` (only read
    /// when an extractor reads `client_ip`), or the answer that refuses
    /// the request: `400` (problem+json, type
    /// [`MISSING_KEY`]) naming the rule and
    /// the part under [`MissingKey::Reject`]; `500` for a `client_ip` key
    /// without a peer address.
    ///
    /// # Errors
    /// The refusing answer, boxed (it is large and rare).
    pub fn keys(
        &self,
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
        peer: Option<IpAddr>,
    ) -> Result<Keys, Box<Response<String>>> {
        self.keys_with_body(method, uri, headers, peer, None)
    }

    /// [`RuleKeys::keys`] with what the request body said (`None`: not
    /// read), for the rules that read it ([`RuleKeys::body_plan`]): a
    /// `request_json` value it lacks is a missing key, and an estimate
    /// read from the request gives its rule's reservation
    /// ([`Keys::estimate`]; at most the rule's capacity).
    ///
    /// # Errors
    /// As [`RuleKeys::keys`].
    pub fn keys_with_body(
        &self,
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
        peer: Option<IpAddr>,
        body: Option<&BodyFacts>,
    ) -> Result<Keys, Box<Response<String>>> {
        let client_ip = if self.needs_client_ip {
            peer.map(|ip| self.client_ip.client_ip(ip, headers))
        } else {
            None
        };
        let mut keys = Vec::with_capacity(self.rules.len());
        for (i, rule) in self.rules.iter().enumerate() {
            match rule.extractor.extract_with_body(
                method,
                uri,
                headers,
                client_ip,
                self.missing_key,
                body,
            ) {
                Ok(key) => keys.push((i, key)),
                Err(KeyError::Missing(_)) if self.missing_key == MissingKey::Skip => {}
                Err(e @ KeyError::Missing(_)) => {
                    return Err(Box::new(problem(
                        StatusCode::BAD_REQUEST,
                        MISSING_KEY,
                        "Bad Request",
                        &format!(
                            "{e}, which rule \"{}\" keys on ({}).",
                            rule.name(),
                            rule.extractor
                        ),
                    )));
                }
                Err(e) => return Err(Box::new(internal(&e.to_string()))),
            }
        }
        let estimates = keys
            .iter()
            .filter_map(|&(i, _)| {
                let rule = &self.rules[i];
                let cost = rule.cost.as_ref()?;
                let from = cost.request_estimate()?;
                // Capped at admission by the deciding limit's capacity
                // (an override may be larger or smaller than the rule).
                Some((i, from.reserve(body, cost.estimate(), u64::MAX)))
            })
            .collect();
        Ok(Keys { keys, estimates })
    }

    /// One [`Check`] (cost 1) per key, in order, each by its rule's
    /// position in the limiter's rules ([`Check::at_index`]): the names
    /// were looked up once, in [`RuleKeys::new`].
    #[must_use]
    pub fn checks<'a>(&'a self, keys: &'a Keys) -> Vec<Check<'a>> {
        keys.keys
            .iter()
            .map(|(i, key)| {
                let rule = &self.rules[*i];
                Check::new(rule.name(), key).at_index(rule.index)
            })
            .collect()
    }

    /// The rules `keys` are checked against, in order, out of `all` (the
    /// limiter's rules these were built over).
    #[must_use]
    pub fn rules_of<'a>(&self, all: &'a [Rule], keys: &Keys) -> Vec<&'a Rule> {
        keys.keys
            .iter()
            .map(|(i, _)| &all[self.rules[*i].index])
            .collect()
    }

    /// Checks `keys` all-or-nothing in one
    /// [`ResilientLimiter::check_all_as`] (`policy`, when given, answers a
    /// store failure instead of the rules' own) and answers: [`answer`] or
    /// [`refusal`]. `keys` must not be empty (see [`Keys::is_empty`]).
    pub async fn check<S: Store>(
        &self,
        limiter: &ResilientLimiter<S>,
        keys: &Keys,
        policy: Option<OnError>,
        options: HeaderOptions,
    ) -> HttpVerdict {
        let outcome = limiter.check_all_as(&self.checks(keys), policy).await;
        self.verdict(limiter.rules(), keys, outcome, options)
    }

    /// A check's `outcome` (of [`RuleKeys::checks`] of `keys`) as a
    /// [`HttpVerdict`]: [`answer`] or [`refusal`].
    #[must_use]
    pub fn verdict(
        &self,
        all: &[Rule],
        keys: &Keys,
        outcome: Result<resilient::Verdict, Refusal>,
        options: HeaderOptions,
    ) -> HttpVerdict {
        match outcome {
            Ok(verdict) => answer(&self.rules_of(all, keys), verdict, options),
            Err(refused) => refusal(&refused),
        }
    }
}

/// What `rules` read of a request body, if anything.
fn body_plan_of(rules: &[RuleKey]) -> Option<Arc<BodyPlan>> {
    let mut pointers: Vec<&str> = rules
        .iter()
        .flat_map(|r| r.extractor.body_pointers())
        .collect();
    let estimates = || {
        rules
            .iter()
            .filter_map(|r| r.cost.as_ref()?.request_estimate())
    };
    if estimates().any(RequestEstimate::reads_max_tokens) {
        pointers.extend(MAX_TOKENS_POINTERS);
    }
    let prompt = estimates().any(RequestEstimate::reads_prompt);
    if pointers.is_empty() && !prompt {
        return None;
    }
    // Every pointer here was parsed once already.
    BodyPlan::new(pointers, prompt).ok().map(Arc::new)
}

/// What an answer's rate-limit headers rest on, from a check's
/// `degraded` ([`resilient::Verdict::degraded`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Basis {
    /// The store decided: RateLimit headers, no marker.
    Store,
    /// The in-process fallback decided (`local`): RateLimit headers and
    /// `tollgate-degraded: local`.
    Local,
    /// The store failed and the `allow` policy let the request through:
    /// nothing was decided, so `RateLimit-Policy` (the quota is known) but
    /// no `RateLimit` (what remains is not), and
    /// `tollgate-degraded: store-unavailable`.
    Unavailable,
}

impl Basis {
    /// The basis of a check that came back with `degraded`.
    #[must_use]
    pub fn of(degraded: Option<OnError>) -> Self {
        match degraded {
            None => Basis::Store,
            Some(OnError::Allow) => Basis::Unavailable,
            Some(_) => Basis::Local,
        }
    }

    /// Whether the answer carries `RateLimit` (and the legacy fields):
    /// false when nothing was decided.
    #[must_use]
    pub fn has_ratelimit(self) -> bool {
        self != Basis::Unavailable
    }

    /// The `tollgate-degraded` value, if the answer is degraded.
    #[must_use]
    pub fn marker(self) -> Option<HeaderValue> {
        match self {
            Basis::Store => None,
            Basis::Local => Some(DEGRADED_LOCAL),
            Basis::Unavailable => Some(DEGRADED_STORE_UNAVAILABLE),
        }
    }

    /// Sets `tollgate-degraded` on `headers` when the answer is degraded.
    pub fn mark(self, headers: &mut HeaderMap) {
        if let Some(value) = self.marker() {
            headers.insert(TOLLGATE_DEGRADED, value);
        }
    }
}

/// Sets the headers of a check's answer on `headers`: `RateLimit-Policy`,
/// `RateLimit` (and the legacy fields `options` asks for; `retry_after`
/// for the legacy reset of a denial) unless nothing was decided, and the
/// degraded marker, as [`Basis::of`] `degraded` says.
pub fn insert_verdict_headers(
    headers: &mut HeaderMap,
    pairs: &[(&dyn Policy, &Decision)],
    retry_after: Option<Duration>,
    degraded: Option<OnError>,
    options: HeaderOptions,
) {
    let basis = Basis::of(degraded);
    if basis.has_ratelimit() {
        insert_headers(headers, pairs, retry_after, options);
    } else {
        insert_policy(headers, pairs);
    }
    basis.mark(headers);
}

/// A check's answer as an [`HttpVerdict`]; `rules` are the checked rules, one
/// per decision, in order, naming the headers' members, whose windows are
/// those of the limits that decided ([`resilient::Verdict::decided_by`]:
/// the answer's own account, never a second lookup). Admitted (or let
/// through by the `allow` policy): [`HttpVerdict::Admit`] with
/// [`insert_verdict_headers`]' headers (no decision when nothing was
/// decided). Denied: [`HttpVerdict::Respond`] with [`too_many_requests`],
/// marked `tollgate-degraded: local` when the local fallback denied.
#[must_use]
pub fn answer(rules: &[&Rule], verdict: resilient::Verdict, options: HeaderOptions) -> HttpVerdict {
    let multi = verdict.multi;
    let basis = Basis::of(verdict.degraded);
    let by = &verdict.decided_by;
    let deciding: Vec<Deciding<'_>> = rules
        .iter()
        .enumerate()
        .map(|(n, rule)| Deciding::new(rule, by.get(n)))
        .collect();
    let pairs: Vec<(&dyn Policy, &Decision)> = deciding
        .iter()
        .map(|d| d as &dyn Policy)
        .zip(&multi.decisions)
        .collect();
    if multi.allowed || !basis.has_ratelimit() {
        let mut headers = HeaderMap::new();
        insert_verdict_headers(&mut headers, &pairs, None, verdict.degraded, options);
        drop(pairs);
        HttpVerdict::Admit {
            headers,
            decision: basis.has_ratelimit().then_some(multi),
        }
    } else {
        let mut response = too_many_requests(&pairs, options);
        basis.mark(response.headers_mut());
        drop(pairs);
        HttpVerdict::Respond {
            response,
            decision: Some(multi),
        }
    }
}

/// The answer to a check the limiter refused: `503` (problem+json,
/// `Retry-After: 1`) when the store failed under `deny`; `400` for a key a
/// store refused as too long (extracted keys never are: long ones are
/// digests); `500` otherwise (unknown rules and empty checks are refused
/// when a door is set up, so anything else is a bug, not the client's
/// fault).
#[must_use]
pub fn refusal(refused: &Refusal) -> HttpVerdict {
    let response = match refused {
        Refusal::Unavailable(_) | Refusal::Stranded { .. } => store_unavailable(),
        Refusal::Invalid(Error::KeyTooLong { len }) => key_too_long(*len),
        e => internal(&e.to_string()),
    };
    HttpVerdict::Respond {
        response,
        decision: None,
    }
}

fn key_too_long(len: usize) -> Response<String> {
    let detail =
        format!("The request's key is {len} bytes; keys are limited to {MAX_KEY_LEN} bytes.");
    problem(
        StatusCode::BAD_REQUEST,
        KEY_TOO_LONG,
        "Bad Request",
        &detail,
    )
}

fn internal(detail: &str) -> Response<String> {
    problem(
        StatusCode::INTERNAL_SERVER_ERROR,
        "about:blank",
        "Internal Server Error",
        detail,
    )
}

mod body;
#[cfg(test)]
mod body_tests;
#[cfg(test)]
mod tests;
