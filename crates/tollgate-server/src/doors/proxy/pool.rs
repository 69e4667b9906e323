//! The reverse proxy's connections to the upstream: a pool of idle HTTP/1.1
//! connections, each driven, while a request uses it, by the task of the
//! client connection that sent the request.
//!
//! Why not hyper-util's pooled client (as before): its connections run in
//! tasks of their own, so every forwarded request crossed tasks four times
//! (the request to the connection's task, its response back, and the same
//! for the body), each a wake through the scheduler, often of the other
//! worker thread. Here the request is written, and its response read, by
//! the task that read the client's request: a wake from the upstream
//! connection is a wake of the task already running, which
//! [`crate::inline::Inline`] turns into a second poll on the spot.
//! Measured with `bench/http.sh`: about 10% more proxied requests a second
//! (see `bench/README.md`).
//!
//! The pool holds at most `max_idle` idle connections (the most recently
//! used is used first), each for at most `idle_timeout`; a connection is in
//! use from its request until its response body has ended, so the upstream
//! sees as many connections as there are requests in flight, plus the idle
//! ones. An idle connection is not watched: one the upstream has closed is
//! noticed when it is taken, and replaced; a request that could not be
//! written to a reused connection at all is sent once more, on a new one,
//! and so is a bodiless idempotent one the reused connection failed before
//! its answer (the upstream closed it as idle while the request went out).
//! A response body dropped before its end (the client went away) closes
//! its connection.

use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Method, Request, Response};
use http_body::Body as _;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use super::prefix::ClientBody;

/// An HTTP/1.1 client connection and its driver. Always boxed: hyper's
/// connection state is large, and a response carries its link through
/// several moves on the way out (they cost 5,800 instructions a proxied
/// request, inline).
struct Link {
    send: http1::SendRequest<Outgoing>,
    /// `None` once the driver has finished (the connection closed or
    /// failed): dropped then, so a request still queued for it is handed
    /// back (hyper returns it with a "canceled" error) instead of waiting
    /// for an answer that cannot come.
    conn: Option<http1::Connection<TokioIo<TcpStream>, Outgoing>>,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link")
            .field("open", &self.conn.is_some())
            .finish()
    }
}

impl Link {
    /// Drives the connection (writes what is queued, reads what came);
    /// true once it has ended.
    fn drive(&mut self, cx: &mut Context<'_>) -> bool {
        if let Some(conn) = self.conn.as_mut()
            && Pin::new(conn).poll(cx).is_ready()
        {
            self.conn = None;
        }
        self.conn.is_none()
    }

    /// Whether a request can be sent on it now: driven first, so a close
    /// by the upstream since the last use is seen.
    fn usable(&mut self, cx: &mut Context<'_>) -> bool {
        !self.drive(cx) && self.send.is_ready()
    }
}

/// What a forwarded request's body has done so far, shared between the
/// body (which notes it) and the proxy (which reads it): the upstream's
/// time to answer counts from when the body last moved, so an upload that
/// takes longer than the response timeout is not cut off while it moves.
#[derive(Debug)]
pub struct Upload {
    base: Instant,
    /// Milliseconds after `base` when a part of the body last went out.
    moved_ms: AtomicU64,
    /// Reading the client's body failed (it was malformed, or the client
    /// went away): not the upstream's doing.
    failed: AtomicBool,
}

impl Upload {
    /// A record starting now.
    #[must_use]
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            base: Instant::now(),
            moved_ms: AtomicU64::new(0),
            failed: AtomicBool::new(false),
        })
    }

    fn moved(&self) {
        let ms = u64::try_from(self.base.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.moved_ms.store(ms, Ordering::Relaxed);
    }

    /// When the body last moved (when the record was made, if never).
    #[must_use]
    pub fn last_moved(&self) -> Instant {
        self.base + Duration::from_millis(self.moved_ms.load(Ordering::Relaxed))
    }

    /// Whether reading the client's body failed.
    #[must_use]
    pub fn failed(&self) -> bool {
        self.failed.load(Ordering::Relaxed)
    }
}

/// A forwarded request's body: the client's, noting its progress in an
/// [`Upload`] (a bodiless request needs none), or none at all (a bodiless
/// request sent again).
#[derive(Debug)]
pub struct Outgoing {
    inner: Option<ClientBody>,
    upload: Option<Arc<Upload>>,
}

impl Outgoing {
    /// The client's body, its progress noted in `upload`.
    #[must_use]
    pub fn new(body: ClientBody, upload: Option<Arc<Upload>>) -> Self {
        Self {
            inner: Some(body),
            upload,
        }
    }

