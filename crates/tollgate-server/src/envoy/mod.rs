//! The Envoy rate limit service (`--grpc`): envoyproxy/ratelimit YAML
//! configs loaded unchanged ([`limits`]), their descriptor limits enforced
//! as tollgate rules with the same store and semantics as every other rule.

pub mod deadline;
pub mod grpc;
pub mod limits;
pub mod service;
pub mod wire;
