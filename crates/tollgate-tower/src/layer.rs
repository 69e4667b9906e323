//! [`RateLimitLayer`]: the configuration, shared by every clone.

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::{Extensions, Request, Response};
use tollgate::resilient::{OnError, ResilientLimiter};
use tollgate::{Limiter, Store};
use tollgate_http::cost::ResponseCost;
use tollgate_http::decide::{BuildError, HttpVerdict, HttpVerdictFuture, Keys, RuleKeys};
use tollgate_http::extract::{ClientIpConfig, MissingKey};
use tollgate_http::headers::HeaderOptions;
use tollgate_http::key::KeyExtractor;
use tollgate_http::usage::{Admission, AdmissionFuture, DEFAULT_RESERVATION_TTL};

/// The peer address of a request, as an extension. The layer's default
/// peer lookup reads it (or a bare [`SocketAddr`] extension); a hyper
/// server inserts it per connection, or see [`RateLimitLayer::with_peer_addr`]
/// to read another extension (axum's `ConnectInfo`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PeerAddr(pub SocketAddr);

/// Reads the peer address from request extensions.
pub type PeerAddrFn = fn(&Extensions) -> Option<SocketAddr>;

/// The default peer lookup: a [`PeerAddr`] extension, else a [`SocketAddr`]
/// one.
#[must_use]
pub fn default_peer_addr(extensions: &Extensions) -> Option<SocketAddr> {
    extensions
        .get::<PeerAddr>()
        .map(|p| p.0)
        .or_else(|| extensions.get::<SocketAddr>().copied())
}

pub(crate) struct Shared<S> {
    limiter: Arc<ResilientLimiter<S>>,
    keys: RuleKeys,
    header_options: HeaderOptions,
    /// One policy for every rule, or `None`: each rule's own.
    on_error: Option<OnError>,
    peer_addr: PeerAddrFn,
    /// How long a reservation of a rule charged from the response lives.
    reservation_ttl: Duration,
}

impl<S> Clone for Shared<S> {
    fn clone(&self) -> Self {
        Self {
            limiter: Arc::clone(&self.limiter),
            keys: self.keys.clone(),
            header_options: self.header_options,
            on_error: self.on_error,
            peer_addr: self.peer_addr,
            reservation_ttl: self.reservation_ttl,
        }
    }
}

/// A tower [`Layer`](tower_layer::Layer) that checks every request against a set of rules,
/// all-or-nothing, in one [`ResilientLimiter::check_all`].
///
/// Every clone of the layer and of the services it makes shares ONE
/// [`Limiter`] (an [`Arc`]), so a limit of 5 admits 5 requests however many
/// times axum or hyper clone the service (tower's own `RateLimit` keeps its
/// state per clone: axum#2634). The decision is made in `call`, before the
/// inner service is asked whether it is ready (`poll_ready` is always
/// ready): a denied request is answered without waiting for the inner
/// service's capacity, an admitted one waits for it in its response future.
///
/// An admitted request goes to the inner service, and its response gets
/// `RateLimit-Policy` and `RateLimit` with one member per rule. A denied one
/// is answered `429 Too Many Requests` by
/// [`too_many_requests`](tollgate_http::response::too_many_requests). A store
/// failure follows [`RateLimitLayer::with_on_error`]. See [`crate::extract`] for how keys are
/// built.
///
/// Built with [`RateLimitLayer::resilient`] over a [`ResilientLimiter`],
/// checks get its store timeout, circuit breaker, per-rule failure
/// policies and the `local` fallback sized by the live replicas. Built
/// with [`RateLimitLayer::new`] over a plain [`Limiter`], checks wait as
/// long as the store takes (the Redis store bounds each reply by
/// `RedisOptions::timeout`), with a breaker and one policy for every rule.
///
/// ```
/// # use std::sync::Arc;
/// # use std::time::Duration;
/// # use tollgate::{Algorithm, Limiter, MemoryStore, RuleSpec};
/// use tollgate::OnError;
/// use tollgate_tower::RateLimitLayer;
/// use tollgate_tower::extract::{ClientIpConfig, MissingKey};
///
/// let limiter = Arc::new(Limiter::new(MemoryStore::new(), [
///     RuleSpec::new("per_key", Algorithm::Gcra, 100, Duration::from_secs(1)).build()?,
///     RuleSpec::new("per_ip", Algorithm::Gcra, 20, Duration::from_secs(1)).build()?,
/// ])?);
/// let layer = RateLimitLayer::new(limiter, [
///     ("per_key", "header:x-api-key".parse()?),
///     ("per_ip", "client_ip".parse()?),
/// ])?
/// .with_client_ip(ClientIpConfig::new().with_trusted_proxies(["10.0.0.0/8".parse()?]))
/// .with_missing_key(MissingKey::Reject)
/// .with_on_error(OnError::Deny);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct RateLimitLayer<S> {
    shared: Arc<Shared<S>>,
}

