//! `tollgate validate`: check a config file without serving.

use std::fmt;
use std::fmt::Write as _;
use std::path::PathBuf;

use crate::cli::ValidateArgs;
use crate::config::{Config, ConfigErrors, format_duration};

/// Why `validate` failed: the config's problems and/or Envoy config files,
/// which are not supported yet.
#[derive(Debug)]
pub struct ValidateError {
    /// The config file as named on the command line.
    pub file: String,
    /// The config's problems, if any.
    pub config: Option<ConfigErrors>,
    /// `--envoy-config` files given (not supported yet).
    pub envoy_configs: Vec<PathBuf>,
}

impl fmt::Display for ValidateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut count = 0;
        if let Some(errors) = &self.config {
            writeln!(f, "{errors}")?;
            count += errors.errors.len();
        }
        for path in &self.envoy_configs {
            writeln!(
                f,
                "{}: --envoy-config: Envoy rate limit configs are not supported yet",
                path.display()
            )?;
            count += 1;
        }
        let s = if count == 1 { "" } else { "s" };
        write!(f, "{}: invalid, {count} problem{s}", self.file)
    }
}

impl std::error::Error for ValidateError {}

/// Validates the config named in `args` and returns it.
///
/// # Errors
/// Every problem in the config, and any `--envoy-config` given.
pub fn run(args: &ValidateArgs) -> Result<Config, ValidateError> {
    let loaded = Config::load(&args.config);
    let (config, errors) = match loaded {
        Ok(c) => (Some(c), None),
        Err(e) => (None, Some(e)),
    };
    match config {
        Some(config) if args.envoy_config.is_empty() => Ok(config),
        _ => Err(ValidateError {
            file: args.config.display().to_string(),
            config: errors,
            envoy_configs: args.envoy_config.clone(),
        }),
    }
}

/// A short human summary of a valid config: store and one line per rule.
#[must_use]
pub fn summary(config: &Config, file: &str) -> String {
    let mut out = String::new();
    let store = &config.store;
    let n = config.rules.len();
    let s = if n == 1 { "" } else { "s" };
    let _ = writeln!(out, "{file}: OK, {n} rule{s}");
    let _ = writeln!(
        out,
        "store: {} (timeout {}, on_error {}, prefix {}, max_keys {})",
        store.url,
        format_duration(store.timeout),
        store.on_error,
        store.prefix,
        store.max_keys
    );
    let mut fleet = Vec::new();
    if store.replicas != 1 {
        fleet.push(format!(
            "replicas {} until the first heartbeat",
            store.replicas
        ));
    }
    if store.heartbeat != crate::config::DEFAULT_HEARTBEAT {
        fleet.push(format!(
            "heartbeat every {}",
            format_duration(store.heartbeat)
        ));
    }
    if !fleet.is_empty() {
        let _ = writeln!(out, "store: {}", fleet.join(", "));
    }
    let http = &config.http;
    if http.listen.is_some() || http.legacy_headers {
        let mut parts = Vec::new();
        if let Some(listen) = http.listen {
            parts.push(format!("listen {listen}"));
        }
        if http.legacy_headers {
            parts.push("legacy_headers".to_owned());
        }
        let _ = writeln!(out, "http: {}", parts.join(", "));
    }
    let proxy = &config.proxy;
    let defaults = crate::config::ProxyConfig::default();
    let mut parts = Vec::new();
    if let Some(listen) = proxy.listen {
        parts.push(format!("listen {listen}"));
    }
    if let Some(upstream) = &proxy.upstream {
        parts.push(format!("upstream {upstream}"));
    }
    if !proxy.trusted_proxies.is_empty() {
        let list: Vec<String> = proxy
            .trusted_proxies
            .iter()
            .map(ToString::to_string)
            .collect();
        parts.push(format!("trusted_proxies {}", list.join(", ")));
    }
    if proxy.ipv6_prefix != defaults.ipv6_prefix {
        parts.push(format!("ipv6_prefix {}", proxy.ipv6_prefix));
    }
    if proxy.on_missing_key != defaults.on_missing_key {
        parts.push(format!("on_missing_key {}", proxy.on_missing_key));
    }
    if proxy.connect_timeout != defaults.connect_timeout {
        parts.push(format!(
            "connect_timeout {}",
            format_duration(proxy.connect_timeout)
        ));
    }
    if proxy.response_timeout != defaults.response_timeout {
        parts.push(format!(
            "response_timeout {}",
            format_duration(proxy.response_timeout)
        ));
    }
    if proxy.append_forwarded_for {
        parts.push("append_forwarded_for".to_owned());
    }
    if !parts.is_empty() {
        let _ = writeln!(out, "proxy: {}", parts.join(", "));
    }
    for rc in &config.rules {
        let r = &rc.rule;
        let _ = write!(
            out,
            "rule {}: {} {} per {}",
            r.name(),
            r.algorithm(),
            r.limit(),
            format_duration(r.period())
        );
        if r.algorithm().has_burst() {
            let _ = write!(out, ", burst {}", r.burst());
        }
        if let Some(key) = &rc.key {
            let _ = write!(out, ", key {key}");
        }
        let _ = writeln!(out, ", on_error {}", config.on_error_for(rc));
    }
    out
}
