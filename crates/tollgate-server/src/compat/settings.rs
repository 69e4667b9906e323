//! The reference's switches onto tollgate's `[envoy]`, `[metrics]` and
//! `[tracing]`, its logging settings, and what `/healthcheck` waits for.

use super::env::{Env, Refusal};
use crate::config::{
    EnvoyHeaders, EnvoySettings, MetricsConfig, OtlpProtocol, StoreFailure, TracingConfig,
};

/// `LOG_LEVEL` and `LOG_FORMAT`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Logging {
    /// A `tracing` level: `trace`, `debug`, `info`, `warn` or `error`
    /// (logrus's `fatal` and `panic` are `error`).
    pub level: &'static str,
    /// `LOG_FORMAT=json`: one JSON object per line.
    pub json: bool,
}

/// What `/healthcheck` needs besides not draining.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HealthRules {
    /// `HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED`: at least one domain.
    pub needs_config: bool,
    /// `REDIS_HEALTH_CHECK_ACTIVE_CONNECTION`: Redis answering now, not
    /// only once since start.
    pub store_now: bool,
    /// Under xDS without `FORCE_START_WITHOUT_INITIAL_CONFIG`: the
    /// reference opens its ports only once the first config arrived;
    /// here they open at once and `/healthcheck` fails until then (the
    /// config version stays empty until the xDS client applies one).
    pub first_config: bool,
}

/// `[envoy]` from the reference's limiting switches; `count_own_cost`
/// on, as the reference counts, and `store_failure = "error"`, as the
/// reference answers a Redis error (a gRPC error, so Envoy's
/// `failure_mode_deny` decides).
///
/// # Errors
/// A value that does not parse, or
/// `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT` on.
pub fn envoy(env: &Env) -> Result<EnvoySettings, Refusal> {
    let defaults = EnvoySettings::default();
    if env.bool("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", false)? {
        return Err(Refusal::new(
            "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT",
            "not supported: a request's own hits_addend is counted as the reference counts by default",
        ));
    }
    let headers = env.bool("LIMIT_RESPONSE_HEADERS_ENABLED", false)?;
    Ok(EnvoySettings {
        merge_domains: env.bool("MERGE_DOMAIN_CONFIG", false)?,
        response_headers: if headers {
            EnvoyHeaders::Reference
        } else {
            EnvoyHeaders::None
        },
        limit_header: env.string("LIMIT_LIMIT_HEADER", &defaults.limit_header)?,
        remaining_header: env.string("LIMIT_REMAINING_HEADER", &defaults.remaining_header)?,
        reset_header: env.string("LIMIT_RESET_HEADER", &defaults.reset_header)?,
        quota_mode: env.bool("QUOTA_MODE", false)?,
        response_dynamic_metadata: env.bool("RESPONSE_DYNAMIC_METADATA", false)?,
        count_own_cost: true,
        store_failure: StoreFailure::Error,
        shadow_mode: env.bool("SHADOW_MODE", false)?,
        xds: None,
    })
}

/// `[metrics]`: `NEAR_LIMIT_RATIO`, and the reference's names on.
///
/// # Errors
/// A ratio that does not parse or is not in (0, 1].
pub fn metrics(env: &Env) -> Result<MetricsConfig, Refusal> {
    let ratio = env.float("NEAR_LIMIT_RATIO", 0.8)?;
    if !(ratio > 0.0 && ratio <= 1.0) {
        return Err(Refusal::new(
            "NEAR_LIMIT_RATIO",
            format!("{ratio} is not above 0 and at most 1"),
        ));
    }
    Ok(MetricsConfig {
        near_limit_ratio: ratio,
        reference_names: true,
        ..MetricsConfig::default()
    })
}

