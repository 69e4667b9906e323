//! Reading the trace: the header, one row at a time, each field checked,
//! and a reader that refuses a row that never ends.

use std::fmt;
use std::io::{self, BufReader, Read};

use csv::{ByteRecord, ReaderBuilder};
use tollgate::Op;
use tollgate::limits::MAX_KEY_LEN;
use tollgate::ticket::MAX_RESERVATION_TTL;

use super::error::{ReplayError, csv_error};

/// The largest `t_ms` accepted: [`tollgate::time::MAX_TIME`] in whole ms (about
/// 265 years after the trace's origin), the latest time every store —
/// the Redis scripts' doubles included — computes exactly.
pub const MAX_T_MS: u64 = tollgate::time::MAX_TIME / 1_000;

/// The most bytes one trace row, its line end included, may take: a key of
/// [`MAX_KEY_LEN`] bytes with every byte quoted, and the other fields.
pub const MAX_ROW_BYTES: u64 = 16 * 1024;

/// The longest `ttl_ms`: [`MAX_RESERVATION_TTL`], a day.
pub const MAX_TTL_MS: u64 = MAX_RESERVATION_TTL.as_secs() * 1_000;

/// The CSV reader's own buffer: what it may have read past the row it is
/// parsing.
const CSV_BUFFER: usize = 8 * 1024;

/// The `ttl_ms` of a `reserve` row without one: a minute.
pub const DEFAULT_TTL_MS: u64 = 60_000;

/// The ops a trace row may name in its `op` column (`check` when the trace
/// has none or the field is empty), in the order the docs list them
/// (docs/replay.md, "Ops"): a check consumes `cost` when admitted (0
/// peeks); a charge consumes it unconditionally (past the limit as debt);
/// a reserve decides like a check of `cost` (the estimate) and holds a
/// reservation for `ttl_ms`; a settle ends the oldest open reservation of
/// the (rule, key) at `cost`; a cancel gives its estimate back; an acquire
/// takes a lease of `cost` slots of a concurrency rule; a release ends the
/// oldest live lease of the (rule, key); a renew extends it to a whole
/// lease from now.
pub(super) const OPS: [Op; 8] = [
    Op::Check,
    Op::Charge,
    Op::Reserve,
    Op::Settle,
    Op::Cancel,
    Op::Acquire,
    Op::Release,
    Op::Renew,
];

/// Whether the row's `cost` means nothing to `op` (it ends or extends
/// what an earlier row opened).
fn takes_no_cost(op: Op) -> bool {
    matches!(op, Op::Cancel | Op::Release | Op::Renew)
}

/// Which columns the trace has, by position.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Columns {
    /// `cost`, when present.
    pub(super) cost: Option<usize>,
    /// `op`, when present: then the output has the `op` and `debt` columns.
    pub(super) op: Option<usize>,
    /// `ttl_ms`, when present.
    pub(super) ttl: Option<usize>,
}

/// One parsed input row.
pub(super) struct Row<'r> {
    /// Time on the trace's clock, ms.
    pub(super) t_ms: u64,
    /// The rule's name.
    pub(super) rule: &'r str,
    /// The key's bytes.
    pub(super) key: &'r [u8],
    /// The effective cost: 1 when empty or absent; 0 for `cancel`,
    /// `release` and `renew`.
    pub(super) cost: u64,
    /// What the row does.
    pub(super) op: Op,
    /// A `reserve` row's ttl, ms ([`DEFAULT_TTL_MS`] when empty or
    /// absent); 0 for the other ops.
    pub(super) ttl_ms: u64,
}

/// The trace's rows, read one at a time into a reused record.
pub(super) struct Trace<'n, R: Read> {
    reader: csv::Reader<RowBound<BufReader<R>>>,
    name: &'n str,
}

impl<'n, R: Read> Trace<'n, R> {
    /// Reads `input`, named `name` in errors.
    pub(super) fn new(input: R, name: &'n str) -> Self {
        let reader = ReaderBuilder::new()
            .has_headers(true)
            .buffer_capacity(CSV_BUFFER)
            .from_reader(RowBound::new(BufReader::with_capacity(1 << 16, input)));
        Self { reader, name }
    }

    /// An error on `line` of the trace.
    pub(super) fn error(&self, line: u64, message: String) -> ReplayError {
        ReplayError::Trace {
            file: self.name.to_owned(),
            line,
            message,
        }
    }

    fn csv_error(&self, e: csv::Error) -> ReplayError {
        if RowBound::<()>::is_overrun(&e) {
            self.error(
                self.reader.position().line(),
                format!(
                    "the row is longer than {MAX_ROW_BYTES} bytes; a trace is CSV with one \
                     row per line"
                ),
            )
        } else {
            csv_error(e, self.name)
        }
    }

