//! Key extractors: how the tower layer and the reverse proxy derive a rule's
//! key from a request (`key = "header:x-api-key+path"`). Parsed and
//! validated at config load; applied by [`KeyExtractor::extract`], whose
//! rules (escaping, joining, missing headers) are in [`crate::extract`].

use std::fmt;
use std::str::FromStr;

/// One part of a key extractor.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum KeyPart {
    /// The client's IP address (the peer, or `X-Forwarded-For` read from the
    /// right past `[proxy] trusted_proxies`).
    ClientIp,
    /// A request header's value; the name is stored lowercased.
    Header(String),
    /// The request path (without the query).
    Path,
    /// The request method.
    Method,
    /// The `Host` (or `:authority`) of the request.
    Host,
    /// A field of the JSON request body: the text of the string, number
    /// or bool at this RFC 6901 pointer (stored in its canonical
    /// spelling, e.g. `/metadata/tenant`), read by a door that reads
    /// bodies ([`crate::request_body`]); the tower layer refuses it.
    RequestJson(String),
}

impl fmt::Display for KeyPart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyPart::ClientIp => f.write_str("client_ip"),
            KeyPart::Header(name) => write!(f, "header:{name}"),
            KeyPart::Path => f.write_str("path"),
            KeyPart::Method => f.write_str("method"),
            KeyPart::Host => f.write_str("host"),
            KeyPart::RequestJson(pointer) => write!(f, "request_json:{pointer}"),
        }
    }
}

/// A key extractor: one or more [`KeyPart`]s joined with `+`, in order
/// (so a `request_json` pointer cannot hold a `+`).
///
/// ```
/// use tollgate_http::key::{KeyExtractor, KeyPart};
///
/// let k: KeyExtractor = "header:X-Api-Key+path".parse().unwrap();
/// assert_eq!(k.parts(), &[KeyPart::Header("x-api-key".into()), KeyPart::Path]);
/// assert_eq!(k.to_string(), "header:x-api-key+path");
/// assert!("cookie".parse::<KeyExtractor>().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KeyExtractor {
    /// Shared: the gate and the proxy keep clones of every rule's
    /// extractor, and a config of many rules often has one `key` for all.
    parts: std::sync::Arc<[KeyPart]>,
}

impl KeyExtractor {
    /// The parts, in the order they are joined.
    #[must_use]
    pub fn parts(&self) -> &[KeyPart] {
        &self.parts
    }

    /// The pointers of its `request_json` parts: what it reads of the
    /// request body (nothing when empty).
    pub fn body_pointers(&self) -> impl Iterator<Item = &str> {
        self.parts.iter().filter_map(|p| match p {
            KeyPart::RequestJson(pointer) => Some(pointer.as_str()),
            _ => None,
        })
    }
}

/// RFC 9110 `tchar`, the characters of a header field name.
fn is_tchar(c: char) -> bool {
    c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c)
}

fn parse_part(part: &str) -> Result<KeyPart, String> {
    let part = part.trim();
    if let Some(name) = part.strip_prefix("header:") {
        if name.is_empty() {
            return Err("\"header:\" needs a header name, e.g. \"header:x-api-key\"".to_owned());
        }
        if let Some(c) = name.chars().find(|&c| !is_tchar(c)) {
            return Err(format!(
                "header name {name:?} contains {c:?}, which is not allowed in an HTTP header name"
            ));
        }
        return Ok(KeyPart::Header(name.to_ascii_lowercase()));
    }
    if let Some(pointer) = part.strip_prefix("request_json:") {
        let parsed: crate::json::Pointer = pointer.parse().map_err(|e| {
            format!(
                "request_json:{pointer}: {e} (a JSON pointer such as \"/model\" or \
                 \"/metadata/tenant\")"
            )
        })?;
        return Ok(KeyPart::RequestJson(parsed.to_string()));
    }
    match part {
        "client_ip" => Ok(KeyPart::ClientIp),
        "path" => Ok(KeyPart::Path),
        "method" => Ok(KeyPart::Method),
        "host" => Ok(KeyPart::Host),
        "" => Err("empty part; parts are joined with a single \"+\"".to_owned()),
        other => Err(format!(
            "unknown key part {other:?}; expected client_ip, header:NAME, path, method or host"
        )),
    }
}

impl FromStr for KeyExtractor {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.trim().is_empty() {
            return Err(
                "key must not be empty; use client_ip, header:NAME, path, method, host or \
                 request_json:POINTER, joined with \"+\""
                    .to_owned(),
            );
        }
        let mut parts = Vec::new();
        for text in s.split('+') {
            let part = parse_part(text)?;
            if parts.contains(&part) {
                return Err(format!("key part {part} appears twice"));
            }
            parts.push(part);
        }
        Ok(Self {
            parts: parts.into(),
        })
    }
}

impl fmt::Display for KeyExtractor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, part) in self.parts.iter().enumerate() {
            if i > 0 {
                f.write_str("+")?;
            }
            part.fmt(f)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_part() {
        let k: KeyExtractor = "client_ip+header:X-Tenant+path+method+host"
            .parse()
            .expect("valid");
        assert_eq!(
            k.parts(),
            &[
                KeyPart::ClientIp,
                KeyPart::Header("x-tenant".to_owned()),
                KeyPart::Path,
                KeyPart::Method,
                KeyPart::Host,
            ]
        );
        assert_eq!(k.to_string(), "client_ip+header:x-tenant+path+method+host");
        let body: KeyExtractor = "request_json:/model+request_json:/a~1b/c~0d+header:x"
            .parse()
            .expect("valid");
        assert_eq!(
            body.to_string(),
            "request_json:/model+request_json:/a~1b/c~0d+header:x"
        );
        assert_eq!(
            body.body_pointers().collect::<Vec<_>>(),
            ["/model", "/a~1b/c~0d"]
        );
        assert_eq!(k.body_pointers().count(), 0);
        let spaced: KeyExtractor = " client_ip + path ".parse().expect("valid");
        assert_eq!(spaced.to_string(), "client_ip+path");
    }

    #[test]
    fn rejects_bad_extractors() {
        for (bad, why) in [
            ("", "must not be empty"),
            ("   ", "must not be empty"),
            ("client_ip+", "empty part"),
            ("+path", "empty part"),
            ("client_ip++path", "empty part"),
            ("header:", "needs a header name"),
            ("header:x api", "not allowed in an HTTP header name"),
            ("cookie:session", "unknown key part \"cookie:session\""),
            ("PATH", "unknown key part \"PATH\""),
            ("path+path", "appears twice"),
            ("header:A+header:a", "appears twice"),
            ("request_json:", "request_json:"),
            ("request_json:model", "request_json:model"),
            ("request_json:/model+request_json:/model", "appears twice"),
        ] {
            let err = bad.parse::<KeyExtractor>().expect_err(bad);
            assert!(err.contains(why), "{bad:?}: {err}");
        }
    }
}
