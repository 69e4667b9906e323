//! The reverse proxy (`--proxy ADDR --upstream URL`, docs/proxy.md).
//!
//! Every request is checked against every rule in ONE all-or-nothing
//! check at cost 1, each rule keyed by its `key` extractor (a rule without
//! `key` is keyed by `client_ip`). Keys, the check and its answer (RateLimit
//! headers, degraded marker, 429/503/400 problem+json) come from
//! `tollgate_tower::decide`, exactly as in the tower layer.
//!
//! An admitted request is forwarded as it came — method, path, query,
//! headers, body streamed without buffering — except for the hop-by-hop
//! fields (RFC 9110 §7.6.1: `Connection` and every field it names,
//! `Keep-Alive`, `Proxy-Connection`, `TE`, `Trailer`, `Transfer-Encoding`,
//! `Upgrade`, `Proxy-Authorization`, `Proxy-Authenticate`) and `Expect`
//! (answered here), which are dropped both ways. The upstream's response
//! streams back with the RateLimit headers added. Protocol upgrades
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
//! The folder: this file is the proxy service ([`Proxy`]); [`pool`] keeps
//! the HTTP/1.1 connections to the upstream and sends on them. The
//! `--upstream` URL and how a request's target maps onto it is
//! [`crate::config::upstream`], held by the config.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderName};
use http::uri::Authority;
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, Uri, Version};
use http_body::Body as _;
use http_body_util::{Either, Full};
use hyper::body::Incoming;
use tollgate_tower::decide::{Keys, RuleKeys};
use tollgate_tower::extract::{ClientIpConfig, X_FORWARDED_FOR};
use tollgate_tower::headers::{HeaderOptions, is_list_field};
use tollgate_tower::key::KeyExtractor;
use tollgate_tower::response::problem;

use crate::config::Config;
use crate::gate::{Gate, Throttle};

pub mod pool;

use crate::config::upstream::Upstream;
use pool::{LinkError, LinkPool, LinkedBody, Outgoing, Upload};

/// The body of a proxied response: the upstream's, streamed, or one made
/// here (429, 502, ...).
pub type ProxyBody = Either<LinkedBody, Full<Bytes>>;

/// The most idle upstream connections kept.
pub const MAX_IDLE: usize = 256;
/// How long an idle upstream connection is kept.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// The reverse proxy: rules with their key extractors, the client-address
/// policy, and a pool of HTTP/1.1 connections to the upstream
/// ([`pool`]).
#[derive(Debug)]
pub struct Proxy {
    gate: Arc<Gate>,
    upstream: Upstream,
    /// The upstream's `host:port`.
    address: String,
    connect_timeout: Duration,
    links: Arc<LinkPool>,
    /// The rules with their keys, the client-address config and the
    /// missing-key policy.
    keys: RuleKeys,
    response_timeout: Duration,
    headers: HeaderOptions,
    append_forwarded_for: bool,
    /// Upstream failures are logged at most once a second.
    trouble: Throttle,
}

impl Proxy {
    /// A proxy to `upstream` deciding through `gate`, set up from `config`.
    ///
    /// # Errors
    /// An `ipv6_prefix` the extractor refuses, or a rule the gate does not
    /// hold.
    pub fn new(gate: Arc<Gate>, config: &Config, upstream: Upstream) -> Result<Self, String> {
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
        let keys = RuleKeys::new(gate.rules(), rules)
            .map_err(|e| e.to_string())?
            .with_client_ip(client_ip)
            .with_missing_key(config.proxy.on_missing_key);
        Ok(Self {
            gate,
            address: upstream.address(),
            upstream,
            connect_timeout: config.proxy.connect_timeout,
            links: Arc::new(LinkPool::new(MAX_IDLE, IDLE_TIMEOUT)),
            keys,
            response_timeout: config.proxy.response_timeout,
            headers: HeaderOptions {
                legacy: config.http.legacy_headers,
            },
            append_forwarded_for: config.proxy.append_forwarded_for,
            trouble: Throttle::new(Duration::from_secs(1)),
        })
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
        req: Request<Incoming>,
        peer: SocketAddr,
    ) -> Result<Response<ProxyBody>, Infallible> {
        if let Some(refusal) = refuse(&req) {
            return Ok(refusal.map(full));
        }
        let keys = self
            .keys
            .keys(req.method(), req.uri(), req.headers(), Some(peer.ip()));
        Ok(match keys {
            Err(refusal) => refusal.map(full),
            Ok(keys) => self.check_and_forward(req, peer, keys).await,
        })
    }

