//! The cost of usage operations next to a check's, in one process, for
//! `bench/usage.sh`:
//!
//! * `memory ROUNDS N`: the memory store's `check_sync` and `charge_sync`,
//!   and `check_all_sync` and `charge_all_sync` of one pair (GCRA and sliding
//!   window, one key), `N` of each per
//!   round, in turn for `ROUNDS` rounds; prints the median ns per operation
//!   of each and the median per-round ratio charge / check.
//! * `only KIND N`: `N` memory-store operations of one kind (`check`,
//!   `charge`, `check_all` or `charge_all`, one pair) and nothing else, for
//!   callgrind to count.
//! * `redis URL KIND N`: `N` operations of one kind, one after the other,
//!   through a `RedisStore`: `check`, `charge`, `reserve`, `reserve-settle`
//!   (a reserve, then its settle) or `acquire-release`; prints the operations done.
//!   `bench/usage.sh` reads redis-server's CPU time and script calls around
//!   each run.
//!
//! ```sh
//! cargo run --release --features redis -p tollgate --example usage_load -- memory 15 200000
//! ```

// A measuring tool: its output is its report.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use tollgate::store::KeyCheck;
use tollgate::store::redis::{RedisOptions, RedisStore};
use tollgate::ticket::{Ticket, TicketKind, TicketPair};
use tollgate::{Algorithm, MemoryStore, Rule, RuleSpec, Store};

fn rule(algorithm: Algorithm, limit: u64) -> Rule {
    let period = if algorithm == Algorithm::Concurrency {
        Duration::from_secs(30)
    } else {
        Duration::from_secs(3600)
    };
    RuleSpec::new(format!("bench_{algorithm}"), algorithm, limit, period)
        .build()
        .expect("valid rule")
}

/// A form of the operations: its name, a check, a charge.
type Form<'a> = (&'static str, Box<dyn Fn() + 'a>, Box<dyn Fn() + 'a>);

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// ns per operation of `n` calls of `op`.
fn time(n: u64, mut op: impl FnMut(u64)) -> f64 {
    let start = Instant::now();
    for i in 0..n {
        op(i);
    }
    #[allow(clippy::cast_precision_loss)]
    let per = start.elapsed().as_nanos() as f64 / n as f64;
    per
}

fn memory(rounds: usize, n: u64) {
    for algorithm in [Algorithm::Gcra, Algorithm::SlidingWindow] {
        // Every operation admitted and within the limit: equal work.
        let r = rule(algorithm, 1_000_000_000);
        let store = MemoryStore::new();
        let key = b"user-42";
        let pair = [KeyCheck {
            rule: &r,
            key,
            cost: 1,
        }];
        // One pair as a single operation, and in the multi-pair form every
        // front door calls (`check_all` / `charge_all`, one pair).
        let forms: [Form<'_>; 2] = [
            (
                "single",
                Box::new(|| {
                    black_box(store.check_sync(&r, key, 1, None));
                }),
                Box::new(|| {
                    black_box(store.charge_sync(&r, key, 1, None));
                }),
            ),
            (
                "all",
                Box::new(|| {
                    black_box(store.check_all_sync(&pair, None));
                }),
                Box::new(|| {
                    black_box(store.charge_all_sync(&pair, None));
                }),
            ),
        ];
        for (form, check_op, charge_op) in &forms {
            let (mut checks, mut charges, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
            for _ in 0..rounds {
                let check = time(n, |_| check_op());
                let charge = time(n, |_| charge_op());
                checks.push(check);
                charges.push(charge);
                ratios.push(charge / check);
            }
            println!(
                "memory {algorithm} {form}: check {:.1} ns, charge {:.1} ns, charge/check {:.3} (median of {rounds} rounds)",
                median(checks),
                median(charges),
                median(ratios)
            );
        }
    }
}

fn only(kind: &str, n: u64) {
    let r = rule(Algorithm::Gcra, 1_000_000_000);
    let store = MemoryStore::new();
    let key = b"user-42";
    let pair = [KeyCheck {
        rule: &r,
        key,
        cost: 1,
    }];
    for _ in 0..n {
        match kind {
            "check" => {
                black_box(store.check_sync(&r, key, 1, None));
            }
            "check_all" => {
                black_box(store.check_all_sync(&pair, None));
            }
            "charge_all" => {
                black_box(store.charge_all_sync(&pair, None));
            }
            _ => {
                black_box(store.charge_sync(&r, key, 1, None));
            }
        }
    }
}

async fn redis(url: &str, kind: &str, n: u64) {
    let store = RedisStore::connect(url, RedisOptions::default())
        .await
        .expect("connect");
    let rate = rule(Algorithm::SlidingWindow, 1_000_000_000);
    let slots = rule(Algorithm::Concurrency, 100_000);
    let mut done = 0;
    for i in 0..n {
        let key = format!("k{}", i % 1000);
        let key = key.as_bytes();
        let pair = |rule| [KeyCheck { rule, key, cost: 1 }];
        match kind {
            "check" => {
                store.check(&rate, key, 1, None).await.expect("check");
            }
            "charge" => {
                store.charge_all(&pair(&rate), None).await.expect("charge");
            }
            "reserve" | "reserve-settle" => {
                let ticket = Ticket::new(
                    TicketKind::Reservation,
                    vec![TicketPair::new(rate.name(), key)],
                );
                let multi = store
                    .reserve_all(&pair(&rate), &ticket, 60_000_000, None)
                    .await
                    .expect("reserve");
                assert!(multi.allowed);
                if kind == "reserve-settle" {
                    let settle = [tollgate::store::SettlePair {
                        rule: &rate,
                        actual: Some(2),
                    }];
                    store.settle(&ticket, &settle, None).await.expect("settle");
                }
            }
            "acquire-release" => {
                let ticket =
                    Ticket::new(TicketKind::Lease, vec![TicketPair::new(slots.name(), key)]);
                let multi = store
                    .acquire_all(&pair(&slots), &ticket, None)
                    .await
                    .expect("acquire");
                assert!(multi.allowed);
                store
                    .release(&ticket, &[&slots], false, None)
                    .await
                    .expect("release");
            }
            other => panic!("unknown kind {other}"),
        }
        done += 1;
    }
    println!("{done}");
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize| args.get(i).map_or("", String::as_str);
    let num = |i: usize, d: u64| arg(i).parse().unwrap_or(d);
    match arg(1) {
        "memory" => memory(usize::try_from(num(2, 15)).unwrap_or(15), num(3, 200_000)),
        "only" => only(arg(2), num(3, 200_000)),
        "redis" => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
            .block_on(redis(arg(2), arg(3), num(4, 20_000))),
        _ => {
            eprintln!(
                "usage: usage_load memory ROUNDS N | only check|charge|check_all|charge_all N \
                 | redis URL check|charge|reserve-settle|acquire-release N"
            );
        }
    }
}
