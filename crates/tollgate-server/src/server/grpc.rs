//! The gRPC front door (the Envoy rate limit service): HTTP/2 connections
//! accepted under the door's cap ([`serve_grpc`]), each served by one task
//! that drives the connection and its calls together.
//!
//! A connection's calls are polled inside its own task, not spawned one
//! task per stream (hyper's way): Envoy multiplexes a worker's calls on one
//! connection, and a call decided by the memory store never waits, so a
//! task per call was a hand-off to the scheduler, often to the other
//! worker thread, for nothing (docs/envoy.md, "Performance"). Answers are
//! queued on their streams as soon as decided, and the connection writes
//! what all the calls of one read produced in one go.

use std::future::{Future as _, poll_fn};
use std::net::SocketAddr;
use std::task::Poll;

use bytes::Bytes;
use futures_util::StreamExt as _;
use futures_util::stream::FuturesUnordered;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio_rustls::TlsAcceptor;
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;

use super::acceptor::Acceptor;
use super::watchdog::Conn;
use super::{
    DRAIN_TIMEOUT, GRPC_BODY_TIMEOUT, MAX_CONNECTIONS, MAX_GRPC_HEADER_LIST, MAX_GRPC_MESSAGE,
    MAX_GRPC_STREAMS, stopped,
};
use crate::doors::Door;
use crate::doors::envoy::grpc::{RateLimitServer, SERVICE_NAME};
use crate::inline::Inline;

/// The door's name in logs.
const NAME: &str = Door::Envoy.name();
/// The reference's `grpc.health.v1` service name (the compatibility
/// entry's reference ports keep it current; draining ends it here).
const REFERENCE_HEALTH_NAME: &str = crate::compat::http::GRPC_HEALTH_NAME;

/// The HTTP/2 settings of every connection.
fn settings() -> h2::server::Builder {
    let mut builder = h2::server::Builder::new();
    builder
        .max_concurrent_streams(MAX_GRPC_STREAMS)
        .max_header_list_size(MAX_GRPC_HEADER_LIST)
        // A stream needs no more than its one message in flight.
        .initial_window_size(u32::try_from(MAX_GRPC_MESSAGE).unwrap_or(u32::MAX))
        .initial_connection_window_size(1024 * 1024);
    builder
}

/// Serves `server` on `listener` until `stop` turns true; then stops
/// accepting, reports `NOT_SERVING` on `health`, sends GOAWAY on every
/// connection and waits until they have all closed, or [`DRAIN_TIMEOUT`].
pub(super) async fn serve_grpc(
    listener: TcpListener,
    server: RateLimitServer,
    health: HealthReporter,
    stop: watch::Receiver<bool>,
    tls: Option<TlsAcceptor>,
) {
    let builder = settings();
    // Every connection holds a sender: when all are gone, all have closed.
    let (open_tx, mut open_rx) = mpsc::channel::<()>(1);
    {
        let mut shutdown = std::pin::pin!(stopped(stop.clone()));
        let mut acceptor = Acceptor::new(&listener, NAME, MAX_CONNECTIONS);
        while let Some((stream, peer, permit)) = acceptor.next(&mut shutdown).await {
            let conn = Conn::new(stream, permit, None);
            let (builder, server, stop, open) = (
                builder.clone(),
                server.clone(),
                stop.clone(),
                open_tx.clone(),
            );
            match &tls {
                None => {
                    tokio::spawn(serve_connection(builder, conn, peer, server, stop, open));
                }
                Some(tls) => {
                    let handshake = tls.accept(conn);
                    tokio::spawn(async move {
                        // Bounded as a request head is: a client that
                        // never finishes its handshake holds no place.
                        match tokio::time::timeout(GRPC_BODY_TIMEOUT, handshake).await {
                            Ok(Ok(io)) => {
                                serve_connection(builder, io, peer, server, stop, open).await;
                            }
                            Ok(Err(e)) => {
                                tracing::debug!("{NAME}: TLS handshake from {peer}: {e}");
                            }
                            Err(_) => {
                                tracing::debug!("{NAME}: TLS handshake from {peer}: timed out");
                            }
                        }
                    });
                }
            }
        }
    }
    drop(listener);
    for name in [SERVICE_NAME, REFERENCE_HEALTH_NAME] {
        health
            .set_service_status(name, ServingStatus::NotServing)
            .await;
    }
    tracing::info!("{NAME}: stopped accepting; draining");
    drop(open_tx);
    if tokio::time::timeout(DRAIN_TIMEOUT, open_rx.recv())
        .await
        .is_ok()
    {
        tracing::info!("{NAME}: drained");
    } else {
        // Envoy keeps its HTTP/2 connections open, and a client that never
        // reads never takes the GOAWAY: past the drain time, stop waiting.
        tracing::warn!("{NAME}: connections still open after {DRAIN_TIMEOUT:?}; closing them");
    }
}

/// One connection: the HTTP/2 handshake, then its calls, until it closes;
/// on `stop`, GOAWAY, and the calls already open are answered (or cut at
/// their body bound).
async fn serve_connection<Io>(
    builder: h2::server::Builder,
    io: Io,
    peer: SocketAddr,
    server: RateLimitServer,
    stop: watch::Receiver<bool>,
    _open: mpsc::Sender<()>,
) where
    Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let mut stopping = std::pin::pin!(stopped(stop));
    let handshake = builder.handshake::<_, Bytes>(io);
    let mut conn = tokio::select! {
        conn = handshake => match conn {
            Ok(conn) => conn,
            Err(e) => {
                tracing::debug!("{NAME}: connection from {peer}: {e}");
                return;
            }
        },
        () = &mut stopping => return,
    };
    let mut calls = FuturesUnordered::new();
    let mut fresh = Vec::new();
    let mut shutting_down = false;
    let mut open = true;
    let served = poll_fn(|cx| {
        if !shutting_down && stopping.as_mut().poll(cx).is_ready() {
            conn.graceful_shutdown();
            shutting_down = true;
        }
        loop {
            // The connection first: it reads the frames that start calls
            // and writes what the calls answered since its last turn. Every
            // turn of it may write, so the calls it starts run after it.
            while open {
                match conn.poll_accept(cx) {
                    Poll::Ready(Some(Ok((req, respond)))) => {
                        fresh.push(Box::pin(server.clone().call(req, respond)));
                    }
                    Poll::Ready(Some(Err(e))) => {
                        tracing::debug!("{NAME}: connection from {peer}: {e}");
                        return Poll::Ready(());
                    }
                    Poll::Ready(None) => open = false,
                    Poll::Pending => break,
                }
            }
            // Then the calls: the new ones polled at once, and most end
            // there (the memory store never waits); only a call that has
            // to wait joins the set. An answer waits to be written.
            let mut answered = false;
            for mut call in fresh.drain(..) {
                if call.as_mut().poll(cx).is_ready() {
                    answered = true;
                } else {
                    calls.push(call);
                }
            }
            while let Poll::Ready(Some(())) = calls.poll_next_unpin(cx) {
                answered = true;
            }
            if !open {
                // Closed: what is left can no longer be answered.
                return Poll::Ready(());
            }
            if !answered {
                return Poll::Pending;
            }
        }
    });
    // Answering a call wakes the connection's task from inside its own
    // poll (to write the answer); `Inline` polls again at once instead of a
    // round trip through the scheduler.
    Inline::new(std::pin::pin!(served)).await;
}
