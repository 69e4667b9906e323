//! The gRPC port's time bounds: [`DeadlineBody`], a request body that
//! fails when it has not ended within its time (every service of the port:
//! the rate limit service and health), over [`RecvBody`] (an HTTP/2
//! stream's request body); and [`CallDeadline`], the client's
//! `grpc-timeout` over a whole call.
//!
//! The body bound is only the wait for the request, so a slow store is
//! answered by the failure policy, never cut off by it. Neither timer costs
//! anything for a call that needs no waiting (Envoy's calls, in one frame,
//! decided by the memory store): each is armed on the first poll that has
//! to wait.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use std::future::Future;
use std::time::Instant;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

pin_project_lite::pin_project! {
    /// A request body that fails with `DEADLINE_EXCEEDED` once it has kept
    /// its reader waiting for its timeout (counted from the first read that
    /// waited, which for a call is when it starts).
    pub struct DeadlineBody<B> {
        #[pin]
        inner: B,
        timeout: Duration,
        // Boxed: armed for the rare body that is not all there at once.
        sleep: Option<Pin<Box<tokio::time::Sleep>>>,
    }
}

impl<B> DeadlineBody<B> {
    /// `inner`, failing once it has kept its reader waiting for `timeout`.
    pub fn new(inner: B, timeout: Duration) -> Self {
        Self {
            inner,
            timeout,
            sleep: None,
        }
    }
}

impl<B> std::fmt::Debug for DeadlineBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeadlineBody")
            .field("timeout", &self.timeout)
            .field("armed", &self.sleep.is_some())
            .finish_non_exhaustive()
    }
}

impl<B> Body for DeadlineBody<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<tonic::codegen::StdError>,
{
    type Data = Bytes;
    type Error = tonic::codegen::StdError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.project();
        if let Poll::Ready(frame) = this.inner.poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        let timeout = *this.timeout;
        let sleep = this
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(tonic::Status::deadline_exceeded(
                format!("the request did not arrive whole within {timeout:?}"),
            ))))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// An HTTP/2 stream's request body as an [`http_body::Body`]: its data
/// (each chunk's flow-control capacity handed back as it is read, so the
/// client may send more), then its trailers.
#[derive(Debug)]
pub struct RecvBody {
    inner: h2::RecvStream,
    data_done: bool,
}

impl RecvBody {
    /// The body of `inner`.
    #[must_use]
    pub fn new(inner: h2::RecvStream) -> Self {
        Self {
            inner,
            data_done: false,
        }
    }
}

impl Body for RecvBody {
    type Data = Bytes;
    type Error = h2::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if !self.data_done {
            match self.inner.poll_data(cx) {
                Poll::Ready(Some(Ok(data))) => {
                    let _ = self.inner.flow_control().release_capacity(data.len());
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(None) => self.data_done = true,
                Poll::Pending => return Poll::Pending,
            }
        }
        match self.inner.poll_trailers(cx) {
            Poll::Ready(Ok(Some(trailers))) => Poll::Ready(Some(Ok(Frame::trailers(trailers)))),
            Poll::Ready(Ok(None)) => Poll::Ready(None),
            Poll::Ready(Err(e)) => Poll::Ready(Some(Err(e))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }
}

/// The client's `grpc-timeout` for a call: past it the call is answered
/// `CANCELLED` ("Timeout expired"), as tonic's server answered it. A header
/// that does not parse is ignored, as tonic ignored it.
#[derive(Debug, Clone, Copy)]
pub struct CallDeadline(Option<Instant>);

impl CallDeadline {
    /// The deadline `headers` set, counted from now.
    #[must_use]
    pub fn from_headers(headers: &http::HeaderMap) -> Self {
        let timeout = headers
            .get("grpc-timeout")
            .and_then(|v| parse_grpc_timeout(v.as_bytes()));
        Self(timeout.map(|t| Instant::now() + t))
    }

    /// `call`, cut at the deadline (`CANCELLED`, as its error `E`): the
    /// timer is armed only if `call` has to wait.
    pub async fn bound<T, E: From<tonic::Status>>(
        self,
        call: impl Future<Output = Result<T, E>>,
    ) -> Result<T, E> {
        let mut call = std::pin::pin!(call);
        if let Some(polled) = std::future::poll_fn(|cx| {
            Poll::Ready(match call.as_mut().poll(cx) {
                Poll::Ready(r) => Some(r),
                Poll::Pending => None,
            })
        })
        .await
        {
            return polled;
        }
        let Some(deadline) = self.0 else {
            return call.await;
        };
        tokio::select! {
            biased;
            done = &mut call => done,
            () = tokio::time::sleep_until(deadline.into()) => {
                Err(tonic::Status::cancelled("Timeout expired").into())
            }
        }
    }
}

/// A `grpc-timeout` value: at most 8 digits and a unit (H, M, S, m, u, n).
fn parse_grpc_timeout(v: &[u8]) -> Option<Duration> {
    let (&unit, digits) = v.split_last()?;
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some(match unit {
        b'H' => Duration::from_secs(n * 3600),
        b'M' => Duration::from_secs(n * 60),
        b'S' => Duration::from_secs(n),
        b'm' => Duration::from_millis(n),
        b'u' => Duration::from_micros(n),
        b'n' => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeout_values_parse_as_the_grpc_spec_writes_them() {
        assert_eq!(parse_grpc_timeout(b"20m"), Some(Duration::from_millis(20)));
        assert_eq!(parse_grpc_timeout(b"1H"), Some(Duration::from_secs(3600)));
        assert_eq!(
            parse_grpc_timeout(b"99999999n"),
            Some(Duration::from_nanos(99_999_999))
        );
        for bad in [&b""[..], b"m", b"123456789S", b"1x", b"-1S", b"1.5S"] {
            assert_eq!(parse_grpc_timeout(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_call_past_its_grpc_timeout_is_cancelled_and_one_within_it_answers() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime");
        let mut headers = http::HeaderMap::new();
        headers.insert("grpc-timeout", http::HeaderValue::from_static("20m"));
        let slow = async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            Ok::<_, tonic::Status>(1)
        };
        let status = rt
            .block_on(CallDeadline::from_headers(&headers).bound(slow))
            .expect_err("cut");
        assert_eq!(status.code(), tonic::Code::Cancelled);
        // A minute's bound for a call of 1 ms: no pause of a loaded
        // machine between reading the header and the call's first poll
        // makes the bound come first (20 ms could).
        headers.insert("grpc-timeout", http::HeaderValue::from_static("1M"));
        let quick = async {
            tokio::time::sleep(Duration::from_millis(1)).await;
            Ok::<_, tonic::Status>(2)
        };
        assert_eq!(
            rt.block_on(CallDeadline::from_headers(&headers).bound(quick))
                .ok(),
            Some(2)
        );
        // No header: no bound.
        let none = CallDeadline::from_headers(&http::HeaderMap::new());
        assert_eq!(
            rt.block_on(none.bound(async { Ok::<_, tonic::Status>(3) }))
                .ok(),
            Some(3)
        );
    }
}
