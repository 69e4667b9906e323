//! A TCP connection to a node, and one request/reply exchange on a fresh
//! connection (plain or TLS), each bounded by a timeout.

use std::io;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use super::super::resp::{self, Reply};
use super::stream::tls_refusal;
use super::{io_error, protocol};
use crate::error::{StoreError, StoreErrorKind};
use crate::store::url::HostPort;

/// A TCP connection to `node`, `TCP_NODELAY` set.
pub(super) async fn tcp(node: &HostPort, timeout: Duration) -> Result<TcpStream, StoreError> {
    let connect = TcpStream::connect((node.host.as_str(), node.port));
    let stream = tokio::time::timeout(timeout, connect)
        .await
        .map_err(|_| {
            StoreError::new(
                StoreErrorKind::Timeout,
                format!("connecting to {node}: no answer within {timeout:?}"),
            )
        })?
        .map_err(|e| io_error(&format!("connecting to {node}"), &e))?;
    stream
        .set_nodelay(true)
        .map_err(|e| io_error(&format!("connecting to {node}"), &e))?;
    Ok(stream)
}

/// Writes `request` (`n` commands) and reads their `n` replies.
pub(super) async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    node: &HostPort,
    request: &[u8],
    n: usize,
    timeout: Duration,
) -> Result<Vec<Reply>, StoreError> {
    let run = async {
        stream.write_all(request).await?;
        // TLS: the records still in the session go out (a no-op on TCP).
        stream.flush().await?;
        let mut buf = Vec::with_capacity(512);
        let mut replies = Vec::with_capacity(n);
        let mut at = 0;
        while replies.len() < n {
            match resp::parse(&buf[at..]) {
                Ok(Some((reply, used))) => {
                    replies.push(reply);
                    at += used;
                }
                Ok(None) => {
                    if stream.read_buf(&mut buf).await? == 0 {
                        return Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "the server closed the connection",
                        ));
                    }
                }
                Err(bad) => return Err(io::Error::new(io::ErrorKind::InvalidData, bad.0)),
            }
        }
        Ok(replies)
    };
    match tokio::time::timeout(timeout, run).await {
        Ok(Ok(replies)) => Ok(replies),
        Ok(Err(e)) => Err(tls_refusal(node, &e).unwrap_or_else(|| {
            if e.kind() == io::ErrorKind::InvalidData {
                protocol(format!("{node} answered garbage: {e}"))
            } else {
                io_error(&node.to_string(), &e)
            }
        })),
        Err(_) => Err(StoreError::new(
            StoreErrorKind::Timeout,
            format!("{node}: no answer within {timeout:?}"),
        )),
    }
}
