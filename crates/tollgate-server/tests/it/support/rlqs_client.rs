//! A client of the real binary's rate limit quota service (RLQS) that
//! speaks as Envoy 1.40 does (docs/rlqs.md): one bidirectional
//! `StreamRateLimitQuotas` per client, `domain` on every message, a new
//! bucket's first report alone with `time_elapsed` 0, then reports of
//! every bucket at once. [`RlqsClient`] is a tonic client; [`RawRlqs`]
//! writes HTTP/2 frames of its own for what tonic will not send (bytes
//! that are not a message, a length prefix that lies) and reads without
//! giving the server window back (a client that never reads).

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use envoy_types::pb::envoy::r#type::v3::rate_limit_strategy::{BlanketRule, Strategy};
use envoy_types::pb::envoy::r#type::v3::{RateLimitStrategy, TokenBucket};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::BucketAction;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::{
    BucketAction as Action, QuotaAssignmentAction,
};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_client::RateLimitQuotaServiceClient;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{
    BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use envoy_types::pb::google::protobuf::Duration as PbDuration;
use prost::Message;
use tokio::sync::mpsc;
use tonic::Status;

/// The method's HTTP/2 path.
pub const METHOD: &str =
    "/envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas";

/// How long a test waits for an answer the server owes: generous, since
/// a loaded machine may pause any process for seconds; a server that
/// never answers still fails.
pub const ANSWER_WITHIN: Duration = Duration::from_secs(30);

/// A bucket id of `entries`.
pub fn bucket(entries: &[(&str, &str)]) -> BucketId {
    BucketId {
        bucket: entries
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    }
}

/// One bucket's usage in a report: (bucket, allowed, denied, elapsed
/// seconds), the deltas since its last report as Envoy sends them.
pub type Usage<'a> = (&'a BucketId, u64, u64, i64);

/// The message Envoy sends for `usages` of `domain`.
pub fn reports(domain: &str, usages: &[Usage<'_>]) -> RateLimitQuotaUsageReports {
    RateLimitQuotaUsageReports {
        domain: domain.to_owned(),
        bucket_quota_usages: usages
            .iter()
            .map(|(id, allowed, denied, secs)| BucketQuotaUsage {
                bucket_id: Some((*id).clone()),
                time_elapsed: Some(PbDuration {
                    seconds: *secs,
                    nanos: 0,
                }),
                num_requests_allowed: *allowed,
                num_requests_denied: *denied,
            })
            .collect(),
    }
}

/// What an assignment tells Envoy to do with a bucket, flattened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Assigned {
    /// A token bucket: `max_tokens`, `tokens_per_fill` (None when unset),
    /// `fill_interval` (seconds, nanos).
    Tokens {
        max: u32,
        per_fill: Option<u32>,
        fill: (i64, i32),
    },
    /// `blanket_rule: ALLOW_ALL`.
    AllowAll,
    /// `blanket_rule: DENY_ALL`.
    DenyAll,
    /// `abandon_action`.
    Abandon,
    /// Anything else (no strategy, `requests_per_time_unit`, ...): Envoy
    /// 1.40 would not apply it.
    Other(String),
}

/// One bucket's action: what was assigned and its time to live
/// (seconds, nanos), None for an abandon or an unset TTL.
#[derive(Debug, Clone)]
pub struct Answer {
    pub assigned: Assigned,
    pub ttl: Option<(i64, i32)>,
}

impl Answer {
    /// The token bucket's `max_tokens`, or 0 for anything else.
    pub fn tokens(&self) -> u32 {
        match self.assigned {
            Assigned::Tokens { max, .. } => max,
            _ => 0,
        }
    }
}

/// Flattens `action`.
pub fn answer(action: &BucketAction) -> Answer {
    match &action.bucket_action {
        Some(Action::AbandonAction(_)) => Answer {
            assigned: Assigned::Abandon,
            ttl: None,
        },
        Some(Action::QuotaAssignmentAction(QuotaAssignmentAction {
            assignment_time_to_live,
            rate_limit_strategy,
        })) => Answer {
            assigned: strategy(rate_limit_strategy.as_ref()),
            ttl: assignment_time_to_live.map(|d| (d.seconds, d.nanos)),
        },
        None => Answer {
            assigned: Assigned::Other("no action".to_owned()),
            ttl: None,
        },
    }
}

fn strategy(s: Option<&RateLimitStrategy>) -> Assigned {
    match s.and_then(|s| s.strategy.as_ref()) {
        Some(Strategy::BlanketRule(r)) if *r == BlanketRule::AllowAll as i32 => Assigned::AllowAll,
        Some(Strategy::BlanketRule(r)) if *r == BlanketRule::DenyAll as i32 => Assigned::DenyAll,
        Some(Strategy::TokenBucket(TokenBucket {
            max_tokens,
            tokens_per_fill,
            fill_interval,
        })) => Assigned::Tokens {
            max: *max_tokens,
            per_fill: tokens_per_fill.map(|v| v.value),
            fill: fill_interval.map_or((0, 0), |d| (d.seconds, d.nanos)),
        },
        other => Assigned::Other(format!("{other:?}")),
    }
}

