//! The reference's value syntax: its settings are read by Go's
//! `envconfig`, so a boolean is `strconv.ParseBool`'s, a duration
//! `time.ParseDuration`'s, an integer `strconv.ParseInt(s, 0, _)`'s, a
//! float `strconv.ParseFloat`'s. A value that does not parse makes the
//! reference panic at start; here it is a refusal naming the variable.

use std::time::Duration;

/// `strconv.ParseBool`: `1 t T TRUE true True`, `0 f F FALSE false False`.
///
/// # Errors
/// Anything else (the empty string included).
pub fn parse_bool(s: &str) -> Result<bool, String> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        _ => Err(format!(
            "{s:?} is not a boolean (Go's ParseBool: 1, t, T, TRUE, true, True, 0, f, F, FALSE, false, False)"
        )),
    }
}

/// `strconv.ParseInt(s, 0, 64)`: an optional sign, then decimal, `0x`
/// hex, `0o` or leading-`0` octal, or `0b` binary; `_` between digits
/// (`1_000`) or after a prefix (`0x_10`), as in Go's literals (base 0's
/// rule).
///
/// # Errors
/// Anything else, or out of the `i64` range.
pub fn parse_int(s: &str) -> Result<i64, String> {
    let bad = || format!("{s:?} is not an integer");
    let (negative, body) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let lower = body.to_ascii_lowercase();
    let (radix, digits, prefixed) = if let Some(d) = lower.strip_prefix("0x") {
        (16, d.to_owned(), true)
    } else if let Some(d) = lower.strip_prefix("0o") {
        (8, d.to_owned(), true)
    } else if let Some(d) = lower.strip_prefix("0b") {
        (2, d.to_owned(), true)
    } else if lower.len() > 1 && lower.starts_with('0') {
        (8, lower[1..].to_owned(), true)
    } else {
        (10, lower.clone(), false)
    };
    // Go's integer literal syntax: `_` only between digits, or between
    // the prefix and a digit (`0x_1`); so never last, never doubled, and
    // not first without a prefix.
    if digits.ends_with('_') || digits.contains("__") || (!prefixed && digits.starts_with('_')) {
        return Err(bad());
    }
    let digits = digits.replace('_', "");
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return Err(bad());
    }
    let magnitude = u64::from_str_radix(&digits, radix).map_err(|_| bad())?;
    if negative {
        0i64.checked_sub_unsigned(magnitude).ok_or_else(bad)
    } else {
        i64::try_from(magnitude).map_err(|_| bad())
    }
}

/// `strconv.ParseFloat(s, 64)` for the values a setting takes: decimal
/// and exponent forms; `inf` and `NaN` are refused (no setting means
/// them).
///
/// # Errors
/// Anything else.
pub fn parse_float(s: &str) -> Result<f64, String> {
    let cleaned = s.replace('_', "");
    match cleaned.parse::<f64>() {
        Ok(v) if v.is_finite() && !s.starts_with('_') && !s.ends_with('_') => Ok(v),
        _ => Err(format!("{s:?} is not a finite number")),
    }
}

/// `time.ParseDuration`: `[-+]?([0-9]*(\.[0-9]*)?(ns|us|µs|μs|ms|s|m|h))+`,
/// or `0`. Negative durations are refused: no setting means them.
///
/// # Errors
/// Anything else.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let bad = || format!("{s:?} is not a duration (Go's ParseDuration: e.g. 300ms, 10s, 1h30m)");
    let mut rest = s;
    if let Some(r) = rest.strip_prefix('+') {
        rest = r;
    } else if let Some(r) = rest.strip_prefix('-') {
        if r == "0" {
            return Ok(Duration::ZERO);
        }
        return Err(format!("{s:?} is negative"));
    }
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(bad());
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let number_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        let number = &rest[..number_end];
        if number.is_empty() || number == "." || number.matches('.').count() > 1 {
            return Err(bad());
        }
        let value: f64 = number.parse().map_err(|_| bad())?;
        rest = &rest[number_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let nanos = match &rest[..unit_end] {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return Err(bad()),
        };
        total += value * nanos;
        rest = &rest[unit_end..];
    }
    // Go's limit: about 290 years.
    if total > 9.2e18 {
        return Err(bad());
    }
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    Ok(Duration::from_nanos(total.round() as u64))
}

