//! An HTTP/1.1 upstream connection ([`Link`]), driven by the task that
//! uses it, and when a request on a reused one may go out again.

use std::future::Future;
use std::pin::Pin;
use std::task::Context;
use std::time::Duration;

use http::{Method, Request};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;

use super::outgoing::Outgoing;
use super::tls::Io;

/// An HTTP/1.1 client connection and its driver. Always boxed: hyper's
/// connection state is large, and a response carries its link through
/// several moves on the way out (they cost 5,800 instructions a proxied
/// request, inline).
pub(super) struct Link {
    pub(super) send: http1::SendRequest<Outgoing>,
    /// `None` once the driver has finished (the connection closed or
    /// failed): dropped then, so a request still queued for it is handed
    /// back (hyper returns it with a "canceled" error) instead of waiting
    /// for an answer that cannot come.
    conn: Option<http1::Connection<TokioIo<Io>, Outgoing>>,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link")
            .field("open", &self.conn.is_some())
            .finish()
    }
}

impl Link {
    /// The HTTP/1.1 handshake on `io` (nothing is exchanged yet).
    ///
    /// # Errors
    /// As hyper's handshake.
    pub(super) async fn open(io: Io) -> Result<Box<Link>, hyper::Error> {
        let (send, conn) = http1::Builder::new().handshake(TokioIo::new(io)).await?;
        Ok(Box::new(Link {
            send,
            conn: Some(conn),
        }))
    }

    /// Drives the connection (writes what is queued, reads what came);
    /// true once it has ended.
    pub(super) fn drive(&mut self, cx: &mut Context<'_>) -> bool {
        if let Some(conn) = self.conn.as_mut()
            && Pin::new(conn).poll(cx).is_ready()
        {
            self.conn = None;
        }
        self.conn.is_none()
    }

    /// Whether the driver has not finished.
    pub(super) fn is_open(&self) -> bool {
        self.conn.is_some()
    }

    /// Whether a request can be sent on it now: driven first, so a close
    /// by the upstream since the last use is seen.
    pub(super) fn usable(&mut self, cx: &mut Context<'_>) -> bool {
        !self.drive(cx) && self.send.is_ready()
    }
}

/// How long a pooled connection must have been idle before the upstream
/// may be closing it as idle (keep-alive timeouts are seconds: gunicorn 2,
/// Node and Apache 5, nginx 75), so that a bodiless idempotent request on
/// it is kept for a second try.
pub(super) const IDLE_CLOSE_SUSPECT: Duration = Duration::from_millis(100);

/// Methods a client may send twice to the same effect (RFC 9110 §9.2.2).
pub(super) fn idempotent(method: &Method) -> bool {
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE | Method::PUT | Method::DELETE
    )
}

/// `req` again, for a request without a body.
pub(super) fn bodiless_copy(req: &Request<Outgoing>) -> Request<Outgoing> {
    let mut copy = Request::new(Outgoing::empty());
    *copy.method_mut() = req.method().clone();
    *copy.uri_mut() = req.uri().clone();
    *copy.version_mut() = req.version();
    *copy.headers_mut() = req.headers().clone();
    copy
}
