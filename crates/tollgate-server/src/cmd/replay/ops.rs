//! Running one trace row through the limiter at the row's time: a check, a
//! charge, a reservation and its settle or cancel, a lease and its release
//! or renew (docs/replay.md, "Ops"). Settles, cancels, releases and renews
//! act on the oldest entry the [`Book`] holds open for the row's (rule,
//! key).

use std::time::Duration;

use tollgate::store::{Released, Settled};
use tollgate::ticket::{REMEMBERED_AFTER_TTL, Ticket, TicketKind, TicketPair};
use tollgate::time::duration_to_micros;
use tollgate::{Algorithm, Check, Decision, Limiter, Micros, Op, Store, StoreError};

use super::open::{Book, MAX_OPEN, Open};
use super::trace::Row;

/// What a row did.
#[derive(Debug, Clone)]
pub(super) struct Done {
    /// The decision written for the row: a check's, reservation's or
    /// acquire's own; after a charge, settle or cancel the key's state as a
    /// charge answers it (always allowed); after a release or renew the
    /// key's state as a peek answers it.
    pub(super) decision: Decision,
    /// The key's debt after a charge, settle or cancel.
    pub(super) debt: Option<u64>,
    /// Units the row put on the key: a check's, reservation's or acquire's
    /// cost when admitted, a charge's cost, a settle's usage beyond its
    /// estimate.
    pub(super) admitted: u64,
    /// Units asked for and refused: a denied check's, reservation's or
    /// acquire's cost.
    pub(super) denied: u64,
}

/// Why a row could not be run.
#[derive(Debug)]
pub(super) enum Failed {
    /// The row is wrong for the trace (named in the message).
    Row(String),
    /// The store failed.
    Store(StoreError),
}

impl From<tollgate::Error> for Failed {
    fn from(e: tollgate::Error) -> Self {
        match e {
            tollgate::Error::Store(e) => Failed::Store(e),
            other => Failed::Row(other.to_string()),
        }
    }
}

/// Runs `row` (of rule `rule`, at position `index` in the limiter's rules,
/// read on trace `line`) at its time.
pub(super) async fn run<S: Store>(
    limiter: &Limiter<S>,
    book: &mut Book,
    row: &Row<'_>,
    index: usize,
    line: u64,
) -> Result<Done, Failed> {
    let t: Micros = row.t_ms * 1_000;
    let at = Some(t);
    // By the rule's position, found once per row: not looked up again.
    let check = Check::new(row.rule, row.key).cost(row.cost).at_index(index);
    match row.op {
        Op::Check => {
            let decision = limiter.check_at(row.rule, row.key, row.cost, at).await?;
            Ok(decided(decision, row.cost))
        }
        Op::Charge => {
            let charged = limiter
                .charge_all_at(&[check], at)
                .await?
                .pop()
                .ok_or_else(|| Failed::Row("the store answered no charge".into()))?;
            Ok(Done {
                decision: charged.decision,
                debt: Some(charged.debt),
                admitted: row.cost,
                denied: 0,
            })
        }
        Op::Reserve | Op::Acquire => {
            room(book, t)?;
            let ticketed = if row.op == Op::Reserve {
                let ttl = Duration::from_millis(row.ttl_ms);
                limiter.reserve_all_at(&[check], ttl, at).await?
            } else {
                limiter.acquire_all_at(&[check], at).await?
            };
            if let Some(ticket) = &ticketed.ticket {
                let until = if row.op == Op::Reserve {
                    t.saturating_add(row.ttl_ms * 1_000)
                        .saturating_add(duration_to_micros(REMEMBERED_AFTER_TTL))
                } else {
                    t.saturating_add(lease_of(limiter, index))
                };
                book.push(
                    index,
                    row.key,
                    Open {
                        nonce: ticket.nonce,
                        until,
                        units: row.cost,
                        line,
                    },
                );
            }
            Ok(decided(*ticketed.multi.decision(), row.cost))
        }
        Op::Settle | Op::Cancel => settle(limiter, book, row, index).await,
        Op::Release | Op::Renew => release(limiter, book, row, index).await,
        // A trace never names another (`trace::OPS`).
        op => Err(Failed::Row(format!("op {op} is not one a trace runs"))),
    }
}

/// A check's, reservation's or acquire's decision: its cost admitted or
/// denied.
fn decided(decision: Decision, cost: u64) -> Done {
    let (admitted, denied) = if decision.allowed {
        (cost, 0)
    } else {
        (0, cost)
    };
    Done {
        decision,
        debt: None,
        admitted,
        denied,
    }
}

