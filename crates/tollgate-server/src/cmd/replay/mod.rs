//! `tollgate replay`: run a CSV trace through the limiter (docs/replay.md).
//!
//! Input: a header `t_ms,rule,key` or `t_ms,rule,key,cost`, optionally
//! followed by `op` and `ttl_ms`, then one row per line (`trace.rs` reads
//! them). `t_ms` is whole milliseconds on the trace's own clock and must
//! not decrease; an empty or absent `cost` is 1; `0` peeks. Each row runs
//! its op (`ops.rs`: check, charge, reserve, settle, cancel, acquire,
//! release, renew) at `t = t_ms * 1000` µs; settles, cancels, releases and
//! renews act on the oldest entry `open.rs` holds for the row's (rule, key).
//! Output (`output.rs`): header [`OUTPUT_HEADER`] (and [`OP_COLUMNS`] when
//! the trace has an `op` column), one row per input row with `t_ms`,
//! `rule`, `key` as read and the effective `cost`; `retry_after_ms` is
//! empty when admitted or when the check can never be admitted; durations
//! are whole milliseconds rounded up. `--plot` gathers [`Plot`]'s buckets
//! on the way and draws them at the end.
//!
//! Rows are streamed: memory use does not grow with the trace (only with the
//! keys the store holds and the open reservations and leases, at most
//! [`MAX_OPEN`]), and a row (the header included) may take at most
//! [`MAX_ROW_BYTES`], so a trace without line ends (`/dev/zero`) is an
//! error, not a buffer that grows until memory runs out. A bad row stops
//! the replay with its line number; the rows before it have been written.

mod error;
mod open;
mod ops;
mod output;
mod plot;
mod summary;
mod trace;

use std::fs::File;
use std::io::{self, Read, Write};
use std::path::Path;

use csv::ByteRecord;
use tollgate::{Limiter, Store};

use crate::cli::ReplayArgs;
use crate::config::{Config, StoreConfig};
use crate::store::open_store;
use crate::store_url::StoreUrl;

pub use error::ReplayError;
pub use open::MAX_OPEN;
pub use output::{OP_COLUMNS, OUTPUT_HEADER};
pub use plot::{MAX_BUCKETS, Plot};
pub use summary::{RuleCounts, Summary};
pub use trace::{DEFAULT_TTL_MS, MAX_ROW_BYTES, MAX_T_MS, MAX_TTL_MS};

use error::io_error;
use ops::Failed;
use output::Output;
use trace::{Trace, parse_row};

fn is_dash(p: &Path) -> bool {
    p.as_os_str() == "-"
}

