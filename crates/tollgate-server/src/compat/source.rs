//! Where the Envoy limits come from: `CONFIG_TYPE=FILE` (every file under
//! `RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY`, loaded as
//! `--envoy-config` files are and read again when the directory changes)
//! or `CONFIG_TYPE=GRPC_XDS_SOTW` (`[envoy.xds]` from the
//! `CONFIG_GRPC_XDS_*` and `XDS_CLIENT_*` variables).

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::env::{Env, Refusal};
use super::value::parse_map;
use crate::config::{XdsSettings, XdsTls, check_xds_server};

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

/// Warnings about values read but partly dropped, as the reference drops
/// them: `CONFIG_GRPC_XDS_NODE_METADATA` entries without `=`.
///
/// # Errors
/// A value that is not UTF-8.
pub fn warnings(env: &Env) -> Result<Vec<String>, Refusal> {
    if env.string("CONFIG_TYPE", "FILE")? != "GRPC_XDS_SOTW" {
        return Ok(Vec::new());
    }
    let (_, skipped) = parse_map(&env.string("CONFIG_GRPC_XDS_NODE_METADATA", "")?, '=');
    Ok(skipped
        .iter()
        .map(|entry| format!("CONFIG_GRPC_XDS_NODE_METADATA: {entry:?} has no '=': skipped"))
        .collect())
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
    let (node_metadata, _) = parse_map(&env.string("CONFIG_GRPC_XDS_NODE_METADATA", "")?, '=');
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
    // jpillora/backoff's rules, which the reference's client uses: a
    // minimum of 0 is 100 ms, a maximum of 0 is 10 s, and a minimum at or
    // above the maximum waits the maximum every time.
    let initial_backoff = match env.duration("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL")? {
        None => Duration::from_secs(10),
        Some(d) if d.is_zero() => Duration::from_millis(100),
        Some(d) => d,
    };
    let max_backoff = match env.duration("XDS_CLIENT_BACKOFF_MAX_INTERVAL")? {
        None => Duration::from_secs(60),
        Some(d) if d.is_zero() => Duration::from_secs(10),
        Some(d) => d,
    };
    let initial_backoff = initial_backoff.min(max_backoff);
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
    // Checked now, as the reference's grpc.Dial parses it at start.
    let server = env.string("CONFIG_GRPC_XDS_SERVER_URL", "localhost:18000")?;
    check_xds_server(&server).map_err(|e| Refusal::new("CONFIG_GRPC_XDS_SERVER_URL", e))?;
    Ok(XdsSettings {
        server,
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

    fn xds_of(pairs: &[(&str, &str)]) -> XdsSettings {
        let mut all = vec![("CONFIG_TYPE", "GRPC_XDS_SOTW")];
        all.extend_from_slice(pairs);
        match source(&all) {
            Ok(LimitSource::Xds(x)) => x,
            other => panic!("{pairs:?}: {other:?}"),
        }
    }

    #[test]
    fn node_metadata_without_equals_is_skipped_as_the_reference_skips_it() {
        for value in ["key1:val1", "a=1,", "a=1,b", "novalue"] {
            let pairs = [
                ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
                ("CONFIG_GRPC_XDS_NODE_METADATA", value),
            ];
            let x = xds_of(&pairs[1..]);
            let kept: Vec<_> = x.node_metadata.iter().map(|(k, _)| k.as_str()).collect();
            let want: &[&str] = if value.starts_with("a=") { &["a"] } else { &[] };
            assert_eq!(kept, want, "{value}");
            let warnings = warnings(&Env::from_pairs(&pairs)).expect("warnings");
            assert_eq!(warnings.len(), 1, "{value}: {warnings:?}");
            assert!(warnings[0].contains("CONFIG_GRPC_XDS_NODE_METADATA"));
        }
        let clean = [
            ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
            ("CONFIG_GRPC_XDS_NODE_METADATA", "a=1"),
        ];
        assert_eq!(warnings(&Env::from_pairs(&clean)), Ok(vec![]));
    }

    #[test]
    fn grpc_go_target_forms_are_read_as_host_and_port() {
        for url in [
            "envoy-gateway:18001",
            "dns:///envoy-gateway:18001",
            "dns:envoy-gateway:18001",
            "passthrough:///envoy-gateway:18001",
        ] {
            let x = xds_of(&[("CONFIG_GRPC_XDS_SERVER_URL", url)]);
            assert_eq!(x.server, url);
            assert_eq!(
                crate::config::xds_server_authority(&x.server),
                "envoy-gateway:18001"
            );
        }
    }

    #[test]
    fn backoff_bounds_clamped_as_jpillora_backoff_does() {
        let s = Duration::from_secs;
        let bounds = |pairs: &[(&str, &str)]| {
            let x = xds_of(pairs);
            (x.initial_backoff, x.max_backoff)
        };
        // A maximum below the default minimum: every wait is the maximum.
        assert_eq!(
            bounds(&[("XDS_CLIENT_BACKOFF_MAX_INTERVAL", "5s")]),
            (s(5), s(5))
        );
        assert_eq!(
            bounds(&[
                ("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "30s"),
                ("XDS_CLIENT_BACKOFF_MAX_INTERVAL", "1s"),
            ]),
            (s(1), s(1))
        );
        // Zero: 100 ms for the minimum, 10 s for the maximum.
        assert_eq!(
            bounds(&[("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "0s")]),
            (Duration::from_millis(100), s(60))
        );
        assert_eq!(
            bounds(&[("XDS_CLIENT_BACKOFF_MAX_INTERVAL", "0")]),
            (s(10), s(10))
        );
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
                    ("CONFIG_GRPC_XDS_SERVER_URL", "envoy-gateway"),
                ],
                "CONFIG_GRPC_XDS_SERVER_URL",
            ),
            (
                vec![
                    ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
                    (
                        "CONFIG_GRPC_XDS_SERVER_URL",
                        "dns://8.8.8.8/envoy-gateway:18001",
                    ),
                ],
                "CONFIG_GRPC_XDS_SERVER_URL",
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
