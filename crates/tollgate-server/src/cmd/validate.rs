//! `tollgate validate`: check a config file without serving.

use std::fmt;
use std::fmt::Write as _;

use crate::cli::ValidateArgs;
use crate::config::upstream::Upstream;
use crate::config::{Config, ConfigError, ConfigErrors, format_duration};
use crate::doors::Door;
use crate::doors::envoy::limits::EnvoyLimits;
use crate::store::{PASSWORD_ENV, with_credentials};
use crate::store_url::StoreUrl;
use crate::terminal::Escaped;

/// Why `validate` failed: the config's problems and the Envoy config
/// files' problems.
#[derive(Debug)]
pub struct ValidateError {
    /// The file the summary line names: the config file as named on the
    /// command line, or the first Envoy file at fault when only those are.
    pub file: String,
    /// The config's problems, if any.
    pub config: Option<ConfigErrors>,
    /// The `--envoy-config` files' problems, if any.
    pub envoy: Option<ConfigErrors>,
}

impl fmt::Display for ValidateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut count = 0;
        for errors in [&self.config, &self.envoy].into_iter().flatten() {
            writeln!(f, "{errors}")?;
            count += errors.errors.len();
        }
        let s = if count == 1 { "" } else { "s" };
        write!(f, "{}: invalid, {count} problem{s}", Escaped(&self.file))
    }
}

impl std::error::Error for ValidateError {}

/// Validates the config named in `args`, and its `--envoy-config` files,
/// and returns the config and the Envoy limits.
///
/// # Errors
/// Every problem in the config and in each Envoy config file.
pub fn run(args: &ValidateArgs) -> Result<(Config, EnvoyLimits), ValidateError> {
    let loaded = match &args.config {
        Some(path) => Config::load_with(path, !args.envoy_config.is_empty()),
        None => Ok(Config::without_rules()),
    };
    let taken: Vec<&str> = match &loaded {
        Ok(c) => c.rules.iter().map(|r| r.rule.name()).collect(),
        Err(_) => Vec::new(),
    };
    let envoy = if args.envoy_config.is_empty() {
        Ok(EnvoyLimits::default())
    } else {
        let merge = args.envoy_merge_domains
            || loaded
                .as_ref()
                .is_ok_and(|c| c.envoy_settings.merge_domains);
        EnvoyLimits::load_with(&args.envoy_config, &taken, merge)
    };
    let loaded = loaded
        .and_then(|config| with_flags(config, args))
        .and_then(|config| with_store_access(config, args));
    match (loaded, envoy) {
        (Ok(config), Ok(limits)) => Ok((config, limits)),
        (config, envoy) => {
            let config = config.err();
            let envoy = envoy.err();
            // The summary names the file at fault: the TOML when it is,
            // else the first Envoy file with a problem.
            let file = match (&config, &envoy) {
                (None, Some(e)) => e.errors.first().map(|e| e.file.clone()),
                _ => None,
            }
            .unwrap_or_else(|| files_named(args));
            Err(ValidateError {
                file,
                config,
                envoy,
            })
        }
    }
}

/// `config` with `--store` and `--upstream` (or their variables,
/// `TOLLGATE_STORE` and `TOLLGATE_UPSTREAM`) applied as `serve` applies
/// them, held to `serve`'s rule that a
/// reverse proxy (`[proxy] listen`) needs an upstream, so that what
/// `validate` accepts `serve` and a reload accept too.
fn with_flags(mut config: Config, args: &ValidateArgs) -> Result<Config, ConfigErrors> {
    let file = args
        .config
        .as_ref()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let problem = |field: &str, message: String| ConfigErrors {
        errors: vec![ConfigError {
            file: file.clone(),
            line: None,
            field: Some(field.to_owned()),
            message,
        }],
    };
    if let Some(url) = &args.store {
        config.store.url = url.parse::<StoreUrl>().map_err(|e| problem("--store", e))?;
    }
    if let Some(url) = &args.upstream {
        config.proxy.upstream = Some(
            url.parse::<Upstream>()
                .map_err(|e| problem("--upstream", e.to_string()))?,
        );
    }
    if config.envoy_settings.xds.is_some() && !args.envoy_config.is_empty() {
        return Err(problem(
            "envoy.xds",
            crate::config::FILES_AND_XDS.to_owned(),
        ));
    }
    if config.proxy.listen.is_some() {
        Door::Proxy
            .ready_in(&config)
            .map_err(|e| problem("proxy.upstream", e))?;
    }
    Ok(config)
}

/// `config` held to what `serve` checks when it opens the store: the
/// password from one place only, the environment's
/// (`TOLLGATE_REDIS_PASSWORD`) included, and `[store]` access settings
/// only for a store that takes them. So `validate` fails where `serve`
/// would, in the same environment.
fn with_store_access(config: Config, args: &ValidateArgs) -> Result<Config, ConfigErrors> {
    match with_credentials(
        &config.store.url,
        &config.store,
        std::env::var_os(PASSWORD_ENV),
    ) {
        Ok(_) => Ok(config),
        Err(message) => Err(ConfigErrors {
            errors: vec![ConfigError {
                file: args
                    .config
                    .as_ref()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default(),
                line: None,
                field: Some("store".to_owned()),
                message,
            }],
        }),
    }
}

