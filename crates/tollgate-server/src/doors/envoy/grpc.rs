//! `envoy.service.ratelimit.v3.RateLimitService` on HTTP/2 streams
//! ([`RateLimitServer`]): `ShouldRateLimit` read off its stream, decoded
//! into the bytes-valued messages of [`wire`](super::wire), decided by the
//! [`EnvoyService`] and answered; `grpc.health.v1.Health` (tonic-health's
//! service) and the rate limit quota service (tonic's, docs/rlqs.md)
//! beside it; any other method `UNIMPLEMENTED`.
//!
//! The calls are served on `h2` directly, not through tonic's server: a
//! call is one small message each way, and tonic's layers, hyper's task per
//! stream and its wait for send capacity cost more than deciding it
//! (docs/envoy.md, "Performance"). What tonic's server did for a call is
//! done here the same way: the request's one message is read to the end of
//! its body, a `grpc-timeout` bounds the call (`CANCELLED` past it), a
//! compressed request is refused, and a malformed one is `INTERNAL` with
//! tonic's words.
//!
//! A request longer than the service reads is answered `OVER_LIMIT`, not
//! with an `OUT_OF_RANGE` error: Envoy turns an error into an admission,
//! and a request is long only when it carries long header values, so a
//! client could switch its limits off by sending them.

use std::future::poll_fn;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_server::RateLimitQuotaServiceServer;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use h2::RecvStream;
use h2::server::SendResponse;
use http::{HeaderMap, HeaderValue};
use prost::Message as _;
use tonic::Status;
use tonic::codegen::Service as _;
use tonic_health::pb::health_server::HealthServer;
use tonic_health::server::HealthService;

use crate::doors::envoy::deadline::{CallDeadline, DeadlineBody, RecvBody};
use crate::doors::envoy::failure::CallError;
use crate::doors::envoy::service::EnvoyService;
use crate::doors::envoy::wire::RateLimitRequest;
use crate::doors::rlqs::RlqsService;
use crate::doors::rlqs::service::STREAM_PATH;
use crate::gate::Throttle;
use crate::metrics::reference::Method;
use crate::telemetry::spans;
use tracing::Instrument as _;

/// The gRPC service name.
pub const SERVICE_NAME: &str = "envoy.service.ratelimit.v3.RateLimitService";
/// The one method's path.
const SHOULD_RATE_LIMIT: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";
/// The health service's methods start so.
const HEALTH: &str = "/grpc.health.v1.Health/";
/// A gRPC message's prefix: the compressed flag and the length.
const PREFIX: usize = 5;

/// `envoy.service.ratelimit.v3.RateLimitService` and `grpc.health.v1.Health`,
/// one HTTP/2 stream (one call) at a time ([`RateLimitServer::call`]).
/// Cloning is cheap (one reference count).
#[derive(Clone)]
pub struct RateLimitServer(Arc<Shared>);

impl std::fmt::Debug for RateLimitServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimitServer")
            .field("service", &(self.0.current)())
            .field(
                "max_decoding_message_size",
                &self.0.max_decoding_message_size,
            )
            .finish_non_exhaustive()
    }
}

/// Where each call takes the service deciding it (a config reload
/// replaces it; calls in flight finish on theirs).
pub type Current = Arc<dyn Fn() -> Arc<EnvoyService> + Send + Sync>;

struct Shared {
    current: Current,
    health: HealthServer<HealthService>,
    rlqs: Option<RateLimitQuotaServiceServer<RlqsService>>,
    max_decoding_message_size: usize,
    body_timeout: Duration,
    too_long_log: Throttle,
}

