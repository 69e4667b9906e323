//! governor, the peer: a keyed `RateLimiter` on `DefaultKeyedStateStore`
//! with the same key bytes (`Vec<u8>`, as a service keying by request data
//! must own them), on its fake clock, frozen, with a burst large enough that
//! every check of the run is admitted.

use std::num::NonZeroU32;

use governor::clock::FakeRelativeClock;
use governor::middleware::NoOpMiddleware;
use governor::nanos::Nanos;
use governor::state::keyed::DefaultKeyedStateStore;
use governor::{Quota, RateLimiter};

use crate::scenarios::common::{self, Footprint, Runner, Scenario};

type Limiter =
    RateLimiter<Vec<u8>, DefaultKeyedStateStore<Vec<u8>>, FakeRelativeClock, NoOpMiddleware<Nanos>>;

/// One million per second (T = 1 µs, as tollgate's rule) with the largest
/// burst governor takes, so a frozen clock admits ~4 * 10^9 checks.
fn limiter() -> Limiter {
    let quota = Quota::per_second(NonZeroU32::new(1_000_000).expect("non-zero"))
        .allow_burst(NonZeroU32::MAX);
    RateLimiter::new(
        quota,
        DefaultKeyedStateStore::default(),
        FakeRelativeClock::default(),
    )
}

/// A runner of `scenario`. Filling the many-keys limiter records governor's
/// bytes per idle key.
pub(crate) fn runner(scenario: Scenario) -> Runner {
    let key = b"user:00000000".to_vec();
    match scenario {
        Scenario::SingleKey => {
            let limiter = limiter();
            common::single(move |_| {
                std::hint::black_box(limiter.check_key(&key)).expect("admitted");
            })
        }
        Scenario::ManyKeys => {
            let keys = common::keys();
            let limiter = fill(keys);
            let mut next = 0;
            common::single(move |_| {
                let key = &keys[next];
                next += 1;
                if next == keys.len() {
                    next = 0;
                }
                std::hint::black_box(limiter.check_key(key)).expect("admitted");
            })
        }
        Scenario::TwoThreads => {
            let limiter = limiter();
            common::two_threads(move |_, _| {
                std::hint::black_box(limiter.check_key(&key)).expect("admitted");
            })
        }
    }
}

/// A limiter holding every key once; records the bytes per key.
fn fill(keys: &[Vec<u8>]) -> Limiter {
    let (bytes, limiter) = common::bytes_per_key(keys.len(), || {
        let limiter = limiter();
        for key in keys {
            limiter.check_key(key).expect("admitted");
        }
        limiter
    });
    assert_eq!(limiter.len(), keys.len());
    #[allow(clippy::cast_precision_loss)] // 13
    let key_bytes = keys[0].len() as f64;
    common::record_footprint(Footprint {
        who: "governor (DashMap<Vec<u8>, _>)".to_owned(),
        bytes,
        key_bytes,
    });
    limiter
}
