//! The upstream's connections kept between requests ([`LinkPool`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use hyper::client::conn::http2;

use super::http1::Link;
use super::outgoing::Outgoing;

/// The upstream's connections: idle HTTP/1.1 ones, most recently used
/// last, and the one HTTP/2 connection every request shares. Shared by
/// every request handler and the response bodies they return, which give
/// their HTTP/1.1 connection back when they end.
#[derive(Debug)]
pub struct LinkPool {
    idle: Mutex<Vec<(Box<Link>, Instant)>>,
    max_idle: usize,
    idle_timeout: Duration,
    /// The HTTP/2 connection, while open.
    h2: Mutex<Option<http2::SendRequest<Outgoing>>>,
    /// The last TLS handshake picked HTTP/1.1 (though `h2` was offered):
    /// requests take the HTTP/1.1 way without looking at `h2`.
    h1_chosen: AtomicBool,
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
            h2: Mutex::new(None),
            h1_chosen: AtomicBool::new(false),
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
    pub(super) fn take(&self) -> Option<(Box<Link>, Duration)> {
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

    pub(super) fn put(&self, link: Box<Link>) {
        let mut idle = self.lock();
        if idle.len() < self.max_idle {
            idle.push((link, Instant::now()));
        }
    }

    /// The HTTP/2 connection, if one is open.
    pub(super) fn h2(&self) -> Option<http2::SendRequest<Outgoing>> {
        let mut h2 = self.h2.lock().unwrap_or_else(PoisonError::into_inner);
        if h2.as_ref().is_some_and(http2::SendRequest::is_closed) {
            // Closed or gone away: the next request opens another.
            *h2 = None;
        }
        h2.clone()
    }

    /// Makes `send` the HTTP/2 connection unless an open one is there
    /// already (requests that found none opened theirs at once; the
    /// first kept serves all, the others close when their requests end).
    pub(super) fn set_h2(&self, send: &http2::SendRequest<Outgoing>) {
        self.h1_chosen.store(false, Ordering::Relaxed);
        let mut h2 = self.h2.lock().unwrap_or_else(PoisonError::into_inner);
        if h2.as_ref().is_none_or(http2::SendRequest::is_closed) {
            *h2 = Some(send.clone());
        }
    }

    /// Forgets the HTTP/2 connection (it refused a request: closing).
    pub(super) fn drop_h2(&self) {
        *self.h2.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }

    /// Notes what the last TLS handshake picked.
    pub(super) fn set_h1_chosen(&self) {
        self.h1_chosen.store(true, Ordering::Relaxed);
    }

    /// Whether the last TLS handshake picked HTTP/1.1.
    pub(super) fn h1_chosen(&self) -> bool {
        self.h1_chosen.load(Ordering::Relaxed)
    }
}
