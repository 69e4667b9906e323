//! The TOML config file (CONTRACT.md, "Config file").
//!
//! [`Config::parse`] reads the file into a spanned TOML document and checks
//! it field by field, so one pass reports **every** problem, each with its
//! line and field (`rules[1].limit`: rules are numbered from 0 in file
//! order). Rules are built with [`tollgate::RuleSpec::build`], so the
//! library's own bounds apply. Unknown fields are errors everywhere.
//!
//! ```
//! use tollgate_server::config::Config;
//!
//! let config = Config::parse(
//!     r#"
//!     [[rules]]
//!     name = "per_user"
//!     algorithm = "gcra"
//!     limit = 100
//!     period = "1s"
//!     burst = 200
//!     "#,
//!     "inline.toml",
//! )
//! .unwrap();
//! assert_eq!(config.rules[0].rule.capacity(), 200);
//!
//! let errors = Config::parse("[[rules]]\nname = \"x\"\nlimit = 0\n", "bad.toml").unwrap_err();
//! assert_eq!(
//!     errors.to_string(),
//!     "bad.toml:1: rules[0].algorithm: missing required field\n\
//!      bad.toml:1: rules[0].period: missing required field\n\
//!      bad.toml:3: rules[0].limit: limit must be at least 1",
//! );
//! ```

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::ops::Range;
use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use tollgate::{Algorithm, Rule, RuleSpec};
use toml::Spanned;
use toml::de::{DeTable, DeValue};

use crate::cidr::Cidr;
use crate::envoy::limits::EnvoyLimits;
use crate::key::KeyExtractor;
use crate::proxy::upstream::Upstream;
use crate::store_url::StoreUrl;

mod syntax;

/// Default `[store] url`.
pub const DEFAULT_STORE_URL: &str = "memory";
/// Default `[store] timeout`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(50);
/// Default `[store] heartbeat`.
pub const DEFAULT_HEARTBEAT: Duration = tollgate::resilient::DEFAULT_HEARTBEAT;
/// Default `[store] prefix`.
pub const DEFAULT_PREFIX: &str = "tollgate";
/// The longest `[store] prefix` accepted, in bytes.
pub const MAX_PREFIX_LEN: usize = 64;
/// Where the HTTP API listens when no front door is named anywhere.
pub const DEFAULT_HTTP_LISTEN: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 8080);
/// Default `[proxy] ipv6_prefix`: an IPv6 client is one /64, the block a
/// single subscriber is usually given.
pub const DEFAULT_IPV6_PREFIX: u8 = 64;
/// Default `[proxy] connect_timeout`.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// Default `[proxy] response_timeout`.
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(60);
/// Default `[proxy] send_timeout`.
pub const DEFAULT_SEND_TIMEOUT: Duration = Duration::from_secs(30);

/// What a check answers when the store fails (`on_error`): the library's
/// policy, [`tollgate::OnError`].
pub use tollgate::OnError;

/// A config file's problems, as `validate` reports them; defined in
/// [`crate::config_file`], which the Envoy loader shares.
pub use crate::config_file::{ConfigError, ConfigErrors};

/// `[store]`: where state is kept and what happens when it fails.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreConfig {
    /// `url`, default `memory`.
    pub url: StoreUrl,
    /// `timeout`: the longest any check waits on the store (default 50ms).
    pub timeout: Duration,
    /// `on_error`: the failure policy for rules that set none (default allow).
    pub on_error: OnError,
    /// `prefix`: the Redis key prefix (default `tollgate`).
    pub prefix: String,
    /// `max_keys`: the memory store's cap on keys held (default
    /// [`tollgate::store::memory::DEFAULT_MAX_KEYS`]).
    pub max_keys: usize,
    /// `replicas`: how many replicas are assumed to share the store until
    /// the first heartbeat tells (default 1). With `on_error = "local"`
    /// each replica falls back to an in-process limiter with every rule's
    /// quota divided by the live replicas.
    pub replicas: u64,
    /// `heartbeat`: how often each replica tells Redis it is alive and
    /// learns how many are (default 1s; at least 10ms). A replica counts
    /// as live for three intervals after its last heartbeat.
    pub heartbeat: Duration,
    /// `hybrid = true`: the hybrid store over the Redis `url`, with
    /// `replicas`, `max_keys`, `hybrid_batch` and `hybrid_lease` (default
    /// 1s); `None` when off. See `docs/hybrid.md`.
    pub hybrid: Option<tollgate::store::hybrid::HybridOptions>,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            url: StoreUrl::Memory,
            timeout: DEFAULT_TIMEOUT,
            on_error: OnError::Allow,
            prefix: DEFAULT_PREFIX.to_owned(),
            max_keys: tollgate::store::memory::DEFAULT_MAX_KEYS,
            replicas: 1,
            heartbeat: DEFAULT_HEARTBEAT,
            hybrid: None,
        }
    }
}

/// One `[[rules]]` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleConfig {
    /// The validated rule (name, algorithm, limit, period, burst).
    pub rule: Rule,
    /// `key`: how the reverse proxy keys this rule; `None` when not set.
    pub key: Option<KeyExtractor>,
    /// `on_error` for this rule; `None` means the store's.
    pub on_error: Option<OnError>,
    /// The line of the rule's `[[rules]]` header (1-based).
    pub line: usize,
}

