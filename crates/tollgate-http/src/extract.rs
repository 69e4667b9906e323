//! From a request to key bytes: the client address behind trusted proxies,
//! and a [`KeyExtractor`] applied to a request.
//!
//! # The client address
//!
//! [`ClientIpConfig::client_ip`] answers the peer address, unless the peer is
//! inside one of the `trusted_proxies` blocks. Only then is
//! `X-Forwarded-For` read: every `X-Forwarded-For` field line, concatenated
//! in order into one comma-separated list, walked from the RIGHT (the hop
//! nearest to us). Each trusted entry is skipped; the first untrusted entry
//! is the client. When every entry is trusted, the leftmost one is. A
//! malformed entry stops the walk and the last good address (the peer, or
//! the entry to its right) is the client, so a garbage entry can neither
//! hide a client nor invent one. Empty list elements (`a,,b`, a trailing
//! comma) are skipped as RFC 9110 §5.6.1 asks.
//!
//! An entry is an IPv4 or IPv6 address, optionally with a port
//! (`192.0.2.1:4711`, `[2001:db8::1]:4711`) or in brackets
//! (`[2001:db8::1]`); anything else (`unknown`, a host name, an IPv6 zone
//! `fe80::1%eth0`, bytes that are not UTF-8) is malformed.
//!
//! A peer that is NOT trusted never has its `X-Forwarded-For` read, so a
//! client cannot pick a new bucket by sending one.
//!
//! IPv4-mapped IPv6 addresses (`::ffff:192.0.2.1`, what a dual-stack `[::]`
//! listener reports for IPv4 peers) are treated as the IPv4 address they
//! carry. IPv6 clients are then grouped by a prefix length
//! ([`ClientIpConfig::with_ipv6_prefix`], default 128 = no grouping): one
//! host usually holds a whole /64, so keying by the full address lets it
//! take 2^64 buckets.
//!
//! # Key bytes
//!
//! [`KeyExtractor::extract`] renders each part and joins them with `+`, in
//! the extractor's order. Inside a part, `%` is written `%25` and `+` is
//! written `%2B` (every other byte as is), so a `+` in the key always
//! separates parts and the parts can be recovered unambiguously: the header
//! value `a+b` never collides with the two parts `a` and `b`. A key of one
//! part whose value has no `%` or `+` is exactly that value, so the
//! `client_ip` key of `192.0.2.1` is `192.0.2.1`, the same key an HTTP API
//! caller would use.
//!
//! | part | value |
//! |---|---|
//! | `client_ip` | the address ([`ClientIp`]'s `Display`): `192.0.2.1`, `2001:db8::1`, or `2001:db8:1:2::/64` when grouped |
//! | `header:NAME` | the field value's bytes; several field lines are joined with `, ` (RFC 9110 §5.3) |
//! | `path` | the path as received, without the query and without any normalization |
//! | `method` | the method, e.g. `GET` |
//! | `host` | the URI's host (absolute-form or HTTP/2 `:authority`), else the `Host` header's; ASCII-lowercased, without the port and a trailing `.` |
//! | `request_json:POINTER` | the JSON request body's string (its text), number or bool (its JSON text) at the pointer ([`crate::request_body`] says when it counts as found) |
//!
//! A key longer than [`tollgate::limits::MAX_KEY_LEN`] (a header value of 4 KiB
//! and more) is counted under its digest: `%sha256=` and the SHA-256 of
//! its bytes in lowercase hex, 72 bytes. A client cannot escape its limit
//! by sending a long value (it would otherwise be refused before any check,
//! and a 400 is an answer a front door may be configured to pass), each long
//! value still has its own counter, and since every `%` of a short key is
//! followed by `25` or `2B`, no short key names a long key's counter. This
//! is what the Envoy service does with long descriptors.
//!
//! A missing header (or host, or body field) is keyed by the empty value, never an error:
//! [`MissingKey::Empty`], the default. [`MissingKey::Reject`] answers
//! [`KeyError::Missing`] instead for a header or host that is missing or
//! empty, which the layer turns into a 400; [`MissingKey::Skip`] leaves the
//! rule out of the check ([`crate::decide`]).

