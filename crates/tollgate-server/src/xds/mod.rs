//! The xDS config source (docs/xds.md): with `[envoy.xds]`, the Envoy
//! limits come from an ADS server, state-of-the-world, as the reference's
//! `CONFIG_TYPE=GRPC_XDS_SOTW` takes them from Envoy Gateway. One task
//! (`spawn`) keeps a stream open, reconnecting after a jittered backoff
//! when it fails, and applies each response whole through the reload
//! path; the last good config serves across NACKs and disconnects.
//!
//! The folder: `stream.rs` (one stream: requests, ACK and NACK),
//! `apply.rs` (a response into the next generation of doors),
//! `backoff.rs` (the wait between connections), `preface.rs` (a deadline
//! on the server's first bytes), `tls.rs` (TLS and mTLS to the server).

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use hyper_util::client::legacy::connect::HttpConnector;
use tokio::sync::watch;
use tonic::transport::{Channel, Endpoint};

use crate::config::XdsSettings;
use crate::doors::{Generation, Shared};

mod apply;
mod backoff;
mod preface;
mod stream;
pub(crate) mod tls;

pub use stream::{NACK_WAIT_FIRST, NACK_WAIT_MAX};

use apply::Applier;
use backoff::Backoff;
use preface::Preface;
use stream::Progress;
use tls::Connector;

/// How long a connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a connection made may wait for the server's first bytes, its
/// HTTP/2 preface (`preface.rs`).
const PREFACE_TIMEOUT: Duration = Duration::from_secs(10);
/// HTTP/2 pings on the stream, so a server gone without a word (a node
/// lost) is noticed within minutes, not at the next TCP timeout. Not more
/// often: a grpc-go server (Envoy Gateway's) by default closes a
/// connection that pings more than once in 5 minutes ("too_many_pings").
const KEEPALIVE: Duration = Duration::from_secs(330);
/// How long a ping may go unanswered.
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// The endpoint of `server`. TLS is done by our connector, so the URI is
/// always `http://` (tonic refuses `https://` without its own TLS).
fn endpoint(server: &str) -> Result<Endpoint, String> {
    let rest = crate::config::xds_server_authority(server);
    let endpoint = Endpoint::from_shared(format!("http://{rest}"))
        .map_err(|e| format!("[envoy.xds] server {server:?}: {e}"))?;
    Ok(endpoint
        .connect_timeout(CONNECT_TIMEOUT)
        .http2_keep_alive_interval(KEEPALIVE)
        .keep_alive_timeout(KEEPALIVE_TIMEOUT)
        .keep_alive_while_idle(true))
}

/// Starts the xDS client: it applies every accepted response to `live`
/// until `stop`. The receiver returned turns true at the first config
/// applied.
///
/// # Errors
/// The server address or the TLS files are unusable.
pub(crate) fn spawn(
    settings: XdsSettings,
    live: Arc<ArcSwap<Generation>>,
    shared: Shared,
    mut stop: watch::Receiver<bool>,
) -> Result<watch::Receiver<bool>, String> {
    let tls = settings
        .tls
        .as_ref()
        .map(Connector::new)
        .transpose()
        .map_err(|e| format!("[envoy.xds.tls]: {e}"))?
        .map(|c| Preface::new(c, PREFACE_TIMEOUT));
    let plain = Preface::new(plain_connector(), PREFACE_TIMEOUT);
    let endpoint = endpoint(&settings.server)?;
    let applier = Applier { live, shared };
    let (first_tx, first_rx) = watch::channel(false);
    tokio::spawn(async move {
        let mut progress = Progress::default();
        let mut backoff = Backoff::new(settings.initial_backoff, settings.max_backoff);
        loop {
            let session = async {
                let channel: Result<Channel, _> = match &tls {
                    Some(c) => endpoint.connect_with_connector(c.clone()).await,
                    None => endpoint.connect_with_connector(plain.clone()).await,
                };
                match channel {
                    Ok(channel) => {
                        stream::run(
                            channel,
                            &settings,
                            &applier,
                            &mut progress,
                            &mut backoff,
                            &first_tx,
                        )
                        .await
                    }
                    Err(e) => format!("cannot connect: {}", error_chain(&e)),
                }
            };
            let why = tokio::select! {
                why = session => why,
                _ = stop.wait_for(|s| *s) => return,
            };
            let wait = backoff.next_wait();
            let serving = if progress.applied {
                format!("still serving version {:?}", progress.accepted)
            } else {
                "no config yet".to_owned()
            };
            tracing::warn!(
                "xDS: {}: {why}; {serving}; reconnecting in {wait:?}",
                settings.server
            );
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                _ = stop.wait_for(|s| *s) => return,
            }
        }
    });
    Ok(first_rx)
}

/// TCP to the server, as tonic's own connector makes it.
fn plain_connector() -> HttpConnector {
    let mut c = HttpConnector::new();
    c.set_nodelay(true);
    c.set_connect_timeout(Some(CONNECT_TIMEOUT));
    c
}

/// An error with its sources (tonic's own says only "transport error").
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}
