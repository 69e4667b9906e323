//! A real Sentinel setup: one primary, one replica, three Sentinels.

use std::time::{Duration, Instant};

use crate::FailoverReport;
use crate::resp::Reply;
use crate::server::{Kind, RedisServer, online_replicas, sentinel_config};
use crate::util::wait_until;

/// The name the Sentinels monitor the primary under.
pub const MASTER_NAME: &str = "mymaster";

/// Bound on the primary/replica link and on the Sentinels discovering the
/// replica and each other (hello messages go out every 2 s).
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// Bound on a failover, from the kill / `SENTINEL FAILOVER` to every
/// Sentinel naming the promoted replica. An aborted election is retried by
/// Sentinel after 2 × `failover-timeout` (6 s), so this leaves room for two.
const FAILOVER_TIMEOUT: Duration = Duration::from_secs(30);
/// Short bound for probes inside waits.
const PROBE: Duration = Duration::from_secs(1);

/// A real Sentinel deployment on loopback: a primary, one replica of it,
/// and three Sentinels (`sentinel monitor mymaster 127.0.0.1 P 2`,
/// `down-after-milliseconds 1000`, `failover-timeout 3000`,
/// `parallel-syncs 1`), each with a writable config in its own temp dir.
/// Dropping it kills every process.
///
/// ```no_run
/// use redis_harness::SentinelSetup;
/// let setup = SentinelSetup::start();
/// let url = setup.store_url(); // redis+sentinel://127.0.0.1:S1,…/mymaster
/// let report = setup.kill_master();
/// assert_eq!(setup.master_port(), report.new_master_port);
/// assert_eq!(setup.master().cli(&["SET", "k", "v", "EX", "60"]), "OK");
/// # drop(url);
/// ```
#[derive(Debug)]
pub struct SentinelSetup {
    servers: Vec<RedisServer>,
    sentinels: Vec<RedisServer>,
}

/// Value of `key` in one entry of `SENTINEL replicas|sentinels` (a flat
/// key/value array).
fn field(entry: &Reply, key: &str) -> Option<String> {
    entry
        .as_array()?
        .chunks(2)
        .find(|kv| kv[0].as_text().as_deref() == Some(key))
        .and_then(|kv| kv.get(1)?.as_text())
}

fn master_addr_port(sentinel: &RedisServer) -> Result<u16, String> {
    let reply = sentinel
        .try_command(&["SENTINEL", "get-master-addr-by-name", MASTER_NAME], PROBE)
        .map_err(|e| format!("sentinel {}: {e}", sentinel.addr()))?;
    match reply.as_array() {
        Some([_, port]) => port
            .as_text()
            .and_then(|p| p.parse().ok())
            .ok_or_else(|| format!("sentinel {}: bad port in {reply:?}", sentinel.addr())),
        _ => Err(format!(
            "sentinel {}: get-master-addr-by-name gave {reply:?}",
            sentinel.addr()
        )),
    }
}

fn list(sentinel: &RedisServer, what: &str) -> Result<Vec<Reply>, String> {
    let reply = sentinel
        .try_command(&["SENTINEL", what, MASTER_NAME], PROBE)
        .map_err(|e| format!("sentinel {}: {e}", sentinel.addr()))?;
    reply.as_array().map(<[Reply]>::to_vec).ok_or_else(|| {
        format!(
            "sentinel {}: SENTINEL {what} gave {reply:?}",
            sentinel.addr()
        )
    })
}