/// `[tracing]` from `TRACING_*` (the `OTEL_*` variables are read on the
/// common start path, docs/tracing.md). The reference's defaults: service
/// `RateLimit`, OTLP over HTTP, every root sampled.
///
/// # Errors
/// A value that does not parse; a protocol other than `http` or `grpc`.
pub fn tracing(env: &Env) -> Result<TracingConfig, Refusal> {
    let protocol = match env.string("TRACING_EXPORTER_PROTOCOL", "http")?.as_str() {
        "http" => OtlpProtocol::HttpProtobuf,
        "grpc" => OtlpProtocol::Grpc,
        other => {
            return Err(Refusal::new(
                "TRACING_EXPORTER_PROTOCOL",
                format!("{other:?} is not http or grpc"),
            ));
        }
    };
    let rate = env.float("TRACING_SAMPLING_RATE", 1.0)?;
    let mut resource = vec![(
        "service.namespace".to_owned(),
        env.string("TRACING_SERVICE_NAMESPACE", "")?,
    )];
    let instance = env.string("TRACING_SERVICE_INSTANCE_ID", "")?;
    resource.push((
        "service.instance.id".to_owned(),
        if instance.is_empty() {
            random_uuid()
        } else {
            instance
        },
    ));
    Ok(TracingConfig {
        enabled: env.bool("TRACING_ENABLED", false)?,
        endpoint: None,
        protocol,
        headers: Vec::new(),
        service_name: env.string("TRACING_SERVICE_NAME", "RateLimit")?,
        resource,
        // Go's TraceIDRatioBased: at or above 1 always, below 0 never.
        sampling_ratio: rate.clamp(0.0, 1.0),
        // Parent-based, as the reference's sampler; the export timeout
        // from OTEL_EXPORTER_OTLP_TIMEOUT, as its exporter reads it.
        ..TracingConfig::default()
    })
}

/// `LOG_LEVEL` (logrus's names, any case) and `LOG_FORMAT`.
///
/// # Errors
/// An unknown level.
pub fn logging(env: &Env) -> Result<Logging, Refusal> {
    let level = env.string("LOG_LEVEL", "WARN")?;
    let level = match level.to_ascii_lowercase().as_str() {
        "trace" => "trace",
        "debug" => "debug",
        "info" => "info",
        "warn" | "warning" => "warn",
        "error" | "fatal" | "panic" => "error",
        _ => {
            return Err(Refusal::new(
                "LOG_LEVEL",
                format!("{level:?} is not trace, debug, info, warn, error, fatal or panic"),
            ));
        }
    };
    Ok(Logging {
        level,
        // The reference: json, else text.
        json: env
            .string("LOG_FORMAT", "text")?
            .eq_ignore_ascii_case("json"),
    })
}

/// `HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED`,
/// `REDIS_HEALTH_CHECK_ACTIVE_CONNECTION`.
///
/// # Errors
/// A value that does not parse.
pub fn health(env: &Env) -> Result<HealthRules, Refusal> {
    Ok(HealthRules {
        needs_config: env.bool("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", false)?,
        store_now: env.bool("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", false)?,
        first_config: false,
    })
}

