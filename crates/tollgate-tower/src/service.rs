//! [`RateLimit`]: the service the layer wraps around yours.

use std::fmt;
use std::task::{Context, Poll};

use http::{Request, Response};
use tollgate::{Limiter, Store};
use tollgate_http::usage::UsageBody;
use tower_layer::Layer;
use tower_service::Service;

use crate::future::ResponseFuture;
use crate::layer::RateLimitLayer;

/// The rate-limiting service made by [`RateLimitLayer`]. Cloning it is
/// cheap (an [`Arc`](std::sync::Arc) and the inner service's clone) and
/// every clone shares one [`Limiter`].
///
/// The check comes first, the inner service's readiness second:
/// `poll_ready` is always ready, and `call` decides at once. A request the
/// limit refuses is answered (429) without waiting for the inner service,
/// so an over-limit client's requests never queue for capacity (a
/// `ConcurrencyLimit` or `Buffer` inside) ahead of admitted ones. An
/// admitted request's response future takes a clone of the inner service,
/// waits for it to be ready (tower's contract: `poll_ready` before
/// `call`), then calls it.
///
/// The response body `ResB` must be `From<String>` to carry a 429, 503 or
/// 400 problem+json body: axum's `Body`, `http_body_util::Full<Bytes>` and
/// `String` are. For another body, map it (`MapResponseBody`) before this
/// layer. The response's body is a [`UsageBody`] around `ResB`: frames
/// pass through unchanged, and for a request that holds a reservation or
/// a lease its end (or drop) settles and releases them.
pub struct RateLimit<S, I> {
    inner: I,
    layer: RateLimitLayer<S>,
}

impl<S, I> RateLimit<S, I> {
    /// Wraps `inner` with `layer`'s configuration.
    pub fn new(inner: I, layer: RateLimitLayer<S>) -> Self {
        Self { inner, layer }
    }

    /// The shared limiter.
    pub fn limiter(&self) -> &std::sync::Arc<Limiter<S>> {
        self.layer.limiter()
    }

    /// The inner service.
    pub fn get_ref(&self) -> &I {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut I {
        &mut self.inner
    }

    /// The inner service, unwrapped.
    pub fn into_inner(self) -> I {
        self.inner
    }
}

impl<S, I: Clone> Clone for RateLimit<S, I> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            layer: self.layer.clone(),
        }
    }
}

impl<S, I: fmt::Debug> fmt::Debug for RateLimit<S, I> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimit")
            .field("inner", &self.inner)
            .field("layer", &self.layer)
            .finish()
    }
}

impl<S, I, ReqB, ResB> Service<Request<ReqB>> for RateLimit<S, I>
where
    S: Store,
    I: Service<Request<ReqB>, Response = Response<ResB>> + Clone,
    ResB: From<String>,
{
    type Response = Response<UsageBody<ResB>>;
    type Error = I::Error;
    type Future = ResponseFuture<I, ReqB>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // The inner service is asked in the response future, and only for
        // an admitted request.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        let verdict = self.layer.shared().admit(&req);
        ResponseFuture::new(verdict, self.inner.clone(), req)
    }
}

impl<S: Store, I> Layer<I> for RateLimitLayer<S> {
    type Service = RateLimit<S, I>;

    fn layer(&self, inner: I) -> Self::Service {
        RateLimit::new(inner, self.clone())
    }
}
