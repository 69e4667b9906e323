//! `GET /admin/v1/top/{rule}[?n=N]`: the keys the rule denied most on this
//! replica lately, from the library's bounded sketch (docs/admin.md, "Top
//! denied keys"; docs/semantics.md, "Top denied keys").

use hyper::StatusCode;
use serde_json::json;

use crate::gate::Gate;

/// Most keys one answer lists.
pub(super) const MAX_TOP: usize = 1_000;
/// Keys listed when `n` is not given.
pub(super) const DEFAULT_TOP: usize = 10;

/// The answer for `rule` (percent-decoded) and the request's `query`: its
/// status and JSON body.
pub(super) fn top(gate: &Gate, rule: &str, query: Option<&str>) -> (StatusCode, serde_json::Value) {
    let n = match query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .find_map(|p| p.strip_prefix("n="))
    {
        None => DEFAULT_TOP,
        Some(text) => match text.parse::<usize>() {
            Ok(n) if (1..=MAX_TOP).contains(&n) => n,
            _ => {
                return (
                    StatusCode::BAD_REQUEST,
                    json!({ "error": format!("n must be 1 to {MAX_TOP}, got {text:?}") }),
                );
            }
        },
    };
    let (Ok(keys), Ok(lately)) = (gate.top_denied(rule, n), gate.limiter().denied_lately(rule))
    else {
        return (
            StatusCode::NOT_FOUND,
            json!({ "error": format!("unknown rule {rule:?}") }),
        );
    };
    let keys: Vec<serde_json::Value> = keys
        .iter()
        .map(|k| {
            json!({
                "key": String::from_utf8_lossy(&k.key),
                "key_len": k.key_len,
                "truncated": k.truncated(),
                "count": k.count,
                "error": k.error,
            })
        })
        .collect();
    (
        StatusCode::OK,
        json!({ "rule": rule, "denied_lately": lately, "keys": keys }),
    )
}