impl RateLimitServer {
    /// The service deciding each call with the [`EnvoyService`] `current`
    /// gives at the call's start, with `health` beside it, answering a
    /// request longer than `max_decoding_message_size` bytes `OVER_LIMIT`
    /// without reading it, and `DEADLINE_EXCEEDED` to a request whose body
    /// keeps the call waiting for `body_timeout`.
    #[must_use]
    pub fn new(
        current: Current,
        health: HealthService,
        max_decoding_message_size: usize,
        body_timeout: Duration,
    ) -> Self {
        // the latency series and the unlabelled counters at 0 from the start
        let _ = crate::metrics::decision_latency(crate::metrics::Door::Envoy);
        ::metrics::counter!(super::unknown::UNKNOWN_DOMAIN).increment(0);
        ::metrics::counter!(super::detailed::FOLDED).increment(0);
        Self(Arc::new(Shared {
            current,
            health: HealthServer::new(health).max_decoding_message_size(max_decoding_message_size),
            rlqs: None,
            max_decoding_message_size,
            body_timeout,
            too_long_log: Throttle::new(Duration::from_secs(1)),
        }))
    }

    /// The same, serving the rate limit quota service `rlqs` beside.
    #[must_use]
    pub fn with_rlqs(mut self, rlqs: RlqsService) -> Self {
        if let Some(shared) = Arc::get_mut(&mut self.0) {
            shared.rlqs = Some(rlqs.server());
        }
        self
    }

    /// Serves one call: reads its request from `req`, answers on `respond`.
    pub async fn call(self, req: http::Request<RecvStream>, mut respond: SendResponse<Bytes>) {
        let path = req.uri().path();
        if path == SHOULD_RATE_LIMIT {
            let started = std::time::Instant::now();
            let service = (self.0.current)();
            let deadline = CallDeadline::from_headers(req.headers());
            // One span per call, as the reference's gRPC interceptor
            // makes (off: `Span::none()`, the metadata not read).
            let span = spans::should_rate_limit(req.headers());
            let answer = deadline
                .bound(self.should_rate_limit(req, &service))
                .instrument(span.clone())
                .await;
            // Counted before the answer leaves, so a caller that has it
            // finds it counted.
            if let Some(reference) = service.reference_metrics() {
                if let Err(e) = &answer {
                    reference.error(e.kind);
                }
                reference.call(Method::ShouldRateLimit, started.elapsed());
            }
            match answer {
                Ok(answer) => {
                    spans::grpc_answer(&span, Ok(answer.overall_code().as_str_name()));
                    send_message(&mut respond, &answer);
                }
                Err(CallError { status, .. }) => {
                    spans::grpc_answer(&span, Err((status.code() as i32, status.message())));
                    send_status(&mut respond, &status);
                }
            }
        } else if path == STREAM_PATH
            && let Some(rlqs) = &self.0.rlqs
        {
            // A stream lives as long as Envoy keeps it: no body deadline.
            let req = req.map(RecvBody::new);
            let Ok(answer) = rlqs.clone().call(req).await;
            forward(answer, respond).await;
        } else if path.starts_with(HEALTH) {
            // The reference counts its unary calls: `Check`, not `Watch`.
            let check = path.ends_with("/Check").then(|| {
                let service = (self.0.current)();
                (service, std::time::Instant::now())
            });
            self.health(req, respond).await;
            if let Some((service, started)) = check
                && let Some(reference) = service.reference_metrics()
            {
                reference.call(Method::Check, started.elapsed());
            }
        } else {
            send_status(&mut respond, &Status::unimplemented("no such method"));
        }
    }

    /// `ShouldRateLimit`: its request read whole, decoded and decided.
    async fn should_rate_limit(
        &self,
        req: http::Request<RecvStream>,
        service: &EnvoyService,
    ) -> Result<RateLimitResponse, CallError> {
        let (parts, body) = req.into_parts();
        if let Some(encoding) = parts.headers.get("grpc-encoding")
            && encoding != "identity"
        {
            return Err(Status::unimplemented(format!(
                "Content is compressed with `{}` which isn't supported",
                String::from_utf8_lossy(encoding.as_bytes())
            ))
            .into());
        }
        let max = self.0.max_decoding_message_size;
        let body = DeadlineBody::new(RecvBody::new(body), self.0.body_timeout);
        let Some(message) = read_message(body, max).await? else {
            self.0.too_long_log.report(|suppressed| {
                tracing::warn!(
                    "Envoy rate limit service: a request longer than {max} bytes; \
                     answered OVER_LIMIT unread ({suppressed} more since the last report)"
                );
            });
            return Ok(RateLimitResponse {
                overall_code: Code::OverLimit.into(),
                ..RateLimitResponse::default()
            });
        };
        let request = RateLimitRequest::decode(message).map_err(decode_error)?;
        spans::domain(&request.domain);
        let started = std::time::Instant::now();
        let answer = service.decide(&request).await;
        crate::metrics::decision_latency(crate::metrics::Door::Envoy)
            .record(started.elapsed().as_secs_f64());
        answer
    }

