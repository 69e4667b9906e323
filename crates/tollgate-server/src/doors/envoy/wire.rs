//! `ShouldRateLimit` on the wire: the request decoded into messages of our
//! own whose string fields are bytes. The tonic service that decodes into
//! them is [`RateLimitServer`](super::grpc::RateLimitServer), in `grpc.rs`.
//!
//! The `envoy-types` messages declare keys and values `string`, and prost
//! refuses a `string` that is not UTF-8 while decoding, before the handler
//! runs: the whole call fails `INTERNAL`, which Envoy's default
//! `failure_mode_deny: false` turns into an admission with none of the
//! request's limits applied. Header values are not always UTF-8 and Envoy
//! copies them into descriptors, so one odd byte in a header would switch
//! every limit off. Proto3 `string` and `bytes` share a wire type, so these
//! messages read the same bytes with no check; the service then keys such
//! values losslessly ([`store_key`](super::limits::store_key)). Responses
//! are `envoy-types`' own.

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use envoy_types::pb::google::protobuf::UInt64Value;

/// `envoy.service.ratelimit.v3.RateLimitRequest`, strings as bytes.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct RateLimitRequest {
    /// The domain (from Envoy's config; must be UTF-8 to name one).
    #[prost(bytes = "vec", tag = "1")]
    pub domain: Vec<u8>,
    /// The descriptors, each decided on its own.
    #[prost(message, repeated, tag = "2")]
    pub descriptors: Vec<RateLimitDescriptor>,
    /// The cost of each descriptor without its own; 0 means 1.
    #[prost(uint32, tag = "3")]
    pub hits_addend: u32,
}

/// `envoy.extensions.common.ratelimit.v3.RateLimitDescriptor`, strings as
/// bytes.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct RateLimitDescriptor {
    /// The (key, value) entries, in order.
    #[prost(message, repeated, tag = "1")]
    pub entries: Vec<Entry>,
    /// A per-request limit override (not supported: logged, ignored).
    #[prost(message, optional, tag = "2")]
    pub limit: Option<RateLimitOverride>,
    /// The descriptor's own cost, when set.
    #[prost(message, optional, tag = "3")]
    pub hits_addend: Option<UInt64Value>,
    /// Give quota back instead of taking it (not supported: refused).
    #[prost(bool, tag = "4")]
    pub is_negative_hits: bool,
}

impl RateLimitDescriptor {
    /// Its entries as (key, value) byte pairs, as the limits are looked up
    /// and counted by.
    #[must_use]
    pub fn pairs(&self) -> Vec<(&[u8], &[u8])> {
        self.entries
            .iter()
            .map(|e| (e.key.as_slice(), e.value.as_slice()))
            .collect()
    }
}

/// One descriptor entry, key and value as the bytes Envoy sent.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct Entry {
    /// The key (from Envoy's config).
    #[prost(bytes = "vec", tag = "1")]
    pub key: Vec<u8>,
    /// The value (often a client's header value: any bytes).
    #[prost(bytes = "vec", tag = "2")]
    pub value: Vec<u8>,
}

impl From<envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest> for RateLimitRequest {
    /// The same request (no copy of the strings' bytes).
    fn from(r: envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest) -> Self {
        Self {
            domain: r.domain.into_bytes(),
            descriptors: r
                .descriptors
                .into_iter()
                .map(|d| RateLimitDescriptor {
                    entries: d
                        .entries
                        .into_iter()
                        .map(|e| Entry {
                            key: e.key.into_bytes(),
                            value: e.value.into_bytes(),
                        })
                        .collect(),
                    limit: d.limit,
                    hits_addend: d.hits_addend,
                    is_negative_hits: d.is_negative_hits,
                })
                .collect(),
            hits_addend: r.hits_addend,
        }
    }
}
