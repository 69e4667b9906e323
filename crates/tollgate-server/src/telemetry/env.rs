//! The standard `OTEL_*` variables laid over `[tracing]` (docs/tracing.md,
//! "Environment"). A variable set wins over the file's field, as the
//! doors' `TOLLGATE_*` variables win over their `listen`; an empty one
//! counts as unset (the OpenTelemetry specification's rule). A value that
//! does not parse stops the start, naming the variable: a typo in a
//! sampler or an endpoint must not leave a service silently untraced.

use std::time::Duration;

use crate::config::tracing::{check_endpoint, check_ratio, parse_pairs, parse_protocol};
use crate::config::{OtlpProtocol, TracingConfig};

/// The variables read, for the docs and the refusal messages.
pub const VARIABLES: &[&str] = &[
    "OTEL_SDK_DISABLED",
    "OTEL_TRACES_EXPORTER",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
    "OTEL_EXPORTER_OTLP_TIMEOUT",
    "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
    "OTEL_EXPORTER_OTLP_INSECURE",
    "OTEL_EXPORTER_OTLP_TRACES_INSECURE",
    "OTEL_EXPORTER_OTLP_COMPRESSION",
    "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION",
    "OTEL_EXPORTER_OTLP_CERTIFICATE",
    "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE",
    "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
    "OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE",
    "OTEL_EXPORTER_OTLP_CLIENT_KEY",
    "OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY",
    "OTEL_SERVICE_NAME",
    "OTEL_RESOURCE_ATTRIBUTES",
    "OTEL_TRACES_SAMPLER",
    "OTEL_TRACES_SAMPLER_ARG",
];

/// The TLS files: traces variable, general one, `[tracing]` field.
const TLS_VARIABLES: &[(&str, &str, &str)] = &[
    (
        "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE",
        "OTEL_EXPORTER_OTLP_CERTIFICATE",
        "ca_file",
    ),
    (
        "OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE",
        "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
        "cert_file",
    ),
    (
        "OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY",
        "OTEL_EXPORTER_OTLP_CLIENT_KEY",
        "key_file",
    ),
];

/// Lays the process environment over `tracing`.
///
/// # Errors
/// As [`apply_with`].
pub fn apply(tracing: &mut TracingConfig) -> Result<(), String> {
    apply_with(tracing, |name| std::env::var(name).ok())
}

