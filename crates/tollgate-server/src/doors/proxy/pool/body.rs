//! An upstream response's body ([`LinkedBody`]): it drives its HTTP/1.1
//! connection while polled and gives it back to the pool at its end; a
//! body that stalls fails ([`BodyStalled`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::Body as _;
use hyper::body::{Frame, Incoming, SizeHint};

use super::http1::Link;
use super::idle::LinkPool;

/// An upstream response's body; polling it drives an HTTP/1.1 upstream
/// connection, and the connection goes back to its pool when the body has
/// ended (an HTTP/2 stream needs neither: its connection's task drives it). A
/// body from which nothing arrives for `idle_timeout` fails (its
/// connection closed), so a client is never left waiting on an upstream
/// that stopped half-way; the timer is armed only while the body waits.
#[derive(Debug)]
pub struct LinkedBody {
    inner: Incoming,
    link: Option<(Box<Link>, Arc<LinkPool>)>,
    idle_timeout: Duration,
    stall: Option<Pin<Box<tokio::time::Sleep>>>,
}

/// The upstream sent nothing of a response body for the idle timeout.
#[derive(Debug)]
pub struct BodyStalled(pub Duration);

impl std::fmt::Display for BodyStalled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the upstream sent nothing of the response body for {:?}",
            self.0
        )
    }
}

impl std::error::Error for BodyStalled {}

impl LinkedBody {
    /// `inner`, streaming from `link` (HTTP/1.1: the connection goes back
    /// to its pool at the end) or from an HTTP/2 connection (`None`: its
    /// stream ends with the body), failing after `idle_timeout` without a
    /// frame.
    pub(super) fn new(
        inner: Incoming,
        link: Option<(Box<Link>, Arc<LinkPool>)>,
        idle_timeout: Duration,
    ) -> Self {
        Self {
            inner,
            link,
            idle_timeout,
            stall: None,
        }
    }

    /// Gives the connection back to the pool, if it is still open, once
    /// the body has ended (driven once more first, so it sees the end of
    /// the message).
    fn release(&mut self, cx: &mut Context<'_>) {
        if let Some((mut link, pool)) = self.link.take()
            && !link.drive(cx)
        {
            pool.put(link);
        }
    }
}

impl Drop for LinkedBody {
    fn drop(&mut self) {
        // A body with nothing in it (a HEAD answer, a 204 or 304) may never
        // be polled: its connection is still good. One dropped before its
        // end closes with it.
        if self.inner.is_end_stream()
            && let Some((link, pool)) = self.link.take()
            && link.is_open()
        {
            pool.put(link);
        }
    }
}

impl http_body::Body for LinkedBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        if let Some((link, _)) = this.link.as_mut() {
            link.drive(cx);
        }
        let frame = Pin::new(&mut this.inner).poll_frame(cx);
        match &frame {
            Poll::Ready(None) => this.release(cx),
            Poll::Ready(Some(Ok(_))) if this.inner.is_end_stream() => this.release(cx),
            // A failed body: its connection is not reused.
            Poll::Ready(Some(Err(_))) => this.link = None,
            Poll::Ready(Some(Ok(_))) | Poll::Pending => {}
        }
        if frame.is_pending() {
            let idle = this.idle_timeout;
            let stall = this
                .stall
                .get_or_insert_with(|| Box::pin(tokio::time::sleep(idle)));
            if stall.as_mut().poll(cx).is_ready() {
                // Dropping the connection ends the upstream's side too.
                this.link = None;
                this.stall = None;
                return Poll::Ready(Some(Err(Box::new(BodyStalled(idle)))));
            }
            return Poll::Pending;
        }
        // Something came: the next wait starts its own period.
        this.stall = None;
        frame.map(|f| f.map(|r| r.map_err(Into::into)))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
