//! The OTLP span exporter `[tracing]` asks for: gRPC (tonic) or protobuf
//! over HTTP (hyper), to its endpoint, with its headers and timeout.
//!
//! The batch processor sends from a thread of its own, blocking on each
//! export; hyper's client needs a Tokio runtime for its connections and
//! timers, so HTTP requests are spawned onto the server's runtime
//! ([`OnRuntime`]). The gRPC channel is made on the runtime (lazily
//! connected), and its I/O runs there already.
//!
//! An `https://` endpoint is TLS (`tls.rs`): for gRPC a channel of ours
//! over the xDS client's connector, for HTTP hyper over it. A gRPC
//! endpoint without a scheme is TLS unless `insecure`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use bytes::Bytes;
use http::{Request, Response};
use hyper_util::client::legacy::connect::Connect;
use opentelemetry_http::{HttpClient, HttpError, hyper::HyperClient};
use opentelemetry_otlp::{
    Protocol, SpanExporter, WithExportConfig as _, WithHttpConfig as _, WithTonicConfig as _,
};
use opentelemetry_sdk::error::OTelSdkResult;

use crate::config::{OtlpProtocol, TracingConfig};

use super::tls::{HttpsConnector, connector};

/// The OTLP exporter specification's default endpoints.
const GRPC_DEFAULT: &str = "http://localhost:4317";
const HTTP_DEFAULT: &str = "http://localhost:4318/v1/traces";

/// Where spans go: the configured endpoint, or the protocol's default.
/// Over HTTP, an endpoint without a path gets the traces path
/// `/v1/traces`; one with a path is used as it is.
pub(super) fn endpoint(config: &TracingConfig) -> String {
    match (config.protocol, &config.endpoint) {
        (OtlpProtocol::Grpc, Some(e)) if !e.contains("://") => {
            let scheme = if config.insecure { "http" } else { "https" };
            format!("{scheme}://{e}")
        }
        (OtlpProtocol::Grpc, Some(e)) => e.clone(),
        (OtlpProtocol::Grpc, None) => GRPC_DEFAULT.to_owned(),
        (OtlpProtocol::HttpProtobuf, None) => HTTP_DEFAULT.to_owned(),
        (OtlpProtocol::HttpProtobuf, Some(e)) => {
            let has_path = e
                .parse::<http::Uri>()
                .is_ok_and(|u| !matches!(u.path(), "" | "/"));
            if has_path {
                e.clone()
            } else {
                format!("{}/v1/traces", e.trim_end_matches('/'))
            }
        }
    }
}

/// The exporter `config` asks for. Call inside the runtime.
///
/// # Errors
/// A header the exporter refuses, or an exporter that cannot be built.
pub(super) fn exporter(config: &TracingConfig) -> Result<SpanExporter, String> {
    let endpoint = endpoint(config);
    let uri: http::Uri = endpoint
        .parse()
        .map_err(|e| format!("tracing endpoint {endpoint:?}: {e}"))?;
    let tls = match uri.scheme_str() {
        Some("https") => Some(connector(config)?),
        Some("http") if config.ca_file.is_some() || config.cert_file.is_some() => {
            // Asked for TLS files, the caller expects TLS: not plain text.
            return Err(format!(
                "tracing: TLS files are set but the endpoint {endpoint:?} is http://; \
                 use https://"
            ));
        }
        Some("http") => None,
        _ => {
            return Err(format!(
                "tracing endpoint {endpoint:?}: an OTLP/HTTP endpoint needs \
                 http:// or https://"
            ));
        }
    };
    let built = match config.protocol {
        OtlpProtocol::Grpc => {
            let mut metadata = tonic::metadata::MetadataMap::new();
            for (k, v) in &config.headers {
                let key = tonic::metadata::MetadataKey::from_bytes(k.as_bytes())
                    .map_err(|_| format!("tracing header {k:?}: not a gRPC metadata key"))?;
                let value = v
                    .parse()
                    .map_err(|_| format!("tracing header {k:?}: not a metadata value"))?;
                metadata.insert(key, value);
            }
            let builder = SpanExporter::builder()
                .with_tonic()
                .with_timeout(config.timeout)
                .with_metadata(metadata);
            match tls {
                // tonic refuses https:// without its own TLS: the URI
                // says http, the connector does the TLS (as xDS's).
                Some(tls) => {
                    let authority = uri.authority().map_or("", |a| a.as_str());
                    let port = if uri.port().is_some() { "" } else { ":443" };
                    let channel = tonic::transport::Endpoint::from_shared(format!(
                        "http://{authority}{port}"
                    ))
                    .map_err(|e| format!("tracing endpoint {endpoint:?}: {e}"))?
                    .timeout(config.timeout)
                    .connect_with_connector_lazy(tls);
                    builder.with_channel(channel).build()
                }
                None => builder.with_endpoint(endpoint).build(),
            }
        }
        OtlpProtocol::HttpProtobuf => {
            let runtime = tokio::runtime::Handle::current();
            let builder = SpanExporter::builder()
                .with_http()
                .with_protocol(Protocol::HttpBinary)
                .with_endpoint(endpoint)
                .with_timeout(config.timeout)
                .with_headers(config.headers.iter().cloned().collect::<HashMap<_, _>>());
            match tls {
                Some(tls) => builder
                    .with_http_client(OnRuntime {
                        runtime,
                        client: HyperClient::new(HttpsConnector(tls), config.timeout, None),
                    })
                    .build(),
                None => builder
                    .with_http_client(OnRuntime {
                        runtime,
                        client: HyperClient::with_default_connector(config.timeout, None),
                    })
                    .build(),
            }
        }
    };
    built.map_err(|e| format!("cannot build the OTLP exporter: {e}"))
}

