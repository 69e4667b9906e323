//! Redis key names: `{prefix}:{<rule>:<key>}:<algorithm>`.
//!
//! The braces are a Redis Cluster hash tag, so everything stored for one
//! (rule, key) pair lives in one slot. The algorithm's short name at the end
//! (`gcra`, `tb`, `fw`, `sw`, `sl`) means a rule whose algorithm is changed
//! starts from fresh state instead of meeting a value of another type. The caller's key is written as `=`
//! followed by its bytes when it is at most [`MAX_RAW_KEY`] bytes long, and
//! as `#` followed by the hex SHA-1 of its bytes when longer, so a hostile
//! key costs Redis at most ~`MAX_RAW_KEY` bytes and the two forms can never
//! name the same Redis key. Rule names cannot contain `:`, so different
//! (rule, key) pairs always get different names.

use crate::rule::Algorithm;

/// Keys longer than this are stored by their SHA-1.
pub use crate::ticket::MAX_RAW_KEY;

/// The Redis key of (rule, key) under `prefix`.
pub(crate) fn redis_key(prefix: &str, rule: &str, algorithm: Algorithm, key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(redis_key_len(prefix, rule, algorithm, key));
    write_redis_key(&mut out, prefix, rule, algorithm, key);
    out
}

/// The length of [`redis_key`]'s answer, without building it (a RESP bulk
/// string announces its length first).
pub(crate) fn redis_key_len(prefix: &str, rule: &str, algorithm: Algorithm, key: &[u8]) -> usize {
    // `:{`, `:`, `}:`
    prefix.len() + rule.len() + key_body_len(key) + suffix(algorithm).len() + 5
}

/// Appends [`redis_key`]'s answer to `out`.
pub(crate) fn write_redis_key(
    out: &mut Vec<u8>,
    prefix: &str,
    rule: &str,
    algorithm: Algorithm,
    key: &[u8],
) {
    write_key_head(out, prefix, rule);
    write_key_body(out, key);
    write_key_tail(out, algorithm);
}

/// The part of a Redis key before the caller's key: `{prefix}:{<rule>:`.
pub(crate) fn write_key_head(out: &mut Vec<u8>, prefix: &str, rule: &str) {
    out.extend_from_slice(prefix.as_bytes());
    out.extend_from_slice(b":{");
    out.extend_from_slice(rule.as_bytes());
    out.push(b':');
}

/// The caller's key as written in a Redis key: `=<key>`, or `#<sha1>` when
/// longer than [`MAX_RAW_KEY`].
pub(crate) fn write_key_body(out: &mut Vec<u8>, key: &[u8]) {
    crate::ticket::write_key_name(out, key);
}

/// The length of [`write_key_body`]'s output.
pub(crate) fn key_body_len(key: &[u8]) -> usize {
    1 + if key.len() <= MAX_RAW_KEY {
        key.len()
    } else {
        SHA1_HEX_LEN
    }
}

/// The part of a Redis key after the caller's key: `}:<algorithm>`.
pub(crate) fn write_key_tail(out: &mut Vec<u8>, algorithm: Algorithm) {
    out.extend_from_slice(b"}:");
    out.extend_from_slice(suffix(algorithm));
}

/// Hex digits of a SHA-1.
const SHA1_HEX_LEN: usize = 40;

fn suffix(algorithm: Algorithm) -> &'static [u8] {
    match algorithm {
        Algorithm::Gcra => b"gcra",
        Algorithm::TokenBucket => b"tb",
        Algorithm::FixedWindow => b"fw",
        Algorithm::SlidingWindow => b"sw",
        Algorithm::SlidingLog => b"sl",
        Algorithm::Concurrency => b"cc",
    }
}