    /// Idle upstream connections held now.
    #[must_use]
    pub fn idle_upstream_connections(&self) -> usize {
        self.links.idle()
    }

    /// Checks `keys` and forwards the request with the check's headers,
    /// or answers the refusal (429, 503, ...): [`RuleKeys::check`].
    async fn check_and_forward(
        &self,
        req: Request<Incoming>,
        peer: SocketAddr,
        keys: Keys,
    ) -> Response<ProxyBody> {
        if keys.is_empty() {
            // Every rule skipped (on_missing_key = "skip"): nothing to check.
            return self.forward(req, peer, &HeaderMap::new()).await;
        }
        let verdict = self
            .keys
            .check(self.gate.limiter(), &keys, None, self.headers)
            .await;
        match verdict.into_headers() {
            Ok(extra) => self.forward(req, peer, &extra).await,
            Err(refusal) => refusal.map(full),
        }
    }

    /// Sends `req` upstream and streams the answer back with `extra`
    /// headers added.
    async fn forward(
        &self,
        req: Request<Incoming>,
        peer: SocketAddr,
        extra: &HeaderMap,
    ) -> Response<ProxyBody> {
        let (mut parts, body) = req.into_parts();
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
        if !parts.headers.contains_key(header::HOST)
            && let Ok(host) = HeaderValue::from_str(self.upstream.authority().as_str())
        {
            // An HTTP/1.0 request may come without one; HTTP/1.1 needs it.
            parts.headers.insert(header::HOST, host);
        }
        parts.version = Version::HTTP_11;
        strip_hop_by_hop(&mut parts.headers);
        parts.headers.remove(header::EXPECT);
        // `Proxy` is no standard field; CGI upstreams read it as
        // HTTP_PROXY ("httpoxy"), so it is not passed on.
        parts.headers.remove(PROXY);
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
            &self.address,
            self.connect_timeout,
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
            Some(Ok(res)) => res.map(Either::Left),
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
                let (kind, detail) = match e {
                    LinkError::Connect(_) => ("connect", "could not be reached"),
                    LinkError::Failed(_) => ("other", "failed to answer"),
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
        // This proxy speaks HTTP/1.1 to its client, whatever the upstream
        // spoke (RFC 9110 §6.2).
        *res.version_mut() = Version::HTTP_11;
        if res.headers().contains_key(header::TRANSFER_ENCODING) {
            // The body was framed by its transfer coding, which overrides
            // a Content-Length (RFC 9112 §6.3) and is decoded here: the
            // length would be stale (an intermediary removes it, §6.1).
            res.headers_mut().remove(header::CONTENT_LENGTH);
        }
        strip_hop_by_hop(res.headers_mut());
        add_headers(res.headers_mut(), extra);
        res
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

/// Whether `a` is `host[:port]` (RFC 9110 §7.2): no userinfo (which would
/// reach the upstream's Host, and make a `host` key a new bucket per name
/// before the `@`), and a port, if any, of 1 to 5 digits within 0..65535
/// (not `-1`, `+80` or empty).
fn is_host_port(a: &Authority) -> bool {
    let text = a.as_str();
    if text.contains('@') {
        return false;
    }
    match text.get(a.host().len()..) {
        Some("") => true,
        Some(rest) => rest.strip_prefix(':').is_some_and(|port| {
            !port.is_empty()
                && port.bytes().all(|b| b.is_ascii_digit())
                && port.parse::<u16>().is_ok()
        }),
        None => false,
    }
}

/// The fixed hop-by-hop fields (RFC 9110 §7.6.1, and `Proxy-Connection`,
/// `Keep-Alive`), lowercase; `connection` first.
const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "proxy-connection",
    "keep-alive",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "proxy-authorization",
    "proxy-authenticate",
];

/// The index in [`HOP_BY_HOP`] of a field name, in any case.
fn hop_by_hop_index(name: &str) -> Option<usize> {
    HOP_BY_HOP.iter().position(|h| h.eq_ignore_ascii_case(name))
}

/// [`hop_by_hop_index`] of a `HeaderName`, which is lowercase already
/// (one `match`: a length switch, then at most two comparisons).
fn hop_by_hop_index_of(name: &HeaderName) -> Option<usize> {
    match name.as_str() {
        "connection" => Some(0),
        "proxy-connection" => Some(1),
        "keep-alive" => Some(2),
        "te" => Some(3),
        "trailer" => Some(4),
        "transfer-encoding" => Some(5),
        "upgrade" => Some(6),
        "proxy-authorization" => Some(7),
        "proxy-authenticate" => Some(8),
        _ => None,
    }
}

/// Drops the hop-by-hop fields (RFC 9110 §7.6.1): those `Connection`
/// names (but never `Host` or `Content-Length`), and the fixed list.
///
/// Built for the common cases — none at all, or `Connection: keep-alive` /
/// `close` (nginx sends one on every response) — with no allocation: one
/// pass over the names present finds which fixed fields are there, and a
/// name `Connection` lists is looked up as a string (a `HeaderName` is
/// built only for a field it names that is present and not in the fixed
/// list).
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let mut present = 0u16;
    for name in headers.keys() {
        if let Some(i) = hop_by_hop_index_of(name) {
            present |= 1 << i;
        }
    }
    if present == 0 {
        return;
    }
    let mut named: Vec<HeaderName> = Vec::new();
    if present & 1 != 0 {
        for value in &headers.get_all(header::CONNECTION) {
            let Ok(value) = value.to_str() else { continue };
            for token in value.split(',').map(str::trim) {
                // A field every recipient needs is never a connection
                // option (RFC 9110 §7.6.1): `Connection: Host` must not
                // send the upstream an HTTP/1.1 request without a Host.
                if token.is_empty()
                    || hop_by_hop_index(token).is_some()
                    || token.eq_ignore_ascii_case("host")
                    || token.eq_ignore_ascii_case("content-length")
                {
                    continue;
                }
                if headers.contains_key(token)
                    && let Ok(name) = HeaderName::from_bytes(token.as_bytes())
                {
                    named.push(name);
                }
            }
        }
    }
    for (i, name) in HOP_BY_HOP.iter().enumerate() {
        if present & (1 << i) != 0 {
            headers.remove(*name);
        }
    }
    for name in named {
        headers.remove(name);
    }
}

/// Appends the peer's address to `X-Forwarded-For` (one field line).
fn append_forwarded_for(headers: &mut HeaderMap, peer: SocketAddr) {
    let ip = peer.ip().to_canonical().to_string();
    let joined: Vec<&str> = headers
        .get_all(X_FORWARDED_FOR)
        .iter()
        .filter_map(|v| v.to_str().ok())
        // An empty field line adds no hop (and no leading ", ").
        .map(|v| v.trim_matches(|c| c == ' ' || c == '\t' || c == ','))
        .filter(|v| !v.is_empty())
        .collect();
    let value = if joined.is_empty() {
        ip
    } else {
        format!("{}, {ip}", joined.join(", "))
    };
    if let Ok(v) = HeaderValue::from_str(&value) {
        headers.insert(X_FORWARDED_FOR, v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_is_a_host_and_a_port() {
        for good in [
            "a.example",
            "a.example:80",
            "127.0.0.1:8080",
            "[::1]",
            "[::1]:443",
            "a:65535",
        ] {
            let a = Authority::try_from(good).expect(good);
            assert!(is_host_port(&a), "{good}");
        }
        for bad in [
            "u@a.example",
            "u:pw@a.example:80",
            "a:-1",
            "a:+80",
            "a:",
            "a:65536",
            "a:8o",
        ] {
            let ok = Authority::try_from(bad).is_ok_and(|a| is_host_port(&a));
            assert!(!ok, "{bad}");
        }
    }

    #[test]
    fn hop_by_hop_fields_go() {
        let mut h = HeaderMap::new();
        for (k, v) in [
            ("connection", "close, x-secret"),
            ("x-secret", "1"),
            ("keep-alive", "timeout=5"),
            ("proxy-connection", "keep-alive"),
            ("te", "trailers"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "websocket"),
            ("proxy-authorization", "Basic x"),
            ("x-api-key", "k"),
            ("content-length", "3"),
        ] {
            h.append(HeaderName::from_static(k), HeaderValue::from_static(v));
        }
        strip_hop_by_hop(&mut h);
        // (The order of different names is not kept, nor meaningful.)
        let mut left: Vec<&str> = h.keys().map(HeaderName::as_str).collect();
        left.sort_unstable();
        assert_eq!(left, ["content-length", "x-api-key"]);

        // The common cases: `Connection: keep-alive` or `close` alone, in
        // any case; a listed name that is absent; nothing to do.
        for value in [
            "keep-alive",
            "Close",
            " close , Keep-Alive ",
            "x-absent",
            "",
        ] {
            let mut h = HeaderMap::new();
            h.insert(header::CONNECTION, HeaderValue::from_static(value));
            h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
            h.insert("x-absent-not", HeaderValue::from_static("1"));
            strip_hop_by_hop(&mut h);
            let mut left: Vec<&str> = h.keys().map(HeaderName::as_str).collect();
            left.sort_unstable();
            assert_eq!(left, ["content-type", "x-absent-not"], "{value:?}");
        }
        // `Connection` cannot take away what every hop needs.
        let mut h = HeaderMap::new();
        h.insert(
            header::CONNECTION,
            HeaderValue::from_static("Host, content-length, x-gone"),
        );
        h.insert(header::HOST, HeaderValue::from_static("a.example"));
        h.insert(header::CONTENT_LENGTH, HeaderValue::from_static("3"));
        h.insert("x-gone", HeaderValue::from_static("1"));
        strip_hop_by_hop(&mut h);
        let mut left: Vec<&str> = h.keys().map(HeaderName::as_str).collect();
        left.sort_unstable();
        assert_eq!(left, ["content-length", "host"]);

        // A listed name in another case than the field's.
        let mut h = HeaderMap::new();
        h.insert(header::CONNECTION, HeaderValue::from_static("X-Secret"));
        h.insert("x-secret", HeaderValue::from_static("1"));
        h.insert("te", HeaderValue::from_static("trailers"));
        h.insert("x-kept", HeaderValue::from_static("1"));
        strip_hop_by_hop(&mut h);
        let left: Vec<&str> = h.keys().map(HeaderName::as_str).collect();
        assert_eq!(left, ["x-kept"]);
    }

    #[test]
    fn both_hop_by_hop_lookups_agree() {
        for (i, name) in HOP_BY_HOP.iter().enumerate() {
            assert_eq!(hop_by_hop_index(name), Some(i));
            assert_eq!(hop_by_hop_index(&name.to_uppercase()), Some(i));
            let header = HeaderName::from_static(name);
            assert_eq!(hop_by_hop_index_of(&header), Some(i));
        }
        for other in ["content-length", "x-te", "connections", "tes"] {
            assert_eq!(hop_by_hop_index(other), None);
            assert_eq!(hop_by_hop_index_of(&HeaderName::from_static(other)), None);
        }
    }

    #[test]
    fn forwarded_for_is_appended() {
        let mut h = HeaderMap::new();
        h.append(X_FORWARDED_FOR, HeaderValue::from_static("1.2.3.4"));
        h.append(X_FORWARDED_FOR, HeaderValue::from_static("5.6.7.8"));
        append_forwarded_for(&mut h, "[::ffff:10.0.0.1]:80".parse().expect("addr"));
        assert_eq!(h[X_FORWARDED_FOR], "1.2.3.4, 5.6.7.8, 10.0.0.1");
        let mut h = HeaderMap::new();
        h.append(X_FORWARDED_FOR, HeaderValue::from_static(""));
        append_forwarded_for(&mut h, "127.0.0.1:80".parse().expect("addr"));
        assert_eq!(
            h[X_FORWARDED_FOR], "127.0.0.1",
            "an empty field adds no hop"
        );
    }
}
