//! Reloading `serve`'s config without a restart (docs/operations.md):
//! where it comes from and how a change is noticed ([`Source`]: SIGHUP,
//! and polling each file's content), and the task that reloads it
//! (`task.rs`): it loads a new [`Plan`], builds the next generation of
//! doors over the same store and swaps it in. What the last reload said
//! ([`crate::config::ReloadStatus`], the `tollgate_config_*` metrics) and
//! the config's version live in [`crate::config`], which the doors that
//! show them read.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

use crate::config::{version_of_files, version_of_text};
use crate::doors::Plan;

mod task;

pub(crate) use task::Reloader;

/// How the config is read again: the files (hashed for the version and
/// polled for changes), the loader (the same as at start), how often to
/// poll, and the SIGHUP notification.
pub struct Source {
    /// The files, in the order hashed (the TOML first, then the Envoy
    /// files).
    pub files: Vec<PathBuf>,
    /// Lists the files again for each version, in place of `files`: a
    /// directory's, where a file added or removed changes the version
    /// (the reference's `CONFIG_TYPE=FILE`); a listing's error is hashed.
    pub list: Option<Listing>,
    /// Loads every file, validated as at start.
    pub load: Box<dyn Fn() -> Result<Plan, String> + Send + Sync>,
    /// How often the files are read for a change; zero: never (SIGHUP
    /// only).
    pub poll: Duration,
    /// Notified on each SIGHUP (`serve`), or when a watched file changed
    /// (the compatibility entry's `RUNTIME_*` directory).
    pub hup: Arc<Notify>,
    /// What a notification of `hup` means, for the reload's log line and
    /// status: `"SIGHUP"`, `"a RUNTIME_ROOT file changed"`.
    pub hup_means: &'static str,
}

/// How [`Source::list`] lists the files, sorted.
pub type Listing = Box<dyn Fn() -> Result<Vec<PathBuf>, String> + Send + Sync>;

impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Source")
            .field("files", &self.files)
            .field("list", &self.list.is_some())
            .field("poll", &self.poll)
            .finish_non_exhaustive()
    }
}

impl Source {
    /// The files' version now (an unreadable file's error is hashed in its
    /// place, so a file that goes missing is noticed, and its load fails
    /// with the error); with [`Source::list`], of the files listed now.
    #[must_use]
    pub fn version(&self) -> String {
        match self.list.as_ref().map(|list| list()) {
            None => version_of_files(&self.files),
            Some(Ok(files)) => version_of_files(&files),
            Some(Err(e)) => version_of_text(&e),
        }
    }
}
