//! One real `redis-server` (or Sentinel) process.

use std::fs::{self, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use crate::resp::{Conn, Reply};
use crate::util::{
    TempDir, flavour, free_port, redis_cli_bin, redis_server_bin, run_bounded, send_signal,
    sentinel_command, tail, wait_until,
};

/// Longest wait for a freshly spawned process to answer.
const START_TIMEOUT: Duration = Duration::from_secs(20);
/// Default bound on one command sent by the harness.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(5);
/// Bound on one `redis-cli` run.
const CLI_TIMEOUT: Duration = Duration::from_secs(10);
/// How long `stop` lets a process shut down cleanly before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// How long `restart` retries when the old port is briefly unavailable.
const RESTART_PORT_WAIT: Duration = Duration::from_secs(10);
/// Attempts with a fresh port when another process takes ours first.
const PORT_ATTEMPTS: usize = 10;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Server,
    Sentinel,
}

/// Why a spawn did not produce a server answering on its port.
enum SpawnError {
    /// Someone else holds the port (or the cluster bus port).
    AddrInUse,
    /// Anything else: the message says what, the logs say why.
    Other(String),
}

/// A real `redis-server` process on `127.0.0.1`, on a free port, with its
/// own temp dir (config, log, `nodes.conf` for cluster nodes), no
/// persistence (`save ""`, `appendonly no`), `protected-mode no`, and
/// `repl-diskless-sync-delay 0` so replicas sync at once instead of after
/// Redis 7's default 5 s.
///
/// Every method takes `&self` (the process handle sits behind a mutex), so a
/// server can be shared across threads, e.g. paused from one while another
/// sends load. Dropping it SIGKILLs and reaps the process, also when a test
/// panics; the temp dir is removed, except after a panic, when it is kept
/// and its path printed to stderr so the Redis log can be read.
///
/// ```
/// let redis = redis_harness::RedisServer::start();
/// assert_eq!(redis.cli(&["SET", "k", "v", "PX", "60000"]), "OK");
/// assert_eq!(redis.cli(&["GET", "k"]), "v");
/// assert!(redis.url().starts_with("redis://127.0.0.1:"));
/// assert!(redis.keys_without_ttl().is_empty());
/// ```
#[derive(Debug)]
pub struct RedisServer {
    kind: Kind,
    port: u16,
    conf: PathBuf,
    log: PathBuf,
    output: PathBuf,
    child: Mutex<Option<Child>>,
    paused: AtomicBool,
    dir: TempDir,
    /// The TLS port, when started by [`RedisServer::start_tls`].
    pub(crate) tls_port: Option<u16>,
}

fn quoted(path: &Path) -> String {
    format!("\"{}\"", path.display())
}

/// The lines every data node gets; `extra` lines come last and so win.
pub(crate) fn data_config(port: u16, dir: &Path, extra: &[String]) -> String {
    let mut conf = format!(
        "port {port}\n\
         bind 127.0.0.1\n\
         protected-mode no\n\
         daemonize no\n\
         dir {dir}\n\
         logfile {log}\n\
         save \"\"\n\
         appendonly no\n\
         repl-diskless-sync-delay 0\n",
        dir = quoted(dir),
        log = quoted(&dir.join("redis.log")),
    );
    for line in extra {
        conf.push_str(line);
        conf.push('\n');
    }
    conf
}

/// The lines every Sentinel gets; `extra` (the `sentinel …` lines) come last.
pub(crate) fn sentinel_config(port: u16, dir: &Path, extra: &[String]) -> String {
    let mut conf = format!(
        "port {port}\n\
         bind 127.0.0.1\n\
         protected-mode no\n\
         daemonize no\n\
         dir {dir}\n\
         logfile {log}\n",
        dir = quoted(dir),
        log = quoted(&dir.join("redis.log")),
    );
    for line in extra {
        conf.push_str(line);
        conf.push('\n');
    }
    conf
}

