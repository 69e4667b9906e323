//! A connection's watchdogs: what they watch ([`Activity`]: heads read,
//! answers in flight, how long the client has taken nothing), the
//! connection's stream and service reporting to it ([`Conn`],
//! [`Watched`]), and the timer that fires every period ([`Watchdog`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use tokio::sync::OwnedSemaphorePermit;

pin_project_lite::pin_project! {
    /// A connection's watchdog timer: fires every period. It is polled with
    /// the connection, on every wake of the connection's task (twice a
    /// check on the Redis store), so it polls its `Sleep` once per period
    /// (to register the task's waker, which the timer wakes when it fires)
    /// and otherwise only reads whether it has fired: an `Interval` polled
    /// each time cost about 130 instructions a poll.
    pub(super) struct Watchdog {
        #[pin]
        pub(super) sleep: tokio::time::Sleep,
        pub(super) period: Duration,
        pub(super) armed: bool,
    }
}

impl Watchdog {
    pub(super) fn new(period: Duration) -> Self {
        Self {
            sleep: tokio::time::sleep(period),
            period,
            armed: false,
        }
    }

    /// Resolves when the period has passed.
    #[inline]
    pub(super) fn fired(self: Pin<&mut Self>) -> impl Future<Output = ()> + '_ {
        let mut this = self.project();
        std::future::poll_fn(move |cx| {
            if this.sleep.is_elapsed() {
                return Poll::Ready(());
            }
            if *this.armed {
                return Poll::Pending;
            }
            // The task's waker stays the same for the task's life: one
            // registration per period is enough.
            *this.armed = true;
            this.sleep.as_mut().poll(cx)
        })
    }

    /// Starts the next period.
    #[inline]
    pub(super) fn rearm(self: Pin<&mut Self>) {
        let this = self.project();
        this.sleep.reset(tokio::time::Instant::now() + *this.period);
        *this.armed = false;
    }
}

/// What a connection's watchdogs watch: how many heads were read and
/// answers finished, how many answers are still being sent, and since when
/// the client has taken nothing written to it.
#[derive(Debug)]
pub(super) struct Activity {
    pub(super) events: AtomicU64,
    pub(super) in_flight: AtomicU64,
    pub(super) opened: tokio::time::Instant,
    /// 0 while the last write to the client went through; else one plus
    /// the microseconds from `opened` to the first write since then that
    /// found the client's socket buffer full (the client is not reading).
    pub(super) blocked_since: AtomicU64,
}

impl Activity {
    /// Changes whenever a head is read or an answer finishes.
    #[inline]
    pub(super) fn events(&self) -> u64 {
        self.events.load(Ordering::Acquire)
    }

    pub(super) fn new() -> Self {
        Self {
            events: AtomicU64::new(0),
            in_flight: AtomicU64::new(0),
            opened: tokio::time::Instant::now(),
            blocked_since: AtomicU64::new(0),
        }
    }

    /// How long the client has taken nothing written to it (zero unless
    /// a write is waiting for room in its socket buffer). A slow upstream
    /// or a slow check leaves nothing to write, so only the client counts.
    #[inline]
    pub(super) fn blocked_for(&self) -> Duration {
        match self.blocked_since.load(Ordering::Acquire) {
            0 => Duration::ZERO,
            since => self
                .opened
                .elapsed()
                .saturating_sub(Duration::from_micros(since - 1)),
        }
    }

    /// Notes how a write to the client went. The clock is read only when a
    /// write first finds the buffer full, never on the answers' hot path.
    pub(super) fn wrote<T>(&self, polled: &Poll<std::io::Result<T>>) {
        // Only the connection's task writes: a load and a store suffice.
        let blocked = self.blocked_since.load(Ordering::Relaxed) != 0;
        match polled {
            Poll::Ready(Ok(_)) if blocked => self.blocked_since.store(0, Ordering::Release),
            Poll::Pending if !blocked => {
                let since =
                    u64::try_from(self.opened.elapsed().as_micros()).unwrap_or(u64::MAX - 1);
                self.blocked_since.store(since + 1, Ordering::Release);
            }
            _ => {}
        }
    }
}

