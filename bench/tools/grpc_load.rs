//! A closed-loop load client for the Envoy rate limit service: CONCURRENCY
//! callers share ONE HTTP/2 connection (as Envoy multiplexes its calls) and
//! each sends `ShouldRateLimit` for SECONDS (or, with CALLS, exactly CALLS
//! calls each, all callers starting at once), one descriptor `(user, k<i>)`
//! in domain `DOMAIN`, with the key drawn uniformly among KEYS keys. Prints
//! requests/s, the share answered `OVER_LIMIT`, p50/p99 latency and how
//! many calls were admitted.
//!
//! ```text
//! cargo run --release -p tollgate-server --example grpc_load -- ADDR [CONCURRENCY] [SECONDS] [KEYS] [DOMAIN] [CALLS] [DESCRIPTORS]
//! ```
//!
//! DESCRIPTORS shapes the call as Envoy would (default `user={key}`):
//! descriptors separated by `;`, their entries by `,`, each `KEY=VALUE`; a
//! value `{key}` is the drawn key (`k<i>`), `{ip}` the drawn key as an IPv4
//! client address (`10.x.y.z`, as `remote_address` carries it). E.g. Envoy
//! Gateway's per-client rule plus a route-wide one:
//! `ROUTE=ROUTE,masked_remote_address=0.0.0.0/0,remote_address={ip};ROUTE=ROUTE,rule-1-match--1=rule-1-match--1`.
//!
//! `bench/grpc.sh` runs this against tollgate and a peer (any server of
//! `envoy.service.ratelimit.v3.RateLimitService`).

use std::time::{Duration, Instant};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;

/// An entry's value: fixed, or made from the key drawn for the call.
enum Value {
    Fixed(String),
    Key,
    Ip,
}

impl Value {
    fn make(&self, key: u64) -> String {
        match self {
            Value::Fixed(v) => v.clone(),
            Value::Key => format!("k{key}"),
            Value::Ip => format!(
                "10.{}.{}.{}",
                (key >> 16) & 255,
                (key >> 8) & 255,
                key & 255
            ),
        }
    }
}

/// The DESCRIPTORS argument, read once: descriptors of `(key, value)` entries.
type Shape = Vec<Vec<(String, Value)>>;

fn shape(text: &str) -> Result<Shape, String> {
    text.split(';')
        .map(|descriptor| {
            descriptor
                .split(',')
                .map(|entry| {
                    let (k, v) = entry
                        .split_once('=')
                        .ok_or_else(|| format!("DESCRIPTORS: {entry:?} is not KEY=VALUE"))?;
                    let v = match v {
                        "{key}" => Value::Key,
                        "{ip}" => Value::Ip,
                        v => Value::Fixed(v.to_owned()),
                    };
                    Ok((k.to_owned(), v))
                })
                .collect()
        })
        .collect()
}

fn arg<T: std::str::FromStr>(n: usize, default: T) -> Result<T, String> {
    match std::env::args().nth(n) {
        None => Ok(default),
        Some(s) => s
            .parse()
            .map_err(|_| format!("argument {n}: cannot read {s:?}")),
    }
}

#[allow(clippy::print_stdout)] // its output is the point
#[tokio::main]
async fn main() -> Result<(), String> {
    let addr: String = arg(1, "127.0.0.1:8081".to_owned())?;
    let concurrency: usize = arg(2, 64)?;
    let seconds: u64 = arg(3, 5)?;
    let keys: u64 = arg(4, 1)?;
    let domain: String = arg(5, "bench".to_owned())?;
    let calls: u64 = arg(6, 0)?;
    let shape = std::sync::Arc::new(shape(&arg(7, "user={key}".to_owned())?)?);
    if concurrency == 0 || keys == 0 || seconds == 0 {
        return Err("CONCURRENCY, SECONDS and KEYS must be at least 1".to_owned());
    }
    let client = RateLimitServiceClient::connect(format!("http://{addr}"))
        .await
        .map_err(|e| format!("cannot connect to {addr}: {e}"))?;
    let end = Instant::now() + Duration::from_secs(seconds);
    // With CALLS, every caller waits here so that they all start at once.
    let start = std::sync::Arc::new(tokio::sync::Barrier::new(concurrency));
    let mut callers = tokio::task::JoinSet::new();
    for c in 0..concurrency {
        let mut client = client.clone();
        let domain = domain.clone();
        let shape = std::sync::Arc::clone(&shape);
        let start = std::sync::Arc::clone(&start);
        callers.spawn(async move {
            if calls > 0 {
                start.wait().await;
            }
            // A small xorshift per caller: no shared RNG on the hot path.
            let mut x = 0x9E37_79B9_7F4A_7C15_u64 ^ (c as u64 + 1);
            let mut latencies = Vec::new();
            let mut over = 0u64;
            let mut sent = 0u64;
            while if calls > 0 {
                sent < calls
            } else {
                Instant::now() < end
            } {
                sent += 1;
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let key = if keys == 1 { 0 } else { x % keys };
                let req = RateLimitRequest {
                    domain: domain.clone(),
                    descriptors: shape
                        .iter()
                        .map(|entries| RateLimitDescriptor {
                            entries: entries
                                .iter()
                                .map(|(k, v)| Entry {
                                    key: k.clone(),
                                    value: v.make(key),
                                })
                                .collect(),
                            ..RateLimitDescriptor::default()
                        })
                        .collect(),
                    hits_addend: 0,
                };
                let t = Instant::now();
                let res = client
                    .should_rate_limit(req)
                    .await
                    .map_err(|e| format!("ShouldRateLimit failed: {e}"))?;
                latencies.push(t.elapsed());
                if res.get_ref().overall_code == Code::OverLimit as i32 {
                    over += 1;
                }
            }
            Ok::<_, String>((latencies, over))
        });
    }
    let started = Instant::now();
    let mut all = Vec::new();
    let mut over = 0;
    while let Some(done) = callers.join_next().await {
        let (latencies, o) = done.map_err(|e| e.to_string())??;
        all.extend(latencies);
        over += o;
    }
    let elapsed = started.elapsed().as_secs_f64().max(f64::EPSILON);
    all.sort_unstable();
    let at = |q: f64| {
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss
        )]
        let i = ((all.len() as f64 - 1.0) * q).round() as usize;
        all.get(i).map_or(0.0, |d| d.as_secs_f64() * 1e3)
    };
    #[allow(clippy::cast_precision_loss)]
    let n = all.len() as f64;
    println!(
        "requests {} in {elapsed:.2}s: {:.0} req/s, over_limit {:.1}%, p50 {:.3} ms, p99 {:.3} ms, admitted {}",
        all.len(),
        n / elapsed,
        100.0 * over as f64 / n.max(1.0),
        at(0.50),
        at(0.99),
        all.len() as u64 - over
    );
    Ok(())
}
