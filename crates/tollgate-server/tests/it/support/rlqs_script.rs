//! A scripted rate limit quota service (RLQS) for pinning what a real
//! Envoy sends and does: it records every usage report with the time it
//! arrived and the stream it came on, answers nothing by itself, and lets
//! the test push a response on a stream or drop a stream. Tollgate's own
//! server would answer for it; the quirks of Envoy 1.40 it relies on are
//! pinned against this script instead (`rlqs_envoy_quirks`), so a change
//! of Envoy shows as Envoy's, not as tollgate's.
//!
//! * [`RlqsScript::start`] binds `127.0.0.1:0` in its own thread and runtime;
//! * [`RlqsScript::reports`] and [`RlqsScript::wait`] read what arrived;
//! * [`RlqsScript::push`] and [`RlqsScript::drop_stream`] act on a stream;
//! * [`bucket`], [`blanket`], [`token_bucket`], [`requests_per_second`]
//!   and [`abandon`] build the actions a test pushes.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;

use super::loopback::LoopbackServer;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::r#type::v3::rate_limit_strategy::{
    BlanketRule, RequestsPerTimeUnit, Strategy,
};
use envoy_types::pb::envoy::r#type::v3::{RateLimitStrategy, RateLimitUnit, TokenBucket};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::BucketAction;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::{
    AbandonAction, BucketAction as Action, QuotaAssignmentAction,
};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_server::{
    RateLimitQuotaService, RateLimitQuotaServiceServer,
};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{
    BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use envoy_types::pb::google::protobuf::{Duration as ProtoDuration, UInt32Value};
use tokio_stream::Stream;
use tokio::sync::mpsc;

/// How long [`RlqsScript::wait`] waits: several 5 s report periods on a
/// busy machine.
const WAIT: Duration = Duration::from_secs(60);

/// A bucket id as a sorted map, to compare and print.
pub type Bucket = BTreeMap<String, String>;

/// One usage report as it arrived.
#[derive(Debug, Clone)]
pub struct Report {
    /// The stream it came on: 0 for the first stream opened, then 1, ...
    pub stream: usize,
    /// When it arrived.
    pub at: Instant,
    /// The message.
    pub message: RateLimitQuotaUsageReports,
}

impl Report {
    /// The buckets it reports, in its order.
    pub fn buckets(&self) -> Vec<Bucket> {
        self.message
            .bucket_quota_usages
            .iter()
            .map(|u| sorted(u.bucket_id.as_ref()))
            .collect()
    }

    /// Its usage of `bucket`, if it reports it.
    pub fn usage(&self, bucket: &Bucket) -> Option<&BucketQuotaUsage> {
        self.message
            .bucket_quota_usages
            .iter()
            .find(|u| sorted(u.bucket_id.as_ref()) == *bucket)
    }

    /// Whether it is the report of a bucket Envoy has just made: that
    /// bucket alone, with `time_elapsed` 0.
    pub fn is_first_sighting(&self) -> bool {
        match self.message.bucket_quota_usages.as_slice() {
            [only] => only
                .time_elapsed
                .is_none_or(|d| d.seconds == 0 && d.nanos == 0),
            _ => false,
        }
    }
}

fn sorted(id: Option<&BucketId>) -> Bucket {
    id.map(|id| {
        id.bucket
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    })
    .unwrap_or_default()
}

type Reply = Result<RateLimitQuotaResponse, tonic::Status>;

/// What the service shares with the test.
#[derive(Default)]
struct State {
    reports: Vec<Report>,
    /// Per stream, the sender of its responses; `None` once dropped.
    streams: Vec<Option<Open>>,
}

struct Open {
    replies: mpsc::UnboundedSender<Reply>,
    reader: tokio::task::AbortHandle,
}

struct Script(Arc<Mutex<State>>);

type Replies = Pin<Box<dyn Stream<Item = Reply> + Send>>;

#[tonic::async_trait]
impl RateLimitQuotaService for Script {
    type StreamRateLimitQuotasStream = Replies;

    async fn stream_rate_limit_quotas(
        &self,
        request: tonic::Request<tonic::Streaming<RateLimitQuotaUsageReports>>,
    ) -> Result<tonic::Response<Replies>, tonic::Status> {
        let mut inbound = request.into_inner();
        let (tx, rx) = mpsc::unbounded_channel::<Reply>();
        let state = Arc::clone(&self.0);
        // The slot is taken before the reader runs, so a report never
        // names a stream the state does not hold yet.
        let mut held = self.0.lock().expect("script lock");
        let stream = held.streams.len();
        let reader = tokio::spawn(async move {
            while let Ok(Some(message)) = inbound.message().await {
                state.lock().expect("script lock").reports.push(Report {
                    stream,
                    at: Instant::now(),
                    message,
                });
            }
        });
        held.streams.push(Some(Open {
            replies: tx,
            reader: reader.abort_handle(),
        }));
        drop(held);
        let replies = tokio_stream::wrappers::UnboundedReceiverStream::new(rx);
        Ok(tonic::Response::new(Box::pin(replies)))
    }
}

/// The scripted service on a free loopback port, in its own thread and
/// runtime; stopped on drop.
pub struct RlqsScript {
    /// Its gRPC address.
    pub addr: SocketAddr,
    state: Arc<Mutex<State>>,
    _server: LoopbackServer,
}

impl RlqsScript {
    /// Starts it.
    pub fn start() -> RlqsScript {
        let state = Arc::new(Mutex::new(State::default()));
        let service = RateLimitQuotaServiceServer::new(Script(Arc::clone(&state)));
        let server = LoopbackServer::grpc(tonic::transport::Server::builder().add_service(service));
        let addr = server.addr;
        RlqsScript {
            addr,
            state,
            _server: server,
        }
    }

    /// Every report so far, in the order they arrived.
    pub fn reports(&self) -> Vec<Report> {
        self.state.lock().expect("script lock").reports.clone()
    }

    /// How many streams Envoy has opened so far.
    pub fn streams(&self) -> usize {
        self.state.lock().expect("script lock").streams.len()
    }

    /// Polls the reports until `found` returns something (up to a minute)
    /// and returns it; panics naming `what` with every report so far.
    pub fn wait<T>(&self, what: &str, mut found: impl FnMut(&[Report]) -> Option<T>) -> T {
        let deadline = Instant::now() + WAIT;
        loop {
            let reports = self.reports();
            if let Some(t) = found(&reports) {
                return t;
            }
            assert!(
                Instant::now() < deadline,
                "no {what} within {WAIT:?}; the reports:\n{reports:#?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits for the `n`th report (counting from 0) and returns it.
    pub fn nth(&self, n: usize) -> Report {
        self.wait(&format!("report #{n}"), |r| r.get(n).cloned())
    }

    /// Sends a response made of `actions` on `stream`.
    pub fn push(&self, stream: usize, actions: Vec<BucketAction>) {
        let held = self.state.lock().expect("script lock");
        let open = held
            .streams
            .get(stream)
            .and_then(Option::as_ref)
            .unwrap_or_else(|| panic!("stream {stream} is not open"));
        open.replies
            .send(Ok(RateLimitQuotaResponse {
                bucket_action: actions,
            }))
            .expect("the stream's response channel");
    }

    /// Ends `stream` from the server's side (status CANCELLED), and stops
    /// reading it: what Envoy sends on it afterwards is not recorded.
    pub fn drop_stream(&self, stream: usize) {
        let mut held = self.state.lock().expect("script lock");
        let open = held
            .streams
            .get_mut(stream)
            .and_then(Option::take)
            .unwrap_or_else(|| panic!("stream {stream} is not open"));
        let _ = open
            .replies
            .send(Err(tonic::Status::cancelled("dropped by the test")));
        open.reader.abort();
    }
}

/// A bucket id from `(key, value)` pairs.
pub fn bucket(pairs: &[(&str, &str)]) -> Bucket {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn id(b: &Bucket) -> Option<BucketId> {
    Some(BucketId {
        bucket: b
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect::<HashMap<_, _>>(),
    })
}

/// A duration of `seconds` and `nanos`.
pub fn duration(seconds: i64, nanos: i32) -> ProtoDuration {
    ProtoDuration { seconds, nanos }
}

fn assign(b: &Bucket, strategy: Strategy, ttl: Option<ProtoDuration>) -> BucketAction {
    BucketAction {
        bucket_id: id(b),
        bucket_action: Some(Action::QuotaAssignmentAction(QuotaAssignmentAction {
            assignment_time_to_live: ttl,
            rate_limit_strategy: Some(RateLimitStrategy {
                strategy: Some(strategy),
            }),
        })),
    }
}

/// `blanket_rule` (`deny`: DENY_ALL, else ALLOW_ALL) for `b`, with `ttl`
/// (`None`: unset).
pub fn blanket(b: &Bucket, deny: bool, ttl: Option<ProtoDuration>) -> BucketAction {
    let rule = if deny {
        BlanketRule::DenyAll
    } else {
        BlanketRule::AllowAll
    };
    assign(b, Strategy::BlanketRule(rule.into()), ttl)
}

/// A `token_bucket` of `max_tokens`, `tokens_per_fill` (`None`: unset)
/// every `fill_interval`, for `b`, with `ttl`.
pub fn token_bucket(
    b: &Bucket,
    max_tokens: u32,
    tokens_per_fill: Option<u32>,
    fill_interval: ProtoDuration,
    ttl: Option<ProtoDuration>,
) -> BucketAction {
    let bucket = TokenBucket {
        max_tokens,
        tokens_per_fill: tokens_per_fill.map(|value| UInt32Value { value }),
        fill_interval: Some(fill_interval),
    };
    assign(b, Strategy::TokenBucket(bucket), ttl)
}

/// `requests_per_time_unit` of `n` per second for `b`, with `ttl`.
pub fn requests_per_second(b: &Bucket, n: u64, ttl: Option<ProtoDuration>) -> BucketAction {
    let rate = RequestsPerTimeUnit {
        requests_per_time_unit: n,
        time_unit: RateLimitUnit::Second.into(),
    };
    assign(b, Strategy::RequestsPerTimeUnit(rate), ttl)
}

/// `abandon_action` for `b`.
pub fn abandon(b: &Bucket) -> BucketAction {
    BucketAction {
        bucket_id: id(b),
        bucket_action: Some(Action::AbandonAction(AbandonAction {})),
    }
}
