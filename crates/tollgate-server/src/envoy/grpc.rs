//! `envoy.service.ratelimit.v3.RateLimitService` as a tonic service
//! ([`RateLimitServer`]): `ShouldRateLimit` decoded into the bytes-valued
//! messages of [`wire`](super::wire) and decided by the
//! [`EnvoyService`].
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
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use http_body::Frame;
use prost::Message as _;
use tonic::codegen::{Body, BoxFuture, StdError};

use crate::envoy::service::EnvoyService;
use crate::envoy::wire::RateLimitRequest;
use crate::gate::Throttle;

/// The gRPC service name.
pub const SERVICE_NAME: &str = "envoy.service.ratelimit.v3.RateLimitService";
/// The one method's path.
const SHOULD_RATE_LIMIT: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// `envoy.service.ratelimit.v3.RateLimitService` as a tonic service (what
/// `envoy-types`' generated `RateLimitServiceServer` is, with the
/// bytes-valued request above).
#[derive(Clone)]
pub struct RateLimitServer {
    /// The service that decides a call, taken once at its start (a config
    /// reload replaces it; calls in flight finish on theirs).
    current: Current,
    max_decoding_message_size: usize,
    too_long_log: Arc<Throttle>,
}

/// Where each call takes the service deciding it.
pub type Current = Arc<dyn Fn() -> Arc<EnvoyService> + Send + Sync>;

impl std::fmt::Debug for RateLimitServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimitServer")
            .field("max_decoding_message_size", &self.max_decoding_message_size)
            .finish_non_exhaustive()
    }
}

impl RateLimitServer {
    /// The service over `inner`, answering a request longer than
    /// `max_decoding_message_size` bytes `OVER_LIMIT` without reading it.
    #[must_use]
    pub fn new(inner: EnvoyService, max_decoding_message_size: usize) -> Self {
        let inner = Arc::new(inner);
        Self::live(
            Arc::new(move || Arc::clone(&inner)),
            max_decoding_message_size,
        )
    }

    /// The service deciding each call with the [`EnvoyService`] `current`
    /// gives at the call's start (`serve` swaps it on a config reload).
    #[must_use]
    pub fn live(current: Current, max_decoding_message_size: usize) -> Self {
        Self {
            current,
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
        let method = Method((self.current)());
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
