//! The environment as the reference reads it ([`Env`]: a snapshot, typed
//! getters in its value syntax, refusals naming the variable), and the
//! tables of what tollgate does with each of its variables: [`READ`]
//! (honoured, or refused for a value tollgate cannot honour) and
//! [`IGNORED`] (logged in one line at start when set). docs/ratelimit-env.md
//! is the same tables in prose.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

use super::value;

/// Why the entry will not start: the variable and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The variable (or variables, `A with B`) at fault.
    pub variable: String,
    /// Why it cannot be honoured.
    pub why: String,
}

impl Refusal {
    /// A refusal of `variable` for `why`.
    pub fn new(variable: impl Into<String>, why: impl Into<String>) -> Self {
        Self {
            variable: variable.into(),
            why: why.into(),
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.variable, self.why)
    }
}

impl std::error::Error for Refusal {}

/// The variables the entry reads: each is honoured, or refused for a
/// value tollgate cannot honour (docs/ratelimit-env.md says which).
pub const READ: &[&str] = &[
    // listeners and logging
    "HOST",
    "PORT",
    "DEBUG_HOST",
    "DEBUG_PORT",
    "GRPC_HOST",
    "GRPC_PORT",
    "GRPC_UDS",
    "GRPC_SERVER_USE_TLS",
    "GRPC_SERVER_TLS_CERT",
    "GRPC_SERVER_TLS_KEY",
    "GRPC_CLIENT_TLS_CACERT",
    "GRPC_CLIENT_TLS_SAN",
    "LOG_LEVEL",
    "LOG_FORMAT",
    // config source
    "CONFIG_TYPE",
    "FORCE_START_WITHOUT_INITIAL_CONFIG",
    "CONFIG_GRPC_XDS_NODE_ID",
    "CONFIG_GRPC_XDS_NODE_METADATA",
    "CONFIG_GRPC_XDS_SERVER_URL",
    "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
    "CONFIG_GRPC_XDS_SERVER_USE_TLS",
    "CONFIG_GRPC_XDS_CLIENT_TLS_CERT",
    "CONFIG_GRPC_XDS_CLIENT_TLS_KEY",
    "CONFIG_GRPC_XDS_SERVER_TLS_CACERT",
    "CONFIG_GRPC_XDS_SERVER_TLS_SAN",
    "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL",
    "XDS_CLIENT_BACKOFF_MAX_INTERVAL",
    "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES",
    "RUNTIME_ROOT",
    "RUNTIME_SUBDIRECTORY",
    "RUNTIME_APPDIRECTORY",
    "RUNTIME_IGNOREDOTFILES",
    "RUNTIME_WATCH_ROOT",
    "MERGE_DOMAIN_CONFIG",
    "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED",
    // stats
    "USE_STATSD",
    "USE_DOG_STATSD",
    "USE_PROMETHEUS",
    "PROMETHEUS_ADDR",
    "PROMETHEUS_PATH",
    // limiting
    "BACKEND_TYPE",
    "NEAR_LIMIT_RATIO",
    "CACHE_KEY_PREFIX",
    "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT",
    "LIMIT_RESPONSE_HEADERS_ENABLED",
    "LIMIT_LIMIT_HEADER",
    "LIMIT_REMAINING_HEADER",
    "LIMIT_RESET_HEADER",
    "SHADOW_MODE",
    "QUOTA_MODE",
    "RESPONSE_DYNAMIC_METADATA",
    // redis
    "REDIS_SOCKET_TYPE",
    "REDIS_TYPE",
    "REDIS_URL",
    "REDIS_AUTH",
    "REDIS_SENTINEL_AUTH",
    "REDIS_TLS",
    "REDIS_TLS_CLIENT_CERT",
    "REDIS_TLS_CLIENT_KEY",
    "REDIS_TLS_CACERT",
    "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION",
    "REDIS_TIMEOUT",
    "REDIS_POOL_ON_EMPTY_BEHAVIOR",
    "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION",
    "REDIS_PERSECOND",
    // tracing
    "TRACING_ENABLED",
    "TRACING_SERVICE_NAME",
    "TRACING_SERVICE_NAMESPACE",
    "TRACING_SERVICE_INSTANCE_ID",
    "TRACING_EXPORTER_PROTOCOL",
    "TRACING_SAMPLING_RATE",
];

