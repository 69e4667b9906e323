//! The OTLP span exporter `[tracing]` asks for: gRPC (tonic) or protobuf
//! over HTTP (hyper), to its endpoint, with its headers and timeout.
//!
//! The batch processor sends from a thread of its own, blocking on each
//! export; hyper's client needs a Tokio runtime for its connections and
//! timers, so HTTP requests are spawned onto the server's runtime
//! ([`OnRuntime`]). The gRPC channel is made on the runtime (lazily
//! connected), and its I/O runs there already.

use std::collections::HashMap;

use async_trait::async_trait;
use bytes::Bytes;
use http::{Request, Response};
use opentelemetry_http::{HttpClient, HttpError, hyper::HyperClient};
use opentelemetry_otlp::{
    Protocol, SpanExporter, WithExportConfig as _, WithHttpConfig as _, WithTonicConfig as _,
};

use crate::config::{OtlpProtocol, TracingConfig};

/// The OTLP exporter specification's default endpoints.
const GRPC_DEFAULT: &str = "http://localhost:4317";
const HTTP_DEFAULT: &str = "http://localhost:4318/v1/traces";

/// Where spans go: the configured endpoint, or the protocol's default.
/// Over HTTP, an endpoint without a path gets the traces path
/// `/v1/traces`; one with a path is used as it is.
pub(super) fn endpoint(config: &TracingConfig) -> String {
    match (config.protocol, &config.endpoint) {
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
            SpanExporter::builder()
                .with_tonic()
                .with_endpoint(endpoint)
                .with_timeout(config.timeout)
                .with_metadata(metadata)
                .build()
        }
        OtlpProtocol::HttpProtobuf => {
            let client = OnRuntime {
                runtime: tokio::runtime::Handle::current(),
                client: HyperClient::with_default_connector(config.timeout, None),
            };
            SpanExporter::builder()
                .with_http()
                .with_protocol(Protocol::HttpBinary)
                .with_endpoint(endpoint)
                .with_timeout(config.timeout)
                .with_headers(config.headers.iter().cloned().collect::<HashMap<_, _>>())
                .with_http_client(client)
                .build()
        }
    };
    built.map_err(|e| format!("cannot build the OTLP exporter: {e}"))
}

/// hyper's client, its requests run on the server's runtime.
#[derive(Debug)]
struct OnRuntime {
    runtime: tokio::runtime::Handle,
    client: HyperClient,
}

#[async_trait]
impl HttpClient for OnRuntime {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let client = self.client.clone();
        self.runtime
            .spawn(async move { client.send_bytes(request).await })
            .await
            .map_err(|e| Box::new(e) as HttpError)?
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
    }
}
