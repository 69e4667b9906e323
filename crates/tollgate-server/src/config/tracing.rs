//! The `[tracing]` table: OpenTelemetry spans exported over OTLP
//! (docs/tracing.md). The standard `OTEL_*` variables are laid over it at
//! the server's start ([`crate::telemetry::env`]), through the same value
//! checks as the file's, kept here: [`parse_protocol`], [`check_ratio`],
//! [`check_endpoint`], [`parse_pairs`].

use std::path::{Path, PathBuf};

use tollgate::store::redis::RedisTls;
use toml::de::{DeTable, DeValue};

use super::checker::{Checker, join};
use super::model::{OtlpProtocol, TracingConfig};
use super::secret::read_pem_file;

const TRACING_FIELDS: &[&str] = &[
    "enabled",
    "endpoint",
    "protocol",
    "headers",
    "service_name",
    "resource",
    "sampling_ratio",
    "parent_based",
    "timeout",
    "ca_file",
    "cert_file",
    "key_file",
    "insecure",
];

/// `grpc` or `http/protobuf` (the OTLP exporter specification's names).
///
/// # Errors
/// Any other text, naming the two.
pub(crate) fn parse_protocol(s: &str) -> Result<OtlpProtocol, String> {
    match s {
        "grpc" => Ok(OtlpProtocol::Grpc),
        "http/protobuf" => Ok(OtlpProtocol::HttpProtobuf),
        "http/json" => Err("http/json is not supported; use grpc or http/protobuf".to_owned()),
        other => Err(format!(
            "unknown OTLP protocol {other:?}; expected grpc or http/protobuf"
        )),
    }
}

/// A sampling ratio: a number from 0 (no root trace kept) to 1 (all).
///
/// # Errors
/// NaN or a number outside [0, 1].
pub(crate) fn check_ratio(r: f64) -> Result<f64, String> {
    if (0.0..=1.0).contains(&r) {
        Ok(r)
    } else {
        Err(format!("a sampling ratio is from 0 to 1, got {r}"))
    }
}

/// An OTLP endpoint: `http://` or `https://HOST[:PORT][/PATH]`, or
/// `HOST:PORT` (gRPC only: TLS unless `insecure`, as the OTLP exporter
/// specification says; the exporter refuses it over HTTP).
///
/// # Errors
/// Not such a URL.
pub(crate) fn check_endpoint(s: &str) -> Result<String, String> {
    let uri: http::Uri = s.parse().map_err(|e| format!("{s:?} is not a URL: {e}"))?;
    let host = uri.host().is_some_and(|h| !h.is_empty());
    match uri.scheme_str() {
        Some("http" | "https") if host => Ok(s.to_owned()),
        None if host && uri.port_u16().is_some() && uri.path_and_query().is_none() => {
            Ok(s.to_owned())
        }
        _ => Err(format!(
            "{s:?} is not an http://HOST:PORT or https://HOST:PORT URL"
        )),
    }
}

/// A TLS file of the exporter (`ca_file`, `cert_file` or `key_file`),
/// read and parsed now so a bad one stops the start with its name.
///
/// # Errors
/// A file that cannot be read, or holds no certificate (key).
pub(crate) fn check_tls_file(key: &str, file: &Path) -> Result<PathBuf, String> {
    let check = match key {
        "ca_file" => RedisTls::with_ca_pem,
        "cert_file" => RedisTls::with_client_cert_pem,
        _ => RedisTls::with_client_key_pem,
    };
    read_pem_file(file)
        .and_then(|pem| check(RedisTls::default(), &pem))
        .map(|_| file.to_path_buf())
        .map_err(|e| format!("{}: {e}", file.display()))
}

/// `key1=value1,key2=value2` (the `OTEL_EXPORTER_OTLP_HEADERS` and
/// `OTEL_RESOURCE_ATTRIBUTES` form; values percent-decoded, blanks around
/// items trimmed).
///
/// # Errors
/// An item without `=`, an empty key, or a bad percent escape.
pub(crate) fn parse_pairs(s: &str) -> Result<Vec<(String, String)>, String> {
    let mut pairs = Vec::new();
    for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let Some((k, v)) = item.split_once('=') else {
            return Err(format!("{item:?} is not key=value"));
        };
        let k = k.trim();
        if k.is_empty() {
            return Err(format!("{item:?} has an empty key"));
        }
        pairs.push((k.to_owned(), percent_decode(v.trim())?));
    }
    Ok(pairs)
}

