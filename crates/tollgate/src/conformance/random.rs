//! The random cases: seeded traces of single and multi-rule checks whose
//! times aim at retry instants and window edges.

use super::driver::{Driver, label, micros, rule};
use super::{Failure, HOUR};
use crate::rule::{Algorithm, Rule};
use crate::store::Store;
use crate::time::Micros;

/// splitmix64: tiny, good enough, and the same everywhere.
pub(super) struct SplitMix(pub(super) u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform-ish in `0..n` (`n > 0`).
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        let n = u64::try_from(items.len()).unwrap_or(u64::MAX);
        let i = usize::try_from(self.below(n)).unwrap_or(0);
        items[i]
    }
}

fn random_rule(rng: &mut SplitMix, alg: Algorithm, name: &str) -> Rule {
    let limit = 1 + rng.below(20);
    match alg {
        Algorithm::Gcra | Algorithm::TokenBucket => {
            let unit = rng.pick(&[1_000, 2_000, 5_000, 10_000, 100_000, 1_000_000]);
            let burst = (rng.below(3) == 0).then(|| 1 + rng.below(30));
            rule(name, alg, limit, limit * unit, burst)
        }
        _ => {
            let period = rng.pick(&[1_000, 10_000, 100_000, 1_000_000, 60_000_000, HOUR]);
            rule(name, alg, limit, period, None)
        }
    }
}

/// The next time: standing still, within one unit or one period, several
/// periods on, at a window edge (±1 µs), or exactly at / 1 µs before the
/// last denial's retry.
fn next_time(rng: &mut SplitMix, t: Micros, r: &Rule, retry: Option<Micros>) -> Micros {
    let p = r.period_micros();
    let unit = (p / r.limit()).max(1);
    let dt = match rng.below(100) {
        0..25 => 0,
        25..45 => rng.below(unit + 1),
        45..60 => rng.below(p + 1),
        60..65 => rng.below(4 * p),
        65..75 => (t / p + 1) * p - t - 1 + rng.below(3),
        75..95 => match retry {
            Some(w) => w - 1 + rng.below(2),
            None => rng.below(unit + 1),
        },
        _ => rng.below(50 * p),
    };
    t + dt
}

fn random_cost(rng: &mut SplitMix, cap: u64) -> u64 {
    match rng.below(100) {
        0..55 => 1,
        55..65 => 0,
        65..90 => 1 + rng.below(cap),
        _ => cap + 1 + rng.below(3),
    }
}

pub(super) async fn random_single<S: Store>(
    d: &mut Driver<'_, S>,
    rng: &mut SplitMix,
    alg: Algorithm,
    index: usize,
    steps: usize,
) -> Result<(), Failure> {
    let r = random_rule(rng, alg, &format!("{}.random.{index}", alg.as_str()));
    let mut t = d.begin(label(&format!("random-{index}"), &r), rng.below(HOUR));
    let keys: [&[u8]; 2] = [b"k0", b"k1"];
    let mut retry = None;
    for _ in 0..steps {
        t = next_time(rng, t, &r, retry);
        let key = rng.pick(&keys);
        let cost = random_cost(rng, r.capacity());
        let dec = d.one(&r, key, cost, t).await?;
        retry = dec.retry_after.map(micros);
        if let Some(wait) = retry.filter(|_| rng.below(3) == 0) {
            // the same check 1 µs early, then exactly on time
            d.one(&r, key, cost, t + wait - 1).await?;
            t += wait;
            d.one(&r, key, cost, t).await?;
        }
    }
    Ok(())
}

