//! `tollgate replay`: run a CSV trace of checks through the limiter.
//!
//! Input: a header `t_ms,rule,key` or `t_ms,rule,key,cost`, then one check
//! per row. `t_ms` is whole milliseconds on the trace's own clock and must
//! not decrease; an empty or absent `cost` is 1; `0` peeks. Output: header
//! [`OUTPUT_HEADER`], one row per input row with `t_ms`, `rule`, `key` as
//! read and the effective `cost`; `retry_after_ms` is empty when admitted or
//! when the check can never be admitted; durations are whole milliseconds
//! rounded up. Each check runs at `t = t_ms * 1000` µs.
//!
//! Rows are streamed: memory use does not grow with the trace (only with the
//! keys the store holds), and a row (the header included) may take at most
//! [`MAX_ROW_BYTES`], so a trace without line ends (`/dev/zero`) is an
//! error, not a buffer that grows until memory runs out. A bad row stops
//! the replay with its line number; the rows before it have been written.

use std::collections::HashMap;
use std::fmt;
use std::fs::File;
use std::io::{self, BufReader, Read, Write};
use std::path::Path;

use csv::{ByteRecord, ReaderBuilder, WriterBuilder};
use tollgate::{Limiter, MAX_KEY_LEN, Store};

use crate::cli::ReplayArgs;
use crate::config::{Config, ConfigErrors, StoreConfig};
use crate::gate::open_store;
use crate::store_url::StoreUrl;

/// The output CSV header.
pub const OUTPUT_HEADER: [&str; 8] = [
    "t_ms",
    "rule",
    "key",
    "cost",
    "allowed",
    "remaining",
    "retry_after_ms",
    "reset_after_ms",
];

/// The largest `t_ms` accepted: [`tollgate::MAX_TIME`] in whole ms (about
/// 265 years after the trace's origin), the latest time every store —
/// the Redis scripts' doubles included — computes exactly.
pub const MAX_T_MS: u64 = tollgate::MAX_TIME / 1_000;

/// The most bytes one trace row, its line end included, may take: a key of
/// [`MAX_KEY_LEN`] bytes with every byte quoted, and the other fields.
pub const MAX_ROW_BYTES: u64 = 16 * 1024;

/// The CSV reader's own buffer: what it may have read past the row it is
/// parsing.
const CSV_BUFFER: usize = 8 * 1024;

/// Checks, admissions and denials of one rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleCounts {
    /// The rule's name.
    pub rule: String,
    /// Rows checked under this rule.
    pub checks: u64,
    /// Rows admitted.
    pub admitted: u64,
    /// Rows denied (including those that can never be admitted).
    pub denied: u64,
}

/// Counts per rule, in config order, for the rules the trace named.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Summary {
    /// One entry per rule that had at least one check.
    pub rules: Vec<RuleCounts>,
}

impl fmt::Display for Summary {
    /// A table: `rule checks admitted denied`, then one line per rule and a
    /// `total` line, columns aligned.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let total = RuleCounts {
            rule: "total".to_owned(),
            checks: self.rules.iter().map(|r| r.checks).sum(),
            admitted: self.rules.iter().map(|r| r.admitted).sum(),
            denied: self.rules.iter().map(|r| r.denied).sum(),
        };
        let width = self
            .rules
            .iter()
            .map(|r| r.rule.len())
            .chain([5])
            .max()
            .unwrap_or(5);
        writeln!(
            f,
            "{:<width$}  {:>8}  {:>8}  {:>8}",
            "rule", "checks", "admitted", "denied"
        )?;
        for r in self.rules.iter().chain([&total]) {
            writeln!(
                f,
                "{:<width$}  {:>8}  {:>8}  {:>8}",
                r.rule, r.checks, r.admitted, r.denied
            )?;
        }
        Ok(())
    }
}

/// Why a replay stopped.
#[derive(Debug)]
#[non_exhaustive]
pub enum ReplayError {
    /// The config file is invalid.
    Config(ConfigErrors),
    /// The store URL is invalid, names a store that is not built yet, or
    /// the store failed.
    Store(String),
    /// A bad trace row (or header): the trace, the 1-based line, why.
    Trace {
        /// The trace as named on the command line.
        file: String,
        /// 1-based line of the row.
        line: u64,
        /// What is wrong with it.
        message: String,
    },
    /// Reading the trace or writing the output failed.
    Io {
        /// What was being read or written.
        what: String,
        /// The error.
        error: io::Error,
    },
}

impl fmt::Display for ReplayError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReplayError::Config(e) => e.fmt(f),
            ReplayError::Store(m) => f.write_str(m),
            ReplayError::Trace {
                file,
                line,
                message,
            } => write!(f, "{file}:{line}: {message}"),
            ReplayError::Io { what, error } => write!(f, "{what}: {error}"),
        }
    }
}

impl std::error::Error for ReplayError {}