use std::fmt;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use http::header::{HOST, HeaderMap, HeaderName};
use http::{Method, Request, Uri};

use crate::cidr::Cidr;
use crate::key::{KeyExtractor, KeyPart};
use crate::request_body::BodyFacts;

/// `X-Forwarded-For`.
pub const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// The default IPv6 grouping prefix: 128, every address its own bucket.
pub const DEFAULT_IPV6_PREFIX: u8 = 128;

/// How the client address is found: which peers are trusted proxies whose
/// `X-Forwarded-For` is read, and how IPv6 clients are grouped. See the
/// [module docs](self) for the exact rules.
///
/// ```
/// use std::net::IpAddr;
/// use http::HeaderMap;
/// use tollgate_http::extract::ClientIpConfig;
///
/// let config = ClientIpConfig::new()
///     .with_trusted_proxies(["10.0.0.0/8".parse().unwrap()])
///     .with_ipv6_prefix(64)
///     .unwrap();
/// let mut headers = HeaderMap::new();
/// headers.insert("x-forwarded-for", "198.51.100.7, 10.0.0.2".parse().unwrap());
///
/// let via_proxy: IpAddr = "10.0.0.1".parse().unwrap();
/// assert_eq!(config.client_ip(via_proxy, &headers).to_string(), "198.51.100.7");
///
/// // The same header from a peer that is not trusted is ignored.
/// let direct: IpAddr = "203.0.113.9".parse().unwrap();
/// assert_eq!(config.client_ip(direct, &headers).to_string(), "203.0.113.9");
///
/// // IPv6 clients are grouped by /64.
/// let v6: IpAddr = "2001:db8:1:2:3:4:5:6".parse().unwrap();
/// assert_eq!(config.client_ip(v6, &HeaderMap::new()).to_string(), "2001:db8:1:2::/64");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientIpConfig {
    trusted_proxies: Vec<Cidr>,
    ipv6_prefix: u8,
}

impl Default for ClientIpConfig {
    fn default() -> Self {
        Self::new()
    }
}

impl ClientIpConfig {
    /// No trusted proxies (the peer is always the client) and no IPv6
    /// grouping.
    #[must_use]
    pub fn new() -> Self {
        Self {
            trusted_proxies: Vec::new(),
            ipv6_prefix: DEFAULT_IPV6_PREFIX,
        }
    }

    /// Peers inside these blocks are proxies whose `X-Forwarded-For` is
    /// read (`[proxy] trusted_proxies`). Replaces any blocks set before.
    #[must_use]
    pub fn with_trusted_proxies(mut self, blocks: impl IntoIterator<Item = Cidr>) -> Self {
        self.trusted_proxies = blocks.into_iter().collect();
        self
    }

    /// Groups IPv6 clients by their first `prefix` bits (64 is the usual
    /// choice: one subscriber's network). 128 turns grouping off.
    ///
    /// # Errors
    /// A prefix above 128.
    pub fn with_ipv6_prefix(mut self, prefix: u8) -> Result<Self, String> {
        if prefix > 128 {
            return Err(format!(
                "IPv6 prefix length {prefix} must be a whole number from 0 to 128"
            ));
        }
        self.ipv6_prefix = prefix;
        Ok(self)
    }

    /// The trusted proxy blocks.
    #[must_use]
    pub fn trusted_proxies(&self) -> &[Cidr] {
        &self.trusted_proxies
    }

    /// The IPv6 grouping prefix length.
    #[must_use]
    pub fn ipv6_prefix(&self) -> u8 {
        self.ipv6_prefix
    }

    /// Whether `ip` is inside a trusted proxy block.
    #[must_use]
    pub fn is_trusted(&self, ip: IpAddr) -> bool {
        self.trusted_proxies.iter().any(|block| block.contains(ip))
    }