    fn empty() -> Self {
        Self {
            inner: None,
            upload: None,
        }
    }
}

impl http_body::Body for Outgoing {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = &mut *self;
        let Some(inner) = this.inner.as_mut() else {
            return Poll::Ready(None);
        };
        let frame = std::task::ready!(Pin::new(inner).poll_frame(cx));
        if let Some(upload) = &this.upload {
            match &frame {
                Some(Ok(_)) | None => upload.moved(),
                Some(Err(_)) => upload.failed.store(true, Ordering::Relaxed),
            }
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(ClientBody::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.inner
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), ClientBody::size_hint)
    }
}

/// Why a request could not be forwarded.
#[derive(Debug)]
pub enum LinkError {
    /// No connection to the upstream could be opened (refused, no such
    /// host, or not accepted within the connect timeout).
    Connect(String),
    /// The connection failed before the response head arrived.
    Failed(hyper::Error),
}

impl std::fmt::Display for LinkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Connect(why) => write!(f, "connect: {why}"),
            Self::Failed(e) => {
                write!(f, "{e}")?;
                let mut source = std::error::Error::source(e);
                while let Some(s) = source {
                    write!(f, ": {s}")?;
                    source = s.source();
                }
                Ok(())
            }
        }
    }
}

/// Idle upstream connections, most recently used last. Shared by every
/// request handler and the response bodies they return, which give their
/// connection back when they end.
#[derive(Debug)]
pub struct LinkPool {
    idle: Mutex<Vec<(Box<Link>, Instant)>>,
    max_idle: usize,
    idle_timeout: Duration,
}

impl LinkPool {
    /// A pool keeping at most `max_idle` idle connections, each for at most
    /// `idle_timeout`.
    #[must_use]
    pub fn new(max_idle: usize, idle_timeout: Duration) -> Self {
        Self {
            idle: Mutex::new(Vec::new()),
            max_idle,
            idle_timeout,
        }
    }

