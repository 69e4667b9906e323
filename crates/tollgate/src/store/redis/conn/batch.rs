//! Splitting the reply to a batch of single checks among its checks (see
//! `check.lua`, mode "b"): a GCRA check's answer is one integer, another
//! algorithm's four.

use super::super::resp::{Ints, Reply, Value};
use super::{Part, protocol};
use crate::error::StoreError;

/// How many integers a check's answer takes in its batch's reply: one for
/// GCRA (see `check.lua`, mode "b"), four for the others.
pub(super) fn width(part: Part) -> usize {
    match part {
        Part::Check { code: 1, .. } => 1,
        _ => 4,
    }
}

/// The reply of the check whose `width` integers start at `at` in the
/// reply to a batch of checks of `widths`: the time and its integers, or
/// its error (its own, or the whole batch's).
pub(super) fn member_reply(
    reply: &Reply,
    at: usize,
    width: usize,
    widths: &[usize],
) -> Result<Reply, StoreError> {
    let len = 1 + widths.iter().sum::<usize>();
    let bad = || {
        protocol(format!(
            "a batch of {} checks answered {reply:?}",
            widths.len()
        ))
    };
    let mut five = [0; 5];
    match reply {
        Reply::Error(e) => Ok(Reply::Error(e.clone())),
        Reply::Ints(ints) => {
            let ints = ints.as_slice();
            if ints.len() != len || width > 4 {
                return Err(bad());
            }
            five[0] = ints[0];
            five[1..=width].copy_from_slice(&ints[at..at + width]);
            // width <= 4
            #[allow(clippy::cast_possible_truncation)]
            Ok(Reply::Ints(Ints::Inline(1 + width as u8, five)))
        }
        // Some check failed: its error text stands in its first integer.
        Reply::Other(Value::Array(items)) if items.len() == len && width <= 4 => {
            if let Value::Text(e) = &items[at] {
                return Ok(Reply::Error(String::from_utf8_lossy(e).into_owned()));
            }
            for (v, item) in five
                .iter_mut()
                .zip(std::iter::once(&items[0]).chain(&items[at..at + width]))
            {
                match item {
                    Value::Int(i) => *v = *i,
                    _ => return Err(bad()),
                }
            }
            // width <= 4
            #[allow(clippy::cast_possible_truncation)]
            Ok(Reply::Ints(Ints::Inline(1 + width as u8, five)))
        }
        Reply::Other(_) => Err(bad()),
    }
}