/// Runs `redis-cli` (with `-c` when `cluster`) against `port`.
pub(crate) fn cli_on(port: u16, cluster: bool, args: &[&str]) -> String {
    let port_arg = port.to_string();
    let mut argv: Vec<&str> = vec!["-h", "127.0.0.1", "-p", &port_arg];
    if cluster {
        argv.push("-c");
    }
    argv.extend_from_slice(args);
    let done = run_bounded(redis_cli_bin(), &argv, CLI_TIMEOUT);
    assert!(
        done.status.success(),
        "redis-harness: `redis-cli {}` failed ({}):\n{}{}",
        argv.join(" "),
        done.status,
        done.stdout,
        done.stderr
    );
    done.stdout.trim_end().to_owned()
}

/// How many replicas an `INFO replication` text lists as `state=online`
/// (synced *and* streaming: a master buffers writes for a freshly synced
/// replica until its first `REPLCONF ACK`, up to a second later).
pub(crate) fn online_replicas(info: &str) -> usize {
    info.lines()
        .filter(|l| l.starts_with("slave") && l.contains("state=online"))
        .count()
}

/// The value of `field` in an `INFO` text.
pub(crate) fn info_field(info: &str, field: &str) -> Option<String> {
    info.lines().find_map(|line| {
        line.strip_prefix(field)
            .and_then(|rest| rest.strip_prefix(':'))
            .map(|v| v.trim().to_owned())
    })
}

impl RedisServer {
    /// Starts a standalone `redis-server` on a free loopback port and waits
    /// until it answers. Panics (with the log tail) if it cannot start, and
    /// with the install command if Redis is not installed.
    #[must_use]
    pub fn start() -> RedisServer {
        RedisServer::start_with(&[])
    }

    /// Like [`start`](Self::start), with extra `redis.conf` lines appended
    /// after the harness's own (so they win), e.g. `"maxmemory 10mb"` or
    /// `"replicaof 127.0.0.1 6379"`.
    #[must_use]
    pub fn start_with(extra_config: &[&str]) -> RedisServer {
        let extra: Vec<String> = extra_config.iter().map(|s| (*s).to_owned()).collect();
        RedisServer::launch(Kind::Server, "server", false, &|port, dir| {
            data_config(port, dir, &extra)
        })
    }

    /// Starts a process of `kind` whose config `config(port, dir)` writes,
    /// retrying on a fresh port while another process steals ours.
    pub(crate) fn launch(
        kind: Kind,
        label: &str,
        with_bus: bool,
        config: &dyn Fn(u16, &Path) -> String,
    ) -> RedisServer {
        let dir = TempDir::new(label);
        let conf = dir.path().join(match kind {
            Kind::Server => "redis.conf",
            Kind::Sentinel => "sentinel.conf",
        });
        let mut server = RedisServer {
            kind,
            port: 0,
            log: dir.path().join("redis.log"),
            output: dir.path().join("stdout.log"),
            conf,
            child: Mutex::new(None),
            paused: AtomicBool::new(false),
            dir,
            tls_port: None,
        };
        for _ in 0..PORT_ATTEMPTS {
            server.port = free_port(with_bus);
            let text = config(server.port, server.dir.path());
            fs::write(&server.conf, text).unwrap_or_else(|e| {
                panic!("redis-harness: cannot write {}: {e}", server.conf.display())
            });
            match server.spawn() {
                Ok(()) => return server,
                Err(SpawnError::AddrInUse) => {}
                Err(SpawnError::Other(why)) => panic!("{}", server.report(&why)),
            }
        }
        panic!(
            "{}",
            server.report(&format!(
                "could not bind a free port in {PORT_ATTEMPTS} attempts (address in use)"
            ))
        )
    }

