//! `envoy.service.rate_limit_quota.v3.RateLimitQuotaService`: each
//! `StreamRateLimitQuotas` stream served by its own task, which answers
//! every report through the gate of the config serving at that report
//! (docs/rlqs.md). Streams are capped; a stream that sends what it must
//! not, or does not read its answers, is ended alone.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_server::{
    RateLimitQuotaService, RateLimitQuotaServiceServer,
};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{
    RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use futures_util::Stream;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use super::holders::Holders;
use super::metric;
use super::stream::{Env, StreamState};
use crate::config::RlqsConfig;
use crate::gate::Gate;

/// The gRPC service name.
pub const SERVICE_NAME: &str = "envoy.service.rate_limit_quota.v3.RateLimitQuotaService";
/// Its one method's path.
pub const STREAM_PATH: &str =
    "/envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas";
/// The largest report read: a stream sending a larger one is ended
/// `RESOURCE_EXHAUSTED` (a report of 10 000 buckets of short ids is far
/// below it).
pub const MAX_REPORT_BYTES: usize = 1024 * 1024;
/// Answers queued for a stream that has not read them: Envoy reads each
/// as it comes, so a stream this far behind is not reading, and is cut.
const QUEUED_ANSWERS: usize = 4;

/// The gate and `[rlqs]` table serving now (`None` once a reload removed
/// the table: streams end at their next report).
pub type RlqsSource = Arc<dyn Fn() -> (Arc<Gate>, Option<RlqsConfig>) + Send + Sync>;

/// The service: cheap to clone (one reference count).
#[derive(Clone)]
pub struct RlqsService(Arc<Inner>);

struct Inner {
    source: RlqsSource,
    /// Turns true when the server stops: every stream ends `UNAVAILABLE`
    /// (Envoy reconnects, to another replica), or the connection could
    /// not drain.
    stop: watch::Receiver<bool>,
    holders: Holders,
    open: AtomicU64,
}

impl std::fmt::Debug for RlqsService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RlqsService")
            .field("open", &self.0.open.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl RlqsService {
    /// The service over what `source` gives at each report, its streams
    /// ended when `stop` turns true.
    #[must_use]
    pub fn new(source: RlqsSource, stop: watch::Receiver<bool>) -> Self {
        for reason in metric::CUT_REASONS {
            ::metrics::counter!(metric::STREAMS_CUT, "reason" => *reason).increment(0);
        }
        ::metrics::gauge!(metric::STREAMS).set(0.0);
        ::metrics::gauge!(metric::BUCKETS).set(0.0);
        ::metrics::counter!(metric::REPORTS).increment(0);
        Self(Arc::new(Inner {
            source,
            stop,
            holders: Holders::default(),
            open: AtomicU64::new(0),
        }))
    }

    /// The tonic server of the service, reading reports up to
    /// [`MAX_REPORT_BYTES`].
    #[must_use]
    pub fn server(self) -> RateLimitQuotaServiceServer<Self> {
        RateLimitQuotaServiceServer::new(self).max_decoding_message_size(MAX_REPORT_BYTES)
    }
}

/// Counts a stream open while it lives.
struct Opened(Arc<Inner>);

impl Drop for Opened {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
        ::metrics::gauge!(metric::STREAMS).decrement(1.0);
    }
}

/// A stream's answers.
type Answers = Pin<Box<dyn Stream<Item = Result<RateLimitQuotaResponse, Status>> + Send>>;

#[tonic::async_trait]
impl RateLimitQuotaService for RlqsService {
    type StreamRateLimitQuotasStream = Answers;

    async fn stream_rate_limit_quotas(
        &self,
        request: Request<Streaming<RateLimitQuotaUsageReports>>,
    ) -> Result<Response<Answers>, Status> {
        let inner = &self.0;
        let (_, config) = (inner.source)();
        let Some(config) = config else {
            return Err(Status::unimplemented(
                "the config has no [rlqs] table: the rate limit quota service is off",
            ));
        };
        let open = inner.open.fetch_add(1, Ordering::Relaxed) + 1;
        ::metrics::gauge!(metric::STREAMS).increment(1.0);
        let opened = Opened(Arc::clone(inner));
        if open > config.max_streams {
            cut("too_many_streams");
            return Err(Status::resource_exhausted(format!(
                "{} RLQS streams open already ([rlqs] max_streams)",
                config.max_streams
            )));
        }
        let (tx, rx) = mpsc::channel(QUEUED_ANSWERS);
        tokio::spawn(serve_stream(opened, request.into_inner(), tx));
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

fn cut(reason: &'static str) {
    ::metrics::counter!(metric::STREAMS_CUT, "reason" => reason).increment(1);
}

/// Reads the stream's reports until it ends, answering each; ends it with
/// the status that says why on a report it must not take.
async fn serve_stream(
    opened: Opened,
    mut reports: Streaming<RateLimitQuotaUsageReports>,
    tx: mpsc::Sender<Result<RateLimitQuotaResponse, Status>>,
) {
    let inner = &opened.0;
    let mut state = StreamState::default();
    let mut stop = inner.stop.clone();
    let end = loop {
        let next = tokio::select! {
            next = reports.message() => next,
            _ = stop.wait_for(|stopping| *stopping) => {
                break Some(Status::unavailable("tollgate is stopping"));
            }
        };
        let report = match next {
            Ok(Some(r)) => r,
            Ok(None) => break None,
            Err(status) => {
                let reason = if status.code() == tonic::Code::OutOfRange
                    || status.code() == tonic::Code::ResourceExhausted
                {
                    "too_large"
                } else {
                    "bad_report"
                };
                cut(reason);
                // tonic says OUT_OF_RANGE for a message over the decoding
                // limit (a size bound: RESOURCE_EXHAUSTED, as the other
                // caps) and INTERNAL for bytes that are no message (the
                // client's fault: INVALID_ARGUMENT, docs/rlqs.md "Bounds").
                let message = status.message().to_owned();
                break Some(match status.code() {
                    tonic::Code::OutOfRange => Status::resource_exhausted(message),
                    tonic::Code::Internal => Status::invalid_argument(message),
                    _ => status,
                });
            }
        };
        ::metrics::counter!(metric::REPORTS).increment(1);
        let (gate, config) = (inner.source)();
        let Some(config) = config else {
            break Some(Status::unavailable(
                "the config no longer has an [rlqs] table: the service is off",
            ));
        };
        let env = Env {
            gate: &gate,
            config: &config,
            holders: &inner.holders,
        };
        let before = state.len();
        let answer = state.answer(report, &env).await;
        ::metrics::gauge!(metric::BUCKETS).increment(state.len() as f64 - before as f64);
        match answer {
            Ok(response) => {
                // One slot stays free for the status that ends the stream.
                if tx.capacity() <= 1 {
                    cut("not_reading");
                    break Some(Status::resource_exhausted(
                        "the stream has not read its last answers; ended",
                    ));
                }
                if tx.send(Ok(response)).await.is_err() {
                    break None;
                }
            }
            Err(status) => {
                cut(if status.code() == tonic::Code::ResourceExhausted {
                    "too_many_buckets"
                } else {
                    "bad_report"
                });
                break Some(status);
            }
        }
    };
    ::metrics::gauge!(metric::BUCKETS).decrement(state.len() as f64);
    state.close(&inner.holders);
    if let Some(status) = end {
        tracing::debug!("RLQS: stream ended: {}", status.message());
        let _ = tx.try_send(Err(status));
    }
}
