//! A request body read in part before the check, for rules that key on
//! it or estimate from it (`tollgate_http::request_body`): at most
//! `[proxy] request_body_limit` bytes, fewer when what the rules need is
//! settled sooner. The frames read are kept, as they came, and go
//! upstream first, then the rest of the body: the upstream gets the
//! body unchanged, in the same framing (a `Content-Length` is kept, a
//! chunked body stays chunked; see [`ClientBody::size_hint`]).
//!
//! A client that sends nothing of its body for `response_timeout` while
//! it is read here is answered 408; a body that cannot be read (malformed
//! chunks, the client went away) 400, as a body failing while forwarded
//! is. Neither takes any quota: nothing was checked yet.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, StatusCode, header};
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt as _;
use hyper::body::Incoming;
use tollgate_http::request_body::{BodyFacts, BodyPlan};

/// A client's request body, with the frames already read in front.
#[derive(Debug)]
pub struct ClientBody {
    read: VecDeque<Frame<Bytes>>,
    /// Data bytes in `read`.
    read_len: u64,
    rest: Incoming,
    /// Whether the whole body's length was known when it came (a
    /// `Content-Length`): a chunked body must not turn into a sized one
    /// because its end was read here.
    sized: bool,
}

impl ClientBody {
    /// A body nothing of which was read.
    #[must_use]
    pub fn new(rest: Incoming) -> Self {
        Self {
            read: VecDeque::new(),
            read_len: 0,
            sized: rest.size_hint().exact().is_some(),
            rest,
        }
    }
}

impl Body for ClientBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = &mut *self;
        if let Some(frame) = this.read.pop_front() {
            if let Some(data) = frame.data_ref() {
                this.read_len -= data.len() as u64;
            }
            return Poll::Ready(Some(Ok(frame)));
        }
        Pin::new(&mut this.rest).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.read.is_empty() && self.rest.is_end_stream()
    }

    /// The frames read plus the rest; exact only for a body that came
    /// with its length.
    fn size_hint(&self) -> SizeHint {
        let rest = self.rest.size_hint();
        match rest.exact() {
            Some(n) if self.sized => SizeHint::with_exact(self.read_len + n),
            _ => {
                let mut hint = SizeHint::new();
                hint.set_lower(self.read_len + rest.lower());
                hint
            }
        }
    }
}

/// Reads `req`'s body until `plan` has what it needs (at most `limit`
/// bytes scanned; `idle` the longest wait for a piece of it), and gives
/// the request back with the body whole again, and what it said.
///
/// # Errors
/// The answer instead: 408 for a body that stalled, 400 for one that
/// failed.
pub(super) async fn read(
    req: Request<Incoming>,
    plan: &Arc<BodyPlan>,
    limit: usize,
    idle: Duration,
) -> Result<(Request<ClientBody>, BodyFacts), (StatusCode, &'static str)> {
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse().ok());
    // A body with a content coding (gzip, say) is not the JSON the rules
    // read, and its size is not its prompt's: it is read as no body.
    let encoded = tollgate_http::request_body::is_encoded(req.headers());
    let (parts, mut rest) = req.into_parts();
    let sized = rest.size_hint().exact().is_some();
    let (mut read, mut read_len) = (VecDeque::new(), 0);
    let mut scan = plan.start(limit, if encoded { Some(0) } else { declared });
    if rest.is_end_stream() || encoded {
        scan.finish();
    }
    while scan.wants_more() {
        let frame = match tokio::time::timeout(idle, rest.frame()).await {
            Err(_) => {
                return Err((
                    StatusCode::REQUEST_TIMEOUT,
                    "The request body stalled before its first part was read.",
                ));
            }
            Ok(None) => {
                scan.finish();
                break;
            }
            Ok(Some(Err(_))) => {
                return Err((
                    StatusCode::BAD_REQUEST,
                    "The request body could not be read to its end.",
                ));
            }
            Ok(Some(Ok(frame))) => frame,
        };
        if let Some(data) = frame.data_ref() {
            scan.push(data);
            read_len += data.len() as u64;
        }
        read.push_back(frame);
        if rest.is_end_stream() {
            scan.finish();
        }
    }
    let body = ClientBody {
        read,
        read_len,
        rest,
        sized,
    };
    Ok((Request::from_parts(parts, body), scan.facts()))
}