fn io_error(what: impl Into<String>) -> impl FnOnce(io::Error) -> ReplayError {
    let what = what.into();
    move |error| ReplayError::Io { what, error }
}

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
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(io_error("cannot start the async runtime"))?;
    let rules = config.rules.iter().map(|r| r.rule.clone());
    let store = runtime
        .block_on(open_store(&url, &replay_store(&config.store), false))
        .map_err(ReplayError::Store)?;
    let limiter = Limiter::new(store, rules).map_err(|e| ReplayError::Store(e.to_string()))?;
    runtime.block_on(replay(&limiter, trace, &trace_name, out))
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

/// One parsed input row.
struct Row<'r> {
    t_ms: u64,
    rule: &'r str,
    key: &'r [u8],
    cost: u64,
}

fn field(record: &ByteRecord, i: usize) -> &[u8] {
    record.get(i).unwrap_or_default()
}

fn text<'r>(record: &'r ByteRecord, i: usize, name: &str) -> Result<&'r str, String> {
    std::str::from_utf8(field(record, i))
        .map(str::trim)
        .map_err(|_| format!("{name} is not valid UTF-8"))
}

/// A field that should hold a whole number and does not.
enum NotANumber {
    /// Not digits alone.
    Malformed,
    /// Digits, but more than a `u64` holds.
    TooLarge,
}

fn whole_number(s: &str) -> Result<u64, NotANumber> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(NotANumber::Malformed);
    }
    s.parse().map_err(|_| NotANumber::TooLarge)
}

fn parse_row(record: &ByteRecord, has_cost: bool) -> Result<Row<'_>, String> {
    let t_text = text(record, 0, "t_ms")?;
    let t_ms = whole_number(t_text).map_err(|e| match e {
        NotANumber::Malformed => format!("t_ms {t_text:?} is not a whole number of milliseconds"),
        NotANumber::TooLarge => format!("t_ms {t_text} is too large; the most is {MAX_T_MS}"),
    })?;
    let rule = text(record, 1, "rule")?;
    let key = field(record, 2);
    if key.len() > MAX_KEY_LEN {
        return Err(format!(
            "key is {} bytes, longer than the limit of {MAX_KEY_LEN} bytes",
            key.len()
        ));
    }
    let cost = if has_cost {
        match text(record, 3, "cost")? {
            "" => 1,
            c => whole_number(c).map_err(|e| match e {
                NotANumber::Malformed => format!("cost {c:?} is not a whole number >= 0"),
                NotANumber::TooLarge => format!("cost {c} is too large; the most is {}", u64::MAX),
            })?,
        }
    } else {
        1
    };
    Ok(Row {
        t_ms,
        rule,
        key,
        cost,
    })
}

