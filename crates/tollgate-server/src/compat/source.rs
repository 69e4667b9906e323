//! Where the Envoy limits come from: `CONFIG_TYPE=FILE` (every file under
//! `RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY`, loaded as
//! `--envoy-config` files are and read again when the directory changes)
//! or `CONFIG_TYPE=GRPC_XDS_SOTW` (`[envoy.xds]` from the
//! `CONFIG_GRPC_XDS_*` and `XDS_CLIENT_*` variables).

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::env::{Env, Refusal};
use super::value::parse_map;
use crate::config::{XdsSettings, XdsTls};

/// The largest xDS response accepted when `XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES`
/// is unset or 0 (the reference then takes grpc-go's 4 MiB; 1,000 Envoy
/// Gateway domains fit in either, and a larger bound costs nothing until
/// used).
pub const DEFAULT_XDS_MAX_MESSAGE: usize = 64 * 1024 * 1024;

/// The Envoy limits' source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LimitSource {
    /// `CONFIG_TYPE=FILE`: the files of a directory.
    Files(RuntimeDir),
    /// `CONFIG_TYPE=GRPC_XDS_SOTW`.
    Xds(XdsSettings),
}

/// The directory the reference's file provider reads (goruntime's
/// loader): every regular file under it, subdirectories included.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeDir {
    /// `RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY`.
    pub dir: PathBuf,
    /// `RUNTIME_IGNOREDOTFILES`: names starting with `.` are skipped
    /// (files and directories: a Kubernetes volume's `..data`).
    pub ignore_dotfiles: bool,
}

impl RuntimeDir {
    /// The files now under the directory, sorted (so the load, and its
    /// errors, come in one order).
    ///
    /// # Errors
    /// The directory (or one below it) cannot be read.
    pub fn files(&self) -> Result<Vec<PathBuf>, String> {
        let mut out = Vec::new();
        self.walk(&self.dir, &mut out, 0)?;
        out.sort();
        Ok(out)
    }

    fn walk(&self, dir: &Path, out: &mut Vec<PathBuf>, depth: usize) -> Result<(), String> {
        // A symlink loop must not walk forever.
        if depth > 16 {
            return Err(format!("{}: nested too deep", dir.display()));
        }
        let entries =
            std::fs::read_dir(dir).map_err(|e| format!("{}: cannot read: {e}", dir.display()))?;
        for entry in entries {
            let entry = entry.map_err(|e| format!("{}: cannot read: {e}", dir.display()))?;
            let name = entry.file_name();
            if self.ignore_dotfiles && name.to_string_lossy().starts_with('.') {
                continue;
            }
            let path = entry.path();
            // Followed: a Kubernetes volume's files are symlinks.
            let meta = std::fs::metadata(&path)
                .map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
            if meta.is_dir() {
                self.walk(&path, out, depth + 1)?;
            } else {
                out.push(path);
            }
        }
        Ok(())
    }

    /// What changes when a file is added, removed or rewritten: each
    /// file's name, size and modification time.
    #[must_use]
    pub fn fingerprint(&self) -> String {
        match self.files() {
            Err(e) => e,
            Ok(files) => files
                .iter()
                .map(|f| {
                    let meta = std::fs::metadata(f).ok();
                    format!(
                        "{}:{:?}:{:?}\n",
                        f.display(),
                        meta.as_ref().map(std::fs::Metadata::len),
                        meta.and_then(|m| m.modified().ok())
                    )
                })
                .collect(),
        }
    }
}

/// `CONFIG_TYPE` and what it selects.
///
/// # Errors
/// Another `CONFIG_TYPE`, a value that does not parse, a setting xDS
/// cannot honour.
pub fn limit_source(env: &Env) -> Result<LimitSource, Refusal> {
    let force_start = env.bool("FORCE_START_WITHOUT_INITIAL_CONFIG", false)?;
    match env.string("CONFIG_TYPE", "FILE")?.as_str() {
        "FILE" => runtime_dir(env).map(LimitSource::Files),
        "GRPC_XDS_SOTW" => xds(env, force_start).map(LimitSource::Xds),
        other => Err(Refusal::new(
            "CONFIG_TYPE",
            format!("{other:?} is not FILE or GRPC_XDS_SOTW"),
        )),
    }
}

