//! The snapshot cache and the state-of-the-world rules, without I/O: what
//! go-control-plane's `SnapshotCache` (ads = false, keyed by node id) and
//! its SotW server's `process` loop do with each request and each new
//! snapshot, for the one resource type a rate limit service asks for.
//!
//! * A snapshot is one version and a set of resources by name.
//! * A request with no `type_url` ends the stream (`InvalidArgument`).
//! * Once a response is out, a request whose `response_nonce` is not that
//!   response's nonce is ignored; an accepted request replaces the
//!   stream's watch with one at its `version_info`.
//! * A watch is answered at once when the node has a snapshot whose
//!   version differs from the watch's (all resources), or when versions
//!   are equal and the stream has not been sent some resource yet;
//!   otherwise it waits for a snapshot with another version.
//! * A response carries the snapshot's version, every resource as an
//!   `Any`, the request's type URL and the stream's next nonce (`"1"`,
//!   `"2"`, … per stream); it consumes the watch.
//!
//! So an ACK (the version just sent) waits; a NACK (the older accepted
//! version) is answered at once with the same snapshot and a new nonce,
//! the resend loop go-control-plane has (its issues #962, #794).

use std::collections::{BTreeMap, HashMap, HashSet};

use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use envoy_types::pb::google::protobuf::Any;
use tonic::Status;

/// One node's snapshot: a version and the resources by name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    /// The version sent as `version_info`.
    pub version: String,
    /// The resources, by name; a name given twice keeps the last.
    pub resources: BTreeMap<String, Any>,
}

/// What the server does after a request or a new snapshot.
#[derive(Debug)]
pub(crate) enum Action {
    /// Nothing to send (the watch waits, or the request was ignored).
    Wait,
    /// The request was ignored (a stale nonce).
    Ignored,
    /// Send this response.
    Send(DiscoveryResponse),
    /// End the stream with this status.
    End(Status),
}

impl PartialEq for Action {
    /// Statuses compare by code and message (`Status` has no `==`).
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Action::Wait, Action::Wait) | (Action::Ignored, Action::Ignored) => true,
            (Action::Send(a), Action::Send(b)) => a == b,
            (Action::End(a), Action::End(b)) => a.code() == b.code() && a.message() == b.message(),
            _ => false,
        }
    }
}

/// One stream's state.
#[derive(Debug, Default)]
struct Stream {
    /// The node id of the first request that had one.
    node: Option<String>,
    /// Responses sent so far (the last nonce's number).
    sent: u64,
    /// The nonce of the last response, until a request re-arms the watch.
    pending_nonce: Option<String>,
    /// The open watch: the version and type URL requested.
    watch: Option<(String, String)>,
    /// The resource names sent on this stream.
    names: HashSet<String>,
}

/// The snapshots and every open stream's state.
#[derive(Debug, Default)]
pub(crate) struct Cache {
    snapshots: HashMap<String, Snapshot>,
    streams: HashMap<u64, Stream>,
}

impl Cache {
    /// A new stream.
    pub(crate) fn open(&mut self, id: u64) {
        self.streams.insert(id, Stream::default());
    }

    /// A stream gone.
    pub(crate) fn close(&mut self, id: u64) {
        self.streams.remove(&id);
    }

    /// The node's snapshot now.
    pub(crate) fn snapshot(&self, node: &str) -> Option<&Snapshot> {
        self.snapshots.get(node)
    }

    /// Handles one request of stream `id`.
    pub(crate) fn request(&mut self, id: u64, request: &DiscoveryRequest) -> Action {
        let Some(stream) = self.streams.get_mut(&id) else {
            return Action::Wait;
        };
        if request.type_url.is_empty() {
            return Action::End(Status::invalid_argument("type URL is required for ADS"));
        }
        if stream.node.is_none() {
            stream.node = request.node.as_ref().map(|n| n.id.clone());
        }
        if stream
            .pending_nonce
            .as_ref()
            .is_some_and(|nonce| *nonce != request.response_nonce)
        {
            return Action::Ignored;
        }
        stream.pending_nonce = None;
        stream.watch = Some((request.version_info.clone(), request.type_url.clone()));
        Self::respond(&self.snapshots, stream)
    }

    /// Sets `node`'s snapshot; returns what to send on each stream whose
    /// watch it answers.
    pub(crate) fn set(&mut self, node: &str, snapshot: Snapshot) -> Vec<(u64, DiscoveryResponse)> {
        self.snapshots.insert(node.to_owned(), snapshot);
        let mut out = Vec::new();
        for (id, stream) in &mut self.streams {
            if stream.node.as_deref() != Some(node) {
                continue;
            }
            if let Action::Send(response) = Self::respond(&self.snapshots, stream) {
                out.push((*id, response));
            }
        }
        out.sort_by_key(|(id, _)| *id);
        out
    }

