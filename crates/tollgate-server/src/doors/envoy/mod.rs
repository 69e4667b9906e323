//! The Envoy rate limit service (`--grpc`): envoyproxy/ratelimit YAML
//! configs loaded unchanged ([`limits`]), their descriptor limits enforced
//! as tollgate rules with the same store and semantics as every other rule.
//!
//! The folder: [`limits`] (the YAML files: reader, schema check, descriptor
//! trees, store keys), `plan.rs` (a request resolved descriptor by
//! descriptor), [`service`] (deciding a `ShouldRateLimit`), `statuses.rs`
//! (a descriptor's status in its answer),
//! [`wire`] (its request as bytes-valued messages), [`grpc`] (the tonic
//! service over them), [`deadline`] (the request body's time bound),
//! [`headers`] (the response headers of `[envoy] response_headers`),
//! [`detailed`] (metrics by runtime values), [`failure`] (a failed call
//! and its kind),
//! `metadata.rs` (the answer's dynamic metadata), [`unknown`] (requests
//! for a domain no config defines: logged once each, counted),
//! `reference.rs` (the reference service's series, `[metrics]
//! reference_names`).

pub mod deadline;
pub mod detailed;
pub mod failure;
pub mod grpc;
pub mod headers;
pub mod limits;
mod metadata;
mod plan;
mod reference;
pub mod service;
mod statuses;
pub mod unknown;
pub mod wire;
