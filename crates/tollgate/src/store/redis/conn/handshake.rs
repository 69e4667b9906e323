//! Opening a connection to the node to use: the direct node, or the
//! master a Sentinel names, with the handshake (TLS when configured, AUTH,
//! SELECT, role check).

use super::super::resp::{self, Reply, Value};
use super::dial::{exchange, tcp};
use super::sentinel::master_of;
use super::stream::{Stream, secure};
use super::{Config, Target, protocol, server_error, unavailable};
use crate::error::{StoreError, StoreErrorKind};
use crate::store::url::HostPort;

/// A new connection and the node it is to.
pub(super) type Opened = (Stream, HostPort);

/// Opens a connection as `config` says: to the server, or to the master the
/// first answering sentinel names (a replica refuses).
pub(super) async fn open(
    config: &Config,
    hint: Option<&HostPort>,
    only_hint: bool,
) -> Result<Opened, StoreError> {
    match &config.target {
        Target::Direct(node) => Ok((handshake(node, config, false).await?, node.clone())),
        Target::Sentinel { sentinels, master } => {
            let mut failures = Vec::new();
            let mut kind = StoreErrorKind::Unavailable;
            if let Some(node) = hint {
                // The master the Sentinels announced last: ahead of a
                // Sentinel that has not heard of it yet.
                match handshake(node, config, true).await {
                    Ok(stream) => return Ok((stream, node.clone())),
                    Err(e) if only_hint => {
                        return Err(StoreError::new(
                            e.kind(),
                            format!("waiting for the promotion of {node} ({e})"),
                        ));
                    }
                    Err(e) => failures.push(format!("announced master {node}: {e}")),
                }
            }
            for sentinel in sentinels {
                let failure = match master_of(sentinel, master, config.timeout).await {
                    Ok(node) => match handshake(&node, config, true).await {
                        Ok(stream) => return Ok((stream, node)),
                        Err(e) => (e, format!("master {node} (from sentinel {sentinel})")),
                    },
                    Err(e) => (e, format!("sentinel {sentinel}")),
                };
                kind = failure.0.kind();
                failures.push(format!("{}: {}", failure.1, failure.0));
            }
            Err(StoreError::new(
                kind,
                format!("no master {master:?} reachable: {}", failures.join("; ")),
            ))
        }
    }
}

/// Connects to a data node: TLS when configured, then `AUTH`, `SELECT`,
/// with `check_role` a `ROLE` that must say master, and a `PING`, in one
/// round trip.
pub(super) async fn handshake(
    node: &HostPort,
    config: &Config,
    check_role: bool,
) -> Result<Stream, StoreError> {
    let tcp = tcp(node, config.timeout).await?;
    let mut stream = secure(tcp, node, config.tls.as_ref(), config.timeout).await?;
    let mut request = Vec::new();
    let mut steps = Vec::new();
    if let Some(password) = &config.credentials.password {
        match &config.credentials.username {
            Some(user) => resp::command(
                &mut request,
                &[b"AUTH", user.as_bytes(), password.as_bytes()],
            ),
            None => resp::command(&mut request, &[b"AUTH", password.as_bytes()]),
        }
        steps.push("AUTH");
    }
    if config.db != 0 {
        let db = config.db.to_string();
        resp::command(&mut request, &[b"SELECT", db.as_bytes()]);
        steps.push("SELECT");
    }
    if check_role {
        resp::command(&mut request, &[b"ROLE"]);
        steps.push("ROLE");
    }
    resp::command(&mut request, &[b"PING"]);
    steps.push("PING");
    let replies = exchange(&mut stream, node, &request, steps.len(), config.timeout).await?;
    for (step, reply) in steps.iter().zip(&replies) {
        match reply {
            Reply::Error(e) => {
                let e = server_error(e);
                return Err(StoreError::new(e.kind(), format!("{node}: {step}: {e}")));
            }
            Reply::Other(Value::Array(role)) if *step == "ROLE" => {
                let role = role.first().and_then(Value::text).unwrap_or("unknown");
                if role != "master" {
                    return Err(unavailable(format!(
                        "{node} is a {role}, not the master (failover in progress?)"
                    )));
                }
            }
            _ if *step == "ROLE" => {
                return Err(protocol(format!("{node}: ROLE answered {reply:?}")));
            }
            _ => {}
        }
    }
    Ok(stream)
}