impl<S> Clone for RateLimitLayer<S> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<S> fmt::Debug for RateLimitLayer<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &*self.shared;
        f.debug_struct("RateLimitLayer")
            .field(
                "rules",
                &s.keys
                    .rules()
                    .map(|(name, extractor)| (name, extractor.to_string()))
                    .collect::<Vec<_>>(),
            )
            .field("client_ip", s.keys.client_ip())
            .field("header_options", &s.header_options)
            .field("on_error", &s.on_error)
            .field("missing_key", &s.keys.missing_key())
            .finish_non_exhaustive()
    }
}

impl<S: Store> RateLimitLayer<S> {
    /// A layer checking every request against `rules`: (rule name, key
    /// extractor) pairs, each rule one of `limiter`'s. Defaults: no trusted
    /// proxies, no IPv6 grouping, [`HeaderOptions::default`],
    /// [`OnError::Allow`], [`MissingKey::Empty`], peer address from
    /// [`default_peer_addr`]. The limiter is wrapped in a
    /// [`ResilientLimiter`] without a timeout (see
    /// [`RateLimitLayer::resilient`] for one).
    ///
    /// # Errors
    /// No rules, a name the limiter does not know, or a name given twice;
    /// a `request_json` key ([`BuildError::ReadsBody`]: the layer sees the
    /// request head only).
    pub fn new<N: Into<String>>(
        limiter: Arc<Limiter<S>>,
        rules: impl IntoIterator<Item = (N, KeyExtractor)>,
    ) -> Result<Self, BuildError> {
        let resilient = ResilientLimiter::builder(limiter)
            .timeout(None)
            .build()
            .map_err(|e| BuildError::UnknownRule(e.message))?;
        Self::build(Arc::new(resilient), rules, Some(OnError::Allow))
    }

    /// A layer over a [`ResilientLimiter`]: its store timeout, circuit
    /// breaker and per-rule failure policies apply
    /// (`None`: each rule's own; [`RateLimitLayer::with_on_error`]
    /// overrides them). Other defaults as [`RateLimitLayer::new`].
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use std::time::Duration;
    /// use tollgate::resilient::{OnError, ResilientLimiter};
    /// use tollgate::{Algorithm, Limiter, MemoryStore, RuleSpec};
    /// use tollgate_tower::RateLimitLayer;
    ///
    /// let limiter = Limiter::new(MemoryStore::new(), [
    ///     RuleSpec::new("per_ip", Algorithm::Gcra, 20, Duration::from_secs(1)).build()?,
    /// ])?;
    /// let limiter = ResilientLimiter::builder(limiter)
    ///     .timeout(Duration::from_millis(50))
    ///     .rule_on_error("per_ip", OnError::Local)
    ///     .build()?;
    /// let layer = RateLimitLayer::resilient(Arc::new(limiter), [("per_ip", "client_ip".parse()?)])?;
    /// assert_eq!(layer.on_error(), None); // each rule's own
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// No rules, a name the limiter does not know, or a name given twice.
    pub fn resilient<N: Into<String>>(
        limiter: Arc<ResilientLimiter<S>>,
        rules: impl IntoIterator<Item = (N, KeyExtractor)>,
    ) -> Result<Self, BuildError> {
        Self::build(limiter, rules, None)
    }

    fn build<N: Into<String>>(
        limiter: Arc<ResilientLimiter<S>>,
        rules: impl IntoIterator<Item = (N, KeyExtractor)>,
        on_error: Option<OnError>,
    ) -> Result<Self, BuildError> {
        // A tower layer sees the request head only.
        let keys = RuleKeys::new(limiter.rules(), rules)?.without_body()?;
        if keys.is_empty() {
            return Err(BuildError::NoRules);
        }
        Ok(Self {
            shared: Arc::new(Shared {
                limiter,
                keys,
                header_options: HeaderOptions::default(),
                on_error,
                peer_addr: default_peer_addr,
                reservation_ttl: DEFAULT_RESERVATION_TTL,
            }),
        })
    }
}

impl<S> RateLimitLayer<S> {
    fn edit(mut self, f: impl FnOnce(&mut Shared<S>)) -> Self {
        f(Arc::make_mut(&mut self.shared));
        self
    }

    /// [`RateLimitLayer::edit`] for the keys, whose setters take them by
    /// value.
    fn edit_keys(self, f: impl FnOnce(RuleKeys) -> RuleKeys) -> Self {
        let mut shared = Arc::unwrap_or_clone(self.shared);
        shared.keys = f(shared.keys);
        Self {
            shared: Arc::new(shared),
        }
    }