    /// The health service (tonic-health's, under the same body bound), its
    /// answer streamed back until it ends or the client resets the stream.
    async fn health(&self, req: http::Request<RecvStream>, respond: SendResponse<Bytes>) {
        let timeout = self.0.body_timeout;
        let req = req.map(|body| DeadlineBody::new(RecvBody::new(body), timeout));
        let Ok(answer) = self.0.health.clone().call(req).await;
        forward(answer, respond).await;
    }
}

/// Sends a tonic service's `answer` on `respond`: its head, then its body
/// frame by frame until it ends (trailers) or the client resets the stream.
async fn forward<B>(answer: http::Response<B>, mut respond: SendResponse<Bytes>)
where
    B: http_body::Body<Data = Bytes> + Unpin,
{
    let (head, mut body) = answer.into_parts();
    let end = body.is_end_stream();
    let Ok(mut send) = respond.send_response(http::Response::from_parts(head, ()), end) else {
        return;
    };
    if end {
        return;
    }
    loop {
        let frame = poll_fn(|cx| {
            if send.poll_reset(cx).is_ready() {
                return Poll::Ready(None);
            }
            Pin::new(&mut body).poll_frame(cx)
        })
        .await;
        match frame {
            None => {
                let _ = send.send_data(Bytes::new(), true);
                return;
            }
            Some(Err(_)) => {
                send.send_reset(h2::Reason::INTERNAL_ERROR);
                return;
            }
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => {
                    if !send_within_window(&mut send, data).await {
                        return;
                    }
                }
                Err(frame) => {
                    if let Ok(trailers) = frame.into_trailers() {
                        let _ = send.send_trailers(trailers);
                        return;
                    }
                }
            },
        }
    }
}

impl tonic::server::NamedService for RateLimitServer {
    const NAME: &'static str = SERVICE_NAME;
}

/// How long an answer waits for the client to open its flow-control
/// window before the stream is reset: a client that does not read is not
/// sent more than its window, nor held forever.
const SEND_STALL: Duration = Duration::from_secs(30);

/// Sends `data` no faster than the client's window opens (h2 would
/// otherwise buffer it all, without bound, for a client that never
/// reads); `false` when the stream is gone or was reset for stalling.
async fn send_within_window(send: &mut h2::SendStream<Bytes>, mut data: Bytes) -> bool {
    while !data.is_empty() {
        send.reserve_capacity(data.len());
        let capacity = poll_fn(|cx| {
            if send.poll_reset(cx).is_ready() {
                return Poll::Ready(None);
            }
            send.poll_capacity(cx)
        });
        match tokio::time::timeout(SEND_STALL, capacity).await {
            Ok(Some(Ok(0))) => {}
            Ok(Some(Ok(n))) => {
                let chunk = data.split_to(n.min(data.len()));
                if send.send_data(chunk, false).is_err() {
                    return false;
                }
            }
            Ok(_) => return false,
            Err(_) => {
                send.send_reset(h2::Reason::CANCEL);
                return false;
            }
        }
    }
    true
}

