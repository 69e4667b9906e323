//! The proxy's header hygiene, both ways: the hop-by-hop fields dropped
//! (RFC 9110 §7.6.1), `X-Forwarded-For` appended, and what a valid
//! `host[:port]` is.

use std::net::SocketAddr;

use http::header::{self, HeaderName};
use http::uri::Authority;
use http::{HeaderMap, HeaderValue};
use tollgate_http::extract::X_FORWARDED_FOR;

/// Whether `a` is `host[:port]` (RFC 9110 §7.2): no userinfo (which would
/// reach the upstream's Host, and make a `host` key a new bucket per name
/// before the `@`), and a port, if any, of 1 to 5 digits within 0..65535
/// (not `-1`, `+80` or empty).
pub fn is_host_port(a: &Authority) -> bool {
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
pub fn append_forwarded_for(headers: &mut HeaderMap, peer: SocketAddr) {
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
