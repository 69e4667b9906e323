//! YAML 1.1 plain scalars as Go's `yaml.v2` (the reference service's
//! reader) reads them: booleans and integers.

/// Whether a YAML 1.1 plain scalar is a boolean, as Go's `yaml.v2` reads it.
pub(super) fn boolean(text: &str) -> Option<bool> {
    match text {
        "true" | "True" | "TRUE" | "y" | "Y" | "yes" | "Yes" | "YES" | "on" | "On" | "ON" => {
            Some(true)
        }
        "false" | "False" | "FALSE" | "n" | "N" | "no" | "No" | "NO" | "off" | "Off" | "OFF" => {
            Some(false)
        }
        _ => None,
    }
}

/// A plain scalar as an integer: decimal, `0x`, `0o` or `0b`, with an
/// optional sign and `_` separators; saturates far out of range. `Err` with
/// the reason when it is not one.
pub(super) fn integer(text: &str) -> Result<i128, &'static str> {
    let cleaned: String = text.chars().filter(|&c| c != '_').collect();
    let (negative, rest) = match cleaned.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, cleaned.strip_prefix('+').unwrap_or(&cleaned)),
    };
    let (radix, digits) = if let Some(d) = rest.strip_prefix("0x") {
        (16, d)
    } else if let Some(d) = rest.strip_prefix("0o") {
        (8, d)
    } else if let Some(d) = rest.strip_prefix("0b") {
        (2, d)
    } else {
        (10, rest)
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return Err("not an integer");
    }
    if radix == 10 && digits.len() > 1 && digits.starts_with('0') {
        // YAML 1.1 (the reference service's) reads 0100 as octal 64.
        return Err("a leading 0 is octal in YAML 1.1; write the number without it");
    }
    let n = i128::from_str_radix(digits, radix).unwrap_or(i128::MAX);
    Ok(if negative { -n } else { n })
}
