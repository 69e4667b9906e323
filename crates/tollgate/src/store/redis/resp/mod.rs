//! RESP2, as much of it as the store speaks: commands encoded straight into
//! a write buffer (no intermediate command object), and replies parsed from
//! a read buffer, with a fast path for what every script answers (an array
//! of integers).

mod encoder;
mod parser;

use std::fmt;

pub(super) use self::encoder::{Args, Encoder, command};
pub(super) use self::parser::{int_array_of, parse};

/// Replies with at most this many integers are kept inline (a single-pair
/// script reply has five).
const INLINE: usize = 5;

/// An array of integers: every script reply.
#[derive(Clone, PartialEq, Eq)]
pub(in crate::store::redis) enum Ints {
    /// Short replies, without an allocation.
    Inline(u8, [i64; INLINE]),
    /// Longer ones.
    Heap(Vec<i64>),
}

impl Ints {
    pub(in crate::store::redis) fn as_slice(&self) -> &[i64] {
        match self {
            Ints::Inline(n, v) => &v[..usize::from(*n)],
            Ints::Heap(v) => v,
        }
    }
}

impl fmt::Debug for Ints {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.as_slice().fmt(f)
    }
}

/// Any RESP2 value but errors (handshakes, `PING`, sentinels).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::store::redis) enum Value {
    /// A nil bulk string or array.
    Nil,
    /// An integer.
    Int(i64),
    /// A simple or bulk string.
    Text(Vec<u8>),
    /// An array; an error element is kept as its text.
    Array(Vec<Value>),
}

impl Value {
    /// The text of a simple or bulk string.
    pub(in crate::store::redis) fn text(&self) -> Option<&str> {
        match self {
            Value::Text(t) => std::str::from_utf8(t).ok(),
            _ => None,
        }
    }
}

/// The reply parser's entry points for the fuzz targets (`fuzz/`), its
/// types flattened: not an API.
#[doc(hidden)]
pub mod fuzzing {
    /// The reply parser: `Ok(None)` while the reply is incomplete,
    /// else the reply's integers (`None` when it is another kind of reply)
    /// and the bytes it took; `Err` with the reason for bytes that are not
    /// RESP2.
    ///
    /// # Errors
    /// Bytes that are not RESP2.
    #[allow(clippy::type_complexity)] // a flattened reply
    pub fn parse(buf: &[u8]) -> Result<Option<(Option<Vec<i64>>, usize)>, String> {
        match super::parse(buf) {
            Ok(Some((super::Reply::Ints(ints), used))) => {
                Ok(Some((Some(ints.as_slice().to_vec()), used)))
            }
            Ok(Some((_, used))) => Ok(Some((None, used))),
            Ok(None) => Ok(None),
            Err(e) => Err(e.0),
        }
    }

    /// The batch fast path: a reply of exactly
    /// `len` integers into `ints`, and the bytes it took.
    pub fn int_array_of(buf: &[u8], len: usize, ints: &mut Vec<i64>) -> Option<usize> {
        super::int_array_of(buf, len, ints)
    }
}

/// One complete reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::store::redis) enum Reply {
    /// An array of integers.
    Ints(Ints),
    /// An error reply: `NOSCRIPT …`, `READONLY …`, `ERR …`.
    Error(String),
    /// Anything else.
    Other(Value),
}
