//! The usage endpoints (docs/http-api.md, "Usage"): `POST /v1/charge`
//! (usage known after the fact), `/v1/reserve`, `/v1/settle` and
//! `/v1/cancel`. Same status codes, headers and error rules as
//! `POST /v1/check`: a charge or a settle is never refused by a limit, so
//! they answer 200 (or 503 when the store failed under `deny`); a reserve
//! answers as a check; a settle or cancel of an unknown reservation is a
//! 404, of one settled or cancelled before a 409.

use std::borrow::Cow;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode};
use http_body::Body;
use tollgate::algorithm::Charged;
use tollgate::store::{Released, Settled};
use tollgate::ticket::{Ticket, TicketKind};
use tollgate::{Check, DecidedBy, MultiDecision};

use super::json_read::{CheckRequest, Pair};
use super::json_usage::{Form, UsageRequest, parse_usage};
use super::json_write::{Decided, Tail};
use super::{Api, answer, bad_body, checks_of, parse_or_400, post_body, refused};
use crate::doors::json::{ApiBody, error};

/// A reservation's ttl when the body gives none.
const DEFAULT_TTL: Duration = Duration::from_secs(60);

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
        // One pair (the usual charge): its check on the stack, as a
        // check's is.
        let result = if let [pair] = parsed.pairs.as_slice() {
            let one = Check::new(&pair.rule, pair.key.as_bytes()).cost(pair.cost);
            timed(self.gate.charge_all(std::slice::from_ref(&one))).await
        } else {
            timed(self.gate.charge_all(&checks_of(&parsed))).await
        };
        match result {
            Ok(charged) => self.charged(
                &parsed,
                &charged.charged,
                charged.degraded,
                &charged.decided_by,
                &[],
            ),
            Err(e) => refused(e),
        }
    }

    /// `POST /v1/reserve`: a check of each pair's cost (its estimate) that,
    /// admitted, answers the `reservation` id to settle or cancel within
    /// `ttl_ms` (default 60000).
    pub(super) async fn reserve<B>(&self, req: Request<B>) -> Response<ApiBody>
    where
        B: Body<Data = Bytes>,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let (body, other_type) = match post_body(req, "/v1/reserve").await {
            Ok(read) => read,
            Err(res) => return res,
        };
        let parsed = match usage_or_400(&body, Form::Reserve, other_type) {
            Ok(p) => p,
            Err(res) => return *res,
        };
        let ttl = parsed.ttl_ms.map_or(DEFAULT_TTL, Duration::from_millis);
        match timed(self.gate.reserve_all(&checks_of(&parsed.check), ttl)).await {
            Ok(reserved) => {
                let id = reserved.ticket.as_ref().map(ToString::to_string);
                let tail = [match &id {
                    Some(id) => Tail::Str("reservation", id),
                    None => Tail::Null("reservation"),
                }];
                let v = &reserved.verdict;
                answer(
                    self,
                    &parsed.check,
                    Decided::Checked(&v.multi),
                    v.degraded,
                    &v.decided_by,
                    &tail,
                )
            }
            Err(e) => refused(e),
        }
    }

    /// `POST /v1/settle` (`cancel` false) and `POST /v1/cancel`.
    pub(super) async fn settle<B>(&self, req: Request<B>, cancel: bool) -> Response<ApiBody>
    where
        B: Body<Data = Bytes>,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let (path, form) = if cancel {
            ("/v1/cancel", Form::Cancel)
        } else {
            ("/v1/settle", Form::Settle)
        };
        let (body, other_type) = match post_body(req, path).await {
            Ok(read) => read,
            Err(res) => return res,
        };
        let parsed = match usage_or_400(&body, form, other_type) {
            Ok(p) => p,
            Err(res) => return *res,
        };
        let ticket = match ticket_of(&parsed, TicketKind::Reservation) {
            Ok(t) => t,
            Err(res) => return *res,
        };
        let actual: Option<Vec<u64>> = (!cancel).then(|| {
            if parsed.check.pairs.is_empty() {
                vec![parsed.cost.unwrap_or(0)]
            } else {
                parsed.check.pairs.iter().map(|p| p.cost).collect()
            }
        });
        match timed(self.gate.settle(&ticket, actual.as_deref())).await {
            Ok(Settled::Unknown) => error(
                StatusCode::NOT_FOUND,
                "unknown reservation: never made, or forgotten an hour after its ttl",
            ),
            Ok(Settled::Finished) => error(
                StatusCode::CONFLICT,
                "the reservation was settled or cancelled before; nothing changed",
            ),
            Ok(Settled::Done { late, charged, .. }) => {
                let named = ticket_pairs(&ticket);
                self.charged(&named, &charged, None, &[], &[Tail::Bool("late", late)])
            }
            Err(e) => refused(e),
        }
    }

    /// `POST /v1/acquire`: slots of concurrency rules, all-or-nothing;
    /// admitted, the answer's `lease` releases or renews them.
    pub(super) async fn acquire<B>(&self, req: Request<B>) -> Response<ApiBody>
    where
        B: Body<Data = Bytes>,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let (body, other_type) = match post_body(req, "/v1/acquire").await {
            Ok(read) => read,
            Err(res) => return res,
        };
        let parsed = match parse_or_400(&body, other_type) {
            Ok(p) => p,
            Err(res) => return *res,
        };
        match timed(self.gate.acquire_all(&checks_of(&parsed))).await {
            Ok(acquired) => {
                let id = acquired.ticket.as_ref().map(ToString::to_string);
                let tail = [match &id {
                    Some(id) => Tail::Str("lease", id),
                    None => Tail::Null("lease"),
                }];
                let v = &acquired.verdict;
                let (multi, by) = (Decided::Checked(&v.multi), &v.decided_by);
                answer(self, &parsed, multi, v.degraded, by, &tail)
            }
            Err(e) => refused(e),
        }
    }

    /// `POST /v1/release` and (`renew`) `POST /v1/renew`.
    pub(super) async fn release<B>(&self, req: Request<B>, renew: bool) -> Response<ApiBody>
    where
        B: Body<Data = Bytes>,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let path = if renew { "/v1/renew" } else { "/v1/release" };
        let (body, other_type) = match post_body(req, path).await {
            Ok(read) => read,
            Err(res) => return res,
        };
        let parsed = match usage_or_400(&body, Form::Lease, other_type) {
            Ok(p) => p,
            Err(res) => return *res,
        };
        let ticket = match ticket_of(&parsed, TicketKind::Lease) {
            Ok(t) => t,
            Err(res) => return *res,
        };
        match timed(self.gate.release(&ticket, renew)).await {
            Ok(Released::Unknown) => error(
                StatusCode::NOT_FOUND,
                "unknown lease: never taken, released before, or ended after its lease",
            ),
            Ok(Released::Done(decisions)) => {
                let multi = MultiDecision::from_decisions(decisions);
                answer(
                    self,
                    &ticket_pairs(&ticket),
                    Decided::Checked(&multi),
                    None,
                    &[],
                    &[],
                )
            }
            Err(e) => refused(e),
        }
    }

    /// The answer to charged pairs: 200, each pair's decision and debt,
    /// and what decided each (`by`; none for a settle).
    fn charged(
        &self,
        req: &CheckRequest<'_>,
        charged: &[Charged],
        degraded: Option<tollgate::OnError>,
        by: &[DecidedBy],
        tail: &[Tail<'_>],
    ) -> Response<ApiBody> {
        answer(self, req, Decided::Charged(charged), degraded, by, tail)
    }
}

