//! The doors `tollgate serve` opens, each in its own folder: [`api`] (the
//! HTTP JSON API), [`proxy`] (the reverse proxy), [`envoy`] (the Envoy
//! rate limit service) and [`admin`] (the admin API); beside them the ops
//! listener, [`ops`] (health, readiness, metrics: not a [`Door`], it
//! decides nothing), whose probes the HTTP API answers with too. [`json`]
//! is what the JSON doors (API, admin, ops) share: the body reader and
//! the answers.
//!
//! This file is the one list of them: [`Door`] names each door and says
//! what it needs, [`ByDoor`] holds one value per door (an address, a
//! listener), [`Plan`] is what `serve` serves where. `generation.rs`
//! builds one config's doors over the gate (`Generation`); `server`
//! spawns one task per door, and a reload swaps the generation.

use std::net::SocketAddr;
use std::sync::Arc;

use crate::config::Config;

pub mod admin;
pub mod api;
pub mod envoy;
mod generation;
pub mod json;
pub mod ops;
pub mod proxy;
pub mod rlqs;

pub(crate) use generation::{Generation, Shared};

/// A door: one listener, one kind of traffic. Adding one adds a variant
/// here, in [`Door::ALL`], and an arm to each `match` below (the compiler
/// lists them), a folder beside the others, a field in `Generation`
/// when it is rebuilt per config, and its spawn in `server/doors.rs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Door {
    /// The admin API (`--admin`, `[admin] listen`; docs/admin.md): not a
    /// front door, never served alone.
    Admin,
    /// The HTTP API (`--http`, `[http] listen`; docs/http-api.md), with
    /// `/metrics` and health.
    Api,
    /// The reverse proxy (`--proxy`, `[proxy] listen`; docs/proxy.md).
    Proxy,
    /// The Envoy rate limit service (`--grpc`; docs/envoy.md), over the
    /// limits of the `--envoy-config` files.
    Envoy,
}

impl Door {
    /// Every door, in the order `serve` opens them: the admin API first,
    /// so its address is in the log before the front doors' (which tests
    /// and scripts wait for).
    pub const ALL: [Door; 4] = [Door::Admin, Door::Api, Door::Proxy, Door::Envoy];

    /// Its place in a [`ByDoor`] (its place in [`Door::ALL`]).
    const fn index(self) -> usize {
        self as usize
    }

    /// Its command-line flag, without `--`: it names the door's address.
    #[must_use]
    pub const fn flag(self) -> &'static str {
        match self {
            Door::Admin => "admin",
            Door::Api => "http",
            Door::Proxy => "proxy",
            Door::Envoy => "grpc",
        }
    }

    /// What logs and errors call it.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Door::Admin => "admin API",
            Door::Api => "HTTP API",
            Door::Proxy => "reverse proxy",
            Door::Envoy => "Envoy rate limit service",
        }
    }

    /// What a reload that would move it says it moved.
    #[must_use]
    pub const fn address(self) -> &'static str {
        match self {
            Door::Admin => "the admin API's address",
            Door::Api => "the HTTP API's address",
            Door::Proxy => "the reverse proxy's address",
            Door::Envoy => "the gRPC address",
        }
    }

    /// Whether it decides checks. The admin API does not: a server needs
    /// a front door to serve at all.
    #[must_use]
    pub const fn is_front(self) -> bool {
        !matches!(self, Door::Admin)
    }

    /// Its address as the config file names it, if the file can (the
    /// Envoy service is named by `--grpc` alone).
    #[must_use]
    pub fn listen_in(self, config: &Config) -> Option<SocketAddr> {
        match self {
            Door::Admin => config.admin.listen,
            Door::Api => config.http.listen,
            Door::Proxy => config.proxy.listen,
            Door::Envoy => None,
        }
    }

    /// What the door needs of `config` to be served; `serve`, a reload and
    /// `validate` all ask here.
    ///
    /// # Errors
    /// What is missing (a proxy without an upstream).
    pub fn ready_in(self, config: &Config) -> Result<(), String> {
        match self {
            Door::Proxy => proxy::upstream_of(config).map(drop),
            Door::Admin | Door::Api | Door::Envoy => Ok(()),
        }
    }
}

/// Whether the doors `served` can be served with `config`: at least one
/// front door, each ready ([`Door::ready_in`]).
///
/// # Errors
/// Nothing to serve, or what a door misses.
pub fn check<T>(config: &Config, served: &ByDoor<T>) -> Result<(), String> {
    if !served.doors().any(Door::is_front) {
        return Err("nothing to serve: no HTTP API, proxy or gRPC listener".to_owned());
    }
    served.doors().try_for_each(|door| door.ready_in(config))
}