/// `%XX` escapes decoded (W3C baggage octets, as the specification asks).
fn percent_decode(s: &str) -> Result<String, String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| format!("{s:?} has a bad percent escape"))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| format!("{s:?} is not UTF-8 once decoded"))
}

/// Whether `name` may be sent as an HTTP header / gRPC metadata key.
pub(crate) fn check_header(name: &str, value: &str) -> Result<(), String> {
    http::HeaderName::from_bytes(name.as_bytes())
        .map_err(|_| format!("{name:?} is not a header name"))?;
    http::HeaderValue::from_str(value)
        .map_err(|_| format!("the value of {name:?} is not a header value"))?;
    Ok(())
}

impl Checker<'_> {
    pub(super) fn tracing(&mut self, t: &DeTable<'_>) -> Option<TracingConfig> {
        let path = "tracing";
        let before = self.errors.len();
        self.unknown_fields(t, path, TRACING_FIELDS);
        let mut tracing = TracingConfig::default();
        if let Some(on) = self.boolean(t, path, "enabled") {
            tracing.enabled = on;
        }
        if let Some((s, span)) = self.string(t, path, "endpoint") {
            match check_endpoint(s) {
                Ok(e) => tracing.endpoint = Some(e),
                Err(e) => self.error(&span, join(path, "endpoint"), e),
            }
        }
        if let Some((s, span)) = self.string(t, path, "protocol") {
            match parse_protocol(s) {
                Ok(p) => tracing.protocol = p,
                Err(e) => self.error(&span, join(path, "protocol"), e),
            }
        }
        if let Some((s, span)) = self.string(t, path, "service_name") {
            if s.is_empty() {
                self.error(&span, join(path, "service_name"), "must not be empty");
            } else {
                s.clone_into(&mut tracing.service_name);
            }
        }
        if let Some(headers) = self.string_table(t, path, "headers") {
            for (k, v, span) in headers {
                match check_header(&k, &v) {
                    Ok(()) => tracing.headers.push((k, v)),
                    Err(e) => self.error(&span, join(path, "headers"), e),
                }
            }
        }
        if let Some(resource) = self.string_table(t, path, "resource") {
            tracing.resource = resource.into_iter().map(|(k, v, _)| (k, v)).collect();
        }
        self.sampling_ratio(t, path, &mut tracing);
        if let Some(on) = self.boolean(t, path, "parent_based") {
            tracing.parent_based = on;
        }
        if let Some(d) = self.duration(t, path, "timeout") {
            tracing.timeout = d;
        }
        if let Some(on) = self.boolean(t, path, "insecure") {
            tracing.insecure = on;
        }
        for key in ["ca_file", "cert_file", "key_file"] {
            let Some((file, span)) = self.string(t, path, key) else {
                continue;
            };
            match check_tls_file(key, Path::new(file)) {
                Ok(file) => match key {
                    "ca_file" => tracing.ca_file = Some(file),
                    "cert_file" => tracing.cert_file = Some(file),
                    _ => tracing.key_file = Some(file),
                },
                Err(e) => self.error(&span, join(path, key), e),
            }
        }
        self.cert_with_key(t, path);
        (self.errors.len() == before).then_some(tracing)
    }

    fn sampling_ratio(&mut self, t: &DeTable<'_>, path: &str, tracing: &mut TracingConfig) {
        let key = "sampling_ratio";
        let Some(value) = t.get(key) else { return };
        let field = join(path, key);
        // An integer is a number too: `sampling_ratio = 1`.
        let ratio = match value.get_ref() {
            DeValue::Float(f) => f.as_str().replace('_', "").parse::<f64>().ok(),
            #[allow(clippy::cast_precision_loss)] // only 0 and 1 are in range
            DeValue::Integer(i) => i128::from_str_radix(&i.as_str().replace('_', ""), i.radix())
                .ok()
                .map(|n| n as f64),
            _ => return self.wrong_type(value, &field, "a number"),
        };
        match ratio.map(check_ratio) {
            Some(Ok(r)) => tracing.sampling_ratio = r,
            Some(Err(why)) => self.error(&value.span(), field, why),
            None => self.error(&value.span(), field, "not a number"),
        }
    }

    /// `key`'s inline table of string values, in file order, each with
    /// its span; reports a wrong type.
    fn string_table(
        &mut self,
        t: &DeTable<'_>,
        path: &str,
        key: &str,
    ) -> Option<Vec<(String, String, std::ops::Range<usize>)>> {
        let value = t.get(key)?;
        let field = join(path, key);
        let DeValue::Table(table) = value.get_ref() else {
            self.wrong_type(value, &field, "a table of strings");
            return None;
        };
        let mut out = Vec::new();
        for (k, v) in table {
            match v.get_ref().as_str() {
                Some(s) => out.push((k.get_ref().to_string(), s.to_owned(), v.span())),
                None => self.wrong_type(v, &join(&field, k.get_ref()), "a string"),
            }
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn parse(text: &str) -> Result<TracingConfig, String> {
        Config::parse_with(text, "t.toml", true)
            .map(|c| c.tracing)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn a_whole_table_is_read() {
        let t = parse(
            "[tracing]\nenabled = true\nendpoint = 'http://otel:4318'\n\
             protocol = 'http/protobuf'\nservice_name = 'rl'\nsampling_ratio = 0.25\n\
             timeout = '2s'\nparent_based = false\nheaders = { authorization = 'Bearer x' }\n\
             resource = { 'deployment.environment' = 'prod' }\n",
        )
        .expect("parses");
        assert!(t.enabled);
        assert_eq!(t.endpoint.as_deref(), Some("http://otel:4318"));
        assert_eq!(t.protocol, OtlpProtocol::HttpProtobuf);
        assert_eq!(t.service_name, "rl");
        assert!((t.sampling_ratio - 0.25).abs() < f64::EPSILON);
        assert_eq!(t.timeout, std::time::Duration::from_secs(2));
        assert!(!t.parent_based);
        assert_eq!(t.headers, [("authorization".into(), "Bearer x".into())]);
        assert_eq!(
            t.resource,
            [("deployment.environment".into(), "prod".into())]
        );
        assert_eq!(parse("").expect("empty"), TracingConfig::default());
    }

    #[test]
    fn each_bad_field_is_named() {
        for (text, want) in [
            (
                "[tracing]\nsampling_ratio = 2",
                "tracing.sampling_ratio: a sampling ratio is from 0 to 1, got 2",
            ),
            (
                "[tracing]\nsampling_ratio = 'x'",
                "tracing.sampling_ratio: expected a number",
            ),
            (
                "[tracing]\nprotocol = 'udp'",
                "tracing.protocol: unknown OTLP protocol \"udp\"",
            ),
            (
                "[tracing]\nendpoint = 'otel'",
                "tracing.endpoint: \"otel\" is not an http://HOST:PORT or https://HOST:PORT URL",
            ),
            (
                "[tracing]\nca_file = '/nonexistent/ca.pem'",
                "tracing.ca_file: /nonexistent/ca.pem: ",
            ),
            (
                "[tracing]\ncert_file = '/nonexistent/c.pem'",
                "tracing.key_file: cert_file needs key_file",
            ),
            (
                "[tracing]\ninsecure = 1",
                "tracing.insecure: expected a boolean",
            ),
            (
                "[tracing]\nenabled = 'yes'",
                "tracing.enabled: expected a boolean",
            ),
            (
                "[tracing]\nheaders = { 'a b' = 'x' }",
                "tracing.headers: \"a b\" is not a header name",
            ),
            (
                "[tracing]\nresource = { a = 1 }",
                "tracing.resource.a: expected a string",
            ),
            ("[tracing]\ntimeout = 'soon'", "tracing.timeout: "),
            ("[tracing]\nsample = 1", "tracing.sample: unknown field"),
            ("tracing = 1", "tracing: expected a table"),
        ] {
            let err = parse(text).expect_err(text);
            assert!(err.contains(want), "{text}: {err}");
        }
    }

    #[test]
    fn pairs_are_split_trimmed_and_decoded() {
        assert_eq!(
            parse_pairs(" a=1 , b = x%20y,,c=").expect("pairs"),
            [
                ("a".into(), "1".into()),
                ("b".into(), "x y".into()),
                ("c".into(), String::new())
            ]
        );
        assert!(parse_pairs("a").is_err());
        assert!(parse_pairs("=1").is_err());
        assert!(parse_pairs("a=%zz").is_err());
    }
}