    /// The client's address before grouping: the peer, or when the peer is
    /// trusted, the first untrusted `X-Forwarded-For` entry from the right.
    /// IPv4-mapped IPv6 addresses come back as IPv4.
    #[must_use]
    pub fn resolve(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        let mut client = peer.to_canonical();
        if !self.is_trusted(client) {
            return client;
        }
        let entries = headers
            .get_all(X_FORWARDED_FOR)
            .iter()
            .rev()
            .flat_map(|line| line.as_bytes().rsplit(|&b| b == b','));
        for entry in entries {
            let entry = entry.trim_ascii();
            if entry.is_empty() {
                continue;
            }
            let Some(ip) = parse_forwarded(entry) else {
                break;
            };
            client = ip.to_canonical();
            if !self.is_trusted(client) {
                break;
            }
        }
        client
    }

    /// The client as it keys a bucket: [`ClientIpConfig::resolve`], then
    /// IPv6 grouping.
    #[must_use]
    pub fn client_ip(&self, peer: IpAddr, headers: &HeaderMap) -> ClientIp {
        ClientIp::new(self.resolve(peer, headers), self.ipv6_prefix)
    }
}

/// One `X-Forwarded-For` entry: an address, optionally bracketed (IPv6) and
/// optionally with a port.
fn parse_forwarded(entry: &[u8]) -> Option<IpAddr> {
    let text = std::str::from_utf8(entry).ok()?;
    if let Ok(ip) = text.parse::<IpAddr>() {
        return Some(ip);
    }
    if let Ok(sock) = text.parse::<SocketAddr>() {
        return Some(sock.ip());
    }
    text.strip_prefix('[')?
        .strip_suffix(']')?
        .parse::<Ipv6Addr>()
        .ok()
        .map(IpAddr::V6)
}

/// A client address as it keys a bucket: an IPv4 address, an IPv6 address,
/// or an IPv6 network when grouping applies.
///
/// `Display` gives the key text: the address (`192.0.2.1`, `2001:db8::1`),
/// or the network and its prefix length (`2001:db8:1:2::/64`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClientIp {
    addr: IpAddr,
    prefix: u8,
}

impl ClientIp {
    /// `addr` (IPv4-mapped IPv6 taken as IPv4), an IPv6 one masked to its
    /// first `ipv6_prefix` bits (clamped to 128).
    #[must_use]
    pub fn new(addr: IpAddr, ipv6_prefix: u8) -> Self {
        match addr.to_canonical() {
            v4 @ IpAddr::V4(_) => Self {
                addr: v4,
                prefix: 32,
            },
            IpAddr::V6(v6) => {
                let prefix = ipv6_prefix.min(128);
                let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
                Self {
                    addr: IpAddr::V6((u128::from(v6) & mask).into()),
                    prefix,
                }
            }
        }
    }

    /// The address, or the network address when grouped.
    #[must_use]
    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    /// The prefix length: 32 for IPv4, the grouping prefix for IPv6.
    #[must_use]
    pub fn prefix(&self) -> u8 {
        self.prefix
    }
}

impl fmt::Display for ClientIp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.addr {
            IpAddr::V6(_) if self.prefix < 128 => write!(f, "{}/{}", self.addr, self.prefix),
            _ => self.addr.fmt(f),
        }
    }
}

/// What a request missing a header (or host) that a key reads gets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum MissingKey {
    /// Key it by the empty value (the default): every request without the
    /// header shares one bucket per rule. Never an error.
    #[default]
    Empty,
    /// Leave the rule out: [`KeyError::Missing`] from the extractor (for a
    /// missing or empty header, as [`MissingKey::Reject`]), which
    /// [`crate::decide::RuleKeys::keys`] takes as "this rule does not apply
    /// to the request"; a request every rule skips is checked against
    /// nothing and admitted without RateLimit headers.
    Skip,
    /// Refuse it, and a present but empty one too: [`KeyError::Missing`],
    /// which the layer answers with `400 Bad Request` and a problem+json
    /// body.
    Reject,
}

impl MissingKey {
    /// The policy's name in a config file (`[proxy] on_missing_key`):
    /// `empty`, `skip` or `reject`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            MissingKey::Empty => "empty",
            MissingKey::Skip => "skip",
            MissingKey::Reject => "reject",
        }
    }
}