/// Reads a unary call's request to the end of its body: its one message,
/// without its prefix, or `None` as soon as a prefix declares more than
/// `max` bytes (the rest unread). Later messages are decoded and dropped, as
/// tonic's server does.
async fn read_message<B>(mut body: B, max: usize) -> Result<Option<Bytes>, Status>
where
    B: http_body::Body<Data = Bytes, Error = tonic::codegen::StdError> + Unpin,
{
    let mut message: Option<Bytes> = None;
    let mut buf = BytesMut::new();
    while let Some(frame) = poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
        let frame = frame.map_err(Status::from_error)?;
        let Ok(mut data) = frame.into_data() else {
            continue; // trailers: nothing to read
        };
        if buf.is_empty() {
            // Envoy's calls: one whole message in one frame, no copy.
            while let Some(whole) = whole_message(&data, max)? {
                let rest = data.split_off(PREFIX + whole);
                take(&mut message, data.slice(PREFIX..))?;
                data = rest;
            }
        }
        buf.extend_from_slice(&data);
        loop {
            let Some(whole) = whole_message(&buf, max)? else {
                break;
            };
            let next = buf.split_to(PREFIX + whole).freeze();
            take(&mut message, next.slice(PREFIX..))?;
        }
        if buf.len() >= PREFIX && declared(&buf) > max {
            return Ok(None);
        }
    }
    if !buf.is_empty() {
        return Err(Status::internal("Unexpected EOF decoding stream."));
    }
    match message {
        Some(m) => Ok(Some(m)),
        None => Err(Status::internal("Missing request message.")),
    }
}

/// The request reading of `ShouldRateLimit`, for the fuzz targets
/// (`fuzz/`): not an API.
#[doc(hidden)]
pub mod fuzzing {
    use super::{Bytes, RateLimitRequest, Status, read_message};
    use prost::Message as _;

    /// A call's body arriving as `chunks` read and decoded as the server
    /// does it: the request, `None` when a prefix declares more than
    /// `max` bytes, or the status the call gets.
    ///
    /// # Errors
    /// The status a bad body is answered with.
    pub async fn read_request(
        chunks: Vec<Bytes>,
        max: usize,
    ) -> Result<Option<RateLimitRequest>, Status> {
        let frames = chunks
            .into_iter()
            .map(|c| Ok::<_, tonic::codegen::StdError>(http_body::Frame::data(c)));
        let body = http_body_util::StreamBody::new(futures_util::stream::iter(frames));
        match read_message(body, max).await? {
            Some(m) => RateLimitRequest::decode(m)
                .map(Some)
                .map_err(super::decode_error),
            None => Ok(None),
        }
    }
}

/// The length a message prefix at the start of `buf` declares.
fn declared(buf: &[u8]) -> usize {
    let mut len = [0; 4];
    len.copy_from_slice(&buf[1..PREFIX]);
    usize::try_from(u32::from_be_bytes(len)).unwrap_or(usize::MAX)
}

/// The length of the whole message at the start of `buf`, if it is all
/// there and at most `max` long; an error for a compressed or unknown
/// flag (tonic's words).
fn whole_message(buf: &[u8], max: usize) -> Result<Option<usize>, Status> {
    if buf.len() < PREFIX {
        return Ok(None);
    }
    match buf[0] {
        0 => {}
        1 => {
            return Err(Status::internal(
                "protocol error: received message with compressed-flag but no grpc-encoding was specified",
            ));
        }
        f => {
            return Err(Status::internal(format!(
                "protocol error: received message with invalid compression flag: {f} (valid flags are 0 and 1), while sending request"
            )));
        }
    }
    let len = declared(buf);
    Ok((len <= max && buf.len() - PREFIX >= len).then_some(len))
}

/// Keeps the first message; decodes a later one only to refuse it if bad.
fn take(first: &mut Option<Bytes>, message: Bytes) -> Result<(), Status> {
    if first.is_none() {
        *first = Some(message);
    } else {
        RateLimitRequest::decode(message).map_err(decode_error)?;
    }
    Ok(())
}

/// A message that does not decode: `INTERNAL`, as tonic answers it.
#[allow(clippy::needless_pass_by_value)] // the shape `map_err` takes
fn decode_error(e: prost::DecodeError) -> Status {
    Status::internal(e.to_string())
}

