//! The reverse proxy's connections to the upstream: a pool of idle HTTP/1.1
//! connections, each driven, while a request uses it, by the task of the
//! client connection that sent the request; or, for an `https://`
//! upstream whose TLS handshake picks `h2` by ALPN, one HTTP/2 connection
//! that every request shares.
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
//!
//! HTTP/2: the first request that finds no open HTTP/2 connection opens
//! one (requests arriving together may open one each; the first kept
//! serves every later request, the others close when their requests end).
//! A connection the upstream closes, or sends GOAWAY on, is replaced by
//! the next request; one refused at once (not sent at all) goes once more,
//! on a new connection. When the handshake picks HTTP/1.1, the pool keeps
//! to HTTP/1.1 until a later handshake picks `h2`.
//!
//! The folder: this file sends ([`send`]); `tls.rs` opens connections
//! ([`Dialer`]: TCP, TLS, ALPN); `http1.rs` is an HTTP/1.1 connection and
//! its retry rules; `http2.rs` opens the HTTP/2 one; `idle.rs` keeps
//! them ([`LinkPool`]); `outgoing.rs` is the request body ([`Outgoing`],
//! [`Upload`]); `body.rs` the response body ([`LinkedBody`]).

use std::future::{Future, poll_fn};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use http::{Request, Response};
use http_body::Body as _;
use hyper::client::conn::http2 as h2;

mod body;
mod http1;
mod http2;
mod idle;
mod outgoing;
mod tls;

pub use body::{BodyStalled, LinkedBody};
pub use idle::LinkPool;
pub use outgoing::{Outgoing, Upload};
pub use tls::{Dialer, Io, Proto};

use http1::{IDLE_CLOSE_SUSPECT, Link, bodiless_copy, idempotent};

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

/// A connection just opened, in the protocol its handshake picked.
enum Fresh {
    Http1(Box<Link>),
    Http2(h2::SendRequest<Outgoing>),
}

/// Opens a connection and notes in `pool` what it speaks (an HTTP/2 one
/// becomes the pool's, unless another was kept first).
async fn open(pool: &LinkPool, dialer: &Dialer) -> Result<Fresh, LinkError> {
    let (io, proto) = dialer.dial().await.map_err(LinkError::Connect)?;
    match proto {
        Proto::Http1 => {
            if dialer.may_speak_h2() {
                pool.set_h1_chosen();
            }
            Ok(Fresh::Http1(
                Link::open(io).await.map_err(LinkError::Failed)?,
            ))
        }
        Proto::Http2 => {
            let send = http2::open(io).await.map_err(LinkError::Failed)?;
            pool.set_h2(&send);
            Ok(Fresh::Http2(send))
        }
    }
}

/// Sends `req` (origin-form URI, `Host` set) to the upstream of `dialer`
/// and resolves with the response head; its body streams from the same
/// connection. HTTP/2 when the pool's connection is (or a new one turns
/// out) HTTP/2; else on an idle HTTP/1.1 connection from `pool`, or a new
/// one when none is idle (or the idle ones have closed), which goes back
/// to `pool` when the body has ended.
///
/// A request goes out at most twice, the second time on a new connection:
/// when it could not be written to a reused connection at all, or when it
/// is bodiless and idempotent (RFC 9110 §9.2.2) and the reused HTTP/1.1
/// connection, idle for 100 ms or more, failed before the answer — the
/// upstream closed it as idle while the request was on its way, which no
/// pool timeout can rule out.
///
/// # Errors
/// No connection could be opened, or the connection failed before the
/// response head.
pub async fn send(
    pool: &Arc<LinkPool>,
    dialer: &Dialer,
    body_idle_timeout: Duration,
    mut req: Request<Outgoing>,
) -> Result<Response<LinkedBody>, LinkError> {
    if dialer.may_speak_h2() && !pool.h1_chosen() {
        if let Some(h2) = pool.h2() {
            match send_h2(h2, req, dialer, body_idle_timeout).await {
                Ok(res) => return Ok(res),
                // Refused unsent (the connection is closing): a new one.
                Err(Unsent::Back(back)) => {
                    pool.drop_h2();
                    req = *back;
                }
                Err(Unsent::Failed(e)) => return Err(LinkError::Failed(e)),
            }
        }
        return match open(pool, dialer).await? {
            Fresh::Http2(h2) => sent_h2(h2, req, dialer, body_idle_timeout).await,
            Fresh::Http1(link) => send_h1(pool, dialer, Some(link), body_idle_timeout, req).await,
        };
    }
    send_h1(pool, dialer, None, body_idle_timeout, req).await
}

/// Why an HTTP/2 request did not get its answer.
enum Unsent {
    /// Handed back unsent.
    Back(Box<Request<Outgoing>>),
    /// Failed once sent.
    Failed(hyper::Error),
}