    fn lock(&self) -> MutexGuard<'_, Option<Child>> {
        self.child.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn kind_name(&self) -> &'static str {
        match self.kind {
            Kind::Server => flavour().server_name(),
            Kind::Sentinel => flavour().sentinel_name(),
        }
    }

    /// A panic message: what went wrong plus config, log tail and output.
    fn report(&self, what: &str) -> String {
        format!(
            "redis-harness: {} on 127.0.0.1:{} {what}\n\
             --- config {} ---\n{}\n--- log tail {} ---\n{}\n--- stdout/stderr ---\n{}",
            self.kind_name(),
            self.port,
            self.conf.display(),
            fs::read_to_string(&self.conf)
                .unwrap_or_default()
                .trim_end(),
            self.log.display(),
            tail(&self.log, 30),
            tail(&self.output, 15),
        )
    }

    fn file_len(path: &Path) -> u64 {
        fs::metadata(path).map_or(0, |m| m.len())
    }

    fn text_since(path: &Path, offset: u64) -> String {
        let bytes = fs::read(path).unwrap_or_default();
        let start = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(bytes.len());
        String::from_utf8_lossy(&bytes[start..]).into_owned()
    }

    /// Spawns the process on `self.port` and waits until the process *we*
    /// spawned answers there (`INFO server` reports our pid: a PONG from a
    /// stranger on a stolen port does not count).
    fn spawn(&self) -> Result<(), SpawnError> {
        let (log_mark, out_mark) = (Self::file_len(&self.log), Self::file_len(&self.output));
        let out = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.output)
            .and_then(|f| Ok((f.try_clone()?, f)))
            .unwrap_or_else(|e| {
                panic!("redis-harness: cannot open {}: {e}", self.output.display())
            });
        let mut cmd = match self.kind {
            Kind::Server => {
                let mut cmd = Command::new(redis_server_bin());
                cmd.arg(&self.conf);
                cmd
            }
            Kind::Sentinel => sentinel_command(&self.conf),
        };
        cmd.current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(out.0)
            .stderr(out.1);
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("redis-harness: cannot spawn {:?}: {e}", cmd.get_program()));
        let pid = child.id();
        *self.lock() = Some(child);

        let start = Instant::now();
        loop {
            let exited = {
                let mut guard = self.lock();
                match guard.as_mut().map(Child::try_wait) {
                    Some(Ok(Some(status))) => {
                        guard.take();
                        Some(status.to_string())
                    }
                    Some(Err(e)) => Some(format!("unknown status ({e})")),
                    _ => None,
                }
            };
            if let Some(status) = exited {
                let new_output = Self::text_since(&self.log, log_mark)
                    + &Self::text_since(&self.output, out_mark);
                if new_output.contains("Address already in use") {
                    return Err(SpawnError::AddrInUse);
                }
                return Err(SpawnError::Other(format!(
                    "exited ({status}) before answering"
                )));
            }
            let last = match self.try_command(&["INFO", "server"], Duration::from_millis(250)) {
                Ok(reply) => {
                    let text = reply.as_text().unwrap_or_default();
                    match info_field(&text, "process_id") {
                        Some(p) if p == pid.to_string() => return Ok(()),
                        other => format!("port answered by pid {other:?}, not ours ({pid})"),
                    }
                }
                Err(e) => e.to_string(),
            };
            if start.elapsed() > START_TIMEOUT {
                self.kill();
                return Err(SpawnError::Other(format!(
                    "did not answer within {START_TIMEOUT:?} (last: {last})"
                )));
            }
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// The TCP port (stable across [`restart`](Self::restart)).
    #[must_use]
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:PORT`.
    #[must_use]
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `redis://127.0.0.1:PORT`.
    #[must_use]
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The TLS port of a server [`start_tls`](Self::start_tls) started.
    ///
    /// # Panics
    /// The server takes no TLS connections.
    #[must_use]
    pub fn tls_port(&self) -> u16 {
        self.tls_port
            .expect("redis-harness: this server was not started with start_tls")
    }

    /// `rediss://127.0.0.1:TLS_PORT` (see [`tls_port`](Self::tls_port)).
    #[must_use]
    pub fn tls_url(&self) -> String {
        format!("rediss://127.0.0.1:{}", self.tls_port())
    }

    /// The server's temp dir (its `dir`, config file and log live here).
    #[must_use]
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The server's log file.
    #[must_use]
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The last `lines` lines of the server's log, for failure messages.
    #[must_use]
    pub fn log_tail(&self, lines: usize) -> String {
        tail(&self.log, lines)
    }

    /// The OS process id, or `None` after [`kill`](Self::kill) / [`stop`](Self::stop).
    #[must_use]
    pub fn pid(&self) -> Option<u32> {
        self.lock().as_ref().map(Child::id)
    }

    /// Whether the process is alive (a paused process is alive). Reaps it if
    /// it exited on its own.
    #[must_use]
    pub fn is_running(&self) -> bool {
        let mut guard = self.lock();
        match guard.as_mut().map(Child::try_wait) {
            Some(Ok(None)) => true,
            Some(_) => {
                guard.take();
                false
            }
            None => false,
        }
    }

    /// Whether [`pause`](Self::pause) was called without a matching
    /// [`resume`](Self::resume).
    #[must_use]
    pub fn is_paused(&self) -> bool {
        self.paused.load(Ordering::SeqCst)
    }

    /// Whether the server is running and not paused, i.e. can answer.
    #[must_use]
    pub fn is_live(&self) -> bool {
        self.is_running() && !self.is_paused()
    }

    /// Stops the process cleanly (SIGTERM; SIGKILL if it has not exited within
    /// 5 s) and reaps it. No-op if it is not running.
    pub fn stop(&self) {
        let mut guard = self.lock();
        let Some(child) = guard.as_mut() else { return };
        if self.paused.swap(false, Ordering::SeqCst) {
            send_signal(child.id(), "CONT");
        }
        if matches!(child.try_wait(), Ok(None)) {
            send_signal(child.id(), "TERM");
        }
        let start = Instant::now();
        while matches!(child.try_wait(), Ok(None)) && start.elapsed() < STOP_GRACE {
            thread::sleep(Duration::from_millis(10));
        }
        let _ = child.kill();
        let _ = child.wait();
        guard.take();
    }

    /// Kills the process with SIGKILL (a crash: works even while paused) and
    /// reaps it. No-op if it is not running.
    pub fn kill(&self) {
        if let Some(mut child) = self.lock().take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.paused.store(false, Ordering::SeqCst);
    }

    /// Kills the process if running, then starts it again on the same port
    /// with the same config file (including anything `CONFIG REWRITE`,
    /// Sentinel or the cluster wrote to it, and `nodes.conf`). The dataset
    /// starts empty: there is no persistence. Retries for up to 10 s while
    /// the port is briefly unavailable, then panics.
    pub fn restart(&self) {
        self.kill();
        let start = Instant::now();
        loop {
            match self.spawn() {
                Ok(()) => return,
                Err(SpawnError::AddrInUse) if start.elapsed() < RESTART_PORT_WAIT => {
                    thread::sleep(Duration::from_millis(100));
                }
                Err(SpawnError::AddrInUse) => panic!(
                    "{}",
                    self.report(&format!(
                        "could not restart: port still in use after {RESTART_PORT_WAIT:?}"
                    ))
                ),
                Err(SpawnError::Other(why)) => panic!("{}", self.report(&why)),
            }
        }
    }

    fn running_pid(&self, action: &str) -> u32 {
        self.pid().unwrap_or_else(|| {
            panic!(
                "redis-harness: cannot {action} 127.0.0.1:{}: not running",
                self.port
            )
        })
    }

    /// Freezes the process with SIGSTOP: it keeps its port and connections
    /// but answers nothing (the kernel still accepts new connections), like
    /// a server stuck in a long GC pause or a network partition.
    pub fn pause(&self) {
        send_signal(self.running_pid("pause"), "STOP");
        self.paused.store(true, Ordering::SeqCst);
    }

    /// Thaws a [`pause`](Self::pause)d process with SIGCONT.
    pub fn resume(&self) {
        send_signal(self.running_pid("resume"), "CONT");
        self.paused.store(false, Ordering::SeqCst);
    }

    /// Runs `redis-cli -h 127.0.0.1 -p PORT ARGS…` (killed after 10 s) and
    /// returns its output without the trailing newline, as redis-cli prints
    /// it when not on a terminal: `OK`, `1`, an empty string for nil, one
    /// line per array element, and error replies as text (`ERR …`,
    /// `NOSCRIPT …`). Panics if redis-cli fails, e.g. cannot connect.
    #[must_use]
    pub fn cli(&self, args: &[&str]) -> String {
        cli_on(self.port, false, args)
    }

    /// Sends one command over a fresh connection and returns the reply; an
    /// error reply is `Ok(Reply::Error(..))`. `Err` means the server did not
    /// answer within `timeout` (e.g. it is paused), refused, or closed.
    ///
    /// # Errors
    /// I/O errors: refused, timed out ([`std::io::ErrorKind::TimedOut`]), closed.
    pub fn try_command(&self, args: &[&str], timeout: Duration) -> io::Result<Reply> {
        Conn::connect(self.port, timeout)?.call(args)
    }

    /// Sends several commands, one after another, over ONE connection (5 s
    /// bound per reply; panics on an I/O error). Needed where a command's
    /// meaning depends on the connection, e.g. `WAIT` after a write:
    /// `pipeline(&[&["SET", "k", "v"], &["WAIT", "1", "2000"]])`.
    #[must_use]
    pub fn pipeline(&self, commands: &[&[&str]]) -> Vec<Reply> {
        let run = || -> io::Result<Vec<Reply>> {
            let mut conn = Conn::connect(self.port, COMMAND_TIMEOUT)?;
            commands.iter().map(|args| conn.call(args)).collect()
        };
        run().unwrap_or_else(|e| {
            panic!(
                "redis-harness: pipeline {commands:?} on 127.0.0.1:{} failed: {e}",
                self.port
            )
        })
    }

    /// [`try_command`](Self::try_command) with a 5 s bound that panics on an
    /// I/O error (an error *reply* is returned, not a panic).
    #[must_use]
    pub fn command(&self, args: &[&str]) -> Reply {
        self.try_command(args, COMMAND_TIMEOUT).unwrap_or_else(|e| {
            panic!(
                "redis-harness: {:?} on 127.0.0.1:{} failed: {e} (running: {}, paused: {})",
                args,
                self.port,
                self.is_running(),
                self.is_paused()
            )
        })
    }

    /// The text of `INFO section`, e.g. `info("replication")`.
    #[must_use]
    pub fn info(&self, section: &str) -> String {
        self.command(&["INFO", section])
            .as_text()
            .unwrap_or_default()
    }

    /// The first element of `ROLE`: `master`, `slave` or `sentinel`.
    #[must_use]
    pub fn role(&self) -> String {
        let reply = self.command(&["ROLE"]);
        reply
            .as_array()
            .and_then(|items| items.first())
            .and_then(Reply::as_text)
            .unwrap_or_else(|| panic!("redis-harness: unexpected ROLE reply {reply:?}"))
    }

    fn expect_ok(&self, args: &[&str]) {
        let reply = self.command(args);
        assert_eq!(
            reply,
            Reply::Status("OK".to_owned()),
            "redis-harness: {args:?} on 127.0.0.1:{}",
            self.port
        );
    }

    /// `FLUSHALL`: empties every database.
    pub fn flushall(&self) {
        self.expect_ok(&["FLUSHALL"]);
    }

    /// `SCRIPT FLUSH` and `FUNCTION FLUSH`: empties the Lua script cache
    /// and the function libraries, so the next `EVALSHA` gets `NOSCRIPT`
    /// and the next `FCALL` `Function not found`. A replica refuses
    /// `FUNCTION FLUSH` (`READONLY`): its master's flush reaches it.
    pub fn script_flush(&self) {
        self.expect_ok(&["SCRIPT", "FLUSH"]);
        let reply = self.cli(&["FUNCTION", "FLUSH"]);
        assert!(
            reply.trim() == "OK" || reply.starts_with("READONLY"),
            "redis-harness: FUNCTION FLUSH answered {reply:?}"
        );
    }

    /// How many times this server ran `command` (lowercase, as `INFO
    /// commandstats` names it: `fcall`, `function|load`) since it started
    /// or since the last `CONFIG RESETSTAT`; 0 when it never did.
    #[must_use]
    pub fn command_calls(&self, command: &str) -> u64 {
        let prefix = format!("cmdstat_{command}:calls=");
        self.cli(&["INFO", "commandstats"])
            .lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .and_then(|rest| rest.split(',').next()?.parse().ok())
            .unwrap_or(0)
    }

    /// `DBSIZE` of database 0.
    #[must_use]
    pub fn dbsize(&self) -> u64 {
        let reply = self.command(&["DBSIZE"]);
        reply
            .as_int()
            .and_then(|n| u64::try_from(n).ok())
            .unwrap_or_else(|| panic!("redis-harness: unexpected DBSIZE reply {reply:?}"))
    }

    /// Every key with no TTL (`PTTL` = -1), found by `SCAN`ning every
    /// non-empty database listed in `INFO keyspace`; sorted. Keys of database
    /// N > 0 are reported as `dbN/key`. Tests assert this is empty: nothing
    /// tollgate writes may live forever.
    #[must_use]
    pub fn keys_without_ttl(&self) -> Vec<String> {
        self.scan_keys_without_ttl()
            .unwrap_or_else(|e| panic!("redis-harness: scanning 127.0.0.1:{}: {e}", self.port))
    }

    fn scan_keys_without_ttl(&self) -> io::Result<Vec<String>> {
        let mut conn = Conn::connect(self.port, COMMAND_TIMEOUT)?;
        let keyspace = conn
            .call(&["INFO", "keyspace"])?
            .as_text()
            .unwrap_or_default();
        let dbs: Vec<String> = keyspace
            .lines()
            .filter_map(|l| l.strip_prefix("db")?.split(':').next().map(str::to_owned))
            .collect();
        let mut found = Vec::new();
        for db in dbs {
            let bad = |e: String| io::Error::new(io::ErrorKind::InvalidData, e);
            let selected = conn.call(&["SELECT", db.as_str()])?;
            if selected.is_error() {
                return Err(bad(format!("SELECT {db}: {selected:?}")));
            }
            let mut cursor = b"0".to_vec();
            loop {
                let reply = conn.call(&[&b"SCAN"[..], &cursor, b"COUNT", b"1000"])?;
                let (next, keys) = match reply.as_array() {
                    Some([Reply::Bulk(next), Reply::Array(keys)]) => (next.clone(), keys.clone()),
                    _ => return Err(bad(format!("unexpected SCAN reply {reply:?}"))),
                };
                for key in keys {
                    let Reply::Bulk(key) = key else {
                        return Err(bad(format!("unexpected SCAN key {key:?}")));
                    };
                    if conn.call(&[&b"PTTL"[..], &key])? == Reply::Int(-1) {
                        let name = String::from_utf8_lossy(&key).into_owned();
                        found.push(if db == "0" {
                            name
                        } else {
                            format!("db{db}/{name}")
                        });
                    }
                }
                if next == b"0" {
                    break;
                }
                cursor = next;
            }
        }
        found.sort();
        found.dedup();
        Ok(found)
    }

    /// Waits (bounded) until `INFO replication` of this replica says
    /// `master_link_status:up`.
    pub(crate) fn wait_link_up(&self, timeout: Duration) {
        wait_until(
            &format!("replica 127.0.0.1:{} to sync with its master", self.port),
            timeout,
            || {
                let info = self
                    .try_command(&["INFO", "replication"], Duration::from_secs(1))
                    .map_err(|e| e.to_string())?
                    .as_text()
                    .unwrap_or_default();
                match info_field(&info, "master_link_status").as_deref() {
                    Some("up") => Ok(()),
                    other => Err(format!("master_link_status: {other:?}")),
                }
            },
        );
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}