/// hyper's client, its requests run on the server's runtime.
#[derive(Debug)]
struct OnRuntime<C: Connect + Clone + Send + Sync + 'static> {
    runtime: tokio::runtime::Handle,
    client: HyperClient<C>,
}

#[async_trait]
impl<C> HttpClient for OnRuntime<C>
where
    C: Connect + Clone + std::fmt::Debug + Send + Sync + 'static,
{
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let client = self.client.clone();
        self.runtime
            .spawn(async move { client.send_bytes(request).await })
            .await
            .map_err(|e| Box::new(e) as HttpError)?
    }
}

/// The exporter, its failures logged: the SDK's own reports are off
/// (no `internal-logs`), and a collector that cannot be reached or
/// refuses the handshake must not fail silently. Logged when exports
/// start failing and when they work again, not per batch.
#[derive(Debug)]
pub(super) struct Logged {
    inner: SpanExporter,
    failing: AtomicBool,
}

impl Logged {
    pub(super) fn new(inner: SpanExporter) -> Self {
        Logged {
            inner,
            failing: AtomicBool::new(false),
        }
    }
}

impl opentelemetry_sdk::trace::SpanExporter for Logged {
    async fn export(&self, batch: Vec<opentelemetry_sdk::trace::SpanData>) -> OTelSdkResult {
        let done = self.inner.export(batch).await;
        match &done {
            Err(e) if !self.failing.swap(true, Ordering::Relaxed) => {
                tracing::warn!("tracing: cannot export spans: {e}");
            }
            Ok(()) if self.failing.swap(false, Ordering::Relaxed) => {
                tracing::info!("tracing: exporting spans again");
            }
            _ => {}
        }
        done
    }

    fn shutdown_with_timeout(&self, timeout: std::time::Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        self.inner.set_resource(resource);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_default_by_protocol_and_http_gets_its_path() {
        let mut c = TracingConfig::default();
        assert_eq!(endpoint(&c), "http://localhost:4317");
        c.protocol = OtlpProtocol::HttpProtobuf;
        assert_eq!(endpoint(&c), "http://localhost:4318/v1/traces");
        c.endpoint = Some("http://c:4318/".into());
        assert_eq!(endpoint(&c), "http://c:4318/v1/traces");
        c.endpoint = Some("http://c:4318/otlp/traces".into());
        assert_eq!(endpoint(&c), "http://c:4318/otlp/traces");
        c.protocol = OtlpProtocol::Grpc;
        c.endpoint = Some("http://c:4317".into());
        assert_eq!(endpoint(&c), "http://c:4317");
        c.endpoint = Some("https://c:4317".into());
        assert_eq!(endpoint(&c), "https://c:4317");
        // No scheme: TLS unless insecure (the specification's rule).
        c.endpoint = Some("c:4317".into());
        assert_eq!(endpoint(&c), "https://c:4317");
        c.insecure = true;
        assert_eq!(endpoint(&c), "http://c:4317");
    }
}
