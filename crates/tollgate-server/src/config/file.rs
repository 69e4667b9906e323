//! Reading a config file (the TOML config and every Envoy YAML file) without
//! trusting what the path names: only a regular file is read, and only up to
//! [`MAX_FILE_BYTES`]. A FIFO would block `validate` and `serve` forever and
//! `/dev/zero` would fill memory; both are refused with a message instead.
//!
//! Also what a config file's problems are reported as ([`ConfigError`],
//! [`ConfigErrors`]), by the TOML config (`config`) and the Envoy loader
//! (`envoy::limits`) alike: both take them from here, so neither imports
//! the other for them.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::Read as _;
use std::path::Path;

use crate::terminal::Escaped;

/// The most bytes of one config file (TOML or Envoy YAML).
pub const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// The bytes of the config file at `path`.
///
/// # Errors
/// A message (without the file name, which the caller adds) when the path
/// cannot be opened, is not a regular file, or holds more than
/// [`MAX_FILE_BYTES`].
pub fn read(path: &Path) -> Result<Vec<u8>, String> {
    read_limited(path, MAX_FILE_BYTES)
}

/// The bytes of the file at `path`, a regular file of at most `max` bytes
/// (a config, a secret, a certificate): [`read`] with another limit.
///
/// # Errors
/// As [`read`]; the message never quotes the file's content.
pub fn read_limited(path: &Path, max: u64) -> Result<Vec<u8>, String> {
    let cannot = |e: std::io::Error| format!("cannot read: {e}");
    // Looked at before opening: opening a FIFO for reading blocks until a
    // writer comes. The open itself does not block either (a file swapped
    // for a FIFO in between), and the opened file is checked again.
    if !std::fs::metadata(path).map_err(cannot)?.is_file() {
        return Err(not_regular());
    }
    let file = open_nonblocking(path).map_err(cannot)?;
    if !file.metadata().map_err(cannot)?.is_file() {
        return Err(not_regular());
    }
    let mut bytes = Vec::new();
    file.take(max + 1).read_to_end(&mut bytes).map_err(cannot)?;
    if bytes.len() as u64 > max {
        let size = if max.is_multiple_of(1024 * 1024) {
            format!("{} MiB", max / (1024 * 1024))
        } else {
            format!("{} KiB", max / 1024)
        };
        return Err(format!("the file is larger than {size}"));
    }
    Ok(bytes)
}

fn not_regular() -> String {
    "cannot read: not a regular file (it must be a file, not a pipe, device or directory)"
        .to_owned()
}

#[cfg(unix)]
fn open_nonblocking(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt as _;
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
}

#[cfg(not(unix))]
fn open_nonblocking(path: &Path) -> std::io::Result<File> {
    OpenOptions::new().read(true).open(path)
}

/// One problem in a config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The file, as named by the caller.
    pub file: String,
    /// 1-based line, when the problem has one.
    pub line: Option<usize>,
    /// The field at fault (`store.url`, `rules[1].limit`); `None` for TOML
    /// syntax errors and unreadable files.
    pub field: Option<String>,
    /// Why it is wrong.
    pub message: String,
}

/// Shown escaped ([`Escaped`]): a field or message may quote a config
/// file's own text, which must not reach the terminal raw.
impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", Escaped(&self.file))?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        if let Some(field) = &self.field {
            write!(f, ": {}", Escaped(field))?;
        }
        write!(f, ": {}", Escaped(&self.message))
    }
}

/// Every problem found in a config file, in line order. Never empty.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors {
    /// The problems.
    pub errors: Vec<ConfigError>,
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.errors.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            e.fmt(f)?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_a_device_and_a_large_file_are_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let err = read(dir.path()).expect_err("a directory");
        assert!(err.contains("not a regular file"), "{err}");
        #[cfg(unix)]
        {
            let err = read(Path::new("/dev/zero")).expect_err("a device");
            assert!(err.contains("not a regular file"), "{err}");
        }
        let big = dir.path().join("big.toml");
        File::create(&big)
            .expect("create")
            .set_len(MAX_FILE_BYTES + 1)
            .expect("grow");
        let err = read(&big).expect_err("too big");
        assert!(err.contains("larger than 16 MiB"), "{err}");
        let fits = dir.path().join("fits.toml");
        std::fs::write(&fits, "a = 1\n").expect("write");
        assert_eq!(read(&fits).expect("a file"), b"a = 1\n");
    }

    #[cfg(unix)]
    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let dir = tempfile::tempdir().expect("tempdir");
        let fifo = dir.path().join("config.toml");
        let status = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .expect("mkfifo (coreutils) runs");
        assert!(status.success());
        let err = read(&fifo).expect_err("a FIFO");
        assert!(err.contains("not a regular file"), "{err}");
    }
}
