//! [`ResponseFuture`]: the named future of [`RateLimit`](crate::RateLimit).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use http::{HeaderMap, Request, Response};
use pin_project_lite::pin_project;
use tower_service::Service;

use crate::decide::{HttpVerdict, HttpVerdictFuture};
use crate::headers::merge_into;

pin_project! {
    /// The response future of [`RateLimit`](crate::RateLimit): waits for
    /// the limiter's verdict, then either answers by itself (429, 503,
    /// 400) or waits for the inner service to be ready, calls it and adds
    /// the RateLimit headers to its response.
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
            verdict: HttpVerdictFuture,
            call: Option<(I, Request<ReqB>)>,
        },
        Readying {
            call: Option<(I, Request<ReqB>)>,
            headers: Option<HeaderMap>,
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
    pub(crate) fn new(verdict: HttpVerdictFuture, inner: I, req: Request<ReqB>) -> Self {
        Self {
            state: State::Deciding {
                verdict,
                call: Some((inner, req)),
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
            State::Readying { .. } => "waiting for the inner service",
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
                    HttpVerdict::Admit { headers, .. } => {
                        let call = call.take();
                        this.state.set(State::Readying {
                            call,
                            headers: Some(headers),
                        });
                    }
                    HttpVerdict::Respond { response, .. } => {
                        // Drop the inner service's clone and the request now.
                        *call = None;
                        return Poll::Ready(Ok(response.map(ResB::from)));
                    }
                },
                StateProj::Readying { call, headers } => {
                    let (inner, _) = call
                        .as_mut()
                        .expect("ResponseFuture polled after completion");
                    ready!(inner.poll_ready(cx))?;
                    let (mut inner, req) = call.take().expect("checked above");
                    let future = inner.call(req);
                    let headers = headers.take();
                    this.state.set(State::Calling { future, headers });
                }
                StateProj::Calling { future, headers } => {
                    let mut response = ready!(future.poll(cx))?;
                    if let Some(headers) = headers.take() {
                        merge_into(response.headers_mut(), headers);
                    }
                    return Poll::Ready(Ok(response));
                }
            }
        }
    }
}
