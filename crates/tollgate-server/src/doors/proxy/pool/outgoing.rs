//! A forwarded request's body ([`Outgoing`]) and the record of its
//! progress ([`Upload`]) the proxy's response timeout reads.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::body::{Frame, SizeHint};

use super::super::prefix::ClientBody;

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

    pub(super) fn empty() -> Self {
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
