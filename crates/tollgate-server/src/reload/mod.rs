//! Reloading `serve`'s config without a restart (docs/operations.md): what
//! a loaded config is ([`Loaded`]), where it comes from and how a change is
//! noticed ([`Source`]: SIGHUP, and polling each file's content), and the
//! task that reloads it (`task.rs`): it builds the new doors over the same
//! store and swaps them in. What the last reload said
//! ([`crate::config::ReloadStatus`], the `tollgate_config_*` metrics) and
//! the config's version live in [`crate::config`], which the doors that
//! show them read.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

use crate::config::{Config, version_of_files};

mod task;

pub(crate) use task::Reloader;

/// One load of the config: the config with the flags applied, and the
/// addresses the front doors are to listen on.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The config (flags applied).
    pub config: Config,
    /// The front doors' addresses.
    pub listen: Listen,
}

/// The addresses of the front doors (fixed once they listen).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Listen {
    /// The HTTP API's.
    pub http: Option<SocketAddr>,
    /// The reverse proxy's.
    pub proxy: Option<SocketAddr>,
    /// The Envoy rate limit service's.
    pub grpc: Option<SocketAddr>,
}

/// How the config is read again: the files (hashed for the version and
/// polled for changes), the loader (the same as at start), how often to
/// poll, and the SIGHUP notification.
pub struct Source {
    /// The files, in the order hashed (the TOML first, then the Envoy
    /// files).
    pub files: Vec<PathBuf>,
    /// Loads every file, validated as at start.
    pub load: Box<dyn Fn() -> Result<Loaded, String> + Send + Sync>,
    /// How often the files are read for a change; zero: never (SIGHUP
    /// only).
    pub poll: Duration,
    /// Notified on each SIGHUP.
    pub hup: Arc<Notify>,
}

impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Source")
            .field("files", &self.files)
            .field("poll", &self.poll)
            .finish_non_exhaustive()
    }
}

impl Source {
    /// The files' version now (an unreadable file's error is hashed in its
    /// place, so a file that goes missing is noticed, and its load fails
    /// with the error).
    #[must_use]
    pub fn version(&self) -> String {
        version_of_files(&self.files)
    }
}
