//! Checking a config file field by field into a [`Config`]: every problem
//! found in one pass, each with its line and field.

use std::net::SocketAddr;
use std::ops::Range;
use std::path::Path;
use std::time::Duration;

use toml::Spanned;
use toml::de::{DeTable, DeValue};

use crate::cidr::Cidr;
use crate::config::upstream::Upstream;

use super::model::*;
use super::syntax;
use crate::config::file::{ConfigError, ConfigErrors};

impl Config {
    /// Reads and validates the config file at `path`. Errors name the file
    /// as `path` displays.
    ///
    /// # Errors
    /// Every problem found, or one if the file cannot be read.
    pub fn load(path: &Path) -> Result<Self, ConfigErrors> {
        Self::load_with(path, false)
    }

    /// [`Config::load`]; with `rules_optional` (Envoy files bring the
    /// limits: `serve --grpc --envoy-config`, `validate --envoy-config`)
    /// a file without `[[rules]]` (only `[store]`, say) is valid.
    ///
    /// # Errors
    /// As [`Config::load`].
    pub fn load_with(path: &Path, rules_optional: bool) -> Result<Self, ConfigErrors> {
        let file = path.display().to_string();
        let one = |line, message| ConfigErrors {
            errors: vec![ConfigError {
                file: file.clone(),
                line,
                field: None,
                message,
            }],
        };
        let bytes = crate::config::file::read(path).map_err(|e| one(None, e))?;
        let text = String::from_utf8(bytes).map_err(|e| {
            let valid = &e.as_bytes()[..e.utf8_error().valid_up_to()];
            let line = valid.iter().filter(|&&b| b == b'\n').count() + 1;
            one(Some(line), "the file is not valid UTF-8".to_owned())
        })?;
        Self::parse_with(&text, &file, rules_optional)
    }

    /// Validates config text; errors name the file as `file`.
    ///
    /// # Errors
    /// Every problem found, in line order. When the TOML itself does not
    /// parse, only the syntax errors are reported.
    pub fn parse(source: &str, file: &str) -> Result<Self, ConfigErrors> {
        Self::parse_with(source, file, false)
    }

    /// [`Config::parse`], with `rules_optional` as for [`Config::load_with`].
    ///
    /// # Errors
    /// As [`Config::parse`].
    pub fn parse_with(
        source: &str,
        file: &str,
        rules_optional: bool,
    ) -> Result<Self, ConfigErrors> {
        let mut checker = Checker::new(source, file);
        checker.rules_optional = rules_optional;
        if let Some(checked) = checker.by_rule(source) {
            return checked;
        }
        Self::parse_whole(source, file, rules_optional)
    }

    /// [`Config::parse_with`] on the whole document at once.
    pub(super) fn parse_whole(
        source: &str,
        file: &str,
        rules_optional: bool,
    ) -> Result<Self, ConfigErrors> {
        let mut checker = Checker::new(source, file);
        checker.rules_optional = rules_optional;
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
}

const ROOT_FIELDS: &[&str] = &[
    "store", "rules", "http", "proxy", "envoy", "metrics", "admin", "ops", "tracing", "rlqs",
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
    "upstream_tls",
    "listen_tls",
    "request_body_limit",
];

/// The largest `[proxy] request_body_limit`: 64 MiB, held per request.
pub(super) const MAX_REQUEST_BODY_LIMIT: usize = 64 << 20;

pub(super) type Value<'i> = Spanned<DeValue<'i>>;

/// Walks the spanned document, collecting problems.
pub(super) struct Checker<'a> {
    file: &'a str,
    line_starts: Vec<usize>,
    pub(super) errors: Vec<ConfigError>,
    /// Envoy files bring the limits: the file may have no `[[rules]]`.
    pub(super) rules_optional: bool,
    /// Where the document being checked starts in the file: spans are
    /// its own (a rule's chunk, `chunked.rs`).
    pub(super) base: usize,
    /// The rules' `key` extractors by text, parsed once each.
    pub(super) keys: std::collections::HashMap<String, crate::key::KeyExtractor>,
}

