//! The reverse proxy (`--proxy ADDR --upstream URL`, docs/proxy.md).
//!
//! Every request is checked against every rule in ONE all-or-nothing
//! check at cost 1, each rule keyed by its `key` extractor (a rule without
//! `key` is keyed by `client_ip`). Keys, the check and its answer (RateLimit
//! headers, degraded marker, 429/503/400 problem+json) come from
//! `tollgate_http::decide`, exactly as in the tower layer. A rule charged
//! from the response (`cost`, `estimate`) and a `concurrency` rule hold a
//! reservation and a lease until the response body ends or is dropped
//! (`RuleKeys::admit`; docs/proxy.md, "Usage from the response and
//! in-flight limits").
//!
//! An admitted request is forwarded as it came — method, path, query,
//! headers, body streamed without buffering — except for the hop-by-hop
//! fields (RFC 9110 §7.6.1: `Connection` and every field it names,
//! `Keep-Alive`, `Proxy-Connection`, `TE`, `Trailer`, `Transfer-Encoding`,
//! `Upgrade`, `Proxy-Authorization`, `Proxy-Authenticate`) and `Expect`
//! (answered here), which are dropped both ways, and `Accept-Encoding`,
//! set to `identity` when a rule reads its usage from the response body.
//! The upstream's response streams back with the RateLimit headers added
//! (and, for such a rule, its body read as it passes). Protocol upgrades
//! (WebSocket) are not proxied.
//!
//! An upstream that refuses the connection, or does not accept it within
//! `[proxy] connect_timeout`, is a 502; one that does not send its response
//! head within `[proxy] response_timeout`, a 504; a response body from
//! which nothing arrives for `response_timeout` is cut; a client that
//! takes nothing for `[proxy] send_timeout` is closed, and the upstream's
//! side with it, by the connection's watchdog (`server`). Answers made here
//! for a checked request carry its RateLimit headers.
//!
//! Refused before any check: `CONNECT` (501) and a request whose host is
//! ambiguous or missing (400, see `refuse`). An absolute-form request is
//! forwarded with its target's host as `Host` (the host `host` keys read).
//!
//! A rule keyed by a field of the JSON request body
//! (`request_json:POINTER`) or reserving an estimate read from it
//! (`estimate = "max_tokens"`) has the body's first `[proxy]
//! request_body_limit` bytes (at most) read before the check
//! (`prefix.rs`); they go upstream first, then the rest, unchanged.
//!
//! Clients speak HTTP/1.1 or HTTP/2 (h2c with prior knowledge, or by ALPN
//! over `[proxy.listen_tls]`; `server`); the upstream is spoken to in its
//! own protocol (HTTP/1.1, or HTTP/2 when an `https://` upstream picks it
//! by ALPN) and the answer goes back in the client's.
//!
//! The folder: this file is the proxy service ([`Proxy`]); [`pool`] keeps
//! the connections to the upstream (TLS, HTTP/1.1, HTTP/2) and sends on
//! them; `fields.rs` drops the hop-by-hop fields and appends
//! `X-Forwarded-For`; `prefix.rs` reads a body's prefix before the check.
//! The
//! `--upstream` URL and how a request's target maps onto it is
//! [`crate::config::upstream`], held by the config.

use crate::telemetry::spans;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument as _;

use bytes::Bytes;
use http::header::{self, HeaderName};
use http::uri::Authority;
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, Uri, Version};
use http_body::Body as _;
use http_body_util::{Either, Full};
use hyper::body::Incoming;
use tollgate_http::decide::{Keys, RuleKeys};
use tollgate_http::extract::ClientIpConfig;
use tollgate_http::headers::{HeaderOptions, is_list_field};
use tollgate_http::key::KeyExtractor;
use tollgate_http::response::problem;
use tollgate_http::usage::{Hold, UsageBody};

use crate::config::Config;
use crate::gate::{Gate, Throttle};

mod fields;
pub mod pool;
mod prefix;