/// A version 4 UUID (the reference's default `service.instance.id`), from
/// the standard library's per-process random hasher keys.
fn random_uuid() -> String {
    use std::hash::{BuildHasher, Hasher};
    let word = || {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        );
        h.finish()
    };
    let (a, b) = (word(), word());
    let hi = (a & 0xffff_ffff_ffff_0fff) | 0x4000;
    let lo = (b & 0x3fff_ffff_ffff_ffff) | 0x8000_0000_0000_0000;
    format!(
        "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        hi >> 32,
        (hi >> 16) & 0xffff,
        hi & 0xffff,
        lo >> 48,
        lo & 0xffff_ffff_ffff
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envoy_switches() {
        let s = envoy(&Env::from_pairs(&[])).expect("defaults");
        assert_eq!(
            s,
            EnvoySettings {
                count_own_cost: true,
                store_failure: StoreFailure::Error,
                ..EnvoySettings::default()
            }
        );
        let s = envoy(&Env::from_pairs(&[
            ("LIMIT_RESPONSE_HEADERS_ENABLED", "true"),
            ("LIMIT_LIMIT_HEADER", "X-L"),
            ("LIMIT_REMAINING_HEADER", "X-R"),
            ("LIMIT_RESET_HEADER", "X-T"),
            ("MERGE_DOMAIN_CONFIG", "1"),
            ("QUOTA_MODE", "T"),
            ("RESPONSE_DYNAMIC_METADATA", "True"),
            ("SHADOW_MODE", "false"),
        ]))
        .expect("set");
        assert_eq!(s.response_headers, EnvoyHeaders::Reference);
        assert_eq!(
            (
                s.limit_header.as_str(),
                s.remaining_header.as_str(),
                s.reset_header.as_str()
            ),
            ("X-L", "X-R", "X-T")
        );
        assert!(s.merge_domains && s.quota_mode && s.response_dynamic_metadata && s.count_own_cost);
        assert!(!s.shadow_mode);
        let s = envoy(&Env::from_pairs(&[("SHADOW_MODE", "true")])).expect("shadow");
        assert!(s.shadow_mode);
        let err = envoy(&Env::from_pairs(&[("SHADOW_MODE", "on")])).expect_err("on");
        assert_eq!(err.variable, "SHADOW_MODE");
        let variable = "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT";
        let err = envoy(&Env::from_pairs(&[(variable, "true")])).expect_err(variable);
        assert_eq!(err.variable, variable);
    }

    #[test]
    fn near_limit_ratio_and_reference_names() {
        let m = metrics(&Env::from_pairs(&[])).expect("defaults");
        assert!(m.reference_names);
        assert!((m.near_limit_ratio - 0.8).abs() < 1e-9);
        let m = metrics(&Env::from_pairs(&[("NEAR_LIMIT_RATIO", "0.5")])).expect("set");
        assert!((m.near_limit_ratio - 0.5).abs() < 1e-9);
        for bad in ["0", "1.5", "x"] {
            let err = metrics(&Env::from_pairs(&[("NEAR_LIMIT_RATIO", bad)])).expect_err(bad);
            assert_eq!(err.variable, "NEAR_LIMIT_RATIO");
        }
    }

    #[test]
    fn tracing_as_envoy_gateway_sets_it() {
        let t = tracing(&Env::from_pairs(&[
            ("TRACING_ENABLED", "true"),
            ("TRACING_SERVICE_NAME", "envoy-ratelimit"),
            ("TRACING_SERVICE_NAMESPACE", "envoy-gateway-system"),
            ("TRACING_SERVICE_INSTANCE_ID", "pod-1"),
            ("TRACING_SAMPLING_RATE", "0.1"),
        ]))
        .expect("tracing");
        assert!(t.enabled);
        assert_eq!(t.service_name, "envoy-ratelimit");
        assert_eq!(t.protocol, OtlpProtocol::HttpProtobuf);
        assert_eq!(
            t.resource,
            vec![
                (
                    "service.namespace".to_owned(),
                    "envoy-gateway-system".to_owned()
                ),
                ("service.instance.id".to_owned(), "pod-1".to_owned())
            ]
        );
        assert!((t.sampling_ratio - 0.1).abs() < 1e-9);
        let t = tracing(&Env::from_pairs(&[
            ("TRACING_EXPORTER_PROTOCOL", "grpc"),
            ("TRACING_SAMPLING_RATE", "7"),
        ]))
        .expect("tracing");
        assert!(!t.enabled);
        assert_eq!(t.service_name, "RateLimit");
        assert_eq!(t.protocol, OtlpProtocol::Grpc);
        assert!((t.sampling_ratio - 1.0).abs() < 1e-9);
        let id = &t.resource[1].1;
        assert_eq!(id.len(), 36, "{id}");
        assert_eq!(&id[14..15], "4", "{id}");
        for (k, v) in [
            ("TRACING_EXPORTER_PROTOCOL", "zipkin"),
            ("TRACING_SAMPLING_RATE", "half"),
            ("TRACING_ENABLED", "on"),
        ] {
            let err = tracing(&Env::from_pairs(&[(k, v)])).expect_err(k);
            assert_eq!(err.variable, k);
        }
    }

    #[test]
    fn log_levels_as_logrus_names_them() {
        let level = |v: &str| logging(&Env::from_pairs(&[("LOG_LEVEL", v)])).map(|l| l.level);
        assert_eq!(level("info"), Ok("info"));
        assert_eq!(level("INFO"), Ok("info"));
        assert_eq!(level("Fatal"), Ok("error"));
        assert_eq!(logging(&Env::from_pairs(&[])).map(|l| l.level), Ok("warn"));
        assert_eq!(level("verbose").expect_err("bad").variable, "LOG_LEVEL");
        let json = |v: &str| logging(&Env::from_pairs(&[("LOG_FORMAT", v)])).map(|l| l.json);
        assert_eq!(json("json"), Ok(true));
        assert_eq!(json("text"), Ok(false));
        assert_eq!(json("logfmt"), Ok(false));
    }

    #[test]
    fn health_rules() {
        assert_eq!(health(&Env::from_pairs(&[])), Ok(HealthRules::default()));
        let h = health(&Env::from_pairs(&[
            ("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "true"),
            ("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "true"),
        ]))
        .expect("health");
        assert!(h.needs_config && h.store_now);
    }
}