    /// Idle connections held now.
    #[must_use]
    pub fn idle(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(Box<Link>, Instant)>> {
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The most recently used idle connection, if one is younger than the
    /// idle timeout (older ones are closed on the way), and how long it was
    /// idle.
    fn take(&self) -> Option<(Box<Link>, Duration)> {
        let now = Instant::now();
        let mut idle = self.lock();
        while let Some((link, since)) = idle.pop() {
            let idled = now.saturating_duration_since(since);
            if idled < self.idle_timeout {
                return Some((link, idled));
            }
            // The oldest are at the front: drop every expired one.
            let expired = idle
                .iter()
                .position(|(_, t)| now.saturating_duration_since(*t) < self.idle_timeout)
                .unwrap_or(idle.len());
            idle.drain(..expired);
        }
        None
    }

    fn put(&self, link: Box<Link>) {
        let mut idle = self.lock();
        if idle.len() < self.max_idle {
            idle.push((link, Instant::now()));
        }
    }
}

/// Opens an upstream connection to `authority` (`host:port`).
async fn connect(authority: &str, connect_timeout: Duration) -> Result<Box<Link>, LinkError> {
    let stream = match tokio::time::timeout(connect_timeout, TcpStream::connect(authority)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return Err(LinkError::Connect(format!("{authority}: {e}"))),
        Err(_) => {
            return Err(LinkError::Connect(format!(
                "{authority}: not accepted within {connect_timeout:?}"
            )));
        }
    };
    let _ = stream.set_nodelay(true);
    let (send, conn) = http1::Builder::new()
        .handshake(TokioIo::new(stream))
        .await
        .map_err(LinkError::Failed)?;
    Ok(Box::new(Link {
        send,
        conn: Some(conn),
    }))
}

/// Sends `req` (origin-form URI, `Host` set) on an idle connection from
/// `pool`, or a new one to `authority` when none is idle (or the idle ones
/// have closed), and resolves with the response head; its body streams
/// from the same connection, which goes back to `pool` when the body has
/// ended.
///
/// A request goes out at most twice, the second time on a new connection:
/// when it could not be written to a reused connection at all, or when it
/// is bodiless and idempotent (RFC 9110 §9.2.2) and the reused connection,
/// idle for 100 ms or more, failed before the answer — the
/// upstream closed it as idle while the request was on its way, which no
/// pool timeout can rule out.
///
/// # Errors
/// No connection could be opened, or the connection failed before the
/// response head.
pub async fn send(
    pool: &Arc<LinkPool>,
    authority: &str,
    connect_timeout: Duration,
    body_idle_timeout: Duration,
    mut req: Request<Outgoing>,
) -> Result<Response<LinkedBody>, LinkError> {
    let mut retried = false;
    loop {
        let reused = if retried {
            None
        } else {
            take_usable(pool).await
        };
        let fresh = reused.is_none();
        let (mut link, idled) = match reused {
            Some(reused) => reused,
            None => (connect(authority, connect_timeout).await?, Duration::ZERO),
        };
        // Only a connection idle long enough for the upstream to close it
        // as idle can be closed under the request: under load connections
        // are reused within microseconds, and no copy is made.
        let mut again =
            (idled >= IDLE_CLOSE_SUSPECT && idempotent(req.method()) && req.body().is_end_stream())
                .then(|| bodiless_copy(&req));
        let mut sent = std::pin::pin!(link.send.try_send_request(req));
        let result = poll_fn(|cx| {
            link.drive(cx);
            sent.as_mut().poll(cx)
        })
        .await;
        match result {
            Ok(res) => {
                return Ok(res.map(|inner| LinkedBody {
                    inner,
                    link: Some((link, Arc::clone(pool))),
                    idle_timeout: body_idle_timeout,
                    stall: None,
                }));
            }
            Err(mut e) => match (e.take_message(), again.take()) {
                // Not written at all to a reused connection (it closed as
                // the request came): once more, on a new connection.
                (Some(back), _) if !fresh => {
                    req = back;
                    retried = true;
                }
                // Written, and the reused connection failed before the
                // answer: a bodiless idempotent request goes once more.
                (None, Some(copy)) => {
                    req = copy;
                    retried = true;
                }
                _ => return Err(LinkError::Failed(e.into_error())),
            },
        }
    }
}

/// How long a pooled connection must have been idle before the upstream
/// may be closing it as idle (keep-alive timeouts are seconds: gunicorn 2,
/// Node and Apache 5, nginx 75), so that a bodiless idempotent request on
/// it is kept for a second try.
const IDLE_CLOSE_SUSPECT: Duration = Duration::from_millis(100);

/// Methods a client may send twice to the same effect (RFC 9110 §9.2.2).
fn idempotent(method: &Method) -> bool {
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE | Method::PUT | Method::DELETE
    )
}

/// `req` again, for a request without a body.
fn bodiless_copy(req: &Request<Outgoing>) -> Request<Outgoing> {
    let mut copy = Request::new(Outgoing::empty());
    *copy.method_mut() = req.method().clone();
    *copy.uri_mut() = req.uri().clone();
    *copy.version_mut() = req.version();
    *copy.headers_mut() = req.headers().clone();
    copy
}

/// An idle connection of `pool` that is still open and ready for a
/// request; the closed ones met on the way are dropped.
async fn take_usable(pool: &LinkPool) -> Option<(Box<Link>, Duration)> {
    while let Some((mut link, idled)) = pool.take() {
        if poll_fn(|cx| Poll::Ready(link.usable(cx))).await {
            return Some((link, idled));
        }
    }
    None
}

/// An upstream response's body; polling it drives the upstream connection,
/// and the connection goes back to its pool when the body has ended. A
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
            && link.conn.is_some()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_pool_keeps_at_most_max_idle_and_none_past_the_idle_timeout() {
        // The kernel completes the connections; nothing need accept them.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let timeout = Duration::from_secs(1);
        // An idle timeout no pause of the test reaches, then one it
        // certainly passes: the pool's clock is the real one.
        let pool = LinkPool::new(2, Duration::from_secs(3600));
        for _ in 0..3 {
            pool.put(connect(&addr, timeout).await.expect("connect"));
        }
        assert_eq!(pool.idle(), 2, "the third is closed, not kept");
        assert!(take_usable(&pool).await.is_some());
        assert_eq!(pool.idle(), 1);
        let pool = LinkPool::new(2, Duration::from_millis(100));
        pool.put(connect(&addr, timeout).await.expect("connect"));
        assert_eq!(pool.idle(), 1);
        tokio::time::sleep(Duration::from_millis(150)).await;
        assert!(pool.take().is_none(), "an expired connection is not reused");
        assert_eq!(pool.idle(), 0);
    }

    #[tokio::test]
    async fn a_refused_connection_is_a_connect_error() {
        let addr = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            l.local_addr().expect("addr").to_string()
        };
        let err = connect(&addr, Duration::from_secs(1))
            .await
            .expect_err("nothing listens");
        assert!(matches!(err, LinkError::Connect(_)), "{err}");
        assert!(err.to_string().contains(&addr), "{err}");
    }
}
