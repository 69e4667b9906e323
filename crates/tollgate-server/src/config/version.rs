//! The config's version (a content hash) and RFC 3339 times.

use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

/// 16 hex digits of the SHA-1 of each file's path and content, in order.
/// A file that cannot be read contributes its error instead.
#[must_use]
pub fn version_of_files(files: &[PathBuf]) -> String {
    let mut h = sha1_smol::Sha1::new();
    for path in files {
        let bytes = path.as_os_str().as_encoded_bytes();
        h.update(&(bytes.len() as u64).to_le_bytes());
        h.update(bytes);
        // Through the config reader: a device, a FIFO or a huge file is
        // refused (never read or waited on), as when the config loads.
        match super::file::read(path) {
            Ok(content) => {
                h.update(b"=");
                h.update(&(content.len() as u64).to_le_bytes());
                h.update(&content);
            }
            Err(e) => {
                h.update(b"!");
                h.update(e.as_bytes());
            }
        }
    }
    short(&h)
}

/// The version of a config that comes from no file (a server started
/// in process): 16 hex digits of the SHA-1 of `text`.
#[must_use]
pub fn version_of_text(text: &str) -> String {
    short(&sha1_smol::Sha1::from(text))
}

fn short(h: &sha1_smol::Sha1) -> String {
    let mut hex = h.digest().to_string();
    hex.truncate(16);
    hex
}

/// `t` as RFC 3339 in UTC with milliseconds, e.g.
/// `2025-05-01T12:00:00.123Z` (the Unix epoch if `t` is before it).
#[must_use]
pub fn rfc3339(t: SystemTime) -> String {
    let since = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let days = i64::try_from(secs / 86_400).unwrap_or(i64::MAX);
    let rest = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60,
        since.subsec_millis()
    )
}

/// The proleptic Gregorian date of `z` days after 1970-01-01 (Howard
/// Hinnant's `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = u32::try_from(doy - (153 * mp + 2) / 5 + 1).unwrap_or(1);
    let m = u32::try_from(if mp < 10 { mp + 3 } else { mp - 9 }).unwrap_or(1);
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn rfc3339_dates() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let t = UNIX_EPOCH + Duration::from_millis(1_709_251_199_123);
        assert_eq!(rfc3339(t), "2024-02-29T23:59:59.123Z");
        let t = UNIX_EPOCH + Duration::from_secs(951_782_400);
        assert_eq!(rfc3339(t), "2000-02-29T00:00:00.000Z");
    }

    #[test]
    fn the_version_follows_content_and_names() {
        let dir = tempfile::tempdir().expect("dir");
        let a = dir.path().join("a.toml");
        std::fs::write(&a, "x = 1").expect("write");
        let v1 = version_of_files(std::slice::from_ref(&a));
        assert_eq!(v1.len(), 16);
        assert_eq!(v1, version_of_files(std::slice::from_ref(&a)));
        std::fs::write(&a, "x = 2").expect("write");
        assert_ne!(v1, version_of_files(std::slice::from_ref(&a)));
        let missing = dir.path().join("gone.toml");
        let v = version_of_files(std::slice::from_ref(&missing));
        assert_ne!(v, version_of_files(&[]));
    }
}