/// Lays the variables `var` gives over `tracing`: the traces-only
/// variable (`OTEL_EXPORTER_OTLP_TRACES_*`) before the general one.
///
/// # Errors
/// A value that does not parse, a TLS file that cannot be read, or a
/// value asking for what tollgate cannot do (compression, a sampler
/// other than the ratio ones), with the variable's name.
pub fn apply_with(
    tracing: &mut TracingConfig,
    var: impl Fn(&str) -> Option<String>,
) -> Result<(), String> {
    let get = |name: &str| var(name).filter(|v| !v.trim().is_empty());
    let either = |traces: &'static str, general: &'static str| {
        get(traces)
            .map(|v| (traces, v))
            .or_else(|| get(general).map(|v| (general, v)))
    };
    let bad = |name: &str, value: &str, why: String| format!("{name}={value:?}: {why}");
    for &(traces, general, field) in TLS_VARIABLES {
        if let Some((name, v)) = either(traces, general) {
            let file =
                crate::config::tracing::check_tls_file(field, std::path::Path::new(v.trim()))
                    .map_err(|why| bad(name, &v, why))?;
            match field {
                "ca_file" => tracing.ca_file = Some(file),
                "cert_file" => tracing.cert_file = Some(file),
                _ => tracing.key_file = Some(file),
            }
        }
    }
    if tracing.cert_file.is_some() != tracing.key_file.is_some() {
        return Err(
            "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE and OTEL_EXPORTER_OTLP_CLIENT_KEY \
                    (or cert_file and key_file) go together"
                .into(),
        );
    }
    if let Some((name, v)) = either(
        "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION",
        "OTEL_EXPORTER_OTLP_COMPRESSION",
    ) && v.trim() != "none"
    {
        return Err(bad(
            name,
            &v,
            "only none is supported (spans are sent uncompressed)".into(),
        ));
    }
    if let Some((name, v)) = either(
        "OTEL_EXPORTER_OTLP_TRACES_INSECURE",
        "OTEL_EXPORTER_OTLP_INSECURE",
    ) {
        // Only a gRPC endpoint without a scheme reads it (the
        // specification's rule): the scheme says it otherwise.
        tracing.insecure = boolean(&v).map_err(|why| bad(name, &v, why))?;
    }
    if let Some(v) = get("OTEL_TRACES_EXPORTER") {
        match v.trim() {
            "otlp" => tracing.enabled = true,
            "none" => tracing.enabled = false,
            _ => {
                return Err(bad(
                    "OTEL_TRACES_EXPORTER",
                    &v,
                    "expected otlp or none".into(),
                ));
            }
        }
    }
    if let Some(v) = get("OTEL_SDK_DISABLED") {
        // Only `true` disables; it wins over everything else.
        if boolean(&v).map_err(|why| bad("OTEL_SDK_DISABLED", &v, why))? {
            tracing.enabled = false;
        }
    }
    if let Some((name, v)) = either(
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ) {
        tracing.protocol = parse_protocol(v.trim()).map_err(|why| bad(name, &v, why))?;
    }
    if let Some(v) = get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
        // The traces endpoint is the whole URL, used as it is.
        tracing.endpoint = Some(
            check_endpoint(v.trim())
                .map_err(|why| bad("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", &v, why))?,
        );
    } else if let Some(v) = get("OTEL_EXPORTER_OTLP_ENDPOINT") {
        let base =
            check_endpoint(v.trim()).map_err(|why| bad("OTEL_EXPORTER_OTLP_ENDPOINT", &v, why))?;
        // The general endpoint is a base: HTTP appends the signal's path.
        tracing.endpoint = Some(match tracing.protocol {
            OtlpProtocol::Grpc => base,
            OtlpProtocol::HttpProtobuf => format!("{}/v1/traces", base.trim_end_matches('/')),
        });
    }
    if let Some((name, v)) = either(
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
        "OTEL_EXPORTER_OTLP_HEADERS",
    ) {
        let pairs = parse_pairs(&v).map_err(|why| bad(name, "…", why))?;
        for (k, value) in &pairs {
            crate::config::tracing::check_header(k, value).map_err(|why| bad(name, "…", why))?;
        }
        tracing.headers = pairs;
    }
    if let Some((name, v)) = either(
        "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
        "OTEL_EXPORTER_OTLP_TIMEOUT",
    ) {
        let ms: u64 = v
            .trim()
            .parse()
            .ok()
            .filter(|&ms| ms > 0)
            .ok_or_else(|| bad(name, &v, "expected milliseconds, above 0".into()))?;
        tracing.timeout = Duration::from_millis(ms);
    }
    if let Some(v) = get("OTEL_RESOURCE_ATTRIBUTES") {
        let mut pairs = parse_pairs(&v).map_err(|why| bad("OTEL_RESOURCE_ATTRIBUTES", &v, why))?;
        if let Some(i) = pairs.iter().position(|(k, _)| k == "service.name") {
            tracing.service_name = pairs.remove(i).1;
        }
        tracing.resource = pairs;
    }
    if let Some(v) = get("OTEL_SERVICE_NAME") {
        v.trim().clone_into(&mut tracing.service_name);
    }
    sampler(tracing, &get, &bad)
}

/// `OTEL_TRACES_SAMPLER` and `OTEL_TRACES_SAMPLER_ARG`: the
/// specification's samplers built on a trace-id ratio, parent-based or
/// not; the remote ones (Jaeger, X-Ray) are refused.
fn sampler(
    tracing: &mut TracingConfig,
    get: &impl Fn(&str) -> Option<String>,
    bad: &impl Fn(&str, &str, String) -> String,
) -> Result<(), String> {
    let arg = || -> Result<Option<f64>, String> {
        get("OTEL_TRACES_SAMPLER_ARG")
            .map(|v| {
                v.trim()
                    .parse::<f64>()
                    .map_err(|_| "not a number".to_owned())
                    .and_then(check_ratio)
                    .map_err(|why| bad("OTEL_TRACES_SAMPLER_ARG", &v, why))
            })
            .transpose()
    };
    match get("OTEL_TRACES_SAMPLER").as_deref().map(str::trim) {
        // The ratio alone: as the reference's TRACING_SAMPLING_RATE.
        None => {
            if let Some(r) = arg()? {
                tracing.sampling_ratio = r;
            }
        }
        Some(name) => {
            let Some(&(_, parent_based, ratio)) =
                RATIO_SAMPLERS.iter().find(|(n, _, _)| *n == name)
            else {
                let known: Vec<&str> = RATIO_SAMPLERS.iter().map(|(n, _, _)| *n).collect();
                return Err(bad(
                    "OTEL_TRACES_SAMPLER",
                    name,
                    format!("expected one of {}", known.join(", ")),
                ));
            };
            tracing.parent_based = parent_based;
            tracing.sampling_ratio = match ratio {
                Some(r) => r,
                None => arg()?.unwrap_or(1.0),
            };
        }
    }
    Ok(())
}

