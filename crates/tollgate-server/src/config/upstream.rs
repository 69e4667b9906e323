//! The reverse proxy's upstream (`--upstream URL`, `[proxy] upstream`).

use std::fmt;
use std::str::FromStr;

use http::Uri;
use http::uri::{Authority, PathAndQuery, Scheme};

/// Where admitted requests are forwarded: `http://host[:port][/base]` or
/// `https://host[:port][/base]`.
///
/// A request for `/a?b` goes to `http://host:port/base/a?b`. A plain
/// `http://` upstream is spoken to in HTTP/1.1; an `https://` one over TLS
/// (`[proxy.upstream_tls]`), in HTTP/2 when it picks `h2` by ALPN, else
/// HTTP/1.1 (docs/proxy.md).
///
/// ```
/// use tollgate_server::config::upstream::Upstream;
///
/// let u: Upstream = "http://127.0.0.1:9000/api/".parse().unwrap();
/// assert_eq!(u.uri_for(Some(&"/v1/x?y=1".parse().unwrap())).to_string(),
///            "http://127.0.0.1:9000/api/v1/x?y=1");
/// let tls: Upstream = "https://api.openai.com".parse().unwrap();
/// assert!(tls.is_tls());
/// assert_eq!(tls.address(), "api.openai.com:443");
/// assert!("ftp://example.com".parse::<Upstream>().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    /// `https://`: over TLS.
    tls: bool,
    authority: Authority,
    /// The base path without its trailing `/` (`""` for none).
    base: String,
}

impl Upstream {
    /// The upstream's `host:port`.
    #[must_use]
    pub fn authority(&self) -> &Authority {
        &self.authority
    }

    /// Whether the upstream is `https://`.
    #[must_use]
    pub fn is_tls(&self) -> bool {
        self.tls
    }

    /// The host alone (an IPv6 address without its brackets): the name
    /// TLS sends and verifies unless `server_name` says another.
    #[must_use]
    pub fn host(&self) -> &str {
        self.authority.host().trim_matches(['[', ']'])
    }

    /// Where to connect: `host:port` (port 80, or 443 for `https://`, when
    /// the URL names none).
    #[must_use]
    pub fn address(&self) -> String {
        let default = if self.tls { 443 } else { 80 };
        format!(
            "{}:{}",
            self.authority.host(),
            self.authority.port_u16().unwrap_or(default)
        )
    }

    /// The upstream request target (origin form, `/base/path?query`) for a
    /// request's path and query (`/` when absent).
    #[must_use]
    pub fn target_for(&self, path_and_query: Option<&PathAndQuery>) -> Uri {
        let uri = self.uri_for(path_and_query);
        let mut parts = uri.into_parts();
        parts.scheme = None;
        parts.authority = None;
        Uri::from_parts(parts).unwrap_or_default()
    }

    /// The upstream URI for a request's path and query (`/` when absent).
    #[must_use]
    pub fn uri_for(&self, path_and_query: Option<&PathAndQuery>) -> Uri {
        let mut parts = http::uri::Parts::default();
        parts.scheme = Some(if self.tls {
            Scheme::HTTPS
        } else {
            Scheme::HTTP
        });
        parts.authority = Some(self.authority.clone());
        if let Some(pq) = path_and_query
            && self.base.is_empty()
            && pq.as_str().starts_with('/')
        {
            // No base to put in front: the request's own (shared) bytes.
            parts.path_and_query = Some(pq.clone());
            return Uri::from_parts(parts).unwrap_or_default();
        }
        let pq = path_and_query.map_or("/", PathAndQuery::as_str);
        let pq = if pq.starts_with('/') {
            format!("{}{pq}", self.base)
        } else {
            // `*` (OPTIONS) or anything odd: keep it behind the base.
            format!("{}/{pq}", self.base)
        };
        parts.path_and_query = PathAndQuery::from_maybe_shared(pq)
            .ok()
            .or_else(|| Some(PathAndQuery::from_static("/")));
        Uri::from_parts(parts).unwrap_or_default()
    }
}

impl FromStr for Upstream {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = |why: &str| format!("upstream {s:?}: {why}");
        let uri: Uri = s
            .parse()
            .map_err(|e| bad(&format!("not a URL ({e}); expected http://host:port")))?;
        let tls = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            Some(other) => return Err(bad(&format!("scheme {other:?} is not http or https"))),
            None => return Err(bad("no scheme; expected http://host:port")),
        };
        let authority = uri
            .authority()
            .cloned()
            .ok_or_else(|| bad("no host; expected http://host:port"))?;
        if authority.as_str().contains('@') {
            return Err(bad("credentials in the URL are not supported"));
        }
        if authority.host().is_empty() {
            return Err(bad("no host; expected http://host:port"));
        }
        if authority.port().is_some() && authority.port_u16().is_none_or(|p| p == 0) {
            return Err(bad("the port must be a number from 1 to 65535"));
        }
        if uri.query().is_some() {
            return Err(bad("a query string is not allowed"));
        }
        if s.contains('#') {
            // `Uri` drops a fragment without a word; say so instead.
            return Err(bad("a fragment (#...) is not allowed"));
        }
        let base = uri.path().trim_end_matches('/').to_owned();
        Ok(Self {
            tls,
            authority,
            base,
        })
    }
}

impl fmt::Display for Upstream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = if self.tls { "https" } else { "http" };
        write!(f, "{scheme}://{}{}", self.authority, self.base)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_maps_paths() {
        let u: Upstream = "http://localhost:9000".parse().expect("valid");
        assert_eq!(u.to_string(), "http://localhost:9000");
        assert_eq!(u.uri_for(None).to_string(), "http://localhost:9000/");
        let pq: PathAndQuery = "/a/b?c=d&e".parse().expect("pq");
        assert_eq!(
            u.uri_for(Some(&pq)).to_string(),
            "http://localhost:9000/a/b?c=d&e"
        );
        let based: Upstream = "http://10.0.0.1/base".parse().expect("valid");
        assert_eq!(
            based.uri_for(Some(&pq)).to_string(),
            "http://10.0.0.1/base/a/b?c=d&e"
        );
    }

    #[test]
    fn https_is_tls_on_port_443_unless_named() {
        let u: Upstream = "https://api.example.com/v1".parse().expect("valid");
        assert!(u.is_tls());
        assert_eq!(u.address(), "api.example.com:443");
        assert_eq!(u.to_string(), "https://api.example.com/v1");
        assert_eq!(
            u.uri_for(Some(&"/chat".parse().expect("pq"))).to_string(),
            "https://api.example.com/v1/chat"
        );
        let u: Upstream = "https://[::1]:8443".parse().expect("valid");
        assert_eq!((u.address().as_str(), u.host()), ("[::1]:8443", "::1"));
        let plain: Upstream = "http://x".parse().expect("valid");
        assert!(!plain.is_tls());
        assert_eq!(plain.address(), "x:80");
    }

    #[test]
    fn rejects_what_it_cannot_forward_to() {
        for (bad, why) in [
            ("ftp://x", "is not http"),
            ("x:80", "no scheme"),
            ("http://", "not a URL"),
            ("http://u:p@x:80", "credentials"),
            ("http://x:0", "port"),
            ("http://x:80/?q=1", "query"),
            ("http://x:80/#f", "fragment"),
            ("http://x:80#f", "fragment"),
            ("", "not a URL"),
        ] {
            let err = bad.parse::<Upstream>().expect_err(bad);
            assert!(err.contains(why), "{bad:?}: {err}");
        }
    }
}
