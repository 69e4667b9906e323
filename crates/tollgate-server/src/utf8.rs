//! Text cut to a byte bound on a character boundary: labels, log lines
//! and messages carry values from outside (a domain, an xDS version, a
//! refusal's text) that must stay bounded, and `str` slicing panics in
//! the middle of a character. (`str::floor_char_boundary` would do, but
//! it is newer than the workspace's `rust-version`.)

/// The longest start of `s` of at most `max` bytes that ends on a
/// character boundary; `s` itself when it is that short.
#[must_use]
pub(crate) fn prefix(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_never_splits_a_character() {
        assert_eq!(prefix("abc", 5), "abc");
        assert_eq!(prefix("abc", 2), "ab");
        // "é" is two bytes: a bound in its middle keeps what is before it.
        assert_eq!(prefix("aé", 2), "a");
        assert_eq!(prefix("aé", 3), "aé");
        assert_eq!(prefix("€", 2), "");
        assert_eq!(prefix("", 0), "");
    }
}
