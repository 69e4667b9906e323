//! Store URLs (docs/cli.md, "Store URLs"): `memory`,
//! `redis://[user:pass@]host:port[/db]`, `rediss://…` (TLS),
//! `redis+cluster://host:port[,host:port…]`,
//! `redis+sentinel://host:port[,host:port…]/master-name`.
//!
//! `RedisStore::connect_to` (feature `redis`) opens the Redis ones.

use std::fmt;
use std::str::FromStr;

/// The default port of a Redis server (standalone or cluster node).
pub const DEFAULT_REDIS_PORT: u16 = 6379;
/// The default port of a Redis Sentinel.
pub const DEFAULT_SENTINEL_PORT: u16 = 26379;

/// A Redis host and port. IPv6 hosts are kept without brackets.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HostPort {
    /// Host name or IP address.
    pub host: String,
    /// TCP port.
    pub port: u16,
}

impl fmt::Display for HostPort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// Credentials from a URL's `user:pass@` part, percent-decoded.
#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub struct Credentials {
    /// The ACL user name, if any (`redis://:pass@…` has none).
    pub username: Option<String>,
    /// The password, if any.
    pub password: Option<String>,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .finish()
    }
}

impl Credentials {
    fn is_empty(&self) -> bool {
        self.username.is_none() && self.password.is_none()
    }
}

/// Where rate-limit state is kept. [`fmt::Display`] prints the URL with the
/// password replaced by `***`, so it is safe to log.
///
/// ```
/// use tollgate::store::StoreUrl;
///
/// let url: StoreUrl = "redis://app:s3cret@cache.internal:6380/2".parse().unwrap();
/// assert_eq!(url.to_string(), "redis://app:***@cache.internal:6380/2");
/// assert!("redis://host:99999".parse::<StoreUrl>().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StoreUrl {
    /// The in-process store: `memory`.
    Memory,
    /// One Redis server: `redis://` or, with TLS, `rediss://`.
    Redis {
        /// `rediss://`.
        tls: bool,
        /// `user:pass@`.
        credentials: Credentials,
        /// The server (port defaults to 6379).
        node: HostPort,
        /// The database number (default 0).
        db: u32,
    },
    /// A Redis Cluster, reached through any of its seed nodes.
    Cluster {
        /// `user:pass@`.
        credentials: Credentials,
        /// Seed nodes (ports default to 6379).
        nodes: Vec<HostPort>,
    },
    /// A Redis primary found through Sentinel.
    Sentinel {
        /// `user:pass@`, used for the data nodes.
        credentials: Credentials,
        /// Sentinels (ports default to 26379).
        nodes: Vec<HostPort>,
        /// The monitored master's name.
        master: String,
    },
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

impl Credentials {
    /// `user:pass@` (percent-encoded) for a client URL, or nothing.
    fn userinfo(&self) -> String {
        if self.is_empty() {
            return String::new();
        }
        format!(
            "{}:{}@",
            percent_encode(self.username.as_deref().unwrap_or("")),
            percent_encode(self.password.as_deref().unwrap_or(""))
        )
    }
}

impl HostPort {
    /// `redis://[user:pass@]host:port[/db]` (or `rediss://`) for the Redis
    /// client library, credentials included: never log it.
    #[must_use]
    pub fn client_url(&self, tls: bool, credentials: &Credentials, db: u32) -> String {
        let scheme = if tls { "rediss" } else { "redis" };
        format!("{scheme}://{}{self}/{db}", credentials.userinfo())
    }
}

impl StoreUrl {
    /// Whether this is the in-process store.
    #[must_use]
    pub fn is_memory(&self) -> bool {
        matches!(self, StoreUrl::Memory)
    }

    /// The credentials of a Redis URL; `None` for `memory`.
    #[must_use]
    pub fn credentials(&self) -> Option<&Credentials> {
        match self {
            StoreUrl::Memory => None,
            StoreUrl::Redis { credentials, .. }
            | StoreUrl::Cluster { credentials, .. }
            | StoreUrl::Sentinel { credentials, .. } => Some(credentials),
        }
    }

    /// The credentials of a Redis URL, to set a password or user that
    /// came from elsewhere (a file, the environment) without writing it
    /// into a URL string; `None` for `memory`.
    ///
    /// ```
    /// use tollgate::store::StoreUrl;
    ///
    /// let mut url: StoreUrl = "redis://cache:6379".parse().unwrap();
    /// url.credentials_mut().unwrap().password = Some("from-a-file".to_owned());
    /// assert_eq!(url.to_string(), "redis://:***@cache:6379/0");
    /// ```
    pub fn credentials_mut(&mut self) -> Option<&mut Credentials> {
        match self {
            StoreUrl::Memory => None,
            StoreUrl::Redis { credentials, .. }
            | StoreUrl::Cluster { credentials, .. }
            | StoreUrl::Sentinel { credentials, .. } => Some(credentials),
        }
    }
}

