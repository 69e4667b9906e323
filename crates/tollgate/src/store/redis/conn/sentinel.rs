//! Sentinel: asking for the master, and following its announcements of a
//! new master.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::super::resp::{self, Reply, Value};
use super::dial::{exchange, tcp};
use super::{MAX_BACKOFF, MAX_REPLY, MIN_BACKOFF, protocol, server_error, unavailable};
use crate::error::StoreError;
use crate::store::url::HostPort;

/// What a Sentinel told (see [`watch`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Announce {
    /// `+switch-master`: the master is this node.
    Master(HostPort),
    /// `+selected-slave`: the failover leader chose this replica and is
    /// about to promote it. The old master takes writes until the
    /// Sentinels demote it, about 10 s on, and drops them then; and the
    /// switch is announced only once the promotion is confirmed, about a
    /// second after it: checks written to the old master meanwhile would
    /// be lost.
    Promoting(HostPort),
}

/// Asks one sentinel where `master` is.
pub(super) async fn master_of(
    sentinel: &HostPort,
    master: &str,
    timeout: Duration,
) -> Result<HostPort, StoreError> {
    let mut stream = tcp(sentinel, timeout).await?;
    let mut request = Vec::new();
    resp::command(
        &mut request,
        &[b"SENTINEL", b"get-master-addr-by-name", master.as_bytes()],
    );
    let mut replies = exchange(&mut stream, sentinel, &request, 1, timeout).await?;
    match replies.pop() {
        Some(Reply::Other(Value::Array(addr))) if addr.len() == 2 => {
            let host = addr[0].text();
            let port = addr[1].text().and_then(|p| p.parse::<u16>().ok());
            match (host, port) {
                (Some(host), Some(port)) => Ok(HostPort {
                    host: host.to_owned(),
                    port,
                }),
                _ => Err(protocol(format!("unreadable master address {addr:?}"))),
            }
        }
        Some(Reply::Other(Value::Nil)) => Err(unavailable(format!(
            "sentinel {sentinel} knows no master named {master:?}"
        ))),
        Some(Reply::Error(e)) => Err(server_error(&e)),
        other => Err(protocol(format!(
            "get-master-addr-by-name answered {other:?}"
        ))),
    }
}

