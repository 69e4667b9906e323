//! For the tests translated from the reference service's
//! `test/config/config_test.go` (`envoy_reference*.rs`): their YAML files
//! in `tests/data/envoy_reference/`, and one `ShouldRateLimit` call of one
//! descriptor reduced to what its status shows.

use std::path::PathBuf;
use std::time::Duration;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};

use super::rls::{Rls, code, desc};

/// A file of `tests/data/envoy_reference/`.
pub fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/envoy_reference")
        .join(name)
}

/// The text of a file of `tests/data/envoy_reference/`.
pub fn text(name: &str) -> String {
    std::fs::read_to_string(data(name)).expect("read test data")
}

/// The binary over the memory store with the data files `files` as its
/// Envoy config (the first written to a temp file by [`Rls::start_with`],
/// the others passed as they are) and `more` flags.
pub fn start(files: &[&str], more: &[&str]) -> Rls {
    start_on("memory", files, more)
}

/// As [`start`], over the store at `store`.
pub fn start_on(store: &str, files: &[&str], more: &[&str]) -> Rls {
    let (first, rest) = files.split_first().expect("a file");
    let paths: Vec<String> = rest
        .iter()
        .map(|f| data(f).to_str().expect("utf-8 path").to_owned())
        .collect();
    let mut args: Vec<&str> = Vec::new();
    for p in &paths {
        args.extend(["--envoy-config", p.as_str()]);
    }
    args.extend_from_slice(more);
    Rls::start_with(&super::rls::toml(store), &text(first), &args)
}

/// What a status shows: its code, its `current_limit` as
/// (`requests_per_unit`, unit, name), and `limit_remaining`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub code: Code,
    pub limit: Option<(u32, Unit, String)>,
    pub remaining: u32,
}

/// No limit matched (the reference's `GetLimit` returned nil): `OK`, no
/// `current_limit`, nothing remaining.
pub fn no_limit() -> Seen {
    Seen {
        code: Code::Ok,
        limit: None,
        remaining: 0,
    }
}

/// An `unlimited: true` limit: `OK`, no `current_limit`, 2^32 - 1
/// remaining.
pub fn unlimited() -> Seen {
    Seen {
        code: Code::Ok,
        limit: None,
        remaining: u32::MAX,
    }
}

/// `OK` under `requests_per_unit` per `unit` (named `name`), `remaining`
/// left.
pub fn ok(requests_per_unit: u32, unit: Unit, name: &str, remaining: u32) -> Seen {
    Seen {
        code: Code::Ok,
        limit: Some((requests_per_unit, unit, name.to_owned())),
        remaining,
    }
}

/// `OVER_LIMIT` under `requests_per_unit` per `unit` (named `name`).
pub fn over(requests_per_unit: u32, unit: Unit, name: &str) -> Seen {
    Seen {
        code: Code::OverLimit,
        limit: Some((requests_per_unit, unit, name.to_owned())),
        remaining: 0,
    }
}

/// `n` per hour, no name, `left` remaining.
pub fn hour(n: u32, left: u32) -> Seen {
    ok(n, Unit::Hour, "", left)
}

/// What `s` shows.
pub fn seen(s: &DescriptorStatus) -> Seen {
    Seen {
        code: code(s.code),
        limit: s.current_limit.as_ref().map(|l| {
            (
                l.requests_per_unit,
                Unit::try_from(l.unit).expect("a known unit"),
                l.name.clone(),
            )
        }),
        remaining: s.limit_remaining,
    }
}

/// One call of the single descriptor `d` in `domain`.
pub fn call_one(rls: &mut Rls, domain: &str, d: RateLimitDescriptor) -> Seen {
    let r = rls.ok(RateLimitRequest {
        domain: domain.to_owned(),
        descriptors: vec![d],
        hits_addend: 0,
    });
    assert_eq!(r.statuses.len(), 1, "{r:?}");
    let s = seen(&r.statuses[0]);
    assert_eq!(code(r.overall_code), s.code, "{r:?}");
    s
}

/// One call of the single descriptor of `entries` in `domain`.
pub fn hit(rls: &mut Rls, domain: &str, entries: &[(&str, &str)]) -> Seen {
    call_one(rls, domain, desc(entries))
}

/// Sleeps past the end of the hour when fewer than 10 s of it are left, so
/// that a test counting against hour (or day) windows does not see one
/// roll over.
pub fn away_from_an_hour_edge() {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let into = now.as_secs() % 3600;
    if into >= 3590 {
        std::thread::sleep(Duration::from_secs(3601 - into));
    }
}