pub use fields::strip_hop_by_hop;
use fields::{append_forwarded_for, is_host_port};

/// The proxy's header readers, for the fuzz targets (`fuzz/`): not an API.
#[doc(hidden)]
pub mod fuzzing {
    pub use super::fields::{append_forwarded_for, is_host_port};
}

use crate::config::upstream::Upstream;
use pool::{Dialer, LinkError, LinkPool, LinkedBody, Outgoing, Upload};
pub use prefix::ClientBody;

/// The body of a proxied response: the upstream's, streamed (its end
/// settles and releases what the request holds), or one made here (429,
/// 502, ...).
pub type ProxyBody = Either<UsageBody<LinkedBody>, Full<Bytes>>;

/// The most idle upstream connections kept.
pub const MAX_IDLE: usize = 256;
/// How long an idle upstream connection is kept.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a response body may stream, past `response_timeout` for its
/// head, before the reservation of a rule charged from the response
/// counts as expired: an hour (docs/proxy.md, "Usage from the response
/// and in-flight limits").
/// A longer stream still settles, late: what exceeds the estimate is
/// charged, unused estimate is not given back.
pub const STREAM_ALLOWANCE: Duration = Duration::from_secs(3600);

/// The upstream a served proxy forwards to: the one place that says a
/// reverse proxy needs one ([`super::Door::ready_in`] asks here for
/// `serve`, a reload and `validate`).
///
/// # Errors
/// There is no upstream (neither `[proxy] upstream` nor `--upstream`).
pub fn upstream_of(config: &Config) -> Result<&Upstream, String> {
    config.proxy.upstream.as_ref().ok_or_else(|| {
        "the reverse proxy needs an upstream: add [proxy] upstream (or --upstream URL)".to_owned()
    })
}

/// The reverse proxy: rules with their key extractors, the client-address
/// policy, and the connections to the upstream ([`pool`]).
#[derive(Debug)]
pub struct Proxy {
    gate: Arc<Gate>,
    upstream: Upstream,
    /// Opens connections to the upstream (TCP, TLS for `https://`).
    dialer: Dialer,
    /// `[proxy.upstream_tls]`: a reload keeps the pool only if the same.
    upstream_tls: crate::config::UpstreamTls,
    links: Arc<LinkPool>,
    /// The rules with their keys, the client-address config and the
    /// missing-key policy.
    keys: RuleKeys,
    response_timeout: Duration,
    /// The ttl of a reservation: `response_timeout` + [`STREAM_ALLOWANCE`].
    reservation_ttl: Duration,
    headers: HeaderOptions,
    append_forwarded_for: bool,
    /// `[proxy] request_body_limit`: the most of a body read before the
    /// check, for rules that read it.
    request_body_limit: usize,
    /// Upstream failures are logged at most once a second.
    trouble: Throttle,
}

