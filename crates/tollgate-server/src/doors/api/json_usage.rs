//! Reading the bodies of the usage endpoints (docs/http-api.md, "Usage")
//! with the check body's reader (`json_read.rs`): `/v1/reserve` is a check
//! body with `ttl_ms`; `/v1/settle`, `/v1/cancel`, `/v1/release` and
//! `/v1/renew` name a reservation or lease, may name its pairs (`rule` and
//! `key`, or `checks`) to have them verified, and a settle gives the
//! actual usage (`cost`, for every pair or per pair).

use std::borrow::Cow;

use super::json_read::{
    CheckRequest, Fields, Pair, Raw, cost, item_object, items_of, read_raw, string, unknown,
};

/// The usage endpoints' bodies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Form {
    /// `/v1/reserve`.
    Reserve,
    /// `/v1/settle`.
    Settle,
    /// `/v1/cancel`.
    Cancel,
    /// `/v1/release` and `/v1/renew`.
    Lease,
}

impl Form {
    /// The field naming the ticket.
    fn id_field(self) -> &'static str {
        match self {
            Form::Lease => "lease",
            _ => "reservation",
        }
    }
}

/// A usage body read.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct UsageRequest<'a> {
    /// The pairs named, with their costs (a settle's actual usage; 0 where
    /// no cost applies); empty when a settle, cancel, release or renew
    /// names none.
    pub(super) check: CheckRequest<'a>,
    /// A reservation's ttl, in ms.
    pub(super) ttl_ms: Option<u64>,
    /// The reservation or lease id.
    pub(super) id: Option<Cow<'a, str>>,
    /// A settle's usage for every pair, when given at the top level.
    pub(super) cost: Option<u64>,
}

/// Reads a usage body of `form`, naming the offending field.
pub(super) fn parse_usage(body: &[u8], form: Form) -> Result<UsageRequest<'_>, String> {
    let raw = read_raw(body)?;
    let Raw::Object(mut obj) = raw.0 else {
        return Err(format!(
            "expected a JSON object, found {}",
            raw.0.type_name()
        ));
    };
    if form == Form::Reserve {
        let ttl_ms = match obj.ttl_ms.take() {
            None => None,
            Some(v) => match cost(&v, "ttl_ms")? {
                0 => return Err("ttl_ms: must be at least 1".to_owned()),
                ms => Some(ms),
            },
        };
        let check = super::json_read::RawCheck(Raw::Object(obj)).check_allowing(&["ttl_ms"])?;
        return Ok(UsageRequest {
            check,
            ttl_ms,
            id: None,
            cost: None,
        });
    }
    let id_field = form.id_field();
    let with_cost = form == Form::Settle;
    let mut allowed = vec![id_field, "rule", "key", "checks"];
    if with_cost {
        allowed.push("cost");
    }
    unknown(&obj, "", &allowed)?;
    let id = match form {
        Form::Lease => obj.lease.take(),
        _ => obj.reservation.take(),
    };
    let id = match id {
        Some(v) => string(Some(v), id_field, "")?,
        None => return Err(format!("{id_field}: missing")),
    };
    let top = match obj.cost.take() {
        Some(c) => Some(cost(&c, "cost")?),
        None => None,
    };
    let pairs = named_pairs(obj, with_cost, top)?;
    if with_cost && pairs.is_empty() && top.is_none() {
        return Err("cost: missing (the usage to settle at)".to_owned());
    }
    let multi = pairs.len() > 1;
    Ok(UsageRequest {
        check: CheckRequest { pairs, multi },
        ttl_ms: None,
        id: Some(id),
        cost: top,
    })
}

/// The pairs a settle, cancel, release or renew names, if any: `rule` and
/// `key`, or `checks`; each with its cost for a settle.
fn named_pairs<'a>(
    mut obj: Fields<'a>,
    with_cost: bool,
    top: Option<u64>,
) -> Result<Vec<Pair<'a>>, String> {
    let cost_of = |own: Option<Box<Raw<'_>>>, path: &str| -> Result<u64, String> {
        match (own, top) {
            (Some(c), _) => cost(&c, &super::json_read::field_name(path, "cost")),
            (None, Some(c)) => Ok(c),
            (None, None) if with_cost => Err(format!(
                "{}: missing (the usage to settle at)",
                super::json_read::field_name(path, "cost")
            )),
            (None, None) => Ok(0),
        }
    };
    let Some(checks) = obj.checks.take() else {
        if obj.rule.is_none() && obj.key.is_none() {
            return Ok(Vec::new());
        }
        return Ok(vec![Pair {
            rule: string(obj.rule, "rule", "")?,
            key: string(obj.key, "key", "")?,
            cost: cost_of(None, "")?,
        }]);
    };
    if obj.rule.is_some() || obj.key.is_some() {
        return Err("give either \"rule\" and \"key\" or \"checks\", not both".to_owned());
    }
    let items = items_of(*checks)?;
    let item_fields: &[&str] = if with_cost {
        &["rule", "key", "cost"]
    } else {
        &["rule", "key"]
    };
    let mut pairs = Vec::with_capacity(items.len);
    for (i, item) in items.kept.into_iter().enumerate() {
        let path = format!("checks[{i}]");
        let o = item_object(item, &path)?;
        unknown(&o, &path, item_fields)?;
        pairs.push(Pair {
            rule: string(o.rule, "rule", &path)?,
            key: string(o.key, "key", &path)?,
            cost: cost_of(o.cost, &path)?,
        });
    }
    Ok(pairs)
}
