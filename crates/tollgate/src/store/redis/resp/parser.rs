//! Parsing replies from a read buffer, with a fast path for what every
//! script answers (an array of integers).

use super::{INLINE, Ints, Reply, Value};

/// Bytes that are not RESP2: the connection cannot be resynchronized.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::store::redis) struct Malformed(pub(in crate::store::redis) String);

/// Parses one reply from the start of `buf`: `Ok(None)` when it is not all
/// there yet, else the reply and how many bytes it took.
pub(in crate::store::redis) fn parse(buf: &[u8]) -> Result<Option<(Reply, usize)>, Malformed> {
    match buf.first() {
        None => Ok(None),
        Some(b'*') => {
            let mut rest = &buf[1..];
            if let Some((ints, used)) = int_array(buf, &mut rest) {
                return Ok(Some((Reply::Ints(ints), used)));
            }
            if !rest.contains(&b'\n') {
                // Only integers so far, and the one it stopped at is not
                // all there: wait for it (a batch's long reply comes in
                // several reads; parsing it all again as values each time
                // was most of what reading it cost).
                return Ok(None);
            }
            // Not only short integers: the general parser.
            Ok(value(buf, 0)?.map(|(v, used)| (reply_of(v), used)))
        }
        Some(b'-') => Ok(line(buf, 1)?.map(|(text, used)| {
            (
                Reply::Error(String::from_utf8_lossy(text).into_owned()),
                used,
            )
        })),
        Some(_) => Ok(value(buf, 0)?.map(|(v, used)| (reply_of(v), used))),
    }
}

/// A parsed value as a reply: an array of integers as [`Ints`].
fn reply_of(v: Value) -> Reply {
    match v {
        Value::Array(items) if items.iter().all(|i| matches!(i, Value::Int(_))) => {
            let ints: Vec<i64> = items
                .iter()
                .filter_map(|i| match i {
                    Value::Int(v) => Some(*v),
                    _ => None,
                })
                .collect();
            Reply::Ints(match u8::try_from(ints.len()) {
                Ok(n) if ints.len() <= INLINE => {
                    let mut inline = [0; INLINE];
                    inline[..ints.len()].copy_from_slice(&ints);
                    Ints::Inline(n, inline)
                }
                _ => Ints::Heap(ints),
            })
        }
        other => Reply::Other(other),
    }
}

/// Most digits the fast path reads: 18 cannot overflow an `i64`.
const FAST_DIGITS: usize = 18;

/// The fast path, for what every script answers: `*N\r\n` then N integers
/// of at most [`FAST_DIGITS`] digits, all there, parsed from `rest` (`buf`
/// after its `*`). `None` for anything else, with `rest` at (or just
/// inside) the element it stopped at: [`parse`] tells an incomplete reply
/// from another kind of reply by it.
///
/// Slice patterns and no error bookkeeping: the cheapest form measured
/// (this runs once per check on the client).
fn int_array<'b>(buf: &'b [u8], rest: &mut &'b [u8]) -> Option<(Ints, usize)> {
    let Ok(n) = usize::try_from(scan_int(rest)?) else {
        // A nil array: not for the fast path.
        *rest = buf;
        return None;
    };
    let ints = if n <= INLINE {
        let mut inline = [0i64; INLINE];
        if let Some(first) = inline[..n].first_mut() {
            // Every script reply starts with the time: 16 digits until 2286.
            *first = match sixteen_digits(rest) {
                Some(t) => t,
                None => element(rest)?,
            };
        }
        for slot in inline[..n].iter_mut().skip(1) {
            *slot = element(rest)?;
        }
        Ints::Inline(u8::try_from(n).ok()?, inline)
    } else {
        let mut heap = Vec::with_capacity(n.min(rest.len() / 4));
        for _ in 0..n {
            heap.push(element(rest)?);
        }
        Ints::Heap(heap)
    };
    Some((ints, buf.len() - rest.len()))
}