impl Proxy {
    /// A proxy to `upstream` deciding through `gate`, set up from `config`.
    ///
    /// # Errors
    /// An `ipv6_prefix` the extractor refuses, a rule the gate does not
    /// hold, TLS settings of an `https://` upstream that cannot be built.
    pub fn new(gate: Arc<Gate>, config: &Config, upstream: Upstream) -> Result<Self, String> {
        // the latency series and the upstream errors at 0 from the start
        let _ = crate::metrics::decision_latency(crate::metrics::Door::Proxy);
        for kind in ["connect", "timeout", "other"] {
            ::metrics::counter!(crate::metrics::UPSTREAM_ERRORS, "kind" => kind).increment(0);
        }
        let client_ip = ClientIpConfig::new()
            .with_trusted_proxies(config.proxy.trusted_proxies.iter().copied())
            .with_ipv6_prefix(config.proxy.ipv6_prefix)?;
        let default_key: KeyExtractor = "client_ip".parse()?;
        let rules = config.rules.iter().map(|r| {
            (
                r.rule.name().to_owned(),
                r.key.clone().unwrap_or_else(|| default_key.clone()),
            )
        });
        let mut keys = RuleKeys::new(gate.rules(), rules)
            .map_err(|e| e.to_string())?
            .with_client_ip(client_ip)
            .with_missing_key(config.proxy.on_missing_key);
        for r in &config.rules {
            if let Some(cost) = &r.cost {
                keys = keys
                    .with_response_cost(gate.rules(), r.rule.name(), cost.clone())
                    .map_err(|e| e.to_string())?;
            }
        }
        let reservation_ttl = (config.proxy.response_timeout + STREAM_ALLOWANCE)
            .min(tollgate::ticket::MAX_RESERVATION_TTL);
        let dialer = Dialer::new(
            &upstream,
            &config.proxy.upstream_tls,
            config.proxy.connect_timeout,
        )?;
        Ok(Self {
            gate,
            dialer,
            upstream_tls: config.proxy.upstream_tls.clone(),
            upstream,
            links: Arc::new(LinkPool::new(MAX_IDLE, IDLE_TIMEOUT)),
            keys,
            response_timeout: config.proxy.response_timeout,
            reservation_ttl,
            headers: HeaderOptions {
                legacy: config.http.legacy_headers,
            },
            append_forwarded_for: config.proxy.append_forwarded_for,
            request_body_limit: config.proxy.request_body_limit,
            trouble: Throttle::new(Duration::from_secs(1)),
        })
    }

    /// The same proxy keeping `previous`'s idle upstream connections when
    /// both forward to the same `host:port` in the same way (a config
    /// reload: the pool is not emptied each time).
    #[must_use]
    pub fn keeping_connections_of(mut self, previous: &Proxy) -> Self {
        if previous.dialer.address() == self.dialer.address()
            && previous.upstream.is_tls() == self.upstream.is_tls()
            && previous.upstream_tls == self.upstream_tls
        {
            self.links = Arc::clone(&previous.links);
        }
        self
    }

    /// The upstream.
    #[must_use]
    pub fn upstream(&self) -> &Upstream {
        &self.upstream
    }

    /// Answers one request from `peer`: checks it, then forwards it or
    /// refuses it. Never fails: every problem is an HTTP answer.
    pub async fn handle(
        self: Arc<Self>,
        mut req: Request<Incoming>,
        peer: SocketAddr,
    ) -> Result<Response<ProxyBody>, Infallible> {
        if req.version() == Version::HTTP_2
            && !req.headers().contains_key(header::HOST)
            && let Some(host) = req.uri().authority()
            && let Ok(host) = HeaderValue::from_str(host.as_str())
        {
            // HTTP/2 names the host in `:authority`: a `Host` field for
            // the keys that read it, as an HTTP/1.1 request would bring.
            req.headers_mut().insert(header::HOST, host);
        }
        if let Some(refusal) = refuse(&req) {
            return Ok(refusal.map(full));
        }
        // Rules that key on the body, or estimate from it, read a prefix
        // of it first (`prefix`).
        let (req, body) = match self.keys.body_plan() {
            None => (req.map(ClientBody::new), None),
            Some(plan) => {
                match prefix::read(req, plan, self.request_body_limit, self.response_timeout).await
                {
                    Ok((req, facts)) => (req, Some(facts)),
                    Err((status, detail)) => return Ok(about_blank(status, detail).map(full)),
                }
            }
        };
        let keys = self.keys.keys_with_body(
            req.method(),
            req.uri(),
            req.headers(),
            Some(peer.ip()),
            body.as_ref(),
        );
        Ok(match keys {
            Err(refusal) => refusal.map(full),
            Ok(keys) => {
                // The route is the proxy's (any path): bounded span names.
                let span = spans::http("proxy", req.method(), "/*", req.headers());
                let res = self
                    .check_and_forward(req, peer, keys)
                    .instrument(span.clone())
                    .await;
                spans::http_answer(&span, res.status());
                res
            }
        })
    }

    /// Idle upstream connections held now.
    #[must_use]
    pub fn idle_upstream_connections(&self) -> usize {
        self.links.idle()
    }

