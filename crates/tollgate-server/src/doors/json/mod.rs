//! What the JSON doors (the HTTP API, the admin API and the ops
//! listener) share: reading a request body within bounds (`body.rs`) and
//! the JSON answers, the `{"error"}` ones and `HEAD`'s included
//! (`reply.rs`).

mod body;
mod reply;

pub(crate) use body::is_json;
pub use body::{BODY_TIMEOUT, MAX_BODY, read_body};
pub use reply::ApiBody;
pub(crate) use reply::{
    bytes_response, error, get_only, head_only, is_get, json_response, method_not_allowed,
};