/// How the store is reached beyond its URL: where the password comes from
/// (never what it is), the user, the TLS files and name.
fn store_access(store: &crate::config::StoreConfig) -> Vec<String> {
    let mut parts = Vec::new();
    if let Some(user) = &store.username {
        parts.push(format!("user {user}"));
    }
    if let Some(password) = &store.password {
        parts.push(format!("password from {}", password.source()));
    } else if store.url.credentials().is_some() && std::env::var_os(PASSWORD_ENV).is_some() {
        parts.push(format!("password from {PASSWORD_ENV}"));
    }
    if let Some(tls) = &store.tls {
        let mut named = Vec::new();
        for (what, file) in [
            ("ca", &tls.ca_file),
            ("client certificate", &tls.cert_file),
            ("client key", &tls.key_file),
        ] {
            if let Some(file) = file {
                named.push(format!("{what} {}", file.display()));
            }
        }
        if let Some(name) = &tls.server_name {
            named.push(format!("server_name {name}"));
        }
        if named.is_empty() {
            named.push("the system's CA roots".to_owned());
        }
        parts.push(format!("tls: {}", named.join(", ")));
    }
    parts
}

/// The files `validate` checked, as its summary line names them: the
/// config file, else the Envoy files.
#[must_use]
pub fn files_named(args: &ValidateArgs) -> String {
    match &args.config {
        Some(path) => path.display().to_string(),
        None => args
            .envoy_config
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
    }
}

/// A short human summary of a valid config and its Envoy limits: store
/// and one line per rule, with the files' own text [`Escaped`].
#[must_use]
pub fn summary(config: &Config, envoy: &EnvoyLimits, file: &str) -> String {
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
    let access = store_access(store);
    if !access.is_empty() {
        let _ = writeln!(out, "store: {}", access.join(", "));
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
    if let Some(rlqs) = &config.rlqs {
        let keys = rlqs
            .key_entries
            .as_ref()
            .map_or_else(|| "every other entry".to_owned(), |k| k.join(", "));
        let _ = writeln!(
            out,
            "rlqs: served on --grpc; rule from entry \"{}\", key from {keys}, unmatched {}, \
             assignments live {}, idle buckets abandoned after {}, at most {} streams",
            Escaped(&rlqs.rule_entry),
            rlqs.unmatched,
            format_duration(rlqs.assignment_ttl),
            format_duration(rlqs.abandon_after),
            rlqs.max_streams
        );
        for (domain, d) in &rlqs.domains {
            let _ = writeln!(
                out,
                "rlqs: domain \"{}\" counts on rule {}",
                Escaped(domain),
                Escaped(&d.rule)
            );
        }
    }
    let ops = &config.ops;
    if ops.listen.is_some() || ops.readiness != crate::config::Readiness::default() {
        let listen = ops.listen.map(|l| format!("listen {l}, "));
        let _ = writeln!(
            out,
            "ops: {}readiness {}",
            listen.unwrap_or_default(),
            ops.readiness.as_str()
        );
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
        if let Some(cost) = &rc.cost {
            let _ = match cost.request_estimate() {
                Some(from) => write!(
                    out,
                    ", cost {} (estimate {from}, default {})",
                    cost.source(),
                    cost.estimate()
                ),
                None => write!(
                    out,
                    ", cost {} (estimate {})",
                    cost.source(),
                    cost.estimate()
                ),
            };
        }
        let _ = writeln!(out, ", on_error {}", config.on_error_for(rc));
    }
    push_envoy(&mut out, envoy);
    escaped(&out)
}

/// The summary of Envoy files checked without a config file: their
/// domains and limits.
#[must_use]
pub fn envoy_summary(envoy: &EnvoyLimits, files: &str) -> String {
    let mut out = String::new();
    let n = envoy.limits().count();
    let d = envoy.domains().len();
    let _ = writeln!(
        out,
        "{files}: OK, {n} Envoy limit{} in {d} domain{}",
        if n == 1 { "" } else { "s" },
        if d == 1 { "" } else { "s" }
    );
    push_envoy(&mut out, envoy);
    escaped(&out)
}

/// Names, keys and values come from the files: escaped line by line.
fn escaped(out: &str) -> String {
    out.lines().fold(String::new(), |mut shown, line| {
        let _ = writeln!(shown, "{}", Escaped(line));
        shown
    })
}

/// One line per Envoy domain, then per limit.
fn push_envoy(out: &mut String, envoy: &EnvoyLimits) {
    let rules = envoy.rules();
    for domain in envoy.domains() {
        let _ = writeln!(out, "envoy domain {domain}");
    }
    for limit in envoy.limits() {
        let _ = write!(out, "envoy limit {}: ", limit.path);
        match (limit.unit, limit.rule.and_then(|i| rules.get(i))) {
            (None, _) => {
                let _ = write!(out, "unlimited");
            }
            (Some(unit), Some(rule)) => {
                let _ = write!(
                    out,
                    "{} per {} ({} {})",
                    limit.requests_per_unit,
                    unit.as_str(),
                    rule.algorithm(),
                    rule.name()
                );
            }
            (Some(unit), None) => {
                let _ = write!(out, "0 per {} (every request over)", unit.as_str());
            }
        }
        if !limit.name.is_empty() {
            let _ = write!(out, ", name {}", limit.name);
        }
        if !limit.replaces.is_empty() {
            let _ = write!(out, ", replaces {}", limit.replaces.join(", "));
        }
        if limit.charge {
            let _ = write!(out, ", charge");
        }
        if limit.shadow_mode {
            let _ = write!(out, ", shadow_mode");
        }
        let _ = writeln!(out);
    }
}