/// One `T` per door, for the doors that have one: where each listens, or
/// its bound listener ([`crate::server::Listeners`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ByDoor<T>([Option<T>; Door::ALL.len()]);

impl<T> Default for ByDoor<T> {
    fn default() -> Self {
        Self(std::array::from_fn(|_| None))
    }
}

impl<T> ByDoor<T> {
    /// `self` with `value` for `door`.
    #[must_use]
    pub fn with(mut self, door: Door, value: T) -> Self {
        self.set(door, Some(value));
        self
    }

    /// Sets (or, with `None`, clears) `door`'s value.
    pub fn set(&mut self, door: Door, value: Option<T>) {
        self.0[door.index()] = value;
    }

    /// `door`'s value.
    #[must_use]
    pub fn get(&self, door: Door) -> Option<&T> {
        self.0[door.index()].as_ref()
    }

    /// The doors with a value, in [`Door::ALL`] order.
    pub fn doors(&self) -> impl Iterator<Item = Door> + '_ {
        Door::ALL.into_iter().filter(|d| self.get(*d).is_some())
    }

    /// Each door's value by reference, in [`Door::ALL`] order.
    pub fn iter(&self) -> impl Iterator<Item = (Door, &T)> {
        Door::ALL
            .into_iter()
            .zip(&self.0)
            .filter_map(|(d, v)| Some((d, v.as_ref()?)))
    }

    /// Each door's value, taken out, in [`Door::ALL`] order.
    pub fn into_values(self) -> impl Iterator<Item = (Door, T)> {
        Door::ALL
            .into_iter()
            .zip(self.0)
            .filter_map(|(d, v)| Some((d, v?)))
    }

    /// Each door's value, `f` applied.
    #[must_use]
    pub fn map<U>(&self, mut f: impl FnMut(Door, &T) -> U) -> ByDoor<U> {
        let mut out = ByDoor::default();
        for (door, value) in self.iter() {
            out.set(door, Some(f(door, value)));
        }
        out
    }
}

/// What `serve` serves: the config with the flags applied, the Envoy
/// door's limits (its own YAML files, not the TOML config's), and where
/// each door listens. `serve` binds it at start; a reload loads a new one
/// and keeps the addresses (docs/operations.md).
#[derive(Debug, Clone)]
pub struct Plan {
    /// The config, flags applied (`store.url`, `proxy.upstream`).
    pub config: Config,
    /// The limits of the `--envoy-config` files (none without them);
    /// under `[envoy.xds]`, the last xDS config's (docs/xds.md).
    pub envoy: Arc<envoy::limits::EnvoyLimits>,
    /// Each served door's address.
    pub listen: ByDoor<SocketAddr>,
    /// The ops listener's address (`--ops`, `[ops] listen`), when served:
    /// not a [`Door`], since it decides nothing and serves whatever doors
    /// do (docs/operations.md, "Probes").
    pub ops: Option<SocketAddr>,
}

impl Plan {
    /// `door`'s address, when it is served.
    #[must_use]
    pub fn at(&self, door: Door) -> Option<SocketAddr> {
        self.listen.get(door).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_door_has_its_own_slot_in_the_order_served() {
        // `index` is the declaration order; `ALL` must list the doors in it.
        for (i, door) in Door::ALL.into_iter().enumerate() {
            assert_eq!(door.index(), i, "{door:?}");
        }
        let all = Door::ALL
            .into_iter()
            .fold(ByDoor::default(), |by, door| by.with(door, door.flag()));
        let flags: Vec<_> = all.iter().map(|(door, flag)| (door, *flag)).collect();
        assert_eq!(
            flags,
            [
                (Door::Admin, "admin"),
                (Door::Api, "http"),
                (Door::Proxy, "proxy"),
                (Door::Envoy, "grpc"),
            ]
        );
    }

    #[test]
    fn a_server_needs_a_front_door_and_a_proxy_an_upstream() {
        let config = Config::without_rules();
        let admin_only = ByDoor::default().with(Door::Admin, ());
        let err = check(&config, &admin_only).expect_err("admin alone");
        assert!(err.contains("nothing to serve"), "{err}");
        let proxy = ByDoor::default().with(Door::Proxy, ());
        let err = check(&config, &proxy).expect_err("no upstream");
        assert!(err.contains("needs an upstream"), "{err}");
        assert!(check(&config, &ByDoor::default().with(Door::Envoy, ())).is_ok());
    }
}