impl SentinelSetup {
    /// Starts the primary, the replica (waits until it is in sync), then the
    /// three Sentinels, and waits until every Sentinel names the primary,
    /// sees the replica as a healthy failover candidate, and knows the two
    /// other Sentinels — so a failover can be started right away.
    #[must_use]
    pub fn start() -> SentinelSetup {
        let primary = RedisServer::start();
        let replica =
            RedisServer::start_with(&[&format!("replicaof 127.0.0.1 {}", primary.port())]);
        replica.wait_link_up(READY_TIMEOUT);
        wait_until(
            "the primary to stream to its replica",
            READY_TIMEOUT,
            || {
                let info = primary
                    .try_command(&["INFO", "replication"], PROBE)
                    .map_err(|e| e.to_string())?
                    .as_text()
                    .unwrap_or_default();
                if online_replicas(&info) == 1 {
                    Ok(())
                } else {
                    Err(info)
                }
            },
        );
        let lines = [
            format!(
                "sentinel monitor {MASTER_NAME} 127.0.0.1 {} 2",
                primary.port()
            ),
            format!("sentinel down-after-milliseconds {MASTER_NAME} 1000"),
            format!("sentinel failover-timeout {MASTER_NAME} 3000"),
            format!("sentinel parallel-syncs {MASTER_NAME} 1"),
        ];
        let sentinels = (0..3)
            .map(|_| {
                RedisServer::launch(Kind::Sentinel, "sentinel", false, &|port, dir| {
                    sentinel_config(port, dir, &lines)
                })
            })
            .collect();
        let setup = SentinelSetup {
            servers: vec![primary, replica],
            sentinels,
        };
        setup.wait_ready("new Sentinel setup");
        setup
    }

    /// The two data servers, in start order (the first was the initial
    /// primary; ask [`master`](Self::master) for the current one).
    #[must_use]
    pub fn servers(&self) -> &[RedisServer] {
        &self.servers
    }

    /// The three Sentinels.
    #[must_use]
    pub fn sentinels(&self) -> &[RedisServer] {
        &self.sentinels
    }

    /// `redis+sentinel://127.0.0.1:S1,127.0.0.1:S2,127.0.0.1:S3/mymaster`
    /// (tollgate's Sentinel URL scheme).
    #[must_use]
    pub fn store_url(&self) -> String {
        let addrs: Vec<String> = self.sentinels.iter().map(RedisServer::addr).collect();
        format!("redis+sentinel://{}/{MASTER_NAME}", addrs.join(","))
    }

    fn live_sentinels(&self) -> impl Iterator<Item = &RedisServer> {
        self.sentinels.iter().filter(|s| s.is_live())
    }

    /// The port of the current master, as the first live Sentinel reports
    /// it (`SENTINEL get-master-addr-by-name mymaster`).
    #[must_use]
    pub fn master_port(&self) -> u16 {
        let sentinel = self
            .live_sentinels()
            .next()
            .unwrap_or_else(|| panic!("redis-harness: no live Sentinel"));
        master_addr_port(sentinel).unwrap_or_else(|e| panic!("redis-harness: {e}"))
    }

    /// The data server the Sentinels currently name as master.
    #[must_use]
    pub fn master(&self) -> &RedisServer {
        self.server_by_port(self.master_port())
    }

    /// The running data servers other than the current master.
    #[must_use]
    pub fn replicas(&self) -> Vec<&RedisServer> {
        let master = self.master_port();
        self.servers
            .iter()
            .filter(|s| s.port() != master && s.is_running())
            .collect()
    }

    fn server_by_port(&self, port: u16) -> &RedisServer {
        self.servers
            .iter()
            .find(|s| s.port() == port)
            .unwrap_or_else(|| panic!("redis-harness: Sentinel names 127.0.0.1:{port}, not ours"))
    }

    /// One poll: every live Sentinel names the same master, sees a healthy
    /// replica, and knows the other live Sentinels. Returns the master port.
    fn ready(&self) -> Result<u16, String> {
        let live = self.live_sentinels().count();
        let mut master = None;
        for sentinel in self.live_sentinels() {
            let port = master_addr_port(sentinel)?;
            if *master.get_or_insert(port) != port {
                return Err(format!(
                    "Sentinels disagree on the master: {master:?} vs {port}"
                ));
            }
            let replicas = list(sentinel, "replicas")?;
            let healthy = replicas.iter().any(|r| {
                field(r, "flags").as_deref() == Some("slave")
                    && field(r, "master-link-status").as_deref() == Some("ok")
            });
            if !healthy {
                return Err(format!(
                    "sentinel {} sees no healthy replica: {replicas:?}",
                    sentinel.addr()
                ));
            }
            let peers = list(sentinel, "sentinels")?;
            if peers.len() + 1 < live {
                return Err(format!(
                    "sentinel {} knows {} other Sentinels, want {}",
                    sentinel.addr(),
                    peers.len(),
                    live - 1
                ));
            }
        }
        master.ok_or_else(|| "no live Sentinel".to_owned())
    }