    /// Reads the header and tells which columns the rows have.
    pub(super) fn columns(&mut self) -> Result<Columns, ReplayError> {
        let header = match self.reader.byte_headers() {
            Ok(header) => header.clone(),
            Err(e) => return Err(self.csv_error(e)),
        };
        self.reader.get_mut().row_start = self.reader.position().byte();
        columns(&header).map_err(|m| self.error(1, m))
    }

    /// Reads the next row into `record`; its line, or `None` at the end.
    pub(super) fn next(&mut self, record: &mut ByteRecord) -> Result<Option<u64>, ReplayError> {
        match self.reader.read_byte_record(record) {
            Ok(false) => return Ok(None),
            Ok(true) => {}
            Err(e) => return Err(self.csv_error(e)),
        }
        self.reader.get_mut().row_start = self.reader.position().byte();
        Ok(Some(record.position().map_or(0, csv::Position::line)))
    }
}

fn columns(header: &ByteRecord) -> Result<Columns, String> {
    let names: Vec<&[u8]> = header.iter().map(<[u8]>::trim_ascii).collect();
    let shown = || {
        String::from_utf8_lossy(&header.iter().collect::<Vec<_>>().join(&b","[..]))
            .chars()
            .take(200)
            .collect::<String>()
    };
    let [b"t_ms", b"rule", b"key", rest @ ..] = names.as_slice() else {
        return Err(format!(
            "the header must be t_ms,rule,key,cost (cost optional), then op and ttl_ms \
             if wanted, found {:?}",
            shown()
        ));
    };
    let mut columns = Columns::default();
    for (i, name) in rest.iter().enumerate() {
        let slot = match *name {
            b"cost" => &mut columns.cost,
            b"op" => &mut columns.op,
            b"ttl_ms" => &mut columns.ttl,
            other => {
                return Err(format!(
                    "column {} of the header is {:?}: after t_ms,rule,key only cost, op and \
                     ttl_ms may follow (header {:?})",
                    i + 4,
                    String::from_utf8_lossy(other),
                    shown()
                ));
            }
        };
        if slot.replace(i + 3).is_some() {
            return Err(format!(
                "column {:?} is named twice in the header {:?}",
                String::from_utf8_lossy(name),
                shown()
            ));
        }
    }
    if columns.ttl.is_some() && columns.op.is_none() {
        return Err(format!(
            "the header has ttl_ms but no op column: ttl_ms is for reserve rows, and without \
             op every row is a check (header {:?})",
            shown()
        ));
    }
    Ok(columns)
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

/// Parses one row of a trace with `columns`.
pub(super) fn parse_row<'r>(record: &'r ByteRecord, columns: &Columns) -> Result<Row<'r>, String> {
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
    let op = match columns.op {
        None => Op::Check,
        Some(i) => match text(record, i, "op")? {
            "" => Op::Check,
            o => OPS.into_iter().find(|op| op.as_str() == o).ok_or_else(|| {
                format!(
                    "op {:?} is not one of check, charge, reserve, settle, cancel, acquire, \
                     release, renew",
                    o.chars().take(64).collect::<String>()
                )
            })?,
        },
    };
    let cost_text = match columns.cost {
        Some(i) => text(record, i, "cost")?,
        None => "",
    };
    let cost = match cost_text {
        "" if takes_no_cost(op) => 0,
        "" => 1,
        c => whole_number(c).map_err(|e| match e {
            NotANumber::Malformed => format!("cost {c:?} is not a whole number >= 0"),
            NotANumber::TooLarge => format!("cost {c} is too large; the most is {}", u64::MAX),
        })?,
    };
    if takes_no_cost(op) && cost != 0 {
        return Err(format!(
            "cost {cost} on a {} row: it ends or extends what an earlier row opened and takes \
             no cost; leave cost empty",
            op.as_str()
        ));
    }
    let ttl_text = match columns.ttl {
        Some(i) => text(record, i, "ttl_ms")?,
        None => "",
    };
    let ttl_ms = match (op, ttl_text) {
        (Op::Reserve, "") => DEFAULT_TTL_MS,
        (Op::Reserve, t) => match whole_number(t) {
            Ok(ms) if (1..=MAX_TTL_MS).contains(&ms) => ms,
            _ => {
                return Err(format!(
                    "ttl_ms {:?} is not a whole number of milliseconds in 1 ..= {MAX_TTL_MS} \
                     (a day)",
                    t.chars().take(64).collect::<String>()
                ));
            }
        },
        (_, "") => 0,
        (op, t) => {
            return Err(format!(
                "ttl_ms {:?} on a {} row: ttl_ms is for reserve rows only; leave it empty",
                t.chars().take(64).collect::<String>(),
                op.as_str()
            ));
        }
    };
    Ok(Row {
        t_ms,
        rule,
        key,
        cost,
        op,
        ttl_ms,
    })
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