    /// Checks `keys` and forwards the request with the check's headers,
    /// or answers the refusal (429, 503, ...): [`RuleKeys::admit`] (a
    /// plain check unless a rule is charged from the response or is a
    /// `concurrency` rule; then what the request holds ends with the
    /// response body).
    async fn check_and_forward(
        &self,
        req: Request<ClientBody>,
        peer: SocketAddr,
        keys: Keys,
    ) -> Response<ProxyBody> {
        if keys.is_empty() {
            // Every rule skipped (on_missing_key = "skip"): nothing to check.
            return self.forward(req, peer, &HeaderMap::new(), None).await;
        }
        let started = std::time::Instant::now();
        let admission = self
            .keys
            .admit(
                self.gate.shared_limiter(),
                &keys,
                None,
                self.headers,
                self.reservation_ttl,
            )
            .await;
        crate::metrics::decision_latency(crate::metrics::Door::Proxy)
            .record(started.elapsed().as_secs_f64());
        match admission.verdict.into_headers() {
            Ok(extra) => self.forward(req, peer, &extra, admission.hold).await,
            Err(refusal) => refusal.map(full),
        }
    }

    /// Sends `req` upstream and streams the answer back with `extra`
    /// headers added; `hold` ends with the response body. An answer made
    /// here drops it (settled at the estimate: the upstream may have done
    /// the work), except for an upstream that could not be reached, which
    /// did none: the whole estimate is given back.
    async fn forward(
        &self,
        req: Request<ClientBody>,
        peer: SocketAddr,
        extra: &HeaderMap,
        hold: Option<Hold>,
    ) -> Response<ProxyBody> {
        let (mut parts, body) = req.into_parts();
        let client_version = parts.version;
        if let Some(authority) = parts.uri.authority()
            && let Ok(host) = HeaderValue::from_str(authority.as_str())
        {
            // Absolute form: the target's authority is the request's host
            // (RFC 9112 §3.2.2), which `host` keys read; the upstream gets
            // the same one, not a Host field the key never saw.
            parts.headers.insert(header::HOST, host);
        }
        parts.uri = if parts.uri == "*" {
            // `OPTIONS *` (asterisk form) stays what it is.
            Uri::from_static("*")
        } else {
            self.upstream.target_for(parts.uri.path_and_query())
        };
        if (self.upstream.is_tls() || !parts.headers.contains_key(header::HOST))
            && let Ok(host) = HeaderValue::from_str(self.upstream.authority().as_str())
        {
            // An HTTP/1.0 request may come without one; HTTP/1.1 needs it.
            // An `https://` upstream is named by its own host: its
            // certificate is for it, and a hosted API refuses another
            // (421 Misdirected Request); `host` keys read the client's.
            parts.headers.insert(header::HOST, host);
        }
        parts.version = Version::HTTP_11;
        strip_hop_by_hop(&mut parts.headers);
        parts.headers.remove(header::EXPECT);
        // `Proxy` is no standard field; CGI upstreams read it as
        // HTTP_PROXY ("httpoxy"), so it is not passed on.
        parts.headers.remove(PROXY);
        if hold.as_ref().is_some_and(Hold::reads_body) {
            // A rule's usage is read from the body as it passes: an
            // encoded body cannot be (it settles at the estimate).
            parts.headers.insert(
                header::ACCEPT_ENCODING,
                HeaderValue::from_static("identity"),
            );
        }
        if self.append_forwarded_for {
            append_forwarded_for(&mut parts.headers, peer);
        }
        let has_body = !body.is_end_stream();
        if has_body
            && body.size_hint().exact().is_none()
            && !parts.headers.contains_key(header::CONTENT_LENGTH)
        {
            // A body of unknown length goes on chunked, whatever the method:
            // hyper's client sends a GET, HEAD or OPTIONS without a framing
            // field as bodiless, dropping it.
            parts.headers.insert(
                header::TRANSFER_ENCODING,
                HeaderValue::from_static("chunked"),
            );
        }
        // The upstream has `response_timeout` from when the request body
        // last moved (its end; the head for a bodiless request): an upload
        // that takes longer is not cut off while it moves.
        let upload = has_body.then(Upload::new);
        let upstream_req = Request::from_parts(parts, Outgoing::new(body, upload.clone()));
        let sent = pool::send(
            &self.links,
            &self.dialer,
            self.response_timeout,
            upstream_req,
        );
        let answer = match &upload {
            None => tokio::time::timeout(self.response_timeout, sent).await.ok(),
            Some(upload) => {
                let mut sent = std::pin::pin!(sent);
                loop {
                    let due = upload.last_moved() + self.response_timeout;
                    match tokio::time::timeout_at(due.into(), sent.as_mut()).await {
                        Ok(answer) => break Some(answer),
                        // Nothing moved since: the deadline stands.
                        Err(_) if upload.last_moved() + self.response_timeout <= due => {
                            break None;
                        }
                        // The body moved meanwhile: a later deadline.
                        Err(_) => {}
                    }
                }
            }
        };
        let mut res = match answer {
            Some(Ok(res)) => res,
            Some(Err(_)) if upload.as_ref().is_some_and(|u| u.failed()) => {
                // The client's body could not be read (malformed chunks, or
                // the client went away): the client's doing, not the
                // upstream's; nothing is counted against the upstream.
                return with_headers(
                    about_blank(
                        StatusCode::BAD_REQUEST,
                        "The request body could not be read to its end.",
                    ),
                    extra,
                );
            }
            Some(Err(e)) => {
                let (kind, detail) = match &e {
                    LinkError::Connect(why) => {
                        if let Some(hold) = hold {
                            hold.cancel();
                        }
                        // Why, for the one who sent it (a refused
                        // certificate is otherwise found only in the log).
                        ("connect", format!("could not be reached ({why})"))
                    }
                    LinkError::Failed(_) => ("other", "failed to answer".to_owned()),
                };
                self.upstream_trouble(kind, &e.to_string());
                return with_headers(
                    about_blank(
                        StatusCode::BAD_GATEWAY,
                        &format!("The upstream {} {detail}.", self.upstream),
                    ),
                    extra,
                );
            }
            None => {
                self.upstream_trouble(
                    "timeout",
                    &format!("no response within {:?}", self.response_timeout),
                );
                return with_headers(
                    about_blank(
                        StatusCode::GATEWAY_TIMEOUT,
                        &format!(
                            "The upstream {} did not answer within {:?}.",
                            self.upstream, self.response_timeout
                        ),
                    ),
                    extra,
                );
            }
        };
        if res.status() == StatusCode::SWITCHING_PROTOCOLS {
            // The client's `Upgrade` was not passed on: a switch nobody
            // asked for cannot be relayed.
            self.upstream_trouble("other", "101 Switching Protocols to no upgrade request");
            return with_headers(
                about_blank(
                    StatusCode::BAD_GATEWAY,
                    &format!(
                        "The upstream {} switched protocols unasked; upgrades are not proxied.",
                        self.upstream
                    ),
                ),
                extra,
            );
        }
        // The client's own protocol, whatever the upstream spoke (RFC 9110
        // §6.2).
        *res.version_mut() = client_version;
        if res.headers().contains_key(header::TRANSFER_ENCODING) {
            // The body was framed by its transfer coding, which overrides
            // a Content-Length (RFC 9112 §6.3) and is decoded here: the
            // length would be stale (an intermediary removes it, §6.1).
            res.headers_mut().remove(header::CONTENT_LENGTH);
        }
        strip_hop_by_hop(res.headers_mut());
        add_headers(res.headers_mut(), extra);
        match hold {
            Some(hold) => hold.wrap(res).map(Either::Left),
            None => res.map(|b| Either::Left(UsageBody::plain(b))),
        }
    }
}