impl fmt::Display for MissingKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for MissingKey {
    type Err = String;

    /// `empty`, `skip` or `reject`, as [`MissingKey::as_str`] writes them.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "empty" => Ok(MissingKey::Empty),
            "skip" => Ok(MissingKey::Skip),
            "reject" => Ok(MissingKey::Reject),
            _ => Err(format!(
                "unknown on_missing_key {s:?}; expected empty, skip or reject"
            )),
        }
    }
}

/// Why a key could not be extracted.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyError {
    /// The request has no such header (or host), and the policy is
    /// [`MissingKey::Reject`] or [`MissingKey::Skip`].
    Missing(KeyPart),
    /// The extractor reads `client_ip`, but no peer address was given: the
    /// server does not record it, or not where the layer looks (with axum,
    /// serve `into_make_service_with_connect_info::<SocketAddr>()` and pass
    /// `RateLimitLayer::with_peer_addr` a reader of its `ConnectInfo`).
    NoClientIp,
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyError::Missing(KeyPart::Host) => f.write_str("the request names no host"),
            KeyError::Missing(KeyPart::Header(name)) => {
                write!(f, "the request has no {name:?} header, or an empty one")
            }
            KeyError::Missing(KeyPart::RequestJson(pointer)) => write!(
                f,
                "the request body has no JSON string, number or boolean at {pointer} \
                 (within the part of it read)"
            ),
            KeyError::Missing(part) => write!(f, "the request has no {part}"),
            KeyError::NoClientIp => f.write_str(
                "the key reads client_ip but the peer address is unknown (the server does not \
                 record it, or the layer's with_peer_addr does not find it)",
            ),
        }
    }
}

impl std::error::Error for KeyError {}

impl KeyExtractor {
    /// Whether any part reads the client address.
    #[must_use]
    pub fn uses_client_ip(&self) -> bool {
        self.parts().contains(&KeyPart::ClientIp)
    }

    /// The key bytes of `req`: each part rendered and escaped, joined with
    /// `+` (see the [module docs](crate::extract)). `client_ip` is the
    /// resolved client ([`ClientIpConfig::client_ip`]); it is only read when
    /// the extractor has a `client_ip` part.
    ///
    /// ```
    /// use tollgate_http::extract::{ClientIp, MissingKey};
    /// use tollgate_http::key::KeyExtractor;
    ///
    /// let k: KeyExtractor = "header:x-api-key+client_ip".parse().unwrap();
    /// let req = http::Request::get("/").header("x-api-key", "a+b").body(()).unwrap();
    /// let ip = ClientIp::new("192.0.2.1".parse().unwrap(), 128);
    /// assert_eq!(k.extract(&req, Some(ip), MissingKey::Empty).unwrap(), b"a%2Bb+192.0.2.1");
    /// ```
    ///
    /// # Errors
    /// [`KeyError::Missing`] for a missing header or host under
    /// [`MissingKey::Reject`] or [`MissingKey::Skip`]; [`KeyError::NoClientIp`] when a `client_ip`
    /// part has no address.
    pub fn extract<B>(
        &self,
        req: &Request<B>,
        client_ip: Option<ClientIp>,
        missing: MissingKey,
    ) -> Result<Vec<u8>, KeyError> {
        self.extract_from(req.method(), req.uri(), req.headers(), client_ip, missing)
    }

    /// [`KeyExtractor::extract`] for a request already split into parts.
    ///
    /// # Errors
    /// As [`KeyExtractor::extract`].
    pub fn extract_parts(
        &self,
        parts: &http::request::Parts,
        client_ip: Option<ClientIp>,
        missing: MissingKey,
    ) -> Result<Vec<u8>, KeyError> {
        self.extract_from(
            &parts.method,
            &parts.uri,
            &parts.headers,
            client_ip,
            missing,
        )
    }