    /// How `client_ip` is found: trusted proxies and IPv6 grouping.
    #[must_use]
    pub fn with_client_ip(self, config: ClientIpConfig) -> Self {
        self.edit_keys(|keys| keys.with_client_ip(config))
    }

    /// Which headers besides the standard ones to write.
    #[must_use]
    pub fn with_header_options(self, options: HeaderOptions) -> Self {
        self.edit(|s| s.header_options = options)
    }

    /// What a request gets when the store fails (times out, is
    /// unreachable, answers garbage, or the circuit breaker is open): one
    /// [`OnError`] for every rule, or `None` for each rule's own `on_error`
    /// from the [`ResilientLimiter`] (the strictest of the rules checked).
    /// `Allow` lets the request through marked `tollgate-degraded:
    /// store-unavailable`, with `RateLimit-Policy` but no `RateLimit`;
    /// `Deny` answers `503` with `Retry-After: 1` and a problem+json body;
    /// `Local` decides with the in-process fallback (each rule's quota
    /// divided by the live replicas), marked `tollgate-degraded: local`.
    #[must_use]
    pub fn with_on_error(self, policy: impl Into<Option<OnError>>) -> Self {
        let policy = policy.into();
        self.edit(|s| s.on_error = policy)
    }

    /// What a request missing a key header (or host) gets.
    #[must_use]
    pub fn with_missing_key(self, policy: MissingKey) -> Self {
        self.edit_keys(|keys| keys.with_missing_key(policy))
    }

    /// Where the peer address comes from (default: [`default_peer_addr`]).
    /// With axum, served with
    /// `into_make_service_with_connect_info::<SocketAddr>()`:
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use std::time::Duration;
    /// # use tollgate::{Algorithm, Limiter, MemoryStore, RuleSpec};
    /// use std::net::SocketAddr;
    /// use axum::extract::ConnectInfo;
    /// use tollgate_tower::RateLimitLayer;
    ///
    /// # let limiter = Arc::new(Limiter::new(MemoryStore::new(), [
    /// #     RuleSpec::new("per_ip", Algorithm::Gcra, 20, Duration::from_secs(1)).build()?,
    /// # ])?);
    /// let layer = RateLimitLayer::new(limiter, [("per_ip", "client_ip".parse()?)])?
    ///     .with_peer_addr(|ext| ext.get::<ConnectInfo<SocketAddr>>().map(|c| c.0));
    /// let app: axum::Router = axum::Router::new().layer(layer);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn with_peer_addr(self, peer_addr: PeerAddrFn) -> Self {
        self.edit(|s| s.peer_addr = peer_addr)
    }

    /// How long the reservation of a rule charged from the response
    /// ([`RateLimitLayer::with_response_cost`]) lives: set it to the
    /// longest response the inner service sends, body included (default
    /// [`DEFAULT_RESERVATION_TTL`], an hour; at most a day). A response
    /// that ends later still settles, late: what exceeds the estimate is
    /// charged, unused estimate is not given back.
    #[must_use]
    pub fn with_reservation_ttl(self, ttl: Duration) -> Self {
        let ttl = ttl.clamp(
            Duration::from_millis(1),
            tollgate::ticket::MAX_RESERVATION_TTL,
        );
        self.edit(|s| s.reservation_ttl = ttl)
    }

    /// The reservation ttl ([`RateLimitLayer::with_reservation_ttl`]).
    #[must_use]
    pub fn reservation_ttl(&self) -> Duration {
        self.shared.reservation_ttl
    }

    /// The shared limiter.
    #[must_use]
    pub fn limiter(&self) -> &Arc<Limiter<S>> {
        self.shared.limiter.limiter()
    }

    /// The shared limiter with its failure handling.
    #[must_use]
    pub fn resilient_limiter(&self) -> &Arc<ResilientLimiter<S>> {
        &self.shared.limiter
    }

    /// The (rule name, key extractor) pairs, in check order.
    pub fn rules(&self) -> impl Iterator<Item = (&str, &KeyExtractor)> {
        self.shared.keys.rules()
    }

    /// The client address configuration.
    #[must_use]
    pub fn client_ip(&self) -> &ClientIpConfig {
        self.shared.keys.client_ip()
    }

    /// The failure policy.
    #[must_use]
    pub fn on_error(&self) -> Option<OnError> {
        self.shared.on_error
    }

    /// The missing-key policy.
    #[must_use]
    pub fn missing_key(&self) -> MissingKey {
        self.shared.keys.missing_key()
    }

    pub(crate) fn shared(&self) -> &Arc<Shared<S>> {
        &self.shared
    }
}

