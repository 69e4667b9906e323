//! A descriptor's stats key as the reference names it, and its labels
//! once Envoy Gateway's statsd mapping has folded it: `domain`, `key1`,
//! and `key2` when the key is two levels deep or more (deeper levels are
//! dropped, so their hits add into the same series).

/// The labels of one stats key: `domain`, `key1`, and `key2` when the key
/// has a second level (the mapping's glob rule names only the first two).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Labels {
    /// The domain.
    pub domain: String,
    /// The first level (`key_value`, or `key` for a key-only node).
    pub key1: String,
    /// The second level, when there is one.
    pub key2: Option<String>,
}

/// `key` as the reference's `SanitizeStatName` leaves it: `:` and `|`
/// become `_`, and so do the dots of anything shaped like an IPv4 address
/// (`\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}`, found leftmost first and not
/// overlapping, as Go's regexp finds them), so an address value does not
/// split into levels.
#[must_use]
pub fn sanitize(key: &str) -> String {
    let bytes = key.replace([':', '|'], "_").into_bytes();
    let mut out = bytes.clone();
    let mut at = 0;
    while at < bytes.len() {
        match ipv4_at(&bytes, at) {
            Some(end) => {
                for b in &mut out[at..end] {
                    if *b == b'.' {
                        *b = b'_';
                    }
                }
                at = end;
            }
            None => at += 1,
        }
    }
    // Only ASCII dots were replaced: still UTF-8.
    String::from_utf8(out).unwrap_or_default()
}

/// Where an IPv4-shaped match starting at `at` ends: four groups of one
/// to three digits joined by dots, each group as long as it can be while
/// the rest still matches (the regexp's greedy `{1,3}` with backtracking).
fn ipv4_at(s: &[u8], at: usize) -> Option<usize> {
    fn group(s: &[u8], at: usize, left: u8) -> Option<usize> {
        let digits = s[at..]
            .iter()
            .take(3)
            .take_while(|b| b.is_ascii_digit())
            .count();
        for n in (1..=digits).rev() {
            let end = at + n;
            if left == 1 {
                return Some(end);
            }
            if s.get(end) == Some(&b'.')
                && let Some(e) = group(s, end + 1, left - 1)
            {
                return Some(e);
            }
        }
        None
    }
    group(s, at, 4)
}

/// The labels of a (sanitized) stats key `domain.level1.level2…`; `None`
/// for a key with no level below its domain (no rule of the mapping
/// matches one).
#[must_use]
pub fn fold(key: &str) -> Option<Labels> {
    let mut parts = key.split('.');
    let domain = parts.next()?.to_owned();
    let key1 = parts.next()?.to_owned();
    Some(Labels {
        domain,
        key1,
        key2: parts.next().map(str::to_owned),
    })
}

/// The reference's key for a descriptor carrying its own `limit`
/// (`descriptorKey`): the domain, then each entry's `key_value` (`key`
/// alone for an empty value), joined by dots; from the request's values.
#[must_use]
pub fn descriptor_key<K: AsRef<[u8]>, V: AsRef<[u8]>>(domain: &str, entries: &[(K, V)]) -> String {
    let mut key = String::from(domain);
    key.push('.');
    for (i, (k, v)) in entries.iter().enumerate() {
        if i > 0 {
            key.push('.');
        }
        key.push_str(&String::from_utf8_lossy(k.as_ref()));
        let v = v.as_ref();
        if !v.is_empty() {
            key.push('_');
            key.push_str(&String::from_utf8_lossy(v));
        }
    }
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_and_separators_are_sanitized_as_the_reference_does() {
        assert_eq!(
            sanitize("d.remote_address_10.1.2.3"),
            "d.remote_address_10_1_2_3"
        );
        assert_eq!(sanitize("d.k_a:b|c"), "d.k_a_b_c");
        // leftmost first: `1234.5.6.7` holds `234.5.6.7`
        assert_eq!(sanitize("d.k_1234.5.6.7"), "d.k_1234_5_6_7");
        // not four groups: untouched
        assert_eq!(sanitize("d.k_1.2.3"), "d.k_1.2.3");
        // two addresses, not overlapping
        assert_eq!(sanitize("1.2.3.4.5.6.7.8"), "1_2_3_4.5_6_7_8");
    }

    #[test]
    fn keys_fold_to_domain_and_two_levels() {
        let l = fold("default/eg/http.a_b.c_d.e_f").unwrap();
        assert_eq!(
            (l.domain.as_str(), l.key1.as_str(), l.key2.as_deref()),
            ("default/eg/http", "a_b", Some("c_d"))
        );
        assert_eq!(fold("d.k").unwrap().key2, None);
        assert_eq!(fold("d"), None);
    }

    #[test]
    fn an_override_key_is_built_from_the_request() {
        let entries = [("k1", "v1"), ("k2", "")];
        assert_eq!(descriptor_key("d", &entries), "d.k1_v1.k2");
    }
}
