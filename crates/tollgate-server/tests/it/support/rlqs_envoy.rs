//! A real Envoy 1.40 whose `rate_limit_quota` filter leases its shares
//! from tollgate's RLQS server: the bootstrap users copy,
//! `deploy/envoy/rlqs.yaml`, with only its addresses and domain changed
//! (so the file cannot rot), run through [`Envoy::start`] (admin and
//! listener on port 0, no hot restart: several run at once). Buckets are
//! `{name: <x-rule, else per-tenant>, tenant: <x-tenant>}`; Envoy admits
//! before a bucket's first assignment and after one expires, and answers
//! 429 on a deny.
//!
//! [`Load`] drives closed-loop traffic through one and records when each
//! answer came and what it was, for the per-window counts.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use super::envoy::Envoy;
use super::envoy_bootstrap::yaml_to_json;

/// The filter's name in `http_filters`.
const RLQS_FILTER: &str = "envoy.filters.http.rate_limit_quota";

/// `deploy/envoy/rlqs.yaml` in the repository.
pub fn rlqs_yaml_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy/envoy/rlqs.yaml")
}

/// The bootstrap (JSON text, which Envoy reads as YAML): the file with its
/// admin API and listener on free loopback ports, the cluster the filter's
/// `rlqs_server` names at `rlqs_grpc`, cluster `upstream` at `upstream`,
/// and the filter's domain `domain`. Nothing else changes.
/// Also the name of that cluster.
fn bootstrap_and_cluster(
    rlqs_grpc: SocketAddr,
    upstream: SocketAddr,
    domain: &str,
) -> (String, String) {
    let path = rlqs_yaml_path();
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let mut config = yaml_to_json(&text);
    let loopback = json!({"socket_address": {"address": "127.0.0.1", "port_value": 0}});
    config["admin"]["address"] = loopback.clone();
    let listeners = config["static_resources"]["listeners"]
        .as_array_mut()
        .expect("static_resources.listeners");
    assert_eq!(listeners.len(), 1, "rlqs.yaml: one listener");
    listeners[0]["address"] = loopback;
    let hcm = &mut listeners[0]["filter_chains"][0]["filters"][0]["typed_config"];
    let filter = hcm["http_filters"]
        .as_array_mut()
        .expect("http_filters")
        .iter_mut()
        .find(|f| f["name"] == RLQS_FILTER)
        .expect("rlqs.yaml: the rate_limit_quota filter");
    filter["typed_config"]["domain"] = json!(domain);
    let rlqs_cluster = filter["typed_config"]["rlqs_server"]["envoy_grpc"]["cluster_name"]
        .as_str()
        .expect("rlqs.yaml: rlqs_server.envoy_grpc.cluster_name")
        .to_owned();
    point(&mut config, &rlqs_cluster, rlqs_grpc);
    point(&mut config, "upstream", upstream);
    let text = serde_json::to_string_pretty(&config).expect("JSON");
    (text, rlqs_cluster)
}

/// Cluster `name`'s one endpoint set to `addr`.
fn point(config: &mut Value, name: &str, addr: SocketAddr) {
    let cluster = config["static_resources"]["clusters"]
        .as_array_mut()
        .expect("static_resources.clusters")
        .iter_mut()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("rlqs.yaml: no cluster {name}"));
    let lb = cluster["load_assignment"]["endpoints"][0]["lb_endpoints"]
        .as_array_mut()
        .unwrap_or_else(|| panic!("rlqs.yaml: cluster {name} has no lb_endpoints"));
    assert_eq!(lb.len(), 1, "rlqs.yaml: cluster {name}: one endpoint");
    lb[0]["endpoint"]["address"] = json!({"socket_address": {
        "address": addr.ip().to_string(), "port_value": addr.port()
    }});
}

/// A running Envoy on `deploy/envoy/rlqs.yaml`, killed on drop.
pub struct RlqsEnvoy {
    envoy: Envoy,
    /// The cluster that reaches tollgate.
    cluster: String,
}

impl RlqsEnvoy {
    /// Starts Envoy with its RLQS filter on `domain`, leasing from
    /// tollgate's gRPC port `rlqs_grpc`, in front of `upstream`. Its stream
    /// to tollgate opens on the first request that makes a bucket.
    pub fn start(rlqs_grpc: SocketAddr, upstream: SocketAddr, domain: &str) -> RlqsEnvoy {
        let (text, cluster) = bootstrap_and_cluster(rlqs_grpc, upstream, domain);
        RlqsEnvoy {
            envoy: Envoy::start(&text),
            cluster,
        }
    }