    /// [`KeyExtractor::extract`] from the pieces of a request head.
    ///
    /// # Errors
    /// As [`KeyExtractor::extract`].
    pub fn extract_from(
        &self,
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
        client_ip: Option<ClientIp>,
        missing: MissingKey,
    ) -> Result<Vec<u8>, KeyError> {
        self.extract_with_body(method, uri, headers, client_ip, missing, None)
    }

    /// [`KeyExtractor::extract_from`] with what the request body said
    /// (`None`: it was not read), which `request_json` parts read: a value
    /// missing there, or empty, is a missing key as a header is.
    ///
    /// # Errors
    /// As [`KeyExtractor::extract`].
    pub fn extract_with_body(
        &self,
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
        client_ip: Option<ClientIp>,
        missing: MissingKey,
        body: Option<&BodyFacts>,
    ) -> Result<Vec<u8>, KeyError> {
        let mut key = Vec::with_capacity(64);
        for (i, part) in self.parts().iter().enumerate() {
            if i > 0 {
                key.push(b'+');
            }
            match part {
                KeyPart::ClientIp => {
                    let ip = client_ip.ok_or(KeyError::NoClientIp)?;
                    push_escaped(&mut key, ip.to_string().as_bytes());
                }
                KeyPart::Header(name) => {
                    // Only empty lines (`x-k:` twice joins to ", ") are an
                    // empty header too.
                    let mut empty = true;
                    for (j, value) in headers.get_all(name.as_str()).iter().enumerate() {
                        if j > 0 {
                            key.extend_from_slice(b", ");
                        }
                        empty &= value.as_bytes().trim_ascii().is_empty();
                        push_escaped(&mut key, value.as_bytes());
                    }
                    if empty && missing != MissingKey::Empty {
                        return Err(KeyError::Missing(part.clone()));
                    }
                }
                KeyPart::Path => push_escaped(&mut key, &normalize_path(uri.path().as_bytes())),
                KeyPart::Method => push_escaped(&mut key, method.as_str().as_bytes()),
                KeyPart::Host => match host(uri, headers) {
                    Some(host) => {
                        let host = host.to_ascii_lowercase();
                        // Every trailing dot: `a.example..` is no other host
                        // than `a.example` to a resolver.
                        let end = host.iter().rposition(|&b| b != b'.').map_or(0, |i| i + 1);
                        push_escaped(&mut key, &host[..end]);
                    }
                    None if missing != MissingKey::Empty => {
                        return Err(KeyError::Missing(part.clone()));
                    }
                    None => {}
                },
                KeyPart::RequestJson(pointer) => match body.and_then(|b| b.key_text(pointer)) {
                    Some(text) if !text.is_empty() => push_escaped(&mut key, text.as_bytes()),
                    _ if missing != MissingKey::Empty => {
                        return Err(KeyError::Missing(part.clone()));
                    }
                    _ => {}
                },
            }
        }
        Ok(fit(key))
    }
}

/// `key` itself when it fits in [`tollgate::limits::MAX_KEY_LEN`] bytes, else its
/// digest (see the [module docs](self)).
fn fit(key: Vec<u8>) -> Vec<u8> {
    if key.len() <= tollgate::limits::MAX_KEY_LEN {
        return key;
    }
    // `%` followed by `s`: escaping never writes it.
    digest_key("%sha256=", &key).into_bytes()
}

/// `prefix` and the SHA-256 of `long` in lower-case hex: the name every
/// door counts a key too long to store under (here, and the Envoy
/// service's descriptors with their own prefix). Each door picks a prefix
/// its short keys can never start with, so no short key names a long
/// key's counter.
///
/// ```
/// let k = tollgate_http::extract::digest_key(";sha256=", b"abc");
/// assert_eq!(k, ";sha256=ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
/// ```
#[must_use]
pub fn digest_key(prefix: &str, long: &[u8]) -> String {
    use sha2::Digest as _;
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(prefix.len() + 64);
    out.push_str(prefix);
    for b in sha2::Sha256::digest(long) {
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 0xf)]));
    }
    out
}