/// `[http]`: settings of the HTTP API.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HttpConfig {
    /// `listen`: the API's address (`--http` overrides it).
    pub listen: Option<SocketAddr>,
    /// `legacy_headers`: also send `X-RateLimit-Limit/Remaining/Reset`
    /// (on the API's answers and the proxy's responses).
    pub legacy_headers: bool,
}

/// What the proxy does with a request that lacks a header a rule keys on
/// (`[proxy] on_missing_key`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum OnMissingKey {
    /// Key the rule by the empty value: every such request shares one
    /// bucket. The default (CONTRACT.md: never an error).
    #[default]
    Empty,
    /// The rule does not apply to the request.
    Skip,
    /// Answer 400 (problem+json) naming the header.
    Reject,
}

impl OnMissingKey {
    /// The name used in config files.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            OnMissingKey::Empty => "empty",
            OnMissingKey::Skip => "skip",
            OnMissingKey::Reject => "reject",
        }
    }
}

impl fmt::Display for OnMissingKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for OnMissingKey {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "empty" => Ok(OnMissingKey::Empty),
            "skip" => Ok(OnMissingKey::Skip),
            "reject" => Ok(OnMissingKey::Reject),
            _ => Err(format!(
                "unknown on_missing_key {s:?}; expected empty, skip or reject"
            )),
        }
    }
}

/// `[proxy]`: settings of the reverse proxy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyConfig {
    /// `listen`: the proxy's address (`--proxy` overrides it).
    pub listen: Option<SocketAddr>,
    /// `upstream`: where admitted requests go (`--upstream` overrides it).
    pub upstream: Option<Upstream>,
    /// `trusted_proxies`: peers whose `X-Forwarded-For` is believed.
    pub trusted_proxies: Vec<Cidr>,
    /// `ipv6_prefix`: IPv6 client addresses are keyed by their first this
    /// many bits (default 64), so one subscriber cannot rotate addresses
    /// inside its block to get fresh buckets.
    pub ipv6_prefix: u8,
    /// `on_missing_key`: a request lacking a header a rule keys on.
    pub on_missing_key: OnMissingKey,
    /// `connect_timeout`: the longest wait for a connection to the upstream
    /// before answering 502 (default 1s).
    pub connect_timeout: Duration,
    /// `response_timeout`: the longest wait for the upstream's response
    /// headers before answering 504 (default 60s).
    pub response_timeout: Duration,
    /// `send_timeout`: a client that takes nothing of a response being
    /// sent for a whole period of this length has its connection, and the
    /// upstream's, closed (checked four times a period, so within 1.25
    /// periods; default 30s).
    pub send_timeout: Duration,
    /// `append_forwarded_for`: append the peer's address to
    /// `X-Forwarded-For` on forwarded requests (default false: headers are
    /// forwarded unchanged).
    pub append_forwarded_for: bool,
}

impl Default for ProxyConfig {
    fn default() -> Self {
        Self {
            listen: None,
            upstream: None,
            trusted_proxies: Vec::new(),
            ipv6_prefix: DEFAULT_IPV6_PREFIX,
            on_missing_key: OnMissingKey::Empty,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
            send_timeout: DEFAULT_SEND_TIMEOUT,
            append_forwarded_for: false,
        }
    }
}

/// A validated config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `[store]`.
    pub store: StoreConfig,
    /// `[[rules]]`, in file order; at least one, names unique.
    pub rules: Vec<RuleConfig>,
    /// `[http]`.
    pub http: HttpConfig,
    /// `[proxy]`.
    pub proxy: ProxyConfig,
    /// Not in the TOML file: the envoyproxy/ratelimit YAML files of
    /// `--envoy-config` (empty without them).
    pub envoy: EnvoyConfig,
}

/// The Envoy rate limit configs, loaded once and shared.
#[derive(Debug, Clone, Default)]
pub struct EnvoyConfig(pub Arc<EnvoyLimits>);

impl PartialEq for EnvoyConfig {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
            || (self.0.domains() == other.0.domains()
                && self.0.rules() == other.0.rules()
                && self.0.limits().eq(other.0.limits()))
    }
}

impl Eq for EnvoyConfig {}

impl Config {
    /// Reads and validates the config file at `path`. Errors name the file
    /// as `path` displays.
    ///
    /// # Errors
    /// Every problem found, or one if the file cannot be read.
    pub fn load(path: &Path) -> Result<Self, ConfigErrors> {
        let file = path.display().to_string();
        let one = |line, message| ConfigErrors {
            errors: vec![ConfigError {
                file: file.clone(),
                line,
                field: None,
                message,
            }],
        };
        let bytes = crate::config_file::read(path).map_err(|e| one(None, e))?;
        let text = String::from_utf8(bytes).map_err(|e| {
            let valid = &e.as_bytes()[..e.utf8_error().valid_up_to()];
            let line = valid.iter().filter(|&&b| b == b'\n').count() + 1;
            one(Some(line), "the file is not valid UTF-8".to_owned())
        })?;
        Self::parse(&text, &file)
    }

    /// Validates config text; errors name the file as `file`.
    ///
    /// # Errors
    /// Every problem found, in line order. When the TOML itself does not
    /// parse, only the syntax errors are reported.
    pub fn parse(source: &str, file: &str) -> Result<Self, ConfigErrors> {
        let mut checker = Checker::new(source, file);
        let (doc, syntax) = DeTable::parse_recoverable(source);
        if !syntax.is_empty() {
            let errors = syntax::syntax_errors(source, file, syntax, |at| checker.line(at));
            checker.errors.extend(errors);
            return Err(checker.finish());
        }
        let config = checker.root(doc.get_ref());
        match config {
            Some(config) if checker.errors.is_empty() => Ok(config),
            _ => Err(checker.finish()),
        }
    }

