//! `ShouldRateLimit` on the wire: the request decoded into messages of our
//! own whose string fields are bytes, and the tonic service that decodes
//! into them ([`RateLimitServer`]).
//!
//! The `envoy-types` messages declare keys and values `string`, and prost
//! refuses a `string` that is not UTF-8 while decoding, before the handler
//! runs: the whole call fails `INTERNAL`, which Envoy's default
//! `failure_mode_deny: false` turns into an admission with none of the
//! request's limits applied. Header values are not always UTF-8 and Envoy
//! copies them into descriptors, so one odd byte in a header would switch
//! every limit off. Proto3 `string` and `bytes` share a wire type, so these
//! messages read the same bytes with no check; the service then keys such
//! values losslessly ([`store_key`](super::limits::store_key)). Responses
//! are `envoy-types`' own.
//!
//! A request longer than the service reads is answered `OVER_LIMIT`, not
//! with tonic's `OUT_OF_RANGE` error: Envoy turns an error into an
//! admission, and a request is long only when it carries long header
//! values, so a client could switch its limits off by sending them.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::google::protobuf::UInt64Value;
use http_body::Frame;
use prost::Message as _;
use tonic::codegen::{Body, BoxFuture, StdError};

use crate::envoy::service::EnvoyService;
use crate::gate::Throttle;

/// `envoy.service.ratelimit.v3.RateLimitRequest`, strings as bytes.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct RateLimitRequest {
    /// The domain (from Envoy's config; must be UTF-8 to name one).
    #[prost(bytes = "vec", tag = "1")]
    pub domain: Vec<u8>,
    /// The descriptors, each decided on its own.
    #[prost(message, repeated, tag = "2")]
    pub descriptors: Vec<RateLimitDescriptor>,
    /// The cost of each descriptor without its own; 0 means 1.
    #[prost(uint32, tag = "3")]
    pub hits_addend: u32,
}

/// `envoy.extensions.common.ratelimit.v3.RateLimitDescriptor`, strings as
/// bytes.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct RateLimitDescriptor {
    /// The (key, value) entries, in order.
    #[prost(message, repeated, tag = "1")]
    pub entries: Vec<Entry>,
    /// A per-request limit override (not supported: logged, ignored).
    #[prost(message, optional, tag = "2")]
    pub limit: Option<RateLimitOverride>,
    /// The descriptor's own cost, when set.
    #[prost(message, optional, tag = "3")]
    pub hits_addend: Option<UInt64Value>,
    /// Give quota back instead of taking it (not supported: refused).
    #[prost(bool, tag = "4")]
    pub is_negative_hits: bool,
}

/// One descriptor entry, key and value as the bytes Envoy sent.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct Entry {
    /// The key (from Envoy's config).
    #[prost(bytes = "vec", tag = "1")]
    pub key: Vec<u8>,
    /// The value (often a client's header value: any bytes).
    #[prost(bytes = "vec", tag = "2")]
    pub value: Vec<u8>,
}

impl From<envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest> for RateLimitRequest {
    /// The same request (no copy of the strings' bytes).
    fn from(r: envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest) -> Self {
        Self {
            domain: r.domain.into_bytes(),
            descriptors: r
                .descriptors
                .into_iter()
                .map(|d| RateLimitDescriptor {
                    entries: d
                        .entries
                        .into_iter()
                        .map(|e| Entry {
                            key: e.key.into_bytes(),
                            value: e.value.into_bytes(),
                        })
                        .collect(),
                    limit: d.limit,
                    hits_addend: d.hits_addend,
                    is_negative_hits: d.is_negative_hits,
                })
                .collect(),
            hits_addend: r.hits_addend,
        }
    }
}

/// The gRPC service name.
pub const SERVICE_NAME: &str = "envoy.service.ratelimit.v3.RateLimitService";
/// The one method's path.
const SHOULD_RATE_LIMIT: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// `envoy.service.ratelimit.v3.RateLimitService` as a tonic service (what
/// `envoy-types`' generated `RateLimitServiceServer` is, with the
/// bytes-valued request above).
#[derive(Debug, Clone)]
pub struct RateLimitServer {
    inner: Arc<EnvoyService>,
    max_decoding_message_size: usize,
    too_long_log: Arc<Throttle>,
}

impl RateLimitServer {
    /// The service over `inner`, answering a request longer than
    /// `max_decoding_message_size` bytes `OVER_LIMIT` without reading it.
    #[must_use]
    pub fn new(inner: EnvoyService, max_decoding_message_size: usize) -> Self {
        Self {
            inner: Arc::new(inner),
            max_decoding_message_size,
            too_long_log: Arc::new(Throttle::new(Duration::from_secs(1))),
        }
    }
}

impl tonic::server::NamedService for RateLimitServer {
    const NAME: &'static str = SERVICE_NAME;
}

impl<B> tonic::codegen::Service<http::Request<B>> for RateLimitServer
where
    B: Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        if req.uri().path() != SHOULD_RATE_LIMIT {
            return Box::pin(async {
                Ok(tonic::Status::unimplemented("no such method").into_http())
            });
        }
        let method = Method(Arc::clone(&self.inner));
        let max = self.max_decoding_message_size;
        let log = Arc::clone(&self.too_long_log);
        Box::pin(async move {
            let codec = tonic_prost::ProstCodec::<RateLimitResponse, RateLimitRequest>::default();
            let mut grpc =
                tonic::server::Grpc::new(codec).apply_max_message_size_config(Some(max), None);
            let res = grpc.unary(method, req).await;
            // An error before any answer is in the headers (trailers-only);
            // a decided call's status is in its trailers.
            if res
                .headers()
                .get("grpc-status")
                .map(http::HeaderValue::as_bytes)
                == Some(b"11")
            {
                log.report(|suppressed| {
                    tracing::warn!(
                        "Envoy rate limit service: a request longer than {max} bytes; \
                         answered OVER_LIMIT unread ({suppressed} more since the last report)"
                    );
                });
                return Ok(over_limit());
            }
            Ok(res)
        })
    }
}

/// `ShouldRateLimit` itself.
struct Method(Arc<EnvoyService>);

impl tonic::server::UnaryService<RateLimitRequest> for Method {
    type Response = RateLimitResponse;
    type Future = BoxFuture<tonic::Response<RateLimitResponse>, tonic::Status>;

    fn call(&mut self, request: tonic::Request<RateLimitRequest>) -> Self::Future {
        let inner = Arc::clone(&self.0);
        Box::pin(async move {
            inner
                .decide(request.get_ref())
                .await
                .map(tonic::Response::new)
        })
    }
}

/// A whole `OVER_LIMIT` answer with no statuses, for a request too long to
/// read.
fn over_limit() -> http::Response<tonic::body::Body> {
    let answer = RateLimitResponse {
        overall_code: Code::OverLimit.into(),
        ..RateLimitResponse::default()
    };
    let len = answer.encoded_len();
    let mut frame = Vec::with_capacity(5 + len);
    frame.push(0);
    frame.extend_from_slice(&u32::try_from(len).unwrap_or(u32::MAX).to_be_bytes());
    answer.encode_raw(&mut frame);
    let mut trailers = http::HeaderMap::new();
    trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
    let frames = [
        Ok::<_, Infallible>(Frame::data(Bytes::from(frame))),
        Ok(Frame::trailers(trailers)),
    ];
    let body = http_body_util::StreamBody::new(futures_util::stream::iter(frames));
    let mut res = http::Response::new(tonic::body::Body::new(body));
    res.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/grpc"),
    );
    res
}
