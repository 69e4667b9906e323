//! A real Redis Cluster: N masters, optionally replicas, created with
//! `redis-cli --cluster create`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::resp::Reply;
use crate::server::{Kind, RedisServer, cli_on, data_config, info_field, online_replicas};
use crate::util::{redis_cli_bin, run_bounded, wait_until};
use crate::{Failover, FailoverReport};

/// Number of hash slots in Redis Cluster.
pub const SLOTS: u16 = 16_384;

/// Bound on `redis-cli --cluster create`.
const CREATE_TIMEOUT: Duration = Duration::from_secs(60);
/// Bound on the cluster reaching `cluster_state:ok` (start, `wait_ok`).
const CONVERGE_TIMEOUT: Duration = Duration::from_secs(30);
/// Bound on a failover, from the kill / `CLUSTER FAILOVER` to a converged
/// cluster with the slot served by the promoted replica.
const FAILOVER_TIMEOUT: Duration = Duration::from_secs(30);
/// A manual failover that has not completed after this is issued again
/// (Redis aborts a manual failover after 5 s).
const REISSUE_AFTER: Duration = Duration::from_secs(6);
/// Short bound for probes inside waits, so a paused node cannot stall one.
const PROBE: Duration = Duration::from_secs(1);

/// The hash slot of `key`, as Redis Cluster computes it: CRC16 (XMODEM) of
/// the key, or of the part inside the first non-empty `{…}` hash tag, mod
/// 16384.
///
/// ```
/// use redis_harness::slot_of;
/// assert_eq!(slot_of("foo"), 12182);
/// assert_eq!(slot_of("{user1}.a"), slot_of("{user1}.b"));
/// ```
#[must_use]
pub fn slot_of(key: impl AsRef<[u8]>) -> u16 {
    let key = key.as_ref();
    let hashed = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            match rest.iter().position(|&b| b == b'}') {
                Some(close) if close > 0 => Some(&rest[..close]),
                _ => None,
            }
        })
        .unwrap_or(key);
    crc16(hashed) % SLOTS
}

fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in data {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 == 0 {
                crc << 1
            } else {
                (crc << 1) ^ 0x1021
            };
        }
    }
    crc
}

/// One line of `CLUSTER NODES`, as one node sees another.
#[derive(Debug, Clone)]
struct NodeLine {
    id: String,
    port: u16,
    myself: bool,
    master: bool,
    master_id: Option<String>,
    slots: Vec<(u16, u16)>,
}

fn parse_nodes(text: &str) -> Vec<NodeLine> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 8 {
                return None;
            }
            // 127.0.0.1:7000@17000[,hostname]
            let port = fields[1]
                .split(['@', ','])
                .next()?
                .rsplit(':')
                .next()?
                .parse()
                .ok()?;
            let flags: Vec<&str> = fields[2].split(',').collect();
            let slots = fields[8..]
                .iter()
                .filter(|s| !s.starts_with('[')) // migrating / importing markers
                .filter_map(|s| match s.split_once('-') {
                    Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
                    None => s.parse().ok().map(|n| (n, n)),
                })
                .collect();
            Some(NodeLine {
                id: fields[0].to_owned(),
                port,
                myself: flags.contains(&"myself"),
                master: flags.contains(&"master"),
                master_id: Some(fields[3]).filter(|m| *m != "-").map(str::to_owned),
                slots,
            })
        })
        .collect()
}

/// Slot range (inclusive) -> port of the master serving it.
type Owners = BTreeMap<(u16, u16), u16>;

/// Who serves which slots, in one node's view.
fn owners(view: &[NodeLine]) -> Owners {
    view.iter()
        .filter(|n| n.master)
        .flat_map(|n| n.slots.iter().map(move |range| (*range, n.port)))
        .collect()
}

fn owner_of(view: &[NodeLine], slot: u16) -> Option<u16> {
    owners(view)
        .into_iter()
        .find(|((lo, hi), _)| (*lo..=*hi).contains(&slot))
        .map(|(_, port)| port)
}

/// One node's view of the whole topology, comparable across nodes: per
/// port, whether it is a master, the port it replicates, and its slots.
/// Failure flags are left out (they legitimately differ for a while).
type Topology = BTreeMap<u16, (bool, Option<u16>, Vec<(u16, u16)>)>;