    /// Answers the stream's watch if the rules say so.
    fn respond(snapshots: &HashMap<String, Snapshot>, stream: &mut Stream) -> Action {
        let Some((version, type_url)) = &stream.watch else {
            return Action::Wait;
        };
        let Some(snapshot) = stream.node.as_ref().and_then(|n| snapshots.get(n)) else {
            return Action::Wait;
        };
        let unsent = snapshot
            .resources
            .keys()
            .any(|name| !stream.names.contains(name));
        if snapshot.version == *version && !unsent {
            return Action::Wait;
        }
        stream.sent += 1;
        let nonce = stream.sent.to_string();
        stream.pending_nonce = Some(nonce.clone());
        stream.names.extend(snapshot.resources.keys().cloned());
        let response = DiscoveryResponse {
            version_info: snapshot.version.clone(),
            resources: snapshot.resources.values().cloned().collect(),
            type_url: type_url.clone(),
            nonce,
            ..DiscoveryResponse::default()
        };
        stream.watch = None;
        Action::Send(response)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::config::core::v3::Node;
    use envoy_types::pb::google::rpc::Status as RpcStatus;

    const TYPE: &str = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig";

    fn request(version: &str, nonce: &str) -> DiscoveryRequest {
        DiscoveryRequest {
            version_info: version.into(),
            node: Some(Node {
                id: "n".into(),
                ..Node::default()
            }),
            type_url: TYPE.into(),
            response_nonce: nonce.into(),
            ..DiscoveryRequest::default()
        }
    }

    fn snapshot(version: &str, names: &[&str]) -> Snapshot {
        Snapshot {
            version: version.into(),
            resources: names
                .iter()
                .map(|n| {
                    let any = Any {
                        type_url: TYPE.into(),
                        value: n.as_bytes().to_vec(),
                    };
                    ((*n).to_owned(), any)
                })
                .collect(),
        }
    }

    fn sent(action: Action) -> DiscoveryResponse {
        match action {
            Action::Send(r) => r,
            other => panic!("expected a response, got {other:?}"),
        }
    }

    #[test]
    fn a_first_request_waits_for_a_snapshot_then_gets_the_whole_set() {
        let mut cache = Cache::default();
        cache.open(1);
        assert_eq!(cache.request(1, &request("", "")), Action::Wait);
        let out = cache.set("other-node", snapshot("1", &["a"]));
        assert!(out.is_empty());
        let out = cache.set("n", snapshot("1", &["a", "b"]));
        assert_eq!(out.len(), 1);
        let (id, r) = &out[0];
        assert_eq!(
            (*id, r.version_info.as_str(), r.nonce.as_str()),
            (1, "1", "1")
        );
        assert_eq!(r.resources.len(), 2);
        assert_eq!(r.type_url, TYPE);
    }

    #[test]
    fn an_ack_waits_and_a_new_version_is_sent_with_the_next_nonce() {
        let mut cache = Cache::default();
        cache.set("n", snapshot("1", &["a"]));
        cache.open(1);
        let r = sent(cache.request(1, &request("", "")));
        assert_eq!((r.version_info.as_str(), r.nonce.as_str()), ("1", "1"));
        assert_eq!(cache.request(1, &request("1", "1")), Action::Wait);
        // The same version again wakes nobody.
        assert!(cache.set("n", snapshot("1", &["a"])).is_empty());
        let out = cache.set("n", snapshot("2", &["b"]));
        let r = &out[0].1;
        assert_eq!((r.version_info.as_str(), r.nonce.as_str()), ("2", "2"));
        // Whole set: only b.
        assert_eq!(r.resources.len(), 1);
    }

    #[test]
    fn a_nack_gets_the_same_snapshot_again_at_once_with_a_new_nonce() {
        let mut cache = Cache::default();
        cache.set("n", snapshot("1", &["a"]));
        cache.open(1);
        sent(cache.request(1, &request("", "")));
        assert_eq!(cache.request(1, &request("1", "1")), Action::Wait);
        cache.set("n", snapshot("2", &["bad"]));
        let mut nack = request("1", "2");
        nack.error_detail = Some(RpcStatus {
            message: "no".into(),
            ..RpcStatus::default()
        });
        let r = sent(cache.request(1, &nack));
        assert_eq!((r.version_info.as_str(), r.nonce.as_str()), ("2", "3"));
        let mut again = nack.clone();
        again.response_nonce = "3".into();
        let r = sent(cache.request(1, &again));
        assert_eq!(r.nonce, "4");
    }

    #[test]
    fn a_stale_nonce_is_ignored_until_the_watch_is_rearmed() {
        let mut cache = Cache::default();
        cache.set("n", snapshot("1", &["a"]));
        cache.open(1);
        sent(cache.request(1, &request("", "")));
        assert_eq!(cache.request(1, &request("", "old")), Action::Ignored);
        assert_eq!(cache.request(1, &request("1", "1")), Action::Wait);
        // Re-armed: the stored nonce is empty until the next send.
        assert_eq!(cache.request(1, &request("1", "whatever")), Action::Wait);
    }

    #[test]
    fn a_new_stream_gets_everything_even_at_the_same_version() {
        let mut cache = Cache::default();
        cache.set("n", snapshot("7", &["a"]));
        cache.open(1);
        let r = sent(cache.request(1, &request("7", "5")));
        assert_eq!((r.version_info.as_str(), r.nonce.as_str()), ("7", "1"));
        cache.close(1);
        cache.open(2);
        let r = sent(cache.request(2, &request("7", "1")));
        assert_eq!(r.nonce, "1", "nonces are per stream");
    }

    #[test]
    fn no_type_url_ends_the_stream() {
        let mut cache = Cache::default();
        cache.open(1);
        let mut r = request("", "");
        r.type_url.clear();
        let Action::End(status) = cache.request(1, &r) else {
            panic!("not ended");
        };
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
    }

    #[test]
    fn an_empty_snapshot_is_a_response_with_no_resources() {
        let mut cache = Cache::default();
        cache.set("n", snapshot("1", &["a"]));
        cache.open(1);
        sent(cache.request(1, &request("", "")));
        cache.request(1, &request("1", "1"));
        let out = cache.set("n", snapshot("", &[]));
        let r = &out[0].1;
        assert_eq!(r.version_info, "");
        assert!(r.resources.is_empty());
    }
}
