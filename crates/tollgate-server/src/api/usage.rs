//! The usage endpoints (docs/http-api.md, "Usage"): `POST /v1/charge`,
//! usage known after the fact. Same bodies, status codes, headers and
//! error rules as `POST /v1/check`; a charge is never refused by a limit,
//! so it answers 200 (or 503 under `on_error = "deny"`).

use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use tollgate::MultiDecision;
use tollgate::resilient::Verdict;

use super::reply::ApiBody;
use super::{Api, answer, checks_of, parse_or_400, post_body, refused};

impl Api {
    /// `POST /v1/charge`: every pair charged its cost unconditionally;
    /// each answer object adds `debt`, the units its key is over the limit.
    pub(super) async fn charge<B>(&self, req: Request<B>) -> Response<ApiBody>
    where
        B: Body<Data = Bytes>,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let (body, other_type) = match post_body(req, "/v1/charge").await {
            Ok(read) => read,
            Err(res) => return res,
        };
        let parsed = match parse_or_400(&body, other_type) {
            Ok(p) => p,
            Err(res) => return *res,
        };
        match self.gate.charge_all(&checks_of(&parsed)).await {
            Ok(charged) => {
                let debts: Vec<u64> = charged.charged.iter().map(|c| c.debt).collect();
                let verdict = Verdict {
                    multi: MultiDecision::from_decisions(
                        charged.charged.iter().map(|c| c.decision).collect(),
                    ),
                    degraded: charged.degraded,
                };
                answer(self, &parsed, &verdict, Some(&debts))
            }
            Err(e) => refused(e),
        }
    }
}