fn topology(view: &[NodeLine]) -> Topology {
    let port_of = |id: &str| view.iter().find(|n| n.id == id).map(|n| n.port);
    view.iter()
        .map(|n| {
            let master_port = n.master_id.as_deref().and_then(port_of);
            (n.port, (n.master, master_port, n.slots.clone()))
        })
        .collect()
}

/// A real Redis Cluster on loopback: `masters` masters with
/// `replicas_per_master` replicas each, every node a [`RedisServer`] with
/// `cluster-enabled yes`, its own `nodes.conf` in its temp dir,
/// `cluster-node-timeout 1000` (a killed master is replaced in a few
/// seconds) and `cluster-replica-validity-factor 0` (any replica may be
/// promoted). Dropping it kills every node.
///
/// ```no_run
/// use redis_harness::RedisCluster;
/// let cluster = RedisCluster::start(3, 1);
/// assert_eq!(cluster.cli(&["SET", "k", "v", "EX", "60"]), "OK");
/// let report = cluster.kill_master_of("k");
/// assert_ne!(report.new_master_port, report.old_master_port);
/// assert_eq!(cluster.cli(&["SET", "k", "v2", "EX", "60"]), "OK");
/// assert!(cluster.keys_without_ttl().is_empty());
/// ```
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts `masters` (at least 3, as `redis-cli --cluster create`
    /// requires) × (1 + `replicas_per_master`) nodes, creates the cluster
    /// with `redis-cli --cluster create … --cluster-replicas N --cluster-yes`,
    /// then waits until every node reports `cluster_state:ok` with all
    /// 16384 slots ok, all nodes agree on the topology, and every replica is
    /// in sync with its master.
    #[must_use]
    pub fn start(masters: usize, replicas_per_master: usize) -> RedisCluster {
        assert!(
            masters >= 3,
            "redis-harness: a Redis Cluster needs at least 3 masters, got {masters}"
        );
        let extra = [
            "cluster-enabled yes",
            "cluster-config-file nodes.conf",
            "cluster-node-timeout 1000",
            "cluster-replica-validity-factor 0",
        ]
        .map(str::to_owned);
        let total = masters * (1 + replicas_per_master);
        let nodes: Vec<RedisServer> = (0..total)
            .map(|_| {
                RedisServer::launch(Kind::Server, "cluster", true, &|port, dir| {
                    data_config(port, dir, &extra)
                })
            })
            .collect();
        let cluster = RedisCluster { nodes };

        let replicas = replicas_per_master.to_string();
        let mut args: Vec<String> = vec!["--cluster".into(), "create".into()];
        args.extend(cluster.nodes.iter().map(RedisServer::addr));
        args.extend([
            "--cluster-replicas".into(),
            replicas,
            "--cluster-yes".into(),
        ]);
        let done = run_bounded(redis_cli_bin(), &args, CREATE_TIMEOUT);
        assert!(
            done.status.success() && done.stdout.contains("All 16384 slots covered"),
            "redis-harness: `redis-cli {}` failed ({}):\n{}{}\n--- first node's log ---\n{}",
            args.join(" "),
            done.status,
            done.stdout,
            done.stderr,
            cluster.nodes[0].log_tail(20),
        );
        cluster.wait_converged(&format!(
            "new cluster of {masters} masters × {replicas_per_master} replicas"
        ));
        let counted = cluster.masters().len();
        assert_eq!(
            counted, masters,
            "redis-harness: expected {masters} masters after create, found {counted}"
        );
        cluster
    }

    /// Every node, in start order (the first `masters` are not necessarily
    /// the masters; ask [`masters`](Self::masters)).
    #[must_use]
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// Node `index` (start order).
    #[must_use]
    pub fn node(&self, index: usize) -> &RedisServer {
        &self.nodes[index]
    }

    /// The node listening on `port`; panics if none.
    #[must_use]
    pub fn node_by_port(&self, port: u16) -> &RedisServer {
        self.nodes
            .iter()
            .find(|n| n.port() == port)
            .unwrap_or_else(|| panic!("redis-harness: no cluster node on port {port}"))
    }

    /// `redis://127.0.0.1:PORT` of every node.
    #[must_use]
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// `redis+cluster://127.0.0.1:P1,127.0.0.1:P2,…` (tollgate's cluster URL
    /// scheme) listing every node as a seed, replicas included, so a client
    /// can still bootstrap after a seed master was killed.
    #[must_use]
    pub fn store_url(&self) -> String {
        let seeds: Vec<String> = self.nodes.iter().map(RedisServer::addr).collect();
        format!("redis+cluster://{}", seeds.join(","))
    }

    /// Live (running, not paused) nodes whose `ROLE` is `master`.
    #[must_use]
    pub fn masters(&self) -> Vec<&RedisServer> {
        self.live().filter(|n| n.role() == "master").collect()
    }

    fn live(&self) -> impl Iterator<Item = &RedisServer> {
        self.nodes.iter().filter(|n| n.is_live())
    }

    fn any_live(&self) -> &RedisServer {
        self.live()
            .next()
            .unwrap_or_else(|| panic!("redis-harness: no live cluster node"))
    }

    fn view(node: &RedisServer) -> Result<Vec<NodeLine>, String> {
        match node.try_command(&["CLUSTER", "NODES"], PROBE) {
            Ok(reply) => reply
                .as_text()
                .filter(|_| !reply.is_error())
                .map(|t| parse_nodes(&t))
                .ok_or_else(|| format!("CLUSTER NODES on {}: {reply:?}", node.addr())),
            Err(e) => Err(format!("CLUSTER NODES on {}: {e}", node.addr())),
        }
    }

    fn checked_view(node: &RedisServer) -> Vec<NodeLine> {
        Self::view(node).unwrap_or_else(|e| panic!("redis-harness: {e}"))
    }

    /// The master serving `slot`, as a live node sees it.
    #[must_use]
    pub fn master_of_slot(&self, slot: u16) -> &RedisServer {
        let view = Self::checked_view(self.any_live());
        let port = owner_of(&view, slot)
            .unwrap_or_else(|| panic!("redis-harness: no master serves slot {slot}"));
        self.node_by_port(port)
    }

    /// The master serving `key`'s slot.
    #[must_use]
    pub fn master_of(&self, key: &str) -> &RedisServer {
        self.master_of_slot(slot_of(key))
    }

    /// The replicas of `master`, as a live node sees them (whether or not
    /// they are alive).
    #[must_use]
    pub fn replicas_of(&self, master: &RedisServer) -> Vec<&RedisServer> {
        let view = Self::checked_view(self.any_live());
        let Some(id) = view
            .iter()
            .find(|n| n.port == master.port())
            .map(|n| n.id.clone())
        else {
            return Vec::new();
        };
        view.iter()
            .filter(|n| n.master_id.as_deref() == Some(id.as_str()))
            .map(|n| self.node_by_port(n.port))
            .collect()
    }

    /// One poll of convergence: every live node says `cluster_state:ok` with
    /// all slots ok, all live nodes agree on the topology (roles, who
    /// replicates whom, slot owners), every live replica is in sync.
    /// Returns the agreed slot owners.
    fn converged(&self) -> Result<Owners, String> {
        let mut agreed: Option<(u16, Topology, Owners)> = None;
        for node in self.live() {
            let info = node
                .try_command(&["CLUSTER", "INFO"], PROBE)
                .map_err(|e| format!("CLUSTER INFO on {}: {e}", node.addr()))?
                .as_text()
                .unwrap_or_default();
            let state = info_field(&info, "cluster_state");
            let slots_ok = info_field(&info, "cluster_slots_ok");
            if state.as_deref() != Some("ok") || slots_ok.as_deref() != Some("16384") {
                return Err(format!(
                    "{}: cluster_state {state:?}, cluster_slots_ok {slots_ok:?}",
                    node.addr()
                ));
            }
            let view = Self::view(node)?;
            let me = view
                .iter()
                .find(|n| n.myself)
                .ok_or_else(|| format!("{}: no `myself` in CLUSTER NODES", node.addr()))?;
            let repl = node
                .try_command(&["INFO", "replication"], PROBE)
                .map_err(|e| format!("INFO replication on {}: {e}", node.addr()))?
                .as_text()
                .unwrap_or_default();
            if me.master {
                // Every live replica must be streaming, not just synced.
                let want = view
                    .iter()
                    .filter(|n| n.master_id.as_deref() == Some(me.id.as_str()))
                    .filter(|n| self.nodes.iter().any(|s| s.port() == n.port && s.is_live()))
                    .count();
                let online = online_replicas(&repl);
                if online < want {
                    return Err(format!(
                        "master {}: {online} of {want} replicas online",
                        node.addr()
                    ));
                }
            } else {
                let link = info_field(&repl, "master_link_status");
                if link.as_deref() != Some("up") {
                    return Err(format!(
                        "replica {}: master_link_status {link:?}",
                        node.addr()
                    ));
                }
            }
            let seen = topology(&view);
            match &agreed {
                None => agreed = Some((node.port(), seen, owners(&view))),
                Some((first, first_seen, _)) if *first_seen != seen => {
                    return Err(format!(
                        "nodes disagree on the topology (port -> (master, replicates, \
                         slots)): {first} sees {first_seen:?}, {} sees {seen:?}",
                        node.port()
                    ));
                }
                Some(_) => {}
            }
        }
        agreed
            .map(|(_, _, owners)| owners)
            .ok_or_else(|| "no live node".to_owned())
    }

    fn wait_converged(&self, what: &str) -> Owners {
        wait_until(&format!("{what} to converge"), CONVERGE_TIMEOUT, || {
            self.converged()
        })
    }

    /// Waits (at most 30 s, else panics with the last observation) until
    /// every live node reports `cluster_state:ok` with all 16384 slots ok,
    /// all live nodes agree on the topology (roles, who replicates whom,
    /// which master serves each slot), and every live replica is in sync
    /// (its master lists it `state=online`). Use it after restarting or resuming a node.
    pub fn wait_ok(&self) {
        self.wait_converged("cluster");
    }

    /// Runs `redis-cli -c` (follows `MOVED`/`ASK`) against a live master;
    /// output as for [`RedisServer::cli`].
    #[must_use]
    pub fn cli(&self, args: &[&str]) -> String {
        let entry = self
            .masters()
            .first()
            .map(|m| m.port())
            .unwrap_or_else(|| panic!("redis-harness: no live master"));
        cli_on(entry, true, args)
    }

    /// Kills (SIGKILL) the master serving `key`'s slot and waits until one
    /// of its replicas is promoted and the cluster has converged again
    /// (`cluster_state:ok` everywhere, slot served by the new master). The
    /// killed node stays down; [`RedisServer::restart`] brings it back (it
    /// rejoins as a replica). Panics if the master has no live replica.
    pub fn kill_master_of(&self, key: &str) -> FailoverReport {
        self.failover_slot(slot_of(key), Failover::Kill)
    }

    /// Graceful failover of the master serving `key`'s slot: `CLUSTER
    /// FAILOVER` issued on one of its replicas, then waits until that
    /// replica serves the slot, the old master has become its replica, and
    /// the cluster has converged.
    pub fn failover_master_of(&self, key: &str) -> FailoverReport {
        self.failover_slot(slot_of(key), Failover::Graceful)
    }

    /// [`failover_master_of`](Self::failover_master_of)
    /// ([`Failover::Graceful`]) or [`kill_master_of`](Self::kill_master_of)
    /// ([`Failover::Kill`]) by slot number.
    pub fn failover_slot(&self, slot: u16, how: Failover) -> FailoverReport {
        let graceful = how == Failover::Graceful;
        self.wait_converged(&format!("cluster before failing over slot {slot}"));
        let old = self.master_of_slot(slot);
        let old_port = old.port();
        let replica = self
            .replicas_of(old)
            .into_iter()
            .find(|r| r.is_live())
            .unwrap_or_else(|| {
                panic!(
                    "redis-harness: master {} of slot {slot} has no live replica; start the \
                     cluster with replicas_per_master >= 1",
                    old.addr()
                )
            });

        let started = Instant::now();
        let mut issued = started;
        let issue = || {
            let reply = replica.command(&["CLUSTER", "FAILOVER"]);
            assert_eq!(
                reply,
                Reply::Status("OK".to_owned()),
                "redis-harness: CLUSTER FAILOVER on {}",
                replica.addr()
            );
        };
        if graceful {
            issue();
        } else {
            old.kill();
        }
        let how = if graceful { "CLUSTER FAILOVER" } else { "kill" };
        let new_port = wait_until(
            &format!("slot {slot} to fail over from {} ({how})", old.addr()),
            FAILOVER_TIMEOUT,
            || {
                if graceful && issued.elapsed() > REISSUE_AFTER && replica.role() != "master" {
                    issue();
                    issued = Instant::now();
                }
                let owners = self.converged()?;
                let new_port = owners
                    .iter()
                    .find(|((lo, hi), _)| (*lo..=*hi).contains(&slot))
                    .map(|(_, port)| *port)
                    .ok_or_else(|| format!("no owner for slot {slot}"))?;
                if new_port == old_port {
                    return Err(format!("slot {slot} still served by {old_port}"));
                }
                if graceful {
                    let role = old
                        .try_command(&["ROLE"], PROBE)
                        .map_err(|e| e.to_string())?;
                    let role = role
                        .as_array()
                        .and_then(|r| r.first())
                        .and_then(Reply::as_text);
                    if role.as_deref() != Some("slave") {
                        return Err(format!("old master {old_port} still has role {role:?}"));
                    }
                }
                Ok(new_port)
            },
        );
        FailoverReport {
            old_master_port: old_port,
            new_master_port: new_port,
            took: started.elapsed(),
        }
    }

    fn data_masters(&self, action: &str) -> Vec<&RedisServer> {
        if let Some(paused) = self.nodes.iter().find(|n| n.is_running() && n.is_paused()) {
            panic!(
                "redis-harness: cannot {action} while node {} is paused; resume it first",
                paused.addr()
            );
        }
        self.masters()
    }

    /// Keys without a TTL on every live master (each owns a share of the
    /// slots; replicas hold copies), sorted. See
    /// [`RedisServer::keys_without_ttl`]. Panics if a node is paused.
    #[must_use]
    pub fn keys_without_ttl(&self) -> Vec<String> {
        let mut keys: Vec<String> = self
            .data_masters("scan for keys without TTL")
            .into_iter()
            .flat_map(RedisServer::keys_without_ttl)
            .collect();
        keys.sort();
        keys.dedup();
        keys
    }

    /// Total `DBSIZE` over the live masters.
    #[must_use]
    pub fn dbsize(&self) -> u64 {
        self.data_masters("count keys")
            .into_iter()
            .map(RedisServer::dbsize)
            .sum()
    }

    /// `FLUSHALL` on every live master (replicas follow).
    pub fn flushall(&self) {
        for master in self.data_masters("flush") {
            master.flushall();
        }
    }

    /// `SCRIPT FLUSH` and `FUNCTION FLUSH` on every live node (each has its
    /// own script cache and libraries).
    pub fn script_flush(&self) {
        for node in self.live() {
            node.script_flush();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_the_redis_cluster_spec() {
        // Values from the Redis Cluster specification / CLUSTER KEYSLOT.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(slot_of("foo"), 12182);
        assert_eq!(slot_of("somekey"), 11058);
        assert_eq!(slot_of("{user1000}.following"), slot_of("user1000"));
        assert_eq!(slot_of("foo{}{bar}"), slot_of("foo{}{bar}"));
        assert_ne!(slot_of("foo{}{bar}"), slot_of("bar"));
        assert_eq!(slot_of("foo{{bar}}zap"), slot_of("{bar"));
    }

    #[test]
    fn parses_cluster_nodes() {
        let text = "\
07c3 127.0.0.1:30004@40004 slave e7d1 0 1426238317239 4 connected
67ed 127.0.0.1:30002@40002,host master - 0 1426238316232 2 connected 5461-10922 [93-<-292f]
e7d1 127.0.0.1:30001@40001 myself,master - 0 0 1 connected 0-5460 10923
";
        let nodes = parse_nodes(text);
        assert_eq!(nodes.len(), 3);
        assert_eq!(nodes[0].port, 30004);
        assert_eq!(nodes[0].master_id.as_deref(), Some("e7d1"));
        assert!(!nodes[0].master);
        assert_eq!(nodes[1].port, 30002);
        assert_eq!(nodes[1].slots, vec![(5461, 10922)]);
        assert!(nodes[2].myself && nodes[2].master);
        assert_eq!(nodes[2].slots, vec![(0, 5460), (10923, 10923)]);
        assert_eq!(owner_of(&nodes, 10923), Some(30001));
        assert_eq!(owner_of(&nodes, 6000), Some(30002));
        assert_eq!(owner_of(&nodes, 16000), None);
    }
}
