//! [`ResponseFuture`]: the named future of [`RateLimit`](crate::RateLimit).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use http::{HeaderMap, Request, Response};
use pin_project_lite::pin_project;
use tollgate_http::headers::merge_into;
use tollgate_http::usage::{AdmissionFuture, Hold, UsageBody};
use tower_service::Service;

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
            verdict: AdmissionFuture,
            call: Option<(I, Request<ReqB>)>,
        },
        Readying {
            call: Option<(I, Request<ReqB>)>,
            headers: Option<HeaderMap>,
            hold: Option<Hold>,
        },
        Calling {
            #[pin]
            future: I::Future,
            headers: Option<HeaderMap>,
            hold: Option<Hold>,
        },
    }
}

impl<I, ReqB> ResponseFuture<I, ReqB>
where
    I: Service<Request<ReqB>>,
{
    pub(crate) fn new(verdict: AdmissionFuture, inner: I, req: Request<ReqB>) -> Self {
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
    type Output = Result<Response<UsageBody<ResB>>, I::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Deciding { verdict, call } => {
                    let admission = ready!(verdict.as_mut().poll(cx));
                    match admission.verdict.into_headers() {
                        Ok(headers) => {
                            let call = call.take();
                            this.state.set(State::Readying {
                                call,
                                headers: Some(headers),
                                hold: admission.hold,
                            });
                        }
                        Err(response) => {
                            // Drop the inner service's clone and the request now.
                            *call = None;
                            let response = response.map(|b| UsageBody::plain(ResB::from(b)));
                            return Poll::Ready(Ok(response));
                        }
                    }
                }
                StateProj::Readying {
                    call,
                    headers,
                    hold,
                } => {
                    let (inner, _) = call
                        .as_mut()
                        .expect("ResponseFuture polled after completion");
                    ready!(inner.poll_ready(cx))?;
                    let (mut inner, req) = call.take().expect("checked above");
                    let future = inner.call(req);
                    let (headers, hold) = (headers.take(), hold.take());
                    this.state.set(State::Calling {
                        future,
                        headers,
                        hold,
                    });
                }
                StateProj::Calling {
                    future,
                    headers,
                    hold,
                } => {
                    // An inner service that fails drops the hold: settled at
                    // the estimate, released.
                    let mut response = ready!(future.poll(cx))?;
                    if let Some(headers) = headers.take() {
                        merge_into(response.headers_mut(), headers);
                    }
                    let response = match hold.take() {
                        Some(hold) => hold.wrap(response),
                        None => response.map(UsageBody::plain),
                    };
                    return Poll::Ready(Ok(response));
                }
            }
        }
    }
}
