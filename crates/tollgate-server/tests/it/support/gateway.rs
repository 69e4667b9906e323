//! For the Envoy Gateway parity tests (`envoy_gateway*.rs`): the binary
//! run under libfaketime at a Unix time the test sets, so every window
//! and every `duration_until_reset` is known in advance (no timing luck);
//! the calls Envoy makes for Envoy Gateway's routes; and the reference
//! service's arithmetic (envoyproxy/ratelimit `base_limiter.go` and the
//! Redis fixed cache: fixed windows aligned to Unix time, `INCRBY` then
//! compare) to hold tollgate's answers against, call by call.

use std::collections::HashMap;
use std::path::PathBuf;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::UInt64Value;

use super::rls::{Rls, code, desc};

/// 2026-01-01 00:00:30 UTC: half a minute into a minute, so a second, a
/// minute and every longer window has time left.
pub const T0: u64 = 1_767_225_630;

/// Where Debian's libfaketime (the multi-threaded one) lives.
pub fn libfaketime() -> PathBuf {
    let candidates = [
        "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
        "/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1",
        "/usr/lib/faketime/libfaketimeMT.so.1",
    ];
    candidates
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .unwrap_or_else(|| {
            panic!("libfaketime is missing: install it with `apt-get install -y faketime`")
        })
}

/// The clock of a server run under libfaketime, from a spec file it
/// reads again at most once a second (`FAKETIME_CACHE_DURATION`; reading
/// it on every call makes the clock crawl): [`Parity::at`] writes a new
/// time, then asks the server until it answers at that time, so the
/// server's wall and monotonic clocks move together and no assertion
/// waits on luck. Between two settings the clock runs at a hundredth of
/// real speed, so a test has 100 real seconds before its fake second
/// ends.
pub struct FakeTime {
    dir: tempfile::TempDir,
    now: u64,
}

impl FakeTime {
    /// A clock at Unix second `unix`.
    pub fn at(unix: u64) -> FakeTime {
        let t = FakeTime {
            dir: tempfile::tempdir().expect("tempdir"),
            now: unix,
        };
        t.write();
        t
    }

    /// The Unix second the server's clock is in.
    pub fn now(&self) -> u64 {
        self.now
    }

    /// Moves the clock to Unix second `unix` (forward only: the server's
    /// monotonic clock moves with it).
    pub fn set(&mut self, unix: u64) {
        assert!(unix > self.now, "fake time only moves forward");
        self.now = unix;
        self.write();
    }

    fn spec(&self) -> PathBuf {
        self.dir.path().join("faketime.spec")
    }

    fn write(&self) {
        // Written whole, then renamed: the server never reads half a spec.
        let tmp = self.dir.path().join("faketime.tmp");
        std::fs::write(&tmp, format!("@{} x0.01\n", utc(self.now))).expect("write spec");
        std::fs::rename(&tmp, self.spec()).expect("rename spec");
    }

    /// The environment that runs a process on this clock.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            (
                "LD_PRELOAD".to_owned(),
                libfaketime().to_str().expect("utf-8").to_owned(),
            ),
            (
                "FAKETIME_TIMESTAMP_FILE".to_owned(),
                self.spec().to_str().expect("utf-8").to_owned(),
            ),
            ("FAKETIME_CACHE_DURATION".to_owned(), "1".to_owned()),
            ("TZ".to_owned(), "UTC".to_owned()),
        ]
    }
}