const EXPECTED: &str = "expected \"memory\", redis://[user:pass@]host:port[/db], rediss://…, \
                        redis+cluster://host:port[,host:port…] or \
                        redis+sentinel://host:port[,host:port…]/master-name";

impl FromStr for StoreUrl {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "memory" {
            return Ok(StoreUrl::Memory);
        }
        let Some((scheme, rest)) = s.split_once("://") else {
            return Err(format!(
                "store URL {:?} is not valid; {EXPECTED}",
                redact(s)
            ));
        };
        let fail = |why: String| format!("store URL {:?}: {why}", redact(s));
        // user:password runs to the last `@`: a password may hold `/`, `?`
        // or `#` unencoded (base64 ones do), and no host, database or
        // master name holds an `@`.
        let (userinfo, rest) = match rest.rfind('@') {
            Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
            None => (None, rest),
        };
        if rest.contains(['?', '#']) {
            return Err(fail(
                "query strings and fragments are not supported".to_owned(),
            ));
        }
        let (hosts, path) = match rest.find('/') {
            Some(i) => (&rest[..i], Some(&rest[i + 1..])),
            None => (rest, None),
        };
        let credentials = match userinfo {
            Some(userinfo) => parse_userinfo(userinfo).map_err(&fail)?,
            None => Credentials::default(),
        };
        match scheme {
            "redis" | "rediss" => {
                let nodes = parse_hosts(hosts, DEFAULT_REDIS_PORT).map_err(&fail)?;
                let [node] = <[HostPort; 1]>::try_from(nodes).map_err(|_| {
                    fail(
                        "a redis:// URL names one server; use redis+cluster:// or \
                          redis+sentinel:// for several"
                            .to_owned(),
                    )
                })?;
                let db = match path {
                    None | Some("") => 0,
                    Some(db) => db
                        .parse::<u32>()
                        .ok()
                        .filter(|_| db.bytes().all(|b| b.is_ascii_digit()))
                        .ok_or_else(|| {
                            fail(format!("database {db:?} must be a whole number, e.g. /0"))
                        })?,
                };
                Ok(StoreUrl::Redis {
                    tls: scheme == "rediss",
                    credentials,
                    node,
                    db,
                })
            }
            "redis+cluster" => {
                if !matches!(path, None | Some("")) {
                    return Err(fail(
                        "a cluster URL takes no path: Redis Cluster has only database 0".to_owned(),
                    ));
                }
                let nodes = parse_hosts(hosts, DEFAULT_REDIS_PORT).map_err(&fail)?;
                Ok(StoreUrl::Cluster { credentials, nodes })
            }
            "redis+sentinel" => {
                let nodes = parse_hosts(hosts, DEFAULT_SENTINEL_PORT).map_err(&fail)?;
                let master = match path {
                    Some(m) if !m.is_empty() => m,
                    _ => {
                        return Err(fail("a sentinel URL must end with /master-name".to_owned()));
                    }
                };
                if let Some(c) = master
                    .chars()
                    .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')))
                {
                    return Err(fail(format!(
                        "master name {master:?} contains {c:?}; only A-Z a-z 0-9 _ . - are allowed"
                    )));
                }
                Ok(StoreUrl::Sentinel {
                    credentials,
                    nodes,
                    master: master.to_owned(),
                })
            }
            other => Err(fail(format!("unknown scheme {other:?}; {EXPECTED}"))),
        }
    }
}

/// The URL with any password replaced by `***`, for error messages:
/// all between `://` (or the start, in a URL without it) and the last
/// `@` but a user name, so a password that breaks the URL's syntax is
/// hidden too.
fn redact(s: &str) -> String {
    let (scheme, rest) = match s.split_once("://") {
        Some((scheme, rest)) => (Some(scheme), rest),
        None => (None, s),
    };
    let Some(at) = rest.rfind('@') else {
        return s.to_owned();
    };
    let userinfo = match (scheme, rest[..at].split_once(':')) {
        (Some(_), Some((user, _))) if !user.contains('/') => format!("{user}:***"),
        (Some(_), None) => rest[..at].to_owned(),
        _ => "***".to_owned(),
    };
    match scheme {
        Some(scheme) => format!("{scheme}://{userinfo}{}", &rest[at..]),
        None => format!("{userinfo}{}", &rest[at..]),
    }
}

