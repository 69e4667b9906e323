//! [`ResponseFuture`]: the named future of [`RateLimit`](crate::RateLimit).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use http::{HeaderMap, Request, Response};
use pin_project_lite::pin_project;
use tower_service::Service;

use crate::layer::{Verdict, VerdictFuture};

pin_project! {
    /// The response future of [`RateLimit`](crate::RateLimit): waits for
    /// the limiter's verdict, then either answers by itself (429, 503,
    /// 400) or calls the inner service and adds the RateLimit headers to
    /// its response.
    pub struct ResponseFuture<I, ReqB>
    where
        I: Service<Request<ReqB>>,
    {
        #[pin]
        state: State<I, ReqB>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<I, ReqB>
    where
        I: Service<Request<ReqB>>,
    {
        Deciding {
            verdict: VerdictFuture,
            call: Option<(I, Request<ReqB>)>,
        },
        Calling {
            #[pin]
            future: I::Future,
            headers: Option<HeaderMap>,
        },
    }
}

impl<I, ReqB> ResponseFuture<I, ReqB>
where
    I: Service<Request<ReqB>>,
{
    pub(crate) fn new(verdict: VerdictFuture, ready: I, req: Request<ReqB>) -> Self {
        Self {
            state: State::Deciding {
                verdict,
                call: Some((ready, req)),
            },
        }
    }
}

impl<I, ReqB> fmt::Debug for ResponseFuture<I, ReqB>
where
    I: Service<Request<ReqB>>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::Deciding { .. } => "deciding",
            State::Calling { .. } => "calling",
        };
        f.debug_struct("ResponseFuture")
            .field("state", &state)
            .finish()
    }
}

impl<I, ReqB, ResB> Future for ResponseFuture<I, ReqB>
where
    I: Service<Request<ReqB>, Response = Response<ResB>>,
    ResB: From<String>,
{
    type Output = Result<Response<ResB>, I::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Deciding { verdict, call } => match ready!(verdict.as_mut().poll(cx)) {
                    Verdict::Admit { headers, .. } => {
                        let (mut inner, req) =
                            call.take().expect("ResponseFuture polled after completion");
                        let future = inner.call(req);
                        this.state.set(State::Calling {
                            future,
                            headers: Some(headers),
                        });
                    }
                    Verdict::Respond { response, .. } => {
                        // Drop the reserved inner service and the request now.
                        *call = None;
                        return Poll::Ready(Ok(response.map(ResB::from)));
                    }
                },
                StateProj::Calling { future, headers } => {
                    let mut response = ready!(future.poll(cx))?;
                    if let Some(headers) = headers.take() {
                        response.headers_mut().extend(headers);
                    }
                    return Poll::Ready(Ok(response));
                }
            }
        }
    }
}