/// `YYYY-MM-DD hh:mm:ss` of Unix second `unix` (UTC).
fn utc(unix: u64) -> String {
    let days = i64::try_from(unix / 86_400).expect("days");
    let secs = unix % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

/// The domain of the clock probe: a year's limit no test reaches, whose
/// `duration_until_reset` tells the server's Unix second.
const PROBE: &str = "domain: tollgate-test-clock\ndescriptors:\n  - key: clock\n    \
                     rate_limit: {unit: year, requests_per_unit: 1000000000}\n";

/// The binary over the memory store with `toml_extra` appended to its
/// TOML config and `yamls` as its Envoy configs (and the clock probe),
/// its clock `time`.
pub fn start(time: &FakeTime, toml_extra: &str, yamls: &[&str]) -> Rls {
    let config = format!("{}{toml_extra}", super::rls::toml("memory"));
    let env = time.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mut files = yamls.to_vec();
    files.push(PROBE);
    let mut rls = Rls::start_files_env(&config, &files, &[], &env);
    wait_for(&mut rls, time.now());
    rls
}

/// Asks the probe until the server's clock is in Unix second `unix`
/// (libfaketime reads a new spec within a second).
fn wait_for(rls: &mut Rls, unix: u64) {
    let year = seconds(Unit::Year);
    let want = i64::try_from(year - unix % year).expect("fits");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let r = rls.ok(request(PROBE_DOMAIN, vec![desc(&[("clock", "tick")])]));
        let reset = r.statuses[0].duration_until_reset.expect("reset").seconds;
        if reset == want {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the server's clock never reached {} (reset {reset}, want {want})",
            utc(unix)
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

const PROBE_DOMAIN: &str = "tollgate-test-clock";

/// A file of `tests/data/envoy_gateway/`.
pub fn fixture(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/envoy_gateway")
        .join(name);
    std::fs::read_to_string(path).expect("read fixture")
}

/// The descriptor Envoy sends for `entries` (generic keys, header and
/// address matches, all as key=value).
pub fn entries(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    desc(entries)
}

/// The same descriptor with its own `hits_addend` (EG's `requestCost` on
/// the request-phase entry, `responseCost` on the `apply_on_stream_done`
/// one).
pub fn costing(mut d: RateLimitDescriptor, hits: u64) -> RateLimitDescriptor {
    d.hits_addend = Some(UInt64Value { value: hits });
    d
}

/// The same descriptor with a per-request `limit` (EG's
/// `limit.fromMetadata`, which Envoy sends as the descriptor's `limit`).
pub fn overridden(mut d: RateLimitDescriptor, rpu: u32, unit: Unit) -> RateLimitDescriptor {
    d.limit = Some(RateLimitOverride {
        requests_per_unit: rpu,
        unit: unit.into(),
    });
    d
}

/// One `ShouldRateLimit` call of `descriptors` in `domain`.
pub fn request(domain: &str, descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.to_owned(),
        descriptors,
        hits_addend: 0,
    }
}

/// A limit the config gives a descriptor: per unit, in shadow mode, in
/// quota mode.
#[derive(Debug, Clone, Copy)]
pub struct Lim {
    pub rpu: u32,
    pub unit: Unit,
    pub shadow: bool,
    pub quota: bool,
}

/// `rpu` per `unit`, enforced.
pub fn lim(rpu: u32, unit: Unit) -> Option<Lim> {
    Some(Lim {
        rpu,
        unit,
        shadow: false,
        quota: false,
    })
}

/// `rpu` per `unit`, in quota mode.
pub fn quota(rpu: u32, unit: Unit) -> Option<Lim> {
    Some(Lim {
        rpu,
        unit,
        shadow: false,
        quota: true,
    })
}

/// `rpu` per `unit`, in shadow mode.
pub fn shadow(rpu: u32, unit: Unit) -> Option<Lim> {
    Some(Lim {
        rpu,
        unit,
        shadow: true,
        quota: false,
    })
}

/// The seconds of a unit, as the reference divides time.
pub fn seconds(unit: Unit) -> u64 {
    match unit {
        Unit::Second => 1,
        Unit::Minute => 60,
        Unit::Hour => 3_600,
        Unit::Day => 86_400,
        Unit::Week => 604_800,
        Unit::Month => 2_592_000,
        Unit::Year => 31_536_000,
        Unit::Unknown => panic!("no unit"),
    }
}

/// What a status shows: code, `current_limit` (`requests_per_unit`, unit),
/// `limit_remaining`, and `duration_until_reset` in seconds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub code: Code,
    pub limit: Option<(u32, Unit)>,
    pub remaining: u32,
    pub reset: Option<i64>,
}

/// What a response shows: its overall code and each status.
pub fn seen(r: &RateLimitResponse) -> (Code, Vec<Seen>) {
    let statuses = r
        .statuses
        .iter()
        .map(|s: &DescriptorStatus| {
            if let Some(d) = &s.duration_until_reset {
                assert_eq!(d.nanos, 0, "whole seconds, as the reference's: {s:?}");
            }
            Seen {
                code: code(s.code),
                limit: s.current_limit.as_ref().map(|l| {
                    (
                        l.requests_per_unit,
                        Unit::try_from(l.unit).expect("a known unit"),
                    )
                }),
                remaining: s.limit_remaining,
                reset: s.duration_until_reset.map(|d| d.seconds),
            }
        })
        .collect();
    (code(r.overall_code), statuses)
}

/// The reference service's counters and answers (envoyproxy/ratelimit
/// `GetHitsAddends`, `GenerateCacheKeys`, the fixed cache's pipeline,
/// `GetResponseDescriptorStatus`, and the service's overall code): every
/// descriptor with a limit is `INCRBY` its hits in the window of its unit
/// (keyed by domain, entries and window, not by the limit), then `OVER_LIMIT`
/// when the count passes `requests_per_unit` (`OK` in shadow mode), with
/// `limit_remaining` `rpu - count` when not over and the whole seconds to
/// the window's end.
#[derive(Debug, Default)]
pub struct Reference {
    counts: HashMap<(String, u64, u64), u64>,
}

impl Reference {
    /// The reference's answer at Unix second `now` to `req`, whose
    /// descriptors find `limits` in the config (a descriptor's own `limit`
    /// replaces its entry, enforced, as the reference's `GetLimit` has it).
    pub fn answer(
        &mut self,
        now: u64,
        req: &RateLimitRequest,
        limits: &[Option<Lim>],
    ) -> (Code, Vec<Seen>) {
        assert_eq!(
            req.descriptors.len(),
            limits.len(),
            "a limit per descriptor"
        );
        let mut overall = Code::Ok;
        // Quota descriptors: the request is over when all are.
        let (mut quotas, mut quotas_over) = (0, 0);
        let statuses = req
            .descriptors
            .iter()
            .zip(limits)
            .map(|(d, l)| {
                let l = match &d.limit {
                    Some(o) => Some(Lim {
                        rpu: o.requests_per_unit,
                        unit: Unit::try_from(o.unit).expect("unit"),
                        shadow: false,
                        quota: false,
                    }),
                    None => *l,
                };
                let Some(l) = l else {
                    return Seen {
                        code: Code::Ok,
                        limit: None,
                        remaining: 0,
                        reset: None,
                    };
                };
                let hits = d
                    .hits_addend
                    .as_ref()
                    .map_or(u64::from(req.hits_addend.max(1)), |h| h.value);
                let period = seconds(l.unit);
                let key: String = d
                    .entries
                    .iter()
                    .map(|e| format!("{}_{}_", e.key, e.value))
                    .collect();
                let count = self
                    .counts
                    .entry((format!("{}_{key}", req.domain), period, now / period))
                    .or_default();
                *count += hits;
                let over = *count > u64::from(l.rpu);
                if l.quota {
                    quotas += 1;
                    quotas_over += usize::from(over);
                } else if over && !l.shadow {
                    overall = Code::OverLimit;
                }
                Seen {
                    code: if over && !l.shadow {
                        Code::OverLimit
                    } else {
                        Code::Ok
                    },
                    limit: Some((l.rpu, l.unit)),
                    remaining: if over {
                        0
                    } else {
                        u32::try_from(u64::from(l.rpu) - *count).expect("fits")
                    },
                    reset: Some(i64::try_from(period - now % period).expect("fits")),
                }
            })
            .collect();
        if quotas > 0 && quotas == quotas_over {
            overall = Code::OverLimit;
        }
        (overall, statuses)
    }
}

/// A server and the reference fed the same calls, on one clock.
pub struct Parity {
    pub rls: Rls,
    pub time: FakeTime,
    pub reference: Reference,
}

impl Parity {
    /// The binary at [`T0`] with `toml_extra` and `yamls`.
    pub fn start(toml_extra: &str, yamls: &[&str]) -> Parity {
        Parity::start_at(T0, toml_extra, yamls)
    }

    /// The binary at Unix second `unix`.
    pub fn start_at(unix: u64, toml_extra: &str, yamls: &[&str]) -> Parity {
        let time = FakeTime::at(unix);
        let rls = start(&time, toml_extra, yamls);
        Parity {
            rls,
            time,
            reference: Reference::default(),
        }
    }

    /// Sends `req` to both; asserts tollgate answers as the reference
    /// does; returns that answer.
    pub fn call(&mut self, req: RateLimitRequest, limits: &[Option<Lim>]) -> (Code, Vec<Seen>) {
        let want = self.reference.answer(self.time.now(), &req, limits);
        let got = seen(&self.rls.ok(req.clone()));
        assert_eq!(
            got,
            want,
            "at {} ({}): {req:?}",
            self.time.now(),
            utc(self.time.now())
        );
        got
    }

    /// Moves both to Unix second `unix`, once the server is there.
    pub fn at(&mut self, unix: u64) {
        self.time.set(unix);
        wait_for(&mut self.rls, unix);
    }
}

#[test]
fn utc_names_the_second() {
    assert_eq!(utc(T0), "2026-01-01 00:00:30");
    assert_eq!(utc(0), "1970-01-01 00:00:00");
    assert_eq!(utc(951_782_400), "2000-02-29 00:00:00");
}