/// The credentials of a URL's `user:password` (or `user`), decoded.
fn parse_userinfo(userinfo: &str) -> Result<Credentials, String> {
    let (user, pass) = match userinfo.split_once(':') {
        Some((u, p)) => (u, Some(p)),
        None => (userinfo, None),
    };
    let credentials = Credentials {
        username: (!user.is_empty())
            .then(|| percent_decode(user))
            .transpose()?,
        password: pass
            .filter(|p| !p.is_empty())
            .map(percent_decode)
            .transpose()?,
    };
    if credentials.is_empty() {
        return Err("empty user:password before \"@\"".to_owned());
    }
    Ok(credentials)
}

fn percent_decode(s: &str) -> Result<String, String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                // from_str_radix alone would take a sign (`%+5`)
                .filter(|h| h.iter().all(u8::is_ascii_hexdigit))
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| {
                    "bad percent-encoding in user:password (write % as %25)".to_owned()
                })?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "user:password is not UTF-8 once decoded".to_owned())
}

fn parse_hosts(hosts: &str, default_port: u16) -> Result<Vec<HostPort>, String> {
    if hosts.is_empty() {
        return Err("missing host".to_owned());
    }
    hosts
        .split(',')
        .map(|h| parse_host_port(h, default_port))
        .collect()
}

fn parse_host_port(text: &str, default_port: u16) -> Result<HostPort, String> {
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let (v6, after) = rest
            .split_once(']')
            .ok_or_else(|| format!("host {text:?} has \"[\" without \"]\""))?;
        if v6.parse::<std::net::Ipv6Addr>().is_err() {
            return Err(format!("{v6:?} in brackets is not an IPv6 address"));
        }
        let port = match after {
            "" => None,
            p => Some(
                p.strip_prefix(':')
                    .ok_or_else(|| format!("unexpected {p:?} after \"[{v6}]\""))?,
            ),
        };
        (v6, port)
    } else {
        match text.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (text, None),
        }
    };
    if host.is_empty() {
        return Err(format!("missing host in {text:?}"));
    }
    let bad_char = host
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_')));
    if let (false, Some(c)) = (text.starts_with('['), bad_char) {
        return Err(format!(
            "host {host:?} contains {c:?} (IPv6 addresses go in brackets: [::1]:6379)"
        ));
    }
    let port = match port {
        None => default_port,
        Some(p) => p
            .parse::<u16>()
            .ok()
            .filter(|&n| n != 0 && p.bytes().all(|b| b.is_ascii_digit()))
            .ok_or_else(|| format!("port {p:?} must be a number from 1 to 65535"))?,
    };
    Ok(HostPort {
        host: host.to_owned(),
        port,
    })
}

fn fmt_credentials(f: &mut fmt::Formatter<'_>, c: &Credentials) -> fmt::Result {
    if c.is_empty() {
        return Ok(());
    }
    if let Some(u) = &c.username {
        f.write_str(u)?;
    }
    if c.password.is_some() {
        f.write_str(":***")?;
    }
    f.write_str("@")
}

fn fmt_nodes(f: &mut fmt::Formatter<'_>, nodes: &[HostPort]) -> fmt::Result {
    for (i, n) in nodes.iter().enumerate() {
        if i > 0 {
            f.write_str(",")?;
        }
        write!(f, "{n}")?;
    }
    Ok(())
}

