//! An HTTP/2 upstream connection: one per upstream, every request a stream
//! on it. Its driver runs in a task of its own (it serves many requests at
//! once, of many client connections), ending when the upstream closes it
//! or every handle to it is gone.

use std::time::Duration;

use http::Request;
use http::uri::{Authority, Scheme, Uri};
use hyper::client::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};

use super::outgoing::Outgoing;
use super::tls::Io;

/// How often an HTTP/2 upstream connection is pinged.
const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(30);
/// How long a ping may go unanswered before the connection is closed.
const KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(10);

/// The HTTP/2 handshake on `io`; the connection's driver is spawned.
///
/// # Errors
/// As hyper's handshake.
pub(super) async fn open(io: Io) -> Result<http2::SendRequest<Outgoing>, hyper::Error> {
    let (send, conn) = http2::Builder::new(TokioExecutor::new())
        // Pings find a connection that died silently (a NAT or balancer
        // forgot it) before a request waits on it: it closes, and the next
        // request opens another, as the HTTP/1.1 pool's idle timeout keeps
        // old connections from being reused.
        .timer(TokioTimer::new())
        .keep_alive_interval(KEEP_ALIVE_INTERVAL)
        .keep_alive_timeout(KEEP_ALIVE_TIMEOUT)
        .keep_alive_while_idle(true)
        .handshake(TokioIo::new(io))
        .await?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!("upstream HTTP/2 connection: {e}");
        }
    });
    Ok(send)
}

/// `req` (origin form, `Host` set) in the form HTTP/2 sends: the absolute
/// URI, whose authority (`:authority`) is the `Host` field's. The field
/// itself goes: RFC 9113 §8.3.1 allows both when they agree, but servers
/// refuse it (nginx answers 400 "client sent duplicate host header").
pub(super) fn absolute(req: &mut Request<Outgoing>, fallback: &Authority) {
    if req.uri().scheme().is_some() {
        return;
    }
    let authority = req
        .headers_mut()
        .remove(http::header::HOST)
        .and_then(|h| Authority::try_from(h.as_bytes()).ok())
        .unwrap_or_else(|| fallback.clone());
    let mut parts = req.uri().clone().into_parts();
    parts.scheme = Some(Scheme::HTTPS);
    parts.authority = Some(authority);
    if parts.path_and_query.is_none() {
        parts.path_and_query = Some(http::uri::PathAndQuery::from_static("/"));
    }
    if let Ok(uri) = Uri::from_parts(parts) {
        *req.uri_mut() = uri;
    }
    *req.version_mut() = http::Version::HTTP_2;
}

/// `req` back in the form HTTP/1.1 sends (origin form), after
/// [`absolute`] for a connection that turned out HTTP/1.1.
pub(super) fn origin_form(req: &mut Request<Outgoing>) {
    if req.uri().scheme().is_none() {
        return;
    }
    let mut parts = req.uri().clone().into_parts();
    parts.scheme = None;
    if let Some(authority) = parts.authority.take()
        && let Ok(host) = http::HeaderValue::from_str(authority.as_str())
    {
        // HTTP/1.1 names the host in its field again.
        req.headers_mut().insert(http::header::HOST, host);
    }
    if let Ok(uri) = Uri::from_parts(parts) {
        *req.uri_mut() = uri;
    }
    *req.version_mut() = http::Version::HTTP_11;
}
