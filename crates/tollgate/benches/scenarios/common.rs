//! What the peers share: scenarios, keys, runners, the paired measurement
//! and the report.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::sync::{Barrier, Mutex, OnceLock};
use std::time::{Duration, Instant};

use stats_alloc::Region;

/// How many keys the "many keys" scenario cycles through.
pub(crate) const MANY_KEYS: usize = 1_000_000;

/// One way of driving a limiter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scenario {
    /// Every check on one key, one thread.
    SingleKey,
    /// One thread cycling through [`MANY_KEYS`] pre-populated keys.
    ManyKeys,
    /// Two threads checking one key at once.
    TwoThreads,
}

impl Scenario {
    pub(crate) const ALL: [Scenario; 3] = [
        Scenario::SingleKey,
        Scenario::ManyKeys,
        Scenario::TwoThreads,
    ];

    /// The criterion group name.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Scenario::SingleKey => "single_key",
            Scenario::ManyKeys => "1m_keys",
            Scenario::TwoThreads => "two_threads_one_key",
        }
    }
}

/// The keys both peers check, `user:00000042`, 13 bytes each; made on first
/// use so a filtered run skips them.
pub(crate) fn keys() -> &'static [Vec<u8>] {
    static KEYS: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    KEYS.get_or_init(|| {
        (0..MANY_KEYS)
            .map(|i| format!("user:{i:08}").into_bytes())
            .collect()
    })
}

/// Runs `iters` checks of one scenario and returns the time they took. It
/// owns the limiter it drives, built before the first run.
pub(crate) type Runner = Box<dyn FnMut(u64) -> Duration>;

/// A runner doing `check(i)` for `i` in `0..iters` on this thread.
pub(crate) fn single(mut check: impl FnMut(u64) + 'static) -> Runner {
    Box::new(move |iters| {
        let start = Instant::now();
        for i in 0..iters {
            check(i);
        }
        start.elapsed()
    })
}

/// A runner splitting `iters` checks over two threads started together; the
/// time is the wall time of all of them.
pub(crate) fn two_threads(check: impl Fn(usize, u64) + Sync + 'static) -> Runner {
    Box::new(move |iters| {
        let barrier = Barrier::new(3);
        let per_thread = iters.div_ceil(2);
        std::thread::scope(|s| {
            for thread in 0..2 {
                let (barrier, check) = (&barrier, &check);
                s.spawn(move || {
                    barrier.wait();
                    for i in 0..per_thread {
                        check(thread, i);
                    }
                });
            }
            barrier.wait();
            Instant::now()
        })
        .elapsed()
    })
}

/// Per-check times (ns) of every criterion sample, by benchmark id.
static SAMPLES: Mutex<BTreeMap<String, Vec<f64>>> = Mutex::new(BTreeMap::new());

#[allow(clippy::cast_precision_loss)] // iteration counts are far below 2^52
fn per_check_ns(iters: u64, elapsed: Duration) -> f64 {
    elapsed.as_secs_f64() * 1e9 / iters.max(1) as f64
}

/// Runs `runner` for criterion, keeping each sample's time per check.
pub(crate) fn measure(b: &mut criterion::Bencher<'_>, id: &str, runner: &mut Runner) {
    b.iter_custom(|iters| {
        let elapsed = runner(iters);
        SAMPLES
            .lock()
            .expect("samples lock")
            .entry(id.to_owned())
            .or_default()
            .push(per_check_ns(iters, elapsed));
        elapsed
    });
}

fn median(mut values: Vec<f64>) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied()
}

/// The median per-check time of the last `n` samples (the measured ones;
/// warm-up calls come first).
fn median_ns(id: &str, n: usize) -> Option<f64> {
    let samples = SAMPLES.lock().expect("samples lock");
    let all = samples.get(id)?;
    median(all[all.len().saturating_sub(n)..].to_vec())
}

/// Whether criterion measured `id` in this run (it may be filtered out).
pub(crate) fn measured(id: &str) -> bool {
    SAMPLES.lock().expect("samples lock").contains_key(id)
}

/// The two peers run in turn, [`PAIRED_ROUNDS`] times `iters` checks each,
/// so load from elsewhere on a shared machine falls on both alike. Returns the
/// median time per check of each and the median of the per-round ratios.
pub(crate) fn paired(ours: &mut Runner, theirs: &mut Runner, iters: u64) -> Paired {
    ours(iters / 4);
    theirs(iters / 4);
    let (mut a, mut b, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..PAIRED_ROUNDS {
        // Who goes first alternates, so neither always follows the other.
        let (x, y) = if round % 2 == 0 {
            let x = per_check_ns(iters, ours(iters));
            (x, per_check_ns(iters, theirs(iters)))
        } else {
            let y = per_check_ns(iters, theirs(iters));
            (per_check_ns(iters, ours(iters)), y)
        };
        a.push(x);
        b.push(y);
        ratios.push(x / y);
    }
    let min = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
    Paired {
        best_ratio: min(&a) / min(&b),
        ours: median(a).unwrap_or(f64::NAN),
        theirs: median(b).unwrap_or(f64::NAN),
        ratio: median(ratios).unwrap_or(f64::NAN),
    }
}

/// Rounds of the paired measurement.
const PAIRED_ROUNDS: usize = 61;

/// The result of [`paired`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Paired {
    /// Median time per check, tollgate.
    ours: f64,
    /// Median time per check, governor.
    theirs: f64,
    /// Median of the per-round ratios.
    ratio: f64,
    /// Ratio of the fastest rounds: the least disturbed by other load.
    best_ratio: f64,
}