pin_project_lite::pin_project! {
    /// An accepted connection: it holds its place under the door's
    /// connection cap until dropped, and tells its [`Activity`], when a
    /// watchdog watches one (the HTTP doors), whether the client takes what
    /// is written to it. The gRPC door's HTTP/2 has flow control of its own.
    pub(super) struct Conn {
        #[pin]
        stream: tokio::net::TcpStream,
        activity: Option<Arc<Activity>>,
        _permit: OwnedSemaphorePermit,
    }
}

impl Conn {
    /// `stream`, holding `permit`, reporting its writes to `activity`.
    pub(super) fn new(
        stream: tokio::net::TcpStream,
        permit: OwnedSemaphorePermit,
        activity: Option<Arc<Activity>>,
    ) -> Self {
        Self {
            stream,
            activity,
            _permit: permit,
        }
    }
}

impl tokio::io::AsyncRead for Conn {
    #[inline]
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        self.project().stream.poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for Conn {
    #[inline]
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.project();
        let polled = this.stream.poll_write(cx, buf);
        if let Some(activity) = this.activity {
            activity.wrote(&polled);
        }
        polled
    }

    #[inline]
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.project();
        let polled = this.stream.poll_write_vectored(cx, bufs);
        if let Some(activity) = this.activity {
            activity.wrote(&polled);
        }
        polled
    }

    #[inline]
    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    #[inline]
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.project().stream.poll_flush(cx)
    }

    #[inline]
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.project().stream.poll_shutdown(cx)
    }
}

/// Marks one answer in flight until dropped: when its body has been sent,
/// or the request or connection was abandoned.
#[derive(Debug)]
pub(super) struct InFlight(Arc<Activity>);

impl InFlight {
    #[inline]
    pub(super) fn new(activity: Arc<Activity>) -> Self {
        activity.events.fetch_add(1, Ordering::AcqRel);
        activity.in_flight.fetch_add(1, Ordering::AcqRel);
        Self(activity)
    }
}

impl Drop for InFlight {
    #[inline]
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
        self.0.events.fetch_add(1, Ordering::AcqRel);
    }
}

/// A front door's service, reporting to the connection's watchdog.
pub(super) struct Watched<S> {
    pub(super) inner: S,
    pub(super) activity: Arc<Activity>,
}

impl<S, B> hyper::service::Service<Request<Incoming>> for Watched<S>
where
    S: hyper::service::Service<Request<Incoming>, Response = Response<B>>,
    B: http_body::Body + Unpin,
{
    type Response = Response<WatchedBody<B>>;
    type Error = S::Error;
    type Future = WatchedFuture<S::Future>;

    fn call(&self, req: Request<Incoming>) -> Self::Future {
        let in_flight = InFlight::new(Arc::clone(&self.activity));
        WatchedFuture {
            inner: self.inner.call(req),
            in_flight: Some(in_flight),
        }
    }
}

pin_project_lite::pin_project! {
    /// The answer of a [`Watched`] service (no allocation per request).
    pub(super) struct WatchedFuture<F> {
        #[pin]
        pub(super) inner: F,
        pub(super) in_flight: Option<InFlight>,
    }
}

impl<F, B, E> Future for WatchedFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<WatchedBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let res = std::task::ready!(this.inner.poll(cx))?;
        let Some(in_flight) = this.in_flight.take() else {
            // Polled after completion: hyper never does.
            return Poll::Pending;
        };
        Poll::Ready(Ok(res.map(|body| WatchedBody {
            inner: body,
            _in_flight: in_flight,
        })))
    }
}

/// An answer's body; the answer stays in flight until it is dropped.
pub(super) struct WatchedBody<B> {
    pub(super) inner: B,
    pub(super) _in_flight: InFlight,
}

impl<B: http_body::Body + Unpin> http_body::Body for WatchedBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<B::Data>, B::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}