    fn wait_ready(&self, what: &str) -> u16 {
        wait_until(&format!("{what} to be ready"), READY_TIMEOUT, || {
            self.ready()
        })
    }

    /// Forced failover: `SENTINEL FAILOVER mymaster` (retried while a
    /// Sentinel answers `NOGOODSLAVE` / `INPROG`), then waits until every
    /// live Sentinel names the promoted replica and it answers `ROLE` as
    /// master. First waits until a replica is a healthy candidate: after a
    /// previous failover Sentinel only demotes the old master about 8 s
    /// later, so back-to-back failovers take that long.
    pub fn failover(&self) -> FailoverReport {
        let old = self.wait_ready("Sentinel setup before SENTINEL FAILOVER");
        let started = Instant::now();
        let sentinel = self
            .live_sentinels()
            .next()
            .unwrap_or_else(|| panic!("redis-harness: no live Sentinel"));
        wait_until(
            "SENTINEL FAILOVER to be accepted",
            READY_TIMEOUT,
            || match sentinel.try_command(&["SENTINEL", "failover", MASTER_NAME], PROBE) {
                Ok(Reply::Status(ok)) if ok == "OK" => Ok(()),
                Ok(other) => Err(format!("{other:?}")),
                Err(e) => Err(e.to_string()),
            },
        );
        self.wait_new_master(old, started, "SENTINEL FAILOVER")
    }

    /// Kills (SIGKILL) the current master and waits until the Sentinels have
    /// promoted the replica: every live Sentinel names it and it answers
    /// `ROLE` as master. The old master stays down
    /// ([`RedisServer::restart`] brings it back; Sentinel then makes it a
    /// replica).
    pub fn kill_master(&self) -> FailoverReport {
        let old = self.wait_ready("Sentinel setup before killing the master");
        let started = Instant::now();
        self.server_by_port(old).kill();
        self.wait_new_master(old, started, "kill")
    }

    fn wait_new_master(&self, old: u16, started: Instant, how: &str) -> FailoverReport {
        let new = wait_until(
            &format!("Sentinels to promote a replica of 127.0.0.1:{old} ({how})"),
            FAILOVER_TIMEOUT,
            || {
                let mut named = None;
                for sentinel in self.live_sentinels() {
                    let port = master_addr_port(sentinel)?;
                    if port == old || *named.get_or_insert(port) != port {
                        return Err(format!("sentinel {} names {port}", sentinel.addr()));
                    }
                }
                let port = named.ok_or_else(|| "no live Sentinel".to_owned())?;
                let server = self.server_by_port(port);
                let role = server
                    .try_command(&["ROLE"], PROBE)
                    .map_err(|e| format!("{}: {e}", server.addr()))?;
                match role
                    .as_array()
                    .and_then(|r| r.first())
                    .and_then(Reply::as_text)
                {
                    Some(r) if r == "master" => Ok(port),
                    other => Err(format!("{} has role {other:?}", server.addr())),
                }
            },
        );
        FailoverReport {
            old_master_port: old,
            new_master_port: new,
            took: started.elapsed(),
        }
    }

    /// Keys without a TTL on the current master. See
    /// [`RedisServer::keys_without_ttl`].
    #[must_use]
    pub fn keys_without_ttl(&self) -> Vec<String> {
        self.master().keys_without_ttl()
    }

    /// `DBSIZE` of the current master.
    #[must_use]
    pub fn dbsize(&self) -> u64 {
        self.master().dbsize()
    }

    /// `FLUSHALL` on the current master (the replica follows).
    pub fn flushall(&self) {
        self.master().flushall();
    }

    /// `SCRIPT FLUSH` and `FUNCTION FLUSH` on every live data server.
    pub fn script_flush(&self) {
        for server in self.servers.iter().filter(|s| s.is_live()) {
            server.script_flush();
        }
    }
}