/// Every action `response` holds for bucket `id` (bucket ids compare as
/// maps: order does not matter), flattened, in order: Envoy applies them
/// in order, so the last is what it enforces.
pub fn actions_for(response: &RateLimitQuotaResponse, id: &BucketId) -> Vec<Answer> {
    response
        .bucket_action
        .iter()
        .filter(|a| a.bucket_id.as_ref() == Some(id))
        .map(answer)
        .collect()
}

/// The action for bucket `id` that Envoy ends up enforcing (the last of
/// its actions in `response`); panics naming what `response` holds when
/// there is none.
pub fn action_for(response: &RateLimitQuotaResponse, id: &BucketId) -> Answer {
    actions_for(response, id)
        .pop()
        .unwrap_or_else(|| panic!("no action for {:?} in {response:?}", id.bucket))
}

/// The distinct buckets `response` names.
pub fn buckets_named(response: &RateLimitQuotaResponse) -> Vec<Vec<(String, String)>> {
    let mut seen: Vec<_> = response
        .bucket_action
        .iter()
        .map(|a| sorted(a.bucket_id.as_ref().expect("bucket id")))
        .collect();
    seen.sort();
    seen.dedup();
    seen
}

/// A stream's end as the client saw it: the status the server sent (OK
/// included), or the one tonic made of a reset or a lost connection (its
/// message then names the h2 error).
#[derive(Debug, Clone)]
pub struct Ended {
    pub code: tonic::Code,
    pub message: String,
}

/// One RLQS stream over tonic, replaying Envoy's messages.
pub struct RlqsClient {
    domain: String,
    tx: Option<mpsc::UnboundedSender<RateLimitQuotaUsageReports>>,
    rx: mpsc::UnboundedReceiver<Result<RateLimitQuotaResponse, Status>>,
}

impl RlqsClient {
    /// Opens a stream to the gRPC port at `addr` for `domain` (each client
    /// its own connection, as each Envoy process has its own). The call
    /// runs in a task: the server may send its response headers only once
    /// the first report is in.
    pub async fn connect(addr: SocketAddr, domain: &str) -> RlqsClient {
        let client = RateLimitQuotaServiceClient::connect(format!("http://{addr}"))
            .await
            .expect("connect to the gRPC port");
        RlqsClient::on(client, domain)
    }