/// Follows every Sentinel's announcements for `master`, forever: one
/// subscription per Sentinel (a failover's leader is the first to know,
/// and only it tells `+selected-slave`), each re-made after a failure with
/// the connection's backoff and kept alive by a `PING` after each quiet
/// second (a Sentinel that stopped answering is left). What they tell
/// goes to `announced`, the latest winning.
pub(super) async fn watch(
    sentinels: Vec<HostPort>,
    master: String,
    timeout: Duration,
    announced: Arc<Mutex<Option<Announce>>>,
) {
    let each = sentinels.into_iter().map(|sentinel| {
        let (master, announced) = (master.clone(), Arc::clone(&announced));
        async move {
            let mut backoff = MIN_BACKOFF;
            loop {
                if let Ok(mut stream) = subscribe(&sentinel, timeout).await {
                    backoff = MIN_BACKOFF;
                    follow(&mut stream, &master, timeout, &announced).await;
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    });
    futures_util::future::join_all(each).await;
}

/// The channels [`watch`] follows.
pub(super) const CHANNELS: [&[u8]; 2] = [b"+switch-master", b"+selected-slave"];

/// A connection to `sentinel` subscribed to [`CHANNELS`].
pub(super) async fn subscribe(
    sentinel: &HostPort,
    timeout: Duration,
) -> Result<TcpStream, StoreError> {
    let mut stream = tcp(sentinel, timeout).await?;
    let mut request = Vec::new();
    resp::command(&mut request, &[b"SUBSCRIBE", CHANNELS[0], CHANNELS[1]]);
    let replies = exchange(&mut stream, sentinel, &request, CHANNELS.len(), timeout).await?;
    for reply in replies {
        match reply {
            Reply::Other(Value::Array(a))
                if a.first().and_then(Value::text) == Some("subscribe") => {}
            other => return Err(protocol(format!("SUBSCRIBE answered {other:?}"))),
        }
    }
    Ok(stream)
}

/// Reads announcements until the Sentinel fails: closes, answers garbage,
/// or leaves a `PING` unanswered for a second and the timeout.
pub(super) async fn follow(
    stream: &mut TcpStream,
    master: &str,
    timeout: Duration,
    announced: &Mutex<Option<Announce>>,
) {
    const QUIET: Duration = Duration::from_secs(1);
    let mut buf = Vec::with_capacity(512);
    let mut pinged = false;
    loop {
        let wait = if pinged { QUIET + timeout } else { QUIET };
        match tokio::time::timeout(wait, stream.read_buf(&mut buf)).await {
            Ok(Ok(0) | Err(_)) => return,
            Ok(Ok(_)) => pinged = false,
            Err(_) if pinged => return,
            Err(_) => {
                let mut ping = Vec::new();
                resp::command(&mut ping, &[b"PING"]);
                if stream.write_all(&ping).await.is_err() {
                    return;
                }
                pinged = true;
                continue;
            }
        }
        let mut at = 0;
        loop {
            match resp::parse(&buf[at..]) {
                Ok(Some((reply, used))) => {
                    at += used;
                    if let Some(announce) = announcement(&reply, master) {
                        *announced.lock() = Some(announce);
                    }
                }
                Ok(None) => break,
                Err(_) => return,
            }
        }
        buf.drain(..at);
        if buf.len() > MAX_REPLY {
            return;
        }
    }
}

/// What a Sentinel's message says of `master`, if anything:
/// `+switch-master` "NAME OLD-IP OLD-PORT NEW-IP NEW-PORT", or
/// `+selected-slave` "slave IP:PORT IP PORT @ NAME MASTER-IP MASTER-PORT".
pub(super) fn announcement(reply: &Reply, master: &str) -> Option<Announce> {
    let Reply::Other(Value::Array(m)) = reply else {
        return None;
    };
    let [kind, channel, payload] = m.as_slice() else {
        return None;
    };
    if kind.text() != Some("message") {
        return None;
    }
    let words: Vec<&str> = payload.text()?.split_whitespace().collect();
    let node = |host: &str, port: &str| {
        Some(HostPort {
            host: host.to_owned(),
            port: port.parse().ok()?,
        })
    };
    match (channel.text()?, words.as_slice()) {
        ("+switch-master", [name, _, _, host, port]) if *name == master => {
            node(host, port).map(Announce::Master)
        }
        ("+selected-slave", ["slave", _, host, port, "@", name, _, _]) if *name == master => {
            node(host, port).map(Announce::Promoting)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(channel: &str, payload: &str) -> Reply {
        let mut raw = Vec::new();
        resp::command(
            &mut raw,
            &[b"message", channel.as_bytes(), payload.as_bytes()],
        );
        resp::parse(&raw).expect("RESP").expect("complete").0
    }

    fn node(host: &str, port: u16) -> HostPort {
        HostPort {
            host: host.to_owned(),
            port,
        }
    }

    #[test]
    fn announcements_about_our_master_only() {
        let switch = message("+switch-master", "mymaster 127.0.0.1 7001 127.0.0.2 7002");
        assert_eq!(
            announcement(&switch, "mymaster"),
            Some(Announce::Master(node("127.0.0.2", 7002)))
        );
        let selected = message(
            "+selected-slave",
            "slave 127.0.0.3:7003 127.0.0.3 7003 @ mymaster 127.0.0.1 7001",
        );
        assert_eq!(
            announcement(&selected, "mymaster"),
            Some(Announce::Promoting(node("127.0.0.3", 7003)))
        );
        // Another master's, a short or unreadable payload, another
        // channel, or a pong: nothing.
        assert_eq!(announcement(&switch, "other"), None);
        assert_eq!(announcement(&selected, "other"), None);
        for (channel, payload) in [
            ("+switch-master", "mymaster 127.0.0.1 7001 127.0.0.2"),
            (
                "+switch-master",
                "mymaster 127.0.0.1 7001 127.0.0.2 notaport",
            ),
            ("+switch-master", ""),
            (
                "+selected-slave",
                "slave 127.0.0.3:7003 127.0.0.3 7003 mymaster 127.0.0.1 7001",
            ),
            ("+sdown", "master mymaster 127.0.0.1 7001"),
        ] {
            assert_eq!(
                announcement(&message(channel, payload), "mymaster"),
                None,
                "{channel} {payload:?}"
            );
        }
        let mut raw = Vec::new();
        resp::command(&mut raw, &[b"pong", b""]);
        let pong = resp::parse(&raw).expect("RESP").expect("complete").0;
        assert_eq!(announcement(&pong, "mymaster"), None);
    }
}