/// The samplers read: name, parent-based, fixed ratio (`None`: the
/// argument's, default 1).
const RATIO_SAMPLERS: &[(&str, bool, Option<f64>)] = &[
    ("always_on", false, Some(1.0)),
    ("always_off", false, Some(0.0)),
    ("traceidratio", false, None),
    ("parentbased_always_on", true, Some(1.0)),
    ("parentbased_always_off", true, Some(0.0)),
    ("parentbased_traceidratio", true, None),
];

fn boolean(v: &str) -> Result<bool, String> {
    match v.trim().to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err("expected true or false".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn with(vars: &[(&str, &str)]) -> Result<TracingConfig, String> {
        with_over(TracingConfig::default(), vars)
    }

    fn with_over(mut t: TracingConfig, vars: &[(&str, &str)]) -> Result<TracingConfig, String> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        apply_with(&mut t, |k| vars.get(k).cloned())?;
        Ok(t)
    }

    #[test]
    fn nothing_set_changes_nothing() {
        assert_eq!(with(&[]).expect("ok"), TracingConfig::default());
        assert_eq!(
            with(&[("OTEL_SERVICE_NAME", " "), ("OTEL_TRACES_SAMPLER", "")]).expect("ok"),
            TracingConfig::default()
        );
    }

    #[test]
    fn the_standard_variables_are_read() {
        let t = with(&[
            ("OTEL_TRACES_EXPORTER", "otlp"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "api-key=s%3Dx,tenant=a"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "2500"),
            ("OTEL_EXPORTER_OTLP_INSECURE", "true"),
            ("OTEL_RESOURCE_ATTRIBUTES", "service.name=a,team=rl"),
            ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "0.01"),
        ])
        .expect("ok");
        assert!(t.enabled);
        assert_eq!(t.protocol, OtlpProtocol::HttpProtobuf);
        assert_eq!(
            t.endpoint.as_deref(),
            Some("http://collector:4318/v1/traces")
        );
        assert_eq!(
            t.headers,
            [
                ("api-key".into(), "s=x".into()),
                ("tenant".into(), "a".into())
            ]
        );
        assert_eq!(t.timeout, Duration::from_millis(2500));
        assert_eq!(t.service_name, "a");
        assert_eq!(t.resource, [("team".into(), "rl".into())]);
        assert!((t.sampling_ratio - 0.01).abs() < f64::EPSILON);
    }

    #[test]
    fn the_traces_variables_win_and_their_endpoint_is_used_whole() {
        let t = with(&[
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:1"),
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://b:2/custom"),
            ("OTEL_SERVICE_NAME", "svc"),
            ("OTEL_RESOURCE_ATTRIBUTES", "service.name=other"),
        ])
        .expect("ok");
        assert_eq!(t.protocol, OtlpProtocol::HttpProtobuf);
        assert_eq!(t.endpoint.as_deref(), Some("http://b:2/custom"));
        assert_eq!(t.service_name, "svc");
        let t = with(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:4317")]).expect("ok");
        assert_eq!(t.endpoint.as_deref(), Some("http://a:4317"));
    }

    #[test]
    fn env_wins_over_the_file_and_disabled_wins_over_all() {
        let file = TracingConfig {
            enabled: true,
            sampling_ratio: 0.5,
            ..TracingConfig::default()
        };
        let t = with_over(file.clone(), &[("OTEL_TRACES_SAMPLER_ARG", "0.25")]).expect("ok");
        assert!((t.sampling_ratio - 0.25).abs() < f64::EPSILON);
        assert!(t.enabled);
        let t = with_over(file.clone(), &[("OTEL_TRACES_EXPORTER", "none")]).expect("ok");
        assert!(!t.enabled);
        let t = with_over(
            file,
            &[
                ("OTEL_TRACES_EXPORTER", "otlp"),
                ("OTEL_SDK_DISABLED", "TRUE"),
            ],
        )
        .expect("ok");
        assert!(!t.enabled);
        let t = with(&[("OTEL_SDK_DISABLED", "false")]).expect("ok");
        assert!(!t.enabled, "false does not turn tracing on");
        for (sampler, ratio, parent_based) in [
            ("parentbased_always_on", 1.0, true),
            ("parentbased_always_off", 0.0, true),
            ("always_on", 1.0, false),
            ("always_off", 0.0, false),
            ("traceidratio", 0.5, false),
        ] {
            let t = with(&[
                ("OTEL_TRACES_SAMPLER", sampler),
                ("OTEL_TRACES_SAMPLER_ARG", "0.5"),
            ])
            .expect(sampler);
            assert!((t.sampling_ratio - ratio).abs() < f64::EPSILON, "{sampler}");
            assert_eq!(t.parent_based, parent_based, "{sampler}");
        }
    }

    #[test]
    fn unparsable_values_are_refused_by_name() {
        for (vars, want) in [
            (
                &[("OTEL_SDK_DISABLED", "yes")][..],
                "OTEL_SDK_DISABLED=\"yes\": expected true or false",
            ),
            (
                &[("OTEL_TRACES_EXPORTER", "zipkin")],
                "OTEL_TRACES_EXPORTER=\"zipkin\": expected otlp or none",
            ),
            (
                &[("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")],
                "OTEL_EXPORTER_OTLP_PROTOCOL=\"http/json\": http/json is not supported",
            ),
            (
                &[("OTEL_EXPORTER_OTLP_ENDPOINT", "collector")],
                "OTEL_EXPORTER_OTLP_ENDPOINT=\"collector\": ",
            ),
            (
                &[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "ftp://c:4318")],
                "is not an http://HOST:PORT or https://HOST:PORT URL",
            ),
            (
                &[("OTEL_EXPORTER_OTLP_TIMEOUT", "10s")],
                "OTEL_EXPORTER_OTLP_TIMEOUT=\"10s\": expected milliseconds",
            ),
            (
                &[("OTEL_EXPORTER_OTLP_HEADERS", "novalue")],
                "OTEL_EXPORTER_OTLP_HEADERS",
            ),
            (
                &[("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")],
                "only none is supported",
            ),
            (
                &[("OTEL_EXPORTER_OTLP_INSECURE", "1")],
                "OTEL_EXPORTER_OTLP_INSECURE=\"1\"",
            ),
            (
                &[("OTEL_EXPORTER_OTLP_CERTIFICATE", "/nonexistent/ca.pem")],
                "OTEL_EXPORTER_OTLP_CERTIFICATE=\"/nonexistent/ca.pem\": /nonexistent/ca.pem",
            ),
            (
                &[("OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY", "/nonexistent/k.pem")],
                "OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY=\"/nonexistent/k.pem\"",
            ),
            (
                &[("OTEL_RESOURCE_ATTRIBUTES", "a")],
                "OTEL_RESOURCE_ATTRIBUTES=\"a\"",
            ),
            (
                &[("OTEL_TRACES_SAMPLER", "jaeger_remote")],
                "OTEL_TRACES_SAMPLER=\"jaeger_remote\": expected one of always_on, ",
            ),
            (
                &[
                    ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
                    ("OTEL_TRACES_SAMPLER_ARG", "2"),
                ],
                "OTEL_TRACES_SAMPLER_ARG=\"2\": a sampling ratio is from 0 to 1",
            ),
            (
                &[("OTEL_TRACES_SAMPLER_ARG", "x")],
                "OTEL_TRACES_SAMPLER_ARG=\"x\": not a number",
            ),
        ] {
            let err = with(vars).expect_err(want);
            assert!(err.contains(want), "{vars:?}: {err}");
        }
    }
}