pub(super) fn join(path: &str, key: &str) -> String {
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
    pub(super) fn new(source: &str, file: &'a str) -> Self {
        let line_starts = std::iter::once(0)
            .chain(source.match_indices('\n').map(|(i, _)| i + 1))
            .collect();
        Self {
            file,
            line_starts,
            errors: Vec::new(),
            rules_optional: false,
            base: 0,
            keys: std::collections::HashMap::new(),
        }
    }

    pub(super) fn line(&self, offset: usize) -> usize {
        let offset = offset + self.base;
        self.line_starts
            .partition_point(|&start| start <= offset)
            .max(1)
    }

    pub(super) fn error(
        &mut self,
        span: &Range<usize>,
        field: impl Into<String>,
        message: impl Into<String>,
    ) {
        let line = self.line(span.start);
        self.errors.push(ConfigError {
            file: self.file.to_owned(),
            line: Some(line),
            field: Some(field.into()),
            message: message.into(),
        });
    }

    pub(super) fn finish(mut self) -> ConfigErrors {
        self.errors.sort_by_key(|e| e.line.unwrap_or(0));
        ConfigErrors {
            errors: self.errors,
        }
    }

    pub(super) fn unknown_fields(&mut self, table: &DeTable<'_>, path: &str, allowed: &[&str]) {
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
    pub(super) fn string<'t>(
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
    pub(super) fn positive(
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

    pub(super) fn wrong_type(&mut self, value: &Value<'_>, field: &str, expected: &str) {
        self.error(
            &value.span(),
            field,
            format!("expected {expected}, found {}", value.get_ref().type_str()),
        );
    }

    pub(super) fn required(
        &mut self,
        table: &DeTable<'_>,
        header: &Range<usize>,
        path: &str,
        key: &str,
    ) {
        if !table.contains_key(key) {
            self.error(header, join(path, key), "missing required field");
        }
    }

    fn root(&mut self, root: &DeTable<'_>) -> Option<Config> {
        // xDS brings the limits (docs/xds.md): the file may have no rules.
        let xds = root
            .get("envoy")
            .and_then(|e| e.get_ref().as_table())
            .is_some_and(|e| e.contains_key("xds"));
        self.rules_optional |= xds;
        let rules = self.rules(root.get("rules"));
        self.root_with(root, rules)
    }

    /// The config of `root`'s sections, with `rules` checked apart.
    pub(super) fn root_with(
        &mut self,
        root: &DeTable<'_>,
        rules: Option<Vec<RuleConfig>>,
    ) -> Option<Config> {
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
        let envoy_settings = match root.get("envoy") {
            None => Some(EnvoySettings::default()),
            Some(value) => match value.get_ref() {
                DeValue::Table(t) => self.envoy(t),
                _ => {
                    self.wrong_type(value, "envoy", "a table ([envoy])");
                    None
                }
            },
        };
        let metrics = match root.get("metrics") {
            None => Some(MetricsConfig::default()),
            Some(value) => match value.get_ref() {
                DeValue::Table(t) => self.metrics(t),
                _ => {
                    self.wrong_type(value, "metrics", "a table ([metrics])");
                    None
                }
            },
        };
        let admin = match root.get("admin") {
            None => Some(AdminConfig::default()),
            Some(value) => match value.get_ref() {
                DeValue::Table(t) => self.admin(t),
                _ => {
                    self.wrong_type(value, "admin", "a table ([admin])");
                    None
                }
            },
        };
        let ops = match root.get("ops") {
            None => Some(OpsConfig::default()),
            Some(value) => match value.get_ref() {
                DeValue::Table(t) => self.ops(t),
                _ => {
                    self.wrong_type(value, "ops", "a table ([ops])");
                    None
                }
            },
        };
        let tracing = match root.get("tracing") {
            None => Some(TracingConfig::default()),
            Some(value) => match value.get_ref() {
                DeValue::Table(t) => self.tracing(t),
                _ => {
                    self.wrong_type(value, "tracing", "a table ([tracing])");
                    None
                }
            },
        };
        let rlqs = match root.get("rlqs") {
            None => Some(None),
            Some(value) => match value.get_ref() {
                DeValue::Table(t) => self.rlqs(t, rules.as_deref()).map(Some),
                _ => {
                    self.wrong_type(value, "rlqs", "a table ([rlqs])");
                    None
                }
            },
        };
        Some(Config {
            store: store?,
            rules: rules?,
            http: http?,
            proxy: proxy?,
            envoy_settings: envoy_settings?,
            metrics: metrics?,
            admin: admin?,
            ops: ops?,
            tracing: tracing?,
            rlqs: rlqs?,
        })
    }

    /// The value of `key` in `table` as a boolean; reports a wrong type.
    pub(super) fn boolean(&mut self, table: &DeTable<'_>, path: &str, key: &str) -> Option<bool> {
        let value = table.get(key)?;
        if let Some(b) = value.get_ref().as_bool() {
            Some(b)
        } else {
            self.wrong_type(value, &join(path, key), "a boolean (true or false)");
            None
        }
    }

    /// The value of `key` in `table` as a duration of at least 1 ms.
    pub(super) fn duration(
        &mut self,
        table: &DeTable<'_>,
        path: &str,
        key: &str,
    ) -> Option<Duration> {
        let (s, span) = self.string(table, path, key)?;
        match tollgate::time::parse_duration(s) {
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
    pub(super) fn socket_addr(
        &mut self,
        table: &DeTable<'_>,
        path: &str,
        key: &str,
    ) -> Option<SocketAddr> {
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
        for (key, what) in [
            ("upstream_tls", "[proxy.upstream_tls]"),
            ("listen_tls", "[proxy.listen_tls]"),
        ] {
            let Some(value) = t.get(key) else { continue };
            match value.get_ref() {
                DeValue::Table(tls) if key == "upstream_tls" => {
                    if let Some(tls) = self.upstream_tls(tls) {
                        proxy.upstream_tls = tls;
                    }
                }
                DeValue::Table(tls) => proxy.listen_tls = self.listen_tls(tls),
                _ => self.wrong_type(value, &join(path, key), &format!("a table ({what})")),
            }
        }
        if let Some((n, span)) = self.positive(t, path, "request_body_limit") {
            match usize::try_from(n) {
                Ok(n) if n <= MAX_REQUEST_BODY_LIMIT => proxy.request_body_limit = n,
                _ => self.error(
                    &span,
                    "proxy.request_body_limit",
                    format!(
                        "request_body_limit is at most {MAX_REQUEST_BODY_LIMIT} bytes (64 MiB), \
                         got {n}: each request in flight may hold this much"
                    ),
                ),
            }
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
