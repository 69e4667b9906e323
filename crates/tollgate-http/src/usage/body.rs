//! [`UsageBody`]: a response body that ends its request's [`Hold`] when it
//! ends or is dropped, with the usage read from the head, the trailers,
//! or the body's own bytes as they pass ([`BodyMeter`]).

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Buf;
use http::{HeaderMap, Response};
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use super::hold::{Ended, Hold, Outcome};
use super::meter::BodyMeter;
use crate::cost::Reading;

/// A held request's hold and what its response said so far.
#[derive(Debug)]
struct Meter {
    hold: Option<Hold>,
    /// One reading per usage source: from the head, then from the
    /// trailers for a source the head lacked.
    readings: Vec<Reading>,
    /// The body sources' reader, when a source reads the body.
    body: Option<BodyMeter>,
}

impl Meter {
    fn trailers(&mut self, trailers: &HeaderMap) {
        let Some(hold) = &self.hold else { return };
        for (reading, source) in self.readings.iter_mut().zip(hold.sources()) {
            if *reading == Reading::Absent {
                *reading = source.read(trailers);
            }
        }
    }

    /// Feeds a data frame to the body's reader, without consuming it.
    fn data(&mut self, data: &impl Buf) {
        let (Some(body), Some(_)) = (&mut self.body, &self.hold) else {
            // Nothing to read for, or the hold has ended already.
            return;
        };
        if data.chunk().len() == data.remaining() {
            body.push(data.chunk());
            return;
        }
        // A buffer in several pieces: read them in place.
        let mut slices = [std::io::IoSlice::new(&[]); 64];
        let n = data.chunks_vectored(&mut slices);
        if slices[..n].iter().map(|s| s.len()).sum::<usize>() == data.remaining() {
            for s in &slices[..n] {
                body.push(s);
            }
        } else {
            body.blind();
        }
    }

    /// Ends the hold, once.
    fn finish(&mut self, how: Ended) {
        if let Some(hold) = self.hold.take() {
            let mut how = how;
            if let Some(body) = &mut self.body {
                let (read, ended) = body.finish(how);
                how = ended;
                for (reading, from_body) in self.readings.iter_mut().zip(read) {
                    if from_body != Reading::Absent || *reading == Reading::Absent {
                        *reading = from_body;
                    }
                }
            }
            hold.end(Outcome {
                readings: std::mem::take(&mut self.readings),
                how,
            });
        }
    }
}

impl Drop for Meter {
    fn drop(&mut self) {
        // A body dropped before its end (the client went away): settle
        // with what the head said, else the estimate. No waiting here:
        // the hold's task does the store's work.
        self.finish(Ended::Dropped);
    }
}

pin_project! {
    /// A response body as the inner service (or the upstream) sent it;
    /// for a request that holds a reservation or a lease, its end — the
    /// last frame read, an error, or the body dropped — ends the hold
    /// (docs/tower.md, "Usage and in-flight limits"). Frames pass through
    /// unchanged.
    #[derive(Debug)]
    pub struct UsageBody<B> {
        #[pin]
        inner: B,
        meter: Option<Meter>,
    }
}

impl<B> UsageBody<B> {
    /// A body that holds nothing.
    pub fn plain(inner: B) -> Self {
        Self { inner, meter: None }
    }

    /// The inner body.
    pub fn get_ref(&self) -> &B {
        &self.inner
    }

    /// The inner body, unwrapped: a hold it had ends now, as if the body
    /// were dropped (settled with the usage its head reported, or what
    /// its body showed so far).
    pub fn into_inner(self) -> B {
        self.inner
    }

    /// Whether the body still holds its request's reservation or lease.
    pub fn holds(&self) -> bool {
        self.meter.as_ref().is_some_and(|m| m.hold.is_some())
    }
}

impl<B: Body> UsageBody<B> {
    fn finish_if_ended(self: Pin<&mut Self>) {
        let this = self.project();
        if this.inner.is_end_stream()
            && let Some(meter) = this.meter
        {
            meter.finish(Ended::Complete);
        }
    }
}

impl<B: From<String>> From<String> for UsageBody<B> {
    fn from(s: String) -> Self {
        Self::plain(B::from(s))
    }
}

impl Hold {
    /// `response` with its body wrapped so that its end ends this hold;
    /// the usage is read from its head now, and from its trailers when
    /// the head lacks it, and from the body as it passes when a source
    /// reads the body (the reader chosen by its `Content-Type`).
    pub fn wrap<B>(self, response: Response<B>) -> Response<UsageBody<B>> {
        let readings = self.read_head(response.headers());
        let body = BodyMeter::new(self.sources(), response.headers());
        response.map(|inner| UsageBody {
            inner,
            meter: Some(Meter {
                hold: Some(self),
                readings,
                body,
            }),
        })
    }
}

impl<B: Body> Body for UsageBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.as_mut().project();
        let frame = ready!(this.inner.poll_frame(cx));
        match &frame {
            None => {
                if let Some(meter) = this.meter {
                    meter.finish(Ended::Complete);
                }
            }
            Some(Err(_)) => {
                if let Some(meter) = this.meter {
                    meter.finish(Ended::Dropped);
                }
            }
            Some(Ok(frame)) => {
                if let Some(meter) = this.meter {
                    if let Some(data) = frame.data_ref() {
                        meter.data(data);
                    } else if let Some(trailers) = frame.trailers_ref() {
                        meter.trailers(trailers);
                    }
                }
                // A server may stop polling once the body says it has
                // ended; the hold ends with the last frame then.
                self.finish_if_ended();
            }
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
