//! Reading a request body ([`read_body`]) within the API's bounds, and
//! whether its `Content-Type` is JSON.

use std::pin::pin;
use std::task::Poll;
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONNECTION, CONTENT_LENGTH};
use http::{HeaderValue, Request, Response, StatusCode};
use http_body::Body;
use http_body_util::{BodyExt, LengthLimitError, Limited};

use super::reply::{ApiBody, error};

/// The largest request body accepted, in bytes.
pub const MAX_BODY: usize = 64 * 1024;
/// The longest a client may take to send a request body.
pub const BODY_TIMEOUT: Duration = Duration::from_secs(10);

#[inline]
pub(crate) fn is_json(content_type: &HeaderValue) -> bool {
    // What clients send, matched at once (this runs on every check).
    if content_type.as_bytes() == b"application/json" {
        return true;
    }
    let Ok(text) = content_type.to_str() else {
        return false;
    };
    let essence = text.split(';').next().unwrap_or("").trim();
    // Compared without lowercasing a copy (this runs on every check).
    let ends_with_json = essence
        .len()
        .checked_sub(5)
        .and_then(|start| essence.get(start..))
        .is_some_and(|end| end.eq_ignore_ascii_case("+json"));
    essence.eq_ignore_ascii_case("application/json") || (essence.contains('/') && ends_with_json)
}

/// Reads a request's body as `POST /v1/check` does: at most [`MAX_BODY`]
/// bytes (else 413), within [`BODY_TIMEOUT`] (else 408); an error is the
/// API's JSON answer.
///
/// A body that has already arrived (hyper hands over the bytes it read
/// with the head at once) is taken without arming a timer or collecting:
/// the first poll returns it whole. Only a body still on its way is
/// awaited under the timeout.
///
/// # Errors
/// The answer to send instead: 413, 408, or 400 when the body broke off.
pub async fn read_body<B>(req: Request<B>) -> Result<Bytes, Response<ApiBody>>
where
    B: Body<Data = Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    // A body not read to its end leaves the connection mid-request: say it
    // closes (RFC 9110 §15.5.14; hyper then closes it after the answer).
    let closing = |mut res: Response<ApiBody>| {
        res.headers_mut()
            .insert(CONNECTION, HeaderValue::from_static("close"));
        res
    };
    let too_large = || {
        closing(error(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("request body is larger than {MAX_BODY} bytes"),
        ))
    };
    let declared = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY as u64) {
        return Err(too_large());
    }
    let mut body = pin!(Limited::new(req.into_body(), MAX_BODY));
    let first = std::future::poll_fn(|cx| Poll::Ready(body.as_mut().poll_frame(cx))).await;
    let collected = match first {
        // The usual case: the whole body is one frame that came with the
        // head; taken as it is (no collecting buffer, no timer).
        Poll::Ready(None) => Ok(Bytes::new()),
        Poll::Ready(Some(Ok(frame))) if frame.is_data() && body.is_end_stream() => {
            Ok(frame.into_data().unwrap_or_default())
        }
        Poll::Ready(Some(Err(e))) => Err(e),
        more => {
            let head = match more {
                Poll::Ready(Some(Ok(frame))) => frame.into_data().ok(),
                _ => None,
            };
            // Boxed: the timer and the collector would otherwise make
            // every check's future (moved a few times per request) larger
            // by their size, fast path or not.
            match Box::pin(tokio::time::timeout(BODY_TIMEOUT, body.as_mut().collect())).await {
                Ok(rest) => rest.map(|rest| match head {
                    None => rest.to_bytes(),
                    Some(head) => {
                        let rest = rest.to_bytes();
                        let mut all = Vec::with_capacity(head.len() + rest.len());
                        all.extend_from_slice(&head);
                        all.extend_from_slice(&rest);
                        Bytes::from(all)
                    }
                }),
                Err(_) => {
                    return Err(closing(error(
                        StatusCode::REQUEST_TIMEOUT,
                        format!("request body not received within {BODY_TIMEOUT:?}"),
                    )));
                }
            }
        }
    };
    match collected {
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => Err(too_large()),
        Err(e) => Err(error(
            StatusCode::BAD_REQUEST,
            format!("could not read the request body: {e}"),
        )),
        Ok(bytes) => Ok(bytes),
    }
}
