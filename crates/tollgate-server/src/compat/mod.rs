//! The compatibility entry's environment (`tollgate ratelimit`, or the
//! binary run as `/bin/ratelimit`): envoyproxy/ratelimit's variables,
//! read with its value syntax, onto tollgate's [`Config`] and the
//! reference's listeners ([`Reference`]). docs/ratelimit-env.md lists
//! every variable: honoured, ignored (named in one log line at start) or
//! refused (the entry exits non-zero naming it and why).
//!
//! The folder, a file per job: `value.rs` (Go's value syntax), `env.rs`
//! (the snapshot, the tables, [`Refusal`]), `redis.rs` (`[store]`),
//! `source.rs` (`CONFIG_TYPE`: files or xDS), `settings.rs` (`[envoy]`,
//! `[metrics]`, `[tracing]`, logging, health), `listen.rs` (the
//! listeners and gRPC TLS), `tls.rs` (the gRPC port's rustls config,
//! the certificate re-read on change), `http.rs` (the answers of the
//! HTTP and debug ports), `json.rs` (`/json`'s protobuf JSON).

use crate::config::Config;

pub mod env;
pub mod http;
pub mod json;

pub mod listen;
pub mod redis;
pub mod settings;
pub mod source;
pub mod tls;

pub mod value;

pub use env::{Env, IGNORED, READ, Refusal};
pub use listen::{GrpcTls, Listen};
pub use settings::{HealthRules, Logging};
pub use source::{LimitSource, RuntimeDir};

/// What the reference's environment asks for, in tollgate's terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    /// The config: `[store]`, `[envoy]` (with `xds` under
    /// `CONFIG_TYPE=GRPC_XDS_SOTW`), `[metrics]`, `[tracing]`; no rules of
    /// its own.
    pub config: Config,
    /// Where the Envoy limits come from.
    pub source: LimitSource,
    /// The listeners.
    pub listen: Listen,
    /// The gRPC port's TLS, if on.
    pub grpc_tls: Option<GrpcTls>,
    /// Logging.
    pub logging: Logging,
    /// What `/healthcheck` waits for.
    pub health: HealthRules,
    /// The ignored variables that are set, with why each is ignored.
    pub ignored: Vec<(&'static str, &'static str)>,
    /// Values taken in part, as the reference takes them, to log.
    pub warnings: Vec<String>,
}

impl Reference {
    /// Reads `env`.
    ///
    /// # Errors
    /// The first variable that cannot be honoured, and why.
    pub fn from_env(env: &Env) -> Result<Self, Refusal> {
        let logging = settings::logging(env)?;
        let listen = listen::listen(env)?;
        let grpc_tls = listen::grpc_tls(env)?;
        let source = source::limit_source(env)?;
        let mut config = Config::without_rules();
        config.store = redis::store(env)?;
        config.envoy_settings = settings::envoy(env)?;
        if let LimitSource::Xds(xds) = &source {
            config.envoy_settings.xds = Some(xds.clone());
        }
        config.metrics = settings::metrics(env)?;
        config.tracing = settings::tracing(env)?;
        // The ops listener serves /metrics at PROMETHEUS_ADDR.
        config.ops.listen = listen.metrics;
        let mut health = settings::health(env)?;
        health.first_config = matches!(&source, LimitSource::Xds(x) if !x.start_without_config);
        Ok(Reference {
            config,
            source,
            listen,
            grpc_tls,
            logging,
            health,
            ignored: env.ignored_set(),
            warnings: source::warnings(env)?,
        })
    }