/// The reference's `k1=v1,k2=v2` lists read by hand
/// (`CONFIG_GRPC_XDS_NODE_METADATA`): each entry split at the first
/// `separator`; an entry without one is skipped, as the reference skips
/// it. Returns the pairs and the skipped entries (to warn about).
#[must_use]
pub fn parse_map(s: &str, separator: char) -> (Vec<(String, String)>, Vec<String>) {
    let mut pairs = Vec::new();
    let mut skipped = Vec::new();
    for entry in s.split(',') {
        match entry.split_once(separator) {
            Some((k, v)) => pairs.push((k.to_owned(), v.to_owned())),
            // The empty string is no entry; Go's Split still yields one.
            None if s.is_empty() => {}
            None => skipped.push(entry.to_owned()),
        }
    }
    (pairs, skipped)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn booleans_as_go_reads_them() {
        for t in ["1", "t", "T", "TRUE", "true", "True"] {
            assert_eq!(parse_bool(t), Ok(true), "{t}");
        }
        for f in ["0", "f", "F", "FALSE", "false", "False"] {
            assert_eq!(parse_bool(f), Ok(false), "{f}");
        }
        for bad in ["", "yes", "on", "tRUE", " true", "2"] {
            assert!(parse_bool(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn integers_in_base_zero() {
        assert_eq!(parse_int("10"), Ok(10));
        assert_eq!(parse_int("-10"), Ok(-10));
        assert_eq!(parse_int("+7"), Ok(7));
        assert_eq!(parse_int("0x10"), Ok(16));
        assert_eq!(parse_int("010"), Ok(8));
        assert_eq!(parse_int("0o10"), Ok(8));
        assert_eq!(parse_int("0b101"), Ok(5));
        assert_eq!(parse_int("0x_1_0"), Ok(16));
        assert_eq!(parse_int("0"), Ok(0));
        // Base 0 takes Go's literal syntax, underscores included.
        assert_eq!(parse_int("1_000"), Ok(1000));
        assert_eq!(parse_int("-1_0"), Ok(-10));
        assert_eq!(parse_int("0_10"), Ok(8));
        for bad in [
            "",
            "_10",
            "10_",
            "1__0",
            "-_1",
            "08",
            "1.5",
            "ten",
            "0x",
            "99999999999999999999",
            "-",
        ] {
            assert!(parse_int(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn floats() {
        assert_eq!(parse_float("0.8"), Ok(0.8));
        assert_eq!(parse_float("1"), Ok(1.0));
        assert_eq!(parse_float("1e-1"), Ok(0.1));
        for bad in ["", "NaN", "inf", "0,8", "x"] {
            assert!(parse_float(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn durations_as_go_reads_them() {
        let ms = Duration::from_millis;
        assert_eq!(parse_duration("10s"), Ok(ms(10_000)));
        assert_eq!(parse_duration("1h30m"), Ok(ms(5_400_000)));
        assert_eq!(parse_duration("1.5s"), Ok(ms(1500)));
        assert_eq!(parse_duration(".5s"), Ok(ms(500)));
        assert_eq!(parse_duration("300ms"), Ok(ms(300)));
        assert_eq!(parse_duration("2us"), Ok(Duration::from_micros(2)));
        assert_eq!(parse_duration("2µs"), Ok(Duration::from_micros(2)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("+1m"), Ok(ms(60_000)));
        for bad in ["", "10", "s", "1d", "1.2.3s", "-1s", "1 s", "."] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn maps() {
        let pair = |k: &str, v: &str| (k.to_owned(), v.to_owned());
        assert_eq!(parse_map("", '='), (vec![], vec![]));
        assert_eq!(
            parse_map("a=1,b=x=y", '='),
            (vec![pair("a", "1"), pair("b", "x=y")], vec![])
        );
        // The reference drops what has no `=`: skipped, not refused.
        assert_eq!(
            parse_map("key1:val1", '='),
            (vec![], vec!["key1:val1".to_owned()])
        );
        assert_eq!(
            parse_map("a=1,", '='),
            (vec![pair("a", "1")], vec![String::new()])
        );
        assert_eq!(
            parse_map("a=1,b", '='),
            (vec![pair("a", "1")], vec!["b".to_owned()])
        );
    }
}
