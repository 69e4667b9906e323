//! Writing the decisions CSV: the header, then one row per trace row.

use std::io::Write;

use csv::{ByteRecord, WriterBuilder};
use tollgate::Decision;

use super::error::{ReplayError, io_error, write_err_of};
use super::ops::Done;
use super::trace::Row;

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

/// The two columns the output adds when the trace has an `op` column.
pub const OP_COLUMNS: [&str; 2] = ["op", "debt"];

/// The decisions CSV, buffered.
pub(super) struct Output<W: Write> {
    writer: csv::Writer<W>,
    /// Whether the rows end with [`OP_COLUMNS`].
    ops: bool,
    record: ByteRecord,
    num: itoa::Buffer,
}

impl<W: Write> Output<W> {
    /// Writes the header to `out`: [`OUTPUT_HEADER`], then [`OP_COLUMNS`]
    /// when `ops`.
    pub(super) fn new(out: W, ops: bool) -> Result<Self, ReplayError> {
        let mut writer = WriterBuilder::new()
            .buffer_capacity(1 << 16)
            .from_writer(out);
        let extra: &[&str] = if ops { &OP_COLUMNS } else { &[] };
        writer
            .write_record(OUTPUT_HEADER.iter().chain(extra))
            .map_err(write_err_of)?;
        Ok(Self {
            writer,
            ops,
            record: ByteRecord::new(),
            num: itoa::Buffer::new(),
        })
    }

    /// Writes the output row of `row`, which ended in `done`.
    pub(super) fn write(&mut self, row: &Row<'_>, done: &Done) -> Result<(), ReplayError> {
        let (r, num) = (&mut self.record, &mut self.num);
        r.clear();
        r.push_field(num.format(row.t_ms).as_bytes());
        r.push_field(row.rule.as_bytes());
        r.push_field(row.key);
        r.push_field(num.format(row.cost).as_bytes());
        push_decision(r, num, &done.decision);
        if self.ops {
            r.push_field(row.op.as_str().as_bytes());
            match done.debt {
                Some(debt) => r.push_field(num.format(debt).as_bytes()),
                None => r.push_field(b""),
            }
        }
        self.writer.write_byte_record(r).map_err(write_err_of)
    }

    /// Flushes what was written.
    pub(super) fn flush(&mut self) -> Result<(), ReplayError> {
        self.writer
            .flush()
            .map_err(io_error("cannot write the output"))
    }
}

fn push_decision(r: &mut ByteRecord, num: &mut itoa::Buffer, decision: &Decision) {
    r.push_field(if decision.allowed { b"true" } else { b"false" });
    r.push_field(num.format(decision.remaining).as_bytes());
    match decision.retry_after_ms().filter(|_| !decision.allowed) {
        Some(ms) => r.push_field(num.format(ms).as_bytes()),
        None => r.push_field(b""),
    }
    r.push_field(num.format(decision.reset_after_ms()).as_bytes());
}