impl Proxy {
    /// Counts an upstream failure; logs it at most once a second.
    fn upstream_trouble(&self, kind: &'static str, why: &str) {
        ::metrics::counter!(crate::metrics::UPSTREAM_ERRORS, "kind" => kind).increment(1);
        self.trouble.report(|suppressed| {
            let more = if suppressed > 0 {
                format!(" ({suppressed} more upstream failures since the last report)")
            } else {
                String::new()
            };
            tracing::warn!("upstream {} ({kind}): {why}{more}", self.upstream);
        });
    }
}

fn full(s: String) -> ProxyBody {
    Either::Right(Full::new(Bytes::from(s)))
}

/// The non-standard `Proxy` request field (see [`Proxy::forward`]).
const PROXY: HeaderName = HeaderName::from_static("proxy");

/// A problem of the `about:blank` type, whose title is the status's own
/// phrase (RFC 9457 §4.2.1).
fn about_blank(status: StatusCode, detail: &str) -> Response<String> {
    problem(
        status,
        "about:blank",
        status.canonical_reason().unwrap_or("Error"),
        detail,
    )
}

/// An answer made here with the check's headers (`extra`) added: a request
/// that took quota says so even when the upstream failed it.
fn with_headers(res: Response<String>, extra: &HeaderMap) -> Response<ProxyBody> {
    let mut res = res.map(full);
    add_headers(res.headers_mut(), extra);
    res
}