/// The Redis key of (rule, key) under `prefix`, the key given by its name
/// ([`crate::ticket::key_name`]: what a ticket holds).
pub(crate) fn redis_key_of_name(
    prefix: &str,
    rule: &str,
    algorithm: Algorithm,
    name: &[u8],
) -> Vec<u8> {
    let mut out = Vec::with_capacity(prefix.len() + rule.len() + name.len() + 8);
    write_key_head(&mut out, prefix, rule);
    out.extend_from_slice(name);
    write_key_tail(&mut out, algorithm);
    out
}

/// The Redis key of a reservation's record for (rule, key named `name`):
/// `{prefix}:{<rule>:<name>}:rv:<nonce>`, in the slot of the pair's state.
pub(crate) fn record_key(prefix: &str, rule: &str, name: &[u8], nonce_hex: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(prefix.len() + rule.len() + name.len() + nonce_hex.len() + 10);
    write_key_head(&mut out, prefix, rule);
    out.extend_from_slice(name);
    out.extend_from_slice(b"}:rv:");
    out.extend_from_slice(nonce_hex.as_bytes());
    out
}

/// The Redis key marking the last reset of (rule, key named `name`):
/// `{prefix}:{<rule>:<name>}:reset`, in the slot of the pair's state,
/// holding the reset's time (µs, the server's): a settle forgets the
/// reservations made before it (docs/admin.md, "Reset a key").
pub(crate) fn reset_mark(prefix: &str, rule: &str, name: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(prefix.len() + rule.len() + name.len() + 12);
    write_key_head(&mut out, prefix, rule);
    out.extend_from_slice(name);
    out.extend_from_slice(b"}:reset");
    out
}

/// The Redis Cluster slot of a key, computed as Redis does (CRC16/XMODEM of
/// the hash tag, or of the whole key without one, modulo 16384).
pub(crate) fn slot(key: &[u8]) -> u16 {
    let tagged = key.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        rest.iter()
            .position(|&b| b == b'}')
            .filter(|&close| close > 0)
            .map(|close| &rest[..close])
    });
    crc16(tagged.unwrap_or(key)) % 16384
}

fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in bytes {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_redis() {
        // Values from the Redis Cluster specification and `CLUSTER KEYSLOT`.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(slot(b"foo"), 12182);
        assert_eq!(slot(b"{user1000}.following"), slot(b"{user1000}.followers"));
        assert_eq!(slot(b"foo{}{bar}"), slot(b"foo{}{bar}"));
        assert_eq!(slot(b"foo{}{bar}"), crc16(b"foo{}{bar}") % 16384);
        assert_eq!(slot(b"foo{{bar}}zap"), crc16(b"{bar") % 16384);
    }

    #[test]
    fn long_keys_are_hashed_and_forms_never_collide() {
        let g = Algorithm::Gcra;
        let short = redis_key("tg", "r", g, b"alice");
        assert_eq!(short, b"tg:{r:=alice}:gcra");
        let long = redis_key("tg", "r", g, &[b'x'; MAX_RAW_KEY + 1]);
        assert_eq!(long.len(), "tg:{r:#}:gcra".len() + 40);
        assert!(long.starts_with(b"tg:{r:#"));
        // A short key spelling a hash is still a different Redis key.
        let spelled = redis_key("tg", "r", g, &long[6..long.len() - 6]);
        assert_ne!(spelled, long);
        // Another algorithm, another key, same slot.
        let fw = redis_key("tg", "r", Algorithm::FixedWindow, b"alice");
        assert_ne!(fw, short);
        assert_eq!(slot(&fw), slot(&short));
    }

    #[test]
    fn the_announced_length_is_the_length() {
        for algorithm in Algorithm::RATES {
            for len in [0, 1, MAX_RAW_KEY, MAX_RAW_KEY + 1, 1000] {
                let key = vec![b'k'; len];
                let built = redis_key("tollgate", "rule", algorithm, &key);
                assert_eq!(
                    redis_key_len("tollgate", "rule", algorithm, &key),
                    built.len()
                );
            }
        }
    }
}
