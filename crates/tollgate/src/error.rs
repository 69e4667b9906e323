//! Errors, small and classified. A denial is not an error; these are.

use std::fmt;
use std::time::Duration;

/// What kind of store failure happened, so the limiter can apply its failure
/// policy without matching strings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreErrorKind {
    /// The store did not answer within the configured timeout.
    Timeout,
    /// The store could not be reached (connection refused, reset, failover).
    Unavailable,
    /// The store answered something it should not have (a bug or a
    /// misconfigured server).
    Protocol,
}

/// A store failed to answer a check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreError {
    kind: StoreErrorKind,
    message: String,
}

impl StoreError {
    /// A store error of `kind`.
    pub fn new(kind: StoreErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }

    /// What kind of failure this is.
    #[must_use]
    pub fn kind(&self) -> StoreErrorKind {
        self.kind
    }

    /// Whether retrying later may succeed (timeouts and unavailability).
    #[must_use]
    pub fn is_transient(&self) -> bool {
        matches!(
            self.kind,
            StoreErrorKind::Timeout | StoreErrorKind::Unavailable
        )
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            StoreErrorKind::Timeout => "store timed out",
            StoreErrorKind::Unavailable => "store unavailable",
            StoreErrorKind::Protocol => "store protocol error",
        };
        write!(f, "{kind}: {}", self.message)
    }
}

impl std::error::Error for StoreError {}

/// Why a check could not be decided.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// No rule has this name.
    UnknownRule(String),
    /// The key is longer than [`crate::limits::MAX_KEY_LEN`] bytes.
    KeyTooLong {
        /// The key's length in bytes.
        len: usize,
    },
    /// A multi-rule check named no pair.
    NoChecks,
    /// An explicit time past [`crate::time::MAX_TIME`].
    TimeOutOfRange {
        /// The time given, in microseconds.
        at: u64,
    },
    /// A reservation's ttl outside 1 ms ..= [`crate::ticket::MAX_RESERVATION_TTL`].
    TtlOutOfRange {
        /// The ttl given, in milliseconds.
        ttl_ms: u64,
    },
    /// A settle, cancel, release or renew that does not fit the
    /// reservation or lease it names (another rule or key, another number
    /// of pairs, the wrong algorithm), with the reason.
    Mismatch(String),
    /// The store failed.
    Store(StoreError),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::UnknownRule(name) => write!(f, "unknown rule {name:?}"),
            Error::KeyTooLong { len } => write!(
                f,
                "key is {len} bytes, longer than the limit of {} bytes",
                crate::limits::MAX_KEY_LEN
            ),
            Error::NoChecks => f.write_str("a multi-rule check must name at least one rule"),
            Error::TimeOutOfRange { at } => write!(
                f,
                "time {at} µs is past the latest time a check accepts ({} µs)",
                crate::time::MAX_TIME
            ),
            Error::TtlOutOfRange { ttl_ms } => write!(
                f,
                "ttl_ms {ttl_ms} is outside 1 ..= {}",
                crate::ticket::MAX_RESERVATION_TTL.as_millis()
            ),
            Error::Mismatch(why) => f.write_str(why),
            Error::Store(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Store(e) => Some(e),
            _ => None,
        }
    }
}

impl From<StoreError> for Error {
    fn from(e: StoreError) -> Self {
        Error::Store(e)
    }
}

/// Why [`crate::Limiter::until_ready`] gave up.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum WaitError {
    /// The wait needed is longer than the deadline allows; nothing was
    /// consumed. Carries the wait that would have been needed.
    DeadlineExceeded {
        /// How long the caller would have had to wait.
        retry_after: Duration,
    },
    /// The cost exceeds the rule's capacity: no wait can admit it.
    Never,
    /// The check itself failed.
    Check(Error),
}

impl fmt::Display for WaitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WaitError::DeadlineExceeded { retry_after } => write!(
                f,
                "admission needs a wait of {retry_after:?}, past the deadline"
            ),
            WaitError::Never => f.write_str("the cost exceeds the rule's capacity"),
            WaitError::Check(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for WaitError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            WaitError::Check(e) => Some(e),
            _ => None,
        }
    }
}

impl From<Error> for WaitError {
    fn from(e: Error) -> Self {
        WaitError::Check(e)
    }
}