/// Sets every field of `extra` on `headers`. `RateLimit-Policy` and
/// `RateLimit` get the check's members after the upstream's own (a second
/// field line of the same list, RFC 9110 §5.3: a client sees the upstream's
/// limits and tollgate's); any other field replaces the upstream's.
fn add_headers(headers: &mut HeaderMap, extra: &HeaderMap) {
    for (name, value) in extra {
        if is_list_field(name) {
            headers.append(name, value.clone());
        } else {
            headers.insert(name, value.clone());
        }
    }
}

/// The answer for a request the proxy cannot forward as it is, before any
/// check (so it takes no quota): `CONNECT` (no tunnels), and a request
/// whose host is ambiguous or missing (RFC 9112 §3.2: a server answers 400
/// to an HTTP/1.1 request without exactly one valid `Host`). An ambiguous
/// host would let a rule keyed by `host` count one host while the upstream
/// serves another.
fn refuse(req: &Request<Incoming>) -> Option<Response<String>> {
    let bad = |detail: &str| Some(about_blank(StatusCode::BAD_REQUEST, detail));
    if req.method() == Method::CONNECT {
        return Some(about_blank(
            StatusCode::NOT_IMPLEMENTED,
            "CONNECT (a tunnel) is not proxied; send the request itself.",
        ));
    }
    let uri = req.uri();
    if uri == "*" && req.method() != Method::OPTIONS {
        return bad("Only OPTIONS may have the request target *.");
    }
    if let Some(authority) = uri.authority() {
        // Absolute form (`http://host/path`): its authority is the host.
        if uri
            .scheme_str()
            .is_none_or(|s| !s.eq_ignore_ascii_case("http") && !s.eq_ignore_ascii_case("https"))
        {
            return bad(&format!(
                "The request target {uri} is not an http URL or a path (only CONNECT has the authority form)."
            ));
        }
        if !is_host_port(authority) {
            return bad(&format!(
                "The request target's authority {authority} is not a host[:port]."
            ));
        }
    }
    let mut hosts = req.headers().get_all(header::HOST).iter();
    let host = hosts.next();
    if hosts.next().is_some() {
        return bad("The request has more than one Host header field.");
    }
    match host {
        None if req.version() >= Version::HTTP_11 && uri.authority().is_none() => {
            bad("The HTTP/1.1 request has no Host header field.")
        }
        Some(v)
            if !v.is_empty()
                && !Authority::try_from(v.as_bytes()).is_ok_and(|a| is_host_port(&a)) =>
        {
            bad(&format!(
                "The Host header field {:?} is not a host[:port].",
                String::from_utf8_lossy(v.as_bytes())
            ))
        }
        _ => None,
    }
}