    /// The rule named `name`.
    #[must_use]
    pub fn rule(&self, name: &str) -> Option<&RuleConfig> {
        self.rules.iter().find(|r| r.rule.name() == name)
    }

    /// The failure policy of `rule`: its own `on_error`, else the store's.
    #[must_use]
    pub fn on_error_for(&self, rule: &RuleConfig) -> OnError {
        rule.on_error.unwrap_or(self.store.on_error)
    }
}

/// Formats a duration in the largest config unit that divides it exactly
/// (`1s`, `250ms`, `90s`, `1m`, `1d`); sub-millisecond parts as `µs`.
#[must_use]
pub fn format_duration(d: Duration) -> String {
    let us = tollgate::duration_to_micros(d);
    let (ms, sub_ms) = (us / 1_000, us % 1_000);
    if sub_ms != 0 {
        return format!("{us}us");
    }
    for (unit, size) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
    ] {
        let (count, rest) = (ms / size, ms % size);
        if count != 0 && rest == 0 {
            return format!("{count}{unit}");
        }
    }
    format!("{ms}ms")
}

const ROOT_FIELDS: &[&str] = &["store", "rules", "http", "proxy"];
const STORE_FIELDS: &[&str] = &[
    "url",
    "timeout",
    "on_error",
    "prefix",
    "max_keys",
    "replicas",
    "heartbeat",
    "hybrid",
    "hybrid_batch",
    "hybrid_lease",
];
const RULE_FIELDS: &[&str] = &[
    "name",
    "algorithm",
    "limit",
    "period",
    "burst",
    "key",
    "on_error",
];
const HTTP_FIELDS: &[&str] = &["listen", "legacy_headers"];
const PROXY_FIELDS: &[&str] = &[
    "listen",
    "upstream",
    "trusted_proxies",
    "ipv6_prefix",
    "on_missing_key",
    "connect_timeout",
    "response_timeout",
    "send_timeout",
    "append_forwarded_for",
];

type Value<'i> = Spanned<DeValue<'i>>;

/// Walks the spanned document, collecting problems.
struct Checker<'a> {
    file: &'a str,
    line_starts: Vec<usize>,
    errors: Vec<ConfigError>,
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

fn integer(value: &DeValue<'_>) -> Option<Result<i128, ()>> {
    value
        .as_integer()
        .map(|i| i128::from_str_radix(i.as_str(), i.radix()).map_err(|_| ()))
}

impl<'a> Checker<'a> {
    fn new(source: &str, file: &'a str) -> Self {
        let line_starts = std::iter::once(0)
            .chain(source.match_indices('\n').map(|(i, _)| i + 1))
            .collect();
        Self {
            file,
            line_starts,
            errors: Vec::new(),
        }
    }

    fn line(&self, offset: usize) -> usize {
        self.line_starts
            .partition_point(|&start| start <= offset)
            .max(1)
    }

    fn error(&mut self, span: &Range<usize>, field: impl Into<String>, message: impl Into<String>) {
        let line = self.line(span.start);
        self.errors.push(ConfigError {
            file: self.file.to_owned(),
            line: Some(line),
            field: Some(field.into()),
            message: message.into(),
        });
    }

    fn finish(mut self) -> ConfigErrors {
        self.errors.sort_by_key(|e| e.line.unwrap_or(0));
        ConfigErrors {
            errors: self.errors,
        }
    }

    fn unknown_fields(&mut self, table: &DeTable<'_>, path: &str, allowed: &[&str]) {
        for key in table.keys() {
            if !allowed.contains(&key.get_ref().as_ref()) {
                self.error(
                    &key.span(),
                    join(path, key.get_ref()),
                    format!("unknown field; expected one of {}", allowed.join(", ")),
                );
            }
        }
    }

