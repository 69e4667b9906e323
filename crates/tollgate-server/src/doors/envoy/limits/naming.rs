//! Names: how a matched request descriptor is named in the store
//! ([`store_key`]), and the tollgate rule generated for a limit
//! ([`rule_name`]).

use std::collections::{HashMap, HashSet};

use tollgate::limits::MAX_NAME_LEN;

/// The rule name for the node at `path` before [`settle`]: its
/// [`base_name`], made unique against `used` by `.2`, `.3`, ... (in load
/// order; [`settle`] makes the final names independent of it).
pub(super) fn rule_name(used: &mut HashSet<String>, path: &str) -> String {
    let name = numbered(used, &base_name(path));
    used.insert(name.clone());
    name
}

/// `envoy.` + `path` with every character outside `[A-Za-z0-9_.-]` as
/// `_`, [`shortened`] when longer than a rule name may be.
fn base_name(path: &str) -> String {
    let base: String = "envoy."
        .chars()
        .chain(path.chars().map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') {
                c
            } else {
                '_'
            }
        }))
        .collect();
    // Every character is ASCII now, so any byte length is a boundary.
    if base.len() > MAX_NAME_LEN {
        shortened(&base)
    } else {
        base
    }
}

/// `base`, or `base.N` for the first `N` from 2 not in `used`.
fn numbered(used: &HashSet<String>, base: &str) -> String {
    let mut name = base.to_owned();
    let mut n = 2u64;
    while used.contains(&name) {
        let suffix = format!(".{n}");
        let stem = &base[..base.len().min(MAX_NAME_LEN - suffix.len())];
        name = format!("{stem}{suffix}");
        n += 1;
    }
    name
}

/// Hex digits of a raw path's digest in a colliding name.
const TAG_LEN: usize = 8;

/// The final rule names, for the rules loaded from `paths` (one each, in
/// rule order) beside the names in `taken` (the config's own rules).
///
/// Counters are kept across reloads by rule name, so a name must follow
/// its limit whatever the order of the limits: Envoy Gateway builds its
/// snapshot from Go maps, and a load-order `.2` could hand one limit's
/// counter to another. So every member of a group of paths that sanitize
/// to one name takes `.` and a digest of its own raw path; the rest keep
/// their plain name (`.2` only beside a taken name). Names are assigned
/// in raw-path order, so even the fallback `.N` (a digest clash) does not
/// depend on load order.
pub(super) fn settle(paths: &[String], taken: &HashSet<String>) -> Vec<String> {
    let bases: Vec<String> = paths.iter().map(|p| base_name(p)).collect();
    let mut group: HashMap<&str, usize> = HashMap::new();
    for base in &bases {
        *group.entry(base).or_default() += 1;
    }
    let wanted: Vec<String> = paths
        .iter()
        .zip(&bases)
        .map(|(path, base)| {
            if group[base.as_str()] == 1 {
                return base.clone();
            }
            let digest = tollgate_http::extract::digest_key("", path.as_bytes());
            let stem = &base[..base.len().min(MAX_NAME_LEN - TAG_LEN - 1)];
            format!("{stem}.{}", &digest[..TAG_LEN])
        })
        .collect();
    let mut order: Vec<usize> = (0..paths.len()).collect();
    order.sort_by(|&a, &b| (&wanted[a], &paths[a]).cmp(&(&wanted[b], &paths[b])));
    let mut used = taken.clone();
    let mut names = vec![String::new(); paths.len()];
    for i in order {
        let name = numbered(&used, &wanted[i]);
        used.insert(name.clone());
        names[i] = name;
    }
    names
}

/// How many bytes of a long name's start and end [`shortened`] keeps.
const KEPT: usize = (MAX_NAME_LEN - MARK_LEN) / 2;
/// `--` + 12 hex digits + `--`.
const MARK_LEN: usize = 16;

/// A name too long for a rule, cut to its start and end around a digest
/// of the whole: Envoy Gateway's paths differ in their middle (the route)
/// and end (the rule and match), so plain truncation made distinct limits
/// share a stem and tell apart only by a `.N` that depends on file order.
/// The digest keeps each one's name its own and the same at every load.
fn shortened(long: &str) -> String {
    let digest = tollgate_http::extract::digest_key("", long.as_bytes());
    format!(
        "{}--{}--{}",
        &long[..KEPT],
        &digest[..MARK_LEN - 4],
        &long[long.len() - KEPT..]
    )
}

/// The store key for a request descriptor matched to a limit: its entries
/// as `key=value` joined by `;`, with `\`, `;` and `=` escaped by a `\`,
/// and each byte that is not part of valid UTF-8 written `\xHH` (lower-case
/// hex; a bare `\x` never occurs otherwise, so such a key never names a
/// valid string's counter, and it stays readable and usable on the HTTP
/// API). Injective: two different entry lists never give the same string.
/// A key
/// that would be longer than [`tollgate::limits::MAX_KEY_LEN`] (a long header
/// value) becomes `;sha256=` and the SHA-256 of its long form: a request
/// cannot escape its limits by being long, and since no short key starts
/// with a bare `;`, a short key never names a long key's counter.
///
/// ```
/// use tollgate_server::doors::envoy::limits::store_key;
///
/// assert_eq!(store_key(&[("database", "users"), ("collection", "foo")]), "database=users;collection=foo");
/// assert_eq!(store_key(&[("a", "b;c")]), r"a=b\;c");
/// assert_eq!(store_key(&[(&b"user"[..], &b"\xff\xfe"[..])]), r"user=\xff\xfe");
/// ```
#[must_use]
pub fn store_key<K: AsRef<[u8]>, V: AsRef<[u8]>>(entries: &[(K, V)]) -> String {
    let len = entries
        .iter()
        .map(|(k, v)| k.as_ref().len() + v.as_ref().len() + 2)
        .sum();
    let mut out = String::with_capacity(len);
    for (i, (key, value)) in entries.iter().enumerate() {
        if i > 0 {
            out.push(';');
        }
        escape(key.as_ref(), &mut out);
        out.push('=');
        escape(value.as_ref(), &mut out);
    }
    if out.len() > tollgate::limits::MAX_KEY_LEN {
        return tollgate_http::extract::digest_key(";sha256=", out.as_bytes());
    }
    out
}

fn escape(s: &[u8], out: &mut String) {
    // One chunk, all valid, for a UTF-8 string.
    for chunk in s.utf8_chunks() {
        for c in chunk.valid().chars() {
            if matches!(c, '\\' | ';' | '=') {
                out.push('\\');
            }
            out.push(c);
        }
        for b in chunk.invalid() {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.push_str("\\x");
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0xf)]));
        }
    }
}
