//! Encoding commands: arguments appended straight into a RESP write buffer
//! (or a redis-rs `Cmd`), with no intermediate command object.

use super::super::keys;
use crate::rule::Rule;

/// Where the arguments of a command go: a RESP write buffer, or a redis-rs
/// `Cmd` (Cluster connections).
pub(in crate::store::redis) trait Args {
    /// One argument, as bytes.
    fn bytes(&mut self, b: &[u8]);

    /// One argument, an unsigned integer in decimal.
    fn uint(&mut self, v: u64);

    /// Arguments whose RESP encoding, `encoded`, was made beforehand.
    fn preencoded(&mut self, args: &[&[u8]], encoded: &[u8]) {
        let _ = encoded;
        for a in args {
            self.bytes(a);
        }
    }

    /// One argument: the Redis key of (rule, key) under `prefix`.
    fn redis_key(&mut self, prefix: &str, rule: &Rule, key: &[u8]) {
        self.bytes(&keys::redis_key(prefix, rule.name(), rule.algorithm(), key));
    }
}

impl Args for redis::Cmd {
    fn bytes(&mut self, b: &[u8]) {
        self.arg(b);
    }

    #[inline]
    fn uint(&mut self, v: u64) {
        self.arg(v);
    }
}

/// A RESP command being appended to a write buffer.
///
/// Each argument is assembled on the stack and appended with one copy: the
/// encoder is most of what a check costs the client, so it avoids the many
/// small appends (each a capacity check and a `memcpy` call) a plain
/// `write!` would make.
pub(in crate::store::redis) struct Encoder<'a> {
    out: &'a mut Vec<u8>,
}

/// Room for `$`, a length, `\r\n`, a `u64` and `\r\n`.
const ROOM: usize = 48;

/// The two decimal digits of every number below 100.
const PAIRS: &[u8; 200] = b"\
    0001020304050607080910111213141516171819\
    2021222324252627282930313233343536373839\
    4041424344454647484950515253545556575859\
    6061626364656667686970717273747576777879\
    8081828384858687888990919293949596979899";

/// Writes `v` in decimal to end just before `end`; returns where it starts.
#[allow(clippy::cast_possible_truncation)] // remainders by 100 fit anything
fn digits_before(buf: &mut [u8; ROOM], mut end: usize, mut v: u64) -> usize {
    while v >= 100 {
        let pair = (v % 100) as usize * 2;
        v /= 100;
        end -= 2;
        buf[end..end + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
    }
    if v >= 10 {
        let pair = v as usize * 2;
        end -= 2;
        buf[end..end + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
    } else {
        end -= 1;
        buf[end] = b'0' + v as u8;
    }
    end
}

/// Appends `{kind}{n}\r\n`, e.g. `*3\r\n` or `$5\r\n`.
#[inline]
fn line_of(out: &mut Vec<u8>, kind: u8, n: usize) {
    let mut buf = [0u8; ROOM];
    buf[ROOM - 2..].copy_from_slice(b"\r\n");
    let start = digits_before(&mut buf, ROOM - 2, n as u64) - 1;
    buf[start] = kind;
    out.extend_from_slice(&buf[start..]);
}

impl<'a> Encoder<'a> {
    /// Starts a command of `argc` arguments, the command name included.
    pub(in crate::store::redis) fn command(out: &'a mut Vec<u8>, argc: usize) -> Self {
        line_of(out, b'*', argc);
        Self { out }
    }

    /// Continues a command whose start is appended with [`Self::encoded`].
    pub(in crate::store::redis) fn append(out: &'a mut Vec<u8>) -> Self {
        Self { out }
    }

    /// Appends bytes encoded beforehand (see `Script::head`).
    pub(in crate::store::redis) fn encoded(&mut self, resp: &[u8]) {
        self.out.extend_from_slice(resp);
    }

    /// Starts a bulk string of `len` bytes (the caller appends them and
    /// its `\r\n`).
    #[allow(clippy::cast_possible_truncation)] // digits of a number below 100
    pub(in crate::store::redis) fn bulk_header(&mut self, len: usize) {
        if (10..100).contains(&len) {
            // Most keys: one fixed-size append.
            let (tens, ones) = (b'0' + (len / 10) as u8, b'0' + (len % 10) as u8);
            self.out
                .extend_from_slice(&[b'$', tens, ones, b'\r', b'\n']);
        } else {
            line_of(self.out, b'$', len);
        }
    }

    /// Lets `write` append raw bytes.
    pub(in crate::store::redis) fn with_buffer(&mut self, write: impl FnOnce(&mut Vec<u8>)) {
        write(self.out);
    }
}

impl Args for Encoder<'_> {
    #[inline]
    fn preencoded(&mut self, _: &[&[u8]], encoded: &[u8]) {
        self.out.extend_from_slice(encoded);
    }

    #[inline]
    fn bytes(&mut self, b: &[u8]) {
        line_of(self.out, b'$', b.len());
        self.out.extend_from_slice(b);
        self.out.extend_from_slice(b"\r\n");
    }

    #[allow(clippy::cast_possible_truncation)] // v < 10
    fn uint(&mut self, v: u64) {
        if v < 10 {
            let d = b'0' + v as u8;
            self.out
                .extend_from_slice(&[b'$', b'1', b'\r', b'\n', d, b'\r', b'\n']);
            return;
        }
        let mut buf = [0u8; ROOM];
        buf[ROOM - 2..].copy_from_slice(b"\r\n");
        let digits = digits_before(&mut buf, ROOM - 2, v);
        buf[digits - 2..digits].copy_from_slice(b"\r\n");
        let len = (ROOM - 2 - digits) as u64;
        let start = digits_before(&mut buf, digits - 2, len) - 1;
        buf[start] = b'$';
        self.out.extend_from_slice(&buf[start..]);
    }

    fn redis_key(&mut self, prefix: &str, rule: &Rule, key: &[u8]) {
        let (name, algorithm) = (rule.name(), rule.algorithm());
        let len = keys::redis_key_len(prefix, name, algorithm, key);
        line_of(self.out, b'$', len);
        self.out.reserve(len + 2);
        keys::write_redis_key(self.out, prefix, name, algorithm, key);
        self.out.extend_from_slice(b"\r\n");
    }
}

/// Appends a whole command.
pub(in crate::store::redis) fn command(out: &mut Vec<u8>, args: &[&[u8]]) {
    let mut e = Encoder::command(out, args.len());
    for a in args {
        e.bytes(a);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_encoded_as_redis_expects() {
        let mut out = Vec::new();
        command(&mut out, &[b"SET", b"k", b""]);
        let mut e = Encoder::command(&mut out, 2);
        e.bytes(b"X");
        e.uint(18_446_744_073_709_551_615);
        assert_eq!(
            out,
            b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n*2\r\n$1\r\nX\r\n$20\r\n18446744073709551615\r\n"
        );
    }
}