/// `req` on the HTTP/2 connection `h2`, just opened: one handed back
/// unsent is an error (no newer connection to try).
async fn sent_h2(
    h2: h2::SendRequest<Outgoing>,
    req: Request<Outgoing>,
    dialer: &Dialer,
    body_idle_timeout: Duration,
) -> Result<Response<LinkedBody>, LinkError> {
    match send_h2(h2, req, dialer, body_idle_timeout).await {
        Ok(res) => Ok(res),
        Err(Unsent::Failed(e)) => Err(on_fresh(e, dialer)),
        Err(Unsent::Back(_)) => Err(LinkError::Connect(format!(
            "{}: the new HTTP/2 connection closed at once",
            dialer.address()
        ))),
    }
}

/// `req` as a stream of the HTTP/2 connection `h2`.
async fn send_h2(
    mut h2: h2::SendRequest<Outgoing>,
    mut req: Request<Outgoing>,
    dialer: &Dialer,
    body_idle_timeout: Duration,
) -> Result<Response<LinkedBody>, Unsent> {
    http2::absolute(&mut req, dialer.authority());
    match h2.try_send_request(req).await {
        Ok(res) => Ok(res.map(|inner| LinkedBody::new(inner, None, body_idle_timeout))),
        Err(mut e) => match e.take_message() {
            Some(back) => Err(Unsent::Back(Box::new(back))),
            None => Err(Unsent::Failed(e.into_error())),
        },
    }
}

/// `req` on HTTP/1.1: on `first` (just opened) when given, else on an
/// idle connection or a new one; retried as [`send`] says.
async fn send_h1(
    pool: &Arc<LinkPool>,
    dialer: &Dialer,
    mut first: Option<Box<Link>>,
    body_idle_timeout: Duration,
    mut req: Request<Outgoing>,
) -> Result<Response<LinkedBody>, LinkError> {
    http2::origin_form(&mut req);
    let mut retried = false;
    loop {
        let found = match first.take() {
            Some(link) => Some((link, Duration::ZERO, true)),
            None if retried => None,
            None => take_usable(pool).await.map(|(l, idled)| (l, idled, false)),
        };
        let (mut link, idled, fresh) = match found {
            Some(found) => found,
            None => match open(pool, dialer).await? {
                Fresh::Http1(link) => (link, Duration::ZERO, true),
                // The upstream turned to HTTP/2 since.
                Fresh::Http2(h2) => return sent_h2(h2, req, dialer, body_idle_timeout).await,
            },
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
                let pool = Arc::clone(pool);
                return Ok(
                    res.map(|inner| LinkedBody::new(inner, Some((link, pool)), body_idle_timeout))
                );
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
                _ if fresh => return Err(on_fresh(e.into_error(), dialer)),
                _ => return Err(LinkError::Failed(e.into_error())),
            },
        }
    }
}

/// The failure of a connection's first request: a connect failure when
/// TLS reported it (a server may refuse the client's certificate after
/// the handshake seemed done, as TLS 1.3 lets it), for then the upstream
/// saw no request (the proxy gives the request's reservation back).
fn on_fresh(e: hyper::Error, dialer: &Dialer) -> LinkError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&e);
    while let Some(err) = source {
        let tls = err
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::get_ref)
            .and_then(|inner| inner.downcast_ref::<rustls::Error>());
        if let Some(tls) = tls {
            return LinkError::Connect(format!("{}: TLS: {tls}", dialer.address()));
        }
        source = err.source();
    }
    LinkError::Failed(e)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::UpstreamTls;
    use crate::config::upstream::Upstream;

    #[tokio::test]
    async fn the_pool_keeps_at_most_max_idle_and_none_past_the_idle_timeout() {
        // The kernel completes the connections; nothing need accept them.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let timeout = Duration::from_secs(1);
        let upstream: Upstream = format!("http://{addr}").parse().expect("url");
        let dialer = Dialer::new(&upstream, &UpstreamTls::default(), timeout).expect("dialer");
        let connect = |_: &String, _: Duration| async {
            match open(&LinkPool::new(0, timeout), &dialer).await {
                Ok(Fresh::Http1(link)) => Ok(link),
                Ok(Fresh::Http2(_)) => unreachable!("plain is HTTP/1.1"),
                Err(e) => Err(e),
            }
        };
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
        let upstream: Upstream = format!("http://{addr}").parse().expect("url");
        let dialer = Dialer::new(&upstream, &UpstreamTls::default(), Duration::from_secs(1))
            .expect("dialer");
        let Err(err) = open(&LinkPool::new(0, Duration::ZERO), &dialer).await else {
            panic!("nothing listens")
        };
        assert!(matches!(err, LinkError::Connect(_)), "{err}");
        assert!(err.to_string().contains(&addr), "{err}");
    }
}