pub(super) async fn random_multi<S: Store>(
    d: &mut Driver<'_, S>,
    rng: &mut SplitMix,
    index: usize,
    steps: usize,
) -> Result<(), Failure> {
    let rules: Vec<Rule> = Algorithm::RATES
        .iter()
        .map(|&alg| random_rule(rng, alg, &format!("multi.random.{index}.{}", alg.as_str())))
        .collect();
    let mut t = d.begin(format!("multi-rule random-{index}"), rng.below(HOUR));
    let keys: [&[u8]; 3] = [b"user", b"ip", b"route"];
    let any_rule = |rng: &mut SplitMix| &rules[usize::try_from(rng.below(5)).unwrap_or(0)];
    let mut retry = None;
    for _ in 0..steps {
        let timing = any_rule(rng);
        t = next_time(rng, t, timing, retry);
        if rng.below(100) < 35 {
            let r = any_rule(rng);
            let dec = d
                .one(r, rng.pick(&keys), random_cost(rng, r.capacity()), t)
                .await?;
            retry = dec.retry_after.map(micros);
            continue;
        }
        let n = 2 + rng.below(3);
        let mut pairs: Vec<(&Rule, &[u8], u64)> = Vec::new();
        for _ in 0..n {
            let r = any_rule(rng);
            let key = rng.pick(&keys);
            let cost = random_cost(rng, r.capacity());
            if !pairs.iter().any(|p| p.0.name() == r.name() && p.1 == key) {
                pairs.push((r, key, cost));
            }
        }
        let dec = d.all(&pairs, t).await?;
        retry = dec.decision().retry_after.map(micros);
        if let Some(wait) = retry.filter(|_| rng.below(3) == 0) {
            // the deciding pair's wait also admits the others, which only
            // get closer to admitting as time passes
            d.all(&pairs, t + wait - 1).await?;
            t += wait;
            d.all(&pairs, t).await?;
        }
    }
    Ok(())
}

/// A charge's cost: none, a few units, past capacity, or far past the debt
/// cap (so clamping is checked too).
fn charge_cost(rng: &mut SplitMix, r: &Rule) -> u64 {
    match rng.below(100) {
        0..10 => 0,
        10..60 => 1 + rng.below(r.capacity()),
        60..85 => r.capacity() + rng.below(3 * r.capacity()),
        85..95 => rng.below(r.max_debt() + r.capacity() + 2),
        _ => r.max_debt() + rng.below(u64::MAX - r.max_debt()),
    }
}

/// Checks, charges and refunds of one rule's keys, single and several
/// pairs at a time (a key named twice included): debt, clamping, the checks
/// that wait the debt out, and refunds that never pass empty/full.
pub(super) async fn random_charges<S: Store>(
    d: &mut Driver<'_, S>,
    rng: &mut SplitMix,
    alg: Algorithm,
    index: usize,
    steps: usize,
) -> Result<(), Failure> {
    let r = random_rule(rng, alg, &format!("{}.charge.{index}", alg.as_str()));
    let mut t = d.begin(label(&format!("charges-{index}"), &r), rng.below(HOUR));
    let keys: [&[u8]; 2] = [b"k0", b"k1"];
    let mut retry = None;
    for _ in 0..steps {
        t = next_time(rng, t, &r, retry);
        match rng.below(100) {
            0..45 => {
                let cost = random_cost(rng, r.capacity());
                retry = d
                    .one(&r, rng.pick(&keys), cost, t)
                    .await?
                    .retry_after
                    .map(micros);
            }
            45..70 => {
                let cost = charge_cost(rng, &r);
                d.charge(&[(&r, rng.pick(&keys), cost)], t).await?;
            }
            70..85 => {
                let pairs: Vec<(&Rule, &[u8], u64)> = (0..1 + rng.below(2))
                    .map(|_| (&r, rng.pick(&keys), charge_cost(rng, &r)))
                    .collect();
                d.refund(&pairs, t).await?;
            }
            _ => {
                let pairs: Vec<(&Rule, &[u8], u64)> = (0..2 + rng.below(2))
                    .map(|_| (&r, rng.pick(&keys), charge_cost(rng, &r)))
                    .collect();
                d.charge(&pairs, t).await?;
            }
        }
    }
    Ok(())
}