    /// A stream on an existing `client` (its connection shared).
    pub fn on(
        mut client: RateLimitQuotaServiceClient<tonic::transport::Channel>,
        domain: &str,
    ) -> RlqsClient {
        let (tx, reports) = mpsc::unbounded_channel::<RateLimitQuotaUsageReports>();
        let (answers, rx) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let outbound = tokio_stream::wrappers::UnboundedReceiverStream::new(reports);
            let mut inbound = match client.stream_rate_limit_quotas(outbound).await {
                Ok(r) => r.into_inner(),
                Err(status) => {
                    let _ = answers.send(Err(status));
                    return;
                }
            };
            loop {
                match inbound.message().await {
                    Ok(Some(m)) => {
                        if answers.send(Ok(m)).is_err() {
                            return;
                        }
                    }
                    Ok(None) => {
                        let _ = answers.send(Err(Status::ok("stream ended")));
                        return;
                    }
                    Err(status) => {
                        let _ = answers.send(Err(status));
                        return;
                    }
                }
            }
        });
        RlqsClient {
            domain: domain.to_owned(),
            tx: Some(tx),
            rx,
        }
    }

    /// Sends one message reporting `usages`, `domain` set (as 1.40 does on
    /// every message).
    pub fn report(&self, usages: &[Usage<'_>]) {
        self.send(reports(&self.domain, usages));
    }

    /// Sends `message` as it is.
    pub fn send(&self, message: RateLimitQuotaUsageReports) {
        // A stream the server cut no longer takes messages: what the
        // server sent says so, in `next_response`.
        let _ = self.tx.as_ref().expect("not finished").send(message);
    }

    /// Ends the client's side of the stream (as Envoy never does).
    pub fn finish(&mut self) {
        self.tx = None;
    }

    /// The next response, or the stream's end; panics if neither comes
    /// within [`ANSWER_WITHIN`].
    pub async fn next(&mut self) -> Result<RateLimitQuotaResponse, Ended> {
        match tokio::time::timeout(ANSWER_WITHIN, self.rx.recv()).await {
            Ok(Some(Ok(m))) => Ok(m),
            Ok(Some(Err(s))) => Err(ended(&s)),
            Ok(None) => Err(ended(&Status::unknown("the call task ended"))),
            Err(_) => panic!("no response nor end within {ANSWER_WITHIN:?}"),
        }
    }

    /// The next response, which must come.
    pub async fn next_response(&mut self) -> RateLimitQuotaResponse {
        self.next()
            .await
            .unwrap_or_else(|e| panic!("the stream ended instead of answering: {e:?}"))
    }

    /// Reports `usages` and returns the response to it.
    pub async fn exchange(&mut self, usages: &[Usage<'_>]) -> RateLimitQuotaResponse {
        self.report(usages);
        self.next_response().await
    }

    /// Reports one bucket and returns the action for it.
    pub async fn one(&mut self, id: &BucketId, allowed: u64, denied: u64, secs: i64) -> Answer {
        let r = self.exchange(&[(id, allowed, denied, secs)]).await;
        action_for(&r, id)
    }

    /// The stream's end, which must come (responses before it skipped).
    pub async fn ended(&mut self) -> Ended {
        loop {
            if let Err(e) = self.next().await {
                return e;
            }
        }
    }
}

fn ended(s: &Status) -> Ended {
    Ended {
        code: s.code(),
        message: s.message().to_owned(),
    }
}

/// A gRPC length-prefixed message.
pub fn grpc_frame(message: &[u8]) -> Bytes {
    let mut out = vec![0];
    out.extend_from_slice(&u32::try_from(message.len()).expect("small").to_be_bytes());
    out.extend_from_slice(message);
    Bytes::from(out)
}

/// An RLQS stream over a raw HTTP/2 connection: bytes sent as given, and
/// the server's window never given back unless asked.
pub struct RawRlqs {
    send: h2::SendStream<Bytes>,
    response: Option<h2::client::ResponseFuture>,
    body: Option<h2::RecvStream>,
    headers: Option<http::HeaderMap>,
}

/// How a raw stream ended: `grpc-status`/`grpc-message` when sent, or
/// the reset's reason.
#[derive(Debug, Clone)]
pub struct RawEnd {
    pub status: Option<String>,
    pub message: Option<String>,
    pub reset: Option<String>,
    /// Bytes of responses received before the end.
    pub received: usize,
}

impl RawRlqs {
    /// Opens the call on a connection of its own (headers sent, body open).
    pub async fn open(addr: SocketAddr) -> RawRlqs {
        let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let (client, conn) = h2::client::handshake(tcp).await.expect("h2 handshake");
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let req = http::Request::builder()
            .method("POST")
            .uri(format!("http://{addr}{METHOD}"))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(())
            .expect("request");
        let mut ready = client.ready().await.expect("h2 ready");
        let (response, send) = ready.send_request(req, false).expect("send request");
        RawRlqs {
            send,
            response: Some(response),
            body: None,
            headers: None,
        }
    }

    /// Sends `bytes` as DATA (not ending the stream); an error once the
    /// server reset it.
    pub fn send_bytes(&mut self, bytes: Bytes) -> Result<(), h2::Error> {
        self.send.send_data(bytes, false)
    }

    /// Sends `message` in a gRPC frame.
    pub fn send_message(&mut self, message: &RateLimitQuotaUsageReports) -> Result<(), h2::Error> {
        self.send_bytes(grpc_frame(&message.encode_to_vec()))
    }

    /// Waits for the response headers; the h2 error when the stream was
    /// reset before them.
    pub async fn headers(&mut self) -> Result<(), String> {
        let Some(response) = self.response.take() else {
            return Ok(());
        };
        match tokio::time::timeout(ANSWER_WITHIN, response).await {
            Ok(Ok(r)) => {
                let (parts, body) = r.into_parts();
                self.headers = Some(parts.headers);
                self.body = Some(body);
                Ok(())
            }
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => panic!("no response headers within {ANSWER_WITHIN:?}"),
        }
    }

    /// Reads to the stream's end; gives the window back only when
    /// `release` (a client that never reads keeps it closed). Panics if
    /// the end is not in within `limit`.
    pub async fn end(mut self, release: bool, limit: Duration) -> RawEnd {
        let read = async {
            let mut end = RawEnd {
                status: None,
                message: None,
                reset: None,
                received: 0,
            };
            if let Err(e) = self.headers().await {
                end.reset = Some(format!("before the headers: {e}"));
                return end;
            }
            if let Some(h) = &self.headers {
                end.status = header(h, "grpc-status");
                end.message = header(h, "grpc-message");
            }
            let mut body = self.body.take().expect("body");
            while let Some(chunk) = body.data().await {
                match chunk {
                    Ok(c) => {
                        end.received += c.len();
                        if release {
                            let _ = body.flow_control().release_capacity(c.len());
                        }
                    }
                    Err(e) => {
                        end.reset = Some(e.to_string());
                        return end;
                    }
                }
            }
            match body.trailers().await {
                Ok(Some(t)) => {
                    end.status = header(&t, "grpc-status").or(end.status);
                    end.message = header(&t, "grpc-message").or(end.message);
                }
                Ok(None) => {}
                Err(e) => end.reset = Some(e.to_string()),
            }
            end
        };
        tokio::time::timeout(limit, read)
            .await
            .unwrap_or_else(|_| panic!("the stream did not end within {limit:?}"))
    }
}

fn header(h: &http::HeaderMap, name: &str) -> Option<String> {
    h.get(name).map(|v| v.to_str().unwrap_or("?").to_owned())
}

/// Bucket ids compared as sorted pairs, for messages that name them.
pub fn sorted(id: &BucketId) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = id
        .bucket
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    v.sort();
    v
}