impl fmt::Display for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreUrl::Memory => f.write_str("memory"),
            StoreUrl::Redis {
                tls,
                credentials,
                node,
                db,
            } => {
                f.write_str(if *tls { "rediss://" } else { "redis://" })?;
                fmt_credentials(f, credentials)?;
                write!(f, "{node}/{db}")
            }
            StoreUrl::Cluster { credentials, nodes } => {
                f.write_str("redis+cluster://")?;
                fmt_credentials(f, credentials)?;
                fmt_nodes(f, nodes)
            }
            StoreUrl::Sentinel {
                credentials,
                nodes,
                master,
            } => {
                f.write_str("redis+sentinel://")?;
                fmt_credentials(f, credentials)?;
                fmt_nodes(f, nodes)?;
                write!(f, "/{master}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hp(host: &str, port: u16) -> HostPort {
        HostPort {
            host: host.to_owned(),
            port,
        }
    }

    fn parse(s: &str) -> StoreUrl {
        s.parse().unwrap_or_else(|e| panic!("{s:?}: {e}"))
    }

    #[test]
    fn parses_every_form() {
        assert_eq!(parse("memory"), StoreUrl::Memory);
        assert_eq!(
            parse("redis://127.0.0.1:6379"),
            StoreUrl::Redis {
                tls: false,
                credentials: Credentials::default(),
                node: hp("127.0.0.1", 6379),
                db: 0
            }
        );
        assert_eq!(
            parse("rediss://user:p%40ss@cache:6380/3"),
            StoreUrl::Redis {
                tls: true,
                credentials: Credentials {
                    username: Some("user".to_owned()),
                    password: Some("p@ss".to_owned())
                },
                node: hp("cache", 6380),
                db: 3
            }
        );
        assert_eq!(
            parse("redis://:secret@[::1]"),
            StoreUrl::Redis {
                tls: false,
                credentials: Credentials {
                    username: None,
                    password: Some("secret".to_owned())
                },
                node: hp("::1", 6379),
                db: 0
            }
        );
        assert_eq!(
            parse("redis+cluster://a:7000,b:7001,c"),
            StoreUrl::Cluster {
                credentials: Credentials::default(),
                nodes: vec![hp("a", 7000), hp("b", 7001), hp("c", 6379)]
            }
        );
        assert_eq!(
            parse("redis+sentinel://s1:26379,s2/mymaster"),
            StoreUrl::Sentinel {
                credentials: Credentials::default(),
                nodes: vec![hp("s1", 26379), hp("s2", 26379)],
                master: "mymaster".to_owned()
            }
        );
    }

    #[test]
    fn display_redacts_password() {
        assert_eq!(
            parse("rediss://user:hunter2@cache:6380/3").to_string(),
            "rediss://user:***@cache:6380/3"
        );
        assert_eq!(
            parse("redis+sentinel://:pw@s1:1,[::1]:2/m").to_string(),
            "redis+sentinel://:***@s1:1,[::1]:2/m"
        );
        let err = "redis://u:hunter2@h:0"
            .parse::<StoreUrl>()
            .expect_err("port 0");
        assert!(!err.contains("hunter2"), "{err}");
    }

    /// A password with `/`, `?`, `#` or `@` unencoded (a base64 one) is
    /// still the password: the URL parses, and neither its display nor
    /// any error, a URL without `://` included, shows a piece of it.
    #[test]
    fn a_password_that_breaks_url_syntax_is_parsed_and_never_shown() {
        for (url, password, shown) in [
            (
                "redis://:abc/DEF+ghSECRET=@redis:6379",
                "abc/DEF+ghSECRET=",
                "redis://:***@redis:6379/0",
            ),
            (
                "redis://user:ab?c#d@SECRET@h:1/2",
                "ab?c#d@SECRET",
                "redis://user:***@h:1/2",
            ),
            (
                "redis+sentinel://:x/y/SECRET@s1,s2/mymaster",
                "x/y/SECRET",
                "redis+sentinel://:***@s1:26379,s2:26379/mymaster",
            ),
        ] {
            let parsed = parse(url);
            assert_eq!(
                parsed.credentials().and_then(|c| c.password.as_deref()),
                Some(password),
                "{url}"
            );
            assert_eq!(parsed.to_string(), shown, "{url}");
        }
        for bad in [
            "redis://:abc/SECRET@redis:0",
            "redis://user:ab/SECRET@h:x",
            "redis://:ab/SECRET@",
            "redis:/:SECRET@h:1",
            "redis//user:SECRET@h:1",
            "redis://:a/SECRET@h:1/db?x=1",
            "bogus://u:a/SECRET@h",
        ] {
            let err = bad.parse::<StoreUrl>().expect_err(bad);
            assert!(!err.contains("SECRET"), "{bad}: {err}");
        }
    }

    #[test]
    fn rejects_bad_urls() {
        for (bad, why) in [
            ("", "is not valid"),
            ("Memory", "is not valid"),
            ("memory://", "unknown scheme \"memory\""),
            ("http://h:1", "unknown scheme \"http\""),
            ("redis://", "missing host"),
            ("redis://:6379", "missing host"),
            ("redis://h:0", "port \"0\""),
            ("redis://h:65536", "port \"65536\""),
            ("redis://h:x", "port \"x\""),
            ("redis://h:1/x", "database \"x\""),
            ("redis://h:1/-1", "database \"-1\""),
            ("redis://h:1,i:2", "names one server"),
            ("redis://h:1?db=2", "query strings"),
            ("redis://h h:1", "contains ' '"),
            ("redis://[::1:6379", "without \"]\""),
            ("redis://[zz]:1", "not an IPv6 address"),
            ("redis://@h:1", "empty user:password"),
            ("redis://u:%zz@h:1", "percent-encoding"),
            // two hex digits, not a signed number: `%+5` is no escape
            ("redis://u:%+5@h:1", "percent-encoding"),
            ("redis+cluster://a:1/0", "takes no path"),
            ("redis+cluster://a:1,,b:2", "missing host"),
            ("redis+sentinel://a:1", "must end with /master-name"),
            ("redis+sentinel://a:1/", "must end with /master-name"),
            ("redis+sentinel://a:1/m/x", "contains '/'"),
        ] {
            let err = bad.parse::<StoreUrl>().expect_err(bad);
            assert!(err.contains(why), "{bad:?}: {err}");
        }
    }
}
