//! tollgate's benchmark entry: the in-memory store against governor, in one
//! run, on the same scenarios, so the result is a ratio.
//!
//! ```text
//! cargo bench -p tollgate --bench main
//! ```
//!
//! Scenarios (`scenarios/common.rs`): one key; one million pre-populated keys checked
//! in turn; two threads on one key. tollgate is measured for every
//! algorithm (`scenarios/memory.rs`), governor (`scenarios/governor_peer.rs`: keyed,
//! `DefaultKeyedStateStore`, the same key bytes) for its one algorithm,
//! GCRA. Both use their fake clock, frozen outside the timed loop, and the
//! same quota with a burst large enough that every check is admitted (equal
//! work: both loops assert it); only the sliding log, whose limit is capped,
//! moves its clock on every 32768 checks.
//!
//! After criterion's runs, tollgate's GCRA and governor are measured once
//! more in turn, round by round, so that load from elsewhere on a shared
//! machine falls on both alike. The report gives both ratios and the heap
//! bytes each holds per idle key, counted by a global allocator.

use std::time::Duration;

use criterion::Criterion;
use stats_alloc::{INSTRUMENTED_SYSTEM, StatsAlloc};
use tollgate::Algorithm;

mod scenarios;

use scenarios::common::{self, Runner, Scenario};
use scenarios::{governor_peer, memory};

/// Counts allocations so the report can give bytes per idle key.
#[global_allocator]
static GLOBAL: &StatsAlloc<std::alloc::System> = &INSTRUMENTED_SYSTEM;

/// Criterion samples per benchmark; the report takes the median of these.
const SAMPLE_SIZE: usize = 10;

/// Checks per round of the paired measurement, by scenario.
fn paired_iters(scenario: Scenario) -> u64 {
    match scenario {
        Scenario::SingleKey | Scenario::TwoThreads => 400_000,
        Scenario::ManyKeys => 100_000,
    }
}

fn main() {
    let mut c = Criterion::default()
        .sample_size(SAMPLE_SIZE)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .without_plots()
        .configure_from_args();
    for scenario in Scenario::ALL {
        let mut group = c.benchmark_group(scenario.name());
        let mut governor: Option<Runner> = None;
        let id = format!("{}/governor", scenario.name());
        group.bench_function("governor", |b| {
            let runner = governor.get_or_insert_with(|| governor_peer::runner(scenario));
            common::measure(b, &id, runner);
        });
        drop(governor);
        for algorithm in Algorithm::RATES {
            let mut ours: Option<Runner> = None;
            let name = format!("tollgate_{algorithm}");
            let id = format!("{}/{name}", scenario.name());
            group.bench_function(&name, |b| {
                let runner = ours.get_or_insert_with(|| memory::runner(algorithm, scenario));
                common::measure(b, &id, runner);
            });
        }
        group.finish();
    }
    c.final_summary();
    if std::env::args().any(|a| a == "--test" || a == "--list") {
        return;
    }
    let mut paired = Vec::new();
    for scenario in Scenario::ALL {
        let s = scenario.name();
        if common::measured(&format!("{s}/governor"))
            && common::measured(&format!("{s}/tollgate_gcra"))
        {
            let mut ours = memory::runner(Algorithm::Gcra, scenario);
            let mut theirs = governor_peer::runner(scenario);
            let result = common::paired(&mut ours, &mut theirs, paired_iters(scenario));
            paired.push((scenario, result));
        }
    }
    common::report(&paired);
}
