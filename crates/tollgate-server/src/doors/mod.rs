//! The doors `tollgate serve` opens, each in its own folder: [`api`] (the
//! HTTP JSON API), [`proxy`] (the reverse proxy), [`envoy`] (the Envoy
//! rate limit service) and [`admin`] (the admin API). [`json`] is what
//! the two JSON doors (API and admin) share: the body reader and the
//! answers. `generation.rs` builds one config's doors over the gate.

pub mod admin;
pub mod api;
pub mod envoy;
pub(crate) mod generation;
pub mod json;
pub mod proxy;