/// Answers a call with `answer` and status `OK`: headers, one data frame,
/// trailers, queued at once (HTTP/2 flow control sends them as the window
/// allows).
fn send_message(respond: &mut SendResponse<Bytes>, answer: &RateLimitResponse) {
    let len = answer.encoded_len();
    let mut frame = BytesMut::with_capacity(PREFIX + len);
    frame.put_u8(0);
    frame.put_u32(u32::try_from(len).unwrap_or(u32::MAX));
    answer.encode_raw(&mut frame);
    let mut head = http::Response::new(());
    head.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    let Ok(mut send) = respond.send_response(head, false) else {
        return; // the client reset the stream
    };
    if send.send_data(frame.freeze(), false).is_ok() {
        let mut trailers = HeaderMap::with_capacity(1);
        trailers.insert("grpc-status", HeaderValue::from_static("0"));
        let _ = send.send_trailers(trailers);
    }
}

/// Answers a call with `status` alone (a trailers-only response).
fn send_status(respond: &mut SendResponse<Bytes>, status: &Status) {
    let _ = respond.send_response(status.clone().into_http::<()>(), true);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framed(flag: u8, message: &[u8]) -> Vec<u8> {
        let mut out = vec![flag];
        out.extend_from_slice(&u32::try_from(message.len()).expect("small").to_be_bytes());
        out.extend_from_slice(message);
        out
    }

    /// A body of `chunks`, each a data frame.
    fn body(
        chunks: Vec<Vec<u8>>,
    ) -> impl http_body::Body<Data = Bytes, Error = tonic::codegen::StdError> + Unpin {
        let frames = chunks
            .into_iter()
            .map(|c| Ok::<_, tonic::codegen::StdError>(http_body::Frame::data(Bytes::from(c))));
        http_body_util::StreamBody::new(futures_util::stream::iter(frames.collect::<Vec<_>>()))
    }

    fn read(chunks: Vec<Vec<u8>>, max: usize) -> Result<Option<Bytes>, Status> {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime")
            .block_on(read_message(body(chunks), max))
    }

    #[test]
    fn a_message_is_read_whole_however_its_bytes_are_cut() {
        let whole = framed(0, b"hello");
        assert_eq!(
            read(vec![whole.clone()], 64).expect("read"),
            Some(Bytes::from_static(b"hello"))
        );
        for cut in 1..whole.len() {
            let chunks = vec![whole[..cut].to_vec(), whole[cut..].to_vec()];
            assert_eq!(
                read(chunks, 64).expect("read"),
                Some(Bytes::from_static(b"hello")),
                "cut at {cut}"
            );
        }
        // An empty message is a message (every field at its default).
        assert_eq!(
            read(vec![framed(0, b"")], 64).expect("read"),
            Some(Bytes::new())
        );
    }

    #[test]
    fn a_long_prefix_is_refused_unread_and_bad_bodies_are_internal_errors() {
        let mut long = framed(0, &[0; 100]);
        long.truncate(PREFIX + 10);
        assert_eq!(read(vec![long], 64).expect("read"), None);
        assert_eq!(
            read(vec![framed(0, &[0; 64])], 64)
                .expect("read")
                .map(|m| m.len()),
            Some(64)
        );

        let code = |r: Result<Option<Bytes>, Status>| r.expect_err("an error").code();
        assert_eq!(code(read(vec![], 64)), tonic::Code::Internal);
        assert_eq!(
            code(read(vec![framed(0, b"hello")[..6].to_vec()], 64)),
            tonic::Code::Internal
        );
        assert_eq!(code(read(vec![framed(1, b"x")], 64)), tonic::Code::Internal);
        assert_eq!(code(read(vec![framed(7, b"x")], 64)), tonic::Code::Internal);
        // A second message that does not decode (a truncated field).
        let mut two = framed(0, b"");
        two.extend(framed(0, &[0x0a, 0x05]));
        assert_eq!(code(read(vec![two], 64)), tonic::Code::Internal);
    }
}