/// Runs `tollgate replay`: loads the config, opens the store, streams the
/// trace to the output. Returns the per-rule counts (the caller prints them
/// on stderr).
///
/// # Errors
/// See [`ReplayError`].
pub fn run(args: &ReplayArgs) -> Result<Summary, ReplayError> {
    let config = Config::load(&args.config).map_err(ReplayError::Config)?;
    let url = match &args.store {
        Some(text) => text
            .parse::<StoreUrl>()
            .map_err(|e| ReplayError::Store(format!("--store: {e}")))?,
        None => config.store.url.clone(),
    };
    let trace_name = args.trace.display().to_string();
    let trace: Box<dyn Read> = if is_dash(&args.trace) {
        Box::new(io::stdin().lock())
    } else {
        Box::new(
            File::open(&args.trace).map_err(io_error(format!("cannot open trace {trace_name}")))?,
        )
    };
    let out: Box<dyn Write> = match &args.out {
        None => Box::new(io::stdout().lock()),
        Some(p) if is_dash(p) => Box::new(io::stdout().lock()),
        Some(p) => {
            if same_file(p, &args.trace) {
                return Err(ReplayError::Store(format!(
                    "--out {} is the trace itself; refusing to overwrite it",
                    p.display()
                )));
            }
            Box::new(File::create(p).map_err(io_error(format!("cannot create {}", p.display())))?)
        }
    };
    if let Some(p) = &args.plot
        && (same_file(p, &args.trace)
            || args.out.as_ref().is_some_and(|o| o == p || same_file(o, p)))
    {
        return Err(ReplayError::Plot(format!(
            "--plot {} is the trace or the output; refusing to overwrite it",
            p.display()
        )));
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(io_error("cannot start the async runtime"))?;
    let rules = config.rules.iter().map(|r| r.rule.clone());
    let store = runtime
        .block_on(open_store(&url, &replay_store(&config.store), false))
        .map_err(ReplayError::Store)?;
    let limiter = Limiter::new(store, rules).map_err(|e| ReplayError::Store(e.to_string()))?;
    let mut plot = args.plot.as_ref().map(|_| Plot::new(limiter.rules().len()));
    let summary = runtime.block_on(replay(&limiter, trace, &trace_name, out, plot.as_mut()))?;
    if let (Some(plot), Some(path)) = (plot, &args.plot) {
        plot.draw(limiter.rules(), path)
            .map_err(ReplayError::Plot)?;
    }
    Ok(summary)
}

/// The `[store]` settings for a replay: a fresh key prefix under the configured one,
/// so the trace starts from empty state and touches no live key, and a
/// timeout generous enough for a batch job. Keys expire on their own (their
/// trace-time TTL plus [`tollgate::store::redis::RedisOptions::explicit_time_ttl_margin`]).
fn replay_store(store: &StoreConfig) -> StoreConfig {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    StoreConfig {
        prefix: format!("{}:replay-{}-{nanos}", store.prefix, std::process::id()),
        timeout: store.timeout.max(std::time::Duration::from_secs(5)),
        ..store.clone()
    }
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// Replays `trace` through `limiter`, writing decisions to `out` (buffered)
/// and, when given, gathering `plot`'s data. `trace_name` names the trace
/// in errors.
///
/// # Errors
/// A bad header or row (with its line), a store failure, or an I/O error.
/// The rows before a bad one have been written and flushed.
pub async fn replay<S: Store>(
    limiter: &Limiter<S>,
    trace: impl Read,
    trace_name: &str,
    out: impl Write,
    mut plot: Option<&mut Plot>,
) -> Result<Summary, ReplayError> {
    let mut trace = Trace::new(trace, trace_name);
    let columns = trace.columns()?;
    let mut output = Output::new(out, columns.op.is_some())?;
    let mut counts: Vec<(u64, u64)> = vec![(0, 0); limiter.rules().len()];
    let mut book = open::Book::default();
    let mut record = ByteRecord::new();
    let mut prev_t: Option<u64> = None;

    let result = loop {
        let line = match trace.next(&mut record) {
            Ok(Some(line)) => line,
            Ok(None) => break Ok(()),
            Err(e) => break Err(e),
        };
        let row = match parse_row(&record, &columns) {
            Ok(row) => row,
            Err(m) => break Err(trace.error(line, m)),
        };
        if let Some(prev) = prev_t.filter(|&p| row.t_ms < p) {
            break Err(trace.error(
                line,
                format!(
                    "t_ms {} is earlier than {prev} on the row before; the trace must be in \
                     time order",
                    row.t_ms
                ),
            ));
        }
        prev_t = Some(row.t_ms);
        let Some(rule_index) = limiter.rule_index(row.rule) else {
            break Err(trace.error(
                line,
                format!("unknown rule {:?}; it is not in the config", row.rule),
            ));
        };
        if row.t_ms > MAX_T_MS {
            break Err(trace.error(
                line,
                format!("t_ms {} is too large; the most is {MAX_T_MS}", row.t_ms),
            ));
        }
        let done = match ops::run(limiter, &mut book, &row, rule_index, line).await {
            Ok(done) => done,
            Err(Failed::Store(e)) => {
                break Err(ReplayError::Store(format!(
                    "{trace_name}:{line}: the store failed: {e}"
                )));
            }
            Err(Failed::Row(m)) => break Err(trace.error(line, m)),
        };
        let c = &mut counts[rule_index];
        if done.decision.allowed {
            c.0 += 1;
        } else {
            c.1 += 1;
        }
        if let Some(plot) = plot.as_deref_mut() {
            plot.add(rule_index, &limiter.rules()[rule_index], row.t_ms, &done);
        }
        if let Err(e) = output.write(&row, &done) {
            break Err(e);
        }
    };
    // Flush what was written even when a row stopped the replay.
    let flushed = output.flush();
    result?;
    flushed?;

    let rules = limiter
        .rules()
        .iter()
        .zip(counts)
        .filter(|(_, (a, d))| a + d > 0)
        .map(|(r, (admitted, denied))| RuleCounts {
            rule: r.name().to_owned(),
            checks: admitted + denied,
            admitted,
            denied,
        })
        .collect();
    Ok(Summary { rules })
}
