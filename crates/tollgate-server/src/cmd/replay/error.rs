//! Why a replay stopped, and the conversions of the CSV and I/O errors met
//! on the way.

use std::fmt;
use std::io;

use crate::config::ConfigErrors;

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
    /// Drawing or writing the `--plot` file failed.
    Plot(String),
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
            ReplayError::Store(m) | ReplayError::Plot(m) => f.write_str(m),
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

/// Wraps an I/O error with what was being done.
pub(super) fn io_error(what: impl Into<String>) -> impl FnOnce(io::Error) -> ReplayError {
    let what = what.into();
    move |error| ReplayError::Io { what, error }
}

/// A failed write of the output CSV.
pub(super) fn write_err_of(e: csv::Error) -> ReplayError {
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

/// A failed read of the trace, with its line when it has one.
pub(super) fn csv_error(e: csv::Error, trace_name: &str) -> ReplayError {
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
