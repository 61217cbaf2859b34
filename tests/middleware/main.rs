//! The middleware: the tower layer in axum and tonic apps, its headers,
//! leases, settle, plans, key extractors, metrics, and the examples' apps.
//!
//! One test binary; the Redis fixtures are `tests/common`. Modules that need
//! a feature are compiled with it only.

#[path = "../common/mod.rs"]
mod common;

mod deny_cache_clock;
#[cfg(all(feature = "axum", feature = "serde"))]
mod examples;
mod key_extractors;
#[cfg(feature = "metrics")]
mod metrics;
mod middleware;
mod middleware_headers;
mod middleware_lease;
#[cfg(feature = "tonic")]
mod middleware_net;
mod middleware_net_redis;
#[cfg(feature = "axum")]
mod middleware_outcome;
mod middleware_plans;
mod middleware_redis;
mod middleware_settle;
