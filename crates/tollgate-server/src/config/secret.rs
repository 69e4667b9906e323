//! Secrets from files (`[store] password_file`, `[[admin.tokens]]
//! token_file`, the `TOLLGATE_*_FILE` variables) and the environment: how
//! they are read, and [`Secret`], which never shows its value (docs/config.md,
//! "Secrets"). A Kubernetes Secret mounted as a file, or written with
//! `echo`, ends in a newline the value does not hold: one is trimmed.

use std::fmt;
use std::path::Path;

use super::file::read_limited;

/// The most bytes a secret or certificate file may hold.
pub const MAX_SECRET_BYTES: u64 = 64 * 1024;

/// A secret and where it came from. `Debug` shows the source only, and
/// there is no `Display`: the value is read with [`Secret::expose`] where
/// it is used, and nowhere else.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret {
    value: String,
    source: String,
}

impl Secret {
    /// `value`, which came from `source` (as messages name it: `[store]
    /// password_file /run/secrets/redis`, `TOLLGATE_REDIS_PASSWORD`).
    #[must_use]
    pub fn new(value: String, source: String) -> Self {
        Self { value, source }
    }

    /// The value, for the one place that uses it.
    #[must_use]
    pub fn expose(&self) -> &str {
        &self.value
    }

    /// Where it came from.
    #[must_use]
    pub fn source(&self) -> &str {
        &self.source
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Secret")
            .field("source", &self.source)
            .field("value", &"<redacted>")
            .finish()
    }
}

/// `text` without one trailing `\n` or `\r\n` (and nothing more: a
/// secret may end in other whitespace).
#[must_use]
pub fn trim_newline(text: &str) -> &str {
    text.strip_suffix("\r\n")
        .or_else(|| text.strip_suffix('\n'))
        .unwrap_or(text)
}

/// The secret in the file at `path`: UTF-8, one trailing newline trimmed,
/// not empty.
///
/// # Errors
/// Missing, unreadable, not a regular file, larger than
/// [`MAX_SECRET_BYTES`], not UTF-8, or empty; the message (without the
/// path, which the caller adds) never quotes the content.
pub fn read_secret_file(path: &Path) -> Result<String, String> {
    let bytes = read_limited(path, MAX_SECRET_BYTES)?;
    let text = String::from_utf8(bytes).map_err(|_| "the file is not UTF-8 text".to_owned())?;
    let value = trim_newline(&text);
    if value.is_empty() {
        return Err("the file is empty".to_owned());
    }
    Ok(value.to_owned())
}

/// The bytes of the PEM file at `path`, for the TLS settings to parse.
///
/// # Errors
/// As [`read_secret_file`], but for the text checks.
pub fn read_pem_file(path: &Path) -> Result<Vec<u8>, String> {
    let bytes = read_limited(path, MAX_SECRET_BYTES)?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err("the file is empty".to_owned());
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_newline_is_trimmed_and_nothing_else() {
        assert_eq!(trim_newline("s3cret\n"), "s3cret");
        assert_eq!(trim_newline("s3cret\r\n"), "s3cret");
        assert_eq!(trim_newline("s3cret\n\n"), "s3cret\n");
        assert_eq!(trim_newline("s3cret \t"), "s3cret \t");
        assert_eq!(trim_newline("s3cret"), "s3cret");
    }

    #[test]
    fn secret_files_fail_by_name_never_by_content() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = |name: &str, bytes: &[u8]| {
            let path = dir.path().join(name);
            std::fs::write(&path, bytes).expect("write");
            path
        };
        assert_eq!(
            read_secret_file(&file("ok", b"hunter2-hunter2\r\n")).expect("read"),
            "hunter2-hunter2"
        );
        for (path, problem) in [
            (dir.path().join("missing"), "cannot read: "),
            (dir.path().to_path_buf(), "not a regular file"),
            (file("empty", b""), "the file is empty"),
            (file("newline", b"\n"), "the file is empty"),
            (file("latin1", b"hunter2\xff"), "not UTF-8"),
            (
                file("big", &vec![b'x'; 64 * 1024 + 1]),
                "larger than 64 KiB",
            ),
        ] {
            let e = read_secret_file(&path).expect_err(problem);
            assert!(e.contains(problem), "{}: {e}", path.display());
            assert!(!e.contains("hunter2") && !e.contains("xxx"), "{e}");
        }
        let shown = format!("{:?}", Secret::new("hunter2".into(), "a file".into()));
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("a file"), "{shown}");
    }
}