fn room(book: &mut Book, t: Micros) -> Result<(), Failed> {
    book.make_room(t).map_err(|_| {
        Failed::Row(format!(
            "more than {MAX_OPEN} reservations and leases are open at once; a replay holds \
             at most that many: settle, cancel or release them, or give them shorter \
             ttl_ms or leases"
        ))
    })
}

/// A concurrency rule's lease, µs (its period).
fn lease_of<S: Store>(limiter: &Limiter<S>, index: usize) -> Micros {
    limiter.rules()[index].period_micros()
}

/// The single-pair ticket of `open`, of `kind`, for the row's (rule, key).
fn ticket(kind: TicketKind, open: &Open, row: &Row<'_>) -> Ticket {
    Ticket {
        kind,
        nonce: open.nonce,
        pairs: vec![TicketPair::new(row.rule, row.key)],
    }
}

/// The row's key for messages: as text, at most 64 characters.
fn shown(key: &[u8]) -> String {
    String::from_utf8_lossy(key).chars().take(64).collect()
}

async fn settle<S: Store>(
    limiter: &Limiter<S>,
    book: &mut Book,
    row: &Row<'_>,
    index: usize,
) -> Result<Done, Failed> {
    let op = row.op.as_str();
    if limiter.rules()[index].algorithm() == Algorithm::Concurrency {
        return Err(Failed::Row(format!(
            "op {op}: rule {:?} is a concurrency rule; its leases are released, not settled",
            row.rule
        )));
    }
    let t = row.t_ms * 1_000;
    let Some(open) = book.oldest(index, row.key, t).copied() else {
        return Err(Failed::Row(format!(
            "op {op}: rule {:?} key {:?} has no open reservation to {op} (every one was \
             settled, cancelled, or is past its ttl_ms and the store's memory of it)",
            row.rule,
            shown(row.key)
        )));
    };
    let actual = [row.cost];
    let actual = (row.op == Op::Settle).then_some(&actual[..]);
    let settled = limiter
        .settle_at(
            &ticket(TicketKind::Reservation, &open, row),
            actual,
            Some(t),
        )
        .await?;
    let charged = match settled {
        Settled::Done { mut charged, .. } if charged.len() == 1 => charged.remove(0),
        other => {
            return Err(Failed::Row(format!(
                "op {op}: the store no longer holds the reservation of line {} ({other:?}); \
                 a memory store with a small max_keys forgets reservations early",
                open.line
            )));
        }
    };
    book.close_oldest(index, row.key);
    Ok(Done {
        decision: charged.decision,
        debt: Some(charged.debt),
        admitted: if row.op == Op::Settle {
            row.cost.saturating_sub(open.units)
        } else {
            0
        },
        denied: 0,
    })
}

async fn release<S: Store>(
    limiter: &Limiter<S>,
    book: &mut Book,
    row: &Row<'_>,
    index: usize,
) -> Result<Done, Failed> {
    let op = row.op.as_str();
    if limiter.rules()[index].algorithm() != Algorithm::Concurrency {
        return Err(Failed::Row(format!(
            "op {op}: rule {:?} is not a concurrency rule; only their leases are released \
             and renewed",
            row.rule
        )));
    }
    let t = row.t_ms * 1_000;
    let renew = row.op == Op::Renew;
    let Some(open) = book.oldest(index, row.key, t) else {
        return Err(Failed::Row(format!(
            "op {op}: rule {:?} key {:?} has no live lease to {op} (every one was released \
             or has run out its lease)",
            row.rule,
            shown(row.key)
        )));
    };
    let taken = *open;
    let released = limiter
        .release_at(&ticket(TicketKind::Lease, &taken, row), renew, Some(t))
        .await?;
    let decision = match released {
        Released::Done(mut ds) if ds.len() == 1 => ds.remove(0),
        other => {
            return Err(Failed::Row(format!(
                "op {op}: the store no longer holds the lease of line {} ({other:?}); a \
                 memory store with a small max_keys forgets leases early",
                taken.line
            )));
        }
    };
    if renew {
        if let Some(open) = book.oldest(index, row.key, t) {
            open.until = t.saturating_add(lease_of(limiter, index));
        }
    } else {
        book.close_oldest(index, row.key);
    }
    Ok(Done {
        decision,
        debt: None,
        admitted: 0,
        denied: 0,
    })
}