/// A usage body read, or the 400 naming its problem (boxed: large, and
/// off the admitting path).
fn usage_or_400(
    body: &[u8],
    form: Form,
    other_type: Option<HeaderValue>,
) -> Result<UsageRequest<'_>, Box<Response<ApiBody>>> {
    parse_usage(body, form).map_err(|e| bad_body(e, other_type))
}

/// The ticket a body names, checked against the pairs it names too; or
/// the 400 saying why not.
fn ticket_of(
    parsed: &UsageRequest<'_>,
    kind: TicketKind,
) -> Result<Ticket, Box<Response<ApiBody>>> {
    let what = match kind {
        TicketKind::Reservation => "reservation",
        TicketKind::Lease => "lease",
    };
    let bad = |e: String| Box::new(error(StatusCode::BAD_REQUEST, e));
    let id = parsed.id.as_deref().unwrap_or_default();
    let ticket = Ticket::parse(id, kind).map_err(|e| bad(format!("{what}: {e}")))?;
    let named = &parsed.check.pairs;
    if named.is_empty() {
        return Ok(ticket);
    }
    let covers = || {
        ticket
            .pairs
            .iter()
            .map(|p| format!("{}/{}", p.rule, String::from_utf8_lossy(&p.key[1..])))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if named.len() != ticket.pairs.len() {
        return Err(bad(format!(
            "the body names {} pairs; the {what} covers {}: {}",
            named.len(),
            ticket.pairs.len(),
            covers()
        )));
    }
    for (i, (n, p)) in named.iter().zip(&ticket.pairs).enumerate() {
        if !p.is(&n.rule, n.key.as_bytes()) {
            let field = if named.len() == 1 {
                "rule/key".to_owned()
            } else {
                format!("checks[{i}]")
            };
            return Err(bad(format!(
                "{field}: {:?}/{:?} is not the {what}'s; it covers {}",
                n.rule,
                n.key,
                covers()
            )));
        }
    }
    Ok(ticket)
}

/// A request naming the ticket's pairs, for the answer's body and headers.
fn ticket_pairs(ticket: &Ticket) -> CheckRequest<'_> {
    CheckRequest {
        pairs: ticket
            .pairs
            .iter()
            .map(|p| Pair {
                rule: Cow::Borrowed(p.rule.as_str()),
                key: Cow::Borrowed(""),
                cost: 0,
            })
            .collect(),
        multi: ticket.pairs.len() > 1,
    }
}

/// `decision`, its time recorded as the API's decision latency: a usage
/// call decides as a check does (docs/metrics.md).
async fn timed<T>(decision: impl Future<Output = T>) -> T {
    crate::metrics::timed(crate::metrics::Door::Api, decision).await
}
