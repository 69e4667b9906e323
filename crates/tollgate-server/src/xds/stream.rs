//! One ADS stream, as the reference's client (go-control-plane's SotW
//! client) speaks it: every request carries the node (id and metadata)
//! and the `RateLimitConfig` type URL, no resource names (all of them);
//! the first asks with the last accepted version and no nonce; each
//! response is applied whole and answered with an ACK (its version and
//! nonce) or a NACK (the last accepted version, its nonce, and an
//! `error_detail` whose message names the domain and descriptor).
//!
//! An ADS server like go-control-plane answers a NACK at once with the
//! same snapshot, for as long as it does not change. The same rejected
//! response (version and bytes) is not loaded again: it is NACKed after a
//! wait that doubles from [`NACK_WAIT_FIRST`] to [`NACK_WAIT_MAX`], and
//! logged once, so the loop costs next to nothing; a new snapshot is
//! picked up at the next NACK at the latest.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use envoy_types::pb::google::protobuf::{Struct, Value, value::Kind};
use envoy_types::pb::google::rpc::Status as RpcStatus;
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::transport::Channel;

use super::apply::Applier;
use super::backoff::Backoff;
use crate::config::XdsSettings;
use crate::rls_conf::TYPE_URL;

/// The first wait before NACKing a response already rejected.
pub const NACK_WAIT_FIRST: Duration = Duration::from_millis(250);
/// The longest such wait.
pub const NACK_WAIT_MAX: Duration = Duration::from_secs(5);

/// What outlives a stream: the version accepted last.
#[derive(Debug, Default)]
pub(crate) struct Progress {
    /// The `version_info` of the last response applied.
    pub(crate) accepted: String,
    /// Whether a response was ever applied.
    pub(crate) applied: bool,
}

/// The node, as every request carries it.
pub(crate) fn node(settings: &XdsSettings) -> Node {
    let fields = settings
        .node_metadata
        .iter()
        .map(|(k, v)| {
            let value = Value {
                kind: Some(Kind::StringValue(v.clone())),
            };
            (k.clone(), value)
        })
        .collect();
    Node {
        id: settings.node_id.clone(),
        metadata: (!settings.node_metadata.is_empty()).then_some(Struct { fields }),
        ..Node::default()
    }
}

/// A request of this client.
fn request(node: &Node, version: &str, nonce: &str, error: Option<String>) -> DiscoveryRequest {
    DiscoveryRequest {
        version_info: version.to_owned(),
        node: Some(node.clone()),
        type_url: TYPE_URL.to_owned(),
        response_nonce: nonce.to_owned(),
        error_detail: error.map(|message| RpcStatus {
            message,
            ..RpcStatus::default()
        }),
        ..DiscoveryRequest::default()
    }
}

/// A response's identity for the rejected-loop check: its version and a
/// hash of its resources.
fn identity(response: &DiscoveryResponse) -> (String, u64) {
    let mut h = DefaultHasher::new();
    for r in &response.resources {
        r.type_url.hash(&mut h);
        r.value.hash(&mut h);
    }
    (response.version_info.clone(), h.finish())
}

/// Runs one stream on `channel` until it fails; applies what it receives.
/// Returns why it ended.
pub(crate) async fn run(
    channel: Channel,
    settings: &XdsSettings,
    applier: &Applier,
    progress: &mut Progress,
    backoff: &mut Backoff,
    first: &tokio::sync::watch::Sender<bool>,
) -> String {
    let node = node(settings);
    let mut client = AggregatedDiscoveryServiceClient::new(channel)
        .max_decoding_message_size(settings.max_message_bytes);
    let (tx, rx) = mpsc::unbounded_channel();
    // Sent before the call: the server may wait for it to answer.
    let _ = tx.send(request(&node, &progress.accepted, "", None));
    let mut responses = match client
        .stream_aggregated_resources(UnboundedReceiverStream::new(rx))
        .await
    {
        Ok(r) => r.into_inner(),
        Err(status) => return format!("the stream did not open: {status}"),
    };
    tracing::info!(
        "xDS: subscribed to {} as node {:?}",
        settings.server,
        settings.node_id
    );
    let mut rejected: Option<((String, u64), String, Duration)> = None;
    loop {
        let response = match responses.message().await {
            Ok(Some(r)) => r,
            Ok(None) => return "the server ended the stream".to_owned(),
            Err(status) => return format!("{status}"),
        };
        let nonce = response.nonce.clone();
        let seen = identity(&response);
        let answer = match &mut rejected {
            // The same rejected response again: NACK it again, slower.
            Some((id, message, wait)) if *id == seen => {
                tokio::time::sleep(*wait).await;
                *wait = (*wait * 2).min(NACK_WAIT_MAX);
                tracing::debug!("xDS: version {:?} sent again; NACKed again", seen.0);
                request(&node, &progress.accepted, &nonce, Some(message.clone()))
            }
            _ => match applier.apply(response).await {
                Ok(()) => {
                    rejected = None;
                    seen.0.clone_into(&mut progress.accepted);
                    progress.applied = true;
                    backoff.reset();
                    first.send_replace(true);
                    request(&node, &progress.accepted, &nonce, None)
                }
                Err(message) => {
                    rejected = Some((seen, message.clone(), NACK_WAIT_FIRST));
                    request(&node, &progress.accepted, &nonce, Some(message))
                }
            },
        };
        if tx.send(answer).is_err() {
            return "the request stream closed".to_owned();
        }
    }
}