impl<S: Store> RateLimitLayer<S> {
    /// Charges the rule named `rule` by the usage each response reports
    /// (`"response_header:x-usage-tokens".parse()?` and an estimate):
    /// the estimate is reserved when a request arrives and settled at the
    /// usage read from the response head, or its trailers, when the
    /// response body ends (docs/tower.md, "Usage and in-flight limits").
    /// A `concurrency` rule needs nothing of this: its lease is held for
    /// the life of every request.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use std::time::Duration;
    /// use tollgate::{Algorithm, Limiter, MemoryStore, RuleSpec};
    /// use tollgate_tower::RateLimitLayer;
    /// use tollgate_tower::cost::ResponseCost;
    ///
    /// let limiter = Arc::new(Limiter::new(MemoryStore::new(), [
    ///     RuleSpec::new("tpm", Algorithm::Gcra, 100_000, Duration::from_secs(60)).build()?,
    ///     RuleSpec::new("inflight", Algorithm::Concurrency, 10, Duration::from_secs(30)).build()?,
    /// ])?);
    /// let layer = RateLimitLayer::new(limiter, [
    ///     ("tpm", "header:x-team".parse()?),
    ///     ("inflight", "header:x-team".parse()?),
    /// ])?
    /// .with_response_cost("tpm", ResponseCost::new("response_header:x-usage-tokens".parse()?, 1000)?)?
    /// .with_reservation_ttl(Duration::from_secs(600));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// A rule the layer does not check, a `concurrency` rule, or an
    /// estimate above the rule's capacity ([`BuildError::BadCost`]); an
    /// estimate read from the request body ([`BuildError::ReadsBody`]:
    /// the layer sees the request head only).
    pub fn with_response_cost(self, rule: &str, cost: ResponseCost) -> Result<Self, BuildError> {
        let mut shared = Arc::unwrap_or_clone(self.shared);
        shared.keys = shared
            .keys
            .with_response_cost(shared.limiter.rules(), rule, cost)?
            .without_body()?;
        Ok(Self {
            shared: Arc::new(shared),
        })
    }

    /// Decides `req` as the layer's service does, without calling
    /// anything, and returns what the admitted request holds (a
    /// reservation, a lease) with the answer: hand the hold to the
    /// response with [`Hold::wrap`](crate::usage::Hold::wrap). The future
    /// owns what it needs.
    pub fn admit<B>(&self, req: &Request<B>) -> AdmissionFuture {
        self.shared.admit(req)
    }

    /// Decides `req` as the layer's service would, without calling anything:
    /// builds every rule's key from the request head (the peer address from
    /// the extensions, see [`RateLimitLayer::with_peer_addr`]), then checks
    /// them all-or-nothing in one [`ResilientLimiter::check_all`] at cost 1. The
    /// future owns what it needs; the request can be moved on at once.
    /// With rules that hold something past the answer (a cost from the
    /// response, a `concurrency` rule) use [`RateLimitLayer::admit`]:
    /// here the hold ends at once (settled at the estimate, released).
    pub fn decide<B>(&self, req: &Request<B>) -> HttpVerdictFuture {
        self.shared.decide(req)
    }
}

impl<S: Store> Shared<S> {
    pub(crate) fn decide<B>(self: &Arc<Self>, req: &Request<B>) -> HttpVerdictFuture {
        let admission = self.admit(req);
        Box::pin(async move { admission.await.verdict })
    }

    pub(crate) fn admit<B>(self: &Arc<Self>, req: &Request<B>) -> AdmissionFuture {
        match self.keys(req) {
            Err(response) => Box::pin(std::future::ready(Admission::bare(HttpVerdict::respond(
                *response,
            )))),
            Ok(keys) => {
                let shared = Arc::clone(self);
                Box::pin(async move { shared.check(&keys).await })
            }
        }
    }

    /// Every applying rule's key, or the response that refuses the
    /// request ([`RuleKeys::keys`]).
    fn keys<B>(&self, req: &Request<B>) -> Result<Keys, Box<Response<String>>> {
        let peer = if self.keys.needs_client_ip() {
            (self.peer_addr)(req.extensions()).map(|peer| peer.ip())
        } else {
            None
        };
        self.keys.keys(req.method(), req.uri(), req.headers(), peer)
    }

    async fn check(&self, keys: &Keys) -> Admission {
        if keys.is_empty() {
            // Every rule skipped (`MissingKey::Skip`): nothing to check.
            return Admission::bare(HttpVerdict::admit_unchecked());
        }
        self.keys
            .admit(
                &self.limiter,
                keys,
                self.on_error,
                self.header_options,
                self.reservation_ttl,
            )
            .await
    }
}