    /// The one log line naming the ignored variables that are set, if any.
    #[must_use]
    pub fn ignored_line(&self) -> Option<String> {
        if self.ignored.is_empty() {
            return None;
        }
        let names: Vec<String> = self
            .ignored
            .iter()
            .map(|(name, why)| format!("{name} ({why})"))
            .collect();
        Some(format!(
            "ignored environment variables (docs/ratelimit-env.md): {}",
            names.join(", ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Envoy Gateway's Deployment (notes §3.1, `default.yaml` with Redis
    /// and tracing), verbatim.
    pub(crate) const ENVOY_GATEWAY: &[(&str, &str)] = &[
        ("RUNTIME_ROOT", "/data"),
        ("RUNTIME_SUBDIRECTORY", "ratelimit"),
        ("RUNTIME_IGNOREDOTFILES", "true"),
        ("RUNTIME_WATCH_ROOT", "false"),
        ("LOG_LEVEL", "info"),
        ("USE_STATSD", "false"),
        ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
        ("CONFIG_GRPC_XDS_SERVER_URL", "envoy-gateway:18001"),
        ("CONFIG_GRPC_XDS_NODE_ID", "envoy-ratelimit"),
        ("GRPC_SERVER_USE_TLS", "true"),
        ("GRPC_SERVER_TLS_CERT", "/certs/tls.crt"),
        ("GRPC_SERVER_TLS_KEY", "/certs/tls.key"),
        ("GRPC_SERVER_TLS_CA_CERT", "/certs/ca.crt"),
        ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true"),
        ("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "/certs/tls.crt"),
        ("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "/certs/tls.key"),
        ("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "/certs/ca.crt"),
        ("FORCE_START_WITHOUT_INITIAL_CONFIG", "true"),
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", "redis.redis.svc:6379"),
        ("USE_PROMETHEUS", "true"),
        ("PROMETHEUS_ADDR", ":19001"),
        ("PROMETHEUS_MAPPER_YAML", "/etc/statsd-exporter/conf.yaml"),
        ("TRACING_ENABLED", "true"),
        ("TRACING_SERVICE_NAME", "envoy-ratelimit"),
        ("TRACING_SERVICE_NAMESPACE", "envoy-gateway-system"),
        ("TRACING_SERVICE_INSTANCE_ID", "envoy-ratelimit-5d4f-abcde"),
        ("TRACING_SAMPLING_RATE", "1.0"),
        (
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "http://trace-collector.envoy-gateway-system.svc.cluster.local:4318",
        ),
    ];

    #[test]
    fn envoy_gateways_environment() {
        let env = Env::from_pairs(ENVOY_GATEWAY);
        let r = Reference::from_env(&env).expect("starts");
        assert_eq!(
            r.config.store.url.to_string(),
            "redis://redis.redis.svc:6379/0"
        );
        let xds = r.config.envoy_settings.xds.as_ref().expect("xds");
        assert_eq!(xds.server, "envoy-gateway:18001");
        assert_eq!(xds.node_id, "envoy-ratelimit");
        assert!(xds.start_without_config);
        assert_eq!(
            xds.tls.as_ref().and_then(|t| t.ca_file.clone()),
            Some("/certs/ca.crt".into())
        );
        assert!(matches!(r.source, LimitSource::Xds(_)));
        assert!(
            !r.health.first_config,
            "force start: healthy before any config"
        );
        let mut without_force: Vec<(&str, &str)> = ENVOY_GATEWAY.to_vec();
        without_force.retain(|(k, _)| *k != "FORCE_START_WITHOUT_INITIAL_CONFIG");
        let waits = Reference::from_env(&Env::from_pairs(&without_force)).expect("starts");
        assert!(waits.health.first_config);
        assert!(r.config.envoy_settings.count_own_cost);
        assert!(r.config.metrics.reference_names);
        assert!(r.config.tracing.enabled);
        assert_eq!(r.config.tracing.service_name, "envoy-ratelimit");
        assert_eq!(r.listen.metrics, Some("[::]:19001".parse().expect("addr")));
        assert_eq!(r.config.ops.listen, r.listen.metrics);
        assert_eq!(r.listen.grpc, "0.0.0.0:8081".parse().expect("addr"));
        let tls = r.grpc_tls.as_ref().expect("tls");
        assert_eq!(tls.client_ca, None, "GRPC_SERVER_TLS_CA_CERT is not read");
        assert_eq!(r.logging.level, "info");
        let ignored: Vec<&str> = r.ignored.iter().map(|(n, _)| *n).collect();
        assert_eq!(
            ignored,
            ["GRPC_SERVER_TLS_CA_CERT", "PROMETHEUS_MAPPER_YAML"]
        );
        let line = r.ignored_line().expect("a line");
        assert!(
            line.contains("GRPC_SERVER_TLS_CA_CERT") && line.contains("PROMETHEUS_MAPPER_YAML")
        );
    }

    #[test]
    fn the_mapping_reads_exactly_the_read_table() {
        // Every switch on, so every branch reads what it can.
        let mut pairs: Vec<(&str, &str)> = ENVOY_GATEWAY.to_vec();
        pairs.retain(|(k, _)| *k != "GRPC_SERVER_USE_TLS");
        let env = Env::from_pairs(&pairs);
        let _ = Reference::from_env(&env);
        let mut asked = env.asked();
        // The FILE branch reads the RUNTIME_* ones.
        let files = Env::from_pairs(&[("REDIS_SOCKET_TYPE", "tcp"), ("REDIS_URL", "h:1")]);
        let _ = Reference::from_env(&files);
        asked.extend(files.asked());
        let tls = Env::from_pairs(&[
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_URL", "h:1"),
            ("REDIS_TLS", "true"),
        ]);
        let _ = Reference::from_env(&tls);
        asked.extend(tls.asked());
        let read: std::collections::BTreeSet<String> =
            READ.iter().map(|s| (*s).to_owned()).collect();
        assert_eq!(
            asked.difference(&read).collect::<Vec<_>>(),
            Vec::<&String>::new(),
            "read but not in READ"
        );
        assert_eq!(
            read.difference(&asked).collect::<Vec<_>>(),
            Vec::<&String>::new(),
            "in READ but never read"
        );
    }

    #[test]
    fn file_config_by_default_and_refusals_first_found() {
        let r = Reference::from_env(&Env::from_pairs(&[
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_URL", "127.0.0.1:6379"),
        ]))
        .expect("starts");
        assert!(matches!(r.source, LimitSource::Files(_)));
        assert!(!r.health.first_config);
        assert_eq!(r.config.envoy_settings.xds, None);
        assert_eq!(r.listen.metrics, None);
        assert_eq!(r.ignored_line(), None);
        let err = Reference::from_env(&Env::from_pairs(&[])).expect_err("unix socket");
        assert_eq!(err.variable, "REDIS_SOCKET_TYPE");
    }
}
