//! A deadline on the ADS server's first bytes. An HTTP/2 server speaks
//! first (its SETTINGS frame, the server preface), so a peer that accepts
//! the connection and stays silent is not an ADS server: a port taken by
//! something else, a half-dead proxy, a listener whose process hangs.
//! Without this the stream waits on it until the HTTP/2 keepalive gives up,
//! more than five minutes ([`super::KEEPALIVE`]: pings cannot be more
//! frequent against a grpc-go server), and a healthy server started
//! meanwhile is not tried. grpc-go, the reference's client, likewise
//! counts a connection as made only once the server's preface arrives.
//!
//! [`Preface`] wraps a connector; the connection it returns fails reads
//! with `TimedOut` when nothing arrived within the deadline, which ends
//! the stream, and the client reconnects after its backoff.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use http::Uri;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A connector whose connections must hear from the server within
/// `within` of being made.
#[derive(Clone, Debug)]
pub(crate) struct Preface<C> {
    inner: C,
    within: Duration,
}

impl<C> Preface<C> {
    /// `inner`'s connections, held to `within`.
    pub(crate) fn new(inner: C, within: Duration) -> Self {
        Preface { inner, within }
    }
}

impl<C, T> tonic::codegen::Service<Uri> for Preface<C>
where
    C: tonic::codegen::Service<Uri, Response = TokioIo<T>>,
    C::Error: Into<BoxError>,
    C::Future: Send + 'static,
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Response = TokioIo<FirstBytes<T>>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let connecting = self.inner.call(uri);
        let within = self.within;
        Box::pin(async move {
            let io = connecting.await.map_err(Into::into)?;
            Ok(TokioIo::new(FirstBytes::new(io.into_inner(), within)))
        })
    }
}

/// A connection whose reads fail once `within` passed without a byte
/// from the peer; after the first byte it is `inner` as it is.
#[derive(Debug)]
pub(crate) struct FirstBytes<T> {
    inner: T,
    within: Duration,
    deadline: Option<Pin<Box<Sleep>>>,
}

impl<T> FirstBytes<T> {
    fn new(inner: T, within: Duration) -> Self {
        FirstBytes {
            inner,
            within,
            deadline: Some(Box::pin(tokio::time::sleep(within))),
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for FirstBytes<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    this.deadline = None;
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => {
                // The sleep registers this task: it is woken to fail here.
                let expired = this
                    .deadline
                    .as_mut()
                    .is_some_and(|d| d.as_mut().poll(cx).is_ready());
                if !expired {
                    return Poll::Pending;
                }
                Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "the server sent nothing within {:?} of the connection \
                         (no HTTP/2 preface: not a gRPC server, or a hung one)",
                        this.within
                    ),
                )))
            }
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for FirstBytes<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test(start_paused = true)]
    async fn a_silent_peer_fails_the_read_at_the_deadline() {
        let (client, _server) = tokio::io::duplex(64);
        let mut io = FirstBytes::new(client, Duration::from_secs(10));
        let mut buf = [0u8; 8];
        let e = io.read(&mut buf).await.expect_err("silent");
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert!(e.to_string().contains("no HTTP/2 preface"), "{e}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_peer_that_spoke_may_then_be_silent_for_ever() {
        let (client, mut server) = tokio::io::duplex(64);
        let mut io = FirstBytes::new(client, Duration::from_secs(10));
        server.write_all(b"x").await.expect("write");
        let mut buf = [0u8; 8];
        assert_eq!(io.read(&mut buf).await.expect("first byte"), 1);
        // Long past the deadline, a read still waits for data.
        let later = tokio::time::timeout(Duration::from_secs(3600), io.read(&mut buf)).await;
        assert!(later.is_err(), "the read ended: {later:?}");
        server.write_all(b"yz").await.expect("write");
        assert_eq!(io.read(&mut buf).await.expect("more"), 2);
    }
}
