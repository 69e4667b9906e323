//! The API's own answers: the body type, JSON answers and the
//! `{"error"}` answers every failure is.

use bytes::Bytes;
use http::header::{ALLOW, CONTENT_LENGTH, CONTENT_TYPE};
use http::{HeaderValue, Method, Response, StatusCode};
use http_body::Body as _;
use http_body_util::Full;
use serde_json::{Value, json};

/// The body of every API answer.
pub type ApiBody = Full<Bytes>;

pub(crate) fn json_response(status: StatusCode, value: &Value) -> Response<ApiBody> {
    let mut bytes = serde_json::to_vec(value).unwrap_or_default();
    bytes.push(b'\n');
    bytes_response(status, bytes)
}

#[inline]
pub(crate) fn bytes_response(status: StatusCode, bytes: Vec<u8>) -> Response<ApiBody> {
    // Through a boxed slice: `Bytes::from` a `Vec` with spare capacity
    // allocates a second, shared header; shrinking in place does not.
    let mut res = Response::new(Full::new(Bytes::from(bytes.into_boxed_slice())));
    *res.status_mut() = status;
    res.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    res
}

/// `{"error": message}` with `status`.
pub(crate) fn error(status: StatusCode, message: impl Into<String>) -> Response<ApiBody> {
    json_response(status, &json!({ "error": message.into() }))
}

pub(crate) fn method_not_allowed(
    method: &Method,
    path: &str,
    allow: &'static str,
) -> Response<ApiBody> {
    let mut res = error(
        StatusCode::METHOD_NOT_ALLOWED,
        format!("method {method} is not allowed on {path}; use {allow}"),
    );
    res.headers_mut()
        .insert(ALLOW, HeaderValue::from_static(allow));
    res
}

/// Whether `method` reads (`GET`, or `HEAD` for the headers alone).
pub(crate) fn is_get(method: &Method) -> bool {
    method == Method::GET || method == Method::HEAD
}

/// `answer()` for GET and HEAD, 405 otherwise.
pub(crate) fn get_only<B>(
    req: &http::Request<B>,
    path: &str,
    answer: impl FnOnce() -> Response<ApiBody>,
) -> Response<ApiBody> {
    if is_get(req.method()) {
        answer()
    } else {
        method_not_allowed(req.method(), path, "GET, HEAD")
    }
}

/// Makes `res` the answer to a `HEAD` when `head`: its `Content-Length`
/// kept, its body gone. hyper writes `Content-Length` from the body's
/// exact size itself; only a HEAD answer, whose body goes, needs the
/// field set here.
pub(crate) fn head_only(head: bool, res: &mut Response<ApiBody>) {
    if !head {
        return;
    }
    if !res.headers().contains_key(CONTENT_LENGTH) {
        let len = res.body().size_hint().exact().unwrap_or(0);
        res.headers_mut()
            .insert(CONTENT_LENGTH, HeaderValue::from(len));
    }
    *res.body_mut() = Full::default();
}