/// A batch's reply, the common case: `*<len>\r\n` and exactly `len`
/// integers of at most [`FAST_DIGITS`] digits, all there. Parsed into
/// `ints` (cleared first; the driver reuses it, so no allocation per
/// reply); returns the bytes used. `None` for anything else (incomplete, an
/// error, an error text among the integers, another length): [`parse`]
/// then says what it is.
///
/// Index arithmetic over the buffer, one bounds check per byte: about half
/// the instructions of the general fast path, and a batch's reply is four
/// integers per check.
pub(in crate::store::redis) fn int_array_of(
    buf: &[u8],
    len: usize,
    ints: &mut Vec<i64>,
) -> Option<usize> {
    ints.clear();
    ints.reserve(len);
    let mut rest = buf.get(1..)?;
    if buf[0] != b'*' || usize::try_from(scan_int(&mut rest)?).ok()? != len {
        return None;
    }
    let mut i = buf.len() - rest.len();
    for _ in 0..len {
        if *buf.get(i)? != b':' {
            return None;
        }
        i += 1;
        let negative = *buf.get(i)? == b'-';
        i += usize::from(negative);
        let start = i;
        let mut v: i64 = 0;
        loop {
            let d = buf.get(i)?.wrapping_sub(b'0');
            if d > 9 {
                break;
            }
            // Wrapping: more than FAST_DIGITS digits are refused below.
            v = v.wrapping_mul(10).wrapping_add(i64::from(d));
            i += 1;
        }
        if !(1..=FAST_DIGITS).contains(&(i - start)) || buf.get(i..i + 2)? != b"\r\n" {
            return None;
        }
        i += 2;
        ints.push(if negative { -v } else { v });
    }
    Some(i)
}

/// `:<16 digits>\r\n`, consumed from the front of `rest`; `None` (and
/// `rest` untouched) for anything else.
#[inline(always)]
fn sixteen_digits(rest: &mut &[u8]) -> Option<i64> {
    let s = *rest;
    if s.get(..1)? != b":" || s.get(17..19)? != b"\r\n" {
        return None;
    }
    let high = eight_digits(&s[1..9])?;
    let low = eight_digits(&s[9..17])?;
    *rest = &s[19..];
    Some(high * 100_000_000 + low)
}

/// The value of eight ASCII digits, or `None` unless all eight are digits:
/// all at once in one `u64` (SWAR, as simdjson does it).
#[inline(always)]
fn eight_digits(chunk: &[u8]) -> Option<i64> {
    let v = u64::from_le_bytes(chunk.try_into().ok()?);
    let high = v & 0xF0F0_F0F0_F0F0_F0F0;
    let carried = (v.wrapping_add(0x0606_0606_0606_0606) & 0xF0F0_F0F0_F0F0_F0F0) >> 4;
    if high | carried != 0x3333_3333_3333_3333 {
        return None;
    }
    let v = ((v & 0x0F0F_0F0F_0F0F_0F0F).wrapping_mul(2561)) >> 8;
    let v = ((v & 0x00FF_00FF_00FF_00FF).wrapping_mul(6_553_601)) >> 16;
    // Below 10^8: fits.
    i64::try_from(((v & 0x0000_FFFF_0000_FFFF).wrapping_mul(42_949_672_960_001)) >> 32).ok()
}

/// `:<integer>\r\n`, consumed from the front of `rest`.
#[inline]
fn element(rest: &mut &[u8]) -> Option<i64> {
    match *rest {
        [b':', tail @ ..] => {
            *rest = tail;
            scan_int(rest)
        }
        _ => None,
    }
}

/// `[-]<digits>\r\n`, consumed from the front of `rest`.
#[inline(always)]
fn scan_int(rest: &mut &[u8]) -> Option<i64> {
    let (negative, mut s) = match *rest {
        [b'-', tail @ ..] => (true, tail),
        s => (false, s),
    };
    let mut v: i64 = 0;
    let mut digits = 0;
    loop {
        match s {
            [d @ b'0'..=b'9', tail @ ..] => {
                // Wrapping: more than FAST_DIGITS digits are refused below.
                v = v.wrapping_mul(10).wrapping_add(i64::from(*d - b'0'));
                digits += 1;
                s = tail;
            }
            [b'\r', b'\n', tail @ ..] if digits > 0 && digits <= FAST_DIGITS => {
                *rest = tail;
                return Some(if negative { -v } else { v });
            }
            _ => return None,
        }
    }
}

/// The line starting at `from` (without its `\r\n`) and the offset after it.
fn line(buf: &[u8], from: usize) -> Result<Option<(&[u8], usize)>, Malformed> {
    let rest = buf.get(from..).unwrap_or_default();
    match rest.iter().position(|&b| b == b'\r') {
        None => Ok(None),
        Some(i) => match rest.get(i + 1) {
            None => Ok(None),
            Some(b'\n') => Ok(Some((&rest[..i], from + i + 2))),
            Some(_) => Err(Malformed("a bare \\r in a reply line".to_owned())),
        },
    }
}