    /// The value of `key` in `table` as a string; reports a wrong type.
    fn string<'t>(
        &mut self,
        table: &'t DeTable<'_>,
        path: &str,
        key: &str,
    ) -> Option<(&'t str, Range<usize>)> {
        let value = table.get(key)?;
        if let Some(s) = value.get_ref().as_str() {
            Some((s, value.span()))
        } else {
            self.wrong_type(value, &join(path, key), "a string");
            None
        }
    }

    /// The value of `key` in `table` as a positive integer; reports a wrong
    /// type or a value below 1 (with `min_message`).
    fn positive(
        &mut self,
        table: &DeTable<'_>,
        path: &str,
        key: &str,
    ) -> Option<(u64, Range<usize>)> {
        let value = table.get(key)?;
        let field = join(path, key);
        match integer(value.get_ref()) {
            None => {
                self.wrong_type(value, &field, "an integer");
                None
            }
            Some(Ok(n)) if n >= 1 => match u64::try_from(n) {
                Ok(n) => Some((n, value.span())),
                Err(_) => {
                    self.error(&value.span(), field, format!("{key} {n} is too large"));
                    None
                }
            },
            Some(Ok(n)) => {
                self.error(
                    &value.span(),
                    field,
                    if n == 0 {
                        format!("{key} must be at least 1")
                    } else {
                        format!("{key} must be at least 1, got {n}")
                    },
                );
                None
            }
            Some(Err(())) => {
                self.error(&value.span(), field, "integer out of range");
                None
            }
        }
    }

    fn wrong_type(&mut self, value: &Value<'_>, field: &str, expected: &str) {
        self.error(
            &value.span(),
            field,
            format!("expected {expected}, found {}", value.get_ref().type_str()),
        );
    }

    fn required(&mut self, table: &DeTable<'_>, header: &Range<usize>, path: &str, key: &str) {
        if !table.contains_key(key) {
            self.error(header, join(path, key), "missing required field");
        }
    }

    fn root(&mut self, root: &DeTable<'_>) -> Option<Config> {
        self.unknown_fields(root, "", ROOT_FIELDS);
        let store = match root.get("store") {
            None => Some(StoreConfig::default()),
            Some(value) => match value.get_ref() {
                DeValue::Table(t) => self.store(t),
                _ => {
                    self.wrong_type(value, "store", "a table ([store])");
                    None
                }
            },
        };
        let http = match root.get("http") {
            None => Some(HttpConfig::default()),
            Some(value) => match value.get_ref() {
                DeValue::Table(t) => self.http(t),
                _ => {
                    self.wrong_type(value, "http", "a table ([http])");
                    None
                }
            },
        };
        let proxy = match root.get("proxy") {
            None => Some(ProxyConfig::default()),
            Some(value) => match value.get_ref() {
                DeValue::Table(t) => self.proxy(t),
                _ => {
                    self.wrong_type(value, "proxy", "a table ([proxy])");
                    None
                }
            },
        };
        let rules = self.rules(root.get("rules"));
        Some(Config {
            store: store?,
            rules: rules?,
            http: http?,
            proxy: proxy?,
            envoy: EnvoyConfig::default(),
        })
    }

    fn store(&mut self, t: &DeTable<'_>) -> Option<StoreConfig> {
        let path = "store";
        let before = self.errors.len();
        self.unknown_fields(t, path, STORE_FIELDS);
        let mut store = StoreConfig::default();
        if let Some((s, span)) = self.string(t, path, "url") {
            match s.parse() {
                Ok(url) => store.url = url,
                Err(e) => self.error(&span, "store.url", e),
            }
        }
        if let Some((s, span)) = self.string(t, path, "timeout") {
            match tollgate::parse_duration(s) {
                Ok(d) if d.is_zero() => {
                    self.error(&span, "store.timeout", "timeout must be at least 1ms");
                }
                Ok(d) => store.timeout = d,
                Err(e) => self.error(&span, "store.timeout", e),
            }
        }
        if let Some((s, span)) = self.string(t, path, "on_error") {
            match s.parse() {
                Ok(p) => store.on_error = p,
                Err(e) => self.error(&span, "store.on_error", e),
            }
        }
        if let Some((s, span)) = self.string(t, path, "prefix") {
            match check_prefix(s) {
                Ok(()) => s.clone_into(&mut store.prefix),
                Err(e) => self.error(&span, "store.prefix", e),
            }
        }
        if let Some((n, span)) = self.positive(t, path, "max_keys") {
            match usize::try_from(n) {
                Ok(n) => store.max_keys = n,
                Err(_) => self.error(&span, "store.max_keys", "max_keys is too large"),
            }
        }
        if let Some((n, _)) = self.positive(t, path, "replicas") {
            store.replicas = n;
        }
        if let Some((s, span)) = self.string(t, path, "heartbeat") {
            match tollgate::parse_duration(s) {
                Ok(d) if d < Duration::from_millis(10) => {
                    self.error(&span, "store.heartbeat", "heartbeat must be at least 10ms");
                }
                Ok(d) => store.heartbeat = d,
                Err(e) => self.error(&span, "store.heartbeat", e),
            }
        }
        let hybrid = self.boolean(t, path, "hybrid");
        let batch = self.positive(t, path, "hybrid_batch").map(|(n, _)| n);
        let lease = self.duration(t, path, "hybrid_lease");
        let span = |k: &str| t.get(k).map(toml::Spanned::span).unwrap_or_default();
        if hybrid == Some(true) {
            if store.url.is_memory() {
                let why = "hybrid = true needs a Redis url in [store] (the hybrid store leases from Redis)";
                self.error(&span("hybrid"), "store.hybrid", why);
            }
            store.hybrid = Some(tollgate::store::hybrid::HybridOptions {
                replicas: u32::try_from(store.replicas).unwrap_or(u32::MAX),
                batch,
                lease: lease.unwrap_or(Duration::from_secs(1)),
                max_keys: store.max_keys,
            });
        } else if let Some(k) = ["hybrid_batch", "hybrid_lease"]
            .into_iter()
            .find(|k| t.contains_key(*k))
        {
            self.error(&span(k), join(path, k), format!("{k} needs hybrid = true"));
        }
        (self.errors.len() == before).then_some(store)
    }

    /// The value of `key` in `table` as a boolean; reports a wrong type.
    fn boolean(&mut self, table: &DeTable<'_>, path: &str, key: &str) -> Option<bool> {
        let value = table.get(key)?;
        if let Some(b) = value.get_ref().as_bool() {
            Some(b)
        } else {
            self.wrong_type(value, &join(path, key), "a boolean (true or false)");
            None
        }
    }

    /// The value of `key` in `table` as a duration of at least 1 ms.
    fn duration(&mut self, table: &DeTable<'_>, path: &str, key: &str) -> Option<Duration> {
        let (s, span) = self.string(table, path, key)?;
        match tollgate::parse_duration(s) {
            Ok(d) if d < Duration::from_millis(1) => {
                self.error(
                    &span,
                    join(path, key),
                    format!("{key} must be at least 1ms"),
                );
                None
            }
            Ok(d) => Some(d),
            Err(e) => {
                self.error(&span, join(path, key), e);
                None
            }
        }
    }

    /// The value of `key` in `table` as an `IP:PORT` socket address.
    fn socket_addr(&mut self, table: &DeTable<'_>, path: &str, key: &str) -> Option<SocketAddr> {
        let (s, span) = self.string(table, path, key)?;
        match parse_listen(s) {
            Ok(a) => Some(a),
            Err(e) => {
                self.error(&span, join(path, key), e);
                None
            }
        }
    }

    fn http(&mut self, t: &DeTable<'_>) -> Option<HttpConfig> {
        let path = "http";
        let before = self.errors.len();
        self.unknown_fields(t, path, HTTP_FIELDS);
        let http = HttpConfig {
            listen: self.socket_addr(t, path, "listen"),
            legacy_headers: self.boolean(t, path, "legacy_headers").unwrap_or(false),
        };
        (self.errors.len() == before).then_some(http)
    }

    fn proxy(&mut self, t: &DeTable<'_>) -> Option<ProxyConfig> {
        let path = "proxy";
        let before = self.errors.len();
        self.unknown_fields(t, path, PROXY_FIELDS);
        let mut proxy = ProxyConfig {
            listen: self.socket_addr(t, path, "listen"),
            ..ProxyConfig::default()
        };
        if let Some((s, span)) = self.string(t, path, "upstream") {
            match s.parse::<Upstream>() {
                Ok(u) => proxy.upstream = Some(u),
                Err(e) => self.error(&span, "proxy.upstream", e),
            }
        }
        if let Some((n, span)) = self.positive(t, path, "ipv6_prefix") {
            match u8::try_from(n) {
                Ok(n) if n <= 128 => proxy.ipv6_prefix = n,
                _ => self.error(
                    &span,
                    "proxy.ipv6_prefix",
                    format!("ipv6_prefix must be from 1 to 128, got {n}"),
                ),
            }
        }
        if let Some((s, span)) = self.string(t, path, "on_missing_key") {
            match s.parse() {
                Ok(p) => proxy.on_missing_key = p,
                Err(e) => self.error(&span, "proxy.on_missing_key", e),
            }
        }
        if let Some(d) = self.duration(t, path, "connect_timeout") {
            proxy.connect_timeout = d;
        }
        if let Some(d) = self.duration(t, path, "response_timeout") {
            proxy.response_timeout = d;
        }
        if let Some(d) = self.duration(t, path, "send_timeout") {
            proxy.send_timeout = d;
        }
        if let Some(b) = self.boolean(t, path, "append_forwarded_for") {
            proxy.append_forwarded_for = b;
        }
        if let Some(value) = t.get("trusted_proxies") {
            match value.get_ref() {
                DeValue::Array(items) => {
                    for (i, item) in items.iter().enumerate() {
                        let field = format!("proxy.trusted_proxies[{i}]");
                        match item.get_ref().as_str() {
                            Some(s) => match s.parse::<Cidr>() {
                                Ok(c) => proxy.trusted_proxies.push(c),
                                Err(e) => self.error(&item.span(), field, e),
                            },
                            None => self.wrong_type(item, &field, "a CIDR string"),
                        }
                    }
                }
                _ => self.wrong_type(value, "proxy.trusted_proxies", "an array of CIDR strings"),
            }
        }
        (self.errors.len() == before).then_some(proxy)
    }

    fn rules(&mut self, value: Option<&Value<'_>>) -> Option<Vec<RuleConfig>> {
        let Some(value) = value else {
            self.error(
                &(0..0),
                "rules",
                "no rules; add at least one [[rules]] table",
            );
            return None;
        };
        let DeValue::Array(items) = value.get_ref() else {
            self.wrong_type(value, "rules", "an array of tables ([[rules]])");
            return None;
        };
        if items.is_empty() {
            self.error(
                &value.span(),
                "rules",
                "no rules; add at least one [[rules]] table",
            );
            return None;
        }
        let mut rules = Vec::with_capacity(items.len());
        let mut seen: HashMap<String, (usize, usize)> = HashMap::new();
        let mut all_ok = true;
        for (i, item) in items.iter().enumerate() {
            let rule = self.rule(i, item);
            // Duplicate names are checked on every rule whose name is a
            // valid string, even when another field of it is wrong.
            let name = item
                .get_ref()
                .as_table()
                .and_then(|t| t.get("name"))
                .and_then(|v| Some((v.get_ref().as_str()?, v.span())));
            if let Some((name, span)) = name {
                if let Some(&(first, line)) = seen.get(name) {
                    self.error(
                        &span,
                        format!("rules[{i}].name"),
                        format!(
                            "rule name {name:?} is already used by rules[{first}] (line {line})"
                        ),
                    );
                    all_ok = false;
                } else {
                    let line = self.line(item.span().start);
                    seen.insert(name.to_owned(), (i, line));
                }
            }
            match rule {
                Some(r) => rules.push(r),
                None => all_ok = false,
            }
        }
        all_ok.then_some(rules)
    }

    fn rule(&mut self, index: usize, item: &Value<'_>) -> Option<RuleConfig> {
        let path = format!("rules[{index}]");
        let header = item.span();
        let DeValue::Table(t) = item.get_ref() else {
            self.wrong_type(item, &path, "a table ([[rules]])");
            return None;
        };
        let before = self.errors.len();
        self.unknown_fields(t, &path, RULE_FIELDS);
        for key in ["name", "algorithm", "limit", "period"] {
            self.required(t, &header, &path, key);
        }
        // Fields with a problem of their own; the library is not asked about
        // them again (each gets a stand-in value so the others are checked).
        let mut bad: Vec<&'static str> = Vec::new();
        let mut spans: HashMap<&'static str, Range<usize>> = HashMap::new();

        let name = self.string(t, &path, "name").map(|(s, span)| {
            spans.insert("name", span);
            s.to_owned()
        });
        if name.is_none() {
            bad.push("name");
        }
        let algorithm = match self.string(t, &path, "algorithm") {
            Some((s, span)) => match s.parse::<Algorithm>() {
                Ok(a) => Some(a),
                Err(e) => {
                    self.error(&span, format!("{path}.algorithm"), e.message);
                    None
                }
            },
            None => None,
        };
        let limit = self.positive(t, &path, "limit").map(|(n, span)| {
            spans.insert("limit", span);
            n
        });
        if limit.is_none() {
            bad.push("limit");
        }
        let period = match self.string(t, &path, "period") {
            Some((s, span)) => match tollgate::parse_duration(s) {
                Ok(d) => {
                    spans.insert("period", span);
                    Some(d)
                }
                Err(e) => {
                    self.error(&span, format!("{path}.period"), e);
                    None
                }
            },
            None => None,
        };
        if period.is_none() {
            bad.push("period");
        }
        let burst_given = t.contains_key("burst");
        let burst = self.positive(t, &path, "burst").map(|(n, span)| {
            spans.insert("burst", span);
            n
        });
        if burst_given && burst.is_none() {
            bad.push("burst");
        }
        let key = match self.string(t, &path, "key") {
            Some((s, span)) => match s.parse::<KeyExtractor>() {
                Ok(k) => Some(k),
                Err(e) => {
                    self.error(&span, format!("{path}.key"), e);
                    None
                }
            },
            None => None,
        };
        let on_error = match self.string(t, &path, "on_error") {
            Some((s, span)) => match s.parse::<OnError>() {
                Ok(p) => Some(p),
                Err(e) => {
                    self.error(&span, format!("{path}.on_error"), e);
                    None
                }
            },
            None => None,
        };

        let mut spec = RuleSpec {
            name: name.unwrap_or_else(|| "rule".to_owned()),
            // an unknown algorithm stands in as one that accepts the burst given
            algorithm: algorithm.unwrap_or(if burst_given {
                Algorithm::Gcra
            } else {
                Algorithm::FixedWindow
            }),
            limit: limit.unwrap_or(1),
            period: period.unwrap_or(Duration::from_secs(1)),
            burst,
        };
        let mut built = None;
        for _ in 0..8 {
            match spec.build() {
                Ok(rule) => {
                    built = Some(rule);
                    break;
                }
                Err(e) => {
                    if !bad.contains(&e.field) {
                        let span = spans.get(e.field).unwrap_or(&header).clone();
                        self.error(&span, format!("{path}.{}", e.field), e.message);
                        bad.push(e.field);
                    }
                    match e.field {
                        "name" => "rule".clone_into(&mut spec.name),
                        "limit" => spec.limit = 1,
                        "period" => spec.period = Duration::from_secs(1),
                        "burst" => spec.burst = None,
                        _ => break,
                    }
                }
            }
        }
        if self.errors.len() != before {
            return None;
        }
        Some(RuleConfig {
            rule: built?,
            key,
            on_error,
            line: self.line(header.start),
        })
    }
}

