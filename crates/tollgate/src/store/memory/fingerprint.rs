//! (rule, key) fingerprints: SipHash-1-3 over an injective encoding of the
//! pair, and the map hasher that passes them through.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};

/// The fingerprint marking an empty slot of a `GcraTable`; no key has it
/// (see `Sip13::fingerprint`).
pub(super) const EMPTY: Fp = Fp(0, 0);

/// The low bits of a `GcraSlot`'s second fingerprint word hold the key's
/// rule class (see `GcraRules`) instead of fingerprint bits: the slot
/// stays 24 bytes, and 112 bits still tell keys apart.
pub(super) const CLASS_BITS: u32 = 16;

/// A (rule, key) fingerprint. Hashed by its first word: it is already random.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Fp(pub(crate) u64, pub(crate) u64);

impl Hash for Fp {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.0);
    }
}

/// Passes a fingerprint word through as the hash.
#[derive(Default)]
pub(super) struct FpHasher(u64);

impl Hasher for FpHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

pub(super) type FpMap<V> = HashMap<Fp, V, BuildHasherDefault<FpHasher>>;

// The name's length is one byte of the fingerprint input.
const _: () = assert!(crate::rule::MAX_NAME_LEN < 256);

/// The byte string a (rule name, key) pair is hashed as:
///
/// * one word: the name's length in the top byte, its first 7 bytes (zero
///   padded) below;
/// * the rest of the name in 8-byte little-endian words, the last one zero
///   padded;
/// * the key.
///
/// The length says where the name ends, so the encoding parses back into the
/// pair: distinct pairs are distinct inputs. Its words are whole, so the key
/// starts on a word boundary and is hashed straight from its own memory.
/// (The store computes the same hash without building this string; tests
/// check the two agree.)
#[cfg(test)]
pub(super) fn fingerprint_input(name: &[u8], key: &[u8]) -> Vec<u8> {
    let (head, rest) = name.split_at(name.len().min(7));
    let mut out = Vec::with_capacity(16 + name.len() + key.len());
    out.extend_from_slice(head);
    out.resize(7, 0);
    out.push(u8::try_from(name.len()).unwrap_or(u8::MAX));
    for word in rest.chunks(8) {
        out.extend_from_slice(word);
        out.resize(out.len() + 8 - word.len(), 0);
    }
    out.extend_from_slice(key);
    out
}

/// Up to 7 bytes as a little-endian word, zero padded, in at most three
/// loads.
#[inline]
pub(super) fn le_word(b: &[u8]) -> u64 {
    debug_assert!(b.len() < 8);
    let mut word = 0;
    let mut i = 0;
    if b.len() >= 4 {
        word = u64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
        i = 4;
    }
    if b.len() - i >= 2 {
        word |= u64::from(u16::from_le_bytes([b[i], b[i + 1]])) << (8 * i);
        i += 2;
    }
    if i < b.len() {
        word |= u64::from(b[i]) << (8 * i);
    }
    word
}

/// Exactly 8 bytes as a little-endian word.
#[inline]
pub(super) fn le_word8(b: &[u8]) -> u64 {
    let mut word = [0; 8];
    word.copy_from_slice(&b[..8]);
    u64::from_le_bytes(word)
}

/// SipHash-1-3 with a 128-bit output (the reference algorithm, as the
/// `siphasher` crate computes it; a test checks they agree), written out so
/// the whole hash stays in registers and inlines into the check.
#[derive(Clone, Copy)]
pub(crate) struct Sip13 {
    /// The state after keying.
    pub(super) v: [u64; 4],
}

impl Sip13 {
    pub(crate) fn new(k0: u64, k1: u64) -> Self {
        Self {
            v: [
                k0 ^ 0x736f_6d65_7073_6575,
                // 0x646f72616e646f6d ^ 0xee: the 128-bit variant's tweak.
                k1 ^ 0x646f_7261_6e64_6f83,
                k0 ^ 0x6c79_6765_6e65_7261,
                k1 ^ 0x7465_6462_7974_6573,
            ],
        }
    }

    #[inline(always)]
    fn round(v: &mut [u64; 4]) {
        v[0] = v[0].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(13) ^ v[0];
        v[0] = v[0].rotate_left(32);
        v[2] = v[2].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(16) ^ v[2];
        v[0] = v[0].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(21) ^ v[0];
        v[2] = v[2].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(17) ^ v[2];
        v[2] = v[2].rotate_left(32);
    }

    #[inline(always)]
    fn absorb(v: &mut [u64; 4], m: u64) {
        v[3] ^= m;
        Self::round(v);
        v[0] ^= m;
    }

    /// The hash of `fingerprint_input(name, key)`, computed from the parts;
    /// never [`EMPTY`], not even in the 112 bits a `GcraTable` compares:
    /// the 2^16 fingerprints that are would become (0, 2^16), which then
    /// shares a key's state with a few other inputs in 2^128, as any
    /// collision would.
    #[inline(always)]
    pub(crate) fn fingerprint(&self, name: &[u8], key: &[u8]) -> Fp {
        let mut v = self.v;
        let (head, rest) = name.split_at(name.len().min(7));
        Self::absorb(&mut v, le_word(head) | (name.len() as u64) << 56);
        let mut words = rest.chunks_exact(8);
        for word in &mut words {
            Self::absorb(&mut v, le_word8(word));
        }
        let mut len = 8 * (1 + rest.len().div_ceil(8));
        if !words.remainder().is_empty() {
            Self::absorb(&mut v, le_word(words.remainder()));
        }
        let mut words = key.chunks_exact(8);
        for word in &mut words {
            Self::absorb(&mut v, le_word8(word));
        }
        len += key.len();
        // The last block: the input's length (mod 256) on top of its tail.
        Self::absorb(&mut v, le_word(words.remainder()) | (len as u64) << 56);
        v[2] ^= 0xee;
        Self::round(&mut v);
        Self::round(&mut v);
        Self::round(&mut v);
        let h1 = v[0] ^ v[1] ^ v[2] ^ v[3];
        v[1] ^= 0xdd;
        Self::round(&mut v);
        Self::round(&mut v);
        Self::round(&mut v);
        let fp = Fp(h1, v[0] ^ v[1] ^ v[2] ^ v[3]);
        // `GcraTable::same(fp, EMPTY)`: the bits the table compares.
        if fp.0 == EMPTY.0 && (fp.1 ^ EMPTY.1) >> CLASS_BITS == 0 {
            Fp(0, 1 << CLASS_BITS)
        } else {
            fp
        }
    }
}