/// Reservations of one rule's keys among checks and charges: settled
/// above, at or below the estimate, cancelled, late (past their ttl),
/// twice, and never made; sometimes two pairs at once.
pub(super) async fn random_reservations<S: Store>(
    d: &mut Driver<'_, S>,
    rng: &mut SplitMix,
    alg: Algorithm,
    index: usize,
    steps: usize,
) -> Result<(), Failure> {
    let r = random_rule(rng, alg, &format!("{}.reserve.{index}", alg.as_str()));
    let mut t = d.begin(label(&format!("reservations-{index}"), &r), rng.below(HOUR));
    let keys: [&[u8]; 2] = [b"k0", b"k1"];
    let mut open: Vec<crate::ticket::Ticket> = Vec::new();
    let mut closed: Vec<crate::ticket::Ticket> = Vec::new();
    let mut retry = None;
    for _ in 0..steps {
        t = next_time(rng, t, &r, retry);
        match rng.below(100) {
            0..20 => {
                let cost = random_cost(rng, r.capacity());
                retry = d
                    .one(&r, rng.pick(&keys), cost, t)
                    .await?
                    .retry_after
                    .map(micros);
            }
            20..30 => {
                d.charge(&[(&r, rng.pick(&keys), charge_cost(rng, &r))], t)
                    .await?;
            }
            30..55 => {
                let ttl = 1 + rng.below(2 * r.period_micros());
                let first = rng.pick(&keys);
                let mut pairs = vec![(&r, first, random_cost(rng, r.capacity()))];
                if rng.below(4) == 0 {
                    let other: &[u8] = if first == keys[0] { keys[1] } else { keys[0] };
                    pairs.push((&r, other, random_cost(rng, r.capacity())));
                }
                if let Some(ticket) = d.reserve(&pairs, ttl, t).await? {
                    open.push(ticket);
                }
            }
            55..90 if !open.is_empty() => {
                let i = usize::try_from(rng.below(open.len() as u64)).unwrap_or(0);
                let ticket = open.swap_remove(i);
                let n = ticket.pairs.len();
                let actual: Option<Vec<u64>> = (rng.below(5) != 0).then(|| {
                    (0..n)
                        .map(|_| charge_cost(rng, &r).min(3 * r.capacity() + 3))
                        .collect()
                });
                d.settle(&ticket, actual.as_deref(), t).await?;
                closed.push(ticket);
            }
            90..95 if !closed.is_empty() => {
                let ticket = rng.pick(&closed.iter().collect::<Vec<_>>()).clone();
                d.settle(&ticket, Some(&vec![1; ticket.pairs.len()]), t)
                    .await?;
            }
            _ => {
                // A reservation never made: unknown to the store.
                let never = crate::ticket::Ticket::new(
                    crate::ticket::TicketKind::Reservation,
                    vec![crate::ticket::TicketPair::new(r.name(), b"k0")],
                );
                d.settle(&never, None, t).await?;
            }
        }
    }
    Ok(())
}

/// Acquires, releases and renewals of concurrency keys, with peeks: leases
/// that end by themselves, are released twice, renewed after they ended,
/// and acquires of several keys at once.
pub(super) async fn random_leases<S: Store>(
    d: &mut Driver<'_, S>,
    rng: &mut SplitMix,
    index: usize,
    steps: usize,
) -> Result<(), Failure> {
    let r = random_rule(rng, Algorithm::Concurrency, &format!("concurrency.{index}"));
    let mut t = d.begin(label(&format!("leases-{index}"), &r), rng.below(HOUR));
    let keys: [&[u8]; 2] = [b"k0", b"k1"];
    let mut open: Vec<crate::ticket::Ticket> = Vec::new();
    let mut done: Vec<crate::ticket::Ticket> = Vec::new();
    let mut retry = None;
    for _ in 0..steps {
        t = next_time(rng, t, &r, retry);
        match rng.below(100) {
            0..20 => {
                retry = d
                    .one(&r, rng.pick(&keys), 0, t)
                    .await?
                    .retry_after
                    .map(micros);
            }
            20..55 => {
                let first = rng.pick(&keys);
                let mut pairs = vec![(&r, first, random_cost(rng, r.capacity()))];
                if rng.below(4) == 0 {
                    let other: &[u8] = if first == keys[0] { keys[1] } else { keys[0] };
                    pairs.push((&r, other, random_cost(rng, r.capacity())));
                }
                if let Some(ticket) = d.acquire(&pairs, t).await? {
                    open.push(ticket);
                }
            }
            55..80 if !open.is_empty() => {
                let i = usize::try_from(rng.below(open.len() as u64)).unwrap_or(0);
                let ticket = open.swap_remove(i);
                d.release(&ticket, false, t).await?;
                done.push(ticket);
            }
            80..92 if !open.is_empty() => {
                let ticket = rng.pick(&open.iter().collect::<Vec<_>>()).clone();
                d.release(&ticket, true, t).await?;
            }
            _ if !done.is_empty() => {
                let ticket = rng.pick(&done.iter().collect::<Vec<_>>()).clone();
                d.release(&ticket, rng.below(2) == 0, t).await?;
            }
            _ => {}
        }
    }
    Ok(())
}