    /// Its listener.
    pub fn addr(&self) -> SocketAddr {
        self.envoy.listener
    }

    /// The gRPC streams it opened to tollgate so far (its RLQS cluster's
    /// `upstream_rq_total`).
    pub fn streams_opened(&self) -> Option<u64> {
        self.stat(&format!("cluster.{}.upstream_rq_total", self.cluster))
    }

    /// A counter or gauge of its admin API's `/stats` (`None` when
    /// absent).
    pub fn stat(&self, name: &str) -> Option<u64> {
        self.envoy.stat(name)
    }

    /// Its log so far (warnings and errors).
    pub fn log(&self) -> String {
        self.envoy.log()
    }

    /// The status of one `GET /` with `x-tenant: tenant` (and `x-rule:
    /// rule` when given). Read by its length, not to the connection's end:
    /// Envoy holds a connection it closes after a local reply (a 429) for
    /// its `delayed_close_timeout`, 1 s.
    pub fn get(&self, tenant: &str, rule: Option<&str>) -> u16 {
        let addr = self.addr();
        let mut head = format!("GET / HTTP/1.1\r\nHost: {addr}\r\nx-tenant: {tenant}\r\n");
        if let Some(rule) = rule {
            head.push_str(&format!("x-rule: {rule}\r\n"));
        }
        head.push_str("\r\n");
        let mut conn = BufReader::new(super::connect(addr));
        exchange(&mut conn, head.as_bytes())
            .unwrap_or_else(|| panic!("no answer from Envoy at {addr}"))
            .0
    }
}

/// One answer of a [`Load`]: when it came (ms since the Unix epoch: fixed
/// windows are aligned to it) and its status.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    /// When the answer was read.
    pub at_ms: u64,
    /// Its status (200 admitted, 429 denied).
    pub status: u16,
}

/// Closed-loop traffic through one Envoy: one thread sends `GET /` with
/// the given headers on a keep-alive connection, the next request once
/// the answer is in (after `pause`), until stopped.
pub struct Load {
    stop: Arc<AtomicBool>,
    samples: Arc<Mutex<Vec<Sample>>>,
    thread: JoinHandle<()>,
}

impl Load {
    /// Starts sending to `addr` with `headers` (e.g. `x-tenant`).
    pub fn start(addr: SocketAddr, headers: &[(&str, &str)], pause: Duration) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let samples = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&samples);
        let mut head = format!("GET / HTTP/1.1\r\nHost: {addr}\r\n");
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        let thread = std::thread::spawn(move || {
            let mut conn: Option<BufReader<TcpStream>> = None;
            while !flag.load(Ordering::Relaxed) {
                let c = conn.get_or_insert_with(|| BufReader::new(super::connect(addr)));
                match exchange(c, head.as_bytes()) {
                    Some((status, keep)) => {
                        sink.lock().expect("samples").push(Sample {
                            at_ms: now_ms(),
                            status,
                        });
                        if !keep {
                            conn = None;
                        }
                    }
                    // A connection Envoy closed: open another.
                    None => conn = None,
                }
                std::thread::sleep(pause);
            }
        });
        Load {
            stop,
            samples,
            thread,
        }
    }

    /// Every answer so far, in order.
    pub fn samples(&self) -> Vec<Sample> {
        self.samples.lock().expect("samples").clone()
    }

    /// Stops it and returns every answer, in order.
    pub fn stop(self) -> Vec<Sample> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().expect("load thread");
        let samples = self.samples.lock().expect("samples");
        samples.clone()
    }
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// One request on a keep-alive connection: the status and whether the
/// connection stays open, or `None` when it failed (closed under us).
fn exchange(c: &mut BufReader<TcpStream>, head: &[u8]) -> Option<(u16, bool)> {
    c.get_mut().write_all(head).ok()?;
    let mut line = String::new();
    c.read_line(&mut line).ok()?;
    let status: u16 = line.split(' ').nth(1)?.parse().ok()?;
    let mut length = 0usize;
    let mut keep = true;
    loop {
        let mut h = String::new();
        if c.read_line(&mut h).ok()? == 0 {
            return None;
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (k, v) = h.split_once(':')?;
        let v = v.trim();
        if k.eq_ignore_ascii_case("content-length") {
            length = v.parse().ok()?;
        } else if k.eq_ignore_ascii_case("connection") && v.eq_ignore_ascii_case("close") {
            keep = false;
        } else if k.eq_ignore_ascii_case("transfer-encoding") {
            // Not what Envoy sends for these answers; read no further.
            keep = false;
        }
    }
    let mut body = vec![0u8; length];
    c.read_exact(&mut body).ok()?;
    Some((status, keep))
}
