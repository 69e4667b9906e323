//! What the integration tests share, defined once.

#[cfg(feature = "redis")]
pub(crate) mod fleet;
#[cfg(feature = "redis")]
pub(crate) mod redis;
#[cfg(feature = "redis")]
pub(crate) mod relay;