fn runtime_dir(env: &Env) -> Result<RuntimeDir, Refusal> {
    let root = env.string("RUNTIME_ROOT", "/srv/runtime_data/current")?;
    let sub = env.string("RUNTIME_SUBDIRECTORY", "")?;
    let app = env.string("RUNTIME_APPDIRECTORY", "config")?;
    let ignore_dotfiles = env.bool("RUNTIME_IGNOREDOTFILES", false)?;
    // Either way the same directory is read; tollgate notices changes by
    // polling it, which covers both a swapped root symlink and events in
    // the directory.
    env.bool("RUNTIME_WATCH_ROOT", true)?;
    Ok(RuntimeDir {
        dir: Path::new(&root).join(sub).join(app),
        ignore_dotfiles,
    })
}

fn xds(env: &Env, start_without_config: bool) -> Result<XdsSettings, Refusal> {
    let headers = env.string("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "")?;
    if !headers.is_empty() {
        return Err(Refusal::new(
            "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
            "extra metadata on the xDS stream is not supported",
        ));
    }
    let node_metadata = parse_map(&env.string("CONFIG_GRPC_XDS_NODE_METADATA", "")?, '=')
        .map_err(|e| Refusal::new("CONFIG_GRPC_XDS_NODE_METADATA", e))?;
    let tls = if env.bool("CONFIG_GRPC_XDS_SERVER_USE_TLS", false)? {
        let file = |name: &str| -> Result<Option<PathBuf>, Refusal> {
            Ok(Some(env.string(name, "")?)
                .filter(|s| !s.is_empty())
                .map(PathBuf::from))
        };
        let tls = XdsTls {
            ca_file: file("CONFIG_GRPC_XDS_SERVER_TLS_CACERT")?,
            cert_file: file("CONFIG_GRPC_XDS_CLIENT_TLS_CERT")?,
            key_file: file("CONFIG_GRPC_XDS_CLIENT_TLS_KEY")?,
            server_name: Some(env.string("CONFIG_GRPC_XDS_SERVER_TLS_SAN", "")?)
                .filter(|s| !s.is_empty()),
        };
        if tls.cert_file.is_some() != tls.key_file.is_some() {
            return Err(Refusal::new(
                "CONFIG_GRPC_XDS_CLIENT_TLS_CERT",
                "needs CONFIG_GRPC_XDS_CLIENT_TLS_KEY (and the other way round)",
            ));
        }
        Some(tls)
    } else {
        None
    };
    let initial_backoff = env
        .duration("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL")?
        .unwrap_or(Duration::from_secs(10));
    let max_backoff = env
        .duration("XDS_CLIENT_BACKOFF_MAX_INTERVAL")?
        .unwrap_or(Duration::from_secs(60));
    if initial_backoff.is_zero() || max_backoff < initial_backoff {
        return Err(Refusal::new(
            "XDS_CLIENT_BACKOFF_MAX_INTERVAL",
            format!(
                "the backoff must run from above 0 up: initial {initial_backoff:?}, max {max_backoff:?}"
            ),
        ));
    }
    let max_message_bytes = match env.string("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "")?.as_str() {
        "" => DEFAULT_XDS_MAX_MESSAGE,
        v => match super::value::parse_int(v) {
            Ok(0) => DEFAULT_XDS_MAX_MESSAGE,
            Ok(n) => usize::try_from(n).map_err(|_| {
                Refusal::new("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "must not be negative")
            })?,
            Err(e) => return Err(Refusal::new("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", e)),
        },
    };
    Ok(XdsSettings {
        server: env.string("CONFIG_GRPC_XDS_SERVER_URL", "localhost:18000")?,
        node_id: env.string("CONFIG_GRPC_XDS_NODE_ID", "default")?,
        node_metadata,
        tls,
        initial_backoff,
        max_backoff,
        max_message_bytes,
        start_without_config,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(pairs: &[(&str, &str)]) -> Result<LimitSource, Refusal> {
        limit_source(&Env::from_pairs(pairs))
    }

    #[test]
    fn envoy_gateways_xds() {
        let got = source(&[
            ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
            ("CONFIG_GRPC_XDS_SERVER_URL", "envoy-gateway:18001"),
            ("CONFIG_GRPC_XDS_NODE_ID", "envoy-ratelimit"),
            ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true"),
            ("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "/certs/tls.crt"),
            ("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "/certs/tls.key"),
            ("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "/certs/ca.crt"),
            ("FORCE_START_WITHOUT_INITIAL_CONFIG", "true"),
            ("RUNTIME_ROOT", "/data"),
        ])
        .expect("xds");
        let want = XdsSettings {
            server: "envoy-gateway:18001".to_owned(),
            node_id: "envoy-ratelimit".to_owned(),
            node_metadata: vec![],
            tls: Some(XdsTls {
                ca_file: Some("/certs/ca.crt".into()),
                cert_file: Some("/certs/tls.crt".into()),
                key_file: Some("/certs/tls.key".into()),
                server_name: None,
            }),
            initial_backoff: Duration::from_secs(10),
            max_backoff: Duration::from_secs(60),
            max_message_bytes: DEFAULT_XDS_MAX_MESSAGE,
            start_without_config: true,
        };
        assert_eq!(got, LimitSource::Xds(want));
    }

    #[test]
    fn xds_defaults_and_tuning() {
        let LimitSource::Xds(x) = source(&[
            ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
            ("CONFIG_GRPC_XDS_NODE_METADATA", "zone=a,team=rl"),
            ("CONFIG_GRPC_XDS_SERVER_TLS_SAN", "ignored-without-tls"),
            ("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "500ms"),
            ("XDS_CLIENT_BACKOFF_MAX_INTERVAL", "5s"),
            ("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "1048576"),
        ])
        .expect("xds") else {
            panic!("not xds");
        };
        assert_eq!(x.server, "localhost:18000");
        assert_eq!(x.node_id, "default");
        assert_eq!(
            x.node_metadata,
            vec![
                ("zone".to_owned(), "a".to_owned()),
                ("team".to_owned(), "rl".to_owned())
            ]
        );
        assert_eq!(x.tls, None);
        assert_eq!(x.initial_backoff, Duration::from_millis(500));
        assert_eq!(x.max_backoff, Duration::from_secs(5));
        assert_eq!(x.max_message_bytes, 1_048_576);
        assert!(!x.start_without_config);
    }

    #[test]
    fn files_under_root_sub_and_app() {
        let got = source(&[
            ("RUNTIME_ROOT", "/data"),
            ("RUNTIME_SUBDIRECTORY", "ratelimit"),
            ("RUNTIME_IGNOREDOTFILES", "true"),
            ("RUNTIME_WATCH_ROOT", "false"),
        ])
        .expect("files");
        assert_eq!(
            got,
            LimitSource::Files(RuntimeDir {
                dir: "/data/ratelimit/config".into(),
                ignore_dotfiles: true
            })
        );
        let LimitSource::Files(d) = source(&[]).expect("files") else {
            panic!("not files");
        };
        assert_eq!(d.dir, Path::new("/srv/runtime_data/current/config"));
        assert!(!d.ignore_dotfiles);
    }

    #[test]
    fn refusals() {
        for (pairs, variable) in [
            (vec![("CONFIG_TYPE", "GRPC_XDS_DELTA")], "CONFIG_TYPE"),
            (vec![("CONFIG_TYPE", "file")], "CONFIG_TYPE"),
            (vec![("RUNTIME_WATCH_ROOT", "nope")], "RUNTIME_WATCH_ROOT"),
            (
                vec![("FORCE_START_WITHOUT_INITIAL_CONFIG", "")],
                "FORCE_START_WITHOUT_INITIAL_CONFIG",
            ),
            (
                vec![
                    ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
                    ("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "a:b"),
                ],
                "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
            ),
            (
                vec![
                    ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
                    ("CONFIG_GRPC_XDS_NODE_METADATA", "novalue"),
                ],
                "CONFIG_GRPC_XDS_NODE_METADATA",
            ),
            (
                vec![
                    ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
                    ("XDS_CLIENT_BACKOFF_MAX_INTERVAL", "1s"),
                ],
                "XDS_CLIENT_BACKOFF_MAX_INTERVAL",
            ),
            (
                vec![
                    ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
                    ("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "-1"),
                ],
                "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES",
            ),
            (
                vec![
                    ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
                    ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true"),
                    ("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "/c"),
                ],
                "CONFIG_GRPC_XDS_CLIENT_TLS_CERT",
            ),
        ] {
            let err = source(&pairs).expect_err(variable);
            assert_eq!(err.variable, variable, "{pairs:?}: {err}");
        }
    }

    #[test]
    fn the_directory_walk_skips_dotfiles_when_told() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(dir.path().join("sub")).expect("mkdir");
        std::fs::create_dir(dir.path().join("..data")).expect("mkdir");
        for f in ["a.yaml", "sub/b.yaml", ".hidden.yaml", "..data/c.yaml"] {
            std::fs::write(dir.path().join(f), "x").expect("write");
        }
        let names = |ignore_dotfiles| {
            let d = RuntimeDir {
                dir: dir.path().to_path_buf(),
                ignore_dotfiles,
            };
            d.files()
                .expect("files")
                .iter()
                .map(|p| {
                    p.strip_prefix(dir.path())
                        .expect("under")
                        .display()
                        .to_string()
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(names(true), ["a.yaml", "sub/b.yaml"]);
        assert_eq!(names(false).len(), 4);
    }
}