/// The request's host without the port: the URI's, else the `Host`
/// header's. `None` when neither names one.
fn host<'a>(uri: &'a Uri, headers: &'a HeaderMap) -> Option<&'a [u8]> {
    if let Some(host) = uri.host() {
        return Some(host.as_bytes());
    }
    let value = headers.get(HOST)?.as_bytes().trim_ascii();
    let host = if value.starts_with(b"[") {
        // [v6]:port: up to and with the closing bracket
        match value.iter().position(|&b| b == b']') {
            Some(end) => &value[..=end],
            None => value,
        }
    } else {
        match value.iter().rposition(|&b| b == b':') {
            Some(colon) => &value[..colon],
            None => value,
        }
    };
    (!host.is_empty()).then_some(host)
}

/// Appends `value` with `%` as `%25` and `+` as `%2B`.
/// A path as the upstream most likely resolves it, so that spellings of one
/// path share one bucket (`/%6cogin`, `/./login`, `/x/../login`,
/// `//login` are all `/login`): the equivalences of RFC 3986 §6.2.2 (a
/// percent-encoded unreserved character is that character, but for a hex
/// digit that would make an escape with a `%` starting none; the hex digits
/// of the other percent-encodings in upper case; dot segments removed,
/// §5.2.4), and runs of `/` merged (as nginx does by default; merging can
/// only join buckets, never split one). The path is returned as it is when
/// none of this applies (no `%`, no `/.`, no `//`), without a copy.
#[must_use]
pub fn normalize_path(path: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    let plain = !path.contains(&b'%') && !path.windows(2).any(|w| w == b"/." || w == b"//");
    if plain {
        return std::borrow::Cow::Borrowed(path);
    }
    // Percent-encodings first (`%2E` is a dot, and then a dot segment).
    let mut decoded = Vec::with_capacity(path.len());
    let mut i = 0;
    while i < path.len() {
        let b = path[i];
        if b == b'%'
            && let (Some(h), Some(l)) = (
                path.get(i + 1).and_then(|c| (*c as char).to_digit(16)),
                path.get(i + 2).and_then(|c| (*c as char).to_digit(16)),
            )
        {
            let c = u8::try_from(h * 16 + l).unwrap_or(0);
            // A hex digit right after a `%` that starts no escape (`%3%34`)
            // stays encoded: decoded, it would make an escape (`%34`) that
            // a second normalization decodes again, and one path would
            // have two normal forms.
            let n = decoded.len();
            let joins_a_stray = c.is_ascii_hexdigit()
                && (decoded.last() == Some(&b'%')
                    || (n >= 2 && decoded[n - 2] == b'%' && decoded[n - 1].is_ascii_hexdigit()));
            if !joins_a_stray
                && (c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_' | b'~'))
            {
                decoded.push(c);
            } else {
                decoded.push(b'%');
                decoded.push(path[i + 1].to_ascii_uppercase());
                decoded.push(path[i + 2].to_ascii_uppercase());
            }
            i += 3;
        } else {
            decoded.push(b);
            i += 1;
        }
    }
    // Then segments: empty ones (merged slashes) and `.` go, `..` takes
    // the one before it (never above the root).
    let absolute = decoded.first() == Some(&b'/');
    let trailing = decoded.len() > 1
        && (decoded.ends_with(b"/") || decoded.ends_with(b"/.") || decoded.ends_with(b"/.."));
    let mut kept: Vec<&[u8]> = Vec::new();
    for segment in decoded.split(|&b| b == b'/') {
        match segment {
            b"" | b"." => {}
            b".." => {
                kept.pop();
            }
            s => kept.push(s),
        }
    }
    let mut out = Vec::with_capacity(decoded.len());
    if absolute {
        out.push(b'/');
    }
    out.extend_from_slice(&kept.join(&b'/'));
    if trailing && !kept.is_empty() {
        out.push(b'/');
    }
    std::borrow::Cow::Owned(out)
}

fn push_escaped(out: &mut Vec<u8>, value: &[u8]) {
    for &b in value {
        match b {
            b'%' => out.extend_from_slice(b"%25"),
            b'+' => out.extend_from_slice(b"%2B"),
            _ => out.push(b),
        }
    }
}

#[cfg(test)]
mod tests;