/// Heap bytes held per key by whatever `fill` builds, counted by the global
/// allocator (net of frees), and the value `fill` returns.
pub(crate) fn bytes_per_key<T>(n: usize, fill: impl FnOnce() -> T) -> (f64, T) {
    let region = Region::new(crate::GLOBAL);
    let built = fill();
    let change = region.change();
    #[allow(clippy::cast_precision_loss)] // byte and key counts are far below 2^52
    let per_key = (change.bytes_allocated as f64 - change.bytes_deallocated as f64
        + change.bytes_reallocated as f64)
        / n as f64;
    (per_key, built)
}

/// Bytes held per idle key by one peer.
#[derive(Debug, Clone)]
pub(crate) struct Footprint {
    /// Who: `tollgate gcra`, `governor`.
    pub(crate) who: String,
    /// Heap bytes per key, all told.
    pub(crate) bytes: f64,
    /// Of which the key's own bytes (a copy of the key).
    pub(crate) key_bytes: f64,
}

/// Footprints measured while filling the many-keys stores.
static FOOTPRINTS: Mutex<Vec<Footprint>> = Mutex::new(Vec::new());

/// Keeps a footprint for the report.
pub(crate) fn record_footprint(footprint: Footprint) {
    let mut all = FOOTPRINTS.lock().expect("footprints lock");
    all.retain(|f| f.who != footprint.who);
    all.push(footprint);
}

/// Prints the ratio table and the bytes per idle key.
pub(crate) fn report(paired: &[(Scenario, Paired)]) {
    let footprint = FOOTPRINTS.lock().expect("footprints lock").clone();
    let n = crate::SAMPLE_SIZE;
    let fmt = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.1} ns"));
    let others = [
        "token_bucket",
        "fixed_window",
        "sliding_window",
        "sliding_log",
    ];
    let mut out = String::new();
    out.push_str(
        "\ntollgate GCRA vs governor: time per check, and tollgate / governor (<= 1.00 is the goal)\n\
         criterion: median of the measured samples; paired: the two run in turn, \
         median of the per-round ratios (and the medians), and the ratio of the \
         fastest rounds\n\n\
         | scenario | governor | tollgate gcra | ratio (criterion) | ratio (paired) | ratio (paired, fastest rounds) |\n\
         |---|---|---|---|---|---|\n",
    );
    for scenario in Scenario::ALL {
        let s = scenario.name();
        let gov = median_ns(&format!("{s}/governor"), n);
        let ours = median_ns(&format!("{s}/tollgate_gcra"), n);
        let ratio = gov
            .zip(ours)
            .map_or_else(|| "-".to_owned(), |(g, o)| format!("{:.2}", o / g));
        let pair = paired.iter().find(|(p, _)| *p == scenario).map_or_else(
            || "- | -".to_owned(),
            |(_, p)| {
                // With two threads the fastest rounds are those in which the
                // threads overlapped least: another measure, not shown.
                let best = if scenario == Scenario::TwoThreads {
                    "-".to_owned()
                } else {
                    format!("{:.2}", p.best_ratio)
                };
                format!(
                    "{:.2} ({:.1} / {:.1} ns) | {best}",
                    p.ratio, p.ours, p.theirs
                )
            },
        );
        out.push_str(&format!(
            "| {s} | {} | {} | {ratio} | {pair} |\n",
            fmt(gov),
            fmt(ours)
        ));
    }
    out.push_str("\ntollgate's other algorithms (criterion median per check)\n\n| scenario |");
    for o in others {
        out.push_str(&format!(" {o} |"));
    }
    out.push_str("\n|---|");
    out.push_str(&"---|".repeat(others.len()));
    out.push('\n');
    for scenario in Scenario::ALL {
        let s = scenario.name();
        out.push_str(&format!("| {s} |"));
        for o in others {
            out.push_str(&format!(
                " {} |",
                fmt(median_ns(&format!("{s}/tollgate_{o}"), n))
            ));
        }
        out.push('\n');
    }
    out.push_str(&format!(
        "\nheap bytes per idle key ({MANY_KEYS} keys of 13 bytes)\n\n\
         | store | bytes/key | of which a copy of the key |\n|---|---|---|\n"
    ));
    for f in &footprint {
        out.push_str(&format!(
            "| {} | {:.1} | {:.1} |\n",
            f.who, f.bytes, f.key_bytes
        ));
    }
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(out.as_bytes()).expect("write report");
}