/// The variables the entry ignores, with why: each one set is named in
/// one log line at start. Tuning of the reference's own machinery, or
/// settings that change no answer.
pub const IGNORED: &[(&str, &str)] = &[
    (
        "GRPC_SERVER_TLS_CA_CERT",
        "the reference reads no such variable (Envoy Gateway sets it)",
    ),
    ("GRPC_MAX_CONNECTION_AGE", "connections are not aged"),
    ("GRPC_MAX_CONNECTION_AGE_GRACE", "connections are not aged"),
    (
        "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
        "no effect in the reference either",
    ),
    (
        "XDS_CLIENT_BACKOFF_RANDOM_FACTOR",
        "tollgate's own backoff jitter",
    ),
    ("XDS_CLIENT_BACKOFF_JITTER", "tollgate's own backoff jitter"),
    ("STATSD_HOST", "no statsd sink"),
    ("STATSD_PORT", "no statsd sink"),
    ("USE_DOG_STATSD_MOGRIFIERS", "no statsd sink"),
    (
        "PROMETHEUS_MAPPER_YAML",
        "the reference's names are built in",
    ),
    (
        "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS",
        "the reference's names are built in",
    ),
    ("EXTRA_TAGS", "no statsd scopes"),
    ("STATS_FLUSH_INTERVAL", "metrics are current at each scrape"),
    ("DISABLE_STATS", "metrics cost nothing unless scraped"),
    (
        "EXPIRATION_JITTER_MAX_SECONDS",
        "tollgate's keys expire with their window",
    ),
    (
        "LOCAL_CACHE_SIZE_IN_BYTES",
        "a cache of over-limit keys changes no answer",
    ),
    ("REDIS_POOL_SIZE", "one multiplexed connection"),
    ("REDIS_PIPELINE_WINDOW", "pipelining is automatic"),
    ("REDIS_PIPELINE_LIMIT", "no effect in the reference either"),
    (
        "REDIS_CLUSTER_PIPELINE_PARALLELISM",
        "pipelining is automatic",
    ),
    (
        "REDIS_STARTUP_INITIAL_INTERVAL",
        "tollgate starts without Redis and reconnects",
    ),
    (
        "REDIS_STARTUP_MAX_INTERVAL",
        "tollgate starts without Redis and reconnects",
    ),
    (
        "REDIS_STARTUP_MAX_ELAPSED_TIME",
        "tollgate starts without Redis and reconnects",
    ),
    ("REDIS_PERSECOND_SOCKET_TYPE", "REDIS_PERSECOND is false"),
    ("REDIS_PERSECOND_TYPE", "REDIS_PERSECOND is false"),
    ("REDIS_PERSECOND_URL", "REDIS_PERSECOND is false"),
    ("REDIS_PERSECOND_POOL_SIZE", "REDIS_PERSECOND is false"),
    ("REDIS_PERSECOND_AUTH", "REDIS_PERSECOND is false"),
    ("REDIS_PERSECOND_TLS", "REDIS_PERSECOND is false"),
    ("REDIS_PERSECOND_SENTINEL_AUTH", "REDIS_PERSECOND is false"),
    (
        "REDIS_PERSECOND_PIPELINE_WINDOW",
        "REDIS_PERSECOND is false",
    ),
    ("REDIS_PERSECOND_PIPELINE_LIMIT", "REDIS_PERSECOND is false"),
    (
        "REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM",
        "REDIS_PERSECOND is false",
    ),
    ("REDIS_PERSECOND_TIMEOUT", "REDIS_PERSECOND is false"),
    (
        "REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR",
        "REDIS_PERSECOND is false",
    ),
    ("MEMCACHE_HOST_PORT", "BACKEND_TYPE is redis"),
    ("MEMCACHE_MAX_IDLE_CONNS", "BACKEND_TYPE is redis"),
    ("MEMCACHE_SRV", "BACKEND_TYPE is redis"),
    ("MEMCACHE_SRV_REFRESH", "BACKEND_TYPE is redis"),
    ("MEMCACHE_TLS", "BACKEND_TYPE is redis"),
    ("MEMCACHE_TLS_CLIENT_CERT", "BACKEND_TYPE is redis"),
    ("MEMCACHE_TLS_CLIENT_KEY", "BACKEND_TYPE is redis"),
    ("MEMCACHE_TLS_CACERT", "BACKEND_TYPE is redis"),
    (
        "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION",
        "BACKEND_TYPE is redis",
    ),
];

/// A snapshot of the environment, read with the reference's value
/// syntax. Remembers which variables were asked for (a test checks the
/// mapping reads exactly [`READ`]).
#[derive(Debug, Default)]
pub struct Env {
    vars: BTreeMap<String, String>,
    not_utf8: BTreeSet<String>,
    asked: RefCell<BTreeSet<String>>,
}