/// Parses a listen address, `IP:PORT` (`127.0.0.1:8080`, `[::1]:8080`) or
/// `localhost:PORT` (127.0.0.1; no name is looked up); port 0 asks the
/// system for a free one.
///
/// # Errors
/// Anything else, with an example of the expected form.
pub fn parse_listen(s: &str) -> Result<SocketAddr, String> {
    if let Some(port) = s
        .strip_prefix("localhost:")
        .and_then(|p| p.parse::<u16>().ok())
    {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    s.parse().map_err(|_| {
        format!("{s:?} is not an IP:PORT address (e.g. \"127.0.0.1:8080\" or \"[::1]:8080\")")
    })
}

fn check_prefix(prefix: &str) -> Result<(), String> {
    if prefix.is_empty() {
        return Err("prefix must not be empty".to_owned());
    }
    if prefix.len() > MAX_PREFIX_LEN {
        return Err(format!(
            "prefix is {} bytes, longer than {MAX_PREFIX_LEN}",
            prefix.len()
        ));
    }
    if let Some(c) = prefix
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '-')))
    {
        return Err(format!(
            "prefix {prefix:?} contains {c:?}; only A-Z a-z 0-9 _ . : - are allowed"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors(src: &str) -> Vec<String> {
        Config::parse(src, "t.toml")
            .expect_err("should be rejected")
            .errors
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn listen_addresses() {
        for (text, want) in [
            ("127.0.0.1:8080", "127.0.0.1:8080"),
            ("[::1]:0", "[::1]:0"),
            ("localhost:8080", "127.0.0.1:8080"),
            ("localhost:0", "127.0.0.1:0"),
        ] {
            assert_eq!(
                parse_listen(text).map(|a| a.to_string()),
                Ok(want.to_owned())
            );
        }
        for bad in [
            "localhost",
            "localhost:",
            "localhost:99999",
            "example.com:80",
            ":80",
        ] {
            let e = parse_listen(bad).expect_err(bad);
            assert!(e.contains("is not an IP:PORT"), "{bad}: {e}");
        }
    }

    #[test]
    fn defaults() {
        let c = Config::parse(
            "[[rules]]\nname='a'\nalgorithm='fixed_window'\nlimit=1\nperiod='1s'\n",
            "t.toml",
        )
        .expect("valid");
        assert_eq!(c.store, StoreConfig::default());
        assert_eq!(c.store.timeout, Duration::from_millis(50));
        assert_eq!(c.store.prefix, "tollgate");
        assert_eq!(c.proxy, ProxyConfig::default());
        assert_eq!(c.rules[0].key, None);
        assert_eq!(c.rules[0].line, 1);
        assert_eq!(c.on_error_for(&c.rules[0]), OnError::Allow);
    }

    #[test]
    fn full_config() {
        let c = Config::parse(
            r#"
[store]
url = "redis+sentinel://s1:26379,s2:26379/mymaster"
timeout = "20ms"
on_error = "deny"
prefix = "app:tg"
max_keys = 1000

[proxy]
trusted_proxies = ["10.0.0.0/8", "::1"]

[[rules]]
name = "per_user"
algorithm = "token_bucket"
limit = 10
period = "1m"
burst = 20
key = "header:X-User+method"
on_error = "local"
"#,
            "t.toml",
        )
        .expect("valid");
        assert!(matches!(c.store.url, StoreUrl::Sentinel { .. }));
        assert_eq!(c.store.timeout, Duration::from_millis(20));
        assert_eq!(c.store.on_error, OnError::Deny);
        assert_eq!(c.store.prefix, "app:tg");
        assert_eq!(c.store.max_keys, 1000);
        assert_eq!(c.proxy.trusted_proxies.len(), 2);
        let r = &c.rules[0];
        assert_eq!(r.line, 12);
        assert_eq!(r.rule.burst(), 20);
        assert_eq!(r.rule.period(), Duration::from_secs(60));
        assert_eq!(
            r.key.as_ref().map(ToString::to_string).as_deref(),
            Some("header:x-user+method")
        );
        assert_eq!(c.on_error_for(r), OnError::Local);
    }

    #[test]
    fn every_problem_with_line_and_field() {
        let got = errors(
            r#"[store]
url = "redis://h:0"
timeout = "0ms"
on_error = "maybe"
prefix = "{x}"
colour = "red"

[[rules]]
name = "a b"
algorithm = "leaky"
limit = -3
period = "1.5s"
burst = "many"
key = "cookie"

[[rules]]
name = "b"
algorithm = "fixed_window"
limit = 5
period = "1s"
burst = 0

[[rules]]
name = "b"
algorithm = "gcra"
limit = 10
period = "0ms"
on_error = 1
"#,
        );
        let want = [
            "t.toml:2: store.url: store URL \"redis://h:0\": port \"0\" must be a number from 1 to 65535",
            "t.toml:3: store.timeout: timeout must be at least 1ms",
            "t.toml:4: store.on_error: unknown on_error \"maybe\"; expected allow, deny or local",
            "t.toml:5: store.prefix: prefix \"{x}\" contains '{'; only A-Z a-z 0-9 _ . : - are allowed",
            "t.toml:6: store.colour: unknown field; expected one of url, timeout, on_error, prefix, max_keys, replicas, heartbeat, hybrid, hybrid_batch, hybrid_lease",
            "t.toml:9: rules[0].name: name \"a b\" contains ' '; only A-Z a-z 0-9 _ . - are allowed",
            "t.toml:10: rules[0].algorithm: unknown algorithm \"leaky\"; expected one of gcra, token_bucket, fixed_window, sliding_window, sliding_log",
            "t.toml:11: rules[0].limit: limit must be at least 1, got -3",
            "t.toml:12: rules[0].period: duration \"1.5s\" has unknown unit \".5s\" (use ms, s, m, h or d)",
            "t.toml:13: rules[0].burst: expected an integer, found string",
            "t.toml:14: rules[0].key: unknown key part \"cookie\"; expected client_ip, header:NAME, path, method or host",
            "t.toml:21: rules[1].burst: burst must be at least 1",
            "t.toml:24: rules[2].name: rule name \"b\" is already used by rules[1] (line 16)",
            "t.toml:27: rules[2].period: period 0ns is shorter than the minimum 1ms",
            "t.toml:28: rules[2].on_error: expected a string, found integer",
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn http_and_proxy_sections() {
        let c = Config::parse(
            r#"
[store]
replicas = 3
heartbeat = "250ms"

[http]
listen = "127.0.0.1:9090"
legacy_headers = true

[proxy]
listen = "[::1]:8081"
upstream = "http://127.0.0.1:9000/app"
ipv6_prefix = 56
on_missing_key = "skip"
connect_timeout = "250ms"
response_timeout = "2m"
send_timeout = "45s"
append_forwarded_for = true

[[rules]]
name = "a"
algorithm = "gcra"
limit = 1
period = "1s"
"#,
            "t.toml",
        )
        .expect("valid");
        assert_eq!(c.store.replicas, 3);
        assert_eq!(c.store.heartbeat, Duration::from_millis(250));
        assert_eq!(c.http.listen, Some("127.0.0.1:9090".parse().expect("addr")));
        assert!(c.http.legacy_headers);
        let p = &c.proxy;
        assert_eq!(p.listen, Some("[::1]:8081".parse().expect("addr")));
        assert_eq!(
            p.upstream.as_ref().map(ToString::to_string).as_deref(),
            Some("http://127.0.0.1:9000/app")
        );
        assert_eq!(p.ipv6_prefix, 56);
        assert_eq!(p.on_missing_key, OnMissingKey::Skip);
        assert_eq!(p.connect_timeout, Duration::from_millis(250));
        assert_eq!(p.response_timeout, Duration::from_secs(120));
        assert_eq!(p.send_timeout, Duration::from_secs(45));
        assert!(p.append_forwarded_for);
        let d = Config::parse(
            "[[rules]]\nname='a'\nalgorithm='gcra'\nlimit=1\nperiod='1s'\n",
            "t.toml",
        )
        .expect("valid");
        assert_eq!(d.http, HttpConfig::default());
        assert_eq!(d.proxy.ipv6_prefix, 64);
        assert_eq!(d.proxy.connect_timeout, Duration::from_secs(1));
        assert_eq!(d.proxy.send_timeout, Duration::from_secs(30));
    }

    #[test]
    fn http_and_proxy_problems_have_lines() {
        let got = errors(
            r#"[store]
replicas = 0
heartbeat = "5ms"

[http]
listen = "example.com:80"
legacy_headers = "yes"
port = 1

[proxy]
listen = "127.0.0.1"
upstream = "https://x"
ipv6_prefix = 129
on_missing_key = "drop"
connect_timeout = "0ms"
response_timeout = "soon"
append_forwarded_for = 1

[[rules]]
name = "a"
algorithm = "gcra"
limit = 1
period = "1s"
"#,
        );
        let want = [
            "t.toml:2: store.replicas: replicas must be at least 1",
            "t.toml:3: store.heartbeat: heartbeat must be at least 10ms",
            "t.toml:6: http.listen: \"example.com:80\" is not an IP:PORT address (e.g. \"127.0.0.1:8080\" or \"[::1]:8080\")",
            "t.toml:7: http.legacy_headers: expected a boolean (true or false), found string",
            "t.toml:8: http.port: unknown field; expected one of listen, legacy_headers",
            "t.toml:11: proxy.listen: \"127.0.0.1\" is not an IP:PORT address (e.g. \"127.0.0.1:8080\" or \"[::1]:8080\")",
            "t.toml:12: proxy.upstream: upstream \"https://x\": https upstreams are not supported yet; use http://host:port",
            "t.toml:13: proxy.ipv6_prefix: ipv6_prefix must be from 1 to 128, got 129",
            "t.toml:14: proxy.on_missing_key: unknown on_missing_key \"drop\"; expected empty, skip or reject",
            "t.toml:15: proxy.connect_timeout: connect_timeout must be at least 1ms",
            "t.toml:16: proxy.response_timeout: duration \"soon\" must start with a whole number, e.g. \"250ms\" or \"1s\"",
            "t.toml:17: proxy.append_forwarded_for: expected a boolean (true or false), found integer",
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn syntax_errors_have_lines() {
        let got = errors("[[rules]]\nname = \"a\nlimit = 1\n");
        assert_eq!(got.len(), 1, "{got:?}");
        assert!(
            got[0].starts_with("t.toml:2: TOML syntax error: "),
            "{got:?}"
        );
    }

    #[test]
    fn no_rules_and_wrong_shapes() {
        assert_eq!(
            errors(""),
            ["t.toml:1: rules: no rules; add at least one [[rules]] table"]
        );
        assert_eq!(
            errors("rules = []\n"),
            ["t.toml:1: rules: no rules; add at least one [[rules]] table"]
        );
        assert_eq!(
            errors("store = 1\nproxy = 'x'\nrules = [1]\n"),
            [
                "t.toml:1: store: expected a table ([store]), found integer",
                "t.toml:2: proxy: expected a table ([proxy]), found string",
                "t.toml:3: rules[0]: expected a table ([[rules]]), found integer",
            ]
        );
        assert_eq!(
            errors(
                "[proxy]\ntrusted_proxies = '10.0.0.0/8'\n[[rules]]\nname='a'\nalgorithm='gcra'\nlimit=1\nperiod='1s'\n"
            ),
            ["t.toml:2: proxy.trusted_proxies: expected an array of CIDR strings, found string"]
        );
    }

    #[test]
    fn burst_on_window_algorithm_and_gcra_rate() {
        assert_eq!(
            errors(
                "[[rules]]\nname='a'\nalgorithm='sliding_log'\nlimit=200000\nperiod='1s'\nburst=5\n"
            ),
            [
                "t.toml:4: rules[0].limit: sliding_log keeps one entry per admitted check; limit 200000 exceeds its maximum 100000 (use sliding_window for large limits)",
                "t.toml:6: rules[0].burst: burst applies to gcra and token_bucket only, not sliding_log",
            ]
        );
    }

    #[test]
    fn format_durations() {
        assert_eq!(format_duration(Duration::from_millis(250)), "250ms");
        assert_eq!(format_duration(Duration::from_secs(1)), "1s");
        assert_eq!(format_duration(Duration::from_secs(90)), "90s");
        assert_eq!(format_duration(Duration::from_secs(3600)), "1h");
        assert_eq!(format_duration(Duration::from_secs(86_400 * 2)), "2d");
        assert_eq!(format_duration(Duration::from_micros(1500)), "1500us");
        assert_eq!(format_duration(Duration::ZERO), "0ms");
    }
}