/// Replays `trace` through `limiter`, writing decisions to `out` (buffered).
/// `trace_name` names the trace in errors.
///
/// # Errors
/// A bad header or row (with its line), a store failure, or an I/O error.
/// The rows before a bad one have been written and flushed.
pub async fn replay<S: Store>(
    limiter: &Limiter<S>,
    trace: impl Read,
    trace_name: &str,
    out: impl Write,
) -> Result<Summary, ReplayError> {
    let row_error = |line: u64, message: String| ReplayError::Trace {
        file: trace_name.to_owned(),
        line,
        message,
    };
    let mut reader = ReaderBuilder::new()
        .has_headers(true)
        .buffer_capacity(CSV_BUFFER)
        .from_reader(RowBound::new(BufReader::with_capacity(1 << 16, trace)));
    let csv_error = |e: csv::Error, reader: &csv::Reader<_>| {
        if RowBound::<()>::is_overrun(&e) {
            row_error(
                reader.position().line(),
                format!(
                    "the row is longer than {MAX_ROW_BYTES} bytes; a trace is CSV with one \
                     row per line"
                ),
            )
        } else {
            csv_error(e, trace_name)
        }
    };
    let mut writer = WriterBuilder::new()
        .buffer_capacity(1 << 16)
        .from_writer(out);
    let write_err = io_error("cannot write the output");

    let header = match reader.byte_headers() {
        Ok(header) => header.clone(),
        Err(e) => return Err(csv_error(e, &reader)),
    };
    reader.get_mut().row_start = reader.position().byte();
    let names: Vec<&[u8]> = header.iter().map(<[u8]>::trim_ascii).collect();
    let has_cost = match names.as_slice() {
        [b"t_ms", b"rule", b"key"] => false,
        [b"t_ms", b"rule", b"key", b"cost"] => true,
        _ => {
            return Err(row_error(
                1,
                format!(
                    "the header must be t_ms,rule,key,cost (cost optional), found {:?}",
                    String::from_utf8_lossy(&header.iter().collect::<Vec<_>>().join(&b","[..]))
                        .chars()
                        .take(200)
                        .collect::<String>()
                ),
            ));
        }
    };
    writer.write_record(OUTPUT_HEADER).map_err(write_err_of)?;

    let index: HashMap<&str, usize> = limiter
        .rules()
        .iter()
        .enumerate()
        .map(|(i, r)| (r.name(), i))
        .collect();
    let mut counts: Vec<(u64, u64)> = vec![(0, 0); limiter.rules().len()];
    let mut record = ByteRecord::new();
    let mut out_record = ByteRecord::new();
    let mut prev_t: Option<u64> = None;
    let mut num = itoa::Buffer::new();

    let result = loop {
        match reader.read_byte_record(&mut record) {
            Ok(false) => break Ok(()),
            Ok(true) => {}
            Err(e) => break Err(csv_error(e, &reader)),
        }
        reader.get_mut().row_start = reader.position().byte();
        let line = record.position().map_or(0, csv::Position::line);
        let row = match parse_row(&record, has_cost) {
            Ok(row) => row,
            Err(m) => break Err(row_error(line, m)),
        };
        if let Some(prev) = prev_t.filter(|&p| row.t_ms < p) {
            break Err(row_error(
                line,
                format!(
                    "t_ms {} is earlier than {prev} on the row before; the trace must be in \
                     time order",
                    row.t_ms
                ),
            ));
        }
        prev_t = Some(row.t_ms);
        let Some(&rule_index) = index.get(row.rule) else {
            break Err(row_error(
                line,
                format!("unknown rule {:?}; it is not in the config", row.rule),
            ));
        };
        if row.t_ms > MAX_T_MS {
            break Err(row_error(
                line,
                format!("t_ms {} is too large; the most is {MAX_T_MS}", row.t_ms),
            ));
        }
        let t_us = row.t_ms * 1_000;
        let decision = match limiter
            .check_at(row.rule, row.key, row.cost, Some(t_us))
            .await
        {
            Ok(d) => d,
            Err(tollgate::Error::Store(e)) => {
                break Err(ReplayError::Store(format!(
                    "{trace_name}:{line}: the store failed: {e}"
                )));
            }
            Err(e) => break Err(row_error(line, e.to_string())),
        };
        let c = &mut counts[rule_index];
        if decision.allowed {
            c.0 += 1;
        } else {
            c.1 += 1;
        }
        out_record.clear();
        out_record.push_field(num.format(row.t_ms).as_bytes());
        out_record.push_field(row.rule.as_bytes());
        out_record.push_field(row.key);
        out_record.push_field(num.format(row.cost).as_bytes());
        out_record.push_field(if decision.allowed { b"true" } else { b"false" });
        out_record.push_field(num.format(decision.remaining).as_bytes());
        match decision.retry_after_ms().filter(|_| !decision.allowed) {
            Some(ms) => out_record.push_field(num.format(ms).as_bytes()),
            None => out_record.push_field(b""),
        }
        out_record.push_field(num.format(decision.reset_after_ms()).as_bytes());
        if let Err(e) = writer.write_byte_record(&out_record) {
            break Err(write_err_of(e));
        }
    };
    // Flush what was written even when a row stopped the replay.
    let flushed = writer.flush().map_err(write_err);
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

fn write_err_of(e: csv::Error) -> ReplayError {
    match e.into_kind() {
        csv::ErrorKind::Io(error) => ReplayError::Io {
            what: "cannot write the output".to_owned(),
            error,
        },
        other => ReplayError::Io {
            what: "cannot write the output".to_owned(),
            error: io::Error::other(format!("{other:?}")),
        },
    }
}

fn csv_error(e: csv::Error, trace_name: &str) -> ReplayError {
    let line = e.position().map_or(0, csv::Position::line);
    match e.into_kind() {
        csv::ErrorKind::Io(error) => ReplayError::Io {
            what: format!("cannot read trace {trace_name}"),
            error,
        },
        csv::ErrorKind::UnequalLengths {
            expected_len, len, ..
        } => ReplayError::Trace {
            file: trace_name.to_owned(),
            line,
            message: format!("expected {expected_len} fields like the header, found {len}"),
        },
        other => ReplayError::Trace {
            file: trace_name.to_owned(),
            line,
            message: format!("bad CSV: {other:?}"),
        },
    }
}

/// The trace's reader, refusing to read far past the start of the row the
/// CSV reader is on: the CSV reader buffers a whole record, so without this a
/// row that never ends would grow without bound.
struct RowBound<R> {
    inner: R,
    /// Bytes read from `inner`.
    read: u64,
    /// Where the row being parsed starts (set after each row).
    row_start: u64,
}

/// The error [`RowBound`] reads as when a row is too long.
#[derive(Debug)]
struct RowTooLong;

impl fmt::Display for RowTooLong {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a row longer than {MAX_ROW_BYTES} bytes")
    }
}

impl std::error::Error for RowTooLong {}

impl<R> RowBound<R> {
    fn new(inner: R) -> Self {
        Self {
            inner,
            read: 0,
            row_start: 0,
        }
    }

    /// Whether `e` is the CSV reader passing on a [`RowTooLong`].
    fn is_overrun(e: &csv::Error) -> bool {
        matches!(e.kind(), csv::ErrorKind::Io(io)
            if io.get_ref().and_then(|inner| inner.downcast_ref::<RowTooLong>()).is_some())
    }
}

impl<R: Read> Read for RowBound<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.read - self.row_start > MAX_ROW_BYTES + CSV_BUFFER as u64 {
            return Err(io::Error::new(io::ErrorKind::InvalidData, RowTooLong));
        }
        let n = self.inner.read(buf)?;
        self.read += n as u64;
        Ok(n)
    }
}