impl Env {
    /// The process's environment now.
    #[must_use]
    pub fn from_process() -> Self {
        let mut env = Env::default();
        for (name, value) in std::env::vars_os() {
            let Ok(name) = name.into_string() else {
                continue;
            };
            match value.into_string() {
                Ok(v) => {
                    env.vars.insert(name, v);
                }
                Err(_) => {
                    env.not_utf8.insert(name);
                }
            }
        }
        env
    }

    /// An environment of exactly `pairs` (tests).
    #[must_use]
    pub fn from_pairs(pairs: &[(&str, &str)]) -> Self {
        Env {
            vars: pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            ..Env::default()
        }
    }

    /// The variables asked for so far.
    #[must_use]
    pub fn asked(&self) -> BTreeSet<String> {
        self.asked.borrow().clone()
    }

    /// The [`IGNORED`] variables that are set, with why each is ignored.
    #[must_use]
    pub fn ignored_set(&self) -> Vec<(&'static str, &'static str)> {
        IGNORED
            .iter()
            .filter(|(name, _)| self.vars.contains_key(*name) || self.not_utf8.contains(*name))
            .copied()
            .collect()
    }

    /// The raw value of `name`, if set.
    ///
    /// # Errors
    /// A value that is not UTF-8.
    pub fn get(&self, name: &str) -> Result<Option<&str>, Refusal> {
        self.asked.borrow_mut().insert(name.to_owned());
        if self.not_utf8.contains(name) {
            return Err(Refusal::new(name, "the value is not UTF-8"));
        }
        Ok(self.vars.get(name).map(String::as_str))
    }

    /// `name`'s value, or `default` when unset (as `envconfig`: a value
    /// set empty stays empty).
    ///
    /// # Errors
    /// A value that is not UTF-8.
    pub fn string(&self, name: &str, default: &str) -> Result<String, Refusal> {
        Ok(self.get(name)?.unwrap_or(default).to_owned())
    }

    /// `name` parsed by `parse`, or `default` when unset.
    fn typed<T>(
        &self,
        name: &str,
        default: T,
        parse: impl Fn(&str) -> Result<T, String>,
    ) -> Result<T, Refusal> {
        match self.get(name)? {
            None => Ok(default),
            Some(v) => parse(v).map_err(|why| Refusal::new(name, why)),
        }
    }

    /// A boolean (`strconv.ParseBool`).
    ///
    /// # Errors
    /// A value that does not parse (the reference panics on it).
    pub fn bool(&self, name: &str, default: bool) -> Result<bool, Refusal> {
        self.typed(name, default, value::parse_bool)
    }

    /// A duration (`time.ParseDuration`); `None` when unset.
    ///
    /// # Errors
    /// A value that does not parse.
    pub fn duration(&self, name: &str) -> Result<Option<Duration>, Refusal> {
        self.typed(name, None, |v| value::parse_duration(v).map(Some))
    }

    /// An integer (`strconv.ParseInt(s, 0, 64)`).
    ///
    /// # Errors
    /// A value that does not parse.
    pub fn int(&self, name: &str, default: i64) -> Result<i64, Refusal> {
        self.typed(name, default, value::parse_int)
    }

    /// A float (`strconv.ParseFloat`).
    ///
    /// # Errors
    /// A value that does not parse.
    pub fn float(&self, name: &str, default: f64) -> Result<f64, Refusal> {
        self.typed(name, default, value::parse_float)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_variable_is_in_one_table_once() {
        let mut seen = BTreeSet::new();
        for name in READ.iter().chain(IGNORED.iter().map(|(n, _)| n)) {
            assert!(seen.insert(*name), "{name} twice");
        }
    }

    #[test]
    fn typed_values_refuse_naming_the_variable() {
        let env = Env::from_pairs(&[("A", "yes"), ("B", "10"), ("C", ""), ("D", "0x10")]);
        let err = env.bool("A", false).expect_err("yes");
        assert_eq!(err.variable, "A");
        assert!(
            err.to_string().starts_with("A: \"yes\" is not a boolean"),
            "{err}"
        );
        assert!(env.duration("B").is_err());
        // set empty is not unset: Go's parsers refuse it
        assert!(env.bool("C", true).is_err());
        assert_eq!(env.string("C", "x"), Ok(String::new()));
        assert_eq!(env.int("D", 0), Ok(16));
        assert_eq!(env.bool("UNSET", true), Ok(true));
        assert_eq!(env.ignored_set(), vec![]);
        let env = Env::from_pairs(&[("GRPC_SERVER_TLS_CA_CERT", "/certs/ca.crt")]);
        assert_eq!(env.ignored_set()[0].0, "GRPC_SERVER_TLS_CA_CERT");
    }
}