/// A decimal line starting at `from`.
fn number(buf: &[u8], from: usize) -> Result<Option<(i64, usize)>, Malformed> {
    let Some((text, next)) = line(buf, from)? else {
        return Ok(None);
    };
    let valid = text.split_first().is_some_and(|(&first, digits)| {
        (first == b'-' && !digits.is_empty() || first.is_ascii_digit())
            && digits.iter().all(u8::is_ascii_digit)
    });
    std::str::from_utf8(text)
        .ok()
        .filter(|_| valid)
        .and_then(|t| t.parse::<i64>().ok())
        .map(|v| Some((v, next)))
        .ok_or_else(|| Malformed(format!("{:?} is not an integer", lossy(text))))
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(&b[..b.len().min(64)]).into_owned()
}

/// Deepest array nesting accepted (Redis replies here nest two deep).
const MAX_DEPTH: usize = 8;

/// Any value starting at the start of `buf`.
fn value(buf: &[u8], depth: usize) -> Result<Option<(Value, usize)>, Malformed> {
    if depth > MAX_DEPTH {
        return Err(Malformed("arrays nested too deep".to_owned()));
    }
    let Some(&kind) = buf.first() else {
        return Ok(None);
    };
    Ok(match kind {
        b'+' => line(buf, 1)?.map(|(t, used)| (Value::Text(t.to_vec()), used)),
        // An error inside an array (e.g. of a transaction): kept as text.
        b'-' => line(buf, 1)?.map(|(t, used)| (Value::Text(t.to_vec()), used)),
        b':' => number(buf, 1)?.map(|(v, used)| (Value::Int(v), used)),
        b'$' => {
            let Some((len, at)) = number(buf, 1)? else {
                return Ok(None);
            };
            let Ok(len) = usize::try_from(len) else {
                return Ok(Some((Value::Nil, at)));
            };
            let end = at
                .checked_add(len)
                .ok_or_else(|| Malformed("bulk length overflows".to_owned()))?;
            match buf.get(end..end + 2) {
                None => None,
                Some(b"\r\n") => Some((Value::Text(buf[at..end].to_vec()), end + 2)),
                Some(_) => return Err(Malformed("bulk string without \\r\\n".to_owned())),
            }
        }
        b'*' => {
            let Some((n, mut at)) = number(buf, 1)? else {
                return Ok(None);
            };
            let Ok(n) = usize::try_from(n) else {
                return Ok(Some((Value::Nil, at)));
            };
            // Every element takes at least 3 bytes: do not trust a huge n.
            let mut items = Vec::with_capacity(n.min(buf.len() / 3));
            for _ in 0..n {
                let Some((v, used)) = value(&buf[at..], depth + 1)? else {
                    return Ok(None);
                };
                items.push(v);
                at += used;
            }
            Some((Value::Array(items), at))
        }
        other => {
            return Err(Malformed(format!(
                "unexpected reply type byte {:?}",
                char::from(other)
            )));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ints(v: &[i64]) -> Reply {
        Reply::Ints(if v.len() <= INLINE {
            let mut a = [0; INLINE];
            a[..v.len()].copy_from_slice(v);
            Ints::Inline(u8::try_from(v.len()).expect("short"), a)
        } else {
            Ints::Heap(v.to_vec())
        })
    }

    #[test]
    fn replies_parse_whole_or_not_at_all() {
        let script = b"*5\r\n:1764000000000000\r\n:1\r\n:-1\r\n:0\r\n:-9223372036854775808\r\n";
        let expected = ints(&[1_764_000_000_000_000, 1, -1, 0, i64::MIN]);
        assert_eq!(
            parse(script).expect("valid"),
            Some((expected.clone(), script.len()))
        );
        // Every prefix is incomplete, never an error or a wrong reply.
        for cut in 0..script.len() {
            assert_eq!(parse(&script[..cut]).expect("valid"), None, "cut at {cut}");
        }
        // Two replies back to back: the first, and where the second starts.
        let mut two = script.to_vec();
        two.extend_from_slice(b"-NOSCRIPT No matching script.\r\n");
        let (first, used) = parse(&two).expect("valid").expect("complete");
        assert_eq!((first, used), (expected, script.len()));
        assert_eq!(
            parse(&two[used..]).expect("valid"),
            Some((
                Reply::Error("NOSCRIPT No matching script.".to_owned()),
                two.len() - used
            ))
        );
        let long: Vec<i64> = (0..9).collect();
        let mut wire = b"*9\r\n".to_vec();
        for i in &long {
            wire.extend_from_slice(format!(":{i}\r\n").as_bytes());
        }
        assert_eq!(
            parse(&wire).expect("valid"),
            Some((ints(&long), wire.len()))
        );
    }

    /// A batch's reply with a failed check's error text among its
    /// integers: every prefix is incomplete, the whole an array of values.
    #[test]
    fn batch_replies_with_an_error_parse_whole_or_not_at_all() {
        let wire = b"*9\r\n:1764000000000000\r\n:1\r\n:5\r\n:100\r\n:-1\r\n\
                     $25\r\nWRONGTYPE Operation again\r\n:0\r\n:0\r\n:0\r\n";
        for cut in 0..wire.len() {
            assert_eq!(parse(&wire[..cut]).expect("valid"), None, "cut at {cut}");
        }
        let Some((Reply::Other(Value::Array(items)), used)) = parse(wire).expect("valid") else {
            panic!("not an array of values");
        };
        assert_eq!(used, wire.len());
        assert_eq!(items[5], Value::Text(b"WRONGTYPE Operation again".to_vec()));
        assert_eq!(
            parse(b"*-1\r\n").expect("valid"),
            Some((Reply::Other(Value::Nil), 5))
        );
    }

    /// The batch parser reads what the general one reads, with the same
    /// bytes, and refuses the rest (errors, text, other lengths, incomplete
    /// replies; long numbers it leaves to the general parser).
    #[test]
    fn batch_replies_parse_as_the_general_parser_does() {
        let mut ints_of = Vec::new();
        let mut wires: Vec<Vec<u8>> = Vec::new();
        for values in [
            &[1_764_000_000_000_000i64, 1, 999_999, 1, -1][..],
            &[0, 0, 0, 0, 0],
            &[
                7,
                -123_456_789_012_345_678,
                123_456_789_012_345_678,
                10,
                -10,
            ],
        ] {
            let mut wire = format!("*{}\r\n", values.len()).into_bytes();
            for v in values {
                wire.extend_from_slice(format!(":{v}\r\n").as_bytes());
            }
            wire.extend_from_slice(b"+next\r\n");
            wires.push(wire);
        }
        wires.push(b"*5\r\n:1\r\n:2\r\n$1\r\nx\r\n:4\r\n:5\r\n".to_vec());
        wires.push(b"*5\r\n:1\r\n:2\r\n:1234567890123456789\r\n:4\r\n:5\r\n".to_vec());
        wires.push(b"*5\r\n:1\r\n:2\r\n:-\r\n:4\r\n:5\r\n".to_vec());
        wires.push(b"*5\r\n:1\r\n:2\r\n:\r\n:4\r\n:5\r\n".to_vec());
        wires.push(b"*5\r\n:1\r\n:2\r\n:3\r:4\r\n:5\r\n".to_vec());
        wires.push(b"*4\r\n:1\r\n:2\r\n:3\r\n:4\r\n".to_vec());
        wires.push(b"-NOSCRIPT No matching script\r\n".to_vec());
        for (i, wire) in wires.iter().enumerate() {
            // The script's replies take the batch parser.
            let whole = int_array_of(wire, 5, &mut ints_of);
            assert_eq!(whole.is_some(), i < 3, "{wire:?}");
            for cut in 0..=wire.len() {
                let part = &wire[..cut];
                let general = parse(part);
                // On `None` the driver asks the general parser (e.g. for
                // 19 digits, which it reads exactly).
                if let Some(used) = int_array_of(part, 5, &mut ints_of) {
                    let Ok(Some((Reply::Ints(ints), n))) = general else {
                        panic!("{part:?}: {general:?}")
                    };
                    assert_eq!((ints.as_slice(), n), (&ints_of[..], used), "{part:?}");
                }
            }
        }
    }

    #[test]
    fn other_values_parse() {
        let role =
            b"*3\r\n$6\r\nmaster\r\n:42\r\n*1\r\n*3\r\n$9\r\n127.0.0.1\r\n$4\r\n6380\r\n:42\r\n";
        let (reply, used) = parse(role).expect("valid").expect("complete");
        assert_eq!(used, role.len());
        let Reply::Other(Value::Array(items)) = reply else {
            panic!("{reply:?}")
        };
        assert_eq!(items[0].text(), Some("master"));
        assert_eq!(items[1], Value::Int(42));
        for cut in 0..role.len() {
            assert_eq!(parse(&role[..cut]).expect("valid"), None, "cut at {cut}");
        }
        assert_eq!(
            parse(b"+PONG\r\n").expect("valid"),
            Some((Reply::Other(Value::Text(b"PONG".to_vec())), 7))
        );
        assert_eq!(
            parse(b"$-1\r\n").expect("valid"),
            Some((Reply::Other(Value::Nil), 5))
        );
        assert_eq!(
            parse(b"*-1\r\n").expect("valid"),
            Some((Reply::Other(Value::Nil), 5))
        );
        assert_eq!(
            parse(b"*0\r\n").expect("valid"),
            Some((Reply::Ints(Ints::Inline(0, [0; INLINE])), 4))
        );
    }

    #[test]
    fn eight_digits_at_once_equal_one_at_a_time() {
        for v in [0, 1, 9, 10, 12_345_678, 99_999_999, 10_000_000, 90_000_009] {
            let text = format!("{v:08}");
            assert_eq!(eight_digits(text.as_bytes()), Some(v), "{text}");
        }
        for bad in [
            b"1234567a",
            b"/1234567",
            b"12:45678",
            b"        ",
            b"1234567\r",
            b"\r\n:12345",
        ] {
            assert_eq!(eight_digits(bad), None, "{bad:?}");
        }
        // A 16-digit first element, and near misses, parse the same.
        for first in [
            "1764000000000000",
            "0000000000000000",
            "9999999999999999",
            "176400000000000",
            "17640000000000000",
            "-176400000000000",
            "17640000a0000000",
        ] {
            let wire = format!("*2\r\n:{first}\r\n:1\r\n");
            let expected = first.parse::<i64>().ok().filter(|_| first.len() <= 18);
            match (parse(wire.as_bytes()), expected) {
                (Ok(Some((reply, used))), Some(v)) => {
                    assert_eq!(reply, ints(&[v, 1]), "{first}");
                    assert_eq!(used, wire.len());
                }
                (Err(_), None) => {}
                (other, _) => panic!("{first}: {other:?}"),
            }
        }
    }

    #[test]
    fn integers_parse_exactly() {
        for v in [
            0i64,
            7,
            -1,
            12_345_678,
            -123_456_789,
            1_764_000_000_000_000,
            i64::MAX,
            i64::MIN,
        ] {
            let text = format!(":{v}\r\n");
            assert_eq!(
                number(text.as_bytes(), 1).expect("valid"),
                Some((v, text.len()))
            );
            // The fast path (or, past 18 digits, the general one) agrees.
            for n in [1, 3, 7] {
                let mut wire = format!("*{n}\r\n").into_bytes();
                for _ in 0..n {
                    wire.extend_from_slice(text.as_bytes());
                }
                assert_eq!(
                    parse(&wire).expect("valid"),
                    Some((ints(&vec![v; n]), wire.len())),
                    "{v} × {n}"
                );
                for cut in 0..wire.len() {
                    assert_eq!(parse(&wire[..cut]).expect("valid"), None, "cut at {cut}");
                }
            }
        }
        let mixed = b"*2\r\n:1\r\n$1\r\nx\r\n";
        assert_eq!(
            parse(mixed).expect("valid"),
            Some((
                Reply::Other(Value::Array(vec![
                    Value::Int(1),
                    Value::Text(b"x".to_vec())
                ])),
                mixed.len()
            ))
        );
        for bad in [":9223372036854775808\r\n", ":12345678901234567890\r\n"] {
            assert!(number(bad.as_bytes(), 1).is_err(), "{bad}");
        }
    }

    #[test]
    fn garbage_is_malformed() {
        for bad in [
            &b"?\r\n"[..],
            b":12a\r\n",
            b"*1\r\n:99999999999999999999\r\n",
            b"$3\r\nabcd\r\n",
            b"+a\rb\r\n",
        ] {
            assert!(parse(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
    }
}
