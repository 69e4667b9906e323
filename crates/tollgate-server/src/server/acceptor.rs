//! Accepting a front door's connections ([`Acceptor`]): at most a given
//! number at once, `TCP_NODELAY`, accept errors logged now and then and
//! never a busy loop.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Accepts a front door's connections: at most [`MAX_CONNECTIONS`](super::MAX_CONNECTIONS) at once
/// (past it, new ones wait in the kernel's backlog), `TCP_NODELAY` set; on
/// an accept error (out of file descriptors and the like) a log line now
/// and then and a 50 ms pause, never a busy loop.
pub(super) struct Acceptor<'a> {
    listener: &'a TcpListener,
    name: &'static str,
    permits: Arc<Semaphore>,
    errors: u64,
}

impl<'a> Acceptor<'a> {
    pub(super) fn new(listener: &'a TcpListener, name: &'static str, max: usize) -> Self {
        Self {
            listener,
            name,
            permits: Arc::new(Semaphore::new(max)),
            errors: 0,
        }
    }

    /// The next connection with its permit; `None` once `shutdown`
    /// resolves.
    pub(super) async fn next(
        &mut self,
        shutdown: &mut Pin<&mut impl Future<Output = ()>>,
    ) -> Option<(tokio::net::TcpStream, SocketAddr, OwnedSemaphorePermit)> {
        loop {
            let permit = tokio::select! {
                p = Arc::clone(&self.permits).acquire_owned() => p.ok()?,
                () = shutdown.as_mut() => return None,
            };
            let accepted = tokio::select! {
                r = self.listener.accept() => r,
                () = shutdown.as_mut() => return None,
            };
            match accepted {
                Ok((stream, peer)) => {
                    let _ = stream.set_nodelay(true);
                    return Some((stream, peer, permit));
                }
                Err(e) => {
                    self.errors += 1;
                    if self.errors.is_power_of_two() {
                        let (name, errors) = (self.name, self.errors);
                        tracing::warn!("{name}: accept failed ({errors} so far): {e}");
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }
}
