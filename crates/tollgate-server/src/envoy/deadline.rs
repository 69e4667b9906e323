//! The gRPC port's bound on request bodies: a tower layer over every
//! service of the port (the rate limit service and health) that fails a
//! request body not ended within its time.
//!
//! tonic's own `Server::timeout` bounds the whole call, deciding included;
//! this bounds only the wait for the request, so a slow store is answered
//! by the failure policy, never cut off here. The timer costs nothing for a
//! body that is already there when first read (Envoy's calls, in one
//! frame): it is armed on the first read that has to wait.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

/// Wraps each request's body in a [`DeadlineBody`] of `timeout`.
#[derive(Debug, Clone, Copy)]
pub struct BodyDeadlineLayer {
    /// How long a body may keep its reader waiting, in all.
    pub timeout: Duration,
}

impl<S> tower_layer::Layer<S> for BodyDeadlineLayer {
    type Service = BodyDeadline<S>;

    fn layer(&self, inner: S) -> Self::Service {
        BodyDeadline {
            inner,
            timeout: self.timeout,
        }
    }
}

/// The service [`BodyDeadlineLayer`] makes.
#[derive(Debug, Clone)]
pub struct BodyDeadline<S> {
    inner: S,
    timeout: Duration,
}

impl<S, B> tonic::codegen::Service<http::Request<B>> for BodyDeadline<S>
where
    S: tonic::codegen::Service<http::Request<DeadlineBody<B>>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let timeout = self.timeout;
        self.inner.call(req.map(|inner| DeadlineBody {
            inner,
            timeout,
            sleep: None,
        }))
    }
}

pin_project_lite::pin_project! {
    /// A request body that fails with `DEADLINE_EXCEEDED` once it has kept
    /// its reader waiting for its timeout (counted from the first read that
    /// waited, which for a call is when it starts).
    pub struct DeadlineBody<B> {
        #[pin]
        inner: B,
        timeout: Duration,
        // Boxed: armed for the rare body that is not all there at once.
        sleep: Option<Pin<Box<tokio::time::Sleep>>>,
    }
}

impl<B> std::fmt::Debug for DeadlineBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeadlineBody")
            .field("timeout", &self.timeout)
            .field("armed", &self.sleep.is_some())
            .finish_non_exhaustive()
    }
}

impl<B> Body for DeadlineBody<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<tonic::codegen::StdError>,
{
    type Data = Bytes;
    type Error = tonic::codegen::StdError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.project();
        if let Poll::Ready(frame) = this.inner.poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        let timeout = *this.timeout;
        let sleep = this
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(tonic::Status::deadline_exceeded(
                format!("the request did not arrive whole within {timeout:?}"),
            ))))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
